/* fe_check.c — file-level checks that need no graph: names declared twice, defs that
 * would hide an op, def parameter lists, and -D overrides that name no dim. */
#include "fe_lower.h"

#include <string.h>

static void fe_check_dims(fe_lower *L) {
  for (const fe_dim *a = L->file->dims; a; a = a->next) {
    if (a->value <= 0) ir_error(L->d, a->loc, "dim '%s' must be positive", a->name);
    for (const fe_dim *b = a->next; b; b = b->next)
      if (strcmp(a->name, b->name) == 0) ir_error(L->d, b->loc, "dim '%s' is declared twice", b->name);
  }
}

static void fe_check_def(fe_lower *L, const fe_def *d) {
  if (ir_op_lookup(d->name) >= 0) ir_error(L->d, d->loc, "def '%s' has the name of an op; choose another name", d->name);
  for (const fe_def *e = d->next; e; e = e->next)
    if (strcmp(d->name, e->name) == 0) ir_error(L->d, e->loc, "def '%s' is defined twice", e->name);
  for (const fe_dparam *p = d->params; p; p = p->next) {
    if (p->atype) fe_check_atype_name(L, p->atype, p->loc);
    if (!p->atype && p->dflt) ir_error(L->d, p->loc, "tensor parameter '%s' cannot have a default", p->name);
    for (const fe_dparam *q = p->next; q; q = q->next)
      if (strcmp(p->name, q->name) == 0) ir_error(L->d, q->loc, "parameter '%s' is listed twice", q->name);
  }
}

static void fe_check_models(fe_lower *L) {
  for (const fe_model *m = L->file->models; m; m = m->next)
    for (const fe_model *n = m->next; n; n = n->next)
      if (strcmp(m->name, n->name) == 0) ir_error(L->d, n->loc, "model '%s' is defined twice", n->name);
}

static void fe_check_defines_known(fe_lower *L) {
  const char *names[256];
  int n = 0;
  for (const fe_dim *d = L->file->dims; d && n < 256; d = d->next) names[n++] = d->name;
  for (int i = 0; i < L->ndefines; i++) {
    bool found = false;
    for (const fe_dim *d = L->file->dims; d; d = d->next) found |= strcmp(d->name, L->defines[i].name) == 0;
    if (found && L->defines[i].value <= 0)
      ir_error(L->d, (ir_loc){0}, "-D %s=%lld: a dim must be positive", L->defines[i].name, (long long)L->defines[i].value);
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
  for (const fe_def *def = f->defs; def; def = def->next) fe_check_def(&L, def);
  fe_check_models(&L);
  fe_check_defines_known(&L);
  if (!f->models && d->failed == before) ir_error(d, (ir_loc){f->path, 1, 1}, "no model in this file (write 'model NAME { ... }')");
  return d->failed - before;
}
