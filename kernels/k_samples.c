/* k_samples.c — a kernel call run once per sample, for a step the memory plan runs per sample
 * (its pieces' samples lie apart inside a concat's output: ir_plan.samples). Both executors
 * (runtime/rt_model_run.c, exec/ex_node.c) make their calls through it. */
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>

int k_call_samples(const k_call *c, k_fn fn, int64_t n, const int64_t *stride) {
  enum { K_SAMPLE_SLOTS = 64 };
  int ns = c->nin + c->nout;
  k_tensor local[K_SAMPLE_SLOTS], *t = ns <= K_SAMPLE_SLOTS ? local : malloc(sizeof *t * (size_t)ns);
  if (!t) return snprintf(c->err, c->err_len, "out of memory"), 1;
  for (int j = 0; j < ns; j++) {
    t[j] = j < c->nin ? c->in[j] : c->out[j - c->nin];
    if (stride[j]) t[j].shape.d[0] = 1;
  }
  k_call one = *c;   /* the caller's tensors stay whole */
  one.in = t, one.out = t + c->nin;
  int rc = 0;
  for (int64_t k = 0; k < n && !rc; k++) {
    for (int j = 0; j < ns; j++)
      if (stride[j]) t[j].data = (char *)(j < c->nin ? c->in[j] : c->out[j - c->nin]).data + k * stride[j];
    rc = fn(&one);
  }
  if (t != local) free(t);
  return rc;
}
