/* test_sgemm.c — k_sgemm, the kernels' GEMM (k_blas.h; Kiln's own blocked SGEMM in
 * k_sgemm.c): against a naive double-precision product over many shapes (1 to ~300, odd sizes,
 * M, N or K of 1, K of 0), all four transpose combinations, alpha and beta values, leading
 * dimensions larger than needed (the padding must stay untouched), and beta 0 on C filled with
 * NaN (which must not be read). Then the bits: the same product with 1 and 2 threads, and cut
 * into sub-products (blocks of rows and columns at odd offsets, as k_sgemm's blocks cut it),
 * must be identical; so must a product whose op(B) was packed ahead (k_sgemm_pack), and
 * fully_connected and matmul forward reading their packed weights from a k_cache. Every
 * implementation the CPU runs is checked: avx512, avx2, openblas. */
#include "kt_harness.h"
#include "k_blas.h"
#include "k_parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PAD_SENTINEL 12345.0f

typedef struct {
  int64_t M, N, K;
  int ta, tb;
  int64_t lda, ldb, ldc;
  float alpha, beta;
  float *A, *B, *C;   /* C holds the initial C */
} t_prod;

static float *t_alloc(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }

/* Operands with leading dimensions padded by `pad`, random values, C's padding a sentinel. */
static t_prod t_make(int64_t M, int64_t N, int64_t K, int ta, int tb, int64_t pad, float alpha, float beta,
                     uint64_t seed) {
  t_prod p = {M, N, K, ta, tb, (ta ? M : K) + pad, (tb ? K : N) + pad, N + pad, alpha, beta, NULL, NULL, NULL};
  int64_t na = (ta ? K : M) * p.lda, nb = (tb ? N : K) * p.ldb, nc = M * p.ldc;
  p.A = t_alloc(na); p.B = t_alloc(nb); p.C = t_alloc(nc);
  kt_fill_uniform(p.A, na, -1, 1, seed);
  kt_fill_uniform(p.B, nb, -1, 1, seed + 1);
  kt_fill_uniform(p.C, nc, -1, 1, seed + 2);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < p.ldc; j++)
      if (j >= N) p.C[i * p.ldc + j] = PAD_SENTINEL;
      else if (beta == 0.0f) p.C[i * p.ldc + j] = NAN;   /* must not be read */
  return p;
}

static void t_free(t_prod *p) { free(p->A); free(p->B); free(p->C); }

static float t_a(const t_prod *p, int64_t i, int64_t k) { return p->ta ? p->A[k * p->lda + i] : p->A[i * p->lda + k]; }
static float t_b(const t_prod *p, int64_t k, int64_t j) { return p->tb ? p->B[j * p->ldb + k] : p->B[k * p->ldb + j]; }

/* C (a copy of the initial C) through k_sgemm on rows [m0, m1) x columns [n0, n1). */
static void t_run(const t_prod *p, float *C, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const float *A = p->A + (p->ta ? m0 : m0 * p->lda), *B = p->B + (p->tb ? n0 * p->ldb : n0);
  k_sgemm(p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, m1 - m0, n1 - n0, p->K,
          p->alpha, A, p->lda, B, p->ldb, p->beta, C + m0 * p->ldc + n0, p->ldc);
}

static float *t_result(const t_prod *p) {
  float *C = t_alloc(p->M * p->ldc);
  memcpy(C, p->C, (size_t)(p->M * p->ldc) * sizeof(float));
  t_run(p, C, 0, p->M, 0, p->N);
  return C;
}

/* Against the double-precision product: each element within the rounding bound of its sum,
 * (K + 2) float epsilons of the sum of magnitudes; the padding untouched. */
