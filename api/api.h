/* api.h — the layer behind include/kiln.h (prefix api_ inside, kiln_ at the ABI), over the
 * front end, the passes and the code generator:
 *   api_error.c  the thread-local last error, captured diagnostics, strings, the text buffer
 *   api_attrs.c  attribute lists: typed setters and language text, checked by the parser
 *   api_graph.c  graphs in code: the model kept as .kiln text, lowered by the front end, so
 *                learnable inputs are created and named by its rules (fe_call.c) and the
 *                printed text parses back to the same graph
 *   api_model.c  kiln_graph_jit / kiln_graph_compile and the model's entry points
 *   api_array.c  imperative arrays: data, initializers, lazy op results
 *   api_walk.c   the recorded graph behind arrays as .kiln text (names from the walk alone)
 *   api_eval.c   deferred compute: the pending subgraph of the arrays read, as a model,
 *                compiled once per structure (the cache) by pass_compile + cg_jit, and run
 *   api_grad.c   kiln_grad: lazy gradients by the passes train_step uses (backward, prune)
 *   api_export.c the recorded graph of chosen arrays as a .kiln model and safetensors
 *   api_record.c a lowered graph replayed on arrays (kiln_graph_predict_arrays, the REPL) */
#ifndef KILN_API_INT_H
#define KILN_API_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "kiln.h"
#include "cg.h"
#include "fe.h"

