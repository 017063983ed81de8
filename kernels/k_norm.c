/* k_norm.c — batch_norm (F.batch_norm: batch statistics and a moving-average update in train
 * mode, moving statistics in predict mode) and layer_norm (F.layer_norm over the last axis).
 * Both save the mean and 1/sqrt(var + eps) as hidden outputs for the backward pass. Statistics
 * are accumulated in double so that large batches match torch to float precision. */
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

/* data viewed as [outer, C, inner] around the channel axis. */
static void k_bn_dims(const k_shape *s, int axis, int64_t *outer, int64_t *C, int64_t *inner) {
  *outer = 1; *inner = 1; *C = s->d[axis];
  for (int i = 0; i < axis; i++) *outer *= s->d[i];
  for (int i = axis + 1; i < s->rank; i++) *inner *= s->d[i];
}

/* Mean and biased variance of channel ch (two passes, double). */
static void k_bn_stats(const float *x, int64_t outer, int64_t C, int64_t inner, int64_t ch,
                       double *mean, double *var) {
  double s = 0, ss = 0, M = (double)(outer * inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) s += x[(o * C + ch) * inner + i];
  *mean = s / M;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double d = x[(o * C + ch) * inner + i] - *mean;
      ss += d * d;
    }
  *var = ss / M;
}

/* Train mode: batch statistics, saved outputs, and the moving update with unbiased variance. */
static void k_bn_train_stats(const k_call *c, int64_t outer, int64_t C, int64_t inner, int64_t ch,
                             float *mean, float *invstd) {
  const k_batch_norm_param *p = c->param;
  double m, v, M = (double)(outer * inner);
  k_bn_stats(c->in[0].data, outer, C, inner, ch, &m, &v);
  *mean = (float)m;
  *invstd = (float)(1.0 / sqrt(v + p->eps));
  float *mm = c->in[3].data, *mv = c->in[4].data;
  double unbiased = M > 1 ? v * M / (M - 1) : v;
  if (mm) mm[ch] = (float)(p->momentum * mm[ch] + (1.0 - p->momentum) * m);
  if (mv) mv[ch] = (float)(p->momentum * mv[ch] + (1.0 - p->momentum) * unbiased);
}

int k_batch_norm_forward(const k_call *c) {
  const k_batch_norm_param *p = c->param;
  int64_t outer, C, inner;
  k_bn_dims(&c->in[0].shape, p->axis, &outer, &C, &inner);
  const float *x = c->in[0].data, *gamma = c->in[1].data, *beta = c->in[2].data;
  float *y = c->out[0].data, *smean = k_hidden(c, 1), *sinv = k_hidden(c, 2);
  for (int64_t ch = 0; ch < C; ch++) {
    float mean, invstd;
    if (c->is_train) {
      k_bn_train_stats(c, outer, C, inner, ch, &mean, &invstd);
    } else {
      mean = ((const float *)c->in[3].data)[ch];
      invstd = (float)(1.0 / sqrt((double)((const float *)c->in[4].data)[ch] + p->eps));
    }
    if (smean) smean[ch] = mean;
    if (sinv) sinv[ch] = invstd;
    if (c->req[0] == kNullOp) continue;
    float a = gamma[ch] * invstd, b = beta[ch] - mean * a;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t i = 0; i < inner; i++) {
        int64_t k = (o * C + ch) * inner + i;
        k_put(&y[k], x[k] * a + b, c->req[0]);
      }
  }
  return 0;
}

/* Backward in = [dY, -, -, X, gamma, -, -, saved_mean, saved_invstd]; out = [dX, dgamma, dbeta].
 * dX = gamma*invstd * (dY - mean(dY) - xhat * mean(dY*xhat)) per channel (train formula). */
int k_batch_norm_backward(const k_call *c) {
  const k_batch_norm_param *p = c->param;
  int nf = (c->nin - c->nout) / 2;            /* forward outputs: 3 */
  const float *dy = c->in[0].data, *x = c->in[nf].data, *gamma = c->in[nf + 1].data;
  const float *smean = c->in[2 * nf + 1].data, *sinv = c->in[2 * nf + 2].data;
  int64_t outer, C, inner;
  k_bn_dims(&c->in[nf].shape, p->axis, &outer, &C, &inner);
  float *dg = k_grad_acc(c, 1, C), *db = k_grad_acc(c, 2, C), *dx = c->out[0].data;
  double M = (double)(outer * inner);
  for (int64_t ch = 0; ch < C; ch++) {
    double sdy = 0, sdyx = 0;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t i = 0; i < inner; i++) {
        int64_t k = (o * C + ch) * inner + i;
        sdy += dy[k];
        sdyx += dy[k] * (x[k] - smean[ch]) * sinv[ch];
      }
    if (dg) dg[ch] += (float)sdyx;
    if (db) db[ch] += (float)sdy;
    if (c->req[0] == kNullOp) continue;
    float a = gamma[ch] * sinv[ch], mdy = (float)(sdy / M), mdyx = (float)(sdyx / M);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t i = 0; i < inner; i++) {
        int64_t k = (o * C + ch) * inner + i;
        float xhat = (x[k] - smean[ch]) * sinv[ch];
        k_put(&dx[k], a * (dy[k] - mdy - xhat * mdyx), c->req[0]);
      }
  }
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
