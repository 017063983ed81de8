/* onnx_import.c — an ONNX graph into an ir_graph. In order: every unsupported op is listed
 * at once (nothing is built), the nodes are put in topological order (a cycle or a value
 * that nothing defines is an error naming the node), the inputs are declared (symbolic
 * dimensions bound by -D, a range at its upper bound, else 1), the initializers become
 * constants, each node goes through its row of onnx_ops.def with its shapes inferred at once
 * (so Shape folds), and the graph's outputs are checked against the shapes the file declares.
 * A -D range imports the file again at other extents (onnx_dims.c): the first import leaves
 * what does not depend on them in the onnx_file (the initializers, the order of the nodes). */
#include "onnx_int.h"

#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const onnx_opdef onnx_ops[] = {
#define ONNX_OP(type, fn, kop) {#type, fn, kop},
#include "onnx_ops.def"
#undef ONNX_OP
};

const onnx_opdef *onnx_op_lookup(const char *type) {
  for (size_t i = 0; type && i < sizeof onnx_ops / sizeof *onnx_ops; i++)
    if (strcmp(onnx_ops[i].type, type) == 0) return &onnx_ops[i];
  return NULL;
}

bool onnx_is_onnx_path(const char *path) {
  size_t n = strlen(path);
  return n > 5 && strcmp(path + n - 5, ".onnx") == 0;
}

/* ---- helpers the handlers share ---- */

int onnx_fail(onnx_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_verror(c->d, c->loc, fmt, ap);
  va_end(ap);
  return 1;
}

/* The element count of shape s; -1 when it exceeds ONNX_MAX_ELEMS. */
static int64_t onnx_const_count(const k_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->d[i] < 0 || (s->d[i] && n > ONNX_MAX_ELEMS / s->d[i])) return -1;
    n *= s->d[i];
  }
  return n > ONNX_MAX_ELEMS ? -1 : n;
}

onnx_const *onnx_const_new(onnx_ctx *c, bool is_int, const k_shape *s) {
  int64_t n = onnx_const_count(s);
  if (n < 0) return NULL;
  onnx_const *k = ir_alloc(&c->g->arena, sizeof *k);
  *k = (onnx_const){.is_int = is_int, .shape = *s, .n = n, .tensor = -1};
  if (is_int) k->i = ir_alloc(&c->g->arena, (size_t)n * sizeof *k->i + 8);
  else k->f = ir_alloc(&c->g->arena, (size_t)n * sizeof *k->f + 8);
  return k;
}

onnx_const *onnx_const_over(onnx_ctx *c, const k_shape *s, float *f) {
  int64_t n = onnx_const_count(s);
  if (n < 0) return NULL;
  onnx_const *k = ir_alloc(&c->g->arena, sizeof *k);
  *k = (onnx_const){.is_int = false, .shape = *s, .n = n, .f = f, .tensor = -1};
  return k;
}

void onnx_bind(onnx_ctx *c, const char *name, int tensor, onnx_const *k) {
  onnx_value *v = ir_alloc(&c->g->arena, sizeof *v);
  *v = (onnx_value){.tensor = tensor, .k = k};
  fe_map_set(&c->values, &c->g->arena, name, v);
}

onnx_value *onnx_input(onnx_ctx *c, const Onnx__NodeProto *n, int i) {
  if (i >= (int)n->n_input || !n->input[i] || !*n->input[i]) return NULL;
  return fe_map_get(&c->values, n->input[i]);        /* defined: the topological order checked it */
}

onnx_const *onnx_input_const(onnx_ctx *c, const Onnx__NodeProto *n, int i, const char *what) {
  onnx_value *v = onnx_input(c, n, i);
  if (v && v->k) return v->k;
  onnx_fail(c, "%s '%s' must be a constant (an initializer or folded shape arithmetic); a computed one is not supported",
            what, v ? n->input[i] : "(absent)");
  return NULL;
}

/* The values of a constant as f32: an integer constant read as a tensor (Pow's integer
 * exponent) is converted, which f32 holds exactly up to 2^24; a larger value is refused. The
 * constant itself stays integer for the shape computations that may read it too. */
