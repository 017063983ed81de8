/* fe_eval.c — compile-time values: dims (with -D overrides), attribute expressions
 * (numbers, strings, booleans, tuples, arithmetic over dims and a def's attribute
 * parameters) and the type check of a def's typed parameters. */
#include "fe_lower.h"

#include <math.h>
#include <string.h>

/* Built on first use: lowering looks a name up in every statement, and a walk of the lists
 * made a file of many dims or defs quadratic. */
static fe_file_index *fe_index(fe_file *f) {
  if (f->index) return f->index;
  fe_file_index *x = ir_alloc(&f->arena, sizeof *x);
  for (fe_dim *d = f->dims; d; d = d->next) fe_map_put(&x->dims, &f->arena, d->name, d);
  for (fe_def *d = f->defs; d; d = d->next) fe_map_put(&x->defs, &f->arena, d->name, d);
  return f->index = x;
}

/* A dim's value where it is not bounded: -D's, else its declaration's. */
static bool fe_dim_fixed(const fe_lower *L, const char *name, int64_t *out) {
  for (int i = 0; i < L->ndefines; i++)
    if (strcmp(L->defines[i].name, name) == 0) return *out = L->defines[i].value, true;
  const fe_dim *d = fe_map_get(&fe_index(L->file)->dims, name);
  if (d) *out = d->value;
  return d != NULL;
}

bool fe_dim_value(fe_lower *L, const char *name, int64_t *out) {
  intptr_t slot = L->bounds ? (intptr_t)fe_map_get(&L->bounds->slot, name) : 0;
  if (!slot--) return fe_dim_fixed(L, name, out);
  if (L->x.used) L->x.used[slot] = true;
  *out = L->x.at ? L->x.at[slot] : L->bounds->b[slot].hi;
  return true;
}

bool fe_is_dim(const fe_lower *L, const char *name) {
  int64_t v;
  return fe_dim_fixed(L, name, &v);
}

const fe_def *fe_find_def(fe_file *f, const char *name) {
  return fe_map_get(&fe_index(f)->defs, name);
}

/* "unknown name 'x'", with the closest name in scope or among the dims. */
void fe_error_unknown_name(fe_lower *L, const fe_scope *s, const char *name, ir_loc loc) {
  const char *cands[256];
  int n = 0;
  for (const fe_binding *b = s->vars; b && n < 200; b = b->next) cands[n++] = b->name;
  for (const fe_dim *d = L->file->dims; d && n < 256; d = d->next) cands[n++] = d->name;
  const char *sug = ir_suggest(name, cands, n);
  if (sug) ir_error(L->d, loc, "unknown name '%s'; did you mean '%s'?", name, sug);
  else ir_error(L->d, loc, "unknown name '%s'", name);
}

static int fe_eval_name(fe_lower *L, const fe_scope *s, const fe_expr *e, ir_aval *out) {
  const fe_binding *b = fe_lookup(s, e->str);
  int64_t v;
  if (b && b->kind == FE_B_ATTR) return *out = b->val, out->loc = e->loc, 0;
  if (b) return ir_error(L->d, e->loc, "'%s' is a tensor; attributes take numbers, strings, booleans and tuples", e->str), 1;
  if (fe_dim_value(L, e->str, &v)) return *out = (ir_aval){.kind = IR_AV_NUM, .num = (double)v, .is_int = true, .loc = e->loc}, 0;
  fe_error_unknown_name(L, s, e->str, e->loc);
  return 1;
}

static int fe_eval_tuple(fe_lower *L, const fe_scope *s, const fe_expr *e, ir_aval *out) {
  int n = 0, err = 0;
  for (const fe_arg *a = e->args; a; a = a->next) n++;
  *out = (ir_aval){.kind = IR_AV_TUPLE, .n = n, .loc = e->loc};
  out->items = ir_alloc(L->x.arena, sizeof(ir_aval) * (size_t)(n + 1));
  int i = 0;
  for (const fe_arg *a = e->args; a; a = a->next) err |= fe_eval_attr(L, s, a->value, &out->items[i++]);
  return err;
}

/* Integer arithmetic stays integral where Python's would (/ only when exact). */
static int fe_eval_arith(fe_lower *L, char op, const ir_aval *a, const ir_aval *b, ir_aval *out, ir_loc loc) {
  double x = a->num, y = b->num, r;
  bool ints = a->is_int && b->is_int;
  switch (op) {
  case '+': r = x + y; break;
  case '-': r = x - y; break;
  case '*': r = x * y; break;
  case '@': return ir_error(L->d, loc, "'@' multiplies tensors; attributes take numbers"), 1;
  case '/':
    if (y == 0) return ir_error(L->d, loc, "division by zero in an attribute"), 1;
    r = x / y;
    ints = ints && fmod(x, y) == 0;
    break;
  default: r = pow(x, y); ints = ints && y >= 0; break;
  }
  if (!isfinite(r)) return ir_error(L->d, loc, "attribute arithmetic overflows"), 1;
  *out = (ir_aval){.kind = IR_AV_NUM, .num = r, .is_int = ints && fabs(r) < 9e15, .loc = loc};
  return 0;
}

