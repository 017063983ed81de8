/* fake_cudnn.c — a host emulation of the part of cuDNN 9 that runtime/cuda/rtc_dnn.c resolves,
 * built as libcudnn.so.9 so that, first on LD_LIBRARY_PATH, it stands in for the real library
 * when the fake libcuda.so.1 (device pointers are host pointers) runs a CUDA model on the CPU.
 *
 * What it does, as cuDNN documents it:
 *  - descriptors store what is set; tensors any strides (indexed through them), filters packed
 *    NCHW (KCRS), float data only; convolution: pads, filter strides, dilations, mode
 *    (CUDNN_CROSS_CORRELATION; CUDNN_CONVOLUTION flips the filter spatially), groups, math type.
 *  - convolutions of 4-D tensors (2 spatial dims; a 1-D convolution is a 2-D one of height 1):
 *    forward y = alpha conv(x, w) + beta y; backward data dx = alpha conv^T(dy, w) + beta dx;
 *    backward filter dw = alpha corr(x, dy) + beta dw. beta == 0: the output is not read (a NaN
 *    there does not propagate). Sums accumulate in double and round once.
 *  - every call checks its descriptors against one another as cuDNN does (C == filter C * groups,
 *    K % groups == 0, y's dims == the output dims of x, w and the convolution) and answers
 *    CUDNN_STATUS_BAD_PARAM on a mismatch, CUDNN_STATUS_NOT_SUPPORTED for what the fake does not
 *    do (other ranks or data types). An output that overlaps an input is refused with
 *    CUDNN_STATUS_BAD_PARAM (cuDNN's convolutions are not in-place; on a GPU it is garbage).
 *  - Get*Algorithm_v7 answers one algorithm: status success, deterministic, the descriptor's math
 *    type, workspace as below (IMPLICIT_PRECOMP_GEMM forward, ALGO_1 for both backward passes —
 *    the deterministic ones rtc_dnn.c prefers).
 *  - Get*WorkspaceSize answers 0, or KILN_FAKE_CUDNN_WORKSPACE bytes when that is set in the
 *    environment; then every convolution checks that it was given at least that much workspace
 *    (else CUDNN_STATUS_BAD_PARAM) and fills it with 0xff bytes (NaNs), as a real algorithm
 *    clobbers its workspace — so a workspace shared with live data shows up.
 * Work runs synchronously at the call, whatever the stream. KILN_FAKE_TRACE=1 prints every call
 * on stderr, and every error's reason in any case is kept for cudnnGetLastErrorString (and
 * printed on stderr when KILN_FAKE_TRACE is set). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "fake_capture.h"

#define FAKE_DIMS 8

enum { MAGIC_HANDLE = 0x4b48, MAGIC_TENSOR = 0x4b54, MAGIC_FILTER = 0x4b46, MAGIC_CONV = 0x4b43 };

struct cudnnContext {
  int magic;
  cudaStream_t stream;
};

struct cudnnTensorStruct {
  int magic, set;
  cudnnDataType_t dtype;
  int nb, dim[FAKE_DIMS], stride[FAKE_DIMS];
};

struct cudnnFilterStruct {
  int magic, set;
  cudnnDataType_t dtype;
  cudnnTensorFormat_t format;
  int nb, dim[FAKE_DIMS];
};

struct cudnnConvolutionStruct {
  int magic, set;
  int nsp, pad[FAKE_DIMS], stride[FAKE_DIMS], dil[FAKE_DIMS];
  cudnnConvolutionMode_t mode;
  cudnnDataType_t compute;
  int groups;
  cudnnMathType_t math;
};

/* ---- tracing and errors ------------------------------------------------------------------ */

static int fake_trace(void) {
  static int t = -1;
  if (t < 0) {
    const char *e = getenv("KILN_FAKE_TRACE");
    t = e && *e && *e != '0';
  }
  return t;
}

#define TRACE(...)                                   \
  do {                                               \
    if (fake_trace()) {                              \
      fprintf(stderr, "[fake cudnn] " __VA_ARGS__);  \
      fputc('\n', stderr);                           \
    }                                                \
  } while (0)

static __thread char fake_last[512];

/* Records why a call fails and returns its status. */
__attribute__((format(printf, 2, 3))) static cudnnStatus_t fake_err(cudnnStatus_t s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fake_last, sizeof fake_last, fmt, ap);
  va_end(ap);
  TRACE("error %d: %s", (int)s, fake_last);
  return s;
}

size_t CUDNNWINAPI cudnnGetVersion(void) { return CUDNN_VERSION; }