static const float *onnx_const_floats(onnx_ctx *c, const onnx_const *k) {
  if (!k->is_int) return k->f;
  float *f = ir_alloc(&c->g->arena, (size_t)k->n * sizeof *f + 8);
  for (int64_t i = 0; i < k->n; i++) {
    if (k->i[i] > (1 << 24) || k->i[i] < -(1 << 24))
      return onnx_fail(c, "the integer constant '%s' holds %lld, which f32 cannot hold exactly; not supported", k->onnx_name,
                       (long long)k->i[i]), NULL;
    f[i] = (float)k->i[i];
  }
  return f;
}

int onnx_scalar(onnx_ctx *c, float value) {
  int t = ir_graph_add_tensor(c->g, ir_strfmt(&c->g->arena, "%%const%d", ir_ntensors(c->g)), IR_T_CONST, c->loc);
  ir_tensor *x = ir_tensor_at(c->g, t);
  x->value = value, x->shape_known = true;
  return t;
}

void onnx_pad_tuple(k_pads *dst, const int64_t *pads, int r) {
  dst->n = 2 * r;
  for (int a = 0; a < r; a++) {
    dst->v[2 * (r - 1 - a)] = pads[a];
    dst->v[2 * (r - 1 - a) + 1] = pads[r + a];
  }
}

/* A pending zero Pad read by an op it does not fold into: the pad node it stood for, made
 * now; the value then stands for that node's output. */
static int onnx_pad_node(onnx_ctx *c, onnx_value *v) {
  int r = v->npad + 2, k = onnx_emit_as(c, v->pad_name, NULL, IR_OP_pad, &v->tensor, 1);
  if (k < 0) return -1;
  int64_t pads[2 * K_MAX_RANK] = {0};
  for (int i = 0; i < v->npad; i++) pads[2 + i] = v->pad_begin[i], pads[r + 2 + i] = v->pad_end[i];
  k_pad_param *p = ir_node_at(c->g, k)->param;
  onnx_pad_tuple(&p->pad, pads, r);
  if (ir_infer_one(c->g, c->d, k)) return -1;
  v->npad = 0;
  return v->tensor = ir_node_at(c->g, k)->out[0];
}

/* Whether a one-element constant of rank 0 becomes a scalar CONST (as `0.5 * x` does in
 * .kiln), which is never trained: unless a --trainable rule names its initializer. */
static bool onnx_is_scalar(const onnx_ctx *c, const onnx_const *k, ir_tensor_kind kind) {
  bool trainable = false;
  const char *names[] = {k->origin, NULL};
  if (k->n != 1 || k->shape.rank != 0 || kind != IR_T_PARAM) return false;
  return !k->origin || !onnx_rules_verdict(c, names, &trainable) || !trainable;
}

/* A constant read as a run-time tensor: a scalar CONST (above), or a tensor of the given
 * kind holding the data, which onnx_weights_decide makes a param, an aux state or a const
 * once every node is built. A pending Pad becomes its pad node. */
int onnx_tensor(onnx_ctx *c, onnx_value *v, ir_tensor_kind kind) {
  if (v->npad) return onnx_pad_node(c, v);
  if (v->tensor >= 0) return v->tensor;
  onnx_const *k = v->k;
  const float *f = k->tensor >= 0 ? NULL : onnx_const_floats(c, k);
  if (k->tensor >= 0 || !f) return k->tensor;
  /* inline unless .kiln text cannot write the number (inf, NaN): then a rank-0 tensor */
  if (onnx_is_scalar(c, k, kind) && isfinite(f[0])) return k->tensor = onnx_scalar(c, f[0]);
  int t = ir_graph_add_tensor(c->g, onnx_kiln_name(c, k->onnx_name), kind, c->loc);
  ir_tensor *x = ir_tensor_at(c->g, t);
  x->shape = k->shape, x->shape_known = x->declared = true;
  x->data = f;
  *(onnx_weight *)ir_vec_push(&c->weights) = (onnx_weight){t, k->origin};
  return k->tensor = t;
}

const ir_tensor *onnx_shape_of(onnx_ctx *c, onnx_value *v, k_shape *s) {
  if (v->k) return *s = v->k->shape, NULL;
  const ir_tensor *t = ir_tensor_at(c->g, v->tensor);
  *s = t->shape;
  for (int i = 0; i < v->npad; i++) s->d[2 + i] += v->pad_begin[i] + v->pad_end[i];
  return t;
}

