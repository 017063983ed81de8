/* pass_optimizer.c — optimizer update nodes (train only): after the backward nodes, one
 * update (sgd, adam or adamw) per parameter that has a gradient, reading [param, grad,
 * state...] and stepping the parameter and its state in place (no outputs). */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

/* Gradients are found by name, "<param>@grad" (pass_backward.c's convention; '@' cannot
 * occur in a source name): pruning may have cleared the backward in_data slot that says
 * which arg a gradient belongs to (fully_connected's backward does not read its bias). */
typedef struct { const char *name; int t; } pass_opt_named;

static int pass_opt_by_name(const void *a, const void *b) {
  return strcmp(((const pass_opt_named *)a)->name, ((const pass_opt_named *)b)->name);
}

/* strcmp(grad, "<param>@grad") without building the string. */
static int pass_opt_cmp(const char *grad, const char *param) {
  size_t n = strlen(param);
  int c = strncmp(grad, param, n);
  return c ? c : strcmp(grad + n, "@grad");
}

/* The tensors some backward node writes, sorted by name; *n gets their count. */
static pass_opt_named *pass_opt_grad_list(const ir_graph *g, int *n) {
  pass_opt_named *list = malloc(sizeof *list * ((size_t)ir_ntensors(g) + 1));
  if (!list) KILN_ICE("out of memory adding the optimizer to %s", g->name);
  *n = 0;
  for (int t = 0; t < ir_ntensors(g); t++) {
    int p = ir_tensor_at(g, t)->producer;
    if (p >= 0 && ir_node_at(g, p)->kind == IR_N_BACKWARD) list[(*n)++] = (pass_opt_named){ir_tensor_at(g, t)->name, t};
  }
  qsort(list, (size_t)*n, sizeof *list, pass_opt_by_name);
  return list;
}

/* Binary search of the sorted list for "<param>@grad"; -1 if absent. */
static int pass_opt_find(const pass_opt_named *list, int n, const char *param) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2, c = pass_opt_cmp(list[mid].name, param);
    if (c == 0) return list[mid].t;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

/* Each parameter's gradient tensor, or -1 when no backward node writes one. */
static void pass_opt_grads(const ir_graph *g, int *grad) {
  int n;
  pass_opt_named *list = pass_opt_grad_list(g, &n);
  for (int t = 0; t < ir_ntensors(g); t++) {
    const ir_tensor *x = ir_tensor_at(g, t);
    grad[t] = x->kind == IR_T_PARAM ? pass_opt_find(list, n, x->name) : -1;
  }
  free(list);
}

/* A persistent optimizer state for parameter p, shaped like it; starts at 0. */
static int pass_opt_state(ir_graph *g, int p, const char *what) {
  const ir_tensor *x = ir_tensor_at(g, p);
  const char *name = ir_strfmt(&g->arena, "%s@%s", x->name, what);
  k_shape shape = x->shape;
  int s = ir_graph_add_tensor(g, name, IR_T_STATE, x->loc);
  ir_tensor *st = ir_tensor_at(g, s);
  st->dtype = K_F32, st->shape = shape, st->shape_known = true;
  return s;
}

/* The optimizer's hyperparameters with no weight decay, for a parameter `wd_exclude` names. */
static void *pass_opt_no_decay(ir_graph *g) {
  if (k_optim_moments(g->optim.kind)) {
    k_adam_param *a = ir_alloc(&g->arena, sizeof *a);
    *a = g->optim.adam, a->wd = 0;
    return a;
  }
  k_sgd_param *s = ir_alloc(&g->arena, sizeof *s);
  *s = g->optim.sgd, s->wd = 0;
  return s;
}

/* The update node reads lr (set_lr changes it at run time) and, unless wd_exclude names the
 * parameter's kind, the rest from g->optim; an excluded one carries its own copy, wd 0. */
static void pass_opt_update(ir_graph *g, int p, int grad) {
  int in[4] = {p, grad}, nin = 2;
  if (g->optim.kind == K_OPT_SGD && g->optim.sgd.momentum != 0) in[nin++] = pass_opt_state(g, p, "momentum");
  if (k_optim_moments(g->optim.kind)) {
    in[nin++] = pass_opt_state(g, p, "adam_m");
    in[nin++] = pass_opt_state(g, p, "adam_v");
  }
  const char *name = ir_strfmt(&g->arena, "_update_%s", ir_tensor_at(g, p)->name);
  bool no_decay = (ir_wdx_kinds(g, p) & g->optim.wd_exclude) != 0;
  int u = ir_graph_add_node_raw(g, IR_N_UPDATE, (int)g->optim.kind, name, nin, in, 0, NULL, ir_tensor_at(g, p)->loc);
  if (no_decay) ir_node_at(g, u)->param = pass_opt_no_decay(g);
}

/* Parameters in declaration order, so the update order (and state order) is stable. */
int pass_optimizer(ir_graph *g, pass_ctx *cx) {
  if (cx->mode != IR_MODE_TRAIN) return 0;
  int nt = ir_ntensors(g);
  int *grad = malloc(sizeof(int) * ((size_t)nt + 1));
  if (!grad) KILN_ICE("out of memory adding the optimizer to %s", g->name);
  pass_opt_grads(g, grad);
  for (int p = 0; p < nt; p++)
    if (grad[p] >= 0) pass_opt_update(g, p, grad[p]);
  free(grad);
  return 0;
}
