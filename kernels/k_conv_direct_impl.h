/* k_conv_direct_impl.h — what the direct convolution's driver (k_conv_direct.c) and its
 * block functions of each instruction set (k_conv_direct_{generic,avx2,avx512}.c, each
 * including k_conv_direct_isa.h once per width) share: the blocked geometry, the store mode
 * and the dispatch table. Each instruction set is its own translation unit so that a parallel
 * build compiles them side by side (together they were one file that took minutes to compile
 * under the sanitizers while the rest of the build waited). Internal to the kernel library.
 *
 * The loops are written with GCC's vector extensions, __builtin_shuffle and GCC's target
 * pragmas. Another compiler (clang builds the fuzzing harnesses, tests/fuzz) gets no direct
 * path: nothing wants it, so every convolution runs on im2col, and K_CD_GNU stays 0. */
#ifndef KILN_K_CONV_DIRECT_IMPL_H
#define KILN_K_CONV_DIRECT_IMPL_H

#include "kernels.h"
#include "k_conv_direct.h"
#include "k_epilogue.h"

#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
#define K_CD_GNU 1
#if defined(__x86_64__)
#define K_CD_X86 1
#endif

/* The sizes of one convolution in blocked form: 1-D runs as 2-D of height 1. The blocked
 * activations hold S samples at a time (a chunk of the batch), indexed from 0. */
typedef struct {
  int64_t N, S, C, H, W, F;
  int64_t kh, kw, sh, sw, dh, dw, OH, OW;
  int64_t ph, pw, phe, pwe;   /* padding at the start (ph, pw) and at the end of each axis */
  int64_t V, Cb, Fb;      /* vector width; input and output channel blocks */
  int64_t G, Cgb;         /* groups, and input blocks per group (Cb when G is 1): a grouped
                             layer runs here, forward only, when each group is whole blocks
                             of input and of output channels (k_cd_grouped_ok) */
  int64_t Hp, Wp;         /* the input's padded height and width, H + ph + phe, W + pw + pwe */
  int64_t rstep;          /* input rows per blocked row: 1, or sh for k_cd_skip_rows */
  int64_t vph, vpw, vphe, vpwe;   /* padding the block function supplies itself (only Winograd
                             does): 0, or ph, pw, phe, pwe when it reads a blocked input
                             unpadded in place */
  int64_t planar;         /* forward, one input block (k_cd_planar): the block functions read
                             the input padded but not blocked, [C][Hp][Wp + V] a sample
                             (k_cd_xplane floats a channel), instead of xb */
  int64_t prefetch;       /* forward: each output block group's first tile fetches the next
                             group's weights (fwd_tile's pf); k_cd_prefetch says when */
} k_cd_geom;

/* The most bytes of one output block's weights that fwd_tile fetches ahead (k_cd_geom.prefetch):
 * an expansion's short blocks (MNASNet's 192 -> 1152: 12 KB), not a 3x3 layer's long ones. */
#define K_CD_PREFETCH_BYTES (32 * 1024)

/* Floats per channel of a planar input (k_cd_geom.planar): its padded plane, whose rows hold V
 * floats more, as k_conv_direct.c's padded NCHW copy writes them. */
static inline int64_t k_cd_xplane(const k_cd_geom *g) { return g->Hp * (g->Wp + g->V); }

/* Positions per channel block of the blocked input as xb holds it: the padded plane, less
 * the padding a Winograd block supplies itself. */
static inline int64_t k_cd_xrows(const k_cd_geom *g) { return g->Hp - g->vph - g->vphe; }
static inline int64_t k_cd_xcols(const k_cd_geom *g) { return g->Wp - g->vpw - g->vpwe; }

/* How a forward block stores its output vectors: the common tail of a blocked epilogue
 * (k_epi_store) taken into the store, so no pass over the block follows. y = acc, plus res
 * (blocked like y, read at y's offsets within the block; res + acc when swap) when res is
 * set, then relu, or a clip to [lo, hi], when asked. */
typedef struct {
  const float *res;
  int swap, relu, clip;
  float lo, hi;
} k_cd_store;

