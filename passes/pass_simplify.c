/* pass_simplify.c — rewrites of the graph that do less work for the same values
 * (docs/passes.md, "Simplify"). Seven so far.
 *
 * A monotone activation that only a max pooling reads runs after the pooling instead of
 * before it, on a quarter of the values for a 2x2 window (LeNet's tanh(conv) -> max pooling).
 * max and a non-decreasing f commute: max f(x_i) = f(max x_i). What makes the swap exact,
 * beyond f being non-decreasing (ir_opdef.monotone):
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
 * A matmul reads the attention's head split (a transpose exchanging the last batch axis and
 * the row axis) from the transpose's input, and writes the head merge as the transpose's
 * output: k_matmul_param.swap_a, swap_b, swap_c, a leading dimension for the GEMM instead of
 * a copy (kernels/k_mm_geom.h).
 *
 * x * sigmoid(x) and x * hard_sigmoid(x) (torch's hardsigmoid constants) become silu(x) and
 * hard_swish(x), one activation that a convolution's epilogue can run (see below).
 *
 * torch's exported erf GELU, (x * (1 + erf(x / sqrt 2))) * 0.5, becomes gelu(x), and pow(x, 2)
 * becomes square(x) (see below).
 *
 * In predict, a concat of one piece is that piece, and a concat that begins with all of an
 * earlier concat's pieces reads that concat instead (DenseNet's: see below), so the plan can
 * nest them.
 *
 * The first is for predict only: in train_step it would send the gradient to the first
 * maximum of x where torch sends it to the first maximum of f(x), a different element wherever
 * f maps two values of a window to one float (tanh near +-1); so are the concats' (in train_step
 * the gradients would be summed in another order). The others run for both: the
 * backward pass derives the matmul's backward node from the rewritten one, whose kernels store
 * each gradient as its operand is stored, and the swish's gradient is the fused activation's
 * (torch's own for F.silu and F.hardswish), as gelu's and square's are. None adds a tensor (the
 * gate's and the chain's stay, unwritten), so the graphs of predict and train_step still share
 * every index of the lowered graph. */