const char *CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
#define S(x) case x: return #x;
    S(CUDNN_STATUS_SUCCESS) S(CUDNN_STATUS_NOT_INITIALIZED) S(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
    S(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH) S(CUDNN_STATUS_DEPRECATED) S(CUDNN_STATUS_LICENSE_ERROR)
    S(CUDNN_STATUS_RUNTIME_IN_PROGRESS) S(CUDNN_STATUS_RUNTIME_FP_OVERFLOW) S(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
    S(CUDNN_STATUS_BAD_PARAM) S(CUDNN_STATUS_BAD_PARAM_NULL_POINTER) S(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    S(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED) S(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
    S(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT) S(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
    S(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH) S(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
    S(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE) S(CUDNN_STATUS_NOT_SUPPORTED) S(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
    S(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE) S(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT) S(CUDNN_STATUS_INTERNAL_ERROR)
    S(CUDNN_STATUS_EXECUTION_FAILED) S(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
#undef S
  default: return "CUDNN_STATUS_UNKNOWN";
  }
}

void CUDNNWINAPI cudnnGetLastErrorString(char *message, size_t max_size) {
  if (!message || !max_size) return;
  snprintf(message, max_size, "%s", fake_last);
  fake_last[0] = 0;
}

/* ---- handle ------------------------------------------------------------------------------ */

cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t *handle) {
  if (!handle) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: NULL handle pointer");
  cudnnHandle_t h = calloc(1, sizeof *h);
  if (!h) return fake_err(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "cudnnCreate: out of memory");
  h->magic = MAGIC_HANDLE;
  *handle = h;
  TRACE("cudnnCreate -> %p", (void *)h);
  return CUDNN_STATUS_SUCCESS;
}

static int fake_handle_ok(cudnnHandle_t h) { return h && h->magic == MAGIC_HANDLE; }

cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t handle) {
  TRACE("cudnnDestroy %p", (void *)handle);
  if (!fake_handle_ok(handle)) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a handle");
  handle->magic = 0;
  free(handle);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  TRACE("cudnnSetStream %p %p", (void *)handle, (void *)streamId);
  if (!fake_handle_ok(handle)) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a handle");
  handle->stream = streamId;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId) {
  if (!fake_handle_ok(handle) || !streamId) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: bad argument");
  *streamId = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

/* ---- descriptors ------------------------------------------------------------------------- */

#define FAKE_CREATE(fn, type, MAGIC)                                                   \
  cudnnStatus_t CUDNNWINAPI fn(type *d) {                                              \
    if (!d) return fake_err(CUDNN_STATUS_BAD_PARAM, #fn ": NULL pointer");             \
    type t = calloc(1, sizeof *t);                                                     \
    if (!t) return fake_err(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, #fn ": out of memory");         \
    t->magic = MAGIC;                                                                  \
    *d = t;                                                                            \
    return CUDNN_STATUS_SUCCESS;                                                       \
  }
#define FAKE_DESTROY(fn, type, MAGIC)                                                  \
  cudnnStatus_t CUDNNWINAPI fn(type d) {                                               \
    if (!d) return CUDNN_STATUS_SUCCESS;                                               \
    if (d->magic != MAGIC) return fake_err(CUDNN_STATUS_BAD_PARAM, #fn ": not one");   \
    d->magic = 0;                                                                      \
    free(d);                                                                           \
    return CUDNN_STATUS_SUCCESS;                                                       \
  }

FAKE_CREATE(cudnnCreateTensorDescriptor, cudnnTensorDescriptor_t, MAGIC_TENSOR)
FAKE_DESTROY(cudnnDestroyTensorDescriptor, cudnnTensorDescriptor_t, MAGIC_TENSOR)
FAKE_CREATE(cudnnCreateFilterDescriptor, cudnnFilterDescriptor_t, MAGIC_FILTER)
FAKE_DESTROY(cudnnDestroyFilterDescriptor, cudnnFilterDescriptor_t, MAGIC_FILTER)

cudnnStatus_t CUDNNWINAPI cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
  if (!d) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnCreateConvolutionDescriptor: NULL pointer");
  cudnnConvolutionDescriptor_t t = calloc(1, sizeof *t);
  if (!t) return fake_err(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "cudnnCreateConvolutionDescriptor: out of memory");
  t->magic = MAGIC_CONV;
  t->groups = 1;
  t->math = CUDNN_DEFAULT_MATH;
  t->mode = CUDNN_CROSS_CORRELATION;
  t->compute = CUDNN_DATA_FLOAT;
  *d = t;
  return CUDNN_STATUS_SUCCESS;
}
FAKE_DESTROY(cudnnDestroyConvolutionDescriptor, cudnnConvolutionDescriptor_t, MAGIC_CONV)

cudnnStatus_t CUDNNWINAPI cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t dataType, int nbDims,
                                                     const int dimA[], const int strideA[]) {
  if (!d || d->magic != MAGIC_TENSOR) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensorNdDescriptor: not a tensor descriptor");
  if (nbDims < 3 || nbDims > FAKE_DIMS || !dimA || !strideA)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensorNdDescriptor: nbDims %d (3 to %d) or a NULL array", nbDims,
                    FAKE_DIMS);
  for (int i = 0; i < nbDims; i++)
    if (dimA[i] <= 0 || strideA[i] <= 0)
      return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensorNdDescriptor: dim %d is %d, stride %d", i, dimA[i],
                      strideA[i]);
  d->dtype = dataType, d->nb = nbDims, d->set = 1;
  for (int i = 0; i < nbDims; i++) d->dim[i] = dimA[i], d->stride[i] = strideA[i];
  TRACE("cudnnSetTensorNdDescriptor %p type %d dims [%d %d %d %d] strides [%d %d %d %d]%s", (void *)d, (int)dataType,
        d->dim[0], d->dim[1], d->dim[2], nbDims > 3 ? d->dim[3] : 0, d->stride[0], d->stride[1], d->stride[2],
        nbDims > 3 ? d->stride[3] : 0, nbDims > 4 ? " ..." : "");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dataType,
                                                     cudnnTensorFormat_t format, int nbDims, const int filterDimA[]) {
  if (!d || d->magic != MAGIC_FILTER) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilterNdDescriptor: not a filter descriptor");
  if (nbDims < 3 || nbDims > FAKE_DIMS || !filterDimA)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilterNdDescriptor: nbDims %d (3 to %d) or a NULL array", nbDims,
                    FAKE_DIMS);
  for (int i = 0; i < nbDims; i++)
    if (filterDimA[i] <= 0) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilterNdDescriptor: dim %d is %d", i, filterDimA[i]);
  d->dtype = dataType, d->format = format, d->nb = nbDims, d->set = 1;
  for (int i = 0; i < nbDims; i++) d->dim[i] = filterDimA[i];
  TRACE("cudnnSetFilterNdDescriptor %p type %d format %d dims [%d %d %d %d]", (void *)d, (int)dataType, (int)format,
        d->dim[0], d->dim[1], d->dim[2], nbDims > 3 ? d->dim[3] : 0);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int arrayLength,
                                                          const int padA[], const int filterStrideA[],
                                                          const int dilationA[], cudnnConvolutionMode_t mode,
                                                          cudnnDataType_t computeType) {
  if (!d || d->magic != MAGIC_CONV) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionNdDescriptor: not a convolution descriptor");
  if (arrayLength < 1 || arrayLength > FAKE_DIMS - 2 || !padA || !filterStrideA || !dilationA)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionNdDescriptor: arrayLength %d or a NULL array", arrayLength);
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionNdDescriptor: mode %d", (int)mode);
  for (int i = 0; i < arrayLength; i++)
    if (padA[i] < 0 || filterStrideA[i] <= 0 || dilationA[i] <= 0)
      return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionNdDescriptor: axis %d pad %d stride %d dilation %d", i,
                      padA[i], filterStrideA[i], dilationA[i]);
  d->nsp = arrayLength, d->mode = mode, d->compute = computeType, d->set = 1;
  for (int i = 0; i < arrayLength; i++) d->pad[i] = padA[i], d->stride[i] = filterStrideA[i], d->dil[i] = dilationA[i];
  TRACE("cudnnSetConvolutionNdDescriptor %p n=%d pad [%d %d] stride [%d %d] dilation [%d %d] mode %d compute %d",
        (void *)d, arrayLength, d->pad[0], d->pad[1], d->stride[0], d->stride[1], d->dil[0], d->dil[1], (int)mode,
        (int)computeType);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groupCount) {
  if (!d || d->magic != MAGIC_CONV || groupCount < 1)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionGroupCount: bad descriptor or count %d", groupCount);
  d->groups = groupCount;
  TRACE("cudnnSetConvolutionGroupCount %p %d", (void *)d, groupCount);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int *groupCount) {
  if (!d || d->magic != MAGIC_CONV || !groupCount) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionGroupCount: bad argument");
  *groupCount = d->groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t mathType) {
  if (!d || d->magic != MAGIC_CONV) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionMathType: not a convolution descriptor");
  if (mathType != CUDNN_DEFAULT_MATH && mathType != CUDNN_TENSOR_OP_MATH &&
      mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && mathType != CUDNN_FMA_MATH)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionMathType: math type %d", (int)mathType);
  d->math = mathType;
  TRACE("cudnnSetConvolutionMathType %p %d", (void *)d, (int)mathType);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t *mathType) {
  if (!d || d->magic != MAGIC_CONV || !mathType) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionMathType: bad argument");
  *mathType = d->math;
  return CUDNN_STATUS_SUCCESS;
}

/* ---- geometry ---------------------------------------------------------------------------- */

/* A 2-D convolution's sizes, from checked descriptors. */
typedef struct {
  int N, C, H, W, K, R, S, OH, OW, G, Cg, Kg;
  int ph, pw, sh, sw, dh, dw;
  int flip;
  const int *xs, *ys;      /* element strides of x and y (N, C, H, W) */
} fake_geom;

/* Checks x, w and conv (and y when given) against one another, fills g. */
static cudnnStatus_t fake_geometry(const char *fn, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                                   cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y, fake_geom *g) {
  if (!x || x->magic != MAGIC_TENSOR || !x->set) return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: x descriptor not set", fn);
  if (!w || w->magic != MAGIC_FILTER || !w->set) return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: filter descriptor not set", fn);
  if (!conv || conv->magic != MAGIC_CONV || !conv->set)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: convolution descriptor not set", fn);
  if (y && (y->magic != MAGIC_TENSOR || !y->set)) return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: y descriptor not set", fn);
  if (x->nb != conv->nsp + 2 || w->nb != x->nb || (y && y->nb != x->nb))
    return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: ranks differ (x %d, filter %d, y %d, convolution %d spatial)", fn, x->nb,
                    w->nb, y ? y->nb : -1, conv->nsp);
  if (x->nb != 4) return fake_err(CUDNN_STATUS_NOT_SUPPORTED, "%s: the fake does only 4-D tensors (rank %d)", fn, x->nb);
  if (x->dtype != CUDNN_DATA_FLOAT || w->dtype != CUDNN_DATA_FLOAT || (y && y->dtype != CUDNN_DATA_FLOAT) ||
      conv->compute != CUDNN_DATA_FLOAT)
    return fake_err(CUDNN_STATUS_NOT_SUPPORTED, "%s: the fake does only float data and float compute", fn);
  if (w->format != CUDNN_TENSOR_NCHW) return fake_err(CUDNN_STATUS_NOT_SUPPORTED, "%s: the fake does only NCHW filters", fn);
  g->N = x->dim[0], g->C = x->dim[1], g->H = x->dim[2], g->W = x->dim[3];
  g->K = w->dim[0], g->R = w->dim[2], g->S = w->dim[3], g->G = conv->groups;
  g->ph = conv->pad[0], g->pw = conv->pad[1], g->sh = conv->stride[0], g->sw = conv->stride[1];
  g->dh = conv->dil[0], g->dw = conv->dil[1];
  g->flip = conv->mode == CUDNN_CONVOLUTION;
  if (g->C % g->G || g->K % g->G || w->dim[1] != g->C / g->G)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: %d input channels, %d filters of %d channels, %d groups", fn, g->C, g->K,
                    w->dim[1], g->G);
  g->Cg = g->C / g->G, g->Kg = g->K / g->G;
  int eh = (g->R - 1) * g->dh + 1, ew = (g->S - 1) * g->dw + 1;
  if (g->H + 2 * g->ph < eh || g->W + 2 * g->pw < ew)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: the dilated filter (%d x %d) exceeds the padded input (%d x %d)", fn, eh,
                    ew, g->H + 2 * g->ph, g->W + 2 * g->pw);
  g->OH = 1 + (g->H + 2 * g->ph - eh) / g->sh;
  g->OW = 1 + (g->W + 2 * g->pw - ew) / g->sw;
  g->xs = x->stride;
  g->ys = NULL;
  if (y) {
    if (y->dim[0] != g->N || y->dim[1] != g->K || y->dim[2] != g->OH || y->dim[3] != g->OW)
      return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: y is [%d %d %d %d], the convolution gives [%d %d %d %d]", fn, y->dim[0],
                      y->dim[1], y->dim[2], y->dim[3], g->N, g->K, g->OH, g->OW);
    g->ys = y->stride;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                                const cudnnTensorDescriptor_t inputTensorDesc,
                                                                const cudnnFilterDescriptor_t filterDesc, int nbDims,
                                                                int tensorOuputDimA[]) {
  fake_geom g;
  cudnnStatus_t s = fake_geometry("cudnnGetConvolutionNdForwardOutputDim", inputTensorDesc, filterDesc, convDesc, NULL, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (nbDims != inputTensorDesc->nb || !tensorOuputDimA)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionNdForwardOutputDim: nbDims %d for a rank-%d tensor", nbDims,
                    inputTensorDesc->nb);
  tensorOuputDimA[0] = g.N, tensorOuputDimA[1] = g.K, tensorOuputDimA[2] = g.OH, tensorOuputDimA[3] = g.OW;
  TRACE("cudnnGetConvolutionNdForwardOutputDim -> [%d %d %d %d]", g.N, g.K, g.OH, g.OW);
  return CUDNN_STATUS_SUCCESS;
}

