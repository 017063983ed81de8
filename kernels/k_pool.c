/* k_pool.c — max and average pooling over 1 or 2 spatial axes (F.max_pool1d/2d, F.avg_pool1d/2d
 * with count_include_pad and ceil_mode). 1-D runs as 2-D with height 1. Max pooling treats
 * padding as -inf and sends the gradient to the first maximum in scan order, as torch. An
 * average divides by its window's extent clipped to the padded input (count_include_pad: with
 * ceil_mode the last window may hang past it) or to the input itself, as torch's avg_pool2d.
 *
 * Planes (N*C) are split over threads. Within an output row the windows that lie wholly inside
 * the input row are done together, one window tap at a time across all of them, so the inner
 * loops run along contiguous (or evenly strided) memory and vectorise; the clipped windows at
 * the borders take the scalar path. Each output still sees its taps in scan order. */
#include "kernels.h"
#include "k_index.h"
#include "k_vec.h"   /* K_VF16_LOAD */

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  int64_t planes, H, W, OH, OW;  /* planes = N*C */
  int64_t kh, kw, sh, sw, ph, pw;  /* ph, pw: the padding at the start */
  int64_t phe, pwe;                /* and at the end */
  int cip;                         /* count_include_pad */
} k_pool_geom;

static k_pool_geom k_pool_geometry(const k_shape *x, const k_shape *y, const k_pool_param *p) {
  k_pool_geom g;
  int two = p->kernel.n == 2, r = x->rank;
  g.planes = x->d[0] * x->d[1];
  g.H = two ? x->d[r - 2] : 1;  g.W = x->d[r - 1];
  g.OH = two ? y->d[r - 2] : 1; g.OW = y->d[r - 1];
  g.kh = two ? p->kernel.v[0] : 1;  g.kw = p->kernel.v[p->kernel.n - 1];
  g.sh = two ? p->stride.v[0] : 1;  g.sw = p->stride.v[p->kernel.n - 1];
  g.ph = two ? k_pool_pad_begin(p, 0) : 0; g.pw = k_pool_pad_begin(p, p->kernel.n - 1);
  g.phe = two ? k_pool_pad_end(p, 0) : 0;   g.pwe = k_pool_pad_end(p, p->kernel.n - 1);
  g.cip = p->count_include_pad != 0;
  return g;
}

/* The divisor of output row oh's windows that lie wholly inside the input row. */
static float k_pool_row_div(const k_pool_geom *g, int64_t oh) {
  return (float)(k_pool_span(oh, g->sh, g->ph, g->phe, g->kh, g->H, g->cip) * g->kw);
}

static float k_pool_div(const k_pool_geom *g, int64_t oh, int64_t ow) {
  return (float)(k_pool_span(oh, g->sh, g->ph, g->phe, g->kh, g->H, g->cip) *
                 k_pool_span(ow, g->sw, g->pw, g->pwe, g->kw, g->W, g->cip));
}

/* The window of output (oh, ow) clipped to the input: [h0, h1) x [w0, w1). */
typedef struct { int64_t h0, h1, w0, w1; } k_window;

static k_window k_pool_window(const k_pool_geom *g, int64_t oh, int64_t ow) {
  k_window w;
  w.h0 = oh * g->sh - g->ph; w.h1 = w.h0 + g->kh;
  w.w0 = ow * g->sw - g->pw; w.w1 = w.w0 + g->kw;
  if (w.h0 < 0) w.h0 = 0;
  if (w.w0 < 0) w.w0 = 0;
  if (w.h1 > g->H) w.h1 = g->H;
  if (w.w1 > g->W) w.w1 = g->W;
  return w;
}

/* Index (in the plane) of the first maximum of the window, as torch's CPU kernel scans it:
 * starting at the window's first element with max -inf, taking a strictly greater value or a
 * NaN. -1 only for an empty window. */
static int64_t k_pool_argmax(const k_pool_geom *g, const float *x, k_window w) {
  int64_t best = (w.h0 < w.h1 && w.w0 < w.w1) ? w.h0 * g->W + w.w0 : -1;
  float m = -INFINITY;
  for (int64_t h = w.h0; h < w.h1; h++)
    for (int64_t v = w.w0; v < w.w1; v++) {
      float val = x[h * g->W + v];
      if (val > m || isnan(val)) {
        m = val;
        best = h * g->W + v;
      }
    }
  return best;
}

static float k_pool_value(const k_pool_geom *g, const float *x, int64_t oh, int64_t ow, int is_max) {
  k_window w = k_pool_window(g, oh, ow);
  if (is_max) {
    int64_t i = k_pool_argmax(g, x, w);
    return i < 0 ? -INFINITY : x[i];
  }
  float s = 0.0f;
  for (int64_t h = w.h0; h < w.h1; h++)
    for (int64_t v = w.w0; v < w.w1; v++) s += x[h * g->W + v];
  return s / k_pool_div(g, oh, ow);
}

