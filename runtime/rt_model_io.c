/* rt_model_io.c — weights files: every PARAM and AUX tensor of a model as safetensors, named
 * as in the model; and state files (save_state / load_state): the same and the optimizer's
 * STATE tensors, with what else a train step reads in the metadata (the step count, which is
 * Adam's t and the random counters, the seed, the schedule's base lr and start). load reads
 * and checks the whole file before it copies anything, so a bad file leaves the model as it
 * was; save writes through the atomic writer. */
#include <inttypes.h>
#include "rt_model_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void rt_shape_str(const k_shape *s, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < s->rank && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)s->d[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

static int rt_shape_same(const k_shape *a, const k_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->d[i] != b->d[i]) return 0;
  return 1;
}

/* What a file holds: the weights, and with `state` the optimizer's state too. */
static int rt_io_takes(const rt_tensor_info *t, bool state) { return rt_model_is_weight(t) || (state && t->role == RT_ROLE_STATE); }

static int rt_is_model_weight(const rt_model_desc *d, const char *name, bool state) {
  for (int i = 0; i < d->ntensors; i++)
    if (rt_io_takes(&d->tensors[i], state) && strcmp(d->tensors[i].name, name) == 0) return 1;
  return 0;
}

/* Every weight (and state) of the model is in f with its dtype and shape, and f holds nothing else. */
static int rt_check_file(rt_model *m, const rt_st_file *f, const char *path, bool state) {
  const rt_model_desc *d = m->d;
  char want[128], got[128];
  for (int i = 0; i < d->ntensors; i++) {
    const rt_tensor_info *t = &d->tensors[i];
    if (!rt_io_takes(t, state)) continue;
    const rt_st_entry *e = rt_st_find(f, t->name);
    if (!e) return rt_model_fail(m, "load %s: tensor '%s' is missing", path, t->name);
    if ((int)e->dtype != t->dtype)
      return rt_model_fail(m, "load %s: tensor '%s' is %s, the model's is %s", path, t->name,
                           nd_dtype_name(e->dtype), nd_dtype_name((k_dtype)t->dtype));
    if (!rt_shape_same(&e->shape, &t->shape)) {
      rt_shape_str(&e->shape, got, sizeof got), rt_shape_str(&t->shape, want, sizeof want);
      return rt_model_fail(m, "load %s: tensor '%s' has shape %s, the model's is %s", path, t->name, got, want);
    }
  }
  for (int k = 0; k < f->n; k++)
    if (!rt_is_model_weight(d, f->entries[k].name, state))
      return rt_model_fail(m, "load %s: unexpected tensor '%s' (not a weight%s of %s)", path, f->entries[k].name,
                           state ? " or optimizer state" : "", d->name ? d->name : "the model");
  return 0;
}

/* The state file's metadata: what a train step reads besides the tensors. */
#define RT_STATE_FORMAT "kiln-state-1"
typedef struct {
  int64_t step, lr_from;
  uint64_t seed;
  float base_lr;
} rt_state_meta;

static int rt_meta_int(rt_model *m, const rt_st_file *f, const char *path, const char *key, int64_t lo, int64_t *out) {
  const char *v = rt_st_meta_get(f, key);
  char *end = NULL;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || !*v || *end || x < lo) return rt_model_fail(m, "load_state %s: metadata '%s' is %s", path, key, v ? "not a valid count" : "missing");
  *out = x;
  return 0;
}

/* The metadata of a state file for this model: its format, model and optimizer, then the values. */
static int rt_state_read(rt_model *m, const rt_st_file *f, const char *path, rt_state_meta *s) {
  const char *fmt = rt_st_meta_get(f, "format"), *name = rt_st_meta_get(f, "model"), *lr = rt_st_meta_get(f, "base_lr");
  const char *seed = rt_st_meta_get(f, "seed");
  int64_t optim = -1;
  if (!fmt || strcmp(fmt, RT_STATE_FORMAT) != 0)
    return rt_model_fail(m, "load_state %s: not a state file (save_state writes one; save writes weights only, for load)", path);
  if (!name || strcmp(name, m->d->name) != 0)
    return rt_model_fail(m, "load_state %s: the state of model '%s', not of '%s'", path, name ? name : "?", m->d->name);
  if (rt_meta_int(m, f, path, "optimizer", 0, &optim) || rt_meta_int(m, f, path, "step", 0, &s->step) ||
      rt_meta_int(m, f, path, "lr_from", 0, &s->lr_from))
    return 1;
  if (optim != m->d->optim) return rt_model_fail(m, "load_state %s: saved with another optimizer (kind %lld, the model's is %d)", path, (long long)optim, m->d->optim);
  char *end = NULL;
  s->base_lr = lr ? strtof(lr, &end) : 0;
  if (!lr || *end || !(s->base_lr > 0)) return rt_model_fail(m, "load_state %s: metadata 'base_lr' is missing or not positive", path);
  s->seed = seed ? strtoull(seed, &end, 10) : 0;
  if (!seed || !*seed || *end) return rt_model_fail(m, "load_state %s: metadata 'seed' is missing or not a number", path);
  if (s->lr_from > s->step) return rt_model_fail(m, "load_state %s: lr_from is past step", path);
  return 0;
}

