/* k_softmax.c — softmax and log_softmax over any axis, and softmax_cross_entropy.
 * Every row subtracts its max before exponentiating, so large logits (1000) stay finite.
 * A tensor is viewed as [outer, n, inner] around the axis. With inner == 1 (the last axis) a
 * row is contiguous and every pass vectorises along it, sums kept in K_LANES partial sums; on
 * another axis the passes vectorise across a block of inner positions instead. Outputs go
 * through a stack block (k_store_block), so y may alias x and gx may alias og. Work is split
 * over the outer positions with k_parallel_for; no sum crosses a chunk. */
#include <math.h>
#include <stdio.h>

#include "kernels.h"
#include "k_bview.h"
#include "k_scalar.h"
#include "k_vm512.h"

typedef struct { int64_t outer, n, inner; } k_rows;

static k_rows k_rows_of(const k_shape *s, int axis) {
  k_rows r = {1, s->d[axis], 1};
  for (int i = 0; i < axis; i++) r.outer *= s->d[i];
  for (int i = axis + 1; i < s->rank; i++) r.inner *= s->d[i];
  return r;
}

/* ---- contiguous rows ---- */

/* Contiguous rows are written on k_vf16 (element k in lane k % 16, the same operations in
 * the same order as the lane-array loops they replace, so the same bits): as lane arrays gcc
 * kept the max's lanes in scalar registers and the sums on the stack, and a short row
 * (attention's 64) cost twice its exponentials. */
/* The row's max; a NaN is passed over here but still turns the row NaN through exp. */
static inline float k_row_max(const float *x, int64_t n) {
  float l[K_LANES];
  int64_t k = 0;
  k_vf16 acc, v;
  for (int i = 0; i < K_LANES; i++) acc[i] = -INFINITY;
  for (; k + K_LANES <= n; k += K_LANES) {
    K_VF16_LOAD(v, x + k);
    k_vi16 gt = v > acc;   /* lane-wise x > l ? x : l */
    acc = (k_vf16)(((k_vi16)v & gt) | ((k_vi16)acc & ~gt));
  }
  __builtin_memcpy(l, &acc, sizeof l);
  for (int i = 0; k + i < n; i++) l[i] = x[k + i] > l[i] ? x[k + i] : l[i];
  for (int w = K_LANES / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) l[i] = l[i + w] > l[i] ? l[i + w] : l[i];
  return l[0];
}

/* t[j] = exp(x[j] - m), j < len, through k_vm512.h's exponential where the CPU has AVX-512F:
 * x - m is <= 0 or NaN (m is the row's max), where it gives k_sf_exp's bits with about a
 * quarter fewer instructions (vscalefps, vrndscaleps). ViT-B/16's softmax over [12, 197, 197]
 * was 5.8 ms a call against ORT's 2.2. The last part-vector goes through masked loads. */
#if K_VM512
static __attribute__((target("avx512f"), noinline)) void k_exp_sub_512(float *restrict t, const float *x,
                                                                     int64_t len, float m) {
  __m512 mv = _mm512_set1_ps(m);
  int64_t j = 0;
  for (; j + 16 <= len; j += 16)
    _mm512_storeu_ps(t + j, k_vm512_exp_nonpos(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv)));
  if (j < len) {
    __mmask16 mk = (__mmask16)((1u << (len - j)) - 1u);
    _mm512_mask_storeu_ps(t + j, mk, k_vm512_exp_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + j), mv)));
  }
}

/* A whole softmax row of n <= K_BLOCK written to y (kWriteTo; y may be x) in three passes
 * held in registers: the max, the exponentials stored to y as their sum goes on, and the
 * scaling. The same operations in the same order as k_softmax_row's (k_row_max's lane-wise
 * max and halving tree, the sum's whole vectors then the last part-vector's lanes, then
 * k_lanes_sum's folds, y = e * (1 / s)): the same bits, without the stack block and the lane
 * arrays that k_softmax_row goes through (ViT-B/16 at batch 8: its softmax 2.5x ORT's time). */
