/* api_grad.c — kiln_grad: gradient arrays, lazy like any op result. Computing them walks the
 * recorded graph from the loss back to arrays made from data, declares the arrays asked
 * about as params and the loss as the train target, and runs the passes train_step runs up
 * to the gradients — infer, select, backward, prune — then, instead of the optimizer, makes
 * the gradients "<param>@grad" the outputs and feeds the params as inputs, and plans, fuses
 * and JIT-compiles as for predict. One compile serves every gradient of the call, and the
 * session's cache keeps it for the next iteration of a training loop.
 * The forward ops run as train_step runs them (the program is marked is_train): batch_norm
 * normalises by the batch's statistics (its moving statistics, declared params and so aux
 * states, are the gradient model's own storage: the arrays passed for them are not changed),
 * and dropout draws its mask as train_step's step k of a model created with the session's
 * seed (kiln_session_seed, 0 by default) does for a node of the same name, k counting the
 * kiln_grad calls since the seed was set, from 1. Seed and step are fixed when kiln_grad is
 * called, so the order in which gradients are read changes no mask. */
#include "api.h"

#include <stdlib.h>
#include <string.h>

static int api_grad_check(kiln_array *loss, int n, kiln_array *const *wrt, kiln_array *const *out) {
  if (!loss || n < 1 || n > 64 || !wrt || !out) return api_fail("kiln_grad: loss, wrt or out is NULL, or n is not 1..64");
  if (loss->dtype != K_F32 || loss->shape.rank != 0) return api_fail("kiln_grad: the loss must be an f32[] scalar");
  if (!loss->op) return api_fail("kiln_grad: the loss must be computed from the arrays (an op's result)");
  for (int i = 0; i < n; i++) {
    if (!wrt[i] || wrt[i]->s != loss->s) return api_fail("kiln_grad: wrt[%d] is NULL or of another session", i);
    if (wrt[i]->op || wrt[i]->grad || wrt[i]->dtype != K_F32)
      return api_fail("kiln_grad: wrt[%d] must be an f32 array made from data (not an op's result)", i);
    for (int j = 0; j < i; j++)
      if (wrt[j] == wrt[i]) return api_fail("kiln_grad: wrt[%d] and wrt[%d] are the same array", j, i);
  }
  return KILN_OK;
}

static api_grad *api_grad_new(kiln_array *loss, int n, kiln_array *const *wrt) {
  api_grad *g = calloc(1, sizeof *g);
  if (!g || !(g->wrt = calloc((size_t)n, sizeof *g->wrt)) || !(g->outs = calloc((size_t)n, sizeof *g->outs)))
    return g ? free(g->wrt), free(g), NULL : NULL;
  g->loss = loss, g->n = n, loss->refs++;
  for (int i = 0; i < n; i++) g->wrt[i] = wrt[i], wrt[i]->refs++;
  return g;
}

void api_grad_release(kiln_array *a) {
  api_grad *g = a->grad;
  g->outs[a->grad_index] = NULL, a->grad = NULL;
  if (--g->refs > 0) return;
  api_array_unref(g->loss);
  for (int i = 0; i < g->n; i++) api_array_unref(g->wrt[i]);
  free(g->wrt), free(g->outs), free(g);
}

KILN_API int kiln_grad(kiln_array *loss, int n, kiln_array *const *wrt, kiln_array **out) {
  if (api_grad_check(loss, n, wrt, out)) return KILN_ERR;
  kiln_session *s = loss->s;
  pthread_mutex_lock(&s->mu);
  api_grad *g = api_grad_new(loss, n, wrt);
  if (g) g->seed = s->seed, g->step = ++s->grad_steps;
  int made = 0;
  for (; g && made < n; made++) {
    kiln_array *a = api_array_new(s, K_F32, &wrt[made]->shape);
    if (!a) break;
    a->grad = g, a->grad_index = made, g->outs[made] = out[made] = a, g->refs++;
  }
  bool ok = g && made == n;
  for (int i = 0; g && !ok && i < made; i++) api_array_unref(out[i]);   /* the last frees g */
  pthread_mutex_unlock(&s->mu);
  return ok ? api_ok() : api_fail("kiln_grad: out of memory");
}

