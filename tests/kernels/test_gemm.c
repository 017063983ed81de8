/* test_gemm.c — matmul and fully_connected: forward values against naive double-precision
 * loops written here (broadcast batch dims, transposes, flatten modes, no_bias, products of
 * one row or column, which k_sgemm runs as sgemv), and finite-difference gradient checks
 * (kWriteTo and kAddTo) through the shared harness. */
#include "kt_harness.h"
#include "k_blas.h"
#include "k_epilogue.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- matmul ---------------------------------------------------------------------------- */

/* Index of output batch position ob (unravelled over ob_d) inside operand t's batch dims. */
static int64_t ref_batch_index(const k_shape *t, const int64_t *pos, int nb) {
  int tnb = t->rank - 2;
  int64_t idx = 0;
  for (int i = 0; i < tnb; i++) {
    int64_t p = pos[i + (nb - tnb)];
    idx = idx * t->d[i] + (t->d[i] == 1 ? 0 : p);
  }
  return idx;
}

static void ref_matmul(const k_tensor *a, const k_tensor *b, const k_shape *o, int ta, int tb,
                       float *out) {
  int nb = o->rank - 2;
  int64_t M = o->d[nb], N = o->d[nb + 1], K = ta ? a->shape.d[a->shape.rank - 2] : a->shape.d[a->shape.rank - 1];
  int64_t batch = 1, pos[K_MAX_RANK];
  for (int i = 0; i < nb; i++) batch *= o->d[i];
  for (int64_t bi = 0; bi < batch; bi++) {
    for (int64_t r = bi, i = nb - 1; i >= 0; i--) { pos[i] = r % o->d[i]; r /= o->d[i]; }
    const float *A = (const float *)a->data + ref_batch_index(&a->shape, pos, nb) * M * K;
    const float *B = (const float *)b->data + ref_batch_index(&b->shape, pos, nb) * K * N;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++)
          s += (double)(ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[n * K + k] : B[k * N + n]);
        out[(bi * M + m) * N + n] = (float)s;
      }
  }
}

static void check_matmul_ng(const char *name, k_shape as, k_shape bs, k_shape os, int ta, int tb,
                            uint32_t no_grad) {
  k_matmul_param p = {.transpose_a = ta, .transpose_b = tb};
  kt_case c = {0};
  c.name = name; c.fwd = k_matmul_forward; c.bwd = k_matmul_backward;
  c.nargs = 2; c.nout = 1; c.nvisible = 1;
  c.in[0] = kt_tensor_f32(as, -1, 1, 1);
  c.in[1] = kt_tensor_f32(bs, -1, 1, 2);
  c.out_shape[0] = os;
  c.param = &p;
  c.deps_og = 1; c.deps_in = 3;
  c.no_grad = no_grad;
  k_tensor out[KT_MAX_IO];
  int rc = kt_forward(&c, out);
  KT_CHECK(rc == 0, "%s forward rc", name);
  float *want = malloc((size_t)k_shape_numel(&os) * sizeof(float));
  ref_matmul(&c.in[0], &c.in[1], &os, ta, tb, want);
  KT_CHECK(kt_expect_close(name, out[0].data, want, k_shape_numel(&os), 1e-5f, 1e-5f) == 0,
           "%s forward values", name);
  free(want);
  kt_tensor_free(&out[0]);
  kt_gradcheck(&c);
  kt_tensor_free(&c.in[0]);
  kt_tensor_free(&c.in[1]);
}

static void check_matmul(const char *name, k_shape as, k_shape bs, k_shape os, int ta, int tb) {
  check_matmul_ng(name, as, bs, os, ta, tb, 0);
}

/* One row or one column of the product: k_sgemm runs those (and the gradients' matrix-vector
 * products) as sgemv, with each transpose reading its vector at its own stride. */