#include "passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* The graph without the nodes marked dead (producers recomputed). */
static void pass_simp_drop_dead(ir_graph *g, const bool *dead) {
  ir_vec kept = {.elem = sizeof(ir_node)};
  for (int i = 0; i < ir_nnodes(g); i++)
    if (!dead[i]) *(ir_node *)ir_vec_push(&kept) = *ir_node_at(g, i);
  ir_graph_set_nodes(g, &kept);
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

/* ---- the attention's head split and merge, read and written in place by matmul ---- */

/* Whether node x is a transpose exchanging the last batch axis and the row axis of a tensor of
 * rank 3 or more (axes (0, 2, 1, 3) at rank 4); its readers are the caller's to check. */
static bool pass_simp_head_transpose(const ir_graph *g, const ir_node *x) {
  if (x->kind != IR_N_OP || x->op != IR_OP_transpose || x->nin != 1 || x->nout != 1) return false;
  const k_transpose_param *p = x->param;
  int r = ir_tensor_at(g, x->in[0])->shape.rank;
  if (r < 3 || p->axes.n != r) return false;
  for (int i = 0; i < r; i++) {
    int want = i == r - 3 ? r - 2 : i == r - 2 ? r - 3 : i;
    if (p->axes.v[i] != want) return false;
  }
  return true;
}

/* Matmul node m with its param copied (a copy per graph: the lowered graph's is shared). */
static k_matmul_param *pass_simp_mm_param(ir_graph *g, ir_node *m) {
  k_matmul_param *p = ir_alloc(&g->arena, sizeof *p);
  *p = *(const k_matmul_param *)m->param;
  m->param = p;
  return p;
}

/* The transposes around matmul node i that it can read or write in place instead: an operand
 * that is such a transpose's output (read by nothing else) is read from the transpose's input,
 * stored swapped; an output that only such a transpose reads is written swapped as the
 * transpose's output. The transposes are marked dead. Returns how many it folded. */
static int pass_simp_fold_matmul(ir_graph *g, pass_ctx *cx, int i, const int *reader, bool *dead) {
  ir_node *m = ir_node_at(g, i);
  int folds = 0;
  for (int j = 0; j < 2; j++) {
    int t = m->in[j], x = t >= 0 ? ir_tensor_at(g, t)->producer : -1;
    if (x < 0 || reader[t] != i || dead[x] || !pass_simp_head_transpose(g, ir_node_at(g, x))) continue;
    k_matmul_param *p = pass_simp_mm_param(g, m);
    *(j ? &p->swap_b : &p->swap_a) = 1;
    m->in[j] = ir_node_at(g, x)->in[0];
    dead[x] = true, folds++;
    pass_explain(cx, "%s (matmul) reads %s in place of %s (transpose): operand %s, stored with two axes swapped", m->name,
                 ir_tensor_at(g, m->in[j])->name, ir_tensor_at(g, t)->name, j ? "b" : "a");
  }
  int o = m->out[0], x = reader[o];
  if (x >= 0 && !dead[x] && pass_simp_head_transpose(g, ir_node_at(g, x))) {
    pass_simp_mm_param(g, m)->swap_c = 1;
    pass_explain(cx, "%s (matmul) writes %s itself, stored with two axes swapped, in place of transposing its output",
                 m->name, ir_tensor_at(g, ir_node_at(g, x)->out[0])->name);
    m->out[0] = ir_node_at(g, x)->out[0];
    m->name = ir_node_at(g, x)->name;   /* a node is named for the value it writes */
    dead[x] = true, folds++;
  }
  k_shape want = ir_tensor_at(g, m->out[0])->shape;
  if (folds && (ir_infer_one(g, cx->diag, i) || !ir_shape_eq(&want, &ir_tensor_at(g, m->out[0])->shape)))
    KILN_ICE("simplify: matmul '%s' does not infer to its shape after taking its transposes", m->name);
  return folds;
}

/* Folds the head transposes into every matmul (the graph holds forward nodes only here); the
 * dead transposes leave the graph. */
static void pass_simp_matmuls(ir_graph *g, pass_ctx *cx) {
  int *reader = pass_simp_single_readers(g), folds = 0;
  bool *dead = calloc((size_t)ir_nnodes(g) + 1, sizeof *dead);
  if (!dead) KILN_ICE("out of memory");
  for (int i = 0; i < ir_nnodes(g); i++)
    if (ir_node_at(g, i)->kind == IR_N_OP && ir_node_at(g, i)->op == IR_OP_matmul && ir_node_at(g, i)->nout == 1)
      folds += pass_simp_fold_matmul(g, cx, i, reader, dead);
  if (folds) pass_simp_drop_dead(g, dead);
  free(reader);
  free(dead);
}

/* ---- x * sigmoid(x) and x * hard_sigmoid(x) as one activation ---- */

/* The activation that mul(x, g(x)) is, where node h computes g: silu for a sigmoid, and
 * hard_swish for F.hardsigmoid's own constants (torch exports F.hardswish below opset 14 as
 * HardSigmoid(alpha 1/6, beta 1/2) then Mul); else -1. */
static int pass_simp_swish_op(const ir_node *h) {
  if (h->kind != IR_N_OP || h->nin != 1 || h->nout != 1) return -1;
  if (h->op == IR_OP_sigmoid) return IR_OP_silu;
  if (h->op != IR_OP_hard_sigmoid) return -1;
  const k_hard_sigmoid_param *q = h->param;
  return q->alpha == 1.0f / 6.0f && q->beta == 0.5f ? IR_OP_hard_swish : -1;
}

/* Mul node i as silu(x) or hard_swish(x) when it multiplies x by g(x) of the same shape and
 * nothing else reads g(x): the gate's node is marked dead. x is then read by one node, not
 * two, so the convolution that writes it can run the activation in its epilogue instead of
 * storing x for a separate pass (MobileNetV3's hard-swish, EfficientNet's SiLU). silu is
 * x * sigmoid(x) in the same order, the same bits; hard_swish is torch's x * clamp(x + 3, 0,
 * 6) / 6, within an ulp or two of x * clamp(x / 6 + 1/2, 0, 1) and what F.hardswish gives.
 * Returns 1 when it rewrote. */
static int pass_simp_fold_swish(ir_graph *g, pass_ctx *cx, int i, const int *reader, bool *dead) {
  ir_node *m = ir_node_at(g, i);
  for (int j = 0; j < 2; j++) {
    int gate = m->in[j], x = m->in[1 - j], h = gate >= 0 ? ir_tensor_at(g, gate)->producer : -1;
    if (h < 0 || dead[h] || reader[gate] != i || ir_node_at(g, h)->in[0] != x) continue;
    int op = pass_simp_swish_op(ir_node_at(g, h));
    if (op < 0 || !ir_shape_eq(&ir_tensor_at(g, x)->shape, &ir_tensor_at(g, m->out[0])->shape)) continue;
    pass_explain(cx, "%s (mul) multiplies %s by its own %s: one %s", m->name, ir_tensor_at(g, x)->name,
                 ir_ops[ir_node_at(g, h)->op].name, ir_ops[op].name);
    m->op = op, m->nin = 1, m->in[0] = x, m->param = NULL;
    dead[h] = true;
    if (ir_infer_one(g, cx->diag, i)) KILN_ICE("simplify: '%s' does not infer as %s", m->name, ir_ops[op].name);
    return 1;
  }
  return 0;
}

/* ---- x * 0.5 * (1 + erf(x / sqrt 2)) as one gelu ---- */

/* Whether tensor t is a constant equal to v (to a relative 1e-6: torch writes sqrt 2 and its
 * inverse as the nearest floats, other exporters may round otherwise). */
static bool pass_simp_const_is(const ir_graph *g, int t, double v) {
  const ir_tensor *c = t >= 0 ? ir_tensor_at(g, t) : NULL;
  return c && c->kind == IR_T_CONST && fabs(c->value - v) <= 1e-6 * fabs(v);
}

/* The node that writes t when it is op `op`, with `nin` inputs, read only by node `by` and not
 * yet dead; else -1. */
static int pass_simp_sole(const ir_graph *g, int t, int op, int nin, int by, const int *reader, const bool *dead) {
  int h = t >= 0 ? ir_tensor_at(g, t)->producer : -1;
  if (h < 0 || dead[h] || reader[t] != by) return -1;
  const ir_node *n = ir_node_at(g, h);
  return n->kind == IR_N_OP && n->op == op && n->nin == nin && n->nout == 1 ? h : -1;
}

/* The operand of binary node b other than the constant v (either order), or -1. */
static int pass_simp_other(const ir_graph *g, const ir_node *b, double v) {
  if (pass_simp_const_is(g, b->in[1], v)) return b->in[0];
  if (pass_simp_const_is(g, b->in[0], v)) return b->in[1];
  return -1;
}

/* x when tensor t is 1 + erf(x / sqrt 2) (or x * (1 / sqrt 2), 1 on either side), every step
 * read only by the next and the last by node `by`; its nodes go into chain[0 .. 3). Else -1. */
static int pass_simp_erf_term(const ir_graph *g, int t, int by, const int *reader, const bool *dead, int chain[3]) {
  int a = pass_simp_sole(g, t, IR_OP_add, 2, by, reader, dead);
  if (a < 0) return -1;
  int e = pass_simp_sole(g, pass_simp_other(g, ir_node_at(g, a), 1.0), IR_OP_erf, 1, a, reader, dead);
  if (e < 0) return -1;
  int u = ir_node_at(g, e)->in[0], d = pass_simp_sole(g, u, IR_OP_div, 2, e, reader, dead), x = -1;
  if (d >= 0 && pass_simp_const_is(g, ir_node_at(g, d)->in[1], 1.4142135623730951)) x = ir_node_at(g, d)->in[0];
  if (d < 0 && (d = pass_simp_sole(g, u, IR_OP_mul, 2, e, reader, dead)) >= 0)
    x = pass_simp_other(g, ir_node_at(g, d), 0.70710678118654752);
  chain[0] = a, chain[1] = e, chain[2] = d;
  return x;
}

/* Mul node i as gelu(x) when it computes torch's exported erf GELU, (x * (1 + erf(x / sqrt 2)))
 * * 0.5 or (x * 0.5) * (1 + erf(...)), factors in either order, each step read only by the
 * next: the other nodes are marked dead, and the matmul that writes x is read by one node.
 * gelu is k_sf_gelu, x times the normal tail, within a few ulp of the five ops and of F.gelu
 * (docs/kernels.md): one loop instead of five ops, and an elementwise tail a heavy op's
 * epilogue can run. Returns 1 when it rewrote. */
static int pass_simp_fold_gelu(ir_graph *g, pass_ctx *cx, int i, const int *reader, bool *dead) {
  ir_node *m = ir_node_at(g, i);
  int chain[4], x = -1;
  int inner = pass_simp_sole(g, pass_simp_other(g, m, 0.5), IR_OP_mul, 2, i, reader, dead);
  for (int j = 0; inner >= 0 && j < 2 && x < 0; j++) {   /* (x * (1 + erf)) * 0.5 */
    const ir_node *n = ir_node_at(g, inner);
    int cand = pass_simp_erf_term(g, n->in[j], inner, reader, dead, chain);
    if (cand >= 0 && cand == n->in[1 - j]) x = cand, chain[3] = inner;
  }
  for (int j = 0; x < 0 && j < 2; j++) {   /* (x * 0.5) * (1 + erf) */
    int h = pass_simp_sole(g, m->in[j], IR_OP_mul, 2, i, reader, dead);
    int half = h >= 0 ? pass_simp_other(g, ir_node_at(g, h), 0.5) : -1;
    int cand = half >= 0 ? pass_simp_erf_term(g, m->in[1 - j], i, reader, dead, chain) : -1;
    if (cand >= 0 && cand == half) x = cand, chain[3] = h;
  }
  if (x < 0 || !ir_shape_eq(&ir_tensor_at(g, x)->shape, &ir_tensor_at(g, m->out[0])->shape)) return 0;
  pass_explain(cx, "%s (mul) is the erf GELU of %s: one gelu", m->name, ir_tensor_at(g, x)->name);
  m->op = IR_OP_gelu, m->nin = 1, m->in[0] = x, m->param = NULL;
  for (int k = 0; k < 4; k++) dead[chain[k]] = true;
  if (ir_infer_one(g, cx->diag, i)) KILN_ICE("simplify: '%s' does not infer as gelu", m->name);
  return 1;
}

/* Every binary mul as a swish or a GELU where it is one (one walk: the readers counted once);
 * the dead nodes leave the graph. */
static void pass_simp_activations(ir_graph *g, pass_ctx *cx) {
  int *reader = pass_simp_single_readers(g), folds = 0;
  bool *dead = calloc((size_t)ir_nnodes(g) + 1, sizeof *dead);
  if (!dead) KILN_ICE("out of memory");
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (n->kind == IR_N_OP && n->op == IR_OP_mul && n->nin == 2 && n->nout == 1 && !dead[i])
      folds += pass_simp_fold_swish(g, cx, i, reader, dead) || pass_simp_fold_gelu(g, cx, i, reader, dead);
  }
  if (folds) pass_simp_drop_dead(g, dead);
  free(reader);
  free(dead);
}

