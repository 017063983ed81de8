/* ops.h — the operator registry: MXNet's OperatorProperty as one C table.
 * ops.def holds one row per op (names, attribute schema, inference, backward dependencies,
 * in-place options, resources, fusion class, scalar function) for each op of the kernels' op
 * list (kernels/k_ops.def), which this header makes the IR_OP_* enum from; it also declares
 * what the rows point at. Adding an op means its line in the op list, its row, its kernels
 * and its tests. */
#ifndef KILN_IR_OPS_H
#define KILN_IR_OPS_H

#include "ir.h"
#include "kernels.h"

/* ---- attribute schemas (ir_attr.c): a field of an op's param struct per attribute ---- */
typedef enum { IR_AT_INT, IR_AT_FLOAT, IR_AT_BOOL, IR_AT_INTS, IR_AT_ENUM } ir_atype;
typedef struct {
  const char *name;
  ir_atype type;
  size_t offset, size;          /* of the field in the param struct */
  bool required;
  double dflt;                  /* INT / FLOAT / BOOL / ENUM index; INTS default to n = 0 */
  const char *const *choices;   /* ENUM: accepted strings, NULL-terminated */
} ir_attr_def;

#define IR_ATTR(st, field, nm, ty, req, d) \
  {nm, ty, offsetof(st, field), sizeof(((st *)0)->field), req, d, NULL}
#define IR_ATTR_ENUM(st, field, nm, req, d, ...) \
  {nm, IR_AT_ENUM, offsetof(st, field), sizeof(((st *)0)->field), req, d, \
   (const char *const[]){__VA_ARGS__, NULL}}

