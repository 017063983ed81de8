/* k_conv_dw.c — depthwise convolution (groups == C, F = M * C filters, filter f reading input
 * channel f / M), and grouped convolution with few channels per group (Cg = C / G input and
 * M = F / G output channels each), forward and backward, computed directly on NCHW planes.
 * im2col + GEMM is a poor fit here: every group is a GEMM of M rows and K = Cg*kh*kw, one row
 * and K = 9 for a 3x3 depthwise layer.
 *
 * The trick that makes every inner loop a run of contiguous vector loads, whatever the stride,
 * padding and dilation: one input plane is copied, zero-padded, into sh*sw "phase planes"
 *   P[pr][pc][r][c] = x[r*sh + pr - ph][c*sw + pc - pw]   (zero outside x),
 * each Hq = ceil(Hp / sh) rows of Wq = ceil(Wp / sw) floats, Hp = ph + H + phe and
 * Wp = pw + W + pwe the padded sizes (ph, pw the pads at the start, phe, pwe at the end). Tap (ki, kj) then reads phase
 * (ki*dh % sh, kj*dw % sw) at the fixed offset o = (ki*dh / sh) * Wq + kj*dw / sw from the
 * output position, so the output plane, laid out with row stride Wq (columns OW..Wq-1 are
 * dropped), is a 1-D sum of shifted planes: y[q] = sum_t w_t * P_t[q + o_t] (over the group's
 * Cg input planes' taps, Cg*kh*kw terms). Small planes
 * (7x7) fill the vector lanes this way too, where a row-wise loop would leave most empty.
 * The data gradient is the same sum the other way round, per phase plane, over the output
 * gradient laid out with stride Wq and a zero margin; the weight gradient is one dot product
 * per tap between that output gradient and the shifted phase planes.
 *
 * Threads: forward over (sample x group), the epilogue (k_call.epi) applied to each run of
 * planes just written; backward over (part of the batch x group), the parts fixed by N as
 * in k_conv.c, each with its own weight-gradient partial summed in part order, so the bits do
 * not depend on the thread count. Each running chunk has its own slot of the workspace: the
 * work is cut into at most `slots` chunks, and chunk k uses slot k.
 *
 * The inner loops are written once with GCC vector extensions (k_conv_dw_isa.h) and compiled
 * for AVX-512 (16 floats), AVX2 + FMA (8) and the portable target (4), picked at run time
 * (KILN_CONV=direct-avx2 / direct-generic narrow it, as for k_conv_direct.c). The x86 ones contract multiply-adds into
 * FMAs, as the direct convolution does: bits differ between instruction sets, not between
 * thread counts. */
#include "kernels.h"
#include "k_profile.h"
#include "k_conv_dw.h"
#include "k_epilogue.h"
#include "k_parallel.h"
#include "k_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Vectors wider than the baseline's registers in the always-inlined helpers of the AVX
 * targets: no ABI to keep. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define K_DW_TILE 64           /* floats per step of the sum loop; buffers carry this slack */
#define K_DW_MAX_TAPS 256      /* most terms Cg*kh*kw of a sum (the tables live on the stack) */
#define K_DW_MAX_CG 16         /* most channels per group taken unless forced (k_conv_dw_wanted) */
#define K_DW_SLOTS 8           /* most chunks running at once: threads that can help one call */
#define K_DW_SLOT_BUDGET ((int64_t)4 << 20)   /* floats all slots may take, unless one needs more */
#define K_DW_PARTS 4           /* backward: parts of the batch, each with a weight-gradient partial */
#define K_DW_EPI_FLOATS 16384  /* forward: planes written before the epilogue runs on them */

/* ---- inner loops --------------------------------------------------------------------------- */

#define K_DW_INLINE static inline __attribute__((always_inline))

typedef void (*k_dw_sum_fn)(float *out, int64_t len, const float *const *src, const float *w,
                            int64_t n, float init, int add);
typedef void (*k_dw_dots_fn)(const float *dy, int64_t len, const float *const *src, int64_t n,
                             float *out, int add);
/* Plane copies, nr rows of nc floats, rows ss (source) and ds (destination) floats apart. */
typedef void (*k_dw_rows_fn)(const float *s, int64_t ss, float *d, int64_t ds, int64_t nr, int64_t nc, int add);
typedef void (*k_dw_split_fn)(const float *s, int64_t ss, float *e, float *o, int64_t ds, int64_t nr, int64_t nc);
typedef void (*k_dw_merge_fn)(const float *e, const float *o, int64_t ss, float *d, int64_t ds, int64_t nr,
                              int64_t nc, int add);
/* The blocked forward's geometry (k_conv_dw_blocked.h): a depthwise layer's sizes, pads at
 * the start, strides and dilations. */
typedef struct {
  int64_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
} k_dw_bgeom;
/* The output columns [lo, hi) whose every tap lies inside the row; the others are the edges. */
static inline void k_dwb_interior(const k_dw_bgeom *g, int64_t *lo, int64_t *hi) {
  int64_t l = (g->pw + g->sw - 1) / g->sw, reach = g->W - 1 + g->pw - (g->kw - 1) * g->dw;
  int64_t h = reach < 0 ? 0 : reach / g->sw + 1;
  l = l < g->OW ? l : g->OW, h = h < g->OW ? h : g->OW;
  *lo = l, *hi = h < l ? l : h;
}
/* Rows [oh0, oh1) of one channel block of a blocked depthwise forward (k_conv_dw_blocked.h). */
typedef void (*k_dw_brows_fn)(const k_dw_bgeom *g, const float *x, const float *wv, const float *bias,
                              const k_epi_store *tail, float *y, int64_t oh0, int64_t oh1);
/* One plane of a stride-1 depthwise forward, written (or added, add) straight into y
 * [OH][OW] from its padded plane xp (rows Wq floats apart), kh x kw taps of w, kw 3, 5 or 7
 * (k_dw_srows_kw says how). */
