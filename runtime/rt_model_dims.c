/* rt_model_dims.c — bounded dims at run time (rt_model.h, kernels/k_dims.h). A descriptor
 * holds every size at the bound; an instance keeps its own copies of what follows the dims
 * (the tensors' shapes, the steps' shape arrays and the params a patch rewrites) and
 * rewrites them when a call comes at other extents than the last one. A model without
 * bounded dims makes no copies: its steps read the descriptor, as before. */
#include "rt_model_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- validation ---- */

/* Patch x's target is in range: a tensor's axis, a step's shape slot and axis, or a field
 * inside the step's param (whose size rt_prog_valid has checked: it is what the kernel reads). */
static int rt_patch_valid(const rt_model_desc *d, const rt_program *p, const rt_dimpatch *x) {
  if (x->v.mask >> d->ndims) return 0;
  if (x->kind == RT_DV_TENSOR)
    return p == NULL && x->index >= 0 && x->index < d->ntensors && x->axis >= 0 && x->axis < d->tensors[x->index].shape.rank;
  if (!p || !p->steps || x->index < 0 || x->index >= p->nsteps) return 0;
  const rt_step *s = &p->steps[x->index];
  switch (x->kind) {
  case RT_DV_IN_SHAPE: return s->in_shape && x->slot >= 0 && x->slot < s->nin && x->axis >= 0 && x->axis < K_MAX_RANK;
  case RT_DV_OUT_SHAPE: return s->out_shape && x->slot >= 0 && x->slot < s->nout && x->axis >= 0 && x->axis < K_MAX_RANK;
  case RT_DV_PARAM_I64: return s->param && x->slot >= 0 && x->slot % 8 == 0 && x->slot <= s->param_bytes - 8;
  case RT_DV_PARAM_I32: return s->param && x->slot >= 0 && x->slot % 4 == 0 && x->slot <= s->param_bytes - 4;
  default: return 0;
  }
}

/* v at extents e (k_dimval_eval) in *out: 0, or 1 when it overflows int64. */
static int rt_dimval_at(k_dimval v, const int64_t *e, int64_t *out) {
  int64_t p = v.mask ? v.a : 0;
  for (int k = 0; k < K_MAX_BDIMS; k++)
    if (v.mask >> k & 1 && __builtin_mul_overflow(p, e[k], &p)) return 1;
  return __builtin_add_overflow(p, v.b, out);
}

/* What patch x rewrites, as the descriptor holds it: its value at the bound. */
static int64_t rt_patch_stored(const rt_model_desc *d, const rt_program *p, const rt_dimpatch *x) {
  if (x->kind == RT_DV_TENSOR) return d->tensors[x->index].shape.d[x->axis];
  const rt_step *s = &p->steps[x->index];
  int64_t v64;
  int32_t v32;
  switch (x->kind) {
  case RT_DV_IN_SHAPE: return s->in_shape[x->slot].d[x->axis];
  case RT_DV_OUT_SHAPE: return s->out_shape[x->slot].d[x->axis];
  case RT_DV_PARAM_I64: return memcpy(&v64, (const char *)s->param + x->slot, 8), v64;
  default: return memcpy(&v32, (const char *)s->param + x->slot, 4), v32;
  }
}

/* Patch x's values over the dims' ranges. The arena and the workspaces were planned at the
 * bound, with the descriptor's sizes, so a size a patch gives (kinds TENSOR, IN/OUT_SHAPE)
 * must lie in [0, its size at the bound] at every extents: a * prod(extents) + b with every
 * extent >= 1 grows with each extent when a >= 0, so it is enough that it is >= 0 with every
 * dim at lo and the descriptor's size with every dim at hi. An integer attribute (PARAM_*)
 * is no size: it may be negative (a slice's begin counted from the end) or fall as a dim
 * grows (the pad that widens a row of `batch` to 64 is 64 - batch), so only its value at the
 * bound is checked, and that it fits its field at lo and at hi. A linear form's extremes are
 * at the ends, so no extents in between overflow int64 (or an i32 field) when the ends don't. */
static int rt_patch_values_valid(const rt_model_desc *d, const rt_program *p, const rt_dimpatch *x) {
  int64_t lo[K_MAX_BDIMS] = {0}, hi[K_MAX_BDIMS] = {0}, vlo, vhi;
  for (int k = 0; k < d->ndims; k++) lo[k] = d->dims[k].lo, hi[k] = d->dims[k].hi;
  if (rt_dimval_at(x->v, lo, &vlo) || rt_dimval_at(x->v, hi, &vhi) || vhi != rt_patch_stored(d, p, x)) return 0;
  if (x->kind == RT_DV_PARAM_I64) return 1;
  if (x->kind == RT_DV_PARAM_I32) return vlo >= INT32_MIN && vlo <= INT32_MAX;   /* vhi is the stored i32 */
  return (!x->v.mask || x->v.a >= 0) && vlo >= 0;
}

