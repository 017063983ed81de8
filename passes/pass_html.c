/* pass_html.c — `kiln passes FILE --html report.html`: one self-contained HTML page (no
 * network, no external file) holding the graph after the passes as SVG (graphviz's layout of
 * pass_write_dot's text, which the tool runs, or the layered layout below when graphviz is
 * missing, fails or the graph is too large for it), the memory plan as a timeline (each arena
 * buffer a bar from the step that writes it to the last that reads it, at its arena offset),
 * the pass table, and, with a profile, each node filled by its share of the time and the
 * costliest steps listed. A small script counts what the page drew into #counts and catches
 * errors into #errors, so a headless browser's dump of the page says both. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

/* Text for HTML and SVG, in element content and in quoted attributes alike. */
static void pass_html_str(FILE *out, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", out); break;
    case '<': fputs("&lt;", out); break;
    case '>': fputs("&gt;", out); break;
    case '"': fputs("&quot;", out); break;
    case '\'': fputs("&#39;", out); break;
    default: fputc(*s, out);
    }
  }
}

static const char pass_html_style[] =
    "body{font-family:Helvetica,Arial,sans-serif;margin:1.5em;color:#222}"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}"
    "table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}"
    ".scroll{overflow:auto;max-height:80vh;border:1px solid #ddd}#graph svg{width:100%;height:auto}"
    ".legend span{display:inline-block;margin-right:1.2em}"
    ".sw{display:inline-block;width:0.9em;height:0.9em;vertical-align:middle;margin-right:0.3em;border:1px solid #888}"
    "rect.buf{fill:#9fc5e8;stroke:#3d85c6;stroke-width:0.5}rect.buf.inplace{fill:#b6d7a8;stroke:#6aa84f}"
    "rect.buf.concat{fill:#ffe599;stroke:#bf9000}rect.ws{fill:#d5a6bd;stroke:#a64d79;stroke-width:0.5}"
    "rect:hover{stroke:#000;stroke-width:1.5}"
    "#graph-own g.node rect{fill:#fff;stroke:#555}#graph-own g.node.fused rect{stroke:#3c78d8;stroke-dasharray:4 2}"
    "#graph-own g.node.epilogue rect{stroke:#e69138;stroke-width:2}#graph-own g.node.backward rect{fill:#f4cccc}"
    "#graph-own g.node.update rect{fill:#d9ead3}#graph-own line{stroke:#999}"
    "#errors{color:#c00}";

/* The pass table, as `--stats` prints it. */
static void pass_html_passes(const pass_ctx *cx, FILE *out) {
  fputs("<h2>Passes</h2>\n<table id=\"passes\"><tr><th>pass</th><th>nodes</th><th>fused groups</th><th>in-place pairs</th>"
        "<th>kept blocked</th><th>bytes freed by pruning</th><th>ms</th></tr>\n", out);
  for (int i = 0; i < PASS_COUNT; i++) {
    const pass_stats *s = &cx->stats[i];
    if (!s->ran) continue;
    bool off = pass_table[i].optional && (cx->disabled >> i & 1);
    fprintf(out, "<tr><td>%s%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%lld</td><td>%.3f</td></tr>\n",
            pass_table[i].name, off ? " (switched off)" : "", s->nodes, s->fused_groups, s->inplace_pairs, s->blocked,
            (long long)s->bytes_freed, s->ms);
  }
  fputs("</table>\n", out);
}

/* ---- the memory timeline ---- */

enum { PASS_TL_W = 1100, PASS_TL_H = 420, PASS_TL_LEFT = 70, PASS_TL_TOP = 10 };

/* One bar: [x0, x1) node positions, [y0, y0 + bytes) arena bytes, its class and hover text. */
static void pass_html_bar(FILE *out, double sx, double sy, int x0, int x1, int64_t y0, int64_t bytes, const char *cls,
                          const char *what, const ir_graph *g, const ir_buffer *b) {
  double h = (double)bytes * sy;
  fprintf(out, "<rect class=\"%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"><title>", cls,
          PASS_TL_LEFT + x0 * sx, PASS_TL_TOP + (double)y0 * sy, (x1 - x0) * sx, h < 0.6 ? 0.6 : h);
  pass_html_str(out, what);
  fprintf(out, "\n%lld bytes at offset %lld, nodes %d to %d", (long long)bytes, (long long)y0, x0, x1 - 1);
  if (b && b->share >= 0) fputs("\nreuses the buffer of ", out), pass_html_str(out, ir_tensor_at(g, b->share)->name);
  if (b && b->within >= 0) {
    fputs("\nwritten in place inside ", out), pass_html_str(out, ir_tensor_at(g, b->within)->name);
    fprintf(out, " at byte %lld", (long long)b->within_at);
    if (b->sample_bytes > 0) fprintf(out, ", samples %lld bytes apart", (long long)b->sample_bytes);
  }
  fputs("</title></rect>\n", out);
}