typedef void (*k_dw_srows_fn)(const float *xp, int64_t Wq, int64_t OH, int64_t OW, int64_t kh, int64_t kw,
                              const float *w, float init, int add, float *y);
/* One instruction set's loops (k_conv_dw_isa.h says what each does). */
typedef struct {
  const char *name;
  k_dw_sum_fn sum;
  k_dw_dots_fn dots;
  k_dw_rows_fn rows;
  k_dw_split_fn split;
  k_dw_merge_fn merge;
  k_dw_brows_fn brows[2];   /* the blocked forward for block widths 8 and 16 */
  k_dw_srows_fn srows;      /* NULL where the ISA has none: sum and the row copies instead */
} k_dw_isa;

/* Portable: 4-float (SSE) vectors. */
#define K_DW_V 4
#define K_DW_SFX generic
#define K_DW_NAME "generic"
#define K_DW_T 4
#define K_DW_B 4
#define K_DW_ATTR
#define K_DW_ROW_COPY kdw_copy_row_generic
#define K_DW_ROW_SPLIT kdw_split_row_generic
#define K_DW_ROW_MERGE kdw_merge_row_generic
#define K_DW_SROWS NULL
#include "k_conv_dw_isa.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define K_DW_X86 1
#include <immintrin.h>

/* AVX2 + FMA: 16 ymm registers, 4 sum accumulators (and 4 dot taps) leave room for the loads. */
#define K_DW_V 8
#define K_DW_SFX avx2
#define K_DW_NAME "avx2"
#define K_DW_T 4
#define K_DW_B 4
#define K_DW_ATTR __attribute__((target("avx2,fma")))
#define K_DW_ROW_COPY kdw_copy_row_avx2
#define K_DW_ROW_SPLIT kdw_split_row_avx2
#define K_DW_ROW_MERGE kdw_merge_row_avx2
#define K_DW_SROWS NULL
#include "k_conv_dw_isa.h"

/* AVX-512's row copies end with masked loads and stores instead of one float at a time:
 * MobileNet's late planes are 7 to 28 floats wide, where the scalar tail was most of the copy. */
#define K_DW_AVX512 __attribute__((target("avx512f,avx2,fma")))

K_DW_AVX512 K_DW_INLINE __mmask16 k_dw_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

K_DW_AVX512 K_DW_INLINE void k_dw_copy_row_m(const float *s, int64_t n, float *d, int add) {
  for (int64_t c = 0; c < n; c += 16) {
    __mmask16 m = k_dw_mask(n - c);
    __m512 v = _mm512_maskz_loadu_ps(m, s + c);
    if (add) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + c), v);
    _mm512_mask_storeu_ps(d + c, m, v);
  }
}

K_DW_AVX512 K_DW_INLINE void k_dw_split_row_m(const float *s, int64_t n, float *e, float *o) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t i = 0; 2 * i < n; i += 16) {
    int64_t rem = n - 2 * i;
    __m512 a = _mm512_maskz_loadu_ps(k_dw_mask(rem), s + 2 * i);
    __m512 b = _mm512_maskz_loadu_ps(k_dw_mask(rem - 16), s + 2 * i + 16);
    _mm512_mask_storeu_ps(e + i, k_dw_mask((rem + 1) / 2), _mm512_permutex2var_ps(a, even, b));
    _mm512_mask_storeu_ps(o + i, k_dw_mask(rem / 2), _mm512_permutex2var_ps(a, odd, b));
  }
}

K_DW_AVX512 K_DW_INLINE void k_dw_merge_row_m(const float *e, const float *o, int64_t n, float *d, int add) {
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int64_t i = 0; 2 * i < n; i += 16) {
    int64_t rem = n - 2 * i;
    __mmask16 m0 = k_dw_mask(rem), m1 = k_dw_mask(rem - 16);
    __m512 a = _mm512_maskz_loadu_ps(k_dw_mask((rem + 1) / 2), e + i);
    __m512 b = _mm512_maskz_loadu_ps(k_dw_mask(rem / 2), o + i);
    __m512 vl = _mm512_permutex2var_ps(a, lo, b), vh = _mm512_permutex2var_ps(a, hi, b);
    if (add) {
      vl = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, d + 2 * i), vl);
      vh = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, d + 2 * i + 16), vh);
    }
    _mm512_mask_storeu_ps(d + 2 * i, m0, vl);
    _mm512_mask_storeu_ps(d + 2 * i + 16, m1, vh);
  }
}

/* Output rows summed together by k_dw_srows_avx512: each input row's shifted copies serve up
 * to this many of them. */
#define K_DW_SR 8

/* k_dw_srows_fn on AVX-512, for a row of KW taps (a constant: the shifted copies live in
 * registers). Each output vector (16 neighbouring columns of a row, the last one masked at
 * OW) is summed as k_dw_sum sums it — 0 + init, then the taps in their order (ki, kj), one
 * FMA each — so the bits are the same; but K_DW_SR rows at once: each input row is loaded as
 * two vectors, its KW shifted copies made in registers (vpermt2ps) and used by every output
 * row that row is a tap row of, and the sums go straight into y, with no staging plane to
 * copy out. The flat sum loads each tap's vector from memory, 15 of 16 offsets split across
 * cache lines: ConvNeXt-T's 7x7 layers ran at a third of the FMA peak. Columns past OW read
 * the row's margin or the next row (the plane's slack covers the last) and are never stored. */
