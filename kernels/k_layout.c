/* k_layout.c — data movement: reshape, flatten, expand_dims, squeeze (plain copies of a dense
 * buffer), transpose, broadcast_to, slice and concat. Every backward reads only out_grad
 * (in_data shapes are still set). Writes move 4-byte words so i32 tensors pass unchanged. */
#include <string.h>

#include "kernels.h"
#include "k_bview.h"

/* One element move under req: bitwise for writes, f32 addition for kAddTo. */
static inline void k_move(void *dst, int64_t di, const void *src, int64_t si, k_req req) {
  if (req == kAddTo) ((float *)dst)[di] += ((const float *)src)[si];
  else ((uint32_t *)dst)[di] = ((const uint32_t *)src)[si];
}

/* ---- same-layout ops: the dense buffer is unchanged, only the shape differs ---- */
static int k_copy_forward(const k_call *c) {
  k_copy_req(c->out[0].data, c->in[0].data, k_shape_numel(&c->out[0].shape), c->req[0]);
  return 0;
}

static int k_copy_backward(const k_call *c) {
  k_copy_req(c->out[0].data, c->in[0].data, k_shape_numel(&c->out[0].shape), c->req[0]);
  return 0;
}

int k_reshape_forward(const k_call *c) { return k_copy_forward(c); }
int k_reshape_backward(const k_call *c) { return k_copy_backward(c); }
int k_flatten_forward(const k_call *c) { return k_copy_forward(c); }
int k_flatten_backward(const k_call *c) { return k_copy_backward(c); }
int k_expand_dims_forward(const k_call *c) { return k_copy_forward(c); }
int k_expand_dims_backward(const k_call *c) { return k_copy_backward(c); }
int k_squeeze_forward(const k_call *c) { return k_copy_forward(c); }
int k_squeeze_backward(const k_call *c) { return k_copy_backward(c); }

/* ---- transpose: out axis k is in axis axes[k] ----
 * The permutation is collapsed first: size-1 axes dropped, and output neighbours that are also
 * neighbours, in order, in the input merged. When the last output axis is then contiguous in
 * the input too ([B,T,H,D] -> [B,H,T,D]: runs of D) the copy moves whole runs, split over the
 * threads; otherwise it moves 8x8 tiles between the input's innermost axis and the output's. */
typedef struct { int rank; int64_t d[K_MAX_RANK], xs[K_MAX_RANK]; } k_perm_view;

/* y's axes (y = x permuted by axes) with their strides in x. */
static k_perm_view k_perm_collapse(const k_shape *x, const int64_t *axes) {
  int64_t st[K_MAX_RANK];
  k_perm_view v;
  memset(&v, 0, sizeof v);
  k_contig_strides(x, st);
  for (int k = 0; k < x->rank; k++) {
    int64_t d = x->d[axes[k]], s = st[axes[k]];
    if (d == 1) continue;
    if (v.rank && v.xs[v.rank - 1] == s * d) {
      v.d[v.rank - 1] *= d;
      v.xs[v.rank - 1] = s;
      continue;
    }
    v.d[v.rank] = d;
    v.xs[v.rank++] = s;
  }
  if (!v.rank) { v.d[0] = 1; v.xs[0] = 1; v.rank = 1; }
  return v;
}

/* An iterator over v's axes except those in `skip`: operand 0 walks x, operand 1 walks y. */
static int64_t k_perm_iter(const k_perm_view *v, unsigned skip, k_iter *it) {
  int64_t ys[K_MAX_RANK], st[2][K_MAX_RANK], m = 1;
  k_shape s = {0, {0}};
  for (int i = v->rank - 1; i >= 0; i--) { ys[i] = m; m *= v->d[i]; }
  for (int i = 0; i < v->rank; i++) {
    if (skip >> i & 1u) continue;
    st[0][s.rank] = v->xs[i];
    st[1][s.rank] = ys[i];
    s.d[s.rank++] = v->d[i];
  }
  k_iter_init(it, &s, 2);
  k_iter_set(it, 0, st[0]);
  k_iter_set(it, 1, st[1]);
  return k_shape_numel(&s);
}

