/* k_softmax.c — softmax and log_softmax over any axis, and softmax_cross_entropy.
 * Every row subtracts its max before exponentiating, so large logits (1000) stay finite;
 * a row is the axis of a tensor viewed as [outer, n, inner], walked at stride inner. */
#include <math.h>
#include <stdio.h>

#include "kernels.h"
#include "k_util.h"

typedef struct { int64_t outer, n, inner; } k_rows;

static k_rows k_rows_of(const k_shape *s, int axis) {
  k_rows r = {1, s->d[axis], 1};
  for (int i = 0; i < axis; i++) r.outer *= s->d[i];
  for (int i = axis + 1; i < s->rank; i++) r.inner *= s->d[i];
  return r;
}

/* Max and sum of exp(x - max) of one row; *lse = log-sum-exp. */
static void k_row_stats(const float *x, int64_t n, int64_t st, float *mx, double *lse) {
  float m = -INFINITY;
  double s = 0;
  for (int64_t j = 0; j < n; j++) m = x[j * st] > m ? x[j * st] : m;
  for (int64_t j = 0; j < n; j++) s += expf(x[j * st] - m);
  *mx = m;
  *lse = m + log(s);
}

/* Reads x[j] before writing y[j], so y may alias x. */
static int k_softmax_any_forward(const k_call *c, int is_log) {
  k_req req = c->req[0];
  if (req == kNullOp) return 0;
  k_rows r = k_rows_of(&c->in[0].shape, ((const k_softmax_param *)c->param)->axis);
  for (int64_t o = 0; o < r.outer; o++)
    for (int64_t i = 0; i < r.inner; i++) {
      int64_t base = o * r.n * r.inner + i;
      const float *x = (const float *)c->in[0].data + base;
      float *y = (float *)c->out[0].data + base, m;
      double lse;
      k_row_stats(x, r.n, r.inner, &m, &lse);
      for (int64_t j = 0; j < r.n; j++) {
        float z = (float)((double)x[j * r.inner] - lse);
        k_put(y, j * r.inner, is_log ? z : expf(z), req);
      }
    }
  return 0;
}

/* softmax: gx = y * (og - <og, y>);  log_softmax: gx = og - exp(y) * sum(og).
 * in = [og, x (NULL), y]; og[j] is read before gx[j] is written, so gx may alias og. */
static void k_softmax_row_grad(const float *og, const float *y, float *gx, int64_t n,
                               int64_t st, int is_log, k_req req) {
  double s = 0;
  for (int64_t j = 0; j < n; j++) s += is_log ? og[j * st] : (double)og[j * st] * y[j * st];
  for (int64_t j = 0; j < n; j++) {
    float g = og[j * st], v = y[j * st];
    k_put(gx, j * st, is_log ? g - expf(v) * (float)s : v * (g - (float)s), req);
  }
}

static int k_softmax_any_backward(const k_call *c, int is_log) {
  if (c->req[0] == kNullOp) return 0;
  k_rows r = k_rows_of(&c->in[0].shape, ((const k_softmax_param *)c->param)->axis);
  for (int64_t o = 0; o < r.outer; o++)
    for (int64_t i = 0; i < r.inner; i++) {
      int64_t base = o * r.n * r.inner + i;
      k_softmax_row_grad((const float *)c->in[0].data + base, (const float *)c->in[2].data + base,
                         (float *)c->out[0].data + base, r.n, r.inner, is_log, c->req[0]);
    }
  return 0;
}

int k_softmax_forward(const k_call *c) { return k_softmax_any_forward(c, 0); }
int k_log_softmax_forward(const k_call *c) { return k_softmax_any_forward(c, 1); }
int k_softmax_backward(const k_call *c) { return k_softmax_any_backward(c, 0); }
int k_log_softmax_backward(const k_call *c) { return k_softmax_any_backward(c, 1); }

/* ---- softmax_cross_entropy: logits [N, C], label i32 [N] -> mean_n(lse_n - x[n, label_n]) */
static int k_check_labels(const k_call *c, const int32_t *label, int64_t rows, int64_t classes) {
  for (int64_t i = 0; i < rows; i++)
    if (label[i] < 0 || label[i] >= classes) {
      snprintf(c->err, c->err_len,
               "softmax_cross_entropy: label %d of row %lld is outside [0, %lld)", (int)label[i],
               (long long)i, (long long)classes);
      return 1;
    }
  return 0;
}

int k_softmax_cross_entropy_forward(const k_call *c) {
  const k_shape *ls = &c->in[0].shape;
  int64_t rows = ls->d[0], classes = ls->d[1];
  const float *x = c->in[0].data;
  const int32_t *label = c->in[1].data;
  if (k_check_labels(c, label, rows, classes)) return 1;
  if (c->req[0] == kNullOp) return 0;
  double total = 0, lse;
  float m;
  for (int64_t i = 0; i < rows; i++) {
    k_row_stats(x + i * classes, classes, 1, &m, &lse);
    total += lse - x[i * classes + label[i]];
  }
  k_put(c->out[0].data, 0, (float)(total / (double)rows), c->req[0]);
  return 0;
}

/* in = [og (scalar), logits, label, loss (NULL)]; out = [g_logits, g_label (kNullOp)].
 * g = og / N * (softmax(x) - onehot(label)). */
int k_softmax_cross_entropy_backward(const k_call *c) {
  const k_shape *ls = &c->in[1].shape;
  int64_t rows = ls->d[0], classes = ls->d[1];
  const float *x = c->in[1].data;
  const int32_t *label = c->in[2].data;
  if (k_check_labels(c, label, rows, classes)) return 1;
  if (c->req[0] == kNullOp) return 0;
  float scale = ((const float *)c->in[0].data)[0] / (float)rows, m;
  float *gx = c->out[0].data;
  double lse;
  for (int64_t i = 0; i < rows; i++) {
    const float *row = x + i * classes;
    k_row_stats(row, classes, 1, &m, &lse);
    for (int64_t j = 0; j < classes; j++) {
      float p = expf((float)((double)row[j] - lse));
      k_put(gx, i * classes + j, scale * (p - (j == label[i] ? 1.0f : 0.0f)), c->req[0]);
    }
  }
  return 0;
}
