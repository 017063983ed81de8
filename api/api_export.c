/* api_export.c — the recorded graph of chosen arrays as a model: a .kiln file and its
 * weights (safetensors). The walk goes back to arrays made from data; those the caller marks
 * become `input`s, the others `param`s (`const`s where they were bound to a model's consts)
 * whose values are the weights; the chosen arrays are
 * the outputs. The text is lowered once before anything is written, so a model that would
 * not compile (a name taken twice) is refused without leaving a file. */
#include "api.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int nout, nin;
  kiln_array *const *outs, *const *ins;
  const char *const *out_names, *const *in_names;
  const char *(*user)(void *ctx, const kiln_array *a);   /* further names (the REPL's) */
  void *user_ctx;
} api_export_names;

static const char *api_export_name(void *ctx, const kiln_array *a) {
  const api_export_names *x = ctx;
  for (int i = 0; i < x->nout; i++)
    if (x->outs[i] == a) return x->out_names[i];
  for (int i = 0; i < x->nin; i++)
    if (x->ins[i] == a) return x->in_names[i];
  return x->user ? x->user(x->user_ctx, a) : NULL;
}

static bool api_export_is_input(const api_export_names *x, const kiln_array *a) {
  for (int i = 0; i < x->nin; i++)
    if (x->ins[i] == a) return true;
  return false;
}

static int api_export_check(const api_export_names *x) {
  for (int i = 0; i < x->nout; i++) {
    if (!x->outs[i] || !x->out_names || !api_is_name(x->out_names[i], false))
      return api_fail("kiln_export: output %d is NULL or its name is not a name", i);
    if (!x->outs[i]->op) return api_fail("kiln_export: output '%s' is not computed by an op", x->out_names[i]);
  }
  for (int i = 0; i < x->nin; i++) {
    if (!x->ins[i] || !x->in_names || !api_is_name(x->in_names[i], false))
      return api_fail("kiln_export: input %d is NULL or its name is not a name", i);
    if (x->ins[i]->op) return api_fail("kiln_export: input '%s' must be an array made from data", x->in_names[i]);
  }
  return KILN_OK;
}

/* The model text: marked arrays as inputs, the other sources as params (or consts), the
 * outputs named. */
static int api_export_text(const api_walk *w, const api_export_names *x, const char *model, api_buf *b) {
  api_buf_printf(b, "# exported by kiln_export: the recorded graph of %d array%s\nmodel %s {\n", x->nout, x->nout == 1 ? "" : "s", model);
  for (int i = 0; i < w->nleaves; i++) {
    const kiln_array *a = w->leaves[i];
    bool in = api_export_is_input(x, a);
    if (a->constant) continue;
    if (!in && a->dtype != K_F32) return api_fail("kiln_export: an i32 array the graph reads must be marked as an input");
    api_walk_leaf_decl(w, b, a, in ? "input" : a->fixed ? "const" : "param");
  }
  api_walk_nodes_text(w, b);
  api_buf_printf(b, "  output ");
  for (int i = 0; i < x->nout; i++) api_buf_printf(b, "%s%s", i ? ", " : "", x->out_names[i]);
  api_buf_printf(b, "\n}\n");
  return b->oom ? api_fail("out of memory") : KILN_OK;
}

static int api_export_weights(const api_walk *w, const api_export_names *x, const char *path) {
  rt_st_tensor *ts = calloc((size_t)w->nleaves + 1, sizeof *ts);
  api_buf names = {0};
  size_t *at = calloc((size_t)w->nleaves + 1, sizeof *at);
  int n = 0, rc = ts && at ? KILN_OK : api_fail("out of memory");
  for (int i = 0; !rc && i < w->nleaves; i++) {
    const kiln_array *a = w->leaves[i];
    if (api_export_is_input(x, a) || a->constant) continue;
    at[n] = names.len;
    api_walk_name(w, &names, a);
    api_buf_printf(&names, "%c", 0);
    ts[n++] = (rt_st_tensor){.dtype = a->dtype, .shape = a->shape, .data = a->data};
  }
  for (int i = 0; !rc && i < n; i++) ts[i].name = names.s + at[i];
  char err[1024];
  if (!rc && (names.oom || rt_st_write(path, ts, n, NULL, 0, err, sizeof err))) rc = names.oom ? api_fail("out of memory") : api_fail("%s", err);
  free(ts), free(at), api_buf_free(&names);
  return rc;
}

int api_export(kiln_session *s, const char *kiln_path, const char *weights_path, const char *model,
               int nout, kiln_array *const *outs, const char *const *out_names, int nin, kiln_array *const *ins,
               const char *const *in_names, const char *(*user)(void *, const kiln_array *), void *user_ctx) {
  api_export_names x = {nout, nin, outs, ins, out_names, in_names, user, user_ctx};
  if (!kiln_path || !weights_path || !api_is_name(model, false) || nout < 1 || !outs || nin < 0 || (nin && !ins))
    return api_fail("kiln_export: paths, model name or outputs missing");
  if (api_export_check(&x) || api_grad_pending(s, true, nout, outs)) return KILN_ERR;
  api_walk w = {.to_sources = true, .name = api_export_name, .name_ctx = &x};
  for (int i = 0; i < nout; i++) api_walk_from(&w, outs[i]);
  api_buf text = {0};
  api_lowered low = {0};
  int rc = w.oom ? api_fail("out of memory") : api_export_text(&w, &x, model, &text);
  if (!rc) rc = api_lower_text(kiln_path, text.s, &low);
  api_lowered_free(&low);
  if (!rc) rc = api_export_weights(&w, &x, weights_path);
  char err[1024];
  rt_iovec part = {text.s, text.len};
  if (!rc && rt_file_write_atomic(kiln_path, &part, 1, err, sizeof err)) rc = api_fail("%s", err), remove(weights_path);
  api_walk_free(&w);
  api_buf_free(&text);
  return rc;
}

KILN_API int kiln_export(kiln_session *s, const char *kiln_path, const char *weights_path, const char *model,
                         int nout, kiln_array *const *outputs, const char *const *out_names,
                         int nin, kiln_array *const *inputs, const char *const *in_names) {
  if (!s) return api_fail("kiln_export: session is NULL");
  pthread_mutex_lock(&s->mu);
  int rc = api_export(s, kiln_path, weights_path, model, nout, outputs, out_names, nin, inputs, in_names, NULL, NULL);
  pthread_mutex_unlock(&s->mu);
  return rc ? KILN_ERR : api_ok();
}
