/* api_graph.c — graphs in code. A kiln_graph is the .kiln text of one model, grown a
 * statement per call and lowered by the front end after each one, so that an op call is
 * checked, its learnable inputs created and named (fe_call.c) and its attributes parsed
 * (ir_attr.c) exactly as in a file, and the text it prints parses back to the same graph. A
 * statement the front end refuses is taken back, and its diagnostic is the call's error. */
#include "api.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kiln_graph {
  pthread_mutex_t mu;
  char *name;
  api_buf dims;               /* "dim batch = 64\n" lines */
  api_buf body;               /* the model's statements, one per line */
  api_buf targets;            /* ", "-separated names of inputs and op results */
  bool has_output, has_train;
  api_lowered low;            /* the last full lowering, while the text is unchanged; for a
                                 loaded file, the file's own lowering until a statement is
                                 added (its tensor order, hence the weights a seed draws,
                                 are then those `kiln compile FILE` gives) */
};

void api_lowered_free(api_lowered *l) {
  ir_graph_free(l->g);
  fe_file_free(l->file);
  *l = (api_lowered){0};
}

int api_lower_text(const char *name, const char *text, api_lowered *out) {
  api_diags x;
  *out = (api_lowered){0};
  if (api_diags_open(&x)) return KILN_ERR;
  out->file = fe_parse_text(name, text, strlen(text), &x.d);
  if (out->file && !x.d.errors && !fe_check_file(out->file, NULL, 0, &x.d) && out->file->models)
    out->g = fe_lower_model(out->file, out->file->models, NULL, 0, &x.d);
  if (!out->g) api_lowered_free(out);
  return api_diags_close(&x, !out->g, "the model was refused") ? KILN_ERR : api_ok();
}

/* The model's text; a probe (checking a statement before any output is declared) outputs
 * every name so far, since the front end refuses a model without outputs. */
static void api_graph_source(const kiln_graph *g, bool probe, api_buf *out) {
  api_buf_printf(out, "%smodel %s {\n%s", g->dims.s ? g->dims.s : "", g->name, g->body.s ? g->body.s : "");
  if (probe && !g->has_output && !g->has_train && g->targets.len) api_buf_printf(out, "  output %s\n", g->targets.s);
  api_buf_printf(out, "}\n");
}

static int api_graph_lower(kiln_graph *g, bool probe, api_lowered *out) {
  api_buf src = {0};
  api_graph_source(g, probe, &src);
  int rc = src.oom ? api_fail("out of memory") : api_lower_text("<graph>", src.s, out);
  api_buf_free(&src);
  return rc;
}

/* The full lowering, kept until the text changes. */
static int api_graph_lowered(kiln_graph *g, const ir_graph **out) {
  if (!g->low.g && api_graph_lower(g, false, &g->low)) return KILN_ERR;
  *out = g->low.g;
  return KILN_OK;
}

/* Appends a statement (and the name it defines, if any) and keeps it only when the model
 * still lowers; otherwise both are taken back and the diagnostic is the error. */
static int api_graph_add(kiln_graph *g, const char *target, api_buf *stmt) {
  if (stmt->oom) return api_buf_free(stmt), api_fail("out of memory");
  size_t body = g->body.len, targets = g->targets.len;
  api_buf_printf(&g->body, "  %s\n", stmt->s);
  api_buf_free(stmt);
  if (target) api_buf_printf(&g->targets, "%s%s", g->targets.len ? ", " : "", target);
  api_lowered probe = {0};
  int rc = g->body.oom || g->targets.oom ? api_fail("out of memory") : api_graph_lower(g, true, &probe);
  api_lowered_free(&probe);
  if (rc) {
    api_buf_truncate(&g->body, body), api_buf_truncate(&g->targets, targets);
    return KILN_ERR;
  }
  api_lowered_free(&g->low);   /* a loaded file's own lowering too: the text is the model now */
  return api_ok();
}

