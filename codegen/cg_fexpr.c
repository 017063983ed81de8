/* cg_fexpr.c — builds the fused expression of an IR_N_FUSED group (cg_fexpr.h): members in
 * order, each value a node, kAddTo as an explicit add, the loop space collapsed. Pure C over
 * the IR, shared by every back end. */
#include "cg_fexpr.h"

#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "ops.h"

typedef struct {
  const ir_graph *g;
  const ir_node *fn;
  cg_fexpr *fx;
  int *cur;            /* per tensor: the node holding its current value, or -1 */
  char *err;
  size_t n;
} cg_fb;

static int cg_fb_fail(cg_fb *b, const char *what, const char *name) {
  snprintf(b->err, b->n, "%s: %s%s%s", b->fn->name, what, name ? " " : "", name ? name : "");
  return -1;
}

static int cg_fx_push(cg_fb *b, cg_fx x) {
  cg_fexpr *fx = b->fx;
  if (fx->nx == fx->capx) {
    int cap = fx->capx ? 2 * fx->capx : 16;
    cg_fx *p = realloc(fx->x, sizeof *p * (size_t)cap);
    if (!p) return cg_fb_fail(b, "out of memory", NULL);
    fx->x = p, fx->capx = cap;
  }
  fx->x[fx->nx] = x;
  return fx->nx++;
}

static int cg_fx_fconst(cg_fb *b, float f) { return cg_fx_push(b, (cg_fx){.kind = CG_FX_FCONST, .f = f}); }

static int cg_slot(const int *v, int n, int t) {
  for (int i = 0; i < n; i++)
    if (v[i] == t) return i;
  return -1;
}

/* Tensor t's value: computed earlier in the group, else an external input (loaded once). A
 * constant input is its value in the code instead of a load (cg_fexpr_folds), so the back
 * end folds it as an immediate. */
static int cg_fb_value(cg_fb *b, int t) {
  if (t < 0) return cg_fb_fail(b, "a member reads an absent slot", NULL);
  if (b->cur[t] >= 0) return b->cur[t];
  int s = cg_slot(b->fn->in, b->fn->nin, t);
  const ir_tensor *x = ir_tensor_at(b->g, t);
  if (s < 0) return cg_fb_fail(b, "reads a value no member computed and no input gives:", x->name);
  if (cg_fexpr_folds(x)) return b->cur[t] = cg_fx_fconst(b, x->value);
  return b->cur[t] = cg_fx_push(b, (cg_fx){.kind = CG_FX_LOAD, .slot = s});
}

/* A backward slot the op's dependencies leave out reads as 0, as k_elemwise.c's k_ld does. */
static int cg_fb_opt_value(cg_fb *b, int t) { return t < 0 ? cg_fx_fconst(b, 0.0f) : cg_fb_value(b, t); }

/* Member output t gets node v under OpReqType req (kAddTo: old value + v). */
static int cg_fb_set(cg_fb *b, int t, k_req req, int v) {
  if (t < 0 || req == kNullOp || v < 0) return v < 0 ? -1 : 0;
  if (req == kAddTo) {
    int old = b->cur[t];
    if (old < 0 && cg_slot(b->fn->in, b->fn->nin, t) >= 0) old = cg_fb_value(b, t);
    int s = cg_slot(b->fn->out, b->fn->nout, t);
    if (old < 0 && s >= 0) old = cg_fx_push(b, (cg_fx){.kind = CG_FX_LOAD_OUT, .slot = s});
    if (old < 0) return cg_fb_fail(b, "accumulates into a value with no storage:", ir_tensor_at(b->g, t)->name);
    v = cg_fx_push(b, (cg_fx){.kind = CG_FX_ADD, .narg = 2, .arg = {old, v}});
    if (v < 0) return -1;
  }
  b->cur[t] = v;
  return 0;
}

/* The op's attributes, in schema order, are the scalar function's trailing parameters
 * (leaky_relu's slope, clip's a_min and a_max, activation's act_type). */
