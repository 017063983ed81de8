/* k_norm.c — batch_norm (F.batch_norm: batch statistics and a moving-average update in train
 * mode, moving statistics in predict mode) and layer_norm (F.layer_norm over the last axis).
 * Both save the mean and 1/sqrt(var + eps) as hidden outputs for the backward pass. batch_norm
 * accumulates its statistics in double lanes (large batches match torch to float precision),
 * or takes the row sums its convolution gathered (K_BN_STATS_SLOT), and is split over
 * channels with k_parallel_for; layer_norm keeps a row in float partial
 * sums (a row is short and in cache) and is split over rows. Every sum has one fixed order. */
#include "kernels.h"
#include "k_vec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * fixed order, so the bits do not depend on the thread count. A channel's sums are those of
 * its rows (one per outer index: a sample's plane), each row summed in K_BN_LANES double lanes
 * (which vectorise; the compiler may not reorder a single sum) folded in lane order
 * (k_bn_row_sums), the rows' sums then added in outer order. A convolution that feeds a
 * training batch_norm gathers the same row sums while its output is in cache (k_epilogue.h's
 * K_EPI_STATS) and the batch_norm reads them (input slot K_BN_STATS_SLOT) instead of its data: the same
 * numbers added in the same order, so the same bits.
 * A chunk holds up to K_BN_RANGE channels and walks them in memory order (for each outer
 * index, its channels' rows one after another), not channel by channel: a channel's rows are
 * C * inner floats apart, and read that way (64 rows 64 KiB apart in the ResNet's first
 * stage) they conflict in the cache's sets, so the second pass over a channel found nothing
 * of the first in cache. */
#define K_BN_LANES 8
#define K_BN_RANGE 64
_Static_assert(K_BN_STATS_FLOATS * sizeof(float) == 2 * sizeof(double), "a row's two sums fill K_BN_STATS_FLOATS floats");

/* data viewed as [outer, C, inner] around the channel axis. */
typedef struct {
  const k_call *c;
  int64_t outer, C, inner;
  const float *given;    /* train: the row sums a convolution gathered ([outer][C] pairs of
                            doubles in K_BN_STATS_FLOATS floats, copied out), or NULL */
  double *job_sums;      /* synchronised: every channel's two sums, this rank's, then (after
                            k_bn_sync) the job's; NULL otherwise */
  int64_t count;         /* the rows' elements a channel's statistics are over: outer * inner,
                            times the ranks when synchronised */
} k_bn_job;

static k_bn_job k_bn_dims(const k_call *c, const k_shape *s, int axis) {
  k_bn_job j = {c, 1, s->d[axis], 1, NULL, NULL, 0};
  for (int i = 0; i < axis; i++) j.outer *= s->d[i];
  for (int i = axis + 1; i < s->rank; i++) j.inner *= s->d[i];
  j.count = j.outer * j.inner;
  return j;
}

/* ---- synchronised statistics (torch's SyncBatchNorm) ---- */

/* Whether this call's statistics are the whole job's: batch_norm(sync=true) in training with
 * the runtime's allreduce (a communication hook is set). */
static int k_bn_synced(const k_call *c) {
  const k_batch_norm_param *p = c->param;
  return p->sync && c->is_train && c->sync && c->sync->world > 1;
}

/* v[0, n) summed over the ranks in place. The hook sums floats, so each double travels as
 * two, its float and the remainder (hi + lo holds it to about 2^-48), summed apart: each
 * rank's part keeps its precision, and the job's sum is about a float's. 0, or 1 with the
 * message in c->err. */
static int k_bn_sync(const k_call *c, double *v, int64_t n, const char *what) {
  float *b = malloc((size_t)(2 * n) * sizeof *b);
  if (!b) return snprintf(c->err, c->err_len, "batch_norm: out of memory synchronising %s", what), 1;
  for (int64_t i = 0; i < n; i++) {
    float hi = (float)v[i];
    b[2 * i] = hi, b[2 * i + 1] = (float)(v[i] - (double)hi);
  }
  char err[256] = "";
  int rc = c->sync->allreduce(c->sync->ctx, b, 2 * n, err, sizeof err);
  if (rc) snprintf(c->err, c->err_len, "batch_norm: synchronising %s across %d ranks: %s", what, c->sync->world, err[0] ? err : "failed");
  for (int64_t i = 0; !rc && i < n; i++) v[i] = (double)b[2 * i] + (double)b[2 * i + 1];
  free(b);
  return rc;
}

/* One channel's two sums, in lanes. */
typedef struct {
  double s[K_BN_LANES], q[K_BN_LANES];
} k_bn_acc;

static double k_bn_fold(const double *lane) {
  double t = 0;
  for (int l = 0; l < K_BN_LANES; l++) t += lane[l];
  return t;
}

/* Row r (n floats) into a: the sum and the sum of squares. */
static inline void k_bn_acc_row(k_bn_acc *a, const float *r, int64_t n) {
  int64_t body = n - n % K_BN_LANES;
  for (int64_t i = 0; i < body; i += K_BN_LANES)
    for (int l = 0; l < K_BN_LANES; l++) {
      double v = r[i + l];
      a->s[l] += v;
      a->q[l] += v * v;
    }
  for (int64_t i = body; i < n; i++) a->s[i - body] += r[i], a->q[i - body] += (double)r[i] * r[i];
}

/* A row shorter than the lanes puts element i in lane i and zeros after it, so the fold is
 * the plain sum in element order (never -0, since it starts from +0): the same bits as
 * k_bn_row_sums without the lanes. batch_norm's channel loop takes this inline for the rows of
 * a 2-D input (one element each), where a call and a cleared lane set per row cost more than
 * the sums. */
static inline void k_bn_short_row_sums(const float *r, int64_t n, double sq[2]) {
  double s = 0, q = 0;
  for (int64_t i = 0; i < n; i++) s += r[i], q += (double)r[i] * r[i];
  sq[0] = s, sq[1] = q;
}

K_VEC_TARGETS void k_bn_row_sums(const float *r, int64_t n, double sq[2]) {
  if (n < K_BN_LANES) return k_bn_short_row_sums(r, n, sq);
  k_bn_acc a;
  memset(&a, 0, sizeof a);
  k_bn_acc_row(&a, r, n);
  sq[0] = k_bn_fold(a.s), sq[1] = k_bn_fold(a.q);
}

/* Channels [lo, hi)'s sums into sq[2 (ch - lo)] (sum) and [2 (ch - lo) + 1] (sum of squares):
 * each row's k_bn_row_sums, computed here in memory order or read from j->given, added in
 * outer order. */
static inline void k_bn_sums_range(const k_bn_job *j, const float *x, int64_t lo, int64_t hi, double *sq) {
  memset(sq, 0, (size_t)(hi - lo) * 2 * sizeof *sq);
  for (int64_t o = 0; o < j->outer; o++)
    for (int64_t ch = lo; ch < hi; ch++) {
      double r[2], *t = sq + 2 * (ch - lo);
      if (j->given) memcpy(r, j->given + (o * j->C + ch) * K_BN_STATS_FLOATS, sizeof r);
      else if (j->inner < K_BN_LANES) k_bn_short_row_sums(x + (o * j->C + ch) * j->inner, j->inner, r);
      else k_bn_row_sums(x + (o * j->C + ch) * j->inner, j->inner, r);
      t[0] += r[0], t[1] += r[1];
    }
}

/* Train mode: batch mean and biased variance from one pass (in double, E[x^2] - mean^2 loses
 * nothing that matters at float precision unless |mean| / std exceeds ~1e4), the moving
 * update with the unbiased variance. */
static inline void k_bn_train_stats(const k_bn_job *j, int64_t ch, const double *sq, float *mean, float *invstd) {
  const k_batch_norm_param *p = j->c->param;
  double S = sq[0], Q = sq[1], M = (double)j->count;
  double m = S / M, v = Q / M - m * m;
  if (v < 0) v = 0;
  *mean = (float)m;
  *invstd = (float)(1.0 / sqrt(v + p->eps));
  float *mm = j->c->in[3].data, *mv = j->c->in[4].data;
  double unbiased = M > 1 ? v * M / (M - 1) : v;
  if (mm) mm[ch] = (float)(p->momentum * mm[ch] + (1.0 - p->momentum) * m);
  if (mv) mv[ch] = (float)(p->momentum * mv[ch] + (1.0 - p->momentum) * unbiased);
}

/* y = x * a[ch - lo] + b[ch - lo] over channels [lo, hi), in memory order, honouring req. */
static inline void k_bn_apply_range(const k_bn_job *j, int64_t lo, int64_t hi, const float *a, const float *b) {
  const float *x = j->c->in[0].data;
  float *y = j->c->out[0].data;
  int add = j->c->req[0] == kAddTo;
  for (int64_t o = 0; o < j->outer; o++)
    for (int64_t ch = lo; ch < hi; ch++) {
      int64_t at = (o * j->C + ch) * j->inner;
      const float *xr = x + at;
      float *yr = y + at;
      float ca = a[ch - lo], cb = b[ch - lo];
      if (add)
        for (int64_t i = 0; i < j->inner; i++) yr[i] += xr[i] * ca + cb;
      else
        for (int64_t i = 0; i < j->inner; i++) yr[i] = xr[i] * ca + cb;
    }
}

K_VEC_TARGETS static void k_bn_forward_channels(void *ctx, int64_t lo, int64_t hi) {
  const k_bn_job *j = ctx;
  const k_call *c = j->c;
  const k_batch_norm_param *p = c->param;
  const float *gamma = c->in[1].data, *beta = c->in[2].data;
  float *smean = k_hidden(c, 1), *sinv = k_hidden(c, 2);
  double sq[2 * K_BN_RANGE];
  float a[K_BN_RANGE], b[K_BN_RANGE];
  if (j->job_sums) memcpy(sq, j->job_sums + 2 * lo, (size_t)(hi - lo) * 2 * sizeof *sq);
  else if (c->is_train) k_bn_sums_range(j, c->in[0].data, lo, hi, sq);
  for (int64_t ch = lo; ch < hi; ch++) {
    float mean, invstd, *ca = &a[ch - lo], *cb = &b[ch - lo];
    if (c->is_train) {
      k_bn_train_stats(j, ch, sq + 2 * (ch - lo), &mean, &invstd);
      *ca = gamma[ch] * invstd;
      *cb = beta[ch] - mean * *ca;
    } else {
      mean = ((const float *)c->in[3].data)[ch];
      k_batch_norm_predict_coeffs(gamma[ch], beta[ch], mean, ((const float *)c->in[4].data)[ch], p->eps,
                                  &invstd, ca, cb);
    }
    if (smean) smean[ch] = mean;
    if (sinv) sinv[ch] = invstd;
  }
  if (c->req[0] != kNullOp) k_bn_apply_range(j, lo, hi, a, b);
}

void k_batch_norm_predict_coeffs(float gamma, float beta, float mean, float var, float eps,
                                 float *invstd, float *a, float *b) {
  *invstd = (float)(1.0 / sqrt((double)var + eps));
  *a = gamma * *invstd;
  *b = beta - mean * *a;
}

/* Channels per chunk: about 16K elements each, up to K_BN_RANGE; with larger channels, a
 * quarter of them (whole rows in memory order for each chunk, and chunks for two or more
 * threads). Which channels share a chunk changes no result. */
static int64_t k_bn_grain(const k_bn_job *j) {
  int64_t per = j->outer * j->inner, g = per >= 16384 ? j->C / 4 : 16384 / (per > 0 ? per : 1);
  return g < 1 ? 1 : g > K_BN_RANGE ? K_BN_RANGE : g;
}

/* Points j->given at the row sums a convolution's epilogue gathered (input slot
 * K_BN_STATS_SLOT: [outer][C][2] doubles stored as [outer, C, K_BN_STATS_FLOATS] floats),
 * when the slot is there; nonzero, with a message, when their size is not the data's. */
static int k_bn_given(const k_call *c, k_bn_job *j) {
  if (c->nin <= K_BN_STATS_SLOT || !c->in[K_BN_STATS_SLOT].data) return 0;
  const k_tensor *t = &c->in[K_BN_STATS_SLOT];
  int64_t n = k_shape_numel(&t->shape);
  if (!c->is_train || t->dtype != K_F32 || n != j->outer * j->C * K_BN_STATS_FLOATS)
    return snprintf(c->err, c->err_len, "batch_norm: gathered statistics of %lld floats, not [%lld, %lld, %d] in training",
                    (long long)n, (long long)j->outer, (long long)j->C, K_BN_STATS_FLOATS), 1;
  j->given = t->data;
  return 0;
}

/* The job's sums from this rank's in j->job_sums (each channel's sum and sum of squares),
 * and j->count the job's. The hook sums floats, so a job's sum is good to about a float: the
 * sum of squares would lose the variance to cancellation where the mean outweighs the
 * deviation (a late layer's few positions), so it is not summed as it is. The sums first,
 * then each rank's squares about the job's mean (its own sums recentred, in double: no pass
 * over the data), which cancel nothing when summed; the job's sum of squares is rebuilt
 * from them in double. tmp holds C doubles. */
static int k_bn_job_moments(const k_call *c, k_bn_job *j, double *tmp) {
  double n = (double)j->count, M = n * c->sync->world;
  for (int64_t ch = 0; ch < j->C; ch++) tmp[ch] = j->job_sums[2 * ch];
  if (k_bn_sync(c, tmp, j->C, "the batch statistics")) return 1;
  for (int64_t ch = 0; ch < j->C; ch++) {
    double S = j->job_sums[2 * ch], Q = j->job_sums[2 * ch + 1], m = tmp[ch] / M;
    j->job_sums[2 * ch] = tmp[ch];
    tmp[ch] = Q - 2 * m * S + n * m * m;
  }
  if (k_bn_sync(c, tmp, j->C, "the batch statistics")) return 1;
  for (int64_t ch = 0; ch < j->C; ch++) {
    double m = j->job_sums[2 * ch] / M;
    j->job_sums[2 * ch + 1] = tmp[ch] + M * m * m;
  }
  j->count *= c->sync->world;
  return 0;
}

/* This rank's sums of channels [lo, hi) into job_sums (synchronised, before k_bn_sync). */
static void k_bn_sums_channels(void *ctx, int64_t lo, int64_t hi) {
  const k_bn_job *j = ctx;
  k_bn_sums_range(j, j->c->in[0].data, lo, hi, j->job_sums + 2 * lo);
}

int k_batch_norm_forward(const k_call *c) {
  const k_batch_norm_param *p = c->param;
  k_bn_job j = k_bn_dims(c, &c->in[0].shape, p->axis);
  if (k_bn_given(c, &j)) return 1;
  if (k_bn_synced(c)) {   /* every rank's sums first, then the statistics of them all */
    j.job_sums = malloc((size_t)(3 * j.C) * sizeof *j.job_sums);
    if (!j.job_sums) return snprintf(c->err, c->err_len, "batch_norm: out of memory"), 1;
    k_parallel_for(j.C, k_bn_grain(&j), k_bn_sums_channels, &j);
    if (k_bn_job_moments(c, &j, j.job_sums + 2 * j.C)) return free(j.job_sums), 1;
  }
  k_parallel_for(j.C, k_bn_grain(&j), k_bn_forward_channels, &j);
  free(j.job_sums);
  return 0;
}

/* Backward in = [dY, -, -, X, gamma, -, -, saved_mean, saved_invstd]; out = [dX, dgamma, dbeta].
 * dX = gamma*invstd * (dY - mean(dY) - xhat * mean(dY*xhat)) per channel (train formula). */
typedef struct {
  k_bn_job d;
  const float *dy, *x, *gamma, *smean, *sinv;
  float *dg, *db;
  double *local;   /* synchronised: every channel's sum of dY and of dY * xhat, this rank's
                      (dgamma and dbeta, which the hook's gradient sum then averages) */
} k_bn_back;

/* Row dy, x (n floats) of a channel with mean m into a: the sum of dY and of dY * (x - m). */
static inline void k_bn_grad_row(k_bn_acc *a, const float *dy, const float *x, double m, int64_t n) {
  int64_t body = n - n % K_BN_LANES;
  for (int64_t i = 0; i < body; i += K_BN_LANES)
    for (int l = 0; l < K_BN_LANES; l++) {
      double g = dy[i + l];
      a->s[l] += g;
      a->q[l] += g * ((double)x[i + l] - m);
    }
  for (int64_t i = body; i < n; i++) a->s[i - body] += dy[i], a->q[i - body] += (double)dy[i] * ((double)x[i] - m);
}

/* Channels [lo, hi)'s gradient sums into acc[0, hi - lo), in memory order. */
static inline void k_bn_grad_sums_range(const k_bn_back *b, int64_t lo, int64_t hi, k_bn_acc *acc) {
  memset(acc, 0, (size_t)(hi - lo) * sizeof *acc);
  for (int64_t o = 0; o < b->d.outer; o++)
    for (int64_t ch = lo; ch < hi; ch++) {
      int64_t at = (o * b->d.C + ch) * b->d.inner;
      k_bn_grad_row(&acc[ch - lo], b->dy + at, b->x + at, b->smean[ch], b->d.inner);
    }
}

/* dX over channels [lo, hi), in memory order, from each channel's a, mean(dY) and
 * mean(dY * xhat) (index ch - lo). */
static inline void k_bn_grad_x_range(const k_bn_back *b, int64_t lo, int64_t hi, const float *a, const float *mdy,
                              const float *mdyx) {
  int add = b->d.c->req[0] == kAddTo;
  float *dx = b->d.c->out[0].data;
  for (int64_t o = 0; o < b->d.outer; o++)
    for (int64_t ch = lo; ch < hi; ch++) {
      int64_t at = (o * b->d.C + ch) * b->d.inner;
      const float *x = b->x + at, *dy = b->dy + at;
      float *d = dx + at;
      float mean = b->smean[ch], inv = b->sinv[ch], ca = a[ch - lo], cm = mdy[ch - lo], cx = mdyx[ch - lo];
      for (int64_t i = 0; i < b->d.inner; i++) {
        float v = ca * (dy[i] - cm - (x[i] - mean) * inv * cx);
        d[i] = add ? d[i] + v : v;
      }
    }
}

/* Synchronised, the first pass: this rank's two sums of channels [lo, hi) into local, and
 * dgamma, dbeta from them. */
K_VEC_TARGETS static void k_bn_backward_sums(void *ctx, int64_t lo, int64_t hi) {
  const k_bn_back *b = ctx;
  k_bn_acc acc[K_BN_RANGE];
  k_bn_grad_sums_range(b, lo, hi, acc);
  for (int64_t ch = lo; ch < hi; ch++) {
    double sdy = k_bn_fold(acc[ch - lo].s), sdyx = k_bn_fold(acc[ch - lo].q) * b->sinv[ch];
    b->local[2 * ch] = sdy, b->local[2 * ch + 1] = sdyx;
    if (b->dg) b->dg[ch] += (float)sdyx;
    if (b->db) b->db[ch] += (float)sdy;
  }
}

K_VEC_TARGETS static void k_bn_backward_channels(void *ctx, int64_t lo, int64_t hi) {
  const k_bn_back *b = ctx;
  double M = (double)b->d.count;
  k_bn_acc acc[K_BN_RANGE];
  float a[K_BN_RANGE], mdy[K_BN_RANGE], mdyx[K_BN_RANGE];
  if (!b->d.job_sums) k_bn_grad_sums_range(b, lo, hi, acc);
  for (int64_t ch = lo; ch < hi; ch++) {
    double sdy, sdyx;
    if (b->d.job_sums) {   /* synchronised: the job's sums (dgamma and dbeta were this rank's) */
      sdy = b->d.job_sums[2 * ch], sdyx = b->d.job_sums[2 * ch + 1];
    } else {
      sdy = k_bn_fold(acc[ch - lo].s), sdyx = k_bn_fold(acc[ch - lo].q) * b->sinv[ch];
      if (b->dg) b->dg[ch] += (float)sdyx;
      if (b->db) b->db[ch] += (float)sdy;
    }
    a[ch - lo] = b->gamma[ch] * b->sinv[ch];
    mdy[ch - lo] = (float)(sdy / M);
    mdyx[ch - lo] = (float)(sdyx / M);
  }
  if (b->d.c->req[0] != kNullOp) k_bn_grad_x_range(b, lo, hi, a, mdy, mdyx);
}

int k_batch_norm_backward(const k_call *c) {
  const k_batch_norm_param *p = c->param;
  int nf = (c->nin - c->nout) / 2;            /* forward outputs: 3 */
  k_bn_back b = {k_bn_dims(c, &c->in[nf].shape, p->axis), c->in[0].data, c->in[nf].data,
                 c->in[nf + 1].data, c->in[2 * nf + 1].data, c->in[2 * nf + 2].data, NULL, NULL, NULL};
  b.dg = k_grad_acc(c, 1, b.d.C);
  b.db = k_grad_acc(c, 2, b.d.C);
  if (k_bn_synced(c)) {   /* the means of dY and dY * xhat over the job: every rank's sums */
    b.local = malloc((size_t)(4 * b.d.C) * sizeof *b.local);
    if (!b.local) return snprintf(c->err, c->err_len, "batch_norm: out of memory"), 1;
    k_parallel_for(b.d.C, k_bn_grain(&b.d), k_bn_backward_sums, &b);
    b.d.job_sums = b.local + 2 * b.d.C;
    memcpy(b.d.job_sums, b.local, (size_t)(2 * b.d.C) * sizeof *b.local);
    if (k_bn_sync(c, b.d.job_sums, 2 * b.d.C, "the gradient's means")) return free(b.local), 1;
    b.d.count *= c->sync->world;
  }
  k_parallel_for(b.d.C, k_bn_grain(&b.d), k_bn_backward_channels, &b);
  free(b.local);
  return 0;
}

/* ---- layer_norm ------------------------------------------------------------------------ */
/* Rows are contiguous (the axis is the last), so every pass vectorises along the row: the mean,
 * the centred sum of squares (two passes over a row in L1: one pass would lose digits to
 * cancellation), then the normalisation through a stack block. Rows are split with
 * k_parallel_for; dgamma and dbeta are split by columns instead, each summing all rows in
 * order, so no sum depends on the split. */

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

/* One row of dX: invstd * (g - mean(g) - xhat * mean(g*xhat)) with g = dY*gamma. The whole
 * vectors are written on vector types (as arrays of lanes gcc's SLP shuffled the partial sums
 * around); element k still goes to lane k % K_LANES, with the same operations in the same
 * order, so the bits are those of the plain loops. A vector of dY is read before dX's is
 * written, so dX may be dY. */
K_VEC_TARGETS static void k_ln_row_grad(const float *x, const float *dy, const float *gamma, int64_t d,
                          float mean, float invstd, k_req r, float *dx) {
  k_vf16 vg = {0}, vgx = {0}, vx, vdy, vgm;
  float lg[K_LANES], lgx[K_LANES];
  int64_t k = 0;
  for (; k + K_LANES <= d; k += K_LANES) {
    K_VF16_LOAD(vx, x + k);
    K_VF16_LOAD(vdy, dy + k);
    K_VF16_LOAD(vgm, gamma + k);
    k_vf16 g = vdy * vgm;
    vg += g;
    vgx += g * ((vx - mean) * invstd);
  }
  __builtin_memcpy(lg, &vg, sizeof lg);
  __builtin_memcpy(lgx, &vgx, sizeof lgx);
  for (int i = 0; k + i < d; i++) {
    float g = dy[k + i] * gamma[k + i];
    lg[i] += g;
    lgx[i] += g * ((x[k + i] - mean) * invstd);
  }
  float mg = k_lanes_sum(lg) / (float)d, mgx = k_lanes_sum(lgx) / (float)d;
  for (k = 0; k + K_LANES <= d; k += K_LANES) {
    K_VF16_LOAD(vx, x + k);
    K_VF16_LOAD(vdy, dy + k);
    K_VF16_LOAD(vgm, gamma + k);
    k_vf16 t = invstd * (vdy * vgm - mg - (vx - mean) * invstd * mgx), old;
    if (r == kAddTo) {
      K_VF16_LOAD(old, dx + k);
      t = old + t;
    }
    __builtin_memcpy(dx + k, &t, sizeof t);
  }
  for (; k < d; k++) {
    float t = invstd * (dy[k] * gamma[k] - mg - (x[k] - mean) * invstd * mgx);
    dx[k] = r == kAddTo ? dx[k] + t : t;
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
