/* kiln_repl_model.c — a model in the session. `:model FILE.kiln` JIT-compiles the model
 * (seed 0) and makes its weights arrays named as in the model (hidden.weight); the model
 * instance holds the weights between steps. `p = predict(x)` records the model's predict
 * graph on arrays (each node a lazy array over the weight arrays: nothing runs until shown);
 * `loss = train_step(x, label)` runs the model's own train_step (its optimizer) on the
 * arrays' values and refreshes the weight arrays; `:weights FILE.safetensors` loads
 * weights into it. Ctrl-C interrupts :model's compile as it does a statement's (the
 * session's interrupt request), and the session keeps what it had. A bounded model's
 * predict at other extents than the bounds records the model lowered again at them (its
 * attributes, a reshape to [batch, ...], hold those sizes), kept for the next call alike. */
#include "kiln_repl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct repl_model {
  kiln_graph *g;
  kiln_model *m;
  int ndefs;                       /* :model's DIM=N defs (the fixed ones: a bounded dim's */
  char *def_names[8];              /* extent comes from the arrays) */
  int64_t def_values[8];
  kiln_graph *at;                  /* the model lowered at at_ext (a bounded model), or NULL */
  int64_t at_ext[K_MAX_BDIMS];
};

void repl_model_free(repl *r) {
  if (!r->model) return;
  kiln_model_free(r->model->m);
  kiln_graph_free(r->model->g), kiln_graph_free(r->model->at);
  for (int i = 0; i < r->model->ndefs; i++) free(r->model->def_names[i]);
  free(r->model);
  r->model = NULL;
}

/* The model's weights, as saved, become (or replace) the session's arrays of those names. */
static int repl_model_refresh(repl *r) {
  char path[4096], err[1024];
  const char *tmpdir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/kiln-repl-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) return api_fail("cannot create a temporary file in %s", path);
  close(fd);
  rt_st_file f;
  int rc = kiln_model_save(r->model->m, path);
  if (!rc && rt_st_open(path, &f, err, sizeof err)) rc = api_fail("%s", err);
  bool opened = !rc;
  unlink(path);
  for (int i = 0; opened && !rc && i < f.n; i++) {
    const rt_st_entry *e = &f.entries[i];
    int64_t dims[KILN_MAX_RANK];
    for (int k = 0; k < e->shape.rank; k++) dims[k] = e->shape.d[k];
    kiln_array *a = NULL;
    rc = kiln_array_from_data(r->s, (kiln_dtype)e->dtype, e->shape.rank, dims, e->data, &a);
    if (!rc && repl_bind(r, e->name, a)) rc = api_fail("out of memory");
  }
  if (opened) rt_st_close(&f);
  return rc;
}

/* `batch=1` or `batch=1..64` after the file: dims rebound as `kiln compile -D` rebinds them
 * (lows[i] 0: fixed; else the range lows[i]..values[i], a bounded dim). */
static int repl_model_dims(char **arg, int n, const char **names, int64_t *values, int64_t *lows) {
  for (int i = 0; i < n; i++) {
    char *eq = strchr(arg[i], '='), *end = NULL;
    lows[i] = 0;
    if (eq) values[i] = strtoll(eq + 1, &end, 10);
    if (eq && end && end != eq + 1 && end[0] == '.' && end[1] == '.')
      lows[i] = values[i], values[i] = strtoll(end + 2, &end, 10);
    if (!eq || eq == arg[i] || !eq[1] || *end)
      return api_fail("usage: :model FILE.kiln [DIM=N | DIM=LO..HI]...; '%s' is neither", arg[i]);
    *eq = 0, names[i] = arg[i];
  }
  return KILN_OK;
}

static bool repl_model_bounded(kiln_model *m) {
  int nd = 0;
  return kiln_model_dims(m, &nd) == KILN_OK && nd > 0;
}

/* "2 inputs (image, label)": entry point train's (1) or predict's (0) inputs, by name. */
static void repl_model_inputs(kiln_model *m, int train, int nin, char *buf, size_t size) {
  size_t at = (size_t)snprintf(buf, size, "%d input%s (", nin, nin == 1 ? "" : "s");
  for (int i = 0; i < nin && at < size; i++) {
    const char *name = "?";
    kiln_dtype t;
    int rank;
    int64_t d[KILN_MAX_RANK];
    kiln_model_tensor(m, train, 0, i, &name, &t, &rank, d);
    at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? ", " : "", name);
  }
  if (at < size) snprintf(buf + at, size - at, ")");
}

