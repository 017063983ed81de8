/* fe_bound.c — bounded dims of a .kiln file (`dim batch = 1..64`, `-D batch=1..64`;
 * docs/language.md): the ranges of one fe_lower_model call, and, for a model that reads any,
 * its lowering at other extents, through which fe_dims.c lowers the probes and checks every
 * extent of the ranges. */
#include "fe_lower.h"

#include <stdlib.h>
#include <string.h>

/* The range of dim d: -D's (the first that names it), else its declaration's. */
static fe_bound fe_dim_range(const fe_dim *d, const fe_define *defs, int ndefs) {
  for (int i = 0; i < ndefs; i++)
    if (strcmp(defs[i].name, d->name) == 0) return (fe_bound){d, defs[i].lo ? defs[i].lo : defs[i].value, defs[i].value, true};
  return (fe_bound){d, d->lo, d->value, false};
}

void fe_bounds_init(fe_job *j) {
  fe_bounds *b = &j->bounds;
  int n = 0;
  memset(b, 0, sizeof *b);
  for (const fe_dim *d = j->file->dims; d; d = d->next) {
    fe_bound r = fe_dim_range(d, j->defines, j->ndefines);
    n += r.lo < r.hi;
  }
  if (!n) return;
  b->b = ir_alloc(&j->file->arena, sizeof *b->b * (size_t)n);
  for (const fe_dim *d = j->file->dims; d; d = d->next) {
    fe_bound r = fe_dim_range(d, j->defines, j->ndefines);
    if (r.lo >= r.hi || fe_map_get(&b->slot, d->name)) continue;   /* fixed, or declared twice (fe_check.c) */
    b->b[b->n++] = r;
    fe_map_put(&b->slot, &j->file->arena, d->name, (void *)(intptr_t)b->n);
  }
}

/* The model's bounded dims, for lowering it at other extents. */
typedef struct {
  const fe_job *j;
  int n;                       /* the graph's bounded dims */
  int slot[K_MAX_BDIMS];       /* each as an index of j->bounds */
  int64_t *at;                 /* an extent per bounded dim of the file, for fe_lower_at */
} fe_kiln_dims;

/* fe_ranges.lower: the model lowered quietly with the graph's dims at ext, the file's other
 * bounded dims (which it does not read) at their bounds. */
static ir_graph *fe_lower_ext(void *ctx, const int64_t *ext, ir_arena *arena, ir_diag *d) {
  fe_kiln_dims *k = ctx;
  const fe_bounds *b = &k->j->bounds;
  for (int i = 0; i < b->n; i++) k->at[i] = b->b[i].hi;
  for (int i = 0; i < k->n; i++) k->at[k->slot[i]] = ext[i];
  return fe_lower_at(k->j, (fe_at){.at = k->at, .quiet = true, .arena = arena}, d);
}

ir_graph *fe_bound_graph(fe_job *j, ir_graph *g, const bool *used, ir_diag *d) {
  const fe_bounds *b = &j->bounds;
  fe_kiln_dims k = {.j = j};
  fe_ranges r = {.lower = fe_lower_ext, .ctx = &k, .keep = &j->file->arena, .model_loc = j->model->loc};
  for (int i = 0; i < b->n; i++) {
    if (!used[i]) continue;
    if (r.n == K_MAX_BDIMS) {
      ir_error(d, b->b[i].dim->loc, "model '%s' reads more than %d bounded dims", g->name, K_MAX_BDIMS);
      return ir_graph_free(g), NULL;
    }
    k.slot[k.n++] = i;
    r.r[r.n++] = (fe_range){b->b[i].dim->name, b->b[i].lo, b->b[i].hi, b->b[i].by_define, b->b[i].dim->loc};
  }
  if (!r.n) return g;
  k.at = malloc(sizeof(int64_t) * (size_t)b->n);
  if (!k.at) KILN_ICE("out of memory");
  g = fe_dims_check(g, &r, d);
  free(k.at);
  return g;
}
