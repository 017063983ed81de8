/* rtc_dnn.c — convolution on the GPU through cuDNN 9's legacy convolution API, with the
 * semantics of kernels/k_conv.c (conv1d / conv2d, NCHW, padding, stride, dilation, groups,
 * optional bias), plus the loading of cuDNN. cuDNN pads both sides of an axis alike: pads that
 * differ at start and end (k_conv_pad_begin / _end) run as a convolution without padding of a
 * zero-padded copy of the input in the scratch, past cuDNN's workspace (kc_pad; the data
 * gradient comes back through that copy, cropped by kc_pad_grad). prepare (once per step, at create) builds
 * the descriptors — a 1-D convolution as a 2-D one of height 1, as on the CPU — and picks each
 * algorithm once for the step's shapes: FP32 FMA math only (no TF32 tensor cores), GEMM-like or
 * direct algorithms before FFT and Winograd (whose rounding differs most from the CPU's), and
 * deterministic ones before those that add with atomics. $KILN_CUDNN_LOG prints each choice.
 * The bias add and bias gradient are kc_blas.cu's kernels, as fully_connected's. */
#include "rtc_blas.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "k_params.h"
#include "kc_args.h"

/* ---- loading ---------------------------------------------------------------------------- */

#define RTC_CUDNN_FNS(X)                                                                              \
  X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetErrorString)                              \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor)         \
  X(cudnnCreateFilterDescriptor) X(cudnnSetFilterNdDescriptor) X(cudnnDestroyFilterDescriptor)         \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)                               \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType) X(cudnnDestroyConvolutionDescriptor) \
  X(cudnnGetConvolutionNdForwardOutputDim)                                                             \
  X(cudnnGetConvolutionForwardAlgorithmMaxCount) X(cudnnGetConvolutionForwardAlgorithm_v7)             \
  X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnConvolutionForward)                                \
  X(cudnnGetConvolutionBackwardDataAlgorithmMaxCount) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)   \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnConvolutionBackwardData)                      \
  X(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount) X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) X(cudnnConvolutionBackwardFilter)

static struct {
#define RTC_FIELD(f) __typeof__(f) *f;
  RTC_CUDNN_FNS(RTC_FIELD)
#undef RTC_FIELD
} rtc_dn;

static pthread_once_t rtc_dn_once = PTHREAD_ONCE_INIT;
static int rtc_dn_bad;
static char rtc_dn_err[768];

static void rtc_dn_load(void) {
  static const char *const names[] = {"libcudnn.so.9", "libcudnn.so", "/usr/local/cuda/lib64/libcudnn.so.9", NULL};
  const rtc_dl_sym syms[] = {
#define RTC_SYM(f) {#f, (void **)&rtc_dn.f},
      RTC_CUDNN_FNS(RTC_SYM)
#undef RTC_SYM
      {NULL, NULL}};
  rtc_dn_bad = rtc_dl_load("cuDNN", names, syms, rtc_dn_err, sizeof rtc_dn_err);
}

/* 0 for success, else 1 with "<fn>: <status string> (<code>)". */
static int rtc_dn_check(rtc_ctx *c, cudnnStatus_t s, const char *fn) {
  if (s == CUDNN_STATUS_SUCCESS) return 0;
  const char *m = rtc_dn.cudnnGetErrorString ? rtc_dn.cudnnGetErrorString(s) : NULL;
  return rtc_fail(c, "%s: %s (%d)", fn, m ? m : "unknown cuDNN status", (int)s);
}

int rtc_dnn_open(rtc_ctx *c, void **h) {
  *h = NULL;
  pthread_once(&rtc_dn_once, rtc_dn_load);
  if (rtc_dn_bad) return rtc_fail(c, "%s", rtc_dn_err);
  cudnnHandle_t d = NULL;
  if (rtc_dn_check(c, rtc_dn.cudnnCreate(&d), "cudnnCreate")) return 1;
  if (rtc_dn_check(c, rtc_dn.cudnnSetStream(d, (cudaStream_t)rtc_stream(c)), "cudnnSetStream")) {
    rtc_dn.cudnnDestroy(d);
    return 1;
  }
  *h = d;
  return 0;
}