/* A window that is the whole, unpadded plane (global average pooling: the pool of every
 * squeeze-and-excitation block) is summed as K_POOL_GLANES interleaved partial sums, element p
 * into sum p mod K_POOL_GLANES, each in scan order, then the sums added pairwise, 8 + 8, 4 + 4,
 * 2 + 2, 1 + 1: one vector's lanes on an NCHW plane, K_POOL_GLANES vectors of channels on a
 * blocked one, the same order for every channel, so both layouts give the same bits. One
 * running sum in scan order was a chain of dependent adds: 9% of EfficientNet-B1's time. */
#define K_POOL_GLANES 16
static int k_pool_whole_plane(const k_pool_geom *g, int is_max) {
  return !is_max && g->OH == 1 && g->OW == 1 && g->kh == g->H && g->kw == g->W && g->ph == 0 && g->pw == 0;
}

K_VEC_TARGETS static float k_pool_plane_mean(const k_pool_geom *g, const float *x) {
  float s[K_POOL_GLANES] = {0};
  int64_t n = g->H * g->W, p = 0;
  for (; p + K_POOL_GLANES <= n; p += K_POOL_GLANES)
    for (int i = 0; i < K_POOL_GLANES; i++) s[i] += x[p + i];
  for (int i = 0; p + i < n; i++) s[i] += x[p + i];
  for (int w = K_POOL_GLANES / 2; w; w /= 2)
    for (int i = 0; i < w; i++) s[i] += s[i + w];
  return s[0] / k_pool_div(g, 0, 0);
}

/* Output columns [lo, hi) whose windows lie wholly inside an input row (no clipping). Fewer
 * than K_POOL_MIN_RUN of them (global pooling has one) go the scalar way: a vector loop over a
 * handful of columns per tap costs more than it saves. */
#define K_POOL_MIN_RUN 4
static void k_pool_inner_cols(const k_pool_geom *g, int64_t *lo, int64_t *hi) {
  *lo = (g->pw + g->sw - 1) / g->sw;
  *hi = g->W + g->pw - g->kw < 0 ? 0 : (g->W + g->pw - g->kw) / g->sw + 1;
  if (*hi > g->OW) *hi = g->OW;
  if (*hi - *lo < K_POOL_MIN_RUN) *lo = *hi;
}

/* Columns handled per step, so the per-row scratch stays on the stack. */
#define K_POOL_BLOCK 256

/* Max or average of the unclipped windows [lo, hi) of output row oh (input rows [h0, h1)). */
static void k_pool_row_inner(const k_pool_geom *g, const float *x, int64_t h0, int64_t h1,
                             int64_t lo, int64_t hi, int is_max, float div, float *v) {
  for (int64_t ow = lo; ow < hi; ow++) v[ow - lo] = is_max ? -INFINITY : 0.0f;
  for (int64_t h = h0; h < h1; h++)
    for (int64_t kj = 0; kj < g->kw; kj++) {
      const float *xr = x + h * g->W + lo * g->sw - g->pw + kj;
      int64_t n = hi - lo, sw = g->sw;
      if (is_max)
        for (int64_t i = 0; i < n; i++) {
          float a = xr[i * sw];
          v[i] = (a > v[i] || a != a) ? a : v[i];   /* a NaN wins, as torch's scan */
        }
      else
        for (int64_t i = 0; i < n; i++) v[i] += xr[i * sw];
    }
  if (!is_max)
    for (int64_t i = 0; i < hi - lo; i++) v[i] /= div;
}

/* Output row oh, columns [b0, b1), into v. */
static void k_pool_row(const k_pool_geom *g, const float *x, int64_t oh, int64_t b0, int64_t b1,
                       int is_max, float *v) {
  int64_t lo, hi;
  k_pool_inner_cols(g, &lo, &hi);
  if (lo < b0) lo = b0;
  if (hi > b1) hi = b1;
  k_window w = k_pool_window(g, oh, 0);
  if (lo > hi || w.h0 >= w.h1) lo = hi = b1;   /* no unclipped window here */
  if (lo < hi) k_pool_row_inner(g, x, w.h0, w.h1, lo, hi, is_max, k_pool_row_div(g, oh), v + (lo - b0));
  for (int64_t ow = b0; ow < b1; ow++)
    if (ow < lo || ow >= hi) v[ow - b0] = k_pool_value(g, x, oh, ow, is_max);
}