int repl_cmd_model(repl *r, char **arg, int n) {
  if (n < 2) return api_fail("usage: :model FILE.kiln [DIM=N | DIM=LO..HI]...");
  if (n - 2 > 8) return api_fail(":model: at most 8 dims");
  const char *names[8];
  int64_t values[8], lows[8];
  if (repl_model_dims(arg + 2, n - 2, names, values, lows)) return KILN_ERR;
  repl_model *m = calloc(1, sizeof *m);
  if (!m) return api_fail("out of memory");
  /* compiled under the session's interrupt request: Ctrl-C stops a long compile */
  if (api_graph_load_bounds(arg[1], NULL, n - 2, names, values, lows, &m->g) || api_graph_jit(m->g, 0, &r->s->stop, &m->m)) {
    kiln_graph_free(m->g), free(m);
    return KILN_ERR;
  }
  for (int i = 0; i < n - 2; i++)
    if (!lows[i] && (m->def_names[m->ndefs] = strdup(names[i]))) m->def_values[m->ndefs++] = values[i];
  repl_model_free(r);
  r->model = m;
  int rc = repl_model_refresh(r);
  if (!rc) {
    int nin = 0, nout = 0, tin = 0, tout;
    char pin[512], tins[512];
    kiln_model_count(m->m, 0, &nin, &nout);
    repl_model_inputs(m->m, 0, nin, pin, sizeof pin);
    bool trains = kiln_model_count(m->m, 1, &tin, &tout) == KILN_OK;
    if (trains) repl_model_inputs(m->m, 1, tin, tins, sizeof tins);
    printf("model %s: predict takes %s%s%s; its weights are arrays now (:vars)\n", arg[1], pin,
           trains ? ", train_step " : "", trains ? tins : "");
  }
  return rc;
}

int repl_cmd_weights(repl *r, char **arg, int n) {
  if (n != 2) return api_fail("usage: :weights FILE.safetensors");
  if (!r->model) return api_fail(":weights: no model loaded (:model FILE.kiln first)");
  if (kiln_model_load(r->model->m, arg[1])) return KILN_ERR;
  return repl_model_refresh(r);
}

/* :save_state / :load_state: everything a train step reads (kiln_model_save_state), so a
 * session's training resumes where it stopped, in this session or another. */
int repl_cmd_state(repl *r, char **arg, int n, bool save) {
  const char *cmd = save ? ":save_state" : ":load_state";
  if (n != 2) return api_fail("usage: %s FILE.safetensors", cmd);
  if (!r->model) return api_fail("%s: no model loaded (:model FILE.kiln first)", cmd);
  if (save) return kiln_model_save_state(r->model->m, arg[1]);
  if (kiln_model_load_state(r->model->m, arg[1])) return KILN_ERR;
  return repl_model_refresh(r);
}

/* ---- predict(...) and train_step(...) ---- */

/* "predict(a, b)" into the entry point and the argument names; false when text is not
 * such a call. */
static bool repl_parse_call(const char *text, bool *train, char **args, int *nargs, char *buf, size_t n) {
  const char *open = strchr(text, '(');
  size_t len = strlen(text);
  if (!open || len < 2 || text[len - 1] != ')') return false;
  size_t head = (size_t)(open - text);
  while (head && text[head - 1] == ' ') head--;
  if (!((head == 7 && !strncmp(text, "predict", 7)) || (head == 10 && !strncmp(text, "train_step", 10)))) return false;
  *train = head == 10;
  snprintf(buf, n, "%.*s", (int)(len - 1 - (size_t)(open - text) - 1), open + 1);
  *nargs = 0;
  for (char *tok = strtok(buf, ", "); tok && *nargs < 16; tok = strtok(NULL, ", ")) args[(*nargs)++] = tok;
  return true;
}

