/* api_eval.c — deferred compute. Reading arrays turns the pending subgraph they need into a
 * model (api_walk.c: arrays that hold values become inputs, lazy ones statements, the arrays
 * read its outputs). That text is the cache key: the same structure, shapes and attributes
 * find the model compiled before. A miss goes through the front end, pass_compile and cg_jit as
 * `kiln run` does, and the runtime runs predict; there is no second executor. */
#include "api.h"

#include <stdlib.h>
#include <string.h>

/* The most compiled subgraphs kept; the least recently used goes first. */
enum { API_CACHE_MAX = 64 };

void api_cache_free(kiln_session *s) {
  for (api_cache_entry *e = s->cache, *next; e; e = next) {
    next = e->next;
    rt_model_destroy(e->m);
    cg_build_free(&e->b);
    free(e->key);
    free(e);
  }
  s->cache = NULL;
}

/* The entry for key, moved to the front; NULL on a miss. Past API_CACHE_MAX entries the
 * last one is dropped. */
static api_cache_entry *api_cache_find(kiln_session *s, const char *key) {
  api_cache_entry **p = &s->cache, **last = NULL;
  int n = 0;
  for (; *p; p = &(*p)->next, n++) {
    if (strcmp((*p)->key, key) == 0) {
      api_cache_entry *e = *p;
      *p = e->next, e->next = s->cache, s->cache = e;
      return e;
    }
    last = p;
  }
  if (n >= API_CACHE_MAX && last) {
    api_cache_entry *e = *last;
    *last = NULL;
    e->next = NULL;
    kiln_session tmp = {.cache = e};
    api_cache_free(&tmp);
  }
  return NULL;
}

static api_cache_entry *api_cache_compile(kiln_session *s, const char *key, const char *const *wrt, int nwrt) {
  api_lowered low = {0};
  api_cache_entry *e = calloc(1, sizeof *e);
  if (!e || !(e->key = api_strdup(key))) return free(e), api_fail("out of memory"), NULL;
  int rc = api_stopped(&s->stop) || api_lower_text("<deferred>", key, &low) ? KILN_ERR : KILN_OK;
  /* evaluation has no weights: arrays in aux slots (declared params) are fed as inputs */
  for (int t = 0; !rc && !wrt && t < ir_ntensors(low.g); t++)
    if (ir_tensor_at(low.g, t)->kind == IR_T_PARAM || ir_tensor_at(low.g, t)->kind == IR_T_AUX)
      ir_tensor_at(low.g, t)->kind = IR_T_INPUT;
  if (!rc) rc = wrt ? api_build_grad(low.g, wrt, nwrt, &e->b, &s->stop) : api_build_jit(low.g, 2, &e->b, &s->stop);
  api_lowered_free(&low);
  if (!rc && !(e->m = rt_model_create(e->b.desc, 0))) rc = api_fail("out of memory creating the model");
  if (rc) {
    cg_build_free(&e->b);
    return free(e->key), free(e), NULL;
  }
  e->next = s->cache, s->cache = e;
  return e;
}

int api_cache_lookup(kiln_session *s, const char *key, const char *const *wrt, int nwrt, api_cache_entry **out) {
  *out = api_cache_find(s, key);
  if (*out) return s->hits++, KILN_OK;
  s->misses++;
  *out = api_cache_compile(s, key, wrt, nwrt);
  return *out ? KILN_OK : KILN_ERR;
}

static int api_cache_get(kiln_session *s, const char *key, api_cache_entry **out) {
  return api_cache_lookup(s, key, NULL, 0, out);
}

/* The number after a generated name's letter ("a3" -> 3). */
static int api_name_index(const char *name) { return atoi(name + 1); }

/* Runs predict: inputs by their names' numbers, outputs into fresh storage of the arrays. */
static int api_cache_run(api_cache_entry *e, const api_walk *w) {
  const rt_model_desc *d = e->b.desc;
  const rt_program *p = &d->predict;
  const void **in = malloc(sizeof *in * (size_t)(p->ninputs + 1));
  void **out = calloc((size_t)p->noutputs + 1, sizeof *out);
  int rc = !in || !out ? api_fail("out of memory") : KILN_OK;
  for (int k = 0; !rc && k < p->ninputs; k++) in[k] = w->leaves[api_name_index(d->tensors[p->inputs[k]].name)]->data;
  for (int k = 0; !rc && k < p->noutputs; k++) {
    kiln_array *a = w->nodes[api_name_index(d->tensors[p->outputs[k]].name)];
    if (!(out[k] = api_array_storage(a))) rc = api_fail("out of memory");
  }
  if (!rc && rt_model_predict(e->m, in, out)) rc = api_fail("%s", rt_model_error(e->m));
  for (int k = 0; k < p->noutputs && out; k++) {
    kiln_array *a = w->nodes[api_name_index(d->tensors[p->outputs[k]].name)];
    if (rc) free(out[k]);
    else a->data = out[k];   /* its op and inputs stay: gradients and export walk through it */
  }
  free(in), free(out);
  return rc;
}

int api_eval(kiln_session *s, int n, kiln_array *const *arrays) {
  api_walk w = {0};
  bool pending = false;
  for (int i = 0; i < n; i++) pending |= !arrays[i]->data;
  if (!pending) return KILN_OK;
  if (api_grad_pending(s, false, n, arrays)) return KILN_ERR;
  for (int i = 0; i < n; i++) api_walk_from(&w, arrays[i]);
  api_buf key = {0};
  if (!w.oom) api_walk_text(&w, arrays, n, &key);
  int rc = w.oom || key.oom ? api_fail("out of memory") : KILN_OK;
  api_cache_entry *e = NULL;
  if (!rc && w.nnodes) rc = api_cache_get(s, key.s, &e);
  if (!rc && w.nnodes) rc = api_cache_run(e, &w);
  api_walk_free(&w);
  api_buf_free(&key);
  return rc;
}
