/* fe_lower.c — AST to graph: binds names (single assignment, no shadowing), turns
 * declarations into graph inputs and parameters, expressions into nodes, and finishes with
 * shape inference. Calls are in fe_call.c, compile-time values in fe_eval.c. */
#include "fe_lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

fe_binding *fe_lookup(const fe_scope *s, const char *name) {
  return fe_map_get(&s->index, name);
}

int fe_find_tensor(fe_lower *L, const char *name) {
  for (; L->indexed < ir_ntensors(L->g); L->indexed++)
    fe_map_put(&L->tensors, L->x.arena, ir_tensor_at(L->g, L->indexed)->name, (void *)(intptr_t)(L->indexed + 1));
  return (int)(intptr_t)fe_map_get(&L->tensors, name) - 1;
}

bool fe_bind(fe_lower *L, fe_scope *s, const char *name, fe_bkind kind, int tensor, const ir_aval *v, ir_loc loc) {
  const fe_binding *old = fe_lookup(s, name);
  if (old) {
    ir_error(L->d, loc, "'%s' is already defined (names are assigned once)", name);
    ir_note(L->d, old->loc, "'%s' was defined here", name);
    return false;
  }
  if (fe_is_dim(L, name)) return ir_error(L->d, loc, "'%s' would shadow the dim of that name", name), false;
  fe_binding *b = ir_alloc(L->x.arena, sizeof *b);
  *b = (fe_binding){.name = name, .kind = kind, .tensor = tensor, .loc = loc, .next = s->vars};
  if (v) b->val = *v;
  s->vars = b;
  fe_map_put(&s->index, L->x.arena, name, b);
  return true;
}

int fe_const(fe_lower *L, double value, ir_loc loc) {
  int t = ir_graph_add_tensor(L->g, ir_strfmt(&L->g->arena, "%%const%d", L->nconst++), IR_T_CONST, loc);
  ir_tensor *c = ir_tensor_at(L->g, t);
  c->value = (float)value;
  c->shape_known = true;
  return t;
}

const char *fe_join(fe_lower *L, const char *a, const char *b) {
  return a && *a ? ir_strfmt(&L->g->arena, "%s.%s", a, b) : b;
}

/* base, or base_1, base_2...: names of nodes nested in a statement must not collide. */
/* base, or base_1, base_2, ...: the first that no tensor has. The last suffix handed out per
 * base is remembered, so naming many nodes after one base stays linear. */
const char *fe_unique(fe_lower *L, const char *base) {
  if (fe_find_tensor(L, base) < 0) return base;
  for (intptr_t i = (intptr_t)fe_map_get(&L->suffix, base) + 1;; i++) {
    const char *n = ir_strfmt(&L->g->arena, "%s_%ld", base, (long)i);
    if (fe_find_tensor(L, n) >= 0) continue;
    fe_map_set(&L->suffix, L->x.arena, ir_strdup(L->x.arena, base), (void *)i);
    return n;
  }
}

static int fe_tensor_name(fe_lower *L, fe_scope *s, const fe_expr *e) {
  const fe_binding *b = fe_lookup(s, e->str);
  int64_t dim;
  if (b && b->kind == FE_B_TENSOR) return b->tensor;     /* -1: its statement failed, already reported */
  if (b && b->val.kind == IR_AV_NUM) return fe_const(L, b->val.num, e->loc);
  if (b) return ir_error(L->d, e->loc, "'%s' is not a number or a tensor", e->str), -1;
  if (fe_dim_value(L, e->str, &dim)) return fe_const(L, (double)dim, e->loc);
  if (ir_op_lookup(e->str) >= 0 || fe_find_def(L->file, e->str))
    return ir_error(L->d, e->loc, "'%s' is %s; call it as %s(...)", e->str, ir_op_lookup(e->str) >= 0 ? "an op" : "a def", e->str), -1;
  fe_error_unknown_name(L, s, e->str, e->loc);
  return -1;
}

static bool fe_is_const(const fe_lower *L, int t) { return t >= 0 && ir_tensor_at(L->g, t)->kind == IR_T_CONST; }
static double fe_const_value(const fe_lower *L, int t) { return ir_tensor_at(L->g, t)->value; }

static double fe_fold(char op, double a, double b) {
  switch (op) {
  case '+': return a + b;
  case '-': return a - b;
  case '*': return a * b;
  case '/': return a / b;
  default: return pow(a, b);
  }
}