/* ---- the gradient model ---- */

static int api_grad_passes(ir_graph *g, pass_ctx *cx, const int *ids, int n) {
  for (int i = 0; i < n; i++)
    if (pass_table[ids[i]].run(g, cx)) return KILN_ERR;
  return KILN_OK;
}

/* Outputs: each param's gradient; then the params become inputs (the caller's buffers). */
static int api_grad_outputs(ir_graph *g, const char *const *wrt, int nwrt) {
  g->outputs.len = 0;
  for (int i = 0; i < nwrt; i++) {
    char name[128];
    snprintf(name, sizeof name, "%s@grad", wrt[i]);
    int t = ir_graph_find_tensor(g, name);
    if (t < 0) return api_fail("kiln_grad: wrt[%d] does not reach the loss (it gets no gradient)", i);
    *(int *)ir_vec_push(&g->outputs) = t;
  }
  for (int t = 0; t < ir_ntensors(g); t++)
    if (ir_tensor_at(g, t)->kind == IR_T_PARAM) ir_tensor_at(g, t)->kind = IR_T_INPUT;
  return KILN_OK;
}

int api_build_grad(const ir_graph *lowered, const char *const *wrt, int nwrt, cg_build *b, api_stop *stop) {
  static const int to_grads[] = {PASS_infer, PASS_select, PASS_backward, PASS_prune};
  static const int after[] = {PASS_inplace, PASS_fusion, PASS_plan};
  api_diags x;
  pass_ctx cx;
  *b = (cg_build){0};
  if (api_diags_open(&x)) return KILN_ERR;
  ir_graph *g = ir_graph_clone(lowered);
  g->mode = IR_MODE_TRAIN;
  pass_ctx_init(&cx, IR_MODE_TRAIN, &x.d);
  int rc = api_grad_passes(g, &cx, to_grads, 4);
  bool diag_error = rc != 0;          /* the passes' diagnostics say what went wrong */
  if (!rc) rc = api_grad_outputs(g, wrt, nwrt);
  if (!rc) {
    g->mode = cx.mode = IR_MODE_PREDICT, g->has_train = false;
    rc = api_grad_passes(g, &cx, after, 3);
    diag_error = rc != 0;
  }
  pass_ctx_free(&cx);
  api_diags_close(&x, diag_error, "the passes refused the gradient graph");
  if (rc) return ir_graph_free(g), KILN_ERR;
  b->predict = g;
  if (api_stopped(stop)) return cg_build_free(b), KILN_ERR;
  if (api_build_finish(b, 2, stop)) return KILN_ERR;
  b->desc->predict.is_train = 1;   /* the kernels' train forms, whose outputs backward reads */
  return KILN_OK;
}

/* ---- computing one kiln_grad call ---- */

/* The model text: sources as inputs, the wrt arrays as params, the loss trained; names[i]
 * gets wrt[i]'s name in it. */
static int api_grad_text(const api_grad *g, const api_walk *w, api_buf *key, char (*names)[16]) {
  for (int i = 0; i < g->n; i++) {
    if (g->wrt[i]->mark < 0 || !g->wrt[i]->leaf) return api_fail("kiln_grad: wrt[%d] does not reach the loss", i);
    snprintf(names[i], sizeof names[i], "a%d", g->wrt[i]->mark);
  }
  api_buf_printf(key, "model deferred {\n");
  for (int i = 0; i < w->nleaves; i++) {
    bool p = api_walk_aux_leaf(w, i);   /* a param passed for an aux state lowers to one */
    for (int k = 0; k < g->n; k++) p |= g->wrt[k] == w->leaves[i];
    api_walk_leaf_decl(w, key, w->leaves[i], p ? "param" : "input");
  }
  api_walk_nodes_text(w, key);
  api_buf_printf(key, "  train ");
  api_walk_name(w, key, g->loss);
  api_buf_printf(key, " with sgd(lr=1.0)\n}\n");
  return key->oom ? api_fail("out of memory") : KILN_OK;
}

