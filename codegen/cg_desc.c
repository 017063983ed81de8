/* cg_desc.c — the model descriptor (runtime/rt_model.h) from the compiled predict and train
 * graphs: the tensor table, and per entry point one step per node with its kernel, slots,
 * workspace and the earlier steps it must follow (memory conflicts, transitively reduced).
 * Everything is copied into allocations the descriptor owns, which cg_desc_free releases,
 * except the initial weights (rt_tensor_info.data), which point into the lowered graph. */
#include "cg.h"
#include "cg_fexpr.h"
#include "k_epilogue.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- owned memory: every allocation is linked to the descriptor ---- */

typedef union cg_block { union cg_block *next; max_align_t align; } cg_block;
typedef struct {
  rt_model_desc d;              /* first: cg_desc_free gets back to the box from it */
  cg_block *blocks;
  int failed;                   /* an allocation failed */
} cg_box;

static void *cg_alloc(cg_box *b, size_t n) {
  cg_block *k = calloc(1, sizeof *k + (n ? n : 1));
  if (!k) return b->failed = 1, NULL;
  k->next = b->blocks, b->blocks = k;
  return k + 1;
}

static void *cg_dup(cg_box *b, const void *p, size_t n) {
  void *q = p ? cg_alloc(b, n) : NULL;
  if (q) memcpy(q, p, n);
  return q;
}

static const char *cg_strdup(cg_box *b, const char *s) { return s ? cg_dup(b, s, strlen(s) + 1) : NULL; }

void *cg_desc_alloc(rt_model_desc *d, size_t n) { return cg_alloc((cg_box *)d, n); }

void cg_desc_free(rt_model_desc *d) {
  if (!d) return;
  cg_box *b = (cg_box *)d;
  while (b->blocks) {
    cg_block *k = b->blocks;
    b->blocks = k->next;
    free(k);
  }
  free(b);
}


/* ---- tensors ---- */

static int32_t cg_role(ir_tensor_kind k) {
  switch (k) {
  case IR_T_INPUT: return RT_ROLE_INPUT;
  case IR_T_PARAM: return RT_ROLE_PARAM;
  case IR_T_AUX: return RT_ROLE_AUX;
  case IR_T_STATE: return RT_ROLE_STATE;
  case IR_T_CONST: return RT_ROLE_CONST;
  default: return RT_ROLE_VALUE;
  }
}

static rt_tensor_info cg_tensor(cg_box *b, const ir_tensor *x, int i) {
  rt_tensor_info t = {cg_strdup(b, x->name), cg_role(x->kind), (int32_t)x->dtype, x->shape, K_INIT_ZEROS, 0, 0, NULL, i};
  if ((x->kind == IR_T_PARAM || x->kind == IR_T_AUX) && x->has_init)
    t.init = (int32_t)x->init.kind, t.init_a = x->init.a, t.init_b = x->init.b;
  if (x->kind == IR_T_CONST) t.init_a = x->value;
  /* Borrowed, not copied: an ONNX model's weights are most of its size, and the graph's arena
   * that holds them outlives the descriptor (cg.h). */
  if (x->kind == IR_T_PARAM || x->kind == IR_T_AUX) t.data = x->data;
  return t;
}

/* The tensors both graphs were copied with (ir_graph.shared_tensors; a graph never copied:
 * all of the predict graph's) have the same index and name in both. The train passes add
 * gradients after them; the predict passes may add values of their own (pass_simplify),
 * which the descriptor's table places after the train graph's tensors. */
static int cg_shared(const ir_graph *p) { return p->shared_tensors ? p->shared_tensors : ir_ntensors(p); }

