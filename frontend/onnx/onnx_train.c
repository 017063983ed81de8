/* onnx_train.c — kiln import --train "LOSS OPTIMIZER(...)": makes an imported model trainable
 * by adding a new i32 input `label`, the loss applied to the first output and label, and the
 * train statement, as a user would write them in the imported .kiln text. */
#include "onnx_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* One `key=number` of the optimizer call into its field; the end of it, or NULL after an error. */
static const char *onnx_train_arg(onnx_ctx *c, const char *p, const ir_attr_def *attrs) {
  const char *eq = strchr(p, '=');
  if (!eq) return onnx_fail(c, "--train: expected key=value in the optimizer's arguments at '%s'", p), NULL;
  char *key = ir_strndup(&c->g->arena, p, (size_t)(eq - p)), *end = NULL;
  for (char *k = key + strlen(key); k > key && isspace((unsigned char)k[-1]);) *--k = 0;
  const ir_attr_def *a = ir_attr_find(attrs, key);
  double v = strtod(eq + 1, &end);
  if (!a) return onnx_fail(c, "--train: the optimizer has no argument '%s'", key), NULL;
  if (end == eq + 1) return onnx_fail(c, "--train: '%s' needs a number", key), NULL;
  ir_aval val = {.kind = IR_AV_NUM, .num = v};
  char msg[256];
  if (ir_attr_set(a, &c->g->optim, &val, msg, sizeof msg)) return onnx_fail(c, "--train: %s", msg), NULL;
  while (isspace((unsigned char)*end)) end++;
  return end;
}

/* "sgd(lr=0.01, momentum=0.9)" into g->optim. */
static int onnx_train_optim(onnx_ctx *c, const char *p) {
  const char *open = strchr(p, '('), *close = open ? strrchr(open, ')') : NULL;
  if (!open || !close || close[1]) return onnx_fail(c, "--train: the optimizer must be written as sgd(lr=...), adam(...) or adamw(...)");
  int k = ir_optim_lookup(ir_strndup(&c->g->arena, p, (size_t)(open - p)));
  if (k < 0) return onnx_fail(c, "--train: unknown optimizer '%.*s'; use sgd, adam or adamw", (int)(open - p), p);
  c->g->optim = (ir_optimizer){.kind = (k_optim_kind)k};
  ir_attr_defaults(ir_optims[k].attrs, &c->g->optim);
  for (p = open + 1; *p == ' '; p++) {}
  while (p && p < close) {
    p = onnx_train_arg(c, p, ir_optims[k].attrs);
    if (p && *p == ',') p++;
    while (p && *p == ' ') p++;
  }
  if (!p) return 1;
  return c->g->optim.lr > 0 ? 0 : onnx_fail(c, "--train: the learning rate must be given and positive (lr=...)");
}

int onnx_add_train(onnx_ctx *c, const char *spec) {
  const char *sp = strchr(spec, ' ');
  const char *loss = sp ? ir_strndup(&c->g->arena, spec, (size_t)(sp - spec)) : spec;
  int op = ir_op_lookup(loss);
  if (op < 0 || ir_op_nargs(&ir_ops[op]) != 2 || ir_ops[op].i32_args != 2)
    return onnx_fail(c, "--train: the loss must be an op of (scores, i32 label), such as softmax_cross_entropy; not '%s'", loss);
  if (!sp) return onnx_fail(c, "--train: expected \"LOSS OPTIMIZER(...)\", e.g. \"softmax_cross_entropy sgd(lr=0.01)\"");
  while (*sp == ' ') sp++;
  if (onnx_train_optim(c, sp)) return 1;
  if (c->g->outputs.len == 0) return onnx_fail(c, "--train: the model has no output to train");
  const ir_tensor *out = ir_tensor_at(c->g, IR_VEC_AT(c->g->outputs, int, 0));
  if (out->shape.rank != 2) return onnx_fail(c, "--train: the first output must be [batch, classes], not of rank %d", out->shape.rank);
  int64_t batch = out->shape.d[0];   /* read now: adding the label may move the tensor table */
  int label = ir_graph_add_tensor(c->g, onnx_kiln_name(c, "label"), IR_T_INPUT, c->loc);
  ir_tensor *l = ir_tensor_at(c->g, label);
  l->dtype = K_I32, l->shape = (k_shape){1, {batch}}, l->shape_known = l->declared = true;
  int in[2] = {IR_VEC_AT(c->g->outputs, int, 0), label};
  int k = onnx_emit_as(c, "loss", NULL, op, in, 2);
  if (k < 0 || ir_infer_one(c->g, c->d, k)) return 1;
  c->g->loss = ir_node_at(c->g, k)->out[0], c->g->has_train = true, c->g->train_loc = c->loc;
  return 0;
}
