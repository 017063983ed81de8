/* k_conv.c — convolution (F.conv1d / F.conv2d with stride, padding, dilation and groups),
 * forward and backward, by im2col + GEMM. The batch is cut into at most K_CONV_PARTS parts,
 * run in parallel by k_parallel_for, each with its own buffers in c->temp; a part takes its
 * samples in chunks wide enough to give the GEMM about K_CONV_COLS columns (small feature maps
 * otherwise make many thin GEMMs). A 1-D convolution runs as a 2-D one of height 1. Each axis's
 * padding at its start and at its end may differ (k_conv_pad_begin / _end): im2col reads the
 * start's offset and sizes the output by both, and so do the direct paths (k_conv_direct.c,
 * k_conv_dw.c, whose packed copies take the pads as they are made), so every path computes
 * F.conv2d(F.pad(x, ...)) with no pad node, a copy of x, before it. */
#include "kernels.h"
#include "k_profile.h"
#include "k_conv_direct.h"
#include "k_conv_dw.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "k_blas.h"
#include "k_epilogue.h"
#include "k_vec.h"

typedef struct {
  int64_t N, C, H, W;            /* input */
  int64_t F, G, Cg, Fg;          /* filters, groups, channels and filters per group */
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t ph, pw, phe, pwe;      /* padding at the start and at the end of each axis */
  int64_t OH, OW;
  int64_t ckk, ohw;              /* rows (C*kh*kw) and columns per sample (OH*OW) of im2col */
  int64_t P;                     /* parts of the batch, each with its own buffers */
  int64_t S;                     /* samples per chunk, at most */
  int64_t wsz;                   /* weight elements, F * Cg*kh*kw */
} k_conv_geom;

/* Minimum GEMM width: samples are batched so that a product has at least this many columns,
 * amortising OpenBLAS's per-call packing of the weights (and its thread start-up when it is
 * threaded) — an 8x8 feature map gives only 64 columns per sample. */
#define K_CONV_COLS 1024

/* The temp space is planned at compile time but the thread count is known only at run time,
 * so the batch is split into a fixed number of parts (not one per thread): each running part
 * borrows one of P column and staging buffers, and in backward owns a weight-gradient
 * partial, summed into dW in part order. Fixed parts make the result independent of the thread count; up to
 * K_CONV_PARTS threads work on one convolution of a batch of at least that many samples. */
#define K_CONV_PARTS 4

static int64_t k_conv_out_len(int64_t in, int64_t k, int64_t s, int64_t begin, int64_t end, int64_t dil) {
  int64_t span = dil * (k - 1) + 1, padded = in + begin + end;
  return padded < span ? 0 : (padded - span) / s + 1;
}

/* A 1x1 kernel with unit stride and no padding reads the input as its own column buffer. */
static int k_conv_is_pointwise(const k_conv_geom *g) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 && g->phe == 0 &&
         g->pwe == 0;
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
  g.ph = two ? k_conv_pad_begin(p, 0) : 0;  g.pw = k_conv_pad_begin(p, p->kernel.n - 1);
  g.phe = two ? k_conv_pad_end(p, 0) : 0;   g.pwe = k_conv_pad_end(p, p->kernel.n - 1);
  g.dh = two ? p->dilate.v[0] : 1;  g.dw = p->dilate.v[p->kernel.n - 1];
  g.OH = k_conv_out_len(g.H, g.kh, g.sh, g.ph, g.phe, g.dh);
  g.OW = k_conv_out_len(g.W, g.kw, g.sw, g.pw, g.pwe, g.dw);
  g.ckk = g.C * g.kh * g.kw;
  g.ohw = g.OH * g.OW;
  g.wsz = g.F * g.Cg * g.kh * g.kw;
  g.P = g.N < K_CONV_PARTS ? (g.N > 0 ? g.N : 1) : K_CONV_PARTS;
  int64_t per_part = (g.N + g.P - 1) / g.P;
  g.S = (k_conv_is_pointwise(&g) || g.ohw == 0) ? 1 : (K_CONV_COLS + g.ohw - 1) / g.ohw;
  if (g.S > per_part) g.S = per_part > 0 ? per_part : 1;
  return g;
}