/* ---- api_error.c ---- */
/* Sets this thread's last error; returns KILN_ERR so callers can `return api_fail(...)`. */
int api_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int api_ok(void);                              /* clears the last error; returns KILN_OK */
char *api_strdup(const char *s);               /* NULL without memory */
/* A growable NUL-terminated string. */
typedef struct { char *s; size_t len, cap; bool oom; } api_buf;
void api_buf_printf(api_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void api_buf_truncate(api_buf *b, size_t len);
void api_buf_free(api_buf *b);
/* A name as the language writes one ([A-Za-z_][A-Za-z0-9_]*, dots allowed when dotted), and
 * not one of its keywords (fe_is_keyword: `param`, `const`, ...), which would not parse. */
bool api_is_name(const char *s, bool dotted);
/* The checks every shape argument gets: rank 0..KILN_MAX_RANK, each dim 1..2^40. */
int api_check_shape(const char *what, int rank, const int64_t *dims, k_shape *out);
/* Diagnostics (front end, passes) captured in memory, to become the last error. */
typedef struct { FILE *mem; char *msg; size_t len; ir_diag d; } api_diags;
int api_diags_open(api_diags *x);
/* Closes the stream; with fail set, its text (or `fallback`) becomes the last error. */
int api_diags_close(api_diags *x, bool fail, const char *fallback);

/* ---- api_attrs.c ---- */
struct kiln_attrs { api_buf text; int n; };    /* "k1=v1, k2=v2" as the language writes them */

/* ---- api_graph.c ---- */
/* A lowered model with the file its locations point into. */
typedef struct { fe_file *file; ir_graph *g; } api_lowered;
void api_lowered_free(api_lowered *l);
/* Parses and lowers the first model of `text` (named `name` in diagnostics); on errors
 * sets the last error to the diagnostics, with caret lines, and returns KILN_ERR. */
int api_lower_text(const char *name, const char *text, api_lowered *out);

/* The graph's lowered model (kept until its text changes), and its lock: api_model.c takes
 * both around a compile. */
int api_graph_get(kiln_graph *g, const ir_graph **out);
void api_graph_lock(kiln_graph *g, bool lock);

/* ---- api_model.c ---- */
/* A session's interrupt (kiln_session_interrupt): the request, and the LLVM work that
 * interrupted compiles left running, which api_stop_destroy (kiln_session_free) waits for. */
typedef struct {
  atomic_int flag;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int background;                  /* LLVM jobs abandoned and still running */
} api_stop;
void api_stop_init(api_stop *st);
void api_stop_destroy(api_stop *st);
/* Whether an interrupt was requested: then it is taken (cleared) and the last error says
 * "interrupted". Checked before the front end and before and after the passes; LLVM's
 * optimisation and JIT, which cannot be stopped midway, run on a thread of their own while
 * the caller polls the request, and an interrupted one is left to finish and be thrown away
 * in the background: the call returns at once. stop NULL: never interrupted. */
bool api_stopped(api_stop *stop);
/* cg_build (codegen/cpu/cg_build.c) with errors as the last error: the passes' diagnostics,
 * then the code generator's message. */
int api_build_jit(const ir_graph *lowered, int opt_level, cg_build *b, api_stop *stop);
/* After the module is built: the .so at so_path and NAME.h beside it, both or neither (what
 * kiln_graph_compile and kiln_source_compile write). */
int api_emit_so(cg_build *b, const char *so_path);
/* kiln_graph_load_dims with ranges: lows[i] > 0 bounds dim i to lows[i]..values[i] (lows
 * NULL: every dim fixed), as -D batch=1..64 does (the REPL's :model). */
int api_graph_load_bounds(const char *path, const char *model, int ndims, const char *const *dim_names, const int64_t *values,
                          const int64_t *lows, kiln_graph **out);
/* g's model lowered again from the text it was lowered from, with these dims fixed (a bounded
 * model at one set of extents: the REPL records predict at its arrays' extents). */
int api_graph_relower(kiln_graph *g, int ndims, const char *const *dim_names, const int64_t *values, kiln_graph **out);
/* A bounded model's extents from its entry point's input shapes (train: train_step's,
 * else predict's), as kiln run reads them from its .npy files; 0 or KILN_ERR with the message. */
int api_model_extents(kiln_model *m, int train, const k_shape *shapes, int64_t *extents);
/* From compiled graphs b already holds: descriptor, fused loops, JIT; interruptible. */
int api_build_finish(cg_build *b, int opt_level, api_stop *stop);
/* kiln_graph_jit, interrupted through stop (NULL: never) as a session's compiles are:
 * `kiln repl`'s :model compiles under its session's request, so Ctrl-C stops it. */
int api_graph_jit(kiln_graph *g, uint64_t seed, api_stop *stop, kiln_model **out);

/* ---- api_array.c / api_eval.c ---- */
typedef struct api_cache_entry api_cache_entry;
struct kiln_session {
  pthread_mutex_t mu;
  struct kiln_array *arrays;       /* every live array, user-held or kept by a lazy one */
  api_cache_entry *cache;
  int64_t hits, misses;
  uint64_t seed;                   /* kiln_session_seed: the Philox seed of dropout's masks */
  int64_t grad_steps;              /* kiln_grad calls since it was set: dropout's step (api_grad.c) */
  api_stop stop;                   /* kiln_session_interrupt: read without the lock */
};
struct kiln_array {
  kiln_session *s;
  k_dtype dtype;
  k_shape shape;
  void *data;                      /* the value, or NULL while lazy */
  const char *op;                  /* lazy: the op and its attributes as text */
  char *attrs;
  int nin;
  struct kiln_array **in;          /* lazy: the arrays it reads (each holds a reference) */
  int refs;                        /* the user's handle (1) plus arrays that read it */
  bool user_freed;
  struct api_grad *grad;           /* a gradient (op NULL): its kiln_grad call, and which one */
  int grad_index;
  int mark;                        /* a walk's numbering, -1 when unvisited */
  bool leaf;                       /* in the current walk: an input (a<mark>), not a node */
  bool constant;                   /* a scalar from a number in the source (the REPL's `x * 2`):
                                      evaluation feeds it as an input (one compile for every
                                      value), gradients and export write the number */
  bool fixed;                      /* bound to a model's `const` (kiln_graph_predict_arrays):
                                      export declares it `const`, not `param` */
  struct kiln_array *prev, *next;  /* the session's list */
};
kiln_array *api_array_new(kiln_session *s, k_dtype t, const k_shape *shape);
void api_array_unref(kiln_array *a);           /* with the session locked */
int api_array_constant(kiln_session *s, float value, kiln_array **out);
bool api_is_aux_slot(const char *op, int i);   /* input i of op is an aux state */
void api_array_forget_inputs(kiln_array *a);   /* computed: its inputs' references dropped */
size_t api_array_bytes(const kiln_array *a);
void *api_array_storage(const kiln_array *a);  /* aligned storage for its value, or NULL */
/* api_walk.c. to_sources: stop at arrays made from data (gradients, export); otherwise at
 * arrays that hold a value (evaluation). name(ctx, a), when set and not NULL, overrides the
 * generated name of an array in the text. */
typedef struct {
  bool to_sources;
  kiln_array **leaves, **nodes;    /* inputs, and op arrays in dependency order */
  int nleaves, nnodes, cap_leaves, cap_nodes;
  bool oom;
  const char *(*name)(void *ctx, const kiln_array *a);
  void *name_ctx;
} api_walk;
void api_walk_from(api_walk *w, kiln_array *root);
void api_walk_free(api_walk *w);               /* resets the marks too */
void api_walk_name(const api_walk *w, api_buf *b, const kiln_array *a);
void api_walk_leaf_decl(const api_walk *w, api_buf *b, const kiln_array *a, const char *kind);
void api_walk_nodes_text(const api_walk *w, api_buf *b);
void api_walk_text(const api_walk *w, kiln_array *const *want, int n, api_buf *b);
/* Whether some op of the walk reads leaf i in an aux slot (so it is declared a param). */
bool api_walk_aux_leaf(const api_walk *w, int i);
/* The pending subgraph of a lazy array as the .kiln model its evaluation compiles. */
int api_pending_text(kiln_session *s, kiln_array *a, api_buf *out);

/* api_eval.c: the cache of compiled subgraphs, keyed by their text */
struct api_cache_entry {
  char *key;
  cg_build b;
  rt_model *m;
  api_cache_entry *next;
};
/* Computes the lazy arrays among `arrays` (session locked). */
int api_eval(kiln_session *s, int n, kiln_array *const *arrays);
/* The entry for key, compiled on a miss: as a gradient model when wrt names its params. */
int api_cache_lookup(kiln_session *s, const char *key, const char *const *wrt, int nwrt, api_cache_entry **out);
void api_cache_free(kiln_session *s);

/* api_grad.c */
typedef struct api_grad {
  kiln_array *loss;
  int n;
  kiln_array **wrt;                /* each holds a reference */
  kiln_array **outs;               /* the gradient arrays still alive (NULL once freed) */
  int refs;                        /* gradient arrays alive */
  uint64_t seed;                   /* dropout draws as train_step's step `step` of a model */
  int64_t step;                    /* created with `seed`: fixed when kiln_grad is called */
} api_grad;
/* Computes the gradient arrays not yet computed that a walk from roots meets as leaves
 * (before a walk that needs their values). */
int api_grad_pending(kiln_session *s, bool to_sources, int n, kiln_array *const *roots);
/* Computes every gradient of a's kiln_grad call (session locked). */
int api_grad_compute(kiln_session *s, kiln_array *a);
/* A gradient array released: its slot emptied, the call freed with its last array. */
void api_grad_release(kiln_array *a);
/* The gradient model of a lowered model whose params are the wrt arrays: backward and prune
 * as in train_step, the gradients "<param>@grad" as outputs, the params fed as inputs. */
int api_build_grad(const ir_graph *lowered, const char *const *wrt, int nwrt, cg_build *b, api_stop *stop);
/* The text `dtype[d0, d1]` of a shape, as the language writes a tensor type. */
void api_type_text(api_buf *b, k_dtype t, const k_shape *s);

/* api_export.c: kiln_export with a further naming function (the REPL's variable names). */
int api_export(kiln_session *s, const char *kiln_path, const char *weights_path, const char *model,
               int nout, kiln_array *const *outs, const char *const *out_names, int nin, kiln_array *const *ins,
               const char *const *in_names, const char *(*user)(void *, const kiln_array *), void *user_ctx);

/* api_record.c. made[t] is tensor t's array made here (owned by the caller's walk, freed
 * with kiln_array_free), bound[t] (may be NULL) one the caller lends; constants are made into
 * made[]. An operand neither holds is an error naming it. */
kiln_array *api_record_operand(kiln_session *s, const ir_graph *g, int t, kiln_array **made, kiln_array *const *bound);
/* Node n as a lazy array in made[n->out[0]]. */
int api_record_node(kiln_session *s, const ir_graph *g, const ir_node *n, kiln_array **made, kiln_array *const *bound);
/* The nodes g's outputs need as lazy arrays over bound[] (inputs and weights); outs[i] gets
 * output i (the caller's to free). */
int api_record_predict(kiln_session *s, const ir_graph *g, kiln_array *const *bound, kiln_array **outs);

#endif