int onnx_emit(onnx_ctx *c, const Onnx__NodeProto *n, int kop, const int *ins, int nin) {
  return onnx_emit_as(c, n->n_output ? n->output[0] : n->name, n->n_output ? n->output[0] : NULL, kop, ins, nin);
}

int onnx_emit_as(onnx_ctx *c, const char *onnx_name, const char *bind, int kop, const int *ins, int nin) {
  for (int i = 0; i < nin; i++)
    if (ins[i] < 0) return -1;
  const char *name = onnx_kiln_name(c, onnx_name);
  int idx = ir_graph_add_node(c->g, kop, name, nin, ins, c->loc);
  ir_node *nd = ir_node_at(c->g, idx);
  for (int i = 1; i < nd->nout; i++) fe_map_put(&c->kiln_names, &c->g->arena, ir_tensor_at(c->g, nd->out[i])->name, (void *)1);
  if (bind) onnx_bind(c, bind, nd->out[0], NULL);
  return idx;
}

const Onnx__AttributeProto *onnx_attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0) return n->attribute[i];
  return NULL;
}

int64_t onnx_attr_int(const Onnx__NodeProto *n, const char *name, int64_t dflt) {
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  return a && a->has_i ? a->i : dflt;
}

float onnx_attr_float(const Onnx__NodeProto *n, const char *name, float dflt) {
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  return a && a->has_f ? a->f : dflt;
}

int onnx_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *v, int max) {
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  if (!a) return 0;
  if (a->n_ints > (size_t)max) return -1;
  for (size_t i = 0; i < a->n_ints; i++) v[i] = a->ints[i];
  return (int)a->n_ints;
}

int onnx_unsupported_attr(onnx_ctx *c, const char *name, const char *why) {
  return onnx_fail(c, "attribute '%s' %s is not supported", name, why);
}

/* ---- every unsupported op at once ---- */

/* Names from the file as messages show them: at most 200 bytes, control bytes and other
 * non-ASCII bytes as '?', so a damaged file cannot garble the terminal. */
static const char *onnx_printable(onnx_ctx *c, const char *s, const char *dflt) {
  if (!s || !*s) return dflt;
  size_t n = strnlen(s, 200);
  char *p = ir_strndup(&c->g->arena, s, n);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)p[i] < 32 || (unsigned char)p[i] >= 127) p[i] = '?';
  return p;
}


typedef struct { const char *type; int count; const char *names[3]; } onnx_missing;

static void onnx_count_missing(onnx_missing *miss, int *nmiss, const char *name, const char *type) {
  int k = 0;
  while (k < *nmiss && strcmp(miss[k].type, type) != 0) k++;
  if (k == *nmiss) miss[(*nmiss)++] = (onnx_missing){type, 0, {0}};
  if (miss[k].count < 3) miss[k].names[miss[k].count] = name;
  miss[k].count++;
}

static int onnx_check_ops(onnx_ctx *c, const Onnx__GraphProto *gp) {
  onnx_missing *miss = calloc(gp->n_node + 1, sizeof *miss);
  int nmiss = 0;
  if (!miss) return onnx_fail(c, "out of memory");
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *n = gp->node[i];
    const char *dom = n->domain && *n->domain && strcmp(n->domain, "ai.onnx") != 0 ? n->domain : NULL;
    const char *type = onnx_printable(c, n->op_type, "(no op type)");
    if (dom) type = ir_strfmt(&c->g->arena, "%s (domain %s)", type, onnx_printable(c, dom, ""));
    if (dom || !onnx_op_lookup(n->op_type)) onnx_count_missing(miss, &nmiss, onnx_printable(c, n->name, "(unnamed)"), type);
  }
  for (int k = 0; k < nmiss; k++)
    ir_error(c->d, c->loc, "unsupported ONNX op %s: %d node%s (%s%s%s%s%s%s)", miss[k].type, miss[k].count,
             miss[k].count == 1 ? "" : "s", miss[k].names[0], miss[k].names[1] ? ", " : "",
             miss[k].names[1] ? miss[k].names[1] : "", miss[k].names[2] ? ", " : "", miss[k].names[2] ? miss[k].names[2] : "",
             miss[k].count > 3 ? ", ..." : "");
  free(miss);
  return nmiss;
}

/* ---- topological order (Kahn): the nodes in an order where every input is defined ---- */

