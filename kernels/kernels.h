/* kernels.h — the map of the kernel library: every forward and backward kernel, the
 * optimizer updates and the initializers. Kernels follow k_call's contract (k_base.h);
 * each op's parameter struct is in k_params.h and its scalar functions in k_scalar.h.
 * Each section names the file that implements it. */
#ifndef KILN_KERNELS_H
#define KILN_KERNELS_H

#include "k_base.h"
#include "k_params.h"
#include "k_parallel.h"

/* Every op's two kernels, declared from the op list (k_ops.def); the sections below say
 * which file defines them. */
#define K_DECLARE_OP(op) \
  int k_##op##_forward(const k_call *c); \
  int k_##op##_backward(const k_call *c);
#define K_OP K_DECLARE_OP
#define K_UNARY K_DECLARE_OP
#define K_BINARY K_DECLARE_OP
#include "k_ops.def"
#undef K_OP
#undef K_UNARY
#undef K_BINARY

/* Each binary op's block function (k_elemwise.c): t[k] = op(a[k * sa], b[k * sb]) for k in
 * [0, n), t not overlapping a or b; the loops its broadcasting kernel runs, which an epilogue
 * (k_epilogue.c) calls directly on its runs, so the bits are the kernel's. */
typedef void (*k_fwd_block_fn)(float *restrict t, const float *a, const float *b, int64_t n, int64_t sa,
                               int64_t sb);
#define K_DECLARE_BLOCK(op) \
  void k_##op##_fwd_block(float *restrict t, const float *a, const float *b, int64_t n, int64_t sa, int64_t sb);
#define K_OP(op)
#define K_UNARY(op)
#define K_BINARY K_DECLARE_BLOCK
#include "k_ops.def"
#undef K_OP
#undef K_UNARY
#undef K_BINARY

/* Each op's index in the op list (an rt_step's op; the IR's IR_OP_* are the same numbers), for
 * the runtime, which may not include ir/. */
#define K_OP_INDEX(op) K_OPI_##op,
#define K_OP K_OP_INDEX
#define K_UNARY K_OP_INDEX
#define K_BINARY K_OP_INDEX
typedef enum {
#include "k_ops.def"
  K_OPI_COUNT
} k_op_index;
#undef K_OP
#undef K_UNARY
#undef K_BINARY

/* k_params.c — the bytes of the param struct op's kernels read (op: its index in the op list,
 * as IR_OP_*), 0 for an op without one or out of range. */
size_t k_op_param_bytes(int op);

/* k_samples.c — c run as n calls, call k on sample k of every slot j with stride[j] != 0 (its
 * data stride[j] * k bytes on, its first axis 1); slots of stride 0 (weights) whole each time.
 * The first nonzero return stops it. For a step the plan runs per sample (ir_plan.samples). */
int k_call_samples(const k_call *c, k_fn fn, int64_t n, const int64_t *stride);

/* k_elemwise.c — unary ops over any shape (element ranges split with k_parallel_for, in
 * K_GRAIN_LIGHT chunks for light ops: k_vec.h); binary ops with NumPy broadcasting, whose
 * backward reduces the gradient over broadcast axes (vectorised loops on a collapsed view,
 * k_bview.h, split with k_parallel_for). Scalar math comes from k_scalar.h. */

/* k_reduce.c — sum, mean, max, and beyond SPEC section 2 min, prod, logsumexp and norm (ord 1
 * or 2), over axes (k_reduce_param). prod's backward and logsumexp's forward use temp space. */
size_t k_prod_temp_bytes(const k_shape *args, const void *param);        /* the op rows' k_temp_fn */
size_t k_logsumexp_temp_bytes(const k_shape *args, const void *param);

/* k_layout.c — data movement: reshape, flatten, transpose, expand_dims, squeeze,
 * broadcast_to, slice, concat (variadic: in = the pieces). */

/* k_pad.c — pad (F.pad): constant (a negative pad crops), reflect, replicate. */

/* k_softmax.c — numerically stable softmax, log_softmax, and softmax_cross_entropy
 * (logits [N, C], label i32 [N], loss f32[] = mean over N; a label out of range is an error). */

/* k_dropout.c — dropout: identity when !is_train; mask from k_philox_uniform otherwise. */

/* k_gemm.c — matmul (batched, broadcast batch dims) and fully_connected, on k_sgemm
 * (k_blas.h: Kiln's own blocked SGEMM, k_sgemm.c, or OpenBLAS single-threaded where the CPU
 * lacks AVX2 + FMA; large products split over the k_parallel pool); fully_connected forward
 * keeps its packed weights in the call's k_cache (a predict program), packed once per weight
 * change. */

/* k_conv.c — convolution (1-D and 2-D, groups, dilation); needs temp space of
 * k_conv_temp_bytes(). Ungrouped shapes where it measured faster run k_conv_direct.c's direct
 * convolution on channel-blocked tensors (Winograd for 3x3 stride-1 layers with even outputs;
 * KILN_WINOGRAD=0 turns it off), depthwise ones and groups of up to 16 channels
 * k_conv_dw.c's direct loops on NCHW planes (KILN_CONV overrides the choice: im2col,
 * grouped-im2col, grouped-direct, direct, direct-avx2, direct-generic); the rest run im2col +
 * GEMM, the batch cut into at most 4 parts (fixed by N, not by the thread count) run in
 * parallel, each with a column buffer lent for its run and its own weight-gradient partial,
 * the partials summed in part order. A forward whose param carries a blocked layout
 * (k_conv_param.in_block / out_block / epi_block, set by passes/pass_layout.c) reads / writes
 * those tensors channel-blocked and always runs direct (k_conv_block_width below): a dense
 * layer in k_conv_direct.c, a depthwise one in k_conv_dw.c (input, output and epilogue blocked
 * alike there). */