static __attribute__((target("avx512f"), noinline)) void k_softmax_row_512(const float *x, float *y, int64_t n) {
  int64_t k = 0, tail = n % 16;
  __mmask16 mk = (__mmask16)((1u << tail) - 1u);
  __m512 acc = _mm512_set1_ps(-INFINITY);
  for (; k + 16 <= n; k += 16) acc = _mm512_max_ps(_mm512_loadu_ps(x + k), acc);   /* x > acc ? x : acc */
  if (tail) acc = _mm512_mask_max_ps(acc, mk, _mm512_maskz_loadu_ps(mk, x + k), acc);
  __m256 h8 = _mm256_max_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)), _mm512_castps512_ps256(acc));
  __m128 h4 = _mm_max_ps(_mm256_extractf128_ps(h8, 1), _mm256_castps256_ps128(h8));
  __m128 h2 = _mm_max_ps(_mm_movehl_ps(h4, h4), h4);
  __m128 h1 = _mm_max_ps(_mm_shuffle_ps(h2, h2, 1), h2);
  __m512 mv = _mm512_broadcastss_ps(h1), sum = _mm512_setzero_ps();
  for (k = 0; k + 16 <= n; k += 16) {
    __m512 e = k_vm512_exp_nonpos(_mm512_sub_ps(_mm512_loadu_ps(x + k), mv));
    _mm512_storeu_ps(y + k, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (tail) {
    __m512 e = k_vm512_exp_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + k), mv));
    _mm512_mask_storeu_ps(y + k, mk, e);
    sum = _mm512_mask_add_ps(sum, mk, sum, e);
  }
  __m256 a = _mm256_add_ps(_mm512_castps512_ps256(sum), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  float c0 = _mm_cvtss_f32(b) + _mm_cvtss_f32(_mm_movehl_ps(b, b));
  float c1 = _mm_cvtss_f32(_mm_shuffle_ps(b, b, 1)) + _mm_cvtss_f32(_mm_shuffle_ps(b, b, 3));
  __m512 inv = _mm512_set1_ps(1.0f / (c0 + c1));
  for (k = 0; k + 16 <= n; k += 16) _mm512_storeu_ps(y + k, _mm512_mul_ps(_mm512_loadu_ps(y + k), inv));
  if (tail) _mm512_mask_storeu_ps(y + k, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, y + k), inv));
}
#endif

static inline void k_exp_sub(float *restrict t, const float *x, int64_t len, float m) {
#if K_VM512
  if (k_vm512_have()) {
    k_exp_sub_512(t, x, len, m);
    return;
  }
#endif
  for (int64_t j = 0; j < len; j++) t[j] = k_sf_exp(x[j] - m);
}

/* t[j] = exp(x[j] - m) for a block of len; its whole vectors added into acc in order, the
 * partial one (only ever the row's last) into lanes l. */
static inline void k_exp_block(float *restrict t, k_vf16 *acc, float *restrict l, const float *x,
                               int64_t len, float m) {
  int64_t k = 0;
  k_vf16 v;
  k_exp_sub(t, x, len, m);
  for (; k + K_LANES <= len; k += K_LANES) {
    K_VF16_LOAD(v, t + k);
    *acc += v;
  }
  __builtin_memcpy(l, acc, sizeof(k_vf16));
  for (int i = 0; k + i < len; i++) l[i] += t[k + i];
}

/* Sum of exp(x - m) over the row. */
static inline float k_row_expsum(const float *x, int64_t n, float m) {
  float l[K_LANES] = {0}, t[K_BLOCK];
  k_vf16 acc = {0};
  for (int64_t k0 = 0; k0 < n; k0 += K_BLOCK)
    k_exp_block(t, &acc, l, x + k0, n - k0 < K_BLOCK ? n - k0 : K_BLOCK, m);
  return k_lanes_sum(l);
}

/* One row of softmax (is_log 0) or log_softmax (1). A row of one block scales its
 * exponentials in the stack block; a longer row keeps them in y until scaled, or with kAddTo
 * (y holds what it adds to) computes them again. */
