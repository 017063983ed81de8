/* k_conv.c — convolution (F.conv1d / F.conv2d with stride, padding, dilation and groups),
 * forward and backward, by im2col + cblas_sgemm one sample at a time. A 1-D convolution is run
 * as a 2-D one of height 1. The column buffer lives in c->temp (k_conv_temp_bytes). */
#include "kernels.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  int64_t N, C, H, W;            /* input */
  int64_t F, G, Cg, Fg;          /* filters, groups, channels and filters per group */
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t OH, OW;
  int64_t ckk, ohw;              /* rows (C*kh*kw) and columns (OH*OW) of the column buffer */
} k_conv_geom;

static int64_t k_conv_out_len(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t dil) {
  int64_t span = dil * (k - 1) + 1;
  return in + 2 * pad < span ? 0 : (in + 2 * pad - span) / s + 1;
}

/* Reads 1-D parameters into the height-1 slot so the rest of the file sees only 2-D. */
static k_conv_geom k_conv_geometry(const k_shape *x, const k_shape *w, const k_conv_param *p) {
  k_conv_geom g;
  int two = p->kernel.n == 2;
  g.N = x->d[0]; g.C = x->d[1];
  g.H = two ? x->d[2] : 1;  g.W = x->d[x->rank - 1];
  g.F = w->d[0];
  g.G = p->num_group > 0 ? p->num_group : 1;
  g.Cg = g.C / g.G; g.Fg = g.F / g.G;
  g.kh = two ? p->kernel.v[0] : 1;  g.kw = p->kernel.v[p->kernel.n - 1];
  g.sh = two ? p->stride.v[0] : 1;  g.sw = p->stride.v[p->kernel.n - 1];
  g.ph = two ? p->pad.v[0] : 0;     g.pw = p->pad.v[p->kernel.n - 1];
  g.dh = two ? p->dilate.v[0] : 1;  g.dw = p->dilate.v[p->kernel.n - 1];
  g.OH = k_conv_out_len(g.H, g.kh, g.sh, g.ph, g.dh);
  g.OW = k_conv_out_len(g.W, g.kw, g.sw, g.pw, g.dw);
  g.ckk = g.C * g.kh * g.kw;
  g.ohw = g.OH * g.OW;
  return g;
}

/* One sample's column buffer: [C*kh*kw, OH*OW]. Backward reuses it for the input gradient
 * columns after the weight gradient has consumed the im2col copy. */
size_t k_conv_temp_bytes(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  k_conv_geom g = k_conv_geometry(data, weight, p);
  return (size_t)(g.ckk * g.ohw) * sizeof(float);
}

/* A 1x1 kernel with unit stride and no padding reads the input as its own column buffer. */
static int k_conv_is_pointwise(const k_conv_geom *g) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* Output columns [lo, hi) whose tap kj lands inside the row (iw = ow*sw - pw + kj*dw in
 * [0, W)); the columns outside read padding. Hoisting this out of the inner loops lets them
 * copy without a bounds test per element. */
static void k_conv_ow_range(const k_conv_geom *g, int64_t kj, int64_t *lo, int64_t *hi) {
  int64_t off = kj * g->dw - g->pw;
  *lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
  *hi = g->W - off <= 0 ? 0 : (g->W - off - 1) / g->sw + 1;
  if (*hi > g->OW) *hi = g->OW;
  if (*lo > *hi) *lo = *hi;
}

/* One column-buffer row segment (output row oh, tap (ki, kj)) from input row xr. */
static void k_im2col_segment(const k_conv_geom *g, const float *xr, int64_t off, int64_t lo,
                             int64_t hi, float *r) {
  memset(r, 0, (size_t)lo * sizeof(float));
  if (g->sw == 1)
    memcpy(r + lo, xr + lo + off, (size_t)(hi - lo) * sizeof(float));
  else
    for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow * g->sw + off];
  memset(r + hi, 0, (size_t)(g->OW - hi) * sizeof(float));
}

/* Row (ch, ki, kj) of the column buffer holds x[ch, oh*sh - ph + ki*dh, ow*sw - pw + kj*dw]
 * for every output position, zero where that falls in the padding. */