/* The wrt index whose gradient output is named "a<K>@grad". */
static int api_grad_slot(const api_grad *g, const api_walk *w, const char *name) {
  kiln_array *leaf = w->leaves[atoi(name + 1)];
  for (int k = 0; k < g->n; k++)
    if (g->wrt[k] == leaf) return k;
  return -1;
}

static int api_grad_run(kiln_session *s, api_grad *g, const api_walk *w, api_cache_entry *e) {
  const rt_program *p = &e->b.desc->predict;
  const rt_tensor_info *ts = e->b.desc->tensors;
  const void *in[256];
  void *out[64] = {0};
  if (p->ninputs > 256 || p->noutputs > 64) return api_fail("kiln_grad: too many inputs");
  for (int k = 0; k < p->ninputs; k++) in[k] = w->leaves[atoi(ts[p->inputs[k]].name + 1)]->data;
  int rc = KILN_OK;
  for (int k = 0; k < p->noutputs && !rc; k++) {
    int slot = api_grad_slot(g, w, ts[p->outputs[k]].name);
    out[k] = slot >= 0 ? api_array_storage(g->wrt[slot]) : NULL;
    if (!out[k]) rc = api_fail("out of memory");
  }
  if (!rc && rt_model_set_random(e->m, g->seed, g->step)) rc = api_fail("%s", rt_model_error(e->m));
  if (!rc && rt_model_predict(e->m, in, out)) rc = api_fail("%s", rt_model_error(e->m));
  for (int k = 0; k < p->noutputs; k++) {
    int slot = api_grad_slot(g, w, ts[p->outputs[k]].name);
    kiln_array *a = slot >= 0 ? g->outs[slot] : NULL;
    if (!rc && a && !a->data) a->data = out[k];
    else free(out[k]);
  }
  return rc;
}

int api_grad_pending(kiln_session *s, bool to_sources, int n, kiln_array *const *roots) {
  api_walk w = {.to_sources = to_sources};
  for (int i = 0; i < n; i++) api_walk_from(&w, roots[i]);
  kiln_array *pending[64];
  n = 0;
  for (int i = 0; i < w.nleaves && n < 64; i++)
    if (!w.leaves[i]->data && w.leaves[i]->grad) pending[n++] = w.leaves[i];
  bool oom = w.oom;
  api_walk_free(&w);
  if (oom) return api_fail("out of memory");
  for (int i = 0; i < n; i++)
    if (!pending[i]->data && api_grad_compute(s, pending[i])) return KILN_ERR;
  return KILN_OK;
}

/* Gradients the loss's graph reads (from an earlier kiln_grad) are computed first. */
static int api_grad_inputs(kiln_session *s, const api_grad *g) {
  kiln_array *loss = g->loss;
  return api_grad_pending(s, true, 1, &loss);
}

int api_grad_compute(kiln_session *s, kiln_array *a) {
  api_grad *g = a->grad;
  if (api_grad_inputs(s, g)) return KILN_ERR;
  api_walk w = {.to_sources = true};
  api_buf key = {0};
  char names[64][16];
  const char *wrt[64];
  api_walk_from(&w, g->loss);
  int rc = w.oom ? api_fail("out of memory") : api_grad_text(g, &w, &key, names);
  for (int i = 0; i < g->n; i++) wrt[i] = names[i];
  api_cache_entry *e = NULL;
  if (!rc) rc = api_cache_lookup(s, key.s, wrt, g->n, &e);
  if (!rc) rc = api_grad_run(s, g, &w, e);
  api_walk_free(&w);
  api_buf_free(&key);
  return rc;
}
