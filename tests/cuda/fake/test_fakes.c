/* test_fakes.c — checks the fake cuBLAS and cuDNN (fake_cublas.c, fake_cudnn.c) against naive
 * references written here from the libraries' documented definitions, independently of the
 * fakes' loops: GEMM both in cuBLAS's column-major terms and through the row-major <=>
 * column-major identity rtc_blas.c relies on; convolutions by one scatter loop over row-major
 * NCHW (forward, data gradient and filter gradient at once) where the fake gathers per output.
 * The libraries are opened with dlopen from the build's fakecuda/ as the runtime opens them. */
#define _POSIX_C_SOURCE 200809L   /* setenv, unsetenv */

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>
#include <cudnn.h>

static int fails, checks;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    checks++;                                                         \
    if (!(cond)) {                                                    \
      fails++;                                                        \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
    }                                                                 \
  } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {   /* uniform in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "FAIL: no %s: %s\n", name, dlerror());
    exit(1);
  }
  return p;
}

static int close_to(double got, double want) { return fabs(got - want) <= 1e-5 * (1.0 + fabs(want)); }

/* ---- cuBLAS ------------------------------------------------------------------------------ */

#define CB_FNS(X)                                                                                    \
  X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasSetMathMode) X(cublasGetStatusString) \
  X(cublasSgemm_v2) X(cublasSgemmStridedBatched)
static struct {
#define F(f) __typeof__(f) *f;
  CB_FNS(F)
#undef F
} cb;

/* Element (r, c) of a column-major matrix, cuBLAS's storage. */
#define CM(X, ld, r, c) ((X)[(size_t)(r) + (size_t)(c) * (size_t)(ld)])

/* One sgemm in column-major terms: A is (ta ? k x m : m x k) stored with lda = rows + pad, etc. */
static void gemm_case(cublasHandle_t h, int ta, int tb, int m, int n, int k, int pad, float alpha, float beta) {
  int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int lda = ar + pad, ldb = br + pad + 1, ldc = m + pad;
  float *A = malloc(sizeof(float) * lda * ac), *B = malloc(sizeof(float) * ldb * bc);
  float *C = malloc(sizeof(float) * ldc * n), *C0 = malloc(sizeof(float) * ldc * n);
  for (int i = 0; i < lda * ac; i++) A[i] = frand();
  for (int i = 0; i < ldb * bc; i++) B[i] = frand();
  for (int i = 0; i < ldc * n; i++) C0[i] = beta == 0.0f ? NAN : frand();
  memcpy(C, C0, sizeof(float) * ldc * n);
  int st = cb.cublasSgemm_v2(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, lda,
                             B, ldb, &beta, C, ldc);
  CHECK(st == CUBLAS_STATUS_SUCCESS, "sgemm %d%d status %d", ta, tb, st);
  for (int j = 0; j < ldc * n; j++) {
    int r = j % ldc, c = j / ldc;
    if (r >= m) {
      CHECK(memcmp(&C[j], &C0[j], sizeof(float)) == 0, "sgemm %d%d wrote C's padding at (%d, %d)", ta, tb, r, c);
      continue;
    }
    double want = 0.0;   /* sum over l of op(A)(r, l) op(B)(l, c) */
    for (int l = 0; l < k; l++) {
      double a = ta ? CM(A, lda, l, r) : CM(A, lda, r, l);
      double b = tb ? CM(B, ldb, c, l) : CM(B, ldb, l, c);
      want += a * b;
    }
    want = alpha * want + (beta != 0.0f ? beta * (double)C0[j] : 0.0);
    CHECK(close_to(C[j], want), "sgemm %d%d m%d n%d k%d beta %g: C(%d,%d) = %g, want %g", ta, tb, m, n, k, beta, r, c,
          C[j], want);
  }
  free(A), free(B), free(C), free(C0);
}