/* ---- max pooling with column stride 2 ------------------------------------------------------
 * The common CNN pooling (2x2 or 3x3, stride 2, no padding) reads every other column, which
 * the loops above do one strided element at a time; and its rows are short (LeNet's 24 -> 12),
 * so a vector loop over one row's windows hardly starts. Here an output row goes in strips of
 * 16 windows: tap kj of the 16 is the even lanes of the 32 floats from column 2 ow0 + kj,
 * two vector loads and one shuffle, and the taps are scanned in the same order with the same
 * rule as k_pool_argmax, so the values and the argmaxes are the same bits. A strip near the
 * row's end loads under a mask, reading nothing past the row.
 *
 * Written on GCC vector types inside an AVX-512 target pragma, used when the CPU has AVX-512:
 * under target_clones gcc lowers these vector compares to scalar code before it clones. Other
 * CPUs and compilers (clang builds the fuzzing harnesses) keep the loops above. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define K_POOL_S2 1
#include <immintrin.h>   /* outside the target pragma: included inside, its AVX intrinsics would
                            take AVX-512's target and not inline into the AVX2 code below */
#pragma GCC push_options
#pragma GCC target("avx512f")
#define K_POOL_STRIP 16
#define K_POOL_EVENS 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30

/* Lanes [0, n) of a 16-lane mask (n clamped to 0..16). */
static inline __mmask16 k_pool_lanes(int64_t n) {
  return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* Windows [ow0, ow0 + 16) of output row oh: their maxima in *m and (when idx) the index in
 * the plane of each one's first maximum. Lanes past the row's end hold garbage. The loads are
 * masked to the row, so nothing past it is read. */
static inline __attribute__((always_inline)) void k_pool_s2_strip(const k_pool_geom *g, const float *x,
                                                                   int64_t oh, int64_t ow0,
                                                                   k_vf16 *m, k_vi16 *idx) {
  const k_vi16 two_i = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  k_vf16 best = {0};
  best -= INFINITY;
  k_vi16 at = two_i + (int32_t)(oh * g->sh * g->W + 2 * ow0);
  int64_t left = g->W - 2 * ow0;  /* floats from the strip's first column to the row's end */
  for (int64_t h = oh * g->sh; h < oh * g->sh + g->kh; h++) {
    const float *p = x + h * g->W + 2 * ow0;
    for (int64_t kj = 0; kj < g->kw; kj++) {
      k_vf16 lo = (k_vf16)_mm512_maskz_loadu_ps(k_pool_lanes(left - kj), p + kj);
      k_vf16 hi = (k_vf16)_mm512_maskz_loadu_ps(k_pool_lanes(left - kj - 16), p + kj + 16);
      k_vf16 a = __builtin_shufflevector(lo, hi, K_POOL_EVENS);
      k_vi16 take = (a > best) | (a != a);
      best = (k_vf16)(((k_vi16)a & take) | ((k_vi16)best & ~take));
      k_vi16 tap = two_i + (int32_t)(h * g->W + 2 * ow0 + kj);
      at = (tap & take) | (at & ~take);
    }
  }
  *m = best;
  if (idx) *idx = at;
}

static void k_pool_s2_forward_plane(const k_pool_geom *g, const float *x, float *y, k_req r) {
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow0 = 0; ow0 < g->OW; ow0 += K_POOL_STRIP) {
      __mmask16 keep = k_pool_lanes(g->OW - ow0);
      k_vf16 m;
      k_pool_s2_strip(g, x, oh, ow0, &m, NULL);
      float *yr = y + oh * g->OW + ow0;
      if (r == kAddTo) m = (k_vf16)_mm512_maskz_loadu_ps(keep, yr) + m;   /* y + v, as above */
      _mm512_mask_storeu_ps(yr, keep, (__m512)m);
    }
}

/* The gradients are added in column order, as k_pool_max_back_row does (3-wide windows
 * overlap). A gather-add-scatter for disjoint windows, or building each input row's strip from
 * the argmaxes, measured no faster than these scalar adds on LeNet's maps. */
static void k_pool_s2_backward_plane(const k_pool_geom *g, const float *x, const float *dy, float *dx) {
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow0 = 0; ow0 < g->OW; ow0 += K_POOL_STRIP) {
      int64_t n = g->OW - ow0 < K_POOL_STRIP ? g->OW - ow0 : K_POOL_STRIP;
      k_vf16 m;
      k_vi16 idx;
      k_pool_s2_strip(g, x, oh, ow0, &m, &idx);
      const float *d = dy + oh * g->OW + ow0;
      for (int64_t i = 0; i < n; i++) dx[idx[i]] += d[i];
    }
}
#pragma GCC pop_options
#endif

/* Whether the planes of g run in strips (decided once a call): max, column stride 2, windows
 * of at most 3 columns that lie wholly inside the input (no padding, no ceil_mode window past
 * the end), an AVX-512 CPU. */
static int k_pool_strips(const k_pool_geom *g, int is_max) {
#ifdef K_POOL_S2
  __builtin_cpu_init();
  int inside = 2 * (g->OW - 1) + g->kw <= g->W && g->sh * (g->OH - 1) + g->kh <= g->H;
  return is_max && g->sw == 2 && g->kw <= 3 && g->ph == 0 && g->pw == 0 && g->OW > 0 && g->OH > 0 && inside &&
         __builtin_cpu_supports("avx512f");
#else
  (void)g, (void)is_max;
  return 0;
#endif
}

