/* ir_graph.c — building and checking graphs. Tensors and nodes live in growable arrays and
 * are named by index, so passes can add to them while holding indices. */
#include "ops.h"
#include "k_epilogue.h"

#include <stdlib.h>
#include <string.h>

ir_graph *ir_graph_new(const char *name) {
  ir_graph *g = calloc(1, sizeof *g);
  if (!g) {
    fprintf(stderr, "kiln: out of memory\n");
    exit(1);
  }
  g->tensors.elem = sizeof(ir_tensor);
  g->nodes.elem = sizeof(ir_node);
  g->outputs.elem = sizeof(int);
  g->loss = -1;
  g->name = ir_strdup(&g->arena, name ? name : "model");
  return g;
}

void ir_plan_free(ir_plan *p) {
  if (!p) return;
  free(p->buf);
  free(p->temp_offset);
  free(p->temp_bytes);
  free(p->samples);
  free(p);
}

int64_t ir_plan_slot_stride(const ir_graph *g, const ir_node *n, int j) {
  int t = j < n->nin ? n->in[j] : n->out[j - n->nin];
  if (t < 0 || !g->plan || n->nout < 1 || n->out[0] < 0) return 0;
  const ir_tensor *x = ir_tensor_at(g, t), *o = ir_tensor_at(g, n->out[0]);
  if ((x->kind != IR_T_VALUE && x->kind != IR_T_INPUT) || x->shape.rank < 1 || o->shape.rank < 1 ||
      x->shape.d[0] != o->shape.d[0] || o->shape.d[0] < 2)
    return 0;
  const ir_buffer *b = &g->plan->buf[t];
  return b->sample_bytes > 0 ? b->sample_bytes : ir_tensor_bytes(x) / x->shape.d[0];
}

int64_t ir_plan_span(const ir_graph *g, const ir_plan *p, int t) {
  const ir_buffer *b = &p->buf[t];
  const k_shape *s = &ir_tensor_at(g, t)->shape;
  if (b->sample_bytes <= 0 || s->rank < 1 || s->d[0] < 1) return b->bytes;
  return (s->d[0] - 1) * b->sample_bytes + b->bytes / s->d[0];
}

void ir_graph_free(ir_graph *g) {
  if (!g) return;
  for (int p = 0; g->probes && p < ir_dims_nprobes(g->nbdims); p++) ir_graph_free(g->probes[p]);
  free(g->probes);
  ir_plan_free(g->plan);
  ir_vec_free(&g->tensors);
  ir_vec_free(&g->nodes);
  ir_vec_free(&g->outputs);
  ir_arena_free(&g->arena);
  free(g);
}

int ir_graph_add_tensor(ir_graph *g, const char *name, ir_tensor_kind kind, ir_loc loc) {
  ir_tensor *t = ir_vec_push(&g->tensors);
  t->name = ir_strdup(&g->arena, name);
  t->kind = kind;
  t->dtype = K_F32;
  t->producer = -1;
  t->loc = loc;
  return g->tensors.len - 1;
}

/* Adds a node with default attributes and its output tensors: the visible output is named
 * <name>, hidden ones <name>.<output> (batch_norm's h.saved_mean). */
int ir_graph_add_node(ir_graph *g, int op, const char *name, int nin, const int *in, ir_loc loc) {
  const ir_opdef *def = &ir_ops[op];
  int idx = g->nodes.len, nout = ir_op_nouts(def);
  int *ins = ir_alloc(&g->arena, sizeof(int) * (size_t)(nin + 1));
  int *outs = ir_alloc(&g->arena, sizeof(int) * (size_t)nout);
  memcpy(ins, in, sizeof(int) * (size_t)nin);
  for (int i = 0; i < nout; i++) {
    const char *tn = i == 0 ? name : ir_strfmt(&g->arena, "%s.%s", name, def->outs[i]);
    outs[i] = ir_graph_add_tensor(g, tn, IR_T_VALUE, loc);
    ir_tensor_at(g, outs[i])->producer = idx;
    ir_tensor_at(g, outs[i])->out_index = i;
  }
  ir_node *n = ir_vec_push(&g->nodes);
  *n = (ir_node){.op = op, .name = ir_strdup(&g->arena, name), .nin = nin, .nout = nout,
                 .in = ins, .out = outs, .loc = loc};
  if (def->param_size) {
    n->param = ir_alloc(&g->arena, def->param_size);
    ir_attr_defaults(def->attrs, n->param);
  }
  return idx;
}

int ir_graph_find_tensor(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->tensors.len; i++)
    if (strcmp(ir_tensor_at(g, i)->name, name) == 0) return i;
  return -1;
}

int64_t ir_tensor_numel(const ir_tensor *t) { return k_shape_numel(&t->shape); }

int64_t ir_tensor_bytes(const ir_tensor *t) {
  int64_t n = ir_tensor_numel(t), c = t->shape.rank > 1 ? t->shape.d[1] : 1;
  if (!t->block || c == 0) return n * 4;
  return n / c * ((c + t->block - 1) / t->block * t->block) * 4;
}