static int api_graph_new_named(const char *name, kiln_graph **out) {
  *out = calloc(1, sizeof **out);
  if (!*out || !((*out)->name = api_strdup(name))) return free(*out), *out = NULL, api_fail("out of memory");
  pthread_mutex_init(&(*out)->mu, NULL);
  return api_ok();
}

KILN_API int kiln_graph_new(const char *name, kiln_graph **out) {
  if (!out) return api_fail("kiln_graph_new: out is NULL");
  *out = NULL;
  if (!api_is_name(name, false)) return api_fail("kiln_graph_new: '%s' is not a model name", name ? name : "(null)");
  return api_graph_new_named(name, out);
}

KILN_API void kiln_graph_free(kiln_graph *g) {
  if (!g) return;
  api_lowered_free(&g->low);
  api_buf_free(&g->dims), api_buf_free(&g->body), api_buf_free(&g->targets);
  pthread_mutex_destroy(&g->mu);
  free(g->name);
  free(g);
}

/* Locks g after the NULL check every entry point starts with. */
#define API_LOCK(g, fn) do { if (!(g)) return api_fail("%s: graph is NULL", fn); pthread_mutex_lock(&(g)->mu); } while (0)
#define API_UNLOCK_RETURN(g, rc) do { int rc_ = (rc); pthread_mutex_unlock(&(g)->mu); return rc_; } while (0)

KILN_API int kiln_graph_dim(kiln_graph *g, const char *name, int64_t value) {
  API_LOCK(g, "kiln_graph_dim");
  if (!api_is_name(name, false)) API_UNLOCK_RETURN(g, api_fail("kiln_graph_dim: '%s' is not a name", name ? name : "(null)"));
  if (value < 1) API_UNLOCK_RETURN(g, api_fail("kiln_graph_dim: %s = %lld; a dim is at least 1", name, (long long)value));
  size_t before = g->dims.len;
  api_buf_printf(&g->dims, "dim %s = %lld\n", name, (long long)value);
  api_lowered probe = {0};
  int rc = g->body.len ? api_graph_lower(g, true, &probe) : KILN_OK;
  api_lowered_free(&probe);
  if (rc) api_buf_truncate(&g->dims, before);
  else api_lowered_free(&g->low);
  API_UNLOCK_RETURN(g, rc ? rc : api_ok());
}

static int api_dims_text(api_buf *b, int rank, const int64_t *dims, const char *const *names, const char *fn) {
  if (rank < 0 || rank > KILN_MAX_RANK) return api_fail("%s: rank %d is not between 0 and %d", fn, rank, KILN_MAX_RANK);
  if (rank && !dims && !names) return api_fail("%s: dims is NULL", fn);
  api_buf_printf(b, "[");
  for (int i = 0; i < rank; i++) {
    const char *nm = names ? names[i] : NULL;
    if (nm && !api_is_name(nm, false)) return api_fail("%s: dim %d: '%s' is not a name", fn, i, nm);
    if (!nm && !dims) return api_fail("%s: dim %d has neither a size nor a name", fn, i);
    if (!nm && dims[i] < 1) return api_fail("%s: dim %d is %lld; dims are at least 1", fn, i, (long long)dims[i]);
    if (nm) api_buf_printf(b, "%s%s", i ? ", " : "", nm);
    else api_buf_printf(b, "%s%lld", i ? ", " : "", (long long)dims[i]);
  }
  api_buf_printf(b, "]");
  return KILN_OK;
}

static const char *api_dtype_word(kiln_dtype t) { return t == KILN_I32 ? "i32" : "f32"; }