void rtc_dnn_close(void *h) {
  if (h && !rtc_dn_bad && rtc_dn.cudnnDestroy) rtc_dn.cudnnDestroy((cudnnHandle_t)h);
}

/* ---- the step's state ------------------------------------------------------------------- */

typedef struct {
  cudnnTensorDescriptor_t x, y;          /* data [N, C, H, W], output (or its gradient) [N, F, OH, OW] */
  cudnnFilterDescriptor_t w;             /* [F, C / G, kh, kw] */
  cudnnConvolutionDescriptor_t conv;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  size_t ws_fwd, ws_data, ws_filter;     /* each algorithm's workspace (rtc_scratch) */
  int asym;                              /* pads differ at start and end: x is padded first */
  kc_pad_args pad;                       /* then: unpadded x (xd) -> its zero-padded copy (yd) */
  size_t xp_at;                          /* the copy's offset in the scratch, past the workspace */
  int has_fwd, has_data, has_filter;     /* which algorithms prepare picked */
  int64_t N, F, ohw;
  const char *name;                      /* the step's, for KILN_CUDNN_LOG */
} rtc_conv;

void rtc_convolution_release(rtc_ctx *c, void *state) {
  rtc_conv *s = state;
  if (!s) return;
  if (s->x) rtc_dn.cudnnDestroyTensorDescriptor(s->x);
  if (s->y) rtc_dn.cudnnDestroyTensorDescriptor(s->y);
  if (s->w) rtc_dn.cudnnDestroyFilterDescriptor(s->w);
  if (s->conv) rtc_dn.cudnnDestroyConvolutionDescriptor(s->conv);
  free(s);
}

/* The shapes of a step, forward or backward, as NCHW / FCHW dims (1-D: H = 1, kh = 1). With
 * pads that differ at start and end (asym), x is the zero-padded copy's dims and pad is 0;
 * xu the input's own dims and pb, pe the copy's start and end pads (H, W). */
typedef struct {
  int x[4], y[4], w[4];
  int pad[2], stride[2], dil[2];
  int groups;
  int asym;
  int64_t xu[4], pb[2], pe[2];
} rtc_conv_dims;

static int rtc_int(int64_t v, int *out) {
  if (v <= 0 || v > INT_MAX) return 1;
  *out = (int)v;
  return 0;
}

/* The pads cuDNN gets, pr (H, W); where a start and its end differ, none: xs, the input's
 * dims, grow to its zero-padded copy's, and d keeps the input's own dims and the copy's pads. */
static void rtc_conv_pads(const k_conv_param *p, int sp, int64_t xs[4], int64_t pr[2], rtc_conv_dims *d) {
  int64_t pb[2] = {sp == 2 ? k_conv_pad_begin(p, 0) : 0, k_conv_pad_begin(p, sp - 1)};
  int64_t pe[2] = {sp == 2 ? k_conv_pad_end(p, 0) : 0, k_conv_pad_end(p, sp - 1)};
  d->asym = pb[0] != pe[0] || pb[1] != pe[1];
  for (int i = 0; i < 4; i++) d->xu[i] = xs[i];
  for (int i = 0; i < 2; i++) {
    d->pb[i] = d->asym ? pb[i] : 0, d->pe[i] = d->asym ? pe[i] : 0;
    xs[2 + i] += d->pb[i] + d->pe[i];
    pr[i] = d->asym ? 0 : pb[i];
  }
}

