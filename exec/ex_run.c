/* ex_run.c — the entry points of the reference executor: bind every tensor of a planned graph
 * to memory by its plan class (arena interval, caller's input, model state, scratch for
 * constants and values internal to fused groups), run the nodes in order, copy results out. */
#include "ex_int.h"

#include <stdlib.h>
#include <string.h>

/* Calls f on every node, fused members included. */
static void ex_walk(const ir_graph *g, void (*f)(const ir_node *, void *), void *arg) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    f(n, arg);
    for (int s = 0; n->kind == IR_N_FUSED && s < n->nsub; s++) f(&n->sub[s], arg);
  }
}

/* ---- one call's state ---- */

static void ex_max_args(const ir_node *n, void *arg) {
  int *cap = arg;
  if (n->nin > *cap) *cap = n->nin;
  if (n->nout > *cap) *cap = n->nout;
}

static void ex_run_free(ex_run *r) {
  free(r->ptr), free(r->scr), free(r->tin), free(r->tout), free(r->req);
}

static int ex_run_init(ex_run *r, ex_model *m, const ir_graph *g, char *err, size_t n) {
  *r = (ex_run){.m = m, .g = g, .is_train = g->mode == IR_MODE_TRAIN, .err = err, .errn = n};
  if (!g->plan) return rt_errf(err, n, "%s: the graph has no memory plan (run pass_compile)", g->name);
  r->cap = 1;
  ex_walk(g, ex_max_args, &r->cap);
  size_t nt = (size_t)ir_ntensors(g) + 1, c = (size_t)r->cap;
  r->ptr = calloc(nt, sizeof *r->ptr), r->scr = malloc(nt * sizeof *r->scr);
  r->tin = calloc(c, sizeof *r->tin), r->tout = calloc(c, sizeof *r->tout), r->req = calloc(c, sizeof *r->req);
  if (!r->ptr || !r->scr || !r->tin || !r->tout || !r->req) return rt_errf(err, n, "out of memory");
  for (size_t t = 0; t < nt; t++) r->scr[t] = -1;
  return 0;
}

/* ---- scratch: constants and values that live only inside a fused group ---- */

typedef struct { ex_run *r; int64_t bytes; } ex_scratch_walk;

static void ex_scratch_one(ex_scratch_walk *w, int t) {
  const ir_tensor *x = ir_tensor_at(w->r->g, t);
  if (w->r->scr[t] >= 0) return;
  if (x->kind != IR_T_CONST && w->r->g->plan->buf[t].cls != IR_MEM_NONE) return;
  w->r->scr[t] = w->bytes;
  w->bytes += (ir_tensor_numel(x) * 4 + 63) & ~(int64_t)63;
}

static void ex_scratch_node(ex_scratch_walk *w, const ir_node *n) {
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] >= 0) ex_scratch_one(w, n->in[j]);
  for (int j = 0; j < n->nout; j++)
    if (n->out[j] >= 0) ex_scratch_one(w, n->out[j]);
}

/* Only fused members may touch a value with no plan storage; top-level nodes get scratch only
 * for constants (a NONE output there is simply not written). */
static void ex_scratch_mark(ex_scratch_walk *w, const ir_node *n) {
  if (n->kind == IR_N_FUSED && !n->epi) {      /* an epilogue's internal values live in its output */
    for (int s = 0; s < n->nsub; s++) ex_scratch_node(w, &n->sub[s]);
    return;
  }
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] >= 0 && ir_tensor_at(w->r->g, n->in[j])->kind == IR_T_CONST) ex_scratch_one(w, n->in[j]);
}

static int ex_scratch(ex_run *r) {
  ex_scratch_walk w = {r, 0};
  for (int i = 0; i < ir_nnodes(r->g); i++) ex_scratch_mark(&w, ir_node_at(r->g, i));
  if (!ex_grow(&r->m->scratch, &r->m->scratch_cap, w.bytes)) return rt_errf(r->err, r->errn, "out of memory (scratch)");
  for (int t = 0; t < ir_ntensors(r->g); t++) {
    if (r->scr[t] < 0) continue;
    const ir_tensor *x = ir_tensor_at(r->g, t);
    r->ptr[t] = (char *)r->m->scratch + r->scr[t];
    if (x->kind == IR_T_CONST) k_init_constant(r->ptr[t], ir_tensor_numel(x), x->value);
  }
  return 0;
}

