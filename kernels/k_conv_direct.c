/* k_conv_direct.c — convolution computed directly on channel-blocked tensors (NCHW[V]c: the
 * channels in blocks of V, one vector, innermost), without im2col. Forward, data gradient
 * and weight gradient each run a register-blocked inner loop (k_conv_direct_isa.h): a tile of
 * output positions of one row times one or two channel vectors held in registers.
 *
 * The vector width follows the CPU at run time: V = 16 with AVX-512, 8 with AVX2 + FMA, and a
 * portable V = 8 build otherwise (or when KILN_CONV asks for it). Workspace is always sized for
 * V = 16, the largest: every buffer rounds channels up to V, so a narrower V needs no more.
 *
 * By default the kernel converts per call: NCHW input -> padded blocked input, blocked output
 * -> NCHW; an unblocked forward with few input channels (k_cd_nchw: an image model's stem,
 * whose 3 channels fill 3 of a block's lanes) instead copies its input zero-padded but NCHW
 * and runs fwd_nchw_rows, whose vectors hold output positions, writing NCHW directly. A
 * forward whose param carries a compiled blocked layout (k_conv_param.in_block, out_block,
 * epi_block: passes/pass_layout.c keeps values blocked between direct convolutions)
 * copies a blocked input into the padded workspace row by row (or reads it in place when
 * unpadded), writes a blocked output in place of the workspace's, and runs its epilogue on the
 * blocked result; it always runs here, at the compiled width, on the CPU's loops of that width
 * or on portable ones (generic16 exists for that). The weights -> blocked weights: the
 * forward pass keeps them in the call's k_cache when it has one (a compiled model's predict,
 * where the weights change only when they are loaded or trained: the runtime then clears
 * it), so they are packed once per weight change; otherwise, and in the backward pass (a
 * train step, after which the weights change anyway), they are packed per call. Either way a
 * batch_norm that opens the forward epilogue is folded into them (k_cd_fold_step).
 *
 * The batch runs in chunks of S samples whose blocked copies fit K_CD_CHUNK_FLOATS. Within a
 * chunk, work is split with k_parallel_for over (sample x pair of channel blocks) for the
 * forward pass and the data gradient (a 1x1 unpadded forward on an NCHW input over (sample x
 * band of rows) instead, each band packing and computing its rows: k_cd_task_band), and over
 * (pair of output blocks x input block x tap) for the weight gradient, which adds each chunk
 * onto the previous ones: each task owns what it writes and sums in a fixed order, so
 * results do not depend on the thread count. Grouped and depthwise convolutions run
 * k_conv_dw.c's own loops (or im2col). A 3x3 stride-1 convolution with an even output runs
 * Winograd (k_conv_direct_isa.h) in the same frame: the forward pass (16 to 128 input
 * channels, k_cd_wino) with weights transformed where they are packed, and
 * reading a padded blocked input in place with the block supplying the zeros; the data
 * gradient as that forward on dy (k_cd_data_geometry); the weight gradient as F(3x3, 2x2),
 * its transformed sums left in dwb and turned into dW at the end. Each rounds differently from
 * the direct loop — within a few ulp of the sum of its terms' magnitudes (test_conv_direct.c
 * measures it) — and, like it, in an order fixed by the shapes. The instruction set is picked
 * at run time, not from the model's --cpu/--features; a compiled blocked layout fixes only the
 * width (the compiling machine's, k_conv_block_width). */
#include "k_conv_direct_impl.h"
#include "k_profile.h"
#include "k_conv_dw.h"
#include "k_vec.h"
#include "k_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if K_CD_GNU

/* The widest instruction set the CPU has, narrowed by KILN_CONV=direct-avx2 / direct-generic. */
static const k_cd_isa *k_cd_pick(void) {
  const char *want = getenv("KILN_CONV");
  if (want && !strcmp(want, "direct-generic")) return &k_cd_isa_generic;
#ifdef K_CD_X86
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (__builtin_cpu_supports("avx512f") && !(want && !strcmp(want, "direct-avx2"))) return &k_cd_isa_avx512;
  if (avx2) return &k_cd_isa_avx2;
#endif
  return &k_cd_isa_generic;
}

/* The instruction set for a layer compiled blocked at width V (8 or 16): the CPU's own when
 * it has that width, the portable one of the same width otherwise or when KILN_CONV asks
 * for direct-generic. The width itself is the compiled layout's: the environment and the CPU
 * choose only how it is computed, never the layout of a tensor. */
