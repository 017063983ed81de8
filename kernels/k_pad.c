/* k_pad.c — pad (F.pad): constant (a negative pad crops, as in torch), reflect (the edge
 * element not repeated) and replicate. The param's pairs are normalised to every axis, last
 * axis first (k_pad_param). Tensors are seen as rows of the last axis: each output row comes
 * from one input row, which its outer index maps to, or is all padding.
 * Forward and constant-mode backward (the inverse map: each input element from at most one
 * output element) split rows over threads. Reflect and replicate backward add several output
 * elements into one input element, so they run in output order on one thread: one summation
 * order whatever the thread count. */
#include <string.h>

#include "kernels.h"
#include "k_index.h"
#include "k_util.h"
#include "k_vec.h"

typedef struct {
  int rank;
  int mode;
  float value;
  int64_t xd[K_MAX_RANK], yd[K_MAX_RANK], before[K_MAX_RANK];
  int64_t xw, yw;               /* row lengths: the last axis of x and of y */
  int64_t bw;                   /* the last axis's pad before */
} k_pad_geom;

static k_pad_geom k_pad_geometry(const k_shape *x, const k_shape *y, const k_pad_param *p) {
  k_pad_geom g = {.rank = x->rank, .mode = p->mode, .value = p->value};
  for (int a = 0; a < x->rank; a++) {
    g.xd[a] = x->d[a], g.yd[a] = y->d[a];
    g.before[a] = p->pad.v[2 * (x->rank - 1 - a)];
  }
  g.xw = x->rank ? x->d[x->rank - 1] : 1;
  g.yw = y->rank ? y->d[y->rank - 1] : 1;
  g.bw = x->rank ? g.before[x->rank - 1] : 0;
  return g;
}

/* The first element of the input row that output row r reads, or -1 (a padding row). */
static int64_t k_pad_row_src(const k_pad_geom *g, int64_t r) {
  int64_t off = 0, stride = g->xw;
  for (int a = g->rank - 2; a >= 0; a--) {
    int64_t s = k_pad_src(r % g->yd[a], g->before[a], g->xd[a], g->mode);
    r /= g->yd[a];
    if (s < 0) return -1;
    off += s * stride;
    stride *= g->xd[a];
  }
  return off;
}

/* [lo, hi): the output positions of a row that read the input's [lo - b, hi - b). */
static void k_pad_inside(const k_pad_geom *g, int64_t *lo, int64_t *hi) {
  int64_t b = g->bw;
  *lo = b < 0 ? 0 : (b > g->yw ? g->yw : b);
  *hi = b + g->xw > g->yw ? g->yw : b + g->xw;
  if (*hi < *lo) *hi = *lo;
}

typedef struct {
  const k_pad_geom *g;
  const float *x;
  float *y;
  k_req req;
} k_pad_job;

static inline void k_pad_put(float *y, float v, k_req req) {
  if (req == kAddTo) *y += v;
  else *y = v;
}

/* Output positions [k0, k1) of a row, each outside the input's span: the constant, or the
 * reflected / replicated input element. */
static void k_pad_edge(const k_pad_geom *g, const float *x, float *y, int64_t k0, int64_t k1, k_req req) {
  for (int64_t k = k0; k < k1; k++) {
    int64_t s = k_pad_src(k, g->bw, g->xw, g->mode);
    k_pad_put(y + k, s < 0 ? g->value : x[s], req);
  }
}

static void k_pad_forward_rows(void *ctx, int64_t r0, int64_t r1) {
  const k_pad_job *j = ctx;
  const k_pad_geom *g = j->g;
  int64_t lo, hi, b = g->bw;
  k_pad_inside(g, &lo, &hi);
  for (int64_t r = r0; r < r1; r++) {
    float *y = j->y + r * g->yw;
    int64_t src = k_pad_row_src(g, r);
    if (src < 0) {
      for (int64_t k = 0; k < g->yw; k++) k_pad_put(y + k, g->value, j->req);
      continue;
    }
    const float *x = j->x + src;
    k_pad_edge(g, x, y, 0, lo, j->req);
    k_copy_req(y + lo, x + lo - b, hi - lo, j->req);
    k_pad_edge(g, x, y, hi, g->yw, j->req);
  }
}

int k_pad_forward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  k_pad_geom g = k_pad_geometry(&c->in[0].shape, &c->out[0].shape, c->param);
  k_pad_job j = {&g, c->in[0].data, c->out[0].data, c->req[0]};
  int64_t rows = k_shape_numel(&c->out[0].shape) / g.yw;
  k_parallel_for(rows, k_vec_grain(g.yw), k_pad_forward_rows, &j);
  return 0;
}

/* Constant mode: input element i is output element i + before on every axis, when that is
 * inside the output (a negative pad crops it away: its gradient is 0). */
static void k_pad_backward_rows(void *ctx, int64_t r0, int64_t r1) {
  const k_pad_job *j = ctx;
  const k_pad_geom *g = j->g;
  int64_t lo, hi, b = g->bw;
  k_pad_inside(g, &lo, &hi);
  for (int64_t r = r0; r < r1; r++) {
    float *gx = j->y + r * g->xw;
    int64_t off = 0, stride = g->yw, q = r;
    for (int a = g->rank - 2; a >= 0 && off >= 0; a--) {
      int64_t o = q % g->xd[a] + g->before[a];
      q /= g->xd[a];
      off = o >= 0 && o < g->yd[a] ? off + o * stride : -1;
      stride *= g->yd[a];
    }
    if (off < 0 || hi == lo) {
      if (j->req != kAddTo) memset(gx, 0, (size_t)g->xw * sizeof(float));
      continue;
    }
    if (j->req != kAddTo) {
      memset(gx, 0, (size_t)(lo - b) * sizeof(float));
      memset(gx + hi - b, 0, (size_t)(g->xw - (hi - b)) * sizeof(float));
    }
    k_copy_req(gx + lo - b, j->x + off + lo, hi - lo, j->req);
  }
}

/* Reflect and replicate: every output element added into the input element it read. */
static void k_pad_backward_scatter(const k_pad_geom *g, const float *og, float *gx) {
  int64_t lo, hi, b = g->bw;
  k_pad_inside(g, &lo, &hi);
  int64_t rows = 1;
  for (int a = 0; a + 1 < g->rank; a++) rows *= g->yd[a];
  for (int64_t r = 0; r < rows; r++) {
    const float *o = og + r * g->yw;
    float *x = gx + k_pad_row_src(g, r);
    for (int64_t k = 0; k < lo; k++) x[k_pad_src(k, b, g->xw, g->mode)] += o[k];
    for (int64_t k = lo; k < hi; k++) x[k - b] += o[k];
    for (int64_t k = hi; k < g->yw; k++) x[k_pad_src(k, b, g->xw, g->mode)] += o[k];
  }
}

int k_pad_backward(const k_call *c) {
  k_req req = c->req[0];
  if (req == kNullOp) return 0;
  k_pad_geom g = k_pad_geometry(&c->out[0].shape, &c->in[0].shape, c->param);
  float *gx = c->out[0].data;
  if (g.mode == K_PAD_CONSTANT) {
    k_pad_job j = {&g, c->in[0].data, gx, req};
    int64_t rows = k_shape_numel(&c->out[0].shape) / g.xw;
    k_parallel_for(rows, k_vec_grain(g.xw), k_pad_backward_rows, &j);
    return 0;
  }
  if (req != kAddTo) memset(gx, 0, (size_t)k_shape_numel(&c->out[0].shape) * sizeof(float));
  k_pad_backward_scatter(&g, c->in[0].data, gx);
  return 0;
}
