/* onnx_train.c — kiln import --train "LOSS OPTIMIZER(...) [schedule ...] [clip_norm=X]
 * [wd_exclude=...]": makes an imported model trainable by adding a new i32 input `label`, the
 * loss applied to the first output and label, and the train statement, as a user would write
 * them in the imported .kiln text. */
#include "onnx_int.h"

#include <stdlib.h>
#include <string.h>

/* "adamw(lr=1e-3) schedule cosine(total=100) clip_norm=1.0 wd_exclude=bias,norm": the rest of
 * the train statement, read by the .kiln front end as it reads its own. */
static int onnx_train_optim(onnx_ctx *c, const char *p) {
  ir_optimizer o;
  if (fe_train_clause("--train", p, &o, c->d)) return 1;
  c->g->optim = o;
  return 0;
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