/* The identity rtc_blas.c uses: a row-major C (m x n) = op(A) op(B) is the column-major product
 * with the operands swapped and n, m exchanged, the leading dimensions unchanged. */
static void gemm_rowmajor_case(cublasHandle_t h, int ta, int tb, int m, int n, int k) {
  int lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
  int arows = ta ? k : m, brows = tb ? n : k;
  float *A = malloc(sizeof(float) * arows * lda), *B = malloc(sizeof(float) * brows * ldb);
  float *C = malloc(sizeof(float) * m * ldc);
  for (int i = 0; i < arows * lda; i++) A[i] = frand();
  for (int i = 0; i < brows * ldb; i++) B[i] = frand();
  for (int i = 0; i < m * ldc; i++) C[i] = NAN;
  const float one = 1.0f, zero = 0.0f;
  int st = cb.cublasSgemm_v2(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, B, ldb, A,
                             lda, &zero, C, ldc);
  CHECK(st == CUBLAS_STATUS_SUCCESS, "row-major sgemm status %d", st);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < ldc; j++) {
      if (j >= n) {
        CHECK(isnan(C[i * ldc + j]), "row-major sgemm wrote the padding");
        continue;
      }
      double want = 0.0;
      for (int l = 0; l < k; l++) {
        double a = ta ? A[l * lda + i] : A[i * lda + l];   /* row-major op(A)[i][l] */
        double b = tb ? B[j * ldb + l] : B[l * ldb + j];   /* row-major op(B)[l][j] */
        want += a * b;
      }
      CHECK(close_to(C[i * ldc + j], want), "row-major sgemm %d%d: C[%d][%d] = %g, want %g", ta, tb, i, j,
            C[i * ldc + j], want);
    }
  free(A), free(B), free(C);
}

static void gemm_batched_case(cublasHandle_t h) {
  enum { M = 3, N = 4, K = 5, BATCH = 3 };
  /* A: N (m x k, lda M) stacked by M*K; B broadcast (stride 0), transposed: stored n x k, ldb N;
   * C with a gap of 2 floats between matrices (stride M*N + 2). */
  float A[BATCH * M * K], B[N * K], C[BATCH * (M * N + 2)];
  for (int i = 0; i < BATCH * M * K; i++) A[i] = frand();
  for (int i = 0; i < N * K; i++) B[i] = frand();
  for (int i = 0; i < BATCH * (M * N + 2); i++) C[i] = NAN;
  const float one = 1.0f, zero = 0.0f;
  int st = cb.cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, M, N, K, &one, A, M, M * K, B, N, 0, &zero, C, M,
                                        M * N + 2, BATCH);
  CHECK(st == CUBLAS_STATUS_SUCCESS, "strided batched status %d", st);
  for (int b = 0; b < BATCH; b++) {
    const float *Ab = A + b * M * K;
    float *Cb = C + b * (M * N + 2);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double want = 0.0;
        for (int l = 0; l < K; l++) want += (double)CM(Ab, M, i, l) * CM(B, N, j, l);
        CHECK(close_to(CM(Cb, M, i, j), want), "strided batched %d: C(%d,%d) = %g, want %g", b, i, j, CM(Cb, M, i, j), want);
      }
    CHECK(isnan(Cb[M * N]) && isnan(Cb[M * N + 1]), "strided batched %d wrote the gap", b);
  }
  /* beta = 1 accumulates: a second call doubles C. */
  float C2[BATCH * (M * N + 2)];
  memcpy(C2, C, sizeof C);
  st = cb.cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, M, N, K, &one, A, M, M * K, B, N, 0, &one, C, M,
                                    M * N + 2, BATCH);
  CHECK(st == CUBLAS_STATUS_SUCCESS, "strided batched beta 1 status %d", st);
  for (int b = 0; b < BATCH; b++)
    for (int i = 0; i < M * N; i++) {
      int at = b * (M * N + 2) + i;
      CHECK(close_to(C[at], 2.0 * C2[at]), "strided batched beta 1: %g, want %g", C[at], 2.0 * C2[at]);
    }
}

