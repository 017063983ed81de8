/* kc_ops.cu — the library kernels of the GPU back end: the device halves of the ops in
 * rtc_ops.def's "library kernels" row and of the optimizer updates, each following its CPU
 * kernel (kernels/k_*.c) formula by formula. Compiled by NVRTC with -default-device as the
 * library's own module (codegen/cuda/cg_cuda_lib.c), and on the host by tests/cuda/kc_host.h
 * and the emulation's library build (tests/cuda/fake), so: no libc, no atomics. Every kernel is
 * grid-stride, one thread per output element, or per row / channel / group where a result needs
 * a sum, which that thread folds sequentially — one fixed order, deterministic, and the in-place
 * cases stay safe because a thread reads its whole row before it writes it (the CPU kernels'
 * stack blocks give them the same guarantee). The sums over many elements (batch_norm's per
 * channel, layer_norm's parameter gradients, the cross-entropy loss over the batch) take a whole
 * block each instead (KC_BLOCK_LOOP, kc_block_sum): its threads fold strided parts, then a tree
 * in shared memory of a fixed shape adds them, so the result is still the same on every run. On
 * the host (one thread of one block) the same code folds sequentially. */

#include "k_params.h"
#include "k_scalar.h"   /* the CPU kernels' scalar functions, compiled as device code */
#include "k_philox.h"
#include "kc_args.h"    /* each kernel's one argument struct */
#include "kc_block.h"   /* KC_LOOP, the block reductions */
#include "k_index.h"   /* pad's and pooling's index arithmetic, the CPU kernels' own */

/* +inf without libm's macro (NVRTC has no math.h). */
static inline float kc_inf(void) { return k_vm_asfloat(0x7f800000u); }
static inline float kc_nan(void) { return k_vm_asfloat(0x7fc00000u); }

static inline void kc_put(float *y, int64_t i, float v, int32_t req) {
  if (req == kAddTo) y[i] += v;
  else y[i] = v;
}

/* NaN-propagating max, as k_vec_max2. */
static inline float kc_max2(float a, float b) { return (b > a || b != b) ? b : a; }

extern "C" __global__ void kc_fill(kc_fill_args a) {
  KC_LOOP(i, a.n) kc_put(a.y, i, a.v, a.req);
}

/* ---- data movement ---- */

/* The offsets into x and y of flat index i of the index space. */
static inline void kc_strided_at(const kc_strided_args *a, int64_t i, int64_t *xo, int64_t *yo) {
  int64_t x = a->x0, y = a->y0;
  for (int k = a->rank - 1; k >= 0; k--) {
    int64_t q = i % a->d[k];
    i /= a->d[k];
    x += q * a->xs[k];
    y += q * a->ys[k];
  }
  *xo = x;
  *yo = y;
}

extern "C" __global__ void kc_strided(kc_strided_args a) {
  KC_LOOP(i, a.n) {
    int64_t xo, yo;
    kc_strided_at(&a, i, &xo, &yo);
    if (a.req == kAddTo || a.use_scale) {
      float v = ((const float *)a.x)[xo];
      if (a.use_scale) v = v * a.scale;
      kc_put((float *)a.y, yo, v, a.req);
    } else {
      ((uint32_t *)a.y)[yo] = ((const uint32_t *)a.x)[xo];
    }
  }
}

/* ---- reductions (sum, mean, max, min, prod, logsumexp, norm, broadcast_to's gradient) ---- */

static inline int64_t kc_group_base(const kc_reduce_args *a, int64_t i) {
  int64_t o = 0;
  for (int k = a->krank - 1; k >= 0; k--) {
    o += (i % a->kd[k]) * a->kxs[k];
    i /= a->kd[k];
  }
  return o;
}

static inline int64_t kc_group_off(const kc_reduce_args *a, int64_t r) {
  int64_t o = 0;
  for (int k = a->rrank - 1; k >= 0; k--) {
    o += (r % a->rd[k]) * a->rxs[k];
    r /= a->rd[k];
  }
  return o;
}

/* NaN-propagating min, as k_vec_min2. */
static inline float kc_min2(float a, float b) { return (b < a || b != b) ? b : a; }

/* One element v folded into t by op; shift: logsumexp's max shift. */
static inline float kc_fold(int32_t op, float t, float v, float shift) {
  switch (op) {
  case KC_RED_MAX: return kc_max2(t, v);
  case KC_RED_MIN: return kc_min2(t, v);
  case KC_RED_PROD: return t * v;
  case KC_RED_LSE: return t + k_vm_exp(v - shift);
  case KC_RED_L1: return t + fabsf(v);
  case KC_RED_L2: return t + v * v;
  default: return t + v;
  }
}

static inline float kc_fold_init(int32_t op) {
  return op == KC_RED_MAX ? -kc_inf() : op == KC_RED_MIN ? kc_inf() : op == KC_RED_PROD ? 1.0f : 0.0f;
}

