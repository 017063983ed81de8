/* k_blas.c — k_sgemm: large products split into blocks of C over the k_parallel pool, each
 * block computed by Kiln's own GEMM (k_sgemm.c) or, without AVX2 + FMA or when asked, by
 * OpenBLAS kept single-threaded (contract in k_blas.h). */
#include "k_blas.h"
#include "k_profile.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "k_parallel.h"
#include "k_sgemm.h"

/* Below this many multiply-adds a product stays whole: waking the pool (~10 us) would cost
 * more than the second core saves. */
#define K_SGEMM_PAR_MIN (1 << 20)
/* A matrix-vector product is bound by reading its matrix, not by its multiply-adds: it is
 * split once the matrix holds this many floats (512 KiB, ~17 us of one core's reads). At
 * batch 1, MobileNetV2's classifier (1280 x 1000, 5 MB) ran as one block, on one thread. */
#define K_SGEMV_PAR_MIN (128 * 1024)
/* At most this many blocks per product, each at least K_SGEMM_MIN_DIM rows or columns. */
#define K_SGEMM_MAX_BLOCKS 8
#define K_SGEMM_MIN_DIM 32
/* With an epilogue, a block of C stays within this many floats (128 KiB, well inside L2), so
 * the epilogue reads it from cache; but only while op(B) is at most twice that. Each extra block
 * of rows streams all of op(B) again, which costs more than the epilogue's trip to L3 and back
 * saves once op(B) is larger: ViT-B/16's second MLP layer ([1576, 3072] x [3072, 768], its bias
 * and residual add as the epilogue) in 38 blocks of 42 rows instead of 8 ran its batch-8 predict
 * 15% slower on two Zen 5 threads. Then the blocks stay as the product picks them, and the
 * epilogue follows each. */
#define K_SGEMM_EPI_FLOATS (32 * 1024)
/* Floats of op(B) per chunk of the shared packing (k_sgemm_pack_shared), and the most it
 * allocates (16 MiB; a larger op(B) is packed by each block, in L2-sized pieces). */
#define K_SGEMM_PACK_GRAIN (64 * 1024)
#define K_SGEMM_PACK_MAX (4 * 1024 * 1024)

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;
static const k_sg_isa *g_isa;   /* NULL: OpenBLAS */

/* OpenBLAS's threads spin (sched_yield) between its calls while our single-threaded work
 * runs, and would oversubscribe the cores under the pool: keep it on the caller's thread. */
static void k_blas_init(void) {
  openblas_set_num_threads(1);
  const char *want = getenv("KILN_GEMM");
  __atomic_store_n(&g_isa, want && !strcmp(want, "openblas") ? NULL : k_sg_pick(want), __ATOMIC_RELEASE);
}

static const k_sg_isa *k_blas_isa(void) {
  pthread_once(&g_blas_once, k_blas_init);
  return __atomic_load_n(&g_isa, __ATOMIC_ACQUIRE);
}

const char *k_sgemm_impl(void) { return k_sg_name(k_blas_isa()); }

const char *k_sgemm_use(const char *want) {
  pthread_once(&g_blas_once, k_blas_init);
  __atomic_store_n(&g_isa, want && !strcmp(want, "openblas") ? NULL : k_sg_pick(want), __ATOMIC_RELEASE);
  return k_sgemm_impl();
}

typedef struct {
  k_sg_args g;
  const k_sg_isa *isa;
  const float *bp;          /* op(B) packed once for every block, or NULL */
  int by_rows;              /* blocks of rows (M >= N), else of columns */
  int64_t unit;             /* a block's extent is a multiple of this (the last excepted) */
  int64_t blocks;
  k_sgemm_after_fn after;
  void *ctx;
} k_sgemm_job;

static CBLAS_TRANSPOSE k_cblas_t(int t) { return t ? CblasTrans : CblasNoTrans; }

/* y (n elements, stride incy) = alpha op(M) x + beta y as cblas_sgemv, op(M) being n x k.
 * beta 0 clears y first rather than trusting BLAS not to compute 0 * y: an unwritten buffer
 * may hold NaN. */
