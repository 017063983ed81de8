/* kc_args.h — the one parameter of every library kernel of kernels/cuda/kc_ops.cu: a plain C
 * struct passed by value, filled by its host half (runtime/cuda/rtc_ops_lib.c) and copied
 * byte for byte into the launch, so the host and the GPU must lay it out the same: pointers,
 * int64_t, int32_t and float only, no bit fields, no host-only types. Also read by NVRTC
 * (pasted after k_params.h) and by the host test shim (tests/cuda/kc_host.h). */
#ifndef KILN_KC_ARGS_H
#define KILN_KC_ARGS_H

#include "k_params.h"   /* k_base.h's integer types (also under NVRTC), K_MAX_RANK */

/* Every library kernel, once: X(name) stands for kc_<name>, taking kc_<name>_args. The host
 * test builds its launch table from it; the NVRTC test checks each is in the PTX. */
/* The threads of a block in every launch (rtc_launch); the block reductions (kc_block_sum)
 * size their shared arrays by it, and a launch of C * KC_BLOCK threads gives one block to each
 * of C channels, rows or features. */
#define KC_BLOCK 256

/* What a kernel writes into its step's data-error word (rtc_call.err) when it meets data the
 * CPU kernel refuses with a message; the runtime reads the words after the run and fails with
 * the step's name and the message of the code (rtc_model.c). The output is NaN there too. */
enum { KC_ERR_NONE = 0, KC_ERR_LABEL = 1, KC_ERR_INDEX = 2 };

#define KC_KERNELS(X)                                                                          \
  X(fill) X(strided) X(reduce) X(max_grad) X(softmax) X(softmax_grad) X(sce_loss) X(sce_grad)  \
  X(pool) X(pool_grad) X(bn_part) X(bn_stats) X(bn_apply) X(bn_grad) X(bn_dx) X(ln_forward) X(ln_dparams)          \
  X(ln_dx) X(embedding) X(embedding_grad) X(dropout) X(mul) X(sgd) X(adam) X(prod_grad)          \
  X(reduce_spread) X(pad) X(pad_grad) X(sumsq) X(clip_coef) X(clip_scale) X(err_any)

/* A step's values that change from call to call: the learning rate and Adam's bias corrections
 * of an update, dropout's random counter. The kernels read them from device memory, where the
 * runtime writes every step's entry before each run (rtc_live_upload), so that a captured CUDA
 * graph replays with each call's values rather than those of the call it was captured in. */
typedef struct {
  float f[4];                   /* sgd: lr; adam: step_size, bc2_sqrt, decay */
  uint64_t seed, ctr;           /* dropout: Philox's key and counter */
} kc_live;

/* y[i] = v (or += v under kAddTo) for i < n. */
typedef struct { float *y; int64_t n; float v; int32_t req; } kc_fill_args;

/* The general data move: thread i walks the index space d[0..rank) (row-major) and moves
 * x[x0 + sum idx*xs] to y[y0 + sum idx*ys] under req: 4-byte bits for writes (i32 passes
 * unchanged), f32 addition for kAddTo; with use_scale the value is x * scale (f32). Covers
 * the copies, transpose, broadcast_to, slice, concat and sum/mean's backward. */
typedef struct {
  void *y;
  const void *x;
  int64_t n, x0, y0;
  int64_t d[K_MAX_RANK], xs[K_MAX_RANK], ys[K_MAX_RANK];
  float scale;
  int32_t rank, req, use_scale;
} kc_strided_args;

/* A reduction over groups: output i (kept index space kd, row-major) folds the group
 * x[sum kidx*kxs + sum ridx*rxs] over the reduced index space rd in row-major order.
 * op 0: sum times scale (mean: count / n), op 1: NaN-propagating max, then min (NaN wins),
 * prod, logsumexp (a first pass for the max shift, then log(sum exp(x - shift)) + shift),
 * norm ord 1 (sum |x|) and ord 2 (sqrt of the sum of squares). */
