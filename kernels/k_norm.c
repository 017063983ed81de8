/* k_norm.c — batch_norm (F.batch_norm: batch statistics and a moving-average update in train
 * mode, moving statistics in predict mode) and layer_norm (F.layer_norm over the last axis).
 * Both save the mean and 1/sqrt(var + eps) as hidden outputs for the backward pass. Statistics
 * are accumulated in double so that large batches match torch to float precision. batch_norm
 * is split over channels with k_parallel_for. */
#include "kernels.h"

#include <math.h>
#include <string.h>

static void k_put(float *y, float v, k_req r) { *y = r == kAddTo ? *y + v : v; }

/* A hidden output the caller may have pruned (predict mode): NULL when not wanted. */
static float *k_hidden(const k_call *c, int k) {
  return (c->nout > k && c->req[k] != kNullOp) ? (float *)c->out[k].data : NULL;  /* may be NULL */
}

/* Clears an accumulated gradient for kWriteTo; NULL when the gradient is not wanted. */
static float *k_grad_acc(const k_call *c, int k, int64_t n) {
  if (c->req[k] == kNullOp || !c->out[k].data) return NULL;
  if (c->req[k] != kAddTo) memset(c->out[k].data, 0, (size_t)n * sizeof(float));
  return c->out[k].data;
}

/* ---- batch_norm ------------------------------------------------------------------------ */

/* Channels are split over threads; each channel's statistics are summed by one chunk, in a
 * fixed order, so the bits do not depend on the thread count. Sums run in K_BN_LANES double
 * lanes (which vectorise; the compiler may not reorder a single sum) folded in lane order. */
#define K_BN_LANES 8

/* data viewed as [outer, C, inner] around the channel axis. */
typedef struct {
  const k_call *c;
  int64_t outer, C, inner;
} k_bn_job;

static k_bn_job k_bn_dims(const k_call *c, const k_shape *s, int axis) {
  k_bn_job j = {c, 1, s->d[axis], 1};
  for (int i = 0; i < axis; i++) j.outer *= s->d[i];
  for (int i = axis + 1; i < s->rank; i++) j.inner *= s->d[i];
  return j;
}

static double k_bn_fold(const double *lane) {
  double t = 0;
  for (int l = 0; l < K_BN_LANES; l++) t += lane[l];
  return t;
}

/* Channel ch's sum and sum of squares, in one pass. */
static void k_bn_sums(const k_bn_job *j, const float *x, int64_t ch, double *sum, double *sumsq) {
  double s[K_BN_LANES] = {0}, q[K_BN_LANES] = {0};
  int64_t n = j->inner, body = n - n % K_BN_LANES;
  for (int64_t o = 0; o < j->outer; o++) {
    const float *r = x + (o * j->C + ch) * n;
    for (int64_t i = 0; i < body; i += K_BN_LANES)
      for (int l = 0; l < K_BN_LANES; l++) {
        double v = r[i + l];
        s[l] += v;
        q[l] += v * v;
      }
    for (int64_t i = body; i < n; i++) s[i - body] += r[i], q[i - body] += (double)r[i] * r[i];
  }
  *sum = k_bn_fold(s);
  *sumsq = k_bn_fold(q);
}

/* Train mode: batch mean and biased variance from one pass (in double, E[x^2] - mean^2 loses
 * nothing that matters at float precision unless |mean| / std exceeds ~1e4), the moving
 * update with the unbiased variance. */
static void k_bn_train_stats(const k_bn_job *j, int64_t ch, float *mean, float *invstd) {
  const k_batch_norm_param *p = j->c->param;
  double S, Q, M = (double)(j->outer * j->inner);
  k_bn_sums(j, j->c->in[0].data, ch, &S, &Q);
  double m = S / M, v = Q / M - m * m;
  if (v < 0) v = 0;
  *mean = (float)m;
  *invstd = (float)(1.0 / sqrt(v + p->eps));
  float *mm = j->c->in[3].data, *mv = j->c->in[4].data;
  double unbiased = M > 1 ? v * M / (M - 1) : v;
  if (mm) mm[ch] = (float)(p->momentum * mm[ch] + (1.0 - p->momentum) * m);
  if (mv) mv[ch] = (float)(p->momentum * mv[ch] + (1.0 - p->momentum) * unbiased);
}