/* ---- pow(x, 2) as square(x) ---- */

/* Every pow whose exponent is the constant 2 (torch exports a layer norm's variance as
 * Pow(x - mean, 2)) becomes square(x), x * x: the correctly rounded square, where pow's
 * log and exp in double cost 2.5 ns an element (ConvNeXt's layer norms, 7% of its time). */
static void pass_simp_squares(ir_graph *g, pass_ctx *cx) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    ir_node *p = ir_node_at(g, i);
    if (p->kind != IR_N_OP || p->op != IR_OP_pow || p->nin != 2 || p->nout != 1 || !pass_simp_const_is(g, p->in[1], 2.0) ||
        !ir_shape_eq(&ir_tensor_at(g, p->in[0])->shape, &ir_tensor_at(g, p->out[0])->shape))
      continue;
    pass_explain(cx, "%s (pow) raises %s to the constant 2: one square", p->name, ir_tensor_at(g, p->in[0])->name);
    p->op = IR_OP_square, p->nin = 1, p->param = NULL;
    if (ir_infer_one(g, cx->diag, i)) KILN_ICE("simplify: '%s' does not infer as square", p->name);
  }
}

/* ---- a concat that begins with an earlier concat's pieces ---- */

/* A forward concat of at least `least` pieces, all there. */
static bool pass_simp_concat(const ir_node *n, int least) {
  if (n->kind != IR_N_OP || n->op != IR_OP_concat || n->nout != 1 || n->out[0] < 0 || n->nin < least) return false;
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] < 0) return false;
  return true;
}