static const k_cd_isa *k_cd_pick_width(int64_t V) {
  const char *want = getenv("KILN_CONV");
  int generic = want && !strcmp(want, "direct-generic");
#ifdef K_CD_X86
  if (!generic && V == 16 && __builtin_cpu_supports("avx512f")) return &k_cd_isa_avx512;
  if (!generic && V == 8 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &k_cd_isa_avx2;
#endif
  (void)generic;
  return V == 16 ? &k_cd_isa_generic16 : &k_cd_isa_generic;
}

static int64_t k_cd_out_len(int64_t in, int64_t k, int64_t s, int64_t begin, int64_t end, int64_t dil) {
  int64_t span = dil * (k - 1) + 1, padded = in + begin + end;
  return padded < span ? 0 : (padded - span) / s + 1;
}

/* Samples per chunk: as many as keep the blocked activations (sized at V = 16, the widest)
 * within K_CD_CHUNK_FLOATS, so the workspace stays near im2col's and a chunk's blocked
 * copies are still in cache (L2) when the block functions read them; at least one. An even
 * number when more than two (7 samples made 4 + 3 tasks on 2 threads, 6 make 3 + 3): fixed by
 * the shapes, never by the thread count, since the weight gradient sums chunk by chunk. */
#define K_CD_CHUNK_FLOATS (256 * 1024)

static k_cd_geom k_cd_geometry(const k_shape *x, const k_shape *w, const k_conv_param *p, int64_t V) {
  k_cd_geom g;
  int two = p->kernel.n == 2, last = p->kernel.n - 1;
  g.N = x->d[0]; g.C = x->d[1];
  g.H = two ? x->d[2] : 1; g.W = x->d[x->rank - 1];
  g.F = w->d[0];
  g.kh = two ? p->kernel.v[0] : 1; g.kw = p->kernel.v[last];
  g.sh = two ? p->stride.v[0] : 1; g.sw = p->stride.v[last];
  g.ph = two ? k_conv_pad_begin(p, 0) : 0;  g.pw = k_conv_pad_begin(p, last);
  g.phe = two ? k_conv_pad_end(p, 0) : 0;   g.pwe = k_conv_pad_end(p, last);
  g.dh = two ? p->dilate.v[0] : 1; g.dw = p->dilate.v[last];
  g.OH = k_cd_out_len(g.H, g.kh, g.sh, g.ph, g.phe, g.dh);
  g.OW = k_cd_out_len(g.W, g.kw, g.sw, g.pw, g.pwe, g.dw);
  g.V = V;
  g.Cb = (g.C + V - 1) / V; g.Fb = (g.F + V - 1) / V;
  g.G = p->num_group > 1 ? p->num_group : 1;
  g.Cgb = g.Cb / g.G;
  g.Hp = g.H + g.ph + g.phe; g.Wp = g.W + g.pw + g.pwe;
  g.rstep = 1;
  g.vph = g.vpw = g.vphe = g.vpwe = 0;
  g.planar = 0;
  g.prefetch = 0;
  int64_t vm = K_CD_VMAX, per = ((g.C + vm - 1) / vm * g.Hp * g.Wp + (g.F + vm - 1) / vm * g.OH * g.OW) * vm;
  g.S = per > 0 ? K_CD_CHUNK_FLOATS / per : g.N;
  if (g.S > 2) g.S &= ~(int64_t)1;   /* even: a chunk's sample tasks split evenly over 2 threads */
  g.S = g.S < 1 ? 1 : g.S > g.N ? g.N : g.S;
  return g;
}

/* An unpadded 1x1 convolution with row stride sh reads only every sh-th input row: the
 * forward pass packs those rows alone (a stride-1 conv on them), which halves the packing of
 * the ResNet's 1x1 stride-2 shortcuts. S is kept, so the blocked copies only shrink and the
 * workspace planned for the full geometry holds them. The backward pass packs every row. */
static void k_cd_skip_rows(k_cd_geom *g) {
  if (g->kh != 1 || g->ph != 0 || g->phe != 0 || g->sh == 1) return;
  g->rstep = g->sh;
  g->sh = 1;
  g->Hp = g->OH;
}

/* Whether the geometry tiles for Winograd (k_conv_direct_isa.h): 2-D 3x3, stride and
 * dilation 1, an even output height and width (whole 2x2 tiles, so no tile reads past the
 * padded input). Enough for the weight gradient's F(3x3, 2x2), whose scratch does not grow
 * with the channel counts. Properties of the shapes alone, so the workspace can be sized. */
static int k_cd_wino_tiles(const k_cd_geom *g) {
  return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 &&
         g->rstep == 1 && g->H > 1 && g->OH % 2 == 0 && g->OW % 2 == 0;
}

/* Whether the forward suits F(2x2, 3x3): it tiles, with enough input channels — with fewer
 * than 16 the transforms, which cost the same for a part-filled vector, outweigh the 2.25x
 * fewer multiply-adds (the ResNet stem's 3 channels run direct) — but not so many that a
 * group of 4 tiles overflows the stack buffer. */
static int k_cd_wino_shape(const k_cd_geom *g) {
  return k_cd_wino_tiles(g) && g->C >= 16 && g->Cb * 16 * g->V * 4 <= K_CD_WINO_VT;
}

/* Whether Winograd may run: not when KILN_WINOGRAD=0 asks for the direct loop (tests compare
 * the two; benchmarks time both). */
static int k_cd_wino_allowed(void) {
  const char *env = getenv("KILN_WINOGRAD");
  return !(env && !strcmp(env, "0"));
}

/* Whether this forward runs Winograd. */
static int k_cd_wino(const k_cd_geom *g) { return g->G == 1 && k_cd_wino_shape(g) && k_cd_wino_allowed(); }

/* The data gradient of a 3x3 stride-1 convolution as a forward convolution: dx is dy,
 * zero-padded by 2 - ph and 2 - pw at the start and 2 - phe and 2 - pwe at the end (supplied
 * by the block itself, vph, vpw, vphe, vpwe: dx[i] = sum over k of dy[i + ph - k] w[k] is a
 * correlation with the flipped weights from position i - (2 - ph) of dy, and its last
 * position H - 1 reads up to OH - 1 + 2 - phe), correlated with the weights flipped in both
 * taps and with input and output channels swapped. */
static k_cd_geom k_cd_data_geometry(const k_cd_geom *g) {
  k_cd_geom d = *g;
  d.C = g->F, d.F = g->C, d.Cb = g->Fb, d.Fb = g->Cb;
  d.H = g->OH, d.W = g->OW, d.OH = g->H, d.OW = g->W;
  d.ph = 2 - g->ph, d.pw = 2 - g->pw, d.phe = 2 - g->phe, d.pwe = 2 - g->pwe;
  d.Hp = d.H + d.ph + d.phe, d.Wp = d.W + d.pw + d.pwe;
  d.vph = d.ph, d.vpw = d.pw, d.vphe = d.phe, d.vpwe = d.pwe;
  return d;
}

/* Whether the data gradient suits Winograd, as the forward on k_cd_data_geometry (whose
 * pads 2 - p must not be negative). */
static int k_cd_wino_data_shape(const k_cd_geom *g) {
  if (g->kh != 3 || g->kw != 3 || g->ph > 2 || g->pw > 2 || g->phe > 2 || g->pwe > 2) return 0;
  k_cd_geom d = k_cd_data_geometry(g);
  return k_cd_wino_shape(&d);
}

/* Transformed taps per (output block, input block) of the packed weights (either direction). */
static int64_t k_cd_wtaps(const k_cd_geom *g, int wino) { return wino ? 16 : g->kh * g->kw; }

/* ---- workspace ---------------------------------------------------------------------------- */

/* The blocked buffers inside c->temp, each starting on a 64-byte boundary:
 *   xb   padded input of S samples; in backward reused for their padded data gradient once
 *        the weight gradient (its only other reader) is done,
 *   yb   output (forward) or output gradient (backward) of S samples,
 *   w    weights, forward or data-gradient layout,
 *   dwb  weight gradient (backward only; the forward pass reserves it too, since the planner
 *        asks one size for both). */
typedef struct { float *xb, *yb, *w, *dwb; } k_cd_bufs;

static int64_t k_cd_round(int64_t floats) { return (floats + 15) / 16 * 16; }

static int64_t k_cd_floats(const k_cd_geom *g, int64_t sizes[4]) {
  int wino = k_cd_wino_tiles(g) || k_cd_wino_data_shape(g);   /* the forward's k_cd_wino_shape implies tiles */
  int64_t V = g->V, wsz = g->Fb * g->Cgb * k_cd_wtaps(g, wino) * V * V;
  sizes[0] = k_cd_round(g->S * g->Cb * g->Hp * g->Wp * V);
  sizes[1] = k_cd_round(g->S * g->Fb * g->OH * g->OW * V);
  sizes[2] = k_cd_round(wsz);
  sizes[3] = k_cd_round(wsz);
  return sizes[0] + sizes[1] + sizes[2] + sizes[3] + 16;   /* + alignment slack */
}

static k_cd_bufs k_cd_layout(const k_cd_geom *g, void *temp) {
  int64_t sizes[4];
  k_cd_floats(g, sizes);
  float *p = (float *)(((uintptr_t)temp + 63) & ~(uintptr_t)63);
  k_cd_bufs b = {p, p + sizes[0], p + sizes[0] + sizes[1], p + sizes[0] + sizes[1] + sizes[2]};
  return b;
}

/* ---- which path ------------------------------------------------------------------------- */

/* Measured on the example models' layers (bench/kernels, 1 thread, AVX-512; bench/README.md):
 * the direct forward pass beats im2col + GEMM on every one, down to 1 input channel. The
 * backward passes lose with few input channels: the weight gradient then has too few
 * accumulators per loaded vector and the data gradient fills few lanes of each vector. */
static int k_cd_shape_wins(const k_cd_geom *g, int backward) { return !backward || g->C >= 8; }

/* A grouped layer whose groups are whole blocks of input and of output channels is a dense
 * one block-diagonal in the blocks: output block fb reads only its group's input blocks,
 * [fb / (Fb / G) * Cgb, + Cgb), with weights packed as a dense layer of C / G channels
 * ([Fb][Cgb][kh][kw][V][V]). RegNet's 3x3 layers (16 channels a group) ran on the NCHW
 * grouped loops (k_conv_dw.c), 32% of regnet_x_400mf's time. Depthwise layers (one channel a
 * group) are k_conv_dw.c's. Forward only: the gradients keep their grouped path. */
static int k_cd_grouped_ok(const k_cd_geom *g) {
  return g->G == 1 || (g->C % (g->G * g->V) == 0 && g->F % (g->G * g->V) == 0);
}

/* A grouped layer of whole blocks at the widest vector (so at any narrower one too), whatever
 * KILN_CONV says: what a compiled blocked layout holds to. */
static int k_cd_grouped_whole(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  k_cd_geom g = k_cd_geometry(data, weight, p, K_CD_VMAX);
  return p->num_group > 1 && k_cd_grouped_ok(&g);
}

/* One group's geometry: C / G input channels in Cgb blocks (the geometry itself when G is 1).
 * Its weights pack as a dense layer's, and its block functions read Cgb input blocks. */
static k_cd_geom k_cd_group_geometry(const k_cd_geom *g) {
  k_cd_geom q = *g;
  q.C = g->C / g->G, q.Cb = g->Cgb, q.G = 1;
  return q;
}

int k_conv_direct_wanted(const k_shape *data, const k_shape *weight, const k_conv_param *p,
                         int backward) {
  k_cd_geom g = k_cd_geometry(data, weight, p, K_CD_VMAX);
  const char *force = getenv("KILN_CONV");
  if (g.N == 0 || g.OH == 0 || g.OW == 0 || (force && !strcmp(force, "im2col"))) return 0;
  /* a grouped layer: forward only; KILN_CONV=grouped-* leaves it to the grouped paths (k_conv.c) */
  if (p->num_group > 1) return !backward && k_cd_grouped_ok(&g) && !(force && !strncmp(force, "grouped-", 8));
  if (force && !strncmp(force, "direct", 6)) return 1;
  return k_cd_shape_wins(&g, backward);
}

/* A forward whose data or output the layout pass keeps blocked must run here, whatever
 * KILN_CONV says now: its neighbours read or wrote that layout. */
static int k_cd_blocked(const k_conv_param *p) { return p->in_block || p->out_block || p->epi_block; }

/* What the compiler decided a forward runs here, whatever KILN_CONV says now: a blocked
 * layout, or a prologue (k_conv_param.pro_slot), which only this path applies. */
static int k_cd_compiled(const k_conv_param *p) { return k_cd_blocked(p) || p->pro_slot; }

/* A 1x1, unpadded, ungrouped layer: its packed rows are its input's, a position at a time. */
static int k_cd_pointwise(const k_cd_geom *g) {
  return g->kh == 1 && g->kw == 1 && g->ph == 0 && g->pw == 0 && g->phe == 0 && g->pwe == 0 && g->G == 1;
}

/* The compiled layout's width (the first of in, out and epilogue that is set). */
static int64_t k_cd_block_width(const k_conv_param *p) {
  return p->in_block ? p->in_block : p->out_block ? p->out_block : p->epi_block;
}

/* Whether an unblocked forward runs fwd_nchw_rows (NCHW in and out, no blocked layout): stride
 * 1 along the row, at most K_CD_NCHW_C input channels (one block, mostly empty: the stem of an
 * image model), output rows and channels in whole vectors (its vectors hold positions and it
 * keeps a block of channels, so a part-filled one idles lanes: LeNet's 1 -> 20 5x5 layer, 24
 * wide, ran at 30 GFLOP/s against the blocked path's 40, where the ResNet stem went from 49 to
 * 79: bench/README.md), not Winograd (which wants 16 channels or more anyway), and the padded NCHW copy
 * [C][Hp][Wp + V] of a sample no larger than its blocked copy [Hp][Wp][V], whose place in the
 * workspace it takes. KILN_CONV_NCHW=0 turns it off (tests compare, benchmarks time both). */
#define K_CD_NCHW_C 4
/* Few enough input channels for a padded NCHW copy, [C][Hp][Wp + V] a sample, to take the
 * blocked copy's place in the workspace: what k_cd_nchw and k_cd_planar both read. */
static int k_cd_nchw_copy_fits(const k_cd_geom *g) {
  return g->C <= K_CD_NCHW_C && g->C * (g->Wp + g->V) <= g->V * g->Wp;
}

static int k_cd_nchw(const k_cd_geom *g, const k_conv_param *p, int wino) {
  const char *env = getenv("KILN_CONV_NCHW");
  return !k_cd_blocked(p) && !wino && g->sw == 1 && g->OW % g->V == 0 && g->F % g->V == 0 && k_cd_nchw_copy_fits(g) &&
         !(env && !strcmp(env, "0"));
}

/* Whether a forward that is not k_cd_nchw's reads its NCHW input planar (k_cd_geom.planar):
 * the same padded copy [C][Hp][Wp + V] instead of a blocked one, for at most K_CD_NCHW_C
 * input channels (an image model's stem: stride 2, or an output kept blocked), not Winograd
 * and not grouped, where the copy fits the blocked copy's place. Packing 3 channels into
 * 16-lane blocks wrote 5x the input's floats, mostly zeros: MNASNet's 3x3/2 stem spent about
 * half its 310 us on it. The sums are the blocked input's, so the bits are too.
 * KILN_CONV_PLANAR=0 turns it off (tests compare, benchmarks time both). */
static int k_cd_planar(const k_cd_geom *g, const k_conv_param *p, int wino, int nchw) {
  const char *env = getenv("KILN_CONV_PLANAR");
  return !p->in_block && !wino && !nchw && g->G == 1 && k_cd_nchw_copy_fits(g) && !(env && !strcmp(env, "0"));
}

/* Whether a forward's tiles fetch the next output blocks' weights ahead (k_cd_geom.prefetch):
 * always, but KILN_CONV_PREFETCH=0 turns it off (benchmarks time both). */
static int k_cd_prefetch(void) {
  const char *env = getenv("KILN_CONV_PREFETCH");
  return !(env && !strcmp(env, "0"));
}

int k_conv_direct_planar(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  if (!k_cd_blocked(p) && !k_conv_direct_wanted(data, weight, p, 0)) return 0;
  const k_cd_isa *isa = k_cd_blocked(p) ? k_cd_pick_width(k_cd_block_width(p)) : k_cd_pick();
  k_cd_geom g = k_cd_geometry(data, weight, p, isa->V);
  int wino = k_cd_wino(&g);
  return k_cd_planar(&g, p, wino, k_cd_nchw(&g, p, wino));
}

int k_conv_direct_nchw(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  if (!k_conv_direct_wanted(data, weight, p, 0)) return 0;
  k_cd_geom g = k_cd_geometry(data, weight, p, k_cd_pick()->V);
  return k_cd_nchw(&g, p, k_cd_wino(&g));
}

int k_conv_block_width(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  if (data->rank != 4 || !(k_conv_direct_wanted(data, weight, p, 0) || k_conv_dw_blocks(data, weight, p))) return 0;
  return (int)k_cd_pick()->V;
}

int k_conv_block_together(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  return k_conv_dw_blocks(data, weight, p);
}

int k_conv_prologue_ok(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  if (data->rank != 4 || weight->rank != 4 || p->kernel.n != 2 || p->num_group > 1 || p->in_block) return 0;
  k_cd_geom g = k_cd_geometry(data, weight, p, K_CD_VMAX);
  return k_cd_pointwise(&g) && g.C > K_CD_NCHW_C && g.N > 0 && g.OH > 0 && g.OW > 0;
}

/* A grouped layer runs here only when its groups are whole blocks (k_cd_grouped_ok); a
 * depthwise one never (a blocked one is k_conv_dw.c's): sized as a dense one, MNASNet's
 * blocked 5x5 depthwise layers on 1152 channels asked 266 MB each, and create spent a second
 * clearing the arena. */
size_t k_conv_direct_temp_bytes(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  int here = p->num_group > 1 ? (k_cd_blocked(p) ? k_cd_grouped_whole(data, weight, p) : k_conv_direct_wanted(data, weight, p, 0))
                              : k_cd_compiled(p) || k_conv_direct_wanted(data, weight, p, 0) ||
                                  k_conv_direct_wanted(data, weight, p, 1);
  if (!here) return 0;
  k_cd_geom g = k_cd_geometry(data, weight, p, K_CD_VMAX);
  int64_t sizes[4];
  return (size_t)k_cd_floats(&g, sizes) * sizeof(float);
}

/* Wanted for this direction, and the planned workspace holds the direct path's (sized the
 * same for both directions whenever either wants it, so that asking is enough). */
int k_conv_direct_runs(const k_call *c, const k_shape *data, const k_shape *weight, int backward) {
  /* k_conv_direct_forward checks the rest; a blocked depthwise layer is k_conv_dw.c's */
  const k_conv_param *p = c->param;
  if (!backward && k_cd_compiled(p)) return p->num_group <= 1 || k_cd_grouped_whole(data, weight, p);
  return k_conv_direct_wanted(data, weight, c->param, backward) && c->temp &&
         c->temp_bytes >= k_conv_direct_temp_bytes(data, weight, c->param);
}

/* ---- layout conversion ------------------------------------------------------------------ */

/* The zero margin of a blocked plane: rows above and below its rows, columns left and right
 * of them (a convolution's pads at the start and end of each axis, or none). */
typedef struct { int64_t top, left, bottom, right; } k_cd_margin;

static k_cd_margin k_cd_margin_of(const k_cd_geom *g) { return (k_cd_margin){g->ph, g->pw, g->phe, g->pwe}; }

static const k_cd_margin k_cd_no_margin = {0, 0, 0, 0};

/* Zeroes the margin of a blocked plane dst [top + rows + bottom][left + W + right][V]. */
static void k_cd_zero_margin(int64_t V, k_cd_margin m, int64_t W, int64_t rows, float *dst) {
  int64_t Wp = m.left + W + m.right;
  memset(dst, 0, (size_t)(m.top * Wp * V) * sizeof(float));
  memset(dst + (m.top + rows) * Wp * V, 0, (size_t)(m.bottom * Wp * V) * sizeof(float));
  for (int64_t h = 0; (m.left > 0 || m.right > 0) && h < rows; h++) {
    float *row = dst + (h + m.top) * Wp * V;
    memset(row, 0, (size_t)(m.left * V) * sizeof(float));
    memset(row + (m.left + W) * V, 0, (size_t)(m.right * V) * sizeof(float));
  }
}

/* Channels [cb*V, cb*V + V) of one NCHW image src [nch][H][W] -> one block dst
 * [top+rows+bottom][left+W+right][V] of its rows 0, rstep, 2 rstep, ... (rows of them), zero
 * in the margin m and in lanes past nch. */
static void k_cd_pack_block(const k_cd_isa *isa, const float *src, int64_t nch, int64_t H, int64_t W,
                            k_cd_margin m, int64_t cb, int64_t rows, int64_t rstep, float *dst) {
  int64_t V = isa->V, Wp = m.left + W + m.right, cn = nch - cb * V < V ? nch - cb * V : V;
  k_cd_zero_margin(V, m, W, rows, dst);
  src += cb * V * H * W;
  dst += (m.top * Wp + m.left) * V;
  if (rstep == 1) {
    isa->pack_rows(src, H * W, cn, rows * W, W, Wp * V, dst);
    return;
  }
  for (int64_t h = 0; h < rows; h++) isa->pack_rows(src + h * rstep * W, H * W, cn, W, W, Wp * V, dst + h * Wp * V);
}

/* The same from a blocked image's block src [H][W][V] (all V lanes copied: those past nch
 * are never summed): rows 0, rstep, ... into the dst with margin m, the margin zeroed. */
static void k_cd_pack_blocked(int64_t V, const float *src, int64_t W, k_cd_margin m, int64_t rows,
                              int64_t rstep, float *dst) {
  int64_t Wp = m.left + W + m.right;
  k_cd_zero_margin(V, m, W, rows, dst);
  for (int64_t h = 0; h < rows; h++)
    memcpy(dst + ((h + m.top) * Wp + m.left) * V, src + h * rstep * W * V, (size_t)(W * V) * sizeof(float));
}

/* The inverse for the real channels: block src (with margin m) -> dst [nch][H][W], adding
 * when req is kAddTo. */
static void k_cd_unpack_block(const k_cd_isa *isa, const float *src, int64_t nch, int64_t H, int64_t W,
                              k_cd_margin m, int64_t cb, k_req req, float *dst) {
  int64_t V = isa->V, Wp = m.left + W + m.right, cn = nch - cb * V < V ? nch - cb * V : V;
  isa->unpack_rows(src + (m.top * Wp + m.left) * V, W, Wp * V, cn, H * W, dst + cb * V * H * W, H * W,
                   req == kAddTo);
}

/* Rows [r0, r1) of an unpadded block (H x W positions) into the NCHW dst: the positions run on
 * across rows, so the rows are one run of (r1 - r0) W of them. */
static void k_cd_unpack_rows_of(const k_cd_isa *isa, const float *src, int64_t nch, int64_t H, int64_t W,
                                int64_t cb, int64_t r0, int64_t r1, k_req req, float *dst) {
  int64_t V = isa->V, cn = nch - cb * V < V ? nch - cb * V : V;
  isa->unpack_rows(src + r0 * W * V, W, W * V, cn, (r1 - r0) * W, dst + cb * V * H * W + r0 * W, H * W,
                   req == kAddTo);
}

/* W [F][C][kh][kw] -> wf [Fb][Cb][kh][kw][V c][V f] (fwd) or wd [Cb][Fb][kh][kw][V f][V c],
 * zero past F and C. */
static void k_cd_pack_weights_scaled(const k_cd_geom *g, const float *W, const float *scale, int for_data,
                                     float *out) {
  int64_t V = g->V, taps = g->kh * g->kw;
  memset(out, 0, (size_t)(g->Fb * g->Cb * taps * V * V) * sizeof(float));
  for (int64_t f = 0; f < g->F; f++)
    for (int64_t c = 0; c < g->C; c++)
      for (int64_t t = 0; t < taps; t++) {
        int64_t fb = f / V, fi = f % V, cb = c / V, ci = c % V;
        int64_t blk = for_data ? (cb * g->Fb + fb) * taps + t : (fb * g->Cb + cb) * taps + t;
        float w = W[(f * g->C + c) * taps + t];
        out[blk * V * V + (for_data ? fi * V + ci : ci * V + fi)] = scale ? w * scale[f] : w;
      }
}

static void k_cd_pack_weights(const k_cd_geom *g, const float *W, int for_data, float *out) {
  k_cd_pack_weights_scaled(g, W, NULL, for_data, out);
}

/* W [F][C][3][3] (times scale[f] when scale is set, rounded as k_cd_pack_weights_scaled
 * rounds it) -> wu [Fb][Cb][16][V c][V f] for the forward pass, or for the data gradient
 * (k_cd_data_geometry) each kernel flipped into wu [Cb][Fb][16][V f][V c]; each 3x3 kernel k
 * as G k G^T with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], in double, rounded once.
 * Zero past F and C. */
static void k_cd_pack_weights_wino(const k_cd_geom *g, const float *W, const float *scale, int for_data,
                                   float *out) {
  int64_t V = g->V;
  memset(out, 0, (size_t)(g->Fb * g->Cb * 16 * V * V) * sizeof(float));
  for (int64_t f = 0; f < g->F; f++)
    for (int64_t c = 0; c < g->C; c++) {
      double k[3][3], gk[4][3];
      for (int t = 0; t < 9; t++) {
        float w = W[(f * g->C + c) * 9 + (for_data ? 8 - t : t)];
        k[t / 3][t % 3] = scale ? w * scale[f] : w;
      }
      for (int j = 0; j < 3; j++) {
        gk[0][j] = k[0][j];
        gk[1][j] = (k[0][j] + k[1][j] + k[2][j]) / 2;
        gk[2][j] = (k[0][j] - k[1][j] + k[2][j]) / 2;
        gk[3][j] = k[2][j];
      }
      float *blk = for_data ? out + (c / V * g->Fb + f / V) * 16 * V * V + (f % V) * V + c % V
                            : out + (f / V * g->Cb + c / V) * 16 * V * V + (c % V) * V + f % V;
      for (int i = 0; i < 4; i++) {
        double u[4] = {gk[i][0], (gk[i][0] + gk[i][1] + gk[i][2]) / 2, (gk[i][0] - gk[i][1] + gk[i][2]) / 2,
                       gk[i][2]};
        for (int j = 0; j < 4; j++) blk[(i * 4 + j) * V * V] = (float)u[j];
      }
    }
}

/* The weight gradient's transformed sums m = dwb [Fb][Cb][16][V c][V f] -> dW [F][C][3][3]
 * = G^T m G (G as k_cd_pack_weights_wino's), in double, rounded once; honouring req. */
static void k_cd_unpack_weights_wino(const k_cd_geom *g, const float *dwb, k_req req, float *dW) {
  static const double gt[3][4] = {{1, 0.5, 0.5, 0}, {0, 0.5, -0.5, 0}, {0, 0.5, 0.5, 1}};
  int64_t V = g->V;
  for (int64_t f = 0; f < g->F; f++)
    for (int64_t c = 0; c < g->C; c++) {
      const float *m = dwb + (f / V * g->Cb + c / V) * 16 * V * V + (c % V) * V + f % V;
      double mg[4][3];   /* m G */
      for (int a = 0; a < 4; a++)
        for (int k = 0; k < 3; k++) {
          double v = 0;
          for (int b = 0; b < 4; b++) v += m[(a * 4 + b) * V * V] * gt[k][b];
          mg[a][k] = v;
        }
      float *d = dW + (f * g->C + c) * 9;
      for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++) {
          double v = 0;
          for (int a = 0; a < 4; a++) v += gt[i][a] * mg[a][k];
          d[i * 3 + k] = req == kAddTo ? d[i * 3 + k] + (float)v : (float)v;
        }
    }
}