/* ---- binding by plan class ---- */

static int ex_bind_persist(ex_run *r, int t) {
  const ir_tensor *x = ir_tensor_at(r->g, t);
  int64_t n = ir_tensor_numel(x);
  ex_entry *e = x->kind == IR_T_STATE ? ex_model_state(r->m, x->name, n) : ex_model_find(r->m, x->name);
  if (!e) return rt_errf(r->err, r->errn, "%s: not a tensor of this model (or out of memory)", x->name);
  if (e->n != n) return rt_errf(r->err, r->errn, "%s: %lld elements in the model, %lld in the graph", x->name, (long long)e->n, (long long)n);
  r->ptr[t] = e->data;
  return 0;
}

static int ex_bind_one(ex_run *r, int t, const void *const *inputs, const int *in_pos) {
  const ir_plan *p = r->g->plan;
  const ir_buffer *b = &p->buf[t];
  const ir_tensor *x = ir_tensor_at(r->g, t);
  if (r->ptr[t] || b->cls == IR_MEM_NONE) return 0;        /* scratch, or no storage */
  if (b->cls == IR_MEM_ARENA) {
    if (b->offset < 0 || b->offset + ir_tensor_bytes(x) > p->arena_bytes)
      return rt_errf(r->err, r->errn, "%s: arena interval out of range", x->name);
    r->ptr[t] = (char *)r->m->arena + b->offset;
    return 0;
  }
  if (b->cls == IR_MEM_INPUT) {
    if (in_pos[t] < 0 || !inputs || !inputs[in_pos[t]]) return rt_errf(r->err, r->errn, "input %s: no buffer given", x->name);
    r->ptr[t] = (void *)inputs[in_pos[t]];
    return 0;
  }
  return ex_bind_persist(r, t);
}

static int ex_bind(ex_run *r, const void *const *inputs) {
  const ir_plan *p = r->g->plan;
  int nt = ir_ntensors(r->g), ni = ir_graph_inputs(r->g, NULL, 0);
  int *idx = malloc(((size_t)ni + 1) * sizeof *idx), *pos = malloc(((size_t)nt + 1) * sizeof *pos);
  int rc = !idx || !pos || ni < 0 ? rt_errf(r->err, r->errn, "out of memory") : 0;
  if (!rc && !ex_grow(&r->m->arena, &r->m->arena_cap, p->arena_bytes)) rc = rt_errf(r->err, r->errn, "out of memory (arena of %lld bytes)", (long long)p->arena_bytes);
  if (!rc) {
    ir_graph_inputs(r->g, idx, ni);
    for (int t = 0; t < nt; t++) pos[t] = -1;
    for (int k = 0; k < ni; k++) pos[idx[k]] = k;
    rc = ex_scratch(r);
  }
  for (int t = 0; !rc && t < nt; t++) rc = ex_bind_one(r, t, inputs, pos);
  free(idx), free(pos);
  return rc;
}

/* ---- running ---- */

/* clip_norm: the gradients of the updates from node `first` on scaled together, as the
 * runtime does before its first update (k_clip_grad_norm). */
static int ex_clip_grads(ex_run *r, int first) {
  int n = ir_nnodes(r->g) - first, k = 0;
  float **g = malloc(sizeof *g * (size_t)(n + 1));
  int64_t *len = malloc(sizeof *len * (size_t)(n + 1));
  if (!g || !len) return free(g), free(len), rt_errf(r->err, r->errn, "out of memory clipping the gradients");
  for (int i = first; i < ir_nnodes(r->g); i++) {
    const ir_node *nd = ir_node_at(r->g, i);
    if (nd->kind != IR_N_UPDATE || nd->nin < 2 || !r->ptr[nd->in[1]]) continue;
    g[k] = r->ptr[nd->in[1]], len[k++] = ir_tensor_numel(ir_tensor_at(r->g, nd->in[1]));
  }
  k_clip_grad_norm(g, len, k, r->g->optim.clip_norm);
  free(g), free(len);
  return 0;
}