/* Floats of one part's buffers: the column buffer [C*kh*kw, S*OH*OW] and, when a chunk holds
 * more than one sample, an [F, S*OH*OW] staging buffer for the output (forward) or output
 * gradient (backward), since a chunk's GEMM result interleaves samples. */
static int64_t k_conv_part_floats(const k_conv_geom *g) {
  int64_t cols = g->S * g->ohw;
  return g->ckk * cols + (g->S > 1 ? g->F * cols : 0);
}

/* P parts' buffers, then P - 1 weight-gradient partials (part 0 accumulates into dW). */
static int64_t k_conv_temp_floats(const k_conv_geom *g) {
  return g->P * k_conv_part_floats(g) + (g->P - 1) * g->wsz;
}

/* 4 * (P * (C*kh*kw + (S > 1 ? F : 0)) * S*OH*OW + (P - 1) * F*C/G*kh*kw) bytes, with
 * P = min(N, K_CONV_PARTS) parts and S = min(ceil(N / P), ceil(K_CONV_COLS / (OH*OW))) samples
 * per chunk (S = 1 for a 1x1 unit-stride unpadded kernel). Backward reuses the column buffer
 * for the input gradient columns after the weight gradient has consumed the im2col copy. */
size_t k_conv_temp_bytes(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  k_conv_geom g = k_conv_geometry(data, weight, p);
  size_t im2col = (size_t)k_conv_temp_floats(&g) * sizeof(float);
  size_t direct = k_conv_direct_temp_bytes(data, weight, p);   /* 0 unless that path is wanted */
  size_t dw = k_conv_dw_temp_bytes(data, weight, p);           /* likewise (depthwise) */
  size_t most = direct > im2col ? direct : im2col;
  return dw > most ? dw : most;
}

size_t k_convolution_temp_bytes(const k_shape *args, const void *param) {
  return k_conv_temp_bytes(&args[0], &args[1], param);
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

/* One column-buffer row segment (output row oh, tap (ki, kj)) from input row xr. Plain loops
 * rather than memcpy/memset: segments are often 8-32 floats, where call overhead dominates. */
static void k_im2col_segment(const k_conv_geom *g, const float *xr, int64_t off, int64_t lo,
                             int64_t hi, float *r) {
  for (int64_t ow = 0; ow < lo; ow++) r[ow] = 0.0f;
  if (g->sw == 1)
    for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow + off];
  else
    for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow * g->sw + off];
  for (int64_t ow = hi; ow < g->OW; ow++) r[ow] = 0.0f;
}

/* Row (ch, ki, kj) of the column buffer holds x[ch, oh*sh - ph + ki*dh, ow*sw - pw + kj*dw]
 * for every output position, zero where that falls in the padding. Rows are ld floats apart so
 * that the samples of a chunk sit side by side. */
static void k_im2col(const k_conv_geom *g, const float *x, float *col, int64_t ld) {
  for (int64_t ch = 0; ch < g->C; ch++)
    for (int64_t ki = 0; ki < g->kh; ki++)
      for (int64_t kj = 0; kj < g->kw; kj++) {
        float *row = col + ((ch * g->kh + ki) * g->kw + kj) * ld;
        const float *xc = x + ch * g->H * g->W;
        int64_t lo, hi, off = kj * g->dw - g->pw;
        k_conv_ow_range(g, kj, &lo, &hi);
        for (int64_t oh = 0; oh < g->OH; oh++) {
          int64_t ih = oh * g->sh - g->ph + ki * g->dh;
          float *r = row + oh * g->OW;
          if (ih < 0 || ih >= g->H) k_im2col_segment(g, xc, 0, 0, 0, r);   /* all padding */
          else k_im2col_segment(g, xc + ih * g->W, off, lo, hi, r);
        }
      }
}

/* The adjoint of k_im2col: every column entry is added back to the input element it came
 * from (padding entries are dropped). */
