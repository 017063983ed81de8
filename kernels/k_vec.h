/* k_vec.h — the building blocks of the kernels' vectorised loops: stack blocks that outputs
 * pass through (so an output may alias an input, and OpReqType is applied once per block), and
 * horizontal sums kept in K_LANES partial sums combined in one fixed order. Header-only and
 * free of k_util.h, so any kernel file can include it. */
#ifndef KILN_K_VEC_H
#define KILN_K_VEC_H

#include "k_base.h"

#define K_BLOCK 256   /* floats per stack block: 1 KiB, stays in L1 */
#define K_LANES 16    /* partial sums of a horizontal reduction: one AVX-512 register */
#define K_GRAIN 16384 /* elements a k_parallel_for chunk should cover: ~64 KiB of input */

/* Units per k_parallel_for chunk when each unit covers `unit_elems` elements. */
static inline int64_t k_vec_grain(int64_t unit_elems) {
  return unit_elems > 0 && unit_elems < K_GRAIN ? K_GRAIN / unit_elems : 1;
}

/* Elementwise work (the unary kernels, the generated fused loops) is split in chunks of
 * K_GRAIN elements when it calls transcendental math (k_vm_*: ~0.6 ns an element with
 * AVX-512, 10 us a chunk), but of K_GRAIN_LIGHT when every scalar function is a few
 * instructions: relu runs 16384 elements in ~1 us, so a waking worker (~5-10 us) would find
 * no chunk left, and only from ~2^18 elements does the second thread take half
 * (measured: relu forward and backward, 1 vs 2 threads, calling thread's CPU time). */
#define K_GRAIN_LIGHT (8 * K_GRAIN)

/* Whether k_sf_<stem> (and its gradients, "<stem>_grad...") is light in the sense above: one of
 * k_ops.def's K_LIGHT rows. */
static inline int k_vec_light_stem(const char *stem) {
#define K_OP(op)
#define K_UNARY(op)
#define K_BINARY(op)
#define K_LIGHT(op) #op,
  static const char *const light[] = {
#include "k_ops.def"
      NULL};
#undef K_OP
#undef K_UNARY
#undef K_BINARY
#undef K_LIGHT
  for (int i = 0; light[i]; i++) {
    size_t k = 0;
    while (light[i][k] && stem[k] == light[i][k]) k++;
    if (!light[i][k] && (!stem[k] || (stem[k] == '_' && stem[k + 1] == 'g'))) return 1;
  }
  return 0;
}

/* The archive is built for baseline x86-64 (SSE2); a function carrying K_VEC_TARGETS is also
 * compiled for AVX2 and AVX-512F and the best one is picked once, at load time, through an
 * ifunc (in the generated .so and in the process the JIT resolves kernels from alike). None of
 * the targets enables FMA, and every loop sums in fixed lanes, so all versions give the same
 * bits. Put it on the function that holds the loop, not on the small inline pieces it calls. */
/* x86-64-v4 / v3 rather than bare avx512f / avx2: the k_vm_* math converts between floats and
 * integers, which wants AVX-512DQ/VL. Not under ThreadSanitizer: its runtime is not yet up
 * when the dynamic loader runs the ifunc resolvers, and the process dies before main. */
#ifndef K_VEC_TARGETS       /* -DK_VEC_TARGETS= builds the baseline alone, to compare */
#if defined(__GNUC__) && __GNUC__ >= 12 && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__) && \
    !defined(__SANITIZE_THREAD__)
#define K_VEC_TARGETS __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define K_VEC_TARGETS
#endif
#endif

/* y[k] = t[k] or y[k] += t[k]; t is a stack block, so it never overlaps y. The copy goes a
 * vector at a time: as one plain loop gcc turned it into a memcpy of unknown length, inlined
 * as `rep movsq`, whose start-up cost more than a short row's (128 floats) arithmetic. */
static inline void k_store_block(float *y, const float *restrict t, int64_t n, k_req req) {
  int64_t k = 0;
  if (req == kAddTo) {
    for (; k < n; k++) y[k] += t[k];
    return;
  }
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) y[k + i] = t[k + i];
  for (; k < n; k++) y[k] = t[k];
}

/* The lanes of a horizontal sum, added pairwise in a fixed order: lane i + w into lane i for
 * w = 8, 4, 2, 1. Written on vector types (halves added in registers) because the loop form,
 * an array of partial sums, went through the stack with narrower loads of wider stores,
 * store-forwarding stalls that cost a short row (layer_norm's 128, softmax's 64) more than
 * its arithmetic. Same additions, same order, same bits. */
typedef float k_vf16 __attribute__((vector_size(64)));
typedef int32_t k_vi16 __attribute__((vector_size(64)));   /* k_vf16's lanes as ints: compare masks */
typedef float k_vf8 __attribute__((vector_size(32)));
typedef float k_vf4 __attribute__((vector_size(16)));
_Static_assert(K_LANES == 16, "k_lanes_sum folds 16 lanes");

/* v = the 16 floats at p, unaligned (a macro: a function returning a k_vf16 warns that the
 * AVX-512 ABI differs). Kernels whose short rows gcc's SLP handles badly as lane arrays write
 * the whole vectors on k_vf16 (GCC vector extensions; the baseline clone splits them). */
#define K_VF16_LOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(v))

static inline float k_lanes_sum(float *l) {
  k_vf16 v;
  __builtin_memcpy(&v, l, sizeof v);
  k_vf8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
            __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  k_vf4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  float c0 = b[0] + b[2], c1 = b[1] + b[3];
  return c0 + c1;
}

/* NaN-propagating max (torch.amax): NaN wins, else the larger. */
static inline float k_vec_max2(float a, float b) { return (b > a || b != b) ? b : a; }

/* The lanes of a max, combined pairwise; once a lane is NaN the result is NaN. */
static inline float k_lanes_max(float *l) {
  for (int w = K_LANES / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) l[i] = k_vec_max2(l[i], l[i + w]);
  return l[0];
}

/* NaN-propagating min (torch.amin): NaN wins, else the smaller. */
static inline float k_vec_min2(float a, float b) { return (b < a || b != b) ? b : a; }

static inline float k_lanes_min(float *l) {
  for (int w = K_LANES / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) l[i] = k_vec_min2(l[i], l[i + w]);
  return l[0];
}

/* The lanes of a product, multiplied pairwise in the same order as k_lanes_max combines. */
static inline float k_lanes_prod(float *l) {
  for (int w = K_LANES / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) l[i] *= l[i + w];
  return l[0];
}

/* Sum of x[0..n) in lanes: element k goes to lane k % K_LANES. */
static inline float k_vec_sum(const float *x, int64_t n) {
  float l[K_LANES] = {0};
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] += x[k + i];
  for (int i = 0; k + i < n; i++) l[i] += x[k + i];
  return k_lanes_sum(l);
}

#endif
