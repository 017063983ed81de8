/* k_init.c — parameter initializers drawing from Philox(seed, counter, i), so the runtime, the
 * generated code and the GPU back end fill a tensor identically from the same (seed, counter).
 * Lane conventions are part of the contract and documented per function. */
#include "kernels.h"

#include "k_philox.h"

#include <math.h>

void k_init_constant(float *x, int64_t n, float value) {
  for (int64_t i = 0; i < n; i++) x[i] = value;
}

/* Element i = low + (high - low) * k_philox_uniform(seed, counter, i): lane i&3 of block i>>2. */
void k_init_uniform(float *x, int64_t n, float low, float high, uint64_t seed, uint64_t counter) {
  for (int64_t i = 0; i < n; i++)
    x[i] = low + (high - low) * k_philox_uniform(seed, counter, (uint64_t)i);
}

/* Box-Muller, two normals per pair of lanes. Element i reads block B = k_philox_block(seed,
 * counter, i>>2) and the lane pair L = i & 2:
 *   u1 = ((B.v[L] >> 8) + 1) / 2^24      in (0, 1]   (never 0, so log is finite)
 *   u2 =  (B.v[L+1] >> 8) / 2^24         in [0, 1)
 *   z  = sqrt(-2 ln u1) * (i even ? cos(2 pi u2) : sin(2 pi u2))
 * and x[i] = mean + std * z, computed in float. Each element depends only on (seed, counter, i),
 * so a GPU thread per element reproduces it (to the last ulp of its sin/cos/log). */
static float k_normal_at(uint64_t seed, uint64_t counter, uint64_t i) {
  k_philox4 b = k_philox_block(seed, counter, i >> 2);
  unsigned lane = (unsigned)(i & 2);
  float u1 = (float)((b.v[lane] >> 8) + 1u) * (1.0f / 16777216.0f);
  float u2 = (float)(b.v[lane + 1] >> 8) * (1.0f / 16777216.0f);
  float r = sqrtf(-2.0f * logf(u1)), theta = 6.2831853071795864769f * u2;
  return (i & 1) ? r * sinf(theta) : r * cosf(theta);
}

void k_init_normal(float *x, int64_t n, float mean, float std, uint64_t seed, uint64_t counter) {
  for (int64_t i = 0; i < n; i++) x[i] = mean + std * k_normal_at(seed, counter, (uint64_t)i);
}

/* torch.nn.init._calculate_fan_in_and_fan_out: [out, in, k...] -> in*k, out*k. Tensors of
 * rank < 2, where torch refuses, count every element on both sides. */
static void k_fans(const k_shape *s, double *fan_in, double *fan_out) {
  if (s->rank < 2) {
    *fan_in = *fan_out = (double)k_shape_numel(s);
    return;
  }
  double rf = 1;
  for (int i = 2; i < s->rank; i++) rf *= (double)s->d[i];
  *fan_in = (double)s->d[1] * rf, *fan_out = (double)s->d[0] * rf;
}

void k_init_fill(float *x, const k_shape *shape, int kind, float a, float b, uint64_t seed, uint64_t counter) {
  int64_t n = k_shape_numel(shape);
  double fi, fo;
  switch (kind) {
  case K_INIT_ONES: k_init_constant(x, n, 1.0f); break;
  case K_INIT_CONSTANT: k_init_constant(x, n, a); break;
  case K_INIT_UNIFORM: k_init_uniform(x, n, a, b, seed, counter); break;
  case K_INIT_NORMAL: k_init_normal(x, n, a, b, seed, counter); break;
  case K_INIT_XAVIER:
    k_fans(shape, &fi, &fo);
    float bound = fi + fo > 0 ? (float)sqrt(6.0 / (fi + fo)) : 0.0f;
    k_init_uniform(x, n, -bound, bound, seed, counter);
    break;
  default: k_init_constant(x, n, 0.0f); break;
  }
}
