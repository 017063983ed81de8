/* onnx_dims.c — -D NAME=LO..HI on a symbolic dimension (dim_param) of an ONNX model's inputs:
 * a bounded dim, as `dim batch = LO..HI` is in a .kiln file (docs/language.md, "Bounded
 * dims"). The model imported at the bounds goes to fe_dims_check with a function that imports
 * it again at other extents, for the probes and for every extent of the ranges. Those imports
 * read the file decoded once, with its initializers read once (onnx_file): per extent only
 * the nodes are built and their shapes inferred again, and every import's weights point at the
 * same memory, in the bound graph's arena, which outlives its probes (ir_graph_free frees
 * them first). */
#include "onnx_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  onnx_file *f;
  onnx_options o;              /* the caller's, but for defs */
  fe_define *defs;             /* the caller's -D, each range's value set to its extent */
  int n;
  int slot[K_MAX_BDIMS];       /* each bounded dim as an index of defs */
} onnx_dims;

/* fe_ranges.lower: the model imported again with its bounded dims at ext. An import builds
 * everything in its graph's arena, so arena is not needed. */
static ir_graph *onnx_import_at(void *ctx, const int64_t *ext, ir_arena *arena, ir_diag *d) {
  (void)arena;
  onnx_dims *x = ctx;
  for (int i = 0; i < x->n; i++) x->defs[x->slot[i]].value = ext[i];
  ir_graph *h = ir_graph_new("model");
  if (!onnx_build(x->f, h, &x->o, d, NULL)) return h;
  ir_graph_free(h);
  return NULL;
}

/* Whether -D number i is the first of its name: a later one changes nothing (onnx_import.c). */
static bool onnx_first_define(const onnx_options *o, int i) {
  for (int k = 0; k < i; k++)
    if (strcmp(o->defs[k].name, o->defs[i].name) == 0) return false;
  return true;
}

ir_graph *onnx_bound(onnx_file *f, ir_graph *g, const onnx_options *o, ir_diag *d) {
  onnx_dims x = {.f = f, .o = *o};
  fe_ranges r = {.lower = onnx_import_at, .ctx = &x, .model_loc = {f->path, 0, 0}};
  for (int i = 0; i < o->ndefs; i++) {
    const fe_define *def = &o->defs[i];
    if (!def->lo || def->lo >= def->value || !onnx_first_define(o, i)) continue;   /* fixed (LO..LO is too) */
    if (r.n == K_MAX_BDIMS) {
      ir_error(d, (ir_loc){0}, "model '%s' reads more than %d bounded dims", g->name, K_MAX_BDIMS);
      return ir_graph_free(g), NULL;
    }
    x.slot[r.n] = i;
    r.r[r.n++] = (fe_range){def->name, def->lo, def->value, true, (ir_loc){0}};
  }
  if (!r.n) return g;
  x.n = r.n;
  x.defs = malloc(sizeof *x.defs * (size_t)o->ndefs);
  if (!x.defs) KILN_ICE("out of memory");
  memcpy(x.defs, o->defs, sizeof *x.defs * (size_t)o->ndefs);
  x.o.defs = x.defs;
  g = fe_dims_check(g, &r, d);
  free(x.defs);
  return g;
}
