/* rtc_ops_lib.c — host halves of the library kernels (kernels/cuda/kc_ops.cu): each op reads
 * its rtc_call the way its CPU kernel reads its k_call (slots, shapes, param, req), fills a
 * kc_args.h struct and launches by name. No library op has a prepare, so none uses scratch
 * (clip_norm, which is no op, does: the runtime reserves it, rtc_clip_work_bytes):
 * where a result needs a sum, one thread per row / channel / group folds it, and two-phase ops
 * (batch_norm, layer_norm's gradient) keep their intermediates in outputs the CPU also writes.
 * Launches of nothing (empty tensors, kNullOp outputs) are skipped. */
#include <math.h>
#include <string.h>

#include "rtc_ops_lib.h"
#include "kc_args.h"

/* Launches kc_<name> over n threads; 0 threads launch nothing. */
static int rtc_go(rtc_ctx *c, const char *name, int64_t n, const void *a, size_t size) {
  return n <= 0 ? 0 : rtc_launch(c, name, n, a, size);
}
#define RTC_GO(c, kname, n, a) rtc_go((c), "kc_" #kname, (n), &(a), sizeof(a))

static const void *rtc_param(const rtc_call *k) { return k->param; }

static void rtc_contig(const k_shape *s, int64_t *st) {
  int64_t m = 1;
  for (int i = s->rank - 1; i >= 0; i--) {
    st[i] = m;
    m *= s->d[i];
  }
}

/* A hidden or optional output: NULL when pruned (kNullOp or no slot). */
static float *rtc_out_opt(const rtc_call *k, int j) {
  return (k->nout > j && k->req[j] != kNullOp) ? (float *)k->out[j] : NULL;
}

static int rtc_fill(rtc_ctx *c, float *y, int64_t n, float v, k_req req) {
  kc_fill_args a = {y, n, v, (int32_t)req};
  return req == kNullOp ? 0 : RTC_GO(c, fill, n, a);
}

/* ---- data movement on kc_strided ---- */

static kc_strided_args rtc_strided_of(void *y, const void *x, const k_shape *d, k_req req) {
  kc_strided_args a;
  memset(&a, 0, sizeof a);
  a.y = y;
  a.x = x;
  a.rank = d->rank;
  a.req = (int32_t)req;
  a.n = k_shape_numel(d);
  a.scale = 1.0f;
  for (int i = 0; i < d->rank; i++) a.d[i] = d->d[i];
  rtc_contig(d, a.xs);
  rtc_contig(d, a.ys);
  return a;
}

/* n dense 4-byte elements under req; an in-place write is nothing (k_copy_req). */
static int rtc_copy(rtc_ctx *c, void *y, const void *x, int64_t n, k_req req) {
  if (req == kNullOp || (req != kAddTo && y == x)) return 0;
  k_shape s = {1, {n}};
  kc_strided_args a = rtc_strided_of(y, x, &s, req);
  return RTC_GO(c, strided, a.n, a);
}

static int rtc_copy_fwd(rtc_ctx *c, const rtc_call *k) {
  return rtc_copy(c, k->out[0], k->in[0], k_shape_numel(&k->out_shape[0]), k->req[0]);
}

int rtc_reshape_forward(rtc_ctx *c, const rtc_call *k) { return rtc_copy_fwd(c, k); }
int rtc_reshape_backward(rtc_ctx *c, const rtc_call *k) { return rtc_copy_fwd(c, k); }
int rtc_flatten_forward(rtc_ctx *c, const rtc_call *k) { return rtc_copy_fwd(c, k); }
int rtc_flatten_backward(rtc_ctx *c, const rtc_call *k) { return rtc_copy_fwd(c, k); }
int rtc_expand_dims_forward(rtc_ctx *c, const rtc_call *k) { return rtc_copy_fwd(c, k); }
int rtc_expand_dims_backward(rtc_ctx *c, const rtc_call *k) { return rtc_copy_fwd(c, k); }
int rtc_squeeze_forward(rtc_ctx *c, const rtc_call *k) { return rtc_copy_fwd(c, k); }
int rtc_squeeze_backward(rtc_ctx *c, const rtc_call *k) { return rtc_copy_fwd(c, k); }

/* y = x permuted: y's axis j is x's axis axes[j]. */
static int rtc_permute(rtc_ctx *c, void *y, const void *x, const k_shape *xs, const int64_t *axes, k_req req) {
  int64_t st[K_MAX_RANK];
  k_shape ys = *xs;
  if (req == kNullOp) return 0;
  rtc_contig(xs, st);
  for (int j = 0; j < xs->rank; j++) ys.d[j] = xs->d[axes[j]];
  kc_strided_args a = rtc_strided_of(y, x, &ys, req);
  for (int j = 0; j < xs->rank; j++) a.xs[j] = st[axes[j]];
  return RTC_GO(c, strided, a.n, a);
}

int rtc_transpose_forward(rtc_ctx *c, const rtc_call *k) {
  const k_transpose_param *p = rtc_param(k);
  return rtc_permute(c, k->out[0], k->in[0], &k->in_shape[0], p->axes.v, k->req[0]);
}

