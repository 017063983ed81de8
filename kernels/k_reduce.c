/* k_reduce.c — sum, mean and max (torch.amax) over the axes of k_reduce_param, and beyond
 * SPEC section 2 min (torch.amin), prod (torch.prod), logsumexp (torch.logsumexp) and norm
 * (torch.linalg.vector_norm, ord 1 or 2).
 * sum and mean, forward and backward, run on a collapsed view (k_bview.h): the input seen
 * against the keepdims output as a broadcast, reduced or spread in vectorised blocks with one
 * fixed summation order; max and min are the same walk with a NaN-propagating max or min, and
 * their backward counts each group's ties before writing the shares; prod, logsumexp and norm
 * reduce with their own block functions and spread their gradients with k_spread. Every
 * OpReqType is honoured. */
#include <math.h>
#include <stdio.h>

#include "kernels.h"
#include "k_bview.h"
#include "k_scalar.h"

/* x's shape with the reduced axes set to 1: the keepdims output, in the output's layout. */
static k_shape k_reduce_keep(const k_shape *x, const k_reduce_param *p) {
  k_shape k = *x;
  for (int i = 0; i < p->axis.n; i++) k.d[p->axis.v[i]] = 1;
  return k;
}

/* A reduction that folds its group with one function (the first element as it is): the column
 * form keeps a running row t, the row form K_LANES lanes. max and min here, NaN winning
 * (torch.amax, torch.amin); prod below. */
#define K_FOLD_REDUCERS(name, combine)                                                            \
  K_VEC_TARGETS static void k_##name##_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1, \
                                            int64_t s2) {                                            \
    if (first) for (int64_t k = 0; k < n; k++) t[k] = s.og[k];                                      \
    else for (int64_t k = 0; k < n; k++) t[k] = combine(t[k], s.og[k]);                             \
  }                                                                                                  \
  K_VEC_TARGETS static void k_##name##_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) { \
    int64_t k = 0;                                                                                   \
    for (; k + K_LANES <= n; k += K_LANES)                                                           \
      for (int i = 0; i < K_LANES; i++) l[i] = combine(l[i], s.og[k + i]);                          \
    for (int i = 0; k + i < n; i++) l[i] = combine(l[i], s.og[k + i]);                              \
  }
K_FOLD_REDUCERS(max, k_vec_max2)
K_FOLD_REDUCERS(min, k_vec_min2)

/* x reduced onto out (the keepdims shape's nk elements) by r under req; x2 is read by r's
 * post at each output position (keepdims too). */
static void k_reduce_run(const k_call *c, const float *x, const float *x2, float *out, k_req req,
                         const k_reducer *r) {
  const k_shape *xs = &c->in[0].shape;
  k_shape keep = k_reduce_keep(xs, c->param);
  k_bview v = k_bview_make(xs, &keep, &keep);
  k_bsrc s = {x, x, x2, x};
  k_breduce(&v, 1, s, out, k_shape_numel(&keep), req, 1.0f, r);
}

/* max and min refuse an empty group (torch does too); 1 after writing the message. */
static int k_peak_forward(const k_call *c, const char *name, const k_reducer *r) {
  if (c->req[0] == kNullOp) return 0;
  const k_shape *xs = &c->in[0].shape;
  k_shape keep = k_reduce_keep(xs, c->param);
  if (k_shape_numel(xs) == 0 && k_shape_numel(&keep) > 0) {
    snprintf(c->err, c->err_len, "%s: reduction over an empty axis", name);
    return 1;
  }
  k_reduce_run(c, c->in[0].data, c->in[0].data, c->out[0].data, c->req[0], r);
  return 0;
}

int k_max_forward(const k_call *c) {
  static const k_reducer max = {k_max_cols, k_max_rows, -INFINITY, k_lanes_max, NULL};
  return k_peak_forward(c, "max", &max);
}

int k_min_forward(const k_call *c) {
  static const k_reducer min = {k_min_cols, k_min_rows, INFINITY, k_lanes_min, NULL};
  return k_peak_forward(c, "min", &min);
}

static inline int k_is_peak(float x, float y) { return x == y || (x != x && y != y); }

