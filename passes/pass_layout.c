/* pass_layout.c — keeps convolution activations channel-blocked between direct-path
 * convolutions: a value written by one (with its epilogue) and read only by others, as their
 * data or as an epilogue's same-shaped operand (a residual add), is stored as the direct
 * convolution computes it ([N][ceil(C / V)][H][W][V], kernels/k_conv_direct_isa.h), so neither
 * side converts it to NCHW and back. A depthwise convolution (k_conv_dw_blocked.h) takes part
 * with its input and output blocked together or not at all, so a MobileNet block's expansion,
 * depthwise and projection layers stay blocked end to end; so does a channel scale (the mul
 * ending squeeze-and-excitation), viewed by its kernel as 5-D. A forward pooling reads a blocked
 * value as it is and passes the layout on, or converts its (smaller) output to NCHW when that
 * is read otherwise.
 * Conversions stay at the boundaries: inputs, outputs, and values any other node reads. The
 * decisions go to the kernels as k_conv_param.in_block, out_block and epi_block and
 * k_pool_param.in_block and out_block (in a copy of the node's param) and to the memory plan
 * as ir_tensor.block. docs/passes.md ("Layout") states the rules. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#include "k_epilogue.h"

/* The width a forward convolution (alone or with its epilogue) computes in on the direct
 * path, by the kernels' own rule; 0 for any other node, and for one whose epilogue gathers a
 * training batch_norm's statistics (gathered on NCHW output only). */
static int pass_layout_width(const ir_graph *g, const ir_node *n) {
  bool conv = (n->kind == IR_N_OP || (n->kind == IR_N_FUSED && n->epi && !k_epi_has_stats(n->epi))) &&
              n->op == IR_OP_convolution;
  if (!conv || n->nin < 2 || n->nout < 1 || n->in[0] < 0 || n->in[1] < 0 || n->out[0] < 0) return 0;
  return k_conv_block_width(&ir_tensor_at(g, n->in[0])->shape, &ir_tensor_at(g, n->in[1])->shape, n->param);
}

static bool pass_layout_is_result(const ir_graph *g, int t) {
  for (int i = 0; i < g->outputs.len; i++)
    if (IR_VEC_AT(g->outputs, int, i) == t) return true;
  return t == g->loss;
}

/* Whether tensor t can be stored blocked at all: a 4-D value that is not a result. */
static bool pass_layout_value_ok(const ir_graph *g, int t) {
  const ir_tensor *x = ir_tensor_at(g, t);
  return x->kind == IR_T_VALUE && x->shape.rank == 4 && !pass_layout_is_result(g, t);
}

/* Whether n is a forward pooling the blocked kernel runs (k_pool.c): 2-D, its one output
 * written, not accumulated nor in place. It reads its input in either layout, and writes its
 * output blocked only from a blocked input. */
static bool pass_layout_pool(const ir_graph *g, const ir_node *n) {
  if (n->kind != IR_N_OP || n->op != IR_OP_pooling || n->nin < 1 || n->nout != 1 || n->in[0] < 0 || n->out[0] < 0)
    return false;
  const k_pool_param *p = n->param;
  return p->kernel.n == 2 && ir_tensor_at(g, n->in[0])->shape.rank == 4 && ir_node_req(n, 0) == kWriteTo &&
         !(n->inplace && n->inplace[0] >= 0);
}

/* The data slot (0 or 1) of a channel scale, squeeze-and-excitation's last step: a forward mul
 * of a 4-D value by an [N, C, 1, 1] one, the output the value's shape, written or in place on
 * the value; -1 for any other node. Its kernel (the broadcast mul) runs on blocked values as
 * they are, viewed as [N][C/V][H][W][V] by [N][C/V][1][1][V]: the scale blocked too, or its
 * plain [N][C] when C is a multiple of V (pass_layout_scale_agree), so the block before and
 * after it stays blocked. */
static int pass_layout_scale(const ir_graph *g, const ir_node *n) {
  if (n->kind != IR_N_OP || n->op != IR_OP_mul || n->nin != 2 || n->nout != 1 || n->out[0] < 0 || n->in[0] < 0 ||
      n->in[1] < 0 || ir_node_req(n, 0) == kAddTo)
    return -1;
  const k_shape *y = &ir_tensor_at(g, n->out[0])->shape;
  for (int d = 0; d < 2; d++) {
    const k_shape *x = &ir_tensor_at(g, n->in[d])->shape, *s = &ir_tensor_at(g, n->in[1 - d])->shape;
    if (y->rank == 4 && ir_shape_eq(x, y) && s->rank == 4 && s->d[0] == y->d[0] && s->d[1] == y->d[1] && s->d[2] == 1 &&
        s->d[3] == 1 && (!n->inplace || n->inplace[0] < 0 || n->inplace[0] == d))
      return d;
  }
  return -1;
}