static int rt_load_locked(rt_model *m, const char *path, bool state) {
  const char *what = state ? "load_state" : "load";
  if (!path) return rt_model_fail(m, "%s: path is NULL", what);
  rt_st_file f;
  rt_state_meta meta = {0};
  char msg[RT_ERR_LEN];
  if (rt_st_open(path, &f, msg, sizeof msg)) return rt_model_fail(m, "%s: %s", what, msg);
  int rc = (state && rt_state_read(m, &f, path, &meta)) || rt_check_file(m, &f, path, state);
  for (int i = 0; !rc && i < m->d->ntensors; i++) {
    const rt_tensor_info *t = &m->d->tensors[i];
    if (rt_io_takes(t, state)) memcpy(m->tptr[i], rt_st_find(&f, t->name)->data, (size_t)rt_tensor_numel(t) * 4);
  }
  if (!rc && state) m->step = meta.step, m->lr_from = meta.lr_from, m->seed = meta.seed, m->base_lr = meta.base_lr;
  if (!rc) rt_model_weights_changed(m);
  rt_st_close(&f);
  return rc;
}

static int rt_save_locked(rt_model *m, const char *path, bool state) {
  const char *what = state ? "save_state" : "save";
  if (!path) return rt_model_fail(m, "%s: path is NULL", what);
  const rt_model_desc *d = m->d;
  rt_st_tensor *ts = calloc((size_t)d->ntensors + 1, sizeof *ts);
  if (!ts) return rt_model_fail(m, "%s: out of memory", what);
  int n = 0;
  for (int i = 0; i < d->ntensors; i++)
    if (rt_io_takes(&d->tensors[i], state))
      ts[n++] = (rt_st_tensor){d->tensors[i].name, (k_dtype)d->tensors[i].dtype, d->tensors[i].shape, m->tptr[i]};
  char v[5][48], msg[RT_ERR_LEN];
  snprintf(v[0], sizeof v[0], "%d", d->optim), snprintf(v[1], sizeof v[1], "%" PRId64, m->step);
  snprintf(v[2], sizeof v[2], "%" PRId64, m->lr_from), snprintf(v[3], sizeof v[3], "%" PRIu64, m->seed);
  snprintf(v[4], sizeof v[4], "%.9g", (double)m->base_lr);   /* 9 digits: the float reads back exactly */
  rt_st_meta meta[] = {{"format", RT_STATE_FORMAT}, {"model", (char *)d->name}, {"optimizer", v[0]}, {"step", v[1]},
                       {"lr_from", v[2]}, {"seed", v[3]}, {"base_lr", v[4]}};
  int nmeta = state ? (int)(sizeof meta / sizeof *meta) : 0;
  int rc = rt_st_write(path, ts, n, state ? meta : NULL, nmeta, msg, sizeof msg) ? rt_model_fail(m, "%s: %s", what, msg) : 0;
  free(ts);
  return rc;
}

/* Each of the four under the instance's lock, its message cleared on success. save changes
 * nothing; the instance is const to its callers, but its lock and message are not. */
static int rt_model_io(const rt_model *cm, const char *path, bool save, bool state) {
  if (!cm) return 1;
  rt_model *m = (rt_model *)cm;
  pthread_mutex_lock(&m->mu);
  int rc = save ? rt_save_locked(m, path, state) : rt_load_locked(m, path, state);
  if (!rc) m->err[0] = 0;
  pthread_mutex_unlock(&m->mu);
  return rc;
}

int rt_model_load(rt_model *m, const char *path) { return rt_model_io(m, path, false, false); }
int rt_model_load_state(rt_model *m, const char *path) { return rt_model_io(m, path, false, true); }
int rt_model_save(const rt_model *m, const char *path) { return rt_model_io(m, path, true, false); }
int rt_model_save_state(const rt_model *m, const char *path) { return rt_model_io(m, path, true, true); }