/* dwb [Fb][Cb][kh][kw][V c][V f] -> dW [F][C][kh][kw], honouring req. */
static void k_cd_unpack_weights(const k_cd_geom *g, const float *dwb, k_req req, float *dW) {
  int64_t V = g->V, taps = g->kh * g->kw;
  for (int64_t f = 0; f < g->F; f++)
    for (int64_t c = 0; c < g->C; c++)
      for (int64_t t = 0; t < taps; t++) {
        float v = dwb[((f / V * g->Cb + c / V) * taps + t) * V * V + (c % V) * V + f % V];
        float *d = dW + (f * g->C + c) * taps + t;
        *d = req == kAddTo ? *d + v : v;
      }
}

/* ---- tasks ------------------------------------------------------------------------------ */

/* One chunk of the batch: samples [n0, n0 + ns) of the NCHW tensors are samples [0, ns) of
 * the blocked buffers. */
typedef struct {
  const k_cd_geom *g;
  const k_cd_isa *isa;
  const k_call *c;
  k_cd_bufs b;
  const float *src;      /* what a pack task reads (x or dy, NCHW, whole batch) */
  int64_t n0, ns;
  int64_t in_block, out_block, epi_block;   /* forward: the param's compiled layouts (0: NCHW) */
  const float *bias;     /* forward: the bias added to each output channel, or NULL */
  int wino;              /* Winograd (k_cd_wino; backward: the data gradient's), with the weights
                            transformed for it */
  int wino_w;            /* backward: the weight gradient by Winograd (k_cd_wino_tiles) */
  int store_tail;        /* forward, blocked epilogue: it is all a k_epi_store, run in the store */
  k_epi_store store;
  const k_cd_geom *dg;   /* backward with wino: the data gradient's forward (k_cd_data_geometry) */
  int64_t row_parts;     /* forward: parts each task's rows are cut into (k_cd_row_parts) */
  int64_t pack_parts;    /* forward, NCHW input: parts each block is packed in (k_cd_pack_parts) */
  int row_major;         /* forward: tasks in (part, sample, pair) order (k_parallel_row_major) */
  const float *pro_a, *pro_b;   /* forward with a prologue: its per-channel x a + b, Cb V each
                                   (zero past C), else NULL (k_cd_pro_coeffs) */
} k_cd_ctx;

