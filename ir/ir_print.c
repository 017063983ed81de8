/* ir_print.c — two views of a graph. ir_print writes it as a flat .kiln model (every
 * parameter declared with its shape and initializer, every attribute explicit) that parses
 * back to the same graph, and ir_print_dims one with bounded dims, its sizes written over
 * them; ir_print_summary writes the `kiln check` table. */
#include "ops.h"

#include <stdlib.h>
#include <string.h>

/* What the .kiln printer needs besides the graph: with d, g's bounded dims, whose probes give
 * each size's form, and where a size the text cannot write is reported (ir_print_dims); with
 * no d every size is the number the graph holds (ir_print). */
typedef struct {
  const ir_graph *g;
  FILE *out;
  ir_diag *d;
  int errors;
  int node;            /* the node whose attributes are being printed */
} ir_printer;

static void ir_print_type(const ir_tensor *t, FILE *out) {
  char buf[160];
  ir_type_str(t->dtype, &t->shape, buf, sizeof buf);
  fputs(buf, out);
}

/* ---- sizes that follow bounded dims (ir_print_dims) ---- */

/* The form of a size that is v0 at the bound and vp[p] in probe p. The front end fitted every
 * size before it handed the graph over (fe_dims.c), so none can fail here. */
static k_dimval ir_print_fit(const ir_graph *g, int64_t v0, const int64_t *vp) {
  k_dimval v;
  if (ir_dims_fit(g, v0, vp, &v)) KILN_ICE("a size of %lld at the bound follows no form of the bounded dims", (long long)v0);
  return v;
}

static k_dimval ir_print_axis_fit(const ir_graph *g, int t, int axis) {
  int64_t vp[K_MAX_BDIMS + 1];
  for (int p = 0; p < ir_dims_nprobes(g->nbdims); p++) vp[p] = ir_tensor_at(g->probes[p], t)->shape.d[axis];
  return ir_print_fit(g, ir_tensor_at(g, t)->shape.d[axis], vp);
}

static k_dimval ir_print_item_fit(const ir_graph *g, int node, const ir_attr_def *a, int i) {
  int64_t vp[K_MAX_BDIMS + 1];
  for (int p = 0; p < ir_dims_nprobes(g->nbdims); p++) vp[p] = ir_attr_int_item(a, ir_node_at(g->probes[p], node)->param, i);
  return ir_print_fit(g, ir_attr_int_item(a, ir_node_at(g, node)->param, i), vp);
}

/* v as .kiln arithmetic over the dims: "16", "batch", "-batch", "2 * batch * seq - 1". */
static void ir_dimval_str(const ir_graph *g, k_dimval v, char *buf, size_t n) {
  if (!v.mask) return (void)snprintf(buf, n, "%lld", (long long)v.b);
  size_t k = 0;
  buf[0] = 0;
  if (v.a == -1) k = (size_t)snprintf(buf, n, "-");
  else if (v.a != 1) k = (size_t)snprintf(buf, n, "%lld * ", (long long)v.a);
  const char *sep = "";
  for (int d = 0; d < g->nbdims && k < n; d++) {
    if (!(v.mask >> d & 1)) continue;
    k += (size_t)snprintf(buf + k, n - k, "%s%s", sep, g->bdims[d].name);
    sep = " * ";
  }
  if (v.b && k < n) snprintf(buf + k, n - k, " %c %lld", v.b < 0 ? '-' : '+', (long long)(v.b < 0 ? -v.b : v.b));
}

/* A declared type with its axes over the dims: "f32[batch, 3, 32, 32]". A .kiln shape entry
 * is a number or a dim's name (SPEC section 1), so an axis of any other form (2 * batch) is
 * reported instead: the text would declare the bound's size, and lower to another model. */
static void ir_print_dims_type(ir_printer *p, int ti) {
  const ir_tensor *t = ir_tensor_at(p->g, ti);
  char e[256];
  fprintf(p->out, "%s[", ir_dtype_name(t->dtype));
  for (int i = 0; i < t->shape.rank; i++) {
    k_dimval v = ir_print_axis_fit(p->g, ti, i);
    ir_dimval_str(p->g, v, e, sizeof e);
    fprintf(p->out, "%s%s", i ? ", " : "", e);
    if (!v.mask || (v.a == 1 && !v.b && __builtin_popcount(v.mask) == 1)) continue;
    ir_error(p->d, t->loc, "tensor '%s' has axis %d of size %s over the bounded dims: a .kiln shape holds only numbers "
             "and dim names, so the text cannot declare it; import at one size instead", t->name, i, e);
    p->errors++;
  }
  fputc(']', p->out);
}

