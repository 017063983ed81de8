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