/* ---- building blocks for passes ---- */

static int *ir_copy_ints(ir_arena *a, const int *src, int n) {
  int *d = ir_alloc(a, sizeof(int) * (size_t)(n + 1));
  if (src && n) memcpy(d, src, sizeof(int) * (size_t)n);
  return d;
}

/* Sets the producer of each output this node is the first to write. */
static void ir_claim_outputs(ir_graph *g, int idx) {
  const ir_node *n = ir_node_at(g, idx);
  for (int i = 0; i < n->nout; i++) {
    if (n->out[i] < 0) continue;
    ir_tensor *t = ir_tensor_at(g, n->out[i]);
    if (t->kind == IR_T_VALUE && t->producer < 0) t->producer = idx, t->out_index = i;
  }
}

int ir_graph_add_node_raw(ir_graph *g, ir_node_kind kind, int op, const char *name, int nin,
                          const int *in, int nout, const int *out, ir_loc loc) {
  ir_node *n = ir_vec_push(&g->nodes);
  *n = (ir_node){.kind = kind, .op = op, .name = ir_strdup(&g->arena, name), .nin = nin, .nout = nout,
                 .in = ir_copy_ints(&g->arena, in, nin), .out = ir_copy_ints(&g->arena, out, nout), .loc = loc};
  ir_claim_outputs(g, g->nodes.len - 1);
  return g->nodes.len - 1;
}

/* An update's param is its own copy of the optimizer's (wd_exclude: pass_optimizer.c). */
size_t ir_node_param_size(const ir_node *n) {
  if (n->kind == IR_N_UPDATE) return k_optim_param_size(n->op);
  return n->kind == IR_N_OP || n->kind == IR_N_BACKWARD || n->epi ? ir_ops[n->op].param_size : 0;
}

/* A deep copy of n whose arrays and strings live in arena a. */
static ir_node ir_node_copy(ir_arena *a, const ir_node *n) {
  ir_node c = *n;
  size_t psize = ir_node_param_size(n);
  c.name = ir_strdup(a, n->name);
  c.in = ir_copy_ints(a, n->in, n->nin);
  c.out = ir_copy_ints(a, n->out, n->nout);
  if (n->param && psize) c.param = memcpy(ir_alloc(a, psize), n->param, psize);
  if (n->req) c.req = memcpy(ir_alloc(a, sizeof(k_req) * (size_t)n->nout), n->req, sizeof(k_req) * (size_t)n->nout);
  if (n->inplace) c.inplace = ir_copy_ints(a, n->inplace, n->nout);
  if (n->slot_shape) {
    size_t bytes = sizeof(k_shape) * (size_t)(n->nin + n->nout);
    c.slot_shape = memcpy(ir_alloc(a, bytes), n->slot_shape, bytes);
  }
  if (n->view_shape) {
    size_t bytes = sizeof(k_shape) * (size_t)(n->nin + n->nout);
    c.view_shape = memcpy(ir_alloc(a, bytes), n->view_shape, bytes);
  }
  if (n->epi) c.epi = memcpy(ir_alloc(a, sizeof *n->epi), n->epi, sizeof *n->epi);
  if (n->sub) {
    c.sub = ir_alloc(a, sizeof(ir_node) * (size_t)n->nsub);
    for (int i = 0; i < n->nsub; i++) c.sub[i] = ir_node_copy(a, &n->sub[i]);
  }
  return c;
}

ir_graph *ir_graph_clone(const ir_graph *g) {
  ir_graph *c = ir_graph_new(g->name);
  for (int i = 0; i < ir_ntensors(g); i++) {
    ir_tensor *t = ir_vec_push(&c->tensors);
    *t = *ir_tensor_at(g, i);
    t->name = ir_strdup(&c->arena, t->name);
  }
  for (int i = 0; i < ir_nnodes(g); i++) *(ir_node *)ir_vec_push(&c->nodes) = ir_node_copy(&c->arena, ir_node_at(g, i));
  for (int i = 0; i < g->outputs.len; i++) *(int *)ir_vec_push(&c->outputs) = IR_VEC_AT(g->outputs, int, i);
  c->loss = g->loss, c->has_train = g->has_train, c->optim = g->optim, c->train_loc = g->train_loc, c->mode = g->mode;
  c->shared_tensors = ir_ntensors(g);
  c->nbdims = g->nbdims;
  for (int d = 0; d < g->nbdims; d++)
    c->bdims[d] = g->bdims[d], c->bdims[d].name = ir_strdup(&c->arena, g->bdims[d].name);
  return c;
}

void ir_graph_set_nodes(ir_graph *g, ir_vec *nodes) {
  ir_vec_free(&g->nodes);
  g->nodes = *nodes;
  *nodes = (ir_vec){.elem = sizeof(ir_node)};
  ir_graph_claim(g);
}

void ir_graph_claim(ir_graph *g) {
  for (int i = 0; i < ir_ntensors(g); i++) ir_tensor_at(g, i)->producer = -1;
  for (int i = 0; i < ir_nnodes(g); i++) ir_claim_outputs(g, i);
}