static void onnx_node_loc(onnx_ctx *c, const Onnx__NodeProto *n) {
  c->node = n;
  c->loc = (ir_loc){ir_strfmt(&c->g->arena, "%s: node '%s' (%s)", c->path, onnx_printable(c, n->name, "(unnamed)"),
                              onnx_printable(c, n->op_type, "?")), 0, 0};
}

/* Names defined before any node runs: inputs and initializers. */
static void onnx_mark_defined(fe_map *def, ir_arena *a, const Onnx__GraphProto *gp) {
  for (size_t i = 0; i < gp->n_input; i++)
    if (gp->input[i]->name) fe_map_put(def, a, gp->input[i]->name, (void *)1);
  for (size_t i = 0; i < gp->n_initializer; i++)
    if (gp->initializer[i]->name) fe_map_put(def, a, gp->initializer[i]->name, (void *)1);
}

/* An input of n that the sweeps left undefined and, when producer is not NULL, that no node
 * produces either (a missing initializer); NULL if there is none. */
static const char *onnx_undefined_input(const fe_map *def, const fe_map *producer, const Onnx__NodeProto *n) {
  for (size_t j = 0; j < n->n_input; j++)
    if (n->input[j] && *n->input[j] && !fe_map_get(def, n->input[j]) && (!producer || !fe_map_get(producer, n->input[j])))
      return n->input[j];
  return NULL;
}

static bool onnx_node_ready(const fe_map *def, const Onnx__NodeProto *n) { return !onnx_undefined_input(def, NULL, n); }

/* The node whose first undefined input node i waits on (an index; the input in *in). */
static size_t onnx_waits_on(const fe_map *def, const fe_map *producer, const Onnx__GraphProto *gp, size_t i,
                            const char **in) {
  *in = onnx_undefined_input(def, NULL, gp->node[i]);
  return (size_t)(uintptr_t)fe_map_get(producer, *in) - 1;
}

/* A cycle: every node left waits on another node left, so following the waits from any of
 * them comes back round; the first node met twice is on the cycle, and the node it waits on
 * depends on its output. */
static void onnx_report_cycle(onnx_ctx *c, const Onnx__GraphProto *gp, const fe_map *def, const fe_map *producer,
                              const bool *done) {
  bool *seen = calloc(gp->n_node + 1, 1);
  if (!seen) return (void)onnx_fail(c, "out of memory");
  size_t i = 0;
  const char *in = NULL;
  while (done[i]) i++;
  while (!seen[i]) seen[i] = true, i = onnx_waits_on(def, producer, gp, i, &in);
  free(seen);
  size_t next = onnx_waits_on(def, producer, gp, i, &in);
  const Onnx__NodeProto *q = gp->node[next];
  onnx_node_loc(c, gp->node[i]);
  if (next == i) onnx_fail(c, "input '%s' is this node's own output: the graph has a cycle", onnx_printable(c, in, "?"));
  else
    onnx_fail(c, "input '%s' is the output of node '%s' (%s), which depends on this node's output: the graph has a cycle",
              onnx_printable(c, in, "?"), onnx_printable(c, q->name, "(unnamed)"), onnx_printable(c, q->op_type, "?"));
}

/* Why the nodes left over could not be ordered: a value no node produces (a missing
 * initializer, reported first: it blocks what follows it without any cycle), else a cycle. */
static void onnx_report_unordered(onnx_ctx *c, const Onnx__GraphProto *gp, const fe_map *def, const bool *done) {
  fe_map producer = {0};                               /* output name -> node index + 1 */
  for (size_t i = 0; i < gp->n_node; i++)
    for (size_t j = 0; j < gp->node[i]->n_output; j++)
      if (gp->node[i]->output[j] && *gp->node[i]->output[j])
        fe_map_put(&producer, &c->g->arena, gp->node[i]->output[j], (void *)(uintptr_t)(i + 1));
  for (size_t i = 0; i < gp->n_node; i++) {
    const char *in = done[i] ? NULL : onnx_undefined_input(def, &producer, gp->node[i]);
    if (!in) continue;
    onnx_node_loc(c, gp->node[i]);
    onnx_fail(c, "input '%s' is neither a graph input, an initializer nor the output of any node (a missing initializer?)",
              onnx_printable(c, in, "?"));
    return;
  }
  onnx_report_cycle(c, gp, def, &producer, done);
}

