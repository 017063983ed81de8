/* pass_dot.c — the graph as graphviz DOT (`dot -Tsvg`): a box per node labelled with its op
 * and output shape, inputs and model state as their own shapes, backward nodes shaded red and
 * optimizer updates as green hexagons. A fused group is one dashed blue node listing its
 * members' ops, a heavy op with its epilogue one solid orange node; the full view draws each
 * member as its own node instead. Each node's tooltip (an SVG title on hover) holds the shapes
 * it reads and writes; given each node's share of a profile's time, nodes are filled white to
 * red by it (`kiln passes --html --profile`). */
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

/* The fill of a node that took `share` of a profile's time when the largest share is `top`:
 * #rrggbb from white (none) to #e06666 (the most). The report's own layout uses it too. */
void pass_heat_color(double share, double top, char rgb[8]) {
  double t = top > 0 && share > 0 ? share / top : 0;
  int gb = (int)(255 - t * (255 - 102)), r = (int)(255 - t * (255 - 224));
  snprintf(rgb, 8, "#%02x%02x%02x", r & 255, gb & 255, gb & 255);
}

/* A profiled node's style: `style` (its outline, filled) and its heat. */
static void pass_dot_heat(double share, double top, const char *style, FILE *out) {
  char rgb[8];
  pass_heat_color(share, top, rgb);
  fprintf(out, ", style=\"%s\", fillcolor=\"%s\"", style, rgb);
}

static const char *pass_dot_node_style(const ir_node *n) {
  switch (n->kind) {
  case IR_N_BACKWARD: return "shape=box, style=\"rounded,filled\", fillcolor=\"#f4cccc\"";
  case IR_N_UPDATE: return "shape=hexagon, style=filled, fillcolor=\"#d9ead3\"";
  default: return "shape=box, style=rounded";
  }
}

/* What the writers share: each node's share of a profile's time (NULL: none) and the
 * largest. */
typedef struct {
  const double *share;
  double top;
} pass_dot_heatmap;

void pass_node_io_text(const ir_graph *g, const ir_node *n, double share, char *buf, size_t cap) {
  FILE *f = fmemopen(buf, cap, "w");   /* cut at cap */
  if (!f) KILN_ICE("out of memory describing a node");
  for (int side = 0; side < 2; side++) {
    const int *ts = side ? n->out : n->in;
    int nt = side ? n->nout : n->nin, k = 0;
    fputs(side ? "\nout: " : "in: ", f);
    for (int j = 0; j < nt; j++) {
      if (ts[j] < 0) continue;
      const ir_tensor *t = ir_tensor_at(g, ts[j]);
      char ty[96];
      ir_type_str(t->dtype, &t->shape, ty, sizeof ty);
      fprintf(f, "%s%s", k++ ? ", " : "", ty);
    }
  }
  if (share >= 0) fprintf(f, "\n%.1f%% of the time", 100 * share);
  fclose(f);
  buf[cap - 1] = 0;   /* fmemopen leaves a full buffer unterminated */
}

/* tooltip="...": pass_node_io_text, shown on hover in the SVG. */
static void pass_dot_tooltip(const ir_graph *g, const ir_node *n, double share, FILE *out) {
  char io[2048];
  pass_node_io_text(g, n, share, io, sizeof io);
  fputs(", tooltip=\"", out);
  pass_dot_str(out, io);
  fputc('"', out);
}

/* " -> f32[64, 10]": the type of the first output node n writes, and the label's end. */
static void pass_dot_out_type(const ir_graph *g, const ir_node *n, FILE *out) {
  for (int j = 0; j < n->nout; j++) {
    if (n->out[j] < 0) continue;
    const ir_tensor *t = ir_tensor_at(g, n->out[j]);
    char ty[96];
    ir_type_str(t->dtype, &t->shape, ty, sizeof ty);
    fprintf(out, " -> %s", ty);
    break;
  }
  fputc('"', out);
}

/* A node: "name\nop -> f32[64, 10]" (the type of its first output it writes); `share` its
 * part of the profiled time, or -1. */