/* logsumexp's shift: the max, or 0 where it is infinite (k_reduce.c's k_lse_shift). */
static inline float kc_lse_shift(float m) { return m == kc_inf() || m == -kc_inf() ? 0.0f : m; }

/* A sum-like op's group by a block: each thread's strided share folded in float, the shares
 * added in kc_block_sum's fixed tree (in double). One thread a group walks a long group one
 * dependent load at a time, and a few groups leave the GPU idle (a layer_norm exported as
 * ReduceMean: 128 groups of 512 at BERT's batch 1). */
static inline void kc_reduce_blocks(const kc_reduce_args *a, double *red) {
  KC_BLOCK_LOOP(i, a->nk) {
    int64_t base = kc_group_base(a, i);
    float t = 0.0f;
    KC_THREAD_LOOP(r, a->nr) t = kc_fold(a->op, t, a->x[base + kc_group_off(a, r)], 0.0f);
    float v = (float)kc_block_sum(t, red);
    if (a->op == KC_RED_L2) v = sqrtf(v);
    if (a->op == KC_RED_SUM) v = v * a->scale;
    if (threadIdx.x == 0) kc_put(a->y, i, v, a->req);
  }
}

extern "C" __global__ void kc_reduce(kc_reduce_args a) {
  __shared__ double red[KC_BLOCK];
  if (a.block) {
    kc_reduce_blocks(&a, red);
    return;
  }
  KC_LOOP(i, a.nk) {
    int64_t base = kc_group_base(&a, i);
    float t = kc_fold_init(a.op), m = 0.0f;
    if (a.op == KC_RED_LSE) {   /* the group's max first: no workspace, so recomputed here */
      m = -kc_inf();
      for (int64_t r = 0; r < a.nr; r++) m = kc_max2(m, a.x[base + kc_group_off(&a, r)]);
    }
    for (int64_t r = 0; r < a.nr; r++) t = kc_fold(a.op, t, a.x[base + kc_group_off(&a, r)], kc_lse_shift(m));
    if (a.op == KC_RED_LSE) t = logf(t) + kc_lse_shift(m);
    if (a.op == KC_RED_L2) t = sqrtf(t);
    if (a.op == KC_RED_SUM) t = t * a.scale;
    kc_put(a.y, i, t, a.req);
  }
}

static inline int kc_is_peak(float x, float y) { return x == y || (x != x && y != y); }

/* og splits evenly among the group's elements equal to its max (k_reduce.c's k_peak_backward). */
extern "C" __global__ void kc_max_grad(kc_max_grad_args a) {
  KC_LOOP(i, a.g.nk) {
    int64_t base = kc_group_base(&a.g, i);
    float y = a.yv[i], count = 0.0f;
    for (int64_t r = 0; r < a.g.nr; r++) count += (float)kc_is_peak(a.x[base + kc_group_off(&a.g, r)], y);
    float share = count > 0.0f ? a.og[i] / count : 0.0f;
    for (int64_t r = 0; r < a.g.nr; r++) {
      int64_t at = base + kc_group_off(&a.g, r);
      kc_put(a.gx, at, kc_is_peak(a.x[at], y) ? share : 0.0f, a.g.req);
    }
  }
}

/* torch.prod's gradient per group: og * (y / x) without zeros; with one zero, og times the
 * product of the others at the zero and 0 elsewhere; 0 everywhere with two or more. */
extern "C" __global__ void kc_prod_grad(kc_prod_grad_args a) {
  KC_LOOP(i, a.g.nk) {
    int64_t base = kc_group_base(&a.g, i);
    float zeros = 0.0f, pnz = 1.0f, og = a.og[i], y = a.yv[i];
    for (int64_t r = 0; r < a.g.nr; r++) {
      float v = a.x[base + kc_group_off(&a.g, r)];
      zeros += (float)(v == 0.0f);
      pnz *= v == 0.0f ? 1.0f : v;
    }
    for (int64_t r = 0; r < a.g.nr; r++) {
      int64_t at = base + kc_group_off(&a.g, r);
      float v = a.x[at], one = zeros == 1.0f && v == 0.0f ? og * pnz : 0.0f;
      kc_put(a.gx, at, zeros == 0.0f ? og * (y / v) : one, a.g.req);
    }
  }
}

/* logsumexp: og * exp(x - y); norm 1: og * sign(x); norm 2: x * (og / y), 0 where y is 0. */
extern "C" __global__ void kc_reduce_spread(kc_reduce_spread_args a) {
  KC_LOOP(i, a.n) {
    int64_t k = 0, q = i;
    for (int j = a.rank - 1; j >= 0; j--) {
      k += (q % a.d[j]) * a.ks[j];
      q /= a.d[j];
    }
    float x = a.x[i], og = a.og[k], y = a.yv[k], t;
    if (a.op == KC_RED_LSE) t = og * k_vm_exp(x - y);
    else if (a.op == KC_RED_L1) t = og * (float)((x > 0.0f) - (x < 0.0f));
    else t = y == 0.0f ? 0.0f : x * (og / y);
    kc_put(a.gx, i, t, a.req);
  }
}