int rtc_transpose_backward(rtc_ctx *c, const rtc_call *k) {
  const k_transpose_param *p = rtc_param(k);
  int64_t inv[K_MAX_RANK];
  for (int j = 0; j < p->axes.n; j++) inv[p->axes.v[j]] = j;
  return rtc_permute(c, k->out[0], k->in[0], &k->in_shape[0], inv, k->req[0]);
}

/* x's shape right-aligned to rank r (leading 1s), as numpy broadcasting reads it. */
static k_shape rtc_align(const k_shape *x, int r) {
  k_shape s = {r, {0}};
  int lead = r - x->rank;
  for (int i = 0; i < r; i++) s.d[i] = i < lead ? 1 : x->d[i - lead];
  return s;
}

int rtc_broadcast_to_forward(rtc_ctx *c, const rtc_call *k) {
  const k_shape *ys = &k->out_shape[0];
  k_shape xs = rtc_align(&k->in_shape[0], ys->rank);
  int64_t st[K_MAX_RANK];
  if (k->req[0] == kNullOp) return 0;
  rtc_contig(&xs, st);
  kc_strided_args a = rtc_strided_of(k->out[0], k->in[0], ys, k->req[0]);
  for (int i = 0; i < ys->rank; i++) a.xs[i] = xs.d[i] == 1 ? 0 : st[i];
  return RTC_GO(c, strided, a.n, a);
}

/* ---- reductions on kc_reduce: axes with bit i of `red` set are folded ---- */

static kc_reduce_args rtc_reduce_of(float *y, const float *x, const k_shape *xs, unsigned red, k_req req) {
  kc_reduce_args a;
  int64_t st[K_MAX_RANK];
  memset(&a, 0, sizeof a);
  a.y = y;
  a.x = x;
  a.req = (int32_t)req;
  a.nk = a.nr = 1;
  a.scale = 1.0f;
  rtc_contig(xs, st);
  for (int i = 0; i < xs->rank; i++) {
    if (red >> i & 1u) {
      a.rd[a.rrank] = xs->d[i];
      a.rxs[a.rrank++] = st[i];
      a.nr *= xs->d[i];
    } else {
      a.kd[a.krank] = xs->d[i];
      a.kxs[a.krank++] = st[i];
      a.nk *= xs->d[i];
    }
  }
  return a;
}

/* kc_reduce: a thread a group, or a block a group for a sum-like op whose groups are long, or
 * few and not short (RTC_RED_BLOCK_*). */
enum { RTC_RED_BLOCK_LONG = 256, RTC_RED_BLOCK_FEW = 8192, RTC_RED_BLOCK_MIN = 32 };

static int rtc_reduce_go(rtc_ctx *c, kc_reduce_args *a) {
  int sumlike = a->op == KC_RED_SUM || a->op == KC_RED_L1 || a->op == KC_RED_L2;
  a->block = sumlike && (a->nr >= RTC_RED_BLOCK_LONG || (a->nr >= RTC_RED_BLOCK_MIN && a->nk < RTC_RED_BLOCK_FEW));
  return rtc_go(c, "kc_reduce", a->block ? a->nk * KC_BLOCK : a->nk, a, sizeof *a);
}

/* Sums (times scale) with k_breduce's rule for groups of nothing: 0 * scale, kAddTo untouched. */
static int rtc_reduce_sum(rtc_ctx *c, kc_reduce_args *a) {
  if (a->req == kNullOp) return 0;
  if (a->nr == 0) return a->req == kAddTo ? 0 : rtc_fill(c, a->y, a->nk, 0.0f * a->scale, kWriteTo);
  return rtc_reduce_go(c, a);
}

static unsigned rtc_axes_mask(const k_ints *axes) {
  unsigned m = 0;
  for (int i = 0; i < axes->n; i++) m |= 1u << axes->v[i];
  return m;
}

/* gx sums og over the axes x was broadcast along. */
int rtc_broadcast_to_backward(rtc_ctx *c, const rtc_call *k) {
  const k_shape *ys = &k->in_shape[0];
  k_shape xs = rtc_align(&k->out_shape[0], ys->rank);
  unsigned red = 0;
  for (int i = 0; i < ys->rank; i++)
    if (xs.d[i] == 1 && ys->d[i] != 1) red |= 1u << i;
  kc_reduce_args a = rtc_reduce_of(k->out[0], k->in[0], ys, red, k->req[0]);
  return rtc_reduce_sum(c, &a);
}

static int rtc_sum_mean_forward(rtc_ctx *c, const rtc_call *k, int mean) {
  const k_reduce_param *p = rtc_param(k);
  kc_reduce_args a = rtc_reduce_of(k->out[0], k->in[0], &k->in_shape[0], rtc_axes_mask(&p->axis), k->req[0]);
  int64_t n = a.nk * a.nr;
  if (mean) a.scale = n == 0 ? INFINITY : (float)((double)a.nk / (double)n);
  return rtc_reduce_sum(c, &a);
}

