/* k_util.h — strided and broadcast iteration shared by the reference kernels.
 * A k_iter walks a shape in row-major order carrying one element offset per operand, each
 * with its own strides (0 on a broadcast axis); a pair of them splits a shape into kept and
 * reduced axes, which is how reductions and broadcast gradients are summed without temp
 * space. Header-only: every function is static inline and touches only its arguments. */
#ifndef KILN_K_UTIL_H
#define KILN_K_UTIL_H

#include <string.h>

#include "k_base.h"

#define K_ITER_OPS 4

typedef struct {
  int rank, nops;
  int64_t dim[K_MAX_RANK], idx[K_MAX_RANK];
  int64_t st[K_ITER_OPS][K_MAX_RANK];   /* element strides per operand and axis */
  int64_t off[K_ITER_OPS];              /* current element offset per operand */
} k_iter;

/* Row-major strides of s. */
static inline void k_contig_strides(const k_shape *s, int64_t *st) {
  int64_t m = 1;
  for (int i = s->rank - 1; i >= 0; i--) { st[i] = m; m *= s->d[i]; }
}

/* Strides of s read as out's shape under NumPy broadcasting: s is right-aligned to out's
 * rank and an axis that s has as 1 (or lacks) gets stride 0. */
static inline void k_bcast_strides(const k_shape *s, const k_shape *out, int64_t *st) {
  int64_t own[K_MAX_RANK];
  int lead = out->rank - s->rank;
  k_contig_strides(s, own);
  for (int i = 0; i < out->rank; i++)
    st[i] = (i < lead || s->d[i - lead] == 1) ? 0 : own[i - lead];
}

/* s padded with leading 1s to the given rank (the keepdims view of a broadcast operand). */
static inline k_shape k_shape_align(const k_shape *s, int rank) {
  k_shape r = {rank, {0}};
  int lead = rank - s->rank;
  for (int i = 0; i < rank; i++) r.d[i] = i < lead ? 1 : s->d[i - lead];
  return r;
}

/* An iterator over shape with nops operands whose strides are all zero until set. */
static inline void k_iter_init(k_iter *it, const k_shape *shape, int nops) {
  memset(it, 0, sizeof *it);
  it->rank = shape->rank;
  it->nops = nops;
  for (int i = 0; i < shape->rank; i++) it->dim[i] = shape->d[i];
}

static inline void k_iter_set(k_iter *it, int op, const int64_t *st) {
  for (int i = 0; i < it->rank; i++) it->st[op][i] = st[i];
}

/* Odometer step: bump the last axis, carrying into earlier ones; offsets follow. */
static inline void k_iter_next(k_iter *it) {
  for (int i = it->rank - 1; i >= 0; i--) {
    int carry = ++it->idx[i] == it->dim[i];
    int64_t step = carry ? 1 - it->dim[i] : 1;   /* back to index 0 on a carry */
    for (int k = 0; k < it->nops; k++) it->off[k] += it->st[k][i] * step;
    if (!carry) return;
    it->idx[i] = 0;
  }
}

static inline void k_iter_rewind(k_iter *it) {
  memset(it->idx, 0, sizeof it->idx);
  memset(it->off, 0, sizeof it->off);
}

/* Splits `full` into an outer walk over the axes `keep` retains (keep has full's rank, each
 * axis equal to full's or 1) and an inner walk over the axes keep collapses to 1. The outer
 * walk visits keep's elements in row-major order; add outer.off + inner.off per operand. */
static inline void k_iter_split(k_iter *outer, k_iter *inner, const k_shape *full,
                                const k_shape *keep, int nops) {
  k_shape in_sh = *full;
  for (int i = 0; i < full->rank; i++)
    in_sh.d[i] = (keep->d[i] == 1) ? full->d[i] : 1;
  k_iter_init(outer, keep, nops);
  k_iter_init(inner, &in_sh, nops);
}

static inline void k_iter_split_set(k_iter *outer, k_iter *inner, int op, const int64_t *st) {
  k_iter_set(outer, op, st);
  k_iter_set(inner, op, st);
}

/* Output helpers honouring OpReqType (callers skip kNullOp before looping). */
static inline void k_put(float *o, int64_t i, float v, k_req req) {
  if (req == kAddTo) o[i] += v; else o[i] = v;
}

/* Moves n 4-byte elements (f32 or i32) for a data-movement op; an in-place write onto
 * itself is skipped, kAddTo adds as f32. */
static inline void k_copy_req(void *dst, const void *src, int64_t n, k_req req) {
  if (req == kNullOp || (req != kAddTo && dst == src)) return;
  if (req != kAddTo) { memmove(dst, src, (size_t)n * 4); return; }
  float *d = dst;
  const float *s = src;
  for (int64_t i = 0; i < n; i++) d[i] += s[i];
}

#endif
