/* api_record.c — a lowered graph replayed on arrays: each node becomes a lazy array
 * (kiln_array_op with the node's op and attributes printed as the language writes them), so
 * nothing runs until a result is read. kiln_graph_predict_arrays records a model's predict
 * over the caller's input and weight arrays; `kiln repl` records its statements and `:model`'s
 * predict(...) the same way. */
#include "api.h"

#include <stdlib.h>
#include <string.h>

kiln_array *api_record_operand(kiln_session *s, const ir_graph *g, int t, kiln_array **made, kiln_array *const *bound) {
  const ir_tensor *x = ir_tensor_at(g, t);
  if (made[t]) return made[t];
  if (bound && bound[t]) return bound[t];
  if (x->kind == IR_T_CONST && !api_array_constant(s, x->value, &made[t])) return made[t];
  if (x->kind != IR_T_CONST) api_fail("%s '%s' is not given", x->kind == IR_T_INPUT ? "input" : "weight", x->name);
  return NULL;
}

int api_record_node(kiln_session *s, const ir_graph *g, const ir_node *n, kiln_array **made, kiln_array *const *bound) {
  const ir_opdef *op = &ir_ops[n->op];
  kiln_array *in[64];
  if (n->nin > 64) return api_fail("%s: %d inputs", op->name, n->nin);
  for (int j = 0; j < n->nin; j++)
    if (!(in[j] = api_record_operand(s, g, n->in[j], made, bound))) return KILN_ERR;
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) return api_fail("out of memory");
  ir_attr_print(op->attrs, n->param, mem);
  fclose(mem);
  kiln_attrs at = {{text, len, len + 1, false}, len > 0};
  int rc = kiln_array_op(s, op->name, n->nin, in, &at, &made[n->out[0]]);
  free(text);
  return rc;
}

/* The tensors the outputs need. */
static bool *api_record_needed(const ir_graph *g) {
  bool *need = calloc((size_t)ir_ntensors(g) + 1, 1);
  for (int i = 0; need && i < g->outputs.len; i++) need[IR_VEC_AT(g->outputs, int, i)] = true;
  if (need) ir_graph_mark_needed(g, need);
  return need;
}

int api_record_predict(kiln_session *s, const ir_graph *g, kiln_array *const *bound, kiln_array **outs) {
  int nt = ir_ntensors(g), nouts = g->outputs.len;
  bool *need = api_record_needed(g);
  kiln_array **made = calloc((size_t)nt + 1, sizeof *made);
  int rc = need && made ? KILN_OK : api_fail("out of memory");
  for (int i = 0; !rc && i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (n->nout && n->out[0] >= 0 && need[n->out[0]]) rc = api_record_node(s, g, n, made, bound);
  }
  for (int i = 0; !rc && i < nouts; i++) {
    int t = IR_VEC_AT(g->outputs, int, i);
    if (!made[t]) rc = api_fail("predict's output '%s' is not computed by an op", ir_tensor_at(g, t)->name);
  }
  for (int i = 0; !rc && i < nouts; i++) {   /* the caller owns the outputs now */
    int t = IR_VEC_AT(g->outputs, int, i);
    outs[i] = made[t], made[t] = NULL;
  }
  for (int t = 0; made && t < nt; t++) kiln_array_free(made[t]);
  free(need), free(made);
  return rc;
}

/* ---- kiln_graph_predict_arrays ---- */

/* Whether array a has tensor t's declared dtype and shape; else the last error says so. */
static bool api_record_fits(const ir_tensor *x, const kiln_array *a, const char *what) {
  if (x->dtype == a->dtype && ir_shape_eq(&x->shape, &a->shape)) return true;
  char want[200], got[200];
  ir_type_str(x->dtype, &x->shape, want, sizeof want), ir_type_str(a->dtype, &a->shape, got, sizeof got);
  api_fail("kiln_graph_predict_arrays: %s '%s' is %s; the array given is %s", what, x->name, want, got);
  return false;
}

/* An input of a model with bounded dims may have other sizes than the bound's: the record
 * infers every shape from the arrays, and an op whose attributes hold the bound's size (a
 * reshape to [batch, ...]) refuses then with its shape error. Dtype and rank must match. */