static int fe_binop_op(char op) {
  return op == '+' ? IR_OP_add : op == '-' ? IR_OP_sub : op == '*' ? IR_OP_mul : op == '/' ? IR_OP_div
       : op == '@' ? IR_OP_matmul : IR_OP_pow;
}

/* Arithmetic on tensors becomes nodes; on two constants it folds at compile time. */
static int fe_tensor_arith(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, const char *node_name) {
  int in[2] = {fe_tensor(L, s, st, e->l, NULL), e->kind == FE_BINOP ? fe_tensor(L, s, st, e->r, NULL) : -2};
  if (in[0] < 0 || in[1] == -1) return -1;
  int op = e->kind == FE_NEG ? IR_OP_neg : fe_binop_op(e->op);
  if (e->kind == FE_NEG && fe_is_const(L, in[0])) return fe_const(L, -fe_const_value(L, in[0]), e->loc);
  if (e->kind == FE_BINOP && e->op == '@' && (fe_is_const(L, in[0]) || fe_is_const(L, in[1])))
    return ir_error(L->d, e->loc, "'@' multiplies matrices (torch.matmul); a number is not one (use '*')"), -1;
  if (e->kind == FE_BINOP && fe_is_const(L, in[0]) && fe_is_const(L, in[1])) {
    double a = fe_const_value(L, in[0]), b = fe_const_value(L, in[1]), v = fe_fold(e->op, a, b);
    if (!isfinite((float)v))        /* inf or nan would also print as a name, not a number */
      return ir_error(L->d, e->loc, "the constant %g %s %g is not a finite f32 number", a, e->op == '^' ? "**" : (char[]){e->op, 0}, b), -1;
    return fe_const(L, v, e->loc);
  }
  const char *name = node_name ? node_name : fe_unique(L, fe_join(L, st->pfx, ir_ops[op].name));
  int n = ir_graph_add_node(L->g, op, name, e->kind == FE_NEG ? 1 : 2, in, e->loc);
  ir_node_at(L->g, n)->from = s->expansion;
  return ir_node_at(L->g, n)->out[0];
}

/* ---- x[i, a:b, ::s] ---- */

/* One bound of an index: a whole number (attribute arithmetic, dims included), or dflt when
 * absent. */
static int fe_index_int(fe_lower *L, const fe_scope *s, const fe_expr *e, int64_t dflt, int64_t *out) {
  if (!e) return *out = dflt, 0;
  ir_aval v;
  if (fe_eval_attr(L, s, e, &v)) return 1;
  if (v.kind != IR_AV_NUM || !v.is_int) return ir_error(L->d, e->loc, "an index takes whole numbers"), 1;
  *out = (int64_t)v.num;
  return 0;
}

/* A node of op with param on tensor t, named node_name when it is the expression's last. */
static int fe_index_node(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, int op, const void *param, int t, ir_loc loc,
                         const char *node_name) {
  const char *name = node_name && fe_find_tensor(L, node_name) < 0 ? node_name
                   : fe_unique(L, node_name ? node_name : fe_join(L, st->pfx, ir_ops[op].name));
  int n = ir_graph_add_node(L->g, op, name, 1, &t, loc);
  ir_node *node = ir_node_at(L->g, n);
  node->from = s->expansion;
  memcpy(node->param, param, ir_ops[op].param_size);
  return node->out[0];
}

/* Python's indexing, axis by axis from the first: a slice a:b:s is slice(x, axis, a, b, s)
 * (a missing bound: the axis's start or end, a negative one from the end; s >= 1), an index
 * i is the slice i:i+1 with the axis squeezed after the others. Out of range is an error, as
 * slice reports it (NumPy clips a slice's bounds instead). */