static int64_t pass_layout_channels(const ir_graph *g, const ir_node *n) { return ir_tensor_at(g, n->out[0])->shape.d[1]; }

/* Whether n is a forward concat along the channels of 4-D values, written (SqueezeNet's fire
 * modules, Inception's branches, DenseNet's blocks), or along the samples (pass_samples.c's
 * values gathered after the layers it runs one sample at a time). Blocked at a width V that
 * divides every piece's channels, a sample's blocks of each piece are one run, as its
 * channels are in NCHW, and a piece's samples are one run in both: the kernel's copy is the
 * same for both layouts, so the pieces and the output stay blocked when all of them can
 * (pass_layout_concat_agree), and no conversion sits between the convolutions before and
 * after. */
static bool pass_layout_concat(const ir_graph *g, const ir_node *n) {
  if (n->kind != IR_N_OP || n->op != IR_OP_concat || n->nout != 1 || n->out[0] < 0 || n->nin < 1 ||
      ir_node_req(n, 0) != kWriteTo || ((const k_concat_param *)n->param)->dim > 1)
    return false;
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] < 0 || ir_tensor_at(g, n->in[j])->shape.rank != 4) return false;
  return true;
}

/* Whether every piece of concat n is blocked at width V, V dividing its channels. */
static bool pass_layout_concat_blocked(const ir_graph *g, const ir_node *n, const int *blk, int V) {
  for (int j = 0; V > 0 && j < n->nin; j++)
    if (blk[n->in[j]] != V || ir_tensor_at(g, n->in[j])->shape.d[1] % V) return false;
  return V > 0;
}

/* Whether input slot j of node n (width V) reads its tensor as the direct kernel can in blocked
 * form: the data slot (not under a prologue, which the kernel applies as it packs NCHW data:
 * k_conv_param.pro_slot), or a binary step's operand of the output's shape (not one value). */
static bool pass_layout_slot_ok(const ir_graph *g, const ir_node *n, int j) {
  if (j == 0) return !((const k_conv_param *)n->param)->pro_slot;
  for (int i = 0; n->epi && i < n->epi->nsteps; i++) {
    const k_epi_step *s = &n->epi->step[i];
    if (s->kind == K_EPI_BINARY && s->slot == j && !s->scalar &&
        ir_shape_eq(&ir_tensor_at(g, n->in[j])->shape, &ir_tensor_at(g, n->out[0])->shape))
      return true;
  }
  return false;
}

/* Every batch_norm affine of n's epilogue runs over the channel axis 1 (a blocked output has
 * no other channel mapping). */
static bool pass_layout_affine_ok(const ir_graph *g, const ir_node *n) {
  const k_shape *y = &ir_tensor_at(g, n->out[0])->shape;
  for (int i = 0; n->epi && i < n->epi->nsteps; i++) {
    const k_epi_step *s = &n->epi->step[i];
    if (s->kind == K_EPI_AFFINE && (s->channels != y->d[1] || s->inner != y->d[2] * y->d[3])) return false;
  }
  return true;
}

/* Candidates: the output of each direct convolution that writes it (not accumulating, not in
 * place) and is a value, not a result; then, in graph order, the output of each pooling whose
 * input is a candidate, and of each channel scale whose data is. width[n] is node n's
 * direct-path width. */
static void pass_layout_candidates(const ir_graph *g, const int *width, int *blk) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    int t = n->nout ? n->out[0] : -1;
    if (!width[i] || n->nout != 1 || ir_node_req(n, 0) != kWriteTo || (n->inplace && n->inplace[0] >= 0)) continue;
    if (pass_layout_value_ok(g, t) && pass_layout_affine_ok(g, n)) blk[t] = width[i];
  }
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (pass_layout_pool(g, n) && blk[n->in[0]] && pass_layout_value_ok(g, n->out[0])) blk[n->out[0]] = blk[n->in[0]];
    int d = pass_layout_scale(g, n);
    if (d >= 0 && blk[n->in[d]] && pass_layout_value_ok(g, n->out[0])) blk[n->out[0]] = blk[n->in[d]];
    if (pass_layout_concat(g, n) && pass_layout_concat_blocked(g, n, blk, blk[n->in[0]]) &&
        pass_layout_value_ok(g, n->out[0]))
      blk[n->out[0]] = blk[n->in[0]];
  }
}