static int cg_fb_params(cg_fb *b, const ir_node *m, cg_fx *call) {
  const ir_attr_def *a = ir_ops[m->op].attrs;
  for (; a && a->name; a++) {
    if (call->narg == CG_FX_MAXARG || !m->param) return cg_fb_fail(b, "too many or missing parameters for", call->fn);
    const char *p = (const char *)m->param + a->offset;
    int v;
    if (a->type == IR_AT_FLOAT) {
      float f;
      memcpy(&f, p, sizeof f);
      v = cg_fx_fconst(b, f);
    } else if (a->type != IR_AT_INTS && a->size == sizeof(int32_t)) {
      int32_t i;
      memcpy(&i, p, sizeof i);
      v = cg_fx_push(b, (cg_fx){.kind = CG_FX_ICONST, .i = i});
    } else if (a->type == IR_AT_BOOL && a->size == sizeof(bool)) {
      v = cg_fx_push(b, (cg_fx){.kind = CG_FX_ICONST, .i = *(const bool *)p});
    } else {
      return cg_fb_fail(b, "an attribute the scalar function cannot take:", a->name);
    }
    if (v < 0) return -1;
    call->arg[call->narg++] = v;
  }
  return 0;
}

const char *cg_fexpr_stem(const ir_node *m) {
  return ir_ops[m->op].scalar ? ir_ops[m->op].scalar : ir_ops[m->op].name;
}

/* k_sf_<stem><suffix>(args[0..na), params...). */
static int cg_fb_call(cg_fb *b, const ir_node *m, const char *suffix, const int *args, int na) {
  cg_fx c = {.kind = CG_FX_CALL, .narg = na};
  snprintf(c.fn, sizeof c.fn, "k_sf_%s%s", cg_fexpr_stem(m), suffix);
  for (int k = 0; k < na; k++) {
    if (args[k] < 0) return -1;
    c.arg[k] = args[k];
  }
  if (cg_fb_params(b, m, &c)) return -1;
  return cg_fx_push(b, c);
}

static int cg_fb_forward(cg_fb *b, const ir_node *m) {
  int nargs = ir_op_nargs(&ir_ops[m->op]), args[2];
  if (nargs < 1 || nargs > 2 || m->nout != 1) return cg_fb_fail(b, "not an elementwise member:", m->name);
  for (int k = 0; k < nargs; k++) args[k] = cg_fb_value(b, m->in[k]);
  return cg_fb_set(b, m->out[0], ir_node_req(m, 0), cg_fb_call(b, m, "", args, nargs));
}

/* in = [og, x, y] -> [gx], or [og, a, b, y] -> [ga, gb] (same shapes: fusion admits only a
 * binary backward that does not broadcast, whose gradient sums one term per element). */
static int cg_fb_backward(cg_fb *b, const ir_node *m) {
  int nargs = m->nout;
  if (ir_op_nouts(&ir_ops[m->op]) != 1 || nargs < 1 || nargs > 2 || m->nin != 2 + nargs)
    return cg_fb_fail(b, "not an elementwise backward member:", m->name);
  static const char *const sfx[2][2] = {{"_grad", ""}, {"_grad_a", "_grad_b"}};
  int args[4], v[2] = {-1, -1};
  args[0] = cg_fb_value(b, m->in[0]);
  for (int k = 1; k < m->nin; k++) args[k] = cg_fb_opt_value(b, m->in[k]);
  for (int j = 0; j < nargs; j++) {   /* both gradients read the inputs before either is set */
    if (m->out[j] < 0 || ir_node_req(m, j) == kNullOp) continue;
    /* the kernel writes a same-shaped operand's single term as it is (k_breduce's first
     * column block), -0 included, so the expression adds nothing to it */
    if ((v[j] = cg_fb_call(b, m, sfx[nargs - 1][j], args, m->nin)) < 0) return -1;
  }
  for (int j = 0; j < nargs; j++)
    if (v[j] >= 0 && cg_fb_set(b, m->out[j], ir_node_req(m, j), v[j])) return -1;
  return 0;
}

/* ---- the loop space ---- */

int cg_fexpr_bcast_strides(const k_shape *s, const k_shape *out, int64_t *st) {
  if (s->rank > out->rank) return 1;
  int lead = out->rank - s->rank;
  int64_t m = 1;
  for (int i = out->rank - 1; i >= 0; i--) {
    int64_t d = i < lead ? 1 : s->d[i - lead];
    if (d != 1 && d != out->d[i]) return 1;
    st[i] = d == 1 ? 0 : m;
    m *= d;
  }
  return 0;
}

/* Drops extent-1 dimensions, then merges a dimension into the next inner one wherever every
 * input steps through both as one run (stride[a] == stride[b] * dim[b]). */