/* Each argument names an array of the input's dtype and shape, in entry point order. */
static int repl_call_args(repl *r, bool train, char **args, int nargs, kiln_array **out) {
  int nin = 0, nout = 0;
  if (kiln_model_count(r->model->m, train, &nin, &nout)) return KILN_ERR;
  if (nargs != nin) return api_fail("%s takes %d input%s, not %d", train ? "train_step" : "predict", nin, nin == 1 ? "" : "s", nargs);
  for (int i = 0; i < nin; i++) {
    const char *name;
    kiln_dtype t;
    int rank;
    int64_t d[KILN_MAX_RANK];
    repl_var *v = repl_find(r, args[i]);
    kiln_model_tensor(r->model->m, train, 0, i, &name, &t, &rank, d);
    if (!v) return api_fail("no array named '%s' (:vars lists them)", args[i]);
    k_shape want = {.rank = rank};
    for (int k = 0; k < rank; k++) want.d[k] = d[k];
    bool bounded = repl_model_bounded(r->model->m) && rank == v->a->shape.rank;   /* the extents are checked below */
    if ((k_dtype)t != v->a->dtype || (!bounded && !ir_shape_eq(&want, &v->a->shape))) {
      char w[200], g[200];
      ir_type_str((k_dtype)t, &want, w, sizeof w), ir_type_str(v->a->dtype, &v->a->shape, g, sizeof g);
      return api_fail("input '%s' is %s; '%s' is %s", name, w, args[i], g);
    }
    out[i] = v->a;
  }
  return KILN_OK;
}

/* A bounded model's extents from the arguments' shapes (every dim at its bound for a fixed
 * model, whose entry points take none). */
static int repl_extents(repl *r, bool train, kiln_array **args, int nargs, int64_t *extents) {
  k_shape shapes[16];
  for (int i = 0; i < nargs && i < 16; i++) shapes[i] = args[i]->shape;
  return api_model_extents(r->model->m, train, shapes, extents);
}

/* The first `rows` rows of a (a lazy slice, owned by the caller). */
static int repl_first_rows(repl *r, kiln_array *a, int64_t rows, kiln_array **out) {
  kiln_attrs *at = NULL;
  int rc = kiln_attrs_new(&at);
  if (!rc) rc = kiln_attrs_int(at, "axis", 0) || kiln_attrs_int(at, "begin", 0) || kiln_attrs_int(at, "end", rows);
  if (!rc) rc = kiln_array_op(r->s, "slice", 1, &a, at, out);
  kiln_attrs_free(at);
  return rc;
}

/* Weights bound to the session's arrays of their names; kiln_graph_predict_arrays binds
 * the inputs (those predict reads, in the entry point's order) and records predict. A
 * weight whose rows follow a bounded dim (a position table) is stored at the bound: at a
 * smaller extent the record reads its first rows, as the compiled model does (each such
 * slice is put in owned[], for the caller to free). */
static int repl_weights(repl *r, const ir_graph *g, const char **names, kiln_array **arrays, int *n, kiln_array **owned, int *nowned) {
  *n = *nowned = 0;
  for (int t = 0; t < ir_ntensors(g); t++) {
    const ir_tensor *x = ir_tensor_at(g, t);
    if (x->kind != IR_T_PARAM && x->kind != IR_T_AUX) continue;
    repl_var *v = repl_find(r, x->name);
    if (!v) return api_fail("the model's weight '%s' is no longer an array", x->name);
    kiln_array *a = v->a;
    k_shape rest = v->a->shape;
    rest.d[0] = x->shape.d[0];
    if (x->shape.rank > 0 && x->shape.d[0] < v->a->shape.d[0] && ir_shape_eq(&rest, &x->shape)) {
      if (repl_first_rows(r, v->a, x->shape.d[0], &a)) return KILN_ERR;
      owned[(*nowned)++] = a;
    }
    names[*n] = x->name, arrays[(*n)++] = a;
  }
  return KILN_OK;
}

/* The graph predict records at extents ext of a bounded model: the model's own at its bounds,
 * else the model lowered again there, with :model's fixed dims and each bounded dim at its
 * extent (the last such graph is kept). */
static int repl_graph_at(repl *r, const int64_t *ext, kiln_graph **out) {
  repl_model *m = r->model;
  int nd = 0;
  kiln_model_dims(m->m, &nd);
  const char *names[8 + K_MAX_BDIMS];
  int64_t values[8 + K_MAX_BDIMS];
  bool at_bounds = true;
  int n = 0;
  for (int k = 0; k < nd; k++) {
    int64_t lo, hi;
    kiln_model_dim(m->m, k, &names[n], &lo, &hi);
    at_bounds = at_bounds && ext[k] == hi;
    values[n++] = ext[k];
  }
  *out = m->g;
  if (at_bounds) return KILN_OK;
  *out = m->at;
  if (m->at && memcmp(m->at_ext, ext, (size_t)nd * sizeof *ext) == 0) return KILN_OK;
  for (int i = 0; i < m->ndefs; i++) names[n] = m->def_names[i], values[n++] = m->def_values[i];
  kiln_graph *g = NULL;
  if (api_graph_relower(m->g, n, names, values, &g)) return KILN_ERR;
  kiln_graph_free(m->at);
  m->at = *out = g;
  memcpy(m->at_ext, ext, (size_t)nd * sizeof *ext);
  return KILN_OK;
}