static bool api_record_fits_input(const ir_graph *g, const ir_tensor *x, const kiln_array *a) {
  if (g->nbdims && x->dtype == a->dtype && x->shape.rank == a->shape.rank) return true;
  return api_record_fits(x, a, "input");
}

static int api_record_bind_weights(const ir_graph *g, kiln_session *s, int nw, const char *const *names,
                                   kiln_array *const *weights, kiln_array **bound) {
  for (int k = 0; k < nw; k++) {
    if (!names[k] || !weights[k]) return api_fail("kiln_graph_predict_arrays: weight %d or its name is NULL", k);
    if (weights[k]->s != s) return api_fail("kiln_graph_predict_arrays: weight '%s' is of another session", names[k]);
    int t = ir_graph_find_tensor(g, names[k]);
    const ir_tensor *x = t >= 0 ? ir_tensor_at(g, t) : NULL;
    if (!x || (x->kind != IR_T_PARAM && x->kind != IR_T_AUX))
      return api_fail("kiln_graph_predict_arrays: model '%s' has no weight '%s'", g->name, names[k]);
    if (!api_record_fits(x, weights[k], "weight")) return KILN_ERR;
    bound[t] = weights[k];
    if (x->fixed) weights[k]->fixed = true;   /* what export declares it as */
  }
  return KILN_OK;
}

/* Inputs: those predict reads, in declaration order (as the entry point takes them). */
static int api_record_bind_inputs(const ir_graph *g, kiln_session *s, int nin, kiln_array *const *inputs, kiln_array **bound) {
  bool *need = api_record_needed(g);
  if (!need) return api_fail("out of memory");
  int n = 0;
  for (int t = 0; t < ir_ntensors(g); t++) n += ir_tensor_at(g, t)->kind == IR_T_INPUT && need[t];
  int rc = n == nin ? KILN_OK
                    : api_fail("kiln_graph_predict_arrays: predict of '%s' takes %d input%s, not %d", g->name, n, n == 1 ? "" : "s", nin);
  for (int t = 0, k = 0; !rc && t < ir_ntensors(g); t++) {
    if (ir_tensor_at(g, t)->kind != IR_T_INPUT || !need[t]) continue;
    if (!inputs[k]) rc = api_fail("kiln_graph_predict_arrays: input %d is NULL", k);
    else if (inputs[k]->s != s) rc = api_fail("kiln_graph_predict_arrays: input %d is of another session", k);
    else if (!api_record_fits_input(g, ir_tensor_at(g, t), inputs[k])) rc = KILN_ERR;
    else bound[t] = inputs[k++];
  }
  free(need);
  return rc;
}

static int api_record_bind(const ir_graph *g, kiln_session *s, int nin, kiln_array *const *inputs, int nw,
                           const char *const *names, kiln_array *const *weights, kiln_array **bound) {
  return api_record_bind_inputs(g, s, nin, inputs, bound) || api_record_bind_weights(g, s, nw, names, weights, bound);
}

KILN_API int kiln_graph_predict_arrays(kiln_graph *g, kiln_session *s, int ninputs, kiln_array *const *inputs,
                                       int nweights, const char *const *weight_names, kiln_array *const *weights,
                                       int noutputs, kiln_array **outputs) {
  if (!g || !s || !outputs || (ninputs && !inputs) || (nweights && (!weight_names || !weights)) || ninputs < 0 || nweights < 0)
    return api_fail("kiln_graph_predict_arrays: graph, session, inputs, weights or outputs is NULL");
  const ir_graph *low;
  api_graph_lock(g, true);
  int rc = api_graph_get(g, &low);
  kiln_array **bound = rc ? NULL : calloc((size_t)ir_ntensors(low) + 1, sizeof *bound);
  if (!rc && !bound) rc = api_fail("out of memory");
  if (!rc && noutputs != low->outputs.len)
    rc = api_fail("kiln_graph_predict_arrays: predict of '%s' gives %d output%s, not %d", low->name, low->outputs.len,
                  low->outputs.len == 1 ? "" : "s", noutputs);
  if (!rc) rc = api_record_bind(low, s, ninputs, inputs, nweights, weight_names, weights, bound);
  if (!rc) rc = api_record_predict(s, low, bound, outputs);
  api_graph_lock(g, false);
  free(bound);
  return rc ? KILN_ERR : api_ok();
}