/* gx = og broadcast over each group, times 1 (sum) or count / n (mean). */
static int rtc_sum_mean_backward(rtc_ctx *c, const rtc_call *k, int mean) {
  const k_reduce_param *p = rtc_param(k);
  const k_shape *xs = &k->out_shape[0];
  k_shape keep = *xs;
  unsigned red = rtc_axes_mask(&p->axis);
  int64_t st[K_MAX_RANK];
  if (k->req[0] == kNullOp) return 0;
  for (int i = 0; i < xs->rank; i++)
    if (red >> i & 1u) keep.d[i] = 1;
  int64_t n = k_shape_numel(xs), nk = k_shape_numel(&keep);
  rtc_contig(&keep, st);
  kc_strided_args a = rtc_strided_of(k->out[0], k->in[0], xs, k->req[0]);
  for (int i = 0; i < xs->rank; i++) a.xs[i] = red >> i & 1u ? 0 : st[i];
  a.use_scale = 1;
  a.scale = (mean && nk) ? (float)((double)nk / (double)n) : 1.0f;
  return RTC_GO(c, strided, a.n, a);
}

int rtc_sum_forward(rtc_ctx *c, const rtc_call *k) { return rtc_sum_mean_forward(c, k, 0); }
int rtc_mean_forward(rtc_ctx *c, const rtc_call *k) { return rtc_sum_mean_forward(c, k, 1); }
int rtc_sum_backward(rtc_ctx *c, const rtc_call *k) { return rtc_sum_mean_backward(c, k, 0); }
int rtc_mean_backward(rtc_ctx *c, const rtc_call *k) { return rtc_sum_mean_backward(c, k, 1); }

int rtc_max_forward(rtc_ctx *c, const rtc_call *k) {
  const k_reduce_param *p = rtc_param(k);
  if (k->req[0] == kNullOp) return 0;
  kc_reduce_args a = rtc_reduce_of(k->out[0], k->in[0], &k->in_shape[0], rtc_axes_mask(&p->axis), k->req[0]);
  if (a.nr == 0 && a.nk > 0) return rtc_fail(c, "max: reduction over an empty axis");
  a.op = KC_RED_MAX;
  return RTC_GO(c, reduce, a.nk, a);
}

/* A reduction's backward by a kernel that takes a group a thread (max's and min's ties, prod's
 * zero counts): in = [og, x, y]; out = [gx]. */
static int rtc_group_backward(rtc_ctx *c, const rtc_call *k, const char *kernel) {
  const k_reduce_param *p = rtc_param(k);
  kc_max_grad_args a;
  if (k->req[0] == kNullOp) return 0;
  a.g = rtc_reduce_of(NULL, k->in[1], &k->in_shape[1], rtc_axes_mask(&p->axis), k->req[0]);
  a.gx = k->out[0];
  a.og = k->in[0];
  a.x = k->in[1];
  a.yv = k->in[2];
  return a.g.nr == 0 ? 0 : rtc_go(c, kernel, a.g.nk, &a, sizeof a);
}

int rtc_max_backward(rtc_ctx *c, const rtc_call *k) { return rtc_group_backward(c, k, "kc_max_grad"); }

/* min: max's geometry with a NaN-propagating min; its backward is max's (the ties are the
 * elements equal to y, k_peak_backward). */
int rtc_min_forward(rtc_ctx *c, const rtc_call *k) {
  const k_reduce_param *p = rtc_param(k);
  if (k->req[0] == kNullOp) return 0;
  kc_reduce_args a = rtc_reduce_of(k->out[0], k->in[0], &k->in_shape[0], rtc_axes_mask(&p->axis), k->req[0]);
  if (a.nr == 0 && a.nk > 0) return rtc_fail(c, "min: reduction over an empty axis");
  a.op = KC_RED_MIN;
  return RTC_GO(c, reduce, a.nk, a);
}

int rtc_min_backward(rtc_ctx *c, const rtc_call *k) { return rtc_max_backward(c, k); }

/* prod, logsumexp, norm forward: a thread per group (norm: a block per long group, rtc_reduce_go); groups of nothing are 1 (prod), -inf
 * (logsumexp) or 0 (norm, kAddTo untouched), as k_reduce.c's k_reduce_fill and k_breduce. */
static int rtc_fold_forward(rtc_ctx *c, const rtc_call *k, int32_t op) {
  const k_reduce_param *p = rtc_param(k);
  if (k->req[0] == kNullOp) return 0;
  kc_reduce_args a = rtc_reduce_of(k->out[0], k->in[0], &k->in_shape[0], rtc_axes_mask(&p->axis), k->req[0]);
  a.op = op;
  if (a.nr == 0 && op == KC_RED_PROD) return rtc_fill(c, a.y, a.nk, 1.0f, k->req[0]);
  if (a.nr == 0 && op == KC_RED_LSE) return rtc_fill(c, a.y, a.nk, -INFINITY, k->req[0]);
  if (a.nr == 0) return k->req[0] == kAddTo ? 0 : rtc_fill(c, a.y, a.nk, 0.0f, kWriteTo);
  return rtc_reduce_go(c, &a);
}

int rtc_prod_forward(rtc_ctx *c, const rtc_call *k) { return rtc_fold_forward(c, k, KC_RED_PROD); }
int rtc_logsumexp_forward(rtc_ctx *c, const rtc_call *k) { return rtc_fold_forward(c, k, KC_RED_LSE); }
int rtc_norm_forward(rtc_ctx *c, const rtc_call *k) {
  return rtc_fold_forward(c, k, ((const k_reduce_param *)rtc_param(k))->ord == 1 ? KC_RED_L1 : KC_RED_L2);
}

/* The zero count and the product of the nonzero elements are the CPU's temp: here the group's
 * thread recomputes them. */
