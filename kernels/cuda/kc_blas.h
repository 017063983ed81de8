/* kc_blas.h — the one parameter of each kernel of kc_blas.cu (the bias add and the bias
 * gradient of fully_connected and convolution, and a zero fill for empty products), filled by
 * runtime/cuda/rtc_blas.c and rtc_dnn.c and copied byte for byte into the launch: plain C,
 * pointers and 64/32-bit integers only, so the host and NVRTC lay it out the same. */
#ifndef KILN_KC_BLAS_H
#define KILN_KC_BLAS_H

#ifndef __CUDACC_RTC__
#include "k_base.h"     /* under NVRTC k_params.h, pasted first, has brought its types */
#endif

/* y[i] += bias[(i / inner) % features] for i < n: y viewed as [n / (features * inner),
 * features, inner] (fully_connected: inner 1; convolution: inner = the output's H * W). */
typedef struct {
  float *y;
  const float *bias;
  int64_t n, inner, features;
} kc_blas_bias_add_args;

/* db[f] = (add ? db[f] : 0) + sum over o < outer of sum over j < inner of
 * dy[(o * features + f) * inner + j]: one thread per feature, rows in order. */
typedef struct {
  float *db;
  const float *dy;
  int64_t outer, features, inner;
  int32_t add;
} kc_blas_bias_grad_args;

/* y[i] = 0 for i < n (a product over an empty inner dimension under kWriteTo). */
typedef struct {
  float *y;
  int64_t n;
} kc_blas_zero_args;

#endif
