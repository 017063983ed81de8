/* ex_model.c — the executor's model: every PARAM and AUX tensor in storage of its own, found
 * by name, initialised from its ir_init with a Philox counter per tensor (exec.h); optimizer
 * state created zeroed the first time an update node names it; the step count and lr. */
#include "ex_int.h"
#include "rt_model.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>


void *ex_grow(void **buf, int64_t *cap, int64_t bytes) {
  if (bytes <= *cap && *buf) return *buf;
  int64_t want = (bytes + 63) & ~(int64_t)63;
  void *p = aligned_alloc(64, (size_t)(want ? want : 64));
  if (!p) return NULL;
  memset(p, 0, (size_t)(want ? want : 64));
  free(*buf);
  *buf = p;
  *cap = want;
  return p;
}

/* ---- the name table ---- */

static int ex_slot_of(const ex_model *m, const char *name) {
  uint32_t mask = (uint32_t)m->nslot - 1, i = rt_fnv1a32(name) & mask;
  while (m->slot[i] && strcmp(m->ent[m->slot[i] - 1].name, name) != 0) i = (i + 1) & mask;
  return (int)i;
}

static int ex_rehash(ex_model *m) {
  int want = 64;
  while (want < 2 * (m->nent + 1)) want *= 2;
  if (want <= m->nslot) return 0;
  int *slot = calloc((size_t)want, sizeof *slot);
  if (!slot) return 1;
  free(m->slot);
  m->slot = slot, m->nslot = want;
  for (int e = 0; e < m->nent; e++) m->slot[ex_slot_of(m, m->ent[e].name)] = e + 1;
  return 0;
}

ex_entry *ex_model_find(const ex_model *m, const char *name) {
  if (!m->nslot) return NULL;
  int s = m->slot[ex_slot_of(m, name)];
  return s ? &m->ent[s - 1] : NULL;
}

/* A new zeroed entry; NULL when out of memory. */
static ex_entry *ex_model_add(ex_model *m, const char *name, int64_t n, ir_tensor_kind kind) {
  if (ex_rehash(m)) return NULL;
  if (m->nent == m->cap) {
    int cap = m->cap ? 2 * m->cap : 32;
    ex_entry *e = realloc(m->ent, (size_t)cap * sizeof *e);
    if (!e) return NULL;
    m->ent = e, m->cap = cap;
  }
  ex_entry e = {strdup(name), NULL, n, kind};
  int64_t cap = 0;
  if (!e.name || !ex_grow((void **)&e.data, &cap, n * 4)) return free(e.name), free(e.data), NULL;
  m->ent[m->nent] = e;
  m->slot[ex_slot_of(m, name)] = ++m->nent;
  return &m->ent[m->nent - 1];
}

ex_entry *ex_model_state(ex_model *m, const char *name, int64_t n) {
  ex_entry *e = ex_model_find(m, name);
  if (e) return e->n == n ? e : NULL;
  return ex_model_add(m, name, n, IR_T_STATE);
}

/* ---- initialisation ---- */

static void ex_init(float *x, const ir_tensor *t, uint64_t seed, uint64_t ctr) {
  if (t->data) return (void)memcpy(x, t->data, (size_t)ir_tensor_numel(t) * 4);   /* imported weights */
  ir_init in = t->has_init ? t->init : (ir_init){K_INIT_ZEROS, 0, 0};
  k_init_fill(x, &t->shape, (int)in.kind, in.a, in.b, seed, ctr);
}

static int ex_model_fill(ex_model *m, const ir_graph *g, char *err, size_t n) {
  for (int i = 0; i < ir_ntensors(g); i++) {
    const ir_tensor *t = ir_tensor_at(g, i);
    if (t->kind != IR_T_PARAM && t->kind != IR_T_AUX) continue;
    if (!t->shape_known) return rt_errf(err, n, "%s: shape unknown (infer shapes first)", t->name);
    if (ex_model_find(m, t->name)) return rt_errf(err, n, "%s: two tensors of that name", t->name);
    ex_entry *e = ex_model_add(m, t->name, ir_tensor_numel(t), t->kind);
    if (!e) return rt_errf(err, n, "out of memory for %s", t->name);
    ex_init(e->data, t, m->seed, EX_CTR_INIT(i));
  }
  m->nweights = m->nent;
  return 0;
}

ex_model *ex_model_new(const ir_graph *lowered, uint64_t seed, char *err, size_t n) {
  ex_model *m = calloc(1, sizeof *m);
  if (!m) return rt_errf(err, n, "out of memory"), NULL;
  m->seed = seed;
  m->lr = lowered->has_train ? lowered->optim.lr : 0.0f;
  if (ex_model_fill(m, lowered, err, n)) return ex_model_free(m), NULL;
  return m;
}

void ex_model_free(ex_model *m) {
  if (!m) return;
  for (int i = 0; i < m->nent; i++) free(m->ent[i].name), free(m->ent[i].data);
  free(m->ent);
  free(m->slot);
  free(m->arena), free(m->scratch), free(m->backup);
  free(m);
}

void ex_model_set_lr(ex_model *m, float lr) { m->lr = lr, m->lr_from = m->step; }
float ex_model_lr(const ex_model *m) { return m->lr; }
int64_t ex_model_step(const ex_model *m) { return m->step; }

int ex_model_get(const ex_model *m, const char *name, const float **data, int64_t *n) {
  const ex_entry *e = ex_model_find(m, name);
  if (!e) return 1;
  *data = e->data, *n = e->n;
  return 0;
}

int ex_model_weight(const ex_model *m, int i, const char **name, const float **data, int64_t *n) {
  if (i < 0 || i >= m->nweights) return 1;
  *name = m->ent[i].name, *data = m->ent[i].data, *n = m->ent[i].n;
  return 0;
}
