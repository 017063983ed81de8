/* runtime.h — the map of the runtime layer: one section per file, listing what it exports.
 * The runtime is what generated code links against: storage, the dependency engine,
 * resources (temp space, RNG), NDArray, and safetensors / .npy I/O. It sits on kernels/.
 * The compiled model's side has its own header, rt_model.h: the descriptor and the ABI's
 * behaviour, in rt_model.c (create, destroy, set_lr, initialisation), rt_model_io.c (save,
 * load) and rt_model_run.c (program validation, predict, train_step); rt_model_int.h holds
 * what those three share. */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "k_base.h"

#define RT_ERR_LEN 256      /* size of every error-message buffer the runtime fills */

/* ---------------------------------------------------------------------------------------
 * rt_version.c */
const char *rt_version(void);

/* ---------------------------------------------------------------------------------------
 * rt_storage.c — pooled, 64-byte aligned memory per device context.
 * Freed chunks go to a free list keyed by size class (powers of two from 64 bytes) and are
 * handed out again before the system allocator is asked; rt_storage_release_pool gives
 * them back. All functions are thread-safe. Only RT_CPU can allocate today. */
typedef enum { RT_CPU = 0, RT_GPU = 1 } rt_devtype;
typedef struct { rt_devtype type; int id; } rt_ctx;

#define RT_STORAGE_ALIGN 64

typedef struct rt_storage rt_storage;
typedef struct {
  void *ptr;              /* RT_STORAGE_ALIGN-aligned, never NULL for a live chunk */
  size_t size;            /* the size class: >= the bytes asked for */
  rt_storage *owner;
} rt_chunk;

typedef struct {
  size_t bytes_in_use;    /* sum of the size classes of live chunks */
  size_t bytes_peak;      /* highest bytes_in_use since creation or rt_storage_reset_peak */
  size_t bytes_pooled;    /* held in free lists, ready for reuse */
  uint64_t n_alloc;       /* rt_storage_alloc calls that succeeded */
  uint64_t n_free;
  uint64_t n_pool_hit;    /* allocations served from a free list */
  uint64_t n_sys_alloc;   /* allocations that went to the system allocator */
} rt_storage_stats;

rt_storage *rt_storage_create(rt_ctx ctx);          /* NULL for a context without memory */
void rt_storage_destroy(rt_storage *s);             /* frees the pool; live chunks leak */
rt_storage *rt_storage_default(rt_ctx ctx);         /* process-wide manager per context */
int rt_storage_alloc(rt_storage *s, size_t bytes, rt_chunk *out);  /* 0 or -1 */
void rt_storage_free(rt_chunk *c);                  /* back to the pool; *c is cleared */
void rt_storage_release_pool(rt_storage *s);        /* give pooled memory back to the OS */
void rt_storage_get_stats(rt_storage *s, rt_storage_stats *out);
void rt_storage_reset_peak(rt_storage *s);
size_t rt_storage_class_size(size_t bytes);         /* the size class a request rounds to */

/* ---------------------------------------------------------------------------------------
 * rt_engine.c — the dependency engine (MXNet's contract, in C).
 * Guarantee: functions that share a mutated variable run in push order; a reader runs after
 * the writer pushed before it and before the writer pushed after it; readers of a variable
 * may run concurrently. Push/wait calls come from one thread at a time (as in MXNet).
 *
 * Errors: a function returns a status (nonzero = failure) and may write a message into
 * rc->err. The failure is recorded on every variable it mutates. A function whose const or
 * mutate variables carry an error when its turn comes is SKIPPED (never called) and passes
 * the same error on to the variables it mutates — so the outcome does not depend on timing.
 * rt_engine_wait_for_var returns a variable's error and clears it (a later writer can then
 * run); rt_engine_wait_for_all returns the first failure (in push order) since the last
 * wait_for_all — unless a wait_for_var has already reported that same failure — and clears
 * the errors of every variable. rt_engine_complete and the functions' own code may run on
 * any thread; everything else is called from one thread at a time. */
typedef struct rt_engine rt_engine;
typedef struct rt_var rt_var;
typedef struct rt_opr rt_opr;
typedef enum { RT_ENGINE_NAIVE = 0, RT_ENGINE_THREADED = 1 } rt_engine_kind;

typedef struct rt_run_ctx {
  void *stream;           /* the seeds' RunContext: a device stream; NULL on CPU */
  int worker;             /* index of the worker thread running the function (-1: pusher) */
  char *err;              /* a failing function writes its message here */
  size_t err_len;
} rt_run_ctx;