/* ---- shape and type inference (op_infer.c) ---- */
typedef struct ir_infer {
  const struct ir_opdef *op;
  void *param;                  /* the node's param struct: inference normalises it */
  int nin, nargs;               /* in = [args..., aux...] */
  k_shape *in;
  k_dtype *in_dt;
  bool *in_known;               /* false for a parameter whose shape is still to infer */
  const char *const *in_name;
  int nout;
  k_shape *out;
  k_dtype *out_dt;
  int64_t flops;                /* set by inference: multiply-adds count as 2 */
  char msg[512];                /* the error, when inference returns nonzero */
} ir_infer;
typedef int (*ir_infer_fn)(ir_infer *x);
int ir_infer_fail(ir_infer *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets or checks the shape of learnable/aux input i (MXNet-style parameter inference). */
int ir_infer_param(ir_infer *x, int i, k_shape want);

/* Backward dependencies (DeclareBackwardDependency): bit i of each mask. */
typedef struct { uint32_t out_grad, in_data, out_data; } ir_bwd_deps;

typedef enum {
  IR_FUSE_NONE,        /* a kernel of its own (GEMM, conv, reductions...) */
  IR_FUSE_ELEMWISE,    /* one output element from the same element of each input */
  IR_FUSE_BROADCAST    /* elementwise after NumPy broadcasting of its inputs */
} ir_fusion;

/* Resource requests (ResourceRequest): temp space and the random generator. */
enum { IR_RES_TEMP = 1, IR_RES_RANDOM = 2 };

typedef struct ir_opdef {
  const char *name;
  const char *const *args;      /* argument names, NULL-terminated */
  const char *const *aux;       /* aux-state names, NULL-terminated, or NULL */
  const char *const *outs;      /* output names: visible first, then hidden */
  int nvisible;                 /* NumVisibleOutputs */
  bool variadic;                /* concat: one arg name, repeated */
  uint32_t learnable;           /* args auto-created when omitted (bit i = arg i) */
  uint32_t optional;            /* args that may be absent (bias when no_bias) */
  uint32_t i32_args;            /* labels and indices: i32, and no gradient */
  const ir_attr_def *attrs;     /* schema, terminated by a NULL name */
  size_t param_size;            /* sizeof the op's k_*_param, 0 if none */
  ir_infer_fn infer;
  ir_bwd_deps deps;
  uint32_t fwd_inplace;         /* args whose buffer output 0 may reuse (ForwardInplaceOption) */
  uint32_t bwd_inplace;         /* out_grads whose buffer in_grad 0 may reuse */
  int resources;                /* IR_RES_* */
  ir_fusion fusion;
  bool monotone;                /* unary, non-decreasing over the floats, NaN exactly from NaN:
                                   it commutes with max, and passes/pass_simplify.c moves it
                                   behind a max pooling (set where that gains: not on relu,
                                   free in a convolution's store) */
  const char *scalar;           /* k_scalar.h function stem (k_sf_<stem>), or NULL */
  k_fn forward, backward;       /* the CPU kernels, k_<op>_forward / k_<op>_backward */
  k_temp_fn temp;               /* IR_RES_TEMP: the workspace size, k_<op>_temp_bytes */
  const char *doc;              /* the PyTorch function it matches */
} ir_opdef;

/* The ops and their order come from the kernels' op list (kernels/k_ops.def); ops.def gives
 * each its row, and op_table.c fails to build unless every op has exactly one. */
#define K_OP(id) IR_OP_##id,
#define K_UNARY K_OP
#define K_BINARY K_OP
typedef enum {
#include "k_ops.def"
  IR_OP_COUNT
} ir_op_id;
#undef K_OP
#undef K_UNARY
#undef K_BINARY

extern const ir_opdef ir_ops[IR_OP_COUNT];
int ir_op_lookup(const char *name);                   /* -1 if not an op */
const char *ir_op_suggest(const char *name);          /* the op a misspelt name is closest to, or NULL */
int ir_op_nargs(const ir_opdef *op);
int ir_op_naux(const ir_opdef *op);
int ir_op_nouts(const ir_opdef *op);
int ir_op_arg_index(const ir_opdef *op, const char *name);

/* ---- op_infer.c: the inference functions the rows point at ---- */
#define IR_INFER_FNS(X) X(unary) X(binary) X(reduce) X(reshape) X(flatten) X(transpose) \
  X(expand_dims) X(squeeze) X(broadcast_to) X(slice) X(concat) X(matmul) X(fully_connected) \
  X(convolution) X(pooling) X(batch_norm) X(layer_norm) X(dropout) X(softmax) \
  X(embedding) X(softmax_cross_entropy) X(pad) X(norm)
#define IR_DECLARE_INFER(n) int ir_infer_##n(ir_infer *x);
IR_INFER_FNS(IR_DECLARE_INFER)
#undef IR_DECLARE_INFER

/* ---- ir_attr.c: attribute values from the front end into param structs ---- */
typedef enum { IR_AV_NUM, IR_AV_STR, IR_AV_BOOL, IR_AV_TUPLE } ir_aval_kind;
typedef struct ir_aval {
  ir_aval_kind kind;
  double num;
  bool is_int;
  const char *str;
  int n;                        /* TUPLE */
  struct ir_aval *items;
  ir_loc loc;
} ir_aval;
/* Stores v into the field `a` describes; on a type or range error writes msg, returns 1. */
int ir_attr_set(const ir_attr_def *a, void *param, const ir_aval *v, char *msg, size_t n);
void ir_attr_defaults(const ir_attr_def *attrs, void *param);
const ir_attr_def *ir_attr_find(const ir_attr_def *attrs, const char *name);
/* Prints `name=value` for every attribute, as the source language writes it. */
void ir_attr_print(const ir_attr_def *attrs, const void *param, FILE *out);
/* The same, but each item of an int attribute (an INT, or one of an INTS tuple) is written by
 * item(ctx, a, i, out): ir_print_dims writes a size that follows bounded dims over them. */
typedef void ir_attr_item_fn(void *ctx, const ir_attr_def *a, int i, FILE *out);
void ir_attr_print_with(const ir_attr_def *attrs, const void *param, FILE *out, ir_attr_item_fn *item, void *ctx);
/* The items of an int attribute: 1 for an INT, the tuple's length for an INTS, 0 for any
 * other; and item i of one. Bounded dims fit each item as a size (fe_dims.c, ir_print.c). */
int ir_attr_int_count(const ir_attr_def *a, const void *param);
int64_t ir_attr_int_item(const ir_attr_def *a, const void *param, int i);
const char *ir_atype_name(ir_atype t);
void ir_print_float(FILE *out, double v);   /* shortest text that reads back as the same float */

/* ---- ir_optim.c / ir_init.c: the optimizer and initializer registries ---- */
typedef struct {
  const char *name;
  const ir_attr_def *attrs;     /* fields of ir_optimizer */
  const char *doc;
} ir_optim_def;
extern const ir_optim_def ir_optims[K_OPT_COUNT];
typedef struct {
  const char *name;
  const ir_attr_def *attrs;     /* fields of ir_init */
  const char *doc;
} ir_init_def;
extern const ir_init_def ir_inits[K_INIT_COUNT];
typedef struct {
  const char *name;
  const ir_attr_def *attrs;     /* fields of k_schedule */
  const char *doc;
} ir_sched_def;
extern const ir_sched_def ir_scheds[K_SCHED_COUNT];
int ir_sched_lookup(const char *name);               /* -1 if none (K_SCHED_NONE has no name to write) */
const char *ir_sched_check(const k_schedule *s);     /* NULL, or what is wrong with its values */
int ir_optim_lookup(const char *name);
/* `wd_exclude=bias,norm`: kinds of parameter the weight decay skips, one bit each (the bit's
 * index is its name's in ir_wdx_names); ir_optim.c says which parameters each kind holds. */
enum { IR_WDX_BIAS = 1u << 0, IR_WDX_NORM = 1u << 1, IR_WDX_COUNT = 2 };
extern const char *const ir_wdx_names[IR_WDX_COUNT];
uint32_t ir_wdx_lookup(const char *name);            /* its bit, or 0 */
uint32_t ir_wdx_kinds(const ir_graph *g, int param); /* the kinds parameter tensor `param` is of */
int ir_init_lookup(const char *name);
/* The initializer an op gives its learnable arg or aux state when the user names none
 * (PyTorch's layer defaults); fan_in comes from the inferred shapes. */
ir_init ir_init_default(const ir_graph *g, const ir_node *n, int input);

#endif