static void k_im2col(const k_conv_geom *g, const float *x, float *col) {
  for (int64_t ch = 0; ch < g->C; ch++)
    for (int64_t ki = 0; ki < g->kh; ki++)
      for (int64_t kj = 0; kj < g->kw; kj++) {
        float *row = col + ((ch * g->kh + ki) * g->kw + kj) * g->ohw;
        const float *xc = x + ch * g->H * g->W;
        int64_t lo, hi, off = kj * g->dw - g->pw;
        k_conv_ow_range(g, kj, &lo, &hi);
        for (int64_t oh = 0; oh < g->OH; oh++) {
          int64_t ih = oh * g->sh - g->ph + ki * g->dh;
          float *r = row + oh * g->OW;
          if (ih < 0 || ih >= g->H) memset(r, 0, (size_t)g->OW * sizeof(float));
          else k_im2col_segment(g, xc + ih * g->W, off, lo, hi, r);
        }
      }
}

/* The adjoint of k_im2col: every column entry is added back to the input element it came
 * from (padding entries are dropped). */
static void k_col2im(const k_conv_geom *g, const float *col, float *dx) {
  for (int64_t ch = 0; ch < g->C; ch++)
    for (int64_t ki = 0; ki < g->kh; ki++)
      for (int64_t kj = 0; kj < g->kw; kj++) {
        const float *row = col + ((ch * g->kh + ki) * g->kw + kj) * g->ohw;
        float *xc = dx + ch * g->H * g->W;
        int64_t lo, hi, off = kj * g->dw - g->pw;
        k_conv_ow_range(g, kj, &lo, &hi);
        for (int64_t oh = 0; oh < g->OH; oh++) {
          int64_t ih = oh * g->sh - g->ph + ki * g->dh;
          if (ih < 0 || ih >= g->H) continue;
          const float *r = row + oh * g->OW;
          float *xr = xc + ih * g->W;
          for (int64_t ow = lo; ow < hi; ow++) xr[ow * g->sw + off] += r[ow];
        }
      }
}

static int k_conv_check_temp(const k_call *c, const k_conv_geom *g) {
  size_t need = (size_t)(g->ckk * g->ohw) * sizeof(float);
  if (k_conv_is_pointwise(g) || (c->temp && c->temp_bytes >= need)) return 0;
  snprintf(c->err, c->err_len, "convolution: temp space %zu bytes, need %zu", c->temp_bytes, need);
  return 1;
}

/* Y[n] starts as the bias (or keeps its old value for kAddTo) so the GEMMs accumulate. */
static float k_conv_bias_init(const k_conv_geom *g, const float *bias, k_req r, float *y) {
  if (!bias) return r == kAddTo ? 1.0f : 0.0f;
  for (int64_t f = 0; f < g->F; f++)
    for (int64_t i = 0; i < g->ohw; i++)
      y[f * g->ohw + i] = (r == kAddTo ? y[f * g->ohw + i] : 0.0f) + bias[f];
  return 1.0f;
}

int k_convolution_forward(const k_call *c) {
  const k_conv_param *p = c->param;
  if (c->req[0] == kNullOp) return 0;
  k_conv_geom g = k_conv_geometry(&c->in[0].shape, &c->in[1].shape, p);
  if (k_conv_check_temp(c, &g)) return 1;
  const float *X = c->in[0].data, *Wt = c->in[1].data;
  const float *bias = p->no_bias ? NULL : c->in[2].data;
  float *Y = c->out[0].data, *col = c->temp;
  int64_t wg = g.Fg * g.Cg * g.kh * g.kw, ckk_g = g.Cg * g.kh * g.kw;
  for (int64_t n = 0; n < g.N; n++) {
    const float *xn = X + n * g.C * g.H * g.W;
    float *yn = Y + n * g.F * g.ohw;
    float beta = k_conv_bias_init(&g, bias, c->req[0], yn);
    const float *cols = k_conv_is_pointwise(&g) ? xn : col;
    if (cols == col) k_im2col(&g, xn, col);
    for (int64_t gi = 0; gi < g.G; gi++)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g.Fg, (int)g.ohw, (int)ckk_g,
                  1.0f, Wt + gi * wg, (int)ckk_g, cols + gi * ckk_g * g.ohw, (int)g.ohw, beta,
                  yn + gi * g.Fg * g.ohw, (int)g.ohw);
  }
  return 0;
}