static int ex_run_nodes(ex_run *r) {
  const ir_plan *p = r->g->plan;
  bool clipped = r->g->optim.clip_norm <= 0;
  for (int i = 0; i < ir_nnodes(r->g); i++) {
    if (!clipped && ir_node_at(r->g, i)->kind == IR_N_UPDATE) {
      if (ex_clip_grads(r, i)) return 1;
      clipped = true;
    }
    void *temp = p->temp_bytes[i] ? (char *)r->m->arena + p->temp_offset[i] : NULL;
    if (p->temp_bytes[i] && p->temp_offset[i] + p->temp_bytes[i] > p->arena_bytes)
      return rt_errf(r->err, r->errn, "%s: workspace past the arena", ir_node_at(r->g, i)->name);
    r->node = i;
    if (ex_node_run(r, ir_node_at(r->g, i), temp, (size_t)p->temp_bytes[i])) return 1;
  }
  return 0;
}

static int ex_check_mode(const ir_graph *g, ir_mode want, char *err, size_t n) {
  if (g->mode == want) return 0;
  return rt_errf(err, n, "%s: a graph compiled for %s cannot run as %s", g->name,
                 g->mode == IR_MODE_TRAIN ? "train" : "predict", want == IR_MODE_TRAIN ? "train_step" : "predict");
}

int ex_predict(ex_model *m, const ir_graph *g, const void *const *inputs, void *const *outputs,
               char *err, size_t n) {
  if (!m || !g) return rt_errf(err, n, "NULL model or graph");
  if (ex_check_mode(g, IR_MODE_PREDICT, err, n)) return 1;
  if (g->outputs.len && !outputs) return rt_errf(err, n, "no output buffers given");
  ex_run r;
  int rc = ex_run_init(&r, m, g, err, n) || ex_bind(&r, inputs) || ex_run_nodes(&r);
  for (int i = 0; !rc && i < g->outputs.len; i++) {
    int t = IR_VEC_AT(g->outputs, int, i);
    if (!outputs[i] || !r.ptr[t]) rc = rt_errf(err, n, "output %s: no buffer", ir_tensor_at(g, t)->name);
    else memcpy(outputs[i], r.ptr[t], (size_t)ir_tensor_numel(ir_tensor_at(g, t)) * 4);
  }
  ex_run_free(&r);
  return rc;
}

/* ---- train_step: aux states are saved first so a failed step leaves them as they were ---- */

static int ex_aux_save(ex_model *m, bool restore) {
  int64_t total = 0;
  for (int i = 0; i < m->nweights; i++) total += m->ent[i].kind == IR_T_AUX ? m->ent[i].n : 0;
  if (!restore && !ex_grow(&m->backup, &m->backup_cap, total * 4)) return 1;
  float *b = m->backup;
  for (int i = 0; i < m->nweights; i++) {
    ex_entry *e = &m->ent[i];
    if (e->kind != IR_T_AUX) continue;
    if (restore) memcpy(e->data, b, (size_t)e->n * 4);
    else memcpy(b, e->data, (size_t)e->n * 4);
    b += e->n;
  }
  return 0;
}

static float ex_loss_value(const ex_run *r) {
  const ir_graph *g = r->g;
  const float *x = r->ptr[g->loss];
  double s = 0;
  for (int64_t i = 0; i < ir_tensor_numel(ir_tensor_at(g, g->loss)); i++) s += x[i];
  return (float)s;
}

int ex_train_step(ex_model *m, const ir_graph *g, const void *const *inputs, float *loss,
                  char *err, size_t n) {
  if (!m || !g) return rt_errf(err, n, "NULL model or graph");
  if (ex_check_mode(g, IR_MODE_TRAIN, err, n)) return 1;
  if (g->loss < 0) return rt_errf(err, n, "%s: no loss", g->name);
  if (ex_aux_save(m, false)) return rt_errf(err, n, "out of memory");
  m->step++;                                  /* Adam's t and the dropout counters start at 1 */
  ex_run r;
  int rc = ex_run_init(&r, m, g, err, n) || ex_bind(&r, inputs) || ex_run_nodes(&r);
  if (!rc && !r.ptr[g->loss]) rc = rt_errf(err, n, "loss %s: no buffer", ir_tensor_at(g, g->loss)->name);
  if (rc) m->step--, ex_aux_save(m, true);
  else if (loss) *loss = ex_loss_value(&r);
  ex_run_free(&r);
  return rc;
}
