/* fe_call.c — calls: an op call becomes a node, creating the learnable inputs and aux
 * states it omits (named <prefix>.<arg>, SPEC section 1); a def call is inlined with its
 * tensor arguments bound positionally and its attributes by keyword. */
#include "fe_lower.h"

#include <string.h>

/* ---- op calls ---- */

static int fe_op_attr(fe_lower *L, fe_scope *s, const ir_opdef *op, const fe_arg *a, void *param, uint64_t *seen) {
  bool is_aux = false;
  for (int i = 0; op->aux && op->aux[i]; i++) is_aux |= strcmp(op->aux[i], a->key) == 0;
  if (ir_op_arg_index(op, a->key) >= 0 || is_aux)
    return ir_error(L->d, a->loc, "'%s' is an input of %s; pass it positionally", a->key, op->name), 1;
  const ir_attr_def *def = ir_attr_find(op->attrs, a->key);
  if (!def) {
    const char *names[32];
    int n = 0;
    for (const ir_attr_def *x = op->attrs; x && x->name && n < 32; x++) names[n++] = x->name;
    const char *sug = ir_suggest(a->key, names, n);
    if (!n) return ir_error(L->d, a->loc, "%s takes no attributes, but '%s' is given", op->name, a->key), 1;
    if (sug) return ir_error(L->d, a->loc, "%s has no attribute '%s'; did you mean '%s'?", op->name, a->key, sug), 1;
    return ir_error(L->d, a->loc, "%s has no attribute '%s'", op->name, a->key), 1;
  }
  int idx = (int)(def - op->attrs);
  if (*seen >> idx & 1) return ir_error(L->d, a->loc, "attribute '%s' is given twice", a->key), 1;
  *seen |= 1ull << idx;
  ir_aval v;
  char msg[256];
  if (fe_eval_attr(L, s, a->value, &v)) return 1;
  if (ir_attr_set(def, param, &v, msg, sizeof msg)) return ir_error(L->d, a->loc, "%s: %s", op->name, msg), 1;
  return 0;
}

static int fe_op_attrs(fe_lower *L, fe_scope *s, const ir_opdef *op, const fe_expr *e, void *param) {
  uint64_t seen = 0;
  int err = 0;
  for (const fe_arg *a = e->args; a; a = a->next)
    if (a->key) err |= fe_op_attr(L, s, op, a, param, &seen);
  for (const ir_attr_def *d = op->attrs; d && d->name && !err; d++)
    if (d->required && !(seen >> (d - op->attrs) & 1)) {
      err = 1;
      ir_error(L->d, e->loc, "%s needs attribute '%s'", op->name, d->name);
    }
  return err;
}

/* The optional args (a bias) are left out when the op's no_bias attribute is true. */
static bool fe_op_omits(const ir_opdef *op, int i, const void *param) {
  const ir_attr_def *nb = ir_attr_find(op->attrs, "no_bias");
  int32_t v = 0;
  if (!(op->optional >> i & 1) || !nb) return false;
  memcpy(&v, (const char *)param + nb->offset, sizeof v);
  return v != 0;
}

/* One call per statement may create parameters; a second would reuse the names. */
static int fe_op_claim(fe_lower *L, fe_stmt_ctx *st, const char *what, ir_loc loc) {
  if (st->created) {
    ir_error(L->d, loc, "this %s would create parameters named '%s.*', but %s in the same statement already does;"
             " give one of them its own statement", what, st->pfx, st->creator_what);
    ir_note(L->d, st->creator, "the first call that creates parameters");
    return 1;
  }
  st->created = true, st->creator = loc, st->creator_what = what;
  return 0;
}

static int fe_op_param(fe_lower *L, fe_stmt_ctx *st, const char *role, bool aux, ir_loc loc) {
  const char *name = fe_join(L, st->pfx, role);
  if (fe_find_tensor(L, name) >= 0)
    return ir_error(L->d, loc, "the parameter name '%s' is already taken; give this call its own statement", name), -1;
  return ir_graph_add_tensor(L->g, name, aux ? IR_T_AUX : IR_T_PARAM, loc);
}

/* A declared param passed for an aux state (as the printer writes batch_norm's moving
 * statistics) becomes aux: the op updates it, the optimizer does not. Only params can be:
 * a const would change in train_step, which its declaration rules out. */
