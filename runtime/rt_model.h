/* rt_model.h — the compiled model at run time: the descriptor a code generator emits and the
 * functions behind the generated C ABI (SPEC section 3).
 *
 * The descriptor is plain constant data: a table of tensors and, per entry point, a program
 * of steps in plan order. An AOT build emits it as LLVM constants next to the fused loops and
 * the NAME_* wrappers; the JIT builds the same struct in memory (codegen/cg_desc.c). Each
 * step names its kernel directly (a function pointer the linker resolves from the kernel
 * archive) or its generated fused loop, its tensors by index, its OpReqTypes, its workspace
 * and the earlier steps it depends on, so the runtime can push steps through the dependency
 * engine and independent branches may run together.
 *
 * Random numbers follow the reference executor exactly (exec/exec.h): initialising the
 * tensor of index i in the graph draws Philox(seed, RT_CTR_INIT(i), element); a random op in train step s
 * (counted from 1) draws Philox(seed, RT_CTR_OP(s, name_hash), element). */
#ifndef KILN_RT_MODEL_H
#define KILN_RT_MODEL_H

#include <string.h>

#include "k_base.h"
#include "k_dims.h"
#include "k_params.h"

struct kiln_comm;   /* include/kiln_comm.h: data-parallel training's hook */

#define RT_MODEL_ABI "kiln-model-9"   /* -2: rt_step gained epi, rt_tensor_info data; -3: target, gpu_module;
                                         -4: rt_tensor_info ctr; -5: bounded dims (rt_dim, rt_dimpatch);
                                         -6: schedules (k_schedule), sgd's nesterov, adamw, lr(),
                                         save_state(), load_state(), clip_norm; -7: set_comm(),
                                         an update step's own param (wd_exclude); -8: gpu_lib_module;
                                         -9: rt_step samples, sample_stride */
#define RT_CTR_INIT(i) ((uint64_t)(uint32_t)(i))
#define RT_CTR_OP(step, hash) ((UINT64_C(1) << 63) | ((uint64_t)(step) & 0x7fffffffu) << 32 | (uint64_t)(hash))
uint32_t rt_fnv1a32(const char *s);            /* FNV-1a over the bytes of s */
/* "kiln_fused_p<step>" / "kiln_fused_t<step>": the symbol of a generated step's code (the
 * CPU's fused loop, the GPU's kernel), which code generators and the CUDA runtime agree on. */
void rt_fused_name(char *buf, size_t n, int train, int step);

/* What the steps run on. CPU: FORWARD and BACKWARD steps call their kernel pointer, FUSED
 * steps their loop. CUDA (runtime/cuda/rtc.h): FUSED steps launch the kernel named by
 * rt_fused_name from gpu_module, the others run the GPU op table's entry for their op, whose
 * kernels are gpu_lib_module's. */
enum { RT_TARGET_CPU = 0, RT_TARGET_CUDA = 1 };

enum { RT_ROLE_INPUT, RT_ROLE_PARAM, RT_ROLE_AUX, RT_ROLE_STATE, RT_ROLE_CONST, RT_ROLE_VALUE };

typedef struct {
  const char *name;
  int32_t role, dtype;
  k_shape shape;
  int32_t init;                 /* PARAM, AUX: K_INIT_* (k_params.h); CONST: unused */
  float init_a, init_b;         /* the initializer's attributes; CONST: init_a is the value */
  const void *data;             /* PARAM, AUX: the initial values, dense (a model compiled from
                                   ONNX embeds its weights), used instead of init; or NULL */
  int32_t ctr;                  /* the tensor's index in the graph: its initializer draws from
                                   RT_CTR_INIT(ctr). The table leaves out what nothing binds
                                   (codegen/cg_desc.c), so this is not the entry's position */
} rt_tensor_info;

enum { RT_STEP_FORWARD, RT_STEP_BACKWARD, RT_STEP_UPDATE, RT_STEP_FUSED };