static void test_matmul_vector(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      char name[64];
      snprintf(name, sizeof name, "matmul 1 row ta=%d tb=%d", ta, tb);
      check_matmul(name, ta ? kt_shape(2, 6, 1) : kt_shape(2, 1, 6), tb ? kt_shape(2, 5, 6) : kt_shape(2, 6, 5),
                   kt_shape(2, 1, 5), ta, tb);
      snprintf(name, sizeof name, "matmul 1 column ta=%d tb=%d", ta, tb);
      check_matmul(name, ta ? kt_shape(2, 6, 4) : kt_shape(2, 4, 6), tb ? kt_shape(2, 1, 6) : kt_shape(2, 6, 1),
                   kt_shape(2, 4, 1), ta, tb);
      snprintf(name, sizeof name, "matmul batched 1 row ta=%d tb=%d", ta, tb);
      check_matmul(name, ta ? kt_shape(3, 3, 6, 1) : kt_shape(3, 3, 1, 6), tb ? kt_shape(3, 3, 5, 6) : kt_shape(3, 3, 6, 5),
                   kt_shape(3, 3, 1, 5), ta, tb);
    }
}

/* k_sgemm itself on a vector-shaped product cut out of larger matrices (leading dimensions
 * past the used width, so a transposed vector is read at a stride), C starting as NaN for
 * beta 0 and as values for beta 1. */
static void check_sgemm_vector(int64_t M, int64_t N, int ta, int tb, float beta) {
  enum { K = 6, PAD = 3 };
  int64_t lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
  float A[64 * 16], B[64 * 16], C[64 * 16], want[64];
  for (int i = 0; i < 64 * 16; i++) A[i] = (float)((i * 37) % 17) / 8 - 1, B[i] = (float)((i * 11) % 13) / 6 - 1, C[i] = NAN;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double acc = 0;
      if (beta != 0.0f) C[m * ldc + n] = (float)(m + n);
      for (int64_t k = 0; k < K; k++) acc += (double)(ta ? A[k * lda + m] : A[m * lda + k]) * (tb ? B[n * ldb + k] : B[k * ldb + n]);
      want[m * N + n] = (float)(acc + (beta != 0.0f ? (double)(m + n) : 0.0));
    }
  k_sgemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  float got[64];
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) got[m * N + n] = C[m * ldc + n];
  KT_CHECK(kt_expect_close("k_sgemm vector", got, want, M * N, 1e-5f, 1e-5f) == 0,
           "k_sgemm %lldx%lld ta=%d tb=%d beta=%g", (long long)M, (long long)N, ta, tb, (double)beta);
}

static void test_sgemm_vector(void) {
  for (int t = 0; t < 8; t++) {
    check_sgemm_vector(1, 5, t & 1, t >> 1 & 1, t >> 2 ? 1.0f : 0.0f);
    check_sgemm_vector(4, 1, t & 1, t >> 1 & 1, t >> 2 ? 1.0f : 0.0f);
  }
}