/* A tile of rows i < ni (x stride 1, y stride ys) by columns j < nj (x stride xs, y stride 1),
 * y = x's transpose: 8 x 8 blocks through vector registers (the columns' 8 contiguous rows of
 * x loaded, transposed by three rounds of shuffles, stored as 8 contiguous columns of y), the
 * ragged edges element by element. Shuffles and stores move bits, so an i32 tensor passes
 * unchanged; kAddTo adds in f32 as k_move does. One element at a time, ConvNeXt's permutes of
 * [96, 3136] ran at ~2.3 G elements/s on a Zen 4. */
typedef struct { uint32_t *y; const uint32_t *x; int64_t ni, nj, ys, xs; k_req req; } k_tile_job;

K_VEC_TARGETS static void k_move_tile_rows(void *ctx, int64_t lo, int64_t hi) {   /* row blocks [lo, hi) of 8 */
  const k_tile_job *t = ctx;
  for (int64_t i0 = lo * 8; i0 < hi * 8 && i0 < t->ni; i0 += 8) {
    int64_t j0 = 0;
    for (; i0 + 8 <= t->ni && j0 + 8 <= t->nj; j0 += 8) {
      const uint32_t *xp = t->x + i0 + j0 * t->xs;
      k_vf8 v0, v1, v2, v3, v4, v5, v6, v7;   /* loaded in place: a 32-byte vector is not returned by value below AVX */
      memcpy(&v0, xp, 32), memcpy(&v1, xp + t->xs, 32), memcpy(&v2, xp + 2 * t->xs, 32), memcpy(&v3, xp + 3 * t->xs, 32);
      memcpy(&v4, xp + 4 * t->xs, 32), memcpy(&v5, xp + 5 * t->xs, 32), memcpy(&v6, xp + 6 * t->xs, 32), memcpy(&v7, xp + 7 * t->xs, 32);
      k_vf8 a0 = __builtin_shufflevector(v0, v1, 0, 8, 1, 9, 4, 12, 5, 13), a1 = __builtin_shufflevector(v0, v1, 2, 10, 3, 11, 6, 14, 7, 15);
      k_vf8 a2 = __builtin_shufflevector(v2, v3, 0, 8, 1, 9, 4, 12, 5, 13), a3 = __builtin_shufflevector(v2, v3, 2, 10, 3, 11, 6, 14, 7, 15);
      k_vf8 a4 = __builtin_shufflevector(v4, v5, 0, 8, 1, 9, 4, 12, 5, 13), a5 = __builtin_shufflevector(v4, v5, 2, 10, 3, 11, 6, 14, 7, 15);
      k_vf8 a6 = __builtin_shufflevector(v6, v7, 0, 8, 1, 9, 4, 12, 5, 13), a7 = __builtin_shufflevector(v6, v7, 2, 10, 3, 11, 6, 14, 7, 15);
      k_vf8 b0 = __builtin_shufflevector(a0, a2, 0, 1, 8, 9, 4, 5, 12, 13), b1 = __builtin_shufflevector(a0, a2, 2, 3, 10, 11, 6, 7, 14, 15);
      k_vf8 b2 = __builtin_shufflevector(a1, a3, 0, 1, 8, 9, 4, 5, 12, 13), b3 = __builtin_shufflevector(a1, a3, 2, 3, 10, 11, 6, 7, 14, 15);
      k_vf8 b4 = __builtin_shufflevector(a4, a6, 0, 1, 8, 9, 4, 5, 12, 13), b5 = __builtin_shufflevector(a4, a6, 2, 3, 10, 11, 6, 7, 14, 15);
      k_vf8 b6 = __builtin_shufflevector(a5, a7, 0, 1, 8, 9, 4, 5, 12, 13), b7 = __builtin_shufflevector(a5, a7, 2, 3, 10, 11, 6, 7, 14, 15);
      k_vf8 r[8] = {__builtin_shufflevector(b0, b4, 0, 1, 2, 3, 8, 9, 10, 11), __builtin_shufflevector(b1, b5, 0, 1, 2, 3, 8, 9, 10, 11),
                    __builtin_shufflevector(b2, b6, 0, 1, 2, 3, 8, 9, 10, 11), __builtin_shufflevector(b3, b7, 0, 1, 2, 3, 8, 9, 10, 11),
                    __builtin_shufflevector(b0, b4, 4, 5, 6, 7, 12, 13, 14, 15), __builtin_shufflevector(b1, b5, 4, 5, 6, 7, 12, 13, 14, 15),
                    __builtin_shufflevector(b2, b6, 4, 5, 6, 7, 12, 13, 14, 15), __builtin_shufflevector(b3, b7, 4, 5, 6, 7, 12, 13, 14, 15)};
      for (int i = 0; i < 8; i++) {   /* r[i]: row i0 + i of the block, columns j0.. of y */
        uint32_t *yp = t->y + (i0 + i) * t->ys + j0;
        if (t->req == kAddTo) {
          k_vf8 old;
          memcpy(&old, yp, sizeof old);
          r[i] += old;
        }
        memcpy(yp, &r[i], sizeof r[i]);
      }
    }
    int64_t ie = i0 + 8 < t->ni ? i0 + 8 : t->ni;
    for (int64_t i = i0; i < ie; i++)   /* the columns past the last whole block (all, in a short last row block) */
      for (int64_t j = j0; j < t->nj; j++) k_move(t->y, i * t->ys + j, t->x, i + j * t->xs, t->req);
  }
}

