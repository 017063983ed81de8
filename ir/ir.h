/* ir.h — the compiler's one IR and its services, as a map of what each file exports.
 * A Graph is a list of tensors (inputs, parameters, aux states, constants, values) and a
 * list of nodes in program order; every node names its op by index into the op table.
 * All IR memory comes from the graph's arena and is freed with the graph. */
#ifndef KILN_IR_H
#define KILN_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "k_base.h"
#include "k_params.h"
#include "k_dims.h"

/* ---- ir_arena.c: bump allocation for everything a compile creates ---- */
typedef struct ir_arena_chunk ir_arena_chunk;
typedef struct { ir_arena_chunk *head; size_t bytes; } ir_arena;
void *ir_alloc(ir_arena *a, size_t n);                 /* zeroed, 16-byte aligned */
char *ir_strdup(ir_arena *a, const char *s);
char *ir_strndup(ir_arena *a, const char *s, size_t n);
char *ir_strfmt(ir_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_arena_free(ir_arena *a);

/* Growable array of anything, stored in malloc'd memory (freed by ir_vec_free). */
typedef struct { void *data; int len, cap; size_t elem; } ir_vec;
void *ir_vec_push(ir_vec *v);                         /* returns the new zeroed slot */
void ir_vec_free(ir_vec *v);
#define IR_VEC_AT(v, T, i) (((T *)(v).data)[i])

/* The smallest magnitude a literal or attribute cannot have: FLT_MAX plus half an ulp, where
 * rounding to f32 reaches infinity. Anything below it is a finite f32 (the printer writes
 * FLT_MAX as 3.4028235e+38, which is above FLT_MAX but rounds to it). */
#define IR_F32_OVERFLOW 0x1.ffffffp127

/* ---- ir_diag.c: user diagnostics (file:line:col, source line, caret) ---- */
typedef struct { const char *file; int line, col; } ir_loc;   /* line 0: no position in file
                                                                   (an ONNX node names itself) */
typedef struct ir_source {            /* one registered source text, for caret lines */
  const char *name;
  const char *text;
  size_t len;
  struct ir_source *next;
} ir_source;
typedef struct {
  ir_source *sources;
  int errors;                         /* printed and counted: a repeat is neither */
  int failed;                         /* every error, repeats included: a step compares this
                                         before and after to know whether it failed */
  int max_errors;                     /* stop printing after this many (0 = 100) */
  FILE *out;                          /* stderr unless a test redirects it */
  uint64_t seen[128];                 /* hashes of the errors printed, to drop repeats */
  int nseen;
  bool dropped;                       /* the last error was a repeat: drop its notes too */
} ir_diag;
void ir_diag_init(ir_diag *d, FILE *out);
void ir_diag_add_source(ir_diag *d, const char *name, const char *text, size_t len);
void ir_error(ir_diag *d, ir_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ir_verror(ir_diag *d, ir_loc loc, const char *fmt, va_list ap);
void ir_note(ir_diag *d, ir_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ir_warning(ir_diag *d, ir_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ir_diag_free(ir_diag *d);
/* How a front end came to build something: inlined from def `def`, called at `call`, itself
 * inside the expansion `up` (NULL at the top). Like an ir_loc's file, it lives in the front
 * end's memory. */
typedef struct ir_expansion {
  const char *def;
  ir_loc call;
  const struct ir_expansion *up;
} ir_expansion;
/* After an error at something built inside a def: "note: in the expansion of def 'X' called
 * here" at each call of the chain, innermost first. */
void ir_note_expansion(ir_diag *d, const ir_expansion *e);
/* Length of the valid UTF-8 sequence of 2 to 4 bytes at s (n bytes left), else 0. */
int ir_utf8_len(const unsigned char *s, long n);
/* The closest of `cands` to `name` by edit distance, or NULL if none is close enough. */
const char *ir_suggest(const char *name, const char *const *cands, int n);
/* Internal compiler error: a bug in Kiln, not in the user's model. */
#define KILN_ICE(...) ir_ice(__FILE__, __LINE__, __VA_ARGS__)
_Noreturn void ir_ice(const char *file, int line, const char *fmt, ...);

/* ---- ir_shape.c: shapes and dtypes as the user sees them ---- */
const char *ir_dtype_name(k_dtype t);                  /* "f32", "i32" */
int ir_shape_str(const k_shape *s, char *buf, size_t n); /* "[64, 1, 28, 28]" */
int ir_type_str(k_dtype t, const k_shape *s, char *buf, size_t n); /* "f32[64, 10]" */
bool ir_shape_eq(const k_shape *a, const k_shape *b);
/* NumPy broadcasting of a and b into out; false if incompatible. */
bool ir_shape_broadcast(const k_shape *a, const k_shape *b, k_shape *out);
/* The size limits of every tensor, declared or inferred: each dimension, and the element
 * count, at most 2^40. Within them a tensor's element count and bytes cannot overflow an
 * int64 (the code that computes them relies on it); a product of several sizes (FLOPs) can,
 * and saturates (ir_sat_mul). */
#define IR_MAX_DIM (INT64_C(1) << 40)
#define IR_MAX_NUMEL (INT64_C(1) << 40)
/* The element count of s, or INT64_MAX where it would overflow. */
int64_t ir_shape_numel_sat(const k_shape *s);
/* 0 when s is within the limits; else 1, with the reason in why ("dimension 1099511627777
 * is larger than 2^40" or "1.2e+13 elements, more than 2^40"). */
int ir_shape_check(const k_shape *s, char *why, size_t n);
/* Saturating arithmetic on counts (non-negative): INT64_MAX stands for "too many". */
static inline int64_t ir_sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
static inline int64_t ir_sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

/* ---- the graph ---- */
typedef enum {
  IR_T_INPUT,        /* fed by the caller */
  IR_T_PARAM,        /* learnable, updated by the optimizer */
  IR_T_AUX,          /* saved with the weights but never trained: state an op updates itself
                        (batch_norm's moving statistics), or, with `fixed`, a `const` tensor */
  IR_T_CONST,        /* scalar constant from the source (0.5 * x), or a head gradient of 1 */
  IR_T_VALUE,        /* produced by a node (forward values and gradients) */
  IR_T_STATE         /* optimizer state (momentum, Adam's moments): persistent, starts at 0 */
} ir_tensor_kind;

/* Initializers (ir_init.c holds their registry). */
typedef struct { k_init_kind kind; float a, b; } ir_init;  /* kinds: k_params.h */  /* a,b: value | low,high | mean,std */

typedef struct {
  const char *name;
  ir_tensor_kind kind;
  k_dtype dtype;
  k_shape shape;
  bool shape_known;
  bool declared;       /* the user wrote its type; inference must agree */
  int producer;        /* node index, or -1 */
  int out_index;       /* which output of the producer */
  ir_init init;        /* PARAM and AUX */
  bool fixed;          /* AUX declared `const`: data the model reads and nothing writes (no
                          gradient, no optimizer, no op's update), saved and loaded with the
                          weights; the front ends keep it out of aux slots */
  bool has_init;       /* init is set: by the user, or by the first op that reads it */
  const void *data;    /* PARAM, AUX: initial values (dtype, shape, dense) that replace the
                          initializer, e.g. an imported model's weights; in the arena of the
                          graph that set it, which clones share, so it must outlive them */
  float value;         /* CONST */
  int32_t block;       /* VALUE: 0, or the width V of the channel-blocked storage
                          passes/pass_layout.c chose ([N][ceil(C / V)][H][W][V]) */
  ir_loc loc;
} ir_tensor;

/* What a node does. Passes add the last three kinds; the front end makes only IR_N_OP. */
typedef enum {
  IR_N_OP,           /* an op's forward kernel */
  IR_N_BACKWARD,     /* _backward_<op>: in = [out_grad[nout], in_data[nargs], out_data[nout]],
                        -1 where the op's backward dependencies leave a slot out;
                        out = [in_grad[nargs]], -1 where no gradient is needed */
  IR_N_UPDATE,       /* optimizer step: in = [param, grad, state...]; no outputs: it updates
                        the parameter and its state in place (op = k_optim_kind) */
  IR_N_FUSED         /* a group of elementwise nodes run as one loop: sub[] in order; in/out
                        are the group's external tensors; values used only inside the group
                        get no buffer */
} ir_node_kind;

typedef struct ir_node {
  ir_node_kind kind;
  int op;              /* index into ir_ops (OP, BACKWARD), k_optim_kind (UPDATE), -1 (FUSED) */
  const char *name;    /* the statement target, with def prefixes; "_backward_<name>" etc. */
  int nin, nout;
  int *in, *out;       /* tensor indices; in = [args..., aux...] for OP */
  void *param;         /* the op's k_*_param struct, param_size bytes, or NULL */
  ir_loc loc;
  const ir_expansion *from;  /* the def calls that inlined it, or NULL (see ir_diag.c) */
  int64_t flops;
  k_req *req;          /* per output; NULL means kWriteTo for every output. A gradient that
                          several backward nodes produce is written by the first (kWriteTo)
                          and accumulated by the others (kAddTo) */
  int *inplace;        /* per output: the input slot whose buffer it reuses, or -1; NULL = none */
  k_shape *slot_shape; /* BACKWARD: the shape of every in slot then every out slot, absent
                          ones included, recorded when the node is derived: kernels read the
                          shapes of slots that pruning later leaves out */
  k_shape *view_shape; /* OP: the shapes its kernel sees, every in slot then every out slot,
                          where they are not its tensors' (a channel scale on blocked values,
                          passes/pass_layout.c); NULL: the tensors' shapes */
  struct ir_node *sub; /* FUSED: the member nodes, in execution order */
  int nsub;
  const struct k_epilogue *epi;  /* FUSED by the epilogue pass: sub[0] is a heavy op (op and param
                          are its) writing out[0], the other members its elementwise tail, run
                          as this descriptor (kernels/k_epilogue.h); in = sub[0]'s inputs, then
                          the tail's. NULL for an elementwise group */
} ir_node;

/* Optimizers (ir_optim.c holds their registry). */
typedef struct {
  k_optim_kind kind;                  /* kinds: k_params.h */
  float lr;
  k_sgd_param sgd;
  k_adam_param adam;
  k_schedule sched;                   /* kind K_SCHED_NONE: a constant lr */
  float clip_norm;                    /* > 0: gradients clipped to this global L2 norm first */
  uint32_t wd_exclude;                /* IR_WDX_* bits: the parameters weight decay skips */
} ir_optimizer;

/* ---- the memory plan (passes/pass_plan.c makes it; executors and code generators read it) ---- */
typedef enum {
  IR_MEM_NONE,       /* needs no storage: unused, or internal to a fused group */
  IR_MEM_ARENA,      /* an interval of the planned arena */
  IR_MEM_INPUT,      /* the caller's input buffer */
  IR_MEM_PERSIST     /* model state: parameters, aux states, optimizer state, constants */
} ir_mem_class;
typedef struct {
  ir_mem_class cls;
  int64_t offset;      /* ARENA: byte offset, 64-byte aligned */
  int64_t bytes;
  int first, last;     /* node positions of the first write and the last read (lifetime) */
  int share;           /* the tensor whose buffer this one reuses in place, or -1 */
  int within;          /* a chain root (share -1) placed inside a concat's output, the piece
                          it is (pass_plan_concat): that output, or -1 */
  int64_t within_at;   /* and the byte it starts at there (in the output's first sample) */
  int64_t sample_bytes;  /* > 0: the tensor's samples (its first axis) lie this many bytes
                            apart, its place inside a concat of N > 1 samples (a concat along
                            axis 1 at batch N holds a sample of every piece in turn); 0: dense */
} ir_buffer;
typedef struct {
  ir_buffer *buf;      /* one per tensor */
  int64_t *temp_offset, *temp_bytes;  /* one per node: its workspace in the arena */
  int32_t *samples;    /* one per node: N when the executors run it once per sample (a slot's
                          tensor has sample_bytes), each call on one sample of every slot that
                          ir_plan_slot_stride advances; 0: one call */
  int64_t arena_bytes;                /* the planned arena */
  int64_t naive_bytes;                /* every ARENA tensor and workspace in its own buffer */
} ir_plan;

typedef enum { IR_MODE_NONE, IR_MODE_PREDICT, IR_MODE_TRAIN } ir_mode;

/* A bounded dim (`dim batch = 1..64`, `-D batch=1..64`): the graph is lowered at hi, and
 * every extent in [lo, hi] is served by the same compiled code (kernels/k_dims.h). probe is
 * the extent of the dim in the probe graphs (ir_dims.c): hi - 1, or hi + 1 where that is
 * below 2 or lo. */
typedef struct { const char *name; int64_t lo, hi, probe; } ir_bdim;

typedef struct ir_graph {
  ir_arena arena;
  const char *name;
  ir_mode mode;        /* set by the pipeline: forward nodes run in training mode in TRAIN */
  ir_plan *plan;       /* set by memory planning */
  ir_vec tensors;      /* ir_tensor */
  ir_vec nodes;        /* ir_node */
  ir_vec outputs;      /* int: tensor indices, in `output` order */
  int loss;            /* tensor index of the train target, or -1 */
  int shared_tensors;  /* a copy (ir_graph_clone): the tensors it was copied with, which keep
                          their indices in every graph copied from the same one (predict and
                          train); the passes add theirs after them. 0 for a graph never copied */
  bool has_train;
  ir_optimizer optim;
  ir_loc train_loc;
  int nbdims;          /* the bounded dims, in declaration order (K_MAX_BDIMS at most) */
  ir_bdim bdims[K_MAX_BDIMS];
  struct ir_graph **probes;  /* set by the front end when nbdims > 0: ir_dims_nprobes graphs
                          lowered like this one at other extents (ir_dims.c says which), from
                          which the sizes that follow the dims are fitted. Owned; a copy
                          (ir_graph_clone) has none */
} ir_graph;

/* ---- ir_dims.c: bounded dims ---- */
/* Probe graph p (0 <= p < ir_dims_nprobes) holds dim p at its probe extent and the others at
 * their bound; with two dims or more, one more holds every dim at its probe. */
static inline int ir_dims_nprobes(int nbdims) { return nbdims + (nbdims >= 2); }
/* The extents of every bounded dim in probe p (p == -1: the bound). */
void ir_dims_probe_extents(const ir_graph *g, int p, int64_t *extent);
/* Fits a size that is v0 at the bound and vp[p] in each probe graph as a k_dimval
 * (kernels/k_dims.h). 0, or 1 when no a * prod(dims) + b takes those values. */
int ir_dims_fit(const ir_graph *g, int64_t v0, const int64_t *vp, k_dimval *out);
/* "batch=3" or "batch=3, seq=17" for messages. */
void ir_dims_str(const ir_graph *g, const int64_t *extent, char *buf, size_t n);

/* ---- ir_graph.c ---- */
ir_graph *ir_graph_new(const char *name);
void ir_graph_free(ir_graph *g);       /* its plan too */
void ir_plan_free(ir_plan *p);
/* For a node the plan runs per sample (plan->samples): the bytes between the samples of slot j
 * (in[] then out[]), or 0 for a slot every call reads whole (a weight). A value or input whose
 * first axis is the node's N is split: at its sample_bytes when it has them, else dense (its
 * bytes / N). The ops the plan splits (convolution and pooling forward, concat along axis >= 1)
 * treat samples independently. */
int64_t ir_plan_slot_stride(const ir_graph *g, const ir_node *n, int j);
/* The bytes tensor t's storage in plan p spans from its offset: its size, or where its samples
 * lie apart, up to the end of the last one. */
int64_t ir_plan_span(const ir_graph *g, const ir_plan *p, int t);
int ir_graph_add_tensor(ir_graph *g, const char *name, ir_tensor_kind kind, ir_loc loc);
int ir_graph_add_node(ir_graph *g, int op, const char *name, int nin, const int *in, ir_loc loc);
int ir_graph_find_tensor(const ir_graph *g, const char *name);   /* -1 if absent */
/* A node with explicit outputs (-1 allowed); sets the producer of each output it is first
 * to write. Arrays are copied into the graph's arena. Used by passes. */
int ir_graph_add_node_raw(ir_graph *g, ir_node_kind kind, int op, const char *name, int nin,
                          const int *in, int nout, const int *out, ir_loc loc);
/* A deep copy: passes for predict and for train each start from a copy of the lowered
 * graph, so parameters keep the same tensor indices in both. */
ir_graph *ir_graph_clone(const ir_graph *g);
/* Replaces the node list (passes that rewrite it build a new one) and recomputes producers. */
void ir_graph_set_nodes(ir_graph *g, ir_vec *nodes);
/* Recomputes every tensor's producer from the node list, after a pass rewired nodes in place. */
void ir_graph_claim(ir_graph *g);
/* Output i's OpReqType (kWriteTo when the node has no req array). */
static inline k_req ir_node_req(const ir_node *n, int i) { return n->req ? n->req[i] : kWriteTo; }
const char *ir_node_kind_name(const ir_node *n);
/* The INPUT tensors the graph's nodes read (fused members included), in declaration order:
 * the inputs its entry point takes. Writes at most max indices to idx (idx may be NULL) and
 * returns how many there are, or -1 without memory. */
int ir_graph_inputs(const ir_graph *g, int *idx, int max);
/* need[t] (one per tensor) marks the roots on entry; on return also every tensor a node that
 * writes a marked tensor reads, transitively: one walk back over the nodes, which are in
 * topological order. Entry-point selection and the API's recording of predict use it. */
void ir_graph_mark_needed(const ir_graph *g, bool *need);
size_t ir_node_param_size(const ir_node *n);   /* the bytes n->param holds (an update's: k_sgd_param or k_adam_param) */
/* Whether node n overwrites the tensor in its input slot j (beyond its outputs): an update
 * its parameter and state, a forward node of a TRAIN graph its aux states (batch_norm's
 * moving statistics). Outputs written in place of an input are n->inplace, not this. */
bool ir_node_mutates_input(const ir_graph *g, const ir_node *n, int j);   /* "relu", "_backward_relu", "_sgd_update", "_fused" */
static inline ir_tensor *ir_tensor_at(const ir_graph *g, int i) { return &IR_VEC_AT(g->tensors, ir_tensor, i); }
static inline ir_node *ir_node_at(const ir_graph *g, int i) { return &IR_VEC_AT(g->nodes, ir_node, i); }
static inline int ir_ntensors(const ir_graph *g) { return g->tensors.len; }
static inline int ir_nnodes(const ir_graph *g) { return g->nodes.len; }
int64_t ir_tensor_numel(const ir_tensor *t);
/* The bytes its storage takes: numel * 4, or with channels rounded up to V when blocked. */
int64_t ir_tensor_bytes(const ir_tensor *t);
/* Checks the graph's invariants (indices in range, single producer, inputs before use);
 * returns 0 or prints what is broken to stderr and returns 1. */
int ir_verify(const ir_graph *g);

/* ---- ir_infer.c: the shape/type inference pass driver ---- */
/* Infers every node's output shapes and the shapes of parameters and aux states, checks
 * declared shapes, normalises each node's param struct, and computes FLOPs. Errors go to
 * d as "file:line:col: error: <op>: ..." with the shapes involved. Returns the error count. */
int ir_infer_shapes(ir_graph *g, ir_diag *d);
/* The same for node i alone (its inputs inferred already): a front end that needs shapes
 * while it builds (the ONNX importer folds Shape) infers each node as it adds it. 0 or 1. */
int ir_infer_one(ir_graph *g, ir_diag *d, int i);

/* ---- ir_print.c: the graph as .kiln text that parses back to the same graph ---- */
void ir_print(const ir_graph *g, FILE *out);
/* ir_print of a lowered graph with bounded dims (nbdims, probes): `dim batch = 1..8` first,
 * and every size that follows them (a declared axis, an item of an int attribute) written over
 * them, `f32[batch, 3]`, `shape=(batch * 16, 4)`, so that the text lowers to this graph's
 * counterpart at every extent (kiln import). A declared axis that is not a dim's name nor a
 * number (2 * batch) has no .kiln spelling: each is reported in d, and their count returned.
 * Without bounded dims: ir_print, and 0. */
int ir_print_dims(const ir_graph *g, FILE *out, ir_diag *d);
/* The `kiln check` table: node, op, output shapes, parameters, their count, FLOPs. */
void ir_print_summary(const ir_graph *g, FILE *out);

#endif