K_VEC_TARGETS static void k_softmax_row(const float *x, float *y, int64_t n, int is_log, k_req req) {
  float m = k_row_max(x, n), t[K_BLOCK], l[K_LANES] = {0};
  int keep_exp = !is_log && req != kAddTo && n > K_BLOCK;
  k_vf16 acc = {0};
  for (int64_t k0 = 0; k0 < n; k0 += K_BLOCK) {
    int64_t len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK;
    k_exp_block(t, &acc, l, x + k0, len, m);
    if (keep_exp) k_store_block(y + k0, t, len, kWriteTo);
  }
  float s = k_lanes_sum(l), inv = 1.0f / s;
  float ls = is_log ? logf(s) : 0.0f;   /* a libm call per row that softmax does not need */
  if (keep_exp) {
    for (int64_t j = 0; j < n; j++) y[j] *= inv;
    return;
  }
  for (int64_t k0 = 0; k0 < n; k0 += K_BLOCK) {
    int64_t len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK;
    const float *xb = x + k0;
    if (is_log) for (int64_t j = 0; j < len; j++) t[j] = (xb[j] - m) - ls;   /* x - m is exact */
    else if (n > K_BLOCK) {
      k_exp_sub(t, xb, len, m);
      for (int64_t j = 0; j < len; j++) t[j] *= inv;
    }
    else for (int64_t j = 0; j < len; j++) t[j] *= inv;   /* the one block's exponentials */
    k_store_block(y + k0, t, len, req);
  }
}

/* softmax's gx = y * (og - <og, y>) on vector types: as lane arrays gcc left the sum's lanes
 * in scalar registers. Element k in lane k % 16, same operations in the same order as the
 * plain loops: the same bits. A vector of og is read before gx's is written (gx may be og). */
static inline void k_softmax_row_grad_vec(const float *og, const float *y, float *gx, int64_t n, k_req req) {
  k_vf16 acc = {0}, vo, vy, old;
  float l[K_LANES];
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES) {
    K_VF16_LOAD(vo, og + k);
    K_VF16_LOAD(vy, y + k);
    acc += vo * vy;
  }
  __builtin_memcpy(l, &acc, sizeof l);
  for (int i = 0; k + i < n; i++) l[i] += og[k + i] * y[k + i];
  float s = k_lanes_sum(l);
  for (k = 0; k + K_LANES <= n; k += K_LANES) {
    K_VF16_LOAD(vo, og + k);
    K_VF16_LOAD(vy, y + k);
    k_vf16 t = vy * (vo - s);
    if (req == kAddTo) {
      K_VF16_LOAD(old, gx + k);
      t = old + t;
    }
    __builtin_memcpy(gx + k, &t, sizeof t);
  }
  for (; k < n; k++) {
    float t = y[k] * (og[k] - s);
    gx[k] = req == kAddTo ? gx[k] + t : t;
  }
}

/* softmax: gx = y * (og - <og, y>);  log_softmax: gx = og - exp(y) * sum(og). */
K_VEC_TARGETS static void k_softmax_row_grad(const float *og, const float *y, float *gx, int64_t n, int is_log,
                               k_req req) {
  if (!is_log) {
    k_softmax_row_grad_vec(og, y, gx, n, req);
    return;
  }
  float l[K_LANES] = {0}, t[K_BLOCK];
  int64_t k = 0;
  for (; k + K_LANES <= n; k += K_LANES)
    for (int i = 0; i < K_LANES; i++) l[i] += is_log ? og[k + i] : og[k + i] * y[k + i];
  for (int i = 0; k + i < n; i++) l[i] += is_log ? og[k + i] : og[k + i] * y[k + i];
  float s = k_lanes_sum(l);
  for (int64_t k0 = 0; k0 < n; k0 += K_BLOCK) {
    int64_t len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK;
    const float *g = og + k0, *v = y + k0;
    if (is_log) for (int64_t j = 0; j < len; j++) t[j] = g[j] - k_sf_exp(v[j]) * s;
    else for (int64_t j = 0; j < len; j++) t[j] = v[j] * (g[j] - s);
    k_store_block(gx + k0, t, len, req);
  }
}

