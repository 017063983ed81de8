/* k_mm_geom.h — matmul's batch geometry (NumPy broadcasting of the batch dims, torch.matmul's
 * rules as k_gemm.c implements them): which output batch reads which matrix of each operand,
 * and when the whole product folds into one GEMM. One definition for the CPU kernels
 * (k_gemm.c) and the GPU's cuBLAS calls (runtime/cuda/rtc_blas.c), so both cut a matmul alike. */
#ifndef KILN_K_MM_GEOM_H
#define KILN_K_MM_GEOM_H

#include "k_params.h"

/* The geometry of one matmul: batch dims of the output, per operand and for the output the
 * element stride of each output batch dim (0 where an operand broadcasts), and the element
 * distance between the rows of each matrix as stored (the row length, unless it is stored
 * swapped: k_matmul_param.swap_*). */
typedef struct {
  int nb;                        /* number of batch dims of the output */
  int64_t bd[K_MAX_RANK];        /* output batch extents */
  int64_t sa[K_MAX_RANK], sb[K_MAX_RANK], sc[K_MAX_RANK];
  int64_t batch;                 /* product of bd */
  int64_t M, N, K;
  int64_t lda, ldb, ldc;
  int ta, tb;
  int swapped;                   /* an operand or the output is stored swapped (elements moved) */
} k_mm_geom;

/* Whether a tensor of this rank stored with swap set is stored swapped (it needs a batch axis). */
static inline int k_mm_swaps(const k_shape *t, int swap) { return swap && t->rank >= 3; }

/* The logical shape of a tensor stored with swap set: axes rank-3 and rank-2 exchanged. */
static inline k_shape k_mm_logical(const k_shape *t, int swap) {
  k_shape l = *t;
  if (k_mm_swaps(t, swap)) {
    int64_t d = l.d[t->rank - 3];
    l.d[t->rank - 3] = l.d[t->rank - 2], l.d[t->rank - 2] = d;
  }
  return l;
}

/* Whether the swap moves any element: exchanging two axes one of which has extent 1 leaves
 * every element where it was (a sequence-first attention at batch 1: the projection's output
 * [S, 1, 3E] stored as [1, S, 3E]). Such an operand is read as its logical shape, so the
 * product still folds into one GEMM (k_mm_foldable) instead of S matrix-vector products. */
static inline int k_mm_swaps_memory(const k_shape *t, int swap) {
  return k_mm_swaps(t, swap) && t->d[t->rank - 3] != 1 && t->d[t->rank - 2] != 1;
}

/* Operand (or output) t, given by its stored shape, aligned to the output's nb batch dims: s[i]
 * its element stride for output batch dim i, 0 where it broadcasts (or lacks the dim); returns
 * the element distance between its matrix's rows. */
static inline int64_t k_mm_operand(const k_shape *t, int swap, int nb, const int64_t *bd, int64_t *s) {
  int r = t->rank, tnb = r - 2;
  int64_t st[K_MAX_RANK] = {0}, stride = 1;
  k_shape l = k_mm_logical(t, swap);
  const k_shape *mem = k_mm_swaps_memory(t, swap) ? t : &l;   /* the shape its memory is row-major in */
  for (int i = r - 1; i >= 0; i--) st[i] = stride, stride *= mem->d[i];
  if (k_mm_swaps_memory(t, swap)) {   /* logical axis r-3 is stored axis r-2 and the other way round */
    int64_t x = st[r - 3];
    st[r - 3] = st[r - 2], st[r - 2] = x;
  }
  for (int i = nb - 1; i >= 0; i--) {
    int ti = i - (nb - tnb);
    s[i] = ti < 0 || (l.d[ti] == 1 && bd[i] != 1) ? 0 : st[ti];
  }
  return st[r - 2];
}

static inline k_mm_geom k_mm_geometry(const k_shape *a, const k_shape *b, const k_shape *o,
                               const k_matmul_param *p) {
  k_mm_geom g;
  int wa = p ? p->swap_a : 0, wb = p ? p->swap_b : 0, wc = p ? p->swap_c : 0;
  k_shape la = k_mm_logical(a, wa), lo = k_mm_logical(o, wc);
  g.ta = p ? p->transpose_a : 0;
  g.tb = p ? p->transpose_b : 0;
  g.M = lo.d[lo.rank - 2];
  g.N = lo.d[lo.rank - 1];
  g.K = g.ta ? la.d[la.rank - 2] : la.d[la.rank - 1];
  g.nb = lo.rank - 2;
  g.batch = 1;
  for (int i = 0; i < g.nb; i++) g.batch *= (g.bd[i] = lo.d[i]);
  g.lda = k_mm_operand(a, wa, g.nb, g.bd, g.sa);
  g.ldb = k_mm_operand(b, wb, g.nb, g.bd, g.sb);
  g.ldc = k_mm_operand(o, wc, g.nb, g.bd, g.sc);
  g.swapped = k_mm_swaps_memory(a, wa) || k_mm_swaps_memory(b, wb) || k_mm_swaps_memory(o, wc);
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

/* True when every output batch reads the same matrix of b. */
static inline int k_mm_one_b(const k_mm_geom *g) {
  for (int d = 0; d < g->nb; d++)
    if (g->sb[d] != 0 && g->bd[d] != 1) return 0;
  return 1;
}

/* True when b is one matrix shared by every batch and a is not transposed: then a's batches
 * stack into one tall [batch*M, K] matrix and the whole matmul is a single GEMM. So is a
 * single product with a transposed (ONNX's Gemm with transA = 1). Not when anything is
 * stored swapped: its batches do not stack. */
static inline int k_mm_foldable(const k_mm_geom *g) {
  if (g->swapped) return 0;
  if (g->ta) return g->batch == 1;
  if (!k_mm_one_b(g)) return 0;
  for (int d = 0; d < g->nb; d++)
    if (g->sa[d] == 0 && g->bd[d] != 1) return 0;
  return 1;
}

#endif
