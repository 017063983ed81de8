/* rtc_blas.c — fully_connected and matmul on the GPU through cuBLAS, following kernels/k_gemm.c
 * product by product (the same operands, transposes and accumulation order), plus the loading
 * of cuBLAS. cuBLAS is column-major and Kiln row-major: a row-major product C = op(A) op(B) is
 * the column-major C^T = op(B)^T op(A)^T, so rtc_gemm takes k_sgemm's row-major arguments and
 * swaps the operands (and m, n) on the way in; leading dimensions stay as they are.
 * OpReqType maps onto beta as on the CPU: kWriteTo/kWriteInplace 0, kAddTo 1, kNullOp skips. */
#include "rtc_blas.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>

#include "k_params.h"
#include "kc_args.h"   /* KC_BLOCK */
#include "kc_blas.h"
#include "k_mm_geom.h"

/* ---- loading ---------------------------------------------------------------------------- */

int rtc_dl_load(const char *what, const char *const *names, const rtc_dl_sym *syms, char *err, size_t n) {
  void *lib = NULL;
  char first[512] = "";
  for (int i = 0; names[i] && !lib; i++) {
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    const char *e = lib ? NULL : dlerror();
    if (i == 0 && e) snprintf(first, sizeof first, "%s", e);
  }
  if (!lib) {
    snprintf(err, n, "cannot load %s (%s): %s", what, names[0], first[0] ? first : "not found");
    return 1;
  }
  for (int i = 0; syms[i].name; i++) {   /* the library stays open for the process's life */
    dlerror();
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      const char *e = dlerror();
      snprintf(err, n, "%s (%s) has no %s: %s", what, names[0], syms[i].name, e ? e : "NULL symbol");
      return 1;
    }
  }
  return 0;
}

/* Every cuBLAS function used, with the real header's type. */
#define RTC_CUBLAS_FNS(X)                                                                      \
  X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasSetMathMode)          \
  X(cublasGetStatusString) X(cublasSgemm_v2) X(cublasSgemmStridedBatched) X(cublasSetWorkspace_v2)

static struct {
#define RTC_FIELD(f) __typeof__(f) *f;
  RTC_CUBLAS_FNS(RTC_FIELD)
#undef RTC_FIELD
} rtc_cb;

static pthread_once_t rtc_cb_once = PTHREAD_ONCE_INIT;
static int rtc_cb_bad;
static char rtc_cb_err[768];

static void rtc_cb_load(void) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13", NULL};
  const rtc_dl_sym syms[] = {
#define RTC_SYM(f) {#f, (void **)&rtc_cb.f},
      RTC_CUBLAS_FNS(RTC_SYM)
#undef RTC_SYM
      {NULL, NULL}};
  rtc_cb_bad = rtc_dl_load("cuBLAS", names, syms, rtc_cb_err, sizeof rtc_cb_err);
}

static const char *rtc_cb_str(cublasStatus_t s) {
  const char *m = rtc_cb.cublasGetStatusString ? rtc_cb.cublasGetStatusString(s) : NULL;
  return m ? m : "unknown cuBLAS status";
}

/* 0 for success, else 1 with "<fn>: <status string> (<code>)". */
static int rtc_cb_check(rtc_ctx *c, cublasStatus_t s, const char *fn) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  return rtc_fail(c, "%s: %s (%d)", fn, rtc_cb_str(s), (int)s);
}

/* cuBLAS's workspace: the runtime's scratch (one step runs at a time on the stream, so the
 * GEMMs share it with cuDNN's workspace), handed over before each product, so cuBLAS never
 * allocates its own during a run; 32 MiB is what NVIDIA's documentation asks for on Hopper. */
#define RTC_CUBLAS_WORKSPACE ((size_t)32 << 20)

/* CUBLAS_DEFAULT_MATH keeps FP32 arithmetic (cublas_api.h: TF32 needs
 * CUBLAS_TF32_TENSOR_OP_MATH, the BF16x9 emulation CUBLAS_FP32_EMULATED_BF16X9_MATH), and
 * unlike CUBLAS_PEDANTIC_MATH it leaves cuBLAS its fastest FP32 kernels. */