/* The earlier concat (before position i) whose pieces, as lowered (pieces[k], npieces[k]),
 * begin n's, the most of them; -1 when none. */
static int pass_simp_concat_prefix(const ir_graph *g, const ir_node *n, int i, int *const *pieces, const int *npieces) {
  int dim = ((const k_concat_param *)n->param)->dim, best = -1;
  for (int k = 0; k < i; k++) {
    const ir_node *m = ir_node_at(g, k);
    if (!pass_simp_concat(m, 1) || npieces[k] >= n->nin || ((const k_concat_param *)m->param)->dim != dim ||
        (best >= 0 && npieces[k] <= npieces[best]) || memcmp(pieces[k], n->in, sizeof(int) * (size_t)npieces[k]))
      continue;
    best = k;
  }
  return best;
}

/* A concat whose first pieces are, in order, all of an earlier concat's along the same axis
 * reads that concat's output in their place: DenseNet's layer k concatenates every earlier
 * layer's output, Concat(x0 .. xk), where the layer before made Concat(x0 .. xk-1). Then each
 * piece is read by one concat, and at batch 1 the plan writes each piece inside its concat's
 * output and each concat inside the next (pass_plan.c's concat placement), so a dense block's
 * concats copy nothing. The same floats in the same places, so the same bits. Predict only:
 * in train_step the gradients would meet in the inner concat first. The match is against the
 * earlier concats' pieces as lowered (a rewrite gives a node a new input list and keeps the
 * old one), the longest taken: a block's last concat, [x0 .. x6], reads Concat(x0 .. x5). */