/* Repeated sweeps: linear for a sorted file (as ONNX requires), quadratic at worst. */
static int onnx_toposort(onnx_ctx *c, const Onnx__GraphProto *gp, const Onnx__NodeProto **order) {
  fe_map def = {0};
  bool *done = calloc(gp->n_node + 1, 1);
  if (!done) return onnx_fail(c, "out of memory");
  onnx_mark_defined(&def, &c->g->arena, gp);
  size_t k = 0;
  for (bool progress = true; progress && k < gp->n_node;) {
    progress = false;
    for (size_t i = 0; i < gp->n_node; i++) {
      if (done[i] || !onnx_node_ready(&def, gp->node[i])) continue;
      done[i] = progress = true;
      order[k++] = gp->node[i];
      for (size_t j = 0; j < gp->node[i]->n_output; j++)
        if (gp->node[i]->output[j] && *gp->node[i]->output[j]) fe_map_put(&def, &c->g->arena, gp->node[i]->output[j], (void *)1);
    }
  }
  if (k < gp->n_node) onnx_report_unordered(c, gp, &def, done);
  free(done);
  return k == gp->n_node ? 0 : 1;
}

/* ---- inputs, initializers, outputs ---- */

static bool onnx_is_initializer(const Onnx__GraphProto *gp, const char *name) {
  for (size_t i = 0; i < gp->n_initializer; i++)
    if (gp->initializer[i]->name && strcmp(gp->initializer[i]->name, name) == 0) return true;
  return false;
}

/* The -D that sizes symbolic dimension sym: the first that names it (as for a .kiln dim), or
 * NULL. Every -D of that name counts as used. */
static const fe_define *onnx_define(onnx_ctx *c, const char *sym) {
  const fe_define *first = NULL;
  for (int i = 0; sym && i < c->o->ndefs; i++)
    if (strcmp(c->o->defs[i].name, sym) == 0) {
      if (!first) first = &c->o->defs[i];
      c->defs_used |= UINT64_C(1) << (i & 63);
    }
  return first;
}

/* A dimension of an input: a number, or a symbolic one at its -D's value (a range's upper
 * bound: the model is imported at its bounds first, onnx_dims.c), else 1. */
static int onnx_dim(onnx_ctx *c, const Onnx__TensorShapeProto__Dimension *dm, const char *input, int64_t *out) {
  if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
    if (dm->dim_value == 0)   /* .kiln dimensions are positive */
      return onnx_fail(c, "input '%s' has a dimension of 0: empty tensors are not supported", input);
    if (dm->dim_value < 0 || dm->dim_value > ONNX_MAX_DIM)
      return onnx_fail(c, "input '%s' has a bad dimension %lld", input, (long long)dm->dim_value);
    return *out = dm->dim_value, 0;
  }
  const char *sym = dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? dm->dim_param : NULL;
  const fe_define *x = onnx_define(c, sym);
  *out = x ? x->value : 1;
  return 0;
}

static int onnx_value_type(onnx_ctx *c, const Onnx__ValueInfoProto *vi, k_dtype *dt, k_shape *s) {
  const char *name = vi->name ? vi->name : "";
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type || !tp->tensor_type->shape)
    return onnx_fail(c, "'%s' is not a tensor of known rank; sequences, maps, optionals and unknown ranks are not supported", name);
  int32_t et = tp->tensor_type->elem_type;
  if (et != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && et != ONNX__TENSOR_PROTO__DATA_TYPE__INT32)
    return onnx_fail(c, "'%s' has element type %d, which is not supported: Kiln inputs and outputs are float (f32) or int32 (i32)", name, et);
  *dt = et == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? K_F32 : K_I32;
  const Onnx__TensorShapeProto *sp = tp->tensor_type->shape;
  if (sp->n_dim > K_MAX_RANK) return onnx_fail(c, "'%s' has rank %zu; Kiln tensors have rank <= %d", name, sp->n_dim, K_MAX_RANK);
  s->rank = (int)sp->n_dim;
  for (size_t i = 0; i < sp->n_dim; i++)
    if (onnx_dim(c, sp->dim[i], name, &s->d[i])) return 1;
  return 0;
}

