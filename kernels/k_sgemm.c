/* k_sgemm.c — Kiln's own SGEMM, in the manner of BLIS/GotoBLAS: K is cut into blocks of at
 * most K_SG_KC, and per K block the columns of op(B) into chunks that stay in L2
 * (K_SG_L2_FLOATS), each packed into panels of NR = 2 vectors of columns; a register tile of
 * up to MR rows of C x one panel accumulates a chain of FMAs over the K block (k_sgemm_isa.h).
 * Per chunk the tiles run row tile by row tile, each over every panel: the tile's rows of A
 * (kc floats each) stay in L1 while the panels stream from L2.
 *
 * Why not OpenBLAS alone: Debian's OpenBLAS 0.3.21 takes this project's Zen 5 for a Haswell
 * and runs its AVX2 kernels, at about half of the AVX-512 peak (bench/kernels --gemm: 100-110
 * GFLOP/s where this file gets 190-225 of the 228 one core can do). The instruction set is
 * picked at run time (__builtin_cpu_supports): AVX-512 (MR 14 x 32 columns: 28 of the 32 zmm
 * registers accumulate, 2 hold B, broadcasts of A fold into the FMA), AVX2 + FMA (6 x 16: 12
 * of 16 ymm, 2 of B, 1 broadcast); without either k_sg_pick answers NULL and k_blas.c keeps
 * OpenBLAS.
 *
 * A is never packed: a tile's mr rows of A are mr streams along k (A^T: kc rows of mr
 * consecutive floats, lda apart), which stay in L1 across the panels; packing A^T per tile
 * cost 10-20% of a transposed-A product and gained nothing. B is packed, transposed in
 * registers when it is B^T. The row tiles of a block have balanced heights (64 rows: 5 tiles
 * of 13 or 12, not 4 of 14 and one of 8) so no tile is short of accumulators. Columns past a
 * panel's end are zero in the packing and masked at the store.
 *
 * Bits: the K blocks depend on K alone, and each element of C is the same chain of operations
 * in every tile shape (k_sgemm_isa.h), so C does not depend on how a caller splits M and N —
 * k_blas.c's blocks, and so the thread count, never change a result. Only GCC builds get it
 * (the loops use GCC's target pragmas; the clang fuzzing build keeps OpenBLAS). */
#include "k_sgemm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Longest K block. A tile's rows of A (MR x KC floats, 14 KiB) stay in L1 (48 KiB on Zen 5)
 * while the panels stream past. Shorter blocks also round better: each element is a chain of
 * FMAs per block, the blocks then added in C; at 512 (one block up to K = 512) the error of a
 * 500-term product was 1.4x OpenBLAS's and a convolution test comparing the im2col path with
 * the direct one at 1e-5 failed, at 256 it is OpenBLAS's, for about 2% of speed at K = 512.
 * Overridable for tuning experiments (-DK_SG_KC=...), as is the next. */
#ifndef K_SG_KC
#define K_SG_KC 256
#endif
/* Packed floats of op(B) per chunk: 96 Ki floats = 384 KiB, inside a 1 MiB L2 beside A. */
#ifndef K_SG_L2_FLOATS
#define K_SG_L2_FLOATS (96 * 1024)
#endif
#define K_SG_MRMAX 16

/* A tile's micro-kernel (k_sgemm_isa.h, SG(tile)): nv vectors of B per row, A transposed or not;
 * bias: the tile's columns' bias (beta 0), or NULL. */
typedef void (*k_sg_kern)(int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                          int64_t ldc, int64_t n, float alpha, float beta, const float *bias, int nv, int at);

struct k_sg_isa {
  const char *name;
  int64_t V, MR, NV;
  /* op(B) rows [k0, k0 + kc), columns [j0, j0 + nc) as panels, panel j at kc * (j - j0) */
  void (*pack_b)(int tb, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                 float *dst);
  k_sg_kern kern[K_SG_MRMAX + 1];   /* by tile height */
};

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define K_SG_X86 1
#include <immintrin.h>

#define K_SEQ_6(X) X(1) X(2) X(3) X(4) X(5) X(6)
#define K_SEQ_14(X) K_SEQ_6(X) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14)

