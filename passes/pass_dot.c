/* pass_dot.c — the graph as graphviz DOT (`dot -Tsvg`): a box per node labelled with its op
 * and output shape, inputs and model state as their own shapes, fused groups as clusters of
 * their members, backward nodes shaded red and optimizer updates as green hexagons. */
#include "passes.h"

#include <stdlib.h>

/* Writes s as the inside of a DOT string: quotes and backslashes escaped. */
static void pass_dot_str(FILE *out, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', out);
    if (*s == '\n') fputs("\\n", out);
    else fputc(*s, out);
  }
}

static const char *pass_dot_tensor_shape(ir_tensor_kind k) {
  switch (k) {
  case IR_T_INPUT: return "shape=ellipse, style=filled, fillcolor=\"#cfe2f3\"";
  case IR_T_PARAM: return "shape=box3d, style=filled, fillcolor=\"#fff2cc\"";
  case IR_T_AUX: return "shape=component, style=filled, fillcolor=\"#fce5cd\"";
  case IR_T_STATE: return "shape=cylinder, style=filled, fillcolor=\"#d9d2e9\"";
  case IR_T_CONST: return "shape=plaintext";
  case IR_T_VALUE: return "shape=point";
  }
  return "shape=ellipse";
}

static const char *pass_dot_node_style(const ir_node *n) {
  switch (n->kind) {
  case IR_N_BACKWARD: return "shape=box, style=\"rounded,filled\", fillcolor=\"#f4cccc\"";
  case IR_N_UPDATE: return "shape=hexagon, style=filled, fillcolor=\"#d9ead3\"";
  default: return "shape=box, style=rounded";
  }
}

/* A node: "name\nop -> f32[64, 10]" (the type of its first output it writes). */
static void pass_dot_node(const ir_graph *g, const ir_node *n, const char *id, FILE *out) {
  fprintf(out, "    %s [%s, label=\"", id, pass_dot_node_style(n));
  pass_dot_str(out, n->name);
  fputs("\\n", out);
  pass_dot_str(out, ir_node_kind_name(n));
  for (int j = 0; j < n->nout; j++) {
    if (n->out[j] < 0) continue;
    const ir_tensor *t = ir_tensor_at(g, n->out[j]);
    char ty[96];
    ir_type_str(t->dtype, &t->shape, ty, sizeof ty);
    fprintf(out, " -> %s", ty);
    break;
  }
  fputs("\"];\n", out);
}

/* who[t]: the DOT id of the node (or fused member) that writes tensor t first. */
typedef struct { char (*who)[32]; } pass_dot_ids;

static void pass_dot_claim(const ir_node *n, const char *id, pass_dot_ids *ids) {
  for (int j = 0; j < n->nout; j++)
    if (n->out[j] >= 0 && !ids->who[n->out[j]][0]) snprintf(ids->who[n->out[j]], sizeof ids->who[0], "%s", id);
}

static void pass_dot_state(const ir_graph *g, FILE *out, pass_dot_ids *ids) {
  for (int t = 0; t < ir_ntensors(g); t++) {
    const ir_tensor *x = ir_tensor_at(g, t);
    if (x->kind == IR_T_VALUE) continue;
    snprintf(ids->who[t], sizeof ids->who[0], "t%d", t);
    fprintf(out, "  t%d [%s, label=\"", t, pass_dot_tensor_shape(x->kind));
    pass_dot_str(out, x->name);
    if (x->kind == IR_T_CONST) fprintf(out, " = %g", (double)x->value);
    else {
      char ty[96];
      ir_type_str(x->dtype, &x->shape, ty, sizeof ty);
      fprintf(out, "\\n%s", ty);
    }
    fputs("\"];\n", out);
  }
}

static void pass_dot_nodes(const ir_graph *g, FILE *out, pass_dot_ids *ids) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    char id[32];
    if (n->kind != IR_N_FUSED) {
      snprintf(id, sizeof id, "n%d", i);
      pass_dot_node(g, n, id, out);
      pass_dot_claim(n, id, ids);
      continue;
    }
    fprintf(out, "  subgraph cluster_%d {\n    label=\"", i);
    pass_dot_str(out, n->name);
    fprintf(out, " (%d ops)\";\n    style=\"rounded,dashed\"; color=\"#3c78d8\";\n", n->nsub);
    for (int k = 0; k < n->nsub; k++) {
      snprintf(id, sizeof id, "n%d_%d", i, k);
      pass_dot_node(g, &n->sub[k], id, out);
      pass_dot_claim(&n->sub[k], id, ids);
    }
    fputs("  }\n", out);
  }
}

/* One edge per (writer, reader, tensor), labelled with the tensor's name. */
static void pass_dot_reads(const ir_graph *g, const ir_node *n, const char *id, const pass_dot_ids *ids, FILE *out) {
  for (int j = 0; j < n->nin; j++) {
    int t = n->in[j];
    bool dup = false;
    for (int k = 0; k < j; k++) dup |= n->in[k] == t;
    if (t < 0 || dup || !ids->who[t][0]) continue;
    fprintf(out, "  %s -> %s [label=\"", ids->who[t], id);
    pass_dot_str(out, ir_tensor_at(g, t)->name);
    fputs("\", fontsize=9];\n", out);
  }
}

static void pass_dot_edges(const ir_graph *g, FILE *out, const pass_dot_ids *ids) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    char id[32];
    if (n->kind != IR_N_FUSED) {
      snprintf(id, sizeof id, "n%d", i);
      pass_dot_reads(g, n, id, ids, out);
    }
    for (int k = 0; k < n->nsub; k++) {
      snprintf(id, sizeof id, "n%d_%d", i, k);
      pass_dot_reads(g, &n->sub[k], id, ids, out);
    }
  }
}

/* The entry point's results: a double octagon per output (and the loss when training). */
static void pass_dot_results(const ir_graph *g, FILE *out, const pass_dot_ids *ids) {
  for (int i = 0; i <= g->outputs.len; i++) {
    int t = i < g->outputs.len ? IR_VEC_AT(g->outputs, int, i) : g->mode == IR_MODE_TRAIN ? g->loss : -1;
    if (t < 0 || !ids->who[t][0]) continue;      /* an output train_step does not compute */
    fprintf(out, "  r%d [shape=doubleoctagon, label=\"%s ", i, i < g->outputs.len ? "output" : "loss");
    pass_dot_str(out, ir_tensor_at(g, t)->name);
    fprintf(out, "\"];\n  %s -> r%d;\n", ids->who[t], i);
  }
}

void pass_write_dot(const ir_graph *g, FILE *out) {
  pass_dot_ids ids = {calloc((size_t)ir_ntensors(g) + 1, sizeof *ids.who)};
  if (!ids.who) KILN_ICE("out of memory writing DOT");
  fputs("digraph \"", out);
  pass_dot_str(out, g->name);
  fputs("\" {\n  rankdir=TB;\n  newrank=true;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\"];\n", out);
  pass_dot_state(g, out, &ids);
  pass_dot_nodes(g, out, &ids);
  pass_dot_edges(g, out, &ids);
  pass_dot_results(g, out, &ids);
  fputs("}\n", out);
  free(ids.who);
}