KILN_API int kiln_graph_input(kiln_graph *g, const char *name, kiln_dtype dtype, int rank,
                              const int64_t *dims, const char *const *dim_names) {
  API_LOCK(g, "kiln_graph_input");
  api_buf s = {0};
  int rc = !api_is_name(name, false) ? api_fail("kiln_graph_input: '%s' is not a name", name ? name : "(null)")
         : dtype != KILN_F32 && dtype != KILN_I32 ? api_fail("kiln_graph_input: %s: dtype %d is not KILN_F32 or KILN_I32", name, (int)dtype)
         : KILN_OK;
  if (!rc) api_buf_printf(&s, "input %s : %s", name, api_dtype_word(dtype));
  if (!rc) rc = api_dims_text(&s, rank, dims, dim_names, "kiln_graph_input");
  if (rc) API_UNLOCK_RETURN(g, (api_buf_free(&s), rc));
  API_UNLOCK_RETURN(g, api_graph_add(g, name, &s));
}

/* A tensor argument: a name of the graph or a number, nothing that could reach further. */
static bool api_is_operand(const char *s) {
  if (api_is_name(s, true)) return true;
  char *end = NULL;
  if (!s || !*s) return false;
  strtod(s, &end);
  return *end == 0 && (*s == '-' || *s == '.' || (*s >= '0' && *s <= '9'));
}

KILN_API int kiln_graph_op(kiln_graph *g, const char *target, const char *op, int nin,
                           const char *const *inputs, const kiln_attrs *attrs) {
  API_LOCK(g, "kiln_graph_op");
  if (!api_is_name(target, false)) API_UNLOCK_RETURN(g, api_fail("kiln_graph_op: target '%s' is not a name", target ? target : "(null)"));
  if (!op || ir_op_lookup(op) < 0) {
    const char *sug = ir_op_suggest(op);
    API_UNLOCK_RETURN(g, api_fail("kiln_graph_op: '%s' is not an op%s%s%s", op ? op : "(null)", sug ? "; did you mean '" : "",
                                  sug ? sug : "", sug ? "'?" : ""));
  }
  if (nin < 0 || nin > 64 || (nin && !inputs)) API_UNLOCK_RETURN(g, api_fail("kiln_graph_op: %s: %d inputs (0 to 64, inputs not NULL)", op, nin));
  api_buf s = {0};
  api_buf_printf(&s, "%s = %s(", target, op);
  for (int i = 0; i < nin; i++) {
    if (!api_is_operand(inputs[i])) return api_buf_free(&s), pthread_mutex_unlock(&g->mu), api_fail("kiln_graph_op: %s: input %d ('%s') is not a tensor name or a number", op, i, inputs[i] ? inputs[i] : "(null)");
    api_buf_printf(&s, "%s%s", i ? ", " : "", inputs[i]);
  }
  if (attrs && attrs->n) api_buf_printf(&s, "%s%s", nin ? ", " : "", attrs->text.s);
  api_buf_printf(&s, ")");
  API_UNLOCK_RETURN(g, api_graph_add(g, target, &s));
}

/* `KEYWORD name : dtype[dims] = init(attrs)`: a param or a const declaration (fn names the
 * caller in messages). Called with g locked. */
static int api_graph_declare(kiln_graph *g, const char *fn, const char *keyword, const char *name, kiln_dtype dtype,
                             int rank, const int64_t *dims, const char *init, const kiln_attrs *attrs) {
  api_buf s = {0};
  int rc = !api_is_name(name, false) ? api_fail("%s: '%s' is not a name", fn, name ? name : "(null)")
         : init && ir_init_lookup(init) < 0 ? api_fail("%s: %s: '%s' is not an initializer", fn, name, init)
         : KILN_OK;
  if (!rc) api_buf_printf(&s, "%s %s : %s", keyword, name, api_dtype_word(dtype));
  if (!rc) rc = api_dims_text(&s, rank, dims, NULL, fn);
  if (!rc && init) api_buf_printf(&s, " = %s(%s)", init, attrs && attrs->n ? attrs->text.s : "");
  if (rc) return api_buf_free(&s), rc;
  return api_graph_add(g, name, &s);
}

KILN_API int kiln_graph_param(kiln_graph *g, const char *name, kiln_dtype dtype, int rank,
                              const int64_t *dims, const char *init, const kiln_attrs *attrs) {
  API_LOCK(g, "kiln_graph_param");
  API_UNLOCK_RETURN(g, api_graph_declare(g, "kiln_graph_param", "param", name, dtype, rank, dims, init, attrs));
}