/* What cuDNN cannot take, or this file does not do, is refused here with the reason. */
static int rtc_conv_dims_of(rtc_ctx *c, const rtc_call *k, rtc_conv_dims *d) {
  const k_conv_param *p = k->param;
  int bwd = k->s->kind == RT_STEP_BACKWARD, sp = p->kernel.n;
  const k_shape *x = &k->in_shape[bwd ? 1 : 0], *w = &k->in_shape[bwd ? 2 : 1];
  const k_shape *y = bwd ? &k->in_shape[0] : &k->out_shape[0];
  if (sp != 1 && sp != 2) return rtc_fail(c, "convolution: only conv1d and conv2d run on the GPU (kernel has %d entries)", sp);
  if (p->stride.n != sp || (p->pad.n != sp && p->pad.n != 2 * sp) || p->dilate.n != sp)
    return rtc_fail(c, "convolution: stride and dilate must have one entry per spatial axis, pad one or two "
                       "(start and end)");
  if (p->in_block || p->out_block || p->epi_block || p->pro_slot || (!bwd && k->s->epi))
    return rtc_fail(c, "convolution: channel-blocked layouts and fused epilogues and prologues are CPU-only");
  if (x->rank != sp + 2 || w->rank != sp + 2 || y->rank != sp + 2)
    return rtc_fail(c, "convolution: data, weight and output must have rank %d", sp + 2);
  int64_t xs[4] = {x->d[0], x->d[1], sp == 2 ? x->d[2] : 1, x->d[x->rank - 1]};
  int64_t ys[4] = {y->d[0], y->d[1], sp == 2 ? y->d[2] : 1, y->d[y->rank - 1]};
  int64_t ws[4] = {w->d[0], w->d[1], sp == 2 ? w->d[2] : 1, w->d[w->rank - 1]};
  int64_t pr[2];
  rtc_conv_pads(p, sp, xs, pr, d);
  int64_t st[2] = {sp == 2 ? p->stride.v[0] : 1, p->stride.v[sp - 1]};
  int64_t dl[2] = {sp == 2 ? p->dilate.v[0] : 1, p->dilate.v[sp - 1]};
  int bad = 0;
  for (int i = 0; i < 4; i++) bad |= rtc_int(xs[i], &d->x[i]) | rtc_int(ys[i], &d->y[i]) | rtc_int(ws[i], &d->w[i]);
  for (int i = 0; i < 2; i++) {
    bad |= rtc_int(st[i], &d->stride[i]) | rtc_int(dl[i], &d->dil[i]);
    bad |= pr[i] < 0 || pr[i] > INT_MAX;
    d->pad[i] = (int)pr[i];
  }
  bad |= rtc_int(p->num_group > 0 ? p->num_group : 1, &d->groups);
  if (bad) return rtc_fail(c, "convolution: an empty tensor, or a size beyond cuDNN's int, is not supported on the GPU");
  int64_t numel = (int64_t)d->x[0] * d->x[1] * d->x[2] * d->x[3];
  int64_t onumel = (int64_t)d->y[0] * d->y[1] * d->y[2] * d->y[3];
  if (numel > INT_MAX || onumel > INT_MAX)
    return rtc_fail(c, "convolution: more than 2^31 elements in one tensor is not supported on the GPU");
  return 0;
}

