/* rt_model_io.c — weights files: every PARAM and AUX tensor of a model as safetensors, named
 * as in the model. load reads and checks the whole file before it copies anything, so a bad
 * file leaves the weights as they were; save writes through the atomic writer. */
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

static int rt_is_model_weight(const rt_model_desc *d, const char *name) {
  for (int i = 0; i < d->ntensors; i++)
    if (rt_model_is_weight(&d->tensors[i]) && strcmp(d->tensors[i].name, name) == 0) return 1;
  return 0;
}

/* Every weight of the model is in f with its dtype and shape, and f holds nothing else. */
static int rt_check_file(rt_model *m, const rt_st_file *f, const char *path) {
  const rt_model_desc *d = m->d;
  char want[128], got[128];
  for (int i = 0; i < d->ntensors; i++) {
    const rt_tensor_info *t = &d->tensors[i];
    if (!rt_model_is_weight(t)) continue;
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
    if (!rt_is_model_weight(d, f->entries[k].name))
      return rt_model_fail(m, "load %s: unexpected tensor '%s' (not a weight of %s)", path, f->entries[k].name,
                           d->name ? d->name : "the model");
  return 0;
}

static int rt_load_locked(rt_model *m, const char *path) {
  if (!path) return rt_model_fail(m, "load: path is NULL");
  rt_st_file f;
  char msg[RT_ERR_LEN];
  if (rt_st_open(path, &f, msg, sizeof msg)) return rt_model_fail(m, "load: %s", msg);
  int rc = rt_check_file(m, &f, path);
  for (int i = 0; !rc && i < m->d->ntensors; i++) {
    const rt_tensor_info *t = &m->d->tensors[i];
    if (rt_model_is_weight(t)) memcpy(m->tptr[i], rt_st_find(&f, t->name)->data, (size_t)rt_tensor_numel(t) * 4);
  }
  if (!rc) rt_model_weights_changed(m);
  rt_st_close(&f);
  return rc;
}

int rt_model_load(rt_model *m, const char *path) {
  if (!m) return 1;
  pthread_mutex_lock(&m->mu);
  int rc = rt_load_locked(m, path);
  if (!rc) m->err[0] = 0;
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static int rt_save_locked(rt_model *m, const char *path) {
  if (!path) return rt_model_fail(m, "save: path is NULL");
  const rt_model_desc *d = m->d;
  rt_st_tensor *ts = calloc((size_t)d->ntensors + 1, sizeof *ts);
  if (!ts) return rt_model_fail(m, "save: out of memory");
  int n = 0;
  for (int i = 0; i < d->ntensors; i++)
    if (rt_model_is_weight(&d->tensors[i]))
      ts[n++] = (rt_st_tensor){d->tensors[i].name, (k_dtype)d->tensors[i].dtype, d->tensors[i].shape, m->tptr[i]};
  char msg[RT_ERR_LEN];
  int rc = rt_st_write(path, ts, n, NULL, 0, msg, sizeof msg) ? rt_model_fail(m, "save: %s", msg) : 0;
  free(ts);
  return rc;
}

/* save changes no weights; the instance is const to callers, but its lock and message are not. */
int rt_model_save(const rt_model *cm, const char *path) {
  if (!cm) return 1;
  rt_model *m = (rt_model *)cm;
  pthread_mutex_lock(&m->mu);
  int rc = rt_save_locked(m, path);
  if (!rc) m->err[0] = 0;
  pthread_mutex_unlock(&m->mu);
  return rc;
}
