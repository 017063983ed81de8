/* k_blas.c — k_sgemm: OpenBLAS kept single-threaded, and large products split into blocks of
 * C over the k_parallel pool (contract in k_blas.h). */
#include "k_blas.h"

#include <pthread.h>

#include "k_parallel.h"

/* Below this many multiply-adds a product stays whole: waking the pool (~10 us) would cost
 * more than the second core saves. */
#define K_SGEMM_PAR_MIN (1 << 20)
/* At most this many blocks per product, each at least K_SGEMM_MIN_DIM rows or columns (the
 * other operand is packed once per block). */
#define K_SGEMM_MAX_BLOCKS 8
#define K_SGEMM_MIN_DIM 32

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

/* OpenBLAS's threads spin (sched_yield) between its calls while our single-threaded work
 * runs, and would oversubscribe the cores under the pool: keep it on the caller's thread. */
static void k_blas_single_thread(void) { openblas_set_num_threads(1); }

typedef struct {
  CBLAS_TRANSPOSE ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  const float *A, *B;
  float *C;
  int by_rows;
} k_sgemm_job;

/* y (n elements, stride incy) = alpha op(M) x + beta y as cblas_sgemv, op(M) being n x k.
 * beta 0 clears y first rather than trusting BLAS not to compute 0 * y: an unwritten buffer
 * may hold NaN. */
static void k_sgemv(CBLAS_TRANSPOSE t, int64_t n, int64_t k, float alpha, const float *M, int64_t ldm,
                    const float *x, int64_t incx, float beta, float *y, int64_t incy) {
  if (beta == 0.0f)
    for (int64_t i = 0; i < n; i++) y[i * incy] = 0.0f;
  int64_t rows = t == CblasNoTrans ? n : k, cols = t == CblasNoTrans ? k : n;
  cblas_sgemv(CblasRowMajor, t, (int)rows, (int)cols, alpha, M, (int)ldm, x, (int)incx, beta == 0.0f ? 1.0f : beta,
              y, (int)incy);
}

/* A product with one row or one column of C is a matrix-vector product: sgemm would pack the
 * whole matrix operand on every call (at batch 1, a fully_connected layer's weights: 54% of
 * the MLP's predict time), where sgemv reads it once. */
static int k_sgemm_as_gemv(const k_sgemm_job *j, int64_t m, int64_t n, const float *A, const float *B, float *C) {
  CBLAS_TRANSPOSE flip_b = j->tb == CblasNoTrans ? CblasTrans : CblasNoTrans;
  if (m == 1)   /* C row = op(B)^T . (row of op(A)) */
    k_sgemv(flip_b, n, j->K, j->alpha, B, j->ldb, A, j->ta == CblasNoTrans ? 1 : j->lda, j->beta, C, 1);
  else if (n == 1)   /* C column = op(A) . (column of op(B)) */
    k_sgemv(j->ta, m, j->K, j->alpha, A, j->lda, B, j->tb == CblasNoTrans ? j->ldb : 1, j->beta, C, j->ldc);
  return m == 1 || n == 1;
}

static void k_sgemm_call(const k_sgemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const float *A = j->A + (j->ta == CblasNoTrans ? m0 * j->lda : m0);
  const float *B = j->B + (j->tb == CblasNoTrans ? n0 : n0 * j->ldb);
  if (j->K > 0 && k_sgemm_as_gemv(j, m1 - m0, n1 - n0, A, B, j->C + m0 * j->ldc + n0)) return;
  cblas_sgemm(CblasRowMajor, j->ta, j->tb, (int)(m1 - m0), (int)(n1 - n0), (int)j->K, j->alpha,
              A, (int)j->lda, B, (int)j->ldb, j->beta, j->C + m0 * j->ldc + n0, (int)j->ldc);
}

static void k_sgemm_block(void *ctx, int64_t lo, int64_t hi) {
  const k_sgemm_job *j = ctx;
  if (j->by_rows) k_sgemm_call(j, lo, hi, 0, j->N);
  else k_sgemm_call(j, 0, j->M, lo, hi);
}

/* Rows or columns per block: as few blocks as keep each above the minimum work. */
static int64_t k_sgemm_grain(int64_t dim, int64_t macs) {
  int64_t blocks = macs / K_SGEMM_PAR_MIN;
  if (blocks > K_SGEMM_MAX_BLOCKS) blocks = K_SGEMM_MAX_BLOCKS;
  if (blocks > dim / K_SGEMM_MIN_DIM) blocks = dim / K_SGEMM_MIN_DIM;
  if (blocks < 1) blocks = 1;
  return (dim + blocks - 1) / blocks;
}

void k_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
             int64_t ldc) {
  pthread_once(&g_blas_once, k_blas_single_thread);
  if (M <= 0 || N <= 0) return;
  k_sgemm_job j = {ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C, M >= N};
  int64_t dim = j.by_rows ? M : N;
  /* inside another loop's chunk the blocks would run one after another: one call packs less */
  int64_t grain = k_parallel_nested() ? dim : k_sgemm_grain(dim, M * N * (K > 0 ? K : 1));
  k_parallel_for(dim, grain, k_sgemm_block, &j);
}
