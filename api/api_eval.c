/* api_eval.c — deferred compute. Reading arrays turns the pending subgraph they need into a
 * model: arrays that hold values become inputs (a0, a1...), lazy ones statements (t0 =
 * op(...)) in dependency order, the arrays read its outputs. That text, whose names depend
 * only on the walk, is the cache key: the same structure, shapes and attributes find the
 * model compiled before. A miss goes through the front end, pass_compile and cg_jit as
 * `kiln run` does, and the runtime runs predict; there is no second executor. */
#include "api.h"

#include <stdlib.h>
#include <string.h>

/* The most compiled subgraphs kept; the least recently used goes first. */
enum { API_CACHE_MAX = 64 };

struct api_cache_entry {
  char *key;
  api_build b;
  rt_model *m;
  api_cache_entry *next;
};

typedef struct {
  kiln_array **leaves, **nodes;   /* inputs, and lazy arrays in dependency order */
  int nleaves, nnodes, cap;
  bool oom;
} api_walk;

static void api_walk_push(api_walk *w, kiln_array ***list, int *n, kiln_array *a) {
  if (*n == w->cap && !w->oom) {
    int cap = w->cap ? w->cap * 2 : 16;
    kiln_array **l = realloc(w->leaves, sizeof *l * (size_t)cap), **m = l ? realloc(w->nodes, sizeof *m * (size_t)cap) : NULL;
    if (l) w->leaves = l;
    if (m) w->nodes = m, w->cap = cap;
    else w->oom = true;
  }
  if (w->oom) return;
  if (list == &w->leaves) w->leaves[(*n)++] = a;
  else w->nodes[(*n)++] = a;
}

/* Post-order over lazy arrays, iteratively (a long chain must not overflow the stack):
 * mark = 0 entered, then the leaf or node number once done. */
static void api_walk_from(api_walk *w, kiln_array *root) {
  kiln_array **stack = NULL;
  int *next = NULL, top = 0, cap = 0;
  if (root->mark >= 0) return;
  for (kiln_array *a = root;;) {
    if (a->data) { a->mark = w->nleaves; api_walk_push(w, &w->leaves, &w->nleaves, a); }
    else {
      if (top == cap) {
        cap = cap ? cap * 2 : 32;
        kiln_array **s = realloc(stack, sizeof *s * (size_t)cap);
        int *nx = s ? realloc(next, sizeof *nx * (size_t)cap) : NULL;
        if (s) stack = s;
        if (!nx) { w->oom = true; break; }
        next = nx;
      }
      stack[top] = a, next[top++] = 0, a->mark = 0;
    }
    a = NULL;
    while (top && !a) {
      kiln_array *t = stack[top - 1];
      while (next[top - 1] < t->nin && t->in[next[top - 1]]->mark >= 0) next[top - 1]++;
      if (next[top - 1] < t->nin) { a = t->in[next[top - 1]++]; break; }
      t->mark = w->nnodes;
      api_walk_push(w, &w->nodes, &w->nnodes, t);
      top--;
    }
    if (!a) break;
  }
  free(stack), free(next);
}

/* Lazy arrays of the walk are marked with their node number and leaves with theirs; the
 * text tells them apart by the input list, so keep a flag per kind while writing. */
static void api_walk_text(const api_walk *w, kiln_array *const *want, int n, api_buf *b) {
  api_buf_printf(b, "model deferred {\n");
  for (int i = 0; i < w->nleaves; i++) {
    api_buf_printf(b, "  input a%d : ", i);
    api_type_text(b, w->leaves[i]->dtype, &w->leaves[i]->shape);
    api_buf_printf(b, "\n");
  }
  for (int i = 0; i < w->nnodes; i++) {
    const kiln_array *a = w->nodes[i];
    api_buf_printf(b, "  t%d = %s(", i, a->op);
    for (int j = 0; j < a->nin; j++)
      api_buf_printf(b, "%s%c%d", j ? ", " : "", a->in[j]->data ? 'a' : 't', a->in[j]->mark);
    api_buf_printf(b, "%s%s)\n", a->nin && *a->attrs ? ", " : "", a->attrs);
  }
  api_buf_printf(b, "  output ");
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!want[i]->data && want[i]->mark >= 0) api_buf_printf(b, "%st%d", k++ ? ", " : "", want[i]->mark), want[i]->mark = -2 - want[i]->mark;
  for (int i = 0; i < n; i++)
    if (want[i]->mark <= -2) want[i]->mark = -2 - want[i]->mark;   /* each output once */
  api_buf_printf(b, "\n}\n");
}

void api_cache_free(kiln_session *s) {
  for (api_cache_entry *e = s->cache, *next; e; e = next) {
    next = e->next;
    rt_model_destroy(e->m);
    api_build_free(&e->b);
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

static api_cache_entry *api_cache_compile(kiln_session *s, const char *key) {
  api_lowered low = {0};
  api_cache_entry *e = calloc(1, sizeof *e);
  if (!e || !(e->key = api_strdup(key))) return free(e), api_fail("out of memory"), NULL;
  int rc = api_lower_text("<deferred>", key, &low) || api_build_jit(low.g, 2, &e->b);
  api_lowered_free(&low);
  if (!rc && !(e->m = rt_model_create(e->b.desc, 0))) rc = api_fail("out of memory creating the model");
  if (rc) {
    api_build_free(&e->b);
    return free(e->key), free(e), NULL;
  }
  e->next = s->cache, s->cache = e;
  return e;
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
    else a->data = out[k], api_array_forget_inputs(a);
  }
  free(in), free(out);
  return rc;
}

int api_eval(kiln_session *s, int n, kiln_array *const *arrays) {
  api_walk w = {0};
  bool pending = false;
  for (int i = 0; i < n; i++) pending |= !arrays[i]->data;
  if (!pending) return KILN_OK;
  for (int i = 0; i < n; i++) api_walk_from(&w, arrays[i]);
  api_buf key = {0};
  if (!w.oom) api_walk_text(&w, arrays, n, &key);
  for (int i = 0; i < w.nleaves; i++) w.leaves[i]->mark = -1;
  int rc = w.oom || key.oom ? api_fail("out of memory") : KILN_OK;
  api_cache_entry *e = rc ? NULL : api_cache_find(s, key.s);
  if (!rc) e ? s->hits++ : s->misses++;
  if (!rc && !e && !(e = api_cache_compile(s, key.s))) rc = KILN_ERR;
  if (!rc) rc = api_cache_run(e, &w);
  for (int i = 0; i < w.nnodes; i++) w.nodes[i]->mark = -1;
  api_buf_free(&key);
  free(w.leaves), free(w.nodes);
  return rc;
}

int api_pending_text(kiln_session *s, kiln_array *a, api_buf *out) {
  (void)s;
  api_walk w = {0};
  if (a->data) return api_buf_printf(out, "# computed: nothing pending\n"), KILN_OK;
  api_walk_from(&w, a);
  if (!w.oom) api_walk_text(&w, &a, 1, out);
  for (int i = 0; i < w.nleaves; i++) w.leaves[i]->mark = -1;
  for (int i = 0; i < w.nnodes; i++) w.nodes[i]->mark = -1;
  free(w.leaves), free(w.nodes);
  return w.oom || out->oom ? api_fail("out of memory") : KILN_OK;
}