K_DW_AVX512 K_DW_INLINE void k_dw_srows_kw(const float *xp, int64_t Wq, int64_t OH, int64_t OW, int64_t kh,
                                           const int KW, const float *w, float init, int add, float *y) {
  __m512i shift[16];
#pragma GCC unroll 16
  for (int j = 0; j < KW; j++)
    shift[j] = _mm512_add_epi32(_mm512_set1_epi32(j), _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  __m512 b = _mm512_add_ps(_mm512_setzero_ps(), _mm512_set1_ps(init));
  for (int64_t oh0 = 0; oh0 < OH; oh0 += K_DW_SR) {
    int64_t R = OH - oh0 < K_DW_SR ? OH - oh0 : K_DW_SR;
    for (int64_t c0 = 0; c0 < OW; c0 += 16) {
      __m512 acc[K_DW_SR], v[16];
#pragma GCC unroll 8
      for (int i = 0; i < K_DW_SR; i++) acc[i] = b;
      for (int64_t r = 0; r < R + kh - 1; r++) {   /* input row oh0 + r: tap row r - i of output row i */
        const float *row = xp + (oh0 + r) * Wq + c0;
        v[0] = _mm512_loadu_ps(row);
        __m512 hi = _mm512_loadu_ps(row + 16);
#pragma GCC unroll 16
        for (int j = 1; j < KW; j++) v[j] = _mm512_permutex2var_ps(v[0], shift[j], hi);
#pragma GCC unroll 8
        for (int i = 0; i < K_DW_SR; i++) {
          if (i >= R || r - i < 0 || r - i >= kh) continue;
          const float *wr = w + (r - i) * KW;
#pragma GCC unroll 16
          for (int j = 0; j < KW; j++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(wr[j]), v[j], acc[i]);
        }
      }
      __mmask16 m = k_dw_mask(OW - c0);
#pragma GCC unroll 8
      for (int i = 0; i < K_DW_SR; i++) {
        if (i >= R) break;
        float *d = y + (oh0 + i) * OW + c0;
        _mm512_mask_storeu_ps(d, m, add ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, d), acc[i]) : acc[i]);
      }
    }
  }
}

/* The row lengths k_dw_srows_fit admits (3, 5 and 7: the odd kernels of real models). */
K_DW_AVX512 static void k_dw_srows_avx512(const float *xp, int64_t Wq, int64_t OH, int64_t OW, int64_t kh, int64_t kw,
                                          const float *w, float init, int add, float *y) {
  if (kw == 7) k_dw_srows_kw(xp, Wq, OH, OW, kh, 7, w, init, add, y);
  else if (kw == 5) k_dw_srows_kw(xp, Wq, OH, OW, kh, 5, w, init, add, y);
  else k_dw_srows_kw(xp, Wq, OH, OW, kh, 3, w, init, add, y);
}

/* AVX-512: 32 zmm registers; 8 dot taps per pass. */
#define K_DW_V 16
#define K_DW_SFX avx512
#define K_DW_NAME "avx512"
#define K_DW_T 4
#define K_DW_B 8
#define K_DW_ATTR K_DW_AVX512
#define K_DW_ROW_COPY k_dw_copy_row_m
#define K_DW_ROW_SPLIT k_dw_split_row_m
#define K_DW_ROW_MERGE k_dw_merge_row_m
#define K_DW_SROWS k_dw_srows_avx512
#include "k_conv_dw_isa.h"
#endif

/* The widest instruction set the CPU has, narrowed by KILN_CONV=direct-avx2 / direct-generic. */
static const k_dw_isa *k_dw_pick(void) {
  const char *want = getenv("KILN_CONV");
  if (want && !strcmp(want, "direct-generic")) return &k_dw_isa_generic;
#ifdef K_DW_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && !(want && !strcmp(want, "direct-avx2"))) return &k_dw_isa_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &k_dw_isa_avx2;
#endif
  return &k_dw_isa_generic;
}

/* ---- geometry and workspace --------------------------------------------------------------- */

typedef struct {
  int64_t N, C, H, W, F;
  int64_t G, Cg, M;      /* groups; input and output channels per group */
  int64_t taps, wk;      /* kh*kw; weights per filter, Cg*taps */
  int64_t kh, kw, sh, sw, dh, dw, OH, OW;
  int64_t ph, pw, phe, pwe;   /* padding at the start (ph, pw) and at the end of each axis */
  int64_t Hq, Wq;        /* a phase plane's rows and row length */
  int64_t PL;            /* floats per phase plane: (Hq + 1) * Wq + K_DW_TILE (see k_dw_geometry) */
  int64_t omax;          /* the largest tap offset */
  int64_t DL;            /* floats of the output (gradient) buffer: omax margin + Hq*Wq + tile */
  int64_t PS;            /* floats of one channel's phase planes, sh*sw*PL */
  int64_t slot, slots;   /* floats per slot (input and data-gradient phase planes of a group,
                            one output plane); slots */
  int64_t parts;         /* backward: parts of the batch */
} k_dw_geom;

static int64_t k_dw_out_len(int64_t in, int64_t k, int64_t s, int64_t begin, int64_t end, int64_t dil) {
  int64_t span = dil * (k - 1) + 1, padded = in + begin + end;
  return padded < span ? 0 : (padded - span) / s + 1;
}

/* Bounds of the reads (q an output position, o a tap offset): q + o < OH*Wq + omax needs
 * OH + oki <= Hq rows, but the last row's dropped columns reach up to okj < Wq further, and
 * the tile rounding K_DW_TILE more: hence one more row and a tile in PL. */
