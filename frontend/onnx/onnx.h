/* onnx.h — the ONNX front end: a .onnx file (opsets 9-17) into the same ir_graph the .kiln
 * front end produces, with the initializers as parameter data (ir_tensor.data), shape
 * arithmetic folded and every shape inferred. Nothing downstream of the IR knows ONNX.
 *   onnx_read.c    the file: protobuf-c decode, opset and domain checks, tensors (inline
 *                  or in external data files next to the model) into constants
 *   onnx_import.c  the graph: unsupported ops listed at once, topological order (cycles,
 *                  missing values), inputs, nodes through the op table, outputs
 *   onnx_ops.def   the op table: one row per ONNX op, naming its handler and Kiln op
 *   onnx_ops.c     handlers of ops that become Kiln nodes; onnx_fold.c handlers folded at
 *                  import (Shape, Gather, Concat of constants, Unsqueeze, Constant, ...)
 *   onnx_names.c   ONNX names made valid .kiln names, unique, with the mapping kept
 *   onnx_weights.c which initializers are trained (params) and which are consts
 *   onnx_dims.c    -D NAME=LO..HI: a bounded dim, the model imported again at other extents
 *                  and checked by fe_dims_check (frontend/fe_dims.c), as a .kiln one is
 *   onnx_train.c   kiln import --train: a loss, a label input and a train statement added */
#ifndef KILN_ONNX_H
#define KILN_ONNX_H

#include "fe.h"

/* kiln import --trainable / --freeze PATTERN: the initializers whose ONNX or Kiln name
 * matches the glob pattern (fnmatch) are trained, or not; a later rule wins. */
typedef struct { const char *pattern; bool trainable; } onnx_weight_rule;

typedef struct {
  const fe_define *defs;       /* -D NAME=N: a symbolic dimension (dim_param) of the inputs;
                                  NAME=LO..HI bounds it (the graph then has bounded dims) */
  int ndefs;
  const char *train;           /* "LOSS OPTIMIZER(...)": add an i32 input `label`, the loss of
                                  the first output and label, and a train statement; or NULL */
  const onnx_weight_rule *rules;  /* which initializers are trained, beyond the importer's rule */
  int nrules;
} onnx_options;

typedef struct { const char *onnx, *kiln; } onnx_name_pair;

/* Imports the model at path; NULL after reporting every error to d. When map is not NULL
 * it receives an onnx_name_pair (in the graph's arena) for every ONNX name that was renamed. */
ir_graph *onnx_import(const char *path, const onnx_options *o, ir_diag *d, ir_vec *map);

/* Whether path names an ONNX file (by its extension). */
bool onnx_is_onnx_path(const char *path);

#endif