/* y = x * a + b over channel ch, honouring req. */
static void k_bn_apply(const k_bn_job *j, int64_t ch, float a, float b) {
  const float *x = j->c->in[0].data;
  float *y = j->c->out[0].data;
  int add = j->c->req[0] == kAddTo;
  for (int64_t o = 0; o < j->outer; o++) {
    int64_t at = (o * j->C + ch) * j->inner;
    const float *xr = x + at;
    float *yr = y + at;
    if (add)
      for (int64_t i = 0; i < j->inner; i++) yr[i] += xr[i] * a + b;
    else
      for (int64_t i = 0; i < j->inner; i++) yr[i] = xr[i] * a + b;
  }
}

static void k_bn_forward_channels(void *ctx, int64_t lo, int64_t hi) {
  const k_bn_job *j = ctx;
  const k_call *c = j->c;
  const k_batch_norm_param *p = c->param;
  const float *gamma = c->in[1].data, *beta = c->in[2].data;
  float *smean = k_hidden(c, 1), *sinv = k_hidden(c, 2);
  for (int64_t ch = lo; ch < hi; ch++) {
    float mean, invstd;
    if (c->is_train) {
      k_bn_train_stats(j, ch, &mean, &invstd);
    } else {
      mean = ((const float *)c->in[3].data)[ch];
      invstd = (float)(1.0 / sqrt((double)((const float *)c->in[4].data)[ch] + p->eps));
    }
    if (smean) smean[ch] = mean;
    if (sinv) sinv[ch] = invstd;
    if (c->req[0] == kNullOp) continue;
    float a = gamma[ch] * invstd;
    k_bn_apply(j, ch, a, beta[ch] - mean * a);
  }
}

/* Channels per chunk: about 16K elements each. */
static int64_t k_bn_grain(const k_bn_job *j) {
  int64_t per = j->outer * j->inner;
  return per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1);
}

int k_batch_norm_forward(const k_call *c) {
  const k_batch_norm_param *p = c->param;
  k_bn_job j = k_bn_dims(c, &c->in[0].shape, p->axis);
  k_parallel_for(j.C, k_bn_grain(&j), k_bn_forward_channels, &j);
  return 0;
}

/* Backward in = [dY, -, -, X, gamma, -, -, saved_mean, saved_invstd]; out = [dX, dgamma, dbeta].
 * dX = gamma*invstd * (dY - mean(dY) - xhat * mean(dY*xhat)) per channel (train formula). */
typedef struct {
  k_bn_job d;
  const float *dy, *x, *gamma, *smean, *sinv;
  float *dg, *db;
} k_bn_back;

/* Channel ch's sum of dY and of dY * (x - mean), in one pass. */
static void k_bn_grad_sums(const k_bn_back *b, int64_t ch, double *sdy, double *sdyd) {
  double s[K_BN_LANES] = {0}, q[K_BN_LANES] = {0}, m = b->smean[ch];
  int64_t n = b->d.inner, body = n - n % K_BN_LANES;
  for (int64_t o = 0; o < b->d.outer; o++) {
    int64_t at = (o * b->d.C + ch) * n;
    const float *x = b->x + at, *dy = b->dy + at;
    for (int64_t i = 0; i < body; i += K_BN_LANES)
      for (int l = 0; l < K_BN_LANES; l++) {
        double g = dy[i + l];
        s[l] += g;
        q[l] += g * ((double)x[i + l] - m);
      }
    for (int64_t i = body; i < n; i++) s[i - body] += dy[i], q[i - body] += (double)dy[i] * ((double)x[i] - m);
  }
  *sdy = k_bn_fold(s);
  *sdyd = k_bn_fold(q);
}

static void k_bn_grad_x(const k_bn_back *b, int64_t ch, float a, float mdy, float mdyx) {
  float mean = b->smean[ch], inv = b->sinv[ch];
  int add = b->d.c->req[0] == kAddTo;
  float *dx = b->d.c->out[0].data;
  for (int64_t o = 0; o < b->d.outer; o++) {
    int64_t at = (o * b->d.C + ch) * b->d.inner;
    const float *x = b->x + at, *dy = b->dy + at;
    float *d = dx + at;
    for (int64_t i = 0; i < b->d.inner; i++) {
      float v = a * (dy[i] - mdy - (x[i] - mean) * inv * mdyx);
      d[i] = add ? d[i] + v : v;
    }
  }
}

static void k_bn_backward_channels(void *ctx, int64_t lo, int64_t hi) {
  const k_bn_back *b = ctx;
  double M = (double)(b->d.outer * b->d.inner);
  for (int64_t ch = lo; ch < hi; ch++) {
    double sdy, sdyd;
    k_bn_grad_sums(b, ch, &sdy, &sdyd);
    double sdyx = sdyd * b->sinv[ch];
    if (b->dg) b->dg[ch] += (float)sdyx;
    if (b->db) b->db[ch] += (float)sdy;
    if (b->d.c->req[0] == kNullOp) continue;
    k_bn_grad_x(b, ch, b->gamma[ch] * b->sinv[ch], (float)(sdy / M), (float)(sdyx / M));
  }
}