typedef int (*rt_sync_fn)(void *arg, rt_run_ctx *rc);
/* An async function returns at once and calls rt_engine_complete(rc, status) later, from
 * any thread; rc stays valid until then. */
typedef void (*rt_async_fn)(void *arg, rt_run_ctx *rc);

rt_engine *rt_engine_create(rt_engine_kind kind, int nthreads);  /* nthreads <= 0: cores */
rt_engine *rt_engine_create_from_env(void);  /* KILN_ENGINE=naive (default)|threaded, KILN_NUM_THREADS */
rt_engine *rt_engine_default(void);          /* created on first use from the environment */
void rt_engine_shutdown_default(void);
void rt_engine_destroy(rt_engine *e);  /* waits for all work (dropping unreported errors),
                                         joins the workers, frees every var and operator */
rt_engine_kind rt_engine_get_kind(const rt_engine *e);
int rt_engine_num_threads(const rt_engine *e);
int rt_engine_num_vars(rt_engine *e);        /* live variables (for leak checks in tests) */

rt_var *rt_engine_new_var(rt_engine *e);
void rt_engine_push_delete(rt_engine *e, rt_var *v);  /* freed after its pending functions */
void rt_engine_push_sync(rt_engine *e, rt_sync_fn fn, void *arg, rt_var *const *const_vars,
                         int nconst, rt_var *const *mutate_vars, int nmutate);
/* As push_sync, and arg_free(arg) is called once the function has run or been skipped, so
 * a heap argument is never leaked by a skip. fn may be NULL (only arg_free then runs). */
void rt_engine_push_sync_x(rt_engine *e, rt_sync_fn fn, void *arg, void (*arg_free)(void *),
                           rt_var *const *const_vars, int nconst, rt_var *const *mutate_vars,
                           int nmutate);
void rt_engine_push_async(rt_engine *e, rt_async_fn fn, void *arg, rt_var *const *const_vars,
                          int nconst, rt_var *const *mutate_vars, int nmutate);
void rt_engine_complete(rt_run_ctx *rc, int status);
int rt_engine_wait_for_var(rt_engine *e, rt_var *v, char *msg, size_t msg_len);
int rt_engine_wait_for_all(rt_engine *e, char *msg, size_t msg_len);

/* Operators: dependencies declared once, pushed many times. delete_operator may be called
 * while pushes are pending; the operator is freed when the last one finishes. */
rt_opr *rt_engine_new_operator(rt_engine *e, rt_sync_fn fn, void *arg, rt_var *const *const_vars,
                               int nconst, rt_var *const *mutate_vars, int nmutate);
rt_opr *rt_engine_new_operator_async(rt_engine *e, rt_async_fn fn, void *arg,
                                     rt_var *const *const_vars, int nconst,
                                     rt_var *const *mutate_vars, int nmutate);
void rt_engine_push_operator(rt_engine *e, rt_opr *op);
void rt_engine_delete_operator(rt_engine *e, rt_opr *op);

/* ---------------------------------------------------------------------------------------
 * rt_resource.c — resources that kernels request: temp space and random numbers.
 * Temp space is a scratch buffer that only grows; one per thread (rt_temp_thread) or one
 * per request (an rt_temp the caller owns). The RNG is Philox (k_philox.h): a seed and a
 * 64-bit counter; each draw takes a counter value and element i of the draw uses
 * (seed, counter, i), so CPU and GPU produce the same numbers. */
typedef struct {
  rt_storage *storage;
  rt_chunk chunk;
} rt_temp;

void rt_temp_init(rt_temp *t, rt_storage *s);
void *rt_temp_get(rt_temp *t, size_t bytes);        /* NULL only when out of memory */
size_t rt_temp_capacity(const rt_temp *t);
void rt_temp_release(rt_temp *t);
void *rt_temp_thread(size_t bytes);                 /* this thread's temp space */
void rt_temp_thread_release(void);                  /* also runs at thread exit */

typedef struct {
  uint64_t seed;
  _Atomic uint64_t counter;
} rt_rng;

