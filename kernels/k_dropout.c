/* k_dropout.c — dropout as F.dropout: identity in predict; in training element i is kept
 * iff Philox(seed, counter, i) >= p, so the GPU back end draws the same mask. The hidden
 * output mask holds 1/(1-p) or 0 and is all the backward reads. */
#include "kernels.h"
#include "k_philox.h"
#include "k_util.h"

/* out = [y, mask]; mask's req may be kNullOp (and its data NULL) outside training. */
int k_dropout_forward(const k_call *c) {
  int64_t n = k_shape_numel(&c->in[0].shape);
  k_req rm = c->nout > 1 && c->out[1].data ? c->req[1] : kNullOp;
  if (!c->is_train) {
    k_copy_req(c->out[0].data, c->in[0].data, n, c->req[0]);
    for (int64_t i = 0; rm != kNullOp && i < n; i++) k_put(c->out[1].data, i, 1.0f, rm);
    return 0;
  }
  float p = ((const k_dropout_param *)c->param)->p;
  float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;   /* p == 1 drops all: no 0 * inf */
  const float *x = c->in[0].data;
  for (int64_t i = 0; i < n; i++) {
    float m = k_philox_uniform(c->seed, c->counter, (uint64_t)i) >= p ? scale : 0.0f;
    if (c->req[0] != kNullOp) k_put(c->out[0].data, i, x[i] * m, c->req[0]);
    if (rm != kNullOp) k_put(c->out[1].data, i, m, rm);
  }
  return 0;
}

/* in = [og, og_mask (NULL), x (NULL), y (NULL), mask]; gx = og * mask. */
int k_dropout_backward(const k_call *c) {
  if (c->req[0] == kNullOp) return 0;
  int64_t n = k_shape_numel(&c->out[0].shape);
  const float *og = c->in[0].data, *mask = c->in[4].data;
  for (int64_t i = 0; i < n; i++) k_put(c->out[0].data, i, og[i] * mask[i], c->req[0]);
  return 0;
}
