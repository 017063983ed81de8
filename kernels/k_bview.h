/* k_bview.h — broadcast views collapsed to few axes, and the blocked loops built on them, for
 * the vectorised elementwise, broadcast-gradient and reduction kernels (k_elemwise.c,
 * k_reduce.c, k_layout.c). A view drops size-1 axes and merges neighbours every operand steps
 * through as one, so [B,T,D] + [D] becomes [B*T, D] and the innermost axis is a contiguous
 * run (stride 1) or a broadcast one (stride 0) for every operand. Per-element work happens in
 * op-specific block functions the compiler can vectorise; these drivers only walk the runs.
 * Every reduction here sums in one fixed order (row-major over the reduced axes, lanes of
 * K_LANES combined pairwise) inside one unit of work, and units are what k_parallel_for
 * splits, so results do not depend on the thread count. */
#ifndef KILN_K_BVIEW_H
#define KILN_K_BVIEW_H

#include "k_parallel.h"
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
 * Operand j (1 or 2) of the view receives, per element, the sum (or another combine, such as
 * max) over the output positions it was broadcast to of a per-element term g(og, x1, x2, y),
 * where og and y are read at the output's offsets. The op supplies g through two block
 * functions (shown for a sum):
 *   cols: t[k] = g(...) (first) or t[k] += g(...) for k < n, operand strides s1, s2 on k;
 *   rows: lanes[k % K_LANES] += g(...) for k < n, in that order.
 * og, x1, x2, y point at element 0 of the run. */
typedef struct {
  const float *og, *x1, *x2, *y;
} k_bsrc;
typedef void (*k_cols_fn)(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                          int64_t s2);
typedef void (*k_rows_fn)(float *restrict lanes, k_bsrc s, int64_t n, int64_t s1, int64_t s2);

/* A reduction: its block functions, the lanes' starting value and how lanes combine. */
typedef struct {
  k_cols_fn cols;
  k_rows_fn rows;
  float init;                        /* 0 for a sum, -inf for a max */
  float (*finish)(float *lanes);     /* k_lanes_sum, k_lanes_max */
  /* NULL, or applied to each result before it is scaled and stored, with operand 2's
   * element at that output position: the sqrt of a 2-norm, logsumexp's log(sum) + max */
  float (*post)(float acc, float x2);
} k_reducer;

/* Offsets of the three operands at position `index` of the row-major walk over mask's axes. */
static inline void k_bview_at(const k_bview *v, unsigned mask, int64_t index, int64_t off[3]) {
  off[0] = off[1] = off[2] = 0;
  for (int i = v->rank - 1; i >= 0; i--) {
    if (!(mask >> i & 1u)) continue;
    int64_t c = index % v->d[i];
    index /= v->d[i];
    for (int op = 0; op < 3; op++) off[op] += c * v->st[op][i];
  }
}

static inline k_bsrc k_bsrc_at(k_bsrc s, const int64_t *a, const int64_t *b, int64_t k0,
                               const k_bview *v, int in) {
  k_bsrc r = {s.og + a[0] + b[0] + k0, s.x1 + a[1] + b[1] + k0 * v->st[1][in],
              s.x2 + a[2] + b[2] + k0 * v->st[2][in], s.y + a[0] + b[0] + k0};
  return r;
}

/* One reduction, split by k_parallel_for over units: a unit is one block of one kept run
 * (cols) or one kept element (rows); each unit sums every reduced position in order itself,
 * so the split changes no bits. */
typedef struct {
  const k_bview *v;
  int j, in;
  k_bsrc s;
  float *out;
  k_req req;
  float scale;
  const k_reducer *r;
  unsigned kmask, rmask;      /* the kept axes walked per unit, the reduced ones */
  int64_t nb;                 /* blocks per run (cols) */
} k_breduce_job;

/* Innermost axis kept by j: a block of the run accumulates over every reduced position, then
 * is stored. With nothing reduced this is the plain elementwise gradient, and a gradient
 * written in place over og reads each block before it overwrites it. */
static inline void k_breduce_cols_range(void *ctx, int64_t lo, int64_t hi) {
  const k_breduce_job *jb = ctx;
  const k_bview *v = jb->v;
  int in = jb->in;
  int64_t n = v->d[in], ko[3], nr;
  float t[K_BLOCK];
  k_iter ro;
  nr = k_bview_iter(v, jb->rmask, &ro);
  for (int64_t u = lo; u < hi; u++) {
    int64_t k0 = u % jb->nb * K_BLOCK, len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK;
    k_bview_at(v, jb->kmask, u / jb->nb, ko);
    k_iter_rewind(&ro);
    for (int64_t q = 0; q < nr; q++, k_iter_next(&ro))
      jb->r->cols(t, q == 0, k_bsrc_at(jb->s, ko, ro.off, k0, v, in), len, v->st[1][in], v->st[2][in]);
    if (jb->r->post) {
      const float *x2 = jb->s.x2 + ko[2] + k0 * v->st[2][in];
      for (int64_t k = 0; k < len; k++) t[k] = jb->r->post(t[k], x2[k * v->st[2][in]]);
    }
    if (jb->scale != 1.0f) for (int64_t k = 0; k < len; k++) t[k] *= jb->scale;
    k_store_block(jb->out + ko[jb->j] + k0, t, len, jb->req);
  }
}

