/* kc_blas.cu — the small kernels around the cuBLAS and cuDNN calls of runtime/cuda/rtc_blas.c
 * and rtc_dnn.c: bias add, bias gradient, zero fill. NVRTC compiles them with -default-device
 * after k_params.h (and the other pasted headers); no libc, no atomics. The bias gradient
 * takes a block per feature (kc_block.h: a fixed tree, so it is deterministic). */
#include "kc_blas.h"
#include "kc_block.h"

extern "C" __global__ void kc_blas_bias_add(kc_blas_bias_add_args a) {
  KC_LOOP(i, a.n) a.y[i] += a.bias[(i / a.inner) % a.features];
}

/* One block per feature (launched with features * KC_BLOCK threads). */
extern "C" __global__ void kc_blas_bias_grad(kc_blas_bias_grad_args a) {
  __shared__ double red[KC_BLOCK];
  KC_BLOCK_LOOP(f, a.features) {
    double part = 0;
    KC_THREAD_LOOP(e, a.outer * a.inner) part += a.dy[kc_chan_at(e, f, a.features, a.inner)];
    double sum = kc_block_sum(part, red);
    if (threadIdx.x == 0) a.db[f] = a.add ? a.db[f] + (float)sum : (float)sum;
  }
}

extern "C" __global__ void kc_blas_zero(kc_blas_zero_args a) {
  KC_LOOP(i, a.n) a.y[i] = 0.0f;
}
