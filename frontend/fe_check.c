/* fe_check.c — file-level checks that need no graph: names declared twice, defs that
 * would hide an op, def parameter lists, and -D overrides that name no dim. Names declared
 * twice are found with hash maps: a file of many dims or defs checked pairwise took minutes. */
#include "fe_lower.h"

#include <string.h>

/* Whether name was seen before in `seen`; records it otherwise. */
static bool fe_seen(fe_lower *L, fe_map *seen, const char *name) {
  if (fe_map_get(seen, name)) return true;
  fe_map_put(seen, &L->file->arena, name, (void *)name);
  return false;
}

static void fe_check_dims(fe_lower *L) {
  fe_map seen = {0};
  for (const fe_dim *a = L->file->dims; a; a = a->next) {
    if (fe_seen(L, &seen, a->name)) ir_error(L->d, a->loc, "dim '%s' is declared twice", a->name);
    if (a->value <= 0) ir_error(L->d, a->loc, "dim '%s' must be positive", a->name);
    else if (a->lo < 1) ir_error(L->d, a->loc, "dim '%s' = %lld..%lld: the lower bound must be at least 1", a->name, (long long)a->lo, (long long)a->value);
    else if (a->lo > a->value)
      ir_error(L->d, a->loc, "dim '%s' = %lld..%lld: the lower bound is above the upper one", a->name, (long long)a->lo, (long long)a->value);
  }
}

static void fe_check_def(fe_lower *L, const fe_def *d, fe_map *defs) {
  if (ir_op_lookup(d->name) >= 0) ir_error(L->d, d->loc, "def '%s' has the name of an op; choose another name", d->name);
  if (fe_seen(L, defs, d->name)) ir_error(L->d, d->loc, "def '%s' is defined twice", d->name);
  fe_map params = {0};
  for (const fe_dparam *p = d->params; p; p = p->next) {
    if (p->atype) fe_check_atype_name(L, p->atype, p->loc);
    if (!p->atype && p->dflt) ir_error(L->d, p->loc, "tensor parameter '%s' cannot have a default", p->name);
    if (fe_seen(L, &params, p->name)) ir_error(L->d, p->loc, "parameter '%s' is listed twice", p->name);
  }
}

static void fe_check_models(fe_lower *L) {
  fe_map seen = {0};
  for (const fe_model *m = L->file->models; m; m = m->next)
    if (fe_seen(L, &seen, m->name)) ir_error(L->d, m->loc, "model '%s' is defined twice", m->name);
}

/* A -D value, or range (fe.h: lo 0 means fixed). */
int fe_check_define(const fe_define *x, ir_diag *d) {
  int before = d->failed;
  if (x->value <= 0 && !x->lo) ir_error(d, (ir_loc){0}, "-D %s=%lld: a dim must be positive", x->name, (long long)x->value);
  else if (x->lo < 0 || (x->lo && x->lo > x->value))
    ir_error(d, (ir_loc){0}, "-D %s=%lld..%lld: %s", x->name, (long long)x->lo, (long long)x->value,
             x->lo < 0 ? "the lower bound must be at least 1" : "the lower bound is above the upper one");
  return d->failed - before;
}

static void fe_check_defines_known(fe_lower *L) {
  const char *names[256];
  int n = 0;
  for (const fe_dim *d = L->file->dims; d && n < 256; d = d->next) names[n++] = d->name;
  for (int i = 0; i < L->ndefines; i++) {
    bool found = false;
    for (const fe_dim *d = L->file->dims; d; d = d->next) found |= strcmp(d->name, L->defines[i].name) == 0;
    if (found) fe_check_define(&L->defines[i], L->d);
    if (found) continue;
    const char *sug = ir_suggest(L->defines[i].name, names, n);
    ir_error(L->d, (ir_loc){0}, "-D %s: %s has no dim named '%s'%s%s%s", L->defines[i].name, L->file->path,
             L->defines[i].name, sug ? "; did you mean '" : "", sug ? sug : "", sug ? "'?" : "");
  }
}

int fe_check_file(fe_file *f, const fe_define *defs, int ndefs, ir_diag *d) {
  int before = d->failed;
  fe_lower L = {.file = f, .d = d, .defines = defs, .ndefines = ndefs};
  fe_check_dims(&L);
  fe_map seen = {0};
  for (const fe_def *def = f->defs; def; def = def->next) fe_check_def(&L, def, &seen);
  fe_check_models(&L);
  fe_check_defines_known(&L);
  if (!f->models && d->failed == before) ir_error(d, (ir_loc){f->path, 1, 1}, "no model in this file (write 'model NAME { ... }')");
  return d->failed - before;
}