typedef void (*k_pool_blocked_fn)(const k_pool_geom *, const float *, float *, int64_t, int64_t, int);

/* blocked: the plane function of a channel-blocked call (k_pool_blocked_pick), width V. */
typedef struct { const k_call *c; k_pool_geom g; int is_max, strips; int64_t V; k_pool_blocked_fn blocked; } k_pool_job;

/* Planes per chunk: about 16K input elements each, so small maps do not pay one wake-up each.
 * A blocked plane holds V channels (lanes), V times the elements of an NCHW one. */
static int64_t k_pool_grain(const k_pool_geom *g, int64_t lanes) {
  int64_t per = g->H * g->W * lanes;
  return per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1);
}

static void k_pool_forward_planes(void *ctx, int64_t lo, int64_t hi) {
  const k_pool_job *j = ctx;
  const k_pool_geom *g = &j->g;
  k_req r = j->c->req[0];
  float v[K_POOL_BLOCK];
  int whole = k_pool_whole_plane(g, j->is_max);
  for (int64_t pl = lo; pl < hi; pl++) {
    const float *x = (const float *)j->c->in[0].data + pl * g->H * g->W;
    float *y = (float *)j->c->out[0].data + pl * g->OH * g->OW;
    if (whole) {
      float m = k_pool_plane_mean(g, x);
      y[0] = r == kAddTo ? y[0] + m : m;
      continue;
    }
#ifdef K_POOL_S2
    if (j->strips) {
      k_pool_s2_forward_plane(g, x, y, r);
      continue;
    }
#endif
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t b0 = 0; b0 < g->OW; b0 += K_POOL_BLOCK) {
        int64_t b1 = b0 + K_POOL_BLOCK < g->OW ? b0 + K_POOL_BLOCK : g->OW;
        float *yr = y + oh * g->OW + b0;
        k_pool_row(g, x, oh, b0, b1, j->is_max, v);
        if (r == kAddTo)
          for (int64_t i = 0; i < b1 - b0; i++) yr[i] += v[i];
        else
          for (int64_t i = 0; i < b1 - b0; i++) yr[i] = v[i];
      }
  }
}

/* ---- channel-blocked forward (k_pool_param.in_block / out_block, passes/pass_layout.c) --------
 * x [N][Cb][H][W][V] -> y [N][Cb][OH][OW][V], channels in a vector's lanes: each window is a
 * max or a sum of whole vectors, its taps in scan order under the NCHW path's rules (a NaN or a
 * strictly greater value is taken, from -inf; the sum from 0 divided by k_pool_div), so every
 * lane gets the bits the NCHW kernel gives its channel. Lanes past C carry whatever the input
 * holds there. With an NCHW output (ld > 0) lane l of each result goes to plane l instead,
 * ld floats apart, for the cn real channels of the block: the pooled value is converted, which
 * is smaller than the blocked input by the window's stride. */
