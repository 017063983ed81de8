/* pass_backward.c — backward-graph derivation (train only): a _backward_<node> node per
 * forward node on a path from a parameter to the loss, appended in reverse program order,
 * with the loss's head gradient a constant 1 and gradients that meet summed via kAddTo.
 * Every backward input slot is filled here; pass_prune.c drops the undeclared ones. */
#include "passes.h"

#include <stdlib.h>

typedef struct {
  ir_graph *g;
  bool *need;      /* per forward tensor: computed from a parameter through float args */
  int *grad;       /* per forward tensor: its gradient tensor once some node writes it, or -1 */
  int ntensors;    /* forward tensors: those that existed before this pass */
} pass_bwd;

/* Args are the node's inputs before its aux states: concat's count is its input count, and
 * an omitted optional arg (the bias when no_bias) has no slot, here nor in the kernels. */
static int pass_bwd_nargs(const ir_node *n) { return n->nin - ir_op_naux(&ir_ops[n->op]); }

/* An arg can carry a gradient unless the op reads it as i32 (labels, indices). Variadic ops
 * have no i32 args, and the mask's bits stop at 32. */
static bool pass_bwd_float_arg(const ir_opdef *op, int i) {
  return op->variadic || i >= 32 || !(op->i32_args >> i & 1);
}

/* Forward, in program order: parameters, then every visible output of a node that reads a
 * marked tensor through a float arg. Aux states are not args, so they never get marked. */
static void pass_bwd_mark(pass_bwd *b) {
  for (int t = 0; t < b->ntensors; t++) b->need[t] = ir_tensor_at(b->g, t)->kind == IR_T_PARAM;
  for (int i = 0; i < ir_nnodes(b->g); i++) {
    const ir_node *n = ir_node_at(b->g, i);
    if (n->kind != IR_N_OP) continue;
    bool any = false;
    for (int a = 0; a < pass_bwd_nargs(n); a++)
      any |= n->in[a] >= 0 && b->need[n->in[a]] && pass_bwd_float_arg(&ir_ops[n->op], a);
    for (int j = 0; any && j < ir_ops[n->op].nvisible; j++)
      if (n->out[j] >= 0) b->need[n->out[j]] = true;
  }
}

/* The tensor arg a of n sends its gradient to, or -1 when it needs none. */
static int pass_bwd_wants(const pass_bwd *b, const ir_node *n, int a) {
  int t = n->in[a];
  return t >= 0 && b->need[t] && pass_bwd_float_arg(&ir_ops[n->op], a) ? t : -1;
}

/* The loss's head gradient: a scalar constant 1 (the loss is f32[], inference checks it). */
static void pass_bwd_head(pass_bwd *b) {
  const ir_tensor *loss = ir_tensor_at(b->g, b->g->loss);
  const char *name = ir_strfmt(&b->g->arena, "%s@grad", loss->name);
  int h = ir_graph_add_tensor(b->g, name, IR_T_CONST, loss->loc);
  ir_tensor *t = ir_tensor_at(b->g, h);
  t->value = 1.0f, t->shape = (k_shape){.rank = 0}, t->shape_known = true;
  b->grad[b->g->loss] = h;
}

/* The gradient tensor of forward tensor t, made on first use: the first writer gets kWriteTo,
 * every later one kAddTo into the same buffer (no extra buffers, no add nodes). */
static int pass_bwd_grad_for(pass_bwd *b, int t, k_req *req) {
  if (b->grad[t] >= 0) return *req = kAddTo, b->grad[t];
  const ir_tensor *x = ir_tensor_at(b->g, t);
  const char *name = ir_strfmt(&b->g->arena, "%s@grad", x->name);
  k_shape shape = x->shape;
  ir_loc loc = x->loc;
  int gt = ir_graph_add_tensor(b->g, name, IR_T_VALUE, loc);
  ir_tensor *gx = ir_tensor_at(b->g, gt);
  gx->dtype = K_F32, gx->shape = shape, gx->shape_known = true;
  *req = kWriteTo;
  return b->grad[t] = gt;
}

/* in = [out_grad[nout], in_data[nargs], out_data[nout]]: an out_grad is -1 for a hidden
 * output and for one no later node sent a gradient to. */