static int cg_check_shared(const ir_graph *p, const ir_graph *t, char *err, size_t n) {
  int shared = cg_shared(p);
  if (p->shared_tensors != t->shared_tensors || shared > ir_ntensors(p) || shared > ir_ntensors(t))
    return rt_errf(err, n, "%s: the predict graph (%d tensors) and the train graph (%d) were not copied from one lowered graph",
                   p->name, ir_ntensors(p), ir_ntensors(t));
  for (int i = 0; i < shared; i++)
    if (strcmp(ir_tensor_at(p, i)->name, ir_tensor_at(t, i)->name) != 0)
      return rt_errf(err, n, "%s: tensor %d is '%s' in the predict graph but '%s' in the train graph", p->name, i,
                     ir_tensor_at(p, i)->name, ir_tensor_at(t, i)->name);
  return 0;
}

/* Each predict tensor's index in the table: its own, or for a value only the predict graph
 * has, its place after the train graph's ntrain tensors. malloc'd; NULL without memory. */
static int32_t *cg_predict_map(const ir_graph *p, int ntrain) {
  int np = ir_ntensors(p), shared = cg_shared(p);
  int32_t *to = malloc(((size_t)np + 1) * sizeof *to);
  for (int t = 0; to && t < np; t++) to[t] = t < shared ? t : ntrain + (t - shared);
  return to;
}

/* ---- steps ---- */

static int32_t cg_step_kind(ir_node_kind k) {
  switch (k) {
  case IR_N_OP: return RT_STEP_FORWARD;
  case IR_N_BACKWARD: return RT_STEP_BACKWARD;
  case IR_N_UPDATE: return RT_STEP_UPDATE;
  default: return RT_STEP_FUSED;
  }
}

/* A fused group's folded constants (cg_fexpr_folds) are absent slots: nothing reads them,
 * and the runtime then neither binds them nor needs them in the tensor table. */
static void cg_fold_slots(const ir_graph *g, const ir_node *nd, int32_t *in) {
  if (nd->kind != IR_N_FUSED || nd->epi || !in) return;
  for (int j = 0; j < nd->nin; j++)
    if (in[j] >= 0 && cg_fexpr_folds(ir_tensor_at(g, in[j]))) in[j] = -1;
}

/* A fused group's code has every shape built in: its step carries no table of them (one
 * k_shape per slot would be most of a large graph's descriptor). An absent backward slot
 * keeps the shape the backward pass recorded; other absent slots read as scalars. */
static const k_shape *cg_step_shapes(cg_box *b, const ir_graph *g, const ir_node *nd) {
  if (nd->kind == IR_N_FUSED && !nd->epi) return NULL;
  if (nd->view_shape) return cg_dup(b, nd->view_shape, (size_t)nd->nin * sizeof *nd->view_shape);
  k_shape *sh = cg_alloc(b, (size_t)nd->nin * sizeof *sh);
  for (int j = 0; sh && j < nd->nin; j++)
    sh[j] = nd->in[j] >= 0 ? ir_tensor_at(g, nd->in[j])->shape
            : nd->slot_shape ? nd->slot_shape[j] : (k_shape){0, {0}};
  return sh;
}

static void cg_step_slots(cg_box *b, const ir_graph *g, const ir_node *nd, rt_step *s) {
  s->in = cg_dup(b, nd->in, (size_t)nd->nin * sizeof *nd->in);
  cg_fold_slots(g, nd, (int32_t *)s->in);
  s->out = cg_dup(b, nd->out, (size_t)nd->nout * sizeof *nd->out);
  s->in_shape = cg_step_shapes(b, g, nd);
  s->out_shape = nd->view_shape ? cg_dup(b, nd->view_shape + nd->nin, (size_t)nd->nout * sizeof *nd->view_shape) : NULL;
  k_req *req = cg_alloc(b, (size_t)nd->nout * sizeof *req);
  for (int j = 0; req && j < nd->nout; j++) req[j] = ir_node_req(nd, j);
  s->req = req;
}

/* A node the plan runs per sample: its N and each slot's bytes between samples. */
static void cg_step_samples(cg_box *b, const ir_graph *g, int i, rt_step *s) {
  const ir_node *nd = ir_node_at(g, i);
  s->samples = g->plan->samples ? g->plan->samples[i] : 0;
  if (s->samples < 2) return (void)(s->samples = 0, s->sample_stride = NULL);
  int64_t *st = cg_alloc(b, (size_t)(nd->nin + nd->nout) * sizeof *st);
  for (int j = 0; st && j < nd->nin + nd->nout; j++) st[j] = ir_plan_slot_stride(g, nd, j);
  s->sample_stride = st;
}