static void cg_collapse(cg_fexpr *fx, const k_shape *out) {
  fx->rank = 0;
  for (int d = 0; d < out->rank; d++) {
    if (out->d[d] == 1) continue;
    int r = fx->rank;
    bool merge = r > 0;
    for (int s = 0; merge && s < fx->nin; s++) merge = fx->ist[s][r - 1] == fx->ist[s][d] * out->d[d];
    if (merge) {
      fx->dim[r - 1] *= out->d[d];
      for (int s = 0; s < fx->nin; s++) fx->ist[s][r - 1] = fx->ist[s][d];
      continue;
    }
    fx->dim[r] = out->d[d];
    for (int s = 0; s < fx->nin; s++) fx->ist[s][r] = fx->ist[s][d];
    fx->rank++;
  }
  int64_t m = 1;
  for (int d = fx->rank - 1; d >= 0; d--) fx->ost[d] = m, m *= fx->dim[d];
}

static int cg_fb_space(cg_fb *b) {
  cg_fexpr *fx = b->fx;
  if (fx->nout < 1) return cg_fb_fail(b, "a fused group with no outputs", NULL);
  const k_shape *out = &ir_tensor_at(b->g, b->fn->out[0])->shape;
  fx->numel = k_shape_numel(out);
  for (int j = 0; j < fx->nout; j++) {
    const ir_tensor *t = ir_tensor_at(b->g, b->fn->out[j]);
    if (t->dtype != K_F32 || !ir_shape_eq(&t->shape, out)) return cg_fb_fail(b, "outputs differ in shape or are not f32:", t->name);
  }
  for (int s = 0; s < fx->nin; s++) {
    const ir_tensor *t = ir_tensor_at(b->g, b->fn->in[s]);
    if (t->dtype != K_F32 || cg_fexpr_bcast_strides(&t->shape, out, fx->ist[s]))
      return cg_fb_fail(b, "an input is not f32 or does not broadcast to the group's shape:", t->name);
  }
  if (fx->flat) {   /* the output's own axes, each its extent: none dropped, none merged */
    fx->rank = out->rank;
    for (int d = 0; d < out->rank; d++) fx->dim[d] = out->d[d];
    for (int64_t d = out->rank - 1, m = 1; d >= 0; d--) fx->ost[d] = m, m *= out->d[d];
  } else cg_collapse(fx, out);
  return 0;
}

/* Output j may share input fn->inplace[j]'s buffer; only the same element is then read and
 * written. Sharing is the only overlap there is: the plan gives every other operand of a node
 * storage of its own (their lifetimes meet at the node), and the caller's inputs are only read.
 * An in-place pair at different strides (not met in practice) clears `parallel`. */
static void cg_fb_alias(cg_fb *b) {
  cg_fexpr *fx = b->fx;
  fx->parallel = true;
  for (int j = 0; j < fx->nout; j++) {
    int s = b->fn->inplace ? b->fn->inplace[j] : -1;
    bool same = s >= 0 && s < fx->nin;
    for (int d = 0; same && d < fx->rank; d++) same = fx->ist[s][d] == fx->ost[d];
    fx->alias[j] = same ? s : -1;
    if (s >= 0 && s < fx->nin && !same) fx->parallel = false;
  }
}

static int cg_fb_members(cg_fb *b) {
  for (int k = 0; k < b->fn->nsub; k++) {
    const ir_node *m = &b->fn->sub[k];
    int bad = m->kind == IR_N_OP ? cg_fb_forward(b, m) : m->kind == IR_N_BACKWARD ? cg_fb_backward(b, m)
                                                                            : cg_fb_fail(b, "a member that is not elementwise:", m->name);
    if (bad) return 1;
  }
  for (int j = 0; j < b->fx->nout; j++)
    if ((b->fx->store[j] = b->cur[b->fn->out[j]]) < 0)
      return cg_fb_fail(b, "no member writes the output", ir_tensor_at(b->g, b->fn->out[j])->name), 1;
  return 0;
}

int cg_fexpr_build_as(const ir_graph *g, const ir_node *fn, bool flat, cg_fexpr *fx, char *err, size_t n) {
  memset(fx, 0, sizeof *fx);
  fx->nin = fn->nin, fx->nout = fn->nout, fx->flat = flat;
  cg_fb b = {g, fn, fx, malloc(sizeof(int) * (size_t)(ir_ntensors(g) + 1)), err, n};
  fx->ist = calloc((size_t)fn->nin + 1, sizeof *fx->ist);
  fx->store = calloc((size_t)fn->nout + 1, sizeof(int));
  fx->alias = calloc((size_t)fn->nout + 1, sizeof(int));
  int bad = !b.cur || !fx->ist || !fx->store || !fx->alias;
  if (bad) cg_fb_fail(&b, "out of memory", NULL);
  for (int t = 0; !bad && t < ir_ntensors(g); t++) b.cur[t] = -1;
  bad = bad || cg_fb_space(&b) || cg_fb_members(&b);
  if (!bad) cg_fb_alias(&b);
  free(b.cur);
  if (bad) cg_fexpr_free(fx);
  return bad;
}

