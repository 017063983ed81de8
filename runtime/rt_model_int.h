/* rt_model_int.h — what the rt_model files share and nobody else sees: the instance (weights,
 * optimizer state and constants in one block, the planned arena, the aux snapshot) and the
 * per-program state of one run (bound pointers, each step's kernel arguments). */
#ifndef KILN_RT_MODEL_INT_H
#define KILN_RT_MODEL_INT_H

#include <pthread.h>

#include "kiln_comm.h"
#include "rt_model.h"
#include "runtime.h"

#define RT_MODEL_ERR_LEN 512

typedef struct rt_model rt_model;
typedef struct rt_profile rt_profile;

/* One step's arguments for one run: its kernel call arrays are filled before the push. */
typedef struct {
  rt_model *m;
  const rt_program *p;
  const rt_step *s;
  k_tensor *in, *out;           /* nin / nout entries in the program's pools */
  k_req *req;
  void **ptrs;                  /* FUSED: in[] then out[], then the run's extents (k_dims.h) */
  k_cache *cache;               /* the kernel's memory across calls (predict only), or NULL */
  const void *param;            /* the step's param: the descriptor's, or the instance's copy
                                   when bounded dims rewrite it */
  k_shape *in_shape, *out_shape; /* bounded dims: the instance's copies of the step's arrays
                                   (rt_model_dims.c), else NULL: the descriptor's */
} rt_step_run;

typedef struct {
  const rt_program *p;
  rt_step_run *sr;              /* one per step */
  k_tensor *tpool;
  k_req *rpool;
  void **fpool;
  k_cache *caches;              /* predict: one per step, cleared by rt_model_weights_changed */
  rt_var **vars;                /* one engine variable per step (threaded engine), made on
                                   the first run and kept */
  rt_var **dvars;               /* the variables of one step's dependencies, for a push */
  k_shape *in_shape;            /* bounded dims: the steps' in_shape arrays, copied to rewrite */
  k_shape *out_shape;           /* the same for the steps that have out_shape */
  void **params;                /* per step: its param copy when a patch rewrites it, else NULL */
} rt_prog_state;

struct rt_model {
  const rt_model_desc *d;
  uint64_t seed;
  int64_t step;                 /* train steps taken: Adam's t and the random counters */
  float base_lr;                /* the lr the schedule starts from: the descriptor's or set_lr's */
  int64_t lr_from;              /* the step base_lr was set at: the schedule counts from it */
  float lr;                     /* the running train step's (rt_model_lr before it) */
  pthread_mutex_t mu;           /* every entry point holds it */
  rt_engine *engine;            /* this instance's own (KILN_ENGINE), used under mu only: the
                                   engine wants its pushes from one thread at a time, and with
                                   one per instance two models run at the same time */
  char err[RT_MODEL_ERR_LEN];
  void *store;                  /* PARAM, AUX, STATE and CONST tensors, 64-byte aligned each */
  void *store_block;            /* the allocation store lies in (rt_zalloc64), which free takes */
  int64_t store_bytes;          /* its size */
  void **tptr;                  /* per tensor: its place in store, or NULL */
  void *arena;                  /* max of the programs' arena_bytes */
  void *arena_block;            /* the allocation arena lies in */
  float *aux_backup;            /* train_step's snapshot of the aux states */
  int64_t aux_elems;
  void **ptr;                   /* per tensor: the pointer bound for the current run */
  rt_prog_state ps[2];          /* predict, train */
  int64_t extent[K_MAX_BDIMS];  /* the bounded dims' extents the programs are set up for */
  k_shape *tshape;              /* per tensor: its shape at those extents */
  rt_profile *prof;             /* KILN_PROFILE: every step timed (rt_profile.c), else NULL */
  kiln_comm comm;               /* set_comm's hook (rt_comm.c), when has_comm */
  int has_comm;
  float *comm_buf;              /* every gradient (or weight, at set_comm), bucket after bucket */
  void **comm_req;              /* the buckets' allreduces in flight */
  float comm_lossbuf;           /* the loss's allreduce: this rank's, then every rank's sum */
  int comm_nb;                  /* buckets (rt_comm_plan) */
  int *comm_bucket;             /* bucket b: updates [comm_bucket[b], comm_bucket[b + 1]) of the
                                   reversed update list */
  int *comm_ready;              /* bucket b's ready step: the last that writes its gradients */
  int *comm_order;              /* the buckets in the order they start */
  int comm_loss_ready;          /* the step that writes the loss */
  int comm_started;             /* this run's: 0, 1 (the loss), 1 + buckets started */
  int comm_broke;               /* this run failed in the transport (not worth telling the others) */
  int comm_sync;                /* train_step has a batch_norm(sync=true) (rt_comm_kernel_hook) */
  k_sync comm_ksync;            /* what such a step's k_call.sync points at */
  int64_t *comm_t0;             /* profiled: each started one's start time, and */
  int *comm_after;              /* the step it started after */
  uint64_t rng_salt;            /* added to seed for dropout's draws: each rank its own stream */
};

/* rt_model.c */
/* An instance: persistent tensors allocated and initialised; with run_on_cpu also the arena,
 * the engine and the programs' run state (rt_model_create). The CUDA runtime keeps its
 * weights' host copy, load, save and lookups in one made without (runtime/cuda). */