const char *ir_node_kind_name(const ir_node *n) {
  static _Thread_local char buf[96];
  switch (n->kind) {
  case IR_N_OP: return ir_ops[n->op].name;
  case IR_N_BACKWARD: snprintf(buf, sizeof buf, "_backward_%s", ir_ops[n->op].name); return buf;
  case IR_N_UPDATE: snprintf(buf, sizeof buf, "_%s_update", n->op == K_OPT_ADAMW ? "adamw" : n->op == K_OPT_ADAM ? "adam" : "sgd"); return buf;
  case IR_N_FUSED: return n->epi ? "_epilogue" : "_fused";
  }
  return "?";
}

static void ir_mark_reads(const ir_node *n, bool *read) {
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] >= 0) read[n->in[j]] = true;
  for (int s = 0; n->kind == IR_N_FUSED && s < n->nsub; s++) ir_mark_reads(&n->sub[s], read);
}

void ir_graph_mark_needed(const ir_graph *g, bool *need) {
  for (int i = ir_nnodes(g) - 1; i >= 0; i--) {
    const ir_node *n = ir_node_at(g, i);
    bool used = false;
    for (int j = 0; j < n->nout; j++) used |= n->out[j] >= 0 && need[n->out[j]];
    for (int j = 0; used && j < n->nin; j++)
      if (n->in[j] >= 0) need[n->in[j]] = true;
  }
}

int ir_graph_inputs(const ir_graph *g, int *idx, int max) {
  bool *read = calloc((size_t)ir_ntensors(g) + 1, sizeof *read);
  if (!read) return -1;
  for (int i = 0; i < ir_nnodes(g); i++) ir_mark_reads(ir_node_at(g, i), read);
  int k = 0;
  for (int t = 0; t < ir_ntensors(g); t++)
    if (read[t] && ir_tensor_at(g, t)->kind == IR_T_INPUT) {
      if (idx && k < max) idx[k] = t;
      k++;
    }
  free(read);
  return k;
}

bool ir_node_mutates_input(const ir_graph *g, const ir_node *n, int j) {
  if (n->in[j] < 0) return false;
  if (n->kind == IR_N_UPDATE) return j != 1;                 /* [param, grad, state...] */
  if (n->kind != IR_N_OP || g->mode != IR_MODE_TRAIN) return false;
  /* in = [args..., aux...], then inputs a pass added (batch_norm's gathered statistics) */
  const ir_opdef *op = &ir_ops[n->op];
  int first = op->variadic ? n->nin - ir_op_naux(op) : ir_op_nargs(op);
  return j >= first && j < first + ir_op_naux(op);
}

/* ---- the verifier ---- */

static int ir_verify_fail(const ir_node *n, const char *what, const char *tensor) {
  fprintf(stderr, "ir_verify: node %s (%s): %s%s%s\n", n->name, ir_node_kind_name(n), what, tensor ? " " : "", tensor ? tensor : "");
  return 1;
}

static int ir_verify_inputs(const ir_graph *g, const ir_node *n, int ni) {
  for (int i = 0; i < n->nin; i++) {
    int t = n->in[i];
    if (t < 0 && n->kind == IR_N_BACKWARD) continue;
    if (t < 0 || t >= g->tensors.len) return ir_verify_fail(n, "reads a tensor index out of range", NULL);
    const ir_tensor *x = ir_tensor_at(g, t);
    if (x->kind == IR_T_VALUE && (x->producer < 0 || x->producer >= ni)) return ir_verify_fail(n, "reads before it is produced:", x->name);
  }
  return 0;
}

static int ir_verify_outputs(const ir_graph *g, const ir_node *n, int ni) {
  for (int i = 0; i < n->nout; i++) {
    int t = n->out[i];
    if (t < 0 && n->kind == IR_N_BACKWARD) continue;
    if (t < 0 || t >= g->tensors.len) return ir_verify_fail(n, "writes a tensor index out of range", NULL);
    const ir_tensor *x = ir_tensor_at(g, t);
    bool accumulates = ir_node_req(n, i) == kAddTo && x->producer >= 0 && x->producer < ni;
    if (x->kind != IR_T_VALUE || (x->producer != ni && !accumulates)) return ir_verify_fail(n, "writes a tensor it does not produce:", x->name);
  }
  return 0;
}

static int ir_verify_node(const ir_graph *g, int ni) {
  const ir_node *n = ir_node_at(g, ni);
  return ir_verify_inputs(g, n, ni) || ir_verify_outputs(g, n, ni);
}

int ir_verify(const ir_graph *g) {
  for (int i = 0; i < g->nodes.len; i++)
    if (ir_verify_node(g, i)) return 1;
  for (int i = 0; i < g->tensors.len; i++) {
    const ir_tensor *t = ir_tensor_at(g, i);
    if (t->kind != IR_T_VALUE && t->producer >= 0)
      return fprintf(stderr, "ir_verify: tensor %s is not a value but has a producer\n", t->name), 1;
  }
  return 0;
}