static void k_col2im(const k_conv_geom *g, const float *col, int64_t ld, float *dx) {
  for (int64_t ch = 0; ch < g->C; ch++)
    for (int64_t ki = 0; ki < g->kh; ki++)
      for (int64_t kj = 0; kj < g->kw; kj++) {
        const float *row = col + ((ch * g->kh + ki) * g->kw + kj) * ld;
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
  size_t need = (size_t)k_conv_temp_floats(g) * sizeof(float);
  if (need == 0 || (c->temp && c->temp_bytes >= need)) return 0;
  snprintf(c->err, c->err_len, "convolution: temp space %zu bytes, need %zu", c->temp_bytes, need);
  return 1;
}

/* Column and staging buffer b inside c->temp, and (p >= 1) part p's dW partial. The P
 * column/staging buffers are scratch lent to whichever parts run at the same time (a part
 * takes the lowest free one), so one thread reuses one buffer, warm in cache, as before the
 * split; the partials belong to their parts, which keeps the sum's order fixed. */
static float *k_conv_cols(const k_call *c, const k_conv_geom *g, int64_t b) {
  return (float *)c->temp + b * k_conv_part_floats(g);
}
static float *k_conv_stage(const k_call *c, const k_conv_geom *g, int64_t b) {
  return k_conv_cols(c, g, b) + g->ckk * g->S * g->ohw;
}
static float *k_conv_wpart(const k_call *c, const k_conv_geom *g, int64_t p) {
  return (float *)c->temp + g->P * k_conv_part_floats(g) + (p - 1) * g->wsz;
}

/* A part's samples [*n0, *n1), and how many go in each of its chunks: the part's samples
 * spread evenly over as few chunks as keep each within S. */
static int64_t k_conv_part(const k_conv_geom *g, int64_t p, int64_t *n0, int64_t *n1) {
  *n0 = p * g->N / g->P;
  *n1 = (p + 1) * g->N / g->P;
  int64_t len = *n1 - *n0, chunks = (len + g->S - 1) / g->S;
  return chunks > 0 ? (len + chunks - 1) / chunks : 1;
}

/* What a part needs: the call, its geometry, and which column buffers are lent out (bit b). */
typedef struct {
  const k_call *c;
  const k_conv_geom *g;
  atomic_uint busy;
} k_conv_job;

/* At most P parts run at once, so a free buffer always exists. */
static int64_t k_conv_buf_take(k_conv_job *j) {
  for (;;)
    for (unsigned b = 0; b < (unsigned)j->g->P; b++) {
      unsigned cur = atomic_load(&j->busy);
      if (!(cur & (1u << b)) && atomic_compare_exchange_weak(&j->busy, &cur, cur | (1u << b))) return b;
    }
}

static void k_conv_buf_give(k_conv_job *j, int64_t b) { atomic_fetch_and(&j->busy, ~(1u << b)); }

/* Out[g] (beta) = W[g] . cols[g] for every group; cols and out have row stride ld. */
static void k_conv_gemm_fwd(const k_conv_geom *g, const float *Wt, const float *cols, int64_t ld,
                            float beta, float *out) {
  int64_t ckk_g = g->Cg * g->kh * g->kw, wg = g->Fg * ckk_g;
  for (int64_t gi = 0; gi < g->G; gi++)
    k_sgemm(CblasNoTrans, CblasNoTrans, (int)g->Fg, (int)ld, (int)ckk_g, 1.0f,
                Wt + gi * wg, (int)ckk_g, cols + gi * ckk_g * ld, (int)ld, beta,
                out + gi * g->Fg * ld, (int)ld);
}

/* Y[n] starts as the bias (or keeps its old value for kAddTo) so the GEMMs accumulate. */
static float k_conv_bias_init(const k_conv_geom *g, const float *bias, k_req r, float *y) {
  if (!bias) return r == kAddTo ? 1.0f : 0.0f;
  for (int64_t f = 0; f < g->F; f++)
    for (int64_t i = 0; i < g->ohw; i++)
      y[f * g->ohw + i] = (r == kAddTo ? y[f * g->ohw + i] : 0.0f) + bias[f];
  return 1.0f;
}

/* Staged [F, s*OHW] chunk result -> Y[n0 .. n0+s) as [s, F, OHW], adding bias and honouring req. */
static void k_conv_unstage(const k_conv_geom *g, const float *stage, int64_t s, const float *bias,
                           k_req r, float *y) {
  int64_t ld = s * g->ohw;
  for (int64_t i = 0; i < s; i++)
    for (int64_t f = 0; f < g->F; f++) {
      const float *src = stage + f * ld + i * g->ohw;
      float *dst = y + (i * g->F + f) * g->ohw, b = bias ? bias[f] : 0.0f;
      for (int64_t j = 0; j < g->ohw; j++) dst[j] = (r == kAddTo ? dst[j] : 0.0f) + src[j] + b;
    }
}

/* Forward for samples [n0, n0+s) in column buffer b: im2col side by side, one GEMM per
 * group. A single-sample chunk writes Y directly; a wider one goes through the staging buffer. */
static void k_conv_forward_chunk(const k_call *c, const k_conv_geom *g, int64_t b, int64_t n0,
                                 int64_t s) {
  const k_conv_param *p = c->param;
  const float *X = (const float *)c->in[0].data + n0 * g->C * g->H * g->W;
  const float *bias = p->no_bias ? NULL : c->in[2].data;
  float *Y = (float *)c->out[0].data + n0 * g->F * g->ohw, *col = k_conv_cols(c, g, b);
  int64_t ld = s * g->ohw;
  if (s == 1) {
    float beta = k_conv_bias_init(g, bias, c->req[0], Y);
    const float *cols = k_conv_is_pointwise(g) ? X : col;
    if (cols == col) k_im2col(g, X, col, ld);
    k_conv_gemm_fwd(g, c->in[1].data, cols, ld, beta, Y);
  } else {
    for (int64_t i = 0; i < s; i++) k_im2col(g, X + i * g->C * g->H * g->W, col + i * g->ohw, ld);
    k_conv_gemm_fwd(g, c->in[1].data, col, ld, 0.0f, k_conv_stage(c, g, b));
    k_conv_unstage(g, k_conv_stage(c, g, b), s, bias, c->req[0], Y);
  }
  k_epi_apply(c, n0 * g->F * g->ohw, (n0 + s) * g->F * g->ohw);   /* the chunk, still in cache */
}

static void k_conv_forward_parts(void *ctx, int64_t lo, int64_t hi) {
  k_conv_job *j = ctx;
  for (int64_t pt = lo; pt < hi; pt++) {
    int64_t n0, n1, s = k_conv_part(j->g, pt, &n0, &n1), b = k_conv_buf_take(j);
    for (; n0 < n1; n0 += s) k_conv_forward_chunk(j->c, j->g, b, n0, n1 - n0 < s ? n1 - n0 : s);
    k_conv_buf_give(j, b);
  }
}

int k_convolution_forward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  const k_conv_param *p = c->param;
  if (k_conv_direct_runs(c, &c->in[0].shape, &c->in[1].shape, 0)) return k_conv_direct_forward(c);
  /* a grouped layer compiled blocked runs there, whatever KILN_CONV says now (it refuses what
   * it cannot honour): its neighbours read or wrote that layout */
  if (k_conv_dw_runs(c, &c->in[0].shape, &c->in[1].shape) || p->in_block || p->out_block || p->epi_block)
    return k_conv_dw_forward(c);
  k_conv_geom g = k_conv_geometry(&c->in[0].shape, &c->in[1].shape, c->param);
  if (k_conv_check_temp(c, &g)) return 1;
  k_conv_job j = {c, &g, 0};
  K_PROFILE_NOTE("im2col, %lld parts", (long long)g.P);
  k_parallel_for(g.N > 0 ? g.P : 0, 1, k_conv_forward_parts, &j);
  return 0;
}