/* AVX2 + FMA: 16 ymm registers; a broadcast takes its own register: 6 x 2 accumulators, 2 of B, 1. */
#pragma GCC push_options
#pragma GCC target("avx2,fma")
static inline __attribute__((always_inline)) __m256i k_sg_mask8(int64_t n) {
  static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256((const __m256i *)(ones + 8 - n));
}
#define K_SG_SFX avx2
#define K_SG_NAME "avx2"
#define K_SG_V 8
#define K_SG_MR 6
#define K_SG_NV 2
#define K_SG_CASES_MR K_SEQ_6
#define SG_VT __m256
#define SG_ZERO() _mm256_setzero_ps()
#define SG_LOAD(p) _mm256_load_ps(p)
#define SG_LOADU(p) _mm256_loadu_ps(p)
#define SG_STOREU(p, v) _mm256_storeu_ps(p, v)
#define SG_SET1(x) _mm256_set1_ps(x)
#define SG_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SG_MUL(a, b) _mm256_mul_ps(a, b)
#define SG_ADD(a, b) _mm256_add_ps(a, b)
#define SG_LOADN(p, n) _mm256_maskload_ps(p, k_sg_mask8(n))
#define SG_STOREN(p, v, n) _mm256_maskstore_ps(p, k_sg_mask8(n), v)
#include "k_sgemm_isa.h"   /* undefines its parameters */
#pragma GCC pop_options

/* AVX-512: 32 zmm registers, broadcasts fold into the FMA: 14 x 2 accumulators, 2 of B. */
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#define K_SG_SFX avx512
#define K_SG_NAME "avx512"
#define K_SG_V 16
#define K_SG_MR 14
#define K_SG_NV 2
#define K_SG_CASES_MR K_SEQ_14
#define SG_VT __m512
#define SG_ZERO() _mm512_setzero_ps()
#define SG_LOAD(p) _mm512_load_ps(p)
#define SG_LOADU(p) _mm512_loadu_ps(p)
#define SG_STOREU(p, v) _mm512_storeu_ps(p, v)
#define SG_SET1(x) _mm512_set1_ps(x)
#define SG_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SG_MUL(a, b) _mm512_mul_ps(a, b)
#define SG_ADD(a, b) _mm512_add_ps(a, b)
#define SG_LOADN(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1u), p)
#define SG_STOREN(p, v, n) _mm512_mask_storeu_ps(p, (__mmask16)((1u << (n)) - 1u), v)
#include "k_sgemm_isa.h"
#pragma GCC pop_options
#endif

const k_sg_isa *k_sg_pick(const char *want) {
#ifdef K_SG_X86
  __builtin_cpu_init();
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f") && !(want && !strcmp(want, "avx2"))) return &isa_avx512;
  if (avx2) return &isa_avx2;
#endif
  (void)want;
  return NULL;
}

const char *k_sg_name(const k_sg_isa *isa) { return isa ? isa->name : "openblas"; }

int64_t k_sg_panel_cols(const k_sg_isa *isa) { return isa->V * isa->NV; }

int64_t k_sg_vector(const k_sg_isa *isa) { return isa->V; }

/* ---- blocking -------------------------------------------------------------------------------- */

/* K in nk blocks of near-equal length, block b = [k0(b), k0(b + 1)): from K alone. */
static int64_t k_sg_kblocks(int64_t K) { return (K + K_SG_KC - 1) / K_SG_KC; }
static int64_t k_sg_k0(int64_t K, int64_t nk, int64_t b) { return b * K / nk; }

/* Width of w columns rounded up to whole vectors: a panel's row stride in the packing. */
static int64_t k_sg_padded(const k_sg_isa *isa, int64_t w) { return (w + isa->V - 1) / isa->V * isa->V; }

/* Columns per chunk for a K block of kc: whole panels whose packing fits K_SG_L2_FLOATS. */
static int64_t k_sg_chunk_cols(const k_sg_isa *isa, int64_t kc) {
  int64_t nr = k_sg_panel_cols(isa), panels = K_SG_L2_FLOATS / (kc * nr);
  return (panels > 0 ? panels : 1) * nr;
}

/* The packing of all of op(B): K block b (rows k0 .. k0 + kc) at k0 * Np (Np = N padded to the
 * last panel's vectors), its panel starting at column j at k0 * Np + kc * j. Chunks packed
 * by k_sg_compute use the same layout relative to the chunk. */
int64_t k_sg_packed_floats(const k_sg_isa *isa, int64_t K, int64_t N) {
  int64_t nr = k_sg_panel_cols(isa), full = N / nr * nr;
  return K * (full + (N > full ? k_sg_padded(isa, N - full) : 0));
}

