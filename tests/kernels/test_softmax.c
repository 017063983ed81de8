/* test_softmax.c — softmax / log_softmax over every axis and softmax_cross_entropy:
 * gradients by finite differences, values against naive double formulas, rows summing to 1,
 * stability at x = 1000, in-place execution, and labels out of range reported as errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt_harness.h"

static kt_case softmax_case(int is_log, k_tensor *x, const k_softmax_param *p) {
  kt_case c = {.name = is_log ? "log_softmax" : "softmax",
               .fwd = is_log ? k_log_softmax_forward : k_softmax_forward,
               .bwd = is_log ? k_log_softmax_backward : k_softmax_backward,
               .nargs = 1, .nout = 1, .nvisible = 1, .param = p, .deps_og = 1, .deps_out = 1,
               .rtol = 2e-3f, .atol = 2e-4f};
  c.in[0] = *x;
  c.out_shape[0] = x->shape;
  return c;
}

/* Naive exp(x) / sum exp(x) in double along `axis` (inputs small enough not to overflow). */
static void reference(const float *x, k_shape s, int axis, int is_log, double shift, float *want) {
  int64_t inner = 1, n = s.d[axis], total = k_shape_numel(&s);
  for (int a = axis + 1; a < s.rank; a++) inner *= s.d[a];
  for (int64_t i = 0; i < total; i++) {
    int64_t base = i - ((i / inner) % n) * inner;
    double sum = 0;
    for (int64_t j = 0; j < n; j++) sum += exp(x[base + j * inner] - shift);
    double v = exp(x[i] - shift) / sum;
    want[i] = (float)(is_log ? log(v) : v);
  }
}

static void check_values(kt_case *c, int axis, int is_log, double shift) {
  k_tensor y;
  int64_t n = k_shape_numel(&c->in[0].shape);
  float *want = malloc((size_t)n * sizeof(float) + 4);
  reference(c->in[0].data, c->in[0].shape, axis, is_log, shift, want);
  int rc = kt_forward(c, &y);
  KT_CHECK(rc == 0 && kt_expect_close(c->name, y.data, want, n, 1e-5f, 1e-6f) == 0,
           "%s axis %d (shift %g) vs exp(x)/sum", c->name, axis, shift);
  if (!is_log) {   /* rows sum to 1: sum over the whole tensor is the number of rows */
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((float *)y.data)[i];
    KT_CHECK(fabs(s - (double)n / c->in[0].shape.d[axis]) < 1e-4, "softmax rows sum to 1");
  }
  free(y.data);
  free(want);
}

static void test_axes(void) {
  k_tensor x = kt_tensor_f32(kt_shape(3, 2, 3, 4), -3, 3, 1), v = kt_tensor_f32(kt_shape(1, 6), -3, 3, 2);
  for (int is_log = 0; is_log < 2; is_log++) {
    for (int axis = 0; axis < 3; axis++) {
      k_softmax_param p = {axis};
      kt_case c = softmax_case(is_log, &x, &p);
      kt_gradcheck(&c);
      check_values(&c, axis, is_log, 0);
    }
    k_softmax_param p0 = {0};
    kt_case c = softmax_case(is_log, &v, &p0);
    kt_gradcheck(&c);
    check_values(&c, 0, is_log, 0);
  }
  kt_tensor_free(&x);
  kt_tensor_free(&v);
}

/* Rows longer than a block (256) and not a multiple of the 16 lanes, on the last axis
 * (contiguous rows) and on a middle axis with more than a block of inner positions. */
static void test_long_rows(void) {
  struct { k_shape s; int axis; } cases[] = {{kt_shape(2, 3, 300), 1}, {kt_shape(2, 5, 19), 1},
                                             {kt_shape(3, 2, 37, 260), 1}, {kt_shape(2, 7, 1), 0}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    k_tensor x = kt_tensor_f32(cases[k].s, -4, 4, 40 + k);
    k_softmax_param p = {cases[k].axis};
    for (int is_log = 0; is_log < 2; is_log++) {
      kt_case c = softmax_case(is_log, &x, &p);
      /* Every output moves with each input here, so the float rounding of hundreds of
       * log-probabilities swamps a 1e-3 step: a larger step and the harness's default
       * tolerances (the formulas are held tight by test_axes; the values by check_values). */
      c.eps = 1e-2f;
      c.rtol = 2e-2f;
      c.atol = 2e-3f;
      kt_gradcheck(&c);
      check_values(&c, cases[k].axis, is_log, 0);
    }
    kt_tensor_free(&x);
  }
}

