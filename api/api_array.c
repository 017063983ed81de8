/* api_array.c — imperative arrays. An array either holds its value (host data, a .npy file,
 * an initializer, or a computed result) or is lazy: an op, its attributes and the arrays it
 * reads, with shape and dtype inferred at once by the front end on a one-statement model.
 * Lazy arrays hold references on their inputs, so freeing a handle keeps what others still
 * need; api_eval.c computes them. Every call locks the session. */
#include "api.h"

#include <stdlib.h>
#include <string.h>

KILN_API int kiln_session_new(kiln_session **out) {
  if (!out) return api_fail("kiln_session_new: out is NULL");
  *out = calloc(1, sizeof **out);
  if (!*out) return api_fail("out of memory");
  pthread_mutex_init(&(*out)->mu, NULL);
  api_stop_init(&(*out)->stop);
  return api_ok();
}

static void api_array_release(kiln_array *a) {
  free(a->data), free(a->attrs), free(a->in);
  a->data = NULL, a->attrs = NULL, a->in = NULL, a->nin = 0;
}

KILN_API void kiln_session_free(kiln_session *s) {
  if (!s) return;
  for (kiln_array *a = s->arrays, *next; a; a = next) {
    next = a->next;
    if (a->grad && --a->grad->refs == 0) free(a->grad->wrt), free(a->grad->outs), free(a->grad);
    api_array_release(a);
    free(a);
  }
  api_cache_free(s);
  api_stop_destroy(&s->stop);   /* after the LLVM work interrupted compiles left running */
  pthread_mutex_destroy(&s->mu);
  free(s);
}

KILN_API void kiln_session_interrupt(kiln_session *s, int on) {
  if (s) atomic_store(&s->stop.flag, on ? 1 : 0);   /* no lock: a signal handler may call it */
}

KILN_API int kiln_session_seed(kiln_session *s, uint64_t seed) {
  if (!s) return api_fail("kiln_session_seed: session is NULL");
  pthread_mutex_lock(&s->mu);
  s->seed = seed, s->grad_steps = 0;
  pthread_mutex_unlock(&s->mu);
  return api_ok();
}

KILN_API int kiln_session_cache_stats(kiln_session *s, int64_t *hits, int64_t *misses) {
  if (!s || !hits || !misses) return api_fail("kiln_session_cache_stats: session, hits or misses is NULL");
  pthread_mutex_lock(&s->mu);
  *hits = s->hits, *misses = s->misses;
  pthread_mutex_unlock(&s->mu);
  return api_ok();
}

/* Drops its inputs' references: once computed, an array no longer needs them. */
void api_array_forget_inputs(kiln_array *a) {
  for (int i = 0; i < a->nin; i++) api_array_unref(a->in[i]);
  free(a->attrs), free(a->in);
  a->attrs = NULL, a->in = NULL, a->nin = 0, a->op = NULL;
}

void api_array_unref(kiln_array *a) {
  if (--a->refs > 0) return;
  kiln_session *s = a->s;
  if (a->grad) api_grad_release(a);
  if (a->prev) a->prev->next = a->next;
  else s->arrays = a->next;
  if (a->next) a->next->prev = a->prev;
  api_array_forget_inputs(a);
  api_array_release(a);
  free(a);
}

kiln_array *api_array_new(kiln_session *s, k_dtype t, const k_shape *shape) {
  kiln_array *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  *a = (kiln_array){.s = s, .dtype = t, .shape = *shape, .refs = 1, .mark = -1, .next = s->arrays};
  if (s->arrays) s->arrays->prev = a;
  s->arrays = a;
  return a;
}

size_t api_array_bytes(const kiln_array *a) { return (size_t)k_shape_numel(&a->shape) * 4; }

/* Storage for the value: 64-byte aligned as the kernels like it. */
void *api_array_storage(const kiln_array *a) {
  size_t n = (api_array_bytes(a) + 63) & ~(size_t)63;
  return aligned_alloc(64, n ? n : 64);
}