static int fe_tensor_index(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, const char *node_name) {
  int t = fe_tensor(L, s, st, e->l, NULL), axis = 0, nslice = 0;
  if (t < 0) return -1;
  k_slice_param sl[K_MAX_RANK];
  k_squeeze_param sq = {{0}};
  for (const fe_arg *a = e->args; a; a = a->next, axis++) {
    if (axis == K_MAX_RANK) return ir_error(L->d, a->loc, "an index has more than %d axes", K_MAX_RANK), -1;
    const fe_expr *v = a->value;
    k_slice_param p = {.axis = axis};
    if (v->kind == FE_SLICE) {
      if (fe_index_int(L, s, v->l, 0, &p.begin) || fe_index_int(L, s, v->r, K_SLICE_END, &p.end) ||
          fe_index_int(L, s, v->args ? v->args->value : NULL, 1, &p.step))
        return -1;
      if (p.step < 1) return ir_error(L->d, v->loc, "a slice's step must be 1 or more (slice(x, axis=..., step=-1) flips)"), -1;
      if (!v->l && !v->r && p.step == 1) continue;   /* ':' takes the whole axis */
    } else {
      int64_t i;
      if (fe_index_int(L, s, v, 0, &i)) return -1;
      p.begin = i, p.end = i == -1 ? K_SLICE_END : i + 1, p.step = 1;
      sq.axis.v[sq.axis.n++] = axis;
    }
    sl[nslice++] = p;
  }
  for (int i = 0; i < nslice; i++)
    t = fe_index_node(L, s, st, IR_OP_slice, &sl[i], t, e->loc, i == nslice - 1 && !sq.axis.n ? node_name : NULL);
  if (sq.axis.n) t = fe_index_node(L, s, st, IR_OP_squeeze, &sq, t, e->loc, node_name);
  return t;
}

static int fe_tensor_call(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, const char *node_name) {
  int op = ir_op_lookup(e->str);
  const fe_def *def = fe_find_def(L->file, e->str);
  if (def) {
    int out[1];
    const char *ret = node_name ? node_name : fe_unique(L, fe_join(L, st->pfx, def->name));
    int n = fe_call_def(L, s, st, e, def, st->pfx, ret, out, 1);
    if (n == 1) return out[0];
    if (n > 1) ir_error(L->d, e->loc, "def '%s' returns %d values; assign them to %d names", def->name, n, n);
    return -1;
  }
  if (op >= 0) return fe_call_op(L, s, st, e, op, node_name);
  if (ir_init_lookup(e->str) >= 0)
    return ir_error(L->d, e->loc, "'%s' is an initializer; it can only follow 'param NAME ='", e->str), -1;
  if (ir_optim_lookup(e->str) >= 0)
    return ir_error(L->d, e->loc, "'%s' is an optimizer; it can only follow 'train NAME with'", e->str), -1;
  const char *cands[IR_OP_COUNT + 64];
  int n = 0;
  for (int i = 0; i < IR_OP_COUNT; i++) cands[n++] = ir_ops[i].name;
  for (const fe_def *d = L->file->defs; d && n < IR_OP_COUNT + 64; d = d->next) cands[n++] = d->name;
  const char *sug = ir_suggest(e->str, cands, n);
  if (sug) ir_error(L->d, e->loc, "unknown op or def '%s'; did you mean '%s'?", e->str, sug);
  else ir_error(L->d, e->loc, "unknown op or def '%s'", e->str);
  return -1;
}

static int fe_tensor_of(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, const char *node_name) {
  switch (e->kind) {
  case FE_NUM: return fe_const(L, e->num, e->loc);
  case FE_NAME: return fe_tensor_name(L, s, e);
  case FE_CALL: return fe_tensor_call(L, s, st, e, node_name);
  case FE_NEG:
  case FE_BINOP: return fe_tensor_arith(L, s, st, e, node_name);
  case FE_STR: return ir_error(L->d, e->loc, "a string is not a tensor"), -1;
  case FE_BOOL: return ir_error(L->d, e->loc, "a boolean is not a tensor"), -1;
  case FE_TUPLE: return ir_error(L->d, e->loc, "a tuple is not a tensor (tuples are for attributes)"), -1;
  case FE_INDEX: return fe_tensor_index(L, s, st, e, node_name);
  case FE_SLICE: return ir_error(L->d, e->loc, "a slice (a:b) belongs inside x[...]"), -1;
  }
  return -1;
}

int fe_too_big(fe_lower *L, const fe_scope *s, const fe_def *callee, ir_loc loc) {
  if (L->too_big) return 1;
  const char *what = NULL;
  int max = FE_MAX_NODES;
  if (ir_nnodes(L->g) > FE_MAX_NODES) what = "nodes";
  else if (L->nconst > FE_MAX_NODES) what = "constants";
  else if (L->ncalls > FE_MAX_CALLS) what = "def calls", max = FE_MAX_CALLS;
  if (!what) return 0;
  L->too_big = true;
  if (!s->def && !callee)
    return ir_error(L->d, loc, "model '%s' grows past %d %s; lowering one model makes at most %d", L->g->name, max, what, max), 1;
  const char *chain = callee ? callee->name : NULL;
  for (; s && s->def; s = s->caller) chain = chain ? ir_strfmt(&L->g->arena, "%s <- %s", chain, s->def->name) : s->def->name;
  ir_error(L->d, loc, "the model grows past %d %s while inlining defs (def calls, innermost first: %s); "
           "defs that call others several times grow the graph exponentially with their depth", max, what, chain);
  return 1;
}