enum { KC_RED_SUM = 0, KC_RED_MAX = 1, KC_RED_MIN = 2, KC_RED_PROD = 3, KC_RED_LSE = 4, KC_RED_L1 = 5, KC_RED_L2 = 6 };
typedef struct {
  float *y;
  const float *x;
  int64_t nk, nr;
  int64_t kd[K_MAX_RANK], kxs[K_MAX_RANK], rd[K_MAX_RANK], rxs[K_MAX_RANK];
  float scale;
  int32_t krank, rrank, op, req;
  int32_t block;                /* a block per group (launched with nk * KC_BLOCK threads): long
                                   groups of a sum-like op (KC_RED_SUM, L1, L2), rtc_reduce_go */
} kc_reduce_args;

/* max backward, one thread per group (the reduce geometry): gx = og / ties at the maxima. */
typedef struct { kc_reduce_args g; float *gx; const float *og, *x, *yv; } kc_max_grad_args;
/* prod backward, one thread per group: its zero count and product of nonzero elements, then
 * gx per element (k_reduce.c's k_prod_grad). */
typedef kc_max_grad_args kc_prod_grad_args;

/* logsumexp / norm backward, one thread per element i of x (shape d, row-major): gx[i] from
 * x[i] and og, y at its group, og[sum idx*ks] (ks: the keepdims strides, 0 on the reduced
 * axes). op: KC_RED_LSE, KC_RED_L1 or KC_RED_L2. */
typedef struct {
  float *gx;
  const float *og, *x, *yv;
  int64_t n;
  int64_t d[K_MAX_RANK], ks[K_MAX_RANK];
  int32_t rank, op, req;
} kc_reduce_spread_args;

/* softmax / log_softmax over [outer, n, inner]: one thread per (outer, inner) row. */
typedef struct {
  float *y;
  const float *x, *og;    /* forward: x; backward: og, y in x */
  int64_t outer, n, inner;
  int32_t is_log, req;
} kc_softmax_args;
typedef kc_softmax_args kc_softmax_grad_args;

/* softmax_cross_entropy over logits [rows, classes], i32 labels. */
typedef struct {
  float *y;               /* loss (scalar) or g_logits */
  const float *x, *og;    /* og: the loss's gradient (scalar), backward only */
  const int32_t *label;
  int64_t rows, classes;
  int32_t req;
  int32_t *err;           /* the step's data-error word: KC_ERR_LABEL for a label out of range */
} kc_sce_loss_args;
typedef kc_sce_loss_args kc_sce_grad_args;

/* pooling: planes = N*C of H x W (1-D: H = 1); ph/pw the padding at the start, phe/pwe at
 * the end. Forward: one thread per output; backward: one per input element. */
typedef struct {
  float *y;               /* forward: y; backward: dx */
  const float *x, *dy;
  int64_t planes, H, W, OH, OW, kh, kw, sh, sw, ph, pw, phe, pwe;
  int32_t is_max, cip, req;
} kc_pool_args;
typedef kc_pool_args kc_pool_grad_args;

/* pad (k_pad.c): xd the unpadded shape, yd the padded one, before the pad before each axis
 * (negative crops, constant mode only). Forward: one thread per element of y; backward: one
 * per element of gx (xd), gathering every og element that read it in ascending order. */
typedef struct {
  float *y;               /* forward: y; backward: gx */
  const float *x;         /* forward: x; backward: og */
  int64_t n;
  int64_t xd[K_MAX_RANK], yd[K_MAX_RANK], before[K_MAX_RANK];
  float value;
  int32_t rank, mode, req;
} kc_pad_args;
typedef kc_pad_args kc_pad_grad_args;

/* batch_norm over [outer, C, inner]. A channel's two sums (x and x*x for the statistics; dy and
 * dy * (x - mean) for the gradient) are split over G parts of its M = outer * inner elements
 * when M is large (bn_part: a block per part, C * G blocks, part g taking elements
 * [g * len, (g + 1) * len)), each part's sums into part[2 * (ch * G + g)]; the finishing
 * kernels add a channel's G parts in order, so the sums are the same on every run. With one
 * part (part NULL) the channel's block sums its elements itself. */
typedef struct {
  const float *x, *dy, *smean;  /* dy and smean: the gradient's sums (grad 1) */
  int64_t outer, C, inner, len;
  int32_t G, grad;
  double *part;
} kc_bn_part_args;

