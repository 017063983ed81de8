/* k_params.h — one parameter struct per op that has attributes (MXNet's dmlc::Parameter).
 * The op registry (ir/op_table.c) parses `.kiln` attributes straight into these structs and
 * normalises them during shape inference, so a kernel always sees canonical values: negative
 * axes resolved, defaults filled, tuples expanded to the kernel's rank. Plain data only: the
 * code generator emits each node's struct as a constant. */
#ifndef KILN_K_PARAMS_H
#define KILN_K_PARAMS_H

#include "k_base.h"

/* An int tuple attribute; n == 0 means "not given" before normalisation. */
typedef struct { int32_t n; int64_t v[K_MAX_RANK]; } k_ints;

typedef struct { float slope; } k_leaky_relu_param;
typedef struct { float a_min, a_max; } k_clip_param;
typedef struct { float sigma; } k_smooth_l1_param;
typedef struct { float alpha, beta; } k_hard_sigmoid_param;   /* clamp(alpha x + beta, 0, 1) */

enum { K_ACT_RELU = 0, K_ACT_SIGMOID, K_ACT_TANH, K_ACT_SOFTRELU };
typedef struct { int32_t act_type; } k_activation_param;

/* pad (F.pad): `pad` holds (before, after) pairs from the last axis back, as F.pad's tuple;
 * normalised to all 2 * rank values. An int tuple like k_ints (the same layout, more room). */
typedef struct { int32_t n; int64_t v[2 * K_MAX_RANK]; } k_pads;
enum { K_PAD_CONSTANT = 0, K_PAD_REFLECT, K_PAD_REPLICATE };
typedef struct { k_pads pad; int32_t mode; float value; } k_pad_param;

/* sum / mean / max / min / prod / logsumexp / norm. After normalisation axis lists every
 * reduced axis, ascending, >= 0 (all axes when the user gave none). ord is norm's (1 or 2;
 * the other rows have no such attribute and leave it 0). */
typedef struct { k_ints axis; int32_t keepdims; int32_t ord; } k_reduce_param;

typedef struct { k_ints shape; } k_reshape_param;        /* normalised: no -1 left */
typedef struct { k_ints axes; } k_transpose_param;       /* normalised: a full permutation */
typedef struct { int32_t axis; } k_expand_dims_param;    /* normalised: 0..rank */
typedef struct { k_ints axis; } k_squeeze_param;         /* normalised: the axes removed */
typedef struct { k_ints shape; } k_broadcast_to_param;
/* 0 <= begin < end <= d, step != 0: step > 0 takes begin, begin + step, ... below end; step < 0
 * the same range from end - 1 down (docs/language.md). */
typedef struct { int32_t axis; int64_t begin, end, step; } k_slice_param;
#define K_SLICE_END INT64_MAX   /* end: the axis's end (x[a:] lowered), set to d by inference */
typedef struct { int32_t dim; } k_concat_param;           /* normalised: >= 0 */
/* matmul. swap_a, swap_b, swap_c: set by passes/pass_simplify.c (never an attribute; 0
 * everywhere else): that operand (or the output) is stored with its last batch axis and its
 * row axis exchanged, [.., R, H, C] holding the logical [.., H, R, C] — the attention's head
 * split, transpose(x, axes=(0, 2, 1, 3)), read or written in place: the rows of batch h start
 * h * C in, H * C apart (k_mm_geom.h). The shapes a kernel is given are the stored ones; the
 * backward stores each gradient as its operand is stored. */
typedef struct { int32_t transpose_a, transpose_b; int32_t swap_a, swap_b, swap_c; } k_matmul_param;

typedef struct { int64_t num_hidden; int32_t no_bias; int32_t flatten; } k_fc_param;

/* convolution: kernel.n is 1 or 2 (conv1d / conv2d); stride and dilate have kernel.n entries
 * after normalisation, pad kernel.n or, beyond SPEC section 2, 2 * kernel.n (below).
 * Weight is [num_filter, C/num_group, k...]. */
typedef struct {
  int64_t num_filter;
  k_ints kernel, stride, pad, dilate;
  int64_t num_group;
  int32_t no_bias;
  /* Forward only, set by passes/pass_layout.c (never an attribute; 0 everywhere else): 0 when
   * data (in_block), out[0] (out_block) or the epilogue's same-shaped operands (epi_block: a
   * residual add's) are NCHW, else the block width V (8 or 16) of their channel-blocked storage
   * [N][ceil(C / V)][H][W][V], lanes past C undefined. out_block implies epi_block. */
  int32_t in_block, out_block, epi_block;
  /* Forward only, set by passes/pass_epilogue.c (never an attribute; 0 everywhere else): a
   * prologue, a predict-mode batch_norm of the data over its channels (gamma, beta,
   * moving_mean and moving_var at input slots pro_slot.. pro_slot + 3, epsilon pro_eps), then a
   * relu when pro_relu, applied as the direct kernel packs its NCHW input (k_conv_prologue_ok
   * says where it can); 0 when none (slot 0 is always the data). */
  int32_t pro_slot, pro_relu;
  float pro_eps;
} k_conv_param;

