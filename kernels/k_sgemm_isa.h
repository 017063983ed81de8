/* k_sgemm_isa.h — the packing routines and register-blocked micro-kernels of k_sgemm.c for one
 * instruction set. Not a normal header: k_sgemm.c includes it once per instruction set, inside
 * `#pragma GCC target(...)`, after defining
 *   K_SG_SFX    the suffix of every function defined here (avx512, avx2), and K_SG_NAME as a string,
 *   K_SG_V      floats per vector, K_SG_MR the most rows of a tile, K_SG_NV vectors per panel
 *               (the accumulators, K_SG_MR x K_SG_NV vectors, and the K_SG_NV vectors of B must
 *               fit the target's vector registers),
 *   K_SG_CASES_MR(X)  X(1) ... X(K_SG_MR), one micro-kernel per tile height,
 *   SG_VT and SG_ZERO, SG_LOAD (aligned), SG_LOADU, SG_STOREU, SG_SET1, SG_FMA (a*b + c, one
 *   rounding), SG_MUL, SG_ADD, SG_LOADN / SG_STOREN (the first n lanes; the others read as 0
 *   and are not written),
 * and undefines them at its end.
 *
 * Layouts (k_sgemm.c's header comment has the blocking):
 *   packed B  one K block (kc rows) of one panel of NR = K_SG_NV * K_SG_V columns, row k at
 *             k * wp, wp = the panel's width rounded up to whole vectors, padded with zeros;
 *   A         read in place: element (i, k) of the tile at a[i * lda + k], or at a[k * lda + i]
 *             when op(A) = A^T.
 * The tile functions take their sizes as arguments but are always inlined into callers that
 * pass constants, so the accumulators live in registers. Every element of C is one chain of
 * FMAs over k in order, started from zero, then scaled by alpha and merged with C: the same
 * operations whatever the tile's height, the panel's width or the lane, so the bits of C do not
 * depend on how the caller cut it. */

#define SG_CAT2(a, b) a##_##b
#define SG_CAT(a, b) SG_CAT2(a, b)
#define SG(name) SG_CAT(name, K_SG_SFX)
#define SG_INLINE static inline __attribute__((always_inline))

/* ---- packing -------------------------------------------------------------------------------- */

/* The first jn rows and kn columns of the V x V block at s (rows ls apart), transposed into
 * the first kn rows of d (rows ld apart); lanes from jn on are written as zeros. */
#if K_SG_V == 8
SG_INLINE void SG(tv)(const float *s, int64_t ls, int64_t jn, int64_t kn, float *d, int64_t ld) {
  __m256 r[8];
  __m256i m = k_sg_mask8(kn);
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) r[i] = i < jn ? _mm256_maskload_ps(s + i * ls, m) : _mm256_setzero_ps();
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u[8] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
                 _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE),
                 _mm256_shuffle_ps(t4, t6, 0x44), _mm256_shuffle_ps(t4, t6, 0xEE),
                 _mm256_shuffle_ps(t5, t7, 0x44), _mm256_shuffle_ps(t5, t7, 0xEE)};
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    if (c < kn) _mm256_storeu_ps(d + c * ld, _mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
    if (4 + c < kn) _mm256_storeu_ps(d + (4 + c) * ld, _mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
  }
}
#else
/* Pairs of rows interleaved, then pairs of pairs within 128-bit lanes, then the lanes across
 * registers. */
SG_INLINE void SG(tv)(const float *s, int64_t ls, int64_t jn, int64_t kn, float *d, int64_t ld) {
  __m512 r[16], t[16];
  __mmask16 m = (__mmask16)((1u << kn) - 1u);
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) r[i] = i < jn ? _mm512_maskz_loadu_ps(m, s + i * ls) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  /* r[4g + c], lane l: column 4l + c of rows 4g .. 4g + 3 */
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
  }
#pragma GCC unroll 8
  for (int c = 0; c < 8; c++) {
    if (c < kn) _mm512_storeu_ps(d + c * ld, _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88));
    if (8 + c < kn) _mm512_storeu_ps(d + (8 + c) * ld, _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD));
  }
}
#endif

/* One panel of op(B) = B^T, rows [k0, k0 + kc), columns [j0, j0 + w) -> dst (row stride wp):
 * column j of the panel is row j0 + j of B, contiguous in k, so blocks of one vector squared
 * are transposed in registers (the edges masked, the padding zero). */