/* Row blocks split over the threads when the tile is large enough to pay for it. */
static void k_move_tile(uint32_t *y, const uint32_t *x, int64_t ni, int64_t nj, int64_t ys,
                        int64_t xs, k_req req) {
  k_tile_job t = {y, x, ni, nj, ys, xs, req};
  int64_t blocks = (ni + 7) / 8;
  if (ni * nj >= 32768) k_parallel_for(blocks, 1, k_move_tile_rows, &t);
  else k_move_tile_rows(&t, 0, blocks);
}

/* Runs [lo, hi) of a permute whose last output axis is contiguous in x too: run r's offsets
 * unravelled from r over the other axes (y's run r starts at r * run). Runs write disjoint
 * parts of y, so they split over the threads: ViT-B/16's [197, 96, 64] -> [96, 197, 64] ran
 * on one thread, at half ORT's speed on two. */
typedef struct { uint32_t *y; const uint32_t *x; const k_perm_view *v; k_req req; } k_runs_job;

static void k_move_runs(void *ctx, int64_t lo, int64_t hi) {
  const k_runs_job *j = ctx;
  const k_perm_view *v = j->v;
  int64_t run = v->d[v->rank - 1];
  for (int64_t r = lo; r < hi; r++) {
    int64_t rest = r, xo = 0;
    for (int i = v->rank - 2; i >= 0; i--) xo += rest % v->d[i] * v->xs[i], rest /= v->d[i];
    k_copy_req(j->y + r * run, j->x + xo, run, j->req);
  }
}