static int fe_op_aux_given(fe_lower *L, const ir_opdef *op, const char *role, int t, ir_loc loc) {
  ir_tensor *x = ir_tensor_at(L->g, t);
  if (x->fixed)
    return ir_error(L->d, loc, "%s updates its aux state '%s' in train_step, but '%s' is a const; declare it with param", op->name,
                    role, x->name), 1;
  if (x->kind == IR_T_PARAM || x->kind == IR_T_AUX) return x->kind = IR_T_AUX, 0;
  return ir_error(L->d, loc, "%s's aux state '%s' must be a param, but '%s' is not one", op->name, role, x->name), 1;
}

/* Positional tensors, then the omitted learnable args and aux states, created. */
static int fe_op_inputs(fe_lower *L, fe_stmt_ctx *st, const ir_opdef *op, const fe_expr *e,
                        const int *pos, int npos, const void *param, int *in) {
  int nargs = ir_op_nargs(op), naux = ir_op_naux(op), n = 0;
  bool claimed = false;
  if (op->variadic) return memcpy(in, pos, sizeof(int) * (size_t)npos), npos ? npos : (ir_error(L->d, e->loc, "%s needs at least one input", op->name), -1);
  if (npos > nargs + naux)
    return ir_error(L->d, e->loc, "%s takes at most %d tensor input%s, but %d are given", op->name, nargs + naux,
                    nargs + naux == 1 ? "" : "s", npos), -1;
  for (int i = 0; i < nargs + naux; i++) {
    bool aux = i >= nargs;
    const char *role = aux ? op->aux[i - nargs] : op->args[i];
    if (i < npos && aux && fe_op_aux_given(L, op, role, pos[i], e->loc)) return -1;
    if (i < npos) { in[n++] = pos[i]; continue; }
    if (!aux && fe_op_omits(op, i, param)) continue;
    if (!aux && !(op->learnable >> i & 1))
      return ir_error(L->d, e->loc, "%s is missing its input '%s'", op->name, role), -1;
    if (!claimed && fe_op_claim(L, st, op->name, e->loc)) return -1;
    claimed = true;
    if ((in[n++] = fe_op_param(L, st, role, aux, e->loc)) < 0) return -1;
  }
  return n;
}

int fe_call_op(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, int opi, const char *node_name) {
  const ir_opdef *op = &ir_ops[opi];
  int pos[64], in[64], npos = 0, err = 0;
  for (const fe_arg *a = e->args; a; a = a->next) {
    if (a->key) continue;
    if (npos == 64) return ir_error(L->d, a->loc, "too many inputs (at most 64)"), -1;
    pos[npos] = fe_tensor(L, s, st, a->value, NULL);
    err |= pos[npos++] < 0;
  }
  void *param = op->param_size ? ir_alloc(&L->g->arena, op->param_size) : NULL;
  ir_attr_defaults(op->attrs, param);
  if (fe_op_attrs(L, s, op, e, param) || err) return -1;
  int nin = fe_op_inputs(L, st, op, e, pos, npos, param, in);
  if (nin < 0) return -1;
  const char *name = node_name && fe_find_tensor(L, node_name) < 0 ? node_name
                   : fe_unique(L, node_name ? node_name : fe_join(L, st->pfx, op->name));
  int n = ir_graph_add_node(L->g, opi, name, nin, in, e->loc);
  ir_node *node = ir_node_at(L->g, n);
  node->from = s->expansion;
  if (param) memcpy(node->param, param, op->param_size);
  return node->out[0];
}

/* ---- def calls ---- */

/* When def is already being inlined, reports the cycle ("ping -> pong -> ping") and
 * returns 1. */
static int fe_def_recursion(fe_lower *L, const fe_scope *s, const fe_def *def, ir_loc loc) {
  const char *cycle = def->name;
  const fe_scope *t = s;
  while (t && t->def != def) t = t->caller;
  if (!t) return 0;
  for (; s != t; s = s->caller) cycle = ir_strfmt(&L->g->arena, "%s -> %s", s->def->name, cycle);
  ir_error(L->d, loc, "def '%s' calls itself (%s -> %s); recursion never ends at compile time", def->name, def->name, cycle);
  return 1;
}

static const fe_dparam *fe_def_param(const fe_def *def, const char *name) {
  for (const fe_dparam *p = def->params; p; p = p->next)
    if (strcmp(p->name, name) == 0) return p;
  return NULL;
}

