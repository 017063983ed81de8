/* k_bview.h — broadcast views collapsed to few axes, and the blocked loops built on them, for
 * the vectorised elementwise, broadcast-gradient and reduction kernels (k_elemwise.c,
 * k_reduce.c, k_layout.c). A view drops size-1 axes and merges neighbours every operand steps
 * through as one, so [B,T,D] + [D] becomes [B*T, D] and the innermost axis is a contiguous
 * run (stride 1) or a broadcast one (stride 0) for every operand. Per-element work happens in
 * op-specific block functions the compiler can vectorise; these drivers only walk the runs.
 * Every reduction here sums in one fixed order (row-major over the reduced axes, lanes of
 * K_LANES combined pairwise), so results do not depend on how the work is split. */
#ifndef KILN_K_BVIEW_H
#define KILN_K_BVIEW_H

#include "k_util.h"
#include "k_vec.h"


/* Operand 0 is the output (contiguous), 1 and 2 the broadcast inputs. */
typedef struct {
  int rank;                         /* >= 1 */
  int64_t d[K_MAX_RANK];
  int64_t st[3][K_MAX_RANK];        /* element strides; 0 on an axis an operand broadcasts */
} k_bview;

/* out's shape as read by x1 and x2 under NumPy broadcasting, collapsed. A view of one element
 * (or of none) keeps one axis so every driver has an innermost run. */
static inline k_bview k_bview_make(const k_shape *out, const k_shape *x1, const k_shape *x2) {
  int64_t s1[K_MAX_RANK], s2[K_MAX_RANK];
  k_bview v;
  memset(&v, 0, sizeof v);
  k_bcast_strides(x1, out, s1);
  k_bcast_strides(x2, out, s2);
  for (int i = 0; i < out->rank; i++) {
    int r = v.rank;
    if (out->d[i] == 1) continue;
    if (r > 0 && v.st[1][r - 1] == s1[i] * out->d[i] && v.st[2][r - 1] == s2[i] * out->d[i]) {
      v.d[r - 1] *= out->d[i];
      v.st[1][r - 1] = s1[i];
      v.st[2][r - 1] = s2[i];
      continue;
    }
    v.d[r] = out->d[i];
    v.st[1][r] = s1[i];
    v.st[2][r] = s2[i];
    v.rank++;
  }
  if (v.rank == 0) v.d[v.rank++] = 1;
  int64_t m = 1;
  for (int i = v.rank - 1; i >= 0; i--) { v.st[0][i] = m; m *= v.d[i]; }
  return v;
}

/* An iterator over the view's axes in `mask` (bit i = axis i), carrying all three operands'
 * offsets; returns how many positions it visits. */
static inline int64_t k_bview_iter(const k_bview *v, unsigned mask, k_iter *it) {
  k_shape s;
  int64_t st[3][K_MAX_RANK];
  s.rank = 0;
  for (int i = 0; i < v->rank; i++) {
    if (!(mask >> i & 1u)) continue;
    for (int op = 0; op < 3; op++) st[op][s.rank] = v->st[op][i];
    s.d[s.rank++] = v->d[i];
  }
  k_iter_init(it, &s, 3);
  for (int op = 0; op < 3; op++) k_iter_set(it, op, st[op]);
  return k_shape_numel(&s);
}

/* Axes where operand op is not broadcast. */
static inline unsigned k_bview_kept(const k_bview *v, int op) {
  unsigned m = 0;
  for (int i = 0; i < v->rank; i++) m |= (v->st[op][i] != 0) << i;
  return m;
}

/* ---- reducing a broadcast view onto one operand ----
 * Operand j (1 or 2) of the view receives, per element, the sum over the output positions it
 * was broadcast to of a per-element term g(og, x1, x2, y), where og and y are read at the
 * output's offsets. The op supplies g through two block functions:
 *   cols: t[k] = g(...) (first) or t[k] += g(...) for k < n, operand strides s1, s2 on k;
 *   rows: lanes[k % K_LANES] += g(...) for k < n, in that order.
 * og, x1, x2, y point at element 0 of the run. */
typedef struct {
  const float *og, *x1, *x2, *y;
} k_bsrc;
typedef void (*k_cols_fn)(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                          int64_t s2);
typedef void (*k_rows_fn)(float *restrict lanes, k_bsrc s, int64_t n, int64_t s1, int64_t s2);