/* ---- softmax, log_softmax ---- */

extern "C" __global__ void kc_softmax(kc_softmax_args a) {
  KC_LOOP(r, a.outer * a.inner) {
    int64_t st = a.inner, base = r / a.inner * a.n * a.inner + r % a.inner;
    const float *x = a.x + base;
    float m = -kc_inf(), s = 0.0f;
    for (int64_t j = 0; j < a.n; j++) m = x[j * st] > m ? x[j * st] : m;
    for (int64_t j = 0; j < a.n; j++) s += k_sf_exp(x[j * st] - m);
    float inv = 1.0f / s, ls = logf(s);
    for (int64_t j = 0; j < a.n; j++) {
      float v = a.is_log ? (x[j * st] - m) - ls : k_sf_exp(x[j * st] - m) * inv;
      kc_put(a.y, base + j * st, v, a.req);
    }
  }
}

/* softmax: gx = y * (og - <og, y>);  log_softmax: gx = og - exp(y) * sum(og). y in a.x. */
extern "C" __global__ void kc_softmax_grad(kc_softmax_grad_args a) {
  KC_LOOP(r, a.outer * a.inner) {
    int64_t st = a.inner, base = r / a.inner * a.n * a.inner + r % a.inner;
    const float *y = a.x + base, *og = a.og + base;
    float s = 0.0f;
    for (int64_t j = 0; j < a.n; j++) s += a.is_log ? og[j * st] : og[j * st] * y[j * st];
    for (int64_t j = 0; j < a.n; j++) {
      float g = og[j * st], v = y[j * st];
      kc_put(a.y, base + j * st, a.is_log ? g - k_sf_exp(v) * s : v * (g - s), a.req);
    }
  }
}

/* ---- softmax_cross_entropy ---- */

static inline float kc_row_max(const float *x, int64_t n) {
  float m = -kc_inf();
  for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
  return m;
}

static inline float kc_row_expsum(const float *x, int64_t n, float m) {
  float s = 0.0f;
  for (int64_t j = 0; j < n; j++) s += k_sf_exp(x[j] - m);
  return s;
}

/* The loss is one number summed over rows in double, as the CPU does: one thread. A label
 * outside [0, classes) (the CPU kernel's data error) makes the loss NaN. */
/* The mean loss over the rows: one block, each thread a strided part of the rows (a bad label
 * makes its row, so the mean, NaN). */
extern "C" __global__ void kc_sce_loss(kc_sce_loss_args a) {
  __shared__ double red[KC_BLOCK];
  KC_BLOCK_LOOP(t, 1) {
    double part = 0;
    KC_THREAD_LOOP(i, a.rows) {
      const float *row = a.x + i * a.classes;
      int32_t l = a.label[i];
      if (l < 0 || l >= a.classes) {
        part = (double)kc_nan();
        if (a.err) *a.err = KC_ERR_LABEL;
        continue;
      }
      float m = kc_row_max(row, a.classes), lsum = logf(kc_row_expsum(row, a.classes, m));
      part += (double)lsum - (double)(row[l] - m);
    }
    double total = kc_block_sum(part, red);
    if (threadIdx.x == 0) kc_put(a.y, 0, (float)(total / (double)a.rows), a.req);
  }
}

/* g = scale * (softmax(x) - onehot(label)), scale = og / rows; one thread per row. A bad
 * label's row is NaN and sets the step's data-error word. */
extern "C" __global__ void kc_sce_grad(kc_sce_grad_args a) {
  KC_LOOP(i, a.rows) {
    const float *row = a.x + i * a.classes;
    float scale = a.og[0] / (float)a.rows, m = kc_row_max(row, a.classes);
    float inv = scale / kc_row_expsum(row, a.classes, m);
    int32_t l = a.label[i];
    int bad = l < 0 || l >= a.classes;
    for (int64_t k = 0; k < a.classes; k++) {
      float t = k_sf_exp(row[k] - m) * inv;
      if (k == l) t -= scale;
      kc_put(a.y, i * a.classes + k, bad ? kc_nan() : t, a.req);
    }
    if (bad && a.err) *a.err = KC_ERR_LABEL;
  }
}

/* ---- pooling (k_pool.c) ---- */

static inline float kc_pool_div(const kc_pool_args *g, int64_t oh, int64_t ow) {
  return (float)(k_pool_span(oh, g->sh, g->ph, g->phe, g->kh, g->H, g->cip) *
                 k_pool_span(ow, g->sw, g->pw, g->pwe, g->kw, g->W, g->cip));
}

typedef struct { int64_t h0, h1, w0, w1; } kc_window;

