/* kiln.h — the public C API of Kiln (library `kiln`, found with `pkg-config kiln`): graphs
 * built in code or loaded from .kiln files, compiled to a shared object or JIT-compiled to an
 * in-memory model; imperative arrays whose computation is deferred until they are read, with
 * gradients (kiln_grad) and export of their recorded graph as a model (kiln_export).
 * docs/c-api.md is the guide; SPEC section 5 the contract.
 *
 * Conventions. Every function that can fail returns KILN_OK (0) or KILN_ERR (nonzero) and, on
 * failure, leaves a message readable with kiln_last_error() in the calling thread. NULL
 * arguments, unknown names and wrong shapes are failures with a message, never crashes.
 * Objects are created through an out-parameter and freed by their kiln_*_free function
 * (which accepts NULL). A graph, a model and a session (with its arrays) may each be used
 * from several threads: calls on one object are serialised by its lock. */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_API __attribute__((visibility("default")))

enum { KILN_OK = 0, KILN_ERR = 1 };
typedef enum { KILN_F32 = 0, KILN_I32 = 1 } kiln_dtype;
enum { KILN_MAX_RANK = 6 };

/* The message of this thread's last failure ("" when there was none). Valid until the
 * thread's next failing call. */
KILN_API const char *kiln_last_error(void);
KILN_API const char *kiln_version(void);
/* Frees a string the API returned (kiln_graph_text). */
KILN_API void kiln_free(void *p);

/* ---- attributes: typed setters, or a value written as in the language ---- */
typedef struct kiln_attrs kiln_attrs;
KILN_API int kiln_attrs_new(kiln_attrs **out);
KILN_API void kiln_attrs_free(kiln_attrs *a);
KILN_API int kiln_attrs_int(kiln_attrs *a, const char *name, int64_t v);
KILN_API int kiln_attrs_float(kiln_attrs *a, const char *name, double v);
KILN_API int kiln_attrs_bool(kiln_attrs *a, const char *name, int v);
KILN_API int kiln_attrs_str(kiln_attrs *a, const char *name, const char *v);   /* pool_type="max" */
KILN_API int kiln_attrs_ints(kiln_attrs *a, const char *name, int n, const int64_t *v);   /* kernel=(2, 2) */
/* `text` is parsed as the language writes an attribute: "8", "(2, 2)", "\"max\"", "true". */
KILN_API int kiln_attrs_parse(kiln_attrs *a, const char *name, const char *text);

/* ---- graphs in code ---- */
typedef struct kiln_graph kiln_graph;
/* An empty model named `name`. */
KILN_API int kiln_graph_new(const char *name, kiln_graph **out);
/* The model `model` of a .kiln file (NULL: the file's only model), with its dims bound. */
KILN_API int kiln_graph_load(const char *path, const char *model, kiln_graph **out);
/* The same with dims rebound as `kiln compile -D batch=1` rebinds them: dim_names[i] (a dim
 * the file declares) gets values[i] (1..2^40) in place of its declared value. */
KILN_API int kiln_graph_load_dims(const char *path, const char *model, int ndims, const char *const *dim_names,
                                  const int64_t *values, kiln_graph **out);
KILN_API void kiln_graph_free(kiln_graph *g);
/* `dim name = value`: a named dimension that inputs may use. */
KILN_API int kiln_graph_dim(kiln_graph *g, const char *name, int64_t value);
/* `input name : dtype[dims]`. dims[i] is used where dim_names is NULL or dim_names[i] is
 * NULL; otherwise the named dim (declared with kiln_graph_dim) is. */
KILN_API int kiln_graph_input(kiln_graph *g, const char *name, kiln_dtype dtype, int rank,
                              const int64_t *dims, const char *const *dim_names);
/* `target = op(inputs..., attrs...)` for any op of the op table. inputs are names of the
 * graph's tensors or numbers ("0.5"); learnable inputs that are omitted are created and
 * named as the language names them (<target>.weight). attrs may be NULL. */
