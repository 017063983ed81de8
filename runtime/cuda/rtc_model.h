/* rtc_model.h — what the CUDA runtime's files share: the instance (rtc_ctx), the GPU op
 * table's rows, and the functions behind a CUDA .so's NAME_* and kiln_model. */
#ifndef KILN_RTC_MODEL_H
#define KILN_RTC_MODEL_H

#include <pthread.h>
#include <stdbool.h>

#include "rt_model_int.h"   /* the host-side instance and RT_MODEL_ERR_LEN */
#include "rtc.h"
#include "kc_args.h"  /* kc_live */
#include "rtc_lib.h"

enum { RTC_LIB_NONE, RTC_LIB_BLAS, RTC_LIB_DNN };   /* which library an op row needs opened (rtc_ops.def's lib) */

typedef struct {
  rtc_op_fn forward, backward, prepare;   /* prepare: NULL when the op keeps no state */
  rtc_release_fn release;
  int lib;                                /* RTC_LIB_* */
  int checks_data;                        /* its kernels may set the step's data-error word */
} rtc_op_row;

/* The row of op index `op` (kernels/k_ops.def order), or NULL when the GPU has none. */
const rtc_op_row *rtc_op_row_of(int op);
/* The message of a data-error code a kernel set (kc_args.h's KC_ERR_*). */
const char *rtc_data_error_text(int32_t code);

/* One captured run of a program (rtc_graph.c), at the extents of its bounded dims. */
enum { RTC_GRAPHS = 4 };        /* extents' graphs kept per program; the least recent one goes */
typedef struct {
  int64_t extent[K_MAX_BDIMS];
  int runs;                     /* runs step by step at these extents so far: the first is not
                                   captured (libraries load their kernels at their first call) */
  uint64_t used;                /* the program's graph_clock at its last run */
  CUgraph graph;                /* the capture, and its executable form (NULL: none yet) */
  CUgraphExec exec;
} rtc_graph_entry;

/* Per program: the shapes, dtypes, pointer and OpReqType pools of its steps' calls, and the
 * generated kernels of its FUSED steps. */
typedef struct {
  const rt_program *p;
  int split;                    /* the first update step (rt_first_update) */
  size_t *at;                   /* per step: its first slot in the pools below (nsteps + 1) */
  const rtc_op_row **row;       /* FORWARD and BACKWARD steps: the op's row, found at create */
  float *hloss;                 /* train: the loss's host copy */
  CUfunction *fn;               /* FUSED steps: the kernel, found at create */
  int64_t *threads;             /* FUSED steps: the grid's thread count */
  void **state;                 /* per step: the op's own state (prepare) */
  k_shape *shapes;              /* per step: in then out slots */
  k_dtype *dtypes;
  void **ptrs;
  k_req *req;
  int checks;                   /* a step may set its data-error word (rtc_op_checks_data) */
  CUdeviceptr derr;             /* then: one int32 word per step, zero between runs */
  int32_t *herr;                /* and their host copy after a run */
  float **clip_g;               /* train with clip_norm: the updates' gradients (device) */
  int64_t *clip_n;              /* and their lengths */
  void **params;                /* bounded dims: per step, its param's copy patched to the run's
                                   extents (NULL: the step reads the descriptor's) */
  int *live_at;                 /* per step: its entry in the live arrays, or -1 (rtc_live_upload) */
  int nlive;
  kc_live *hlive;               /* the call's values of the steps that have them, filled on the host */
  CUdeviceptr dlive;            /* and their device copy, which the kernels read */
  CUdeviceptr dskip;            /* train: one int32, set when a step met bad data (the updates skip) */
  rtc_graph_entry graphs[RTC_GRAPHS];   /* rtc_graph.c: the run captured, per set of extents */
  uint64_t graph_clock;         /* runs so far: which entry was used longest ago */
  int graph_off;                /* capture failed: the program runs step by step from then on */
} rtc_prog;

typedef struct { char name[64]; CUfunction fn; } rtc_fn_entry;