/* dW[g] += dY[g] . cols[g]^T over a chunk (dW cleared beforehand for kWriteTo). */
static void k_conv_grad_w(const k_conv_geom *g, const float *dy, const float *cols, int64_t ld,
                          float *dW) {
  int64_t ckk_g = g->Cg * g->kh * g->kw, wg = g->Fg * ckk_g;
  for (int64_t gi = 0; gi < g->G; gi++)
    k_sgemm(CblasNoTrans, CblasTrans, (int)g->Fg, (int)ckk_g, (int)ld, 1.0f,
                dy + gi * g->Fg * ld, (int)ld, cols + gi * ckk_g * ld, (int)ld, 1.0f,
                dW + gi * wg, (int)ckk_g);
}

/* dcol[g] = W[g]^T . dY[g]; beta lets the pointwise path write dX[n] directly. */
static void k_conv_grad_cols(const k_conv_geom *g, const float *dy, int64_t ld, const float *Wt,
                             float beta, float *dcol) {
  int64_t ckk_g = g->Cg * g->kh * g->kw, wg = g->Fg * ckk_g;
  for (int64_t gi = 0; gi < g->G; gi++)
    k_sgemm(CblasTrans, CblasNoTrans, (int)ckk_g, (int)ld, (int)g->Fg, 1.0f,
                Wt + gi * wg, (int)ckk_g, dy + gi * g->Fg * ld, (int)ld, beta,
                dcol + gi * ckk_g * ld, (int)ld);
}