int cg_fexpr_build(const ir_graph *g, const ir_node *fn, cg_fexpr *fx, char *err, size_t n) {
  return cg_fexpr_build_as(g, fn, false, fx, err, n);
}

/* One size: v0 at the bound, the probes' at vp; mask 0 where it does not move. */
static int cg_fexpr_fit(const ir_graph *g, int64_t v0, const int64_t *vp, k_dimval *out, bool *dynamic) {
  if (ir_dims_fit(g, v0, vp, out)) return 1;
  *dynamic |= out->mask != 0;
  return 0;
}

int cg_fexpr_dims(cg_fexpr *fx, const ir_graph *lowered, const cg_fexpr *probe, char *err, size_t n) {
  int np = ir_dims_nprobes(lowered->nbdims);
  int64_t vp[K_MAX_BDIMS + 1];
  for (int p = 0; p < np; p++)
    if (probe[p].rank != fx->rank || probe[p].nin != fx->nin || probe[p].nx != fx->nx || probe[p].parallel != fx->parallel)
      return rt_errf(err, n, "bounded dims: its loops take another form at other extents than at the bound; compile with fixed dims");
  if (!(fx->vist = calloc((size_t)fx->nin + 1, sizeof *fx->vist))) return rt_errf(err, n, "out of memory");
  int bad = 0;
  for (int d = 0; d < fx->rank && !bad; d++) {
    for (int p = 0; p < np; p++) vp[p] = probe[p].dim[d];
    bad |= cg_fexpr_fit(lowered, fx->dim[d], vp, &fx->vdim[d], &fx->dynamic);
    if (fx->flat) continue;   /* its strides follow from the extents (cg_fexpr.flat) */
    for (int p = 0; p < np; p++) vp[p] = probe[p].ost[d];
    bad |= cg_fexpr_fit(lowered, fx->ost[d], vp, &fx->vost[d], &fx->dynamic);
    for (int s = 0; s < fx->nin && !bad; s++) {
      for (int p = 0; p < np; p++) vp[p] = probe[p].ist[s][d];
      bad |= cg_fexpr_fit(lowered, fx->ist[s][d], vp, &fx->vist[s][d], &fx->dynamic);
    }
  }
  if (bad) return rt_errf(err, n, "bounded dims: a trip count or stride of its loops follows no form a * dim + b; compile with fixed dims");
  return 0;
}

/* The default builder: node i must be a fused group in every probe graph too. */
static int cg_fexpr_build_fused(const ir_graph *q, int i, bool flat, cg_fexpr *fx, char *err, size_t n) {
  if (ir_node_at(q, i)->kind != IR_N_FUSED)
    return rt_errf(err, n, "bounded dims: the group is not fused alike at other extents; compile with fixed dims");
  return cg_fexpr_build_as(q, ir_node_at(q, i), flat, fx, err, n);
}

int cg_fexpr_probe(const cg_probes *pr, bool train, int i, cg_fexpr *fx, cg_fexpr_builder build, char *err, size_t n) {
  cg_fexpr probe[K_MAX_BDIMS + 1];
  memset(probe, 0, sizeof probe);   /* freeing one not built is then a no-op */
  int bad = 0;
  for (int p = 0; p < pr->n && !bad; p++) {
    const ir_graph *q = train ? pr->train[p] : pr->predict[p];
    if (!q || i >= ir_nnodes(q)) bad = rt_errf(err, n, "bounded dims: the program differs at other extents; compile with fixed dims");
    else bad = (build ? build : cg_fexpr_build_fused)(q, i, fx->flat, &probe[p], err, n);
  }
  if (!bad) bad = cg_fexpr_dims(fx, pr->lowered, probe, err, n);
  for (int p = 0; p < pr->n; p++) cg_fexpr_free(&probe[p]);
  return bad;
}

void cg_fexpr_free(cg_fexpr *fx) {
  free(fx->x), free(fx->ist), free(fx->store), free(fx->alias), free(fx->vist);
  memset(fx, 0, sizeof *fx);
}

int cg_fexpr_load_level(const cg_fexpr *fx, int s) {
  for (int d = fx->rank - 1; d >= 0; d--)
    if (fx->ist[s][d]) return d + 1;
  return 0;
}

