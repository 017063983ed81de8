/* op_table.c — the operator registry's rows (from ops.def) and look-ups by name.
 * The row helpers below keep the families (unary, binary, reductions, layout) uniform. */
#include "ops.h"

#include <string.h>

#define ARGS(...) (const char *const[]){__VA_ARGS__, NULL}
#define PARAMS(st, ...) .param_size = sizeof(st), .attrs = (const ir_attr_def[]){__VA_ARGS__, {0}}
#define UNARY(stem, x, o) .args = ARGS("x"), .outs = ARGS("out"), .nvisible = 1, \
  .infer = ir_infer_unary, .deps = {1, x, o}, .fwd_inplace = 1, .bwd_inplace = 1, \
  .fusion = IR_FUSE_ELEMWISE, .scalar = stem
#define BINARY(stem, in, o) .args = ARGS("a", "b"), .outs = ARGS("out"), .nvisible = 1, \
  .infer = ir_infer_binary, .deps = {1, in, o}, .fwd_inplace = 3, .bwd_inplace = 1, \
  .fusion = IR_FUSE_BROADCAST, .scalar = stem
#define REDUCE(in, o) .args = ARGS("x"), .outs = ARGS("out"), .nvisible = 1, \
  .infer = ir_infer_reduce, .deps = {1, in, o}, \
  PARAMS(k_reduce_param, IR_ATTR(k_reduce_param, axis, "axis", IR_AT_INTS, false, 0), \
                         IR_ATTR(k_reduce_param, keepdims, "keepdims", IR_AT_BOOL, false, 0))
#define LAYOUT(fn, inplace) .args = ARGS("x"), .outs = ARGS("out"), .nvisible = 1, \
  .infer = ir_infer_##fn, .deps = {1, 0, 0}, .fwd_inplace = inplace, .bwd_inplace = inplace
#define SOFTMAX .args = ARGS("x"), .outs = ARGS("out"), .nvisible = 1, .infer = ir_infer_softmax, \
  .deps = {1, 0, 1}, .bwd_inplace = 1, \
  PARAMS(k_softmax_param, IR_ATTR(k_softmax_param, axis, "axis", IR_AT_INT, false, -1))

/* An op that asks for temp space says so with TEMP(op): the request and its size function,
 * named by the kernels' rule. */
#define TEMP(id) .resources = IR_RES_TEMP, .temp = k_##id##_temp_bytes

/* Every op's kernels follow one naming rule, so the row gets them without spelling them.
 * A row is placed by its op's IR_OP_* (from kernels/k_ops.def): a row for an op not in the
 * list does not compile, a second row for one is an error (-Woverride-init, with -Werror),
 * and the count below catches an op left without a row. */
#define IR_OP(id, ...) [IR_OP_##id] = {.name = #id, .forward = k_##id##_forward, \
                                       .backward = k_##id##_backward, __VA_ARGS__},
const ir_opdef ir_ops[IR_OP_COUNT] = {
#include "ops.def"
};
#undef IR_OP

#define IR_OP(id, ...) + 1
_Static_assert(0
#include "ops.def"
               == IR_OP_COUNT, "every op of kernels/k_ops.def needs exactly one row in ir/ops.def");
#undef IR_OP

int ir_op_lookup(const char *name) {
  for (int i = 0; i < IR_OP_COUNT; i++)
    if (strcmp(ir_ops[i].name, name) == 0) return i;
  return -1;
}

const char *ir_op_suggest(const char *name) {
  const char *names[IR_OP_COUNT];
  for (int i = 0; i < IR_OP_COUNT; i++) names[i] = ir_ops[i].name;
  return name ? ir_suggest(name, names, IR_OP_COUNT) : NULL;
}

static int ir_count_names(const char *const *names) {
  int n = 0;
  while (names && names[n]) n++;
  return n;
}

int ir_op_nargs(const ir_opdef *op) { return ir_count_names(op->args); }
int ir_op_naux(const ir_opdef *op) { return ir_count_names(op->aux); }
int ir_op_nouts(const ir_opdef *op) { return ir_count_names(op->outs); }

int ir_op_arg_index(const ir_opdef *op, const char *name) {
  for (int i = 0; op->args[i]; i++)
    if (strcmp(op->args[i], name) == 0) return i;
  return -1;
}