KILN_API int kiln_graph_const(kiln_graph *g, const char *name, kiln_dtype dtype, int rank,
                              const int64_t *dims, const char *init, const kiln_attrs *attrs) {
  API_LOCK(g, "kiln_graph_const");
  API_UNLOCK_RETURN(g, api_graph_declare(g, "kiln_graph_const", "const", name, dtype, rank, dims, init, attrs));
}

KILN_API int kiln_graph_output(kiln_graph *g, const char *name) {
  API_LOCK(g, "kiln_graph_output");
  if (!api_is_name(name, true)) API_UNLOCK_RETURN(g, api_fail("kiln_graph_output: '%s' is not a name", name ? name : "(null)"));
  api_buf s = {0};
  api_buf_printf(&s, "output %s", name);
  bool had = g->has_output;
  g->has_output = true;
  int rc = api_graph_add(g, NULL, &s);
  if (rc) g->has_output = had;
  API_UNLOCK_RETURN(g, rc);
}

/* " schedule cosine(total=9) clip_norm=1.0 wd_exclude=bias,norm" after the optimizer; each
 * part checked to be what it claims, so no text reaches further than its place; the front end
 * checks the rest when the statement lowers. */
static int api_train_options(const kiln_train_options *o, api_buf *s) {
  if (!o) return KILN_OK;
  if (o->schedule) {
    if (ir_sched_lookup(o->schedule) < 0)
      return api_fail("kiln_graph_train_ex: '%s' is not a schedule (step, multistep, exponential, cosine, onecycle)", o->schedule);
    const kiln_attrs *a = o->schedule_attrs;
    api_buf_printf(s, " schedule %s(%s)", o->schedule, a && a->n ? a->text.s : "");
  } else if (o->schedule_attrs && o->schedule_attrs->n) {
    return api_fail("kiln_graph_train_ex: schedule_attrs without a schedule");
  }
  if (o->clip_norm != 0) {
    if (!(o->clip_norm > 0) || !isfinite(o->clip_norm)) return api_fail("kiln_graph_train_ex: clip_norm must be a positive number (0: none)");
    api_buf_printf(s, " clip_norm=%.9g", o->clip_norm);
  }
  if (o->wd_exclude) {
    const char *p = o->wd_exclude;
    for (const char *q = p; *q; q++)
      if (!(*q >= 'a' && *q <= 'z') && *q != ',' && *q != ' ')
        return api_fail("kiln_graph_train_ex: wd_exclude is \"bias\", \"norm\" or \"bias,norm\", not '%s'", p);
    api_buf_printf(s, " wd_exclude=%s", p);
  }
  return KILN_OK;
}

KILN_API int kiln_graph_train(kiln_graph *g, const char *loss, const char *optimizer, const kiln_attrs *attrs) {
  return kiln_graph_train_ex(g, loss, optimizer, attrs, NULL);
}

KILN_API int kiln_graph_train_ex(kiln_graph *g, const char *loss, const char *optimizer, const kiln_attrs *attrs,
                                 const kiln_train_options *options) {
  API_LOCK(g, "kiln_graph_train");
  if (!api_is_name(loss, true)) API_UNLOCK_RETURN(g, api_fail("kiln_graph_train: '%s' is not a name", loss ? loss : "(null)"));
  if (!optimizer || ir_optim_lookup(optimizer) < 0) API_UNLOCK_RETURN(g, api_fail("kiln_graph_train: '%s' is not an optimizer (sgd, adam, adamw)", optimizer ? optimizer : "(null)"));
  api_buf s = {0};
  api_buf_printf(&s, "train %s with %s(%s)", loss, optimizer, attrs && attrs->n ? attrs->text.s : "");
  if (api_train_options(options, &s)) API_UNLOCK_RETURN(g, (api_buf_free(&s), KILN_ERR));
  bool had = g->has_train;
  g->has_train = true;
  int rc = api_graph_add(g, NULL, &s);
  if (rc) g->has_train = had;
  API_UNLOCK_RETURN(g, rc);
}