/* A pack task copies one channel block of one sample, a few KiB at batch 1: tasks are grouped
 * so that a chunk copies about K_GRAIN floats, since waking the pool for less costs more than
 * the copy. Each task writes its own block, so the grouping changes no result. */
static int64_t k_cd_pack_grain(int64_t block_floats) { return k_vec_grain(block_floats); }

/* The prologue (k_conv_param.pro_slot) on n packed positions of input block cb at x (an
 * unpadded block's rows are one run): each lane batch_norm's x a + b, then relu when asked, as
 * k_norm.c's predict and the relu kernel compute them (the same bits as the two ops run
 * alone), in the ISA's vectors while the rows are in cache. Lanes past C hold zeros, with a
 * and b zero there: they stay zero. */
static void k_cd_prologue(const k_cd_ctx *t, int64_t cb, float *x, int64_t n) {
  int64_t V = t->g->V;
  t->isa->pro_rows(x, n, t->pro_a + cb * V, t->pro_b + cb * V, ((const k_conv_param *)t->c->param)->pro_relu);
}

/* Rows [r0, r1) of the packed rows of sample n's input block cb, packed from NCHW: a part is
 * a block of its own, the top margin only on the first, the bottom on the last. */
static void k_cd_pack_x_rows(const k_cd_ctx *t, int64_t n, int64_t cb, int64_t r0, int64_t r1) {
  const k_cd_geom *g = t->g;
  int64_t rows = g->Hp - g->ph - g->phe;
  k_cd_margin m = k_cd_margin_of(g);
  float *dst = t->b.xb + (n * g->Cb + cb) * g->Hp * g->Wp * g->V;
  if (r0 > 0) dst += (m.top + r0) * g->Wp * g->V, m.top = 0;
  if (r1 < rows) m.bottom = 0;
  k_cd_pack_block(t->isa, t->src + (t->n0 + n) * g->C * g->H * g->W + r0 * g->rstep * g->W, g->C, g->H, g->W, m, cb,
                  r1 - r0, g->rstep, dst);
  if (t->pro_a) k_cd_prologue(t, cb, dst + (m.top * g->Wp + m.left) * g->V, (r1 - r0) * g->W);
}

/* Task i = (sample, cb, part of the rows) packs that part of that block of x, padded. */
static void k_cd_task_pack_x(void *p, int64_t lo, int64_t hi) {
  k_cd_ctx *t = p;
  const k_cd_geom *g = t->g;
  int64_t rows = g->Hp - g->ph - g->phe, parts = t->pack_parts;
  for (int64_t i = lo; i < hi; i++) {
    int64_t n = i / (g->Cb * parts), cb = i / parts % g->Cb, part = i % parts;
    k_cd_pack_x_rows(t, n, cb, part * rows / parts, (part + 1) * rows / parts);
  }
}