static void test_cublas(void *lib) {
#define L(f) cb.f = (__typeof__(f) *)sym(lib, #f);
  CB_FNS(L)
#undef L
  cublasHandle_t h = NULL;
  CHECK(cb.cublasCreate_v2(&h) == CUBLAS_STATUS_SUCCESS && h, "cublasCreate");
  CHECK(cb.cublasSetMathMode(h, CUBLAS_DEFAULT_MATH) == CUBLAS_STATUS_SUCCESS, "cublasSetMathMode");
  CHECK(cb.cublasSetStream_v2(h, (cudaStream_t)(uintptr_t)0x1234) == CUBLAS_STATUS_SUCCESS, "cublasSetStream");
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      gemm_case(h, ta, tb, 5, 4, 7, 0, 1.0f, 0.0f);
      gemm_case(h, ta, tb, 3, 6, 4, 2, 1.0f, 1.0f);
      gemm_case(h, ta, tb, 4, 3, 9, 1, 0.5f, 0.0f);
      gemm_case(h, ta, tb, 1, 7, 3, 0, 1.0f, 1.0f);
      gemm_rowmajor_case(h, ta, tb, 4, 5, 6);
    }
  gemm_case(h, 0, 0, 3, 3, 0, 0, 1.0f, 0.0f);   /* k = 0: C = 0, NaN not read */
  gemm_batched_case(h);
  float a = 1, z = 0, A[16] = {0}, C[16];
  CHECK(cb.cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &a, A, 3, A, 4, &z, C, 4) == CUBLAS_STATUS_INVALID_VALUE,
        "lda < m must be CUBLAS_STATUS_INVALID_VALUE");
  const char *s = cb.cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE);
  CHECK(s && *s, "cublasGetStatusString");
  CHECK(cb.cublasDestroy_v2(h) == CUBLAS_STATUS_SUCCESS, "cublasDestroy");
}

/* ---- cuDNN ------------------------------------------------------------------------------- */

#define DN_FNS(X)                                                                                              \
  X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetErrorString) X(cudnnGetVersion)                    \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor)                  \
  X(cudnnCreateFilterDescriptor) X(cudnnSetFilterNdDescriptor) X(cudnnDestroyFilterDescriptor)                  \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)                                        \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType) X(cudnnDestroyConvolutionDescriptor)          \
  X(cudnnGetConvolutionNdForwardOutputDim)                                                                      \
  X(cudnnGetConvolutionForwardAlgorithmMaxCount) X(cudnnGetConvolutionForwardAlgorithm_v7)                      \
  X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnConvolutionForward)                                         \
  X(cudnnGetConvolutionBackwardDataAlgorithmMaxCount) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)            \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnConvolutionBackwardData)                               \
  X(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount) X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)        \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) X(cudnnConvolutionBackwardFilter)
static struct {
#define F(f) __typeof__(f) *f;
  DN_FNS(F)
#undef F
} dn;

typedef struct {
  int N, C, H, W, K, G, R, S, ph, pw, sh, sw, dh, dw;
  int conv_mode;   /* 1: CUDNN_CONVOLUTION (flipped filter) */
  float alpha;
} conv_case;

static float *fill(size_t n, int nan) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) p[i] = nan ? NAN : frand();
  return p;
}

/* Compares out against alpha * ref (+ base when base). */
static void compare(const char *what, int ci, const float *out, const double *ref, const float *base, size_t n, float alpha) {
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; i++) {
    double want = alpha * ref[i] + (base ? (double)base[i] : 0.0);
    if (!close_to(out[i], want)) {
      bad++;
      CHECK(0, "conv case %d %s[%zu] = %g, want %g", ci, what, i, out[i], want);
    }
  }
  checks++;
}

