/* onnx_weights.c — which of an imported model's constants train_step trains. ONNX does not
 * say: training_info is rarely written, and torch writes its buffers (register_buffer) as
 * initializers just as it writes its parameters. So the importer decides by how the graph
 * reads each constant once every node is built (docs/onnx.md, "Which initializers are
 * trained"): an initializer is a param when some node reads it as a layer's weight or bias —
 *   - an argument the op table marks learnable (convolution's and fully_connected's weight
 *     and bias, batch_norm's gamma and beta: Conv, Gemm, BatchNormalization);
 *   - the constant operand of a matmul whose other operand is computed (torch's nn.Linear on
 *     an input of rank > 2 is MatMul(x, W^T)), and the constant operand of an add of that
 *     matmul's output (its bias);
 *   - or when torch named it as it names every parameter of its own layers: `weight` or
 *     `bias` last (a LayerNorm of opset < 17 is a Mul and an Add of ln.weight and ln.bias).
 * batch_norm's running statistics (read in its aux slots) stay aux states. Every other
 * initializer, every float Constant and everything computed at import is a const. Then the
 * --trainable / --freeze rules (onnx_options.rules) apply in order. */
#include "onnx_int.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

static bool onnx_rule_matches(const onnx_weight_rule *r, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (fnmatch(r->pattern, names[i], 0) == 0) return true;
  return false;
}

bool onnx_rules_verdict(const onnx_ctx *c, const char *const *names, bool *trainable) {
  bool any = false;
  for (int r = 0; r < c->o->nrules; r++)
    if (onnx_rule_matches(&c->o->rules[r], names)) *trainable = c->o->rules[r].trainable, any = true;
  return any;
}

/* The tensor a chain of layout nodes starts from: t, or the input of the transpose, reshape
 * or flatten t comes out of, and so on (torch exports nn.Linear's weight transposed). */
static int onnx_weight_root(const ir_graph *g, int t) {
  for (;;) {
    const ir_tensor *x = ir_tensor_at(g, t);
    const ir_node *p = x->producer >= 0 ? ir_node_at(g, x->producer) : NULL;
    if (!p || (p->op != IR_OP_transpose && p->op != IR_OP_reshape && p->op != IR_OP_flatten)) return t;
    t = p->in[0];
  }
}

/* A matmul of one computed operand and one constant (through layout nodes): the constant, a
 * layer's weight; -1 otherwise. */
static int onnx_matmul_weight(const ir_graph *g, const ir_node *n, const bool *is_const) {
  if (n->op != IR_OP_matmul) return -1;
  int a = onnx_weight_root(g, n->in[0]), b = onnx_weight_root(g, n->in[1]);
  return is_const[a] == is_const[b] ? -1 : is_const[a] ? a : b;
}

/* The operand of add n that is a bias: the other one is the output of a matmul by a weight. */
static int onnx_add_bias(const ir_graph *g, const ir_node *n, const bool *is_const) {
  for (int j = 0; n->op == IR_OP_add && j < 2; j++) {
    const ir_tensor *o = ir_tensor_at(g, n->in[1 - j]);
    if (o->producer >= 0 && onnx_matmul_weight(g, ir_node_at(g, o->producer), is_const) >= 0) return onnx_weight_root(g, n->in[j]);
  }
  return -1;
}

/* weight[t]: some node reads tensor t as a weight; aux[t]: as an aux state. */
static void onnx_weight_reads(const ir_graph *g, const bool *is_const, bool *weight, bool *aux) {
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    const ir_opdef *op = &ir_ops[n->op];
    int nargs = n->nin - ir_op_naux(op);
    for (int j = 0; j < n->nin; j++) {
      if (j >= nargs) aux[n->in[j]] = true;
      else if (!op->variadic && j < 32 && (op->learnable >> j & 1)) weight[onnx_weight_root(g, n->in[j])] = true;
    }
    int w = onnx_matmul_weight(g, n, is_const), b = onnx_add_bias(g, n, is_const);
    if (w >= 0) weight[w] = true;
    if (b >= 0) weight[b] = true;
  }
}

/* The names torch gives its layers' parameters end in `weight` or `bias`; its layers' buffers
 * are running_mean, running_var and num_batches_tracked. */
static bool onnx_torch_param_name(const char *s) {
  const char *dot = strrchr(s, '.'), *last = dot ? dot + 1 : s;
  return strcmp(last, "weight") == 0 || strcmp(last, "bias") == 0;
}

/* The rules' verdict on one initializer (by its ONNX name and its Kiln name), counting the
 * tensors each rule matches. A Constant's value or anything computed at import is data the
 * model's code wrote, never a parameter: the rules do not reach it. */
static bool onnx_weight_apply_rules(onnx_ctx *c, const onnx_weight *w, bool trainable, int *matched) {
  const char *names[] = {w->origin, ir_tensor_at(c->g, w->tensor)->name, NULL};
  for (int r = 0; w->origin && r < c->o->nrules; r++)
    if (onnx_rule_matches(&c->o->rules[r], names)) trainable = c->o->rules[r].trainable, matched[r]++;
  return trainable;
}

static void onnx_weight_set(ir_tensor *x, bool trainable) {
  x->kind = trainable ? IR_T_PARAM : IR_T_AUX;
  x->fixed = !trainable;
}

int onnx_weights_decide(onnx_ctx *c) {
  int nt = ir_ntensors(c->g), errors = 0;
  bool *is_const = calloc((size_t)nt + 1, 1), *weight = calloc((size_t)nt + 1, 1), *aux = calloc((size_t)nt + 1, 1);
  int *matched = calloc((size_t)c->o->nrules + 1, sizeof *matched);
  if (!is_const || !weight || !aux || !matched) errors = onnx_fail(c, "out of memory");
  for (int i = 0; !errors && i < c->weights.len; i++) is_const[IR_VEC_AT(c->weights, onnx_weight, i).tensor] = true;
  if (!errors) onnx_weight_reads(c->g, is_const, weight, aux);
  for (int i = 0; !errors && i < c->weights.len; i++) {
    const onnx_weight *w = &IR_VEC_AT(c->weights, onnx_weight, i);
    ir_tensor *x = ir_tensor_at(c->g, w->tensor);
    if (aux[w->tensor]) {                  /* batch_norm updates it: an aux state, whatever the rules */
      x->kind = IR_T_AUX, x->fixed = false;
      continue;
    }
    bool trainable = w->origin && (weight[w->tensor] || onnx_torch_param_name(w->origin));
    onnx_weight_set(x, onnx_weight_apply_rules(c, w, trainable, matched));
  }
  for (int r = 0; !errors && r < c->o->nrules; r++)
    if (!matched[r])
      errors += onnx_fail(c, "--%s '%s' matches no initializer it could decide (by ONNX or Kiln name; a Constant's value, a scalar"
                          " literal and batch_norm's running statistics are never matched)",
                          c->o->rules[r].trainable ? "trainable" : "freeze", c->o->rules[r].pattern);
  free(is_const), free(weight), free(aux), free(matched);
  return errors != 0;
}
