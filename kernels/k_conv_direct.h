/* k_conv_direct.h — the direct convolution on channel-blocked tensors (k_conv_direct.c), as
 * k_conv.c's dispatch sees it. Internal to the kernel library: kernels.h's convolution entry
 * points are the public ones. */
#ifndef KILN_K_CONV_DIRECT_H
#define KILN_K_CONV_DIRECT_H

#include "k_base.h"
#include "k_params.h"

/* 1 when the direct path should run this shape's forward (backward = 0) or backward pass:
 * ungrouped, and measured faster than im2col (the rule is in k_conv_direct.c), or forced by
 * the environment variable KILN_CONV ("im2col" never; "direct", "direct-avx2",
 * "direct-generic" whenever ungrouped, the suffix picking a narrower instruction set, for
 * tests). */
int k_conv_direct_wanted(const k_shape *data, const k_shape *weight, const k_conv_param *p,
                         int backward);

/* Temp bytes the direct path needs for this convolution (forward and backward alike, on any
 * instruction set), or 0 when it is wanted in neither direction. */
size_t k_conv_direct_temp_bytes(const k_shape *data, const k_shape *weight, const k_conv_param *p);

/* Whether a call runs the direct path: wanted, and the call's temp space is large enough
 * (a plan made with another KILN_CONV falls back to im2col instead of failing); always for a
 * forward with a compiled blocked layout (k_conv_param.in_block / out_block / epi_block), which
 * k_conv_direct_forward then honours or refuses with a message. */
int k_conv_direct_runs(const k_call *c, const k_shape *data, const k_shape *weight, int backward);

/* Whether an unblocked forward of this shape runs the NCHW loop for few input channels on this
 * CPU (fwd_nchw_rows, k_conv_direct.c's k_cd_nchw), rather than converting to the blocked
 * layout: for tests, which cannot tell the two apart by their results (the same bits). */
int k_conv_direct_nchw(const k_shape *data, const k_shape *weight, const k_conv_param *p);

/* Whether a forward of this shape reads its NCHW input as padded planes rather than packing it
 * blocked (k_conv_direct.c's k_cd_planar): for tests, as k_conv_direct_nchw. */
int k_conv_direct_planar(const k_shape *data, const k_shape *weight, const k_conv_param *p);

/* The k_convolution_forward / _backward contracts, for calls k_conv_direct_runs accepts,
 * except the bias gradient, which k_convolution_backward computes for both paths. */
int k_conv_direct_forward(const k_call *c);
int k_conv_direct_backward(const k_call *c);

#endif