/* The parser bounds each expression's depth, but defs inlined at the bottom of deep
 * expressions add up; this bound keeps the recursion within the C stack. Each call builds
 * at most one node or constant itself, so the budgets are checked here. */
#define FE_MAX_LOWER_DEPTH 3000
int fe_tensor(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, const char *node_name) {
  if (fe_too_big(L, s, NULL, e->loc)) return -1;
  if (L->depth >= FE_MAX_LOWER_DEPTH)
    return ir_error(L->d, e->loc, "expressions nest more than %d levels deep through def calls", FE_MAX_LOWER_DEPTH), -1;
  L->depth++;
  int t = fe_tensor_of(L, s, st, e, node_name);
  L->depth--;
  return t;
}

/* ---- statements ---- */

static int fe_count_names(const fe_name *n) {
  int c = 0;
  for (; n; n = n->next) c++;
  return c;
}

/* a, b = block(x): only a def call gives several values. */
static void fe_assign_multi(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_stmt *a) {
  int want = fe_count_names(a->names), got = 0, out[64];
  const fe_def *def = a->expr->kind == FE_CALL ? fe_find_def(L->file, a->expr->str) : NULL;
  if (!def) {
    ir_error(L->d, a->loc, "%d names are assigned but the right side gives one value", want);
    return;
  }
  got = fe_call_def(L, s, st, a->expr, def, st->pfx, NULL, out, 64);   /* values named by the targets */
  if (got >= 0 && got != want)
    ir_error(L->d, a->loc, "%d names are assigned but def '%s' returns %d value%s", want, def->name, got, got == 1 ? "" : "s");
  int i = 0;
  for (const fe_name *n = a->names; n; n = n->next, i++) fe_bind(L, s, n->name, FE_B_TENSOR, got == want ? out[i] : -1, NULL, n->loc);
}

static void fe_assign(fe_lower *L, fe_scope *s, const fe_stmt *a) {
  fe_stmt_ctx st = {.targets = a->names, .pfx = fe_join(L, s->prefix, a->names->name)};
  /* A failed statement still binds its targets (to -1) so later uses stay quiet. */
  if (fe_lookup(s, a->names->name)) {                 /* report before building anything */
    fe_bind(L, s, a->names->name, FE_B_TENSOR, -1, NULL, a->names->loc);
    return;
  }
  if (a->names->next) return fe_assign_multi(L, s, &st, a);
  const char *node_name = fe_find_tensor(L, st.pfx) < 0 ? st.pfx : fe_unique(L, st.pfx);
  int t = fe_tensor(L, s, &st, a->expr, node_name);
  fe_bind(L, s, a->names->name, FE_B_TENSOR, t, NULL, a->names->loc);
}

/* Stops once the error limit is reached (nothing more would be printed, and the graph is
 * refused anyway) or a budget of fe_too_big is spent. */
static bool fe_gave_up(const fe_lower *L) { return L->too_big || L->d->errors >= L->d->max_errors; }

void fe_lower_stmts(fe_lower *L, fe_scope *s, const fe_stmt *body) {
  for (const fe_stmt *a = body; a && !fe_gave_up(L); a = a->next) fe_assign(L, s, a);
}

/* ---- declarations ---- */

static int fe_dim_entry(fe_lower *L, const fe_expr *e, int64_t *out) {
  if (e->kind == FE_NUM && e->is_int) return *out = (int64_t)e->num, 0;
  if (e->kind == FE_NAME && fe_dim_value(L, e->str, out)) return 0;
  if (e->kind == FE_NAME) {
    const char *cands[128];
    int n = 0;
    for (const fe_dim *d = L->file->dims; d && n < 128; d = d->next) cands[n++] = d->name;
    const char *sug = ir_suggest(e->str, cands, n);
    if (sug) return ir_error(L->d, e->loc, "unknown dim '%s'; did you mean '%s'?", e->str, sug), 1;
    return ir_error(L->d, e->loc, "unknown dim '%s' (declare it with 'dim %s = N')", e->str, e->str), 1;
  }
  return ir_error(L->d, e->loc, "a shape entry must be an integer or a dim name"), 1;
}