struct rtc_ctx {
  const rt_model_desc *d;
  struct rt_model *host;        /* host weights: init, load, save, lr, seed, step */
  const rtc_lib *cu;
  pthread_mutex_t mu;           /* every entry point holds it */
  CUdevice dev;
  CUcontext cuctx;
  int has_ctx;
  char device_name[128];
  CUstream stream;              /* every step is queued on it (and captured from it) */
  CUstream run;                 /* the call's copies, per-call values and graph launch: the model's
                                   stream, or a replaying _device call's own (rtc_enter resets it) */
  CUmodule mod;                 /* the model's generated kernels (desc->gpu_module) */
  CUmodule lib_mod;             /* the op library's kernels (desc->gpu_lib_module) */
  CUdeviceptr dstore;           /* the persistent tensors, laid out as the host's store (store_bytes) */
  int host_stale;               /* a train step changed the device copy since the last download */
  CUdeviceptr darena, dinputs, daux, scratch;
  size_t scratch_have;          /* bytes allocated at scratch */
  CUdeviceptr dext;             /* bounded dims: the run's extents (int64 x K_MAX_BDIMS), which every
                                   generated kernel takes after its tensors */
  int64_t *inoff;               /* per tensor: offset in dinputs, or -1 */
  size_t scratch_want;
  void **dptr;                  /* per tensor: the device pointer bound for the current run */
  rtc_prog prog[2];             /* predict, train */
  void *blas, *dnn;             /* rtc_blas_open / rtc_dnn_open handles, or NULL */
  int graphs;                   /* runs replay CUDA graphs (not with KILN_CUDA_GRAPH=0 or the profile) */
  int profile;                  /* $KILN_CUDA_PROFILE or $KILN_PROFILE: each step timed with events */
  rt_profile *prof;             /* $KILN_PROFILE: the trace and table (runtime/rt_profile.c), or NULL */
  int64_t call_ns;              /* with prof: the call's start, and the program whose steps it ran */
  int call_prog;
  int graph_prof;               /* KILN_CUDA_PROFILE=graph: each graph launch timed with events,
                                   and each call's wall time (rtc_graph.c) */
  int graph_prog;               /* the program whose graph the call launched: 0, 1; -1 none */
  double call_t0;               /* the call's start (seconds) */
  float graph_ms;               /* the GPU's time of the graph it launched */
  double gprof_gpu_ms[2], gprof_wall_ms[2];
  int64_t gprof_n[2];
  CUevent ev[2];
  double *prof_ms[2];           /* $KILN_CUDA_PROFILE=1: per program and step, GPU time summed over runs */
  int64_t *prof_n[2];
  rtc_fn_entry *fns;            /* library kernels found so far by name */
  int nfns, capfns;
  char err[RT_MODEL_ERR_LEN];
};

int rtc_cu_check(rtc_ctx *c, CUresult r, const char *what);
/* Kernel `name` of the model's module: 0, or 1 with a message. */
int rtc_function(rtc_ctx *c, CUmodule mod, const char *name, CUfunction *fn);
/* Launches fn over `threads` threads with nargs pointer arguments (a generated kernel). */
int rtc_launch_fn(rtc_ctx *c, CUfunction fn, int64_t threads, void **args, int nargs);

/* ---- rtc_graph.c: a program's run (`enqueue`, which queues it on c->stream) replayed from a
 * CUDA graph on stream s, captured at its second run at the same extents; a run that cannot be
 * captured runs step by step instead, as every run does with c->graphs off. rtc_graph_drop
 * forgets a program's graphs (the scratch moved, or the model goes). ---- */
typedef int (*rtc_enqueue_fn)(rtc_ctx *c, rtc_prog *r);
int rtc_graph_run(rtc_ctx *c, rtc_prog *r, CUstream s, rtc_enqueue_fn enqueue);
void rtc_graph_drop(rtc_ctx *c, rtc_prog *r);
int rtc_graph_wanted(void);   /* $KILN_CUDA_GRAPH is not 0 */
/* KILN_CUDA_PROFILE=graph: rtc_enter and rtc_leave time the call; at destroy the averages are
 * printed: the GPU's time per replayed graph against the call's wall time. */
void rtc_graph_prof_enter(rtc_ctx *c);
void rtc_graph_prof_leave(rtc_ctx *c, int rc);
void rtc_graph_prof_print(rtc_ctx *c);

/* ---- the ABI (rt_model_api's functions for a CUDA .so) ---- */
rt_model *rtc_model_create(const rt_model_desc *d, uint64_t seed);
void rtc_model_destroy(rt_model *m);
int rtc_model_load(rt_model *m, const char *path);
int rtc_model_save(const rt_model *m, const char *path);
int rtc_model_predict(rt_model *m, const void *const *inputs, void *const *outputs);
int rtc_model_train_step(rt_model *m, const void *const *inputs, float *loss);
int rtc_model_set_lr(rt_model *m, float lr);
float rtc_model_lr(const rt_model *m);
int rtc_model_save_state(const rt_model *m, const char *path);
int rtc_model_load_state(rt_model *m, const char *path);
int rtc_model_set_comm(rt_model *m, const kiln_comm *c);   /* refused: not on the GPU yet */
/* NAME_predict_device / NAME_train_step_device: inputs and outputs are device pointers; the
 * work queued on `stream` (a CUstream) is waited for before the inputs are read, and the
 * outputs are complete on return. loss stays a host pointer. */
int rtc_model_predict_device(rt_model *m, const void *const *inputs, void *const *outputs, void *stream);
int rtc_model_train_step_device(rt_model *m, const void *const *inputs, float *loss, void *stream);
/* Bounded dims: the same at the extents of the model's dims (NULL: the bounds); an extent out
 * of its range is refused before anything runs. A new set of extents re-prepares the steps
 * that keep state (cuDNN's descriptors and algorithms), and grows the scratch when one needs
 * more at those extents than at the bound: nothing else is allocated per call. */
int rtc_model_predict_at(rt_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs);
int rtc_model_train_step_at(rt_model *m, const int64_t *extents, const void *const *inputs, float *loss);
int rtc_model_predict_device_at(rt_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs, void *stream);
int rtc_model_train_step_device_at(rt_model *m, const int64_t *extents, const void *const *inputs, float *loss, void *stream);
const char *rtc_model_error(const rt_model *m);

#endif