static int rt_patches_valid(const rt_model_desc *d, const rt_program *p, int n, const rt_dimpatch *x) {
  if (n < 0 || (n && !x)) return 0;
  for (int i = 0; i < n; i++)
    if (!rt_patch_valid(d, p, &x[i]) || !rt_patch_values_valid(d, p, &x[i])) return 0;
  return 1;
}

/* Called after rt_prog_valid: the checks read the steps' shapes and params at the patches. */
int rt_dims_valid(const rt_model_desc *d) {
  if (d->ndims < 0 || d->ndims > K_MAX_BDIMS || (d->ndims && !d->dims)) return 0;
  for (int k = 0; k < d->ndims; k++)
    if (!d->dims[k].name || d->dims[k].lo < 1 || d->dims[k].lo > d->dims[k].hi) return 0;
  if (!d->ndims && (d->ntensor_patches || d->predict.npatches || (d->has_train && d->train.npatches))) return 0;
  return rt_patches_valid(d, NULL, d->ntensor_patches, d->tensor_patches) &&
         rt_patches_valid(d, &d->predict, d->predict.npatches, d->predict.patches) &&
         (!d->has_train || rt_patches_valid(d, &d->train, d->train.npatches, d->train.patches));
}

/* ---- the instance's copies ---- */

static int rt_dims_copy_shapes(rt_prog_state *ps) {
  const rt_program *p = ps->p;
  size_t ni = 0, no = 0;
  for (int i = 0; i < p->nsteps; i++) {
    if (p->steps[i].in_shape) ni += (size_t)p->steps[i].nin;
    if (p->steps[i].out_shape) no += (size_t)p->steps[i].nout;
  }
  ps->in_shape = malloc((ni + 1) * sizeof(k_shape)), ps->out_shape = malloc((no + 1) * sizeof(k_shape));
  ps->params = calloc((size_t)p->nsteps + 1, sizeof(void *));
  if (!ps->in_shape || !ps->out_shape || !ps->params) return 1;
  return 0;
}

/* Each step's shape arrays point into the pools, in step order; a patched param is copied. */
int rt_dims_state_init(rt_prog_state *ps) {
  const rt_program *p = ps->p;
  if (rt_dims_copy_shapes(ps)) return 1;
  size_t ai = 0, ao = 0;
  for (int i = 0; i < p->nsteps; i++) {
    const rt_step *s = &p->steps[i];
    rt_step_run *r = &ps->sr[i];
    if (s->in_shape) memcpy(ps->in_shape + ai, s->in_shape, (size_t)s->nin * sizeof(k_shape)), r->in_shape = ps->in_shape + ai, ai += (size_t)s->nin;
    if (s->out_shape) memcpy(ps->out_shape + ao, s->out_shape, (size_t)s->nout * sizeof(k_shape)), r->out_shape = ps->out_shape + ao, ao += (size_t)s->nout;
  }
  if (rt_dims_param_copies(p, ps->params)) return 1;
  for (int i = 0; i < p->nsteps; i++)
    if (ps->params[i]) ps->sr[i].param = ps->params[i];
  return 0;
}

int rt_dims_param_copies(const rt_program *p, void **params) {
  for (int k = 0; k < p->npatches; k++) {
    const rt_dimpatch *x = &p->patches[k];
    if ((x->kind != RT_DV_PARAM_I64 && x->kind != RT_DV_PARAM_I32) || params[x->index]) continue;
    const rt_step *s = &p->steps[x->index];
    if (!(params[x->index] = malloc((size_t)s->param_bytes))) return 1;
    memcpy(params[x->index], s->param, (size_t)s->param_bytes);
  }
  return 0;
}

void rt_dims_state_free(rt_prog_state *ps) {
  for (int i = 0; ps->params && ps->p && i < ps->p->nsteps; i++) free(ps->params[i]);
  free(ps->params), free(ps->in_shape), free(ps->out_shape);
}

static void rt_dims_apply(rt_prog_state *ps, const int64_t *e) {
  const rt_program *p = ps->p;
  for (int k = 0; k < p->npatches; k++) {
    const rt_dimpatch *x = &p->patches[k];
    rt_step_run *r = &ps->sr[x->index];
    int64_t v = k_dimval_eval(x->v, e);
    switch (x->kind) {
    case RT_DV_IN_SHAPE: r->in_shape[x->slot].d[x->axis] = v; break;
    case RT_DV_OUT_SHAPE: r->out_shape[x->slot].d[x->axis] = v; break;
    default: rt_dimpatch_param(x, e, ps->params[x->index]); break;
    }
  }
}