static void t_check_values(const char *impl, const t_prod *p) {
  float *C = t_result(p);
  int64_t bad = 0;
  for (int64_t i = 0; i < p->M; i++)
    for (int64_t j = 0; j < p->ldc; j++) {
      float got = C[i * p->ldc + j];
      if (j >= p->N) { bad += got != PAD_SENTINEL; continue; }
      double s = 0, mag = 0, c0 = p->beta == 0.0f ? 0.0 : p->C[i * p->ldc + j];
      for (int64_t k = 0; k < p->K; k++) {
        double t = (double)t_a(p, i, k) * t_b(p, k, j);
        s += t;
        mag += fabs(t);
      }
      double want = p->alpha * s + p->beta * c0;
      double tol = (p->K + 2) * 1.2e-7 * (fabs(p->alpha) * mag + fabs(p->beta * c0)) + 1e-30;
      if (!(fabs(got - want) <= tol)) {
        if (bad < 3)
          fprintf(stderr, "  C[%lld][%lld] = %.9g, want %.9g (tol %.3g)\n", (long long)i, (long long)j, got,
                  want, tol);
        bad++;
      }
    }
  KT_CHECK(bad == 0, "%s %lldx%lldx%lld ta=%d tb=%d ld+%lld alpha=%g beta=%g: %lld wrong", impl,
           (long long)p->M, (long long)p->N, (long long)p->K, p->ta, p->tb, (long long)(p->ldc - p->N),
           (double)p->alpha, (double)p->beta, (long long)bad);
  free(C);
}

static void t_values(const char *impl) {
  static const int64_t shapes[][3] = {
      {1, 1, 1},     {1, 7, 5},     {5, 1, 9},     {3, 4, 1},     {2, 2, 2},     {7, 33, 17},
      {13, 31, 64},  {14, 32, 3},   {15, 33, 100}, {29, 17, 1},   {64, 128, 79}, {64, 10, 128},
      {100, 47, 385}, {127, 129, 33}, {17, 300, 5}, {300, 17, 200}, {61, 97, 769}, {255, 63, 2},
      {6, 16, 8},    {7, 9, 390},   {33, 65, 1000}, {4, 4, 0},    {299, 301, 37},
  };
  static const float alphas[] = {1.0f, -0.5f, 2.0f};
  static const float betas[] = {0.0f, 1.0f, -0.75f};
  uint64_t seed = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int t = 0; t < 4; t++)
      for (int v = 0; v < 3; v++) {
        int64_t pad = (s + t + v) % 3 == 0 ? 0 : (int64_t)(s * 7 + t) % 19 + 1;
        t_prod p = t_make(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, pad, alphas[(s + v) % 3],
                          betas[v], seed++);
        t_check_values(impl, &p);
        t_free(&p);
      }
  /* alpha 0: C = beta C, A and B unread */
  t_prod p = t_make(9, 11, 13, 0, 1, 2, 0.0f, 0.5f, seed);
  t_check_values(impl, &p);
  t_free(&p);
}

/* The same product computed whole, with 1 and 2 threads, and as sub-products: same bits. */
static void t_bits(const char *impl, int64_t M, int64_t N, int64_t K, int ta, int tb, float beta) {
  t_prod p = t_make(M, N, K, ta, tb, 3, 1.0f, beta, 99);
  k_parallel_set_threads(1);
  float *one = t_result(&p);
  k_parallel_set_threads(2);
  float *two = t_result(&p);
  k_parallel_set_threads(0);
  KT_CHECK(memcmp(one, two, (size_t)(M * p.ldc) * sizeof(float)) == 0,
           "%s %lldx%lldx%lld ta=%d tb=%d: 1 and 2 threads differ", impl, (long long)M, (long long)N, (long long)K, ta, tb);
  if (strcmp(impl, "openblas") != 0) {   /* OpenBLAS promises nothing of the kind */
    float *cut = t_alloc(M * p.ldc);
    memcpy(cut, p.C, (size_t)(M * p.ldc) * sizeof(float));
    static const int64_t rows[] = {0, 5, 19, 20, 53}, cols[] = {0, 3, 40, 41, 77};
    for (int r = 0; r < 5; r++)
      for (int c = 0; c < 5; c++) {
        int64_t m0 = rows[r] * M / 64, m1 = r == 4 ? M : rows[r + 1] * M / 64;
        int64_t n0 = cols[c] * N / 80, n1 = c == 4 ? N : cols[c + 1] * N / 80;
        t_run(&p, cut, m0, m1, n0, n1);   /* one row or column runs as sgemv: not compared */
      }
    int64_t diff = 0;
    for (int r = 0; r < 5; r++)
      for (int c = 0; c < 5; c++) {
        int64_t m0 = rows[r] * M / 64, m1 = r == 4 ? M : rows[r + 1] * M / 64;
        int64_t n0 = cols[c] * N / 80, n1 = c == 4 ? N : cols[c + 1] * N / 80;
        if (m1 - m0 < 2 || n1 - n0 < 2) continue;
        for (int64_t i = m0; i < m1; i++)
          diff += memcmp(cut + i * p.ldc + n0, one + i * p.ldc + n0, (size_t)(n1 - n0) * sizeof(float)) != 0;
      }
    KT_CHECK(diff == 0, "%s %lldx%lldx%lld ta=%d tb=%d: sub-products differ from the whole in %lld rows", impl,
             (long long)M, (long long)N, (long long)K, ta, tb, (long long)diff);
    free(cut);
  }
  free(one);
  free(two);
  t_free(&p);
}