int rtc_blas_open(rtc_ctx *c, void **h) {
  *h = NULL;
  pthread_once(&rtc_cb_once, rtc_cb_load);
  if (rtc_cb_bad) return rtc_fail(c, "%s", rtc_cb_err);
  cublasHandle_t b = NULL;
  if (rtc_cb_check(c, rtc_cb.cublasCreate_v2(&b), "cublasCreate")) return 1;
  if (rtc_cb_check(c, rtc_cb.cublasSetMathMode(b, CUBLAS_DEFAULT_MATH), "cublasSetMathMode") ||
      rtc_cb_check(c, rtc_cb.cublasSetStream_v2(b, (cudaStream_t)rtc_stream(c)), "cublasSetStream")) {
    rtc_cb.cublasDestroy_v2(b);
    return 1;
  }
  *h = b;
  return rtc_reserve_scratch(c, RTC_CUBLAS_WORKSPACE);
}

void rtc_blas_close(void *h) {
  if (h && !rtc_cb_bad && rtc_cb.cublasDestroy_v2) rtc_cb.cublasDestroy_v2((cublasHandle_t)h);
}

/* ---- the small kernels (kc_blas.cu) ------------------------------------------------------ */

int rtc_blas_bias_add(rtc_ctx *c, float *y, const float *bias, int64_t outer, int64_t features, int64_t inner) {
  kc_blas_bias_add_args a = {y, bias, outer * features * inner, inner, features};
  if (a.n == 0) return 0;
  return rtc_launch(c, "kc_blas_bias_add", a.n, &a, sizeof a);
}

int rtc_blas_bias_grad(rtc_ctx *c, float *db, const float *dy, int64_t outer, int64_t features, int64_t inner,
                       int add) {
  kc_blas_bias_grad_args a = {db, dy, outer, features, inner, add};
  if (features == 0) return 0;
  return rtc_launch(c, "kc_blas_bias_grad", features * KC_BLOCK, &a, sizeof a);
}

static int rtc_blas_zero(rtc_ctx *c, float *y, int64_t n) {
  kc_blas_zero_args a = {y, n};
  return n == 0 ? 0 : rtc_launch(c, "kc_blas_zero", n, &a, sizeof a);
}

/* ---- one (strided-batched) product, in k_sgemm's row-major terms --------------------------- */

/* count products C_i (beta) = op(A_i) op(B_i), A_i = a + i*sa etc.; C is m x n, op(A) m x k,
 * op(B) k x n, all row-major with leading dimensions lda, ldb, ldc as k_sgemm takes them. */
typedef struct {
  int ta, tb;
  int64_t m, n, k;
  const float *a;
  int64_t lda, sa;
  const float *b;
  int64_t ldb, sb;
  float beta;
  float *c;
  int64_t ldc, sc;
  int64_t count;
} rtc_gemm;

static cublasHandle_t rtc_cb_handle(rtc_ctx *c) { return (cublasHandle_t)rtc_cublas(c); }

/* A product over an empty inner dimension is beta * C: zeros for kWriteTo (every C here is
 * dense, ldc == n), nothing for kAddTo. */
static int rtc_gemm_empty(rtc_ctx *c, const rtc_gemm *g) {
  if (g->beta != 0.0f) return 0;
  if (g->ldc != g->n) return rtc_fail(c, "internal: an empty product into a strided matrix");
  if (g->count == 1 || g->sc == g->m * g->n) return rtc_blas_zero(c, g->c, g->count * g->m * g->n);
  for (int64_t i = 0; i < g->count; i++)
    if (rtc_blas_zero(c, g->c + i * g->sc, g->m * g->n)) return 1;
  return 0;
}

static int rtc_gemm_run(rtc_ctx *c, const rtc_gemm *g) {
  if (g->m == 0 || g->n == 0 || g->count == 0) return 0;
  if (g->k == 0) return rtc_gemm_empty(c, g);
  cublasHandle_t h = rtc_cb_handle(c);
  if (!h) return rtc_fail(c, "internal: no cuBLAS handle (rtc_blas_open was not called)");
  int64_t lda = g->lda > 0 ? g->lda : 1, ldb = g->ldb > 0 ? g->ldb : 1, ldc = g->ldc > 0 ? g->ldc : 1;
  if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX ||
      g->count > INT_MAX)
    return rtc_fail(c, "a product of %lld x %lld x %lld (x %lld) is too large for cuBLAS's int sizes",
                    (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->count);
  if (rtc_cb_check(c, rtc_cb.cublasSetWorkspace_v2(h, rtc_scratch(c), RTC_CUBLAS_WORKSPACE), "cublasSetWorkspace")) return 1;
  const float one = 1.0f;
  cublasOperation_t oa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T: B first, n before m */
  if (g->count == 1)
    return rtc_cb_check(c, rtc_cb.cublasSgemm_v2(h, ob, oa, (int)g->n, (int)g->m, (int)g->k, &one, g->b, (int)ldb,
                                                 g->a, (int)lda, &g->beta, g->c, (int)ldc),
                        "cublasSgemm");
  return rtc_cb_check(c, rtc_cb.cublasSgemmStridedBatched(h, ob, oa, (int)g->n, (int)g->m, (int)g->k, &one, g->b,
                                                          (int)ldb, g->sb, g->a, (int)lda, g->sa, &g->beta, g->c,
                                                          (int)ldc, g->sc, (int)g->count),
                      "cublasSgemmStridedBatched");
}