static void pass_simp_concats(ir_graph *g, pass_ctx *cx) {
  int nn = ir_nnodes(g), **pieces = calloc((size_t)nn + 1, sizeof *pieces), *npieces = calloc((size_t)nn + 1, sizeof *npieces);
  if (!pieces || !npieces) KILN_ICE("out of memory");
  for (int i = 0; i < nn; i++) pieces[i] = ir_node_at(g, i)->in, npieces[i] = ir_node_at(g, i)->nin;
  for (int i = 0; i < nn; i++) {
    ir_node *n = ir_node_at(g, i);
    int best = pass_simp_concat(n, 2) ? pass_simp_concat_prefix(g, n, i, pieces, npieces) : -1;
    if (best < 0) continue;
    const ir_node *m = ir_node_at(g, best);
    int k = npieces[best], *in = ir_alloc(&g->arena, sizeof(int) * (size_t)(n->nin - k + 1));
    pass_explain(cx, "%s (concat) reads %s (concat) in place of its first %d of %d pieces", n->name, m->name, k, n->nin);
    in[0] = m->out[0];
    memcpy(in + 1, n->in + k, sizeof(int) * (size_t)(n->nin - k));
    n->in = in, n->nin -= k - 1;
    if (ir_infer_one(g, cx->diag, i)) KILN_ICE("simplify: '%s' does not infer with the nested concat", n->name);
  }
  free(pieces), free(npieces);
}

/* ---- a concat of one piece ---- */

/* A concat of one piece is that piece: its readers read the piece instead, and the node
 * leaves the graph (its output stays, unwritten, with its index). DenseNet's dense layers
 * concatenate every earlier output, so each block's first layer reads torch.cat([x0]); at
 * batch 8, where the plan cannot write x0 inside it (pass_plan.c's concat placement needs one
 * row before the axis), it was a copy of the block's input: four in DenseNet-169, 0.65 ms a
 * call. The block's second concat, [x0, x1], then has no earlier concat to nest in, and the
 * third nests in it as before. Predict only, as the nesting: in train_step the piece's
 * gradient would be summed in another order. A concat that is a graph output stays. */
static void pass_simp_single_concats(ir_graph *g, pass_ctx *cx) {
  int nn = ir_nnodes(g), drops = 0;
  bool *dead = calloc((size_t)nn + 1, sizeof *dead), *shown = calloc((size_t)ir_ntensors(g) + 1, sizeof *shown);
  if (!dead || !shown) KILN_ICE("out of memory");
  for (int i = 0; i < g->outputs.len; i++) shown[IR_VEC_AT(g->outputs, int, i)] = true;
  for (int i = 0; i < nn; i++) {
    const ir_node *n = ir_node_at(g, i);
    if (!pass_simp_concat(n, 1) || n->nin != 1 || shown[n->out[0]]) continue;
    int from = n->out[0], to = n->in[0];
    for (int k = i + 1; k < nn; k++) {
      ir_node *r = ir_node_at(g, k);
      for (int j = 0; j < r->nin; j++)
        if (r->in[j] == from) r->in[j] = to;
    }
    pass_explain(cx, "%s (concat of one piece) is %s: its readers read %s", n->name, ir_tensor_at(g, to)->name,
                 ir_tensor_at(g, to)->name);
    dead[i] = true, drops++;
  }
  if (drops) pass_simp_drop_dead(g, dead);
  free(dead), free(shown);
}

/* ---- the pass ---- */

/* The activations behind their max poolings (predict only: see the top). */
static void pass_simp_pools(ir_graph *g, pass_ctx *cx) {
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
  if (swaps) ir_graph_claim(g);   /* the matmul folds read the producers */
}

int pass_simplify(ir_graph *g, pass_ctx *cx) {
  if (cx->mode != IR_MODE_TRAIN) {   /* predict only: see each */
    pass_simp_pools(g, cx);
    pass_simp_single_concats(g, cx);
    pass_simp_concats(g, cx);
  }
  pass_simp_activations(g, cx);
  pass_simp_squares(g, cx);
  pass_simp_matmuls(g, cx);
  return 0;
}