static void SG(pack_bt)(const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t w,
                        float *dst) {
  int64_t wp = (w + K_SG_V - 1) / K_SG_V * K_SG_V;
  const float *src = B + j0 * ldb + k0;
  for (int64_t j = 0; j < wp; j += K_SG_V) {
    int64_t jn = w - j < K_SG_V ? w - j : K_SG_V, k = 0;
    if (jn == K_SG_V)   /* the common case, with constant sizes */
      for (; k + K_SG_V <= kc; k += K_SG_V) SG(tv)(src + j * ldb + k, ldb, K_SG_V, K_SG_V, dst + k * wp + j, wp);
    for (; k < kc; k += K_SG_V)
      SG(tv)(src + j * ldb + k, ldb, jn, kc - k < K_SG_V ? kc - k : K_SG_V, dst + k * wp + j, wp);
  }
}

/* op(B) rows [k0, k0 + kc), columns [j0, j0 + nc) as panels of NR columns, panel j at
 * dst + kc * j, each padded with zeros to whole vectors. B (not transposed) is copied 16 rows
 * at a time across the panels: panel by panel, its 2 cache lines per row at a stride of ldb
 * starved the prefetchers (13% of a 64 x 784 x 128 product), and row by row, the panels' rows
 * kc * NR floats apart (often a multiple of 4 KiB) fought over the same L1 sets (23%). */
static void SG(pack_b)(int tb, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                       float *dst) {
  const int64_t nr = K_SG_NV * K_SG_V;
  if (tb) {
    for (int64_t j = 0; j < nc; j += nr)
      SG(pack_bt)(B, ldb, k0, kc, j0 + j, nc - j < nr ? nc - j : nr, dst + kc * j);
    return;
  }
  int64_t full = nc / nr * nr, w = nc - full, wp = (w + K_SG_V - 1) / K_SG_V * K_SG_V;
  for (int64_t kb = 0; kb < kc; kb += 16) {
    int64_t ke = kc - kb < 16 ? kc : kb + 16;
    for (int64_t j = 0; j < full; j += nr) {
      const float *src = B + (k0 + kb) * ldb + j0 + j;
      float *d = dst + kc * j + kb * nr;
      for (int64_t k = kb; k < ke; k++, src += ldb, d += nr)
#pragma GCC unroll 4
        for (int v = 0; v < K_SG_NV; v++) SG_STOREU(d + v * K_SG_V, SG_LOADU(src + v * K_SG_V));
    }
    const float *src = B + (k0 + kb) * ldb + j0 + full;
    float *d = dst + kc * full + kb * wp;
    for (int64_t k = kb; k < ke; k++, src += ldb, d += wp)
      for (int64_t v = 0; v < wp; v += K_SG_V)
        SG_STOREU(d + v, v + K_SG_V <= w ? SG_LOADU(src + v) : SG_LOADN(src + v, w - v));
  }
}

/* ---- micro-kernel --------------------------------------------------------------------------- */

/* v merged into n <= K_SG_V floats at c: c = v (beta 0: c is not read), c + v (beta 1), or
 * beta * c + v. */
SG_INLINE void SG(merge)(float *c, SG_VT v, int64_t n, int full, float beta) {
  if (full) {
    if (beta == 0.0f) SG_STOREU(c, v);
    else if (beta == 1.0f) SG_STOREU(c, SG_ADD(SG_LOADU(c), v));
    else SG_STOREU(c, SG_FMA(SG_SET1(beta), SG_LOADU(c), v));
  } else {
    if (beta == 0.0f) SG_STOREN(c, v, n);
    else if (beta == 1.0f) SG_STOREN(c, SG_ADD(SG_LOADN(c, n), v), n);
    else SG_STOREN(c, SG_FMA(SG_SET1(beta), SG_LOADN(c, n), v), n);
  }
}

/* C tile [mr x n] (n <= nv * K_SG_V, columns past n untouched) = alpha * op(A) tile . panel,
 * merged by beta (and bias, the tile's columns', or NULL). a: element (i, k) at a[i * lda + k],
 * or at a[k * lda + i] when at (op(A) = A^T); b: kc rows of nv vectors. */