/* One plain product, k_sgemm's argument order. */
static int rtc_sgemm(rtc_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *out, int64_t ldc) {
  rtc_gemm g = {ta, tb, m, n, k, a, lda, 0, b, ldb, 0, beta, out, ldc, 0, 1};
  return rtc_gemm_run(c, &g);
}

static float rtc_beta(k_req r) { return r == kAddTo ? 1.0f : 0.0f; }

/* out[j] is wanted: its req is not kNullOp (then the pointer must be there). */
static int rtc_wants(const rtc_call *k, int j) { return j < k->nout && k->req[j] != kNullOp; }

static int rtc_need(rtc_ctx *c, const rtc_call *k, int nin, const int *ins, int nout, const int *outs) {
  for (int i = 0; i < nin; i++)
    if (ins[i] >= k->nin || !k->in[ins[i]]) return rtc_fail(c, "internal: input slot %d is not bound", ins[i]);
  for (int i = 0; i < nout; i++)
    if (!k->out[outs[i]]) return rtc_fail(c, "internal: output slot %d is not bound", outs[i]);
  return 0;
}

static int rtc_no_epilogue(rtc_ctx *c, const rtc_call *k) {
  if (k->s->epi) return rtc_fail(c, "a fused epilogue is not supported on the GPU (the code generator must not fuse one)");
  return 0;
}

/* ---- fully_connected ------------------------------------------------------------------- */

/* As k_fc_dims: data viewed as [rows, in]. */
static void rtc_fc_dims(const k_shape *data, const k_fc_param *p, int64_t *rows, int64_t *in) {
  int64_t n = k_shape_numel(data);
  *in = p->flatten ? (data->d[0] ? n / data->d[0] : 0) : data->d[data->rank - 1];
  *rows = *in ? n / *in : 0;
}

/* Y (beta) = X W^T, then Y += b: in = [X, W, (b)]. */
int rtc_fully_connected_forward(rtc_ctx *c, const rtc_call *k) {
  const k_fc_param *p = k->param;
  if (k->req[0] == kNullOp) return 0;
  if (rtc_no_epilogue(c, k) || rtc_need(c, k, p->no_bias ? 2 : 3, (const int[]){0, 1, 2}, 1, (const int[]){0})) return 1;
  int64_t rows, in, H = p->num_hidden;
  rtc_fc_dims(&k->in_shape[0], p, &rows, &in);
  float *Y = k->out[0];
  if (rtc_sgemm(c, 0, 1, rows, H, in, k->in[0], in, k->in[1], in, rtc_beta(k->req[0]), Y, H)) return 1;
  return p->no_bias ? 0 : rtc_blas_bias_add(c, Y, k->in[2], rows, H, 1);
}

/* Backward in = [dY, X, W, (b), Y]; out = [dX, dW, (db)]: dX = dY W, dW = dY^T X, db = column
 * sums of dY. */
int rtc_fully_connected_backward(rtc_ctx *c, const rtc_call *k) {
  const k_fc_param *p = k->param;
  int64_t rows, in, H = p->num_hidden;
  rtc_fc_dims(&k->in_shape[1], p, &rows, &in);
  const float *dY = k->in[0], *X = k->in[1], *W = k->in[2];
  if (rtc_wants(k, 0)) {
    if (rtc_need(c, k, 2, (const int[]){0, 2}, 1, (const int[]){0}) ||
        rtc_sgemm(c, 0, 0, rows, in, H, dY, H, W, in, rtc_beta(k->req[0]), k->out[0], in))
      return 1;
  }
  if (rtc_wants(k, 1)) {
    if (rtc_need(c, k, 2, (const int[]){0, 1}, 1, (const int[]){1}) ||
        rtc_sgemm(c, 1, 0, H, in, rows, dY, H, X, in, rtc_beta(k->req[1]), k->out[1], in))
      return 1;
  }
  if (!p->no_bias && rtc_wants(k, 2)) {
    if (rtc_need(c, k, 1, (const int[]){0}, 1, (const int[]){2}) ||
        rtc_blas_bias_grad(c, k->out[2], dY, rows, H, 1, k->req[2] == kAddTo))
      return 1;
  }
  return 0;
}