void rt_rng_init(rt_rng *r, uint64_t seed, uint64_t counter);
uint64_t rt_rng_take(rt_rng *r, uint64_t n);        /* first of n fresh counter values */
void rt_rng_uniform(uint64_t seed, uint64_t counter, float *out, size_t n, float lo, float hi);
void rt_rng_normal(uint64_t seed, uint64_t counter, float *out, size_t n, float mean, float sd);
void rt_rng_fill_uniform(rt_rng *r, float *out, size_t n, float lo, float hi);
void rt_rng_fill_normal(rt_rng *r, float *out, size_t n, float mean, float sd);

/* ---------------------------------------------------------------------------------------
 * rt_ndarray.c — NDArray: shape, dtype, context, a refcounted storage chunk and the engine
 * variable that orders every function touching it. Views made by nd_reshape share both.
 * When the last array of a chunk is freed, the memory is released by the engine after the
 * functions pending on it, and the variable is deleted. */
typedef struct nd_chunk nd_chunk;
typedef struct {
  k_shape shape;
  k_dtype dtype;
  rt_ctx ctx;
  nd_chunk *chunk;
  rt_engine *engine;
  void *node;             /* producing graph node of a deferred array; NULL (unused now) */
} nd_array;

size_t nd_dtype_size(k_dtype t);
const char *nd_dtype_name(k_dtype t);               /* "F32", "I32" */
int nd_shape_bytes(const k_shape *s, k_dtype t, size_t *out);  /* 0, or -1 on bad/overflow */
nd_array *nd_create(rt_engine *e, rt_ctx ctx, k_dtype t, const k_shape *shape);
nd_array *nd_reshape(nd_array *a, const k_shape *shape);  /* a view: same chunk and var */
void nd_free(nd_array *a);
size_t nd_nbytes(const nd_array *a);
int64_t nd_numel(const nd_array *a);
rt_var *nd_var(const nd_array *a);
void *nd_data(const nd_array *a);                   /* raw pointer; call nd_wait first */
k_tensor nd_tensor(const nd_array *a);
int nd_wait(nd_array *a, char *msg, size_t msg_len);
int nd_copy(nd_array *dst, nd_array *src, char *msg, size_t msg_len);  /* pushed; async */
int nd_copy_from_host(nd_array *dst, const void *src, size_t bytes, char *msg, size_t msg_len);
int nd_copy_to_host(nd_array *src, void *dst, size_t bytes, char *msg, size_t msg_len);

/* ---------------------------------------------------------------------------------------
 * rt_file.c — whole-file reads and atomic writes (temp file in the same folder, fsync,
 * rename), so a failed write never leaves a half-written file behind. */
typedef struct { const void *data; size_t len; } rt_iovec;

int rt_file_read_all(const char *path, void **data, size_t *len, char *err, size_t err_len);
int rt_file_write_atomic(const char *path, const rt_iovec *parts, int nparts, char *err,
                         size_t err_len);
/* All len bytes to fd (short writes and EINTR retried); 0, or -1 with errno set. */
int rt_file_write_fully(int fd, const void *data, size_t len);
/* Writes a message into err (when err is not NULL) and returns 1: the one fail-with-message
 * helper of every layer from here up (codegen and the executor use it too). */