/* ---- strided rows (an axis other than the last): one outer position, a block of columns ---- */

/* Column-wise max and sum of exp(x - max) over the n rows of a [n, inner] slab's block. */
static inline void k_cols_stats(const float *x, int64_t n, int64_t inner, int64_t len, float *restrict mx,
                         float *restrict s) {
  for (int64_t k = 0; k < len; k++) { mx[k] = -INFINITY; s[k] = 0.0f; }
  for (int64_t j = 0; j < n; j++)
    for (int64_t k = 0; k < len; k++) mx[k] = x[j * inner + k] > mx[k] ? x[j * inner + k] : mx[k];
  for (int64_t j = 0; j < n; j++)
    for (int64_t k = 0; k < len; k++) s[k] += k_sf_exp(x[j * inner + k] - mx[k]);
}

K_VEC_TARGETS static void k_softmax_cols(const float *x, float *y, int64_t n, int64_t inner, int is_log, k_req req) {
  float mx[K_BLOCK], s[K_BLOCK], t[K_BLOCK];
  for (int64_t k0 = 0; k0 < inner; k0 += K_BLOCK) {
    int64_t len = inner - k0 < K_BLOCK ? inner - k0 : K_BLOCK;
    k_cols_stats(x + k0, n, inner, len, mx, s);
    for (int64_t k = 0; k < len; k++) s[k] = is_log ? logf(s[k]) : 1.0f / s[k];
    for (int64_t j = 0; j < n; j++) {
      const float *xr = x + j * inner + k0;
      if (is_log) for (int64_t k = 0; k < len; k++) t[k] = (xr[k] - mx[k]) - s[k];
      else for (int64_t k = 0; k < len; k++) t[k] = k_sf_exp(xr[k] - mx[k]) * s[k];
      k_store_block(y + j * inner + k0, t, len, req);
    }
  }
}

K_VEC_TARGETS static void k_softmax_cols_grad(const float *og, const float *y, float *gx, int64_t n,
                                int64_t inner, int is_log, k_req req) {
  float s[K_BLOCK], t[K_BLOCK];
  for (int64_t k0 = 0; k0 < inner; k0 += K_BLOCK) {
    int64_t len = inner - k0 < K_BLOCK ? inner - k0 : K_BLOCK;
    for (int64_t k = 0; k < len; k++) s[k] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
      const float *g = og + j * inner + k0, *v = y + j * inner + k0;
      for (int64_t k = 0; k < len; k++) s[k] += is_log ? g[k] : g[k] * v[k];
    }
    for (int64_t j = 0; j < n; j++) {
      const float *g = og + j * inner + k0, *v = y + j * inner + k0;
      if (is_log) for (int64_t k = 0; k < len; k++) t[k] = g[k] - k_sf_exp(v[k]) * s[k];
      else for (int64_t k = 0; k < len; k++) t[k] = v[k] * (g[k] - s[k]);
      k_store_block(gx + j * inner + k0, t, len, req);
    }
  }
}

/* ---- drivers: forward reads in = [x]; backward in = [og, x (NULL), y] ---- */
typedef struct {
  const float *a, *b;    /* forward: x, unused; backward: og, y */
  float *out;
  k_rows r;
  int is_log, backward;
  k_req req;
} k_softmax_job;

static void k_softmax_range(void *ctx, int64_t lo, int64_t hi) {
  const k_softmax_job *j = ctx;
  int64_t n = j->r.n, in = j->r.inner, slab = n * in;
#if K_VM512
  if (in == 1 && !j->backward && !j->is_log && j->req == kWriteTo && n >= 1 && n <= K_BLOCK && k_vm512_have()) {
    for (int64_t o = lo; o < hi; o++) k_softmax_row_512(j->a + o * slab, j->out + o * slab, n);
    return;
  }
#endif
  for (int64_t o = lo; o < hi; o++) {
    const float *a = j->a + o * slab, *b = j->b ? j->b + o * slab : NULL;
    float *out = j->out + o * slab;
    if (in == 1 && !j->backward) k_softmax_row(a, out, n, j->is_log, j->req);
    else if (in == 1) k_softmax_row_grad(a, b, out, n, j->is_log, j->req);
    else if (!j->backward) k_softmax_cols(a, out, n, in, j->is_log, j->req);
    else k_softmax_cols_grad(a, b, out, n, in, j->is_log, j->req);
  }
}