static k_dw_geom k_dw_geometry(const k_shape *x, const k_shape *w, const k_conv_param *p) {
  k_dw_geom g;
  int two = p->kernel.n == 2, last = p->kernel.n - 1;
  g.N = x->d[0]; g.C = x->d[1];
  g.H = two ? x->d[2] : 1; g.W = x->d[x->rank - 1];
  g.F = w->d[0];
  g.G = p->num_group > 0 ? p->num_group : 1;
  g.Cg = g.C / g.G; g.M = g.F / g.G;
  g.kh = two ? p->kernel.v[0] : 1; g.kw = p->kernel.v[last];
  g.sh = two ? p->stride.v[0] : 1; g.sw = p->stride.v[last];
  g.ph = two ? k_conv_pad_begin(p, 0) : 0;  g.pw = k_conv_pad_begin(p, last);
  g.phe = two ? k_conv_pad_end(p, 0) : 0;   g.pwe = k_conv_pad_end(p, last);
  g.dh = two ? p->dilate.v[0] : 1; g.dw = p->dilate.v[last];
  g.taps = g.kh * g.kw;
  g.wk = g.Cg * g.taps;
  g.OH = k_dw_out_len(g.H, g.kh, g.sh, g.ph, g.phe, g.dh);
  g.OW = k_dw_out_len(g.W, g.kw, g.sw, g.pw, g.pwe, g.dw);
  g.Hq = (g.H + g.ph + g.phe + g.sh - 1) / g.sh;
  g.Wq = (g.W + g.pw + g.pwe + g.sw - 1) / g.sw;
  g.PL = (g.Hq + 1) * g.Wq + K_DW_TILE;
  g.omax = (g.dh * (g.kh - 1) / g.sh) * g.Wq + g.dw * (g.kw - 1) / g.sw;
  g.DL = g.omax + g.Hq * g.Wq + K_DW_TILE;
  g.PS = g.sh * g.sw * g.PL;
  g.slot = (2 * g.Cg * g.PS + g.DL + 15) / 16 * 16;
  g.slots = g.slot > 0 ? K_DW_SLOT_BUDGET / g.slot : 1;
  g.slots = g.slots < 1 ? 1 : g.slots > K_DW_SLOTS ? K_DW_SLOTS : g.slots;
  g.parts = g.N < K_DW_PARTS ? g.N : K_DW_PARTS;
  return g;
}

/* The slots, then the parts' weight-gradient partials. */
static int64_t k_dw_temp_floats(const k_dw_geom *g) {
  return g->slots * g->slot + g->parts * g->F * g->wk;
}

/* Depthwise always (Cg = 1: K = 9 GEMMs), and groups of up to K_DW_MAX_CG channels: measured
 * at 1 thread (AVX-512, 3x3, batch 8, M = Cg) against im2col, forward 1.3x (Cg = 16) to 11x
 * (Cg = 2) faster, backward 2-5x faster up to Cg = 8 and from 0.85x (14x14) to 2.5x (28x28) at
 * Cg = 16; any Cg under KILN_CONV=grouped-direct. */
int k_conv_dw_wanted(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  if (p->num_group <= 1) return 0;
  k_dw_geom g = k_dw_geometry(data, weight, p);
  if (g.N == 0 || g.OH == 0 || g.OW == 0 || g.Cg < 1 || g.M < 1 || g.wk > K_DW_MAX_TAPS) return 0;
  const char *force = getenv("KILN_CONV");
  if (force && (!strcmp(force, "im2col") || !strcmp(force, "grouped-im2col"))) return 0;
  return g.Cg <= K_DW_MAX_CG || (force && !strcmp(force, "grouped-direct"));
}

size_t k_conv_dw_temp_bytes(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  if (!k_conv_dw_wanted(data, weight, p)) return 0;
  k_dw_geom g = k_dw_geometry(data, weight, p);
  return (size_t)k_dw_temp_floats(&g) * sizeof(float);
}

int k_conv_dw_runs(const k_call *c, const k_shape *data, const k_shape *weight) {
  return k_conv_dw_wanted(data, weight, c->param) && c->temp &&
         c->temp_bytes >= k_conv_dw_temp_bytes(data, weight, c->param);
}

/* ---- layout ------------------------------------------------------------------------------- */

/* Phase columns [lo, hi) whose input column c*sw + pc - pw lies inside [0, W). */
static void k_dw_cols(const k_dw_geom *g, int64_t pc, int64_t *lo, int64_t *hi) {
  int64_t off = pc - g->pw;
  *lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
  *hi = g->W - off <= 0 ? 0 : (g->W - off - 1) / g->sw + 1;
  if (*hi > g->Wq) *hi = g->Wq;
  if (*lo > *hi) *lo = *hi;
}

/* A slot's buffers hold zeros wherever a plane's copy never writes (padding, dropped
 * columns, margins, slack), at the same places for every plane of a call: cleared once when a
 * chunk takes the slot, so each plane then copies only its values. */
static void k_dw_clear_slot(const k_dw_geom *g, float *slot) {
  memset(slot, 0, (size_t)g->slot * sizeof(float));
}

/* The input rows ih of row phase pr ((ih + ph) % sh == pr): the first one, *ih0, and how many. */
static int64_t k_dw_phase_rows(const k_dw_geom *g, int64_t pr, int64_t *ih0) {
  *ih0 = ((pr - g->ph) % g->sh + g->sh) % g->sh;
  return *ih0 < g->H ? (g->H - 1 - *ih0) / g->sh + 1 : 0;
}

/* Input plane x [H][W] -> the inside of its sh*sw phase planes at xp (plane pr*sw + pc).
 * Column strides 1 and 2 copy whole rows (2 splits each row into its two column phases: even
 * input columns go to phase pw % 2 from column pw / 2, odd ones to the other from (pw+1) / 2). */
static void k_dw_phases(const k_dw_geom *g, const k_dw_isa *isa, const float *x, float *xp) {
  for (int64_t pr = 0; pr < g->sh; pr++) {
    int64_t ih0, nr = k_dw_phase_rows(g, pr, &ih0);
    if (nr == 0) continue;
    float *row = xp + pr * g->sw * g->PL + (ih0 + g->ph) / g->sh * g->Wq;
    if (g->sw == 1) {
      isa->rows(x + ih0 * g->W, g->sh * g->W, row + g->pw, g->Wq, nr, g->W, 0);
      continue;
    }
    if (g->sw == 2) {
      isa->split(x + ih0 * g->W, g->sh * g->W, row + g->pw % 2 * g->PL + g->pw / 2,
                 row + (g->pw + 1) % 2 * g->PL + (g->pw + 1) / 2, g->Wq, nr, g->W);
      continue;
    }
    for (int64_t pc = 0; pc < g->sw; pc++) {
      int64_t lo, hi, off = pc - g->pw;
      k_dw_cols(g, pc, &lo, &hi);
      for (int64_t k = 0; k < nr; k++) {
        const float *s = x + (ih0 + k * g->sh) * g->W;
        float *d = row + pc * g->PL + k * g->Wq;
        for (int64_t c = lo; c < hi; c++) d[c] = s[c * g->sw + off];
      }
    }
  }
}