int rtc_prod_backward(rtc_ctx *c, const rtc_call *k) { return rtc_group_backward(c, k, "kc_prod_grad"); }

/* in = [og, x, y]; out = [gx]: one thread per element of x, og and y read at its group. */
static int rtc_spread_backward(rtc_ctx *c, const rtc_call *k, int32_t op) {
  const k_reduce_param *p = rtc_param(k);
  const k_shape *xs = &k->in_shape[1];
  unsigned red = rtc_axes_mask(&p->axis);
  k_shape keep = *xs;
  kc_reduce_spread_args a;
  if (k->req[0] == kNullOp) return 0;
  memset(&a, 0, sizeof a);
  for (int i = 0; i < xs->rank; i++)
    if (red >> i & 1u) keep.d[i] = 1;
  rtc_contig(&keep, a.ks);
  for (int i = 0; i < xs->rank; i++) {
    a.d[i] = xs->d[i];
    if (red >> i & 1u) a.ks[i] = 0;
  }
  a.gx = k->out[0];
  a.og = k->in[0];
  a.x = k->in[1];
  a.yv = k->in[2];
  a.n = k_shape_numel(xs);
  a.rank = xs->rank;
  a.op = op;
  a.req = (int32_t)k->req[0];
  return RTC_GO(c, reduce_spread, a.n, a);
}

int rtc_logsumexp_backward(rtc_ctx *c, const rtc_call *k) { return rtc_spread_backward(c, k, KC_RED_LSE); }
int rtc_norm_backward(rtc_ctx *c, const rtc_call *k) {
  return rtc_spread_backward(c, k, ((const k_reduce_param *)rtc_param(k))->ord == 1 ? KC_RED_L1 : KC_RED_L2);
}

/* ---- pad: the param's (before, after) pairs run last axis first (k_pad_param) ---- */

static kc_pad_args rtc_pad_of(const k_shape *x, const k_shape *y, const k_pad_param *p, k_req req) {
  kc_pad_args a;
  memset(&a, 0, sizeof a);
  a.rank = x->rank;
  a.mode = p->mode;
  a.value = p->value;
  a.req = (int32_t)req;
  for (int i = 0; i < x->rank; i++) {
    a.xd[i] = x->d[i];
    a.yd[i] = y->d[i];
    a.before[i] = p->pad.v[2 * (x->rank - 1 - i)];
  }
  return a;
}

int rtc_pad_forward(rtc_ctx *c, const rtc_call *k) {
  kc_pad_args a = rtc_pad_of(&k->in_shape[0], &k->out_shape[0], rtc_param(k), k->req[0]);
  if (k->req[0] == kNullOp) return 0;
  a.y = k->out[0];
  a.x = k->in[0];
  a.n = k_shape_numel(&k->out_shape[0]);
  return RTC_GO(c, pad, a.n, a);
}

/* in = [og, -, -]; out = [gx]: one thread per element of gx, no scatter. */
int rtc_pad_backward(rtc_ctx *c, const rtc_call *k) {
  kc_pad_grad_args a = rtc_pad_of(&k->out_shape[0], &k->in_shape[0], rtc_param(k), k->req[0]);
  if (k->req[0] == kNullOp) return 0;
  a.y = k->out[0];
  a.x = k->in[0];
  a.n = k_shape_numel(&k->out_shape[0]);
  return RTC_GO(c, pad_grad, a.n, a);
}

/* ---- slice and concat ---- */

static int64_t rtc_inner(const k_shape *s, int axis) {
  int64_t m = 1;
  for (int i = axis + 1; i < s->rank; i++) m *= s->d[i];
  return m;
}

static int64_t rtc_outer(const k_shape *s, int axis) {
  int64_t m = 1;
  for (int i = 0; i < axis; i++) m *= s->d[i];
  return m;
}

/* The view of the sliced positions of x (shape xs) as the slice's output shape ys: strides
 * and offset into x. */
static void rtc_slice_view(const k_slice_param *p, const k_shape *xs, int64_t *st, int64_t *off) {
  rtc_contig(xs, st);
  int64_t first = p->step > 0 ? p->begin : p->end - 1;
  *off = first * st[p->axis];
  st[p->axis] *= p->step;
}

int rtc_slice_forward(rtc_ctx *c, const rtc_call *k) {
  const k_slice_param *p = rtc_param(k);
  if (k->req[0] == kNullOp) return 0;
  kc_strided_args a = rtc_strided_of(k->out[0], k->in[0], &k->out_shape[0], k->req[0]);
  rtc_slice_view(p, &k->in_shape[0], a.xs, &a.x0);
  return RTC_GO(c, strided, a.n, a);
}

/* gx is og at the positions taken, zero elsewhere (left alone under kAddTo). */
int rtc_slice_backward(rtc_ctx *c, const rtc_call *k) {
  const k_slice_param *p = rtc_param(k);
  k_req req = k->req[0];
  if (req == kNullOp) return 0;
  if (req != kAddTo && rtc_fill(c, k->out[0], k_shape_numel(&k->out_shape[0]), 0.0f, kWriteTo)) return 1;
  kc_strided_args a = rtc_strided_of(k->out[0], k->in[0], &k->in_shape[0], req == kAddTo ? kAddTo : kWriteTo);
  rtc_slice_view(p, &k->out_shape[0], a.ys, &a.y0);
  return RTC_GO(c, strided, a.n, a);
}