/* Descriptors from the dims; checks that cuDNN's output shape is the step's. */
static int rtc_conv_descriptors(rtc_ctx *c, rtc_conv *s, const rtc_conv_dims *d) {
  int xst[4] = {d->x[1] * d->x[2] * d->x[3], d->x[2] * d->x[3], d->x[3], 1};
  int yst[4] = {d->y[1] * d->y[2] * d->y[3], d->y[2] * d->y[3], d->y[3], 1};
  int got[4];
  if (rtc_dn_check(c, rtc_dn.cudnnCreateTensorDescriptor(&s->x), "cudnnCreateTensorDescriptor") ||
      rtc_dn_check(c, rtc_dn.cudnnCreateTensorDescriptor(&s->y), "cudnnCreateTensorDescriptor") ||
      rtc_dn_check(c, rtc_dn.cudnnCreateFilterDescriptor(&s->w), "cudnnCreateFilterDescriptor") ||
      rtc_dn_check(c, rtc_dn.cudnnCreateConvolutionDescriptor(&s->conv), "cudnnCreateConvolutionDescriptor") ||
      rtc_dn_check(c, rtc_dn.cudnnSetTensorNdDescriptor(s->x, CUDNN_DATA_FLOAT, 4, d->x, xst), "cudnnSetTensorNdDescriptor") ||
      rtc_dn_check(c, rtc_dn.cudnnSetTensorNdDescriptor(s->y, CUDNN_DATA_FLOAT, 4, d->y, yst), "cudnnSetTensorNdDescriptor") ||
      rtc_dn_check(c, rtc_dn.cudnnSetFilterNdDescriptor(s->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, d->w),
                   "cudnnSetFilterNdDescriptor") ||
      rtc_dn_check(c, rtc_dn.cudnnSetConvolutionNdDescriptor(s->conv, 2, d->pad, d->stride, d->dil,
                                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                   "cudnnSetConvolutionNdDescriptor") ||
      rtc_dn_check(c, rtc_dn.cudnnSetConvolutionGroupCount(s->conv, d->groups), "cudnnSetConvolutionGroupCount") ||
      rtc_dn_check(c, rtc_dn.cudnnSetConvolutionMathType(s->conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType") ||
      rtc_dn_check(c, rtc_dn.cudnnGetConvolutionNdForwardOutputDim(s->conv, s->x, s->w, 4, got),
                   "cudnnGetConvolutionNdForwardOutputDim"))
    return 1;
  for (int i = 0; i < 4; i++)
    if (got[i] != d->y[i])
      return rtc_fail(c, "convolution: cuDNN's output shape [%d, %d, %d, %d] is not the step's [%d, %d, %d, %d]", got[0],
                      got[1], got[2], got[3], d->y[0], d->y[1], d->y[2], d->y[3]);
  return 0;
}

/* ---- algorithm choice ------------------------------------------------------------------- */

/* Rank of a heuristic's candidate, lower is better; -1 refuses it. Tensor-op math never (it
 * would round through TF32). Accuracy first: FFT and Winograd (ranks 2, 3), whose rounding
 * differs most from the CPU's, only when no GEMM-like or direct algorithm works; then
 * deterministic before atomics (0 before 1, 2 before 3). Within a rank cuDNN's order (its
 * expected speed) decides. (On the H200 every convolution of the examples got a rank-0
 * algorithm, ALGO_1 for both backward passes: KILN_CUDNN_LOG, bench/README.md.) */
static int rtc_conv_rank(cudnnStatus_t st, cudnnMathType_t math, cudnnDeterminism_t det, int approx) {
  if (st != CUDNN_STATUS_SUCCESS || math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
    return -1;
  return 2 * (approx != 0) + (det != CUDNN_DETERMINISTIC);
}

/* Workspace beyond which an algorithm is taken only if no bounded one is left. */
#define RTC_CONV_WS_CAP ((size_t)1 << 30)

/* Index of the best candidate among n (rank[i], memory[i]), or -1: the lowest rank, a bounded
 * workspace within it, then cuDNN's order (its expected speed). */
static int rtc_conv_pick(int n, const int *rank, const size_t *mem) {
  int best = -1, best_key = 0;
  for (int i = 0; i < n; i++) {
    if (rank[i] < 0) continue;
    int key = 2 * rank[i] + (mem[i] > RTC_CONV_WS_CAP);
    if (best < 0 || key < best_key) best = i, best_key = key;
  }
  return best;
}

/* $KILN_CUDNN_LOG: which algorithm a step got, and its rank among the candidates. */
static void rtc_conv_log(const char *step, const char *pass, int algo, int rank, int n) {
  const char *e = getenv("KILN_CUDNN_LOG");
  if (e && *e && strcmp(e, "0") != 0)
    fprintf(stderr, "kiln cudnn: %s: %s algorithm %d (rank %d: 0 exact, 1 exact with atomics, 2-3 FFT/Winograd; %d candidates)\n",
            step, pass, algo, rank, n);
}

#define RTC_CONV_MAXALGO 16

static int rtc_conv_pick_fwd(rtc_ctx *c, cudnnHandle_t h, rtc_conv *s) {
  cudnnConvolutionFwdAlgoPerf_t perf[RTC_CONV_MAXALGO];
  int n = 0, rank[RTC_CONV_MAXALGO];
  size_t mem[RTC_CONV_MAXALGO];
  if (rtc_dn_check(c, rtc_dn.cudnnGetConvolutionForwardAlgorithm_v7(h, s->x, s->w, s->conv, s->y, RTC_CONV_MAXALGO, &n, perf),
                   "cudnnGetConvolutionForwardAlgorithm_v7"))
    return 1;
  for (int i = 0; i < n; i++) {
    cudnnConvolutionFwdAlgo_t a = perf[i].algo;
    int approx = a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
                 a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    rank[i] = rtc_conv_rank(perf[i].status, perf[i].mathType, perf[i].determinism, approx);
    mem[i] = perf[i].memory;
  }
  int b = rtc_conv_pick(n, rank, mem);
  if (b < 0) return rtc_fail(c, "convolution: cuDNN offers no FP32 forward algorithm for these shapes");
  s->fwd = perf[b].algo, s->has_fwd = 1;
  rtc_conv_log(s->name, "forward", (int)s->fwd, rank[b], n);
  return rtc_dn_check(c, rtc_dn.cudnnGetConvolutionForwardWorkspaceSize(h, s->x, s->w, s->conv, s->y, s->fwd, &s->ws_fwd),
                      "cudnnGetConvolutionForwardWorkspaceSize");
}

static int rtc_conv_pick_data(rtc_ctx *c, cudnnHandle_t h, rtc_conv *s) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[RTC_CONV_MAXALGO];
  int n = 0, rank[RTC_CONV_MAXALGO];
  size_t mem[RTC_CONV_MAXALGO];
  if (rtc_dn_check(c, rtc_dn.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, s->w, s->y, s->conv, s->x, RTC_CONV_MAXALGO, &n,
                                                                         perf),
                   "cudnnGetConvolutionBackwardDataAlgorithm_v7"))
    return 1;
  for (int i = 0; i < n; i++) {
    cudnnConvolutionBwdDataAlgo_t a = perf[i].algo;
    int approx = a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
                 a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    cudnnDeterminism_t det = a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 ? CUDNN_NON_DETERMINISTIC : perf[i].determinism;
    rank[i] = rtc_conv_rank(perf[i].status, perf[i].mathType, det, approx);
    mem[i] = perf[i].memory;
  }
  int b = rtc_conv_pick(n, rank, mem);
  if (b < 0) return rtc_fail(c, "convolution: cuDNN offers no FP32 backward-data algorithm for these shapes");
  s->bwd_data = perf[b].algo, s->has_data = 1;
  rtc_conv_log(s->name, "backward data", (int)s->bwd_data, rank[b], n);
  return rtc_dn_check(c, rtc_dn.cudnnGetConvolutionBackwardDataWorkspaceSize(h, s->w, s->y, s->conv, s->x, s->bwd_data,
                                                                              &s->ws_data),
                      "cudnnGetConvolutionBackwardDataWorkspaceSize");
}

static int rtc_conv_pick_filter(rtc_ctx *c, cudnnHandle_t h, rtc_conv *s) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[RTC_CONV_MAXALGO];
  int n = 0, rank[RTC_CONV_MAXALGO];
  size_t mem[RTC_CONV_MAXALGO];
  if (rtc_dn_check(c, rtc_dn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, s->x, s->y, s->conv, s->w, RTC_CONV_MAXALGO,
                                                                           &n, perf),
                   "cudnnGetConvolutionBackwardFilterAlgorithm_v7"))
    return 1;
  for (int i = 0; i < n; i++) {
    cudnnConvolutionBwdFilterAlgo_t a = perf[i].algo;
    int approx = a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
                 a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
    cudnnDeterminism_t det = a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3
                                 ? CUDNN_NON_DETERMINISTIC
                                 : perf[i].determinism;
    rank[i] = rtc_conv_rank(perf[i].status, perf[i].mathType, det, approx);
    mem[i] = perf[i].memory;
  }
  int b = rtc_conv_pick(n, rank, mem);
  if (b < 0) return rtc_fail(c, "convolution: cuDNN offers no FP32 backward-filter algorithm for these shapes");
  s->bwd_filter = perf[b].algo, s->has_filter = 1;
  rtc_conv_log(s->name, "backward filter", (int)s->bwd_filter, rank[b], n);
  return rtc_dn_check(c, rtc_dn.cudnnGetConvolutionBackwardFilterWorkspaceSize(h, s->x, s->y, s->conv, s->w, s->bwd_filter,
                                                                                &s->ws_filter),
                      "cudnnGetConvolutionBackwardFilterWorkspaceSize");
}

