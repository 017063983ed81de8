/* onnx_train.c — kiln import --train "LOSS OPTIMIZER(...) [schedule ...] [clip_norm=X]
 * [wd_exclude=...]": makes an imported model trainable by adding a new input (an i32 `label`
 * for a loss of scores and labels, an f32 `target` for mse_loss), the loss applied to the
 * first output and it, and the train statement, as a user would write them in the imported
 * .kiln text. */
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

/* The loss that --train names "mse_loss": F.mse_loss(out, target), the mean over every element
 * of (out - target)^2, with a new f32 input `target` of the output's shape, built from the ops
 * sub, square and mean, which carry its gradient. For a model whose output is not scores over
 * classes: an encoder, a regression. The loss node's index, or -1. */
static int onnx_train_mse(onnx_ctx *c, int out) {
  k_shape shape = ir_tensor_at(c->g, out)->shape;   /* read now: adding the target may move the table */
  int target = ir_graph_add_tensor(c->g, onnx_kiln_name(c, "target"), IR_T_INPUT, c->loc);
  ir_tensor *t = ir_tensor_at(c->g, target);
  t->dtype = K_F32, t->shape = shape, t->shape_known = t->declared = true;
  int in[2] = {out, target};
  int d = onnx_emit_as(c, "loss_diff", NULL, IR_OP_sub, in, 2);
  if (d < 0 || ir_infer_one(c->g, c->d, d)) return -1;
  int sq_in = ir_node_at(c->g, d)->out[0];
  int sq = onnx_emit_as(c, "loss_square", NULL, IR_OP_square, &sq_in, 1);
  if (sq < 0 || ir_infer_one(c->g, c->d, sq)) return -1;
  int mean_in = ir_node_at(c->g, sq)->out[0];
  int k = onnx_emit_as(c, "loss", NULL, IR_OP_mean, &mean_in, 1);   /* no axes: every element */
  if (k < 0 || ir_infer_one(c->g, c->d, k)) return -1;
  return k;
}

/* The loss of (scores, i32 label) that --train names, e.g. softmax_cross_entropy, with a new
 * i32 input `label` of the batch's size. The loss node's index, or -1. */
static int onnx_train_labelled(onnx_ctx *c, int op, int out) {
  const ir_tensor *o = ir_tensor_at(c->g, out);
  if (o->shape.rank != 2)
    return onnx_fail(c, "--train: %s needs the first output to be [batch, classes], not of rank %d (for any other output, \"mse_loss ...\")",
                     ir_ops[op].name, o->shape.rank), -1;
  int64_t batch = o->shape.d[0];   /* read now: adding the label may move the tensor table */
  int label = ir_graph_add_tensor(c->g, onnx_kiln_name(c, "label"), IR_T_INPUT, c->loc);
  ir_tensor *l = ir_tensor_at(c->g, label);
  l->dtype = K_I32, l->shape = (k_shape){1, {batch}}, l->shape_known = l->declared = true;
  int in[2] = {out, label};
  int k = onnx_emit_as(c, "loss", NULL, op, in, 2);
  if (k < 0 || ir_infer_one(c->g, c->d, k)) return -1;
  return k;
}

int onnx_add_train(onnx_ctx *c, const char *spec) {
  const char *sp = strchr(spec, ' ');
  const char *loss = sp ? ir_strndup(&c->g->arena, spec, (size_t)(sp - spec)) : spec;
  bool mse = strcmp(loss, "mse_loss") == 0;
  int op = mse ? -1 : ir_op_lookup(loss);
  if (!mse && (op < 0 || ir_op_nargs(&ir_ops[op]) != 2 || ir_ops[op].i32_args != 2))
    return onnx_fail(c, "--train: the loss must be an op of (scores, i32 label), such as softmax_cross_entropy, or mse_loss; not '%s'", loss);
  if (!sp) return onnx_fail(c, "--train: expected \"LOSS OPTIMIZER(...)\", e.g. \"softmax_cross_entropy sgd(lr=0.01)\"");
  while (*sp == ' ') sp++;
  if (onnx_train_optim(c, sp)) return 1;
  if (c->g->outputs.len == 0) return onnx_fail(c, "--train: the model has no output to train");
  int out = IR_VEC_AT(c->g->outputs, int, 0);
  int k = mse ? onnx_train_mse(c, out) : onnx_train_labelled(c, op, out);
  if (k < 0) return 1;
  c->g->loss = ir_node_at(c->g, k)->out[0], c->g->has_train = true, c->g->train_loc = c->loc;
  return 0;
}