/* y = x permuted by axes (y's shape is x's permuted). */
static void k_permute(void *y, const void *x, const k_shape *xshape, const int64_t *axes, k_req req) {
  if (req == kNullOp || k_shape_numel(xshape) == 0) return;
  k_perm_view v = k_perm_collapse(xshape, axes);
  int in = v.rank - 1, q = 0;
  k_iter it;
  if (v.xs[in] == 1) {                       /* runs contiguous on both sides */
    k_runs_job j = {y, x, &v, req};
    int64_t runs = k_shape_numel(xshape) / v.d[in];
    k_parallel_for(runs, (16384 + v.d[in] - 1) / v.d[in], k_move_runs, &j);   /* 64 KiB a chunk */
    return;
  }
  while (v.xs[q] != 1) q++;                  /* the output axis that is x's innermost */
  int64_t ys_q = 1;
  for (int i = q + 1; i < v.rank; i++) ys_q *= v.d[i];
  int64_t n = k_perm_iter(&v, 1u << in | 1u << q, &it);
  for (int64_t r = 0; r < n; r++, k_iter_next(&it))
    k_move_tile((uint32_t *)y + it.off[1], (const uint32_t *)x + it.off[0], v.d[q], v.d[in], ys_q,
                v.xs[in], req);
}

int k_transpose_forward(const k_call *c) {
  const k_transpose_param *p = c->param;
  k_permute(c->out[0].data, c->in[0].data, &c->in[0].shape, p->axes.v, c->req[0]);
  return 0;
}

/* og permuted back: gx = og transposed by the inverse permutation. */
int k_transpose_backward(const k_call *c) {
  const k_transpose_param *p = c->param;
  int64_t inv[K_MAX_RANK];
  for (int k = 0; k < p->axes.n; k++) inv[p->axes.v[k]] = k;
  k_permute(c->out[0].data, c->in[0].data, &c->in[0].shape, inv, c->req[0]);
  return 0;
}

/* ---- broadcast_to: runs of the collapsed view, copied (x contiguous along the run) or filled
 * (x broadcast along it) ---- */
int k_broadcast_to_forward(const k_call *c) {
  k_req req = c->req[0];
  if (req == kNullOp || k_shape_numel(&c->out[0].shape) == 0) return 0;
  k_bview v = k_bview_make(&c->out[0].shape, &c->in[0].shape, &c->in[0].shape);
  int in = v.rank - 1;
  int64_t n = v.d[in];
  k_iter it;
  int64_t rows = k_bview_iter(&v, (1u << in) - 1, &it);
  for (int64_t r = 0; r < rows; r++, k_iter_next(&it)) {
    uint32_t *y = (uint32_t *)c->out[0].data + it.off[0];
    const uint32_t *x = (const uint32_t *)c->in[0].data + it.off[1];
    if (v.st[1][in]) k_copy_req(y, x, n, req);
    else for (int64_t k = 0; k < n; k++) k_move(y, k, x, 0, req);
  }
  return 0;
}

/* gx sums og over the axes x was broadcast along. */
int k_broadcast_to_backward(const k_call *c) {
  k_shape keep = k_shape_align(&c->out[0].shape, c->in[0].shape.rank);
  k_breduce_sum(c->in[0].data, &c->in[0].shape, &keep, c->out[0].data, c->req[0], 1.0f);
  return 0;
}

/* ---- slice and concat view a tensor as [outer, axis, inner] ---- */
static int64_t k_outer(const k_shape *s, int axis) {
  int64_t m = 1;
  for (int i = 0; i < axis; i++) m *= s->d[i];
  return m;
}

static int64_t k_inner(const k_shape *s, int axis) {
  int64_t m = 1;
  for (int i = axis + 1; i < s->rank; i++) m *= s->d[i];
  return m;
}

/* The input index along the axis of output index i: step > 0 walks up from begin, step < 0
 * down from end - 1 (inference clamped |step| to the axis, so nothing overflows). */
static int64_t k_slice_at(const k_slice_param *p, int64_t i) {
  return p->step > 0 ? p->begin + i * p->step : p->end - 1 + i * p->step;
}