/* A new array holding a value, filled by fill(ctx) under the session lock. */
static int api_array_with(kiln_session *s, kiln_dtype t, int rank, const int64_t *dims, const char *fn,
                          void (*fill)(kiln_array *a, const void *ctx), const void *ctx, kiln_array **out) {
  k_shape shape;
  if (!out) return api_fail("%s: out is NULL", fn);
  *out = NULL;
  if (!s) return api_fail("%s: session is NULL", fn);
  if (t != KILN_F32 && t != KILN_I32) return api_fail("%s: dtype %d is not KILN_F32 or KILN_I32", fn, (int)t);
  if (api_check_shape(fn, rank, dims, &shape)) return KILN_ERR;
  pthread_mutex_lock(&s->mu);
  kiln_array *a = api_array_new(s, (k_dtype)t, &shape);
  if (a && !(a->data = api_array_storage(a))) api_array_unref(a), a = NULL;
  if (a) fill(a, ctx);
  pthread_mutex_unlock(&s->mu);
  if (!a) return api_fail("%s: out of memory", fn);
  *out = a;
  return api_ok();
}

static void api_fill_copy(kiln_array *a, const void *src) { memcpy(a->data, src, api_array_bytes(a)); }
static void api_fill_zero(kiln_array *a, const void *ctx) { memset(a->data, 0, api_array_bytes(a)); }
static void api_fill_one(kiln_array *a, const void *ctx) {
  int64_t n = k_shape_numel(&a->shape);
  for (int64_t i = 0; i < n; i++) {
    if (a->dtype == K_I32) ((int32_t *)a->data)[i] = 1;
    else ((float *)a->data)[i] = 1.0f;
  }
}

typedef struct { int kind; float a, b; uint64_t seed; } api_rand;
/* The draws of a model's tensor 0 with this initializer (rt_model.c's RT_CTR_INIT). */
static void api_fill_rand(kiln_array *a, const void *ctx) {
  const api_rand *r = ctx;
  k_init_fill(a->data, &a->shape, r->kind, r->a, r->b, r->seed, RT_CTR_INIT(0));
}

KILN_API int kiln_array_from_data(kiln_session *s, kiln_dtype dtype, int rank, const int64_t *dims,
                                  const void *data, kiln_array **out) {
  if (!data) return api_fail("kiln_array_from_data: data is NULL");
  return api_array_with(s, dtype, rank, dims, "kiln_array_from_data", api_fill_copy, data, out);
}

KILN_API int kiln_array_zeros(kiln_session *s, kiln_dtype dtype, int rank, const int64_t *dims, kiln_array **out) {
  return api_array_with(s, dtype, rank, dims, "kiln_array_zeros", api_fill_zero, NULL, out);
}

KILN_API int kiln_array_ones(kiln_session *s, kiln_dtype dtype, int rank, const int64_t *dims, kiln_array **out) {
  return api_array_with(s, dtype, rank, dims, "kiln_array_ones", api_fill_one, NULL, out);
}

KILN_API int kiln_array_uniform(kiln_session *s, int rank, const int64_t *dims, float low, float high,
                                uint64_t seed, kiln_array **out) {
  if (!(low <= high)) return api_fail("kiln_array_uniform: low %g > high %g", (double)low, (double)high);
  api_rand r = {K_INIT_UNIFORM, low, high, seed};
  return api_array_with(s, KILN_F32, rank, dims, "kiln_array_uniform", api_fill_rand, &r, out);
}

KILN_API int kiln_array_normal(kiln_session *s, int rank, const int64_t *dims, float mean, float std,
                               uint64_t seed, kiln_array **out) {
  if (!(std >= 0)) return api_fail("kiln_array_normal: std %g is negative", (double)std);
  api_rand r = {K_INIT_NORMAL, mean, std, seed};
  return api_array_with(s, KILN_F32, rank, dims, "kiln_array_normal", api_fill_rand, &r, out);
}

int api_array_constant(kiln_session *s, float value, kiln_array **out) {
  int rc = kiln_array_from_data(s, KILN_F32, 0, NULL, &value, out);
  if (!rc) (*out)->constant = true;
  return rc;
}