/* After-callback of k_sgemm_rows_packed: counts the rows it was handed (from any thread). */
static void t_after(void *ctx, int64_t m0, int64_t m1) { __atomic_fetch_add((int64_t *)ctx, m1 - m0, __ATOMIC_RELAXED); }

/* op(B) packed ahead (k_sgemm_pack) gives the bits of k_sgemm, with and without an epilogue
 * callback, which sees every row once. */
static void t_packed(const char *impl, int64_t M, int64_t N, int64_t K, int ta, int tb) {
  t_prod p = t_make(M, N, K, ta, tb, 2, 1.0f, 0.5f, 7);
  float *want = t_result(&p);
  size_t bytes = k_sgemm_packed_bytes(N, K);
  KT_CHECK((bytes == 0) == (strcmp(impl, "openblas") == 0), "%s: packed size %zu", impl, bytes);
  float *bp = bytes ? aligned_alloc(64, (bytes + 63) / 64 * 64) : NULL;
  if (bp) k_sgemm_pack(tb ? CblasTrans : CblasNoTrans, N, K, p.B, p.ldb, bp);
  for (int with_after = 0; with_after < 2; with_after++) {
    float *C = t_alloc(M * p.ldc);
    memcpy(C, p.C, (size_t)(M * p.ldc) * sizeof(float));
    int64_t rows = 0;
    k_sgemm_rows_packed(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, p.alpha, p.A,
                        p.lda, p.B, p.ldb, bp, p.beta, NULL, C, p.ldc, with_after ? t_after : NULL, &rows);
    KT_CHECK(memcmp(C, want, (size_t)(M * p.ldc) * sizeof(float)) == 0 && rows == (with_after ? M : 0),
             "%s packed %lldx%lldx%lld ta=%d tb=%d after=%d: differs from k_sgemm (rows seen %lld)", impl,
             (long long)M, (long long)N, (long long)K, ta, tb, with_after, (long long)rows);
    free(C);
  }
  free(bp);
  free(want);
  t_free(&p);
}

/* A bias given to the product (beta 0): the bits of laying 0 + bias down first and
 * accumulating onto it (beta 1), as fully_connected did; with and without op(B) packed ahead,
 * on every path (Kiln's GEMM in blocks of rows or of columns and K blocks, sgemv for one row
 * or column, OpenBLAS) and with K = 0 (then C is the bias). The bias holds a -0. */