/* A heavy op with an epilogue is a forward step of that op carrying the epilogue. */
static void cg_step(cg_box *b, const ir_graph *g, int i, rt_step *s) {
  const ir_node *nd = ir_node_at(g, i);
  bool has_op = nd->kind == IR_N_OP || nd->kind == IR_N_BACKWARD || nd->epi;
  const ir_opdef *op = has_op ? &ir_ops[nd->op] : NULL;
  s->kind = nd->epi ? RT_STEP_FORWARD : cg_step_kind(nd->kind);
  s->op = nd->kind == IR_N_FUSED && !nd->epi ? -1 : nd->op;
  s->epi = nd->epi ? cg_dup(b, nd->epi, sizeof *nd->epi) : NULL;
  s->kernel = !op ? NULL : nd->kind != IR_N_BACKWARD ? op->forward : op->backward;
  size_t psize = nd->param ? ir_node_param_size(nd) : 0;
  s->param = psize ? cg_dup(b, nd->param, psize) : NULL;
  s->param_bytes = s->param ? (int32_t)psize : 0;
  s->nin = nd->nin, s->nout = nd->nout;
  cg_step_slots(b, g, nd, s);
  s->temp_offset = g->plan->temp_offset[i], s->temp_bytes = g->plan->temp_bytes[i];
  cg_step_samples(b, g, i, s);
  s->random = op && (op->resources & IR_RES_RANDOM) ? 1 : 0;
  s->name_hash = rt_fnv1a32(nd->name);
  s->name = cg_strdup(b, nd->name);
}

/* ---- dependencies: memory each step touches ---- */

typedef struct { int64_t lo, hi; int ident; bool write; } cg_mem;   /* ident >= 0: a tensor */
typedef struct { cg_mem *m; int n, cap; } cg_mems;

static int cg_mem_add(cg_mems *v, cg_mem x) {
  if (v->n == v->cap) {
    int cap = v->cap ? 2 * v->cap : 8;
    cg_mem *m = realloc(v->m, (size_t)cap * sizeof *m);
    if (!m) return 1;
    v->m = m, v->cap = cap;
  }
  v->m[v->n++] = x;
  return 0;
}

/* An arena tensor is its byte interval (in-place partners share it); persistent tensors and
 * inputs are themselves; a tensor without storage is nothing. */
static int cg_mem_tensor(cg_mems *v, const ir_graph *g, int t, bool write) {
  if (t < 0) return 0;
  const ir_buffer *bf = &g->plan->buf[t];
  if (bf->cls == IR_MEM_NONE) return 0;
  if (bf->cls == IR_MEM_ARENA)
    return bf->bytes ? cg_mem_add(v, (cg_mem){bf->offset, bf->offset + ir_plan_span(g, g->plan, t), -1, write}) : 0;
  return cg_mem_add(v, (cg_mem){0, 0, t, write});
}


static int cg_node_mems(const ir_graph *g, int i, cg_mems *v) {
  const ir_node *nd = ir_node_at(g, i);
  int rc = 0;
  for (int j = 0; j < nd->nin; j++) rc |= cg_mem_tensor(v, g, nd->in[j], ir_node_mutates_input(g, nd, j));
  for (int j = 0; j < nd->nout; j++) rc |= cg_mem_tensor(v, g, nd->out[j], true);
  int64_t to = g->plan->temp_offset[i], tb = g->plan->temp_bytes[i];
  if (tb) rc |= cg_mem_add(v, (cg_mem){to, to + tb, -1, true});
  return rc;
}

static bool cg_mem_overlap(const cg_mem *a, const cg_mem *b) {
  if (!a->write && !b->write) return false;
  if (a->ident >= 0 || b->ident >= 0) return a->ident == b->ident;
  return a->lo < b->hi && b->lo < a->hi;
}

