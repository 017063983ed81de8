/* cg_dims.c — bounded dims in the descriptor (cg.h). The bound's descriptor is compared with
 * each probe's, built from the probe graphs compiled by the same passes: the two must be one
 * program (the same steps, slots, kernels and plan decisions) with other sizes. Each size
 * that differs — a tensor's axis, a step's shape slot, an integer attribute — is fitted as
 * a * prod(dims) + b and becomes an rt_dimpatch; the runtime rewrites it per call. Then every
 * step's workspace is recomputed at the extents of the whole range, which must fit the one
 * planned at the bound (the plan is made once, at the bound). */
#include "cg.h"

#include <stdlib.h>
#include <string.h>

#include "k_epilogue.h"

typedef struct {
  rt_model_desc *d;
  cg_probes *pr;
  rt_dimpatch *x;              /* the patches found, growing */
  int nx, cap;
  char *err;
  size_t n;
} cg_dims;

static int cg_dims_add(cg_dims *c, rt_dimpatch p) {
  if (c->nx == c->cap) {
    int cap = c->cap ? 2 * c->cap : 64;
    rt_dimpatch *x = realloc(c->x, (size_t)cap * sizeof *x);
    if (!x) return rt_errf(c->err, c->n, "out of memory");
    c->x = x, c->cap = cap;
  }
  c->x[c->nx++] = p;
  return 0;
}

/* v0 at the bound, vp[p] in probe p: a patch when they differ, an error when no form fits. */
static int cg_dims_value(cg_dims *c, int64_t v0, const int64_t *vp, rt_dimpatch p, const char *what) {
  bool same = true;
  for (int k = 0; k < c->pr->n; k++) same &= vp[k] == v0;
  if (same) return 0;
  if (ir_dims_fit(c->pr->lowered, v0, vp, &p.v) == 0) return cg_dims_add(c, p);
  return rt_errf(c->err, c->n, "%s is %lld at the bound but %lld at other extents of the bounded dims: no size of the form "
                 "a * dim + b (or a product of bounded dims) gives it", what, (long long)v0, (long long)vp[0]);
}

/* ---- the tensors ---- */

/* A weight (or its optimizer state) stored at the bound whose size follows the dims is used
 * as its first rows (a position table of `seq` rows): only its first axis may follow them,
 * so that the rows in use are a prefix of its storage. */
static int cg_dims_stored(cg_dims *c, const rt_tensor_info *x, int first) {
  if (x->role != RT_ROLE_PARAM && x->role != RT_ROLE_AUX && x->role != RT_ROLE_STATE && x->role != RT_ROLE_CONST) return 0;
  for (int k = first; k < c->nx; k++)
    if (c->x[k].axis != 0)
      return rt_errf(c->err, c->n, "bounded dims: weight '%s' follows a bounded dim along axis %d; a weight may follow one along "
                     "its first axis only (its rows in use are then the first ones)", x->name, c->x[k].axis);
  return 0;
}

static int cg_dims_tensors(cg_dims *c) {
  const rt_model_desc *d = c->d;
  for (int k = 0; k < c->pr->n; k++)
    if (c->pr->desc[k]->ntensors != d->ntensors)
      return rt_errf(c->err, c->n, "bounded dims: the model compiles to %d tensors at the bound but %d at other extents",
                     d->ntensors, c->pr->desc[k]->ntensors);
  for (int t = 0; t < d->ntensors; t++) {
    const rt_tensor_info *x = &d->tensors[t];
    int first = c->nx;
    for (int a = 0; a < x->shape.rank; a++) {
      int64_t vp[K_MAX_BDIMS + 1];
      for (int k = 0; k < c->pr->n; k++) vp[k] = c->pr->desc[k]->tensors[t].shape.d[a];
      char what[300];
      snprintf(what, sizeof what, "axis %d of tensor '%s'", a, x->name);
      if (cg_dims_value(c, x->shape.d[a], vp, (rt_dimpatch){RT_DV_TENSOR, t, 0, a, {0}}, what)) return 1;
    }
    if (cg_dims_stored(c, x, first)) return 1;
  }
  return 0;
}

/* ---- the steps ---- */

