/* kc_blas.cu — the small kernels around the cuBLAS and cuDNN calls of runtime/cuda/rtc_blas.c
 * and rtc_dnn.c: bias add, bias gradient, zero fill. NVRTC compiles them with -default-device
 * after k_params.h (and the other pasted headers); no libc, no shared memory, no atomics. The
 * bias gradient folds each feature in one thread, in the CPU kernels' order (per row, then
 * rows in turn), so it is deterministic. */
#include "kc_blas.h"

#define KC_BLAS_LOOP(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

extern "C" __global__ void kc_blas_bias_add(kc_blas_bias_add_args a) {
  KC_BLAS_LOOP(i, a.n) a.y[i] += a.bias[(i / a.inner) % a.features];
}

/* The sum of one row of n floats in four interleaved partial sums (the CPU's k_vec_sum keeps
 * lanes too), which shortens the dependency chain and the rounding error of long rows. */
static inline float kc_blas_row_sum(const float *d, int64_t n) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) s0 += d[j], s1 += d[j + 1], s2 += d[j + 2], s3 += d[j + 3];
  for (; j < n; j++) s0 += d[j];
  return (s0 + s1) + (s2 + s3);
}

extern "C" __global__ void kc_blas_bias_grad(kc_blas_bias_grad_args a) {
  KC_BLAS_LOOP(f, a.features) {
    float acc = a.add ? a.db[f] : 0.0f;
    for (int64_t o = 0; o < a.outer; o++) acc += kc_blas_row_sum(a.dy + (o * a.features + f) * a.inner, a.inner);
    a.db[f] = acc;
  }
}

extern "C" __global__ void kc_blas_zero(kc_blas_zero_args a) {
  KC_BLAS_LOOP(i, a.n) a.y[i] = 0.0f;
}