/* ---- matmul ---------------------------------------------------------------------------- */

/* The geometry is the CPU kernel's (kernels/k_mm_geom.h): the same batches, the same fold. */
typedef k_mm_geom rtc_mm_geom;

static int rtc_mm_geometry(rtc_ctx *c, const k_shape *a, const k_shape *b, const k_shape *o, const k_matmul_param *p,
                           rtc_mm_geom *g) {
  if (a->rank < 2 || b->rank < 2 || o->rank < 2 || o->rank - 2 > K_MAX_RANK)
    return rtc_fail(c, "matmul needs operands of rank >= 2 (ranks %d, %d)", a->rank, b->rank);
  *g = k_mm_geometry(a, b, o, p);
  return 0;
}

/* Which matrix of a batch an operand of a product is: A, B, or the output's shape (C, dC). */
enum { RTC_MM_A, RTC_MM_B, RTC_MM_C };

/* Element offset of batch i's matrix of kind `which`. */
static int64_t rtc_mm_offset(const rtc_mm_geom *g, int which, int64_t i) {
  return k_mm_offset(g, which == RTC_MM_A ? g->sa : which == RTC_MM_B ? g->sb : g->sc, i);
}

/* True when batch i is the first (in batch order) to reach its matrix of kind `which`: every
 * batch coordinate along which that operand broadcasts is 0. */
static int rtc_mm_first(const rtc_mm_geom *g, int which, int64_t i) {
  if (which == RTC_MM_C) return 1;
  const int64_t *s = which == RTC_MM_A ? g->sa : g->sb;
  for (int d = g->nb - 1; d >= 0; d--) {
    if (s[d] == 0 && g->bd[d] != 1 && i % g->bd[d] != 0) return 0;
    i /= g->bd[d];
  }
  return 1;
}

/* The per-batch product of one job (forward, dA or dB): k_sgemm's arguments with the two
 * operands and the output given as base pointer + kind, offset per batch by rtc_mm_offset. */
typedef struct {
  int ta, tb;
  int64_t m, n, k;
  const float *x;
  int xk;
  int64_t ldx;
  const float *y;
  int yk;
  int64_t ldy;
  float *o;
  int ok;
  int64_t ldo;
} rtc_mm_job;

/* Runs the job over every batch in order. Batches go to cuBLAS in runs of one strided-batched
 * call: consecutive batches whose three matrices step by fixed non-negative strides (the
 * output's non-zero, so a run writes distinct matrices) and that share beta. beta is the req's
 * for the first batch that reaches an output matrix and 1 for the later ones, so an operand
 * broadcast over batches receives the sum of their gradients in batch order, as on the CPU
 * (which clears it, then accumulates every batch). */
static int rtc_mm_run(rtc_ctx *c, const rtc_mm_geom *g, const rtc_mm_job *j, k_req req) {
  float b0 = rtc_beta(req);
  for (int64_t i = 0; i < g->batch;) {
    int64_t ox = rtc_mm_offset(g, j->xk, i), oy = rtc_mm_offset(g, j->yk, i), oo = rtc_mm_offset(g, j->ok, i);
    float beta = rtc_mm_first(g, j->ok, i) ? b0 : 1.0f;
    int64_t len = 1, dx = 0, dy = 0, dout = 0;
    if (i + 1 < g->batch && (rtc_mm_first(g, j->ok, i + 1) ? b0 : 1.0f) == beta) {
      dx = rtc_mm_offset(g, j->xk, i + 1) - ox;
      dy = rtc_mm_offset(g, j->yk, i + 1) - oy;
      dout = rtc_mm_offset(g, j->ok, i + 1) - oo;
      if (dx >= 0 && dy >= 0 && dout > 0)
        for (len = 2; i + len < g->batch; len++) {
          int64_t t = i + len;
          if (rtc_mm_offset(g, j->xk, t) != ox + len * dx || rtc_mm_offset(g, j->yk, t) != oy + len * dy ||
              rtc_mm_offset(g, j->ok, t) != oo + len * dout || (rtc_mm_first(g, j->ok, t) ? b0 : 1.0f) != beta)
            break;
        }
    }
    rtc_gemm p = {j->ta, j->tb, j->m, j->n, j->k, j->x + ox, j->ldx, dx, j->y + oy, j->ldy, dy,
                  beta, j->o + oo, j->ldo, dout, len};
    if (rtc_gemm_run(c, &p)) return 1;
    i += len;
  }
  return 0;
}

