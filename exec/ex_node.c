/* ex_node.c — runs one node of a planned graph: an op's forward kernel, a _backward_ kernel
 * (slots that pruning left out get NULL data but still their shapes, which the forward node
 * supplies), an optimizer update on the model's state, each member of an elementwise group, or
 * a heavy op's kernel with its epilogue (the same call the generated code makes). */
#include "ex_int.h"

#include <stdlib.h>
#include <string.h>

static const k_shape ex_scalar = {0, {0}};

/* The k_tensor for tensor t (-1: no tensor; data NULL, shape `dflt`). */
static k_tensor ex_tensor(const ex_run *r, int t, const k_shape *dflt) {
  if (t < 0) return (k_tensor){NULL, *dflt, K_F32};
  const ir_tensor *x = ir_tensor_at(r->g, t);
  return (k_tensor){r->ptr[t], x->shape, x->dtype};
}

/* samples > 1: one call per sample (k_call_samples), slot j's samples stride[j] bytes apart. */
static int ex_call(ex_run *r, const ir_node *nd, k_fn fn, int nin, int nout, void *temp, size_t tb, int64_t samples,
                   const int64_t *stride) {
  char msg[EX_ERR_LEN] = "";
  k_call c = {r->tin, nin, r->tout, nout, r->req, nd->param, temp, tb, r->m->seed,
              EX_CTR_OP(r->m->step, nd->name), r->is_train, msg, sizeof msg, NULL, nd->epi, NULL};
  if (!fn) return rt_errf(r->err, r->errn, "%s: %s has no kernel", nd->name, ir_node_kind_name(nd));
  if ((samples > 1 ? k_call_samples(&c, fn, samples, stride) : fn(&c)) == 0) return 0;
  return rt_errf(r->err, r->errn, "%s (%s): %s", nd->name, ir_node_kind_name(nd), msg[0] ? msg : "kernel failed");
}

/* Inputs must have storage; an output without any is not written (kNullOp). */
static int ex_bind_in(ex_run *r, const ir_node *nd, int j, k_tensor *kt) {
  *kt = ex_tensor(r, nd->in[j], &ex_scalar);
  if (nd->in[j] >= 0 && !kt->data)
    return rt_errf(r->err, r->errn, "%s: input %s has no storage in the plan", nd->name, ir_tensor_at(r->g, nd->in[j])->name);
  return 0;
}

static void ex_bind_out(ex_run *r, const ir_node *nd, int j) {
  r->tout[j] = ex_tensor(r, nd->out[j], &ex_scalar);
  r->req[j] = r->tout[j].data ? ir_node_req(nd, j) : kNullOp;
}

/* A node the plan runs per sample (ir_plan.samples): the bytes between each slot's samples,
 * as the runtime's steps carry them (ir_plan_slot_stride). */
static int ex_forward_samples(ex_run *r, const ir_node *nd, int64_t n, void *temp, size_t tb) {
  int64_t *stride = malloc(sizeof *stride * (size_t)(nd->nin + nd->nout));
  if (!stride) return rt_errf(r->err, r->errn, "%s: out of memory", nd->name);
  for (int j = 0; j < nd->nin + nd->nout; j++) stride[j] = ir_plan_slot_stride(r->g, nd, j);
  int rc = ex_call(r, nd, ir_ops[nd->op].forward, nd->nin, nd->nout, temp, tb, n, stride);
  free(stride);
  return rc;
}

/* A node the layout pass views otherwise (a channel scale on blocked values) sees its
 * view_shape, as the code generators' steps do. */
static int ex_forward(ex_run *r, const ir_node *nd, void *temp, size_t tb) {
  for (int j = 0; j < nd->nin; j++)
    if (ex_bind_in(r, nd, j, &r->tin[j])) return 1;
  for (int j = 0; j < nd->nout; j++) ex_bind_out(r, nd, j);
  for (int j = 0; nd->view_shape && j < nd->nin + nd->nout; j++)
    (j < nd->nin ? &r->tin[j] : &r->tout[j - nd->nin])->shape = nd->view_shape[j];
  int64_t n = r->g->plan->samples ? r->g->plan->samples[r->node] : 0;
  if (n > 1) return ex_forward_samples(r, nd, n, temp, tb);
  return ex_call(r, nd, ir_ops[nd->op].forward, nd->nin, nd->nout, temp, tb, 0, NULL);
}

