/* k_base.h — the types every layer shares: dtype, shape, OpReqType, and the kernel call.
 * Kernels are the lowest layer: the runtime, the IR and the generated code all include this,
 * and it includes nothing of theirs. Everything here is plain data so that a code generator
 * can lay it out as constants. */
#ifndef KILN_K_BASE_H
#define KILN_K_BASE_H

#ifdef __CUDACC_RTC__
/* NVRTC (the GPU back end pastes these headers into its CUDA C) has no libc headers. */
typedef unsigned long size_t;
typedef signed char int8_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INT64_C(c) c##LL
#define UINT64_C(c) c##ULL
#else
#include <stddef.h>
#include <stdint.h>
#endif

#define K_MAX_RANK 6

typedef enum { K_F32 = 0, K_I32 = 1 } k_dtype;

typedef struct {
  int32_t rank;               /* 0 = scalar */
  int64_t d[K_MAX_RANK];
} k_shape;

/* MXNet's OpReqType: how a kernel writes each output. */
typedef enum {
  kNullOp = 0,      /* write nothing: the output is not needed */
  kWriteTo = 1,     /* overwrite; the buffer does not alias an input */
  kWriteInplace = 2,/* overwrite; the buffer may alias the input named by the op's in-place option */
  kAddTo = 3        /* accumulate: out += result (gradients meeting at one tensor) */
} k_req;

typedef struct {
  void *data;                 /* NULL for a backward dependency the op did not declare */
  k_shape shape;
  k_dtype dtype;
} k_tensor;

/* A kernel's own memory that outlives a call: data derived from inputs that do not change
 * from call to call (a model's weights), made once and reused, such as convolution's weights
 * repacked into its blocked layout. The caller (the runtime, one per step of a predict
 * program) owns it: it sets `stable`, clears `key` whenever one of those inputs may have
 * changed (weights loaded, a train step), and frees `data` with free(). A kernel that finds
 * `key` equal to the key of what it would make reuses `data`; otherwise it may (re)allocate
 * `data` with malloc/aligned_alloc, fill it and set `key`. */
typedef struct k_cache {
  void *data;
  size_t bytes;               /* allocated size of data */
  uint64_t key;               /* what data holds, in the kernel's terms; 0: nothing valid */
  uint32_t stable;            /* bit j: in[j] is the same buffer, with the same contents, on
                                 every call until key is cleared */
} k_cache;

/* The collective of data-parallel training a kernel may call (batch_norm(sync=true), as torch's
 * SyncBatchNorm): allreduce sums buf[0, n) in place over the job's `world` ranks, each with
 * the same number of rows, and returns 0, or nonzero with a message in err. The runtime gives
 * it to the calls that need it (runtime/rt_comm.c). */
typedef struct k_sync {
  int (*allreduce)(void *ctx, float *buf, int64_t n, char *err, size_t errn);
  void *ctx;
  int world;
} k_sync;

/* One kernel invocation, forward or backward (the seeds' Forward/Backward contract).
 *
 * Forward:  in  = [args..., aux...]      out = [outputs...] (visible first, then hidden ones
 *           such as batch_norm's saved mean)    aux may be written in training mode.
 * Backward: in  = [out_grad[0..nout), in_data[0..nargs), out_data[0..nout)]
 *           out = [in_grad[0..nargs)]
 *           An entry the op's backward dependency does not declare has data == NULL (its
 *           shape is still set); an out_grad of a hidden output is always NULL.
 *           req[i] == kNullOp for an input that needs no gradient (labels, indices). */
typedef struct k_call {
  const k_tensor *in;
  int nin;
  k_tensor *out;
  int nout;
  const k_req *req;           /* one per out */
  const void *param;          /* the op's k_*_param struct (k_params.h), or NULL */
  void *temp;                 /* temp space, as the op's resource request asked */
  size_t temp_bytes;
  uint64_t seed;              /* random resource: Philox key and counter base */
  uint64_t counter;
  int is_train;               /* 1 inside train_step */
  char *err;                  /* where a kernel writes a message when it returns nonzero */
  size_t err_len;
  k_cache *cache;             /* NULL: nothing persists between calls */
  const struct k_epilogue *epi; /* convolution, fully_connected, matmul forward: an elementwise
                                   tail to run on each output block (k_epilogue.h), or NULL */
  const struct k_sync *sync;   /* batch_norm(sync=true) in train_step with a communication
                                   hook: the job's allreduce; NULL otherwise */
} k_call;

/* Returns 0 on success; nonzero (with a message in c->err) on a data error such as a label
 * or an embedding index out of range. Shapes are validated before a kernel is called. */
typedef int (*k_fn)(const k_call *c);

/* The workspace (bytes of c->temp) an op's forward and backward kernels need, from the shapes
 * of its arguments (forward order) and its param struct: k_<op>_temp_bytes, for the ops whose
 * row asks for temp space. The memory planner calls it through the op table. */
typedef size_t (*k_temp_fn)(const k_shape *args, const void *param);

/* Helpers kernels share. */
static inline int64_t k_shape_numel(const k_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->d[i];
  return n;
}

#endif
