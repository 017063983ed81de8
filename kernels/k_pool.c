/* k_pool.c — max and average pooling over 1 or 2 spatial axes (F.max_pool1d/2d, F.avg_pool1d/2d
 * with count_include_pad=True, ceil_mode=False). 1-D runs as 2-D with height 1. Max pooling
 * treats padding as -inf and sends the gradient to the first maximum in scan order, as torch. */
#include "kernels.h"

#include <math.h>
#include <string.h>

typedef struct {
  int64_t planes, H, W, OH, OW;  /* planes = N*C */
  int64_t kh, kw, sh, sw, ph, pw;
} k_pool_geom;

static k_pool_geom k_pool_geometry(const k_shape *x, const k_shape *y, const k_pool_param *p) {
  k_pool_geom g;
  int two = p->kernel.n == 2, r = x->rank;
  g.planes = x->d[0] * x->d[1];
  g.H = two ? x->d[r - 2] : 1;  g.W = x->d[r - 1];
  g.OH = two ? y->d[r - 2] : 1; g.OW = y->d[r - 1];
  g.kh = two ? p->kernel.v[0] : 1;  g.kw = p->kernel.v[p->kernel.n - 1];
  g.sh = two ? p->stride.v[0] : 1;  g.sw = p->stride.v[p->kernel.n - 1];
  g.ph = two ? p->pad.v[0] : 0;     g.pw = p->pad.v[p->kernel.n - 1];
  return g;
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

static float k_pool_value(const k_pool_geom *g, const float *x, k_window w, int is_max) {
  if (is_max) {
    int64_t i = k_pool_argmax(g, x, w);
    return i < 0 ? -INFINITY : x[i];
  }
  float s = 0.0f;
  for (int64_t h = w.h0; h < w.h1; h++)
    for (int64_t v = w.w0; v < w.w1; v++) s += x[h * g->W + v];
  return s / (float)(g->kh * g->kw);   /* count_include_pad: padding counts as zeros */
}

int k_pooling_forward(const k_call *c) {
  const k_pool_param *p = c->param;
  k_req r = c->req[0];
  if (r == kNullOp) return 0;
  k_pool_geom g = k_pool_geometry(&c->in[0].shape, &c->out[0].shape, p);
  int is_max = p->pool_type == K_POOL_MAX;
  for (int64_t pl = 0; pl < g.planes; pl++) {
    const float *x = (const float *)c->in[0].data + pl * g.H * g.W;
    float *y = (float *)c->out[0].data + pl * g.OH * g.OW;
    for (int64_t oh = 0; oh < g.OH; oh++)
      for (int64_t ow = 0; ow < g.OW; ow++) {
        float v = k_pool_value(&g, x, k_pool_window(&g, oh, ow), is_max);
        y[oh * g.OW + ow] = r == kAddTo ? y[oh * g.OW + ow] + v : v;
      }
  }
  return 0;
}

/* Scatters one output's gradient back over its window. */
static void k_pool_scatter(const k_pool_geom *g, const float *x, k_window w, float dy, int is_max,
                           float *dx) {
  if (is_max) {
    int64_t i = k_pool_argmax(g, x, w);
    if (i >= 0) dx[i] += dy;
    return;
  }
  float share = dy / (float)(g->kh * g->kw);
  for (int64_t h = w.h0; h < w.h1; h++)
    for (int64_t v = w.w0; v < w.w1; v++) dx[h * g->W + v] += share;
}

/* Backward in = [dY, X, Y]. The argmax is recomputed from X rather than matched against Y so
 * that ties resolve exactly as the forward scan did. */
int k_pooling_backward(const k_call *c) {
  const k_pool_param *p = c->param;
  if (c->req[0] == kNullOp) return 0;
  k_pool_geom g = k_pool_geometry(&c->in[1].shape, &c->in[0].shape, p);
  int is_max = p->pool_type == K_POOL_MAX;
  float *dX = c->out[0].data;
  if (c->req[0] != kAddTo) memset(dX, 0, (size_t)(g.planes * g.H * g.W) * sizeof(float));
  for (int64_t pl = 0; pl < g.planes; pl++) {
    const float *x = (const float *)c->in[1].data + pl * g.H * g.W;
    const float *dy = (const float *)c->in[0].data + pl * g.OH * g.OW;
    float *dx = dX + pl * g.H * g.W;
    for (int64_t oh = 0; oh < g.OH; oh++)
      for (int64_t ow = 0; ow < g.OW; ow++)
        k_pool_scatter(&g, x, k_pool_window(&g, oh, ow), dy[oh * g.OW + ow], is_max, dx);
  }
  return 0;
}