typedef struct {
  int32_t kind;
  int32_t op;                   /* FORWARD, BACKWARD: the op's index in the IR's op table
                                   (its kernels are k_<op>_forward/backward); UPDATE: K_OPT_* */
  k_fn kernel;                  /* FORWARD, BACKWARD */
  void (*fused)(void *const *ptrs);  /* FUSED: pointers to the tensors of in[], then out[] */
  const void *param;            /* the op's k_*_param, or NULL */
  int32_t param_bytes;          /* its size, the op's struct's (a run at other extents copies
                                   it to rewrite it) */
  int32_t nin, nout;
  const int32_t *in, *out;      /* tensor indices, -1 for an absent slot (pruned, no gradient) */
  const k_shape *in_shape;      /* one per in slot, absent ones included: kernels read shapes;
                                   NULL for FUSED, whose code has them built in */
  const k_shape *out_shape;     /* one per out slot where the kernel sees other shapes than the
                                   tensors' (a channel scale viewing blocked values as
                                   [N][C/V][H][W][V]); NULL: the tensors' */
  const k_req *req;             /* one per out */
  int64_t temp_offset, temp_bytes;   /* workspace in the arena */
  int32_t random;               /* 1 when the kernel draws random numbers */
  uint32_t name_hash;           /* rt_fnv1a32 of the node's name: the random counter */
  const char *name;             /* the node's name, for error messages */
  int32_t ndeps;
  const int32_t *deps;          /* earlier steps of the program this one must follow */
  const struct k_epilogue *epi; /* FORWARD of convolution, fully_connected, matmul: the
                                   elementwise tail its kernel runs per output block, or NULL */
  int32_t samples;              /* > 1: the kernel runs once per sample, N calls (the plan put
                                   a slot's samples apart inside a concat's output; ir_plan) */
  const int64_t *sample_stride; /* then one per slot, in[] then out[]: the bytes between its
                                   samples, or 0 for a slot each call reads whole (a weight) */
} rt_step;

/* A bounded dim (`dim batch = 1..64`, kernels/k_dims.h): the descriptor holds every size at
 * the bound hi, where it was planned; a run at other extents rewrites the sizes that follow
 * the dims, each listed as an rt_dimpatch, in its instance's copy of the program's shapes
 * and params (rt_model_run.c), and a fused step's loop reads the extents from the pointer
 * after its tensors'. */
typedef struct { const char *name; int64_t lo, hi; } rt_dim;
enum { RT_DV_TENSOR, RT_DV_IN_SHAPE, RT_DV_OUT_SHAPE, RT_DV_PARAM_I64, RT_DV_PARAM_I32 };
typedef struct {
  int32_t kind;                 /* RT_DV_* */
  int32_t index;                /* TENSOR: the tensor; the others: the step */
  int32_t slot;                 /* IN/OUT_SHAPE: the slot; PARAM_*: the field's byte offset */
  int32_t axis;                 /* TENSOR, IN/OUT_SHAPE: the axis */
  k_dimval v;                   /* the size at the run's extents */
} rt_dimpatch;

typedef struct {
  int32_t nsteps;
  const rt_step *steps;
  int64_t arena_bytes;
  const int64_t *offset;        /* per tensor: its arena byte offset, or -1 when not in the arena */
  int32_t ninputs;
  const int32_t *inputs;        /* the entry point's input tensors, in declaration order */
  int32_t noutputs;
  const int32_t *outputs;       /* predict: the outputs in `output` order; train: the loss */
  int32_t is_train;
  int32_t npatches;             /* bounded dims: the steps' sizes that follow them */
  const rt_dimpatch *patches;   /* kinds IN_SHAPE, OUT_SHAPE, PARAM_* */
  uint32_t dims_used;           /* bit d: an input or output of the entry point follows bounded
                                   dim d, so the generated entry point takes its extent */
} rt_program;

typedef struct {
  const char *abi;              /* RT_MODEL_ABI */
  const char *name;
  int32_t ntensors;
  const rt_tensor_info *tensors;
  rt_program predict;
  int32_t has_train;
  rt_program train;
  int32_t optim;                /* K_OPT_* */
  float lr;                     /* the base lr; the schedule's start */
  k_sgd_param sgd;
  k_adam_param adam;
  k_schedule sched;
  float clip_norm;              /* > 0: the gradients scaled to this global norm before the updates */
  int32_t target;               /* RT_TARGET_* */
  const char *gpu_module;       /* CUDA: the PTX of the model's generated kernels (text) */
  const char *gpu_lib_module;   /* CUDA: the PTX of the op library's kernels (text), the same for
                                   every model of an architecture */
  int32_t ndims;                /* bounded dims, in declaration order (K_MAX_BDIMS at most) */
  const rt_dim *dims;
  int32_t ntensor_patches;      /* the tensors' sizes that follow them (kind TENSOR) */
  const rt_dimpatch *tensor_patches;
} rt_model_desc;

