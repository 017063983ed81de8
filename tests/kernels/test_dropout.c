/* test_dropout.c — dropout: identity in predict, the Philox keep rule and 1/(1-p) scaling in
 * training, keep-rate statistics over many elements, determinism per (seed, counter), a new
 * mask per counter, p = 0 and p = 1, in-place forward and the gradient through the mask. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "k_philox.h"
#include "kt_harness.h"

#define N 100000

/* Forward into y and mask (mask's req may be kNullOp), with the given mode and counter. */
static int run(const k_dropout_param *p, float *x, float *y, float *mask, k_req mreq, int train,
               uint64_t counter) {
  k_tensor in = {x, kt_shape(1, N), K_F32}, out[2] = {{y, in.shape, K_F32}, {mask, in.shape, K_F32}};
  k_req req[2] = {kWriteTo, mreq};
  char err[64];
  k_call c = {&in, 1, out, 2, req, p, NULL, 0, 42, counter, train, err, sizeof err, NULL, NULL, NULL};
  return k_dropout_forward(&c);
}

typedef struct { float *x, *y, *m, *y2, *m2; } bufs;

static void test_predict(bufs *b) {
  k_dropout_param p = {0.5f};
  KT_CHECK(run(&p, b->x, b->y, NULL, kNullOp, 0, 0) == 0, "predict runs with no mask");
  KT_CHECK(memcmp(b->x, b->y, N * sizeof(float)) == 0, "predict is the identity");
}

/* Fraction kept ~ 1 - p; kept values are x / (1 - p); the mask follows Philox exactly. */
static void test_train_stats(bufs *b, float pr) {
  k_dropout_param p = {pr};
  run(&p, b->x, b->y, b->m, kWriteTo, 1, 7);
  int64_t kept = 0, bad = 0;
  float scale = 1.0f / (1.0f - pr);
  for (int64_t i = 0; i < N; i++) {
    int keep = k_philox_uniform(42, 7, (uint64_t)i) >= pr;
    kept += keep;
    bad += b->m[i] != (keep ? scale : 0.0f);
    bad += fabsf(b->y[i] - (keep ? b->x[i] * scale : 0.0f)) > 1e-6f * (1 + fabsf(b->y[i]));
  }
  double frac = (double)kept / N;
  KT_CHECK(fabs(frac - (1.0 - pr)) < 0.01, "p=%g kept fraction %g", pr, frac);
  KT_CHECK(bad == 0, "p=%g: %lld elements disagree with the Philox keep rule", pr, (long long)bad);
}

static void test_determinism(bufs *b) {
  k_dropout_param p = {0.4f};
  run(&p, b->x, b->y, b->m, kWriteTo, 1, 3);
  run(&p, b->x, b->y2, b->m2, kWriteTo, 1, 3);
  KT_CHECK(memcmp(b->m, b->m2, N * sizeof(float)) == 0, "same seed and counter: same mask");
  run(&p, b->x, b->y2, b->m2, kWriteTo, 1, 4);
  int64_t diff = 0;
  for (int64_t i = 0; i < N; i++) diff += (b->m[i] == 0) != (b->m2[i] == 0);
  /* independent masks with keep rate 0.6 differ in 2 * 0.6 * 0.4 = 48% of places */
  KT_CHECK(fabs((double)diff / N - 0.48) < 0.02, "new counter: new mask (%lld differ)", (long long)diff);
}

static void test_extremes(bufs *b) {
  k_dropout_param p1 = {1.0f}, p0 = {0.0f};
  run(&p1, b->x, b->y, b->m, kWriteTo, 1, 1);
  int nonzero = 0;
  for (int64_t i = 0; i < N; i++) nonzero += b->y[i] != 0 || b->m[i] != 0;
  KT_CHECK(nonzero == 0, "p=1 drops everything (%d nonzero)", nonzero);
  run(&p0, b->x, b->y, b->m, kWriteTo, 1, 1);
  KT_CHECK(memcmp(b->x, b->y, N * sizeof(float)) == 0, "p=0 keeps everything unscaled");
}

/* Training forward with y over x must match the out-of-place result. */
static void test_inplace(bufs *b) {
  k_dropout_param p = {0.3f};
  run(&p, b->x, b->y, b->m, kWriteTo, 1, 9);
  memcpy(b->y2, b->x, N * sizeof(float));
  k_tensor in = {b->y2, kt_shape(1, N), K_F32}, out[2] = {in, {b->m2, in.shape, K_F32}};
  k_req req[2] = {kWriteInplace, kWriteTo};
  char err[64];
  k_call c = {&in, 1, out, 2, req, &p, NULL, 0, 42, 9, 1, err, sizeof err, NULL, NULL, NULL};
  k_dropout_forward(&c);
  KT_CHECK(memcmp(b->y, b->y2, N * sizeof(float)) == 0, "dropout forward in place");
}

/* The harness runs forward in training with a fixed seed, so the mask is the same in every
 * evaluation and the finite differences see the linear map x -> x * mask. */
static void test_gradient(void) {
  k_dropout_param p = {0.3f};
  kt_case c = {.name = "dropout", .fwd = k_dropout_forward, .bwd = k_dropout_backward,
               .nargs = 1, .nout = 2, .nvisible = 1, .param = &p, .deps_og = 1, .deps_out = 2,
               .is_train = 1, .rtol = 1e-3f, .atol = 1e-4f};
  c.in[0] = kt_tensor_f32(kt_shape(2, 6, 7), -2, 2, 3);
  c.out_shape[0] = c.out_shape[1] = c.in[0].shape;
  kt_gradcheck(&c);
  kt_tensor_free(&c.in[0]);
}

int main(void) {
  bufs b;
  float **all[] = {&b.x, &b.y, &b.m, &b.y2, &b.m2};
  for (int i = 0; i < 5; i++) *all[i] = calloc(N, sizeof(float));
  kt_fill_uniform(b.x, N, -2, 2, 1);
  test_predict(&b);
  test_train_stats(&b, 0.5f);
  test_train_stats(&b, 0.2f);
  test_train_stats(&b, 0.9f);
  test_determinism(&b);
  test_extremes(&b);
  test_inplace(&b);
  test_gradient();
  for (int i = 0; i < 5; i++) free(*all[i]);
  return kt_finish("dropout");
}
