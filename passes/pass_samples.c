/* pass_samples.c — predict at batch N > 1: the first layers, whose values are large, run one
 * sample at a time (depth first), and the later ones on the whole batch as before. Layer by
 * layer, a batch of 8 makes each early value 8 samples big: MobileNetV2's 8 x 96 x 112 x 112
 * floats (38 MB) leave every cache between the layer that writes them and the one that reads
 * them, and its batch-8 call ran 0.79x of eight batch-1 calls. One sample's values (4.8 MB at
 * most there, 0.8 MB for most layers) stay in L2 or L3 from one layer to the next. Later
 * layers keep the batch: their values are small and their weights large, read once for the
 * batch.
 *
 * The region is a prefix of the node list: ops that treat samples apart (convolution, pooling,
 * batch_norm, the elementwise unary and binary ops, concat along an axis >= 1), reading the
 * batch input, the region's own values (each with the batch as its first axis) and weights or
 * constants, and writing values with the batch as their first axis; it ends at the last such
 * node whose output holds at least PASS_SAMPLES_MIN_BYTES a sample. Its nodes are repeated per
 * sample, sample 0's first: each copy reads a slice of the input (one sample), the same
 * weights, and its own copies of the region's values (one sample each, named VALUE@sN). A
 * value read after the region (or an output) becomes a concat of its N copies along axis 0,
 * written to the value itself, so the rest of the graph is unchanged. Each copy computes what
 * the batch node computed for that sample, op for op, so the outputs keep their bits.
 *
 * Not for bounded dims (a run's batch is not the graph's), batches over PASS_SAMPLES_MAX, nor for
 * a target whose executor runs every node as one call (PASS_NO_SPLIT: the GPU, where one call
 * per layer is what pays).
 * KILN_SAMPLES_MIN_BYTES overrides the threshold (the differential tests set 1, so that their
 * small models split too). */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#define PASS_SAMPLES_MIN_BYTES ((int64_t)256 * 1024)
/* Most samples split: each repeats the region's nodes (a batch of 64 would make 64 copies of
 * each early layer, and its concats 64 inputs). */
#define PASS_SAMPLES_MAX 16

static int64_t pass_samples_min_bytes(void) {
  const char *e = getenv("KILN_SAMPLES_MIN_BYTES");
  return e && e[0] ? strtoll(e, NULL, 10) : PASS_SAMPLES_MIN_BYTES;
}

/* Whether op x computes each sample from that sample alone, as the region needs. */
static bool pass_samples_op(const ir_node *x) {
  if (x->kind != IR_N_OP) return false;
  const ir_opdef *op = &ir_ops[x->op];
  if (op->resources & IR_RES_RANDOM) return false;
  if (x->op == IR_OP_concat) return ((const k_concat_param *)x->param)->dim >= 1;
  return x->op == IR_OP_convolution || x->op == IR_OP_pooling || x->op == IR_OP_batch_norm || op->scalar != NULL;
}

/* Whether tensor t has N as its first axis. */
static bool pass_samples_batched(const ir_graph *g, int t, int64_t N) {
  const ir_tensor *x = ir_tensor_at(g, t);
  return x->shape.rank >= 1 && x->shape.d[0] == N;
}

/* The batch: N in [2, PASS_SAMPLES_MAX] of the graph's one f32 input of rank >= 2, or 0 (then
 * nothing splits). */
static int64_t pass_samples_batch(const ir_graph *g, int *input) {
  int idx[2], n = ir_graph_inputs(g, idx, 2);
  if (n != 1) return 0;
  const ir_tensor *x = ir_tensor_at(g, idx[0]);
  if (x->dtype != K_F32 || x->shape.rank < 2 || x->shape.d[0] < 2 || x->shape.d[0] > PASS_SAMPLES_MAX) return 0;
  *input = idx[0];
  return x->shape.d[0];
}