static int fe_ttype_eval(fe_lower *L, const fe_ttype *t, k_dtype *dt, k_shape *shape) {
  static const char *const dtypes[] = {"f32", "i32"};
  int err = 0;
  if (strcmp(t->dtype, "f32") == 0) *dt = K_F32;
  else if (strcmp(t->dtype, "i32") == 0) *dt = K_I32;
  else {
    const char *sug = ir_suggest(t->dtype, dtypes, 2);
    ir_error(L->d, t->loc, "unknown dtype '%s'; %s%s%s", t->dtype, sug ? "did you mean '" : "use f32 or i32", sug ? sug : "", sug ? "'?" : "");
    err = 1;
  }
  memset(shape, 0, sizeof *shape);
  for (const fe_arg *a = t->dims; a; a = a->next) {
    int64_t v = 0;
    if (shape->rank == K_MAX_RANK) return ir_error(L->d, a->loc, "a tensor has at most %d dimensions", K_MAX_RANK), 1;
    if (fe_dim_entry(L, a->value, &v)) { err = 1; continue; }
    if (v <= 0 || v > IR_MAX_DIM) {
      ir_error(L->d, a->loc, v <= 0 ? "dimension %lld must be positive" : "dimension %lld is too large (2^40 at most)", (long long)v);
      err = 1;
    }
    shape->d[shape->rank++] = v;
  }
  char why[96], ty[160];
  if (!err && ir_shape_check(shape, why, sizeof why)) {
    ir_type_str(*dt, shape, ty, sizeof ty);
    ir_error(L->d, t->loc, "%s is too large: %s", ty, why);
    err = 1;
  }
  return err;
}

static void fe_decl_input(fe_lower *L, fe_scope *s, const fe_stmt *a) {
  k_dtype dt;
  k_shape shape;
  if (fe_ttype_eval(L, &a->type, &dt, &shape)) return (void)fe_bind(L, s, a->names->name, FE_B_TENSOR, -1, NULL, a->names->loc);
  int t = ir_graph_add_tensor(L->g, a->names->name, IR_T_INPUT, a->names->loc);
  ir_tensor *x = ir_tensor_at(L->g, t);
  x->dtype = dt, x->shape = shape, x->shape_known = x->declared = true;
  fe_bind(L, s, a->names->name, FE_B_TENSOR, t, NULL, a->names->loc);
}

/* `normal(std=0.01)` or `constant(0.5)`: keywords, or positional in schema order; every
 * required attribute given. */
static int fe_schema_call(fe_lower *L, fe_scope *s, const fe_expr *call, const ir_attr_def *attrs, void *obj, const char *what) {
  const ir_attr_def *next = attrs;
  int err = 0;
  uint64_t given = 0;
  for (const fe_arg *a = call->args; a; a = a->next) {
    const ir_attr_def *def = a->key ? ir_attr_find(attrs, a->key) : (next && next->name ? next++ : NULL);
    if (def) given |= 1ull << (def - attrs);
    ir_aval v;
    char msg[256];
    if (!def) {
      err = 1;
      ir_error(L->d, a->loc, a->key ? "%s has no attribute '%s'" : "%s takes no more arguments", what, a->key);
      continue;
    }
    if (fe_eval_attr(L, s, a->value, &v)) {          /* already reported */
      err = 1;
    } else if (ir_attr_set(def, obj, &v, msg, sizeof msg)) {
      ir_error(L->d, a->loc, "%s: %s", what, msg);
      err = 1;
    }
  }
  for (const ir_attr_def *a = attrs; a && a->name && !err; a++)
    if (a->required && !(given >> (a - attrs) & 1)) return ir_error(L->d, call->loc, "%s needs '%s'", what, a->name), 1;
  return err;
}

static int fe_decl_init(fe_lower *L, fe_scope *s, const fe_expr *call, ir_tensor *t) {
  int k = ir_init_lookup(call->str);
  if (k < 0) {
    const char *names[K_INIT_COUNT];
    for (int i = 0; i < K_INIT_COUNT; i++) names[i] = ir_inits[i].name;
    const char *sug = ir_suggest(call->str, names, K_INIT_COUNT);
    ir_error(L->d, call->loc, "unknown initializer '%s'%s%s%s", call->str, sug ? "; did you mean '" : "", sug ? sug : "", sug ? "'?" : "");
    return 1;
  }
  t->init = (ir_init){.kind = (k_init_kind)k};
  ir_attr_defaults(ir_inits[k].attrs, &t->init);
  t->has_init = true;
  return fe_schema_call(L, s, call, ir_inits[k].attrs, &t->init, ir_inits[k].name);
}