/* Whether node i reads input slot j blocked at width V: a direct convolution of that width in
 * a slot its kernel takes blocked, a pooling's data, either operand of a channel scale or a
 * piece of a channel concat (pass_layout_scale_agree and pass_layout_concat_agree say which
 * layouts go together). */
static bool pass_layout_reads_blocked(const ir_graph *g, const int *width, int i, int j, int V) {
  const ir_node *n = ir_node_at(g, i);
  return (width[i] == V && pass_layout_slot_ok(g, n, j)) || (j == 0 && pass_layout_pool(g, n)) ||
         (j < 2 && pass_layout_scale(g, n) >= 0) || pass_layout_concat(g, n);
}

/* One round of the readers' rule: a candidate any node reads in a slot it cannot take blocked
 * (or at another width), or that a second node writes (kAddTo, in place), is stored NCHW; so
 * is a pooling's output whose input is. Returns whether anything changed. */
static bool pass_layout_readers(const ir_graph *g, const int *width, int *blk) {
  bool changed = false;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; j < n->nin; j++) {
      int t = n->in[j];
      if (t >= 0 && blk[t] && !pass_layout_reads_blocked(g, width, i, j, blk[t])) blk[t] = 0, changed = true;
    }
    for (int j = 0; j < n->nout; j++)   /* a second writer */
      if (n->out[j] >= 0 && blk[n->out[j]] && ir_tensor_at(g, n->out[j])->producer != i) blk[n->out[j]] = 0, changed = true;
    if (pass_layout_pool(g, n) && blk[n->out[0]] && blk[n->in[0]] != blk[n->out[0]]) blk[n->out[0]] = 0, changed = true;
  }
  return changed;
}

/* Whether n's epilogue can run on the blocked result: its affines are per channel of axis 1,
 * and every same-shaped operand is blocked (true when it has none). */
static bool pass_layout_operands_blocked(const ir_graph *g, const ir_node *n, const int *blk) {
  if (!pass_layout_affine_ok(g, n)) return false;
  for (int j = 1; j < n->nin; j++)
    if (n->in[j] >= 0 && pass_layout_slot_ok(g, n, j) && !blk[n->in[j]]) return false;
  return true;
}

/* An epilogue runs elementwise over the blocked result before it is written (blocked or NCHW),
 * its same-shaped operands read at the same offsets: so they are all blocked or all NCHW, and
 * a blocked output needs them blocked. One round: a node whose operands cannot agree unblocks them.
 * Returns whether anything changed. */
static bool pass_layout_agree(const ir_graph *g, const int *width, int *blk) {
  bool changed = false;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (!width[i] || pass_layout_operands_blocked(g, n, blk)) continue;
    for (int j = 1; j < n->nin; j++)
      if (n->in[j] >= 0 && blk[n->in[j]] && pass_layout_slot_ok(g, n, j)) blk[n->in[j]] = 0, changed = true;
    if (blk[n->out[0]]) blk[n->out[0]] = 0, changed = true;
  }
  return changed;
}

/* Whether n is a depthwise convolution on the blocked path (k_conv_dw_blocks): it reads and
 * writes blocked only together, never converting one side as a dense one does (a grouped
 * layer of whole blocks runs on the direct path, which converts as for a dense one). */
static bool pass_layout_depthwise(const ir_graph *g, const ir_node *n, int width) {
  return width && k_conv_block_together(&ir_tensor_at(g, n->in[0])->shape, &ir_tensor_at(g, n->in[1])->shape, n->param);
}

/* One round: a depthwise convolution whose input and output disagree unblocks both. Returns
 * whether anything changed. */
static bool pass_layout_dw_agree(const ir_graph *g, const int *width, int *blk) {
  bool changed = false;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (!pass_layout_depthwise(g, n, width[i]) || !blk[n->in[0]] == !blk[n->out[0]]) continue;
    blk[n->in[0]] = blk[n->out[0]] = 0, changed = true;
  }
  return changed;
}

/* One round: a channel scale runs blocked when its data and output are blocked at one width V
 * and its scale is too, or is plain with C a multiple of V (then [N][C] is [N][C/V][V]);
 * otherwise all three are NCHW (its kernel sees one layout). Returns whether anything changed. */
