/* ir_optim.c — the optimizer, schedule and initializer registries: one row each, an attribute
 * schema over the ir_optimizer / k_schedule / ir_init fields, and the PyTorch layer defaults for
 * parameters the user gives no initializer. */
#include "ops.h"

#include <math.h>
#include <string.h>

#define OPT_ATTRS(...) (const ir_attr_def[]){__VA_ARGS__, {0}}

const ir_optim_def ir_optims[K_OPT_COUNT] = {
  [K_OPT_SGD] = {"sgd", OPT_ATTRS(
      IR_ATTR(ir_optimizer, lr, "lr", IR_AT_FLOAT, true, 0),
      IR_ATTR(ir_optimizer, sgd.momentum, "momentum", IR_AT_FLOAT, false, 0),
      IR_ATTR(ir_optimizer, sgd.wd, "wd", IR_AT_FLOAT, false, 0),
      IR_ATTR(ir_optimizer, sgd.nesterov, "nesterov", IR_AT_BOOL, false, 0)), "torch.optim.SGD"},
  [K_OPT_ADAM] = {"adam", OPT_ATTRS(
      IR_ATTR(ir_optimizer, lr, "lr", IR_AT_FLOAT, false, 0.001),
      IR_ATTR(ir_optimizer, adam.beta1, "beta1", IR_AT_FLOAT, false, 0.9),
      IR_ATTR(ir_optimizer, adam.beta2, "beta2", IR_AT_FLOAT, false, 0.999),
      IR_ATTR(ir_optimizer, adam.eps, "eps", IR_AT_FLOAT, false, 1e-8),
      IR_ATTR(ir_optimizer, adam.wd, "wd", IR_AT_FLOAT, false, 0)), "torch.optim.Adam"},
  [K_OPT_ADAMW] = {"adamw", OPT_ATTRS(
      IR_ATTR(ir_optimizer, lr, "lr", IR_AT_FLOAT, false, 0.001),
      IR_ATTR(ir_optimizer, adam.beta1, "beta1", IR_AT_FLOAT, false, 0.9),
      IR_ATTR(ir_optimizer, adam.beta2, "beta2", IR_AT_FLOAT, false, 0.999),
      IR_ATTR(ir_optimizer, adam.eps, "eps", IR_AT_FLOAT, false, 1e-8),
      IR_ATTR(ir_optimizer, adam.wd, "wd", IR_AT_FLOAT, false, 0.01)), "torch.optim.AdamW"},
};

#define SCHED_ATTRS(...) (const ir_attr_def[]){__VA_ARGS__, {0}}

/* The defaults are torch's, where it has them. */
const ir_sched_def ir_scheds[K_SCHED_COUNT] = {
  [K_SCHED_NONE] = {"constant", NULL, "a constant lr"},
  [K_SCHED_STEP] = {"step", SCHED_ATTRS(
      IR_ATTR(k_schedule, step_size, "step_size", IR_AT_INT, true, 0),
      IR_ATTR(k_schedule, gamma, "gamma", IR_AT_FLOAT, false, 0.1)), "torch.optim.lr_scheduler.StepLR"},
  [K_SCHED_MULTISTEP] = {"multistep", SCHED_ATTRS(
      IR_ATTR(k_schedule, milestones, "milestones", IR_AT_INTS, true, 0),
      IR_ATTR(k_schedule, gamma, "gamma", IR_AT_FLOAT, false, 0.1)), "torch.optim.lr_scheduler.MultiStepLR"},
  [K_SCHED_EXPONENTIAL] = {"exponential", SCHED_ATTRS(
      IR_ATTR(k_schedule, gamma, "gamma", IR_AT_FLOAT, true, 0)), "torch.optim.lr_scheduler.ExponentialLR"},
  [K_SCHED_COSINE] = {"cosine", SCHED_ATTRS(
      IR_ATTR(k_schedule, total, "total", IR_AT_INT, true, 0),
      IR_ATTR(k_schedule, warmup, "warmup", IR_AT_INT, false, 0),
      IR_ATTR(k_schedule, min_lr, "min_lr", IR_AT_FLOAT, false, 0)),
      "torch.optim.lr_scheduler.CosineAnnealingLR (after LinearLR for the warmup)"},
  [K_SCHED_ONECYCLE] = {"onecycle", SCHED_ATTRS(
      IR_ATTR(k_schedule, total, "total", IR_AT_INT, true, 0),
      IR_ATTR(k_schedule, pct_start, "pct_start", IR_AT_FLOAT, false, 0.3),
      IR_ATTR(k_schedule, div_factor, "div_factor", IR_AT_FLOAT, false, 25),
      IR_ATTR(k_schedule, final_div_factor, "final_div_factor", IR_AT_FLOAT, false, 1e4)),
      "torch.optim.lr_scheduler.OneCycleLR (cycle_momentum=False)"},
};

int ir_sched_lookup(const char *name) {
  for (int i = 1; i < K_SCHED_COUNT; i++)
    if (strcmp(ir_scheds[i].name, name) == 0) return i;
  return -1;
}

/* A schedule's values that its formula cannot take: the message, or NULL. */
const char *ir_sched_check(const k_schedule *s) {
  switch ((k_sched_kind)s->kind) {
  case K_SCHED_STEP: return s->step_size < 1 ? "step_size must be at least 1" : NULL;
  case K_SCHED_MULTISTEP:
    for (int k = 0; k < s->milestones.n; k++)
      if (s->milestones.v[k] < 1 || (k && s->milestones.v[k] <= s->milestones.v[k - 1]))
        return "milestones must be positive and increasing";
    return s->milestones.n ? NULL : "milestones must name at least one step";
  case K_SCHED_EXPONENTIAL: return s->gamma > 0 ? NULL : "gamma must be positive";
  case K_SCHED_COSINE:
    if (s->warmup < 0 || s->total <= s->warmup) return "total must exceed warmup, and warmup must not be negative";
    return s->min_lr >= 0 ? NULL : "min_lr must not be negative";
  case K_SCHED_ONECYCLE:
    if (s->total < 2 || !(s->pct_start > 0 && s->pct_start < 1)) return "total must be at least 2 and pct_start in (0, 1)";
    return s->div_factor > 0 && s->final_div_factor > 0 ? NULL : "div_factor and final_div_factor must be positive";
  default: return NULL;
  }
}

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

const char *const ir_wdx_names[IR_WDX_COUNT] = {"bias", "norm"};

uint32_t ir_wdx_lookup(const char *name) {
  for (int i = 0; i < IR_WDX_COUNT; i++)
    if (strcmp(ir_wdx_names[i], name) == 0) return 1u << i;
  return 0;
}

/* The kind an op's argument slot gives the parameter it reads: a bias by the slot's name
 * (fully_connected's, convolution's), a norm's by batch_norm's and layer_norm's gamma and
 * beta, as torch recipes group nn.Linear.bias and the norm layers' weights. */
static uint32_t ir_wdx_slot(const char *arg) {
  if (strcmp(arg, "bias") == 0) return IR_WDX_BIAS;
  return strcmp(arg, "gamma") == 0 || strcmp(arg, "beta") == 0 ? IR_WDX_NORM : 0;
}

uint32_t ir_wdx_kinds(const ir_graph *g, int param) {
  uint32_t kinds = 0;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (n->kind != IR_N_OP) continue;
    const ir_opdef *op = &ir_ops[n->op];
    for (int j = 0; j < n->nin && j < ir_op_nargs(op); j++)
      if (n->in[j] == param) kinds |= ir_wdx_slot(op->args[j]);
  }
  return kinds;
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