static inline k_bsrc k_bsrc_at(k_bsrc s, const k_iter *a, const k_iter *b, int64_t k0,
                               const k_bview *v, int in) {
  k_bsrc r = {s.og + a->off[0] + b->off[0] + k0, s.x1 + a->off[1] + b->off[1] + k0 * v->st[1][in],
              s.x2 + a->off[2] + b->off[2] + k0 * v->st[2][in], s.y + a->off[0] + b->off[0] + k0};
  return r;
}

/* Innermost axis kept by j: blocks of the run accumulate over every reduced position, then
 * are stored. With nothing reduced this is the plain elementwise gradient, and a gradient
 * written in place over og reads each block before it overwrites it. */
static inline void k_breduce_cols(const k_bview *v, int j, k_bsrc s, float *out, k_req req,
                                  float scale, k_cols_fn cols) {
  int in = v->rank - 1;
  unsigned kept = k_bview_kept(v, j), all = (1u << v->rank) - 1;
  k_iter ko, ro;
  int64_t nk = k_bview_iter(v, kept & ~(1u << in), &ko), nr = k_bview_iter(v, all & ~kept, &ro);
  int64_t n = v->d[in];
  float t[K_BLOCK];
  for (int64_t p = 0; p < nk; p++, k_iter_next(&ko))
    for (int64_t k0 = 0; k0 < n; k0 += K_BLOCK) {
      int64_t len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK;
      k_iter_rewind(&ro);
      for (int64_t q = 0; q < nr; q++, k_iter_next(&ro))
        cols(t, q == 0, k_bsrc_at(s, &ko, &ro, k0, v, in), len, v->st[1][in], v->st[2][in]);
      if (scale != 1.0f) for (int64_t k = 0; k < len; k++) t[k] *= scale;
      k_store_block(out + ko.off[j] + k0, t, len, req);
    }
}

/* Innermost axis reduced for j: each kept element sums its runs horizontally. */
static inline void k_breduce_rows(const k_bview *v, int j, k_bsrc s, float *out, k_req req,
                                  float scale, k_rows_fn rows) {
  int in = v->rank - 1;
  unsigned kept = k_bview_kept(v, j), all = (1u << v->rank) - 1;
  k_iter ko, ro;
  int64_t nk = k_bview_iter(v, kept, &ko), nr = k_bview_iter(v, all & ~kept & ~(1u << in), &ro);
  for (int64_t p = 0; p < nk; p++, k_iter_next(&ko)) {
    float lanes[K_LANES] = {0};
    k_iter_rewind(&ro);
    for (int64_t q = 0; q < nr; q++, k_iter_next(&ro))
      rows(lanes, k_bsrc_at(s, &ko, &ro, 0, v, in), v->d[in], v->st[1][in], v->st[2][in]);
    k_put(out, ko.off[j], scale * k_lanes_sum(lanes), req);
  }
}

/* Reduces the view onto operand j's buffer `out` (its numel elements) under req, each sum
 * multiplied by scale (1 for a sum, 1/count for a mean). */
static inline void k_breduce(const k_bview *v, int j, k_bsrc s, float *out, int64_t numel,
                             k_req req, float scale, k_cols_fn cols, k_rows_fn rows) {
  if (req == kNullOp) return;
  int64_t total = 1;
  for (int i = 0; i < v->rank; i++) total *= v->d[i];
  if (total == 0) {     /* every sum is over nothing: 0, or NaN for a mean (scale 1/0) */
    for (int64_t i = 0; i < numel && req != kAddTo; i++) out[i] = 0.0f * scale;
    return;
  }
  if (v->st[j][v->rank - 1]) k_breduce_cols(v, j, s, out, req, scale, cols);
  else k_breduce_rows(v, j, s, out, req, scale, rows);
}

/* ---- plain sums: x (shape full) summed onto `keep` (full's rank, each axis full's or 1) ---- */
static inline void k_sum_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                              int64_t s2) {
  if (first) for (int64_t k = 0; k < n; k++) t[k] = s.og[k];
  else for (int64_t k = 0; k < n; k++) t[k] += s.og[k];
}

static inline void k_sum_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) {
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] += s.og[k + i];
  for (int i = 0; k + i < n; i++) l[i] += s.og[k + i];
}

/* out (keep's elements) = scale * the sums of x over the axes keep has as 1, under req. */
static inline void k_breduce_sum(const float *x, const k_shape *full, const k_shape *keep,
                                 float *out, k_req req, float scale) {
  k_bview v = k_bview_make(full, keep, keep);
  k_bsrc s = {x, x, x, x};
  k_breduce(&v, 1, s, out, k_shape_numel(keep), req, scale, k_sum_cols, k_sum_rows);
}

#endif