/* `param NAME [: type] [= init]` and `const NAME : type [= init]`. A const is an aux state
 * that nothing writes (ir.h): the optimizer skips it as it skips batch_norm's statistics.
 * Its type is required: it holds data from the weights file, and an op reading it in
 * arithmetic could not infer its shape. */
static void fe_decl_param(fe_lower *L, fe_scope *s, const fe_stmt *a) {
  bool is_const = a->kind == FE_S_CONST;
  k_dtype dt = K_F32;
  k_shape shape = {0};
  bool bad = a->has_type && fe_ttype_eval(L, &a->type, &dt, &shape);
  if (!bad && dt != K_F32) bad = true, ir_error(L->d, a->type.loc, is_const ? "const tensors are f32, as parameters are" : "parameters are f32");
  if (!bad && is_const && !a->has_type)
    bad = true, ir_error(L->d, a->names->loc, "const '%s' needs a type: const %s : f32[...]", a->names->name, a->names->name);
  if (bad) return (void)fe_bind(L, s, a->names->name, FE_B_TENSOR, -1, NULL, a->names->loc);   /* later uses stay quiet */
  int t = ir_graph_add_tensor(L->g, a->names->name, is_const ? IR_T_AUX : IR_T_PARAM, a->names->loc);
  ir_tensor *x = ir_tensor_at(L->g, t);
  x->shape = shape, x->shape_known = x->declared = a->has_type, x->fixed = is_const;
  if (a->expr) fe_decl_init(L, s, a->expr, ir_tensor_at(L->g, t));
  fe_bind(L, s, a->names->name, FE_B_TENSOR, t, NULL, a->names->loc);
}

static int fe_model_tensor(fe_lower *L, fe_scope *s, const fe_name *n) {
  const fe_binding *b = fe_lookup(s, n->name);
  if (b && b->kind == FE_B_TENSOR) return b->tensor;     /* -1 when its statement failed */
  fe_error_unknown_name(L, s, n->name, n->loc);
  return -1;
}

/* An output is computed by the model: a name bound to a literal (`v = 0`) has no buffer, no
 * node and no name of its own (it prints as `%const0`, which does not read back), so it is
 * refused. Found by fuzz_frontend. */
static void fe_decl_output(fe_lower *L, fe_scope *s, const fe_stmt *a) {
  for (const fe_name *n = a->names; n; n = n->next) {
    int t = fe_model_tensor(L, s, n);
    if (t < 0) continue;
    if (ir_tensor_at(L->g, t)->kind == IR_T_CONST) {
      ir_error(L->d, n->loc, "'%s' is a constant (%g); an output must be computed from the model's inputs or parameters",
               n->name, (double)ir_tensor_at(L->g, t)->value);
      continue;
    }
    const char *tn = ir_tensor_at(L->g, t)->name;       /* one tensor, one name: a map, not a walk */
    if (fe_map_get(&L->outputs, tn)) {
      ir_error(L->d, n->loc, "'%s' is already an output", n->name);
      continue;
    }
    fe_map_put(&L->outputs, L->x.arena, tn, (void *)tn);
    *(int *)ir_vec_push(&L->g->outputs) = t;
  }
}

/* `schedule cosine(total=1000, warmup=100)` into *k; 1 after an error. */
static int fe_decl_schedule(fe_lower *L, fe_scope *s, const fe_expr *e, k_schedule *k) {
  int kind = e->kind == FE_CALL ? ir_sched_lookup(e->str) : -1;
  if (kind < 0) {
    const char *names[K_SCHED_COUNT - 1];
    for (int i = 1; i < K_SCHED_COUNT; i++) names[i - 1] = ir_scheds[i].name;
    const char *sug = e->kind == FE_CALL ? ir_suggest(e->str, names, K_SCHED_COUNT - 1) : NULL;
    ir_error(L->d, e->loc, "unknown schedule '%s'; %s%s%s", e->kind == FE_CALL ? e->str : "?",
             sug ? "did you mean '" : "use step, multistep, exponential, cosine or onecycle", sug ? sug : "", sug ? "'?" : "");
    return 1;
  }
  *k = (k_schedule){.kind = kind};
  ir_attr_defaults(ir_scheds[kind].attrs, k);
  if (fe_schema_call(L, s, e, ir_scheds[kind].attrs, k, ir_scheds[kind].name)) return 1;
  const char *bad = ir_sched_check(k);
  if (bad) return ir_error(L->d, e->loc, "schedule %s: %s", ir_scheds[kind].name, bad), 1;
  return 0;
}