#define K_POOL_BLOCKED_PLANE(SFX, VT, IT, VW, MAX)                                                 \
  static int k_pool_row_finite_##SFX(const float *x, int64_t n) {                                  \
    VT s[4] = {{0}, {0}, {0}, {0}}, a;   /* four sums, so the adds' latency is not the loop's */   \
    int64_t i = 0;                                                                                 \
    for (; i + 4 * VW <= n; i += 4 * VW)                                                           \
      for (int k = 0; k < 4; k++) memcpy(&a, x + i + k * VW, sizeof a), s[k] += a * 0.0f;          \
    for (; i < n; i += VW) memcpy(&a, x + i, sizeof a), s[0] += a * 0.0f;                          \
    s[0] += s[1] + s[2] + s[3];                                                                    \
    IT bad = s[0] != s[0];                                                                         \
    for (int l = 0; l < VW; l++)                                                                   \
      if (bad[l]) return 0;                                                                        \
    return 1;                                                                                      \
  }                                                                                                \
  static void k_pool_blocked_plane_##SFX(const k_pool_geom *g, const float *x, float *y, int64_t ld,   \
                                         int64_t cn, int is_max) {                                   \
    if (k_pool_whole_plane(g, is_max)) {                                                             \
      VT s[K_POOL_GLANES], a;                                                                        \
      int64_t n = g->H * g->W, p = 0;                                                                \
      for (int i = 0; i < K_POOL_GLANES; i++) s[i] = (VT){0};                                        \
      for (; p + K_POOL_GLANES <= n; p += K_POOL_GLANES)                                             \
        for (int i = 0; i < K_POOL_GLANES; i++) memcpy(&a, x + (p + i) * VW, sizeof a), s[i] += a;   \
      for (int i = 0; p + i < n; i++) memcpy(&a, x + (p + i) * VW, sizeof a), s[i] += a;            \
      for (int w = K_POOL_GLANES / 2; w; w /= 2)                                                     \
        for (int i = 0; i < w; i++) s[i] += s[i + w];                                                \
      VT m = s[0] / k_pool_div(g, 0, 0);                                                             \
      if (ld)                                                                                        \
        for (int64_t l = 0; l < cn; l++) y[l * ld] = m[l];                                           \
      else                                                                                           \
        memcpy(y, &m, sizeof m);                                                                     \
      return;                                                                                        \
    }                                                                                                \
    int64_t upto = 0;      /* rows checked for finiteness so far */                                 \
    int finite[4] = {0};   /* of rows h, at h % 4: the fast max's windows span at most 3 */          \
    for (int64_t oh = 0; oh < g->OH; oh++) {                                                         \
      int64_t lo = 0, hi = 0;                                                                        \
      k_pool_blocked_inner(g, oh, &lo, &hi);                                                         \
      int run = lo < hi && g->kh == g->kw && (g->kh == 2 || g->kh == 3), fast = run && is_max;        \
      for (int64_t h0 = oh * g->sh - g->ph, h = h0; fast && h < h0 + g->kh; h++) {                   \
        for (; upto <= h; upto++) finite[upto % 4] = k_pool_row_finite_##SFX(x + upto * g->W * VW, g->W * VW); \
        fast = finite[h % 4];                                                                        \
      }                                                                                              \
      if (run && g->kh == 3 && fast)                                                                 \
        K_POOL_BLOCKED_RUN(VT, IT, VW, 3, 3, K_POOL_MAX_TAP, MAX)                                    \
      else if (run && g->kh == 3)                                                                    \
        K_POOL_BLOCKED_RUN(VT, IT, VW, 3, 3, K_POOL_BLOCKED_TAP, MAX)                                \
      else if (run && fast)                                                                          \
        K_POOL_BLOCKED_RUN(VT, IT, VW, 2, 2, K_POOL_MAX_TAP, MAX)                                    \
      else if (run)                                                                                  \
        K_POOL_BLOCKED_RUN(VT, IT, VW, 2, 2, K_POOL_BLOCKED_TAP, MAX)                                \
      else                                                                                           \
        lo = hi = 0;                                                                                 \
      for (int64_t ow = 0; ow < g->OW; ow++) {                                                       \
        if (ow == lo) ow = hi;                                                                       \
        if (ow >= g->OW) break;                                                                      \
        k_window w = k_pool_window(g, oh, ow);                                                       \
        VT acc = {0};                                                                                \
        if (is_max) acc -= INFINITY;                                                                 \
        for (int64_t h = w.h0; h < w.h1; h++)                                                        \
          for (int64_t v = w.w0; v < w.w1; v++) K_POOL_BLOCKED_TAP(VT, IT, MAX, x + (h * g->W + v) * VW) \
        if (!is_max) acc /= k_pool_div(g, oh, ow);                                                   \
        K_POOL_BLOCKED_PUT(VW, ow)                                                                   \
      }                                                                                              \
    }                                                                                                \
  }

/* Output columns [lo, hi) of row oh whose windows lie wholly inside the input (rows and
 * columns): none when the row's window is clipped. */
static void k_pool_blocked_inner(const k_pool_geom *g, int64_t oh, int64_t *lo, int64_t *hi) {
  int64_t h0 = oh * g->sh - g->ph;
  *lo = *hi = 0;
  if (h0 < 0 || h0 + g->kh > g->H) return;
  *lo = (g->pw + g->sw - 1) / g->sw;
  *hi = g->W + g->pw - g->kw < 0 ? 0 : (g->W + g->pw - g->kw) / g->sw + 1;
  if (*hi > g->OW) *hi = g->OW;
  if (*hi < *lo) *hi = *lo;
}

/* The windows [lo, hi) of row oh, wholly inside the input, of a KH x KW pooling (constants,
 * so the taps unroll with fixed offsets): the taps in the scan order and under the rules of
 * the general loop below (a NaN or a strictly greater value taken, from -inf; the sum from 0
 * divided by the window's k_pool_div), so the same bits. ld as there. K_POOL_RUN_WINDOWS
 * windows at a time, their taps interleaved: each window's taps are a chain of dependent
 * selects (or adds), and one window at a time left the loop waiting on it (SqueezeNet's 3x3 / 2
 * max pools took twice ONNX Runtime's time; four at a time cut them by a quarter to a third,
 * eight did no better). */