KILN_API int kiln_graph_shape(kiln_graph *g, const char *name, kiln_dtype *dtype, int *rank, int64_t *dims) {
  API_LOCK(g, "kiln_graph_shape");
  if (!name || !rank || !dims) API_UNLOCK_RETURN(g, api_fail("kiln_graph_shape: name, rank or dims is NULL"));
  api_lowered probe = {0};
  if (api_graph_lower(g, true, &probe)) API_UNLOCK_RETURN(g, KILN_ERR);
  int t = ir_graph_find_tensor(probe.g, name);
  int rc = t < 0 ? api_fail("kiln_graph_shape: the graph has no tensor '%s'", name) : KILN_OK;
  if (!rc) {
    const ir_tensor *x = ir_tensor_at(probe.g, t);
    if (dtype) *dtype = (kiln_dtype)x->dtype;
    *rank = x->shape.rank;
    for (int i = 0; i < x->shape.rank; i++) dims[i] = x->shape.d[i];
    rc = api_ok();
  }
  api_lowered_free(&probe);
  API_UNLOCK_RETURN(g, rc);
}

KILN_API int kiln_graph_text(kiln_graph *g, char **text) {
  API_LOCK(g, "kiln_graph_text");
  if (!text) API_UNLOCK_RETURN(g, api_fail("kiln_graph_text: text is NULL"));
  *text = NULL;
  const ir_graph *low;
  if (api_graph_lowered(g, &low)) API_UNLOCK_RETURN(g, KILN_ERR);
  size_t len = 0;
  FILE *mem = open_memstream(text, &len);
  if (!mem) API_UNLOCK_RETURN(g, api_fail("out of memory"));
  ir_print(low, mem);
  fclose(mem);
  API_UNLOCK_RETURN(g, *text ? api_ok() : api_fail("out of memory"));
}

int api_graph_get(kiln_graph *g, const ir_graph **out) { return api_graph_lowered(g, out); }
void api_graph_lock(kiln_graph *g, bool lock) {
  if (lock) pthread_mutex_lock(&g->mu);
  else pthread_mutex_unlock(&g->mu);
}

/* ---- a .kiln file into a graph object: its model, lowered and printed as text ---- */

/* The statements of printed text: everything between "model NAME {" and the final "}". */
static int api_graph_from_print(kiln_graph *g, const char *text) {
  const char *start = strchr(text, '\n'), *end = strrchr(text, '}');
  if (!start || !end || end < start) return api_fail("kiln_graph_load: internal: unexpected printed text");
  api_buf_printf(&g->body, "%.*s", (int)(end - start - 1), start + 1);
  return g->body.oom ? api_fail("out of memory") : KILN_OK;
}

/* The graph keeps the file's lowering (low, taken over) as long as nothing is added. */
static int api_graph_adopt(api_lowered *low, kiln_graph **out) {
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) return api_fail("out of memory");
  ir_print(low->g, mem);
  fclose(mem);
  int rc = api_graph_new_named(low->g->name, out);
  if (!rc) rc = api_graph_from_print(*out, text);
  if (!rc) (*out)->has_output = low->g->outputs.len > 0, (*out)->has_train = low->g->has_train;
  if (!rc) (*out)->low = *low, *low = (api_lowered){0};
  if (rc) kiln_graph_free(*out), *out = NULL;
  free(text);
  return rc ? rc : api_ok();
}

/* Each -D as `kiln compile` takes it: a name and a value 1..2^40 (with lows[i] in 1..value: the
 * range lows[i]..value, a bounded dim; lows NULL or lows[i] 0: fixed); NULL arrays with n 0. */