/* `wd_exclude=bias,norm` into its bits (ir_wdx_names), each kind once. */
static int fe_decl_wd_exclude(fe_lower *L, const fe_name *names, uint32_t *bits) {
  for (const fe_name *n = names; n; n = n->next) {
    uint32_t b = ir_wdx_lookup(n->name);
    if (!b) {
      const char *sug = ir_suggest(n->name, ir_wdx_names, IR_WDX_COUNT);
      return ir_error(L->d, n->loc, "wd_exclude: unknown kind '%s'; %s%s%s", n->name, sug ? "did you mean '" : "use bias, norm or both",
                      sug ? sug : "", sug ? "'?" : ""), 1;
    }
    if (*bits & b) return ir_error(L->d, n->loc, "wd_exclude names '%s' twice", n->name), 1;
    *bits |= b;
  }
  return 0;
}

static void fe_decl_train(fe_lower *L, fe_scope *s, const fe_stmt *a) {
  if (L->g->has_train) {
    ir_error(L->d, a->loc, "a model has one train statement");
    return ir_note(L->d, L->g->train_loc, "the first train statement"), (void)0;
  }
  int t = fe_model_tensor(L, s, a->names);
  int k = ir_optim_lookup(a->expr->str);
  if (k < 0) {
    const char *names[K_OPT_COUNT];
    for (int i = 0; i < K_OPT_COUNT; i++) names[i] = ir_optims[i].name;
    const char *sug = ir_suggest(a->expr->str, names, K_OPT_COUNT);
    ir_error(L->d, a->expr->loc, "unknown optimizer '%s'; %s%s%s", a->expr->str, sug ? "did you mean '" : "use sgd, adam or adamw", sug ? sug : "", sug ? "'?" : "");
    return;
  }
  ir_optimizer *o = &L->g->optim;
  *o = (ir_optimizer){.kind = (k_optim_kind)k};
  ir_attr_defaults(ir_optims[k].attrs, o);
  bool lr = false;   /* before the schema's own "sgd needs 'lr'", to say what lr is */
  for (const fe_arg *x = a->expr->args; x; x = x->next) lr |= !x->key || strcmp(x->key, "lr") == 0;
  if (k == K_OPT_SGD && !lr) return ir_error(L->d, a->expr->loc, "sgd needs a learning rate: sgd(lr=0.1)"), (void)0;
  if (fe_schema_call(L, s, a->expr, ir_optims[k].attrs, o, ir_optims[k].name)) return;
  if (!(o->lr > 0)) return ir_error(L->d, a->expr->loc, "the learning rate must be positive"), (void)0;
  if (o->sgd.nesterov && !(k == K_OPT_SGD && o->sgd.momentum > 0))
    return ir_error(L->d, a->expr->loc, "nesterov needs momentum: sgd(lr=0.1, momentum=0.9, nesterov=true)"), (void)0;
  if (a->sched && fe_decl_schedule(L, s, a->sched, &o->sched)) return;
  if (a->clip) {
    ir_aval v;
    if (fe_eval_attr(L, s, a->clip, &v)) return;
    if (v.kind != IR_AV_NUM || !(v.num > 0) || !isfinite(v.num) || v.num >= 3.4e38)
      return ir_error(L->d, a->clip->loc, "clip_norm must be a positive number"), (void)0;
    o->clip_norm = (float)v.num;
  }
  if (fe_decl_wd_exclude(L, a->wdx, &o->wd_exclude)) return;
  L->g->has_train = true, L->g->loss = t, L->g->train_loc = a->names->loc;
}

