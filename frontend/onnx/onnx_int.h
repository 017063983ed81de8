/* onnx_int.h — what the files of the ONNX front end share: the import context, constants
 * (tensors known at import time: initializers and folded shape arithmetic), the value an
 * ONNX name stands for, and the op table's row type. Private to frontend/onnx. */
#ifndef KILN_ONNX_INT_H
#define KILN_ONNX_INT_H

#include "fe_lower.h"
#include "onnx.h"
#include "onnx/onnx.pb-c.h"

#define ONNX_MIN_OPSET 9
#define ONNX_MAX_OPSET 17
/* A dimension or a constant larger than this is a corrupt file, not a model. */
#define ONNX_MAX_DIM (INT64_C(1) << 32)
#define ONNX_MAX_ELEMS (INT64_C(1) << 31)
/* Folded constants are shape arithmetic and small tensors; a damaged shape must not make
 * ConstantOfShape fill gigabytes. */
#define ONNX_MAX_FOLD_ELEMS (INT64_C(1) << 24)

/* A tensor known at import: float values in f, or integer values (every ONNX integer and
 * bool type, widened) in i. */
typedef struct {
  bool is_int;
  k_shape shape;
  int64_t n;
  float *f;
  int64_t *i;
  const char *onnx_name;       /* its ONNX name, for the parameter it may become */
  const char *origin;          /* the initializer it holds (its ONNX name), also reshaped,
                                  sliced, cast or scaled at import; NULL for a Constant's value
                                  and anything else computed at import: never trained */
  int tensor;                  /* the Kiln tensor it became when a node read it, or -1 */
} onnx_const;

/* A Kiln tensor made from a constant: onnx_weights.c decides whether it is trained. */
typedef struct {
  int tensor;
  const char *origin;          /* onnx_const's */
} onnx_weight;

/* What an ONNX value name stands for: a Kiln tensor computed at run time, or a constant. */
typedef struct {
  int tensor;                  /* -1 for a constant */
  onnx_const *k;
  int npad;                    /* > 0: a zero Pad of tensor's spatial axes, still to be folded
                                  into the convolution or average pool that reads it; any
                                  other reader makes it a pad node (onnx_tensor) */
  int64_t pad_begin[K_MAX_RANK], pad_end[K_MAX_RANK];   /* each spatial axis's start and end */
  const char *pad_name;        /* the Pad's output, which names that node */
} onnx_value;

/* A row of the op table: the handler gets the node and the row's Kiln op (or -1). */
typedef struct onnx_ctx onnx_ctx;
typedef int (*onnx_fn)(onnx_ctx *c, const Onnx__NodeProto *n, int kop);
typedef struct {
  const char *type;
  onnx_fn fn;
  int kop;
} onnx_opdef;
const onnx_opdef *onnx_op_lookup(const char *type);

/* A node of the file, its row of the op table and its location in messages. */
typedef struct {
  const Onnx__NodeProto *n;
  const onnx_opdef *op;
  ir_loc loc;
} onnx_node;

/* The decoded file, which every import of it shares: the import at the bounds and, for a -D
 * range, those at other extents (onnx_dims.c). It lives in the arena of the first import's
 * graph, the bound's, which owns the others as its probes or drops them first. */
typedef struct {
  const char *path;
  const Onnx__ModelProto *m;
  int64_t opset;
  /* found by the first import (onnx_import.c): */
  onnx_const **inits;          /* the initializers as constants */
  onnx_node *order;            /* the nodes in topological order */
  fe_map read;                 /* ONNX names some node or the graph's outputs read -> (void *)1 */
} onnx_file;

struct onnx_ctx {
  ir_graph *g;
  onnx_file *file;
  ir_diag *d;
  const onnx_options *o;
  const char *path, *dir;      /* the model and its folder (external data lives beside it) */
  int64_t opset;
  fe_map values;               /* ONNX name -> onnx_value */
  fe_map kiln_names;           /* Kiln names handed out -> (void *)1 */
  fe_map suffix;               /* base name -> the last suffix handed out */
  ir_vec *map;                 /* onnx_name_pair, or NULL */
  ir_vec weights;              /* onnx_weight: every tensor made from a constant */
  uint64_t defs_used;          /* bit i: -D number i named a symbolic dimension */
  ir_loc loc;                  /* the node being imported, for messages */
  const Onnx__NodeProto *node;
};

/* ---- onnx_import.c ---- */
/* One import of the decoded file into g (with the options' -D values; a range's upper bound):
 * 0, or 1 after reporting to d. map as for onnx_import. */