static inline kc_window kc_pool_window(const kc_pool_args *g, int64_t oh, int64_t ow) {
  kc_window w;
  w.h0 = oh * g->sh - g->ph; w.h1 = w.h0 + g->kh;
  w.w0 = ow * g->sw - g->pw; w.w1 = w.w0 + g->kw;
  if (w.h0 < 0) w.h0 = 0;
  if (w.w0 < 0) w.w0 = 0;
  if (w.h1 > g->H) w.h1 = g->H;
  if (w.w1 > g->W) w.w1 = g->W;
  return w;
}

/* The plane index of the window's first maximum in scan order (NaN wins), -1 if empty. */
static inline int64_t kc_pool_argmax(const kc_pool_args *g, const float *x, kc_window w) {
  int64_t best = (w.h0 < w.h1 && w.w0 < w.w1) ? w.h0 * g->W + w.w0 : -1;
  float m = -kc_inf();
  for (int64_t h = w.h0; h < w.h1; h++)
    for (int64_t v = w.w0; v < w.w1; v++) {
      float val = x[h * g->W + v];
      if (val > m || val != val) {
        m = val;
        best = h * g->W + v;
      }
    }
  return best;
}

extern "C" __global__ void kc_pool(kc_pool_args a) {
  KC_LOOP(i, a.planes * a.OH * a.OW) {
    int64_t ow = i % a.OW, oh = i / a.OW % a.OH, pl = i / (a.OW * a.OH);
    const float *x = a.x + pl * a.H * a.W;
    kc_window w = kc_pool_window(&a, oh, ow);
    float v;
    if (a.is_max) {
      int64_t at = kc_pool_argmax(&a, x, w);
      v = at < 0 ? -kc_inf() : x[at];
    } else {
      float s = 0.0f;
      for (int64_t h = w.h0; h < w.h1; h++)
        for (int64_t c = w.w0; c < w.w1; c++) s += x[h * a.W + c];
      v = s / kc_pool_div(&a, oh, ow);
    }
    kc_put(a.y, i, v, a.req);
  }
}

/* Outputs along one axis whose windows [o*s - p, o*s - p + k) hold input position h. */
static inline void kc_pool_range(int64_t h, int64_t s, int64_t p, int64_t k, int64_t n_out, int64_t *lo,
                                 int64_t *hi) {
  int64_t a = h + p - k + 1;
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  *hi = (h + p) / s + 1;
  if (*hi > n_out) *hi = n_out;
}

/* One thread per input element: it gathers from every window holding it, windows in scan
 * order (max: where it is the window's first maximum, the forward's tie rule). */
extern "C" __global__ void kc_pool_grad(kc_pool_grad_args a) {
  KC_LOOP(i, a.planes * a.H * a.W) {
    int64_t pos = i % (a.H * a.W), h = pos / a.W, c = pos % a.W, pl = i / (a.H * a.W);
    const float *x = a.x + pl * a.H * a.W, *dy = a.dy + pl * a.OH * a.OW;
    int64_t oh0, oh1, ow0, ow1;
    kc_pool_range(h, a.sh, a.ph, a.kh, a.OH, &oh0, &oh1);
    kc_pool_range(c, a.sw, a.pw, a.kw, a.OW, &ow0, &ow1);
    float acc = a.req == kAddTo ? a.y[i] : 0.0f;
    for (int64_t oh = oh0; oh < oh1; oh++)
      for (int64_t ow = ow0; ow < ow1; ow++) {
        if (!a.is_max) acc += dy[oh * a.OW + ow] / kc_pool_div(&a, oh, ow);
        else if (kc_pool_argmax(&a, x, kc_pool_window(&a, oh, ow)) == pos) acc += dy[oh * a.OW + ow];
      }
    a.y[i] = acc;
  }
}

/* ---- pad (k_pad.c) ---- */


extern "C" __global__ void kc_pad(kc_pad_args a) {
  KC_LOOP(i, a.n) {
    int64_t q = i, off = 0, st = 1;
    for (int k = a.rank - 1; k >= 0 && off >= 0; k--) {
      int64_t s = k_pad_src(q % a.yd[k], a.before[k], a.xd[k], a.mode);
      q /= a.yd[k];
      off = s < 0 ? -1 : off + s * st;
      st *= a.xd[k];
    }
    if (off < 0) kc_put(a.y, i, a.value, a.req);
    else if (a.req == kAddTo) a.y[i] += a.x[off];
    else ((uint32_t *)a.y)[i] = ((const uint32_t *)a.x)[off];
  }
}

/* The output positions along one axis (size yd) that read input position c: three ascending
 * runs [lo, hi), before the input's span, on it, after it; returns how many in all. */
