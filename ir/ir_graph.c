/* ir_graph.c — building and checking graphs. Tensors and nodes live in growable arrays and
 * are named by index, so passes can add to them while holding indices. */
#include "ops.h"

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

void ir_graph_free(ir_graph *g) {
  if (!g) return;
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

static int ir_verify_node(const ir_graph *g, int ni) {
  const ir_node *n = ir_node_at(g, ni);
  for (int i = 0; i < n->nin; i++) {
    int t = n->in[i];
    if (t < 0 || t >= g->tensors.len) return fprintf(stderr, "ir_verify: node %s reads tensor %d out of range\n", n->name, t), 1;
    int p = ir_tensor_at(g, t)->producer;
    if (p >= ni) return fprintf(stderr, "ir_verify: node %s reads %s before it is produced\n", n->name, ir_tensor_at(g, t)->name), 1;
  }
  for (int i = 0; i < n->nout; i++) {
    int t = n->out[i];
    if (t < 0 || t >= g->tensors.len || ir_tensor_at(g, t)->producer != ni)
      return fprintf(stderr, "ir_verify: node %s output %d is not produced by it\n", n->name, i), 1;
  }
  return 0;
}

int ir_verify(const ir_graph *g) {
  for (int i = 0; i < g->nodes.len; i++)
    if (ir_verify_node(g, i)) return 1;
  for (int i = 0; i < g->tensors.len; i++) {
    const ir_tensor *t = ir_tensor_at(g, i);
    if ((t->kind == IR_T_VALUE) != (t->producer >= 0))
      return fprintf(stderr, "ir_verify: tensor %s: kind and producer disagree\n", t->name), 1;
  }
  return 0;
}