size_t k_conv_temp_bytes(const k_shape *data, const k_shape *weight, const k_conv_param *p);
size_t k_convolution_temp_bytes(const k_shape *args, const void *param);   /* the op row's k_temp_fn */
/* For passes/pass_layout.c: the block width V (8 or 16) a 2-D forward of this shape computes
 * in on the direct path here (this CPU; KILN_CONV honoured, as the plan's workspace does) —
 * a dense layer, a grouped one whose groups are whole blocks of channels, or a depthwise one
 * (then only with its input and output both blocked: k_conv_block_together) — or 0 when it
 * would run im2col or the NCHW grouped loops. A forward with k_conv_param.in_block / out_block set runs direct
 * at that width whatever KILN_CONV or the CPU say at run time (a portable loop without
 * AVX-512 / AVX2), and refuses with a message what it cannot honour. */
int k_conv_block_width(const k_shape *data, const k_shape *weight, const k_conv_param *p);
/* Whether a forward of this shape can take a prologue (k_conv_param.pro_slot: a batch_norm,
 * then a relu, of its data, applied as the kernel packs its input): 2-D, 1x1, unpadded,
 * ungrouped, more than a few input channels, NCHW input, on the direct path. DenseNet's
 * layers read batch_norm -> relu of a concat that way, with neither run as a pass over
 * memory. passes/pass_epilogue.c asks; a call with a prologue always runs direct. */
int k_conv_prologue_ok(const k_shape *data, const k_shape *weight, const k_conv_param *p);
/* 1 when that blocked forward reads and writes blocked only together (a depthwise layer),
 * never converting one side as the direct path does. */
int k_conv_block_together(const k_shape *data, const k_shape *weight, const k_conv_param *p);

/* k_epilogue.c (map: k_epilogue.h) — the elementwise tail that convolution, fully_connected
 * and matmul forward run on each output block when k_call.epi is set. */

/* k_pool.c — max and average pooling (count_include_pad either way, ceil_mode), 1-D and 2-D; planes split over
 * threads, unclipped windows done together so the inner loops vectorise. */

/* k_norm.c — batch_norm (train: batch statistics in one pass, or from the row sums its
 * convolution gathered, moving update; predict: moving statistics; channels split over
 * threads) and layer_norm. */
/* Predict mode's y = x * a + b for one channel, from gamma, beta and the moving statistics:
 * what k_batch_norm_forward computes, shared with the epilogues (k_epilogue.h). */
void k_batch_norm_predict_coeffs(float gamma, float beta, float mean, float var, float eps,
                                 float *invstd, float *a, float *b);
/* Training's statistics of one row (n floats: a sample's plane of a channel): its sum and sum
 * of squares in double, sq[0] and sq[1], in the one order batch_norm sums every row. A
 * training batch_norm adds its rows' sums in outer order; a convolution's epilogue may gather
 * them first (K_EPI_STATS) into a tensor of [outer, C, K_BN_STATS_FLOATS] floats holding the
 * two doubles of each row, which the batch_norm node then reads as its input slot
 * K_BN_STATS_SLOT (after its aux states) instead of summing its data again. */
void k_bn_row_sums(const float *r, int64_t n, double sq[2]);
#define K_BN_STATS_FLOATS 4
#define K_BN_STATS_SLOT 5

/* k_embedding.c — gather forward; scatter-add backward into the weight gradient. */

/* k_optim.c — updates exactly as torch.optim.SGD (weight decay added to the gradient,
 * dampening 0, Nesterov or not), Adam, and AdamW (decoupled: decoupled != 0, the weight
 * shrunk by lr * wd first). Buffers start at zero; step counts from 1. w, g and the moment
 * buffers must be distinct (the loops are vectorised on that promise). Large tensors are split
 * over threads. */
void k_sgd_update(float *w, const float *g, float *mom, int64_t n, float lr, const k_sgd_param *p);
void k_adam_update(float *w, const float *g, float *m, float *v, int64_t n, float lr,
                   const k_adam_param *p, int64_t step, int decoupled);
/* The lr of the train step that follows `t` steps (t >= 0) since the base lr was set, as
 * torch.optim.lr_scheduler computes it, in double and rounded once (base for K_SCHED_NONE). */
float k_sched_lr(const k_schedule *s, float base, int64_t t);
/* torch.nn.utils.clip_grad_norm_(max_norm): the global L2 norm of the count gradients g[k]
 * (n[k] values each; each tensor's norm, then the norm of those), and every gradient scaled
 * in place by min(1, max_norm / (norm + 1e-6)). Returns the norm. Serial, in double, so every
 * thread count gives the same bits. */
float k_clip_grad_norm(float *const *g, const int64_t *n, int count, float max_norm);

/* k_init.c — initializers; element i of a draw uses Philox(seed, counter, i). */
void k_init_constant(float *x, int64_t n, float value);
void k_init_uniform(float *x, int64_t n, float low, float high, uint64_t seed, uint64_t counter);
void k_init_normal(float *x, int64_t n, float mean, float std, uint64_t seed, uint64_t counter);
/* Fills a tensor of `shape` by initializer `kind` with attributes a, b (value | low, high |
 * mean, std). Xavier is U(+-sqrt(6 / (fan_in + fan_out))) with torch's fans. The one place
 * both the reference executor and compiled models initialise weights, so they agree. */
void k_init_fill(float *x, const k_shape *shape, int kind, float a, float b, uint64_t seed, uint64_t counter);

#endif