/* How many parts of rows each (sample, input block) of an NCHW input is packed in: one
 * unless there are too few blocks to share among the threads. A network's first layer (3
 * channels, one block) packs its whole image into a 16-lane block on one thread otherwise:
 * MobileNetV2's 224x224 stem wrote 3.2 MB that way, half its time, while the second thread
 * waited. The parts write disjoint rows, so the packed block is the same. */
#define K_CD_PACK_PART_FLOATS (64 * 1024)
static int64_t k_cd_pack_parts(const k_cd_ctx *t) {
  const k_cd_geom *g = t->g;
  return k_parallel_row_parts(t->ns * g->Cb, g->Hp - g->ph - g->phe, g->Wp * g->V, K_CD_PACK_PART_FLOATS);
}

/* Task i = (sample, cb) copies that block of a blocked x, padded (or every rstep-th row). */
static void k_cd_task_pack_xb(void *p, int64_t lo, int64_t hi) {
  k_cd_ctx *t = p;
  const k_cd_geom *g = t->g;
  for (int64_t i = lo; i < hi; i++) {
    int64_t n = i / g->Cb, cb = i % g->Cb;
    k_cd_pack_blocked(g->V, t->src + ((t->n0 + n) * g->Cb + cb) * g->H * g->W * g->V, g->W, k_cd_margin_of(g),
                      g->Hp - g->ph - g->phe, g->rstep, t->b.xb + (n * g->Cb + cb) * g->Hp * g->Wp * g->V);
  }
}

/* Task i = (sample, fb) packs that block of dy. */
static void k_cd_task_pack_dy(void *p, int64_t lo, int64_t hi) {
  k_cd_ctx *t = p;
  const k_cd_geom *g = t->g;
  for (int64_t i = lo; i < hi; i++) {
    int64_t n = i / g->Fb, fb = i % g->Fb;
    k_cd_pack_block(t->isa, t->src + (t->n0 + n) * g->F * g->OH * g->OW, g->F, g->OH, g->OW, k_cd_no_margin,
                    fb, g->OH, 1, t->b.yb + (n * g->Fb + fb) * g->OH * g->OW * g->V);
  }
}

/* How many parts each (sample, pair of output blocks) task's rows are cut into
 * (k_parallel_row_parts, each part at least K_CD_PART_MACS multiply-adds): MobileNetV2's
 * 24-channel projection at batch 1 is one pair, one task, one busy thread otherwise. Each row
 * (each Winograd tile) is computed alone, so the cut changes no bit. The Winograd path cuts in
 * pairs of rows, its tiles' height (DenseNet's 3x3 layers of 32 channels at batch 1 were one
 * task each, 22% of its time on one thread). Not with an epilogue that gathers batch
 * statistics (whole planes). KILN_CONV_ROWS=0 turns it off (benchmarks time both). */
#define K_CD_PART_MACS (256 * 1024)
/* The output blocks a forward task computes together: a pair, or one where a grouped layer's
 * groups hold an odd number of output blocks (a pair must not straddle two groups, whose
 * inputs differ). */
static int64_t k_cd_fstep(const k_cd_geom *g) { return g->G > 1 && (g->Fb / g->G) % 2 ? 1 : 2; }
static int64_t k_cd_ftasks(const k_cd_geom *g) { return (g->Fb + k_cd_fstep(g) - 1) / k_cd_fstep(g); }

/* The rows a part holds a multiple of: 2 on the Winograd path, 1 otherwise. */
static int64_t k_cd_row_unit(const k_cd_ctx *t) { return t->wino ? 2 : 1; }

static int64_t k_cd_row_parts(const k_cd_ctx *t) {
  const k_cd_geom *g = t->g;
  const char *env = getenv("KILN_CONV_ROWS");
  int64_t unit = k_cd_row_unit(t);
  if (k_epi_has_stats(t->c->epi) || (env && !strcmp(env, "0"))) return 1;
  return k_parallel_row_parts(t->ns * k_cd_ftasks(g), g->OH / unit,
                              unit * g->OW * k_cd_fstep(g) * g->V * g->Cgb * g->V * g->kh * g->kw, K_CD_PART_MACS);
}

/* Whether a forward reading its blocked input in place runs row-major at batch 1 (its tasks
 * in (part, sample, pair) order, k_parallel_row_major): when its input holds more floats than
 * its weights (H W > F kh kw). Each thread then reads its own band of the input, mostly what
 * it wrote itself in the layer before, and all the weights; cut by output blocks, each thread
 * read the whole input, half of it from the other core's cache. MobileNetV2's and MNASNet's
 * projections (576 -> 96 at 14x14: 60 -> 58 us on two threads), ResNet-50's 1x1 layers (their
 * sum 13.1 -> 11.7 ms). Where the weights are the larger (an expansion at 7x7: 160 -> 960,
 * 614 KB), each thread reading all of them cost more than the input saved (57 -> 74 us). Not
 * with batch statistics (whole planes). Which rows a task computes is unchanged, so the bits
 * are too. */
static int k_cd_row_major_wanted(const k_cd_ctx *t) {
  const k_cd_geom *g = t->g;
  return !k_epi_has_stats(t->c->epi) && g->H * g->W > g->F * g->kh * g->kw;
}

/* Rows [r0, r1) of output blocks [fb, fb + nf) of sample n of the chunk: the blocked epilogue
 * (when not in the store), then the NCHW copy and the epilogue of the channels just written. */
static void k_cd_fwd_finish(const k_cd_ctx *t, int64_t n, int64_t fb, int nf, int64_t r0, int64_t r1) {
  const k_cd_geom *g = t->g;
  int64_t ysz = g->OH * g->OW, V = g->V;
  for (int64_t j = fb; j < fb + nf && t->epi_block && !t->store_tail; j++) {
    int64_t at = ((t->n0 + n) * g->Fb + j) * ysz * V;
    k_epi_apply_blocked(t->c, t->b.yb + ((n * g->Fb + j) * ysz + r0 * g->OW) * V, at + r0 * g->OW * V,
                        at + r1 * g->OW * V, V);
  }
  if (t->out_block) return;
  float *y = (float *)t->c->out[0].data + (t->n0 + n) * g->F * ysz;
  for (int64_t j = fb; j < fb + nf; j++)
    k_cd_unpack_rows_of(t->isa, t->b.yb + (n * g->Fb + j) * ysz * V, g->F, g->OH, g->OW, j, r0, r1, t->c->req[0], y);
  int64_t f1 = (fb + nf) * V < g->F ? (fb + nf) * V : g->F, c0 = (t->n0 + n) * g->F;
  if (t->epi_block) return;
  if (r0 == 0 && r1 == g->OH) k_epi_apply(t->c, (c0 + fb * V) * ysz, (c0 + f1) * ysz);   /* whole planes */
  else
    for (int64_t ch = c0 + fb * V; ch < c0 + f1; ch++) k_epi_apply(t->c, ch * ysz + r0 * g->OW, ch * ysz + r1 * g->OW);
}

/* Rows [r0, r1) of output blocks fb (and fb + 1 when a pair) of sample n: computed, then
 * written to Y. gg is the block functions' geometry (one group of a grouped layer). */
static void k_cd_fwd_rows(const k_cd_ctx *t, const k_cd_geom *gg, int64_t n, int64_t fb, int64_t r0, int64_t r1) {
  const k_cd_geom *g = t->g;
  int nf = k_cd_fstep(g) == 2 && fb + 1 < g->Fb ? 2 : 1;
  /* the group's first input block, placed where the block function looks for sample n's
   * first block (it steps Cgb blocks a sample; the buffer steps Cb) */
  int64_t grp = fb / (g->Fb / g->G), xshift = (n * (g->Cb - g->Cgb) + grp * g->Cgb) * k_cd_xrows(g) * k_cd_xcols(g) * g->V;
  /* the blocked epilogue runs on yb (the output tensor itself when out_block), before any
   * unpacking: in the store when it is a k_epi_store, else as a pass over the block */
  int64_t at = ((t->n0 + n) * g->Fb + fb) * g->OH * g->OW * g->V;
  k_cd_store st = {t->store.add_slot >= 0 ? (const float *)t->c->in[t->store.add_slot].data + at : NULL,
                   t->store.add_swap, t->store.relu, t->store.clip, t->store.clip_lo, t->store.clip_hi};
  (t->wino ? t->isa->fwd_wino_block : t->isa->fwd_block)(gg, t->b.xb + xshift, t->b.w, t->bias, t->b.yb, n, fb, nf,
                                                          t->store_tail ? &st : NULL, r0, r1);
  k_cd_fwd_finish(t, n, fb, nf, r0, r1);
}

/* Task i = (sample, pair of output blocks, part of the rows): computes them and writes them to Y. */
static void k_cd_task_fwd(void *p, int64_t lo, int64_t hi) {
  k_cd_ctx *t = p;
  const k_cd_geom *g = t->g;
  int64_t step = k_cd_fstep(g), pairs = k_cd_ftasks(g), parts = t->row_parts;
  int64_t unit = k_cd_row_unit(t), units = g->OH / unit;
  k_cd_geom gg = k_cd_group_geometry(g);   /* a grouped layer's block functions see one group */
  for (int64_t i = lo; i < hi; i++) {
    int64_t n, fb, part;
    if (t->row_major) part = i / (t->ns * pairs), n = i / pairs % t->ns, fb = i % pairs * step;
    else n = i / (pairs * parts), fb = i / parts % pairs * step, part = i % parts;
    k_cd_fwd_rows(t, &gg, n, fb, part * units / parts * unit, (part + 1) * units / parts * unit);
  }
}

