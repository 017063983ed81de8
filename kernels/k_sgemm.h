/* k_sgemm.h — Kiln's own single-precision GEMM (internal to kernels/): the blocked products
 * behind k_sgemm (k_blas.c), which owns the threading and the choice against OpenBLAS. One
 * call computes a block of C single-threaded; k_sgemm.c's header comment has the method. */
#ifndef KILN_K_SGEMM_H
#define KILN_K_SGEMM_H

#include <stdint.h>

/* C = alpha op(A) op(B) + beta C, row-major, C being M x N; ta/tb: op is the transpose. With
 * bias (beta 0 only): C = alpha op(A) op(B) + (0 + bias[j]) per column j, the bits of laying
 * the bias down first and accumulating onto it (beta 1), without the pass that lays it down. */
typedef struct {
  int ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  const float *A, *B;
  float *C;
  const float *bias;   /* N floats, or NULL */
} k_sg_args;

typedef struct k_sg_isa k_sg_isa;

/* The widest instruction set the CPU runs that `want` allows ("avx2" caps it at AVX2; NULL or
 * anything else: the widest), or NULL where there is none (no AVX2 + FMA, or a compiler
 * other than GCC): the caller then keeps OpenBLAS. */
const k_sg_isa *k_sg_pick(const char *want);
const char *k_sg_name(const k_sg_isa *isa);

/* Columns per panel of packed B; a block of columns handed to k_sg_compute with a shared
 * packing starts on a multiple of it. */
int64_t k_sg_panel_cols(const k_sg_isa *isa);
int64_t k_sg_vector(const k_sg_isa *isa);   /* floats per vector register */

/* op(B) packed whole, once, for several k_sg_compute calls: its size in floats, and panels
 * [p0, p1) of it (k_parallel_for can split the panels; there are ceil(N / panel_cols)). */
int64_t k_sg_packed_floats(const k_sg_isa *isa, int64_t K, int64_t N);
void k_sg_pack_panels(const k_sg_isa *isa, const k_sg_args *g, int64_t p0, int64_t p1, float *bp);

/* C[m0:m1, n0:n1] on the calling thread. bp: op(B) packed by k_sg_pack_panels, or NULL to
 * pack here, block by block. K > 0 and alpha != 0 (the caller scales C by beta otherwise).
 * Returns 0, or -1 when its workspace could not be allocated (nothing is written then). */
int k_sg_compute(const k_sg_isa *isa, const k_sg_args *g, int64_t m0, int64_t m1, int64_t n0,
                 int64_t n1, const float *bp);

#endif