static inline int64_t kc_pad_runs(int64_t c, int64_t b, int64_t d, int64_t yd, int32_t mode, int64_t *lo,
                                  int64_t *hi) {
  for (int r = 0; r < 3; r++) lo[r] = hi[r] = 0;
  if (c + b >= 0 && c + b < yd) lo[1] = c + b, hi[1] = c + b + 1;
  if (mode == K_PAD_REPLICATE) {
    if (c == 0) lo[0] = 0, hi[0] = b < yd ? b : yd;
    if (c == d - 1 && b + d < yd) lo[2] = b + d, hi[2] = yd;
  } else if (mode == K_PAD_REFLECT) {
    if (c >= 1 && b - c >= 0) lo[0] = b - c, hi[0] = b - c + 1;
    if (c <= d - 2 && b + 2 * (d - 1) - c < yd) lo[2] = b + 2 * (d - 1) - c, hi[2] = lo[2] + 1;
  }
  return (hi[0] - lo[0]) + (hi[1] - lo[1]) + (hi[2] - lo[2]);
}

/* The t-th of those positions. */
static inline int64_t kc_pad_nth(const int64_t *lo, const int64_t *hi, int64_t t) {
  for (int r = 0; r < 2; r++) {
    if (t < hi[r] - lo[r]) return lo[r] + t;
    t -= hi[r] - lo[r];
  }
  return lo[2] + t;
}

/* One thread per input element: the og elements that read it (the product of each axis's
 * runs, row-major: ascending output order, the CPU's scatter order) added onto 0 (reflect,
 * replicate; kAddTo: onto gx). Constant mode has at most one, moved as it is. */
extern "C" __global__ void kc_pad_grad(kc_pad_grad_args a) {
  KC_LOOP(i, a.n) {
    int64_t lo[K_MAX_RANK][3], hi[K_MAX_RANK][3], cnt[K_MAX_RANK], total = 1, q = i;
    for (int k = a.rank - 1; k >= 0; k--) {
      cnt[k] = kc_pad_runs(q % a.xd[k], a.before[k], a.xd[k], a.yd[k], a.mode, lo[k], hi[k]);
      q /= a.xd[k];
      total *= cnt[k];
    }
    int first = a.req != kAddTo && a.mode == K_PAD_CONSTANT;
    float acc = a.req == kAddTo ? a.y[i] : 0.0f;
    for (int64_t j = 0; j < total; j++) {
      int64_t t = j, off = 0, st = 1;
      for (int k = a.rank - 1; k >= 0; k--) {
        off += kc_pad_nth(lo[k], hi[k], t % cnt[k]) * st;
        t /= cnt[k];
        st *= a.yd[k];
      }
      acc = first && j == 0 ? a.x[off] : acc + a.x[off];
    }
    a.y[i] = acc;
  }
}

/* ---- batch_norm (k_norm.c) over [outer, C, inner] ---- */

/* Train statistics of channel ch in double, as k_bn_train_stats, with the moving update. */
/* The batch statistics of channel ch, by the whole block (every thread gets them); thread 0
 * updates the moving statistics. */
/* Channel ch's two sums from bn_part's G parts, in order. */
static inline void kc_bn_parts_sum(const double *part, int32_t G, int64_t ch, double *s0, double *s1) {
  double a = 0, b = 0;
  for (int32_t g = 0; g < G; g++) a += part[2 * (ch * G + g)], b += part[2 * (ch * G + g) + 1];
  *s0 = a, *s1 = b;
}

/* One block per part of a channel (launched with C * G * KC_BLOCK threads). */
extern "C" __global__ void kc_bn_part(kc_bn_part_args a) {
  __shared__ double red[KC_BLOCK];
  int64_t M = a.outer * a.inner;
  KC_BLOCK_LOOP(b, a.C * a.G) {
    int64_t ch = b / a.G, lo = b % a.G * a.len, hi = lo + a.len < M ? lo + a.len : M;
    double m = a.grad ? (double)a.smean[ch] : 0, s0 = 0, s1 = 0;
    KC_THREAD_LOOP(e, hi - lo) {
      int64_t at = kc_chan_at(lo + e, ch, a.C, a.inner);
      double v = a.x[at];
      if (a.grad) {
        double g = a.dy[at];
        s0 += g, s1 += g * (v - m);
      } else {
        s0 += v, s1 += v * v;
      }
    }
    s0 = kc_block_sum(s0, red), s1 = kc_block_sum(s1, red);
    if (threadIdx.x == 0) a.part[2 * b] = s0, a.part[2 * b + 1] = s1;
  }
}

