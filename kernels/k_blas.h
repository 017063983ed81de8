/* k_blas.h — the kernels' one door to BLAS (internal to kernels/). OpenBLAS's own threads
 * would compete with the k_parallel pool, so every product goes through k_sgemm: OpenBLAS is
 * told once to stay on its caller's thread, and k_sgemm splits a large product into blocks
 * of C run by k_parallel_for. */
#ifndef KILN_K_BLAS_H
#define KILN_K_BLAS_H

#include <cblas.h>
#include <stdint.h>

/* cblas_sgemm in row-major order: C = alpha op(A) op(B) + beta C, C being M x N. The blocks
 * (of rows when M >= N, else of columns) depend on M, N and K only, and each element of C is
 * computed by one BLAS call, so the result does not depend on the thread count. Inside a
 * k_parallel_for chunk (k_parallel_nested) the product is one call on the caller's thread.
 * A block of one row or one column of C is computed by cblas_sgemv instead (no packing). */
void k_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
             int64_t ldc);

#endif