/* The two steps are one step: kind, kernel, slots and epilogue equal. */
static int cg_dims_same_step(cg_dims *c, const rt_step *s, const rt_step *q) {
  bool same = s->kind == q->kind && s->op == q->op && s->nin == q->nin && s->nout == q->nout &&
              !s->in_shape == !q->in_shape && !s->out_shape == !q->out_shape && s->param_bytes == q->param_bytes &&
              !s->epi == !q->epi && (!s->epi || memcmp(s->epi, q->epi, sizeof *s->epi) == 0) &&
              (!s->temp_bytes) == (!q->temp_bytes);
  for (int j = 0; same && j < s->nin; j++) same = s->in[j] == q->in[j];
  for (int j = 0; same && j < s->nout; j++) same = s->out[j] == q->out[j] && s->req[j] == q->req[j];
  if (same) return 0;
  return rt_errf(c->err, c->n, "bounded dims: step %s compiles differently at other extents than at the bound "
                 "(a size-dependent choice of the passes); compile with fixed dims", s->name);
}

static int cg_dims_shapes(cg_dims *c, const rt_program *p, int i, bool out) {
  const rt_step *s = &p->steps[i];
  const k_shape *sh = out ? s->out_shape : s->in_shape;
  int nslots = out ? s->nout : s->nin;
  bool train = p == &c->d->train;
  for (int j = 0; sh && j < nslots; j++)
    for (int a = 0; a < sh[j].rank; a++) {
      int64_t vp[K_MAX_BDIMS + 1];
      for (int k = 0; k < c->pr->n; k++) {
        const rt_step *q = &(train ? &c->pr->desc[k]->train : &c->pr->desc[k]->predict)->steps[i];
        const k_shape *qs = out ? q->out_shape : q->in_shape;
        vp[k] = qs[j].rank == sh[j].rank ? qs[j].d[a] : -1;
      }
      char what[300];
      snprintf(what, sizeof what, "axis %d of %s slot %d of step %s", a, out ? "output" : "input", j, s->name);
      if (cg_dims_value(c, sh[j].d[a], vp, (rt_dimpatch){out ? RT_DV_OUT_SHAPE : RT_DV_IN_SHAPE, i, j, a, {0}}, what)) return 1;
    }
  return 0;
}

/* An integer field of the param: 4 or 8 bytes at off. */
static int64_t cg_dims_field(const void *param, size_t off, size_t w) {
  if (w == 8) { int64_t v; memcpy(&v, (const char *)param + off, 8); return v; }
  int32_t v;
  memcpy(&v, (const char *)param + off, 4);
  return v;
}

static int cg_dims_field_patch(cg_dims *c, const rt_program *p, int i, size_t off, size_t w, bool *covered, const char *attr) {
  const rt_step *s = &p->steps[i];
  bool train = p == &c->d->train;
  int64_t vp[K_MAX_BDIMS + 1];
  for (int k = 0; k < c->pr->n; k++)
    vp[k] = cg_dims_field((train ? &c->pr->desc[k]->train : &c->pr->desc[k]->predict)->steps[i].param, off, w);
  memset(covered + off, 1, w);
  char what[300];
  snprintf(what, sizeof what, "attribute %s of step %s", attr, s->name);
  return cg_dims_value(c, cg_dims_field(s->param, off, w), vp,
                       (rt_dimpatch){w == 8 ? RT_DV_PARAM_I64 : RT_DV_PARAM_I32, i, (int32_t)off, 0, {0}}, what);
}

/* The op's integer attributes (its schema, ir/ops.h) that follow the dims; any other byte of
 * the param that differs is a decision the runtime could not rewrite. */