/* The inverse for the input's own positions: dx [H][W] (+)= the phase planes dxp. */
static void k_dw_unphase(const k_dw_geom *g, const k_dw_isa *isa, const float *dxp, int add, float *dx) {
  for (int64_t pr = 0; pr < g->sh; pr++) {
    int64_t ih0, nr = k_dw_phase_rows(g, pr, &ih0);
    if (nr == 0) continue;
    const float *row = dxp + pr * g->sw * g->PL + (ih0 + g->ph) / g->sh * g->Wq;
    if (g->sw == 1) {
      isa->rows(row + g->pw, g->Wq, dx + ih0 * g->W, g->sh * g->W, nr, g->W, add);
      continue;
    }
    if (g->sw == 2) {
      isa->merge(row + g->pw % 2 * g->PL + g->pw / 2, row + (g->pw + 1) % 2 * g->PL + (g->pw + 1) / 2,
                 g->Wq, dx + ih0 * g->W, g->sh * g->W, nr, g->W, add);
      continue;
    }
    for (int64_t pc = 0; pc < g->sw; pc++) {
      int64_t lo, hi, off = pc - g->pw;
      k_dw_cols(g, pc, &lo, &hi);
      for (int64_t k = 0; k < nr; k++) {
        const float *s = row + pc * g->PL + k * g->Wq;
        float *d = dx + (ih0 + k * g->sh) * g->W;
        if (add) for (int64_t c = lo; c < hi; c++) d[c * g->sw + off] += s[c];
        else for (int64_t c = lo; c < hi; c++) d[c * g->sw + off] = s[c];
      }
    }
  }
}

/* Output-gradient plane dy [OH][OW] -> b at offset omax, rows Wq apart (the rest stays 0, so
 * the dropped columns and everything outside dy read as zero). */
static void k_dw_dy_rows(const k_dw_geom *g, const k_dw_isa *isa, const float *dy, float *b) {
  isa->rows(dy, g->OW, b + g->omax, g->Wq, g->OH, g->OW, 0);
}

/* Staged output plane (rows of Wq) -> y [OH][OW], adding for kAddTo. */
static void k_dw_unstage(const k_dw_geom *g, const k_dw_isa *isa, const float *s, int add, float *y) {
  isa->rows(s, g->Wq, y, g->OW, g->OH, g->OW, add);
}

/* ---- tasks -------------------------------------------------------------------------------- */

typedef struct {
  const k_call *c;
  const k_dw_geom *g;
  const k_dw_isa *isa;
  int64_t grain;                       /* tasks per chunk: chunk lo / grain uses that slot */
  int64_t off[K_DW_MAX_TAPS];          /* tap t's offset from the output position */
  int64_t phase[K_DW_MAX_TAPS];        /* and its phase plane */
} k_dw_job;

static void k_dw_job_init(k_dw_job *j, const k_call *c, const k_dw_geom *g, int64_t tasks) {
  j->c = c, j->g = g, j->isa = k_dw_pick();
  j->grain = (tasks + g->slots - 1) / g->slots;
  for (int64_t ki = 0; ki < g->kh; ki++)
    for (int64_t kj = 0; kj < g->kw; kj++) {
      int64_t t = ki * g->kw + kj, a = ki * g->dh, b = kj * g->dw;
      j->off[t] = a / g->sh * g->Wq + b / g->sw;
      j->phase[t] = a % g->sh * g->sw + b % g->sw;
    }
}

static float *k_dw_slot(const k_dw_job *j, int64_t lo) {
  return (float *)j->c->temp + lo / j->grain * j->g->slot;
}

/* src[ch*taps + t]: where term (input channel ch of the group, tap t) reads, from a group's
 * phase planes xp, in the order of a filter's weights [Cg][kh][kw]. */
static void k_dw_taps(const k_dw_job *j, const float *xp, const float **src) {
  const k_dw_geom *g = j->g;
  for (int64_t ch = 0; ch < g->Cg; ch++)
    for (int64_t t = 0; t < g->taps; t++) src[ch * g->taps + t] = xp + ch * g->PS + j->phase[t] * g->PL + j->off[t];
}

/* Whether a plane's forward may run the ISA's srows: one input channel a group, strides and
 * dilations 1 (one phase plane, read at ki * Wq + kj), rows of 3, 5 or 7 taps; 3 taps only on
 * rows of more than 8 outputs, as a row takes a whole vector where the flat sum packs the
 * plane's rows together: a 3x3 layer on 7x7 planes ran 0.95x on it, a 7x7 one 1.1-1.2x, 3x3 on
 * 14x14 1.03-1.4x, and 5x5 and 7x7 on 14x14 and 56x56 1.25-1.8x (96 channels, Zen 5). */
static int k_dw_srows_fit(const k_dw_geom *g) {
  return g->Cg == 1 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 &&
         (g->kw == 5 || g->kw == 7 || (g->kw == 3 && g->OW > 8));
}

/* Tasks i = n*G + group: the group's M output planes from its Cg input planes (planes
 * i*Cg .. i*Cg+Cg-1 of X), which are planes i*M .. i*M+M-1 of Y, so a chunk's planes are
 * contiguous and the epilogue runs on runs of them. */