int onnx_build(onnx_file *f, ir_graph *g, const onnx_options *o, ir_diag *d, ir_vec *map);

/* ---- onnx_dims.c ---- */
/* g, imported from f at the bounds of the options' -D ranges, with them as its bounded dims,
 * probes imported and every extent checked (fe_dims_check); g when there are none; NULL (g
 * freed) after reporting an error. */
ir_graph *onnx_bound(onnx_file *f, ir_graph *g, const onnx_options *o, ir_diag *d);

/* ---- onnx_read.c ---- */
/* The file decoded (NULL after an error naming the file), everything the decoder allocates
 * in `arena` (the graph's): it is freed with the graph, never with
 * onnx__model_proto__free_unpacked, and onnx_read_tensor keeps raw float data where they are. */
Onnx__ModelProto *onnx_read_model(const char *path, ir_arena *arena, ir_diag *d);
/* The default domain's opset, checked to be 9..17, and every other domain refused; -1 after an error. */
int64_t onnx_model_opset(const Onnx__ModelProto *m, const char *path, ir_diag *d);
/* A TensorProto (an initializer, a Constant's value) into a constant in the graph's arena. */
onnx_const *onnx_read_tensor(onnx_ctx *c, const Onnx__TensorProto *t);

/* ---- onnx_names.c ---- */
/* The valid Kiln name an ONNX name becomes before it is made unique. */
const char *onnx_clean_name(onnx_ctx *c, const char *onnx_name);
/* A valid, unique Kiln name for an ONNX name, recorded in the map when it differs. */
const char *onnx_kiln_name(onnx_ctx *c, const char *onnx_name);

/* ---- onnx_import.c: helpers the handlers share ---- */
int onnx_fail(onnx_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Input i of the node, or NULL when it is absent (past the end, or an empty name). */
onnx_value *onnx_input(onnx_ctx *c, const Onnx__NodeProto *n, int i);
/* Input i as a constant, or NULL with an error saying the importer needs it constant. */
onnx_const *onnx_input_const(onnx_ctx *c, const Onnx__NodeProto *n, int i, const char *what);
/* The Kiln tensor of a value: a constant becomes a scalar CONST or a parameter of the
 * given kind (IR_T_PARAM, IR_T_AUX) holding its data, a pending Pad a pad node; -1 after an
 * error. */
int onnx_tensor(onnx_ctx *c, onnx_value *v, ir_tensor_kind kind);
int onnx_scalar(onnx_ctx *c, float value);                       /* a scalar CONST tensor */
/* s = its shape (a pending Pad's: the padded one); the tensor, NULL for a constant. */
const ir_tensor *onnx_shape_of(onnx_ctx *c, onnx_value *v, k_shape *s);
/* F.pad's tuple (pairs from the last axis back) from ONNX pads [begins..., ends...] of rank r. */
void onnx_pad_tuple(k_pads *dst, const int64_t *pads, int r);
/* A Kiln node of op kop reading ins, named after the node's first output, shapes inferred,
 * output 0 bound to it; its index, or -1 after an error. */
int onnx_emit(onnx_ctx *c, const Onnx__NodeProto *n, int kop, const int *ins, int nin);
/* The same, named after onnx_name, binding output 0 to `bind` (when not NULL): the steps of
 * an ONNX op that becomes several Kiln nodes. */
int onnx_emit_as(onnx_ctx *c, const char *onnx_name, const char *bind, int kop, const int *ins, int nin);
void onnx_bind(onnx_ctx *c, const char *name, int tensor, onnx_const *k);
onnx_const *onnx_const_new(onnx_ctx *c, bool is_int, const k_shape *s);   /* zeroed; NULL if too big */
/* A float constant over f, memory of the graph's arena (not copied); NULL if too big. */
onnx_const *onnx_const_over(onnx_ctx *c, const k_shape *s, float *f);
/* Attributes; the default when absent. */
const Onnx__AttributeProto *onnx_attr(const Onnx__NodeProto *n, const char *name);
int64_t onnx_attr_int(const Onnx__NodeProto *n, const char *name, int64_t dflt);
float onnx_attr_float(const Onnx__NodeProto *n, const char *name, float dflt);
/* An INTS attribute into v (at most max); its length, 0 when absent, -1 when longer than max. */
int onnx_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *v, int max);
/* An attribute the importer does not implement, set to a value other than its default. */
int onnx_unsupported_attr(onnx_ctx *c, const char *name, const char *why);