/* Whether a layer on an NCHW input runs as bands (k_cd_task_band): 1x1 (so not Winograd),
 * unpadded, ungrouped, its packed rows its output rows (k_cd_skip_rows), no batch statistics
 * gathered. KILN_CONV_BANDS=0 turns it off (benchmarks time both). A blocked input read in
 * place, with nothing to pack, was tried in bands too (at two threads ResNet-50 1.0-1.07x,
 * EfficientNet-B1 0.93-0.98x) and not kept. With fewer samples than threads a band is a part
 * of a sample's rows and every thread reads all the weights: where they outweigh the input
 * (H W <= F, as k_cd_row_major_wanted decides for blocked inputs) the layer is split by output
 * blocks instead. ShuffleNetV2's last layer, 192 -> 1024 at 7x7, took 180 us on two threads
 * in two bands against 199 on one, and 126 split by output blocks. */
static int k_cd_banded(const k_cd_ctx *t) {
  const k_cd_geom *g = t->g;
  const char *env = getenv("KILN_CONV_BANDS");
  if (env && !strcmp(env, "0")) return 0;
  int weights_first = t->ns < k_parallel_threads() && g->H * g->W <= g->F;
  return k_cd_pointwise(g) && g->Hp == g->OH && !k_epi_has_stats(t->c->epi) && !weights_first;
}

/* Bands a sample: one a thread when the chunk has fewer samples than threads, else one. */
static int64_t k_cd_band_parts(const k_cd_ctx *t) {
  int64_t per = (k_parallel_threads() + t->ns - 1) / t->ns;   /* at least 1 */
  return per > t->g->OH ? t->g->OH : per;
}

/* The rows of a band packed and computed at a time: about K_CD_BAND_FLOATS of packed input,
 * which stays in L2 while every pair of output blocks reads it. */
#define K_CD_BAND_FLOATS (64 * 1024)
static int64_t k_cd_band_rows(const k_cd_geom *g) {
  int64_t per_row = g->Cb * g->Wp * g->V, rows = K_CD_BAND_FLOATS / (per_row > 0 ? per_row : 1);
  return rows < 1 ? 1 : rows;
}

/* Task i = (sample, band of rows) of a banded layer: a few rows at a time (k_cd_band_rows), it
 * packs them from every input block, then computes them for every pair of output blocks, so
 * the rows one thread packs are the rows it reads, while they are in its cache. Split by output
 * blocks instead, every task read the whole packed input, past L2 on large layers, and on two
 * threads half of it from the other core's cache: DenseNet's 640 -> 128 1x1 layers at 14x14
 * ran no faster on two threads than on one (170 -> 165 us; in bands 108 us). Each row is
 * packed and computed as in the other order, so the bits are the same. */
static void k_cd_task_band(void *p, int64_t lo, int64_t hi) {
  k_cd_ctx *t = p;
  const k_cd_geom *g = t->g;
  int64_t step = k_cd_fstep(g), pairs = k_cd_ftasks(g), parts = t->row_parts, sub = k_cd_band_rows(g);
  for (int64_t i = lo; i < hi; i++) {
    int64_t n = i / parts, part = i % parts, r1 = (part + 1) * g->OH / parts;
    for (int64_t r = part * g->OH / parts; r < r1; r += sub) {
      int64_t e = r + sub < r1 ? r + sub : r1;
      for (int64_t cb = 0; cb < g->Cb; cb++) k_cd_pack_x_rows(t, n, cb, r, e);
      for (int64_t j = 0; j < pairs; j++) k_cd_fwd_rows(t, g, n, j * step, r, e);
    }
  }
}

/* Planes [lo, hi) (sample of the chunk x channel) of the input -> their padded NCHW copies in
 * xb, [C][Hp][Wp + V] a sample: each plane a blocked plane of one lane, whose right margin
 * holds V floats more. */
static void k_cd_task_pad_nchw(void *p, int64_t lo, int64_t hi) {
  k_cd_ctx *t = p;
  const k_cd_geom *g = t->g;
  k_cd_margin m = {g->ph, g->pw, g->phe, g->pwe + g->V};
  for (int64_t i = lo; i < hi; i++)
    k_cd_pack_blocked(1, (const float *)t->src + (t->n0 * g->C + i) * g->H * g->W, g->W, m, g->H, 1,
                      t->b.xb + i * g->Hp * (g->Wp + g->V));
}

/* Items [lo, hi) of (sample of the chunk, output row) on the NCHW path (k_cd_nchw), each run of
 * rows of a sample then through the call's epilogue, channel by channel, while in cache. */
static void k_cd_task_fwd_nchw(void *p, int64_t lo, int64_t hi) {
  k_cd_ctx *t = p;
  const k_cd_geom *g = t->g;
  int64_t plane = g->OH * g->OW;
  while (lo < hi) {
    int64_t n = lo / g->OH, oh0 = lo % g->OH, oh1 = oh0 + (hi - lo) < g->OH ? oh0 + (hi - lo) : g->OH;
    int64_t at = (t->n0 + n) * g->F * plane;   /* the sample's first output element */
    t->isa->fwd_nchw_rows(g, t->b.xb + n * g->C * g->Hp * (g->Wp + g->V), t->b.w, t->bias,
                          (float *)t->c->out[0].data + at, oh0, oh1, t->c->req[0] == kAddTo);
    for (int64_t f = 0; t->c->epi && f < g->F; f++)
      k_epi_apply_rows(t->c, at + f * plane + oh0 * g->OW, at + f * plane + oh1 * g->OW);
    lo += oh1 - oh0;
  }
}

/* Planes [lo, hi) of the output: the epilogue's statistics, once the NCHW path's rows of them
 * are all written (its items cut planes into rows). */
static void k_cd_task_stats(void *p, int64_t lo, int64_t hi) { k_epi_stats(((const k_cd_ctx *)p)->c, lo, hi); }

/* Task i = (pair of output blocks, cb, ki, kj): weight-gradient blocks, adding the chunk's
 * samples to what the earlier chunks left (chunks run in order, so the sum's order is fixed). */
static void k_cd_task_dw(void *p, int64_t lo, int64_t hi) {
  k_cd_ctx *t = p;
  const k_cd_geom *g = t->g;
  for (int64_t i = lo; i < hi && t->wino_w; i++) {   /* i = (pair of output blocks, cb, row a) */
    int64_t a = i % 4, cb = i / 4 % g->Cb, fb = i / (4 * g->Cb) * 2;
    t->isa->bwd_weight_wino_block(g, t->b.xb, t->b.yb, t->b.dwb, t->ns, t->n0 > 0, fb, fb + 1 < g->Fb ? 2 : 1,
                                  cb, (int)a);
  }
  for (int64_t i = lo; i < hi && !t->wino_w; i++) {
    int64_t kj = i % g->kw, ki = i / g->kw % g->kh, cb = i / (g->kw * g->kh) % g->Cb;
    int64_t fb = i / (g->kw * g->kh * g->Cb) * 2;
    int nf = fb + 1 < g->Fb ? 2 : 1;
    t->isa->bwd_weight_block(g, t->b.xb, t->b.yb, t->b.dwb, t->ns, t->n0 > 0, fb, nf, cb, ki, kj);
  }
}

/* Task i = (sample, pair of input blocks): data-gradient blocks (into the xb region), then
 * into dX. */
static void k_cd_task_dx(void *p, int64_t lo, int64_t hi) {
  k_cd_ctx *t = p;
  const k_cd_geom *g = t->g;
  int64_t pairs = (g->Cb + 1) / 2;
  for (int64_t i = lo; i < hi; i++) {
    int64_t n = i / pairs, cb = i % pairs * 2;
    int nc = cb + 1 < g->Cb ? 2 : 1;
    if (t->wino) {   /* a forward on the data geometry, into an unpadded [S][Cb][H][W][V] in xb */
      t->isa->fwd_wino_block(t->dg, t->b.yb, t->b.w, NULL, t->b.xb, n, cb, nc, NULL, 0, t->dg->OH);
      for (int64_t j = cb; j < cb + nc; j++)
        k_cd_unpack_block(t->isa, t->b.xb + (n * g->Cb + j) * g->H * g->W * g->V, g->C, g->H, g->W, k_cd_no_margin, j,
                          t->c->req[0], (float *)t->c->out[0].data + (t->n0 + n) * g->C * g->H * g->W);
      continue;
    }
    t->isa->bwd_data_block(g, t->b.yb, t->b.w, t->b.xb, n, cb, nc);
    for (int64_t j = cb; j < cb + nc; j++)
      k_cd_unpack_block(t->isa, t->b.xb + (n * g->Cb + j) * g->Hp * g->Wp * g->V, g->C, g->H, g->W,
                        k_cd_margin_of(g), j, t->c->req[0],
                        (float *)t->c->out[0].data + (t->n0 + n) * g->C * g->H * g->W);
  }
}

/* ---- the forward weights, packed once per weight change --------------------------------- */

/* What a cache holding forward-layout weights of vector width V is keyed by (never 0), with
 * a batch_norm folded in or not. The shapes are the step's own and fixed; V changes only
 * with KILN_CONV. */