/* db[f] (op)= sum over samples, in order, of the sample's sum of dY[n, f], each in K_LANES
 * partial sums (k_vec_sum): a plain running sum is one add per element on one dependency
 * chain, ~15% of a 16-channel backward pass. Both paths (im2col and direct) use it. */
static void k_conv_grad_bias_rows(void *ctx, int64_t lo, int64_t hi) {
  const k_conv_job *j = ctx;
  const k_conv_geom *g = j->g;
  const float *dY = j->c->in[0].data;
  float *db = j->c->out[2].data;
  for (int64_t f = lo; f < hi; f++) {
    float acc = j->c->req[2] == kAddTo ? db[f] : 0.0f;
    for (int64_t n = 0; n < g->N; n++) {
      const float *d = dY + (n * g->F + f) * g->ohw;
      acc += k_vec_sum(d, g->ohw);
    }
    db[f] = acc;
  }
}

/* dY[n0 .. n0+s) as [F, s*OHW] so a chunk's gradients are one GEMM per group; a single
 * sample is already in that layout. */
static const float *k_conv_stage_dy(const k_call *c, const k_conv_geom *g, int64_t b,
                                    int64_t n0, int64_t s) {
  const float *dy = (const float *)c->in[0].data + n0 * g->F * g->ohw;
  if (s == 1) return dy;
  float *stage = k_conv_stage(c, g, b);
  int64_t ld = s * g->ohw;
  for (int64_t i = 0; i < s; i++)
    for (int64_t f = 0; f < g->F; f++)
      memcpy(stage + f * ld + i * g->ohw, dy + (i * g->F + f) * g->ohw, (size_t)g->ohw * sizeof(float));
  return stage;
}

/* Input gradient of a chunk: columns by GEMM, then col2im into each sample. */
static void k_conv_grad_x(const k_call *c, const k_conv_geom *g, const float *dy, int64_t b,
                          int64_t n0, int64_t s) {
  int64_t xsz = g->C * g->H * g->W, ld = s * g->ohw;
  float *dX = (float *)c->out[0].data + n0 * xsz, *col = k_conv_cols(c, g, b);
  if (k_conv_is_pointwise(g)) {
    k_conv_grad_cols(g, dy, ld, c->in[2].data, c->req[0] == kAddTo ? 1.0f : 0.0f, dX);
    return;
  }
  k_conv_grad_cols(g, dy, ld, c->in[2].data, 0.0f, col);
  if (c->req[0] != kAddTo) memset(dX, 0, (size_t)(s * xsz) * sizeof(float));
  for (int64_t i = 0; i < s; i++) k_col2im(g, col + i * g->ohw, ld, dX + i * xsz);
}