KILN_API int kiln_array_load_npy(kiln_session *s, const char *path, kiln_array **out) {
  char err[1024];
  rt_npy npy;
  if (!path) return api_fail("kiln_array_load_npy: path is NULL");
  if (!out) return api_fail("kiln_array_load_npy: out is NULL");
  if (rt_npy_read(path, &npy, err, sizeof err)) return *out = NULL, api_fail("%s", err);
  int64_t dims[K_MAX_RANK];
  for (int i = 0; i < npy.shape.rank; i++) dims[i] = npy.shape.d[i];
  int rc = kiln_array_from_data(s, (kiln_dtype)npy.dtype, npy.shape.rank, dims, npy.data, out);
  rt_npy_free(&npy);
  return rc;
}

KILN_API void kiln_array_free(kiln_array *a) {
  if (!a) return;
  kiln_session *s = a->s;
  pthread_mutex_lock(&s->mu);
  if (!a->user_freed) a->user_freed = true, api_array_unref(a);
  pthread_mutex_unlock(&s->mu);
}

KILN_API int kiln_array_shape(const kiln_array *a, kiln_dtype *dtype, int *rank, int64_t *dims) {
  if (!a || !rank || !dims) return api_fail("kiln_array_shape: array, rank or dims is NULL");
  if (dtype) *dtype = (kiln_dtype)a->dtype;
  *rank = a->shape.rank;
  for (int i = 0; i < a->shape.rank; i++) dims[i] = a->shape.d[i];
  return api_ok();
}

KILN_API int kiln_array_is_lazy(const kiln_array *a, int *lazy) {
  if (!a || !lazy) return api_fail("kiln_array_is_lazy: array or lazy is NULL");
  pthread_mutex_lock(&a->s->mu);
  *lazy = a->data == NULL;
  pthread_mutex_unlock(&a->s->mu);
  return api_ok();
}

/* ---- op calls: the shape of `r = op(a0, a1..., attrs)` from the front end ---- */

/* Whether input slot i of op is an aux state (batch_norm's moving statistics): an array
 * passed there is declared a param, as the language requires, and fed as an input when the
 * graph runs (api_eval.c), where predict only reads it. */
bool api_is_aux_slot(const char *op, int i) {
  const ir_opdef *d = &ir_ops[ir_op_lookup(op)];
  return !d->variadic && i >= ir_op_nargs(d) && i < ir_op_nargs(d) + ir_op_naux(d);
}

static int api_op_infer(const char *op, int nin, kiln_array *const *in, const char *attrs, k_dtype *t, k_shape *shape) {
  api_buf src = {0};
  api_buf_printf(&src, "model op {\n");
  for (int i = 0; i < nin; i++) {
    api_buf_printf(&src, "  %s a%d : ", api_is_aux_slot(op, i) ? "param" : "input", i);
    api_type_text(&src, in[i]->dtype, &in[i]->shape);
    api_buf_printf(&src, "\n");
  }
  api_buf_printf(&src, "  r = %s(", op);
  for (int i = 0; i < nin; i++) api_buf_printf(&src, "%sa%d", i ? ", " : "", i);
  api_buf_printf(&src, "%s%s)\n  output r\n}\n", nin && *attrs ? ", " : "", attrs);
  api_lowered low = {0};
  int rc = src.oom ? api_fail("out of memory") : api_lower_text("<array>", src.s, &low);
  api_buf_free(&src);
  for (int i = 0; !rc && i < ir_ntensors(low.g); i++) {
    const ir_tensor *x = ir_tensor_at(low.g, i);
    if ((x->kind == IR_T_PARAM || x->kind == IR_T_AUX) && strchr(x->name, '.'))
      rc = api_fail("%s: its input '%s' must be given as an array (arrays create no parameters)", op, strchr(x->name, '.') + 1);
  }
  if (!rc) {
    const ir_tensor *r = ir_tensor_at(low.g, ir_graph_find_tensor(low.g, "r"));
    *t = r->dtype, *shape = r->shape;
  }
  api_lowered_free(&low);
  return rc;
}