static void t_bias(const char *impl, int64_t M, int64_t N, int64_t K, int ta, int tb) {
  t_prod p = t_make(M, N, K, ta, tb, 2, 1.0f, 0.0f, 9);
  float *bias = t_alloc(N), *want = t_alloc(M * p.ldc), *got = t_alloc(M * p.ldc);
  kt_fill_uniform(bias, N, -1, 1, 10);
  bias[0] = -0.0f;
  size_t bytes = k_sgemm_packed_bytes(N, K);
  float *bp = bytes ? aligned_alloc(64, (bytes + 63) / 64 * 64) : NULL;
  if (bp) k_sgemm_pack(tb ? CblasTrans : CblasNoTrans, N, K, p.B, p.ldb, bp);
  CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  for (int packed = 0; packed < 2; packed++) {
    memcpy(want, p.C, (size_t)(M * p.ldc) * sizeof(float));
    memcpy(got, p.C, (size_t)(M * p.ldc) * sizeof(float));
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) want[i * p.ldc + j] = 0.0f + bias[j];
    k_sgemm(TA, TB, M, N, K, 1.0f, p.A, p.lda, p.B, p.ldb, 1.0f, want, p.ldc);
    k_sgemm_rows_packed(TA, TB, M, N, K, 1.0f, p.A, p.lda, p.B, p.ldb, packed ? bp : NULL, 0.0f, bias, got, p.ldc,
                        NULL, NULL);
    KT_CHECK(memcmp(got, want, (size_t)(M * p.ldc) * sizeof(float)) == 0,
             "%s bias %lldx%lldx%lld ta=%d tb=%d packed=%d: not the bits of the bias laid down first", impl,
             (long long)M, (long long)N, (long long)K, ta, tb, packed);
  }
  free(bp);
  free(bias), free(want), free(got);
  t_free(&p);
}

/* fully_connected forward with a k_cache holding the packed weights: the bits of a call
 * without one, on the first call (packing), the second (reusing) and after the weights change
 * (the runtime clears the key). */