KILN_API int kiln_graph_op(kiln_graph *g, const char *target, const char *op, int nin,
                           const char *const *inputs, const kiln_attrs *attrs);
/* `param name : dtype[dims] = init(attrs)`; init NULL for the op's default initializer. */
KILN_API int kiln_graph_param(kiln_graph *g, const char *name, kiln_dtype dtype, int rank,
                              const int64_t *dims, const char *init, const kiln_attrs *attrs);
/* `const name : dtype[dims] = init(attrs)`: fixed data the model reads and never trains, saved
 * with the weights (docs/language.md); init NULL for the initializer of the op argument that
 * first reads it, else zeros. */
KILN_API int kiln_graph_const(kiln_graph *g, const char *name, kiln_dtype dtype, int rank,
                              const int64_t *dims, const char *init, const kiln_attrs *attrs);
KILN_API int kiln_graph_output(kiln_graph *g, const char *name);
/* `train loss with optimizer(attrs)`: optimizer "sgd", "adam" or "adamw". */
KILN_API int kiln_graph_train(kiln_graph *g, const char *loss, const char *optimizer, const kiln_attrs *attrs);
/* The rest of a train statement (docs/language.md), each part optional: zeroed, none. */
typedef struct {
  const char *schedule;              /* step, multistep, exponential, cosine, onecycle; NULL: a constant lr */
  const kiln_attrs *schedule_attrs;  /* its arguments: total=1000, warmup=50 */
  double clip_norm;                  /* > 0: the gradients clipped to this global L2 norm first */
  const char *wd_exclude;            /* "bias", "norm" or "bias,norm": no weight decay for those */
} kiln_train_options;
/* kiln_graph_train with options (NULL: none): `train loss with adamw(lr=0.001) schedule
 * cosine(total=1000) clip_norm=1.0 wd_exclude=bias,norm`. */
KILN_API int kiln_graph_train_ex(kiln_graph *g, const char *loss, const char *optimizer, const kiln_attrs *attrs,
                                 const kiln_train_options *options);
/* The dtype and shape of a tensor of the graph, inferred now. *rank <= KILN_MAX_RANK. */
KILN_API int kiln_graph_shape(kiln_graph *g, const char *name, kiln_dtype *dtype, int *rank, int64_t *dims);
/* The graph as .kiln text (what `kiln check --print` prints: every parameter declared, every
 * attribute explicit); it parses back to the same graph. Free *text with kiln_free. */
KILN_API int kiln_graph_text(kiln_graph *g, char **text);
/* What `kiln compile` does: so_path and NAME.h beside it (both written, or neither).
 * opt_level 0..3 (LLVM's pipelines). */
KILN_API int kiln_graph_compile(kiln_graph *g, const char *so_path, int opt_level);

/* ---- models: a graph JIT-compiled in this process, with the entry points of the .so ---- */
typedef struct kiln_model kiln_model;
/* Weights initialised from their initializers with `seed`, as NAME_create(seed) does. */
KILN_API int kiln_graph_jit(kiln_graph *g, uint64_t seed, kiln_model **out);
KILN_API void kiln_model_free(kiln_model *m);
/* Inputs in declaration order (those predict reads), outputs in `output` order; dense
 * row-major buffers of the declared dtype, owned by the caller. */
KILN_API int kiln_model_predict(kiln_model *m, const void *const *inputs, void *const *outputs);
KILN_API int kiln_model_train_step(kiln_model *m, const void *const *inputs, float *loss);
/* set_lr: the lr a schedule starts from (and restarts from now); lr: the next step's into *lr. */
KILN_API int kiln_model_set_lr(kiln_model *m, float lr);
KILN_API int kiln_model_lr(const kiln_model *m, float *lr);
KILN_API int kiln_model_load(kiln_model *m, const char *safetensors_path);
KILN_API int kiln_model_save(kiln_model *m, const char *safetensors_path);
/* Everything a train step reads (weights, optimizer state, step count, schedule, seed), as
 * NAME_save_state / NAME_load_state: k steps, save, load into a fresh model, m more steps give
 * the bits of k + m steps. */
