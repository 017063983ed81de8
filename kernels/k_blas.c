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
/* With an epilogue, a block of C stays within this many floats (128 KiB, well inside L2), so
 * the epilogue reads it from cache. */
#define K_SGEMM_EPI_FLOATS (32 * 1024)

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
  k_sgemm_after_fn after;
  void *ctx;
} k_sgemm_job;

static void k_sgemm_call(const k_sgemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const float *A = j->A + (j->ta == CblasNoTrans ? m0 * j->lda : m0);
  const float *B = j->B + (j->tb == CblasNoTrans ? n0 : n0 * j->ldb);
  cblas_sgemm(CblasRowMajor, j->ta, j->tb, (int)(m1 - m0), (int)(n1 - n0), (int)j->K, j->alpha,
              A, (int)j->lda, B, (int)j->ldb, j->beta, j->C + m0 * j->ldc + n0, (int)j->ldc);
}

static void k_sgemm_block(void *ctx, int64_t lo, int64_t hi) {
  const k_sgemm_job *j = ctx;
  if (j->by_rows) k_sgemm_call(j, lo, hi, 0, j->N);
  else k_sgemm_call(j, 0, j->M, lo, hi);
  if (j->after) j->after(j->ctx, lo, hi);
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
  k_sgemm_job j = {ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C, M >= N, NULL, NULL};
  int64_t dim = j.by_rows ? M : N;
  /* inside another loop's chunk the blocks would run one after another: one call packs less */
  int64_t grain = k_parallel_nested() ? dim : k_sgemm_grain(dim, M * N * (K > 0 ? K : 1));
  k_parallel_for(dim, grain, k_sgemm_block, &j);
}

/* The epilogue over rows [lo, hi) of a product already complete. */
typedef struct { k_sgemm_after_fn after; void *ctx; } k_sgemm_after_job;

static void k_sgemm_after_block(void *ctx, int64_t lo, int64_t hi) {
  const k_sgemm_after_job *j = ctx;
  j->after(j->ctx, lo, hi);
}

void k_sgemm_rows(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc, k_sgemm_after_fn after, void *ctx) {
  pthread_once(&g_blas_once, k_blas_single_thread);
  if (M <= 0 || N <= 0) return;
  int64_t cap = K_SGEMM_EPI_FLOATS / N > 0 ? K_SGEMM_EPI_FLOATS / N : 1;
  if (M < N) {
    /* k_sgemm splits a wide product by columns (blocks of rows would pack all of B once per
     * block: MLP and LeNet training lost 10-15% that way); C is then at most N x N and the
     * epilogue follows over blocks of rows */
    k_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    k_sgemm_after_job aj = {after, ctx};
    k_parallel_for(M, cap, k_sgemm_after_block, &aj);
    return;
  }
  k_sgemm_job j = {ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C, 1, after, ctx};
  int64_t grain = k_parallel_nested() ? M : k_sgemm_grain(M, M * N * (K > 0 ? K : 1));
  if (grain > cap) grain = cap;
  k_parallel_for(M, grain, k_sgemm_block, &j);
}