/* One piece of a concat as [outer, len] inside rows of `row`, at column `at`: to_y moves the
 * piece into the whole (forward), else the whole's columns into the piece (backward). With
 * one row it is a dense copy (rtc_copy), nothing when the plan put the piece in place
 * (passes/pass_plan.c, pass_plan_concat). */
static int rtc_concat_piece(rtc_ctx *c, void *whole, void *piece, int64_t outer, int64_t len, int64_t row,
                            int64_t at, int to_y, k_req req) {
  k_shape s = {2, {outer, len}};
  if (req == kNullOp) return 0;
  if (outer == 1) {
    float *slice = (float *)whole + at;
    return to_y ? rtc_copy(c, slice, piece, len, req) : rtc_copy(c, piece, slice, len, req);
  }
  kc_strided_args a = rtc_strided_of(to_y ? whole : piece, to_y ? piece : whole, &s, req);
  int64_t *ws = to_y ? a.ys : a.xs;
  ws[0] = row;
  if (to_y) a.y0 = at;
  else a.x0 = at;
  return RTC_GO(c, strided, a.n, a);
}

int rtc_concat_forward(rtc_ctx *c, const rtc_call *k) {
  int dim = ((const k_concat_param *)rtc_param(k))->dim;
  const k_shape *ys = &k->out_shape[0];
  int64_t inner = rtc_inner(ys, dim), outer = rtc_outer(ys, dim);
  int64_t row = ys->d[dim] * inner, at = 0;
  for (int j = 0; j < k->nin; j++) {
    int64_t len = k->in_shape[j].d[dim] * inner;
    if (rtc_concat_piece(c, k->out[0], k->in[j], outer, len, row, at, 1, k->req[0])) return 1;
    at += len;
  }
  return 0;
}

/* in = [og, pieces (NULL)..., out (NULL)]; out = one gradient per piece. */
int rtc_concat_backward(rtc_ctx *c, const rtc_call *k) {
  int dim = ((const k_concat_param *)rtc_param(k))->dim;
  const k_shape *ys = &k->in_shape[0];
  int64_t inner = rtc_inner(ys, dim), outer = rtc_outer(ys, dim);
  int64_t row = ys->d[dim] * inner, at = 0;
  for (int j = 0; j < k->nout; j++) {
    int64_t len = k->in_shape[1 + j].d[dim] * inner;
    if (rtc_concat_piece(c, k->in[0], k->out[j], outer, len, row, at, 0, k->req[j])) return 1;
    at += len;
  }
  return 0;
}

/* ---- softmax family ---- */

static int rtc_softmax_run(rtc_ctx *c, const rtc_call *k, int is_log, int backward) {
  int axis = ((const k_softmax_param *)rtc_param(k))->axis;
  const k_shape *s = &k->in_shape[0];
  kc_softmax_args a = {k->out[0], backward ? k->in[2] : k->in[0], backward ? k->in[0] : NULL,
                       1, s->d[axis], rtc_inner(s, axis), is_log, (int32_t)k->req[0]};
  if (k->req[0] == kNullOp) return 0;
  for (int i = 0; i < axis; i++) a.outer *= s->d[i];
  if (backward) return RTC_GO(c, softmax_grad, a.outer * a.inner, a);
  return RTC_GO(c, softmax, a.outer * a.inner, a);
}

int rtc_softmax_forward(rtc_ctx *c, const rtc_call *k) { return rtc_softmax_run(c, k, 0, 0); }
int rtc_log_softmax_forward(rtc_ctx *c, const rtc_call *k) { return rtc_softmax_run(c, k, 1, 0); }
int rtc_softmax_backward(rtc_ctx *c, const rtc_call *k) { return rtc_softmax_run(c, k, 0, 1); }
int rtc_log_softmax_backward(rtc_ctx *c, const rtc_call *k) { return rtc_softmax_run(c, k, 1, 1); }

/* forward in = [logits, label]; backward in = [og (scalar), logits, label, loss]. */
int rtc_softmax_cross_entropy_forward(rtc_ctx *c, const rtc_call *k) {
  const k_shape *s = &k->in_shape[0];
  kc_sce_loss_args a = {k->out[0], k->in[0], NULL, k->in[1], s->d[0], s->d[1], (int32_t)k->req[0], k->err};
  if (k->req[0] == kNullOp) return 0;
  return RTC_GO(c, sce_loss, KC_BLOCK, a);
}

int rtc_softmax_cross_entropy_backward(rtc_ctx *c, const rtc_call *k) {
  const k_shape *s = &k->in_shape[1];
  kc_sce_grad_args a = {k->out[0], k->in[1], k->in[0], k->in[2], s->d[0], s->d[1], (int32_t)k->req[0], k->err};
  if (k->req[0] == kNullOp) return 0;
  return RTC_GO(c, sce_grad, a.rows, a);
}

/* ---- pooling: geometry as k_pool.c's k_pool_geometry ---- */