int fe_train_clause(const char *name, const char *clause, ir_optimizer *out, ir_diag *d) {
  if (strpbrk(clause, "\n\r")) return ir_error(d, (ir_loc){name, 0, 0}, "the train statement must be one line"), 1;
  char *src = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&src, &len);
  if (!m) return ir_error(d, (ir_loc){name, 0, 0}, "out of memory"), 1;
  fprintf(m, "model train_clause {\n  param w : f32[1]\n  loss = sum(w)\n  train loss with %s\n}\n", clause);
  fclose(m);
  ir_diag own;   /* its own, for the text's caret lines: the text is gone when this returns */
  ir_diag_init(&own, d->out);
  own.max_errors = d->max_errors;
  fe_file *f = src ? fe_parse_text(name, src, len, &own) : NULL;
  ir_graph *g = f && !own.errors && f->models ? fe_lower_model(f, f->models, NULL, 0, &own) : NULL;
  if (g) *out = g->optim;
  else if (!own.errors) ir_error(&own, (ir_loc){name, 0, 0}, "'%s' is not a train statement's optimizer", clause);
  d->errors += own.errors, d->failed += own.failed;
  int errors = own.errors;
  if (g) ir_graph_free(g);
  if (f) fe_file_free(f);
  ir_diag_free(&own);
  free(src);
  return errors;
}

static void fe_model_item(fe_lower *L, fe_scope *s, const fe_stmt *a) {
  switch (a->kind) {
  case FE_S_ASSIGN: fe_assign(L, s, a); break;
  case FE_S_INPUT: fe_decl_input(L, s, a); break;
  case FE_S_PARAM: case FE_S_CONST: fe_decl_param(L, s, a); break;
  case FE_S_OUTPUT: fe_decl_output(L, s, a); break;
  case FE_S_TRAIN: fe_decl_train(L, s, a); break;
  }
}

/* Whether any learnable parameter feeds tensor t (a walk up through the producers). */
static bool fe_reaches_param(const ir_graph *g, int t) {
  int n = ir_ntensors(g), top = 0;
  int *stack = malloc(sizeof(int) * (size_t)n);
  bool *seen = calloc((size_t)n, 1), found = false;
  if (!stack || !seen) KILN_ICE("out of memory");
  stack[top++] = t, seen[t] = true;
  while (top && !found) {
    const ir_tensor *x = ir_tensor_at(g, stack[--top]);
    found = x->kind == IR_T_PARAM;
    const ir_node *p = x->producer >= 0 ? ir_node_at(g, x->producer) : NULL;
    for (int j = 0; p && j < p->nin; j++)
      if (p->in[j] >= 0 && !seen[p->in[j]]) seen[p->in[j]] = true, stack[top++] = p->in[j];
  }
  free(stack), free(seen);
  return found;
}

ir_graph *fe_lower_at(const fe_job *j, fe_at x, ir_diag *d) {
  int before = d->failed;
  fe_model *m = j->model;
  fe_lower L = {.file = j->file, .g = ir_graph_new(m->name), .d = d, .defines = j->defines, .ndefines = j->ndefines,
                .bounds = &j->bounds, .x = x};
  fe_scope s = {.prefix = ""};
  for (const fe_stmt *a = m->items; a && !fe_gave_up(&L); a = a->next) fe_model_item(&L, &s, a);
  fe_too_big(&L, &s, NULL, m->loc);       /* the last statement may have crossed a budget */
  if (L.g->outputs.len == 0 && !L.g->has_train && d->failed == before)
    ir_error(d, m->loc, "model '%s' has no output and no train statement", m->name);
  if (d->failed == before) ir_infer_shapes(L.g, d);
  if (d->failed == before && !x.quiet && L.g->has_train && L.g->loss >= 0 && !fe_reaches_param(L.g, L.g->loss))
    ir_warning(d, L.g->train_loc, "no parameter reaches the loss '%s': train_step will change no weight",
               ir_tensor_at(L.g, L.g->loss)->name);
#ifdef KILN_DEBUG
  if (d->failed == before && ir_verify(L.g)) KILN_ICE("lowering produced an invalid graph");
#endif
  if (d->failed == before) return L.g;
  ir_graph_free(L.g);
  return NULL;
}

ir_graph *fe_lower_model(fe_file *f, fe_model *m, const fe_define *defs, int ndefs, ir_diag *d) {
  fe_job j = {.file = f, .model = m, .defines = defs, .ndefines = ndefs};
  fe_bounds_init(&j);
  bool *used = ir_alloc(&f->arena, (size_t)j.bounds.n + 1);
  ir_graph *g = fe_lower_at(&j, (fe_at){.used = used, .arena = &f->arena}, d);
  return g ? fe_bound_graph(&j, g, used, d) : NULL;
}
