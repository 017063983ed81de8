/* test_init.c — initializers: constant fills, determinism for a fixed (seed, counter), the
 * documented Philox lane convention, ranges, and mean/std statistics over a large draw. */
#include "kt_harness.h"

#include "k_philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BIG 200000

static void moments(const float *x, int64_t n, double *mean, double *std) {
  double s = 0, ss = 0;
  for (int64_t i = 0; i < n; i++) s += x[i];
  *mean = s / n;
  for (int64_t i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
  *std = sqrt(ss / n);
}

static void test_constant(void) {
  float x[37];
  k_init_constant(x, 37, -2.5f);
  int bad = 0;
  for (int i = 0; i < 37; i++) bad += x[i] != -2.5f;
  KT_CHECK(bad == 0, "constant fill");
}

static void test_uniform(void) {
  float *a = malloc(BIG * sizeof(float)), *b = malloc(BIG * sizeof(float));
  k_init_uniform(a, BIG, -0.5f, 1.5f, 42, 7);
  k_init_uniform(b, BIG, -0.5f, 1.5f, 42, 7);
  KT_CHECK(memcmp(a, b, BIG * sizeof(float)) == 0, "uniform deterministic for a fixed seed/counter");
  int out = 0;
  for (int i = 0; i < BIG; i++) out += !(a[i] >= -0.5f && a[i] < 1.5f);
  KT_CHECK(out == 0, "uniform: %d values outside [-0.5, 1.5)", out);
  double m, s;
  moments(a, BIG, &m, &s);
  KT_CHECK(fabs(m - 0.5) < 0.01 && fabs(s - 2 / sqrt(12.0)) < 0.01, "uniform mean %g std %g", m, s);
  KT_CHECK(a[13] == -0.5f + 2.0f * k_philox_uniform(42, 7, 13), "uniform element i uses philox element i");
  k_init_uniform(b, BIG, -0.5f, 1.5f, 42, 8);
  int same = 0;
  for (int i = 0; i < BIG; i++) same += a[i] == b[i];
  KT_CHECK(same < BIG / 1000, "another counter gives another draw (%d equal)", same);
  free(a); free(b);
}

/* Element 6 = lanes (2, 3) of block 1, cosine branch; element 7 the sine of the same pair. */
static void test_normal_lanes(void) {
  float x[8];
  k_init_normal(x, 8, 0, 1, 9, 3);
  k_philox4 blk = k_philox_block(9, 3, 1);
  double u1 = ((blk.v[2] >> 8) + 1.0) / 16777216.0, u2 = (blk.v[3] >> 8) / 16777216.0;
  double r = sqrt(-2 * log(u1)), th = 2 * 3.14159265358979323846 * u2;
  KT_CHECK(fabs(x[6] - r * cos(th)) < 1e-5 && fabs(x[7] - r * sin(th)) < 1e-5,
           "normal lane convention: %g %g vs %g %g", x[6], x[7], r * cos(th), r * sin(th));
}

static void test_normal(void) {
  float *a = malloc(BIG * sizeof(float)), *b = malloc(BIG * sizeof(float));
  k_init_normal(a, BIG, 0.25f, 2.0f, 1234, 0);
  k_init_normal(b, BIG, 0.25f, 2.0f, 1234, 0);
  KT_CHECK(memcmp(a, b, BIG * sizeof(float)) == 0, "normal deterministic");
  int finite = 1, tail = 0;
  for (int i = 0; i < BIG; i++) {
    finite &= isfinite(a[i]);
    tail += fabsf(a[i] - 0.25f) > 2.0f * 2.0f;   /* beyond 2 sigma: about 4.55% */
  }
  double m, s;
  moments(a, BIG, &m, &s);
  KT_CHECK(finite, "normal values finite");
  KT_CHECK(fabs(m - 0.25) < 0.02 && fabs(s - 2.0) < 0.02, "normal mean %g std %g", m, s);
  KT_CHECK(fabs(tail / (double)BIG - 0.0455) < 0.003, "normal 2-sigma tail %g", tail / (double)BIG);
  /* Adjacent elements (cos/sin of one pair) must be uncorrelated. */
  double cxy = 0;
  for (int i = 0; i + 1 < BIG; i += 2) cxy += (a[i] - m) * (a[i + 1] - m);
  KT_CHECK(fabs(cxy / (BIG / 2) / (s * s)) < 0.02, "pair correlation %g", cxy / (BIG / 2) / (s * s));
  free(a); free(b);
}

int main(void) {
  test_constant();
  test_uniform();
  test_normal_lanes();
  test_normal();
  return kt_finish("test_init");
}