/* ir_attr_item_fn: item i of attribute a of the node being printed, over the dims. */
static void ir_print_dims_item(void *ctx, const ir_attr_def *a, int i, FILE *out) {
  ir_printer *p = ctx;
  char e[256];
  ir_dimval_str(p->g, ir_print_item_fit(p->g, p->node, a, i), e, sizeof e);
  fputs(e, out);
}

static void ir_print_decl_type(ir_printer *p, int ti) {
  if (p->d) ir_print_dims_type(p, ti);
  else ir_print_type(ir_tensor_at(p->g, ti), p->out);
}

static void ir_print_init(const ir_init *in, FILE *out) {
  const ir_init_def *def = &ir_inits[in->kind];
  fprintf(out, "%s(", def->name);
  ir_attr_print(def->attrs, in, out);
  fputc(')', out);
}

static void ir_print_decls(ir_printer *p) {
  const ir_graph *g = p->g;
  FILE *out = p->out;
  for (int i = 0; i < ir_ntensors(g); i++) {
    const ir_tensor *t = ir_tensor_at(g, i);
    if (t->kind != IR_T_INPUT) continue;
    fprintf(out, "  input %s : ", t->name);
    ir_print_decl_type(p, i);
    fputc('\n', out);
  }
  for (int i = 0; i < ir_ntensors(g); i++) {
    const ir_tensor *t = ir_tensor_at(g, i);
    if (t->kind == IR_T_STATE) {
      fprintf(out, "  # optimizer state %s : ", t->name);
      ir_print_type(t, out);
      fputc('\n', out);
    }
    if (t->kind != IR_T_PARAM && t->kind != IR_T_AUX) continue;
    fprintf(out, "  %s %s : ", t->fixed ? "const" : "param", t->name);
    ir_print_decl_type(p, i);
    fputs(" = ", out);
    ir_print_init(&t->init, out);
    fputc('\n', out);
  }
}

static void ir_print_operand(const ir_graph *g, int ti, FILE *out) {
  const ir_tensor *t = ir_tensor_at(g, ti);
  if (t->kind == IR_T_CONST) ir_print_float(out, t->value);
  else fputs(t->name, out);
}

/* After the passes a node may be a backward, an update or a fused group; those print in the
 * same shape (targets = kind(inputs)) with '-' for an absent slot, and comments carry what
 * the passes decided (OpReqType, in-place reuse), so forward graphs still parse back. */
static void ir_print_tensor_list(const ir_graph *g, const int *ts, int n, FILE *out) {
  for (int i = 0; i < n; i++) {
    if (i) fputs(", ", out);
    if (ts[i] < 0) fputc('-', out);
    else ir_print_operand(g, ts[i], out);
  }
}

/* The layout pass's decision on a convolution: "blocked[16]: in x, out y" (or "epilogue
 * operands" when only those are blocked: the result is converted after the epilogue); on a
 * pooling, "blocked[16]: in x" and ", out y" when its output is blocked too; on a channel
 * scale viewed blocked (view_shape), "blocked[16]: in x, out y"; on a channel concat of blocked
 * pieces, "blocked[16]: in a, b, out y". Returns whether the comment
 * has begun (any, or by this). */
static bool ir_print_layout(const ir_graph *g, const ir_node *n, bool any, FILE *out) {
  if (n->view_shape && n->nin == 2 && n->nout == 1) {   /* the data slot is viewed as the output is */
    int d = ir_shape_eq(&n->view_shape[0], &n->view_shape[2]) ? 0 : 1;
    fprintf(out, "%sblocked[%lld]: in %s, out %s", any ? "; " : "  # ", (long long)n->view_shape[2].d[4],
            ir_tensor_at(g, n->in[d])->name, ir_tensor_at(g, n->out[0])->name);
    return true;
  }
  const k_pool_param *pp = n->op == IR_OP_pooling && n->kind == IR_N_OP ? n->param : NULL;
  if (pp && pp->in_block) {
    fprintf(out, "%sblocked[%d]: in %s", any ? "; " : "  # ", pp->in_block, ir_tensor_at(g, n->in[0])->name);
    if (pp->out_block) fprintf(out, ", out %s", ir_tensor_at(g, n->out[0])->name);
    return true;
  }
  if (n->op == IR_OP_concat && n->kind == IR_N_OP && n->nout == 1 && n->out[0] >= 0 && ir_tensor_at(g, n->out[0])->block) {
    fprintf(out, "%sblocked[%d]: in", any ? "; " : "  # ", ir_tensor_at(g, n->out[0])->block);
    for (int j = 0; j < n->nin; j++) fprintf(out, "%s %s", j ? "," : "", ir_tensor_at(g, n->in[j])->name);
    fprintf(out, ", out %s", ir_tensor_at(g, n->out[0])->name);
    return true;
  }
  const k_conv_param *p = n->op == IR_OP_convolution && (n->kind == IR_N_OP || n->epi) ? n->param : NULL;
  if (!p || (!p->in_block && !p->epi_block)) return any;
  fprintf(out, "%sblocked[%d]:", any ? "; " : "  # ", p->in_block ? p->in_block : p->epi_block);
  const char *sep = " ";
  if (p->in_block) fprintf(out, "%sin %s", sep, ir_tensor_at(g, n->in[0])->name), sep = ", ";
  if (p->epi_block && !p->out_block && n->epi) fprintf(out, "%sepilogue operands", sep), sep = ", ";
  if (p->out_block) fprintf(out, "%sout %s", sep, ir_tensor_at(g, n->out[0])->name);
  return true;
}