static kc_pool_args rtc_pool_of(const k_shape *x, const k_shape *y, const k_pool_param *p) {
  kc_pool_args g;
  int two = p->kernel.n == 2, r = x->rank, last = p->kernel.n - 1;
  memset(&g, 0, sizeof g);
  g.planes = x->d[0] * x->d[1];
  g.H = two ? x->d[r - 2] : 1;  g.W = x->d[r - 1];
  g.OH = two ? y->d[r - 2] : 1; g.OW = y->d[r - 1];
  g.kh = two ? p->kernel.v[0] : 1;  g.kw = p->kernel.v[last];
  g.sh = two ? p->stride.v[0] : 1;  g.sw = p->stride.v[last];
  g.ph = two ? k_pool_pad_begin(p, 0) : 0; g.pw = k_pool_pad_begin(p, last);
  g.phe = two ? k_pool_pad_end(p, 0) : 0;   g.pwe = k_pool_pad_end(p, last);
  g.cip = p->count_include_pad != 0;
  g.is_max = p->pool_type == K_POOL_MAX;
  return g;
}

int rtc_pooling_forward(rtc_ctx *c, const rtc_call *k) {
  const k_pool_param *p = rtc_param(k);
  if (p->in_block || p->out_block) return rtc_fail(c, "pooling: channel-blocked layouts are CPU-only");
  kc_pool_args a = rtc_pool_of(&k->in_shape[0], &k->out_shape[0], p);
  if (k->req[0] == kNullOp) return 0;
  a.y = k->out[0];
  a.x = k->in[0];
  a.req = (int32_t)k->req[0];
  return RTC_GO(c, pool, a.planes * a.OH * a.OW, a);
}

/* in = [dY, X, Y]: the argmax is recomputed from X, so ties resolve as the forward did. */
int rtc_pooling_backward(rtc_ctx *c, const rtc_call *k) {
  kc_pool_grad_args a = rtc_pool_of(&k->in_shape[1], &k->in_shape[0], rtc_param(k));
  if (k->req[0] == kNullOp) return 0;
  a.y = k->out[0];
  a.x = k->in[1];
  a.dy = k->in[0];
  a.req = (int32_t)k->req[0];
  return RTC_GO(c, pool_grad, a.planes * a.H * a.W, a);
}

/* ---- batch_norm: in = [x, gamma, beta, moving_mean, moving_var], out = [y, mean, invstd] ---- */

static void rtc_bn_dims(const k_shape *s, int axis, int64_t *outer, int64_t *C, int64_t *inner) {
  *outer = 1;
  *C = s->d[axis];
  *inner = rtc_inner(s, axis);
  for (int i = 0; i < axis; i++) *outer *= s->d[i];
}

/* A channel's sums split in G parts of `len` elements when it has more than RTC_BN_PART of them:
 * one block a channel leaves most of a large GPU idle (16 channels, 16 blocks), each thread
 * walking its share one dependent load at a time (the ResNet's batch_norm backward took 223 us
 * a layer on the H200). At most 256 parts. */
enum { RTC_BN_PART = 2048, RTC_BN_MAX_PARTS = 256 };

static int32_t rtc_bn_parts(int64_t outer, int64_t inner, int64_t *len) {
  int64_t M = outer * inner, G = (M + RTC_BN_PART - 1) / RTC_BN_PART;
  if (G > RTC_BN_MAX_PARTS) G = RTC_BN_MAX_PARTS;
  if (G < 2) return *len = M, 1;
  *len = (M + G - 1) / G;
  return (int32_t)G;
}

/* The scratch a split channel's sums take: 2 doubles a part, then 3 floats a channel (dX's
 * coefficients). */
static size_t rtc_bn_scratch(int64_t C, int32_t G) { return (size_t)(2 * C * G) * sizeof(double) + (size_t)(3 * C) * sizeof(float); }

/* The step's [outer, C, inner] from its x (in slot 0 forward, nf backward). */
static void rtc_bn_step_dims(const rtc_call *k, int64_t *outer, int64_t *C, int64_t *inner) {
  const k_batch_norm_param *p = rtc_param(k);
  int slot = k->s->kind == RT_STEP_BACKWARD ? (k->nin - k->nout) / 2 : 0;
  rtc_bn_dims(&k->in_shape[slot], p->axis, outer, C, inner);
}

/* The training steps reserve the scratch of their split sums. */
int rtc_batch_norm_prepare(rtc_ctx *c, const rtc_call *k) {
  int64_t outer, C, inner, len;
  if (!k->is_train) return 0;
  rtc_bn_step_dims(k, &outer, &C, &inner);
  int32_t G = rtc_bn_parts(outer, inner, &len);
  return G > 1 ? rtc_reserve_scratch(c, rtc_bn_scratch(C, G)) : 0;
}

void rtc_batch_norm_release(rtc_ctx *c, void *state) { (void)c, (void)state; }

/* The split sums into the scratch (grad: the gradient's, around smean); NULL when the channel
 * is not split (its block sums itself). */
static const double *rtc_bn_split(rtc_ctx *c, const float *x, const float *dy, const float *smean, int64_t outer, int64_t C,
                                  int64_t inner, int32_t *G, int *rc) {
  kc_bn_part_args a = {x, dy, smean, outer, C, inner, 0, 0, dy != NULL, rtc_scratch(c)};
  *rc = 0;
  a.G = *G = rtc_bn_parts(outer, inner, &a.len);
  if (a.G < 2) return NULL;
  *rc = RTC_GO(c, bn_part, C * a.G * KC_BLOCK, a);
  return a.part;
}