static void k_sgemv(int t, int64_t n, int64_t k, float alpha, const float *M, int64_t ldm,
                    const float *x, int64_t incx, float beta, float *y, int64_t incy) {
  if (beta == 0.0f)
    for (int64_t i = 0; i < n; i++) y[i * incy] = 0.0f;
  int64_t rows = t ? k : n, cols = t ? n : k;
  cblas_sgemv(CblasRowMajor, k_cblas_t(t), (int)rows, (int)cols, alpha, M, (int)ldm, x, (int)incx,
              beta == 0.0f ? 1.0f : beta, y, (int)incy);
}

/* A product with one row or one column of C is a matrix-vector product: sgemm would pack the
 * whole matrix operand on every call (at batch 1, a fully_connected layer's weights: 54% of
 * the MLP's predict time), where sgemv reads it once. Decided on the whole product, so every
 * block of it takes the same path. */
static int k_sgemm_is_gemv(const k_sg_args *g) { return g->K > 0 && (g->M == 1 || g->N == 1); }

static void k_sgemm_gemv(const k_sg_args *g, int64_t m, int64_t n, const float *A, const float *B, float *C) {
  if (g->M == 1)   /* C row = op(B)^T . (row of op(A)) */
    k_sgemv(!g->tb, n, g->K, g->alpha, B, g->ldb, A, g->ta ? g->lda : 1, g->beta, C, 1);
  else             /* C column = op(A) . (column of op(B)) */
    k_sgemv(g->ta, m, g->K, g->alpha, A, g->lda, B, g->tb ? 1 : g->ldb, g->beta, C, g->ldc);
}

/* C block = beta C block: the whole product when K is 0 or alpha is 0 (A and B unread). */
static void k_sgemm_scale(const k_sg_args *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (g->beta == 1.0f) return;
  for (int64_t i = m0; i < m1; i++)
    for (int64_t j = n0; j < n1; j++) {
      float *c = g->C + i * g->ldc + j;
      *c = g->beta == 0.0f ? 0.0f : g->beta * *c;
    }
}

/* A product with a bias that Kiln's GEMM does not run (a matrix-vector product, OpenBLAS, K
 * or alpha 0, its workspace out of memory): the block's C laid down as 0 + bias, and the
 * product accumulated onto it. */
static k_sg_args k_sgemm_bias_first(const k_sg_args *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  k_sg_args b = *g;
  for (int64_t i = m0; i < m1; i++)
    for (int64_t j = n0; j < n1; j++) g->C[i * g->ldc + j] = 0.0f + g->bias[j];
  b.beta = 1.0f, b.bias = NULL;
  return b;
}

static void k_sgemm_call(const k_sgemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  k_sg_args biased;
  const k_sg_args *g = &j->g;
  /* Kiln's GEMM adds a bias in its store; every other path (and its out-of-memory fallback,
   * which has written nothing) gets it laid down first */
  int own = j->isa && !k_sgemm_is_gemv(g) && g->K != 0 && g->alpha != 0.0f;
  if (own && k_sg_compute(j->isa, g, m0, m1, n0, n1, j->bp) == 0) return;
  if (g->bias) biased = k_sgemm_bias_first(g, m0, m1, n0, n1), g = &biased;
  const float *A = g->A + (g->ta ? m0 : m0 * g->lda);
  const float *B = g->B + (g->tb ? n0 * g->ldb : n0);
  float *C = g->C + m0 * g->ldc + n0;
  if (k_sgemm_is_gemv(g)) k_sgemm_gemv(g, m1 - m0, n1 - n0, A, B, C);
  else if (j->isa && !own) k_sgemm_scale(g, m0, m1, n0, n1);   /* K or alpha 0: A and B unread */
  else cblas_sgemm(CblasRowMajor, k_cblas_t(g->ta), k_cblas_t(g->tb), (int)(m1 - m0), (int)(n1 - n0), (int)g->K,
                   g->alpha, A, (int)g->lda, B, (int)g->ldb, g->beta, C, (int)g->ldc);
}