static void test_matmul(void) {
  /* only one operand wants a gradient (the other's req is kNullOp), folded and looped paths */
  check_matmul_ng("matmul no grad a (folded)", kt_shape(3, 2, 3, 4), kt_shape(2, 4, 5),
                  kt_shape(3, 2, 3, 5), 0, 0, 1);
  check_matmul_ng("matmul no grad b (broadcast)", kt_shape(4, 2, 1, 3, 4), kt_shape(3, 3, 4, 5),
                  kt_shape(4, 2, 3, 3, 5), 0, 0, 2);
  check_matmul("matmul 2d", kt_shape(2, 3, 4), kt_shape(2, 4, 5), kt_shape(2, 3, 5), 0, 0);
  check_matmul("matmul 2d ta", kt_shape(2, 4, 3), kt_shape(2, 4, 5), kt_shape(2, 3, 5), 1, 0);
  check_matmul("matmul 2d tb", kt_shape(2, 3, 4), kt_shape(2, 5, 4), kt_shape(2, 3, 5), 0, 1);
  check_matmul("matmul 2d ta tb", kt_shape(2, 4, 3), kt_shape(2, 5, 4), kt_shape(2, 3, 5), 1, 1);
  check_matmul("matmul batch x matrix (folded)", kt_shape(3, 2, 3, 4), kt_shape(2, 4, 5),
               kt_shape(3, 2, 3, 5), 0, 0);
  check_matmul("matmul batch x matrix tb", kt_shape(3, 2, 3, 4), kt_shape(2, 5, 4),
               kt_shape(3, 2, 3, 5), 0, 1);
  check_matmul("matmul matrix x batch", kt_shape(2, 3, 4), kt_shape(3, 2, 4, 5),
               kt_shape(3, 2, 3, 5), 0, 0);
  check_matmul("matmul broadcast both", kt_shape(4, 2, 1, 3, 4), kt_shape(3, 3, 4, 5),
               kt_shape(4, 2, 3, 3, 5), 0, 0);
  check_matmul("matmul broadcast 5d", kt_shape(5, 4, 2, 1, 3, 4), kt_shape(4, 1, 3, 4, 5),
               kt_shape(5, 4, 2, 3, 3, 5), 0, 0);
  check_matmul("matmul broadcast ta tb", kt_shape(5, 4, 2, 1, 4, 3), kt_shape(3, 3, 5, 4),
               kt_shape(5, 4, 2, 3, 3, 5), 1, 1);
  check_matmul("matmul batched same", kt_shape(3, 2, 3, 4), kt_shape(3, 2, 4, 5),
               kt_shape(3, 2, 3, 5), 0, 0);
  check_matmul("matmul batched ta", kt_shape(3, 2, 4, 3), kt_shape(3, 2, 4, 5),
               kt_shape(3, 2, 3, 5), 1, 0);
  test_matmul_vector();
}

/* ---- matmul on operands stored swapped (the attention's head split read in place) ---- */

/* t's data with axes rank-3 and rank-2 exchanged (shape: t's, which becomes the other one). */
static float *swap_axes(const float *x, const k_shape *s) {
  int r = s->rank;
  int64_t outer = 1, A = s->d[r - 3], B = s->d[r - 2], C = s->d[r - 1];
  for (int i = 0; i < r - 3; i++) outer *= s->d[i];
  float *y = malloc((size_t)k_shape_numel(s) * sizeof(float) + 4);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t a = 0; a < A; a++)
      for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) y[((o * B + b) * A + a) * C + c] = x[((o * A + a) * B + b) * C + c];
  return y;
}

static k_shape swapped_shape(k_shape s) {
  int64_t t = s.d[s.rank - 3];
  s.d[s.rank - 3] = s.d[s.rank - 2], s.d[s.rank - 2] = t;
  return s;
}

/* The matmul of in with an epilogue of a bias add over the last axis (bias - y, the running
 * value second) and a tanh, against the unfused ops over `plain` (the matmul's output as stored,
 * shape ss): the same bits, with and without the shared packing, at 1 and 2 threads. A swapped
 * output runs its tail row by row of each product (k_gemm.c, k_mm_epi_rows). */
