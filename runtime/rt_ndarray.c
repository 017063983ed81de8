/* rt_ndarray.c — NDArray: a shaped, typed view of a refcounted storage chunk whose engine
 * variable orders every function that reads or writes it. Freeing the last array of a
 * chunk hands the memory back through the engine, after the work still pending on it. */
#include "runtime.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct nd_chunk {
  rt_chunk mem;
  size_t nbytes;            /* logical size; mem.size is the rounded size class */
  rt_var *var;
  _Atomic int refs;
};

size_t nd_dtype_size(k_dtype t) { return (t == K_F32 || t == K_I32) ? 4 : 0; }

const char *nd_dtype_name(k_dtype t) {
  return t == K_F32 ? "F32" : t == K_I32 ? "I32" : "?";
}

int nd_shape_bytes(const k_shape *s, k_dtype t, size_t *out) {
  size_t n = nd_dtype_size(t);
  if (n == 0 || s->rank < 0 || s->rank > K_MAX_RANK) return -1;
  for (int i = 0; i < s->rank; i++) {
    if (s->d[i] < 0 || (uint64_t)s->d[i] > SIZE_MAX) return -1;
    if (__builtin_mul_overflow(n, (size_t)s->d[i], &n)) return -1;
  }
  if (n > (size_t)INT64_MAX) return -1;
  *out = n;
  return 0;
}

nd_array *nd_create(rt_engine *e, rt_ctx ctx, k_dtype t, const k_shape *shape) {
  size_t bytes;
  rt_storage *s = rt_storage_default(ctx);
  if (!s || nd_shape_bytes(shape, t, &bytes) != 0) return NULL;
  nd_array *a = calloc(1, sizeof *a);
  nd_chunk *c = calloc(1, sizeof *c);
  if (!a || !c || rt_storage_alloc(s, bytes, &c->mem) != 0) {
    free(a);
    free(c);
    return NULL;
  }
  c->nbytes = bytes;
  c->var = rt_engine_new_var(e);
  atomic_init(&c->refs, 1);
  *a = (nd_array){*shape, t, ctx, c, e, NULL};
  return a;
}

nd_array *nd_reshape(nd_array *a, const k_shape *shape) {
  size_t bytes;
  if (nd_shape_bytes(shape, a->dtype, &bytes) != 0 || bytes != a->chunk->nbytes) return NULL;
  nd_array *v = malloc(sizeof *v);
  if (!v) return NULL;
  *v = *a;
  v->shape = *shape;
  atomic_fetch_add(&a->chunk->refs, 1);
  return v;
}

static void chunk_release(void *arg) {
  nd_chunk *c = arg;
  rt_storage_free(&c->mem);
  free(c);
}

/* The memory goes back as the argument destructor of a function that writes the chunk's
 * variable: it runs after every function pushed before it, even if one of them failed. */
void nd_free(nd_array *a) {
  if (!a) return;
  nd_chunk *c = a->chunk;
  if (atomic_fetch_sub(&c->refs, 1) == 1) {
    rt_var *v = c->var;
    rt_engine_push_sync_x(a->engine, NULL, c, chunk_release, NULL, 0, &v, 1);
    rt_engine_push_delete(a->engine, v);
  }
  free(a);
}

size_t nd_nbytes(const nd_array *a) { return a->chunk->nbytes; }
int64_t nd_numel(const nd_array *a) { return k_shape_numel(&a->shape); }
rt_var *nd_var(const nd_array *a) { return a->chunk->var; }
void *nd_data(const nd_array *a) { return a->chunk->mem.ptr; }

k_tensor nd_tensor(const nd_array *a) {
  return (k_tensor){a->chunk->mem.ptr, a->shape, a->dtype};
}

int nd_wait(nd_array *a, char *msg, size_t msg_len) {
  return rt_engine_wait_for_var(a->engine, a->chunk->var, msg, msg_len);
}

typedef struct { void *dst; const void *src; size_t n; } copy_arg;

static int copy_fn(void *arg, rt_run_ctx *rc) {
  copy_arg *ca = arg;
  memmove(ca->dst, ca->src, ca->n);  /* views of one chunk may overlap */
  return 0;
}

int nd_copy(nd_array *dst, nd_array *src, char *msg, size_t msg_len) {
  if (dst->dtype != src->dtype || nd_nbytes(dst) != nd_nbytes(src)) {
    rt_errf(msg, msg_len, "nd_copy: %s[%zu bytes] into %s[%zu bytes]", nd_dtype_name(src->dtype),
            nd_nbytes(src), nd_dtype_name(dst->dtype), nd_nbytes(dst));
    return -1;
  }
  if (dst->chunk == src->chunk) return 0;
  copy_arg *ca = malloc(sizeof *ca);
  if (!ca) {
    rt_errf(msg, msg_len, "nd_copy: out of memory");
    return -1;
  }
  *ca = (copy_arg){nd_data(dst), nd_data(src), nd_nbytes(dst)};
  rt_var *cv = nd_var(src), *mv = nd_var(dst);
  rt_engine_push_sync_x(dst->engine, copy_fn, ca, free, &cv, 1, &mv, 1);
  return 0;
}

/* Both host copies wait for the array's pending work first; an error that work left on the
 * array is returned (and cleared) instead of copying. */
int nd_copy_from_host(nd_array *dst, const void *src, size_t bytes, char *msg, size_t msg_len) {
  if (bytes != nd_nbytes(dst)) {
    rt_errf(msg, msg_len, "nd_copy_from_host: %zu bytes given, array holds %zu", bytes,
            nd_nbytes(dst));
    return -1;
  }
  int st = nd_wait(dst, msg, msg_len);
  if (st == 0) memcpy(nd_data(dst), src, bytes);
  return st;
}

int nd_copy_to_host(nd_array *src, void *dst, size_t bytes, char *msg, size_t msg_len) {
  if (bytes != nd_nbytes(src)) {
    rt_errf(msg, msg_len, "nd_copy_to_host: %zu bytes asked, array holds %zu", bytes,
            nd_nbytes(src));
    return -1;
  }
  int st = nd_wait(src, msg, msg_len);
  if (st == 0) memcpy(dst, nd_data(src), bytes);
  return st;
}