/* The symbolic dimensions of the inputs, for suggestions: at most n, in arena memory. */
static int onnx_dim_params(onnx_ctx *c, const Onnx__GraphProto *gp, const char **names, int n) {
  int k = 0;
  for (size_t i = 0; i < gp->n_input && k < n; i++) {
    const Onnx__TypeProto *tp = gp->input[i]->type;
    const Onnx__TensorShapeProto *sp = tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type
                                           ? tp->tensor_type->shape : NULL;
    for (size_t j = 0; sp && j < sp->n_dim && k < n; j++)
      if (sp->dim[j]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && sp->dim[j]->dim_param)
        names[k++] = onnx_printable(c, sp->dim[j]->dim_param, "?");
  }
  return k;
}

/* Each -D names a symbolic dimension of the inputs and gives it a positive size or a range
 * (fe_check_define, as for a .kiln dim). */
static int onnx_check_defines(onnx_ctx *c, const Onnx__GraphProto *gp) {
  int errors = 0;
  for (int i = 0; i < c->o->ndefs && i < 64; i++) {
    const fe_define *x = &c->o->defs[i];
    if (c->defs_used >> i & 1) {
      errors += fe_check_define(x, c->d);
      continue;
    }
    const char *names[64], *sug = ir_suggest(x->name, names, onnx_dim_params(c, gp, names, 64));
    char given[96];
    if (x->lo) snprintf(given, sizeof given, "=%lld..%lld", (long long)x->lo, (long long)x->value);
    else snprintf(given, sizeof given, "=%lld", (long long)x->value);
    errors += onnx_fail(c, "-D %s%s: no input has a symbolic dimension (dim_param) named '%s'%s%s%s", x->name, given, x->name,
                        sug ? "; did you mean '" : "", sug ? sug : "", sug ? "'?" : "");
  }
  return errors;
}

static int onnx_inputs(onnx_ctx *c, const Onnx__GraphProto *gp) {
  int errors = 0;
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    k_dtype dt = K_F32;
    k_shape s = {0, {0}};
    if (!vi->name || onnx_is_initializer(gp, vi->name)) continue;   /* older exporters list weights as inputs */
    if (onnx_value_type(c, vi, &dt, &s)) { errors++; continue; }
    int t = ir_graph_add_tensor(c->g, onnx_kiln_name(c, vi->name), IR_T_INPUT, c->loc);
    ir_tensor *x = ir_tensor_at(c->g, t);
    x->dtype = dt, x->shape = s, x->shape_known = x->declared = true;
    onnx_bind(c, vi->name, t, NULL);
  }
  return errors + onnx_check_defines(c, gp);
}

/* The initializers as constants: read (and checked) by the file's first import, into its
 * graph's arena; each import binds copies, since a constant records the tensor it became. */
static int onnx_initializers(onnx_ctx *c, const Onnx__GraphProto *gp) {
  onnx_file *f = c->file;
  bool first = !f->inits;
  if (first) f->inits = ir_alloc(&c->g->arena, sizeof *f->inits * (gp->n_initializer + 1));
  for (size_t i = 0; i < gp->n_initializer; i++) {
    onnx_const *k = first ? onnx_read_tensor(c, gp->initializer[i]) : f->inits[i];
    if (!k) return 1;
    if (first) k->origin = k->is_int ? NULL : k->onnx_name, f->inits[i] = k;   /* a float initializer may be trained */
    onnx_const *mine = ir_alloc(&c->g->arena, sizeof *mine);
    *mine = *k;
    onnx_bind(c, gp->initializer[i]->name ? gp->initializer[i]->name : "", -1, mine);
  }
  return 0;
}

/* An output keeps its ONNX name even when an Identity (or a fold) made it an alias of an
 * earlier node's output: that node's output tensor, and the node, take the output's name. */
static int onnx_output_name(onnx_ctx *c, const char *onnx_name, int t) {
  ir_tensor *x = ir_tensor_at(c->g, t);
  for (int i = 0; i < c->g->outputs.len; i++)
    if (IR_VEC_AT(c->g->outputs, int, i) == t) return onnx_fail(c, "graph outputs that are the same tensor are not supported ('%s')", onnx_name);
  if (x->producer < 0) return onnx_fail(c, "graph output '%s' is a graph input or an initializer; that is not supported", onnx_name);
  const char *want = onnx_clean_name(c, onnx_name);
  if (strcmp(want, x->name) == 0) return 0;
  const char *name = onnx_kiln_name(c, onnx_name);
  ir_node *nd = ir_node_at(c->g, x->producer);
  if (x->out_index == 0) nd->name = name;
  x->name = name;
  return 0;
}