/* ---- prepare, forward, backward --------------------------------------------------------- */

/* Asymmetric pads: the kc_pad arguments from the input's dims to its zero-padded copy's (the
 * same arguments serve kc_pad_grad, which crops the copy's gradient back), and the copy's
 * place in the scratch, 256-aligned past cuDNN's workspace of ws bytes; returns the scratch
 * the step needs in all. */
static size_t rtc_conv_pad_prepare(rtc_conv *s, const rtc_conv_dims *d, size_t ws) {
  kc_pad_args *a = &s->pad;
  memset(a, 0, sizeof *a);
  a->rank = 4, a->mode = K_PAD_CONSTANT, a->value = 0.0f;
  for (int i = 0; i < 4; i++) a->xd[i] = d->xu[i], a->yd[i] = d->x[i];
  a->before[2] = d->pb[0], a->before[3] = d->pb[1];
  s->asym = 1;
  s->xp_at = (ws + 255) & ~(size_t)255;
  return s->xp_at + (size_t)(a->yd[0] * a->yd[1] * a->yd[2] * a->yd[3]) * sizeof(float);
}

static float *rtc_conv_copy(rtc_ctx *c, const rtc_conv *s) { return (float *)((char *)rtc_scratch(c) + s->xp_at); }

/* The zero-padded copy of x (asymmetric pads), for cuDNN to convolve without padding. */
static int rtc_conv_pad_x(rtc_ctx *c, const rtc_conv *s, const void *x) {
  kc_pad_args a = s->pad;
  a.x = x, a.y = rtc_conv_copy(c, s), a.req = kWriteTo;
  a.n = a.yd[0] * a.yd[1] * a.yd[2] * a.yd[3];
  return rtc_launch(c, "kc_pad", a.n, &a, sizeof a);
}