/* ---- algorithms and workspace ------------------------------------------------------------ */

static size_t fake_ws(void) {
  const char *e = getenv("KILN_FAKE_CUDNN_WORKSPACE");
  return e && *e ? (size_t)strtoull(e, NULL, 0) : 0;
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int *count) {
  if (!fake_handle_ok(handle) || !count) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionForwardAlgorithmMaxCount: bad argument");
  *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int *count) {
  if (!fake_handle_ok(handle) || !count) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionBackwardDataAlgorithmMaxCount: bad argument");
  *count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int *count) {
  if (!fake_handle_ok(handle) || !count) return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount: bad argument");
  *count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

/* The common part of the three *_v7 queries: one deterministic algorithm in the descriptor's math. */
#define FAKE_V7(fn, perf_t, ALGO)                                                                        \
  do {                                                                                                   \
    if (!fake_handle_ok(handle)) return fake_err(CUDNN_STATUS_BAD_PARAM, fn ": not a handle");           \
    if (requestedAlgoCount < 1 || !returnedAlgoCount || !perfResults)                                    \
      return fake_err(CUDNN_STATUS_BAD_PARAM, fn ": requestedAlgoCount %d or a NULL pointer", requestedAlgoCount); \
    memset(perfResults, 0, sizeof(perf_t));                                                              \
    perfResults[0].algo = ALGO;                                                                          \
    perfResults[0].status = CUDNN_STATUS_SUCCESS;                                                        \
    perfResults[0].time = 0.0f;                                                                          \
    perfResults[0].memory = fake_ws();                                                                   \
    perfResults[0].determinism = CUDNN_DETERMINISTIC;                                                    \
    perfResults[0].mathType = convDesc->math;                                                            \
    *returnedAlgoCount = 1;                                                                              \
    TRACE(fn " -> algo %d math %d", (int)(ALGO), (int)convDesc->math);                                   \
    return CUDNN_STATUS_SUCCESS;                                                                         \
  } while (0)

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                                 const cudnnFilterDescriptor_t filterDesc,
                                                                 const cudnnConvolutionDescriptor_t convDesc,
                                                                 const cudnnTensorDescriptor_t destDesc,
                                                                 const int requestedAlgoCount, int *returnedAlgoCount,
                                                                 cudnnConvolutionFwdAlgoPerf_t *perfResults) {
  fake_geom g;
  cudnnStatus_t s = fake_geometry("cudnnGetConvolutionForwardAlgorithm_v7", srcDesc, filterDesc, convDesc, destDesc, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  FAKE_V7("cudnnGetConvolutionForwardAlgorithm_v7", cudnnConvolutionFwdAlgoPerf_t,
          CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle,
                                                                      const cudnnFilterDescriptor_t filterDesc,
                                                                      const cudnnTensorDescriptor_t diffDesc,
                                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                                      const cudnnTensorDescriptor_t gradDesc,
                                                                      const int requestedAlgoCount, int *returnedAlgoCount,
                                                                      cudnnConvolutionBwdDataAlgoPerf_t *perfResults) {
  fake_geom g;
  cudnnStatus_t s = fake_geometry("cudnnGetConvolutionBackwardDataAlgorithm_v7", gradDesc, filterDesc, convDesc, diffDesc, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  FAKE_V7("cudnnGetConvolutionBackwardDataAlgorithm_v7", cudnnConvolutionBwdDataAlgoPerf_t,
          CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle,
                                                                        const cudnnTensorDescriptor_t srcDesc,
                                                                        const cudnnTensorDescriptor_t diffDesc,
                                                                        const cudnnConvolutionDescriptor_t convDesc,
                                                                        const cudnnFilterDescriptor_t gradDesc,
                                                                        const int requestedAlgoCount, int *returnedAlgoCount,
                                                                        cudnnConvolutionBwdFilterAlgoPerf_t *perfResults) {
  fake_geom g;
  cudnnStatus_t s = fake_geometry("cudnnGetConvolutionBackwardFilterAlgorithm_v7", srcDesc, gradDesc, convDesc, diffDesc, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  FAKE_V7("cudnnGetConvolutionBackwardFilterAlgorithm_v7", cudnnConvolutionBwdFilterAlgoPerf_t,
          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                                  const cudnnFilterDescriptor_t wDesc,
                                                                  const cudnnConvolutionDescriptor_t convDesc,
                                                                  const cudnnTensorDescriptor_t yDesc,
                                                                  cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes) {
  fake_geom g;
  if (!fake_handle_ok(handle) || !sizeInBytes || (int)algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionForwardWorkspaceSize: bad handle, pointer or algo %d", (int)algo);
  cudnnStatus_t s = fake_geometry("cudnnGetConvolutionForwardWorkspaceSize", xDesc, wDesc, convDesc, yDesc, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  *sizeInBytes = fake_ws();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle,
                                                                       const cudnnFilterDescriptor_t wDesc,
                                                                       const cudnnTensorDescriptor_t dyDesc,
                                                                       const cudnnConvolutionDescriptor_t convDesc,
                                                                       const cudnnTensorDescriptor_t dxDesc,
                                                                       cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes) {
  fake_geom g;
  if (!fake_handle_ok(handle) || !sizeInBytes || (int)algo < 0 || algo >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionBackwardDataWorkspaceSize: bad handle, pointer or algo %d", (int)algo);
  cudnnStatus_t s = fake_geometry("cudnnGetConvolutionBackwardDataWorkspaceSize", dxDesc, wDesc, convDesc, dyDesc, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  *sizeInBytes = fake_ws();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle,
                                                                         const cudnnTensorDescriptor_t xDesc,
                                                                         const cudnnTensorDescriptor_t dyDesc,
                                                                         const cudnnConvolutionDescriptor_t convDesc,
                                                                         const cudnnFilterDescriptor_t gradDesc,
                                                                         cudnnConvolutionBwdFilterAlgo_t algo,
                                                                         size_t *sizeInBytes) {
  fake_geom g;
  if (!fake_handle_ok(handle) || !sizeInBytes || (int)algo < 0 || algo >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT)
    return fake_err(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionBackwardFilterWorkspaceSize: bad handle, pointer or algo %d", (int)algo);
  cudnnStatus_t s = fake_geometry("cudnnGetConvolutionBackwardFilterWorkspaceSize", xDesc, gradDesc, convDesc, dyDesc, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  *sizeInBytes = fake_ws();
  return CUDNN_STATUS_SUCCESS;
}

/* ---- the convolutions -------------------------------------------------------------------- */

/* Byte extent [lo, hi) of a strided 4-D tensor at p. */
static void fake_extent(const void *p, const int *dim, const int *st, uintptr_t *lo, uintptr_t *hi) {
  size_t last = 0;
  for (int i = 0; i < 4; i++) last += (size_t)(dim[i] - 1) * (size_t)st[i];
  *lo = (uintptr_t)p;
  *hi = (uintptr_t)p + (last + 1) * sizeof(float);
}

static int fake_overlap(uintptr_t alo, uintptr_t ahi, uintptr_t blo, uintptr_t bhi) { return alo < bhi && blo < ahi; }

/* Checks what every execution shares: the handle, the pointers, the workspace (clobbered). */
static cudnnStatus_t fake_exec_common(const char *fn, cudnnHandle_t handle, const void *alpha, const void *beta,
                                      const void *in1, const void *in2, const void *out, void *workSpace,
                                      size_t workSpaceSizeInBytes) {
  if (!fake_handle_ok(handle)) return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: not a handle", fn);
  if (!alpha || !beta || !in1 || !in2 || !out) return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: a NULL pointer", fn);
  size_t need = fake_ws();
  if (need) {
    if (!workSpace || workSpaceSizeInBytes < need)
      return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: workspace %p of %zu bytes, %zu needed", fn, workSpace,
                      workSpaceSizeInBytes, need);
    memset(workSpace, 0xff, need);
  }
  return CUDNN_STATUS_SUCCESS;
}

/* Filter element (k, c, r, s) of the cross-correlation: flipped in CUDNN_CONVOLUTION mode. */
static size_t fake_widx(const fake_geom *g, int k, int c, int r, int s) {
  if (g->flip) r = g->R - 1 - r, s = g->S - 1 - s;
  return (((size_t)k * g->Cg + c) * g->R + r) * g->S + s;
}

static size_t fake_xidx(const fake_geom *g, int n, int c, int h, int w) {
  return (size_t)n * g->xs[0] + (size_t)c * g->xs[1] + (size_t)h * g->xs[2] + (size_t)w * g->xs[3];
}

static size_t fake_yidx(const fake_geom *g, int n, int k, int h, int w) {
  return (size_t)n * g->ys[0] + (size_t)k * g->ys[1] + (size_t)h * g->ys[2] + (size_t)w * g->ys[3];
}

/* A captured convolution call (forward, backward data or backward filter: the three take the
 * same kinds of arguments), the scalars by value. */
enum { FAKE_CONV_FWD, FAKE_CONV_BWD_DATA, FAKE_CONV_BWD_FILTER };
typedef struct {
  int which;
  cudnnHandle_t h;
  float alpha, beta;
  const void *da, *a, *db, *b;   /* the two inputs' descriptors and data, in the call's order */
  cudnnConvolutionDescriptor_t conv;
  int algo;
  void *ws;
  size_t ws_bytes;
  const void *dy;
  void *y;
} fake_conv_call;

static void fake_conv_replay(void *p) {
  const fake_conv_call *k = p;
  if (k->which == FAKE_CONV_FWD)
    cudnnConvolutionForward(k->h, &k->alpha, (cudnnTensorDescriptor_t)k->da, k->a, (cudnnFilterDescriptor_t)k->db, k->b, k->conv,
                            (cudnnConvolutionFwdAlgo_t)k->algo, k->ws, k->ws_bytes, &k->beta, (cudnnTensorDescriptor_t)k->dy, k->y);
  else if (k->which == FAKE_CONV_BWD_DATA)
    cudnnConvolutionBackwardData(k->h, &k->alpha, (cudnnFilterDescriptor_t)k->da, k->a, (cudnnTensorDescriptor_t)k->db, k->b, k->conv,
                                 (cudnnConvolutionBwdDataAlgo_t)k->algo, k->ws, k->ws_bytes, &k->beta, (cudnnTensorDescriptor_t)k->dy, k->y);
  else
    cudnnConvolutionBackwardFilter(k->h, &k->alpha, (cudnnTensorDescriptor_t)k->da, k->a, (cudnnTensorDescriptor_t)k->db, k->b, k->conv,
                                   (cudnnConvolutionBwdFilterAlgo_t)k->algo, k->ws, k->ws_bytes, &k->beta, (cudnnFilterDescriptor_t)k->dy, k->y);
}

/* Checked, and captured: the call is deferred to the graph's launch. */
static int fake_conv_captured(fake_conv_call k) {
  if (!fake_capture_on()) return 0;
  fake_capture_defer(fake_conv_replay, &k, sizeof k);
  return 1;
}

static float fake_blend(float alpha, double acc, float beta, const float *out) {
  double r = (double)alpha * acc;
  if (beta != 0.0f) r += (double)beta * *out;
  return (float)r;
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
                                                  const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
                                                  const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                                  void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
                                                  const cudnnTensorDescriptor_t yDesc, void *y) {
  static const char fn[] = "cudnnConvolutionForward";
  TRACE("%s x=%p w=%p y=%p algo %d ws %p/%zu alpha %g beta %g", fn, x, w, y, (int)algo, workSpace, workSpaceSizeInBytes,
        alpha ? *(const float *)alpha : 0.0, beta ? *(const float *)beta : 0.0);
  fake_geom g;
  cudnnStatus_t s = fake_geometry(fn, xDesc, wDesc, convDesc, yDesc, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if ((int)algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT) return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: algo %d", fn, (int)algo);
  if ((s = fake_exec_common(fn, handle, alpha, beta, x, w, y, workSpace, workSpaceSizeInBytes)) != CUDNN_STATUS_SUCCESS) return s;
  uintptr_t xl, xh, yl, yh, wl = (uintptr_t)w, wh = wl + (size_t)g.K * g.Cg * g.R * g.S * sizeof(float);
  fake_extent(x, xDesc->dim, xDesc->stride, &xl, &xh);
  fake_extent(y, yDesc->dim, yDesc->stride, &yl, &yh);
  if (fake_overlap(yl, yh, xl, xh) || fake_overlap(yl, yh, wl, wh))
    return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: the output y overlaps the input x or the filter w", fn);
  if (fake_conv_captured((fake_conv_call){FAKE_CONV_FWD, handle, *(const float *)alpha, *(const float *)beta, xDesc, x, wDesc, w,
                                          convDesc, (int)algo, workSpace, workSpaceSizeInBytes, yDesc, y}))
    return CUDNN_STATUS_SUCCESS;
  const float *X = x, *Wt = w;
  float *Y = y, a = *(const float *)alpha, b = *(const float *)beta;
  for (int n = 0; n < g.N; n++)
    for (int k = 0; k < g.K; k++) {
      int gi = k / g.Kg;
      for (int oh = 0; oh < g.OH; oh++)
        for (int ow = 0; ow < g.OW; ow++) {
          double acc = 0.0;
          for (int c = 0; c < g.Cg; c++)
            for (int r = 0; r < g.R; r++) {
              int ih = oh * g.sh - g.ph + r * g.dh;
              if (ih < 0 || ih >= g.H) continue;
              for (int q = 0; q < g.S; q++) {
                int iw = ow * g.sw - g.pw + q * g.dw;
                if (iw < 0 || iw >= g.W) continue;
                acc += (double)X[fake_xidx(&g, n, gi * g.Cg + c, ih, iw)] * Wt[fake_widx(&g, k, c, r, q)];
              }
            }
          float *o = &Y[fake_yidx(&g, n, k, oh, ow)];
          *o = fake_blend(a, acc, b, o);
        }
    }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
                                                       const cudnnFilterDescriptor_t wDesc, const void *w,
                                                       const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                                       const cudnnConvolutionDescriptor_t convDesc,
                                                       cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
                                                       size_t workSpaceSizeInBytes, const void *beta,
                                                       const cudnnTensorDescriptor_t dxDesc, void *dx) {
  static const char fn[] = "cudnnConvolutionBackwardData";
  TRACE("%s w=%p dy=%p dx=%p algo %d ws %p/%zu alpha %g beta %g", fn, w, dy, dx, (int)algo, workSpace,
        workSpaceSizeInBytes, alpha ? *(const float *)alpha : 0.0, beta ? *(const float *)beta : 0.0);
  fake_geom g;
  cudnnStatus_t s = fake_geometry(fn, dxDesc, wDesc, convDesc, dyDesc, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if ((int)algo < 0 || algo >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT) return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: algo %d", fn, (int)algo);
  if ((s = fake_exec_common(fn, handle, alpha, beta, w, dy, dx, workSpace, workSpaceSizeInBytes)) != CUDNN_STATUS_SUCCESS) return s;
  uintptr_t xl, xh, yl, yh, wl = (uintptr_t)w, wh = wl + (size_t)g.K * g.Cg * g.R * g.S * sizeof(float);
  fake_extent(dx, dxDesc->dim, dxDesc->stride, &xl, &xh);
  fake_extent(dy, dyDesc->dim, dyDesc->stride, &yl, &yh);
  if (fake_overlap(xl, xh, yl, yh) || fake_overlap(xl, xh, wl, wh))
    return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: the output dx overlaps the input dy or the filter w", fn);
  if (fake_conv_captured((fake_conv_call){FAKE_CONV_BWD_DATA, handle, *(const float *)alpha, *(const float *)beta, wDesc, w, dyDesc,
                                          dy, convDesc, (int)algo, workSpace, workSpaceSizeInBytes, dxDesc, dx}))
    return CUDNN_STATUS_SUCCESS;
  const float *DY = dy, *Wt = w;
  float *DX = dx, a = *(const float *)alpha, b = *(const float *)beta;
  /* dx[n, c, ih, iw] = sum over the filters k of c's group and the taps (r, q) with
   * ih = oh * sh - ph + r * dh and iw = ow * sw - pw + q * dw for an output (oh, ow). */
  for (int n = 0; n < g.N; n++)
    for (int ci = 0; ci < g.C; ci++) {
      int gi = ci / g.Cg, c = ci % g.Cg;
      for (int ih = 0; ih < g.H; ih++)
        for (int iw = 0; iw < g.W; iw++) {
          double acc = 0.0;
          for (int k = gi * g.Kg; k < (gi + 1) * g.Kg; k++)
            for (int r = 0; r < g.R; r++) {
              int th = ih + g.ph - r * g.dh;
              if (th < 0 || th % g.sh) continue;
              int oh = th / g.sh;
              if (oh >= g.OH) continue;
              for (int q = 0; q < g.S; q++) {
                int tw = iw + g.pw - q * g.dw;
                if (tw < 0 || tw % g.sw) continue;
                int ow = tw / g.sw;
                if (ow >= g.OW) continue;
                acc += (double)DY[fake_yidx(&g, n, k, oh, ow)] * Wt[fake_widx(&g, k, c, r, q)];
              }
            }
          float *o = &DX[fake_xidx(&g, n, ci, ih, iw)];
          *o = fake_blend(a, acc, b, o);
        }
    }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
                                                         const cudnnTensorDescriptor_t xDesc, const void *x,
                                                         const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                                         const cudnnConvolutionDescriptor_t convDesc,
                                                         cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace,
                                                         size_t workSpaceSizeInBytes, const void *beta,
                                                         const cudnnFilterDescriptor_t dwDesc, void *dw) {
  static const char fn[] = "cudnnConvolutionBackwardFilter";
  TRACE("%s x=%p dy=%p dw=%p algo %d ws %p/%zu alpha %g beta %g", fn, x, dy, dw, (int)algo, workSpace,
        workSpaceSizeInBytes, alpha ? *(const float *)alpha : 0.0, beta ? *(const float *)beta : 0.0);
  fake_geom g;
  cudnnStatus_t s = fake_geometry(fn, xDesc, dwDesc, convDesc, dyDesc, &g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if ((int)algo < 0 || algo >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT) return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: algo %d", fn, (int)algo);
  if (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD)
    return fake_err(CUDNN_STATUS_NOT_SUPPORTED, "%s: CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD is not implemented", fn);
  if ((s = fake_exec_common(fn, handle, alpha, beta, x, dy, dw, workSpace, workSpaceSizeInBytes)) != CUDNN_STATUS_SUCCESS) return s;
  uintptr_t xl, xh, yl, yh, wl = (uintptr_t)dw, wh = wl + (size_t)g.K * g.Cg * g.R * g.S * sizeof(float);
  fake_extent(x, xDesc->dim, xDesc->stride, &xl, &xh);
  fake_extent(dy, dyDesc->dim, dyDesc->stride, &yl, &yh);
  if (fake_overlap(wl, wh, xl, xh) || fake_overlap(wl, wh, yl, yh))
    return fake_err(CUDNN_STATUS_BAD_PARAM, "%s: the output dw overlaps the input x or dy", fn);
  if (fake_conv_captured((fake_conv_call){FAKE_CONV_BWD_FILTER, handle, *(const float *)alpha, *(const float *)beta, xDesc, x,
                                          dyDesc, dy, convDesc, (int)algo, workSpace, workSpaceSizeInBytes, dwDesc, dw}))
    return CUDNN_STATUS_SUCCESS;
  const float *X = x, *DY = dy;
  float *DW = dw, a = *(const float *)alpha, b = *(const float *)beta;
  for (int k = 0; k < g.K; k++) {
    int gi = k / g.Kg;
    for (int c = 0; c < g.Cg; c++)
      for (int r = 0; r < g.R; r++)
        for (int q = 0; q < g.S; q++) {   /* tap (r, q) of the cross-correlation */
          double acc = 0.0;
          for (int n = 0; n < g.N; n++)
            for (int oh = 0; oh < g.OH; oh++) {
              int ih = oh * g.sh - g.ph + r * g.dh;
              if (ih < 0 || ih >= g.H) continue;
              for (int ow = 0; ow < g.OW; ow++) {
                int iw = ow * g.sw - g.pw + q * g.dw;
                if (iw < 0 || iw >= g.W) continue;
                acc += (double)X[fake_xidx(&g, n, gi * g.Cg + c, ih, iw)] * DY[fake_yidx(&g, n, k, oh, ow)];
              }
            }
          float *o = &DW[fake_widx(&g, k, c, r, q)];
          *o = fake_blend(a, acc, b, o);
        }
  }
  return CUDNN_STATUS_SUCCESS;
}