/* Blocks t in [lo, hi) of j->blocks: units [t * units / blocks, (t + 1) * units / blocks) of
 * the split dimension (rows, or columns in whole panels of Kiln's GEMM), so that blocks differ
 * by one unit at most and 2 threads share an even count evenly; then the epilogue, if any. */
static void k_sgemm_block(void *ctx, int64_t lo, int64_t hi) {
  const k_sgemm_job *j = ctx;
  int64_t dim = j->by_rows ? j->g.M : j->g.N, units = (dim + j->unit - 1) / j->unit;
  for (int64_t t = lo; t < hi; t++) {
    int64_t a = t * units / j->blocks * j->unit, e = (t + 1) * units / j->blocks * j->unit;
    if (e > dim) e = dim;
    if (j->by_rows) k_sgemm_call(j, a, e, 0, j->g.N);
    else k_sgemm_call(j, 0, j->g.M, a, e);
    if (j->after) j->after(j->ctx, a, e);
  }
}

/* How many blocks: as few as keep each above the minimum work, one inside another loop's chunk
 * (the blocks would run one after another there: one call packs less), and with an epilogue
 * on blocks of rows, enough that none exceeds `cap` rows. From M, N, K alone. */
static int64_t k_sgemm_blocks(const k_sgemm_job *j, int64_t cap) {
  const k_sg_args *g = &j->g;
  int64_t dim = j->by_rows ? g->M : g->N, blocks = 1;
  if (!k_parallel_nested()) {
    blocks = k_sgemm_is_gemv(g) ? g->M * g->N * g->K / K_SGEMV_PAR_MIN
                                : g->M * g->N * (g->K > 0 ? g->K : 1) / K_SGEMM_PAR_MIN;
    if (blocks > K_SGEMM_MAX_BLOCKS) blocks = K_SGEMM_MAX_BLOCKS;
    if (blocks > dim / K_SGEMM_MIN_DIM) blocks = dim / K_SGEMM_MIN_DIM;
    if (blocks > (dim + j->unit - 1) / j->unit) blocks = (dim + j->unit - 1) / j->unit;
    if (blocks < 1) blocks = 1;
  }
  if (j->by_rows && cap > 0 && blocks < (g->M + cap - 1) / cap) blocks = (g->M + cap - 1) / cap;
  return blocks;
}

/* The epilogue over rows [lo, hi) of a product already complete. */
typedef struct { k_sgemm_after_fn after; void *ctx; } k_sgemm_after_job;

static void k_sgemm_after_block(void *ctx, int64_t lo, int64_t hi) {
  const k_sgemm_after_job *j = ctx;
  j->after(j->ctx, lo, hi);
}

static void k_sgemm_pack_block(void *ctx, int64_t lo, int64_t hi) {
  k_sgemm_job *j = ctx;
  k_sg_pack_panels(j->isa, &j->g, lo, hi, (float *)j->bp);
}

/* op(B) of j packed whole into j->bp, its panels split over the pool. */
static void k_sgemm_pack_all(k_sgemm_job *j) {
  int64_t nr = k_sg_panel_cols(j->isa), per = K_SGEMM_PACK_GRAIN / (j->g.K * nr);
  k_parallel_for((j->g.N + nr - 1) / nr, per > 0 ? per : 1, k_sgemm_pack_block, j);
}

/* Blocks of rows would each pack all of op(B): with more than one, it is packed once here and
 * every block reads that. Returns the allocation to free, NULL when the blocks pack their own. */