static inline void kc_bn_train(const kc_bn_stats_args *a, int64_t ch, float *mean, float *invstd, double *red) {
  double S = 0, Q = 0, M = (double)(a->outer * a->inner);
  if (a->part) {
    kc_bn_parts_sum(a->part, a->G, ch, &S, &Q);
  } else {
    KC_THREAD_LOOP(e, a->outer * a->inner) {
      double v = a->x[kc_chan_at(e, ch, a->C, a->inner)];
      S += v;
      Q += v * v;
    }
    S = kc_block_sum(S, red), Q = kc_block_sum(Q, red);
  }
  double m = S / M, v = Q / M - m * m;
  if (v < 0) v = 0;
  *mean = (float)m;
  *invstd = (float)(1.0 / sqrt(v + a->eps));
  double unbiased = M > 1 ? v * M / (M - 1) : v;
  if (threadIdx.x != 0) return;
  if (a->mm) a->mm[ch] = (float)(a->momentum * a->mm[ch] + (1.0 - a->momentum) * m);
  if (a->mv) a->mv[ch] = (float)(a->momentum * a->mv[ch] + (1.0 - a->momentum) * unbiased);
}

/* Predict: the moving statistics, as k_batch_norm_predict_coeffs. */
static inline void kc_bn_coeffs(const kc_bn_stats_args *a, int64_t ch, float mean, float invstd, float *ca,
                                float *cb) {
  *ca = a->gamma[ch] * invstd;
  *cb = a->beta[ch] - mean * *ca;
}

static inline float kc_bn_predict_invstd(const kc_bn_stats_args *a, int64_t ch) {
  return (float)(1.0 / sqrt((double)a->mv[ch] + a->eps));
}

/* One block per channel (launched with C * KC_BLOCK threads). */
extern "C" __global__ void kc_bn_stats(kc_bn_stats_args a) {
  __shared__ double red[KC_BLOCK];
  KC_BLOCK_LOOP(ch, a.C) {
    float mean, invstd, ca, cb;
    if (a.is_train) {
      kc_bn_train(&a, ch, &mean, &invstd, red);
    } else {
      mean = a.mm[ch];
      invstd = kc_bn_predict_invstd(&a, ch);
    }
    if (threadIdx.x == 0 && a.smean) a.smean[ch] = mean;
    if (threadIdx.x == 0 && a.sinv) a.sinv[ch] = invstd;
    if (!a.apply) continue;
    kc_bn_coeffs(&a, ch, mean, invstd, &ca, &cb);
    KC_THREAD_LOOP(e, a.outer * a.inner) {
      int64_t at = kc_chan_at(e, ch, a.C, a.inner);
      kc_put(a.y, at, a.x[at] * ca + cb, a.req);
    }
  }
}

/* y per element; train reads the saved statistics bn_stats just wrote. */
extern "C" __global__ void kc_bn_apply(kc_bn_apply_args a) {
  KC_LOOP(i, a.outer * a.C * a.inner) {
    int64_t ch = i / a.inner % a.C;
    float mean = a.is_train ? a.smean[ch] : a.mm[ch];
    float invstd = a.is_train ? a.sinv[ch] : kc_bn_predict_invstd(&a, ch), ca, cb;
    kc_bn_coeffs(&a, ch, mean, invstd, &ca, &cb);
    kc_put(a.y, i, a.x[i] * ca + cb, a.req);
  }
}

/* dX = gamma*invstd * (dY - mean(dY) - xhat * mean(dY*xhat)) per channel; the sums first, so
 * dX may be dY. */
/* One block per channel (launched with C * KC_BLOCK threads): the channel's sums by the block,
 * then dX by its threads (the sums are complete before any dX is written, so dX may be dY). */
extern "C" __global__ void kc_bn_grad(kc_bn_grad_args a) {
  __shared__ double red[KC_BLOCK];
  KC_BLOCK_LOOP(ch, a.C) {
    double sdy = 0, sdyd = 0, m = a.smean[ch], M = (double)(a.outer * a.inner);
    if (a.part) {
      kc_bn_parts_sum(a.part, a.G, ch, &sdy, &sdyd);
    } else {
      KC_THREAD_LOOP(e, a.outer * a.inner) {
        int64_t at = kc_chan_at(e, ch, a.C, a.inner);
        double g = a.dy[at];
        sdy += g;
        sdyd += g * ((double)a.x[at] - m);
      }
      sdy = kc_block_sum(sdy, red), sdyd = kc_block_sum(sdyd, red);
    }
    double sdyx = sdyd * a.sinv[ch];
    if (threadIdx.x == 0 && a.req_dg != kNullOp) kc_put(a.dg, ch, (float)sdyx, a.req_dg);
    if (threadIdx.x == 0 && a.req_db != kNullOp) kc_put(a.db, ch, (float)sdy, a.req_db);
    if (a.req_dx == kNullOp) continue;
    float ca = a.gamma[ch] * a.sinv[ch], mdy = (float)(sdy / M), mdyx = (float)(sdyx / M);
    if (a.coef) {   /* bn_dx writes dX */
      if (threadIdx.x == 0) a.coef[3 * ch] = ca, a.coef[3 * ch + 1] = mdy, a.coef[3 * ch + 2] = mdyx;
      continue;
    }
    float mean = a.smean[ch], inv = a.sinv[ch];
    KC_THREAD_LOOP(e, a.outer * a.inner) {
      int64_t at = kc_chan_at(e, ch, a.C, a.inner);
      kc_put(a.dx, at, ca * (a.dy[at] - mdy - (a.x[at] - mean) * inv * mdyx), a.req_dx);
    }
  }
}