rt_model *rt_model_new(const rt_model_desc *d, uint64_t seed, int run_on_cpu);
int rt_model_fail(rt_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rt_model_is_weight(const rt_tensor_info *t);        /* PARAM or AUX */
int64_t rt_tensor_numel(const rt_tensor_info *t);

/* rt_model_run.c */
/* p's steps, slots, arena intervals, inputs and outputs are in range, and each step's param
 * is its op's struct, whole (what a descriptor from a .so must pass before anything runs it;
 * every target checks it at create). */
int rt_prog_valid(const rt_model_desc *d, const rt_program *p);
/* The shape of out slot j of s; an absent in_grad takes its in_data partner's shape. */
k_shape rt_step_out_shape(const rt_model_desc *d, const rt_step *s, int j);
/* Out slot j's shape from the step's shape arrays as a run sees them (in, out: NULL where the
 * step has none) and its tensor's shape at the run's extents (NULL: no tensor). */
k_shape rt_out_shape(const rt_step *s, const k_shape *in, const k_shape *out, const k_shape *tensor, int j);
/* How many in slots an UPDATE step reads: parameter, gradient, and its optimizer's state. */
int rt_update_nin(const rt_model_desc *d, const rt_step *s);
/* An UPDATE step's own optimizer parameters (wd_exclude's: weight decay 0) are the size its
 * optimizer's are: a k_adam_param or a k_sgd_param. */
bool rt_update_param_ok(const rt_step *s);
/* rt_model_lr without the lock, for a caller that holds it (a train step). */
float rt_model_lr_now(const rt_model *m);
/* The first UPDATE step of p (nsteps when none): train_step runs the updates only once every
 * step before it succeeded. */
int rt_first_update(const rt_program *p);
/* train_step's loss: the sum of its output's elements (in double), as this rank computed it. */
float rt_loss_sum(const rt_model *m, const rt_program *p);

/* rt_comm.c */
/* train_step's reduction across the ranks of set_comm's hook, between the backward steps and
 * the first update (`first`): the loss summed into comm_lossbuf, every gradient summed and divided by
 * the world size. 0 without a hook. */
int rt_comm_reduce(rt_model *m, rt_prog_state *ps, int first);
/* After step `step` of a program run in order (rt_run_direct): the loss's and the buckets'
 * allreduces whose data that step completed start, so they run while the backward pass goes
 * on. 0 unless a start fails. */
int rt_comm_after_step(rt_model *m, rt_prog_state *ps, int step);
/* After a failed run: the other ranks told of a failure of this rank's own (kiln_comm.failed),
 * the allreduces it started waited for and forgotten. */
void rt_comm_settle(rt_model *m);
/* A train_step kernel call of a batch_norm(sync=true) step gets the hook's allreduce
 * (k_call.allreduce, the world size); any other call is left as it is. */
void rt_comm_kernel_hook(const rt_model *m, const rt_step *s, const void *param, k_call *c);
/* Whether step s (param: its param, or a run's copy) is a batch_norm(sync=true) forward or
 * backward. */
int rt_step_syncs_bn(const rt_step *s, const void *param);
void rt_comm_free(rt_model *m);
int rt_prog_state_init(rt_prog_state *ps, rt_model *m, const rt_program *p);
/* Bounded dims: the descriptor's dims and patches are in range, and each patch gives its
 * size at the bound and none larger (nor negative, nor an overflow) at any extents in the
 * dims' ranges (rt_model_new checks it, after rt_prog_valid). */
int rt_dims_valid(const rt_model_desc *d);
/* Sets the programs up for the extents (NULL: the bounds): the tensors' shapes, the steps'
 * shapes and params. 0, or 1 with the model's message when an extent is out of its range. */
int rt_model_set_extents(rt_model *m, const int64_t *extents, const char *what);
/* Bounded dims: params[i] (NULL on entry) a malloc'd copy of step i's param for each step a
 * PARAM patch rewrites, the rest left NULL; the CPU's and the CUDA runtime's instances patch
 * these per call. 0, or 1 without memory. */
int rt_dims_param_copies(const rt_program *p, void **params);
int rt_dims_state_init(rt_prog_state *ps);    /* the copies; 1 without memory */
void rt_dims_state_free(rt_prog_state *ps);
/* Step r's kernel arguments' shapes and dtypes, from its shape arrays and m->tshape. */
void rt_step_args(rt_step_run *r, const rt_model *m);
void rt_prog_state_free(rt_prog_state *ps);
/* Every function that may change a weight (PARAM, AUX) calls this once it has (or may have):
 * it clears the predict steps' kernel caches, which hold data derived from the weights. */
void rt_model_weights_changed(rt_model *m);

/* rt_profile.c: per-step profiles (KILN_PROFILE=trace.json). */
rt_profile *rt_profile_from_env(const rt_model_desc *d);   /* NULL when KILN_PROFILE is unset */
int64_t rt_profile_now(void);                               /* CLOCK_MONOTONIC, ns */
void rt_profile_step(rt_profile *p, int prog, int step, int64_t t0, int64_t t1);   /* prog: 0 predict, 1 train */
void rt_profile_run(rt_profile *p, int prog, int64_t t0, int64_t t1);
/* An allreduce (bucket -1: the loss) started after step after_step, from t0 to its wait's end. */
void rt_profile_comm(rt_profile *p, int bucket, int after_step, int64_t elements, int64_t t0, int64_t t1);
/* Writes the trace and prints the table of the steps that took the most time. */
void rt_profile_finish(const rt_model *m, const rt_profile *p);
void rt_profile_free(rt_profile *p);

#endif