static uint64_t k_cd_cache_key(const k_cd_geom *g, int folded, int wino) {
  return 0x6b63640000000000ull | (uint64_t)wino << 9 | (uint64_t)folded << 8 | (uint64_t)g->V;
}

/* A predict-mode batch_norm that opens the epilogue, over the output's channels, folds into
 * the packed weights: y = (conv(x, W) + bias) a + b = conv(x, W a) + (bias a + b), per output
 * channel, with a and b from k_batch_norm_predict_coeffs as the epilogue computes them. The
 * convolution then skips that step, one pass over its output less. Rounding differs from
 * the affine applied after the sum by an ulp or so per output (W a is rounded before the sum),
 * as in any compiler that folds batch_norm; since every caller of this path folds (the
 * executor, the JIT, a compiled .so), they all still agree bit for bit, and the result does
 * not depend on the thread count or the layout. */
static const k_epi_step *k_cd_fold_step(const k_call *c, const k_cd_geom *g) {
  const k_epilogue *e = c->epi;
  if (!e || e->nsteps < 1) return NULL;
  const k_epi_step *s = &e->step[0];
  return s->kind == K_EPI_AFFINE && s->channels == g->F && s->inner == g->OH * g->OW ? s : NULL;
}

/* Packs W (times a per output channel when s folds a batch_norm) into w, for the Winograd
 * path when wino is set, and with s writes bias a + b (b alone without a bias) into fb[0, F). */
static void k_cd_pack_forward(const k_call *c, const k_cd_geom *g, const k_epi_step *s, int wino, float *w,
                              float *fb) {
  const k_conv_param *p = c->param;
  if (!s) return wino ? k_cd_pack_weights_wino(g, c->in[1].data, NULL, 0, w) : k_cd_pack_weights(g, c->in[1].data, 0, w);
  const float *gamma = c->in[s->slot].data, *beta = c->in[s->slot + 1].data;
  const float *mean = c->in[s->slot + 2].data, *var = c->in[s->slot + 3].data;
  const float *bias = p->no_bias ? NULL : c->in[2].data;
  float *a = fb + k_cd_round(g->F);   /* scratch after the bias: the callers leave room */
  for (int64_t f = 0; f < g->F; f++) {
    float invstd, b;
    k_batch_norm_predict_coeffs(gamma[f], beta[f], mean[f], var[f], s->eps, &invstd, &a[f], &b);
    fb[f] = bias ? bias[f] * a[f] + b : b;
  }
  if (wino) k_cd_pack_weights_wino(g, c->in[1].data, a, 0, w);
  else k_cd_pack_weights_scaled(g, c->in[1].data, a, 0, w);
}

/* The prologue's coefficients into a and b, Cb V floats each: channel ch's batch_norm x a + b
 * (k_batch_norm_predict_coeffs, as k_norm.c's predict), zero past C. */
static void k_cd_pro_coeffs(const k_call *c, const k_cd_geom *g, float *a, float *b) {
  const k_conv_param *p = c->param;
  const float *gamma = c->in[p->pro_slot].data, *beta = c->in[p->pro_slot + 1].data;
  const float *mean = c->in[p->pro_slot + 2].data, *var = c->in[p->pro_slot + 3].data;
  for (int64_t ch = 0; ch < g->Cb * g->V; ch++) {
    float invstd;
    a[ch] = b[ch] = 0.0f;
    if (ch < g->C) k_batch_norm_predict_coeffs(gamma[ch], beta[ch], mean[ch], var[ch], p->pro_eps, &invstd, &a[ch], &b[ch]);
  }
}

/* The forward-layout weights and bias (t->b.w, t->bias; returns the folded step or NULL):
 * from the call's cache when the weights (and, folding, the bias and the statistics) are
 * stable inputs and the cache holds them for this V; packed into the cache (grown as needed)
 * when it does not; packed into the workspace (the folded bias into its weight-gradient part,
 * which the forward pass does not use) when there is no cache or no memory for it. */
static const k_epi_step *k_cd_fwd_weights(const k_call *c, const k_cd_geom *full, k_cd_ctx *t) {
  const k_conv_param *p = c->param;
  k_cache *k = c->cache;
  const k_epi_step *fold = k_cd_fold_step(c, full);
  k_cd_geom wg = k_cd_group_geometry(full);   /* the weights are [F][C / G][kh][kw] */
  const k_cd_geom *g = &wg;
  size_t wfloats = (size_t)k_cd_round(g->Fb * g->Cb * k_cd_wtaps(g, t->wino) * g->V * g->V);
  size_t ffloats = 2 * (size_t)k_cd_round(g->F), pfloats = p->pro_slot ? 2 * (size_t)(g->Cb * g->V) : 0;
  size_t bytes = (wfloats + (fold ? ffloats : 0) + pfloats) * sizeof(float);
  int cached = k && k_cache_stable(k, 1, 1) &&
               (!fold || ((p->no_bias || k_cache_stable(k, 2, 1)) && k_cache_stable(k, fold->slot, 4))) &&
               (!p->pro_slot || k_cache_stable(k, p->pro_slot, 4));
  /* without a cache, the workspace's weight-gradient part (unused forward) holds the folded
   * bias, then the prologue's coefficients: a 1x1 layer's Fb Cb V V floats hold both */
  float *w = t->b.w, *fb = t->b.dwb, *pro = t->b.dwb + ffloats;
  uint64_t key = k_cd_cache_key(g, fold != NULL, t->wino) | (uint64_t)(p->pro_slot != 0) << 10;
  int fill = 0;
  float *d = cached ? k_cache_reserve(k, key, bytes, &fill) : NULL;
  if (d) w = d, fb = d + wfloats, pro = fb + (fold ? ffloats : 0);
  if (fill || !d) {
    k_cd_pack_forward(c, g, fold, t->wino, w, fb);
    if (p->pro_slot) k_cd_pro_coeffs(c, full, pro, pro + g->Cb * g->V);
    if (fill) k->key = key;
  }
  if (p->pro_slot) t->pro_a = pro, t->pro_b = pro + g->Cb * g->V;
  t->b.w = w;
  t->bias = fold ? fb : p->no_bias ? NULL : c->in[2].data;
  return fold;
}

/* ---- entry points ----------------------------------------------------------------------- */

/* A compiled blocked layout this call cannot honour is refused with a message, never guessed
 * at: both widths the same and 8 or 16, 2-D, written (not accumulated), the workspace the
 * plan gave it large enough. */
static int k_cd_check_blocked(const k_call *c) {
  const k_conv_param *p = c->param;
  int64_t V = k_cd_block_width(p);
  const char *why = NULL;
  if ((V != 8 && V != 16) || (p->in_block && p->in_block != V) || (p->out_block && p->out_block != V) ||
      (p->epi_block && p->epi_block != V) || (p->out_block && !p->epi_block))
    why = "block widths must be 8 or 16 and agree, and a blocked output needs blocked operands";
  else if (c->in[0].shape.rank != 4) why = "only 2-D convolution runs blocked";
  else if (p->out_block && c->req[0] == kAddTo) why = "a blocked output cannot be accumulated";
  else if (k_epi_has_stats(c->epi)) why = "batch statistics are gathered on NCHW output only";
  else if (!c->temp || c->temp_bytes < k_conv_direct_temp_bytes(&c->in[0].shape, &c->in[1].shape, p))
    why = "the workspace is smaller than the direct path needs";
  if (!why) return 0;
  snprintf(c->err, c->err_len, "convolution: compiled blocked layout (in %d, out %d, epilogue %d): %s",
           p->in_block, p->out_block, p->epi_block, why);
  return 1;
}

/* A prologue this call cannot honour is refused with a message (k_conv_prologue_ok's shapes,
 * its four inputs there), never skipped. */
static int k_cd_check_prologue(const k_call *c) {
  const k_conv_param *p = c->param;
  const char *why = NULL;
  if (p->pro_slot < 1 || p->pro_slot + 3 >= c->nin) why = "its batch_norm's inputs are not in the call";
  else if (!k_conv_prologue_ok(&c->in[0].shape, &c->in[1].shape, p)) why = "only a 1x1, unpadded, ungrouped layer on NCHW input of more than 4 channels takes one";
  else if (!c->temp || c->temp_bytes < k_conv_direct_temp_bytes(&c->in[0].shape, &c->in[1].shape, p))
    why = "the workspace is smaller than the direct path needs";
  for (int k = 0; !why && k < 4; k++)
    if (k_shape_numel(&c->in[p->pro_slot + k].shape) != c->in[0].shape.d[1]) why = "its batch_norm's parameters are not one per input channel";
  if (!why) return 0;
  snprintf(c->err, c->err_len, "convolution: compiled prologue (batch_norm%s of the data): %s", p->pro_relu ? ", relu" : "", why);
  return 1;
}

/* Per chunk: the padded blocked input is packed from NCHW, copied from a blocked input, or,
 * for a blocked unpadded input, the input tensor itself; a blocked output is written in
 * place of yb. */