/* ---- the key ---- */

typedef struct { unsigned char *p; size_t len, cap; bool oom; } cg_kbuf;

static void cg_kput(cg_kbuf *k, const void *v, size_t n) {
  if (k->oom) return;
  if (k->len + n > k->cap) {
    size_t cap = k->cap ? 2 * k->cap : 256;
    while (cap < k->len + n) cap *= 2;
    unsigned char *p = realloc(k->p, cap);
    if (!p) { k->oom = true; return; }
    k->p = p, k->cap = cap;
  }
  memcpy(k->p + k->len, v, n);
  k->len += n;
}

static void cg_kint(cg_kbuf *k, int64_t v) { cg_kput(k, &v, sizeof v); }
static void cg_kdim(cg_kbuf *k, k_dimval v) { cg_kint(k, v.mask), cg_kint(k, v.a), cg_kint(k, v.b); }

/* Field by field (never whole structs: padding and unused fields are not part of a node). */
static void cg_key_node(cg_kbuf *k, const cg_fx *x) {
  cg_kint(k, x->kind);
  switch (x->kind) {
  case CG_FX_LOAD: case CG_FX_LOAD_OUT: cg_kint(k, x->slot); break;
  case CG_FX_FCONST: cg_kput(k, &x->f, sizeof x->f); break;   /* the bits: -0 and NaNs differ */
  case CG_FX_ICONST: cg_kint(k, x->i); break;
  case CG_FX_CALL: case CG_FX_ADD:
    cg_kput(k, x->fn, strlen(x->fn) + 1);
    cg_kint(k, x->narg);
    for (int a = 0; a < x->narg; a++) cg_kint(k, x->arg[a]);
    break;
  }
}

unsigned char *cg_fexpr_key(const cg_fexpr *fx, size_t *len) {
  cg_kbuf k = {0};
  cg_kint(&k, fx->nin), cg_kint(&k, fx->nout), cg_kint(&k, fx->rank), cg_kint(&k, fx->numel);
  for (int d = 0; d < fx->rank; d++) cg_kint(&k, fx->dim[d]), cg_kint(&k, fx->ost[d]);
  for (int s = 0; s < fx->nin; s++)
    for (int d = 0; d < fx->rank; d++) cg_kint(&k, fx->ist[s][d]);
  cg_kint(&k, fx->nx);
  for (int i = 0; i < fx->nx; i++) cg_key_node(&k, &fx->x[i]);
  for (int j = 0; j < fx->nout; j++) cg_kint(&k, fx->store[j]), cg_kint(&k, fx->alias[j]);
  cg_kint(&k, fx->parallel);
  cg_kint(&k, fx->dynamic);   /* a dynamic group's sizes are its dimvals: equal values at the bound are not enough */
  cg_kint(&k, fx->flat);
  for (int d = 0; fx->dynamic && d < fx->rank; d++) {
    cg_kdim(&k, fx->vdim[d]), cg_kdim(&k, fx->vost[d]);
    for (int s = 0; s < fx->nin; s++) cg_kdim(&k, fx->vist[s][d]);
  }
  if (k.oom) { free(k.p); return NULL; }
  *len = k.len;
  return k.p;
}

void cg_fexpr_print(const cg_fexpr *fx, FILE *out) {
  fprintf(out, "space");
  for (int d = 0; d < fx->rank; d++) fprintf(out, " %lld", (long long)fx->dim[d]);
  fputc('\n', out);
  for (int i = 0; i < fx->nx; i++) {
    const cg_fx *x = &fx->x[i];
    fprintf(out, "  v%d = ", i);
    switch (x->kind) {
    case CG_FX_LOAD: fprintf(out, "in%d[i]", x->slot); break;
    case CG_FX_LOAD_OUT: fprintf(out, "out%d[i]", x->slot); break;
    case CG_FX_FCONST: fprintf(out, "%.9gf", x->f); break;
    case CG_FX_ICONST: fprintf(out, "%d", x->i); break;
    case CG_FX_ADD: fprintf(out, "v%d + v%d", x->arg[0], x->arg[1]); break;
    case CG_FX_CALL:
      fprintf(out, "%s(", x->fn);
      for (int k = 0; k < x->narg; k++) fprintf(out, "%sv%d", k ? ", " : "", x->arg[k]);
      fputc(')', out);
      break;
    }
    fputc('\n', out);
  }
  for (int j = 0; j < fx->nout; j++) fprintf(out, "  out%d[i] = v%d\n", j, fx->store[j]);
}