/* Every arena buffer and workspace as a bar, x the node positions it lives over, y its bytes in
 * the arena: the bars that share a height are the plan's reuse, the green ones a value written
 * in place over another, the yellow ones pieces of a concat's output. */
static void pass_html_memory(const ir_graph *g, const ir_plan *p, FILE *out) {
  int nn = ir_nnodes(g) ? ir_nnodes(g) : 1;
  int64_t arena = p->arena_bytes > 0 ? p->arena_bytes : 1;
  double sx = (double)PASS_TL_W / nn, sy = (double)PASS_TL_H / (double)arena;
  fputs("<h2>Memory plan</h2>\n<p>Planned arena ", out);
  pass_print_bytes(out, p->arena_bytes);
  fputs(" against ", out);
  pass_print_bytes(out, p->naive_bytes);
  fprintf(out, " with every intermediate%s and workspace in a buffer of its own (%.1f%%). Each bar is a buffer, from "
               "the node that writes it to the last that reads it (x), at its place in the arena (y); hover for its "
               "name.</p>\n", g->mode == IR_MODE_TRAIN ? ", gradient" : "",
          p->naive_bytes ? 100.0 * (double)p->arena_bytes / (double)p->naive_bytes : 0.0);
  fputs("<p class=\"legend\"><span><i class=\"sw\" style=\"background:#9fc5e8\"></i>a buffer</span>"
        "<span><i class=\"sw\" style=\"background:#b6d7a8\"></i>written in place over another</span>"
        "<span><i class=\"sw\" style=\"background:#ffe599\"></i>a piece of a concat's output</span>"
        "<span><i class=\"sw\" style=\"background:#d5a6bd\"></i>a kernel's workspace</span></p>\n", out);
  fprintf(out, "<div class=\"scroll\"><svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\">\n",
          PASS_TL_LEFT + PASS_TL_W + 20, PASS_TL_TOP + PASS_TL_H + 40);
  fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#888\"/>\n", PASS_TL_LEFT, PASS_TL_TOP,
          PASS_TL_W, PASS_TL_H);
  for (int t = 0; t < ir_ntensors(g); t++) {
    const ir_buffer *b = &p->buf[t];
    if (b->cls != IR_MEM_ARENA || b->first < 0) continue;
    const char *cls = b->within >= 0 ? "buf concat" : b->share >= 0 ? "buf inplace" : "buf";
    pass_html_bar(out, sx, sy, b->first, (b->last > b->first ? b->last : b->first) + 1, b->offset, b->bytes, cls,
                  ir_tensor_at(g, t)->name, g, b);
  }
  for (int i = 0; i < ir_nnodes(g); i++) {
    if (!p->temp_bytes[i]) continue;
    char what[200];
    snprintf(what, sizeof what, "workspace of %s", ir_node_at(g, i)->name);
    pass_html_bar(out, sx, sy, i, i + 1, p->temp_offset[i], p->temp_bytes[i], "ws", what, g, NULL);
  }
  fprintf(out, "<text x=\"%d\" y=\"%d\" font-size=\"11\">node position (0 to %d)</text>\n", PASS_TL_LEFT, PASS_TL_TOP + PASS_TL_H + 16,
          nn - 1);
  fprintf(out, "<text x=\"4\" y=\"%d\" font-size=\"11\">offset 0</text>\n<text x=\"4\" y=\"%d\" font-size=\"11\">", PASS_TL_TOP + 10,
          PASS_TL_TOP + PASS_TL_H);
  pass_print_bytes(out, p->arena_bytes);
  fputs("</text>\n</svg></div>\n", out);
}

/* ---- the graph, laid out by Kiln when graphviz does not ---- */

enum { PASS_OWN_W = 190, PASS_OWN_H = 64, PASS_OWN_BOX_W = 170, PASS_OWN_BOX_H = 36 };

/* The node that writes each tensor first, or -1 (inputs, parameters). */
static int *pass_html_writers(const ir_graph *g) {
  int nt = ir_ntensors(g), *writer = malloc(sizeof *writer * ((size_t)nt + 1));
  if (!writer) KILN_ICE("out of memory writing the report");
  for (int t = 0; t < nt; t++) writer[t] = -1;
  for (int i = ir_nnodes(g) - 1; i >= 0; i--)
    for (int j = 0; j < ir_node_at(g, i)->nout; j++)
      if (ir_node_at(g, i)->out[j] >= 0) writer[ir_node_at(g, i)->out[j]] = i;
  return writer;
}

/* Layer of each node: one below the deepest node that writes one of its inputs (the nodes are
 * in execution order, so every writer comes first). */