static void k_dw_fwd_tasks(void *ctx, int64_t lo, int64_t hi) {
  const k_dw_job *j = ctx;
  const k_dw_geom *g = j->g;
  const k_call *c = j->c;
  const k_conv_param *p = c->param;
  const float *X = c->in[0].data, *Wt = c->in[1].data, *bias = p->no_bias ? NULL : c->in[2].data;
  float *Y = c->out[0].data, *xp = k_dw_slot(j, lo), *ys = xp + 2 * g->Cg * g->PS;
  const float *src[K_DW_MAX_TAPS];
  int64_t ohw = g->OH * g->OW, done = lo;
  k_dw_srows_fn srows = k_dw_srows_fit(g) ? j->isa->srows : NULL;
  k_dw_clear_slot(g, xp);
  for (int64_t i = lo; i < hi; i++) {
    for (int64_t ch = 0; ch < g->Cg; ch++) k_dw_phases(g, j->isa, X + (i * g->Cg + ch) * g->H * g->W, xp + ch * g->PS);
    if (!srows) k_dw_taps(j, xp, src);
    for (int64_t m = 0; m < g->M; m++) {
      int64_t f = i % g->G * g->M + m;
      if (srows) {
        srows(xp, g->Wq, g->OH, g->OW, g->kh, g->kw, Wt + f * g->wk, bias ? bias[f] : 0.0f, c->req[0] == kAddTo,
              Y + (i * g->M + m) * ohw);
        continue;
      }
      j->isa->sum(ys, g->OH * g->Wq, src, Wt + f * g->wk, g->wk, bias ? bias[f] : 0.0f, 0);
      k_dw_unstage(g, j->isa, ys, c->req[0] == kAddTo, Y + (i * g->M + m) * ohw);
    }
    if ((i + 1 - done) * g->M * ohw >= K_DW_EPI_FLOATS || i + 1 == hi) {
      k_epi_apply(c, done * g->M * ohw, (i + 1) * g->M * ohw);   /* the planes, still in cache */
      done = i + 1;
    }
  }
}

/* ---- forward on channel-blocked tensors ---------------------------------------------------- */

/* A shape the blocked forward computes: 2-D, one filter per channel (F = C = G), a non-empty
 * output, at most K_DW_MAX_TAPS taps. Not KILN_CONV: a layer compiled blocked runs blocked
 * whatever it says at run time (its neighbours read or write that layout). */
static int k_dw_blocked_shape(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  if (data->rank != 4 || p->kernel.n != 2 || p->num_group <= 1) return 0;
  k_dw_geom g = k_dw_geometry(data, weight, p);
  return g.Cg == 1 && g.M == 1 && g.N > 0 && g.OH > 0 && g.OW > 0 && g.taps <= K_DW_MAX_TAPS;
}

/* A depthwise layer the layout pass may block: its shape, and the grouped path wanted for it
 * (KILN_CONV at compile time honoured, as the plan's workspace honours it). */
int k_conv_dw_blocks(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  return k_conv_dw_wanted(data, weight, p) && k_dw_blocked_shape(data, weight, p);
}

/* Tasks i = (sample, channel block, part of the rows), a batch-1 layer's rows cut as
 * k_parallel_row_parts says (each part at least K_DWB_PART_MACS multiply-adds): each row is
 * computed alone, so the cut changes no bit. */
#define K_DWB_PART_MACS (64 * 1024)
typedef struct {
  const k_call *c;
  const k_dw_isa *isa;
  k_dw_bgeom g;
  int64_t V, C, Cb, parts;
  int pad;          /* each block copied zero-padded first (k_dwb_pad_wanted), */
  k_dw_bgeom q;     /* into a plane of this geometry (k_dwb_padded) */
  const float *packed;   /* every block's k_dwb_pack, [Cb][taps + 1][V], from the call's cache,
                            or NULL: each task packs its own */
  k_epi_store store;
  const k_epi_store *tail;   /* &store when the epilogue is a relu or clip alone (run in the
                                store, k_dw_brows), else NULL: a pass over each run of rows */
} k_dwb_job;

/* Channel block cb's tap weights wv [kh*kw][V] and bias bv [V] from W [C][1][kh][kw], 0 past C. */
static void k_dwb_pack(const k_dwb_job *j, int64_t cb, float *wv, float *bv) {
  const k_conv_param *p = j->c->param;
  const float *W = j->c->in[1].data, *bias = p->no_bias ? NULL : j->c->in[2].data;
  int64_t taps = j->g.kh * j->g.kw;
  for (int64_t l = 0; l < j->V; l++) {
    int64_t ch = cb * j->V + l;
    for (int64_t t = 0; t < taps; t++) wv[t * j->V + l] = ch < j->C ? W[ch * taps + t] : 0.0f;
    bv[l] = ch < j->C && bias ? bias[ch] : 0.0f;
  }
}

/* A small plane whose edge columns (those with a tap outside the row: k_conv_dw_blocked.h
 * runs them apart, each tap checked) are a quarter or more of its columns, under a kernel 5
 * wide or more at stride 1, is copied zero-padded into a stack block of at most
 * K_DWB_PAD_FLOATS, and every position runs as an interior tile on the copy: a tap outside
 * adds w * 0 either way, so the same bits. MNASNet's 5x5 layers on 7x7 planes (4 edge columns
 * in 7) ran 1.46x ORT's time; padded, 0.69x of their time before and 14x14 0.76x. Measured
 * (bench/README.md), the copy cost more than it saved for 3x3 kernels (1.10-1.16x on 7x7 and
 * 14x14) and at stride 2 (1.20x). KILN_DW_PAD=0 turns it off. */
#define K_DWB_PAD_FLOATS 8192
static int64_t k_dwb_padded_len(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d) {
  int64_t need = (out - 1) * s + (k - 1) * d + 1;   /* the last output's last tap, + 1 */
  return need > in + p ? need : in + p;
}

/* The padded copy's geometry: no pads, the plane grown to hold every tap. */
static k_dw_bgeom k_dwb_padded(const k_dw_bgeom *g) {
  k_dw_bgeom q = *g;
  q.H = k_dwb_padded_len(g->H, g->OH, g->kh, g->sh, g->ph, g->dh);
  q.W = k_dwb_padded_len(g->W, g->OW, g->kw, g->sw, g->pw, g->dw);
  q.ph = q.pw = 0;
  return q;
}

static int k_dwb_pad_wanted(const k_dw_bgeom *g, int64_t V) {
  const char *env = getenv("KILN_DW_PAD");
  k_dw_bgeom q = k_dwb_padded(g);
  int64_t lo, hi;
  k_dwb_interior(g, &lo, &hi);
  return g->sw == 1 && g->kw >= 5 && 4 * (g->OW - (hi - lo)) >= g->OW && q.H * q.W * V <= K_DWB_PAD_FLOATS &&
         !(env && !strcmp(env, "0"));
}

