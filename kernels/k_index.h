/* k_index.h — index arithmetic that a CPU kernel and its GPU twin (kernels/cuda/kc_ops.cu)
 * both need, once: plain static inline C over integers, which NVRTC compiles as device code
 * (-default-device) as it does k_scalar.h, so the two targets read the same positions. */
#ifndef KILN_K_INDEX_H
#define KILN_K_INDEX_H

#include "k_params.h"   /* K_PAD_* */

/* The input index output index o reads on an axis of size d padded by b before, or -1 where
 * it is the constant (pad). Reflect's pads are below d, so one reflection suffices. */
static inline int64_t k_pad_src(int64_t o, int64_t b, int64_t d, int mode) {
  int64_t i = o - b;
  if (i >= 0 && i < d) return i;
  if (mode == K_PAD_CONSTANT) return -1;
  if (mode == K_PAD_REPLICATE) return i < 0 ? 0 : d - 1;
  return i < 0 ? -i : 2 * (d - 1) - i;
}

/* How many positions average pooling divides by along one axis for output o (stride s, pads
 * pd before and pe after, kernel k, input size n): with count_include_pad the window clipped
 * to the padded axis, without it to the axis itself (torch's avg_pool2d). */
static inline int64_t k_pool_span(int64_t o, int64_t s, int64_t pd, int64_t pe, int64_t k, int64_t n, int cip) {
  int64_t a = o * s - pd, b = a + k < n + pe ? a + k : n + pe;
  if (!cip) a = a < 0 ? 0 : a, b = b < n ? b : n;
  return b - a;
}

#endif