/* max (and min) backward: og splits evenly among the elements equal to the max. On the view of x against
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

/* in = [og, x, y]; out = [gx]. The same for max and min: the ties are the elements equal to y. */
static int k_peak_backward(const k_call *c) {
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

int k_max_backward(const k_call *c) { return k_peak_backward(c); }
int k_min_backward(const k_call *c) { return k_peak_backward(c); }

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

/* ---- beyond SPEC section 2: prod, logsumexp, norm ---- */

/* Every output `v` under req: the value of a reduction over empty groups (torch: a product
 * of nothing is 1, a logsumexp -inf). */
static void k_reduce_fill(float *out, int64_t nk, float v, k_req req) {
  if (req == kNullOp) return;
  for (int64_t i = 0; i < nk; i++) k_put(out, i, v, req);
}

static int64_t k_reduce_groups(const k_shape *xs, const void *param) {
  k_shape keep = k_reduce_keep(xs, param);
  return k_shape_numel(&keep);
}

/* The gradient of a reduction whose per-element term needs its group's values: gx over x's
 * shape, each block of a run of x computed from x and its group's entries of keepdims arrays
 * (og, y and up to two the op computed: a and b; unused ones point at og), then stored under
 * req. sk is the keepdims arrays' stride along the run: 1, or 0 where the run is reduced. */
typedef struct {
  const float *og, *y, *a, *b;
} k_group;
typedef void (*k_spread_fn)(float *restrict t, const float *restrict x, k_group g, int64_t n, int64_t sk);

typedef struct {
  const k_bview *v;
  const float *x;
  k_group g;
  float *gx;
  k_req req;
  k_spread_fn fn;
  unsigned outer;             /* every axis but the run */
  int64_t nb;                 /* blocks per run */
} k_spread_job;

static void k_spread_range(void *ctx, int64_t lo, int64_t hi) {
  const k_spread_job *j = ctx;
  const k_bview *v = j->v;
  int in = v->rank - 1;
  int64_t n = v->d[in], sk = v->st[1][in], off[3];
  float t[K_BLOCK];
  for (int64_t u = lo; u < hi; u++) {
    int64_t k0 = u % j->nb * K_BLOCK, len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK;
    k_bview_at(v, j->outer, u / j->nb, off);
    int64_t ko = off[1] + k0 * sk;
    k_group g = {j->g.og + ko, j->g.y + ko, j->g.a + ko, j->g.b + ko};
    j->fn(t, j->x + off[0] + k0, g, len, sk);
    k_store_block(j->gx + off[0] + k0, t, len, j->req);
  }
}

/* in = [og, x, y]; out = [gx]. Units are blocks of runs, each written by one thread. */
static void k_spread(const k_call *c, k_group g, k_spread_fn fn) {
  const k_shape *xs = &c->in[1].shape;
  int64_t n = k_shape_numel(xs);
  if (c->req[0] == kNullOp || n == 0) return;
  k_shape keep = k_reduce_keep(xs, c->param);
  k_bview v = k_bview_make(xs, &keep, &keep);
  int in = v.rank - 1;
  k_spread_job j = {&v, c->in[1].data, g, c->out[0].data, c->req[0], fn,
                    ((1u << v.rank) - 1) & ~(1u << in), (v.d[in] + K_BLOCK - 1) / K_BLOCK};
  int64_t run = v.d[in] < K_BLOCK ? v.d[in] : K_BLOCK;
  k_parallel_for(n / v.d[in] * j.nb, k_vec_grain(run), k_spread_range, &j);
}

/* prod: the product in lanes multiplied pairwise; the backward's zero count and product of
 * the nonzero elements per group. */
static inline float k_mul2(float a, float b) { return a * b; }
K_FOLD_REDUCERS(prod, k_mul2)
#undef K_FOLD_REDUCERS

K_VEC_TARGETS static void k_zeros_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                                       int64_t s2) {
  if (first) for (int64_t k = 0; k < n; k++) t[k] = (float)(s.og[k] == 0.0f);
  else for (int64_t k = 0; k < n; k++) t[k] += (float)(s.og[k] == 0.0f);
}

K_VEC_TARGETS static void k_zeros_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) {
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] += (float)(s.og[k + i] == 0.0f);
  for (int i = 0; k + i < n; i++) l[i] += (float)(s.og[k + i] == 0.0f);
}

static inline float k_nonzero(float x) { return x == 0.0f ? 1.0f : x; }

