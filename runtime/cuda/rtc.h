/* rtc.h — the CUDA runtime (prefix rtc_): what a model compiled with `--target cuda` runs on.
 * It is an archive of its own (libkiln_runtime_cuda.a), linked only into CUDA shared objects,
 * so the CPU path never sees CUDA. Every CUDA library is opened with dlopen at create
 * (libcuda.so.1, libcublas.so.13, libcudnn.so.9), so a .so loads on a machine without a
 * driver and its create fails there with a message instead of the loader refusing it.
 *
 * One step of a program runs as either
 *   - a generated kernel (the code generator's CUDA C: fused groups, unfused elementwise
 *     ops, broadcast gradients), launched by name from the model's PTX module, or
 *   - an op of the GPU op table (rtc_ops.def): library kernels from kernels/cuda/kc_*.cu
 *     (compiled into the same PTX module), cuBLAS or cuDNN calls.
 * Files:
 *   rtc_lib.c      dlopen of the driver API, cuBLAS and cuDNN; function tables
 *   rtc_model.c    the model ABI on the GPU: device store and arena, steps, entry points
 *   rtc_graph.c    each program's run captured once as a CUDA graph and replayed per call
 *   rtc_ops.c      the op table (from rtc_ops.def) and rtc_launch
 *   rtc_ops_lib.c  host halves of the library kernels (fill kc_args.h structs, launch)
 *   rtc_blas.c     fully_connected, matmul through cuBLAS
 *   rtc_dnn.c      convolution through cuDNN */
#ifndef KILN_RTC_H
#define KILN_RTC_H

#include <stddef.h>
#include <stdint.h>

#include "k_base.h"
#include "rt_model.h"

typedef struct rtc_ctx rtc_ctx;   /* one model instance's GPU context (rtc_model.c) */

/* One GPU op call: the step and its device pointers, bound for this run. */
typedef struct {
  const rt_step *s;               /* op, name, kind (FORWARD / BACKWARD / UPDATE) */
  const void *param;              /* the step's param at this run's extents (bounded dims patch a
                                     copy), else s->param */
  int nin, nout;
  void *const *in;                /* device pointers per in slot; NULL: absent / undeclared */
  void *const *out;               /* device pointers per out slot; NULL: not written */
  const k_shape *in_shape, *out_shape;
  const k_dtype *in_dtype;        /* per in slot */
  const k_req *req;               /* per out slot (kNullOp where out[j] is NULL) */
  int is_train;
  void **state;                   /* the step's own slot for what it keeps across calls
                                     (cuDNN descriptors, the chosen algorithm): set by the
                                     op's prepare, freed by its release; NULL otherwise */
  int32_t *err;                   /* device: the step's data-error word, for a kernel that meets
                                     data the CPU kernel refuses (kc_args.h's KC_ERR_*) */
  void *live;                     /* device: the step's kc_live (kc_args.h), for a step whose
                                     values change per call (an update, dropout), else NULL */
} rtc_call;

/* forward / backward: 0, or 1 with a message through rtc_fail. prepare runs once at create
 * with in/out NULL (shapes set): descriptors, algorithm choice, scratch reservation. */
typedef int (*rtc_op_fn)(rtc_ctx *c, const rtc_call *k);
typedef void (*rtc_release_fn)(rtc_ctx *c, void *state);

/* Every GPU op's functions, declared from the op table. */
#define RTC_OP(op, lib, data) int rtc_##op##_forward(rtc_ctx *c, const rtc_call *k); int rtc_##op##_backward(rtc_ctx *c, const rtc_call *k);
#define RTC_OP_PREP(op, lib, data) RTC_OP(op, lib, data) int rtc_##op##_prepare(rtc_ctx *c, const rtc_call *k); \
  void rtc_##op##_release(rtc_ctx *c, void *state);
#include "rtc_ops.def"
#undef RTC_OP
#undef RTC_OP_PREP

/* ---- what rtc_model.c gives the ops ---- */
/* Launches kernel `name` of the model's module on the model's stream, a 1-D grid covering
 * `threads` threads (capped: library kernels loop grid-stride), with one parameter: the
 * bytes of `args` (a kc_args.h struct, passed by value). 0, or 1 with a message. */
int rtc_launch(rtc_ctx *c, const char *name, int64_t threads, const void *args, size_t args_size);
/* Sets the message of the failing call (the step's name is prefixed by the caller); returns 1. */
int rtc_fail(rtc_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* At prepare: asks for `bytes` of device scratch shared by all steps (one step runs at a time
 * on the stream); at run time rtc_scratch returns it (at least the largest reservation). */
int rtc_reserve_scratch(rtc_ctx *c, size_t bytes);
void *rtc_scratch(rtc_ctx *c);
void *rtc_stream(rtc_ctx *c);     /* the CUstream every call is queued on */
void *rtc_cublas(rtc_ctx *c);     /* the model's cublasHandle_t (bound to the stream) */
void *rtc_cudnn(rtc_ctx *c);      /* the model's cudnnHandle_t (bound to the stream) */

#endif
