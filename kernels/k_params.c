/* k_params.c — the size of the param struct each op's kernels read, from the op list's
 * K_OP_PARAM rows (k_ops.def). The runtime holds a descriptor's param sizes to it: a copy it
 * makes of a step's param (to rewrite it at other extents) is exactly what the kernel reads. */
#include "kernels.h"

enum {
#define K_OP(op) K_PARAM_OP_##op,
#define K_UNARY(op) K_OP(op)
#define K_BINARY(op) K_OP(op)
#include "k_ops.def"
#undef K_OP
#undef K_UNARY
#undef K_BINARY
  K_PARAM_NOPS
};

static const uint32_t k_param_bytes[K_PARAM_NOPS] = {
#define K_OP(op)
#define K_UNARY(op)
#define K_BINARY(op)
#define K_OP_PARAM(op, st) [K_PARAM_OP_##op] = sizeof(st),
#include "k_ops.def"
#undef K_OP
#undef K_UNARY
#undef K_BINARY
#undef K_OP_PARAM
};

size_t k_op_param_bytes(int op) { return op >= 0 && op < K_PARAM_NOPS ? k_param_bytes[op] : 0; }
