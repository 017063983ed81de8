/* k_blas.h — the kernels' one door to BLAS (internal to kernels/). Every product goes through
 * k_sgemm, which splits a large one into blocks of C run by k_parallel_for and computes each
 * block with Kiln's own blocked SGEMM (k_sgemm.c: AVX-512 or AVX2 + FMA, picked at run time;
 * Debian's OpenBLAS runs its Haswell kernels on this project's Zen 5, at about half the speed).
 * OpenBLAS stays the fallback — CPUs without AVX2 + FMA, non-GCC builds, KILN_GEMM=openblas
 * (for comparison; KILN_GEMM=avx2 caps Kiln's GEMM at AVX2) — and computes the products of one
 * row or one column (cblas_sgemv). Its own threads would compete with the k_parallel pool, so
 * it is told once to stay on its caller's thread. */
#ifndef KILN_K_BLAS_H
#define KILN_K_BLAS_H

#include <cblas.h>
#include <stddef.h>
#include <stdint.h>

/* cblas_sgemm in row-major order: C = alpha op(A) op(B) + beta C, C being M x N, any leading
 * dimensions; beta 0 never reads C (it may hold NaN). The blocks (of rows when M >= N, else of
 * columns) depend on M, N and K only, and each element of C is computed by one call whose
 * arithmetic does not depend on the block's extent, so the result does not depend on the
 * thread count. Inside a k_parallel_for chunk (k_parallel_nested) the product is one call on
 * the caller's thread. A product of one row or one column of C is computed by cblas_sgemv
 * (no packing). */
void k_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
             int64_t ldc);

/* k_sgemm calling after(ctx, m0, m1) once rows [m0, m1) of C are final. With M >= N the
 * product is split into blocks of rows of at most K_SGEMM_EPI_FLOATS elements and `after`
 * runs on the thread that computed each, while it is in cache; a wider product is split as
 * k_sgemm splits it and `after` then runs over blocks of rows. Blocks depend on M, N, K only. */
typedef void (*k_sgemm_after_fn)(void *ctx, int64_t m0, int64_t m1);
void k_sgemm_rows(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc, k_sgemm_after_fn after, void *ctx);

/* op(B) packed ahead, for a product whose op(B) stays the same across calls (fully_connected's
 * weights in a predict program, kept in its k_cache until the weights change): the packing's
 * size in bytes, 0 when products would not use one (OpenBLAS); a nonzero key naming its layout
 * (it changes with the implementation, k_sgemm_use); and the packing of op(B) (K x N) into bp,
 * 64-byte aligned, split over the pool. */
size_t k_sgemm_packed_bytes(int64_t N, int64_t K);
uint64_t k_sgemm_packed_key(void);
void k_sgemm_pack(CBLAS_TRANSPOSE tb, int64_t N, int64_t K, const float *B, int64_t ldb, float *bp);

/* k_sgemm_rows reading op(B) from bp, packed by k_sgemm_pack under the current key, instead of
 * packing it (bp NULL: exactly k_sgemm_rows; after may be NULL: exactly k_sgemm). B is still
 * read when the product is one row or one column, or the implementation has no packing. Same
 * bits as without bp. bias (N floats, with beta 0; NULL: none): C = 0 + bias[j] laid down
 * and the product accumulated onto it, as the GEMM's store does it (the same bits, without a
 * pass of its own). */
void k_sgemm_rows_packed(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, const float *bp,
                         float beta, const float *bias, float *C, int64_t ldc, k_sgemm_after_fn after, void *ctx);

/* Which implementation computes the products: "avx512", "avx2" or "openblas" (KILN_GEMM, read
 * at the first product, and the CPU decide). k_sgemm_use switches it ("openblas", "avx2", or
 * anything else for the widest the CPU has) and returns the name now in use: for tests and
 * benchmarks comparing them in one process, between products, never during one. */
const char *k_sgemm_impl(void);
const char *k_sgemm_use(const char *want);

#endif