static int cg_dims_params(cg_dims *c, const rt_program *p, int i) {
  const rt_step *s = &p->steps[i];
  if (!s->param || s->op < 0) return 0;
  bool train = p == &c->d->train, differs = false;
  for (int k = 0; k < c->pr->n; k++)
    differs |= memcmp(s->param, (train ? &c->pr->desc[k]->train : &c->pr->desc[k]->predict)->steps[i].param, (size_t)s->param_bytes) != 0;
  if (!differs) return 0;
  bool *covered = calloc((size_t)s->param_bytes, 1);
  if (!covered) return rt_errf(c->err, c->n, "out of memory");
  int rc = 0;
  for (const ir_attr_def *a = ir_ops[s->op].attrs; !rc && a && a->name; a++) {
    if (a->type == IR_AT_INT && (a->size == 4 || a->size == 8)) rc = cg_dims_field_patch(c, p, i, a->offset, a->size, covered, a->name);
    if (a->type == IR_AT_INTS) {
      k_ints v;
      memcpy(&v, (const char *)s->param + a->offset, sizeof v);
      for (int e = 0; !rc && e < v.n && e < K_MAX_RANK; e++)
        rc = cg_dims_field_patch(c, p, i, a->offset + offsetof(k_ints, v) + (size_t)e * 8, 8, covered, a->name);
    }
  }
  for (int k = 0; !rc && k < c->pr->n; k++) {
    const char *q = (train ? &c->pr->desc[k]->train : &c->pr->desc[k]->predict)->steps[i].param;
    for (int b = 0; !rc && b < s->param_bytes; b++)
      if (!covered[b] && q[b] != ((const char *)s->param)[b])
        rc = rt_errf(c->err, c->n, "bounded dims: a parameter of step %s other than an integer attribute changes with the extents; "
                     "compile with fixed dims", s->name);
  }
  free(covered);
  return rc;
}

static int cg_dims_program(cg_dims *c, const rt_program *p) {
  bool train = p == &c->d->train;
  int first = c->nx;
  for (int k = 0; k < c->pr->n; k++) {
    const rt_program *q = train ? &c->pr->desc[k]->train : &c->pr->desc[k]->predict;
    if (q->nsteps != p->nsteps)
      return rt_errf(c->err, c->n, "bounded dims: the %s program has %d steps at the bound but %d at other extents", train ? "train" : "predict",
                     p->nsteps, q->nsteps);
    for (int i = 0; i < p->nsteps; i++)
      if (cg_dims_same_step(c, &p->steps[i], &q->steps[i])) return 1;
  }
  for (int i = 0; i < p->nsteps; i++)
    if (cg_dims_shapes(c, p, i, false) || cg_dims_shapes(c, p, i, true) || cg_dims_params(c, p, i)) return 1;
  rt_dimpatch *x = c->nx > first ? cg_desc_alloc(c->d, (size_t)(c->nx - first) * sizeof *x) : NULL;
  if (c->nx > first && !x) return rt_errf(c->err, c->n, "out of memory");
  if (x) memcpy(x, c->x + first, (size_t)(c->nx - first) * sizeof *x);
  rt_program *w = (rt_program *)p;
  w->npatches = c->nx - first, w->patches = x;
  return 0;
}

/* ---- workspaces over the range ---- */

/* The extents of check e, those the front end's range check visits (frontend/fe_dims.c): dim
 * k's range walked with the others at their bound, then, with several dims, all at lo. */
static bool cg_dims_extents(const ir_graph *g, int64_t e, int64_t *ext) {
  for (int k = 0; k < g->nbdims; k++) ext[k] = g->bdims[k].hi;
  for (int k = 0; k < g->nbdims; k++) {
    int64_t span = g->bdims[k].hi - g->bdims[k].lo + 1;
    if (e < span) return ext[k] = g->bdims[k].lo + e, true;
    e -= span;
  }
  if (e > 0 || g->nbdims < 2) return false;   /* one dim: its lo was in its range */
  for (int k = 0; k < g->nbdims; k++) ext[k] = g->bdims[k].lo;
  return true;
}

/* Step i's workspace at the extents: its op's k_temp_fn on the patched argument shapes and
 * param (as pass_plan.c asks it at the bound). */
static int64_t cg_dims_temp(const rt_program *p, int i, const int64_t *ext, void *param) {
  const rt_step *s = &p->steps[i];
  const ir_opdef *op = &ir_ops[s->op];
  int base = s->kind == RT_STEP_BACKWARD ? ir_op_nouts(op) : 0, nargs = ir_op_nargs(op);
  k_shape args[16];
  if (!op->temp || nargs > 16 || !s->in_shape) return -1;
  for (int j = 0; j < nargs; j++) args[j] = base + j < s->nin ? s->in_shape[base + j] : (k_shape){0, {0}};   /* an optional one left out */
  if (s->param) memcpy(param, s->param, (size_t)s->param_bytes);
  for (int k = 0; k < p->npatches; k++) {
    const rt_dimpatch *x = &p->patches[k];
    if (x->index != i) continue;
    int64_t v = k_dimval_eval(x->v, ext);
    if (x->kind == RT_DV_IN_SHAPE && x->slot >= base && x->slot < base + nargs) args[x->slot - base].d[x->axis] = v;
    rt_dimpatch_param(x, ext, param);   /* PARAM kinds only */
  }
  return (int64_t)op->temp(args, s->param ? param : NULL);
}