KILN_API int kiln_model_save_state(kiln_model *m, const char *safetensors_path);
KILN_API int kiln_model_load_state(kiln_model *m, const char *safetensors_path);
/* Data-parallel training (kiln_comm.h): train_step as one rank of c's, the loss and gradients
 * summed across the ranks; rank 0's weights become this model's. NULL: alone again. */
struct kiln_comm;
KILN_API int kiln_model_set_comm(kiln_model *m, const struct kiln_comm *c);
/* How many inputs predict (train = 0) or train_step (train = 1) takes, and how many outputs
 * predict gives; then each one's name, dtype and shape. */
KILN_API int kiln_model_count(kiln_model *m, int train, int *ninputs, int *noutputs);
KILN_API int kiln_model_tensor(kiln_model *m, int train, int output, int index, const char **name,
                               kiln_dtype *dtype, int *rank, int64_t *dims);
/* Bounded dims (`dim batch = 1..64`): how many the model has, and dim `index`'s name and
 * bounds. kiln_model_tensor gives the shapes at the bounds. */
KILN_API int kiln_model_dims(kiln_model *m, int *ndims);
KILN_API int kiln_model_dim(kiln_model *m, int index, const char **name, int64_t *lo, int64_t *hi);
/* predict and train_step at the given extents, one per bounded dim in declaration order
 * (NULL: every dim at its bound); an extent outside its bounds fails and changes nothing. */
KILN_API int kiln_model_predict_at(kiln_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs);
KILN_API int kiln_model_train_step_at(kiln_model *m, const int64_t *extents, const void *const *inputs, float *loss);

/* ---- imperative arrays with deferred compute ---- */
typedef struct kiln_session kiln_session;
typedef struct kiln_array kiln_array;
KILN_API int kiln_session_new(kiln_session **out);
/* Frees the session, its compiled-subgraph cache and every array still alive in it. */
KILN_API void kiln_session_free(kiln_session *s);
/* on = 1 asks the compile running in s (from another thread, or from a signal handler: it
 * only sets a flag) to stop: before or after the front end and the passes, or at any moment
 * of LLVM's optimisation and JIT (which run on a worker thread the call polls every 20 ms,
 * left to finish in the background and be thrown away; kiln_session_free waits for it).
 * The call that compiles fails with "interrupted" and the session keeps everything it had
 * (the arrays being read stay lazy, nothing is cached). The request stays until a compile
 * takes it or on = 0 withdraws it. */
KILN_API void kiln_session_interrupt(kiln_session *s, int on);
/* The Philox seed of the session's random draws inside computations (dropout's masks in
 * gradients, see kiln_grad), and the count of kiln_grad calls restarted: after it, kiln_grad
 * call k draws what train_step's step k draws in a model created with `seed`
 * (kiln_graph_jit(g, seed) or NAME_create(seed) of a compiled .so). A new session has seed 0. */
KILN_API int kiln_session_seed(kiln_session *s, uint64_t seed);
/* The cache of compiled subgraphs: lookups that found one, and compiles. */
KILN_API int kiln_session_cache_stats(kiln_session *s, int64_t *hits, int64_t *misses);

/* Arrays holding data: a copy of host memory, a .npy file, or an initializer. Random draws
 * use the runtime's Philox: element i of an array made with `seed` is the element i that a
 * model created with that seed draws for its tensor 0 with the same initializer. */
KILN_API int kiln_array_from_data(kiln_session *s, kiln_dtype dtype, int rank, const int64_t *dims,
                                  const void *data, kiln_array **out);