static bool pass_layout_scale_agree(const ir_graph *g, int *blk) {
  bool changed = false;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    int d = pass_layout_scale(g, n);
    if (d < 0) continue;
    int x = n->in[d], s = n->in[1 - d], y = n->out[0], V = blk[y];
    bool ok = V && blk[x] == V && (blk[s] == V || (!blk[s] && pass_layout_channels(g, n) % V == 0));
    if (ok || (!blk[x] && !blk[s] && !blk[y])) continue;
    blk[x] = blk[s] = blk[y] = 0, changed = true;
  }
  return changed;
}

/* One round: a channel concat runs blocked when its output and every piece are blocked at one
 * width V dividing each piece's channels; otherwise all of them are NCHW. Returns whether
 * anything changed. */
static bool pass_layout_concat_agree(const ir_graph *g, int *blk) {
  bool changed = false;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (!pass_layout_concat(g, n)) continue;
    bool any = blk[n->out[0]] != 0;
    for (int j = 0; j < n->nin; j++) any = any || blk[n->in[j]];
    if (!any || pass_layout_concat_blocked(g, n, blk, blk[n->out[0]])) continue;
    blk[n->out[0]] = 0;
    for (int j = 0; j < n->nin; j++) blk[n->in[j]] = 0;
    changed = true;
  }
  return changed;
}

/* The epilogue's same-shaped operands' width: the output's when blocked, else theirs (0 when
 * it has none or they are NCHW). */
static int pass_layout_epi_width(const ir_graph *g, const ir_node *n, const int *blk) {
  if (blk[n->out[0]]) return blk[n->out[0]];
  for (int j = 1; j < n->nin; j++)
    if (n->in[j] >= 0 && pass_layout_slot_ok(g, n, j)) return blk[n->in[j]];
  return 0;
}

/* Pooling n's param, copied with its layout set. */
static void pass_layout_mark_pool(ir_graph *g, ir_node *n, const int *blk) {
  k_pool_param *p = ir_alloc(&g->arena, sizeof *p);
  memcpy(p, n->param, sizeof *p);
  p->in_block = blk[n->in[0]];
  p->out_block = blk[n->out[0]];
  n->param = p;
}

/* Node n's param, copied (a backward node shares the original) with the layouts set. */
static void pass_layout_mark(ir_graph *g, ir_node *n, const int *blk) {
  k_conv_param *p = ir_alloc(&g->arena, sizeof *p);
  memcpy(p, n->param, sizeof *p);
  p->in_block = blk[n->in[0]];
  p->out_block = blk[n->out[0]];
  p->epi_block = pass_layout_epi_width(g, n, blk);
  n->param = p;
  if (n->epi) n->sub[0].param = p;
}

/* A blocked channel scale's view of its slots (pass_layout_scale): data and output
 * [N][ceil(C/V)][H][W][V], the scale [N][ceil(C/V)][1][1][V]. */
static void pass_layout_mark_scale(ir_graph *g, ir_node *n, int d, int V) {
  k_shape y = ir_tensor_at(g, n->out[0])->shape, *v = ir_alloc(&g->arena, 3 * sizeof *v);
  int64_t cb = (y.d[1] + V - 1) / V;
  k_shape x = {5, {y.d[0], cb, y.d[2], y.d[3], V}}, s = {5, {y.d[0], cb, 1, 1, V}};
  v[d] = x, v[1 - d] = s, v[2] = x;
  n->view_shape = v;
}

/* A node as the explain lines name it: an epilogue by its heavy node. */
static const char *pass_layout_name(const ir_node *n) { return n->epi ? n->sub[0].name : n->name; }

/* "c1 (convolution): c1 is read by pool (pooling), so it is stored NCHW" for each direct
 * convolution's output left NCHW, naming the first reader that needs it so. */
