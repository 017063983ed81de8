/* k_reduce.c — sum, mean and max (torch.amax) over the axes of k_reduce_param.
 * sum and mean, forward and backward, run on a collapsed view (k_bview.h): the input seen
 * against the keepdims output as a broadcast, reduced or spread in vectorised blocks with one
 * fixed summation order; max is the same walk with a NaN-propagating max, and its backward
 * counts each group's ties before writing the shares. No temp space is needed and every
 * OpReqType is honoured. */
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

static inline int k_is_peak(float x, float y) { return x == y || (x != x && y != y); }

/* max backward: og splits evenly among the elements equal to the max. On the view of x against
 * the keepdims y, a unit first counts each group's ties, then writes the shares. */
typedef struct {
  const k_bview *v;
  const float *og, *x, *y;     /* og and y keepdims (operand 1), x full (operand 0) */
  float *gx;
  k_req req;
  unsigned kmask, rmask;
  int64_t nb;
} k_max_grad_job;

/* Innermost axis kept: a block of groups side by side, walked over the reduced positions twice. */
K_VEC_TARGETS static void k_max_grad_cols(void *ctx, int64_t lo, int64_t hi) {
  const k_max_grad_job *j = ctx;
  const k_bview *v = j->v;
  int64_t n = v->d[v->rank - 1], ko[3], nr;
  float share[K_BLOCK], t[K_BLOCK];
  k_iter ro;
  nr = k_bview_iter(v, j->rmask, &ro);
  for (int64_t u = lo; u < hi; u++) {
    int64_t k0 = u % j->nb * K_BLOCK, len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK;
    k_bview_at(v, j->kmask, u / j->nb, ko);
    const float *og = j->og + ko[1] + k0, *y = j->y + ko[1] + k0;
    for (int64_t k = 0; k < len; k++) share[k] = 0.0f;          /* the tie counts first */
    k_iter_rewind(&ro);
    for (int64_t q = 0; q < nr; q++, k_iter_next(&ro)) {
      const float *x = j->x + ko[0] + ro.off[0] + k0;
      for (int64_t k = 0; k < len; k++) share[k] += (float)k_is_peak(x[k], y[k]);
    }
    for (int64_t k = 0; k < len; k++) share[k] = share[k] > 0.0f ? og[k] / share[k] : 0.0f;
    k_iter_rewind(&ro);
    for (int64_t q = 0; q < nr; q++, k_iter_next(&ro)) {
      const float *x = j->x + ko[0] + ro.off[0] + k0;
      for (int64_t k = 0; k < len; k++) t[k] = k_is_peak(x[k], y[k]) ? share[k] : 0.0f;
      k_store_block(j->gx + ko[0] + ro.off[0] + k0, t, len, j->req);
    }
  }
}

/* Innermost axis reduced: one group per unit, its runs counted in lanes, then written. */
K_VEC_TARGETS static void k_max_grad_rows(void *ctx, int64_t lo, int64_t hi) {
  const k_max_grad_job *j = ctx;
  const k_bview *v = j->v;
  int64_t n = v->d[v->rank - 1], ko[3], nr;
  float t[K_BLOCK];
  k_iter ro;
  nr = k_bview_iter(v, j->rmask, &ro);
  for (int64_t u = lo; u < hi; u++) {
    float l[K_LANES] = {0}, y, share;
    k_bview_at(v, j->kmask, u, ko);
    y = j->y[ko[1]];
    k_iter_rewind(&ro);
    for (int64_t q = 0; q < nr; q++, k_iter_next(&ro)) {
      const float *x = j->x + ko[0] + ro.off[0];
      int64_t k = 0;
      for (; k + K_LANES <= n; k += K_LANES)
        for (int i = 0; i < K_LANES; i++) l[i] += (float)k_is_peak(x[k + i], y);
      for (int i = 0; k + i < n; i++) l[i] += (float)k_is_peak(x[k + i], y);
    }
    share = k_lanes_sum(l);
    share = share > 0.0f ? j->og[ko[1]] / share : 0.0f;
    k_iter_rewind(&ro);
    for (int64_t q = 0; q < nr; q++, k_iter_next(&ro))
      for (int64_t k0 = 0; k0 < n; k0 += K_BLOCK) {
        const float *x = j->x + ko[0] + ro.off[0] + k0;
        int64_t len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK;
        for (int64_t k = 0; k < len; k++) t[k] = k_is_peak(x[k], y) ? share : 0.0f;
        k_store_block(j->gx + ko[0] + ro.off[0] + k0, t, len, j->req);
      }
  }
}

/* in = [og, x, y]; out = [gx]. */
int k_max_backward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  const k_shape *xs = &c->in[1].shape;
  k_shape keep = k_reduce_keep(xs, c->param);
  int64_t n = k_shape_numel(xs), nk = k_shape_numel(&keep);
  if (n == 0) return 0;
  k_bview v = k_bview_make(xs, &keep, &keep);
  int in = v.rank - 1;
  unsigned kept = k_bview_kept(&v, 1), all = (1u << v.rank) - 1;
  k_max_grad_job j = {&v, c->in[0].data, c->in[1].data, c->in[2].data, c->out[0].data, c->req[0],
                      kept & ~(1u << in), all & ~kept & ~(1u << in), (v.d[in] + K_BLOCK - 1) / K_BLOCK};
  int64_t group = n / nk, run = v.d[in] < K_BLOCK ? v.d[in] : K_BLOCK;
  if (kept >> in & 1u) k_parallel_for(nk / v.d[in] * j.nb, k_vec_grain(2 * group * run), k_max_grad_cols, &j);
  else k_parallel_for(nk, k_vec_grain(2 * group), k_max_grad_rows, &j);
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

/* sum / mean backward: in=[og] (x, y undeclared). gx is og broadcast over each group times
 * the scale (1, or count/n for a mean): the broadcasting multiply itself, keepdims og by a
 * scalar, so it shares that kernel's vector loops and its split across threads. */
static int k_sum_mean_backward(const k_call *c, int mean) {
  const k_shape *xs = &c->out[0].shape;
  k_shape keep = k_reduce_keep(xs, c->param);
  int64_t n = k_shape_numel(xs), nk = k_shape_numel(&keep);
  float scale = (mean && nk) ? (float)((double)nk / (double)n) : 1.0f;
  k_tensor in[2] = {{c->in[0].data, keep, K_F32}, {&scale, {0, {0}}, K_F32}};
  k_call m = *c;
  m.in = in;
  m.nin = 2;
  m.param = NULL;
  return k_mul_forward(&m);
}

int k_sum_forward(const k_call *c) { return k_sum_mean_forward(c, 0); }
int k_mean_forward(const k_call *c) { return k_sum_mean_forward(c, 1); }
int k_sum_backward(const k_call *c) { return k_sum_mean_backward(c, 0); }
int k_mean_backward(const k_call *c) { return k_sum_mean_backward(c, 1); }