/* Statistics per channel (a block each, from the split sums where there are), then y per
 * element from what they saved; where the saved outputs are pruned in training the channel's
 * block writes y itself. */
int rtc_batch_norm_forward(rtc_ctx *c, const rtc_call *k) {
  const k_batch_norm_param *p = rtc_param(k);
  kc_bn_stats_args a;
  memset(&a, 0, sizeof a);
  rtc_bn_step_dims(k, &a.outer, &a.C, &a.inner);
  a.y = k->out[0];
  a.smean = rtc_out_opt(k, 1);
  a.sinv = rtc_out_opt(k, 2);
  a.mm = k->in[3];
  a.mv = k->in[4];
  a.x = k->in[0];
  a.gamma = k->in[1];
  a.beta = k->in[2];
  a.eps = p->eps;
  a.momentum = p->momentum;
  a.is_train = k->is_train != 0;
  a.req = (int32_t)k->req[0];
  int by_element = k->req[0] != kNullOp && (!a.is_train || (a.smean && a.sinv)), rc = 0;
  a.apply = k->req[0] != kNullOp && !by_element;
  if (a.is_train) a.part = rtc_bn_split(c, a.x, NULL, NULL, a.outer, a.C, a.inner, &a.G, &rc);
  if (rc) return 1;
  if ((a.is_train || a.smean || a.sinv || a.apply) && RTC_GO(c, bn_stats, a.C * KC_BLOCK, a)) return 1;
  return by_element ? RTC_GO(c, bn_apply, a.outer * a.C * a.inner, a) : 0;
}

/* in = [dY, -, -, X, gamma, -, -, saved_mean, saved_invstd]; out = [dX, dgamma, dbeta]. */
int rtc_batch_norm_backward(rtc_ctx *c, const rtc_call *k) {
  int nf = (k->nin - k->nout) / 2;
  kc_bn_grad_args a;
  memset(&a, 0, sizeof a);
  rtc_bn_step_dims(k, &a.outer, &a.C, &a.inner);
  a.dx = k->out[0];
  a.dg = rtc_out_opt(k, 1);
  a.db = rtc_out_opt(k, 2);
  a.dy = k->in[0];
  a.x = k->in[nf];
  a.gamma = k->in[nf + 1];
  a.smean = k->in[2 * nf + 1];
  a.sinv = k->in[2 * nf + 2];
  a.req_dx = (int32_t)k->req[0];
  a.req_dg = a.dg ? (int32_t)k->req[1] : kNullOp;
  a.req_db = a.db ? (int32_t)k->req[2] : kNullOp;
  int rc = 0;
  if ((a.part = rtc_bn_split(c, a.x, a.dy, a.smean, a.outer, a.C, a.inner, &a.G, &rc))) a.coef = (float *)(a.part + 2 * a.C * a.G);
  if (rc || RTC_GO(c, bn_grad, a.C * KC_BLOCK, a)) return 1;
  return a.coef && a.req_dx != kNullOp ? RTC_GO(c, bn_dx, a.outer * a.C * a.inner, a) : 0;
}

/* ---- layer_norm over the last axis: out = [y, mean, invstd] ---- */

static void rtc_ln_dims(const k_shape *s, int64_t *rows, int64_t *d) {
  *d = s->d[s->rank - 1];
  *rows = *d ? k_shape_numel(s) / *d : 0;
}

int rtc_layer_norm_forward(rtc_ctx *c, const rtc_call *k) {
  kc_ln_forward_args a;
  memset(&a, 0, sizeof a);
  rtc_ln_dims(&k->in_shape[0], &a.rows, &a.d);
  a.y = k->out[0];
  a.smean = rtc_out_opt(k, 1);
  a.sinv = rtc_out_opt(k, 2);
  a.x = k->in[0];
  a.gamma = k->in[1];
  a.beta = k->in[2];
  a.eps = ((const k_layer_norm_param *)rtc_param(k))->eps;
  a.req = (int32_t)k->req[0];
  return RTC_GO(c, ln_forward, a.rows * KC_BLOCK, a);
}

/* dgamma and dbeta first, then dX: dX may overwrite dY. */
int rtc_layer_norm_backward(rtc_ctx *c, const rtc_call *k) {
  int nf = (k->nin - k->nout) / 2;
  kc_ln_dx_args a;
  memset(&a, 0, sizeof a);
  rtc_ln_dims(&k->in_shape[nf], &a.rows, &a.d);
  a.y = k->out[0];
  a.dg = rtc_out_opt(k, 1);
  a.db = rtc_out_opt(k, 2);
  a.x = k->in[nf];
  a.dy = k->in[0];
  a.gamma = k->in[nf + 1];
  a.mean_in = k->in[2 * nf + 1];
  a.inv_in = k->in[2 * nf + 2];
  a.req = (int32_t)k->req[0];
  a.req_dg = a.dg ? (int32_t)k->req[1] : kNullOp;
  a.req_db = a.db ? (int32_t)k->req[2] : kNullOp;
  if ((a.dg || a.db) && RTC_GO(c, ln_dparams, a.d * KC_BLOCK, a)) return 1;
  return k->req[0] == kNullOp ? 0 : RTC_GO(c, ln_dx, a.rows * KC_BLOCK, a);
}