static int repl_predict(repl *r, kiln_array **args, int nargs, char **targets, int ntargets) {
  int64_t ext[K_MAX_BDIMS];   /* a bounded model: the arguments' extents in range */
  kiln_graph *rg = r->model->g;
  if (repl_model_bounded(r->model->m) && (repl_extents(r, false, args, nargs, ext) || repl_graph_at(r, ext, &rg))) return KILN_ERR;
  const ir_graph *g;
  api_graph_lock(rg, true);
  int rc = api_graph_get(rg, &g);
  api_graph_lock(rg, false);
  if (rc) return KILN_ERR;
  int nt = ir_ntensors(g), nouts = g->outputs.len, nw = 0;
  if (ntargets && ntargets != nouts) return api_fail("predict gives %d output%s", nouts, nouts == 1 ? "" : "s");
  const char **names = calloc((size_t)nt + 1, sizeof *names);
  kiln_array **weights = calloc((size_t)nt + 1, sizeof *weights), **outs = calloc((size_t)nouts + 1, sizeof *outs);
  kiln_array **owned = calloc((size_t)nt + 1, sizeof *owned);
  int nowned = 0;
  rc = names && weights && outs && owned ? repl_weights(r, g, names, weights, &nw, owned, &nowned) : api_fail("out of memory");
  if (!rc) rc = kiln_graph_predict_arrays(rg, r->s, nargs, args, nw, names, weights, nouts, outs);
  for (int i = 0; !rc && i < nouts; i++) {
    kiln_array *a = outs[i];
    if (!ntargets) rc = repl_show(r, a);
    else if (outs[i] = NULL, repl_bind(r, targets[i], a)) rc = api_fail("out of memory");   /* the name owns it now */
  }
  for (int i = 0; outs && i < nouts; i++) kiln_array_free(outs[i]);
  for (int i = 0; i < nowned; i++) kiln_array_free(owned[i]);
  free(names), free(weights), free(outs), free(owned);
  return rc;
}

/* The model's own train_step on the arguments' values; the loss as a new array. */
static int repl_train_step(repl *r, kiln_array **args, int nargs, char **targets, int ntargets) {
  const void *in[16];
  for (int i = 0; i < nargs; i++) {
    if (kiln_array_eval(r->s, 1, &args[i])) return KILN_ERR;
    in[i] = args[i]->data;
  }
  float loss = 0;
  int64_t ext[K_MAX_BDIMS];
  if (repl_extents(r, true, args, nargs, ext) || kiln_model_train_step_at(r->model->m, ext, in, &loss) || repl_model_refresh(r))
    return KILN_ERR;
  kiln_array *a = NULL;
  if (kiln_array_from_data(r->s, KILN_F32, 0, NULL, &loss, &a)) return KILN_ERR;
  if (ntargets > 1) return kiln_array_free(a), api_fail("train_step gives one value, the loss");
  if (ntargets) return repl_bind(r, targets[0], a) ? api_fail("out of memory") : KILN_OK;
  int rc = repl_show(r, a);
  kiln_array_free(a);
  return rc;
}

int repl_model_call(repl *r, const char *text, char **targets, int ntargets) {
  const char *rhs = ntargets ? strchr(text, '=') + 1 : text;
  while (*rhs == ' ') rhs++;
  char buf[1024], *args[16];
  int nargs = 0;
  bool train = false;
  kiln_array *arrays[16];
  if (!repl_parse_call(rhs, &train, args, &nargs, buf, sizeof buf)) return -1;
  if (!r->model) return api_fail("%s: no model loaded (:model FILE.kiln first)", train ? "train_step" : "predict");
  if (repl_call_args(r, train, args, nargs, arrays)) return KILN_ERR;
  return train ? repl_train_step(r, arrays, nargs, targets, ntargets) : repl_predict(r, arrays, nargs, targets, ntargets);
}