/* One chunk's weight and input gradients in buffer b; the column buffer serves both in turn.
 * Part pt's weight gradient goes to dW (part 0) or to the part's own partial. */
static void k_conv_backward_chunk(const k_call *c, const k_conv_geom *g, int64_t b, int64_t pt,
                                  int64_t n0, int64_t s) {
  int64_t xsz = g->C * g->H * g->W, ld = s * g->ohw;
  const float *X = (const float *)c->in[1].data + n0 * xsz;
  const float *dy = k_conv_stage_dy(c, g, b, n0, s);
  float *col = k_conv_cols(c, g, b);
  if (c->req[1] != kNullOp) {
    const float *cols = k_conv_is_pointwise(g) ? X : col;
    if (cols == col)
      for (int64_t i = 0; i < s; i++) k_im2col(g, X + i * xsz, col + i * g->ohw, ld);
    k_conv_grad_w(g, dy, cols, ld, pt == 0 ? (float *)c->out[1].data : k_conv_wpart(c, g, pt));
  }
  if (c->req[0] != kNullOp) k_conv_grad_x(c, g, dy, b, n0, s);
}

static void k_conv_backward_parts(void *ctx, int64_t lo, int64_t hi) {
  k_conv_job *j = ctx;
  for (int64_t pt = lo; pt < hi; pt++) {
    int64_t n0, n1, s = k_conv_part(j->g, pt, &n0, &n1), b = k_conv_buf_take(j);
    if (pt > 0 && j->c->req[1] != kNullOp)
      memset(k_conv_wpart(j->c, j->g, pt), 0, (size_t)j->g->wsz * sizeof(float));
    for (; n0 < n1; n0 += s) k_conv_backward_chunk(j->c, j->g, b, pt, n0, n1 - n0 < s ? n1 - n0 : s);
    k_conv_buf_give(j, b);
  }
}

/* dW += partial 1, += partial 2, ...: the same order whichever threads made them. */
static void k_conv_sum_wparts(void *ctx, int64_t lo, int64_t hi) {
  const k_conv_job *j = ctx;
  float *dW = j->c->out[1].data;
  for (int64_t pt = 1; pt < j->g->P; pt++) {
    const float *w = k_conv_wpart(j->c, j->g, pt);
    for (int64_t i = lo; i < hi; i++) dW[i] += w[i];
  }
}

/* Backward in = [dY, X, W, (b), Y]; out = [dX, dW, (db)]. */
/* The data and weight gradients on the im2col path. */
static int k_conv_backward_im2col(k_conv_job *j) {
  const k_call *c = j->c;
  if (k_conv_check_temp(c, j->g)) return 1;
  if (c->req[1] == kWriteTo || c->req[1] == kWriteInplace)
    memset(c->out[1].data, 0, (size_t)k_shape_numel(&c->out[1].shape) * sizeof(float));
  if (j->g->N > 0 && (c->req[0] != kNullOp || c->req[1] != kNullOp))
    k_parallel_for(j->g->P, 1, k_conv_backward_parts, j);
  if (j->g->N > 0 && c->req[1] != kNullOp) k_parallel_for(j->g->wsz, 1 << 14, k_conv_sum_wparts, j);
  return 0;
}

/* Backward in = [dY, X, W, (b), Y]; out = [dX, dW, (db)]. The bias gradient is the same
 * whichever path made the others. */
int k_convolution_backward(const k_call *c) {
  const k_conv_param *p = c->param;
  k_conv_geom g = k_conv_geometry(&c->in[1].shape, &c->in[2].shape, p);
  k_conv_job j = {c, &g, 0};
  int direct = k_conv_direct_runs(c, &c->in[1].shape, &c->in[2].shape, 1);
  int dw = !direct && k_conv_dw_runs(c, &c->in[1].shape, &c->in[2].shape);
  if (direct ? k_conv_direct_backward(c) : dw ? k_conv_dw_backward(c) : k_conv_backward_im2col(&j)) return 1;
  if (!p->no_bias && c->req[2] != kNullOp) k_parallel_for(g.F, 8, k_conv_grad_bias_rows, &j);
  return 0;
}