/* ---- embedding: forward in = [indices, weight]; backward in = [dY, indices, -, -],
 * out = [- , dW] ---- */

int rtc_embedding_forward(rtc_ctx *c, const rtc_call *k) {
  const k_shape *w = &k->in_shape[1];
  kc_embedding_args a = {k->out[0], k->in[1], k->in[0], k_shape_numel(&k->in_shape[0]), w->d[0], w->d[1],
                         (int32_t)k->req[0], k->err};
  if (k->req[0] == kNullOp) return 0;
  return RTC_GO(c, embedding, a.n * a.d, a);
}

int rtc_embedding_backward(rtc_ctx *c, const rtc_call *k) {
  const k_shape *w = &k->out_shape[1];
  kc_embedding_grad_args a = {k->out[1], k->in[0], k->in[1], k_shape_numel(&k->in_shape[1]), w->d[0],
                              w->d[1], (int32_t)k->req[1], k->err};
  if (k->nout < 2 || k->req[1] == kNullOp) return 0;
  return RTC_GO(c, embedding_grad, a.d, a);
}

/* ---- dropout: out = [y, mask]; backward in = [og, -, -, -, mask] ---- */

int rtc_dropout_forward(rtc_ctx *c, const rtc_call *k) {
  float p = ((const k_dropout_param *)rtc_param(k))->p;
  kc_dropout_args a;
  memset(&a, 0, sizeof a);
  a.y = k->out[0];
  a.mask = (k->nout > 1 && k->out[1]) ? k->out[1] : NULL;
  a.x = k->in[0];
  a.n = k_shape_numel(&k->in_shape[0]);
  a.live = (const kc_live *)k->live;
  a.p = p;
  a.scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;   /* p == 1 drops all: no 0 * inf */
  a.is_train = k->is_train != 0;
  a.req_m = a.mask ? (int32_t)k->req[1] : kNullOp;
  /* In predict an in-place identity writes nothing (k_copy_req). */
  a.req_y = (!a.is_train && k->req[0] != kAddTo && k->out[0] == k->in[0]) ? kNullOp : (int32_t)k->req[0];
  if (a.req_y == kNullOp && a.req_m == kNullOp) return 0;
  return RTC_GO(c, dropout, a.n, a);
}

int rtc_dropout_backward(rtc_ctx *c, const rtc_call *k) {
  kc_mul_args a = {k->out[0], k->in[0], k->in[4], k_shape_numel(&k->out_shape[0]), (int32_t)k->req[0]};
  if (k->req[0] == kNullOp) return 0;
  return RTC_GO(c, mul, a.n, a);
}

/* ---- optimizer updates: constants as k_optim.c computes them ---- */

int rtc_sgd_update(rtc_ctx *c, float *w, const float *g, float *mom, int64_t n, const kc_live *live,
                   const int32_t *skip, const k_sgd_param *p) {
  kc_sgd_args a = {w, mom, g, n, live, skip, p->momentum, p->wd, p->nesterov};
  return RTC_GO(c, sgd, n, a);
}

void rtc_sgd_live(kc_live *l, float lr) { l->f[0] = lr; }

size_t rtc_clip_work_bytes(int n) { return ((size_t)n + 1) * sizeof(double); }

int rtc_clip_grad_norm(rtc_ctx *c, float *const *g, const int64_t *len, int n, float max_norm, void *work) {
  double *sq = work;
  float *coef = (float *)(sq + n);
  for (int k = 0; k < n; k++) {
    kc_sumsq_args a = {g[k], len[k], sq + k};
    if (RTC_GO(c, sumsq, KC_BLOCK, a)) return 1;
  }
  kc_clip_coef_args a = {sq, n, max_norm, coef};
  if (RTC_GO(c, clip_coef, 1, a)) return 1;
  for (int k = 0; k < n; k++) {
    kc_clip_scale_args s = {g[k], len[k], coef};
    if (RTC_GO(c, clip_scale, len[k], s)) return 1;
  }
  return 0;
}

int rtc_adam_update(rtc_ctx *c, float *w, const float *g, float *m, float *v, int64_t n, const kc_live *live,
                    const int32_t *skip, const k_adam_param *p, int decoupled) {
  kc_adam_args a = {w, m, v, g, n, live, skip, 0, 0, p->beta1, p->beta2, p->eps, decoupled ? 0.0f : p->wd};
  a.a1 = (float)(1.0 - (double)p->beta1);
  a.a2 = (float)(1.0 - (double)p->beta2);
  return RTC_GO(c, adam, n, a);
}

void rtc_adam_live(kc_live *l, float lr, const k_adam_param *p, int64_t t, int decoupled) {
  double step = (double)(t < 1 ? 1 : t);
  l->f[0] = (float)((double)lr / (1.0 - pow((double)p->beta1, step)));
  l->f[1] = (float)sqrt(1.0 - pow((double)p->beta2, step));
  l->f[2] = decoupled ? (float)(1.0 - (double)lr * (double)p->wd) : 1.0f;
}

int rtc_err_any(rtc_ctx *c, const int32_t *err, int n, int32_t *out) {
  kc_err_any_args a = {err, n, out};
  return RTC_GO(c, err_any, 1, a);
}