static void pass_layout_explain(const ir_graph *g, pass_ctx *cx, const int *width, int i) {
  const ir_node *n = ir_node_at(g, i);
  int t = n->out[0];
  const char *name = ir_tensor_at(g, t)->name, *who = pass_layout_name(n);
  if (pass_layout_is_result(g, t)) return pass_explain(cx, "%s (convolution): %s is a result, so it is stored NCHW", who, name);
  if (!pass_layout_affine_ok(g, n))
    return pass_explain(cx, "%s (convolution): its epilogue's batch_norm is not over the channel axis, so %s is stored NCHW",
                        who, name);
  for (int k = 0; k < ir_nnodes(g); k++) {
    const ir_node *r = ir_node_at(g, k);
    bool op = r->kind == IR_N_OP || r->epi;
    for (int j = 0; j < r->nin; j++) {
      if (r->in[j] != t || pass_layout_reads_blocked(g, width, k, j, width[i])) continue;
      return pass_explain(cx, "%s (convolution): %s is read by %s%s (%s%s), so it is stored NCHW", who, name,
                          pass_layout_name(r), j && r->epi ? "'s epilogue" : "", op ? ir_ops[r->op].name : ir_node_kind_name(r),
                          !width[k] && op && r->op == IR_OP_convolution ? " on an NCHW path" : "");
    }
  }
  for (int k = 0; k < ir_nnodes(g); k++) {   /* the data of a channel scale that cannot run blocked */
    const ir_node *r = ir_node_at(g, k);
    int d = pass_layout_scale(g, r);
    if (d >= 0 && r->in[d] == t && pass_layout_channels(g, r) % width[i] != 0 && !ir_tensor_at(g, r->in[1 - d])->block)
      return pass_explain(cx, "%s (convolution): %s is scaled by %s (mul) by the plain %s over %lld channels, not a multiple "
                          "of the block width %d, so it is stored NCHW", who, name, r->name,
                          ir_tensor_at(g, r->in[1 - d])->name, (long long)pass_layout_channels(g, r), width[i]);
  }
  for (int k = 0; k < ir_nnodes(g); k++) {   /* a piece of a concat that cannot run blocked */
    const ir_node *r = ir_node_at(g, k);
    for (int j = 0; pass_layout_concat(g, r) && j < r->nin; j++)
      if (r->in[j] == t)
        return pass_explain(cx, "%s (convolution): %s is a piece of %s (concat), whose pieces and output are not all "
                            "blocked at width %d (each piece's channels a multiple of it, the output no result), "
                            "so it is stored NCHW", who, name, r->name, width[i]);
  }
  if (pass_layout_depthwise(g, n, width[i]))
    return pass_explain(cx, "%s (convolution, depthwise): it reads and writes blocked only together, and %s or its "
                        "input meets an NCHW tensor, so %s is stored NCHW", who, name, name);
  pass_explain(cx, "%s (convolution): %s or an operand of its epilogue meets an NCHW tensor, so it is stored NCHW", who, name);
}

int pass_layout(ir_graph *g, pass_ctx *cx) {
  int nn = ir_nnodes(g), nt = ir_ntensors(g);
  int *width = calloc((size_t)nn + 1, sizeof *width), *blk = calloc((size_t)nt + 1, sizeof *blk);
  if (!width || !blk) KILN_ICE("out of memory in the layout pass");
  for (int i = 0; i < nn; i++) width[i] = pass_layout_width(g, ir_node_at(g, i));
  pass_layout_candidates(g, width, blk);
  for (bool changed = true; changed;) {   /* both rules only unblock: a fixed point comes */
    changed = pass_layout_readers(g, width, blk);
    changed = pass_layout_agree(g, width, blk) || changed;
    changed = pass_layout_dw_agree(g, width, blk) || changed;
    changed = pass_layout_scale_agree(g, blk) || changed;
    changed = pass_layout_concat_agree(g, blk) || changed;
  }
  int count = 0;
  for (int t = 0; t < nt; t++)
    if (blk[t]) ir_tensor_at(g, t)->block = blk[t], count++;
  for (int i = 0; i < nn; i++) {
    ir_node *n = ir_node_at(g, i);
    if (pass_layout_pool(g, n) && blk[n->in[0]]) pass_layout_mark_pool(g, n, blk);
    int d = pass_layout_scale(g, n);
    if (d >= 0 && blk[n->out[0]]) pass_layout_mark_scale(g, n, d, blk[n->out[0]]);
    if (k_epi_has_stats(n->epi))
      pass_explain(cx, "%s (convolution): its epilogue gathers batch_norm statistics, so %s is stored NCHW",
                   pass_layout_name(n), ir_tensor_at(g, n->out[0])->name);
    if (!width[i]) continue;
    if (blk[n->in[0]] || pass_layout_epi_width(g, n, blk)) pass_layout_mark(g, n, blk);
    if (!blk[n->out[0]]) pass_layout_explain(g, cx, width, i);
  }
  cx->stats[PASS_layout].blocked = count;
  free(width);
  free(blk);
  return 0;
}