/* The simplify pass's matmul that reads or writes a head split in place: "stored swapped: a,
 * out" (k_matmul_param.swap_*). */
static void ir_print_swaps(const ir_node *n, bool any, FILE *out) {
  const k_matmul_param *p = n->op == IR_OP_matmul && n->kind == IR_N_OP ? n->param : NULL;
  if (!p || !(p->swap_a || p->swap_b || p->swap_c)) return;
  fprintf(out, "%sstored swapped:%s%s%s", any ? "; " : "  # ", p->swap_a ? " a" : "", p->swap_b ? " b" : "",
          p->swap_c ? " out" : "");
}

static void ir_print_annotations(const ir_graph *g, const ir_node *n, FILE *out) {
  bool any = false;
  for (int i = 0; i < n->nout; i++) {
    k_req r = ir_node_req(n, i);
    int ip = n->inplace ? n->inplace[i] : -1;
    if (r == kWriteTo && ip < 0) continue;
    fprintf(out, "%s%s", any ? ", " : "  # ", n->out[i] >= 0 ? ir_tensor_at(g, n->out[i])->name : "-");
    if (r != kWriteTo) fprintf(out, " %s", r == kAddTo ? "kAddTo" : r == kWriteInplace ? "kWriteInplace" : "kNullOp");
    if (ip >= 0 && n->in[ip] >= 0) fprintf(out, " reuses %s", ir_tensor_at(g, n->in[ip])->name);
    any = true;
  }
  ir_print_swaps(n, ir_print_layout(g, n, any, out), out);
}

static void ir_print_pass_node(const ir_graph *g, const ir_node *n, FILE *out, int depth) {
  fprintf(out, "%*s", 2 * depth, "");
  if (n->nout) {
    ir_print_tensor_list(g, n->out, n->nout, out);
    fputs(" = ", out);
  }
  fprintf(out, "%s(", ir_node_kind_name(n));
  ir_print_tensor_list(g, n->in, n->nin, out);
  fputc(')', out);
  ir_print_annotations(g, n, out);
  fputc('\n', out);
  for (int i = 0; i < n->nsub; i++) ir_print_pass_node(g, &n->sub[i], out, depth + 2);
}

static void ir_print_node(ir_printer *p, int ni) {
  const ir_graph *g = p->g;
  const ir_node *n = ir_node_at(g, ni);
  FILE *out = p->out;
  if (n->kind != IR_N_OP) return ir_print_pass_node(g, n, out, 1);
  const ir_opdef *op = &ir_ops[n->op];          /* only OP nodes index the op table here */
  fprintf(out, "  %s = %s(", n->name, op->name);
  for (int i = 0; i < n->nin; i++) {
    if (i) fputs(", ", out);
    ir_print_operand(g, n->in[i], out);
  }
  if (op->attrs) {
    fputs(", ", out);
    p->node = ni;
    ir_attr_print_with(op->attrs, n->param, out, p->d ? ir_print_dims_item : NULL, p);
  }
  fputc(')', out);
  ir_print_annotations(g, n, out);
  fputc('\n', out);
}