static int *pass_bwd_inputs(const pass_bwd *b, const ir_node *n, int nargs, int *nin) {
  int nout = n->nout;
  *nin = 2 * nout + nargs;
  int *in = ir_alloc(&b->g->arena, sizeof(int) * (size_t)*nin);
  for (int j = 0; j < nout; j++) {
    bool visible = j < ir_ops[n->op].nvisible && n->out[j] >= 0;
    in[j] = visible ? b->grad[n->out[j]] : -1;
    in[nout + nargs + j] = n->out[j];
  }
  for (int a = 0; a < nargs; a++) in[nout + a] = n->in[a];
  return in;
}

/* Whether n lies on a path from a parameter to the loss: some arg wants a gradient and
 * some visible output received one. */
static bool pass_bwd_on_path(const pass_bwd *b, const ir_node *n) {
  bool wants = false, has = false;
  for (int a = 0; a < pass_bwd_nargs(n); a++) wants |= pass_bwd_wants(b, n, a) >= 0;
  for (int j = 0; j < ir_ops[n->op].nvisible; j++) has |= n->out[j] >= 0 && b->grad[n->out[j]] >= 0;
  return wants && has;
}

/* Every slot's shape, while every slot is still filled: out_grad j and out_data j have the
 * shape of forward output j, in_data a and in_grad a the shape of arg a. */
static k_shape *pass_bwd_slot_shapes(ir_graph *g, const ir_node *f, int nin, int nargs) {
  int nof = f->nout;
  k_shape *sh = ir_alloc(&g->arena, sizeof(k_shape) * (size_t)(nin + nargs));
  for (int j = 0; j < nof; j++) sh[j] = sh[nof + nargs + j] = ir_tensor_at(g, f->out[j])->shape;
  for (int a = 0; a < nargs; a++) sh[nof + a] = sh[nin + a] = ir_tensor_at(g, f->in[a])->shape;
  return sh;
}

/* Appends _backward_<name> for forward node fi. The forward node is re-read after each
 * tensor is added, since adding tensors or nodes may move the arrays. */
static void pass_bwd_emit(pass_bwd *b, int fi) {
  ir_node f = *ir_node_at(b->g, fi);
  if (!ir_ops[f.op].backward) KILN_ICE("%s: op '%s' needs a gradient but has no backward", f.name, ir_ops[f.op].name);
  int nargs = pass_bwd_nargs(&f), nin;
  int *in = pass_bwd_inputs(b, &f, nargs, &nin);
  int *out = ir_alloc(&b->g->arena, sizeof(int) * (size_t)(nargs + 1));
  k_req *req = ir_alloc(&b->g->arena, sizeof(k_req) * (size_t)(nargs + 1));
  for (int a = 0; a < nargs; a++) {
    int t = pass_bwd_wants(b, &f, a);
    req[a] = kNullOp, out[a] = -1;
    if (t >= 0) out[a] = pass_bwd_grad_for(b, t, &req[a]);
  }
  const char *name = ir_strfmt(&b->g->arena, "_backward_%s", f.name);
  int bi = ir_graph_add_node_raw(b->g, IR_N_BACKWARD, f.op, name, nin, in, nargs, out, f.loc);
  ir_node *bn = ir_node_at(b->g, bi);
  bn->param = f.param, bn->req = req;
  bn->slot_shape = pass_bwd_slot_shapes(b->g, &f, nin, nargs);
}

/* batch_norm needs nothing here: its forward kernel updates the moving statistics (aux
 * states) itself in training mode, and aux states are never args, so they get no gradient. */
int pass_backward(ir_graph *g, pass_ctx *cx) {
  if (cx->mode != IR_MODE_TRAIN) return 0;
  if (g->loss < 0) return ir_error(cx->diag, g->train_loc, "model '%s' has no train target", g->name), 1;
  int nt = ir_ntensors(g), nfwd = ir_nnodes(g);
  pass_bwd b = {g, calloc((size_t)nt + 1, sizeof(bool)), malloc(sizeof(int) * ((size_t)nt + 1)), nt};
  if (!b.need || !b.grad) KILN_ICE("out of memory deriving the backward graph of %s", g->name);
  for (int t = 0; t < nt; t++) b.grad[t] = -1;
  pass_bwd_mark(&b);
  pass_bwd_head(&b);
  for (int i = nfwd - 1; i >= 0; i--)
    if (ir_node_at(g, i)->kind == IR_N_OP && pass_bwd_on_path(&b, ir_node_at(g, i))) pass_bwd_emit(&b, i);
  free(b.need);
  free(b.grad);
  cx->stats[PASS_backward].nodes = ir_nnodes(g);
  return 0;
}