int rt_model_set_extents(rt_model *m, const int64_t *extents, const char *what) {
  const rt_model_desc *d = m->d;
  int64_t e[K_MAX_BDIMS] = {0};
  for (int k = 0; k < d->ndims; k++) {
    e[k] = extents ? extents[k] : d->dims[k].hi;
    if (e[k] < d->dims[k].lo || e[k] > d->dims[k].hi)
      return rt_model_fail(m, "%s: %s = %lld is outside its bounds %lld..%lld", what, d->dims[k].name, (long long)e[k],
                           (long long)d->dims[k].lo, (long long)d->dims[k].hi);
  }
  if (!d->ndims || memcmp(e, m->extent, sizeof e) == 0) return 0;
  memcpy(m->extent, e, sizeof e);
  for (int i = 0; i < d->ntensor_patches; i++)
    m->tshape[d->tensor_patches[i].index].d[d->tensor_patches[i].axis] = k_dimval_eval(d->tensor_patches[i].v, e);
  for (int k = 0; k < 2; k++) {
    if (!m->ps[k].p) continue;
    rt_dims_apply(&m->ps[k], e);
    for (int i = 0; i < m->ps[k].p->nsteps; i++) rt_step_args(&m->ps[k].sr[i], m);
  }
  return 0;
}

/* ---- text ---- */

/* "2*batch+1": a size as the user wrote it, into buf at *at. */
static void rt_dimval_text(const rt_model_desc *d, k_dimval v, char *buf, size_t n, size_t *at) {
#define RT_PUT(...) (*at += *at < n ? (size_t)snprintf(buf + *at, n - *at, __VA_ARGS__) : 0)
  if (v.a != 1) RT_PUT("%lld*", (long long)v.a);
  for (int k = 0, first = 1; k < d->ndims; k++)
    if (v.mask >> k & 1) RT_PUT("%s%s", first ? "" : "*", d->dims[k].name), first = 0;
  if (v.b) RT_PUT("%+lld", (long long)v.b);
}

void rt_tensor_type_text(const rt_model_desc *d, int32_t t, char *buf, size_t n) {
  const rt_tensor_info *x = &d->tensors[t];
  size_t len = 0, *at = &len;
  RT_PUT("%s[", x->dtype == K_I32 ? "i32" : "f32");
  for (int i = 0; i < x->shape.rank; i++) {
    const rt_dimpatch *dv = NULL;
    for (int k = 0; k < d->ntensor_patches; k++)
      if (d->tensor_patches[k].index == t && d->tensor_patches[k].axis == i) dv = &d->tensor_patches[k];
    if (i) RT_PUT(", ");
    if (dv) rt_dimval_text(d, dv->v, buf, n, at);
    else RT_PUT("%lld", (long long)x->shape.d[i]);
  }
  RT_PUT("]");
#undef RT_PUT
}

void rt_dims_text(const rt_model_desc *d, char *buf, size_t n) {
  size_t at = 0;
  buf[0] = 0;
  for (int k = 0; k < d->ndims && at < n; k++)
    at += (size_t)snprintf(buf + at, n - at, "%s%s = %lld..%lld", k ? ", " : "", d->dims[k].name, (long long)d->dims[k].lo,
                           (long long)d->dims[k].hi);
}

/* ---- extents from the shapes of a program's inputs (kiln run) ---- */

/* The extent of dim k that makes size v of a one-dim patch, or -1. */
static int64_t rt_dims_solve(k_dimval x, int64_t v) {
  int64_t r;   /* a hostile input shape must not overflow the difference */
  if (!x.a || __builtin_sub_overflow(v, x.b, &r) || r % x.a) return -1;
  return r / x.a;
}

int rt_extents_from_inputs(const rt_model_desc *d, const rt_program *p, const k_shape *shapes, int64_t *extents,
                           char *err, size_t n) {
  for (int k = 0; k < d->ndims; k++) extents[k] = -1;
  for (int i = 0; i < d->ntensor_patches; i++) {
    const rt_dimpatch *x = &d->tensor_patches[i];
    if (__builtin_popcount(x->v.mask) != 1) continue;
    for (int j = 0; j < p->ninputs; j++) {
      if (p->inputs[j] != x->index || shapes[j].rank != d->tensors[x->index].shape.rank) continue;
      int k = __builtin_ctz(x->v.mask);
      int64_t e = rt_dims_solve(x->v, shapes[j].d[x->axis]);
      if (extents[k] < 0 && e >= d->dims[k].lo && e <= d->dims[k].hi) extents[k] = e;
    }
  }
  for (int k = 0; k < d->ndims; k++)
    if (extents[k] < 0) extents[k] = d->dims[k].hi;
  for (int j = 0; j < p->ninputs; j++) {
    k_shape want = rt_tensor_shape_at(d, p->inputs[j], extents);
    int same = want.rank == shapes[j].rank;
    for (int a = 0; same && a < want.rank; a++) same = want.d[a] == shapes[j].d[a];
    if (same) continue;
    char type[256], got[256], dims[256];
    size_t at = 0;
    got[0] = 0;
    for (int a = 0; a < shapes[j].rank && at < sizeof got; a++)
      at += (size_t)snprintf(got + at, sizeof got - at, "%s%lld", a ? ", " : "", (long long)shapes[j].d[a]);
    rt_tensor_type_text(d, p->inputs[j], type, sizeof type);
    rt_dims_text(d, dims, sizeof dims);
    return rt_errf(err, n, "input '%s' has shape [%s]; the model takes %s%s%s", d->tensors[p->inputs[j]].name, got, type,
                   d->ndims ? " with " : "", dims);
  }
  return 0;
}
