/* k_mm_geom.h — matmul's batch geometry (NumPy broadcasting of the batch dims, torch.matmul's
 * rules as k_gemm.c implements them): which output batch reads which matrix of each operand,
 * and when the whole product folds into one GEMM. One definition for the CPU kernels
 * (k_gemm.c) and the GPU's cuBLAS calls (runtime/cuda/rtc_blas.c), so both cut a matmul alike. */
#ifndef KILN_K_MM_GEOM_H
#define KILN_K_MM_GEOM_H

#include "k_params.h"

/* The geometry of one matmul: batch dims of the output, and per operand the element stride of
 * each output batch dim (0 where that operand broadcasts). */
typedef struct {
  int nb;                        /* number of batch dims of the output */
  int64_t bd[K_MAX_RANK];        /* output batch extents */
  int64_t sa[K_MAX_RANK], sb[K_MAX_RANK];
  int64_t batch;                 /* product of bd */
  int64_t M, N, K;
  int ta, tb;
} k_mm_geom;

/* Strides of operand t's batch dims aligned to the output's, 0 where it broadcasts. */
static inline void k_mm_strides(const k_shape *t, int nb, const int64_t *bd, int64_t mat, int64_t *s) {
  int tnb = t->rank - 2;
  int64_t stride = mat;
  for (int i = nb - 1; i >= 0; i--) {
    int ti = i - (nb - tnb);
    int64_t ext = ti >= 0 ? t->d[ti] : 1;
    s[i] = (ext == 1 && bd[i] != 1) ? 0 : stride;
    if (ti >= 0) stride *= ext;
  }
}

static inline k_mm_geom k_mm_geometry(const k_shape *a, const k_shape *b, const k_shape *o,
                               const k_matmul_param *p) {
  k_mm_geom g;
  g.ta = p ? p->transpose_a : 0;
  g.tb = p ? p->transpose_b : 0;
  g.M = o->d[o->rank - 2];
  g.N = o->d[o->rank - 1];
  g.K = g.ta ? a->d[a->rank - 2] : a->d[a->rank - 1];
  g.nb = o->rank - 2;
  g.batch = 1;
  for (int i = 0; i < g.nb; i++) g.batch *= (g.bd[i] = o->d[i]);
  k_mm_strides(a, g.nb, g.bd, g.M * g.K, g.sa);
  k_mm_strides(b, g.nb, g.bd, g.K * g.N, g.sb);
  return g;
}

/* Element offset of output batch i inside an operand with batch strides s. */
static inline int64_t k_mm_offset(const k_mm_geom *g, const int64_t *s, int64_t i) {
  int64_t off = 0;
  for (int d = g->nb - 1; d >= 0; d--) {
    off += (i % g->bd[d]) * s[d];
    i /= g->bd[d];
  }
  return off;
}

/* True when b is one matrix shared by every batch and a is not transposed: then a's batches
 * stack into one tall [batch*M, K] matrix and the whole matmul is a single GEMM. So is a
 * single product with a transposed (ONNX's Gemm with transA = 1). */
static inline int k_mm_foldable(const k_mm_geom *g) {
  if (g->ta) return g->batch == 1;
  for (int d = 0; d < g->nb; d++)
    if (g->sb[d] != 0 && g->bd[d] != 1) return 0;
  for (int d = 0; d < g->nb; d++)
    if (g->sa[d] == 0 && g->bd[d] != 1) return 0;
  return 1;
}

#endif