/* x [H][W][V] into xp [q.H][q.W][V], zeros around it. */
static void k_dwb_pad_copy(const k_dw_bgeom *g, const k_dw_bgeom *q, int64_t V, const float *x, float *xp) {
  memset(xp, 0, (size_t)(q->H * q->W * V) * sizeof(float));
  for (int64_t h = 0; h < g->H; h++)
    memcpy(xp + ((h + g->ph) * q->W + g->pw) * V, x + h * g->W * V, (size_t)(g->W * V) * sizeof(float));
}

/* The packed weights and biases of every block, kept in the call's cache (a predict
 * program's, k_base.h) when the weights and bias are stable inputs: packed once per weight
 * change instead of per call (144 scattered copies a 3x3 block: MNASNet's depthwise layers on
 * 14x14 and 7x7 planes went 7-15% faster). NULL without a cache or memory for it. */
static const float *k_dwb_cached(const k_dwb_job *j) {
  k_cache *k = j->c->cache;
  const k_conv_param *p = j->c->param;
  int64_t per = (j->g.kh * j->g.kw + 1) * j->V;
  size_t bytes = (size_t)(j->Cb * per) * sizeof(float);
  uint64_t key = 0x6b64770000000000ull | (uint64_t)j->V;
  if (!k || !k_cache_stable(k, 1, p->no_bias ? 1 : 2)) return NULL;
  int fill;
  float *d = k_cache_reserve(k, key, bytes, &fill);
  for (int64_t cb = 0; fill && cb < j->Cb; cb++) k_dwb_pack(j, cb, d + cb * per, d + cb * per + per - j->V);
  if (fill) k->key = key;
  return d;
}

static void k_dwb_tasks(void *ctx, int64_t lo, int64_t hi) {
  const k_dwb_job *j = ctx;
  const k_dw_bgeom *g = &j->g;
  int64_t V = j->V, plane = g->OH * g->OW * V, rows = K_DW_EPI_FLOATS / (g->OW * V);
  float wv[K_DW_MAX_TAPS * 16], bv[16];
  _Alignas(64) float xp[K_DWB_PAD_FLOATS];
  if (rows < 1) rows = 1;
  for (int64_t i = lo; i < hi; i++) {
    int64_t n = i / (j->Cb * j->parts), cb = i / j->parts % j->Cb, part = i % j->parts;
    int64_t r0 = part * g->OH / j->parts, r1 = (part + 1) * g->OH / j->parts, blk = n * j->Cb + cb;
    const float *x = (const float *)j->c->in[0].data + blk * g->H * g->W * V;
    float *y = (float *)j->c->out[0].data + blk * plane;
    const float *w = wv, *b = bv;
    if (j->packed) w = j->packed + cb * (g->kh * g->kw + 1) * V, b = w + g->kh * g->kw * V;
    else k_dwb_pack(j, cb, wv, bv);
    if (j->pad) k_dwb_pad_copy(g, &j->q, V, x, xp);
    for (int64_t r = r0; r < r1; r += rows) {   /* the epilogue on each run of rows, still in cache */
      int64_t e = r + rows < r1 ? r + rows : r1;
      j->isa->brows[V == 16](j->pad ? &j->q : g, j->pad ? xp : x, w, b, j->tail, y, r, e);
      if (!j->tail) k_epi_apply_blocked(j->c, y + r * g->OW * V, blk * plane + r * g->OW * V, blk * plane + e * g->OW * V, V);
    }
  }
}

/* A compiled blocked layout this call cannot honour is refused with a message, never guessed
 * at: the same width in and out, 8 or 16, a depthwise 2-D layer, written (not accumulated). */
static int k_dwb_check(const k_call *c) {
  const k_conv_param *p = c->param;
  const char *why = NULL;
  if ((p->in_block != 8 && p->in_block != 16) || p->out_block != p->in_block || p->epi_block != p->in_block)
    why = "input, output and epilogue must be blocked alike, 8 or 16 wide";
  else if (!k_dw_blocked_shape(&c->in[0].shape, &c->in[1].shape, p)) why = "only a 2-D depthwise layer runs blocked";
  else if (c->req[0] != kWriteTo && c->req[0] != kWriteInplace) why = "a blocked output cannot be accumulated";
  else if (k_epi_has_stats(c->epi)) why = "batch statistics are gathered on NCHW output only";
  if (!why) return 0;
  snprintf(c->err, c->err_len, "convolution (depthwise): compiled blocked layout (in %d, out %d, epilogue %d): %s",
           p->in_block, p->out_block, p->epi_block, why);
  return 1;
}

static int k_conv_dw_forward_blocked(const k_call *c) {
  if (k_dwb_check(c)) return 1;
  const k_conv_param *p = c->param;
  k_dw_geom dg = k_dw_geometry(&c->in[0].shape, &c->in[1].shape, p);
  k_dwb_job j = {c, k_dw_pick(), {dg.H, dg.W, dg.OH, dg.OW, dg.kh, dg.kw, dg.sh, dg.sw, dg.ph, dg.pw, dg.dh, dg.dw},
                 p->in_block, dg.C, (dg.C + p->in_block - 1) / p->in_block, 1, 0, {0}, NULL, {0}, NULL};
  if (c->epi && k_epi_store_of(c->epi, &j.store) && j.store.add_slot < 0) j.tail = &j.store;
  j.pad = k_dwb_pad_wanted(&j.g, j.V);
  j.q = k_dwb_padded(&j.g);
  j.packed = k_dwb_cached(&j);
  int64_t tasks = dg.N * j.Cb;
  j.parts = k_parallel_row_parts(tasks, dg.OH, dg.OW * j.V * dg.taps, K_DWB_PART_MACS);
  K_PROFILE_NOTE("depthwise blocked %lldx%lld/%lld%s, %lld tasks", (long long)dg.kh, (long long)dg.kw, (long long)dg.sh,
                 j.pad ? " padded" : "", (long long)(tasks * j.parts));
  k_parallel_for(tasks * j.parts, 1, k_dwb_tasks, &j);
  return 0;
}

