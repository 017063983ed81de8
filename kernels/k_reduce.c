/* k_reduce.c — sum, mean and max (torch.amax) over the axes of k_reduce_param.
 * Each output element walks its group of input elements (k_iter_split), so no temp space is
 * needed and every OpReqType is honoured; sums accumulate in double. */
#include <math.h>
#include <stdio.h>

#include "kernels.h"
#include "k_util.h"

typedef enum { K_RED_SUM, K_RED_MEAN, K_RED_MAX } k_red_kind;

/* x's shape with the reduced axes set to 1: the keepdims output, in the output's layout. */
static k_shape k_reduce_keep(const k_shape *x, const k_reduce_param *p) {
  k_shape k = *x;
  for (int i = 0; i < p->axis.n; i++) k.d[p->axis.v[i]] = 1;
  return k;
}

/* Outer walk over output elements, inner walk over one group, operand 0 = x. */
static int64_t k_reduce_iters(const k_shape *x, const k_shape *keep, k_iter *o, k_iter *in) {
  int64_t st[K_MAX_RANK], n = k_shape_numel(keep);
  k_iter_split(o, in, x, keep, 1);
  k_contig_strides(x, st);
  k_iter_split_set(o, in, 0, st);
  return n ? k_shape_numel(x) / n : 0;
}

/* Returns the group's sum, or its max (NaN wins, as in torch.amax). */
static double k_reduce_group(const float *x, int64_t base, k_iter *in, int64_t m, k_red_kind kind) {
  double s = kind == K_RED_MAX ? -INFINITY : 0.0;
  k_iter_rewind(in);
  for (int64_t r = 0; r < m; r++, k_iter_next(in)) {
    double v = x[base + in->off[0]];
    if (kind != K_RED_MAX) s += v;
    else if (v > s || v != v) s = v;
    if (s != s && kind == K_RED_MAX) break;
  }
  return s;
}

static int k_reduce_forward(const k_call *c, k_red_kind kind) {
  k_req req = c->req[0];
  if (req == kNullOp) return 0;
  const k_reduce_param *p = c->param;
  k_shape keep = k_reduce_keep(&c->in[0].shape, p);
  k_iter o, in;
  int64_t m = k_reduce_iters(&c->in[0].shape, &keep, &o, &in), n = k_shape_numel(&keep);
  if (m == 0 && kind == K_RED_MAX && n > 0) {
    snprintf(c->err, c->err_len, "max: reduction over an empty axis");
    return 1;
  }
  for (int64_t i = 0; i < n; i++, k_iter_next(&o)) {
    double s = k_reduce_group(c->in[0].data, o.off[0], &in, m, kind);
    k_put(c->out[0].data, i, (float)(kind == K_RED_MEAN ? s / (double)m : s), req);
  }
  return 0;
}

/* sum / mean backward: in=[og] (x, y undeclared); og broadcast back over each group. */
static int k_reduce_backward_spread(const k_call *c, int mean) {
  k_req req = c->req[0];
  if (req == kNullOp) return 0;
  const k_shape *xs = &c->out[0].shape;
  k_shape keep = k_reduce_keep(xs, c->param);
  int64_t st[K_MAX_RANK], n = k_shape_numel(xs), nk = k_shape_numel(&keep);
  float scale = (mean && nk) ? (float)((double)nk / (double)n) : 1.0f;
  const float *og = c->in[0].data;
  float *gx = c->out[0].data;
  k_iter it;
  k_iter_init(&it, xs, 1);
  k_bcast_strides(&keep, xs, st);
  k_iter_set(&it, 0, st);
  for (int64_t i = 0; i < n; i++, k_iter_next(&it)) k_put(gx, i, og[it.off[0]] * scale, req);
  return 0;
}

static int k_is_peak(float x, float y) { return x == y || (x != x && y != y); }

/* max backward: in=[og, x, y]; og splits evenly among the elements equal to the max. */
static void k_max_group_grad(const k_call *c, const float *x, int64_t base, k_iter *in,
                             int64_t m, float og, float y) {
  int64_t ties = 0;
  k_iter_rewind(in);
  for (int64_t r = 0; r < m; r++, k_iter_next(in)) ties += k_is_peak(x[base + in->off[0]], y);
  float share = ties ? og / (float)ties : 0.0f;
  k_iter_rewind(in);
  for (int64_t r = 0; r < m; r++, k_iter_next(in)) {
    int64_t at = base + in->off[0];
    k_put(c->out[0].data, at, k_is_peak(x[at], y) ? share : 0.0f, c->req[0]);
  }
}

int k_max_backward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  const k_shape *xs = &c->in[1].shape;
  k_shape keep = k_reduce_keep(xs, c->param);
  const float *og = c->in[0].data, *x = c->in[1].data, *y = c->in[2].data;
  k_iter o, in;
  int64_t m = k_reduce_iters(xs, &keep, &o, &in), n = k_shape_numel(&keep);
  for (int64_t i = 0; i < n; i++, k_iter_next(&o)) k_max_group_grad(c, x, o.off[0], &in, m, og[i], y[i]);
  return 0;
}

int k_sum_forward(const k_call *c) { return k_reduce_forward(c, K_RED_SUM); }
int k_mean_forward(const k_call *c) { return k_reduce_forward(c, K_RED_MEAN); }
int k_max_forward(const k_call *c) { return k_reduce_forward(c, K_RED_MAX); }
int k_sum_backward(const k_call *c) { return k_reduce_backward_spread(c, 0); }
int k_mean_backward(const k_call *c) { return k_reduce_backward_spread(c, 1); }