static void *k_sgemm_pack_shared(k_sgemm_job *j) {
  const k_sg_args *g = &j->g;
  if (!j->isa || j->bp || !j->by_rows || j->blocks <= 1 || g->K == 0 ||
      g->alpha == 0.0f || k_sgemm_is_gemv(g))
    return NULL;
  int64_t floats = k_sg_packed_floats(j->isa, g->K, g->N);
  void *mem = floats <= K_SGEMM_PACK_MAX ? malloc((size_t)floats * sizeof(float) + 64) : NULL;
  if (!mem) return NULL;
  j->bp = (const float *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
  k_sgemm_pack_all(j);
  return mem;
}

static k_sgemm_job k_sgemm_job_of(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K,
                                  float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                                  float beta, float *C, int64_t ldc) {
  const k_sg_isa *isa = k_blas_isa();
  k_sgemm_job j = {{ta == CblasTrans, tb == CblasTrans, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C, NULL},
                   isa, NULL, M >= N, M < N && isa ? k_sg_panel_cols(isa) : 1, 1, NULL, NULL};
  return j;
}

/* The product in blocks of rows or columns, then `after` (if any) over blocks of rows of at
 * most `cap` (> 0): run by each block of rows as it completes, or once the whole product is
 * done when the blocks are columns. fit_cap: whether blocks of rows are made that small (else
 * they stay as the product picks them). */
static void k_sgemm_run(k_sgemm_job *j, k_sgemm_after_fn after, void *ctx, int64_t cap, int fit_cap) {
  if (j->by_rows) {
    j->after = after;
    j->ctx = ctx;
  }
  j->blocks = k_sgemm_blocks(j, after && fit_cap ? cap : 0);
  if (!k_parallel_nested())   /* a product inside another kernel's chunk is that kernel's business */
    K_PROFILE_NOTE("gemm %lldx%lldx%lld%s, %lld blocks of %s", (long long)j->g.M, (long long)j->g.N, (long long)j->g.K,
                 !j->isa ? " (cblas)" : k_sgemm_is_gemv(&j->g) ? " gemv" : "", (long long)j->blocks, j->by_rows ? "rows" : "columns");
  void *mem = k_sgemm_pack_shared(j);
  k_parallel_for(j->blocks, 1, k_sgemm_block, j);
  free(mem);
  if (after && !j->by_rows) {
    k_sgemm_after_job aj = {after, ctx};
    k_parallel_for(j->g.M, cap, k_sgemm_after_block, &aj);
  }
}

void k_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
             int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  k_sgemm_job j = k_sgemm_job_of(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  k_sgemm_run(&j, NULL, NULL, 0, 0);
}

void k_sgemm_rows_packed(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, const float *bp,
                         float beta, const float *bias, float *C, int64_t ldc, k_sgemm_after_fn after, void *ctx) {
  if (M <= 0 || N <= 0) return;
  k_sgemm_job j = k_sgemm_job_of(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (j.isa) j.bp = bp;
  j.g.bias = beta == 0.0f ? bias : NULL;   /* the contract: a bias only with beta 0 */
  /* a product wider than tall is split by columns (blocks of rows would each read all of B);
   * C is then at most N x N and the epilogue follows over blocks of rows */
  k_sgemm_run(&j, after, ctx, K_SGEMM_EPI_FLOATS / N > 0 ? K_SGEMM_EPI_FLOATS / N : 1, K * N <= 2 * K_SGEMM_EPI_FLOATS);
}

void k_sgemm_rows(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc, k_sgemm_after_fn after, void *ctx) {
  k_sgemm_rows_packed(ta, tb, M, N, K, alpha, A, lda, B, ldb, NULL, beta, NULL, C, ldc, after, ctx);
}

/* ---- op(B) packed ahead ---------------------------------------------------------------------- */

size_t k_sgemm_packed_bytes(int64_t N, int64_t K) {
  const k_sg_isa *isa = k_blas_isa();
  if (!isa || N <= 0 || K <= 0) return 0;
  return (size_t)k_sg_packed_floats(isa, K, N) * sizeof(float);
}

uint64_t k_sgemm_packed_key(void) {
  const k_sg_isa *isa = k_blas_isa();
  return isa ? 0x6b73670000000000ull | (uint64_t)k_sg_panel_cols(isa) << 8 | (uint64_t)k_sg_vector(isa) : 0;
}

void k_sgemm_pack(CBLAS_TRANSPOSE tb, int64_t N, int64_t K, const float *B, int64_t ldb, float *bp) {
  k_sgemm_job j = k_sgemm_job_of(CblasNoTrans, tb, 1, N, K, 1.0f, NULL, 1, B, ldb, 0.0f, NULL, 1);
  if (!j.isa || N <= 0 || K <= 0) return;
  j.bp = bp;
  k_sgemm_pack_all(&j);
}