int k_slice_forward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  const k_slice_param *p = c->param;
  const k_shape *xs = &c->in[0].shape;
  int64_t outer = k_outer(xs, p->axis), inner = k_inner(xs, p->axis), d = xs->d[p->axis];
  int64_t n = c->out[0].shape.d[p->axis];
  const uint32_t *x = c->in[0].data;
  uint32_t *y = c->out[0].data;
  for (int64_t o = 0; o < outer; o++) {
    if (p->step == 1) {      /* x.narrow: one run per outer index */
      k_copy_req(y + o * n * inner, x + (o * d + p->begin) * inner, n * inner, c->req[0]);
      continue;
    }
    for (int64_t i = 0; i < n; i++)      /* inner == 1 (the last axis): element by element */
      if (inner == 1) k_move(y, o * n + i, x, o * d + k_slice_at(p, i), c->req[0]);
      else k_copy_req(y + (o * n + i) * inner, x + (o * d + k_slice_at(p, i)) * inner, inner, c->req[0]);
  }
  return 0;
}

/* gx is og at the positions the slice took and zero elsewhere (left alone under kAddTo). */
int k_slice_backward(const k_call *c) {
  k_req req = c->req[0];
  if (req == kNullOp) return 0;
  const k_slice_param *p = c->param;
  const k_shape *xs = &c->out[0].shape;
  int64_t outer = k_outer(xs, p->axis), inner = k_inner(xs, p->axis), d = xs->d[p->axis];
  int64_t n = c->in[0].shape.d[p->axis];
  const float *og = c->in[0].data;
  float *gx = c->out[0].data;
  for (int64_t o = 0; o < outer; o++) {
    float *row = gx + o * d * inner;
    if (p->step == 1) {
      k_copy_req(row + p->begin * inner, og + o * n * inner, n * inner, req);
      if (req == kAddTo) continue;
      memset(row, 0, (size_t)(p->begin * inner) * sizeof(float));
      memset(row + p->end * inner, 0, (size_t)((d - p->end) * inner) * sizeof(float));
      continue;
    }
    /* The positions taken are distinct, so zeroing the row first and then writing each is exact. */
    if (req != kAddTo) memset(row, 0, (size_t)(d * inner) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
      if (inner == 1) k_move(row, k_slice_at(p, i), og, o * n + i, req);
      else k_copy_req(row + k_slice_at(p, i) * inner, og + (o * n + i) * inner, inner, req);
  }
  return 0;
}

/* Forward in = the pieces; out row o is piece 0's row o, then piece 1's, and so on. A piece
 * the plan put where it would be copied (passes/pass_plan.c, pass_plan_concat) is a copy onto
 * itself, which k_copy_req skips. */
int k_concat_forward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  int dim = ((const k_concat_param *)c->param)->dim;
  const k_shape *ys = &c->out[0].shape;
  int64_t outer = k_outer(ys, dim), inner = k_inner(ys, dim), row = ys->d[dim] * inner, at = 0;
  for (int k = 0; k < c->nin; k++) {
    int64_t len = c->in[k].shape.d[dim] * inner;
    const uint32_t *x = c->in[k].data;
    for (int64_t o = 0; o < outer; o++)
      k_copy_req((uint32_t *)c->out[0].data + o * row + at, x + o * len, len, c->req[0]);
    at += len;
  }
  return 0;
}

/* Backward in = [og, pieces (NULL)..., out (NULL)], out = one gradient per piece. */
int k_concat_backward(const k_call *c) {
  int dim = ((const k_concat_param *)c->param)->dim;
  const k_shape *ys = &c->in[0].shape;
  int64_t outer = k_outer(ys, dim), inner = k_inner(ys, dim), row = ys->d[dim] * inner, at = 0;
  const float *og = c->in[0].data;
  for (int k = 0; k < c->nout; k++) {
    int64_t len = c->in[1 + k].shape.d[dim] * inner;
    for (int64_t o = 0; o < outer && c->req[k] != kNullOp; o++)
      k_copy_req((float *)c->out[k].data + o * len, og + o * row + at, len, c->req[k]);
    at += len;
  }
  return 0;
}