/* "loss with sgd(lr=0.05, momentum=0.9, wd=0.0)" */
static void ir_print_train_target(const ir_graph *g, FILE *out) {
  const ir_optim_def *od = &ir_optims[g->optim.kind];
  fprintf(out, "%s with %s(", ir_tensor_at(g, g->loss)->name, od->name);
  ir_attr_print(od->attrs, &g->optim, out);
  fputc(')', out);
  if (g->optim.sched.kind != K_SCHED_NONE) {
    const ir_sched_def *sd = &ir_scheds[g->optim.sched.kind];
    fprintf(out, " schedule %s(", sd->name);
    ir_attr_print(sd->attrs, &g->optim.sched, out);
    fputc(')', out);
  }
  if (g->optim.clip_norm > 0) fputs(" clip_norm=", out), ir_print_float(out, g->optim.clip_norm);
  for (int i = 0, first = 1; i < IR_WDX_COUNT; i++)
    if (g->optim.wd_exclude & (1u << i)) fprintf(out, "%s%s", first ? " wd_exclude=" : ",", ir_wdx_names[i]), first = 0;
  fputc('\n', out);
}

static void ir_print_train(const ir_graph *g, FILE *out) {
  fputs("  train ", out);
  ir_print_train_target(g, out);
}

static void ir_print_model(ir_printer *p) {
  const ir_graph *g = p->g;
  FILE *out = p->out;
  fprintf(out, "model %s {\n", g->name);
  ir_print_decls(p);
  for (int i = 0; i < ir_nnodes(g); i++) ir_print_node(p, i);
  /* A train graph computes only the loss: outputs nothing produces are not printed. */
  int shown = 0;
  for (int i = 0; i < g->outputs.len; i++) {
    const ir_tensor *t = ir_tensor_at(g, IR_VEC_AT(g->outputs, int, i));
    if (t->kind == IR_T_VALUE && t->producer < 0) continue;
    fprintf(out, "%s%s", shown++ ? ", " : "  output ", t->name);
  }
  if (shown) fputc('\n', out);
  if (g->has_train) ir_print_train(g, out);
  fputs("}\n", out);
}

void ir_print(const ir_graph *g, FILE *out) { ir_print_model(&(ir_printer){.g = g, .out = out}); }

int ir_print_dims(const ir_graph *g, FILE *out, ir_diag *d) {
  if (!g->nbdims || !g->probes) return ir_print(g, out), 0;
  ir_printer p = {.g = g, .out = out, .d = d};
  for (int i = 0; i < g->nbdims; i++)
    fprintf(out, "dim %s = %lld..%lld\n", g->bdims[i].name, (long long)g->bdims[i].lo, (long long)g->bdims[i].hi);
  fputc('\n', out);
  ir_print_model(&p);
  return p.errors;
}

/* ---- the `kiln check` table ---- */

/* 1234567 -> "1.23M": FLOPs and counts at a glance; totals print exact figures too. */
static void ir_human(double v, char *buf, size_t n) {
  const char *units = " KMGTP";
  int u = 0;
  while (v >= 999.5 && u < 5) v /= 1000, u++;
  if (u == 0) snprintf(buf, n, "%.0f", v);
  else snprintf(buf, n, "%.*f%c", v < 9.995 ? 2 : v < 99.95 ? 1 : 0, v, units[u]);
}

typedef struct { int node, op, out, par; } ir_cols;

/* A parameter is listed with the first node that reads it: first[t] is that node, or -1.
 * One pass over the nodes, so the table stays linear in the graph's size. */
static int *ir_first_readers(const ir_graph *g) {
  int *first = malloc(sizeof(int) * (size_t)(ir_ntensors(g) + 1));
  if (!first) KILN_ICE("out of memory");
  for (int t = 0; t < ir_ntensors(g); t++) first[t] = -1;
  for (int i = ir_nnodes(g) - 1; i >= 0; i--) {
    const ir_node *n = ir_node_at(g, i);
    for (int j = 0; j < n->nin; j++) first[n->in[j]] = i;
  }
  return first;
}

static ir_cols ir_summary_widths(const ir_graph *g) {
  ir_cols w = {4, 2, 6, 10};
  char buf[256];
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    int l = (int)strlen(n->name);
    if (l > w.node) w.node = l;
    l = (int)strlen(ir_node_kind_name(n));
    if (l > w.op) w.op = l;
    const ir_tensor *o = ir_tensor_at(g, n->out[0]);
    l = ir_type_str(o->dtype, &o->shape, buf, sizeof buf);
    if (l > w.out) w.out = l;
    for (int j = 0; j < n->nin; j++) {
      const ir_tensor *t = ir_tensor_at(g, n->in[j]);
      if (t->kind != IR_T_PARAM && t->kind != IR_T_AUX) continue;
      l = (int)strlen(t->name) + 1 + ir_type_str(t->dtype, &t->shape, buf, sizeof buf);
      if (l > w.par) w.par = l;
    }
  }
  return w;
}

