/* ir_infer.c — the shape and type inference pass: walks the nodes in order, checks dtypes
 * against each op's row, calls the op's InferShape, fills in parameter shapes and default
 * initializers, and reports failures with the op, its line and the shapes involved. A node
 * whose input failed is skipped quietly so one mistake gives one error. */
#include "ops.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  k_shape in[2 * K_MAX_RANK + 64];
  k_dtype in_dt[2 * K_MAX_RANK + 64];
  bool in_known[2 * K_MAX_RANK + 64];
  const char *in_name[2 * K_MAX_RANK + 64];
  k_shape out[8];
  k_dtype out_dt[8];
} ir_infer_buf;

/* "data f32[64, 1, 28, 28], weight f32[20, 1, 5, 5]" — the inputs as the error message
 * shows them; parameters whose shapes are still to be inferred say nothing and are left out. */
static void ir_infer_describe(const ir_graph *g, const ir_node *n, char *buf, size_t len) {
  size_t w = 0;
  buf[0] = 0;
  for (int i = 0; i < n->nin && w < len; i++) {
    const ir_tensor *t = ir_tensor_at(g, n->in[i]);
    if (!t->shape_known) continue;
    w += (size_t)snprintf(buf + w, len - w, "%s%s ", w ? ", " : "", t->name);
    if (w >= len) break;
    w += (size_t)ir_type_str(t->dtype, &t->shape, buf + w, len - w);
  }
}

static void ir_infer_report(ir_graph *g, ir_diag *d, const ir_node *n, const char *msg) {
  char shapes[1024];
  ir_infer_describe(g, n, shapes, sizeof shapes);
  ir_error(d, n->loc, "%s: %s (inputs: %s)", ir_ops[n->op].name, msg, shapes);
  ir_note_expansion(d, n->from);
}

/* Inputs must have the dtypes the row asks for: i32 for labels and indices, f32 else. */
static int ir_infer_dtypes(ir_graph *g, ir_diag *d, const ir_node *n) {
  const ir_opdef *op = &ir_ops[n->op];
  int nargs = n->nin - ir_op_naux(op);
  for (int i = 0; i < n->nin; i++) {
    const ir_tensor *t = ir_tensor_at(g, n->in[i]);
    bool want_i32 = i < nargs && !op->variadic && (op->i32_args >> i & 1);
    if ((t->dtype == K_I32) == want_i32) continue;
    char ty[128], msg[256];
    ir_type_str(t->dtype, &t->shape, ty, sizeof ty);
    const char *role = op->variadic ? "x" : i < nargs ? op->args[i] : op->aux[i - nargs];
    snprintf(msg, sizeof msg, "argument '%s' must be %s, but '%s' is %s", role, want_i32 ? "i32" : "f32", t->name, ty);
    ir_infer_report(g, d, n, msg);
    return 1;
  }
  return 0;
}

static bool ir_infer_ready(const ir_graph *g, const ir_node *n) {
  for (int i = 0; i < n->nin; i++) {
    const ir_tensor *t = ir_tensor_at(g, n->in[i]);
    if (!t->shape_known && t->kind != IR_T_PARAM && t->kind != IR_T_AUX) return false;
  }
  return true;
}

/* Writes inferred shapes back: parameters learn theirs (and their default initializer). */
static void ir_infer_commit(ir_graph *g, ir_node *n, const ir_infer *x) {
  for (int i = 0; i < n->nin; i++) {
    ir_tensor *t = ir_tensor_at(g, n->in[i]);
    if (!t->shape_known) t->shape = x->in[i];
    t->shape_known = true;
    if ((t->kind == IR_T_PARAM || t->kind == IR_T_AUX) && !t->has_init) {
      t->init = ir_init_default(g, n, i);
      t->has_init = true;
    }
  }
  for (int i = 0; i < n->nout; i++) {
    ir_tensor *t = ir_tensor_at(g, n->out[i]);
    t->shape = x->out[i];
    t->dtype = x->out_dt[i];
    t->shape_known = true;
  }
  n->flops = x->flops;
}

/* Fails x with "<what> '<name>' <verb> f32[...]: <why>" when shape s is beyond the size limits
 * (ir.h), else 0. */
static int ir_infer_fits(ir_infer *x, const char *what, const char *name, const char *verb, k_dtype dt,
                         const k_shape *s) {
  char why[96], ty[160];
  if (!ir_shape_check(s, why, sizeof why)) return 0;
  ir_type_str(dt, s, ty, sizeof ty);
  return ir_infer_fail(x, "%s '%s' %s %s: %s", what, name, verb, ty, why);
}

/* A tensor beyond the size limits is refused where it would arise, so that no element count
 * or byte size downstream can overflow: an output or a parameter shape that the op infers
 * from its attributes (fully_connected(x, num_hidden=10^14)). */
