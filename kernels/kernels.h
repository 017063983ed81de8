/* kernels.h — the map of the kernel library: every forward and backward kernel, the
 * optimizer updates and the initializers. Kernels follow k_call's contract (k_base.h);
 * each op's parameter struct is in k_params.h and its scalar functions in k_scalar.h.
 * Each section names the file that implements it. */
#ifndef KILN_KERNELS_H
#define KILN_KERNELS_H

#include "k_base.h"
#include "k_params.h"
#include "k_parallel.h"

#define K_DECLARE_OP(op) \
  int k_##op##_forward(const k_call *c); \
  int k_##op##_backward(const k_call *c);

/* k_elemwise.c — unary ops over any shape; binary ops with NumPy broadcasting, whose
 * backward reduces the gradient over broadcast axes (vectorised loops on a collapsed view,
 * k_bview.h, split with k_parallel_for). Scalar math comes from k_scalar.h. */
#define K_UNARY_OPS(X) X(neg) X(abs) X(exp) X(log) X(sqrt) X(rsqrt) X(square) X(sin) X(cos) \
  X(sign) X(reciprocal) X(relu) X(sigmoid) X(tanh) X(softplus) X(gelu) X(leaky_relu) X(clip) \
  X(smooth_l1) X(activation)
#define K_BINARY_OPS(X) X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum)
K_UNARY_OPS(K_DECLARE_OP)
K_BINARY_OPS(K_DECLARE_OP)

/* k_reduce.c — sum, mean, max over axes (k_reduce_param). */
K_DECLARE_OP(sum)
K_DECLARE_OP(mean)
K_DECLARE_OP(max)

/* k_layout.c — data movement: reshape, flatten, transpose, expand_dims, squeeze,
 * broadcast_to, slice, concat (variadic: in = the pieces). */
K_DECLARE_OP(reshape)
K_DECLARE_OP(flatten)
K_DECLARE_OP(transpose)
K_DECLARE_OP(expand_dims)
K_DECLARE_OP(squeeze)
K_DECLARE_OP(broadcast_to)
K_DECLARE_OP(slice)
K_DECLARE_OP(concat)

/* k_softmax.c — numerically stable softmax, log_softmax, and softmax_cross_entropy
 * (logits [N, C], label i32 [N], loss f32[] = mean over N; a label out of range is an error). */
K_DECLARE_OP(softmax)
K_DECLARE_OP(log_softmax)
K_DECLARE_OP(softmax_cross_entropy)

/* k_dropout.c — dropout: identity when !is_train; mask from k_philox_uniform otherwise. */
K_DECLARE_OP(dropout)

/* k_gemm.c — matmul (batched, broadcast batch dims) and fully_connected, on k_sgemm
 * (k_blas.h: Kiln's own blocked SGEMM, k_sgemm.c, or OpenBLAS single-threaded where the CPU
 * lacks AVX2 + FMA; large products split over the k_parallel pool); fully_connected forward
 * keeps its packed weights in the call's k_cache (a predict program), packed once per weight
 * change. */
K_DECLARE_OP(matmul)
K_DECLARE_OP(fully_connected)

/* k_conv.c — convolution (1-D and 2-D, groups, dilation); needs temp space of
 * k_conv_temp_bytes(). Ungrouped shapes where it measured faster run k_conv_direct.c's direct
 * convolution on channel-blocked tensors (KILN_CONV overrides the choice); the rest run
 * im2col + GEMM, the batch cut into at most 4 parts (fixed by N, not by the thread count) run
 * in parallel, each with a column buffer lent for its run and its own weight-gradient
 * partial, the partials summed in part order. */
K_DECLARE_OP(convolution)
size_t k_conv_temp_bytes(const k_shape *data, const k_shape *weight, const k_conv_param *p);
size_t k_convolution_temp_bytes(const k_shape *args, const void *param);   /* the op row's k_temp_fn */

/* k_epilogue.c (map: k_epilogue.h) — the elementwise tail that convolution, fully_connected
 * and matmul forward run on each output block when k_call.epi is set. */

/* k_pool.c — max and average pooling (count_include_pad), 1-D and 2-D; planes split over
 * threads, unclipped windows done together so the inner loops vectorise. */
K_DECLARE_OP(pooling)

/* k_norm.c — batch_norm (train: batch statistics in one pass, moving update; predict: moving
 * statistics; channels split over threads) and layer_norm. */
K_DECLARE_OP(batch_norm)
/* Predict mode's y = x * a + b for one channel, from gamma, beta and the moving statistics:
 * what k_batch_norm_forward computes, shared with the epilogues (k_epilogue.h). */
void k_batch_norm_predict_coeffs(float gamma, float beta, float mean, float var, float eps,
                                 float *invstd, float *a, float *b);
K_DECLARE_OP(layer_norm)

/* k_embedding.c — gather forward; scatter-add backward into the weight gradient. */
K_DECLARE_OP(embedding)

/* k_optim.c — updates exactly as torch.optim.SGD / Adam (weight decay added to the
 * gradient, dampening 0, no Nesterov). Buffers start at zero; step counts from 1. Large
 * tensors are split over threads. */
void k_sgd_update(float *w, const float *g, float *mom, int64_t n, float lr, const k_sgd_param *p);
void k_adam_update(float *w, const float *g, float *m, float *v, int64_t n, float lr,
                   const k_adam_param *p, int64_t step);

/* k_init.c — initializers; element i of a draw uses Philox(seed, counter, i). */
void k_init_constant(float *x, int64_t n, float value);
void k_init_uniform(float *x, int64_t n, float low, float high, uint64_t seed, uint64_t counter);
void k_init_normal(float *x, int64_t n, float mean, float std, uint64_t seed, uint64_t counter);
/* Fills a tensor of `shape` by initializer `kind` with attributes a, b (value | low, high |
 * mean, std). Xavier is U(+-sqrt(6 / (fan_in + fan_out))) with torch's fans. The one place
 * both the reference executor and compiled models initialise weights, so they agree. */
void k_init_fill(float *x, const k_shape *shape, int kind, float a, float b, uint64_t seed, uint64_t counter);

#endif