static bool cg_conflict(const cg_mems *a, const cg_mems *b) {
  for (int x = 0; x < a->n; x++)
    for (int y = 0; y < b->n; y++)
      if (cg_mem_overlap(&a->m[x], &b->m[y])) return true;
  return false;
}

/* reach: bit i of row j = step i must finish before step j. Candidates are taken from the
 * latest down, so one already implied by a later dependency is left out: the result is the
 * transitive reduction. */
static void cg_step_deps(cg_box *b, const cg_mems *mems, uint64_t *reach, int words, int j, rt_step *s) {
  uint64_t *rj = reach + (size_t)j * words;
  int *deps = malloc((size_t)j * sizeof *deps + sizeof *deps), nd = 0;
  if (!deps) return (void)(b->failed = 1);
  for (int i = j - 1; i >= 0; i--) {
    if (rj[i / 64] >> (i % 64) & 1 || !cg_conflict(&mems[i], &mems[j])) continue;
    deps[nd++] = i;
    rj[i / 64] |= UINT64_C(1) << (i % 64);
    for (int w = 0; w < words; w++) rj[w] |= reach[(size_t)i * words + w];
  }
  s->ndeps = nd;
  s->deps = cg_dup(b, deps, (size_t)nd * sizeof *deps);
  free(deps);
}

static int cg_deps(cg_box *b, const ir_graph *g, rt_step *steps) {
  int n = ir_nnodes(g), words = (n + 63) / 64, rc = 0;
  cg_mems *mems = calloc((size_t)n + 1, sizeof *mems);
  uint64_t *reach = calloc((size_t)n * (size_t)words + 1, sizeof *reach);
  if (!mems || !reach) rc = 1;
  for (int i = 0; !rc && i < n; i++) rc = cg_node_mems(g, i, &mems[i]);
  for (int j = 0; !rc && j < n; j++) cg_step_deps(b, mems, reach, words, j, &steps[j]);
  for (int i = 0; mems && i < n; i++) free(mems[i].m);
  free(mems), free(reach);
  return rc;
}

/* ---- programs ---- */

/* The entry point's inputs: the INPUT tensors the graph reads, in declaration order. */
static int cg_inputs(cg_box *b, const ir_graph *g, rt_program *p) {
  int n = ir_graph_inputs(g, NULL, 0);
  int32_t *idx = n >= 0 ? cg_alloc(b, (size_t)n * sizeof *idx) : NULL;
  int *tmp = n >= 0 ? malloc(((size_t)n + 1) * sizeof *tmp) : NULL;
  if (!idx || !tmp) return free(tmp), 1;
  ir_graph_inputs(g, tmp, n);
  for (int k = 0; k < n; k++) idx[k] = tmp[k];
  free(tmp);
  p->ninputs = n, p->inputs = idx;
  return 0;
}

static int cg_outputs(cg_box *b, const ir_graph *g, bool train, rt_program *p) {
  int32_t *o = cg_alloc(b, (size_t)(g->outputs.len + 1) * sizeof *o);
  if (!o) return 1;
  p->noutputs = train ? 1 : g->outputs.len;
  if (train) o[0] = g->loss;
  for (int i = 0; !train && i < g->outputs.len; i++) o[i] = IR_VEC_AT(g->outputs, int, i);
  p->outputs = o;
  return 0;
}

static void cg_renumber_slots(int32_t *t, int n, const int32_t *to) {
  for (int i = 0; i < n; i++)
    if (t[i] >= 0) t[i] = to[t[i]];
}

/* The slots are the descriptor's own allocations (cg_dup), written here before they are
 * handed out as const. (`to` is not const only because gcc 12 then takes every call for a
 * read of memory the caller may not have written.) */