static int fe_def_unknown_kw(fe_lower *L, const fe_def *def, const fe_arg *a) {
  const char *names[64];
  int n = 0;
  for (const fe_dparam *p = def->params; p && n < 64; p = p->next)
    if (p->atype) names[n++] = p->name;
  const char *sug = ir_suggest(a->key, names, n);
  if (sug) return ir_error(L->d, a->loc, "def '%s' has no attribute '%s'; did you mean '%s'?", def->name, a->key, sug), 1;
  return ir_error(L->d, a->loc, "def '%s' has no attribute '%s'", def->name, a->key), 1;
}

/* Tensor params take the positional arguments, evaluated in the caller's scope. */
static int fe_def_bind_tensors(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, fe_scope *callee, const fe_expr *e) {
  const fe_arg *a = e->args;
  int want = 0, got = 0, err = 0;
  for (const fe_arg *x = e->args; x; x = x->next) {
    const fe_dparam *p = x->key ? fe_def_param(callee->def, x->key) : NULL;
    if (p && !p->atype) return 1;      /* a tensor passed by keyword: fe_def_bind_attrs says so */
    got += !x->key;
  }
  for (const fe_dparam *p = callee->def->params; p; p = p->next) want += !p->atype;
  if (want != got)
    return ir_error(L->d, e->loc, "def '%s' takes %d tensor argument%s, but %d %s given", callee->def->name, want,
                    want == 1 ? "" : "s", got, got == 1 ? "is" : "are"), 1;
  for (const fe_dparam *p = callee->def->params; p; p = p->next) {
    if (p->atype) continue;
    while (a->key) a = a->next;
    int t = fe_tensor(L, s, st, a->value, NULL);
    err |= t < 0 || !fe_bind(L, callee, p->name, FE_B_TENSOR, t, NULL, p->loc);
    a = a->next;
  }
  return err;
}

/* Attribute params come by keyword (evaluated in the caller) or from their defaults
 * (evaluated in the def, so a default may use the params before it). */
static int fe_def_bind_attrs(fe_lower *L, fe_scope *s, fe_scope *callee, const fe_expr *e) {
  const fe_def *def = callee->def;
  int err = 0;
  for (const fe_arg *a = e->args; a; a = a->next) {
    if (!a->key) continue;
    const fe_dparam *p = fe_def_param(def, a->key);
    if (!p) { err |= fe_def_unknown_kw(L, def, a); continue; }
    if (!p->atype) {
      ir_error(L->d, a->loc, "'%s' is a tensor parameter of '%s'; pass it positionally", a->key, def->name);
      err = 1;
      continue;
    }
    ir_aval v;
    if (fe_eval_attr(L, s, a->value, &v) || fe_check_atype(L, p->atype, &v, ir_strfmt(&L->g->arena, "attribute '%s' of '%s'", p->name, def->name), a->loc)) { err = 1; continue; }
    err |= !fe_bind(L, callee, p->name, FE_B_ATTR, -1, &v, a->loc);
  }
  for (const fe_dparam *p = def->params; p && !err; p = p->next) {
    if (!p->atype || fe_lookup(callee, p->name)) continue;
    if (!p->dflt) { err = 1; ir_error(L->d, e->loc, "def '%s' needs attribute '%s'", def->name, p->name); continue; }
    ir_aval v;
    err |= fe_eval_attr(L, callee, p->dflt, &v) || fe_check_atype(L, p->atype, &v, ir_strfmt(&L->g->arena, "the default of '%s'", p->name), p->loc);
    if (!err) fe_bind(L, callee, p->name, FE_B_ATTR, -1, &v, p->loc);
  }
  return err;
}

/* PARAM and AUX tensors so far, counted once each (tensors are only appended, and a PARAM
 * that becomes AUX still counts once): a def call asks before and after its body. */
static int fe_count_params(fe_lower *L) {
  for (; L->params_counted < ir_ntensors(L->g); L->params_counted++) {
    ir_tensor_kind k = ir_tensor_at(L->g, L->params_counted)->kind;
    L->nparams += k == IR_T_PARAM || k == IR_T_AUX;
  }
  return L->nparams;
}

/* The name of a return value's node: ret_name, or for `p, q = blk(x)` (ret_name NULL) the
 * next target, so q's tensor is named q and not p_1. */