static int api_graph_defines(int n, const char *const *names, const int64_t *values, const int64_t *lows, fe_define *defs) {
  if (n < 0 || n > 64) return api_fail("kiln_graph_load_dims: ndims is %d, not 0..64", n);
  if (n && (!names || !values)) return api_fail("kiln_graph_load_dims: dim_names or values is NULL");
  for (int i = 0; i < n; i++) {
    if (!names[i] || !api_is_name(names[i], false)) return api_fail("kiln_graph_load_dims: dim_names[%d] is not a name", i);
    if (values[i] < 1 || values[i] > IR_MAX_DIM)
      return api_fail("kiln_graph_load_dims: dim %s = %lld: a dim is 1..2^40", names[i], (long long)values[i]);
    int64_t lo = lows ? lows[i] : 0;
    if (lo < 0 || lo > values[i])
      return api_fail("kiln_graph_load_dims: dim %s = %lld..%lld: the range must be 1..value", names[i], (long long)lo, (long long)values[i]);
    defs[i] = (fe_define){names[i], values[i], lo};
  }
  return KILN_OK;
}

KILN_API int kiln_graph_load_dims(const char *path, const char *model, int ndims, const char *const *dim_names,
                                  const int64_t *values, kiln_graph **out) {
  return api_graph_load_bounds(path, model, ndims, dim_names, values, NULL, out);
}

/* Model `model` (NULL: the file's only one) of f (parsed from path, into x's diagnostics)
 * checked and lowered at defs, into *out, which then owns f. */
static int api_graph_lower_file(fe_file *f, const char *path, const char *model, const fe_define *defs, int ndims, api_diags *x,
                                kiln_graph **out) {
  fe_model *m = NULL;
  if (f && !x->d.errors && !fe_check_file(f, defs, ndims, &x->d)) {
    for (m = f->models; m && model && strcmp(m->name, model) != 0; m = m->next) {}
    if (!m) ir_error(&x->d, (ir_loc){0}, "%s has no model%s%s", path, model ? " named " : "", model ? model : "");
    else if (!model && m->next) ir_error(&x->d, (ir_loc){0}, "%s holds several models; name one", path), m = NULL;
  }
  api_lowered low = {f, m ? fe_lower_model(f, m, defs, ndims, &x->d) : NULL};
  int rc = api_diags_close(x, !low.g, "the model was refused");
  if (!rc) rc = api_graph_adopt(&low, out);
  api_lowered_free(&low);
  return rc;
}

int api_graph_load_bounds(const char *path, const char *model, int ndims, const char *const *dim_names, const int64_t *values,
                          const int64_t *lows, kiln_graph **out) {
  if (!out) return api_fail("kiln_graph_load: out is NULL");
  *out = NULL;
  if (!path) return api_fail("kiln_graph_load: path is NULL");
  fe_define defs[64];
  if (api_graph_defines(ndims, dim_names, values, lows, defs)) return KILN_ERR;
  api_diags x;
  if (api_diags_open(&x)) return KILN_ERR;
  return api_graph_lower_file(fe_parse_file(path, &x.d), path, model, defs, ndims, &x, out);
}

int api_graph_relower(kiln_graph *g, int ndims, const char *const *dim_names, const int64_t *values, kiln_graph **out) {
  if (!out) return api_fail("api_graph_relower: out is NULL");
  *out = NULL;
  if (!g || !g->low.file || !g->low.g) return api_fail("the graph was not lowered from a file");
  fe_define defs[64];
  if (api_graph_defines(ndims, dim_names, values, NULL, defs)) return KILN_ERR;
  const fe_file *f = g->low.file;
  api_diags x;
  if (api_diags_open(&x)) return KILN_ERR;
  return api_graph_lower_file(fe_parse_text(f->path, f->text, f->len, &x.d), f->path, g->low.g->name, defs, ndims, &x, out);
}

KILN_API int kiln_graph_load(const char *path, const char *model, kiln_graph **out) {
  return kiln_graph_load_dims(path, model, 0, NULL, NULL, out);
}