static void cg_renumber_program_slots(rt_program *p, int32_t *to) {
  for (int i = 0; i < p->nsteps; i++) {
    rt_step *s = (rt_step *)&p->steps[i];
    cg_renumber_slots((int32_t *)s->in, s->nin, to), cg_renumber_slots((int32_t *)s->out, s->nout, to);
  }
  cg_renumber_slots((int32_t *)p->inputs, p->ninputs, to);
  cg_renumber_slots((int32_t *)p->outputs, p->noutputs, to);
}

/* Each arena tensor's offset at its index in the table (to: the graph's index there, NULL:
 * the same), -1 elsewhere. */
static int64_t *cg_offsets(cg_box *b, const ir_graph *g, int ntensors, const int32_t *to) {
  int64_t *off = cg_alloc(b, (size_t)ntensors * sizeof *off);
  for (int t = 0; off && t < ntensors; t++) off[t] = -1;
  for (int t = 0; off && t < ir_ntensors(g); t++)
    if (g->plan->buf[t].cls == IR_MEM_ARENA) off[to ? to[t] : t] = g->plan->buf[t].offset;
  return off;
}

/* train_step runs the updates after everything else has succeeded: they must come last. */
static int cg_updates_last(const ir_graph *g, char *err, size_t n) {
  bool seen = false;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *nd = ir_node_at(g, i);
    if (seen && nd->kind != IR_N_UPDATE)
      return rt_errf(err, n, "%s: node %s follows an optimizer update (updates must come last)", g->name, nd->name);
    seen |= nd->kind == IR_N_UPDATE;
  }
  return 0;
}

/* g's program; to: its tensors' indices in the table (cg_predict_map), or NULL: their own. */
static int cg_program(cg_box *b, const ir_graph *g, bool train, int32_t *to, rt_program *p, char *err, size_t n) {
  if (!g->plan) return rt_errf(err, n, "%s: the graph has no memory plan (run pass_compile)", g->name);
  if (train && g->loss < 0) return rt_errf(err, n, "%s: the train graph has no loss", g->name);
  if (cg_updates_last(g, err, n)) return 1;
  rt_step *steps = cg_alloc(b, (size_t)ir_nnodes(g) * sizeof *steps);
  if (!steps) return rt_errf(err, n, "out of memory");
  for (int i = 0; i < ir_nnodes(g); i++) cg_step(b, g, i, &steps[i]);
  *p = (rt_program){.nsteps = ir_nnodes(g), .steps = steps, .arena_bytes = g->plan->arena_bytes, .is_train = train};
  p->offset = cg_offsets(b, g, b->d.ntensors, to);
  if (cg_deps(b, g, steps) || cg_inputs(b, g, p) || cg_outputs(b, g, train, p) || b->failed)
    return rt_errf(err, n, "out of memory");
  if (to) cg_renumber_program_slots(p, to);
  return 0;
}

/* ---- the descriptor ---- */

/* The train graph's tensors (or, without one, the predict graph's), then the values only the
 * predict graph has. */
static int cg_tensors(cg_box *b, const ir_graph *predict, const ir_graph *train) {
  const ir_graph *g = train ? train : predict;
  int own = train ? ir_ntensors(predict) - cg_shared(predict) : 0, n = ir_ntensors(g) + own;
  rt_tensor_info *ts = cg_alloc(b, (size_t)n * sizeof *ts);
  if (!ts) return 1;
  for (int i = 0; i < ir_ntensors(g); i++) ts[i] = cg_tensor(b, ir_tensor_at(g, i), i);
  for (int k = 0; k < own; k++)
    ts[ir_ntensors(g) + k] = cg_tensor(b, ir_tensor_at(predict, cg_shared(predict) + k), ir_ntensors(g) + k);
  b->d.ntensors = n, b->d.tensors = ts;
  return b->failed;
}

/* ---- the tensors the runtime binds ----
 * The graphs number every value, also those a fused group keeps in registers and the scalar
 * constants its loop folds in: most tensors of a large elementwise graph. The runtime reads
 * only what a step, an entry point or the weights file names, so the descriptor keeps those
 * alone, in the graph's order, and the indices are renumbered. A 100k-node chain's table
 * shrinks from about 180,000 entries to 1,564, which the compiled object would otherwise
 * carry as LLVM globals. */

