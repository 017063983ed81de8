/* pass_simplify.c — algebraic rewrites of the predict graph that do less work for the same
 * values. One so far: a monotone activation that only a max pooling reads runs after the
 * pooling instead of before it, on a quarter of the values for a 2x2 window (LeNet's
 * tanh(conv) -> max pooling). max and a non-decreasing f commute: max f(x_i) = f(max x_i).
 *
 * What makes the swap exact, beyond f being non-decreasing (ir_opdef.monotone):
 *   - f(NaN) is NaN and f of a number is a number, so a NaN reaches the pooled value in
 *     both orders (the pooling keeps a NaN, as torch's does);
 *   - no window is empty: max pooling pads with -inf, which never wins over a value of the
 *     window in either order, but an empty window yields -inf, and f(-inf) is not -inf. A
 *     window is empty only when it lies wholly in the padding, so the rewrite asks for pads
 *     smaller than the kernel and no ceil_mode.
 * f's float approximation need not be exactly monotone: a window whose values straddle a
 * non-monotone step of an ulp gives a result an ulp from the other order's, inside every
 * tolerance; tests/passes/test_differential.c compares the graphs with and without it.
 *
 * Predict only: in train_step the swap would send the gradient to the first maximum of x
 * where torch sends it to the first maximum of f(x), a different element wherever f maps
 * two values of a window to one float (tanh near +-1). */
#include "passes.h"

#include <stdlib.h>

/* Node p is a max pooling whose windows are never empty. */
static bool pass_simp_max_pool(const ir_node *p) {
  if (p->kind != IR_N_OP || p->op != IR_OP_pooling) return false;
  const k_pool_param *q = p->param;
  if (q->pool_type != K_POOL_MAX || q->ceil_mode) return false;
  if (q->global_pool) return true;
  for (int i = 0; i < q->kernel.n; i++)
    if (k_pool_pad_begin(q, i) >= q->kernel.v[i] || k_pool_pad_end(q, i) >= q->kernel.v[i]) return false;
  return true;
}

/* reader[t]: the node that reads tensor t when exactly one input slot of one node reads it
 * and it is no graph output (a value the caller sees must stay as it is); else -1. */
static int *pass_simp_single_readers(const ir_graph *g) {
  int nt = ir_ntensors(g), *count = calloc((size_t)nt + 1, sizeof *count), *reader = malloc(((size_t)nt + 1) * sizeof *reader);
  if (!count || !reader) KILN_ICE("out of memory");
  for (int i = 0; i < ir_nnodes(g); i++)
    for (int j = 0; j < ir_node_at(g, i)->nin; j++) {
      int t = ir_node_at(g, i)->in[j];
      if (t >= 0) count[t]++, reader[t] = i;
    }
  for (int i = 0; i < g->outputs.len; i++) count[IR_VEC_AT(g->outputs, int, i)] = 2;
  for (int t = 0; t < nt; t++)
    if (count[t] != 1) reader[t] = -1;   /* unread (and never written above), or not single */
  free(count);
  return reader;
}

/* Activation node a (y = f(c)) and pooling node p (z = max_pool(y)) become m = max_pool(c) at
 * a's position and z = f(m) at p's. m is a new value named `<z>@pool` ('@' is reserved for
 * the names passes make, and z's name is unique); a node is named for the value it writes,
 * so the pooling takes m's name and the activation z's. y is left unwritten and unread, with
 * its index: the train graph has it at the same index (codegen/cg_desc.c places m after the
 * train graph's tensors). Both nodes are inferred again for their shapes and FLOPs. */
static void pass_simp_swap(ir_graph *g, pass_ctx *cx, int a, int p) {
  int c = ir_node_at(g, a)->in[0], z = ir_node_at(g, p)->out[0];
  const char *zname = ir_tensor_at(g, z)->name, *mname = ir_strfmt(&g->arena, "%s@pool", zname);
  int m = ir_graph_add_tensor(g, mname, IR_T_VALUE, ir_tensor_at(g, z)->loc);
  ir_node *na = ir_node_at(g, a), *np = ir_node_at(g, p);
  np->in[0] = c, np->out[0] = m, np->name = mname;
  na->in[0] = m, na->out[0] = z, na->name = zname;
  ir_node tmp = *na;
  *na = *np, *np = tmp;
  if (ir_infer_one(g, cx->diag, a) || ir_infer_one(g, cx->diag, p))
    KILN_ICE("simplify: '%s' does not infer after moving '%s' behind its max pooling", zname, mname);
  pass_explain(cx, "%s (%s) moved after its max pooling, now %s: it runs on the pooled values", zname,
               ir_ops[ir_node_at(g, p)->op].name, mname);
}

int pass_simplify(ir_graph *g, pass_ctx *cx) {
  int *reader = pass_simp_single_readers(g), swaps = 0;
  for (int a = 0; a < ir_nnodes(g); a++) {
    const ir_node *n = ir_node_at(g, a);
    if (n->kind != IR_N_OP || !ir_ops[n->op].monotone || n->nin != 1 || n->nout != 1) continue;
    int p = reader[n->out[0]];
    if (p < 0 || !pass_simp_max_pool(ir_node_at(g, p))) continue;
    pass_simp_swap(g, cx, a, p);
    swaps++;
  }
  free(reader);
  if (swaps) {   /* the producers, recomputed once: set_nodes takes the list as it is */
    ir_vec nodes = g->nodes;
    g->nodes = (ir_vec){.elem = sizeof(ir_node)};
    ir_graph_set_nodes(g, &nodes);
  }
  return 0;
}