int k_conv_dw_forward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  const k_conv_param *p = c->param;
  if (p->in_block || p->out_block || p->epi_block) return k_conv_dw_forward_blocked(c);
  k_dw_geom g = k_dw_geometry(&c->in[0].shape, &c->in[1].shape, c->param);
  k_dw_job j;
  k_dw_job_init(&j, c, &g, g.N * g.G);
  K_PROFILE_NOTE("grouped nchw, %lld groups, grain %lld", (long long)(g.N * g.G), (long long)j.grain);
  k_parallel_for(g.N * g.G, j.grain, k_dw_fwd_tasks, &j);
  return 0;
}

/* The data gradient of the group's input plane ch from output plane dyb (k_dw_dy_rows) of
 * filter f: each phase plane sums the taps that read it, shifted the other way; add for the
 * group's filters after its first. */
static void k_dw_grad_x(const k_dw_job *j, const float *dyb, int64_t f, int64_t ch, int add, float *dxp) {
  const k_dw_geom *g = j->g;
  const float *Wt = (const float *)j->c->in[2].data + f * g->wk + ch * g->taps;
  const float *src[K_DW_MAX_TAPS];
  float w[K_DW_MAX_TAPS];
  for (int64_t ph = 0; ph < g->sh * g->sw; ph++) {
    int64_t n = 0;
    for (int64_t t = 0; t < g->taps; t++)
      if (j->phase[t] == ph) src[n] = dyb + g->omax - j->off[t], w[n++] = Wt[t];
    j->isa->sum(dxp + ph * g->PL, g->Hq * g->Wq, src, w, n, 0.0f, add);
  }
}

/* Sample n, group gi of the backward pass: the weight gradient of the group's M filters into
 * the part's partial (the part's first sample n0 writes it, later ones add) and the data
 * gradient of its Cg planes. */
static void k_dw_bwd_plane(const k_dw_job *j, float *xp, int64_t pt, int64_t n0, int64_t n, int64_t gi) {
  const k_dw_geom *g = j->g;
  const k_call *c = j->c;
  const float *dY = c->in[0].data, *X = c->in[1].data;
  float *dxp = xp + g->Cg * g->PS, *dyb = dxp + g->Cg * g->PS;
  float *wpart = (float *)c->temp + g->slots * g->slot + pt * g->F * g->wk;
  int want_w = c->req[1] != kNullOp, want_x = c->req[0] != kNullOp;
  const float *src[K_DW_MAX_TAPS];
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW, x0 = n * g->C + gi * g->Cg;
  if (want_w) {
    for (int64_t ch = 0; ch < g->Cg; ch++) k_dw_phases(g, j->isa, X + (x0 + ch) * hw, xp + ch * g->PS);
    k_dw_taps(j, xp, src);
  }
  for (int64_t m = 0; m < g->M; m++) {
    int64_t f = gi * g->M + m;
    k_dw_dy_rows(g, j->isa, dY + (n * g->F + f) * ohw, dyb);
    if (want_w) j->isa->dots(dyb + g->omax, g->OH * g->Wq, src, g->wk, wpart + f * g->wk, n > n0);
    for (int64_t ch = 0; want_x && ch < g->Cg; ch++) k_dw_grad_x(j, dyb, f, ch, m > 0, dxp + ch * g->PS);
  }
  for (int64_t ch = 0; want_x && ch < g->Cg; ch++)
    k_dw_unphase(g, j->isa, dxp + ch * g->PS, c->req[0] == kAddTo, (float *)c->out[0].data + (x0 + ch) * hw);
}

/* Tasks i = part * G + group. A chunk takes its groups of each part sample by sample, in
 * memory order (group inner), so the planes it reads are contiguous; each (part, filter)
 * partial still sums its samples in order. */
static void k_dw_bwd_tasks(void *ctx, int64_t lo, int64_t hi) {
  const k_dw_job *j = ctx;
  const k_dw_geom *g = j->g;
  float *xp = k_dw_slot(j, lo);
  k_dw_clear_slot(g, xp);
  for (int64_t i = lo; i < hi;) {
    int64_t pt = i / g->G, g0 = i % g->G, g1 = hi - pt * g->G < g->G ? hi - pt * g->G : g->G;
    int64_t n0 = pt * g->N / g->parts, n1 = (pt + 1) * g->N / g->parts;
    for (int64_t n = n0; n < n1; n++)
      for (int64_t gi = g0; gi < g1; gi++) k_dw_bwd_plane(j, xp, pt, n0, n, gi);
    i = pt * g->G + g1;
  }
}

/* dW (op)= partial 0 + partial 1 + ...: the same order whichever threads made them. */
static void k_dw_sum_parts(const k_call *c, const k_dw_geom *g) {
  const float *parts = (const float *)c->temp + g->slots * g->slot;
  float *dW = c->out[1].data;
  int64_t n = g->F * g->wk;
  for (int64_t e = 0; e < n; e++) {
    float s = parts[e];
    for (int64_t pt = 1; pt < g->parts; pt++) s += parts[pt * n + e];
    dW[e] = c->req[1] == kAddTo ? dW[e] + s : s;
  }
}

/* Backward in = [dY, X, W, (b), Y]; out = [dX, dW, (db)] (k_conv.c adds db). */
int k_conv_dw_backward(const k_call *c) {
  if (c->req[0] == kNullOp && c->req[1] == kNullOp) return 0;
  k_dw_geom g = k_dw_geometry(&c->in[1].shape, &c->in[2].shape, c->param);
  k_dw_job j;
  k_dw_job_init(&j, c, &g, g.parts * g.G);
  k_parallel_for(g.parts * g.G, j.grain, k_dw_bwd_tasks, &j);
  if (c->req[1] != kNullOp) k_dw_sum_parts(c, &g);
  return 0;
}