/* One parameter cell; continuation lines leave the node's columns blank. */
static void ir_summary_param(const ir_tensor *t, ir_cols w, bool first_line, FILE *out) {
  char ty[160], cell[320], cnt[32];
  ir_type_str(t->dtype, &t->shape, ty, sizeof ty);
  snprintf(cell, sizeof cell, "%s %s", t->name, ty);
  snprintf(cnt, sizeof cnt, "%lld%s", (long long)ir_tensor_numel(t), t->fixed ? " const" : t->kind == IR_T_AUX ? " aux" : "");
  if (!first_line) fprintf(out, "%-*s  %-*s  %-*s  ", w.node, "", w.op, "", w.out, "");
  fprintf(out, "%-*s  %12s", w.par, cell, cnt);
}

static void ir_summary_node(const ir_graph *g, int ni, const int *first_reader, ir_cols w, int64_t *params,
                            int64_t *aux, int64_t *fixed, FILE *out) {
  const ir_node *n = ir_node_at(g, ni);
  const ir_tensor *o = ir_tensor_at(g, n->out[0]);
  char ty[160], fl[32];
  ir_type_str(o->dtype, &o->shape, ty, sizeof ty);
  ir_human((double)n->flops, fl, sizeof fl);
  fprintf(out, "%-*s  %-*s  %-*s  ", w.node, n->name, w.op, ir_node_kind_name(n), w.out, ty);
  bool first = true;
  for (int j = 0; j < n->nin; j++) {
    const ir_tensor *t = ir_tensor_at(g, n->in[j]);
    if ((t->kind != IR_T_PARAM && t->kind != IR_T_AUX) || first_reader[n->in[j]] != ni) continue;
    ir_summary_param(t, w, first, out);
    int64_t *sum = t->fixed ? fixed : t->kind == IR_T_AUX ? aux : params;
    *sum = ir_sat_add(*sum, ir_tensor_numel(t));
    fprintf(out, first ? "  %10s\n" : "\n", fl);
    first = false;
  }
  if (first) fprintf(out, "%-*s  %12s  %10s\n", w.par, "-", "", fl);
}

static void ir_summary_io(const ir_graph *g, FILE *out) {
  char ty[160];
  for (int i = 0; i < ir_ntensors(g); i++) {
    const ir_tensor *t = ir_tensor_at(g, i);
    if (t->kind != IR_T_INPUT) continue;
    ir_type_str(t->dtype, &t->shape, ty, sizeof ty);
    fprintf(out, "  input  %s : %s\n", t->name, ty);
  }
  for (int i = 0; i < g->outputs.len; i++) {
    const ir_tensor *t = ir_tensor_at(g, IR_VEC_AT(g->outputs, int, i));
    ir_type_str(t->dtype, &t->shape, ty, sizeof ty);
    fprintf(out, "  output %s : %s\n", t->name, ty);
  }
  if (g->has_train) {
    fputs("  train  ", out);
    ir_print_train_target(g, out);
  }
}

void ir_print_summary(const ir_graph *g, FILE *out) {
  ir_cols w = ir_summary_widths(g);
  int64_t params = 0, aux = 0, fixed = 0, flops = 0;
  char fl[32], pc[32];
  fprintf(out, "model %s\n", g->name);
  ir_summary_io(g, out);
  fprintf(out, "\n%-*s  %-*s  %-*s  %-*s  %12s  %10s\n", w.node, "node", w.op, "op", w.out, "output",
          w.par, "parameters", "count", "FLOPs");
  int *first_reader = ir_first_readers(g);
  for (int i = 0; i < ir_nnodes(g); i++) {
    ir_summary_node(g, i, first_reader, w, &params, &aux, &fixed, out);
    flops = ir_sat_add(flops, ir_node_at(g, i)->flops);
  }
  free(first_reader);
  ir_human((double)flops, fl, sizeof fl);
  ir_human((double)params * 4, pc, sizeof pc);
  fprintf(out, "\ntotal: %d nodes, %lld parameters (%sB as f32), %lld aux values, ", ir_nnodes(g), (long long)params, pc, (long long)aux);
  if (fixed) fprintf(out, "%lld const values, ", (long long)fixed);     /* models without consts print as before */
  fprintf(out, "%s%lld FLOPs (%s) per forward pass\n", flops == INT64_MAX ? "at least " : "", (long long)flops, fl);
}