static void t_fc_cache(const char *impl, int64_t rows, int64_t in, int64_t H) {
  k_fc_param prm = {H, 0, 1};
  k_tensor x = kt_tensor_f32(kt_shape(2, rows, in), -1, 1, 11), w = kt_tensor_f32(kt_shape(2, H, in), -1, 1, 12),
           b = kt_tensor_f32(kt_shape(1, H), -1, 1, 13);
  k_tensor ins[3] = {x, w, b};
  float *y0 = t_alloc(rows * H), *y1 = t_alloc(rows * H);
  k_tensor out0 = {y0, kt_shape(2, rows, H), K_F32}, out1 = {y1, kt_shape(2, rows, H), K_F32};
  k_req req = kWriteTo;
  char err[128];
  k_cache cache = {NULL, 0, 0, 0x2 | 0x4};
  k_call plain = {ins, 3, &out0, 1, &req, &prm, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_call cached = plain;
  cached.out = &out1;
  cached.cache = &cache;
  for (int round = 0; round < 3; round++) {
    if (round == 2) {   /* new weights */
      kt_fill_uniform(w.data, H * in, -1, 1, 14);
      cache.key = 0;
    }
    k_fully_connected_forward(&plain);
    k_fully_connected_forward(&cached);
    KT_CHECK(memcmp(y0, y1, (size_t)(rows * H) * sizeof(float)) == 0, "%s fc %lldx%lld->%lld cached, call %d: differs",
             impl, (long long)rows, (long long)in, (long long)H, round);
  }
  KT_CHECK((cache.key != 0) == (strcmp(impl, "openblas") != 0 && rows > 1), "%s fc cache key %llx", impl,
           (unsigned long long)cache.key);
  free(cache.data);
  free(y0); free(y1);
  kt_tensor_free(&x); kt_tensor_free(&w); kt_tensor_free(&b);
}

/* matmul forward with a k_cache holding op(B) packed (B a weight shared by the whole product,
 * either operand transposed, a's batches stacked): the bits of a call without one, on the
 * first call, the second and after B changes. */
static void t_mm_cache(const char *impl, int64_t batch, int64_t M, int64_t K, int64_t N, int ta, int tb) {
  k_matmul_param prm = {.transpose_a = ta, .transpose_b = tb};
  k_shape as = batch > 1 ? kt_shape(3, batch, M, K) : ta ? kt_shape(2, K, M) : kt_shape(2, M, K);
  k_tensor a = kt_tensor_f32(as, -1, 1, 21), b = kt_tensor_f32(tb ? kt_shape(2, N, K) : kt_shape(2, K, N), -1, 1, 22);
  k_tensor ins[2] = {a, b};
  int64_t n = batch * M * N;
  k_shape os = batch > 1 ? kt_shape(3, batch, M, N) : kt_shape(2, M, N);
  float *y0 = t_alloc(n), *y1 = t_alloc(n);
  k_tensor out0 = {y0, os, K_F32}, out1 = {y1, os, K_F32};
  k_req req = kWriteTo;
  char err[128];
  k_cache cache = {NULL, 0, 0, 0x1 | 0x2};
  k_call plain = {ins, 2, &out0, 1, &req, &prm, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_call cached = plain;
  cached.out = &out1;
  cached.cache = &cache;
  for (int round = 0; round < 3; round++) {
    if (round == 2) {   /* new weights */
      kt_fill_uniform(b.data, K * N, -1, 1, 23);
      cache.key = 0;
    }
    k_matmul_forward(&plain);
    k_matmul_forward(&cached);
    KT_CHECK(memcmp(y0, y1, (size_t)n * sizeof(float)) == 0, "%s matmul %lldx[%lldx%lld]x%lld ta=%d tb=%d cached, call %d: differs",
             impl, (long long)batch, (long long)M, (long long)K, (long long)N, ta, tb, round);
  }
  KT_CHECK((cache.key != 0) == (strcmp(impl, "openblas") != 0 && batch * M > 1), "%s matmul cache key %llx", impl,
           (unsigned long long)cache.key);
  free(cache.data);
  free(y0); free(y1);
  kt_tensor_free(&a); kt_tensor_free(&b);
}

static void t_suite(const char *want) {
  const char *impl = k_sgemm_use(want);
  if (strcmp(impl, want) != 0) {
    printf("test_sgemm: %s not available on this CPU or build (got %s), skipped\n", want, impl);
    return;
  }
  t_values(impl);
  for (int t = 0; t < 4; t++) {
    t_bits(impl, 300, 200, 300, t & 1, t >> 1, 0.0f);   /* blocks of rows, K in one block */
    t_bits(impl, 64, 784, 400, t & 1, t >> 1, 1.0f);    /* blocks of columns, K in two */
  }
  t_bits(impl, 520, 130, 900, 0, 1, 0.5f);             /* K in three blocks */
  for (int t = 0; t < 4; t++) {
    t_packed(impl, 300, 100, 700, t & 1, t >> 1);   /* blocks of rows */
    t_packed(impl, 40, 333, 65, t & 1, t >> 1);     /* blocks of columns */
    t_packed(impl, 1, 50, 30, t & 1, t >> 1);       /* one row: sgemv, bp unused */
  }
  for (int t = 0; t < 4; t++) {
    t_bias(impl, 300, 100, 700, t & 1, t >> 1);   /* blocks of rows, K in three blocks */
    t_bias(impl, 40, 333, 65, t & 1, t >> 1);     /* blocks of columns, a partial panel */
    t_bias(impl, 1, 50, 30, t & 1, t >> 1);       /* one row: sgemv */
    t_bias(impl, 7, 1, 30, t & 1, t >> 1);        /* one column: sgemv */
    t_bias(impl, 5, 20, 0, t & 1, t >> 1);        /* K = 0 */
  }
  t_fc_cache(impl, 64, 784, 128);
  t_fc_cache(impl, 5, 33, 10);
  t_fc_cache(impl, 1, 33, 10);
  for (int t = 0; t < 4; t++) t_mm_cache(impl, 1, 48, 70, 20, t & 1, t >> 1);
  t_mm_cache(impl, 3, 5, 33, 10, 0, 1);
  t_mm_cache(impl, 1, 1, 33, 10, 1, 0);
}

int main(void) {
  t_suite("avx512");
  t_suite("avx2");
  t_suite("openblas");
  k_sgemm_use(NULL);
  return kt_finish("test_sgemm");
}