static void pass_dot_node(const ir_graph *g, const ir_node *n, const char *id, double share, const pass_dot_heatmap *h,
                          FILE *out) {
  fprintf(out, "    %s [%s, label=\"", id, pass_dot_node_style(n));
  pass_dot_str(out, n->name);
  fputs("\\n", out);
  pass_dot_str(out, ir_node_kind_name(n));
  pass_dot_out_type(g, n, out);
  if (h->share) pass_dot_heat(share, h->top, "rounded,filled", out);
  pass_dot_tooltip(g, n, share, out);
  fprintf(out, ", id=\"kiln_%s\"];\n", id);   /* the SVG element's id: the report's script counts them */
}

/* who[t]: the DOT id of the node (or fused member) that writes tensor t first; empty for a
 * tensor nothing in the graph writes. */
typedef struct { char (*who)[32]; } pass_dot_ids;

static void pass_dot_claim(const ir_node *n, const char *id, pass_dot_ids *ids) {
  for (int j = 0; j < n->nout; j++)
    if (n->out[j] >= 0 && !ids->who[n->out[j]][0]) snprintf(ids->who[n->out[j]], sizeof ids->who[0], "%s", id);
}

/* A tensor the graph does not compute (input, parameter, aux, optimizer state, constant)
 * is drawn once beside each reader, as node `id`, instead of once with an edge to every
 * reader: a parameter read by its forward node and again deep in the backward graph made
 * edges spanning the whole picture, and dot needed 15-85 s to place the ResNet train graph. */
static void pass_dot_source(const ir_graph *g, int t, const char *id, FILE *out) {
  const ir_tensor *x = ir_tensor_at(g, t);
  fprintf(out, "  %s [%s, label=\"", id, pass_dot_tensor_shape(x->kind));
  pass_dot_str(out, x->name);
  if (x->kind == IR_T_CONST) fprintf(out, " = %g", (double)x->value);
  else {
    char ty[96];
    ir_type_str(x->dtype, &x->shape, ty, sizeof ty);
    fprintf(out, "\\n%s", ty);
  }
  fputs("\"];\n", out);
}

/* The id to draw an edge from for tensor t read by `reader`: its writer's, or a fresh copy
 * of the tensor's own node. NULL when nothing writes t (a pruned slot). */
static const char *pass_dot_from(const ir_graph *g, int t, const char *reader, const pass_dot_ids *ids, char *buf,
                                 size_t cap, FILE *out) {
  if (ids->who[t][0]) return ids->who[t];
  if (ir_tensor_at(g, t)->kind == IR_T_VALUE) return NULL;
  snprintf(buf, cap, "t%d_%s", t, reader);
  pass_dot_source(g, t, buf, out);
  return buf;
}

/* The outline of a fused group: dashed blue for an elementwise group, solid orange for a heavy
 * op and its epilogue. */
static const char *pass_dot_group_color(const ir_node *n) { return n->epi ? "#e69138" : "#3c78d8"; }

/* A fused group drawn as one node: its name, member count and member ops, in order. */
static void pass_dot_group(const ir_graph *g, const ir_node *n, const char *id, double share, const pass_dot_heatmap *h,
                           FILE *out) {
  fprintf(out, "  %s [shape=box, style=\"rounded,%s,filled\", penwidth=2, color=\"%s\", fillcolor=\"%s\", label=\"", id,
          n->epi ? "solid" : "dashed", pass_dot_group_color(n), n->epi ? "#fdf1e3" : "#eef3fc");
  pass_dot_str(out, n->name);
  fprintf(out, n->epi ? " (%d ops, epilogue)\\n" : " (%d ops)\\n", n->nsub);
  for (int k = 0; k < n->nsub; k++) {
    if (k) fputs(k % 4 ? " \xc2\xb7 " : "\\n", out);   /* a middle dot; four ops a line */
    pass_dot_str(out, ir_node_kind_name(&n->sub[k]));
  }
  pass_dot_out_type(g, n, out);
  if (h->share) pass_dot_heat(share, h->top, n->epi ? "rounded,filled" : "rounded,dashed,filled", out);
  pass_dot_tooltip(g, n, share, out);
  fprintf(out, ", id=\"kiln_%s\"];\n", id);
}

/* Full view: each member its own node, outlined in the group's colour and named after it.
 * Not graphviz clusters: with clusters the ResNet train graph either took 31-85 s to lay out
 * (newrank) or failed in dot's ranking ("trouble in init_rank") without it. */