/* read_after[t]: whether a node from position `from` on, or the caller (an output), reads t. */
static bool *pass_samples_read_after(const ir_graph *g, int from) {
  bool *r = calloc((size_t)ir_ntensors(g) + 1, sizeof *r);
  if (!r) KILN_ICE("out of memory");
  for (int i = from; i < ir_nnodes(g); i++)
    for (int j = 0; j < ir_node_at(g, i)->nin; j++)
      if (ir_node_at(g, i)->in[j] >= 0) r[ir_node_at(g, i)->in[j]] = true;
  for (int i = 0; i < g->outputs.len; i++) r[IR_VEC_AT(g->outputs, int, i)] = true;
  return r;
}

/* in_region[t]: whether value t is written by the region so far (the input counts as one). How
 * many nodes the region takes: the longest prefix of separable nodes whose weights (and
 * constants) hold no more bytes than a sample of their output, or than min (a squeeze-and-
 * excitation's small layers on 1 x 1 values stay in), cut after the last one whose output
 * holds at least min bytes a sample. A layer whose weights outweigh its value gains
 * from the batch (its weights read once for every sample), and each copy would pack them
 * again on the first call and keep its own packing: ResNet-50's whole graph split once, its
 * first predict at batch 8 took 1.8-3.4 s against 0.5-0.6 unsplit. */
static int pass_samples_region(const ir_graph *g, int x, int64_t N, int64_t min, bool *in_region, const bool *read) {
  int end = 0;
  in_region[x] = true;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    bool ok = pass_samples_op(n) && n->nout >= 1 && n->out[0] >= 0 && pass_samples_batched(g, n->out[0], N);
    for (int j = 1; ok && j < n->nout; j++)   /* a hidden output: batched, or read by nobody */
      ok = n->out[j] < 0 || pass_samples_batched(g, n->out[j], N) || !read[n->out[j]];
    for (int j = 0; ok && j < n->nin; j++) {
      int t = n->in[j];
      if (t < 0) continue;
      ir_tensor_kind k = ir_tensor_at(g, t)->kind;
      ok = in_region[t] ? pass_samples_batched(g, t, N) : k == IR_T_PARAM || k == IR_T_AUX || k == IR_T_CONST;
    }
    if (!ok) break;
    int64_t weights = 0, sample = ir_tensor_bytes(ir_tensor_at(g, n->out[0])) / N;
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] >= 0 && !in_region[n->in[j]]) weights += ir_tensor_bytes(ir_tensor_at(g, n->in[j]));
    if (weights > sample && weights > min) break;   /* past here, large weights outweigh a sample's value */
    for (int j = 0; j < n->nout; j++)
      if (n->out[j] >= 0) in_region[n->out[j]] = true;
    if (sample >= min) end = i + 1;
  }
  return end;
}

/* A node of the new list: op with its own copy of param (later passes write into params). */
static ir_node *pass_samples_node(ir_graph *g, ir_vec *nodes, int op, const char *name, const void *param, int nin,
                                  int nout, ir_loc loc) {
  ir_node *n = ir_vec_push(nodes);
  size_t ps = ir_ops[op].param_size;
  *n = (ir_node){.kind = IR_N_OP, .op = op, .name = name, .nin = nin, .nout = nout, .loc = loc};
  n->in = ir_alloc(&g->arena, sizeof(int) * (size_t)(nin + 1));
  n->out = ir_alloc(&g->arena, sizeof(int) * (size_t)(nout + 1));
  if (ps) n->param = memcpy(ir_alloc(&g->arena, ps), param, ps);
  return n;
}

/* A new value for sample s of tensor t, named T@sS. */
static int pass_samples_value(ir_graph *g, int t, int64_t s) {
  const ir_tensor *x = ir_tensor_at(g, t);
  return ir_graph_add_tensor(g, ir_strfmt(&g->arena, "%s@s%lld", x->name, (long long)s), IR_T_VALUE, x->loc);
}

/* The region's nodes [0, end) repeated per sample of input x, then a concat for each value read
 * later; the rest of the nodes after. Returns the number of nodes that were inferred afresh
 * (the new ones, at the front of the list). */
