/* k_conv_dw.h — the direct depthwise and grouped convolution (k_conv_dw.c), as k_conv.c's
 * dispatch sees it. Internal to the kernel library: kernels.h's convolution entry points
 * are the public ones. */
#ifndef KILN_K_CONV_DW_H
#define KILN_K_CONV_DW_H

#include "k_base.h"
#include "k_params.h"

/* 1 when the direct grouped path should run this shape: groups G > 1 with Cg = C / G input
 * channels each, depthwise (Cg = 1, num_filter = M * C for a channel multiplier M >= 1) or up
 * to a few channels per group (the rule is in k_conv_dw.c; any Cg under KILN_CONV=
 * grouped-direct), at most K_DW_MAX_TAPS terms Cg*kh*kw per output, a non-empty output, and
 * KILN_CONV not "im2col" or "grouped-im2col" (which keep grouped convolutions on im2col). */
int k_conv_dw_wanted(const k_shape *data, const k_shape *weight, const k_conv_param *p);

/* Temp bytes the path needs (forward and backward alike), 0 when it is not wanted. */
size_t k_conv_dw_temp_bytes(const k_shape *data, const k_shape *weight, const k_conv_param *p);

/* Wanted, and the call's temp space holds the path's workspace (a plan made with another
 * KILN_CONV falls back to im2col instead of failing). */
int k_conv_dw_runs(const k_call *c, const k_shape *data, const k_shape *weight);

/* 1 when a forward of this shape can run on channel-blocked tensors (k_conv_param.in_block,
 * out_block, epi_block, all the same width): a 2-D depthwise layer, one filter per channel,
 * the path wanted for it. passes/pass_layout.c asks (through k_conv_block_width). */
int k_conv_dw_blocks(const k_shape *data, const k_shape *weight, const k_conv_param *p);

/* The k_convolution_forward / _backward contracts for calls k_conv_dw_runs accepts, except the
 * bias gradient, which k_convolution_backward computes for every path. */
int k_conv_dw_forward(const k_call *c);   /* blocked as the param says, or NCHW */
int k_conv_dw_backward(const k_call *c);

#endif