enum { K_POOL_MAX = 0, K_POOL_AVG = 1 };
/* pooling: after normalisation kernel/stride have one entry per spatial axis (1 or 2), pad one
 * or two (below); global_pool sets kernel to the spatial extent, stride 1, pad 0. Beyond SPEC section 2 (for
 * ONNX's AveragePool): count_include_pad (1, SPEC's average; 0 divides by the elements of the
 * input a window holds) and ceil_mode (the output size rounded up, as torch's: the last window
 * may hang past the padded input, and its average counts only what lies within it). */
typedef struct {
  k_ints kernel, stride, pad;
  int32_t pool_type;
  int32_t global_pool;
  int32_t count_include_pad;
  int32_t ceil_mode;
  /* Forward only, set by passes/pass_layout.c (never an attribute; 0 everywhere else): 0 when
   * data (in_block) or out[0] (out_block) is NCHW, else the block width V (8 or 16) of its
   * channel-blocked storage [N][ceil(C / V)][H][W][V], as k_conv_param's. out_block implies
   * in_block (the same V); a blocked input with an NCHW output is converted as it is written. */
  int32_t in_block, out_block;
} k_pool_param;

/* convolution's and pooling's pad also take, beyond SPEC section 2, two values per spatial
 * axis: every axis's start, then every axis's end (ONNX's order; normalisation keeps this
 * form only where the two sides differ). Spatial axis i's padding at its end, of sp axes: */
static inline int64_t k_window_pad_end(const k_ints *pad, int sp, int i) {
  return pad->n == 2 * sp ? pad->v[sp + i] : pad->v[i];
}

/* Spatial axis i's padding at its start and at its end: */
static inline int64_t k_conv_pad_begin(const k_conv_param *p, int i) { return p->pad.v[i]; }
static inline int64_t k_conv_pad_end(const k_conv_param *p, int i) { return k_window_pad_end(&p->pad, p->kernel.n, i); }
static inline int64_t k_pool_pad_begin(const k_pool_param *p, int i) { return p->pad.v[i]; }
static inline int64_t k_pool_pad_end(const k_pool_param *p, int i) { return k_window_pad_end(&p->pad, p->kernel.n, i); }

/* batch_norm: outputs [out, saved_mean, saved_invstd]; aux [moving_mean, moving_var].
 * moving = momentum * moving + (1 - momentum) * batch (unbiased batch variance). */
/* sync: in train_step with a communication hook, the batch statistics (and the gradient's
 * means) are the whole job's, every rank's rows together, as torch's SyncBatchNorm. */
typedef struct { float eps; float momentum; int32_t axis; int32_t sync; } k_batch_norm_param;
/* layer_norm over one axis, which normalisation requires to be the last.
 * outputs [out, saved_mean, saved_invstd]. */
typedef struct { int32_t axis; float eps; } k_layer_norm_param;
/* dropout: outputs [out, mask]; mask holds 0 or 1/(1-p) in train mode. */
typedef struct { float p; } k_dropout_param;
typedef struct { int32_t axis; } k_softmax_param;         /* normalised: >= 0 */
typedef struct { int64_t input_dim, output_dim; } k_embedding_param;

/* Optimizers: lr lives apart from the struct because set_lr changes it at run time. */
/* Optimizers and initializers by kind: the one list the IR, the runtime, the executor and the
 * kernels (k_optim.c, k_init.c) share. */
typedef enum { K_OPT_SGD, K_OPT_ADAM, K_OPT_ADAMW, K_OPT_COUNT } k_optim_kind;
/* Whether an optimizer keeps Adam's two moments (else SGD's momentum, when momentum != 0). */
static inline int k_optim_moments(int kind) { return kind == K_OPT_ADAM || kind == K_OPT_ADAMW; }
typedef enum { K_INIT_ZEROS, K_INIT_ONES, K_INIT_CONSTANT, K_INIT_UNIFORM, K_INIT_NORMAL, K_INIT_XAVIER,
               K_INIT_COUNT } k_init_kind;
typedef struct { float momentum, wd; int32_t nesterov; } k_sgd_param;
typedef struct { float beta1, beta2, eps, wd; } k_adam_param;   /* adamw: wd decoupled */
/* The bytes of an optimizer's hyperparameters (an update step's own copy: wd_exclude). */
static inline size_t k_optim_param_size(int kind) { return k_optim_moments(kind) ? sizeof(k_adam_param) : sizeof(k_sgd_param); }

/* Learning-rate schedules, torch.optim.lr_scheduler's: the lr of each train step from the base
 * lr and the steps taken since it was set (k_sched_lr, k_optim.c). */
typedef enum { K_SCHED_NONE, K_SCHED_STEP, K_SCHED_MULTISTEP, K_SCHED_EXPONENTIAL, K_SCHED_COSINE, K_SCHED_ONECYCLE,
               K_SCHED_COUNT } k_sched_kind;
typedef struct {
  int32_t kind;                 /* k_sched_kind */
  int64_t step_size;            /* step: StepLR's step_size */
  k_ints milestones;            /* multistep: MultiStepLR's, ascending */
  int64_t total, warmup;        /* cosine: T_max = total - warmup after a LinearLR warmup;
                                   onecycle: total_steps */
  float gamma;                  /* step, multistep, exponential */
  float min_lr;                 /* cosine: eta_min */
  float pct_start, div_factor, final_div_factor;   /* onecycle */
} k_schedule;

#endif