SG_INLINE void SG(tile)(const int mr, const int nv, const int at, int64_t kc, const float *a,
                        int64_t lda, const float *b, float *c, int64_t ldc, int64_t n, float alpha,
                        float beta, const float *bias) {
  SG_VT acc[K_SG_MR][K_SG_NV];
#pragma GCC unroll 16
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
    for (int j = 0; j < nv; j++) acc[i][j] = SG_ZERO();
  const float *ar[K_SG_MR];
#pragma GCC unroll 16
  for (int i = 0; i < mr; i++) ar[i] = at ? a + i : a + i * lda;
  const int64_t as = at ? lda : 1;
  for (int64_t k = 0; k < kc; k++) {
    SG_VT bv[K_SG_NV];
#pragma GCC unroll 4
    for (int j = 0; j < nv; j++) bv[j] = SG_LOAD(b + j * K_SG_V);
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) {
      SG_VT ai = SG_SET1(ar[i][k * as]);
#pragma GCC unroll 4
      for (int j = 0; j < nv; j++) acc[i][j] = SG_FMA(ai, bv[j], acc[i][j]);
    }
    b += nv * K_SG_V;
  }
  /* with a bias (beta 0): each row's v becomes (0 + bias) + v, the bits of a bias laid down
   * first; the (0 + bias) vectors are made once for the tile's rows */
  SG_VT va = SG_SET1(alpha), bz[K_SG_NV];
#pragma GCC unroll 4
  for (int j = 0; j < nv; j++) {
    int full = j < nv - 1 || n == nv * K_SG_V;
    bz[j] = bias ? SG_ADD(SG_ZERO(), full ? SG_LOADU(bias + j * K_SG_V) : SG_LOADN(bias + j * K_SG_V, n - j * K_SG_V))
                 : SG_ZERO();
  }
#pragma GCC unroll 16
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
    for (int j = 0; j < nv; j++) {
      SG_VT v = alpha == 1.0f ? acc[i][j] : SG_MUL(va, acc[i][j]);
      if (bias) v = SG_ADD(bz[j], v);
      int full = j < nv - 1 || n == nv * K_SG_V;
      SG(merge)(c + i * ldc + j * K_SG_V, v, n - j * K_SG_V, full, beta);
    }
}

/* One function per tile height; the panel's vector count and A's layout are picked inside,
 * each a constant-size copy of the tile. */
#if K_SG_NV == 2
#define SG_KERN(M)                                                                                   \
  static void SG_CAT(SG(kern), M)(int64_t kc, const float *a, int64_t lda, const float *b, float *c, \
                                  int64_t ldc, int64_t n, float alpha, float beta, const float *bias, \
                                  int nv, int at) {                                                  \
    if (at) {                                                                                        \
      if (nv == 1) SG(tile)(M, 1, 1, kc, a, lda, b, c, ldc, n, alpha, beta, bias);                   \
      else SG(tile)(M, 2, 1, kc, a, lda, b, c, ldc, n, alpha, beta, bias);                           \
    } else {                                                                                         \
      if (nv == 1) SG(tile)(M, 1, 0, kc, a, lda, b, c, ldc, n, alpha, beta, bias);                   \
      else SG(tile)(M, 2, 0, kc, a, lda, b, c, ldc, n, alpha, beta, bias);                           \
    }                                                                                                \
  }
#else
#error "k_sgemm_isa.h: K_SG_NV must be 2"
#endif
K_SG_CASES_MR(SG_KERN)
#undef SG_KERN

#define SG_KERN_REF(M) SG_CAT(SG(kern), M),
static const k_sg_isa SG(isa) = {
  K_SG_NAME, K_SG_V, K_SG_MR, K_SG_NV, SG(pack_b),
  {NULL, K_SG_CASES_MR(SG_KERN_REF)},
};
#undef SG_KERN_REF

#undef SG_CAT2
#undef SG_CAT
#undef SG
#undef SG_INLINE
#undef K_SG_SFX
#undef K_SG_NAME
#undef K_SG_V
#undef K_SG_MR
#undef K_SG_NV
#undef K_SG_CASES_MR
#undef SG_VT
#undef SG_ZERO
#undef SG_LOAD
#undef SG_LOADU
#undef SG_STOREU
#undef SG_SET1
#undef SG_FMA
#undef SG_MUL
#undef SG_ADD
#undef SG_LOADN
#undef SG_STOREN
