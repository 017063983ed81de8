/* ir_optim.c — the optimizer and initializer registries: one row each, an attribute schema
 * over the ir_optimizer / ir_init fields, and the PyTorch layer defaults for parameters the
 * user gives no initializer. */
#include "ops.h"

#include <math.h>
#include <string.h>

#define OPT_ATTRS(...) (const ir_attr_def[]){__VA_ARGS__, {0}}

const ir_optim_def ir_optims[K_OPT_COUNT] = {
  [K_OPT_SGD] = {"sgd", OPT_ATTRS(
      IR_ATTR(ir_optimizer, lr, "lr", IR_AT_FLOAT, true, 0),
      IR_ATTR(ir_optimizer, sgd.momentum, "momentum", IR_AT_FLOAT, false, 0),
      IR_ATTR(ir_optimizer, sgd.wd, "wd", IR_AT_FLOAT, false, 0)), "torch.optim.SGD"},
  [K_OPT_ADAM] = {"adam", OPT_ATTRS(
      IR_ATTR(ir_optimizer, lr, "lr", IR_AT_FLOAT, false, 0.001),
      IR_ATTR(ir_optimizer, adam.beta1, "beta1", IR_AT_FLOAT, false, 0.9),
      IR_ATTR(ir_optimizer, adam.beta2, "beta2", IR_AT_FLOAT, false, 0.999),
      IR_ATTR(ir_optimizer, adam.eps, "eps", IR_AT_FLOAT, false, 1e-8),
      IR_ATTR(ir_optimizer, adam.wd, "wd", IR_AT_FLOAT, false, 0)), "torch.optim.Adam"},
};

const ir_init_def ir_inits[K_INIT_COUNT] = {
  [K_INIT_ZEROS] = {"zeros", NULL, "torch.nn.init.zeros_"},
  [K_INIT_ONES] = {"ones", NULL, "torch.nn.init.ones_"},
  [K_INIT_CONSTANT] = {"constant", OPT_ATTRS(IR_ATTR(ir_init, a, "value", IR_AT_FLOAT, true, 0)),
                        "torch.nn.init.constant_"},
  [K_INIT_UNIFORM] = {"uniform", OPT_ATTRS(IR_ATTR(ir_init, a, "low", IR_AT_FLOAT, false, 0),
                                            IR_ATTR(ir_init, b, "high", IR_AT_FLOAT, false, 1)),
                       "torch.nn.init.uniform_"},
  [K_INIT_NORMAL] = {"normal", OPT_ATTRS(IR_ATTR(ir_init, a, "mean", IR_AT_FLOAT, false, 0),
                                          IR_ATTR(ir_init, b, "std", IR_AT_FLOAT, false, 1)),
                      "torch.nn.init.normal_"},
  [K_INIT_XAVIER] = {"xavier", NULL, "torch.nn.init.xavier_uniform_"},
};

int ir_optim_lookup(const char *name) {
  for (int i = 0; i < K_OPT_COUNT; i++)
    if (strcmp(ir_optims[i].name, name) == 0) return i;
  return -1;
}

int ir_init_lookup(const char *name) {
  for (int i = 0; i < K_INIT_COUNT; i++)
    if (strcmp(ir_inits[i].name, name) == 0) return i;
  return -1;
}

/* fan_in of a weight [out, in, k...]: in * prod(k), as torch.nn.init computes it. */
static double ir_fan_in(const k_shape *w) {
  double f = w->rank > 1 ? (double)w->d[1] : 1.0;
  for (int i = 2; i < w->rank; i++) f *= (double)w->d[i];
  return f;
}

/* PyTorch's layer defaults: Linear and Conv weights kaiming_uniform(a=sqrt(5)), which is
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)); Embedding N(0, 1); biases and beta 0 (the spec's
 * choice, where torch draws them); gamma and moving_var 1; moving_mean 0. */
ir_init ir_init_default(const ir_graph *g, const ir_node *n, int input) {
  const ir_opdef *op = &ir_ops[n->op];
  int nargs = ir_op_nargs(op);
  /* a variadic op's inputs past its args all play the last arg's role (concat's pieces) */
  const char *role = input < nargs ? op->args[input] : op->variadic ? op->args[nargs - 1] : op->aux[input - nargs];
  const k_shape *s = &ir_tensor_at(g, n->in[input])->shape;
  if (strcmp(role, "weight") == 0 && n->op == IR_OP_embedding) return (ir_init){K_INIT_NORMAL, 0, 1};
  if (strcmp(role, "weight") == 0) {
    float bound = (float)(1.0 / sqrt(ir_fan_in(s)));
    return (ir_init){K_INIT_UNIFORM, -bound, bound};
  }
  if (strcmp(role, "gamma") == 0 || strcmp(role, "moving_var") == 0) return (ir_init){K_INIT_ONES, 0, 0};
  return (ir_init){K_INIT_ZEROS, 0, 0};
}
