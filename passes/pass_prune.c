/* pass_prune.c — backward-dependency pruning (MXNet's DeclareBackwardDependency): every
 * backward input slot the op's deps masks leave out becomes -1, so forward values that no
 * backward node reads any more can be released after their last forward use. Optional:
 * switched off, backward nodes keep every slot, and the kernels read only declared ones. */
#include "passes.h"

#include <stdlib.h>

/* Bit i of a deps mask. A variadic op (concat) declares all its in_data with bit 0. */
static bool pass_prune_declared(const ir_opdef *op, uint32_t mask, int i) {
  if (op->variadic) i = 0;
  return i < 32 && (mask >> i & 1);
}

/* Clears the slots of one backward node: in = [out_grad[nout], in_data[nargs], out_data[nout]]. */
static void pass_prune_node(ir_node *n) {
  const ir_opdef *op = &ir_ops[n->op];
  int nout = ir_op_nouts(op), nargs = n->nin - 2 * nout;
  if (nargs < 0) KILN_ICE("%s: a backward node with %d inputs for %d outputs", n->name, n->nin, nout);
  for (int j = 0; j < nout; j++) {
    if (!pass_prune_declared(op, op->deps.out_grad, j)) n->in[j] = -1;
    if (!pass_prune_declared(op, op->deps.out_data, j)) n->in[nout + nargs + j] = -1;
  }
  for (int a = 0; a < nargs; a++)
    if (!pass_prune_declared(op, op->deps.in_data, a)) n->in[nout + a] = -1;
}

/* Marks in `read` the forward values (produced by an op's forward node) that some backward
 * node reads; parameters and inputs stay alive anyway, so they do not count. */
static void pass_prune_readers(const ir_graph *g, bool *read) {
  for (int i = 0; i < ir_ntensors(g); i++) read[i] = false;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; n->kind == IR_N_BACKWARD && j < n->nin; j++) {
      int t = n->in[j];
      if (t < 0 || ir_tensor_at(g, t)->kind != IR_T_VALUE) continue;
      int p = ir_tensor_at(g, t)->producer;
      if (p >= 0 && ir_node_at(g, p)->kind == IR_N_OP) read[t] = true;
    }
  }
}

int pass_prune(ir_graph *g, pass_ctx *cx) {
  if (cx->mode != IR_MODE_TRAIN) return 0;
  size_t nt = (size_t)ir_ntensors(g) + 1;
  bool *before = malloc(nt), *after = malloc(nt);
  if (!before || !after) KILN_ICE("out of memory pruning %s", g->name);
  pass_prune_readers(g, before);
  for (int i = 0; i < ir_nnodes(g); i++)
    if (ir_node_at(g, i)->kind == IR_N_BACKWARD) pass_prune_node(ir_node_at(g, i));
  pass_prune_readers(g, after);
  int64_t freed = 0;
  for (int t = 0; t < ir_ntensors(g); t++)
    if (before[t] && !after[t]) freed += ir_tensor_numel(ir_tensor_at(g, t)) * 4;
  free(before);
  free(after);
  cx->stats[PASS_prune].bytes_freed = freed;
  return 0;
}