static void check_matmul_epilogue(const char *name, k_tensor *mm_in, const k_matmul_param *p, k_shape ss,
                                  const float *plain) {
  int64_t n = k_shape_numel(&ss), N = ss.d[ss.rank - 1];
  k_tensor bias = kt_tensor_f32(kt_shape(1, (int)N), -1, 1, 13);
  k_tensor want = kt_tensor_f32(ss, 0, 0, 1);
  memcpy(want.data, plain, (size_t)n * sizeof(float));
  k_req ip = kWriteInplace;
  char err[128] = "";
  k_tensor sub_in[2] = {bias, want};
  k_call sub = {.in = sub_in, .nin = 2, .out = &want, .nout = 1, .req = &ip, .err = err, .err_len = sizeof err};
  KT_CHECK(k_sub_forward(&sub) == 0, "%s: bias - y (%s)", name, err);
  k_call th = {.in = &want, .nin = 1, .out = &want, .nout = 1, .req = &ip, .err = err, .err_len = sizeof err};
  KT_CHECK(k_tanh_forward(&th) == 0, "%s: tanh (%s)", name, err);
  k_epilogue e = {2, {{.kind = K_EPI_BINARY, .fn = k_epi_fn_lookup("sub"), .slot = 2, .swap = 1, .period = N},
                      {.kind = K_EPI_UNARY, .fn = k_epi_fn_lookup("tanh")}}};
  KT_CHECK(k_epi_valid(&e, 3, 1) && k_epi_operand_fit(&e.step[0], &bias.shape, &ss), "%s: epilogue valid", name);
  k_tensor in[3] = {mm_in[0], mm_in[1], bias};
  for (int t = 0; t < 2; t++)
    for (int cached = 0; cached < 2; cached++) {
      k_parallel_set_threads(t + 1);
      k_tensor out = kt_tensor_f32(ss, 0, 0, 1);
      k_req req = kWriteTo;
      k_cache cache = {NULL, 0, 0, 0x2u};   /* in[1] stable */
      k_call c = {.in = in, .nin = 3, .out = &out, .nout = 1, .req = &req, .param = p, .err = err, .err_len = sizeof err,
                  .cache = cached ? &cache : NULL, .epi = &e};
      KT_CHECK(k_matmul_forward(&c) == 0, "%s: forward with an epilogue rc (%s)", name, err);
      KT_CHECK(!memcmp(out.data, want.data, (size_t)n * sizeof(float)),
               "%s: the epilogue's bits are the unfused ops' (threads %d, cached %d)", name, t + 1, cached);
      kt_tensor_free(&out);
      free(cache.data);
    }
  k_parallel_set_threads(0);
  kt_tensor_free(&bias), kt_tensor_free(&want);
}

/* Logical shapes as, bs, os; each of a, b and the output stored swapped where sw's bit 0, 1,
 * 2 says: the kernel reads and writes them in place, and must agree with the product of the
 * unswapped operands; the gradients (finite differences) come stored as their operands. */
static void check_matmul_swapped(k_shape as, k_shape bs, k_shape os, int ta, int tb, int sw) {
  char name[96];
  snprintf(name, sizeof name, "matmul swapped a=%d b=%d out=%d ta=%d tb=%d rank %d", sw & 1, sw >> 1 & 1, sw >> 2 & 1,
           ta, tb, os.rank);
  k_matmul_param p = {ta, tb, sw & 1, sw >> 1 & 1, sw >> 2 & 1};
  kt_case c = {0};
  c.name = name; c.fwd = k_matmul_forward; c.bwd = k_matmul_backward;
  c.nargs = 2; c.nout = 1; c.nvisible = 1;
  k_tensor la = kt_tensor_f32(as, -1, 1, 7), lb = kt_tensor_f32(bs, -1, 1, 8);
  c.in[0] = la, c.in[1] = lb;
  if (sw & 1) c.in[0].shape = swapped_shape(as), c.in[0].data = swap_axes(la.data, &as);
  if (sw & 2) c.in[1].shape = swapped_shape(bs), c.in[1].data = swap_axes(lb.data, &bs);
  c.out_shape[0] = sw & 4 ? swapped_shape(os) : os;
  c.param = &p;
  c.deps_og = 1; c.deps_in = 3;
  k_tensor out[KT_MAX_IO];
  KT_CHECK(kt_forward(&c, out) == 0, "%s forward rc", name);
  float *want = malloc((size_t)k_shape_numel(&os) * sizeof(float));
  ref_matmul(&la, &lb, &os, ta, tb, want);
  float *got = sw & 4 ? swap_axes(out[0].data, &c.out_shape[0]) : out[0].data;
  KT_CHECK(kt_expect_close(name, got, want, k_shape_numel(&os), 1e-5f, 1e-5f) == 0, "%s forward values", name);
  if (got != out[0].data) free(got);
  free(want);
  check_matmul_epilogue(name, c.in, &p, c.out_shape[0], out[0].data);   /* products one by one */
  kt_tensor_free(&out[0]);
  kt_gradcheck(&c);   /* each gradient stored as its operand is */
  if (sw & 1) free(c.in[0].data);
  if (sw & 2) free(c.in[1].data);
  kt_tensor_free(&la), kt_tensor_free(&lb);
}