static int api_op_check(kiln_session *s, const char *op, int nin, kiln_array *const *inputs) {
  if (!s) return api_fail("kiln_array_op: session is NULL");
  if (!op || ir_op_lookup(op) < 0) {
    const char *sug = ir_op_suggest(op);
    return api_fail("kiln_array_op: '%s' is not an op%s%s%s", op ? op : "(null)", sug ? "; did you mean '" : "", sug ? sug : "",
                    sug ? "'?" : "");
  }
  if (nin < 0 || nin > 64 || (nin && !inputs)) return api_fail("kiln_array_op: %s: %d inputs (0 to 64, inputs not NULL)", op, nin);
  for (int i = 0; i < nin; i++) {
    if (!inputs[i]) return api_fail("kiln_array_op: %s: input %d is NULL", op, i);
    if (inputs[i]->s != s) return api_fail("kiln_array_op: %s: input %d belongs to another session", op, i);
    if (inputs[i]->user_freed) return api_fail("kiln_array_op: %s: input %d was freed", op, i);
  }
  return KILN_OK;
}

static kiln_array *api_array_lazy(kiln_session *s, const char *op, int nin, kiln_array *const *inputs,
                                  const char *attrs, k_dtype t, const k_shape *shape) {
  kiln_array *a = api_array_new(s, t, shape);
  if (!a) return NULL;
  a->op = ir_ops[ir_op_lookup(op)].name;
  a->attrs = api_strdup(attrs);
  a->in = malloc(sizeof *a->in * (size_t)(nin ? nin : 1));
  if (!a->attrs || !a->in) return api_array_unref(a), NULL;
  for (int i = 0; i < nin; i++) a->in[i] = inputs[i], inputs[i]->refs++;
  a->nin = nin;
  return a;
}

KILN_API int kiln_array_op(kiln_session *s, const char *op, int nin, kiln_array *const *inputs,
                           const kiln_attrs *attrs, kiln_array **out) {
  if (!out) return api_fail("kiln_array_op: out is NULL");
  *out = NULL;
  if (api_op_check(s, op, nin, inputs)) return KILN_ERR;
  const char *at = attrs && attrs->n ? attrs->text.s : "";
  k_dtype t;
  k_shape shape;
  pthread_mutex_lock(&s->mu);
  int rc = api_op_infer(op, nin, inputs, at, &t, &shape);
  kiln_array *a = rc ? NULL : api_array_lazy(s, op, nin, inputs, at, t, &shape);
  pthread_mutex_unlock(&s->mu);
  if (rc) return KILN_ERR;
  if (!a) return api_fail("kiln_array_op: out of memory");
  *out = a;
  return api_ok();
}

/* ---- reading ---- */

KILN_API int kiln_array_eval(kiln_session *s, int n, kiln_array *const *arrays) {
  if (!s || n < 0 || (n && !arrays)) return api_fail("kiln_array_eval: session or arrays is NULL");
  for (int i = 0; i < n; i++)
    if (!arrays[i] || arrays[i]->s != s) return api_fail("kiln_array_eval: array %d is NULL or of another session", i);
  pthread_mutex_lock(&s->mu);
  int rc = api_eval(s, n, arrays);
  pthread_mutex_unlock(&s->mu);
  return rc ? KILN_ERR : api_ok();
}

KILN_API int kiln_array_read(kiln_array *a, void *dst, size_t nbytes) {
  if (!a || !dst) return api_fail("kiln_array_read: array or dst is NULL");
  if (nbytes != api_array_bytes(a))
    return api_fail("kiln_array_read: the array holds %zu bytes, not %zu", api_array_bytes(a), nbytes);
  if (kiln_array_eval(a->s, 1, &a)) return KILN_ERR;
  pthread_mutex_lock(&a->s->mu);
  memcpy(dst, a->data, nbytes);
  pthread_mutex_unlock(&a->s->mu);
  return api_ok();
}

KILN_API int kiln_array_save_npy(kiln_array *a, const char *path) {
  char err[1024];
  if (!a || !path) return api_fail("kiln_array_save_npy: array or path is NULL");
  if (kiln_array_eval(a->s, 1, &a)) return KILN_ERR;
  pthread_mutex_lock(&a->s->mu);
  int rc = rt_npy_write(path, a->dtype, &a->shape, a->data, err, sizeof err);
  pthread_mutex_unlock(&a->s->mu);
  return rc ? api_fail("%s", err) : api_ok();
}