static int pass_samples_rewrite(ir_graph *g, int x, int64_t N, int end) {
  int nt = ir_ntensors(g);
  bool *later = pass_samples_read_after(g, end);
  int *copy = malloc(((size_t)nt + 1) * sizeof *copy);
  if (!copy) KILN_ICE("out of memory");
  ir_vec nodes = {.elem = sizeof(ir_node)};
  int **pieces = calloc((size_t)nt + 1, sizeof *pieces);   /* each later-read value's N copies */
  if (!pieces) KILN_ICE("out of memory");
  for (int64_t s = 0; s < N; s++) {
    for (int t = 0; t < nt; t++) copy[t] = t;
    const ir_tensor *xt = ir_tensor_at(g, x);
    k_slice_param sp = {0, s, s + 1, 1};
    ir_node *sl = pass_samples_node(g, &nodes, IR_OP_slice, ir_strfmt(&g->arena, "%s@s%lld", xt->name, (long long)s),
                                    &sp, 1, 1, xt->loc);
    sl->in[0] = x, sl->out[0] = copy[x] = pass_samples_value(g, x, s);
    for (int i = 0; i < end; i++) {
      const ir_node *b = ir_node_at(g, i);
      ir_node *c = pass_samples_node(g, &nodes, b->op, ir_strfmt(&g->arena, "%s@s%lld", b->name, (long long)s),
                                     b->param, b->nin, b->nout, b->loc);
      c->from = b->from;
      for (int j = 0; j < b->nin; j++) c->in[j] = b->in[j] >= 0 ? copy[b->in[j]] : -1;
      for (int j = 0; j < b->nout; j++) {
        int t = b->out[j];
        c->out[j] = t >= 0 ? copy[t] = pass_samples_value(g, t, s) : -1;
        if (t < 0 || !later[t]) continue;
        if (!pieces[t] && !(pieces[t] = ir_alloc(&g->arena, sizeof(int) * (size_t)N))) KILN_ICE("out of memory");
        pieces[t][s] = c->out[j];
      }
    }
  }
  for (int t = 0; t < nt; t++) {
    if (!pieces[t]) continue;
    const ir_tensor *v = ir_tensor_at(g, t);
    k_concat_param cp = {0};
    ir_node *c = pass_samples_node(g, &nodes, IR_OP_concat, ir_strfmt(&g->arena, "%s@samples", v->name), &cp, (int)N,
                                   1, v->loc);
    memcpy(c->in, pieces[t], sizeof(int) * (size_t)N);
    c->out[0] = t;
  }
  int fresh = nodes.len;
  for (int i = end; i < ir_nnodes(g); i++) *(ir_node *)ir_vec_push(&nodes) = *ir_node_at(g, i);
  ir_graph_set_nodes(g, &nodes);
  free(later), free(copy), free(pieces);
  return fresh;
}

int pass_samples(ir_graph *g, pass_ctx *cx) {
  int x = -1;
  int64_t N = cx->mode == IR_MODE_PREDICT && !g->nbdims && !(cx->disabled & PASS_NO_SPLIT) ? pass_samples_batch(g, &x) : 0;
  if (N < 2) return 0;
  bool *in_region = calloc((size_t)ir_ntensors(g) + 1, sizeof *in_region);
  if (!in_region) KILN_ICE("out of memory");
  bool *read = pass_samples_read_after(g, 0);
  int end = pass_samples_region(g, x, N, pass_samples_min_bytes(), in_region, read);
  free(in_region), free(read);
  if (end == 0) return 0;
  int fresh = pass_samples_rewrite(g, x, N, end);
  for (int i = 0; i < fresh; i++)
    if (ir_infer_one(g, cx->diag, i)) KILN_ICE("samples: '%s' does not infer on one sample", ir_node_at(g, i)->name);
  pass_explain(cx, "the first %d nodes run one sample at a time (%lld samples): their values hold at least %lld bytes a sample",
               end, (long long)N, (long long)pass_samples_min_bytes());
  return 0;
}