/* dX one thread per element from bn_grad's coefficients (the same arithmetic as its block's). */
extern "C" __global__ void kc_bn_dx(kc_bn_dx_args a) {
  KC_LOOP(i, a.outer * a.C * a.inner) {
    int64_t ch = i / a.inner % a.C;
    float ca = a.coef[3 * ch], mdy = a.coef[3 * ch + 1], mdyx = a.coef[3 * ch + 2];
    kc_put(a.dx, i, ca * (a.dy[i] - mdy - (a.x[i] - a.smean[ch]) * a.sinv[ch] * mdyx), a.req_dx);
  }
}

/* ---- layer_norm over the last axis (k_norm.c) ---- */

/* One block per row (launched with rows * KC_BLOCK threads): the row's mean and variance by the
 * block (both sums complete before y is written, so y may be x), then y by its threads. */
extern "C" __global__ void kc_ln_forward(kc_ln_forward_args a) {
  __shared__ double red[KC_BLOCK];
  KC_BLOCK_LOOP(r, a.rows) {
    const float *x = a.x + r * a.d;
    double s = 0, q = 0;
    KC_THREAD_LOOP(k, a.d) s += x[k];
    float m = a.d ? (float)(kc_block_sum(s, red) / (double)a.d) : 0.0f;
    KC_THREAD_LOOP(k, a.d) q += (double)((x[k] - m) * (x[k] - m));
    float invstd = 1.0f / sqrtf((float)(kc_block_sum(q, red) / (double)a.d) + a.eps);
    if (threadIdx.x == 0 && a.smean) a.smean[r] = m;
    if (threadIdx.x == 0 && a.sinv) a.sinv[r] = invstd;
    if (a.req == kNullOp) continue;
    KC_THREAD_LOOP(k, a.d) kc_put(a.y, r * a.d + k, (x[k] - m) * invstd * a.gamma[k] + a.beta[k], a.req);
  }
}

/* dgamma += sum_r dY * xhat, dbeta += sum_r dY, one thread per column, rows in order. */
/* One block per column (launched with d * KC_BLOCK threads), its threads over the rows. */
extern "C" __global__ void kc_ln_dparams(kc_ln_dparams_args a) {
  __shared__ double red[KC_BLOCK];
  KC_BLOCK_LOOP(k, a.d) {
    double ag = 0, ab = 0;
    KC_THREAD_LOOP(r, a.rows) {
      float dy = a.dy[r * a.d + k];
      ag += dy * ((a.x[r * a.d + k] - a.mean_in[r]) * a.inv_in[r]);
      ab += dy;
    }
    ag = kc_block_sum(ag, red), ab = kc_block_sum(ab, red);
    if (threadIdx.x == 0 && a.req_dg != kNullOp) kc_put(a.dg, k, (float)ag, a.req_dg);
    if (threadIdx.x == 0 && a.req_db != kNullOp) kc_put(a.db, k, (float)ab, a.req_db);
  }
}

/* dX = invstd * (g - mean(g) - xhat * mean(g*xhat)), g = dY*gamma; sums first (dX may be dY). */
/* One block per row (launched with rows * KC_BLOCK threads). */
extern "C" __global__ void kc_ln_dx(kc_ln_dx_args a) {
  __shared__ double red[KC_BLOCK];
  KC_BLOCK_LOOP(r, a.rows) {
    const float *x = a.x + r * a.d, *dy = a.dy + r * a.d;
    float mean = a.mean_in[r], invstd = a.inv_in[r];
    double sg = 0, sgx = 0;
    KC_THREAD_LOOP(k, a.d) {
      float g = dy[k] * a.gamma[k];
      sg += g;
      sgx += g * ((x[k] - mean) * invstd);
    }
    float mg = (float)(kc_block_sum(sg, red) / (double)a.d), mgx = (float)(kc_block_sum(sgx, red) / (double)a.d);
    KC_THREAD_LOOP(k, a.d) {
      float t = invstd * (dy[k] * a.gamma[k] - mg - (x[k] - mean) * invstd * mgx);
      kc_put(a.y, r * a.d + k, t, a.req);
    }
  }
}

/* ---- embedding: an index outside [0, rows) (the CPU's data error) gives NaN and sets the
 * step's data-error word ---- */

extern "C" __global__ void kc_embedding(kc_embedding_args a) {
  KC_LOOP(i, a.n * a.d) {
    int64_t row = a.idx[i / a.d];
    if (row < 0 || row >= a.rows) {
      kc_put(a.y, i, kc_nan(), a.req);
      if (a.err) *a.err = KC_ERR_INDEX;
      continue;
    }
    float v = a.w[row * a.d + i % a.d];
    if (a.req == kAddTo) a.y[i] += v;
    else ((uint32_t *)a.y)[i] = ((const uint32_t *)a.w)[row * a.d + i % a.d];
  }
}