static bool cg_kept_role(int32_t role) { return role != RT_ROLE_VALUE && role != RT_ROLE_CONST; }

static void cg_mark_slots(const int32_t *t, int n, bool *keep) {
  for (int i = 0; i < n; i++)
    if (t[i] >= 0) keep[t[i]] = true;
}

static void cg_mark_program(const rt_program *p, bool *keep) {
  for (int i = 0; i < p->nsteps; i++) cg_mark_slots(p->steps[i].in, p->steps[i].nin, keep), cg_mark_slots(p->steps[i].out, p->steps[i].nout, keep);
  cg_mark_slots(p->inputs, p->ninputs, keep);
  cg_mark_slots(p->outputs, p->noutputs, keep);
}

static void cg_renumber_program(rt_program *p, int32_t *to, int ntensors) {
  cg_renumber_program_slots(p, to);
  int64_t *off = (int64_t *)p->offset;
  for (int t = 0; off && t < ntensors; t++)
    if (to[t] >= 0) off[to[t]] = off[t];
}

static int cg_compact(rt_model_desc *d) {
  int n = d->ntensors, k = 0;
  bool *keep = calloc((size_t)n + 1, sizeof *keep);
  int32_t *to = malloc(((size_t)n + 1) * sizeof *to);
  if (!keep || !to) return free(keep), free(to), 1;
  for (int t = 0; t < n; t++) keep[t] = cg_kept_role(d->tensors[t].role);
  cg_mark_program(&d->predict, keep);
  if (d->has_train) cg_mark_program(&d->train, keep);
  rt_tensor_info *ts = (rt_tensor_info *)d->tensors;
  for (int t = 0; t < n; t++) {
    to[t] = keep[t] ? k : -1;
    if (keep[t]) ts[k++] = ts[t];
  }
  cg_renumber_program(&d->predict, to, n);
  if (d->has_train) cg_renumber_program(&d->train, to, n);
  d->ntensors = k;
  free(keep), free(to);
  return 0;
}

static void cg_optimizer(rt_model_desc *d, const ir_graph *g) {
  d->optim = g->has_train ? (int32_t)g->optim.kind : K_OPT_SGD;
  d->lr = g->has_train ? g->optim.lr : 0.0f;
  d->sgd = g->optim.sgd, d->adam = g->optim.adam, d->sched = g->optim.sched, d->clip_norm = g->optim.clip_norm;
}

rt_model_desc *cg_desc_build(const ir_graph *predict, const ir_graph *train, char *err, size_t n) {
  if (!predict) return rt_errf(err, n, "cg_desc_build: no predict graph"), NULL;
  if (train && cg_check_shared(predict, train, err, n)) return NULL;
  cg_box *b = calloc(1, sizeof *b);
  if (!b) return rt_errf(err, n, "out of memory"), NULL;
  rt_model_desc *d = &b->d;
  const ir_graph *g = train ? train : predict;
  d->abi = RT_MODEL_ABI, d->name = cg_strdup(b, predict->name);
  d->has_train = train != NULL;
  cg_optimizer(d, g);
  int rc = cg_tensors(b, predict, train) ? rt_errf(err, n, "out of memory") : 0;
  bool own = train && ir_ntensors(predict) > cg_shared(predict);   /* values only predict has */
  int32_t *to = own ? cg_predict_map(predict, ir_ntensors(train)) : NULL;
  if (!rc && own && !to) rc = rt_errf(err, n, "out of memory");
  if (!rc) rc = cg_program(b, predict, false, to, &d->predict, err, n);
  free(to);
  if (!rc && train) rc = cg_program(b, train, true, NULL, &d->train, err, n);
  if (!rc && cg_compact(d)) rc = rt_errf(err, n, "out of memory");
  if (rc) return cg_desc_free(d), NULL;
  return d;
}