void k_sg_pack_panels(const k_sg_isa *isa, const k_sg_args *g, int64_t p0, int64_t p1, float *bp) {
  int64_t nr = k_sg_panel_cols(isa), nk = k_sg_kblocks(g->K);
  int64_t Np = g->K > 0 ? k_sg_packed_floats(isa, g->K, g->N) / g->K : 0;
  int64_t j0 = p0 * nr, j1 = p1 * nr < g->N ? p1 * nr : g->N;
  for (int64_t b = 0; b < nk; b++) {
    int64_t k0 = k_sg_k0(g->K, nk, b), kc = k_sg_k0(g->K, nk, b + 1) - k0;
    isa->pack_b(g->tb, g->B, g->ldb, k0, kc, j0, j1 - j0, bp + k0 * Np + kc * j0);
  }
}

/* ---- the product ------------------------------------------------------------------------------ */

/* Rows [m0, m1) against one packed chunk (kc rows of columns [j0, j0 + nc)): row tile by row
 * tile, each over every panel; bias: the first K block's (with beta 0), else NULL. */
static void k_sg_chunk(const k_sg_isa *isa, const k_sg_args *g, int64_t m0, int64_t m1, int64_t k0,
                       int64_t kc, int64_t j0, int64_t nc, const float *bp, float beta, const float *bias) {
  int64_t rows = m1 - m0, nr = k_sg_panel_cols(isa);
  int64_t tiles = (rows + isa->MR - 1) / isa->MR, base = rows / tiles, extra = rows % tiles;
  for (int64_t t = 0, i = m0; t < tiles; t++) {
    int64_t mr = base + (t < extra);
    const float *a = g->ta ? g->A + k0 * g->lda + i : g->A + i * g->lda + k0;
    k_sg_kern kern = isa->kern[mr];
    float *c = g->C + i * g->ldc + j0;
    for (int64_t j = 0; j < nc; j += nr) {
      int64_t w = nc - j < nr ? nc - j : nr;
      int nv = (int)((w + isa->V - 1) / isa->V);
      kern(kc, a, g->lda, bp + kc * j, c + j, g->ldc, w, g->alpha, beta, bias ? bias + j0 + j : NULL, nv, g->ta);
    }
    i += mr;
  }
}

/* Workspace aligned to 64 bytes by hand: posix_memalign frees the slack around its block,
 * and the small chunks that leaves made glibc consolidate its bins on the next call (4% of
 * a 64 x 64 x 32 product). */
static void *k_sg_alloc(int64_t floats, float **aligned) {
  void *p = malloc((size_t)floats * sizeof(float) + 64);
  *aligned = p ? (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63) : NULL;
  return p;
}

int k_sg_compute(const k_sg_isa *isa, const k_sg_args *g, int64_t m0, int64_t m1, int64_t n0,
                 int64_t n1, const float *bp) {
  if (m1 <= m0 || n1 <= n0) return 0;
  int64_t nk = k_sg_kblocks(g->K), kcmax = (g->K + nk - 1) / nk;
  /* a chunk packs at most kc x (its columns padded) <= K_SG_L2_FLOATS, or one panel */
  int64_t cap = K_SG_L2_FLOATS > kcmax * k_sg_panel_cols(isa) ? K_SG_L2_FLOATS : kcmax * k_sg_panel_cols(isa);
  int64_t own = bp ? 0 : kcmax * k_sg_padded(isa, n1 - n0);
  if (own > cap) own = cap;
  float *ws = NULL;
  void *mem = own ? k_sg_alloc(own, &ws) : NULL;
  if (own && !mem) return -1;
  int64_t Np = bp ? k_sg_packed_floats(isa, g->K, g->N) / g->K : 0;
  for (int64_t b = 0; b < nk; b++) {
    int64_t k0 = k_sg_k0(g->K, nk, b), kc = k_sg_k0(g->K, nk, b + 1) - k0;
    float beta = b == 0 ? g->beta : 1.0f;
    int64_t step = k_sg_chunk_cols(isa, kc);
    for (int64_t j0 = n0; j0 < n1; j0 += step) {
      int64_t nc = n1 - j0 < step ? n1 - j0 : step;
      const float *p = bp ? bp + k0 * Np + kc * j0 : ws;
      if (!bp) isa->pack_b(g->tb, g->B, g->ldb, k0, kc, j0, nc, ws);
      k_sg_chunk(isa, g, m0, m1, k0, kc, j0, nc, p, beta, b == 0 ? g->bias : NULL);
    }
  }
  free(mem);
  return 0;
}
