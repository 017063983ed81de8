/* k_reduce.c — sum, mean and max (torch.amax) over the axes of k_reduce_param.
 * sum and mean, forward and backward, run on a collapsed view (k_bview.h): the input seen
 * against the keepdims output as a broadcast, reduced or spread in vectorised blocks with one
 * fixed summation order; max forward is the same walk with a NaN-propagating max. max's
 * backward walks each group of input elements (k_iter_split). No temp space is needed and
 * every OpReqType is honoured. */
#include <math.h>
#include <stdio.h>

#include "kernels.h"
#include "k_bview.h"

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

/* max on the same view: NaN wins, as in torch.amax. */
K_VEC_TARGETS static void k_max_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                                     int64_t s2) {
  if (first) for (int64_t k = 0; k < n; k++) t[k] = s.og[k];
  else for (int64_t k = 0; k < n; k++) t[k] = k_vec_max2(t[k], s.og[k]);
}

K_VEC_TARGETS static void k_max_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) {
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] = k_vec_max2(l[i], s.og[k + i]);
  for (int i = 0; k + i < n; i++) l[i] = k_vec_max2(l[i], s.og[k + i]);
}

int k_max_forward(const k_call *c) {
  static const k_reducer max = {k_max_cols, k_max_rows, -INFINITY, k_lanes_max};
  if (c->req[0] == kNullOp) return 0;
  const k_shape *xs = &c->in[0].shape;
  k_shape keep = k_reduce_keep(xs, c->param);
  int64_t n = k_shape_numel(xs), nk = k_shape_numel(&keep);
  if (n == 0 && nk > 0) {
    snprintf(c->err, c->err_len, "max: reduction over an empty axis");
    return 1;
  }
  k_bview v = k_bview_make(xs, &keep, &keep);
  const float *x = c->in[0].data;
  k_bsrc s = {x, x, x, x};
  k_breduce(&v, 1, s, c->out[0].data, nk, c->req[0], 1.0f, &max);
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

/* ---- sum and mean on the collapsed view (k_breduce_sum) ---- */
static int k_sum_mean_forward(const k_call *c, int mean) {
  const k_shape *xs = &c->in[0].shape;
  k_shape keep = k_reduce_keep(xs, c->param);
  int64_t n = k_shape_numel(xs), nk = k_shape_numel(&keep);
  float scale = mean ? (float)((double)nk / (double)n) : 1.0f;
  if (mean && n == 0) scale = INFINITY;     /* an empty mean is NaN, as 0/0 */
  k_breduce_sum(c->in[0].data, xs, &keep, c->out[0].data, c->req[0], scale);
  return 0;
}

/* sum / mean backward: in=[og] (x, y undeclared); og broadcast back over each group, scaled. */
static int k_sum_mean_backward(const k_call *c, int mean) {
  k_req req = c->req[0];
  if (req == kNullOp) return 0;
  const k_shape *xs = &c->out[0].shape;
  k_shape keep = k_reduce_keep(xs, c->param);
  int64_t n = k_shape_numel(xs), nk = k_shape_numel(&keep);
  float scale = (mean && nk) ? (float)((double)nk / (double)n) : 1.0f, t[K_BLOCK];
  k_bview v = k_bview_make(xs, &keep, &keep);
  const float *og = c->in[0].data;
  int in = v.rank - 1;
  int64_t len_in = v.d[in], so = v.st[1][in];
  k_iter it;
  int64_t rows = k_bview_iter(&v, (1u << in) - 1, &it);
  for (int64_t r = 0; r < rows && n > 0; r++, k_iter_next(&it))
    for (int64_t k0 = 0; k0 < len_in; k0 += K_BLOCK) {
      int64_t len = len_in - k0 < K_BLOCK ? len_in - k0 : K_BLOCK;
      const float *g = og + it.off[1] + k0 * so;
      if (so) for (int64_t k = 0; k < len; k++) t[k] = g[k] * scale;
      else for (int64_t k = 0; k < len; k++) t[k] = g[0] * scale;
      k_store_block((float *)c->out[0].data + it.off[0] + k0, t, len, req);
    }
  return 0;
}

int k_sum_forward(const k_call *c) { return k_sum_mean_forward(c, 0); }
int k_mean_forward(const k_call *c) { return k_sum_mean_forward(c, 1); }
int k_sum_backward(const k_call *c) { return k_sum_mean_backward(c, 0); }
int k_mean_backward(const k_call *c) { return k_sum_mean_backward(c, 1); }
