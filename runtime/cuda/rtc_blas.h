/* rtc_blas.h — the GPU ops that run through cuBLAS (rtc_blas.c: fully_connected, matmul) and
 * cuDNN (rtc_dnn.c: convolution), and the libraries' loading. Both libraries are opened with
 * dlopen once per process and never linked, so a CUDA .so loads without them; the model
 * (rtc_model.c) opens a handle per instance at create, only when it has such ops, and the ops
 * find it through rtc_cublas(c) / rtc_cudnn(c). Every call needs the model's GPU context
 * current on the calling thread. */
#ifndef KILN_RTC_BLAS_H
#define KILN_RTC_BLAS_H

#include <stddef.h>
#include <stdint.h>

#include "rtc.h"

/* ---- rtc_blas.c ---- */
/* A cuBLAS handle bound to rtc_stream(c), in FP32 math (no TF32): 0, or 1 through rtc_fail
 * (the library missing, naming it and dlerror(); or cublasCreate failing). */
int rtc_blas_open(rtc_ctx *c, void **h);
void rtc_blas_close(void *h);          /* NULL: nothing */

/* rtc_fully_connected_* and rtc_matmul_*: rtc.h declares them from rtc_ops.def. */

/* Shared with rtc_dnn.c: the bias kernels of kc_blas.cu over y viewed as [outer, features,
 * inner]. bias_add: y += bias per feature. bias_grad: db (=, or += when add) the sum of dy
 * per feature. 0, or 1 with a message. */
int rtc_blas_bias_add(rtc_ctx *c, float *y, const float *bias, int64_t outer, int64_t features, int64_t inner);
int rtc_blas_bias_grad(rtc_ctx *c, float *db, const float *dy, int64_t outer, int64_t features, int64_t inner,
                       int add);

/* Shared with rtc_dnn.c: opens the first of `names` that dlopen accepts and resolves every
 * symbol of syms (a NULL-terminated list of names, each with the slot it fills): 0, or 1 with
 * "cannot load <what> (<names[0]>): <dlerror()>" or the missing symbol in err. */
typedef struct { const char *name; void **slot; } rtc_dl_sym;
int rtc_dl_load(const char *what, const char *const *names, const rtc_dl_sym *syms, char *err, size_t n);

/* ---- rtc_dnn.c ---- */
/* A cuDNN handle bound to rtc_stream(c): as rtc_blas_open. */
int rtc_dnn_open(rtc_ctx *c, void **h);
void rtc_dnn_close(void *h);           /* NULL: nothing */

/* rtc_convolution_prepare/forward/backward/release: rtc.h declares them from rtc_ops.def. */

#endif
