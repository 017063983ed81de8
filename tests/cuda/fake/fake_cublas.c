/* fake_cublas.c — a host emulation of the part of cuBLAS that runtime/cuda/rtc_blas.c resolves,
 * built as libcublas.so.13 so that, first on LD_LIBRARY_PATH, it stands in for the real library
 * when the fake libcuda.so.1 (device pointers are host pointers) runs a CUDA model on the CPU.
 *
 * Semantics as cuBLAS documents them: column-major, C = alpha op(A) op(B) + beta C with op(A)
 * m x k, op(B) k x n, C m x n; element (i, j) of a matrix X with leading dimension ldX at
 * X[i + j * ldX]; beta == 0 means C is not read (a NaN there does not propagate); m == 0 or n == 0
 * does nothing; k == 0 or alpha == 0 scales C by beta. Arguments are checked as cuBLAS checks them
 * (CUBLAS_STATUS_INVALID_VALUE for a negative size or a leading dimension below the matrix's
 * rows). Products accumulate in double and round once. The pointer mode is the host's (the
 * default, the only one rtc_blas.c uses). Work runs synchronously at the call, whatever the stream.
 *
 * KILN_FAKE_TRACE=1 in the environment prints every call on stderr. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublas_api.h>

#include "fake_capture.h"

#define FAKE_MAGIC 0x6b696c6e63626c73ull   /* "kilncbls" */

struct cublasContext {
  uint64_t magic;
  cudaStream_t stream;
  cublasMath_t math;
};

static int fake_trace(void) {
  static int t = -1;
  if (t < 0) {
    const char *e = getenv("KILN_FAKE_TRACE");
    t = e && *e && *e != '0';
  }
  return t;
}

#define TRACE(...)                                       \
  do {                                                   \
    if (fake_trace()) {                                  \
      fprintf(stderr, "[fake cublas] " __VA_ARGS__);     \
      fputc('\n', stderr);                               \
    }                                                    \
  } while (0)

