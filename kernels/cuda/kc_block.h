/* kc_block.h — the loops the GPU kernels share (kc_ops.cu, kc_blas.cu): grid-stride, and the
 * block reduction: one block of KC_BLOCK threads per item (a channel, a row, a feature), its
 * threads folding strided parts, then a tree in shared memory of a fixed shape, so the sum is
 * the same on every run.
 * Device code for NVRTC; on the host (tests/cuda/kc_host.h, tests/cuda/fake/emul.h: one thread
 * of one block, __shared__ static, __syncthreads nothing) it folds sequentially. */
#ifndef KILN_KC_BLOCK_H
#define KILN_KC_BLOCK_H

#include "kc_args.h"   /* KC_BLOCK */

/* Grid-stride: element i < n of every thread of the grid in turn. */
#define KC_LOOP(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)
/* One block per item v < n (launched with n * KC_BLOCK threads); its threads share the item. */
#define KC_BLOCK_LOOP(v, n) for (int64_t v = blockIdx.x; v < (n); v += gridDim.x)
#define KC_THREAD_LOOP(e, n) for (int64_t e = threadIdx.x; e < (n); e += blockDim.x)

/* The sum of every thread's v in the block, to every thread, in a fixed tree order (blockDim.x a
 * power of two, at most KC_BLOCK); red is the block's shared scratch. Every thread of the block
 * must call it. */
static inline double kc_block_sum(double v, double *red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  double r = red[0];
  __syncthreads();   /* red is written again by the next call */
  return r;
}

/* Element e (over outer x inner) of channel ch of a tensor viewed as [outer, C, inner]. */
static inline int64_t kc_chan_at(int64_t e, int64_t ch, int64_t C, int64_t inner) {
  return (e / inner * C + ch) * inner + e % inner;
}

#endif