int k_batch_norm_backward(const k_call *c) {
  const k_batch_norm_param *p = c->param;
  int nf = (c->nin - c->nout) / 2;            /* forward outputs: 3 */
  k_bn_back b = {k_bn_dims(c, &c->in[nf].shape, p->axis), c->in[0].data, c->in[nf].data,
                 c->in[nf + 1].data, c->in[2 * nf + 1].data, c->in[2 * nf + 2].data, NULL, NULL};
  b.dg = k_grad_acc(c, 1, b.d.C);
  b.db = k_grad_acc(c, 2, b.d.C);
  k_parallel_for(b.d.C, k_bn_grain(&b.d), k_bn_backward_channels, &b);
  return 0;
}

/* ---- layer_norm ------------------------------------------------------------------------ */

static void k_ln_row_stats(const float *x, int64_t d, float eps, float *mean, float *invstd) {
  double s = 0, ss = 0;
  for (int64_t j = 0; j < d; j++) s += x[j];
  double m = s / (double)d;
  for (int64_t j = 0; j < d; j++) ss += (x[j] - m) * (x[j] - m);
  *mean = (float)m;
  *invstd = (float)(1.0 / sqrt(ss / (double)d + eps));
}

int k_layer_norm_forward(const k_call *c) {
  const k_layer_norm_param *p = c->param;
  const k_shape *s = &c->in[0].shape;
  int64_t d = s->d[s->rank - 1], rows = d ? k_shape_numel(s) / d : 0;
  const float *x = c->in[0].data, *gamma = c->in[1].data, *beta = c->in[2].data;
  float *y = c->out[0].data, *smean = k_hidden(c, 1), *sinv = k_hidden(c, 2);
  for (int64_t r = 0; r < rows; r++) {
    float mean, invstd;
    k_ln_row_stats(x + r * d, d, p->eps, &mean, &invstd);
    if (smean) smean[r] = mean;
    if (sinv) sinv[r] = invstd;
    if (c->req[0] == kNullOp) continue;
    for (int64_t j = 0; j < d; j++)
      k_put(&y[r * d + j], (x[r * d + j] - mean) * invstd * gamma[j] + beta[j], c->req[0]);
  }
  return 0;
}

/* One row of dX: invstd * (g - mean(g) - xhat * mean(g*xhat)) with g = dY*gamma. */
static void k_ln_row_grad(const float *x, const float *dy, const float *gamma, int64_t d,
                          float mean, float invstd, k_req r, float *dx) {
  double sg = 0, sgx = 0;
  for (int64_t j = 0; j < d; j++) {
    double g = (double)dy[j] * gamma[j];
    sg += g;
    sgx += g * (x[j] - mean) * invstd;
  }
  float mg = (float)(sg / (double)d), mgx = (float)(sgx / (double)d);
  for (int64_t j = 0; j < d; j++)
    k_put(&dx[j], invstd * (dy[j] * gamma[j] - mg - (x[j] - mean) * invstd * mgx), r);
}

/* Backward in = [dY, -, -, X, gamma, -, -, saved_mean, saved_invstd]; out = [dX, dgamma, dbeta]. */
int k_layer_norm_backward(const k_call *c) {
  int nf = (c->nin - c->nout) / 2;
  const k_shape *s = &c->in[nf].shape;
  int64_t d = s->d[s->rank - 1], rows = d ? k_shape_numel(s) / d : 0;
  const float *dy = c->in[0].data, *x = c->in[nf].data, *gamma = c->in[nf + 1].data;
  const float *smean = c->in[2 * nf + 1].data, *sinv = c->in[2 * nf + 2].data;
  float *dg = k_grad_acc(c, 1, d), *db = k_grad_acc(c, 2, d);
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * d, *dyr = dy + r * d;
    for (int64_t j = 0; j < d && (dg || db); j++) {
      if (dg) dg[j] += dyr[j] * (xr[j] - smean[r]) * sinv[r];
      if (db) db[j] += dyr[j];
    }
    if (c->req[0] != kNullOp)
      k_ln_row_grad(xr, dyr, gamma, d, smean[r], sinv[r], c->req[0], (float *)c->out[0].data + r * d);
  }
  return 0;
}
