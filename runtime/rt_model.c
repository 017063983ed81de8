/* rt_model.c — a compiled model instance: storage for every persistent tensor of its descriptor
 * (weights initialised exactly as the reference executor does, optimizer state zeroed,
 * constants filled), the arena, the lr, the error message; lookups by name. Running is in
 * rt_model_run.c, weight files in rt_model_io.c. */
#include "rt_model_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

uint32_t rt_fnv1a32(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

void rt_fused_name(char *buf, size_t n, int train, int step) {
  snprintf(buf, n, "kiln_fused_%c%d", train ? 't' : 'p', step);
}

int rt_model_fail(rt_model *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rt_verrf(m->err, sizeof m->err, fmt, ap);
  va_end(ap);
  return 1;
}

int rt_model_is_weight(const rt_tensor_info *t) { return t->role == RT_ROLE_PARAM || t->role == RT_ROLE_AUX; }

int64_t rt_tensor_numel(const rt_tensor_info *t) { return k_shape_numel(&t->shape); }

static int rt_is_persistent(const rt_tensor_info *t) {
  return rt_model_is_weight(t) || t->role == RT_ROLE_STATE || t->role == RT_ROLE_CONST;
}

static int64_t rt_align64(int64_t n) { return (n + 63) & ~(int64_t)63; }

/* ---- initialisation (as exec/ex_model.c: the same kernels, counters and fans) ---- */

static void rt_init_tensor(rt_model *m, int i) {
  const rt_tensor_info *t = &m->d->tensors[i];
  if (rt_model_is_weight(t) && t->data) memcpy(m->tptr[i], t->data, (size_t)rt_tensor_numel(t) * 4);
  else if (rt_model_is_weight(t)) k_init_fill(m->tptr[i], &t->shape, t->init, t->init_a, t->init_b, m->seed, RT_CTR_INIT(t->ctr));
  else if (t->role == RT_ROLE_CONST) k_init_constant(m->tptr[i], rt_tensor_numel(t), t->init_a);
}

/* A zeroed block of `bytes` aligned to 64, in an allocation *block that free takes. calloc
 * rather than aligned_alloc and memset: a large block is fresh pages from the kernel, zero
 * until first touched, so a model's weights (ViT-B/16's 346 MB, which create then writes) and
 * a training arena of gigabytes are not written once more at create. No madvise(MADV_HUGEPAGE):
 * 2 MB pages took a second off ViT-B/16's create but made its predict 10% slower
 * (bench/README.md, "Create + first predict"). */
static void *rt_zalloc64(int64_t bytes, void **block) {
  *block = calloc(1, (size_t)bytes + 63);
  return *block ? (void *)(((uintptr_t)*block + 63) & ~(uintptr_t)63) : NULL;
}

/* One zeroed block for every persistent tensor; aux states also get a snapshot buffer. */
static int rt_model_storage(rt_model *m) {
  const rt_model_desc *d = m->d;
  int64_t bytes = 0;
  for (int i = 0; i < d->ntensors; i++) {
    if (rt_is_persistent(&d->tensors[i])) bytes += rt_align64(rt_tensor_numel(&d->tensors[i]) * 4);
    if (d->tensors[i].role == RT_ROLE_AUX) m->aux_elems += rt_tensor_numel(&d->tensors[i]);
  }
  m->store_bytes = bytes;
  m->store = rt_zalloc64(bytes ? bytes : 64, &m->store_block);
  m->aux_backup = malloc((size_t)m->aux_elems * 4 + 4);
  if (!m->store || !m->aux_backup) return 1;
  int64_t off = 0;
  for (int i = 0; i < d->ntensors; i++) {
    if (!rt_is_persistent(&d->tensors[i])) continue;
    m->tptr[i] = (char *)m->store + off;
    off += rt_align64(rt_tensor_numel(&d->tensors[i]) * 4);
    rt_init_tensor(m, i);
  }
  return 0;
}

static int rt_model_arena(rt_model *m) {
  const rt_model_desc *d = m->d;
  int64_t bytes = d->predict.arena_bytes;
  if (d->has_train && d->train.arena_bytes > bytes) bytes = d->train.arena_bytes;
  bytes = rt_align64(bytes > 0 ? bytes : 64);
  m->arena = rt_zalloc64(bytes, &m->arena_block);
  return m->arena ? 0 : 1;
}

/* A descriptor is compiler output, but one from a mismatched build must not crash us. */
static int rt_tensors_valid(const rt_model_desc *d) {
  if (d->ntensors < 0 || (d->ntensors && !d->tensors)) return 0;
  for (int i = 0; i < d->ntensors; i++) {
    const rt_tensor_info *t = &d->tensors[i];
    if (!t->name || t->shape.rank < 0 || t->shape.rank > K_MAX_RANK || (t->dtype != K_F32 && t->dtype != K_I32)) return 0;
    for (int k = 0; k < t->shape.rank; k++)
      if (t->shape.d[k] < 0) return 0;
  }
  return 1;
}

/* The programs before the bounded dims: the dims' checks read the steps' shapes and params. */
static int rt_desc_valid(const rt_model_desc *d) {
  return d->abi && strcmp(d->abi, RT_MODEL_ABI) == 0 && rt_tensors_valid(d) && rt_prog_valid(d, &d->predict) &&
         (!d->has_train || rt_prog_valid(d, &d->train)) && rt_dims_valid(d);
}

rt_model *rt_model_new(const rt_model_desc *d, uint64_t seed, int run_on_cpu) {
  if (!d || !rt_desc_valid(d)) return NULL;
  rt_model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->d = d, m->seed = seed, m->lr = m->base_lr = d->lr;
  pthread_mutex_init(&m->mu, NULL);
  size_t nt = (size_t)d->ntensors + 1;
  m->tptr = calloc(nt, sizeof *m->tptr), m->ptr = calloc(nt, sizeof *m->ptr);
  m->tshape = malloc(nt * sizeof *m->tshape);
  int bad = !m->tptr || !m->ptr || !m->tshape || rt_model_storage(m);
  for (int i = 0; !bad && i < d->ntensors; i++) m->tshape[i] = d->tensors[i].shape;
  for (int k = 0; k < d->ndims; k++) m->extent[k] = d->dims[k].hi;   /* the descriptor's sizes */
  if (!bad && run_on_cpu) {
    m->engine = rt_engine_create_from_env();
    m->prof = rt_profile_from_env(d);
    bad = !m->engine || rt_model_arena(m) || rt_prog_state_init(&m->ps[0], m, &d->predict) ||
          (d->has_train && rt_prog_state_init(&m->ps[1], m, &d->train));
  }
  if (bad) return rt_model_destroy(m), NULL;
  return m;
}

/* NULL without memory, and for a descriptor of another ABI or target or one that is malformed. */
rt_model *rt_model_create(const rt_model_desc *d, uint64_t seed) {
  if (!d || d->target != RT_TARGET_CPU) return NULL;   /* a CUDA model is created by rtc_model_create */
  return rt_model_new(d, seed, 1);
}

void rt_model_destroy(rt_model *m) {
  if (!m) return;
  if (m->engine) rt_engine_destroy(m->engine);   /* first: it may still be deleting variables */
  rt_profile_finish(m, m->prof), rt_profile_free(m->prof);
  rt_prog_state_free(&m->ps[0]), rt_prog_state_free(&m->ps[1]);
  free(m->tptr), free(m->ptr), free(m->tshape);
  free(m->store_block), free(m->arena_block), free(m->aux_backup);
  rt_comm_free(m);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

/* ---- small entry points ---- */

int rt_model_set_lr(rt_model *m, float lr) {
  if (!m) return 1;
  pthread_mutex_lock(&m->mu);
  int rc = 0;
  if (!isfinite(lr) || lr <= 0) rc = rt_model_fail(m, "set_lr: the learning rate must be finite and > 0, not %g", (double)lr);
  else m->lr = m->base_lr = lr, m->lr_from = m->step, m->err[0] = 0;   /* the schedule restarts */
  pthread_mutex_unlock(&m->mu);
  return rc;
}

float rt_model_lr_now(const rt_model *m) { return k_sched_lr(&m->d->sched, m->base_lr, m->step - m->lr_from); }

float rt_model_lr(const rt_model *m) {
  if (!m) return 0.0f;
  rt_model *w = (rt_model *)m;   /* the lock is not part of the value */
  pthread_mutex_lock(&w->mu);
  float lr = rt_model_lr_now(m);
  pthread_mutex_unlock(&w->mu);
  return lr;
}

int rt_model_set_random(rt_model *m, uint64_t seed, int64_t step) {
  if (!m) return 1;
  pthread_mutex_lock(&m->mu);
  int rc = 0;
  if (step < 0) rc = rt_model_fail(m, "set_random: the step must be >= 0, not %lld", (long long)step);
  else m->seed = seed, m->step = step, m->err[0] = 0;
  pthread_mutex_unlock(&m->mu);
  return rc;
}

const char *rt_model_error(const rt_model *m) {
  if (!m) return "the model is NULL";
  return m->err;
}

static int rt_find(const rt_model_desc *d, const char *name) {
  for (int i = 0; i < d->ntensors; i++)
    if (strcmp(d->tensors[i].name, name) == 0) return i;
  return -1;
}

int rt_model_get(const rt_model *m, const char *name, const float **data, int64_t *n) {
  if (!m || !name || !data || !n) return 1;
  int i = rt_find(m->d, name);
  if (i < 0) return 1;
  const rt_tensor_info *t = &m->d->tensors[i];
  if (!rt_model_is_weight(t) && t->role != RT_ROLE_STATE) return 1;
  *data = m->tptr[i], *n = rt_tensor_numel(t);
  return 0;
}

const rt_model_desc *rt_model_descriptor(const rt_model *m) { return m ? m->d : NULL; }

rt_model_api rt_model_local_api(const rt_model_desc *d) {
  return (rt_model_api){RT_MODEL_ABI, d, rt_model_create, rt_model_destroy, rt_model_load, rt_model_save,
                        rt_model_predict, rt_model_train_step, rt_model_set_lr, rt_model_error, NULL, NULL,
                        rt_model_predict_at, rt_model_train_step_at, rt_model_lr, rt_model_save_state,
                        rt_model_load_state, rt_model_set_comm};
}