int k_conv_direct_forward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  const k_conv_param *p = c->param;
  if ((k_cd_blocked(p) && k_cd_check_blocked(c)) || (p->pro_slot && k_cd_check_prologue(c))) return 1;
  const k_cd_isa *isa = k_cd_blocked(p) ? k_cd_pick_width(k_cd_block_width(p)) : k_cd_pick();
  k_cd_geom g = k_cd_geometry(&c->in[0].shape, &c->in[1].shape, p, isa->V);
  int wino = k_cd_wino(&g), nchw = k_cd_nchw(&g, p, wino);
  g.planar = k_cd_planar(&g, p, wino, nchw);
  g.prefetch = k_cd_prefetch();
  /* A blocked input is read in place when unpadded, or padded by the Winograd block itself */
  int direct_in = p->in_block && ((g.ph == 0 && g.pw == 0 && g.phe == 0 && g.pwe == 0) || wino);
  if (direct_in && wino) g.vph = g.ph, g.vpw = g.pw, g.vphe = g.phe, g.vpwe = g.pwe;
  if (!direct_in && !nchw && !g.planar) k_cd_skip_rows(&g);   /* the padded NCHW copies keep every row */
  k_cd_ctx t = {&g, isa, c, k_cd_layout(&g, c->temp), c->in[0].data, 0, 0, p->in_block, p->out_block,
                 p->epi_block, NULL, wino, 0, 0, {-1, 0, 0, 0, 0.0f, 0.0f}, NULL, 1, 1, 0, NULL, NULL};
  float *xb = t.b.xb, *yb = t.b.yb;
  k_call folded;       /* the call with the folded step taken off its epilogue */
  k_epilogue tail;
  if (k_cd_fwd_weights(c, &g, &t)) {
    tail.nsteps = c->epi->nsteps - 1;
    memcpy(tail.step, c->epi->step + 1, (size_t)tail.nsteps * sizeof tail.step[0]);
    folded = *c;
    folded.epi = tail.nsteps ? &tail : NULL;
    t.c = &folded;
  }
  t.store_tail = p->epi_block && t.c->epi && k_epi_store_of(t.c->epi, &t.store);
  if (nchw) {   /* per chunk: the padded copies, then the rows */
    int64_t macs_per_row = g.OW * g.F * g.C * g.kh * g.kw;
    for (t.n0 = 0; t.n0 < g.N; t.n0 += g.S) {
      t.ns = g.N - t.n0 < g.S ? g.N - t.n0 : g.S;
      K_PROFILE_NOTE("direct nchw %lldx%lld/%lld, %lld row tasks", (long long)g.kh, (long long)g.kw, (long long)g.sh,
                     (long long)(t.ns * g.OH));
      k_parallel_for(t.ns * g.C, k_cd_pack_grain(g.Hp * (g.Wp + g.V)), k_cd_task_pad_nchw, &t);
      k_parallel_for(t.ns * g.OH, k_vec_grain(macs_per_row / 16 + 1), k_cd_task_fwd_nchw, &t);
    }
    if (k_epi_has_stats(t.c->epi)) k_parallel_for(g.N * g.F, k_vec_grain(g.OH * g.OW), k_cd_task_stats, &t);
    return 0;
  }
  for (t.n0 = 0; t.n0 < g.N; t.n0 += g.S) {
    t.ns = g.N - t.n0 < g.S ? g.N - t.n0 : g.S;
    t.b.xb = direct_in ? (float *)t.src + t.n0 * g.Cb * k_cd_xrows(&g) * k_cd_xcols(&g) * g.V : xb;
    t.b.yb = p->out_block ? (float *)c->out[0].data + t.n0 * g.Fb * g.OH * g.OW * g.V : yb;
    if (!direct_in && p->in_block)
      k_parallel_for(t.ns * g.Cb, k_cd_pack_grain(g.Hp * g.Wp * g.V), k_cd_task_pack_xb, &t);
    else if (g.planar)
      k_parallel_for(t.ns * g.C, k_cd_pack_grain(k_cd_xplane(&g)), k_cd_task_pad_nchw, &t);
    int pack_nchw = !direct_in && !p->in_block && !g.planar;
    if (pack_nchw && k_cd_banded(&t)) {
      t.row_parts = k_cd_band_parts(&t);
      K_PROFILE_NOTE("direct 1x1/%lld banded, %lld bands (%lld rows each)", (long long)g.sh, (long long)(t.ns * t.row_parts),
                     (long long)(g.OH / t.row_parts));
      k_parallel_for(t.ns * t.row_parts, 1, k_cd_task_band, &t);
      continue;
    }
    if (pack_nchw) {
      t.pack_parts = k_cd_pack_parts(&t);
      k_parallel_for(t.ns * g.Cb * t.pack_parts, t.pack_parts > 1 ? 1 : k_cd_pack_grain(g.Hp * g.Wp * g.V), k_cd_task_pack_x, &t);
    }
    t.row_parts = k_cd_row_parts(&t);
    if (direct_in && k_cd_row_major_wanted(&t)) {
      int64_t rm = k_parallel_row_major(t.ns, g.OH / k_cd_row_unit(&t), t.row_parts);
      if (rm) t.row_parts = rm, t.row_major = 1;
    }
    K_PROFILE_NOTE("%s %lldx%lld/%lld%s, %lld tasks (%lld rows each)", wino ? "winograd" : g.G > 1 ? "direct grouped" : "direct", (long long)g.kh,
                   (long long)g.kw, (long long)g.sh, direct_in ? "" : g.planar ? " planar" : " packed",
                   (long long)(t.ns * k_cd_ftasks(&g) * t.row_parts), (long long)(g.OH / t.row_parts));   /* about, in pairs on Winograd */
    k_parallel_for(t.ns * k_cd_ftasks(&g) * t.row_parts, 1, k_cd_task_fwd, &t);
  }
  return 0;
}

/* One chunk's gradients. The weight gradient runs first because the data gradient overwrites
 * the blocked input it reads. */
static void k_cd_backward_chunk(k_cd_ctx *t) {
  const k_cd_geom *g = t->g;
  const k_call *c = t->c;
  t->src = c->in[0].data;
  k_parallel_for(t->ns * g->Fb, k_cd_pack_grain(g->OH * g->OW * g->V), k_cd_task_pack_dy, t);
  if (c->req[1] != kNullOp) {
    t->src = c->in[1].data;
    k_parallel_for(t->ns * g->Cb, k_cd_pack_grain(g->Hp * g->Wp * g->V), k_cd_task_pack_x, t);
    k_parallel_for((g->Fb + 1) / 2 * g->Cb * (t->wino_w ? 4 : g->kh * g->kw), 1, k_cd_task_dw, t);
  }
  if (c->req[0] != kNullOp) k_parallel_for(t->ns * ((g->Cb + 1) / 2), 1, k_cd_task_dx, t);
}

/* Backward in = [dY, X, W, (b), Y]; out = [dX, dW] (k_conv.c adds db). */
int k_conv_direct_backward(const k_call *c) {
  const k_conv_param *p = c->param;
  const k_cd_isa *isa = k_cd_pick();
  k_cd_geom g = k_cd_geometry(&c->in[1].shape, &c->in[2].shape, p, isa->V);
  int allowed = k_cd_wino_allowed(), wino = allowed && k_cd_wino_data_shape(&g);
  k_cd_geom dg = k_cd_data_geometry(&g);
  k_cd_ctx t = {&g, isa, c, k_cd_layout(&g, c->temp), NULL, 0, 0, 0, 0, 0, NULL, wino, 0, 0, {-1, 0, 0, 0, 0.0f, 0.0f}, &dg, 1, 1, 0, NULL, NULL};
  t.wino_w = allowed && k_cd_wino_tiles(&g);
  if (c->req[0] != kNullOp) {
    if (wino) k_cd_pack_weights_wino(&g, c->in[2].data, NULL, 1, t.b.w);
    else k_cd_pack_weights(&g, c->in[2].data, 1, t.b.w);
  }
  if (c->req[0] != kNullOp || c->req[1] != kNullOp)
    for (t.n0 = 0; t.n0 < g.N; t.n0 += g.S) {
      t.ns = g.N - t.n0 < g.S ? g.N - t.n0 : g.S;
      k_cd_backward_chunk(&t);
    }
  if (c->req[1] != kNullOp) {
    if (t.wino_w) k_cd_unpack_weights_wino(&g, t.b.dwb, c->req[1], c->out[1].data);
    else k_cd_unpack_weights(&g, t.b.dwb, c->req[1], c->out[1].data);
  }
  return 0;
}

#else /* not GCC */

int k_conv_direct_wanted(const k_shape *data, const k_shape *weight, const k_conv_param *p, int backward) {
  (void)data, (void)weight, (void)p, (void)backward;
  return 0;
}
size_t k_conv_direct_temp_bytes(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  (void)data, (void)weight, (void)p;
  return 0;
}
int k_conv_block_width(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  (void)data, (void)weight, (void)p;
  return 0;
}
int k_conv_block_together(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  (void)data, (void)weight, (void)p;
  return 0;
}
int k_conv_prologue_ok(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  (void)data, (void)weight, (void)p;
  return 0;
}
int k_conv_direct_nchw(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  (void)data, (void)weight, (void)p;
  return 0;
}
int k_conv_direct_planar(const k_shape *data, const k_shape *weight, const k_conv_param *p) {
  (void)data, (void)weight, (void)p;
  return 0;
}
int k_conv_direct_runs(const k_call *c, const k_shape *data, const k_shape *weight, int backward) {
  const k_conv_param *p = c->param;
  (void)data, (void)weight;
  return !backward && (p->in_block || p->out_block || p->epi_block || p->pro_slot);   /* refused by k_conv_direct_forward */
}
int k_conv_direct_forward(const k_call *c) {
  snprintf(c->err, c->err_len, "convolution: no direct path in this build");
  return 1;
}
int k_conv_direct_backward(const k_call *c) { return k_conv_direct_forward(c); }

#endif