/* Innermost axis reduced for j: each kept element sums its runs horizontally. */
static inline void k_breduce_rows_range(void *ctx, int64_t lo, int64_t hi) {
  const k_breduce_job *jb = ctx;
  const k_bview *v = jb->v;
  int in = jb->in;
  int64_t ko[3], nr;
  k_iter ro;
  nr = k_bview_iter(v, jb->rmask, &ro);
  for (int64_t u = lo; u < hi; u++) {
    float lanes[K_LANES];
    for (int i = 0; i < K_LANES; i++) lanes[i] = jb->r->init;
    k_bview_at(v, jb->kmask, u, ko);
    k_iter_rewind(&ro);
    for (int64_t q = 0; q < nr; q++, k_iter_next(&ro))
      jb->r->rows(lanes, k_bsrc_at(jb->s, ko, ro.off, 0, v, in), v->d[in], v->st[1][in], v->st[2][in]);
    float acc = jb->r->finish(lanes);
    if (jb->r->post) acc = jb->r->post(acc, jb->s.x2[ko[2]]);
    k_put(jb->out, ko[jb->j], jb->scale * acc, jb->req);
  }
}

/* Reduces the view onto operand j's buffer `out` (its numel elements) under req, each sum
 * multiplied by scale (1 for a sum, 1/count for a mean). */
static inline void k_breduce(const k_bview *v, int j, k_bsrc s, float *out, int64_t numel,
                             k_req req, float scale, const k_reducer *r) {
  if (req == kNullOp) return;
  int in = v->rank - 1;
  int64_t total = 1;
  for (int i = 0; i < v->rank; i++) total *= v->d[i];
  if (total == 0) {     /* every sum is over nothing: 0, or NaN for a mean (scale 1/0) */
    for (int64_t i = 0; i < numel && req != kAddTo; i++) out[i] = 0.0f * scale;
    return;
  }
  unsigned kept = k_bview_kept(v, j), all = (1u << v->rank) - 1;
  int is_cols = v->st[j][in] != 0;
  k_breduce_job jb = {v, j, in, s, out, req, scale, r, kept & ~(1u << in),
                      all & ~kept & ~(1u << in), (v->d[in] + K_BLOCK - 1) / K_BLOCK};
  int64_t run = v->d[in] < K_BLOCK ? v->d[in] : K_BLOCK;
  int64_t per_unit = total / numel * (is_cols ? run : 1);     /* elements read per unit */
  if (is_cols) k_parallel_for(numel / v->d[in] * jb.nb, k_vec_grain(per_unit), k_breduce_cols_range, &jb);
  else k_parallel_for(numel, k_vec_grain(per_unit), k_breduce_rows_range, &jb);
}

/* ---- plain sums: x (shape full) summed onto `keep` (full's rank, each axis full's or 1) ---- */
K_VEC_TARGETS static void k_sum_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                              int64_t s2) {
  if (first) for (int64_t k = 0; k < n; k++) t[k] = s.og[k];
  else for (int64_t k = 0; k < n; k++) t[k] += s.og[k];
}

K_VEC_TARGETS static void k_sum_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) {
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] += s.og[k + i];
  for (int i = 0; k + i < n; i++) l[i] += s.og[k + i];
}

/* Rows of n contiguous floats, each summed as k_sum_rows and k_lanes_sum sum it (the same
 * additions in the same order: the same bits) without the general walk's per-row cost (the
 * view's offsets, an iterator, calls through the reducer): a global mean of NCHW rows of 49
 * (MnasNet's, ShuffleNet's last step) spent more on those than on its additions. */
typedef struct { const float *x; float *out; int64_t n; float scale; k_req req; } k_rowsum_job;

K_VEC_TARGETS static void k_rowsum_range(void *ctx, int64_t lo, int64_t hi) {
  const k_rowsum_job *j = ctx;
  int64_t n = j->n;
  for (int64_t u = lo; u < hi; u++) {
    const float *x = j->x + u * n;
    float l[K_LANES] = {0};
    k_sum_rows(l, (k_bsrc){x, x, x, x}, n, 0, 0);
    k_put(j->out, u, j->scale * k_lanes_sum(l), j->req);
  }
}

/* out (keep's elements) = scale * the sums of x over the axes keep has as 1, under req. */
static inline void k_breduce_sum(const float *x, const k_shape *full, const k_shape *keep,
                                 float *out, k_req req, float scale) {
  k_bview v = k_bview_make(full, keep, keep);
  if (req != kNullOp && v.rank == 2 && v.st[1][0] == 1 && v.st[1][1] == 0 && v.d[1] > 0) {   /* [rows, n], n summed */
    k_rowsum_job j = {x, out, v.d[1], scale, req};
    k_parallel_for(v.d[0], k_vec_grain(v.d[1]), k_rowsum_range, &j);
    return;
  }
  k_bsrc s = {x, x, x, x};
  static const k_reducer sum = {k_sum_cols, k_sum_rows, 0.0f, k_lanes_sum, NULL};
  k_breduce(&v, 1, s, out, k_shape_numel(keep), req, scale, &sum);
}

#endif