static void test_matmul_swapped(void) {
  for (int sw = 1; sw < 8; sw++)
    for (int t = 0; t < 4; t++) {
      int ta = t & 1, tb = t >> 1;
      /* attention-like rank 4 (2 x 3 heads), odd sizes; rank 3; a broadcast outer batch dim */
      check_matmul_swapped(ta ? kt_shape(4, 2, 3, 4, 5) : kt_shape(4, 2, 3, 5, 4),
                           tb ? kt_shape(4, 2, 3, 6, 4) : kt_shape(4, 2, 3, 4, 6), kt_shape(4, 2, 3, 5, 6), ta, tb, sw);
      check_matmul_swapped(ta ? kt_shape(3, 3, 7, 5) : kt_shape(3, 3, 5, 7),
                           tb ? kt_shape(3, 3, 2, 7) : kt_shape(3, 3, 7, 2), kt_shape(3, 3, 5, 2), ta, tb, sw);
      check_matmul_swapped(ta ? kt_shape(4, 1, 3, 4, 5) : kt_shape(4, 1, 3, 5, 4),
                           tb ? kt_shape(4, 2, 3, 6, 4) : kt_shape(4, 2, 3, 4, 6), kt_shape(4, 2, 3, 5, 6), ta, tb, sw);
      /* swaps of an axis of extent 1, which move no element (k_mm_swaps_memory): a
       * sequence-first projection at batch 1 (rows of one, b shared), and one head */
      check_matmul_swapped(ta ? kt_shape(3, 7, 5, 1) : kt_shape(3, 7, 1, 5),
                           tb ? kt_shape(3, 1, 6, 5) : kt_shape(3, 1, 5, 6), kt_shape(3, 7, 1, 6), ta, tb, sw);
      check_matmul_swapped(ta ? kt_shape(4, 2, 1, 4, 5) : kt_shape(4, 2, 1, 5, 4),
                           tb ? kt_shape(4, 2, 1, 6, 4) : kt_shape(4, 2, 1, 4, 6), kt_shape(4, 2, 1, 5, 6), ta, tb, sw);
    }
}

/* A large product per batch with one B for every batch (a weight, stable in the call's cache)
 * and A or the output stored swapped: the batches do not fold into one GEMM, so each runs with
 * op(B) packed once and split over the threads (k_gemm.c, k_mm_shared_b). Against the
 * reference, and bit for bit against the same call without a cache (each batch packing its
 * own), at 1 and 2 threads. */