static void pass_dot_members(const ir_graph *g, int i, const pass_dot_heatmap *h, FILE *out, pass_dot_ids *ids) {
  const ir_node *n = ir_node_at(g, i);
  for (int k = 0; k < n->nsub; k++) {
    char id[32];
    snprintf(id, sizeof id, "n%d_%d", i, k);
    pass_dot_node(g, &n->sub[k], id, h->share ? h->share[i] : -1, h, out);
    fprintf(out, "    %s [color=\"%s\", style=\"rounded,%s%s\", xlabel=\"", id, pass_dot_group_color(n), n->epi ? "solid" : "dashed",
            h->share ? ",filled" : "");
    pass_dot_str(out, n->name);
    fprintf(out, "\", fontcolor=\"%s\", fontsize=8];\n", pass_dot_group_color(n));
    pass_dot_claim(&n->sub[k], id, ids);
  }
}

static void pass_dot_nodes(const ir_graph *g, bool full, const pass_dot_heatmap *h, FILE *out, pass_dot_ids *ids) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    double share = h->share ? h->share[i] : -1;
    char id[32];
    snprintf(id, sizeof id, "n%d", i);
    if (n->kind != IR_N_FUSED) pass_dot_node(g, n, id, share, h, out);
    else if (!full) pass_dot_group(g, n, id, share, h, out);
    else {
      pass_dot_members(g, i, h, out, ids);
      continue;
    }
    pass_dot_claim(n, id, ids);
  }
}

/* One edge per (writer, reader, tensor), labelled with the tensor's name. The label is an
 * xlabel: a plain edge label becomes a node of its own in dot's ranking and doubles the
 * ranks. */
static void pass_dot_reads(const ir_graph *g, const ir_node *n, const char *id, const pass_dot_ids *ids, FILE *out) {
  for (int j = 0; j < n->nin; j++) {
    int t = n->in[j];
    bool dup = false;
    for (int k = 0; k < j; k++) dup |= n->in[k] == t;
    char buf[64];
    const char *from = t < 0 || dup ? NULL : pass_dot_from(g, t, id, ids, buf, sizeof buf, out);
    if (!from) continue;
    fprintf(out, "  %s -> %s [xlabel=\"", from, id);
    pass_dot_str(out, ir_tensor_at(g, t)->name);
    fputs("\", fontsize=9];\n", out);
  }
}

static void pass_dot_edges(const ir_graph *g, bool full, FILE *out, const pass_dot_ids *ids) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    char id[32];
    if (n->kind != IR_N_FUSED || !full) {
      snprintf(id, sizeof id, "n%d", i);
      pass_dot_reads(g, n, id, ids, out);
      continue;
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
    char id[32], buf[64];
    snprintf(id, sizeof id, "r%d", i);
    const char *from = t < 0 ? NULL : pass_dot_from(g, t, id, ids, buf, sizeof buf, out);
    if (!from) continue;      /* an output train_step does not compute */
    fprintf(out, "  r%d [shape=doubleoctagon, label=\"%s ", i, i < g->outputs.len ? "output" : "loss");
    pass_dot_str(out, ir_tensor_at(g, t)->name);
    fprintf(out, "\"];\n  %s -> r%d;\n", from, i);
  }
}

/* Plain ranking (no `newrank`, no clusters), edge labels as xlabels and sources copied per
 * reader: dot lays out every example's graph in under a second. */
void pass_write_dot(const ir_graph *g, bool full, const double *share, FILE *out) {
  pass_dot_heatmap h = {share, 0};
  for (int i = 0; share && i < ir_nnodes(g); i++) h.top = share[i] > h.top ? share[i] : h.top;
  pass_dot_ids ids = {calloc((size_t)ir_ntensors(g) + 1, sizeof *ids.who)};
  if (!ids.who) KILN_ICE("out of memory writing DOT");
  fputs("digraph \"", out);
  pass_dot_str(out, g->name);
  fputs("\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\"];\n", out);
  pass_dot_nodes(g, full, &h, out, &ids);
  pass_dot_edges(g, full, out, &ids);
  pass_dot_results(g, out, &ids);
  fputs("}\n", out);
  free(ids.who);
}