static int k_softmax_run(const k_call *c, int is_log, int backward) {
  if (c->req[0] == kNullOp) return 0;
  k_softmax_job j = {c->in[0].data, backward ? c->in[2].data : NULL, c->out[0].data,
                     k_rows_of(&c->in[0].shape, ((const k_softmax_param *)c->param)->axis),
                     is_log, backward, c->req[0]};
  k_parallel_for(j.r.outer, k_vec_grain(j.r.n * j.r.inner), k_softmax_range, &j);
  return 0;
}

int k_softmax_forward(const k_call *c) { return k_softmax_run(c, 0, 0); }
int k_log_softmax_forward(const k_call *c) { return k_softmax_run(c, 1, 0); }
int k_softmax_backward(const k_call *c) { return k_softmax_run(c, 0, 1); }
int k_log_softmax_backward(const k_call *c) { return k_softmax_run(c, 1, 1); }

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

/* Rows in order, summed in double: the loss is one number, so this stays on one thread. */
int k_softmax_cross_entropy_forward(const k_call *c) {
  const k_shape *ls = &c->in[0].shape;
  int64_t rows = ls->d[0], classes = ls->d[1];
  const float *x = c->in[0].data;
  const int32_t *label = c->in[1].data;
  if (k_check_labels(c, label, rows, classes)) return 1;
  if (c->req[0] == kNullOp) return 0;
  double total = 0;
  for (int64_t i = 0; i < rows; i++) {
    const float *row = x + i * classes;
    float m = k_row_max(row, classes), lsum = logf(k_row_expsum(row, classes, m));
    total += (double)lsum - (double)(row[label[i]] - m);
  }
  k_put(c->out[0].data, 0, (float)(total / (double)rows), c->req[0]);
  return 0;
}

typedef struct {
  const float *x;
  const int32_t *label;
  float *gx;
  int64_t classes;
  float scale;
  k_req req;
} k_sce_job;

/* g = scale * (softmax(x) - onehot(label)) for rows [lo, hi). */
K_VEC_TARGETS static void k_sce_grad_range(void *ctx, int64_t lo, int64_t hi) {
  const k_sce_job *j = ctx;
  int64_t n = j->classes;
  float t[K_BLOCK];
  for (int64_t i = lo; i < hi; i++) {
    const float *row = j->x + i * n;
    float m = k_row_max(row, n), inv = j->scale / k_row_expsum(row, n, m);
    for (int64_t k0 = 0; k0 < n; k0 += K_BLOCK) {
      int64_t len = n - k0 < K_BLOCK ? n - k0 : K_BLOCK, hit = j->label[i] - k0;
      k_exp_sub(t, row + k0, len, m);
      for (int64_t k = 0; k < len; k++) t[k] *= inv;
      if (hit >= 0 && hit < len) t[hit] -= j->scale;
      k_store_block(j->gx + i * n + k0, t, len, j->req);
    }
  }
}

/* in = [og (scalar), logits, label, loss (NULL)]; out = [g_logits, g_label (kNullOp)]. */
int k_softmax_cross_entropy_backward(const k_call *c) {
  const k_shape *ls = &c->in[1].shape;
  int64_t rows = ls->d[0], classes = ls->d[1];
  const int32_t *label = c->in[2].data;
  if (k_check_labels(c, label, rows, classes)) return 1;
  if (c->req[0] == kNullOp) return 0;
  k_sce_job j = {c->in[1].data, label, c->out[0].data, classes,
                 ((const float *)c->in[0].data)[0] / (float)rows, c->req[0]};
  k_parallel_for(rows, k_vec_grain(classes), k_sce_grad_range, &j);
  return 0;
}
