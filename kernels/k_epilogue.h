/* k_epilogue.h — an elementwise tail run by a heavy kernel (convolution, fully_connected,
 * matmul) on each block of its output while the block is still in cache: batch_norm's
 * predict-mode per-channel affine, unary ops, and binary ops with a same-shaped or one-value
 * second operand. Plain data, so a code generator can emit it as constant bytes; each step
 * runs the op's own kernel (or batch_norm's own arithmetic) so results are bit-identical to
 * the unfused ops — except where a direct convolution folds a leading affine into its packed
 * weights (k_conv_direct.c, k_cd_fold_step). The passes build it (passes/pass_epilogue.c). */
#ifndef KILN_K_EPILOGUE_H
#define KILN_K_EPILOGUE_H

#include "kernels.h"

/* The elementwise ops an epilogue may run: the unary and binary rows of the op list. */
#define K_OP(op)
#define K_UNARY(op) K_EPI_FN_##op,
#define K_BINARY(op) K_EPI_FN_##op,
enum {
#include "k_ops.def"
  K_EPI_FN_COUNT
};
#undef K_OP
#undef K_UNARY
#undef K_BINARY

#define K_EPI_MAX_STEPS 8
#define K_EPI_PARAM_BYTES 16

typedef enum {
  K_EPI_AFFINE = 1,  /* batch_norm in predict: y = y * a[c] + b[c], a and b as k_norm.c makes them */
  K_EPI_UNARY,       /* y = op(y) */
  K_EPI_BINARY,      /* y = op(y, other) or op(other, y) */
  K_EPI_STATS        /* the last step only: a training batch_norm's row sums of the result
                        (k_bn_row_sums of each plane of `inner` elements) into the call's
                        output slot `slot`, two doubles a plane (kernels.h, K_BN_STATS_FLOATS) */
} k_epi_kind;

typedef struct {
  int32_t kind;                  /* k_epi_kind */
  int32_t fn;                    /* UNARY, BINARY: K_EPI_FN_* */
  int32_t slot;                  /* BINARY: the call's input slot of the other operand;
                                    AFFINE: of gamma (beta, moving_mean, moving_var follow);
                                    STATS: the call's output slot of the row sums */
  int32_t swap;                  /* BINARY: the running value is the second operand */
  int32_t scalar;                /* BINARY: the other operand is one value, read at every element */
  float eps;                     /* AFFINE */
  int64_t channels, inner;       /* AFFINE: element e is in channel (e / inner) % channels;
                                    STATS: element e is in plane e / inner */
  int64_t period;                /* BINARY: 0, the other operand has the output's shape; else it
                                    has `period` elements, broadcast over the output's leading
                                    axes (a bias over the last axes): element e reads
                                    other[e % period] */
  _Alignas(8) unsigned char param[K_EPI_PARAM_BYTES];  /* UNARY: the op's param struct, if any */
  int32_t has_param;
} k_epi_step;

typedef struct k_epilogue {
  int32_t nsteps;
  k_epi_step step[K_EPI_MAX_STEPS];
} k_epilogue;

/* Whether e can run in a call with nin inputs and nout outputs: step kinds, functions and
 * slots in range, channel geometry positive, a STATS step last and writing a hidden output.
 * The runtime checks a descriptor's epilogues with it. */
int k_epi_valid(const k_epilogue *e, int nin, int nout);
/* Whether binary step s's other operand, of shape other, holds what the step reads over a
 * heavy output of shape y: one value, y's elements, or `period` elements that repeat over
 * y's. The runtime checks a descriptor's steps with it, so no step reads past its operand. */
int k_epi_operand_fit(const k_epi_step *s, const k_shape *other, const k_shape *y);
/* Whether e ends in a STATS step (NULL: no). */
int k_epi_has_stats(const k_epilogue *e);
/* Whether a STATS step of e fits a heavy output of shape y and a statistics output of shape
 * st: y holds whole planes, and st K_BN_STATS_FLOATS floats for each (1 without a STATS step).
 * The runtime checks a descriptor's steps with it, so no call writes past the statistics. */