enum { K_POOL_RUN_WINDOWS = 4 };
#define K_POOL_BLOCKED_RUN(VT, IT, VW, KH, KW, TAP, MAX)                                           \
  {                                                                                                \
    float div = is_max ? 1.0f : k_pool_div(g, oh, lo);                                             \
    int64_t ow2 = lo;                                                                              \
    for (; ow2 + K_POOL_RUN_WINDOWS <= hi; ow2 += K_POOL_RUN_WINDOWS) {                            \
      const float *xw = x + ((oh * g->sh - g->ph) * g->W + ow2 * g->sw - g->pw) * VW;              \
      VT accs[K_POOL_RUN_WINDOWS];                                                                 \
      for (int q = 0; q < K_POOL_RUN_WINDOWS; q++) accs[q] = (VT){0} - (is_max ? INFINITY : 0.0f); \
      for (int i = 0; i < KH; i++)                                                                 \
        for (int j = 0; j < KW; j++)                                                               \
          for (int q = 0; q < K_POOL_RUN_WINDOWS; q++) {                                           \
            VT acc = accs[q];                                                                      \
            TAP(VT, IT, MAX, xw + (i * g->W + j + q * g->sw) * VW)                                 \
            accs[q] = acc;                                                                         \
          }                                                                                        \
      for (int q = 0; q < K_POOL_RUN_WINDOWS; q++) {                                               \
        VT acc = accs[q];                                                                          \
        if (!is_max) acc /= div;                                                                   \
        K_POOL_BLOCKED_PUT(VW, ow2 + q)                                                            \
      }                                                                                            \
    }                                                                                              \
    for (int64_t ow = ow2; ow < hi; ow++) {                                                        \
      const float *xw = x + ((oh * g->sh - g->ph) * g->W + ow * g->sw - g->pw) * VW;               \
      VT acc = {0};                                                                                \
      if (is_max) acc -= INFINITY;                                                                 \
      for (int i = 0; i < KH; i++)                                                                 \
        for (int j = 0; j < KW; j++) TAP(VT, IT, MAX, xw + (i * g->W + j) * VW)                    \
      if (!is_max) acc /= div;                                                                     \
      K_POOL_BLOCKED_PUT(VW, ow)                                                                   \
    }                                                                                              \
  }

/* One tap of a blocked window into acc: a NaN or a strictly greater value taken (max: a NaN
 * tap, else MAX, which keeps acc on a tie or when acc is the NaN), or added (average). */
#define K_POOL_BLOCKED_TAP(VT, IT, MAX, p)                                                         \
  {                                                                                                \
    VT a;                                                                                          \
    memcpy(&a, p, sizeof a);                                                                       \
    if (is_max) {                                                                                  \
      VT m = MAX(VT, IT, a, acc);                                                                  \
      IT nan = a != a;                                                                             \
      acc = (VT)(((IT)a & nan) | ((IT)m & ~nan));                                                  \
    } else {                                                                                       \
      acc += a;                                                                                    \
    }                                                                                              \
  }

/* A max tap where the window's rows hold no NaN (nor an infinity: k_pool_row_finite checks
 * x * 0): MAX(a, acc) is a > acc ? a : acc, the rule above without its NaN case, so the same
 * bits. On x86 it is one vmaxps (its first operand taken only when strictly greater, ties and
 * signed zeros keeping the second), where the general tap adds a compare and a blend for the
 * NaN (it was two compares, a mask or and a blend: SqueezeNet's first 3 x 3 / 2 pool,
 * [64, 111, 111] blocked by 16, ran at about 2.8 cycles a tap on one Zen 5 core, in cache). */
#define K_POOL_MAX_TAP(VT, IT, MAX, p)                                                             \
  {                                                                                                \
    VT a;                                                                                          \
    memcpy(&a, p, sizeof a);                                                                       \
    acc = MAX(VT, IT, a, acc);                                                                     \
  }

/* a > acc ? a : acc lane by lane: in plain vector code (the portable builds), and as the
 * instruction on x86, whose operand order gives exactly that (the second operand on a tie or
 * an unordered pair). */
#define K_POOL_MAX_SELECT(VT, IT, a, acc) ((VT)(((IT)(a) & ((a) > (acc))) | ((IT)(acc) & ~((a) > (acc)))))
#define K_POOL_MAX_512(VT, IT, a, acc) ((VT)_mm512_max_ps((__m512)(a), (__m512)(acc)))
#define K_POOL_MAX_256(VT, IT, a, acc) ((VT)_mm256_max_ps((__m256)(a), (__m256)(acc)))

/* acc as output (oh, ow): blocked, or its cn real channels to their planes ld floats apart. */
#define K_POOL_BLOCKED_PUT(VW, ow)                                                                 \
  if (ld)                                                                                          \
    for (int64_t l = 0; l < cn; l++) y[l * ld + oh * g->OW + (ow)] = acc[l];                      \
  else                                                                                             \
    memcpy(y + (oh * g->OW + (ow)) * VW, &acc, sizeof acc);

typedef float k_pool_f8 __attribute__((vector_size(32)));
typedef int32_t k_pool_m8 __attribute__((vector_size(32)));