/* in = [A, B]: C (beta) = op(A) op(B) per batch, as k_matmul_forward. */
int rtc_matmul_forward(rtc_ctx *c, const rtc_call *k) {
  if (k->req[0] == kNullOp) return 0;
  rtc_mm_geom g;
  if (rtc_no_epilogue(c, k) || rtc_need(c, k, 2, (const int[]){0, 1}, 1, (const int[]){0}) ||
      rtc_mm_geometry(c, &k->in_shape[0], &k->in_shape[1], &k->out_shape[0], k->param, &g))
    return 1;
  const float *A = k->in[0], *B = k->in[1];
  float *C = k->out[0];
  if (k_mm_foldable(&g))
    return rtc_sgemm(c, g.ta, g.tb, g.batch * g.M, g.N, g.K, A, g.lda, B, g.ldb, rtc_beta(k->req[0]), C, g.N);
  rtc_mm_job j = {g.ta, g.tb, g.M, g.N, g.K, A, RTC_MM_A, g.lda, B, RTC_MM_B, g.ldb, C, RTC_MM_C, g.ldc};
  return rtc_mm_run(c, &g, &j, k->req[0]);
}

/* dA for `rows` rows, as k_mm_grad_a: op(A) = A -> dA = dC op(B)^T;  op(A) = A^T -> dA = op(B) dC^T.
 * Each gradient is stored as its operand is, at the geometry's leading dimensions. */
static rtc_mm_job rtc_mm_job_a(const rtc_mm_geom *g, int64_t rows, const float *dC, const float *B, float *dA) {
  if (!g->ta)
    return (rtc_mm_job){0, !g->tb, rows, g->K, g->N, dC, RTC_MM_C, g->ldc, B, RTC_MM_B, g->ldb, dA, RTC_MM_A, g->lda};
  return (rtc_mm_job){g->tb, 1, g->K, g->M, g->N, B, RTC_MM_B, g->ldb, dC, RTC_MM_C, g->ldc, dA, RTC_MM_A, g->lda};
}

/* dB for `rows` rows, as k_mm_grad_b: op(B) = B -> dB = op(A)^T dC;  op(B) = B^T -> dB = dC^T op(A). */
static rtc_mm_job rtc_mm_job_b(const rtc_mm_geom *g, int64_t rows, const float *dC, const float *A, float *dB) {
  if (!g->tb)
    return (rtc_mm_job){!g->ta, 0, g->K, g->N, rows, A, RTC_MM_A, g->lda, dC, RTC_MM_C, g->ldc, dB, RTC_MM_B, g->ldb};
  return (rtc_mm_job){1, g->ta, g->N, g->K, rows, dC, RTC_MM_C, g->ldc, A, RTC_MM_A, g->lda, dB, RTC_MM_B, g->ldb};
}

/* A job run once over the stacked batches (a foldable matmul): rows = batch * M, offsets 0. */
static int rtc_mm_once(rtc_ctx *c, const rtc_mm_job *j, k_req req) {
  return rtc_sgemm(c, j->ta, j->tb, j->m, j->n, j->k, j->x, j->ldx, j->y, j->ldy, rtc_beta(req), j->o, j->ldo);
}

/* Backward in = [dC, A, B, (C)]; out = [dA, dB]. */
int rtc_matmul_backward(rtc_ctx *c, const rtc_call *k) {
  rtc_mm_geom g;
  if (rtc_mm_geometry(c, &k->in_shape[1], &k->in_shape[2], &k->in_shape[0], k->param, &g)) return 1;
  const float *dC = k->in[0], *A = k->in[1], *B = k->in[2];
  int fold = k_mm_foldable(&g);
  int64_t rows = fold ? g.batch * g.M : g.M;
  if (rtc_wants(k, 0)) {
    rtc_mm_job j = rtc_mm_job_a(&g, rows, dC, B, k->out[0]);
    if (rtc_need(c, k, 2, (const int[]){0, 2}, 1, (const int[]){0}) ||
        (fold ? rtc_mm_once(c, &j, k->req[0]) : rtc_mm_run(c, &g, &j, k->req[0])))
      return 1;
  }
  if (rtc_wants(k, 1)) {
    rtc_mm_job j = rtc_mm_job_b(&g, rows, dC, A, k->out[1]);
    if (rtc_need(c, k, 2, (const int[]){0, 1}, 1, (const int[]){1}) ||
        (fold ? rtc_mm_once(c, &j, k->req[1]) : rtc_mm_run(c, &g, &j, k->req[1])))
      return 1;
  }
  return 0;
}