static int ir_infer_sizes(const ir_graph *g, const ir_node *n, ir_infer *x) {
  for (int i = 0; i < x->nout; i++)
    if (ir_infer_fits(x, "output", ir_tensor_at(g, n->out[i])->name, "would be", x->out_dt[i], &x->out[i])) return 1;
  for (int i = 0; i < x->nin; i++) {
    const ir_tensor *t = ir_tensor_at(g, n->in[i]);
    if (!t->shape_known && ir_infer_fits(x, "parameter", t->name, "would be", t->dtype, &x->in[i])) return 1;
  }
  return 0;
}

/* An input beyond the limits can only come from a front end that declared it so (the .kiln
 * front end refuses such a declaration itself); refused before the op computes with it. */
static int ir_infer_inputs_fit(const ir_graph *g, const ir_node *n, ir_infer *x) {
  for (int i = 0; i < n->nin; i++) {
    const ir_tensor *t = ir_tensor_at(g, n->in[i]);
    if (t->shape_known && ir_infer_fits(x, "input", t->name, "is", t->dtype, &t->shape)) return 1;
  }
  return 0;
}

static int ir_infer_node(ir_graph *g, ir_diag *d, ir_node *n) {
  const ir_opdef *op = &ir_ops[n->op];
  if (!ir_infer_ready(g, n)) return 0;              /* an input already failed */
  if (n->nin > (int)(sizeof ((ir_infer_buf *)0)->in / sizeof(k_shape))) {
    ir_error(d, n->loc, "%s: too many inputs (%d)", op->name, n->nin);
    ir_note_expansion(d, n->from);
    return 1;
  }
  if (ir_infer_dtypes(g, d, n)) return 1;
  ir_infer_buf b;
  memset(&b, 0, sizeof b);
  for (int i = 0; i < n->nin; i++) {
    const ir_tensor *t = ir_tensor_at(g, n->in[i]);
    b.in[i] = t->shape, b.in_dt[i] = t->dtype, b.in_known[i] = t->shape_known, b.in_name[i] = t->name;
  }
  ir_infer x = {.op = op, .param = n->param, .nin = n->nin, .nargs = n->nin - ir_op_naux(op),
                .in = b.in, .in_dt = b.in_dt, .in_known = b.in_known, .in_name = b.in_name,
                .nout = n->nout, .out = b.out, .out_dt = b.out_dt};
  if (ir_infer_inputs_fit(g, n, &x) || op->infer(&x) || ir_infer_sizes(g, n, &x)) {
    ir_infer_report(g, d, n, x.msg);
    return 1;
  }
  ir_infer_commit(g, n, &x);
  return 0;
}

/* read[t]: whether a node reads tensor t; computed once (per parameter, a walk of every node
 * made a model of many failed layers quadratic). */
static bool *ir_infer_reads(const ir_graph *g) {
  bool *read = calloc((size_t)ir_ntensors(g) + 1, sizeof *read);
  if (!read) KILN_ICE("out of memory");
  for (int i = 0; i < ir_nnodes(g); i++)
    for (int j = 0; j < ir_node_at(g, i)->nin; j++)
      if (ir_node_at(g, i)->in[j] >= 0) read[ir_node_at(g, i)->in[j]] = true;
  return read;
}

/* After the nodes: parameters nothing gave a shape, and a train target that is no scalar.
 * A parameter some node reads lacks a shape only because that node failed or was skipped,
 * which is reported already. */
static int ir_infer_finish(ir_graph *g, ir_diag *d, int node_errors) {
  int errors = 0;
  bool *read = NULL;
  for (int i = 0; i < ir_ntensors(g); i++) {
    ir_tensor *t = ir_tensor_at(g, i);
    if ((t->kind != IR_T_PARAM && t->kind != IR_T_AUX) || t->shape_known) continue;
    if (!read) read = ir_infer_reads(g);
    if (read[i]) continue;
    ir_error(d, t->loc, "parameter '%s' has no declared shape and no op infers one", t->name);
    errors++;
  }
  free(read);
  /* Only when every node of this graph inferred (a failed one leaves the loss without a
   * shape): counted here, not by d->errors, which also holds an earlier model's errors (a
   * second model then went unchecked; fuzz_frontend finding). */
  if (g->loss >= 0 && node_errors == 0 && errors == 0) {
    const ir_tensor *t = ir_tensor_at(g, g->loss);
    if (t->shape.rank != 0 || t->dtype != K_F32) {
      char ty[128];
      ir_type_str(t->dtype, &t->shape, ty, sizeof ty);
      ir_error(d, g->train_loc, "train target '%s' must be a scalar f32[], but it is %s; reduce it with mean() or sum()", t->name, ty);
      errors++;
    }
  }
  return errors;
}

int ir_infer_one(ir_graph *g, ir_diag *d, int i) { return ir_infer_node(g, d, ir_node_at(g, i)); }

int ir_infer_shapes(ir_graph *g, ir_diag *d) {
  int errors = 0;
  for (int i = 0; i < ir_nnodes(g); i++) errors += ir_infer_node(g, d, ir_node_at(g, i));
  return errors + ir_infer_finish(g, d, errors);
}