static int *pass_html_layers(const ir_graph *g, const int *writer, int *nlayers) {
  int nn = ir_nnodes(g), *layer = calloc((size_t)nn + 1, sizeof *layer);
  if (!layer) KILN_ICE("out of memory writing the report");
  *nlayers = 0;
  for (int i = 0; i < nn; i++) {
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; j < n->nin; j++) {
      int w = n->in[j] >= 0 ? writer[n->in[j]] : -1;
      if (w >= 0 && w < i && layer[w] + 1 > layer[i]) layer[i] = layer[w] + 1;
    }
    if (layer[i] + 1 > *nlayers) *nlayers = layer[i] + 1;
  }
  return layer;
}

static const char *pass_html_node_class(const ir_node *n) {
  switch (n->kind) {
  case IR_N_FUSED: return n->epi ? "node epilogue" : "node fused";
  case IR_N_BACKWARD: return "node backward";
  case IR_N_UPDATE: return "node update";
  default: return "node";
  }
}

/* A node's box: its name and op, the shapes on hover, filled by its share when profiled. */
static void pass_html_own_node(const ir_graph *g, int i, double x, double y, double share, double top, FILE *out) {
  const ir_node *n = ir_node_at(g, i);
  fprintf(out, "<g id=\"kiln_n%d\" class=\"%s\"><title>", i, pass_html_node_class(n));
  pass_html_str(out, n->name);
  fputs(": ", out), pass_html_str(out, ir_node_kind_name(n)), fputc('\n', out);
  char io[2048];
  pass_node_io_text(g, n, share, io, sizeof io);
  pass_html_str(out, io);
  fprintf(out, "</title><rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" rx=\"5\"", x, y, PASS_OWN_BOX_W, PASS_OWN_BOX_H);
  if (share >= 0) {
    char rgb[8];
    pass_heat_color(share, top, rgb);
    fprintf(out, " style=\"fill:%s\"", rgb);
  }
  fprintf(out, "/><text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">", x + PASS_OWN_BOX_W / 2.0, y + 15);
  char name[28];
  snprintf(name, sizeof name, "%s", n->name);   /* long names cut; the title holds the whole */
  pass_html_str(out, name);
  fprintf(out, "</text><text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\" fill=\"#555\">", x + PASS_OWN_BOX_W / 2.0, y + 29);
  pass_html_str(out, ir_node_kind_name(n));
  fputs("</text></g>\n", out);
}

/* The layered layout: row = layer, nodes of a layer left to right in execution order, an
 * edge from each input's writer. Linear in the graph's size, for graphs dot cannot place in
 * time. */
static void pass_html_own_graph(const ir_graph *g, const double *share, FILE *out) {
  int nn = ir_nnodes(g), nl, width = 1, *writer = pass_html_writers(g);
  int *layer = pass_html_layers(g, writer, &nl), *slot = calloc((size_t)nn + 1, sizeof *slot), *fill = calloc((size_t)nl + 1, sizeof *fill);
  if (!slot || !fill) KILN_ICE("out of memory writing the report");
  for (int i = 0; i < nn; i++) slot[i] = fill[layer[i]]++, width = fill[layer[i]] > width ? fill[layer[i]] : width;
  double top = 0;
  for (int i = 0; share && i < nn; i++) top = share[i] > top ? share[i] : top;
  int sw = width * PASS_OWN_W + 20, sh = nl * PASS_OWN_H + 20;
  fprintf(out, "<svg id=\"graph-own\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n", sw, sh, sw,
          sh);
  for (int i = 0; i < nn; i++) {   /* edges first, under the boxes */
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; j < n->nin; j++) {
      int w = n->in[j] >= 0 ? writer[n->in[j]] : -1;
      if (w >= 0 && w < i)
        fprintf(out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", 10 + slot[w] * PASS_OWN_W + PASS_OWN_BOX_W / 2.0,
                10 + layer[w] * PASS_OWN_H + PASS_OWN_BOX_H, 10 + slot[i] * PASS_OWN_W + PASS_OWN_BOX_W / 2.0, 10 + layer[i] * PASS_OWN_H);
    }
  }
  for (int i = 0; i < nn; i++)
    pass_html_own_node(g, i, 10 + slot[i] * PASS_OWN_W, 10 + layer[i] * PASS_OWN_H, share ? share[i] : -1, top, out);
  fputs("</svg>\n", out);
  free(layer), free(slot), free(fill), free(writer);
}

/* graphviz's SVG without its XML declaration and DOCTYPE, which may not stand inside HTML. */
static void pass_html_embed_svg(const char *svg, FILE *out) {
  const char *at = strstr(svg, "<svg");
  fputs(at ? at : svg, out);
}