int k_epi_stats_fit(const k_epilogue *e, const k_shape *y, const k_shape *st);
/* K_EPI_FN_* of the elementwise op named `name`, or -1 when an epilogue cannot run it. */
int k_epi_fn_lookup(const char *name);
/* The tail a heavy kernel can apply to each vector as it stores it, instead of as a pass over
 * the block: an add of a same-shaped operand (the residual of a ResNet block), then a relu or
 * a clip (MobileNet's relu6), each optional. The kernel computes them as k_sf_add (y + other,
 * or other + y when swapped), k_sf_relu (x < 0 ? +0 : x) and k_sf_clip (x < lo ? lo : x, then
 * that > hi ? hi : it) do, so the bits are the epilogue's. */
typedef struct {
  int32_t add_slot;   /* the call's input slot of the added operand, or -1 */
  int32_t add_swap;   /* the running value is the add's second operand */
  int32_t relu;
  int32_t clip;       /* clip to [clip_lo, clip_hi] (never with relu) */
  float clip_lo, clip_hi;
} k_epi_store;

/* A k_epi_store's relu and clip on a GCC vector v of type VEC (IVEC: its lanes as int32), as
 * k_sf_relu (x < 0 ? +0 : x) and k_sf_clip (x < lo ? lo : x, then > hi ? hi : it) compute them,
 * each select a mask, so -0 and NaN keep their bits as in the epilogue's pass: the one
 * definition for every kernel that runs the tail in its store (k_conv_direct_isa.h,
 * k_conv_dw_blocked.h). lo and hi are vectors; v is named more than once. */
#define K_EPI_VRELU(VEC, IVEC, v) ((VEC)((IVEC)(v) & ~(IVEC)((v) < (VEC){0})))
#define K_EPI_VSEL(VEC, IVEC, m, a, b) ((VEC)(((IVEC)(a) & (IVEC)(m)) | ((IVEC)(b) & ~(IVEC)(m))))
#define K_EPI_VCLIP_LO(VEC, IVEC, v, lo) K_EPI_VSEL(VEC, IVEC, (v) < (lo), lo, v)
#define K_EPI_VCLIP_HI(VEC, IVEC, v, hi) K_EPI_VSEL(VEC, IVEC, (v) > (hi), hi, v)

/* Whether epilogue e (NULL: no steps) is exactly such a tail; if so fills *t. */
int k_epi_store_of(const k_epilogue *e, k_epi_store *t);

/* Runs c->epi's steps, in order, in place on elements [lo, hi) of c->out[0], which the heavy
 * kernel has just written; other operands and batch_norm's parameters come from c->in. Each
 * element's result depends on that element only, so any split into blocks gives the same bits.
 * A STATS step sums the planes that lie whole in [lo, hi) (a convolution's callers pass whole
 * planes: samples, or channels of a sample); each plane is summed by one call, in one order. */
void k_epi_apply(const k_call *c, int64_t lo, int64_t hi);
/* The elementwise steps alone, for a caller that cuts planes (rows of a plane at a time): it
 * gathers the statistics with k_epi_stats once the planes are whole. */
void k_epi_apply_rows(const k_call *c, int64_t lo, int64_t hi);
/* A STATS step's row sums of planes [plo, phi) of c->out[0] (nothing without one). */
void k_epi_stats(const k_call *c, int64_t plo, int64_t phi);
/* The same on elements [lo, hi) of a convolution output computed channel-blocked at width V
 * ([N][ceil(C / V)][H][W][V], passes/pass_layout.c; lo and hi multiples of V), element lo stored
 * at y (the output tensor itself, or the kernel's blocked copy before it writes NCHW): every
 * same-shaped operand is blocked alike (k_conv_param.epi_block), and batch_norm's affine takes
 * channel (e / (inner V)) % ceil(C / V) * V + e % V, lanes past C getting y * 0 + 0. The same
 * expressions, so the same bits. A STATS step is not run blocked (the layout pass keeps such a
 * convolution NCHW, and the convolution refuses the combination). */
void k_epi_apply_blocked(const k_call *c, float *y, int64_t lo, int64_t hi, int64_t V);

#endif