/* ---- backward ---- */

/* Slots that pruning left out, and gradients nobody needs, still carry a shape (kernels read
 * shapes); the backward pass recorded every slot's shape when it derived the node. */
static void ex_fill_shapes(ex_run *r, const ir_node *nd) {
  for (int j = 0; j < nd->nin; j++)
    if (nd->in[j] < 0) r->tin[j].shape = nd->slot_shape[j];
  for (int j = 0; j < nd->nout; j++)
    if (nd->out[j] < 0) r->tout[j].shape = nd->slot_shape[nd->nin + j];
}

static int ex_backward(ex_run *r, const ir_node *nd, void *temp, size_t tb) {
  int nof = ir_op_nouts(&ir_ops[nd->op]), nargs = nd->nout;
  if (nd->nin != 2 * nof + nargs || !nd->slot_shape)
    return rt_errf(r->err, r->errn, "%s: %d inputs (expected %d) or no slot shapes", nd->name, nd->nin, 2 * nof + nargs);
  for (int j = 0; j < nd->nin; j++)
    if (ex_bind_in(r, nd, j, &r->tin[j])) return 1;
  for (int j = 0; j < nd->nout; j++) ex_bind_out(r, nd, j);
  ex_fill_shapes(r, nd);
  return ex_call(r, nd, ir_ops[nd->op].backward, nd->nin, nd->nout, temp, tb, 0, NULL);
}

/* ---- optimizer updates: in = [param, grad, state...] ---- */

static float *ex_update_arg(ex_run *r, const ir_node *nd, int j, int64_t n) {
  if (j >= nd->nin || nd->in[j] < 0 || !r->ptr[nd->in[j]]) return NULL;
  return ir_tensor_numel(ir_tensor_at(r->g, nd->in[j])) == n ? r->ptr[nd->in[j]] : NULL;
}

static int ex_update(ex_run *r, const ir_node *nd) {
  const ir_optimizer *o = &r->g->optim;
  int64_t n = nd->nin > 0 && nd->in[0] >= 0 ? ir_tensor_numel(ir_tensor_at(r->g, nd->in[0])) : 0;
  float *w = ex_update_arg(r, nd, 0, n), *gr = ex_update_arg(r, nd, 1, n);
  float *s0 = ex_update_arg(r, nd, 2, n), *s1 = ex_update_arg(r, nd, 3, n);
  bool need_s0 = k_optim_moments(nd->op) || o->sgd.momentum != 0.0f, need_s1 = k_optim_moments(nd->op);
  if (!w || !gr || (need_s0 && !s0) || (need_s1 && !s1))
    return rt_errf(r->err, r->errn, "%s: update without its parameter, gradient or state", nd->name);
  float lr = k_sched_lr(&o->sched, r->m->lr, r->m->step - 1 - r->m->lr_from);   /* step counts this one */
  if (nd->op == K_OPT_SGD) k_sgd_update(w, gr, s0, n, lr, nd->param ? nd->param : &o->sgd);
  else if (k_optim_moments(nd->op)) k_adam_update(w, gr, s0, s1, n, lr, nd->param ? nd->param : &o->adam, r->m->step, nd->op == K_OPT_ADAMW);
  else return rt_errf(r->err, r->errn, "%s: unknown optimizer %d", nd->name, nd->op);
  return 0;
}

/* ---- one node ---- */

int ex_node_run(ex_run *r, const ir_node *nd, void *temp, size_t temp_bytes) {
  switch (nd->kind) {
  case IR_N_OP: return ex_forward(r, nd, temp, temp_bytes);
  case IR_N_BACKWARD: return ex_backward(r, nd, temp, temp_bytes);
  case IR_N_UPDATE: return ex_update(r, nd);
  case IR_N_FUSED:
    if (nd->epi) return ex_forward(r, nd, temp, temp_bytes);   /* the heavy op's kernel runs the tail */
    for (int s = 0; s < nd->nsub; s++)
      if (ex_node_run(r, &nd->sub[s], NULL, 0)) return 1;
    return 0;
  }
  return rt_errf(r->err, r->errn, "%s: unknown node kind %d", nd->name, (int)nd->kind);
}
