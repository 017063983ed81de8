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
/* Rows are contiguous (the axis is the last), so every pass vectorises along the row: the mean,
 * the centred sum of squares (two passes over a row in L1: one pass would lose digits to
 * cancellation), then the normalisation through a stack block. Rows are split with
 * k_parallel_for; dgamma and dbeta are split by columns instead, each summing all rows in
 * order, so no sum depends on the split. */
#include "k_vec.h"

static inline void k_ln_row_stats(const float *x, int64_t d, float eps, float *mean, float *invstd) {
  float l[K_LANES] = {0}, m = d ? k_vec_sum(x, d) / (float)d : 0.0f;
  int64_t k = 0;
  for (; k + K_LANES <= d; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] += (x[k + i] - m) * (x[k + i] - m);
  for (int i = 0; k + i < d; i++) l[i] += (x[k + i] - m) * (x[k + i] - m);
  *mean = m;
  *invstd = 1.0f / sqrtf(k_lanes_sum(l) / (float)d + eps);
}

typedef struct {
  const k_call *c;
  const float *x, *dy, *gamma, *beta, *smean, *sinv;
  float *out;                       /* y, or dX */
  float *mean, *inv;                /* forward: the hidden outputs (NULL when pruned) */
  float *dgamma, *dbeta;            /* backward: NULL when not wanted */
  int64_t d, rows;
} k_ln_job;

K_VEC_TARGETS static void k_ln_forward_range(void *ctx, int64_t lo, int64_t hi) {
  const k_ln_job *j = ctx;
  int64_t d = j->d;
  float t[K_BLOCK], eps = ((const k_layer_norm_param *)j->c->param)->eps;
  for (int64_t r = lo; r < hi; r++) {
    const float *x = j->x + r * d;
    float mean, invstd;
    k_ln_row_stats(x, d, eps, &mean, &invstd);
    if (j->mean) j->mean[r] = mean;
    if (j->inv) j->inv[r] = invstd;
    if (j->c->req[0] == kNullOp) continue;
    for (int64_t k0 = 0; k0 < d; k0 += K_BLOCK) {
      int64_t len = d - k0 < K_BLOCK ? d - k0 : K_BLOCK;
      const float *xb = x + k0, *g = j->gamma + k0, *b = j->beta + k0;
      for (int64_t k = 0; k < len; k++) t[k] = (xb[k] - mean) * invstd * g[k] + b[k];
      k_store_block(j->out + r * d + k0, t, len, j->c->req[0]);
    }
  }
}

int k_layer_norm_forward(const k_call *c) {
  const k_shape *s = &c->in[0].shape;
  int64_t d = s->d[s->rank - 1], rows = d ? k_shape_numel(s) / d : 0;
  k_ln_job j = {.c = c, .x = c->in[0].data, .gamma = c->in[1].data, .beta = c->in[2].data,
                .out = c->out[0].data, .mean = k_hidden(c, 1), .inv = k_hidden(c, 2), .d = d};
  k_parallel_for(rows, k_vec_grain(d), k_ln_forward_range, &j);
  return 0;
}

/* One row of dX: invstd * (g - mean(g) - xhat * mean(g*xhat)) with g = dY*gamma. */
K_VEC_TARGETS static void k_ln_row_grad(const float *x, const float *dy, const float *gamma, int64_t d,
                          float mean, float invstd, k_req r, float *dx) {
  float lg[K_LANES] = {0}, lgx[K_LANES] = {0}, t[K_BLOCK];
  int64_t k = 0;
  for (; k + K_LANES <= d; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) {
      float g = dy[k + i] * gamma[k + i];
      lg[i] += g;
      lgx[i] += g * ((x[k + i] - mean) * invstd);
    }
  for (int i = 0; k + i < d; i++) {
    float g = dy[k + i] * gamma[k + i];
    lg[i] += g;
    lgx[i] += g * ((x[k + i] - mean) * invstd);
  }
  float mg = k_lanes_sum(lg) / (float)d, mgx = k_lanes_sum(lgx) / (float)d;
  for (int64_t k0 = 0; k0 < d; k0 += K_BLOCK) {
    int64_t len = d - k0 < K_BLOCK ? d - k0 : K_BLOCK;
    const float *xb = x + k0, *dyb = dy + k0, *gb = gamma + k0;
    for (int64_t i = 0; i < len; i++)
      t[i] = invstd * (dyb[i] * gb[i] - mg - (xb[i] - mean) * invstd * mgx);
    k_store_block(dx + k0, t, len, r);
  }
}

static void k_ln_dx_range(void *ctx, int64_t lo, int64_t hi) {
  const k_ln_job *j = ctx;
  for (int64_t r = lo; r < hi; r++)
    k_ln_row_grad(j->x + r * j->d, j->dy + r * j->d, j->gamma, j->d, j->smean[r], j->sinv[r],
                  j->c->req[0], j->out + r * j->d);
}

/* dgamma += sum_r dY * xhat and dbeta += sum_r dY for columns [lo, hi), rows in order. */
K_VEC_TARGETS static void k_ln_dparams_range(void *ctx, int64_t lo, int64_t hi) {
  const k_ln_job *j = ctx;
  int64_t d = j->d, rows = j->rows;
  float ag[K_BLOCK], ab[K_BLOCK];
  for (int64_t k0 = lo; k0 < hi; k0 += K_BLOCK) {
    int64_t len = hi - k0 < K_BLOCK ? hi - k0 : K_BLOCK;
    for (int64_t k = 0; k < len; k++) ag[k] = ab[k] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
      const float *x = j->x + r * d + k0, *dy = j->dy + r * d + k0;
      float m = j->smean[r], inv = j->sinv[r];
      for (int64_t k = 0; k < len; k++) {
        ag[k] += dy[k] * ((x[k] - m) * inv);
        ab[k] += dy[k];
      }
    }
    if (j->dgamma) for (int64_t k = 0; k < len; k++) j->dgamma[k0 + k] += ag[k];
    if (j->dbeta) for (int64_t k = 0; k < len; k++) j->dbeta[k0 + k] += ab[k];
  }
}

/* Backward in = [dY, -, -, X, gamma, -, -, saved_mean, saved_invstd]; out = [dX, dgamma, dbeta].
 * dgamma and dbeta are summed before dX is written, and each dX row through a block, so dX
 * could even overwrite dY. */
int k_layer_norm_backward(const k_call *c) {
  int nf = (c->nin - c->nout) / 2;
  const k_shape *s = &c->in[nf].shape;
  int64_t d = s->d[s->rank - 1], rows = d ? k_shape_numel(s) / d : 0;
  k_ln_job j = {.c = c, .x = c->in[nf].data, .dy = c->in[0].data, .gamma = c->in[nf + 1].data,
                .smean = c->in[2 * nf + 1].data, .sinv = c->in[2 * nf + 2].data,
                .out = c->out[0].data, .dgamma = k_grad_acc(c, 1, d), .dbeta = k_grad_acc(c, 2, d),
                .d = d, .rows = rows};
  if (j.dgamma || j.dbeta) k_parallel_for(d, K_BLOCK, k_ln_dparams_range, &j);
  if (c->req[0] != kNullOp) k_parallel_for(rows, k_vec_grain(d), k_ln_dx_range, &j);
  return 0;
}
