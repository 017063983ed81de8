/* rtc_ops_lib.h — the host halves of the GPU library kernels (rtc_ops_lib.c): for every op of
 * rtc_ops.def's "library kernels" rows rtc_<op>_forward / rtc_<op>_backward (declared by rtc.h
 * from the table), and the optimizer updates. Each fills a kc_args.h struct from the rtc_call and
 * launches kernels/cuda/kc_ops.cu's kernel by name; the semantics are the CPU kernels'
 * (kernels/k_*.c), every OpReqType included. Data errors the CPU reports (a label or an
 * embedding index out of range) cannot be seen from the host here: the kernels write NaN and
 * set the step's data-error word (rtc_call.err), which the runtime reads after the run. */
#ifndef KILN_RTC_OPS_LIB_H
#define KILN_RTC_OPS_LIB_H

#include "kc_args.h"
#include "rtc.h"

/* In-place updates of n weights, as k_sgd_update / k_adam_update, with the call's values read
 * from live (device memory) and nothing written when *skip (device) is set. */
int rtc_sgd_update(rtc_ctx *c, float *w, const float *g, float *mom, int64_t n, const kc_live *live,
                   const int32_t *skip, const k_sgd_param *p);
int rtc_adam_update(rtc_ctx *c, float *w, const float *g, float *m, float *v, int64_t n, const kc_live *live,
                    const int32_t *skip, const k_adam_param *p, int decoupled);
/* An update's values for this call into its host live entry (t: the 1-based step). */
void rtc_sgd_live(kc_live *l, float lr);
void rtc_adam_live(kc_live *l, float lr, const k_adam_param *p, int64_t t, int decoupled);
/* *out (device) = whether any of the n data-error words err (device) is set. */
int rtc_err_any(rtc_ctx *c, const int32_t *err, int n, int32_t *out);
/* clip_norm: n gradients scaled together to the global L2 norm max_norm, as k_clip_grad_norm,
 * on the stream; work (rtc_clip_work_bytes(n) of device memory) holds the sums and the
 * coefficient. */
size_t rtc_clip_work_bytes(int n);
int rtc_clip_grad_norm(rtc_ctx *c, float *const *g, const int64_t *len, int n, float max_norm, void *work);

#endif