/* ---- onnx_build.c: the steps of an ONNX op built from several Kiln nodes ---- */
/* Input i as a Kiln tensor (a constant becomes a tensor of `kind`); -1 after an error. */
int onnx_in(onnx_ctx *c, const Onnx__NodeProto *n, int i, ir_tensor_kind kind);
void *onnx_param(onnx_ctx *c, int node);
void onnx_set_ints(k_ints *dst, const int64_t *v, int n);
/* A step of kop reading in: bound to and named after the ONNX output `bind`, or (NULL) named
 * after the node's first named output and numbered; the node's index, or -1. onnx_step binds
 * the node's first output when `last`. */
int onnx_step_to(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int kop, const int *in, int nin);
int onnx_step(onnx_ctx *c, const Onnx__NodeProto *n, bool last, int kop, const int *in, int nin);
/* The step's output tensor once its shapes are inferred (the next step reads them), or -1. */
int onnx_step_done(onnx_ctx *c, int k);
const k_shape *onnx_tshape(onnx_ctx *c, int t);
/* Whether the graph reads output i of n. */
bool onnx_out_read(onnx_ctx *c, const Onnx__NodeProto *n, int i);
/* Builders: one step each (none where it would change nothing: a reshape to the same shape,
 * an identity transpose, a whole slice, a concat of one), its output tensor or -1. The input
 * tensors may be -1 (an earlier error): the builder then returns -1. */
int onnx_b_op(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int kop, int a, int b);  /* b < 0: unary */
int onnx_b_reshape(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, const k_shape *s);
int onnx_b_transpose(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, const int64_t *perm);
int onnx_b_slice(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, int axis, int64_t begin, int64_t end);
int onnx_b_matmul(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int a, int b, bool ta, bool tb);
/* fully_connected on the last axis (flatten = 0); bias -1 for none. */
int onnx_b_fc(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int x, int w, int bias);
int onnx_b_concat(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, const int *in, int nin, int axis);
int onnx_b_reduce(onnx_ctx *c, const Onnx__NodeProto *n, const char *bind, int kop, int x, const int64_t *axes, int na,
                  bool keepdims);
/* A constant made at import (NULL: too large, an error) as a tensor. */
int onnx_b_const(onnx_ctx *c, onnx_const *k);

/* ---- onnx_weights.c ---- */
/* Whether the options' last --trainable/--freeze rule that matches one of the names says
 * trainable (*trainable); false when none matches. names: NULL-terminated. */
bool onnx_rules_verdict(const onnx_ctx *c, const char *const *names, bool *trainable);
/* Each tensor made from a constant becomes a param, an aux state (batch_norm's running
 * statistics) or a const, by how the graph reads it and the options' rules; 1 after an
 * error (a rule that matches nothing). */
int onnx_weights_decide(onnx_ctx *c);

/* ---- onnx_train.c ---- */
int onnx_add_train(onnx_ctx *c, const char *spec);

/* ---- onnx_fold.c: folds the layout handlers share ---- */
int onnx_fold_concat(onnx_ctx *c, const Onnx__NodeProto *n, int axis);   /* every input a constant */
/* Transpose of an integer constant (shape arithmetic: torch's F.pad at opset >= 11 reverses
 * and transposes its pads); perm has rank entries, or none for the reversed axes. */
int onnx_fold_transpose(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_const *x, const int64_t *perm, int np);
/* An elementwise binary op (the row's Kiln op) of two constants, NumPy broadcasting. */
int onnx_fold_binary(onnx_ctx *c, const Onnx__NodeProto *n, int kop, const onnx_const *a, const onnx_const *b);
/* Gather of a constant data tensor at constant indices (shape arithmetic). */
int onnx_fold_gather(onnx_ctx *c, const Onnx__NodeProto *n, onnx_const *data, onnx_const *idx);
/* Expand of a constant to s, the broadcast of its shape and Expand's target. */
int onnx_fold_expand(onnx_ctx *c, const Onnx__NodeProto *n, const onnx_const *x, const k_shape *s);
/* Slice of a constant, bound to the node's output `out`: for each of the axes, ONNX's
 * [begin, end) with step (normalised, in range). */
int onnx_fold_slice(onnx_ctx *c, const Onnx__NodeProto *n, const char *out, const onnx_const *x, int na,
                    const int64_t *axes, const int64_t *begin, const int64_t *end, const int64_t *step);

/* ---- the handlers (onnx_ops.c, onnx_fold.c), named by the table ---- */
#define ONNX_OP(type, fn, kop) int fn(onnx_ctx *c, const Onnx__NodeProto *n, int kop_);
#include "onnx_ops.def"
#undef ONNX_OP

#endif