int fe_eval_attr(fe_lower *L, const fe_scope *s, const fe_expr *e, ir_aval *out) {
  ir_aval a, b;
  switch (e->kind) {
  case FE_NUM: *out = (ir_aval){.kind = IR_AV_NUM, .num = e->num, .is_int = e->is_int, .loc = e->loc}; return 0;
  case FE_STR: *out = (ir_aval){.kind = IR_AV_STR, .str = e->str, .loc = e->loc}; return 0;
  case FE_BOOL: *out = (ir_aval){.kind = IR_AV_BOOL, .num = e->num, .loc = e->loc}; return 0;
  case FE_NAME: return fe_eval_name(L, s, e, out);
  case FE_TUPLE: return fe_eval_tuple(L, s, e, out);
  case FE_CALL: return ir_error(L->d, e->loc, "'%s(...)' is a call; attributes take numbers, strings, booleans and tuples", e->str), 1;
  case FE_INDEX: return ir_error(L->d, e->loc, "an index (x[...]) is a tensor; attributes take numbers, strings, booleans and tuples"), 1;
  case FE_SLICE: return ir_error(L->d, e->loc, "a slice (a:b) belongs inside x[...]"), 1;
  case FE_NEG:
    if (fe_eval_attr(L, s, e->l, &a)) return 1;
    if (a.kind != IR_AV_NUM) return ir_error(L->d, e->loc, "'-' needs a number"), 1;
    *out = a, out->num = -a.num, out->loc = e->loc;
    return 0;
  case FE_BINOP:
    if (fe_eval_attr(L, s, e->l, &a) || fe_eval_attr(L, s, e->r, &b)) return 1;
    if (a.kind != IR_AV_NUM || b.kind != IR_AV_NUM) return ir_error(L->d, e->loc, "arithmetic in an attribute needs numbers on both sides"), 1;
    return fe_eval_arith(L, e->op, &a, &b, out, e->loc);
  }
  return 1;
}

static bool fe_is_int(const ir_aval *v) { return v->kind == IR_AV_NUM && v->is_int; }

static bool fe_is_seq_of(const ir_aval *v, bool ints) {
  if (v->kind == IR_AV_NUM) return !ints || v->is_int;
  if (v->kind != IR_AV_TUPLE) return false;
  for (int i = 0; i < v->n; i++)
    if (v->items[i].kind != IR_AV_NUM || (ints && !v->items[i].is_int)) return false;
  return true;
}

static const char *const fe_atypes[] = {"int", "float", "bool", "str", "ints", "floats"};

/* Does v fit a def's parameter type (int | float | bool | str | ints | floats)? */
int fe_check_atype(fe_lower *L, const char *atype, const ir_aval *v, const char *what, ir_loc loc) {
  bool ok = strcmp(atype, "int") == 0 ? fe_is_int(v)
          : strcmp(atype, "float") == 0 ? v->kind == IR_AV_NUM
          : strcmp(atype, "bool") == 0 ? v->kind == IR_AV_BOOL
          : strcmp(atype, "str") == 0 ? v->kind == IR_AV_STR
          : strcmp(atype, "ints") == 0 ? fe_is_seq_of(v, true)
          : strcmp(atype, "floats") == 0 ? fe_is_seq_of(v, false) : true;
  if (!ok) ir_error(L->d, loc, "%s expects %s %s", what, strchr("aeiou", atype[0]) ? "an" : "a", atype);
  return !ok;
}

/* Unknown parameter types are reported where the def declares them. */
int fe_check_atype_name(fe_lower *L, const char *atype, ir_loc loc) {
  for (size_t i = 0; i < sizeof fe_atypes / sizeof *fe_atypes; i++)
    if (strcmp(atype, fe_atypes[i]) == 0) return 0;
  const char *sug = ir_suggest(atype, fe_atypes, 6);
  if (sug) ir_error(L->d, loc, "unknown parameter type '%s'; did you mean '%s'?", atype, sug);
  else ir_error(L->d, loc, "unknown parameter type '%s'; use int, float, bool, str, ints or floats", atype);
  return 1;
}