static void conv_run(cudnnHandle_t h, int ci, const conv_case *t) {
  int Cg = t->C / t->G, Kg = t->K / t->G;
  int OH = (t->H + 2 * t->ph - t->dh * (t->R - 1) - 1) / t->sh + 1;
  int OW = (t->W + 2 * t->pw - t->dw * (t->S - 1) - 1) / t->sw + 1;
  size_t nx = (size_t)t->N * t->C * t->H * t->W, nw = (size_t)t->K * Cg * t->R * t->S, ny = (size_t)t->N * t->K * OH * OW;
  float *x = fill(nx, 0), *w = fill(nw, 0), *dy = fill(ny, 0);
  double *yr = calloc(ny, sizeof *yr), *dxr = calloc(nx, sizeof *dxr), *dwr = calloc(nw, sizeof *dwr);
  /* The reference: one scatter over every (output, input channel of its group, tap). */
  for (int n = 0; n < t->N; n++)
    for (int k = 0; k < t->K; k++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++)
          for (int c = 0; c < Cg; c++)
            for (int r = 0; r < t->R; r++)
              for (int q = 0; q < t->S; q++) {
                int ih = oh * t->sh - t->ph + r * t->dh, iw = ow * t->sw - t->pw + q * t->dw;
                if (ih < 0 || ih >= t->H || iw < 0 || iw >= t->W) continue;
                int rr = t->conv_mode ? t->R - 1 - r : r, qq = t->conv_mode ? t->S - 1 - q : q;
                size_t xi = (((size_t)n * t->C + (k / Kg) * Cg + c) * t->H + ih) * t->W + iw;
                size_t wi = (((size_t)k * Cg + c) * t->R + rr) * t->S + qq;
                size_t yi = (((size_t)n * t->K + k) * OH + oh) * OW + ow;
                yr[yi] += (double)x[xi] * w[wi];
                dxr[xi] += (double)dy[yi] * w[wi];
                dwr[wi] += (double)x[xi] * dy[yi];
              }
  /* Descriptors as rtc_dnn.c builds them. */
  int xd[4] = {t->N, t->C, t->H, t->W}, yd[4] = {t->N, t->K, OH, OW}, wd[4] = {t->K, Cg, t->R, t->S};
  int xs[4] = {t->C * t->H * t->W, t->H * t->W, t->W, 1}, ys[4] = {t->K * OH * OW, OH * OW, OW, 1};
  int pad[2] = {t->ph, t->pw}, str[2] = {t->sh, t->sw}, dil[2] = {t->dh, t->dw}, got[4] = {0};
  cudnnTensorDescriptor_t xD, yD;
  cudnnFilterDescriptor_t wD;
  cudnnConvolutionDescriptor_t cD;
  int ok = dn.cudnnCreateTensorDescriptor(&xD) == 0 && dn.cudnnCreateTensorDescriptor(&yD) == 0 &&
           dn.cudnnCreateFilterDescriptor(&wD) == 0 && dn.cudnnCreateConvolutionDescriptor(&cD) == 0 &&
           dn.cudnnSetTensorNdDescriptor(xD, CUDNN_DATA_FLOAT, 4, xd, xs) == 0 &&
           dn.cudnnSetTensorNdDescriptor(yD, CUDNN_DATA_FLOAT, 4, yd, ys) == 0 &&
           dn.cudnnSetFilterNdDescriptor(wD, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, wd) == 0 &&
           dn.cudnnSetConvolutionNdDescriptor(cD, 2, pad, str, dil, t->conv_mode ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT) == 0 &&
           dn.cudnnSetConvolutionGroupCount(cD, t->G) == 0 && dn.cudnnSetConvolutionMathType(cD, CUDNN_FMA_MATH) == 0 &&
           dn.cudnnGetConvolutionNdForwardOutputDim(cD, xD, wD, 4, got) == 0;
  CHECK(ok, "conv case %d: descriptors", ci);
  if (!ok) return;
  CHECK(got[0] == yd[0] && got[1] == yd[1] && got[2] == yd[2] && got[3] == yd[3],
        "conv case %d: output dims [%d %d %d %d], want [%d %d %d %d]", ci, got[0], got[1], got[2], got[3], yd[0], yd[1],
        yd[2], yd[3]);

  /* Algorithms: what rtc_dnn.c's ranking accepts (success, not tensor-op math, deterministic). */
  cudnnConvolutionFwdAlgoPerf_t pf[8];
  cudnnConvolutionBwdDataAlgoPerf_t pd[8];
  cudnnConvolutionBwdFilterAlgoPerf_t pw[8];
  int nf = 0, nd = 0, nwf = 0;
  size_t wsf = 1, wsd = 1, wsw = 1;
  CHECK(dn.cudnnGetConvolutionForwardAlgorithm_v7(h, xD, wD, cD, yD, 8, &nf, pf) == 0 && nf >= 1 && pf[0].status == 0 &&
            pf[0].determinism == CUDNN_DETERMINISTIC && pf[0].mathType == CUDNN_FMA_MATH,
        "conv case %d: forward algorithm", ci);
  CHECK(dn.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wD, yD, cD, xD, 8, &nd, pd) == 0 && nd >= 1 && pd[0].status == 0 &&
            pd[0].determinism == CUDNN_DETERMINISTIC && pd[0].mathType == CUDNN_FMA_MATH &&
            pd[0].algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
        "conv case %d: backward-data algorithm", ci);
  CHECK(dn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xD, yD, cD, wD, 8, &nwf, pw) == 0 && nwf >= 1 &&
            pw[0].status == 0 && pw[0].determinism == CUDNN_DETERMINISTIC && pw[0].mathType == CUDNN_FMA_MATH &&
            pw[0].algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && pw[0].algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
        "conv case %d: backward-filter algorithm", ci);
  CHECK(dn.cudnnGetConvolutionForwardWorkspaceSize(h, xD, wD, cD, yD, pf[0].algo, &wsf) == 0 && wsf == 0 &&
            dn.cudnnGetConvolutionBackwardDataWorkspaceSize(h, wD, yD, cD, xD, pd[0].algo, &wsd) == 0 && wsd == 0 &&
            dn.cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xD, yD, cD, wD, pw[0].algo, &wsw) == 0 && wsw == 0,
        "conv case %d: workspace sizes", ci);

  const float a = t->alpha, zero = 0.0f, one = 1.0f;
  for (int acc = 0; acc < 2; acc++) {   /* beta 0 over NaN, then beta 1 over random values */
    float *y = fill(ny, !acc), *dx = fill(nx, !acc), *dw = fill(nw, !acc);
    float *y0 = malloc(sizeof(float) * ny), *dx0 = malloc(sizeof(float) * nx), *dw0 = malloc(sizeof(float) * nw);
    memcpy(y0, y, sizeof(float) * ny), memcpy(dx0, dx, sizeof(float) * nx), memcpy(dw0, dw, sizeof(float) * nw);
    const float *beta = acc ? &one : &zero;
    int s1 = dn.cudnnConvolutionForward(h, &a, xD, x, wD, w, cD, pf[0].algo, NULL, 0, beta, yD, y);
    int s2 = dn.cudnnConvolutionBackwardData(h, &a, wD, w, yD, dy, cD, pd[0].algo, NULL, 0, beta, xD, dx);
    int s3 = dn.cudnnConvolutionBackwardFilter(h, &a, xD, x, yD, dy, cD, pw[0].algo, NULL, 0, beta, wD, dw);
    CHECK(s1 == 0 && s2 == 0 && s3 == 0, "conv case %d: statuses %d %d %d", ci, s1, s2, s3);
    compare(acc ? "y (beta 1)" : "y", ci, y, yr, acc ? y0 : NULL, ny, a);
    compare(acc ? "dx (beta 1)" : "dx", ci, dx, dxr, acc ? dx0 : NULL, nx, a);
    compare(acc ? "dw (beta 1)" : "dw", ci, dw, dwr, acc ? dw0 : NULL, nw, a);
    free(y), free(dx), free(dw), free(y0), free(dx0), free(dw0);
  }

  /* Refusals: in-place output, a wrong output shape. */
  float *buf = fill(nx > ny ? nx : ny, 0);
  CHECK(dn.cudnnConvolutionForward(h, &one, xD, buf, wD, w, cD, pf[0].algo, NULL, 0, &zero, yD, buf) == CUDNN_STATUS_BAD_PARAM,
        "conv case %d: an in-place forward must be refused", ci);
  free(buf);
  int bad[4] = {yd[0], yd[1], yd[2] + 1, yd[3]}, bads[4] = {yd[1] * (yd[2] + 1) * yd[3], (yd[2] + 1) * yd[3], yd[3], 1};
  cudnnTensorDescriptor_t bD;
  dn.cudnnCreateTensorDescriptor(&bD);
  dn.cudnnSetTensorNdDescriptor(bD, CUDNN_DATA_FLOAT, 4, bad, bads);
  float *yb = fill(ny + (size_t)yd[0] * yd[1] * yd[3], 1);
  CHECK(dn.cudnnConvolutionForward(h, &one, xD, x, wD, w, cD, pf[0].algo, NULL, 0, &zero, bD, yb) == CUDNN_STATUS_BAD_PARAM,
        "conv case %d: a wrong output shape must be refused", ci);
  free(yb);
  dn.cudnnDestroyTensorDescriptor(bD);

  /* A workspace asked for through KILN_FAKE_CUDNN_WORKSPACE must be given, and is clobbered. */
  setenv("KILN_FAKE_CUDNN_WORKSPACE", "64", 1);
  size_t ws = 0;
  unsigned char wsbuf[64] = {0};
  float *y = fill(ny, 1);
  CHECK(dn.cudnnGetConvolutionForwardWorkspaceSize(h, xD, wD, cD, yD, pf[0].algo, &ws) == 0 && ws == 64,
        "conv case %d: workspace size from the environment", ci);
  CHECK(dn.cudnnConvolutionForward(h, &one, xD, x, wD, w, cD, pf[0].algo, NULL, 0, &zero, yD, y) == CUDNN_STATUS_BAD_PARAM,
        "conv case %d: a missing workspace must be refused", ci);
  CHECK(dn.cudnnConvolutionForward(h, &one, xD, x, wD, w, cD, pf[0].algo, wsbuf, sizeof wsbuf, &zero, yD, y) == 0 &&
            wsbuf[0] == 0xff && wsbuf[63] == 0xff,
        "conv case %d: workspace given and clobbered", ci);
  unsetenv("KILN_FAKE_CUDNN_WORKSPACE");
  free(y);

  dn.cudnnDestroyTensorDescriptor(xD), dn.cudnnDestroyTensorDescriptor(yD);
  dn.cudnnDestroyFilterDescriptor(wD), dn.cudnnDestroyConvolutionDescriptor(cD);
  free(x), free(w), free(dy), free(yr), free(dxr), free(dwr);
}