/* For tools that make data for a model (benchmarks, comparisons): the exclusive upper bound
 * of i32 input t, from the first forward step that reads it: with a weight beside it
 * (embedding's table, a param or a const) the weight's first dim, else
 * (softmax_cross_entropy's logits) the other input's last dim; 2 when no step reads it. */
static inline int64_t rt_index_range(const rt_model_desc *d, int32_t t) {
  const rt_program *p = d->has_train ? &d->train : &d->predict;
  for (int s = 0; s < p->nsteps; s++) {
    const rt_step *st = &p->steps[s];
    for (int i = 0; st->kind == RT_STEP_FORWARD && i < st->nin; i++) {
      if (st->in[i] != t) continue;
      for (int j = 0; j < st->nin; j++) {
        if (j == i || st->in[j] < 0) continue;
        const rt_tensor_info *o = &d->tensors[st->in[j]];
        int64_t r = o->role == RT_ROLE_PARAM || o->role == RT_ROLE_AUX ? o->shape.d[0] : o->shape.d[o->shape.rank - 1];
        return r > 0 ? r : 1;
      }
    }
  }
  return 2;
}

/* ---- rt_model.c: the ABI's behaviour. Every function validates its arguments, returns 0 on
 * success and nonzero on failure with a message for rt_model_error, never crashes on bad
 * input, and leaves the weights as they were when it fails. An instance is safe to use from
 * several threads (calls are serialised per instance); instances are independent. ---- */
typedef struct rt_model rt_model;
rt_model *rt_model_create(const rt_model_desc *d, uint64_t seed);   /* NULL only without memory */
void rt_model_destroy(rt_model *m);
int rt_model_load(rt_model *m, const char *path);            /* safetensors: every PARAM and AUX, exactly */
int rt_model_save(const rt_model *m, const char *path);      /* atomic: a temporary file, then rename */
/* Everything a train step reads: the weights, the optimizer's state, and in the metadata the
 * step count (Adam's t, the random counters), the seed and the schedule's base lr and start.
 * Training k steps, save_state, load_state into a fresh instance and m more steps gives the
 * bits of k + m steps. load_state refuses another model's or optimizer's file, and a weights
 * file (it lacks the metadata). */
int rt_model_save_state(const rt_model *m, const char *path);
/* Data-parallel training (include/kiln_comm.h): train_step then sums the loss and gradients
 * across the hook's ranks, and dropout draws the rank's own masks; setting it gives every rank
 * rank 0's weights. NULL removes it. 0, or 1 with rt_model_error. */
int rt_model_set_comm(rt_model *m, const struct kiln_comm *c);
int rt_model_load_state(rt_model *m, const char *path);
int rt_model_predict(rt_model *m, const void *const *inputs, void *const *outputs);
int rt_model_train_step(rt_model *m, const void *const *inputs, float *loss);
/* The same at the given extents of the bounded dims (d->ndims of them, in declaration order;
 * NULL: every dim at its bound): each must lie in its dim's [lo, hi], else the call fails
 * with a message and changes nothing. rt_model_predict and rt_model_train_step run at the
 * bound. */
int rt_model_predict_at(rt_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs);
int rt_model_train_step_at(rt_model *m, const int64_t *extents, const void *const *inputs, float *loss);
/* The shape of tensor t at the given extents (NULL: the bound). Inline: tools that dlopen a
 * .so without linking the runtime (bench/models) read shapes from its descriptor too. */
static inline k_shape rt_tensor_shape_at(const rt_model_desc *d, int32_t t, const int64_t *extents) {
  k_shape s = d->tensors[t].shape;
  for (int i = 0; extents && i < d->ntensor_patches; i++)
    if (d->tensor_patches[i].index == t) s.d[d->tensor_patches[i].axis] = k_dimval_eval(d->tensor_patches[i].v, extents);
  return s;
}
/* Writes a PARAM_I64 / PARAM_I32 patch's value at the extents into a copy of its step's
 * param (the runtime per call, the code generator when it sizes workspaces over the range). */