K_VEC_TARGETS static void k_prodnz_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                                        int64_t s2) {
  if (first) for (int64_t k = 0; k < n; k++) t[k] = k_nonzero(s.og[k]);
  else for (int64_t k = 0; k < n; k++) t[k] *= k_nonzero(s.og[k]);
}

K_VEC_TARGETS static void k_prodnz_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) {
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] *= k_nonzero(s.og[k + i]);
  for (int i = 0; k + i < n; i++) l[i] *= k_nonzero(s.og[k + i]);
}

size_t k_prod_temp_bytes(const k_shape *args, const void *param) {
  return 2 * (size_t)k_reduce_groups(&args[0], param) * sizeof(float);
}

int k_prod_forward(const k_call *c) {
  static const k_reducer prod = {k_prod_cols, k_prod_rows, 1.0f, k_lanes_prod, NULL};
  if (k_shape_numel(&c->in[0].shape) == 0)
    k_reduce_fill(c->out[0].data, k_reduce_groups(&c->in[0].shape, c->param), 1.0f, c->req[0]);
  else k_reduce_run(c, c->in[0].data, c->in[0].data, c->out[0].data, c->req[0], &prod);
  return 0;
}

/* torch.prod's gradient: og * (y / x) in a group without zeros; with one zero, og times the
 * product of the others at the zero and 0 elsewhere (a: the group's zero count, b: its product
 * of nonzero elements); 0 with two or more, as torch's prod_safe_zeros_backward gives. */
K_VEC_TARGETS static void k_prod_grad(float *restrict t, const float *restrict x, k_group g, int64_t n,
                                      int64_t sk) {
  for (int64_t k = 0; k < n; k++) {
    float zeros = g.a[k * sk], one = zeros == 1.0f && x[k] == 0.0f ? g.og[k * sk] * g.b[k * sk] : 0.0f;
    t[k] = zeros == 0.0f ? g.og[k * sk] * (g.y[k * sk] / x[k]) : one;
  }
}

/* in = [og, x, y]; temp: the zero counts, then the products of nonzero elements. */
int k_prod_backward(const k_call *c) {
  static const k_reducer zeros = {k_zeros_cols, k_zeros_rows, 0.0f, k_lanes_sum, NULL};
  static const k_reducer prodnz = {k_prodnz_cols, k_prodnz_rows, 1.0f, k_lanes_prod, NULL};
  int64_t nk = k_reduce_groups(&c->in[1].shape, c->param);
  if (c->req[0] == kNullOp || k_shape_numel(&c->in[1].shape) == 0) return 0;
  float *cnt = c->temp, *pnz = cnt + nk;
  k_call f = *c;
  f.in = c->in + 1;           /* k_reduce_run reads the input's shape from in[0] */
  k_reduce_run(&f, c->in[1].data, c->in[1].data, cnt, kWriteTo, &zeros);
  k_reduce_run(&f, c->in[1].data, c->in[1].data, pnz, kWriteTo, &prodnz);
  k_group g = {c->in[0].data, c->in[2].data, cnt, pnz};
  k_spread(c, g, k_prod_grad);
  return 0;
}

/* logsumexp, as torch computes it: m = the group's max (taken as 0 where it is infinite, so a
 * group of -inf gives -inf and one holding +inf gives +inf), then log(sum(exp(x - m))) + m. */
static inline float k_lse_shift(float m) { return m == INFINITY || m == -INFINITY ? 0.0f : m; }

K_VEC_TARGETS static void k_lse_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                                     int64_t s2) {
  if (first) for (int64_t k = 0; k < n; k++) t[k] = k_vm_exp(s.og[k] - k_lse_shift(s.x2[k * s2]));
  else for (int64_t k = 0; k < n; k++) t[k] += k_vm_exp(s.og[k] - k_lse_shift(s.x2[k * s2]));
}

K_VEC_TARGETS static void k_lse_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) {
  float m = k_lse_shift(s.x2[0]);
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] += k_vm_exp(s.og[k + i] - m);
  for (int i = 0; k + i < n; i++) l[i] += k_vm_exp(s.og[k + i] - m);
}

static float k_lse_post(float sum, float m) { return logf(sum) + k_lse_shift(m); }

size_t k_logsumexp_temp_bytes(const k_shape *args, const void *param) {
  return (size_t)k_reduce_groups(&args[0], param) * sizeof(float);
}