/* dW column j: zeroed (write) then dY's rows added in index order, as the CPU's scatter. */
extern "C" __global__ void kc_embedding_grad(kc_embedding_grad_args a) {
  KC_LOOP(j, a.d) {
    if (a.req != kAddTo)
      for (int64_t r = 0; r < a.rows; r++) a.y[r * a.d + j] = 0.0f;
    for (int64_t i = 0; i < a.n; i++) {
      int64_t row = a.idx[i];
      if (row < 0 || row >= a.rows) {
        a.y[j] = kc_nan();
        if (a.err) *a.err = KC_ERR_INDEX;
        continue;
      }
      a.y[row * a.d + j] += a.w[i * a.d + j];
    }
  }
}

/* ---- dropout: element i kept iff Philox(seed, ctr, i) >= p, as k_dropout.c ---- */

extern "C" __global__ void kc_dropout(kc_dropout_args a) {
  uint64_t seed = a.live->seed, ctr = a.live->ctr;
  KC_LOOP(i, a.n) {
    float m = 1.0f;
    if (a.is_train) m = k_philox_uniform(seed, ctr, (uint64_t)i) >= a.p ? a.scale : 0.0f;
    float x = a.x[i];
    if (a.req_y != kNullOp) {
      if (a.is_train || a.req_y == kAddTo) kc_put(a.y, i, a.is_train ? x * m : x, a.req_y);
      else ((uint32_t *)a.y)[i] = ((const uint32_t *)a.x)[i];
    }
    if (a.req_m != kNullOp) kc_put(a.mask, i, m, a.req_m);
  }
}

extern "C" __global__ void kc_mul(kc_mul_args a) {
  KC_LOOP(i, a.n) kc_put(a.y, i, a.a[i] * a.b[i], a.req);
}

/* ---- optimizer updates (k_optim.c), in place ---- */

extern "C" __global__ void kc_sgd(kc_sgd_args a) {
  if (*a.skip) return;
  float lr = a.live->f[0];
  KC_LOOP(i, a.n) {
    float d = a.wd != 0.0f ? a.g[i] + a.wd * a.w[i] : a.g[i];
    if (a.momentum != 0.0f) {
      a.mom[i] = a.momentum * a.mom[i] + d;
      d = a.nesterov ? d + a.momentum * a.mom[i] : a.mom[i];
    }
    a.w[i] -= lr * d;
  }
}

/* ---- clip_norm (k_clip_grad_norm): three launches, nothing read back to the host ---- */

/* One gradient's sum of squares in double: one block, its threads' strided parts summed in
 * kc_block_sum's fixed order. */
extern "C" __global__ void kc_sumsq(kc_sumsq_args a) {
  __shared__ double red[KC_BLOCK];
  KC_BLOCK_LOOP(t, 1) {
    double part = 0;
    KC_THREAD_LOOP(i, a.n) part += (double)a.x[i] * a.x[i];
    double total = kc_block_sum(part, red);
    if (threadIdx.x == 0) *a.out = total;
  }
}

/* The global norm from every gradient's float norm (torch's per-tensor norms are float32), and
 * max_norm / (norm + 1e-6): one thread. */
extern "C" __global__ void kc_clip_coef(kc_clip_coef_args a) {
  KC_LOOP(t, 1) {
    double total = 0;
    for (int32_t k = 0; k < a.n; k++) {
      float norm = (float)sqrt(a.sq[k]);
      total += (double)norm * norm;
    }
    *a.coef = a.max_norm / ((float)sqrt(total) + 1e-6f);
  }
}

extern "C" __global__ void kc_clip_scale(kc_clip_scale_args a) {
  float coef = *a.coef;
  if (coef < 1.0f) KC_LOOP(i, a.n) a.g[i] *= coef;
}

extern "C" __global__ void kc_adam(kc_adam_args a) {
  if (*a.skip) return;
  float step_size = a.live->f[0], bc2_sqrt = a.live->f[1], decay = a.live->f[2];
  KC_LOOP(i, a.n) {
    if (decay != 1.0f) a.w[i] *= decay;
    float d = a.wd != 0.0f ? a.g[i] + a.wd * a.w[i] : a.g[i];
    a.m[i] = a.m[i] * a.beta1 + a.a1 * d;
    a.v[i] = a.v[i] * a.beta2 + a.a2 * d * d;
    float denom = sqrtf(a.v[i]) / bc2_sqrt + a.eps;
    a.w[i] -= step_size * (a.m[i] / denom);
  }
}

extern "C" __global__ void kc_err_any(kc_err_any_args a) {
  KC_LOOP(t, 1) {
    int32_t any = 0;
    for (int32_t i = 0; i < a.n; i++) any |= a.err[i] != 0;
    *a.out = any;
  }
}