static void check_matmul_shared_b(int sw, int ta, int tb) {
  char name[96];
  snprintf(name, sizeof name, "matmul shared b, swapped a=%d out=%d ta=%d tb=%d", sw & 1, sw >> 2 & 1, ta, tb);
  const int64_t S = 3, M = 70, K = 256, N = 240;   /* M N K = 4.3 M multiply-adds a batch */
  k_shape as = ta ? kt_shape(3, S, K, M) : kt_shape(3, S, M, K), bs = tb ? kt_shape(2, N, K) : kt_shape(2, K, N);
  k_shape os = kt_shape(3, S, M, N);
  k_tensor la = kt_tensor_f32(as, -1, 1, 11), b = kt_tensor_f32(bs, -1, 1, 12);
  k_tensor in[2] = {la, b};
  if (sw & 1) in[0].shape = swapped_shape(as), in[0].data = swap_axes(la.data, &as);
  k_matmul_param p = {ta, tb, sw & 1, 0, sw >> 2 & 1};
  k_shape ss = sw & 4 ? swapped_shape(os) : os;
  float *want = malloc((size_t)k_shape_numel(&os) * sizeof(float));
  ref_matmul(&la, &b, &os, ta, tb, want);
  float *got[2][2], *stored = NULL;   /* [threads - 1][cached]; the first as stored */
  for (int t = 0; t < 2; t++)
    for (int cached = 0; cached < 2; cached++) {
      k_parallel_set_threads(t + 1);
      k_tensor out = kt_tensor_f32(ss, 0, 0, 1);
      k_req req = kWriteTo;
      char err[128] = "";
      k_cache cache = {NULL, 0, 0, 0x2u};   /* in[1] stable */
      k_call c = {.in = in, .nin = 2, .out = &out, .nout = 1, .req = &req, .param = &p, .err = err, .err_len = sizeof err,
                  .cache = cached ? &cache : NULL};
      KT_CHECK(k_matmul_forward(&c) == 0, "%s: forward rc (%s)", name, err);
      if (cached) KT_CHECK(k_matmul_forward(&c) == 0, "%s: second forward, packing reused", name);
      got[t][cached] = sw & 4 ? swap_axes(out.data, &ss) : kt_data_copy(&out);
      if (!t && !cached) stored = kt_data_copy(&out);
      kt_tensor_free(&out);
      free(cache.data);
    }
  k_parallel_set_threads(0);
  size_t bytes = (size_t)k_shape_numel(&os) * sizeof(float);
  KT_CHECK(kt_expect_close(name, got[1][1], want, k_shape_numel(&os), 1e-4f, 1e-4f) == 0, "%s: values", name);
  KT_CHECK(!memcmp(got[0][0], got[0][1], bytes) && !memcmp(got[0][0], got[1][0], bytes) && !memcmp(got[0][0], got[1][1], bytes),
           "%s: same bits with and without the shared packing, at 1 and 2 threads", name);
  check_matmul_epilogue(name, in, &p, ss, stored);
  free(stored);
  for (int t = 0; t < 2; t++) free(got[t][0]), free(got[t][1]);
  free(want);
  if (sw & 1) free(in[0].data);
  kt_tensor_free(&la), kt_tensor_free(&b);
}

static void test_matmul_shared_b(void) {
  const int sws[] = {1, 4, 5};
  for (int i = 0; i < 3; i++)
    for (int t = 0; t < 4; t++) check_matmul_shared_b(sws[i], t & 1, t >> 1);
}

/* ---- fully_connected ------------------------------------------------------------------- */

static void ref_fc(const float *x, const float *w, const float *b, int64_t rows, int64_t in,
                   int64_t H, float *y) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t h = 0; h < H; h++) {
      double s = b ? b[h] : 0.0;
      for (int64_t k = 0; k < in; k++) s += (double)x[r * in + k] * w[h * in + k];
      y[r * H + h] = (float)s;
    }
}

static void check_fc(const char *name, k_shape ds, int64_t H, int flatten, int no_bias,
                     k_shape os, int64_t rows, int64_t in, uint32_t no_grad) {
  k_fc_param p = {H, no_bias, flatten};
  kt_case c = {0};
  c.name = name; c.fwd = k_fully_connected_forward; c.bwd = k_fully_connected_backward;
  c.nargs = no_bias ? 2 : 3; c.nout = 1; c.nvisible = 1;
  c.in[0] = kt_tensor_f32(ds, -1, 1, 3);
  c.in[1] = kt_tensor_f32(kt_shape(2, (int)H, (int)in), -1, 1, 4);
  if (!no_bias) c.in[2] = kt_tensor_f32(kt_shape(1, (int)H), -1, 1, 5);
  c.out_shape[0] = os;
  c.param = &p;
  c.deps_og = 1; c.deps_in = 3;
  c.no_grad = no_grad;
  k_tensor out[KT_MAX_IO];
  KT_CHECK(kt_forward(&c, out) == 0, "%s forward rc", name);
  float *want = malloc((size_t)(rows * H) * sizeof(float));
  ref_fc(c.in[0].data, c.in[1].data, no_bias ? NULL : c.in[2].data, rows, in, H, want);
  KT_CHECK(kt_expect_close(name, out[0].data, want, rows * H, 1e-5f, 1e-5f) == 0,
           "%s forward values", name);
  free(want);
  kt_tensor_free(&out[0]);
  kt_gradcheck(&c);
  for (int j = 0; j < c.nargs; j++) kt_tensor_free(&c.in[j]);
}