/* The block functions of one vector width (k_conv_direct_isa.h documents the layouts). */
typedef struct {
  const char *name;
  int64_t V;
  /* Plane positions q < len in rows of W, blocked rows drs floats apart:
   * dst[(q / W)*drs + (q % W)*V + c] = src[c*ld + q] (c < cn; other lanes 0), and the
   * inverse for c < cn, adding to dst when add is set. */
  void (*pack_rows)(const float *src, int64_t ld, int64_t cn, int64_t len, int64_t W, int64_t drs,
                    float *dst);
  void (*unpack_rows)(const float *src, int64_t W, int64_t srs, int64_t cn, int64_t len, float *dst,
                      int64_t ld, int add);
  /* A prologue on n positions of one packed block at x: lane l x a[l] + b[l], then relu when
   * set, with batch_norm's and relu's arithmetic (k_conv_param.pro_slot). */
  void (*pro_rows)(float *x, int64_t n, const float *a, const float *b, int relu);
  /* Rows [oh0, oh1) of yb[n][fb .. fb+nf), nf = 1 or 2, plus bias (F floats, or NULL), stored
   * through st (NULL: as computed). */
  void (*fwd_block)(const k_cd_geom *g, const float *xb, const float *wf, const float *bias,
                    float *yb, int64_t n, int64_t fb, int nf, const k_cd_store *st, int64_t oh0, int64_t oh1);
  /* The same on the Winograd path (k_cd_wino), wf holding the transformed weights: all rows
   * only (oh0 = 0, oh1 = OH). */
  void (*fwd_wino_block)(const k_cd_geom *g, const float *xb, const float *wf, const float *bias,
                         float *yb, int64_t n, int64_t fb, int nf, const k_cd_store *st, int64_t oh0, int64_t oh1);
  /* Rows [oh0, oh1) of one sample's NCHW output from its input padded but not blocked,
   * xp [C][Hp][Wp + V] (k_cd_nchw: stride 1 along the row, one input block), wf and bias as
   * fwd_block's; added to y when add is set. */
  void (*fwd_nchw_rows)(const k_cd_geom *g, const float *xp, const float *wf, const float *bias, float *y,
                        int64_t oh0, int64_t oh1, int add);
  /* dxb[n][cb .. cb+nc), nc = 1 or 2 (padded), from dyb and wd, overwritten. */
  void (*bwd_data_block)(const k_cd_geom *g, const float *dyb, const float *wd, float *dxb,
                         int64_t n, int64_t cb, int nc);
  /* dwb[fb .. fb+nf][cb][ki][kj] = (add ? itself : 0) + the sum over samples [0, ns). */
  void (*bwd_weight_block)(const k_cd_geom *g, const float *xb, const float *dyb, float *dwb,
                           int64_t ns, int add, int64_t fb, int nf, int64_t cb, int64_t ki,
                           int64_t kj);
  /* Winograd (k_cd_wino_tiles): row a of the transformed sums dwb [Fb][Cb][16][V c][V f]
   * of output blocks fb .. fb+nf and input block cb, over samples [0, ns), added when add is set. */
  void (*bwd_weight_wino_block)(const k_cd_geom *g, const float *xb, const float *dyb, float *dwb,
                                int64_t ns, int add, int64_t fb, int nf, int64_t cb, int a);
} k_cd_isa;

#define K_CD_VMAX 16

/* Floats of the Winograd path's per-group input transform, a stack array of the block
 * function (k_conv_direct_isa.h): 32 KiB, so a group of tiles and its weights stay in L1.
 * k_cd_wino takes the path only for input channels that leave room for 4 tiles or more. */
#define K_CD_WINO_VT 8192

/* X(1) ... X(n): one case per compile-time tile width. */
#define K_SEQ_2(X) X(1) X(2)
#define K_SEQ_4(X) K_SEQ_2(X) X(3) X(4)
#define K_SEQ_6(X) K_SEQ_4(X) X(5) X(6)
#define K_SEQ_8(X) K_SEQ_6(X) X(7) X(8)
#define K_SEQ_12(X) K_SEQ_8(X) X(9) X(10) X(11) X(12)
#define K_SEQ_16(X) K_SEQ_12(X) X(13) X(14) X(15) X(16)
#define K_SEQ_24(X) K_SEQ_16(X) X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24)

/* The portable widths' static functions pass 32-byte vectors, which GCC warns would change
 * the ABI without AVX; nothing outside their file calls them, so there is no ABI to keep. */
#pragma GCC diagnostic ignored "-Wpsabi"

/* The tables, one per width (k_conv_direct_isa.h defines each as k_cd_isa_<suffix>). */
extern const k_cd_isa k_cd_isa_generic, k_cd_isa_generic16;
#ifdef K_CD_X86
extern const k_cd_isa k_cd_isa_avx2, k_cd_isa_avx512;
#endif

#else
#define K_CD_GNU 0
#endif
#endif