int rt_errf(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same from a va_list, for the helpers that keep a message of their own (rt_model_fail,
 * the CUDA runtime's rtc_fail). */
int rt_verrf(char *err, size_t err_len, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));

/* ---------------------------------------------------------------------------------------
 * rt_json.c — a strict JSON parser for the safetensors header: objects, arrays, strings,
 * integers, true/false/null; no floats; nesting at most RT_JSON_MAX_DEPTH; duplicate keys
 * are kept (the caller decides). Errors name the byte offset. */
#define RT_JSON_MAX_DEPTH 16
typedef enum { RT_JSON_NULL, RT_JSON_BOOL, RT_JSON_INT, RT_JSON_STR, RT_JSON_ARR,
               RT_JSON_OBJ } rt_json_kind;
typedef struct rt_json {
  rt_json_kind kind;
  int64_t num;            /* RT_JSON_INT value; RT_JSON_BOOL 0/1 */
  char *str;              /* RT_JSON_STR, NUL-terminated UTF-8 (no embedded NUL allowed) */
  int n;                  /* number of items / members */
  struct rt_json *items;  /* array items or object member values */
  char **keys;            /* object member names */
} rt_json;

int rt_json_parse(const char *text, size_t len, rt_json *out, char *err, size_t err_len);
void rt_json_free(rt_json *v);
const rt_json *rt_json_get(const rt_json *obj, const char *key);  /* first member named key */

/* ---------------------------------------------------------------------------------------
 * rt_safetensors.c — safetensors files: 8-byte little-endian header length N, N bytes of
 * JSON header, then the data area. Reading validates everything (see the file's comment);
 * in particular the tensors must tile the data area exactly — no gaps, no overlap, no
 * trailing bytes — as the reference implementation requires. Only F32 and I32. Writing
 * keeps the given order for both the header and the data, pads the header with spaces to a
 * multiple of 8, and is atomic. */
typedef struct {
  char *name;
  k_dtype dtype;
  k_shape shape;
  uint64_t begin, end;    /* data_offsets, relative to the data area */
  const void *data;       /* into the file image; aligned to 4 only if begin is */
} rt_st_entry;

typedef struct {
  char *key, *value;
} rt_st_meta;

typedef struct {
  rt_st_entry *entries;   /* in the order of data_offsets */
  int n;
  rt_st_meta *meta;       /* __metadata__, in file order */
  int nmeta;
  void *image;            /* the whole file */
  size_t image_len;
} rt_st_file;

typedef struct {
  const char *name;
  k_dtype dtype;
  k_shape shape;
  const void *data;
} rt_st_tensor;

#define RT_ST_MAX_HEADER (100u * 1024u * 1024u)

int rt_st_open(const char *path, rt_st_file *f, char *err, size_t err_len);
int rt_st_parse(void *image, size_t len, const char *label, rt_st_file *f, char *err,
                size_t err_len);  /* takes ownership of a malloc'd image, even on failure */
void rt_st_close(rt_st_file *f);
const rt_st_entry *rt_st_find(const rt_st_file *f, const char *name);
const char *rt_st_meta_get(const rt_st_file *f, const char *key);
int rt_st_write(const char *path, const rt_st_tensor *ts, int n, const rt_st_meta *meta,
                int nmeta, char *err, size_t err_len);
int rt_st_serialize(const rt_st_tensor *ts, int n, const rt_st_meta *meta, int nmeta,
                    void **out, size_t *out_len, char *err, size_t err_len);

/* ---------------------------------------------------------------------------------------
 * rt_npy.c — NumPy .npy files, format versions 1.0 and 2.0, little-endian '<f4' / '<i4',
 * C order; '<f8' and '<i8' are read as float32 and int32 (refused past their range), and
 * Fortran order as C order, with `note` saying so. The header dict must hold exactly 'descr',
 * 'fortran_order' and 'shape'; the data must be exactly shape-product * itemsize bytes
 * (trailing bytes are rejected). Writing uses version 1.0 (2.0 when the header needs it),
 * pads to 64 bytes, and is atomic. */
typedef struct {
  k_dtype dtype;
  k_shape shape;
  void *data;             /* RT_STORAGE_ALIGN-aligned, owned; free with rt_npy_free */
  size_t nbytes;
  char note[64];          /* what reading converted ("float64 read as float32", ...), or "" */
} rt_npy;

int rt_npy_read(const char *path, rt_npy *out, char *err, size_t err_len);
/* The header alone, for a reader that maps the data itself (kiln train's arrays): the 4-byte
 * dtype the data reads as, the shape, whether it is stored 8 bytes wide, Fortran order as the
 * header says it, the data's offset in buf and its stored length (checked against len). */
typedef struct {
  k_dtype dtype;
  k_shape shape;
  bool wide, fortran;
  size_t offset, nbytes;
} rt_npy_head;
int rt_npy_header(const void *buf, size_t len, const char *label, rt_npy_head *h, char *err, size_t err_len);
/* Elements [first, first + n) of C-order data laid out as h says, as h->dtype into dst: 8-byte
 * values narrowed under rt_npy_parse's rule (a value beyond the 4-byte type's range refused,
 * with its element named). */
int rt_npy_narrow(const rt_npy_head *h, const void *data, int64_t first, int64_t n, void *dst, const char *label,
                  char *err, size_t err_len);
int rt_npy_parse(const void *buf, size_t len, const char *label, rt_npy *out, char *err,
                 size_t err_len);
void rt_npy_free(rt_npy *a);
int rt_npy_write(const char *path, k_dtype t, const k_shape *shape, const void *data,
                 char *err, size_t err_len);
int rt_npy_serialize(k_dtype t, const k_shape *shape, const void *data, void **out,
                     size_t *out_len, char *err, size_t err_len);

#endif