static int fake_ok(cublasHandle_t h) { return h && h->magic == FAKE_MAGIC; }

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  cublasHandle_t h = calloc(1, sizeof *h);
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  h->magic = FAKE_MAGIC;
  h->stream = NULL;
  h->math = CUBLAS_DEFAULT_MATH;
  *handle = h;
  TRACE("cublasCreate -> %p", (void *)h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  TRACE("cublasDestroy %p", (void *)handle);
  if (!fake_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->magic = 0;
  free(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  TRACE("cublasSetStream %p %p", (void *)handle, (void *)streamId);
  if (!fake_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

/* The workspace must be given (the runtime hands over its scratch): NULL with a size, or a
 * size that is not a multiple of 256 bytes (cuBLAS's alignment rule), is refused. */
cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes) {
  TRACE("cublasSetWorkspace %p %p %zu", (void *)handle, workspace, bytes);
  if (!fake_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((bytes && !workspace) || bytes % 256) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId) {
  if (!fake_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!streamId) return CUBLAS_STATUS_INVALID_VALUE;
  *streamId = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  TRACE("cublasSetMathMode %p %d", (void *)handle, (int)mode);
  if (!fake_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch ((int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) {
  case CUBLAS_DEFAULT_MATH: case CUBLAS_TENSOR_OP_MATH: case CUBLAS_PEDANTIC_MATH: case CUBLAS_TF32_TENSOR_OP_MATH:
  case CUBLAS_FP32_EMULATED_BF16X9_MATH: case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH:
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
  default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t CUBLASWINAPI cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
  if (!fake_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

const char *CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS: return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
  case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

/* 1 for CUBLAS_OP_T / CUBLAS_OP_C (real data: the same), 0 for CUBLAS_OP_N, -1 otherwise. */
static int fake_op(cublasOperation_t op) {
  switch (op) {
  case CUBLAS_OP_N: return 0;
  case CUBLAS_OP_T: case CUBLAS_OP_C: return 1;
  default: return -1;
  }
}

static cublasStatus_t fake_check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                                 int64_t k, const float *alpha, int64_t lda, int64_t ldb, const float *beta,
                                 int64_t ldc, int64_t batch) {
  if (!fake_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  int a = fake_op(ta), b = fake_op(tb);
  if (a < 0 || b < 0 || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  int64_t arows = a ? k : m, brows = b ? n : k;
  if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

/* One product, arguments already checked. */
static void fake_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double acc = 0.0;
      if (alpha != 0.0f)
        for (int64_t l = 0; l < k; l++) {
          double av = ta ? A[l + i * lda] : A[i + l * lda];
          double bv = tb ? B[j + l * ldb] : B[l + j * ldb];
          acc += av * bv;
        }
      double r = (double)alpha * acc;
      if (beta != 0.0f) r += (double)beta * C[i + j * ldc];
      C[i + j * ldc] = (float)r;
    }
}

/* A captured GEMM: every argument, the scalars by value. */
typedef struct {
  cublasHandle_t h;
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc, batch;
  float alpha, beta;
  const float *A, *B;
  float *C;
  long long sa, sb, sc;
} fake_gemm_call;

static void fake_gemm_replay(void *p) {
  const fake_gemm_call *g = p;
  if (g->batch < 0)
    cublasSgemm_v2(g->h, g->ta, g->tb, g->m, g->n, g->k, &g->alpha, g->A, g->lda, g->B, g->ldb, &g->beta, g->C, g->ldc);
  else
    cublasSgemmStridedBatched(g->h, g->ta, g->tb, g->m, g->n, g->k, &g->alpha, g->A, g->lda, g->sa, g->B, g->ldb, g->sb,
                              &g->beta, g->C, g->ldc, g->sc, g->batch);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const float *alpha, const float *A, int lda,
                                           const float *B, int ldb, const float *beta, float *C, int ldc) {
  TRACE("cublasSgemm %c%c m=%d n=%d k=%d alpha=%g A=%p lda=%d B=%p ldb=%d beta=%g C=%p ldc=%d",
        transa == CUBLAS_OP_N ? 'N' : 'T', transb == CUBLAS_OP_N ? 'N' : 'T', m, n, k, alpha ? *alpha : 0.0,
        (const void *)A, lda, (const void *)B, ldb, beta ? *beta : 0.0, (void *)C, ldc);
  cublasStatus_t s = fake_check(handle, transa, transb, m, n, k, alpha, lda, ldb, beta, ldc, 1);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!C || (k > 0 && *alpha != 0.0f && (!A || !B))) return CUBLAS_STATUS_INVALID_VALUE;
  if (fake_capture_on()) {
    fake_gemm_call g = {handle, transa, transb, m, n, k, lda, ldb, ldc, -1, *alpha, *beta, A, B, C, 0, 0, 0};
    fake_capture_defer(fake_gemm_replay, &g, sizeof g);
    return CUBLAS_STATUS_SUCCESS;
  }
  fake_gemm(fake_op(transa), fake_op(transb), m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k,
                                                      const float *alpha, const float *A, int lda,
                                                      long long int strideA, const float *B, int ldb,
                                                      long long int strideB, const float *beta, float *C, int ldc,
                                                      long long int strideC, int batchCount) {
  TRACE("cublasSgemmStridedBatched %c%c m=%d n=%d k=%d alpha=%g A=%p lda=%d sA=%lld B=%p ldb=%d sB=%lld beta=%g "
        "C=%p ldc=%d sC=%lld batch=%d",
        transa == CUBLAS_OP_N ? 'N' : 'T', transb == CUBLAS_OP_N ? 'N' : 'T', m, n, k, alpha ? *alpha : 0.0,
        (const void *)A, lda, strideA, (const void *)B, ldb, strideB, beta ? *beta : 0.0, (void *)C, ldc, strideC,
        batchCount);
  cublasStatus_t s = fake_check(handle, transa, transb, m, n, k, alpha, lda, ldb, beta, ldc, batchCount);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  if (!C || (k > 0 && *alpha != 0.0f && (!A || !B))) return CUBLAS_STATUS_INVALID_VALUE;
  if (fake_capture_on()) {
    fake_gemm_call g = {handle, transa, transb, m, n, k, lda, ldb, ldc, batchCount, *alpha, *beta, A, B, C, strideA, strideB, strideC};
    fake_capture_defer(fake_gemm_replay, &g, sizeof g);
    return CUBLAS_STATUS_SUCCESS;
  }
  for (int64_t b = 0; b < batchCount; b++)
    fake_gemm(fake_op(transa), fake_op(transb), m, n, k, *alpha, A ? A + b * strideA : NULL, lda,
              B ? B + b * strideB : NULL, ldb, *beta, C + b * strideC, ldc);
  return CUBLAS_STATUS_SUCCESS;
}