/* x = 1000 + u: a naive float exp overflows; the result must equal the shifted reference. */
static void test_large(void) {
  k_tensor x = kt_tensor_f32(kt_shape(2, 3, 5), 999, 1001, 3);
  k_softmax_param p = {1};
  for (int is_log = 0; is_log < 2; is_log++) {
    kt_case c = softmax_case(is_log, &x, &p);
    check_values(&c, 1, is_log, 1000.0);
  }
  float big[3] = {1000, 1001, 1002}, y[3];
  k_tensor tb = {big, kt_shape(1, 3), K_F32}, ty = {y, tb.shape, K_F32};
  k_softmax_param p0 = {0};
  k_req w = kWriteTo;
  char err[64];
  k_call call = {&tb, 1, &ty, 1, &w, &p0, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  k_log_softmax_forward(&call);
  /* log_softmax([0, 1, 2]) = [0,1,2] - log(1 + e + e^2) = [0,1,2] - 2.40760596 */
  KT_CHECK(fabsf(y[0] + 2.4076059f) < 1e-5f && fabsf(y[2] + 0.4076059f) < 1e-5f,
           "log_softmax at 1000: %g %g %g", y[0], y[1], y[2]);
  kt_tensor_free(&x);
}

/* Contiguous rows at every length around the 16-float vectors (a row of 1 included) and the
 * 256-float stack block, each written (kWriteTo) and added (kAddTo onto 1.0) against the double
 * reference; softmax written has the bits of softmax added onto +0. */
static void test_row_lengths(void) {
  int64_t lens[] = {1, 2, 15, 16, 17, 31, 33, 64, 128, 197, 255, 256, 300};
  char err[64];
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    k_tensor x = kt_tensor_f32(kt_shape(2, 3, lens[k]), -4, 4, 60 + k);
    int64_t n = 3 * lens[k];
    float *want = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    k_tensor ty = {y, x.shape, K_F32};
    k_softmax_param p = {1};
    for (int is_log = 0; is_log < 2; is_log++) {
      reference(x.data, x.shape, 1, is_log, 0, want);
      for (int add = 0; add < 2; add++) {
        k_req req = add ? kAddTo : kWriteTo;
        k_call call = {&x, 1, &ty, 1, &req, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
        for (int64_t i = 0; i < n; i++) y[i] = add ? 1.0f : NAN;
        (is_log ? k_log_softmax_forward : k_softmax_forward)(&call);
        for (int64_t i = 0; i < n && add; i++) y[i] -= 1.0f;
        KT_CHECK(kt_expect_close("softmax row", y, want, n, 1e-5f, 2e-6f) == 0,
                 "%s rows of %lld, req %d", is_log ? "log_softmax" : "softmax", (long long)lens[k], req);
      }
    }
    float *blk = malloc((size_t)n * sizeof(float));
    k_req wr = kWriteTo, ad = kAddTo;
    k_tensor tb = {blk, x.shape, K_F32};
    k_call cw = {&x, 1, &ty, 1, &wr, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
    k_call ca = {&x, 1, &tb, 1, &ad, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
    for (int64_t i = 0; i < n; i++) blk[i] = 0.0f;
    k_softmax_forward(&cw);
    k_softmax_forward(&ca);
    KT_CHECK(memcmp(y, blk, (size_t)n * sizeof(float)) == 0, "softmax rows of %lld: written and added differ",
             (long long)lens[k]);
    free(blk);
    free(want);
    free(y);
    kt_tensor_free(&x);
  }
}

/* softmax (or log_softmax) of one row of n values, written to y. */
static void sm_row(float *x, float *y, int n, int is_log) {
  char err[64];
  k_tensor tx = {x, kt_shape(1, n), K_F32}, ty = {y, tx.shape, K_F32};
  k_softmax_param p = {0};
  k_req w = kWriteTo;
  k_call call = {&tx, 1, &ty, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  (is_log ? k_log_softmax_forward : k_softmax_forward)(&call);
}

/* Non-finite inputs fall in torch's classes: a NaN or a +inf makes its whole row NaN (inf - inf
 * is NaN), a row of -inf is NaN, a -inf among finite values gets 0 (log: -inf) and leaves
 * the rest a distribution. Rows of 17 put the value in the full vector and in the tail. */
static void test_nonfinite(void) {
  enum { N = 17 };
  int at[2] = {3, 16};
  float specials[3] = {NAN, INFINITY, -INFINITY};
  for (int is_log = 0; is_log < 2; is_log++)
    for (int s = 0; s < 3; s++)
      for (int a = 0; a < 2; a++) {
        float x[N], y[N];
        for (int i = 0; i < N; i++) x[i] = (float)(i % 5) - 2.0f;
        x[at[a]] = specials[s];
        sm_row(x, y, N, is_log);
        int ok = 1;
        double sum = 0;
        for (int i = 0; i < N; i++) {
          if (s < 2) ok &= isnan(y[i]);
          else if (i == at[a]) ok &= is_log ? y[i] == -INFINITY : y[i] == 0.0f;
          else ok &= isfinite(y[i]), sum += is_log ? exp(y[i]) : y[i];
        }
        if (s == 2) ok &= fabs(sum - 1.0) < 1e-5;
        KT_CHECK(ok, "%s with %g at %d", is_log ? "log_softmax" : "softmax", specials[s], at[a]);
      }
  for (int is_log = 0; is_log < 2; is_log++) {   /* a row of -inf */
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -INFINITY;
    sm_row(x, y, N, is_log);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= isnan(y[i]);
    KT_CHECK(ok, "%s of a row of -inf is NaN", is_log ? "log_softmax" : "softmax");
  }
}

/* y over x, then gx over og: both equal to the out-of-place results (on [4, 5], axis 1:
 * contiguous rows, axis 0: strided ones). */
static void test_inplace(int axis) {
  k_tensor x = kt_tensor_f32(kt_shape(2, 4, 5), -2, 2, 4), og = kt_tensor_f32(x.shape, -1, 1, 5);
  k_tensor y = kt_tensor_f32(x.shape, 0, 0, 1), g = kt_tensor_f32(x.shape, 0, 0, 1);
  k_tensor buf = kt_tensor_f32(x.shape, 0, 0, 1);
  k_softmax_param p = {axis};
  k_req w = kWriteTo, ip = kWriteInplace;
  size_t bytes = 20 * sizeof(float);
  char err[64];
  k_fn fwd[2] = {k_softmax_forward, k_log_softmax_forward}, bwd[2] = {k_softmax_backward,
                                                                     k_log_softmax_backward};
  for (int k = 0; k < 2; k++) {
    k_call f = {&x, 1, &y, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
    fwd[k](&f);
    memcpy(buf.data, x.data, bytes);
    f.in = &buf; f.out = &buf; f.req = &ip;
    fwd[k](&f);
    KT_CHECK(memcmp(buf.data, y.data, bytes) == 0, "softmax %d forward in place", k);
    k_tensor in[3] = {og, {NULL, x.shape, K_F32}, y};
    k_call b = {in, 3, &g, 1, &w, &p, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
    bwd[k](&b);
    memcpy(buf.data, og.data, bytes);
    in[0] = buf; b.out = &buf; b.req = &ip;
    bwd[k](&b);
    KT_CHECK(memcmp(buf.data, g.data, bytes) == 0, "softmax %d backward in place", k);
  }
  kt_tensor_free(&x); kt_tensor_free(&og); kt_tensor_free(&y); kt_tensor_free(&g);
  kt_tensor_free(&buf);
}

/* ---- softmax_cross_entropy ---- */
static kt_case xent_case(k_tensor *logits, k_tensor *label) {
  kt_case c = {.name = "softmax_cross_entropy", .fwd = k_softmax_cross_entropy_forward,
               .bwd = k_softmax_cross_entropy_backward, .nargs = 2, .nout = 1, .nvisible = 1,
               .deps_og = 1, .deps_in = 3, .no_grad = 2, .rtol = 2e-3f, .atol = 2e-4f};
  c.in[0] = *logits;
  c.in[1] = *label;
  c.out_shape[0] = kt_shape(0);
  return c;
}

static void test_xent(void) {
  k_tensor x = kt_tensor_f32(kt_shape(2, 4, 5), -3, 3, 6), l = kt_tensor_i32(kt_shape(1, 4), 0, 5, 7);
  kt_case c = xent_case(&x, &l);
  kt_gradcheck(&c);
  k_tensor y;
  const float *xs = x.data;
  const int32_t *ls = l.data;
  double want = 0;
  for (int i = 0; i < 4; i++) {
    double s = 0;
    for (int j = 0; j < 5; j++) s += exp(xs[i * 5 + j]);
    want -= log(exp(xs[i * 5 + ls[i]]) / s) / 4;
  }
  int rc = kt_forward(&c, &y);
  KT_CHECK(rc == 0 && y.shape.rank == 0 && fabs(((float *)y.data)[0] - want) < 1e-5 * (1 + fabs(want)),
           "cross entropy %g vs hand %g", ((float *)y.data)[0], want);
  free(y.data);
  /* large logits stay finite: loss of [1000, 0] with label 0 is log(1 + e^-1000) = 0 */
  float big[2] = {1000, 0}, loss = -1;
  int32_t lab = 0;
  k_tensor in[2] = {{big, kt_shape(2, 1, 2), K_F32}, {&lab, kt_shape(1, 1), K_I32}};
  k_tensor out = {&loss, kt_shape(0), K_F32};
  k_req w = kWriteTo;
  char err[64];
  k_call call = {in, 2, &out, 1, &w, NULL, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
  KT_CHECK(k_softmax_cross_entropy_forward(&call) == 0 && loss == 0.0f, "xent at 1000: %g", loss);
  kt_tensor_free(&x);
  kt_tensor_free(&l);
}

/* More classes than a block: the gradient's row crosses block boundaries. */
static void test_xent_wide(void) {
  k_tensor x = kt_tensor_f32(kt_shape(2, 3, 300), -3, 3, 8), l = kt_tensor_i32(kt_shape(1, 3), 250, 300, 9);
  kt_case c = xent_case(&x, &l);
  kt_gradcheck(&c);
  kt_tensor_free(&x);
  kt_tensor_free(&l);
}

/* A label outside [0, C) is a data error: nonzero return and a message, forward and backward. */
static void test_bad_label(void) {
  float x[6] = {0}, loss = 0, og = 1, g[6], g_label[2];
  int32_t labels[2][2] = {{0, 3}, {-1, 1}};
  for (int t = 0; t < 2; t++) {
    k_tensor fin[2] = {{x, kt_shape(2, 2, 3), K_F32}, {labels[t], kt_shape(1, 2), K_I32}};
    k_tensor out = {&loss, kt_shape(0), K_F32};
    k_tensor bin[4] = {{&og, kt_shape(0), K_F32}, fin[0], fin[1], {NULL, kt_shape(0), K_F32}};
    k_tensor gout[2] = {{g, fin[0].shape, K_F32}, {g_label, fin[1].shape, K_I32}};
    k_req w[2] = {kWriteTo, kNullOp};
    char err[128] = "";
    k_call f = {fin, 2, &out, 1, w, NULL, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
    KT_CHECK(k_softmax_cross_entropy_forward(&f) != 0 && strstr(err, "label") != NULL,
             "label %d out of range: forward error '%s'", t ? -1 : 3, err);
    err[0] = 0;
    k_call b = {bin, 4, gout, 2, w, NULL, NULL, 0, 0, 0, 0, err, sizeof err, NULL, NULL, NULL};
    KT_CHECK(k_softmax_cross_entropy_backward(&b) != 0 && err[0] != 0,
             "label out of range: backward error '%s'", err);
  }
}

int main(void) {
  test_axes();
  test_long_rows();
  test_large();
  test_row_lengths();
  test_nonfinite();
  test_inplace(0);
  test_inplace(1);
  test_xent();
  test_xent_wide();
  test_bad_label();
  return kt_finish("softmax");
}