/* The portable build: gcc and clang split the vectors into what the target has. The 32- and
 * 64-byte vectors are passed only to these file-local functions, so the ABI warning (their
 * passing would change with AVX) concerns no caller outside. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
K_POOL_BLOCKED_PLANE(generic16, k_vf16, k_vi16, 16, K_POOL_MAX_SELECT)
K_POOL_BLOCKED_PLANE(generic8, k_pool_f8, k_pool_m8, 8, K_POOL_MAX_SELECT)
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define K_POOL_BLOCKED_X86 1
#pragma GCC push_options
#pragma GCC target("avx512f")
K_POOL_BLOCKED_PLANE(avx512, k_vf16, k_vi16, 16, K_POOL_MAX_512)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2")
K_POOL_BLOCKED_PLANE(avx2, k_pool_f8, k_pool_m8, 8, K_POOL_MAX_256)
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

/* The plane function for width V: the CPU's instruction set when it has that width's. */
static k_pool_blocked_fn k_pool_blocked_pick(int64_t V) {
#ifdef K_POOL_BLOCKED_X86
  __builtin_cpu_init();
  if (V == 16 && __builtin_cpu_supports("avx512f")) return k_pool_blocked_plane_avx512;
  if (V == 8 && __builtin_cpu_supports("avx2")) return k_pool_blocked_plane_avx2;
#endif
  return V == 16 ? k_pool_blocked_plane_generic16 : k_pool_blocked_plane_generic8;
}

/* Plane pl = (sample, channel block). */
static void k_pool_blocked_planes(void *ctx, int64_t lo, int64_t hi) {
  const k_pool_job *j = ctx;
  const k_pool_geom *g = &j->g;
  const k_pool_param *p = j->c->param;
  int64_t C = j->c->in[0].shape.d[1], Cb = (C + j->V - 1) / j->V, ld = p->out_block ? 0 : g->OH * g->OW;
  for (int64_t pl = lo; pl < hi; pl++) {
    int64_t n = pl / Cb, cb = pl % Cb, cn = C - cb * j->V < j->V ? C - cb * j->V : j->V;
    const float *x = (const float *)j->c->in[0].data + pl * g->H * g->W * j->V;
    float *y = (float *)j->c->out[0].data + (ld ? (n * C + cb * j->V) * ld : pl * g->OH * g->OW * j->V);
    j->blocked(g, x, y, ld, cn, j->is_max);
  }
}

/* A blocked layout this call cannot honour is refused with a message, never guessed at. */
static int k_pool_blocked_forward(const k_call *c, k_pool_job *j) {
  const k_pool_param *p = c->param;
  const char *why = (p->in_block != 8 && p->in_block != 16) || (p->out_block && p->out_block != p->in_block)
                        ? "block widths must be 8 or 16, and a blocked output needs a blocked input of that width"
                    : p->kernel.n != 2 || c->in[0].shape.rank != 4 ? "only 2-D pooling runs blocked"
                    : c->req[0] != kWriteTo ? "its output cannot be accumulated" : NULL;
  if (why) {
    snprintf(c->err, c->err_len, "pooling: compiled blocked layout (in %d, out %d): %s", p->in_block, p->out_block, why);
    return 1;
  }
  j->V = p->in_block;
  j->blocked = k_pool_blocked_pick(j->V);
  j->g.planes = c->in[0].shape.d[0] * ((c->in[0].shape.d[1] + j->V - 1) / j->V);
  k_parallel_for(j->g.planes, k_pool_grain(&j->g, j->V), k_pool_blocked_planes, j);
  return 0;
}

int k_pooling_forward(const k_call *c) {
  const k_pool_param *p = c->param;
  if (c->req[0] == kNullOp) return 0;
  k_pool_job j = {c, k_pool_geometry(&c->in[0].shape, &c->out[0].shape, p), p->pool_type == K_POOL_MAX, 0, 0, NULL};
  if (p->in_block || p->out_block) return k_pool_blocked_forward(c, &j);
  j.strips = k_pool_strips(&j.g, j.is_max);
  k_parallel_for(j.g.planes, k_pool_grain(&j.g, 1), k_pool_forward_planes, &j);
  return 0;
}

/* Index in the plane of the first maximum of each unclipped window [lo, hi) of row oh. */
static void k_pool_argmax_inner(const k_pool_geom *g, const float *x, int64_t h0, int64_t h1,
                                int64_t lo, int64_t hi, int32_t *idx) {
  float m[K_POOL_BLOCK];
  int64_t n = hi - lo, sw = g->sw;
  int32_t first = (int32_t)(h0 * g->W + lo * sw - g->pw);
  for (int64_t i = 0; i < n; i++) {
    m[i] = -INFINITY;
    idx[i] = first + (int32_t)(i * sw);
  }
  for (int64_t h = h0; h < h1; h++)
    for (int64_t kj = 0; kj < g->kw; kj++) {
      int32_t at = (int32_t)(h * g->W + lo * sw - g->pw + kj);
      const float *xr = x + at;
      for (int64_t i = 0; i < n; i++) {
        float a = xr[i * sw];
        int take = a > m[i] || a != a;
        m[i] = take ? a : m[i];
        idx[i] = take ? at + (int32_t)(i * sw) : idx[i];
      }
    }
}