static int cg_dims_temps(cg_dims *c, const rt_program *p) {
  const ir_graph *g = c->pr->lowered;
  int64_t ext[K_MAX_BDIMS];
  char param[4096];
  for (int i = 0; i < p->nsteps; i++) {
    const rt_step *s = &p->steps[i];
    if (!s->temp_bytes || s->op < 0 || (s->kind != RT_STEP_FORWARD && s->kind != RT_STEP_BACKWARD)) continue;
    if (s->param_bytes > (int)sizeof param) return rt_errf(c->err, c->n, "step %s: its param is too large", s->name);
    for (int64_t e = 0; cg_dims_extents(g, e, ext); e++) {
      int64_t t = cg_dims_temp(p, i, ext, param);
      if (t < 0 || t > s->temp_bytes) {
        char at[256];
        ir_dims_str(g, ext, at, sizeof at);
        return rt_errf(c->err, c->n, "bounded dims: step %s needs %lld bytes of workspace at %s, more than the %lld planned at the "
                       "bound; compile with fixed dims", s->name, (long long)t, at, (long long)s->temp_bytes);
      }
    }
  }
  return 0;
}

/* ---- the descriptor ---- */

/* Bit k: an input or output of p follows dim k. */
static uint32_t cg_dims_used(const rt_model_desc *d, const rt_program *p) {
  uint32_t used = 0;
  for (int i = 0; i < d->ntensor_patches; i++) {
    const rt_dimpatch *x = &d->tensor_patches[i];
    for (int k = 0; k < p->ninputs; k++) used |= p->inputs[k] == x->index ? x->v.mask : 0;
    for (int k = 0; k < p->noutputs; k++) used |= p->outputs[k] == x->index ? x->v.mask : 0;
  }
  return used;
}

static int cg_dims_descs(cg_probes *pr, const rt_model_desc *d, char *err, size_t n) {
  for (int k = 0; k < pr->n; k++) {
    char msg[1024];
    if (!pr->desc[k] && !(pr->desc[k] = cg_desc_build(pr->predict[k], pr->train[k], msg, sizeof msg)))
      return rt_errf(err, n, "bounded dims: the probe's descriptor: %s", msg);
    if (pr->desc[k]->has_train != d->has_train) return rt_errf(err, n, "bounded dims: the probe graphs differ in training");
  }
  return 0;
}

int cg_desc_dims(rt_model_desc *d, cg_probes *pr, char *err, size_t n) {
  const ir_graph *g = pr->lowered;
  if (cg_dims_descs(pr, d, err, n)) return 1;
  cg_dims c = {d, pr, NULL, 0, 0, err, n};
  int rc = cg_dims_tensors(&c);
  rt_dimpatch *tx = !rc && c.nx ? cg_desc_alloc(d, (size_t)c.nx * sizeof *tx) : NULL;
  if (!rc && c.nx && !tx) rc = rt_errf(err, n, "out of memory");
  if (tx) memcpy(tx, c.x, (size_t)c.nx * sizeof *tx);
  d->ntensor_patches = rc ? 0 : c.nx, d->tensor_patches = tx;
  c.nx = 0;
  if (!rc) rc = cg_dims_program(&c, &d->predict) || cg_dims_temps(&c, &d->predict);
  if (!rc && d->has_train) rc = cg_dims_program(&c, &d->train) || cg_dims_temps(&c, &d->train);
  free(c.x);
  if (rc) return 1;
  rt_dim *dims = cg_desc_alloc(d, (size_t)g->nbdims * sizeof *dims);
  if (!dims) return rt_errf(err, n, "out of memory");
  for (int k = 0; k < g->nbdims; k++) {
    char *name = cg_desc_alloc(d, strlen(g->bdims[k].name) + 1);
    if (!name) return rt_errf(err, n, "out of memory");
    strcpy(name, g->bdims[k].name);
    dims[k] = (rt_dim){name, g->bdims[k].lo, g->bdims[k].hi};
  }
  d->ndims = g->nbdims, d->dims = dims;
  d->predict.dims_used = cg_dims_used(d, &d->predict);
  if (d->has_train) d->train.dims_used = cg_dims_used(d, &d->train);
  return 0;
}