/* Each graph output must be a computed tensor whose shape matches what the file declares
 * (symbolic dimensions match anything). */
static int onnx_outputs(onnx_ctx *c, const Onnx__GraphProto *gp) {
  /* a model with nothing to compute would be written as text that `kiln check` refuses */
  if (gp->n_output == 0) return onnx_fail(c, "the graph has no outputs");
  for (size_t i = 0; i < gp->n_output; i++) {
    const Onnx__ValueInfoProto *vi = gp->output[i];
    onnx_value *v = vi->name ? fe_map_get(&c->values, vi->name) : NULL;
    if (!v) return onnx_fail(c, "graph output '%s' is not computed by any node", vi->name ? vi->name : "");
    if (v->tensor < 0) return onnx_fail(c, "graph output '%s' is a constant; a constant output is not supported", vi->name);
    if (v->npad && onnx_pad_node(c, v) < 0) return 1;    /* a zero Pad nothing folded */
    if (onnx_output_name(c, vi->name, v->tensor)) return 1;
    const ir_tensor *t = ir_tensor_at(c->g, v->tensor);
    const Onnx__TypeProto *tp = vi->type;
    const Onnx__TensorShapeProto *sp = tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type
                                           ? tp->tensor_type->shape : NULL;
    bool bad = sp && (int)sp->n_dim != t->shape.rank;
    for (size_t j = 0; sp && !bad && j < sp->n_dim; j++)
      bad = sp->dim[j]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && sp->dim[j]->dim_value != t->shape.d[j];
    if (bad) {
      char ty[160];
      ir_type_str(t->dtype, &t->shape, ty, sizeof ty);
      return onnx_fail(c, "graph output '%s' is declared with another shape than the %s its nodes compute", vi->name, ty);
    }
    *(int *)ir_vec_push(&c->g->outputs) = v->tensor;
  }
  return 0;
}

/* ---- the nodes ---- */

/* Kiln's attributes are finite numbers (the language has no inf or NaN literal, so written
 * text could not say them): an ONNX attribute or scalar input of inf or NaN is refused. */
static int onnx_finite_attrs(onnx_ctx *c, const ir_node *k) {
  const ir_attr_def *a = k->kind == IR_N_OP && k->param ? ir_ops[k->op].attrs : NULL;
  for (; a && a->name; a++) {
    float v;
    if (a->type != IR_AT_FLOAT) continue;
    memcpy(&v, (const char *)k->param + a->offset, sizeof v);
    if (!isfinite(v))
      return onnx_fail(c, "%s's '%s' would be %g; Kiln's attributes are finite numbers", ir_ops[k->op].name, a->name, v);
  }
  return 0;
}

static bool onnx_has_output(const Onnx__NodeProto *nd, bool any) {
  for (size_t i = 0; i < (any ? nd->n_output : nd->n_output ? 1 : 0); i++)
    if (nd->output[i] && *nd->output[i]) return true;
  return false;
}

static int onnx_nodes(onnx_ctx *c, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const onnx_node *x = &c->file->order[i];
    const Onnx__NodeProto *nd = x->n;
    c->node = nd, c->loc = x->loc;
    int before = ir_nnodes(c->g);
    /* every op Kiln reads has an output, and the handlers name their result after it; the
     * recurrent ops may leave Y, their first, unnamed (they name their steps after a later one) */
    if (!onnx_has_output(nd, x->op->fn == onnx_rnn_op)) return onnx_fail(c, "the node has no output");
    if (x->op->fn(c, nd, x->op->kop)) return 1;
    for (int k = before; k < ir_nnodes(c->g); k++)
      if (onnx_finite_attrs(c, ir_node_at(c->g, k)) || ir_infer_one(c->g, c->d, k)) return 1;
  }
  return 0;
}

/* "path/to/resnet18.onnx" -> "resnet18", and its folder "path/to/". */
static void onnx_names_of_path(onnx_ctx *c, const char *path, const char **model) {
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  c->dir = ir_strndup(&c->g->arena, path, (size_t)(base - path));
  size_t n = strlen(base);
  if (onnx_is_onnx_path(base)) n -= 5;
  *model = onnx_kiln_name(c, ir_strndup(&c->g->arena, base, n));
}