/* dx (req) = the copy's gradient, which cuDNN left in the copy's place, at x's positions. */
static int rtc_conv_crop_dx(rtc_ctx *c, const rtc_conv *s, void *dx, k_req req) {
  kc_pad_grad_args a = s->pad;
  a.x = rtc_conv_copy(c, s), a.y = dx, a.req = (int32_t)req;
  a.n = a.xd[0] * a.xd[1] * a.xd[2] * a.xd[3];
  return rtc_launch(c, "kc_pad_grad", a.n, &a, sizeof a);
}

/* A forward step picks the forward algorithm; a backward step those of the gradients its
 * OpReqTypes ask for. The workspace is the step's largest, from the shared scratch (and the
 * padded copy of x after it, for asymmetric pads). */
int rtc_convolution_prepare(rtc_ctx *c, const rtc_call *k) {
  cudnnHandle_t h = (cudnnHandle_t)rtc_cudnn(c);
  rtc_conv_dims d;
  if (!h) return rtc_fail(c, "internal: no cuDNN handle (rtc_dnn_open was not called)");
  if (rtc_conv_dims_of(c, k, &d)) return 1;
  rtc_conv *s = calloc(1, sizeof *s);
  if (!s) return rtc_fail(c, "out of memory");
  *k->state = s;   /* released by rtc_convolution_release even when prepare fails below */
  s->name = k->s->name;
  s->N = d.y[0], s->F = d.y[1], s->ohw = (int64_t)d.y[2] * d.y[3];
  if (rtc_conv_descriptors(c, s, &d)) return 1;
  int bwd = k->s->kind == RT_STEP_BACKWARD;
  if (!bwd && rtc_conv_pick_fwd(c, h, s)) return 1;
  if (bwd && (!k->req || (k->nout > 0 && k->req[0] != kNullOp)) && rtc_conv_pick_data(c, h, s)) return 1;
  if (bwd && (!k->req || (k->nout > 1 && k->req[1] != kNullOp)) && rtc_conv_pick_filter(c, h, s)) return 1;
  size_t ws = s->ws_fwd > s->ws_data ? s->ws_fwd : s->ws_data;
  if (s->ws_filter > ws) ws = s->ws_filter;
  if (d.asym) ws = rtc_conv_pad_prepare(s, &d, ws);
  return ws ? rtc_reserve_scratch(c, ws) : 0;
}

static float rtc_dn_beta(k_req r) { return r == kAddTo ? 1.0f : 0.0f; }

static rtc_conv *rtc_conv_state(rtc_ctx *c, const rtc_call *k) {
  rtc_conv *s = k->state ? *k->state : NULL;
  if (!s) rtc_fail(c, "internal: convolution was not prepared");
  return s;
}