/* temp: the groups' maxima. */
int k_logsumexp_forward(const k_call *c) {
  static const k_reducer max = {k_max_cols, k_max_rows, -INFINITY, k_lanes_max, NULL};
  static const k_reducer lse = {k_lse_cols, k_lse_rows, 0.0f, k_lanes_sum, k_lse_post};
  if (c->req[0] == kNullOp) return 0;
  if (k_shape_numel(&c->in[0].shape) == 0) {
    k_reduce_fill(c->out[0].data, k_reduce_groups(&c->in[0].shape, c->param), -INFINITY, c->req[0]);
    return 0;
  }
  k_reduce_run(c, c->in[0].data, c->in[0].data, c->temp, kWriteTo, &max);
  k_reduce_run(c, c->in[0].data, c->temp, c->out[0].data, c->req[0], &lse);
  return 0;
}

K_VEC_TARGETS static void k_lse_grad(float *restrict t, const float *restrict x, k_group g, int64_t n,
                                     int64_t sk) {
  for (int64_t k = 0; k < n; k++) t[k] = g.og[k * sk] * k_vm_exp(x[k] - g.y[k * sk]);
}

int k_logsumexp_backward(const k_call *c) {
  k_group g = {c->in[0].data, c->in[2].data, c->in[0].data, c->in[0].data};
  k_spread(c, g, k_lse_grad);
  return 0;
}

/* norm (torch.linalg.vector_norm): ord 1 sums |x|, ord 2 takes the root of the sum of
 * squares; their gradients are og * sign(x) and x * (og / y), 0 where y is 0, as torch's. */
K_VEC_TARGETS static void k_l1_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                                    int64_t s2) {
  if (first) for (int64_t k = 0; k < n; k++) t[k] = fabsf(s.og[k]);
  else for (int64_t k = 0; k < n; k++) t[k] += fabsf(s.og[k]);
}

K_VEC_TARGETS static void k_l1_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) {
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] += fabsf(s.og[k + i]);
  for (int i = 0; k + i < n; i++) l[i] += fabsf(s.og[k + i]);
}

K_VEC_TARGETS static void k_l2_cols(float *restrict t, int first, k_bsrc s, int64_t n, int64_t s1,
                                    int64_t s2) {
  if (first) for (int64_t k = 0; k < n; k++) t[k] = s.og[k] * s.og[k];
  else for (int64_t k = 0; k < n; k++) t[k] += s.og[k] * s.og[k];
}

K_VEC_TARGETS static void k_l2_rows(float *restrict l, k_bsrc s, int64_t n, int64_t s1, int64_t s2) {
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] += s.og[k + i] * s.og[k + i];
  for (int i = 0; k + i < n; i++) l[i] += s.og[k + i] * s.og[k + i];
}

static float k_l2_post(float sum, float unused) { return sqrtf(sum); }

int k_norm_forward(const k_call *c) {
  static const k_reducer l1 = {k_l1_cols, k_l1_rows, 0.0f, k_lanes_sum, NULL};
  static const k_reducer l2 = {k_l2_cols, k_l2_rows, 0.0f, k_lanes_sum, k_l2_post};
  const k_reduce_param *p = c->param;
  k_reduce_run(c, c->in[0].data, c->in[0].data, c->out[0].data, c->req[0], p->ord == 1 ? &l1 : &l2);
  return 0;
}

K_VEC_TARGETS static void k_l1_grad(float *restrict t, const float *restrict x, k_group g, int64_t n,
                                    int64_t sk) {
  for (int64_t k = 0; k < n; k++) t[k] = g.og[k * sk] * (float)((x[k] > 0.0f) - (x[k] < 0.0f));
}

K_VEC_TARGETS static void k_l2_grad(float *restrict t, const float *restrict x, k_group g, int64_t n,
                                    int64_t sk) {
  for (int64_t k = 0; k < n; k++) t[k] = g.y[k * sk] == 0.0f ? 0.0f : x[k] * (g.og[k * sk] / g.y[k * sk]);
}

int k_norm_backward(const k_call *c) {
  const k_reduce_param *p = c->param;
  k_group g = {c->in[0].data, c->in[2].data, c->in[0].data, c->in[0].data};
  k_spread(c, g, p->ord == 1 ? k_l1_grad : k_l2_grad);
  return 0;
}