static const char *fe_ret_name(fe_lower *L, const fe_scope *callee, const char *ret_name, const fe_name **target) {
  if (ret_name || !*target) return fe_unique(L, ret_name ? ret_name : callee->prefix);
  const char *n = fe_join(L, callee->caller->prefix, (*target)->name);
  *target = (*target)->next;
  return fe_unique(L, n);
}

/* A returned value that a statement of the def computed (`return a, d`) carries that
 * statement's inner name (p.a); it takes its call-site name instead, as a value computed in
 * the return expression does. Its producer node and hidden outputs follow (node name =
 * visible output name). Tensors from before the call (arguments, parameters) and values
 * already renamed by an earlier return keep their names. */
static void fe_ret_rename(fe_lower *L, int t, int first, const char *name) {
  ir_tensor *x = ir_tensor_at(L->g, t);
  if (t < first || x->kind != IR_T_VALUE || x->producer < 0 || strcmp(x->name, name) == 0) return;
  ir_node *n = ir_node_at(L->g, x->producer);
  if (n->out[0] != t || strcmp(n->name, x->name) != 0) return;   /* a hidden output, or renamed already */
  n->name = ir_strdup(&L->g->arena, name);
  fe_find_tensor(L, name);                     /* index every tensor under its old name first */
  for (int j = 0; j < n->nout; j++) {
    if (n->out[j] < 0) continue;
    ir_tensor *o = ir_tensor_at(L->g, n->out[j]);
    o->name = j == 0 ? n->name : ir_strfmt(&L->g->arena, "%s.%s", name, ir_ops[n->op].outs[j]);
    fe_map_put(&L->tensors, L->x.arena, o->name, (void *)(intptr_t)(n->out[j] + 1));   /* taken now */
  }
}

static int fe_def_returns(fe_lower *L, fe_scope *callee, const char *ret_name, const fe_name *targets, int first,
                          int *out, int max) {
  fe_stmt_ctx rst = {.pfx = callee->prefix};
  int n = 0;
  for (const fe_arg *r = callee->def->rets; r; r = r->next) {
    const char *name = fe_ret_name(L, callee, ret_name, &targets);
    int t = fe_tensor(L, callee, &rst, r->value, name);
    if (t < 0) return -1;
    fe_ret_rename(L, t, first, name);
    if (n < max) out[n] = t;
    n++;
  }
  return n;
}

/* An error inside a def's body points into the def; this note says which call led there (one
 * per level of nesting, innermost first, as each call returns). Errors found after lowering
 * (shape inference) print the whole chain from the node's `from`. */
static void fe_def_expansion_note(fe_lower *L, const fe_def *def, const fe_expr *call) {
  ir_note_expansion(L->d, &(ir_expansion){def->name, call->loc, NULL});
}

int fe_call_def(fe_lower *L, fe_scope *s, fe_stmt_ctx *st, const fe_expr *e, const fe_def *def,
                const char *callsite, const char *ret_name, int *out, int max) {
  if (fe_def_recursion(L, s, def, e->loc) || fe_too_big(L, s, def, e->loc)) return -1;
  if (s->depth >= 64) return ir_error(L->d, e->loc, "defs are nested more than 64 calls deep"), -1;
  L->ncalls++;
  ir_expansion *x = ir_alloc(L->x.arena, sizeof *x);
  *x = (ir_expansion){def->name, e->loc, s->expansion};
  fe_scope callee = {.prefix = callsite, .def = def, .expansion = x, .caller = s, .depth = s->depth + 1};
  int before = fe_count_params(L), failed = L->d->failed, first = ir_ntensors(L->g);
  if (fe_def_bind_tensors(L, s, st, &callee, e) | fe_def_bind_attrs(L, s, &callee, e)) return -1;
  fe_lower_stmts(L, &callee, def->body);
  if (L->d->failed != failed) return fe_def_expansion_note(L, def, e), -1;
  int n = fe_def_returns(L, &callee, ret_name, st->targets, first, out, max);
  if (n < 0 && L->d->failed != failed) fe_def_expansion_note(L, def, e);
  if (n > 0 && fe_count_params(L) > before && fe_op_claim(L, st, ir_strfmt(&L->g->arena, "call of '%s'", def->name), e->loc)) return -1;
  return n;
}