static void pass_html_graph(const ir_graph *g, const pass_html_in *in, FILE *out) {
  fputs("<h2>Graph</h2>\n<p class=\"legend\"><span><i class=\"sw\" style=\"border:2px dashed #3c78d8\"></i>an elementwise "
        "group, one loop</span><span><i class=\"sw\" style=\"border:2px solid #e69138\"></i>a convolution or product with its "
        "epilogue</span><span><i class=\"sw\" style=\"background:#f4cccc\"></i>backward</span><span><i class=\"sw\" "
        "style=\"background:#d9ead3\"></i>optimizer update</span>", out);
  if (in->share) fputs("<span><i class=\"sw\" style=\"background:#e06666\"></i>the most time (white: none)</span>", out);
  fputs("</p>\n<p>", out);
  pass_html_str(out, in->graph_note ? in->graph_note : "");
  fputs(" Hover over a node for the shapes it reads and writes. <button id=\"zoom\">actual size</button></p>\n"
        "<div class=\"scroll\" id=\"graph\">\n", out);
  if (in->graph_svg) pass_html_embed_svg(in->graph_svg, out);
  else pass_html_own_graph(g, in->share, out);
  fputs("</div>\n", out);
}

/* The nodes that took the most time, from the profile. */
static void pass_html_profile(const ir_graph *g, const pass_html_in *in, FILE *out) {
  int nn = ir_nnodes(g), *order = malloc(sizeof *order * ((size_t)nn + 1));
  if (!order) KILN_ICE("out of memory writing the report");
  for (int i = 0; i < nn; i++) order[i] = i;
  for (int i = 1; i < nn; i++)   /* insertion sort by share, largest first: a few hundred nodes */
    for (int j = i; j > 0 && in->share[order[j]] > in->share[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  fputs("<h2>Profile</h2>\n<p>", out);
  pass_html_str(out, in->profile_note ? in->profile_note : "");
  fputs("</p>\n<table id=\"profile\"><tr><th>node</th><th>op</th><th>share of the time</th></tr>\n", out);
  for (int k = 0; k < nn && k < 20 && in->share[order[k]] > 0; k++) {
    const ir_node *n = ir_node_at(g, order[k]);
    fputs("<tr><td>", out), pass_html_str(out, n->name), fputs("</td><td>", out);
    pass_html_str(out, ir_node_kind_name(n));
    fprintf(out, "</td><td>%.1f%%</td></tr>\n", 100 * in->share[order[k]]);
  }
  fputs("</table>\n", out);
  free(order);
}

/* Counts of what was drawn, and any script error, written into the page for a headless
 * browser's DOM dump to read back (tests/tools/report.sh). */
static const char pass_html_script[] =
    "<script>\n"
    "window.addEventListener('error',function(e){document.getElementById('errors').textContent+=e.message+'\\n';});\n"
    "window.addEventListener('load',function(){\n"
    "  var z=document.getElementById('zoom'),s=document.querySelector('#graph svg'),big=false;\n"
    "  z.onclick=function(){big=!big;s.style.width=big?s.getAttribute('width'):'';s.style.height=big?s.getAttribute('height'):'';\n"
    "    z.textContent=big?'fit to the width':'actual size';};\n"
    "  var q=function(s){return document.querySelectorAll(s).length;};\n"
    "  document.getElementById('counts').textContent='graph-nodes='+q('#graph [id^=\"kiln_n\"]')+' graph-svg='+q('#graph svg')+\n"
    "    ' timeline-bars='+q('#timeline rect.buf')+' timeline-workspaces='+q('#timeline rect.ws')+' pass-rows='+\n"
    "    (q('#passes tr')-1)+' profile-rows='+Math.max(0,q('#profile tr')-1);\n"
    "});\n"
    "</script>\n";

void pass_write_html(const ir_graph *g, const pass_ctx *cx, const pass_html_in *in, FILE *out) {
  const char *mode = g->mode == IR_MODE_TRAIN ? "train_step" : "predict";
  int groups = 0, epi = 0;
  for (int i = 0; i < ir_nnodes(g); i++) groups += ir_node_at(g, i)->kind == IR_N_FUSED, epi += ir_node_at(g, i)->epi != NULL;
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>kiln report: ", out);
  pass_html_str(out, g->name);
  fprintf(out, " %s</title>\n<style>%s</style>\n</head><body>\n<h1>", mode, pass_html_style);
  pass_html_str(out, g->name);
  fprintf(out, ": %s after the passes</h1>\n<p>%d nodes, of them %d fused groups (%d a heavy op with its epilogue), over %d "
               "tensors.</p>\n", mode, ir_nnodes(g), groups, epi, ir_ntensors(g));
  pass_html_passes(cx, out);
  pass_html_graph(g, in, out);
  if (g->plan) pass_html_memory(g, g->plan, out);
  if (in->share) pass_html_profile(g, in, out);
  fputs("<h2>Page</h2>\n<pre id=\"counts\"></pre>\n<pre id=\"errors\"></pre>\n", out);
  fputs(pass_html_script, out);
  fputs("</body></html>\n", out);
}