/* dW[g] += dY[n, g] . col[g]^T for one sample (dW cleared beforehand for kWriteTo). */
static void k_conv_grad_w(const k_conv_geom *g, const float *dyn, const float *cols, float *dW) {
  int64_t ckk_g = g->Cg * g->kh * g->kw, wg = g->Fg * ckk_g;
  for (int64_t gi = 0; gi < g->G; gi++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->Fg, (int)ckk_g, (int)g->ohw,
                1.0f, dyn + gi * g->Fg * g->ohw, (int)g->ohw, cols + gi * ckk_g * g->ohw,
                (int)g->ohw, 1.0f, dW + gi * wg, (int)ckk_g);
}

/* dcol[g] = W[g]^T . dY[n, g]; beta lets the pointwise path write dX[n] directly. */
static void k_conv_grad_cols(const k_conv_geom *g, const float *dyn, const float *Wt, float beta,
                             float *dcol) {
  int64_t ckk_g = g->Cg * g->kh * g->kw, wg = g->Fg * ckk_g;
  for (int64_t gi = 0; gi < g->G; gi++)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk_g, (int)g->ohw, (int)g->Fg,
                1.0f, Wt + gi * wg, (int)ckk_g, dyn + gi * g->Fg * g->ohw, (int)g->ohw, beta,
                dcol + gi * ckk_g * g->ohw, (int)g->ohw);
}

static void k_conv_grad_bias(const k_conv_geom *g, const float *dY, k_req r, float *db) {
  if (r == kNullOp) return;
  if (r != kAddTo) memset(db, 0, (size_t)g->F * sizeof(float));
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t f = 0; f < g->F; f++) {
      const float *d = dY + (n * g->F + f) * g->ohw;
      float s = 0.0f;
      for (int64_t i = 0; i < g->ohw; i++) s += d[i];
      db[f] += s;
    }
}

/* One sample's weight and input gradients; the column buffer serves both in turn. */
static void k_conv_backward_sample(const k_call *c, const k_conv_geom *g, int64_t n) {
  int64_t xsz = g->C * g->H * g->W;
  const float *xn = (const float *)c->in[1].data + n * xsz;
  const float *dyn = (const float *)c->in[0].data + n * g->F * g->ohw;
  float *col = c->temp;
  int pointwise = k_conv_is_pointwise(g);
  if (c->req[1] != kNullOp) {
    const float *cols = pointwise ? xn : col;
    if (!pointwise) k_im2col(g, xn, col);
    k_conv_grad_w(g, dyn, cols, c->out[1].data);
  }
  if (c->req[0] == kNullOp) return;
  float *dxn = (float *)c->out[0].data + n * xsz;
  if (pointwise) {
    k_conv_grad_cols(g, dyn, c->in[2].data, c->req[0] == kAddTo ? 1.0f : 0.0f, dxn);
    return;
  }
  k_conv_grad_cols(g, dyn, c->in[2].data, 0.0f, col);
  if (c->req[0] != kAddTo) memset(dxn, 0, (size_t)xsz * sizeof(float));
  k_col2im(g, col, dxn);
}

/* Backward in = [dY, X, W, (b), Y]; out = [dX, dW, (db)]. */
int k_convolution_backward(const k_call *c) {
  const k_conv_param *p = c->param;
  k_conv_geom g = k_conv_geometry(&c->in[1].shape, &c->in[2].shape, p);
  if (k_conv_check_temp(c, &g)) return 1;
  if (c->req[1] == kWriteTo || c->req[1] == kWriteInplace)
    memset(c->out[1].data, 0, (size_t)k_shape_numel(&c->out[1].shape) * sizeof(float));
  for (int64_t n = 0; n < g.N; n++) k_conv_backward_sample(c, &g, n);
  if (!p->no_bias) k_conv_grad_bias(&g, c->in[0].data, c->req[2], c->out[2].data);
  return 0;
}