static void test_cudnn(void *lib) {
#define L(f) dn.f = (__typeof__(f) *)sym(lib, #f);
  DN_FNS(L)
#undef L
  CHECK(dn.cudnnGetVersion() / 10000 == 9, "cudnnGetVersion %zu", dn.cudnnGetVersion());
  CHECK(strcmp(dn.cudnnGetErrorString(CUDNN_STATUS_EXECUTION_FAILED), "CUDNN_STATUS_EXECUTION_FAILED") == 0,
        "cudnnGetErrorString");
  cudnnHandle_t h = NULL;
  CHECK(dn.cudnnCreate(&h) == 0 && h, "cudnnCreate");
  CHECK(dn.cudnnSetStream(h, (cudaStream_t)(uintptr_t)0x1234) == 0, "cudnnSetStream");
  int mc = 0;
  CHECK(dn.cudnnGetConvolutionForwardAlgorithmMaxCount(h, &mc) == 0 && mc >= 1, "forward max count");
  CHECK(dn.cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &mc) == 0 && mc >= 1, "backward-data max count");
  CHECK(dn.cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &mc) == 0 && mc >= 1, "backward-filter max count");
  static const conv_case cases[] = {
      /* N C  H  W  K  G  R  S  ph pw sh sw dh dw mode alpha */
      {2, 4, 7, 6, 6, 2, 3, 3, 1, 1, 2, 2, 2, 2, 0, 1.0f},    /* stride 2, pad 1, dilation 2, groups 2 */
      {2, 3, 1, 9, 4, 1, 1, 3, 0, 1, 1, 1, 1, 1, 0, 1.0f},    /* conv1d as rtc_dnn.c expresses it: H = 1 */
      {1, 2, 5, 10, 3, 1, 2, 3, 2, 0, 1, 2, 1, 3, 1, 1.0f},   /* CUDNN_CONVOLUTION, per-axis geometry */
      {2, 4, 5, 5, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0.5f},    /* depthwise, alpha 0.5 */
      {1, 2, 6, 6, 2, 1, 2, 2, 0, 0, 3, 3, 1, 1, 0, 1.0f},    /* stride 3 > kernel: uncovered inputs get dx = 0 */
      {3, 6, 8, 7, 4, 2, 3, 2, 2, 1, 2, 3, 1, 2, 0, 1.0f},    /* groups 2, pads > 1, mixed */
  };
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) conv_run(h, i, &cases[i]);

  /* Descriptors that do not agree: 4 channels in 3 groups. */
  cudnnConvolutionDescriptor_t cD;
  dn.cudnnCreateConvolutionDescriptor(&cD);
  int pad[2] = {0, 0}, one2[2] = {1, 1}, out[4];
  dn.cudnnSetConvolutionNdDescriptor(cD, 2, pad, one2, one2, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  dn.cudnnSetConvolutionGroupCount(cD, 3);
  cudnnTensorDescriptor_t xD;
  cudnnFilterDescriptor_t wD;
  int xd[4] = {1, 4, 3, 3}, xs[4] = {36, 9, 3, 1}, wd[4] = {3, 1, 1, 1};
  dn.cudnnCreateTensorDescriptor(&xD), dn.cudnnCreateFilterDescriptor(&wD);
  dn.cudnnSetTensorNdDescriptor(xD, CUDNN_DATA_FLOAT, 4, xd, xs);
  dn.cudnnSetFilterNdDescriptor(wD, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, wd);
  CHECK(dn.cudnnGetConvolutionNdForwardOutputDim(cD, xD, wD, 4, out) == CUDNN_STATUS_BAD_PARAM,
        "groups that do not divide the channels must be refused");
  dn.cudnnDestroyTensorDescriptor(xD), dn.cudnnDestroyFilterDescriptor(wD), dn.cudnnDestroyConvolutionDescriptor(cD);
  CHECK(dn.cudnnDestroy(h) == 0, "cudnnDestroy");
}

int main(void) {
  void *cublas = dlopen(KILN_FAKECUDA_DIR "/libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  void *cudnn = dlopen(KILN_FAKECUDA_DIR "/libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!cublas || !cudnn) {
    fprintf(stderr, "FAIL: cannot open the fakes in %s: %s\n", KILN_FAKECUDA_DIR, dlerror());
    return 1;
  }
  test_cublas(cublas);
  test_cudnn(cudnn);
  printf("%s: %d checks, %d failed\n", fails ? "FAIL" : "ok", checks, fails);
  return fails != 0;
}