static inline void rt_dimpatch_param(const rt_dimpatch *x, const int64_t *extents, void *param) {
  int64_t v = k_dimval_eval(x->v, extents);
  int32_t w = (int32_t)v;
  if (x->kind == RT_DV_PARAM_I64) memcpy((char *)param + x->slot, &v, 8);
  else if (x->kind == RT_DV_PARAM_I32) memcpy((char *)param + x->slot, &w, 4);
}

/* "f32[batch, 784]": tensor t's type with the sizes that follow bounded dims written as
 * they do ("2*seq+1"); "batch = 1..64, seq = 1..256": the bounded dims. */
void rt_tensor_type_text(const rt_model_desc *d, int32_t t, char *buf, size_t n);
void rt_dims_text(const rt_model_desc *d, char *buf, size_t n);
/* The extents that give program p's inputs the shapes `shapes` (one per input; for tools
 * that read arrays, such as kiln run): 0, or 1 with a message in err when no extents do. */
int rt_extents_from_inputs(const rt_model_desc *d, const rt_program *p, const k_shape *shapes, int64_t *extents,
                           char *err, size_t n);
/* Sets the base learning rate; a schedule restarts from it (its step count back to 0). */
int rt_model_set_lr(rt_model *m, float lr);
/* The learning rate the next train step uses: the schedule's at its position (0 for NULL). */
float rt_model_lr(const rt_model *m);
/* The Philox seed and the train steps taken, which the random ops of the next run read (a
 * RANDOM op in a program with is_train draws as train_step's step `step` does in a model
 * created with `seed`; weights drawn at create keep their draws): the C API's gradients use
 * it to draw dropout's masks from the session's seed. step >= 0. */
int rt_model_set_random(rt_model *m, uint64_t seed, int64_t step);
const char *rt_model_error(const rt_model *m);               /* "" after success; never NULL */
/* A weight or optimizer state by name (tests, tools): 0, or 1 when there is none. */
int rt_model_get(const rt_model *m, const char *name, const float **data, int64_t *n);
const rt_model_desc *rt_model_descriptor(const rt_model *m);

/* What every generated .so exports under one name-free symbol, `kiln_model`, so a generic
 * tool (kiln run) can find the entry points, tensor names, shapes and dtypes without the
 * model's header. */
typedef struct {
  const char *abi;              /* RT_MODEL_ABI */
  const rt_model_desc *desc;
  rt_model *(*create)(const rt_model_desc *d, uint64_t seed);
  void (*destroy)(rt_model *m);
  int (*load)(rt_model *m, const char *path);
  int (*save)(const rt_model *m, const char *path);
  int (*predict)(rt_model *m, const void *const *inputs, void *const *outputs);
  int (*train_step)(rt_model *m, const void *const *inputs, float *loss);
  int (*set_lr)(rt_model *m, float lr);
  const char *(*error)(const rt_model *m);
  /* A CUDA model's entry points on device pointers (NAME_predict_device, ...; the stream is
   * a CUstream), at the bounds of any bounded dims; NULL for a CPU model. */
  int (*predict_device)(rt_model *m, const void *const *inputs, void *const *outputs, void *stream);
  int (*train_step_device)(rt_model *m, const void *const *inputs, float *loss, void *stream);
  /* At the extents of the bounded dims (rt_model_predict_at; a CUDA model's rtc_model_predict_at). */
  int (*predict_at)(rt_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs);
  int (*train_step_at)(rt_model *m, const int64_t *extents, const void *const *inputs, float *loss);
  float (*lr)(const rt_model *m);   /* rt_model_lr: the next train step's learning rate */
  int (*save_state)(const rt_model *m, const char *path);
  int (*load_state)(rt_model *m, const char *path);
  int (*set_comm)(rt_model *m, const struct kiln_comm *c);   /* rt_model_set_comm */
} rt_model_api;

/* The entry points of this process's own runtime for descriptor d (a JIT'd model: kiln run
 * and kiln train of a .kiln file, the C API's sources): what a .so exports as kiln_model. */
rt_model_api rt_model_local_api(const rt_model_desc *d);

#endif