/* Max backward for output row oh, columns [b0, b1): argmaxes first, then the gradients added
 * in column order (overlapping windows may share a maximum). */
static void k_pool_max_back_row(const k_pool_geom *g, const float *x, const float *dy, int64_t oh,
                                int64_t b0, int64_t b1, float *dx) {
  int32_t idx[K_POOL_BLOCK];
  int64_t lo, hi;
  k_pool_inner_cols(g, &lo, &hi);
  if (lo < b0) lo = b0;
  if (hi > b1) hi = b1;
  k_window w = k_pool_window(g, oh, 0);
  if (lo > hi || w.h0 >= w.h1) lo = hi = b1;
  if (lo < hi) k_pool_argmax_inner(g, x, w.h0, w.h1, lo, hi, idx + (lo - b0));
  for (int64_t ow = b0; ow < b1; ow++)
    if (ow < lo || ow >= hi) idx[ow - b0] = (int32_t)k_pool_argmax(g, x, k_pool_window(g, oh, ow));
  for (int64_t ow = b0; ow < b1; ow++)
    if (idx[ow - b0] >= 0) dx[idx[ow - b0]] += dy[ow];
}

static void k_pool_avg_scatter(const k_pool_geom *g, k_window w, float share, float *dx) {
  for (int64_t h = w.h0; h < w.h1; h++)
    for (int64_t v = w.w0; v < w.w1; v++) dx[h * g->W + v] += share;
}

/* Average backward for output row oh: each window's share added tap by tap across the
 * unclipped windows, the clipped ones scalar. */
static void k_pool_avg_back_row(const k_pool_geom *g, const float *dy, int64_t oh, float *dx) {
  int64_t lo, hi, sw = g->sw;
  k_pool_inner_cols(g, &lo, &hi);
  k_window w = k_pool_window(g, oh, 0);
  float kk = k_pool_row_div(g, oh);
  for (int64_t ow = 0; ow < g->OW; ow++)
    if (ow < lo || ow >= hi) k_pool_avg_scatter(g, k_pool_window(g, oh, ow), dy[ow] / k_pool_div(g, oh, ow), dx);
  for (int64_t h = w.h0; h < w.h1 && lo < hi; h++)
    for (int64_t kj = 0; kj < g->kw; kj++) {
      float *dr = dx + h * g->W + lo * sw - g->pw + kj;
      for (int64_t i = 0; i < hi - lo; i++) dr[i * sw] += dy[lo + i] / kk;
    }
}

static void k_pool_backward_planes(void *ctx, int64_t lo, int64_t hi) {
  const k_pool_job *j = ctx;
  const k_pool_geom *g = &j->g;
  for (int64_t pl = lo; pl < hi; pl++) {
    const float *x = (const float *)j->c->in[1].data + pl * g->H * g->W;
    const float *dy = (const float *)j->c->in[0].data + pl * g->OH * g->OW;
    float *dx = (float *)j->c->out[0].data + pl * g->H * g->W;
    if (j->c->req[0] != kAddTo) memset(dx, 0, (size_t)(g->H * g->W) * sizeof(float));
#ifdef K_POOL_S2
    if (j->strips) {
      k_pool_s2_backward_plane(g, x, dy, dx);
      continue;
    }
#endif
    for (int64_t oh = 0; oh < g->OH; oh++) {
      if (!j->is_max) {
        k_pool_avg_back_row(g, dy + oh * g->OW, oh, dx);
        continue;
      }
      for (int64_t b0 = 0; b0 < g->OW; b0 += K_POOL_BLOCK)
        k_pool_max_back_row(g, x, dy + oh * g->OW, oh, b0, b0 + K_POOL_BLOCK < g->OW ? b0 + K_POOL_BLOCK : g->OW, dx);
    }
  }
}

/* Backward in = [dY, X, Y]. The argmax is recomputed from X rather than matched against Y so
 * that ties resolve exactly as the forward scan did. */
int k_pooling_backward(const k_call *c) {
  const k_pool_param *p = c->param;
  if (c->req[0] == kNullOp) return 0;
  if (p->in_block || p->out_block) {
    snprintf(c->err, c->err_len, "pooling: the backward pass runs on NCHW tensors only");
    return 1;
  }
  k_pool_job j = {c, k_pool_geometry(&c->in[1].shape, &c->in[0].shape, p), p->pool_type == K_POOL_MAX, 0, 0, NULL};
  j.strips = k_pool_strips(&j.g, j.is_max);
  k_parallel_for(j.g.planes, k_pool_grain(&j.g, 1), k_pool_backward_planes, &j);
  return 0;
}