/* bn_stats: a block per channel (train statistics, moving update, saved mean/invstd; with apply
 * also y). bn_apply: one thread per element from the saved (train) or moving (predict)
 * statistics. */
typedef struct {
  float *y, *smean, *sinv, *mm, *mv;
  const float *x, *gamma, *beta;
  const double *part;           /* bn_part's sums (G of them a channel), or NULL */
  int64_t outer, C, inner;
  float eps, momentum;
  int32_t is_train, apply, req, G;
} kc_bn_stats_args;
typedef kc_bn_stats_args kc_bn_apply_args;

/* batch_norm backward, a block per channel: dgamma, dbeta, then the channel's dX; or, with coef,
 * the channel's three coefficients of dX (gamma * invstd, mean(dy), mean(dy * xhat)) into
 * coef[3 ch..], and bn_dx writes dX one thread per element. */
typedef struct {
  float *dx, *dg, *db, *coef;
  const float *dy, *x, *gamma, *smean, *sinv;
  const double *part;           /* bn_part's sums, or NULL */
  int64_t outer, C, inner;
  int32_t req_dx, req_dg, req_db, G;
} kc_bn_grad_args;
typedef kc_bn_grad_args kc_bn_dx_args;

/* layer_norm over rows of d: forward and dX one thread per row, dgamma/dbeta one per column. */
typedef struct {
  float *y, *smean, *sinv, *dg, *db;
  const float *x, *dy, *gamma, *beta, *mean_in, *inv_in;
  int64_t rows, d;
  float eps;
  int32_t req, req_dg, req_db;
} kc_ln_forward_args;
typedef kc_ln_forward_args kc_ln_dparams_args;
typedef kc_ln_forward_args kc_ln_dx_args;

/* embedding: y[i, j] = w[idx[i], j] (one thread per element); backward one thread per column
 * j of dW, adding the rows of dY in index order. */
typedef struct {
  float *y;
  const float *w;
  const int32_t *idx;
  int64_t n, rows, d;
  int32_t req;
  int32_t *err;           /* the step's data-error word: KC_ERR_INDEX for an index out of range */
} kc_embedding_args;
typedef kc_embedding_args kc_embedding_grad_args;

/* dropout forward: y = x * mask, mask from Philox(seed, ctr, i) (train) or 1 (predict). */
typedef struct {
  float *y, *mask;
  const float *x;
  int64_t n;
  const kc_live *live;          /* seed, ctr */
  float p, scale;
  int32_t is_train, req_y, req_m;
} kc_dropout_args;

/* y = a * b elementwise under req (dropout's backward). */
typedef struct { float *y; const float *a, *b; int64_t n; int32_t req; } kc_mul_args;

/* Optimizer updates, in place; the constants as k_optim.c computes them on the host, those of
 * the call in live (sgd: lr; adam: step_size, bc2_sqrt and decay, AdamW's 1 - lr * wd with wd
 * then 0, Adam's 1). Nothing is written when *skip is set: a step of the train program met
 * data its CPU kernel refuses (kc_err_any), and the call fails with no weight changed. */
typedef struct {
  float *w, *mom;
  const float *g;
  int64_t n;
  const kc_live *live;
  const int32_t *skip;
  float momentum, wd;
  int32_t nesterov;
} kc_sgd_args;
typedef struct {
  float *w, *m, *v;
  const float *g;
  int64_t n;
  const kc_live *live;
  const int32_t *skip;
  float a1, a2, beta1, beta2, eps, wd;
} kc_adam_args;

/* *out = 1 when any of the n data-error words is set, else 0 (one thread), before the updates. */
typedef struct { const int32_t *err; int32_t n; int32_t *out; } kc_err_any_args;

/* clip_norm (k_clip_grad_norm): each gradient's sum of squares, the coefficient from them all,
 * each gradient scaled by it where it is below 1. */
typedef struct { const float *x; int64_t n; double *out; } kc_sumsq_args;
typedef struct { const double *sq; int32_t n; float max_norm; float *coef; } kc_clip_coef_args;
typedef struct { float *g; int64_t n; const float *coef; } kc_clip_scale_args;

#endif