KILN_API int kiln_array_load_npy(kiln_session *s, const char *path, kiln_array **out);
KILN_API int kiln_array_zeros(kiln_session *s, kiln_dtype dtype, int rank, const int64_t *dims, kiln_array **out);
KILN_API int kiln_array_ones(kiln_session *s, kiln_dtype dtype, int rank, const int64_t *dims, kiln_array **out);
KILN_API int kiln_array_uniform(kiln_session *s, int rank, const int64_t *dims, float low, float high,
                                uint64_t seed, kiln_array **out);
KILN_API int kiln_array_normal(kiln_session *s, int rank, const int64_t *dims, float mean, float std,
                               uint64_t seed, kiln_array **out);
/* op on arrays: returns a lazy array at once (shape and dtype inferred, nothing computed).
 * Every tensor input must be given (learnable ones are not created for arrays). */
KILN_API int kiln_array_op(kiln_session *s, const char *op, int nin, kiln_array *const *inputs,
                           const kiln_attrs *attrs, kiln_array **out);
/* Releases the array; a lazy array that others use stays in their pending graph. */
KILN_API void kiln_array_free(kiln_array *a);
KILN_API int kiln_array_shape(const kiln_array *a, kiln_dtype *dtype, int *rank, int64_t *dims);
/* 1 while the array is lazy (not computed yet), 0 once it holds a value. */
KILN_API int kiln_array_is_lazy(const kiln_array *a, int *lazy);
/* Computes the arrays (one compile for all of them, or none when the cache has it). */
KILN_API int kiln_array_eval(kiln_session *s, int n, kiln_array *const *arrays);
/* Gradients of the f32[] scalar `loss` with respect to each of wrt[0..n) (f32 arrays made
 * from data), as lazy arrays out[0..n) of their shapes: derived by the backward pass and
 * pruning that train_step uses, all n computed by one compile when one is read. The forward
 * ops run as in train_step: batch_norm by the batch's statistics (the arrays passed as its
 * moving statistics are not updated), dropout with the mask train_step's step k draws in a
 * model created with the session's seed (kiln_session_seed; 0 by default), k = 1 for the
 * first kiln_grad call after the seed was set, 2 for the next...: fixed by the call, however
 * late its gradients are read. Reading `loss` itself runs predict (dropout the identity,
 * batch_norm by the moving statistics). */
KILN_API int kiln_grad(kiln_array *loss, int n, kiln_array *const *wrt, kiln_array **out);
/* predict of graph g recorded on arrays of session s (nothing computed): inputs[0..ninputs)
 * are predict's inputs in declaration order (those predict reads, as kiln_model_tensor lists
 * them), each param or aux state predict reads is the array weights[k] whose name
 * weight_names[k] is, and outputs[0..noutputs) receive lazy arrays, one per `output` in
 * order (the caller frees them). Every array must have the declared dtype and shape. */
KILN_API int kiln_graph_predict_arrays(kiln_graph *g, kiln_session *s, int ninputs, kiln_array *const *inputs,
                                       int nweights, const char *const *weight_names, kiln_array *const *weights,
                                       int noutputs, kiln_array **outputs);
/* Reads an array (computing it first): nbytes must be exactly its size. */
KILN_API int kiln_array_read(kiln_array *a, void *dst, size_t nbytes);
KILN_API int kiln_array_save_npy(kiln_array *a, const char *path);

/* The recorded graph that computes outputs[0..nout) as the model `model`: .kiln text in
 * kiln_path, weights in weights_path (safetensors). The arrays inputs[0..nin) (made from data)
 * become `input`s named in_names; every other array made from data that the graph reads
 * becomes a `param` (named a<N>; a `const` where kiln_graph_predict_arrays bound it to a
 * model's const) whose value is written to the weights; the outputs are
 * named out_names. The model compiles with `kiln compile` and, with those weights, computes
 * what the arrays do. Both files are written, or neither. */