static void onnx_mark_read(onnx_ctx *c, const Onnx__GraphProto *gp) {
  fe_map *read = &c->file->read;
  for (size_t i = 0; i < gp->n_node; i++)
    for (size_t j = 0; j < gp->node[i]->n_input; j++)
      if (gp->node[i]->input[j] && *gp->node[i]->input[j]) fe_map_put(read, &c->g->arena, gp->node[i]->input[j], (void *)1);
  for (size_t i = 0; i < gp->n_output; i++)
    if (gp->output[i]->name) fe_map_put(read, &c->g->arena, gp->output[i]->name, (void *)1);
}

/* Every op supported, the nodes in topological order with their rows and locations, the names
 * read: the same for every import of the file, so found by its first, into the file (in that
 * import's arena). */
static int onnx_order(onnx_ctx *c, const Onnx__GraphProto *gp) {
  if (c->file->order) return 0;
  if (onnx_check_ops(c, gp)) return 1;
  onnx_mark_read(c, gp);
  const Onnx__NodeProto **nodes = ir_alloc(&c->g->arena, (gp->n_node + 1) * sizeof *nodes);
  if (onnx_toposort(c, gp, nodes)) return 1;
  onnx_node *order = ir_alloc(&c->g->arena, (gp->n_node + 1) * sizeof *order);
  for (size_t i = 0; i < gp->n_node; i++) {
    onnx_node_loc(c, nodes[i]);
    order[i] = (onnx_node){nodes[i], onnx_op_lookup(nodes[i]->op_type), c->loc};
  }
  c->file->order = order;
  return 0;
}

/* The maps of names sized for the file at once: grown by doubling, each import of a large
 * model left as much memory in old tables as in the final ones. */
static void onnx_reserve_maps(onnx_ctx *c, const Onnx__GraphProto *gp) {
  size_t n = gp->n_input + gp->n_initializer;
  for (size_t i = 0; i < gp->n_node; i++) n += gp->node[i]->n_output;
  int cap = n < INT32_MAX / 4 ? (int)n : INT32_MAX / 4;
  fe_map_reserve(&c->values, &c->g->arena, cap);
  fe_map_reserve(&c->kiln_names, &c->g->arena, cap);
}

static int onnx_graph(onnx_ctx *c, const Onnx__GraphProto *gp) {
  onnx_reserve_maps(c, gp);
  const char *model;
  onnx_names_of_path(c, c->path, &model);
  c->g->name = model;
  int rc = onnx_order(c, gp);
  c->loc = (ir_loc){c->path, 0, 0};
  if (!rc) rc = onnx_inputs(c, gp) || onnx_initializers(c, gp);
  if (!rc) rc = onnx_nodes(c, gp->n_node);
  c->loc = (ir_loc){c->path, 0, 0};
  if (!rc) rc = onnx_outputs(c, gp);
  if (!rc) rc = onnx_weights_decide(c);
  if (!rc && c->o->train) rc = onnx_add_train(c, c->o->train);
  return rc;
}

/* One import of the decoded file into g: 0, or 1 after reporting to d. */
int onnx_build(onnx_file *f, ir_graph *g, const onnx_options *o, ir_diag *d, ir_vec *map) {
  onnx_ctx c = {.g = g, .d = d, .o = o, .file = f, .path = f->path, .opset = f->opset, .map = map,
                .weights = {.elem = sizeof(onnx_weight)}, .loc = {f->path, 0, 0}};
  int rc = onnx_graph(&c, f->m->graph);
  ir_vec_free(&c.weights);
  return rc || d->errors != 0;
}

/* The decoded file lives in the graph's arena: the initializers' float data become the
 * parameters' values where the decoder put them, with no copy (onnx_read.c). A -D range
 * imports the model again at other extents (onnx_dims.c), reading the same memory. */
ir_graph *onnx_import(const char *path, const onnx_options *o, ir_diag *d, ir_vec *map) {
  ir_graph *g = ir_graph_new("model");
  onnx_file f = {.path = path, .m = onnx_read_model(path, &g->arena, d)};
  f.opset = f.m ? onnx_model_opset(f.m, path, d) : -1;
  if (f.opset < 0 || onnx_build(&f, g, o, d, map)) return ir_graph_free(g), NULL;
  return onnx_bound(&f, g, o, d);
}