/* in = [X, W, (b)]: Y (beta) = conv(X, W), then Y += b per filter. */
int rtc_convolution_forward(rtc_ctx *c, const rtc_call *k) {
  const k_conv_param *p = k->param;
  if (k->req[0] == kNullOp) return 0;
  rtc_conv *s = rtc_conv_state(c, k);
  if (!s) return 1;
  if (!s->has_fwd) return rtc_fail(c, "internal: convolution forward was prepared as a backward step");
  if (!k->in[0] || !k->in[1] || (!p->no_bias && (k->nin < 3 || !k->in[2])) || !k->out[0])
    return rtc_fail(c, "internal: convolution forward with an unbound slot");
  const float one = 1.0f, beta = rtc_dn_beta(k->req[0]);
  const void *x = s->asym ? rtc_conv_copy(c, s) : k->in[0];
  if (s->asym && rtc_conv_pad_x(c, s, k->in[0])) return 1;
  if (rtc_dn_check(c, rtc_dn.cudnnConvolutionForward(rtc_cudnn(c), &one, s->x, x, s->w, k->in[1], s->conv, s->fwd,
                                                     s->ws_fwd ? rtc_scratch(c) : NULL, s->ws_fwd, &beta, s->y, k->out[0]),
                   "cudnnConvolutionForward"))
    return 1;
  return p->no_bias ? 0 : rtc_blas_bias_add(c, k->out[0], k->in[2], s->N, s->F, s->ohw);
}

/* Backward in = [dY, X, W, (b), Y]; out = [dX, dW, (db)]. */
int rtc_convolution_backward(rtc_ctx *c, const rtc_call *k) {
  const k_conv_param *p = k->param;
  rtc_conv *s = rtc_conv_state(c, k);
  if (!s) return 1;
  const void *dY = k->in[0];
  const float one = 1.0f;
  if (!dY) return rtc_fail(c, "internal: convolution backward without its output gradient");
  if (k->nout > 1 && k->req[1] != kNullOp) {
    float beta = rtc_dn_beta(k->req[1]);
    if (!s->has_filter) return rtc_fail(c, "internal: no weight-gradient algorithm was prepared (its req was kNullOp)");
    if (!k->in[1] || !k->out[1]) return rtc_fail(c, "internal: convolution weight gradient with an unbound slot");
    if (s->asym && rtc_conv_pad_x(c, s, k->in[1])) return 1;
    const void *x = s->asym ? rtc_conv_copy(c, s) : k->in[1];
    if (rtc_dn_check(c, rtc_dn.cudnnConvolutionBackwardFilter(rtc_cudnn(c), &one, s->x, x, s->y, dY, s->conv,
                                                              s->bwd_filter, s->ws_filter ? rtc_scratch(c) : NULL,
                                                              s->ws_filter, &beta, s->w, k->out[1]),
                     "cudnnConvolutionBackwardFilter"))
      return 1;
  }
  if (k->nout > 0 && k->req[0] != kNullOp) {
    float beta = rtc_dn_beta(k->req[0]);
    if (!s->has_data) return rtc_fail(c, "internal: no data-gradient algorithm was prepared (its req was kNullOp)");
    if (!k->in[2] || !k->out[0]) return rtc_fail(c, "internal: convolution data gradient with an unbound slot");
    float zero = 0.0f;   /* into the padded copy's place, then cropped into dx with req */
    if (rtc_dn_check(c, rtc_dn.cudnnConvolutionBackwardData(rtc_cudnn(c), &one, s->w, k->in[2], s->y, dY, s->conv,
                                                            s->bwd_data, s->ws_data ? rtc_scratch(c) : NULL, s->ws_data,
                                                            s->asym ? &zero : &beta, s->x,
                                                            s->asym ? rtc_conv_copy(c, s) : k->out[0]),
                     "cudnnConvolutionBackwardData"))
      return 1;
    if (s->asym && rtc_conv_crop_dx(c, s, k->out[0], k->req[0])) return 1;
  }
  if (!p->no_bias && k->nout > 2 && k->req[2] != kNullOp) {
    if (!k->out[2]) return rtc_fail(c, "internal: convolution bias gradient with an unbound slot");
    return rtc_blas_bias_grad(c, k->out[2], dY, s->N, s->F, s->ohw, k->req[2] == kAddTo);
  }
  return 0;
}