KILN_API int kiln_export(kiln_session *s, const char *kiln_path, const char *weights_path, const char *model,
                         int nout, kiln_array *const *outputs, const char *const *out_names,
                         int nin, kiln_array *const *inputs, const char *const *in_names);

/* ---- model sources: what the Python package (python/kiln, docs/python.md) compiles ----
 * One model lowered from a .kiln file, .kiln text or an .onnx file, with its dims bound as
 * `kiln compile -D` binds them. It is JIT-compiled to the descriptor every generated .so
 * exports under the name `kiln_model` (runtime/rt_model.h's rt_model_api, ABI RT_MODEL_ABI),
 * so one caller drives a JIT'd model and a loaded .so alike, or compiled to a .so and its
 * header as `kiln compile` does. */
typedef struct kiln_source kiln_source;
/* A .kiln or .onnx file (by its extension), or .kiln text (named `name` in diagnostics). The
 * dims dim_names[0..ndims): values[i] fixes one (-D batch=8) where lows is NULL or lows[i] is
 * 0, else the dim is bounded to lows[i]..values[i] (-D batch=1..64). model picks a model of a
 * .kiln file or text (NULL: its only one). train, for an .onnx file only (NULL: none), is what
 * `kiln import --train` takes: "softmax_cross_entropy sgd(lr=0.01)". Diagnostics are the
 * error, as the command line prints them. */
KILN_API int kiln_source_file(const char *path, const char *model, int ndims, const char *const *dim_names,
                              const int64_t *values, const int64_t *lows, const char *train, kiln_source **out);
KILN_API int kiln_source_text(const char *name, const char *text, const char *model, int ndims,
                              const char *const *dim_names, const int64_t *values, const int64_t *lows,
                              kiln_source **out);
/* Frees the source and every JIT'd build of it; models created through those come first. */
KILN_API void kiln_source_free(kiln_source *s);
/* The lowered model as .kiln text (free *text with kiln_free). */
KILN_API int kiln_source_print(kiln_source *s, char **text);
/* An .onnx source's names that were renamed to be .kiln names: how many, and pair `index`
 * (both strings live as long as s); a .kiln source has none. */
KILN_API int kiln_source_nrenamed(kiln_source *s, int *n);
KILN_API int kiln_source_renamed(kiln_source *s, int index, const char **onnx_name, const char **kiln_name);
/* JIT-compiled in this process (target cpu): *api points to an rt_model_api whose entry points
 * are the runtime's and whose desc and code live until kiln_source_free. Each call compiles
 * anew. opt_level 0..3. */
KILN_API int kiln_source_jit(kiln_source *s, int opt_level, const void **api);
/* What `kiln compile --target TARGET` does: so_path and NAME.h beside it (both written, or
 * neither). target "cpu" (or NULL) or "cuda". */
KILN_API int kiln_source_compile(kiln_source *s, const char *so_path, const char *target, int opt_level);

/* The op table (SPEC section 2 and beyond), for bindings that make one function per op: how
 * many ops; op `index`'s name, the PyTorch function it matches, its tensor inputs (arguments,
 * then aux states such as batch_norm's moving statistics), its attributes, and whether it takes
 * any number of inputs (concat); input i's name, whether it may be absent (a bias with
 * no_bias) and whether it is an aux state; attribute i's name and whether it is required.
 * Strings live as long as the library. */
KILN_API int kiln_op_count(int *n);
KILN_API int kiln_op_info(int index, const char **name, const char **doc, int *ninputs, int *nattrs, int *variadic);
KILN_API int kiln_op_input(int index, int i, const char **name, int *optional, int *is_aux);
KILN_API int kiln_op_attr(int index, int i, const char **name, int *required);

/* A number as a rank-0 f32 array, as `x * 2` writes one in the REPL: evaluation feeds it as an
 * input (one compile for every value), kiln_grad and kiln_export write the number itself. */
KILN_API int kiln_array_number(kiln_session *s, double value, kiln_array **out);

#ifdef __cplusplus
}
#endif
#endif