static void test_fc(void) {
  check_fc("fc flatten 2d", kt_shape(2, 5, 7), 4, 1, 0, kt_shape(2, 5, 4), 5, 7, 0);
  check_fc("fc flatten 4d", kt_shape(4, 3, 2, 2, 3), 6, 1, 0, kt_shape(2, 3, 6), 3, 12, 0);
  check_fc("fc flatten no_bias", kt_shape(3, 4, 2, 3), 5, 1, 1, kt_shape(2, 4, 5), 4, 6, 0);
  check_fc("fc last axis", kt_shape(3, 2, 3, 5), 4, 0, 0, kt_shape(3, 2, 3, 4), 6, 5, 0);
  check_fc("fc last axis no_bias", kt_shape(3, 2, 3, 5), 4, 0, 1, kt_shape(3, 2, 3, 4), 6, 5, 0);
  check_fc("fc no data grad", kt_shape(2, 5, 7), 4, 1, 0, kt_shape(2, 5, 4), 5, 7, 1);
  check_fc("fc batch 1", kt_shape(2, 1, 7), 4, 1, 0, kt_shape(2, 1, 4), 1, 7, 0);
  check_fc("fc batch 1 no_bias", kt_shape(2, 1, 7), 4, 1, 1, kt_shape(2, 1, 4), 1, 7, 0);
  check_fc("fc one output", kt_shape(2, 5, 7), 1, 1, 0, kt_shape(2, 5, 1), 5, 7, 0);
}

/* kAddTo on the forward adds onto the buffer; kNullOp leaves it untouched. */
static void test_forward_req(void) {
  k_fc_param p = {3, 0, 1};
  k_tensor x = kt_tensor_f32(kt_shape(2, 2, 4), -1, 1, 7), w = kt_tensor_f32(kt_shape(2, 3, 4), -1, 1, 8);
  k_tensor b = kt_tensor_f32(kt_shape(1, 3), -1, 1, 9);
  k_tensor in[3] = {x, w, b}, out = {calloc(6, sizeof(float)), kt_shape(2, 2, 3), K_F32};
  float want[6], *y = out.data;
  ref_fc(x.data, w.data, b.data, 2, 4, 3, want);
  for (int i = 0; i < 6; i++) { y[i] = (float)i; want[i] += (float)i; }
  k_req req = kAddTo;
  char err[64];
  k_call c = {in, 3, &out, 1, &req, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_fully_connected_forward(&c);
  KT_CHECK(kt_expect_close("fc forward kAddTo", y, want, 6, 1e-5f, 1e-5f) == 0, "fc forward kAddTo");
  req = kNullOp;
  k_fully_connected_forward(&c);
  KT_CHECK(kt_expect_close("fc forward kNullOp", y, want, 6, 1e-5f, 1e-5f) == 0, "fc forward kNullOp");
  free(out.data);
  kt_tensor_free(&x); kt_tensor_free(&w); kt_tensor_free(&b);
}

int main(void) {
  test_matmul();
  test_matmul_swapped();
  test_matmul_shared_b();
  test_fc();
  test_forward_req();
  test_sgemm_vector();
  return kt_finish("test_gemm");
}
