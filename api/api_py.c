/* api_py.c — model sources (kiln_source_*), what the Python package (python/kiln) compiles
 * through: one model lowered from a .kiln file, .kiln text or an .onnx file, its dims bound
 * or bounded as `kiln compile -D` binds them, then JIT-compiled to the very descriptor a
 * generated .so exports (`kiln_model`, an rt_model_api), so that Python drives a JIT'd model
 * and a loaded .so through one path, as `kiln run` does (tools/kiln.c, kiln_jit_graph); or
 * compiled to a .so and its header as `kiln compile` does. */
#define _GNU_SOURCE   /* dladdr */
#include "api.h"
#include "onnx.h"

#include <dlfcn.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One JIT-compiled build: its code and descriptor, and the table Python reads. */
typedef struct api_jit {
  cg_build b;
  rt_model_api api;
  struct api_jit *next;
} api_jit;

struct kiln_source {
  pthread_mutex_t mu;
  api_lowered low;               /* file NULL for an .onnx source, whose data live in g's arena */
  ir_vec renamed;                /* onnx_name_pair: ONNX names made valid .kiln names */
  api_jit *jits;
};

enum { API_MAX_DEFS = 64 };

/* The -D list: names[i] fixed at values[i], or bounded to lows[i]..values[i] when lows[i] > 0. */
static int api_source_defs(int n, const char *const *names, const int64_t *values, const int64_t *lows, fe_define *defs) {
  if (n < 0 || n > API_MAX_DEFS) return api_fail("kiln_source: ndims is %d, not 0..%d", n, API_MAX_DEFS);
  if (n && (!names || !values)) return api_fail("kiln_source: dim_names or values is NULL");
  for (int i = 0; i < n; i++) {
    int64_t lo = lows ? lows[i] : 0;
    if (!names[i] || !api_is_name(names[i], false)) return api_fail("kiln_source: dim_names[%d] is not a name", i);
    if (values[i] < 1 || values[i] > IR_MAX_DIM || lo < 0 || lo > values[i])
      return api_fail("kiln_source: dim %s = %lld..%lld: a dim is 1..2^40 (a range LO..HI with 1 <= LO <= HI)", names[i],
                      (long long)(lo ? lo : values[i]), (long long)values[i]);
    defs[i] = (fe_define){names[i], values[i], lo};
  }
  return KILN_OK;
}

static int api_source_new(kiln_source **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return api_fail("out of memory");
  pthread_mutex_init(&(*out)->mu, NULL);
  (*out)->renamed.elem = sizeof(onnx_name_pair);
  return KILN_OK;
}

KILN_API void kiln_source_free(kiln_source *s) {
  if (!s) return;
  for (api_jit *j = s->jits, *next; j; j = next) next = j->next, cg_build_free(&j->b), free(j);
  api_lowered_free(&s->low);
  ir_vec_free(&s->renamed);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* The model `model` of a parsed file (NULL: its only one), lowered with defs into s. */
static void api_source_lower(kiln_source *s, const char *what, const char *model, const fe_define *defs, int n, ir_diag *d) {
  fe_file *f = s->low.file;
  fe_model *m = NULL;
  if (!f || d->errors || fe_check_file(f, defs, n, d)) return;
  for (m = f->models; m && model && strcmp(m->name, model) != 0; m = m->next) {}
  if (!m) ir_error(d, (ir_loc){0}, "%s has no model%s%s", what, model ? " named " : "", model ? model : "");
  else if (!model && m->next) ir_error(d, (ir_loc){0}, "%s holds several models; name one", what), m = NULL;
  if (m) s->low.g = fe_lower_model(f, m, defs, n, d);
}

/* Parses (text NULL: reads path) and lowers, or imports an .onnx path; s->low.g NULL on errors. */
static int api_source_open(const char *path, const char *text, const char *model, int ndims, const char *const *names,
                           const int64_t *values, const int64_t *lows, const char *train, kiln_source **out) {
  fe_define defs[API_MAX_DEFS];
  api_diags x;
  bool onnx = !text && onnx_is_onnx_path(path);
  if (api_source_defs(ndims, names, values, lows, defs)) return KILN_ERR;
  if (train && !onnx) return api_fail("kiln_source: train applies to .onnx files; a .kiln model has its own train statement");
  if (model && onnx) return api_fail("kiln_source: %s holds one model; model must be NULL", path);
  if (api_source_new(out) || api_diags_open(&x)) return kiln_source_free(*out), *out = NULL, KILN_ERR;
  kiln_source *s = *out;
  if (onnx) {
    onnx_options oo = {.defs = defs, .ndefs = ndims, .train = train};
    s->low.g = onnx_import(path, &oo, &x.d, &s->renamed);
  } else {
    s->low.file = text ? fe_parse_text(path, text, strlen(text), &x.d) : fe_parse_file(path, &x.d);
    api_source_lower(s, path, model, defs, ndims, &x.d);
  }
  if (api_diags_close(&x, !s->low.g, "the model was refused")) return kiln_source_free(s), *out = NULL, KILN_ERR;
  return api_ok();
}

KILN_API int kiln_source_file(const char *path, const char *model, int ndims, const char *const *dim_names,
                              const int64_t *values, const int64_t *lows, const char *train, kiln_source **out) {
  if (!out) return api_fail("kiln_source_file: out is NULL");
  *out = NULL;
  if (!path || !*path) return api_fail("kiln_source_file: path is NULL or empty");
  return api_source_open(path, NULL, model, ndims, dim_names, values, lows, train, out);
}

KILN_API int kiln_source_text(const char *name, const char *text, const char *model, int ndims, const char *const *dim_names,
                              const int64_t *values, const int64_t *lows, kiln_source **out) {
  if (!out) return api_fail("kiln_source_text: out is NULL");
  *out = NULL;
  if (!text) return api_fail("kiln_source_text: text is NULL");
  return api_source_open(name && *name ? name : "<text>", text, model, ndims, dim_names, values, lows, NULL, out);
}

KILN_API int kiln_source_print(kiln_source *s, char **text) {
  if (!s || !text) return api_fail("kiln_source_print: source or text is NULL");
  size_t len = 0;
  *text = NULL;
  FILE *mem = open_memstream(text, &len);
  if (!mem) return api_fail("out of memory");
  pthread_mutex_lock(&s->mu);
  ir_print(s->low.g, mem);
  pthread_mutex_unlock(&s->mu);
  fclose(mem);
  return *text ? api_ok() : api_fail("out of memory");
}

KILN_API int kiln_source_nrenamed(kiln_source *s, int *n) {
  if (!s || !n) return api_fail("kiln_source_nrenamed: source or n is NULL");
  *n = s->renamed.len;
  return api_ok();
}

KILN_API int kiln_source_renamed(kiln_source *s, int index, const char **onnx_name, const char **kiln_name) {
  if (!s) return api_fail("kiln_source_renamed: source is NULL");
  if (index < 0 || index >= s->renamed.len) return api_fail("kiln_source_renamed: pair %d of %d", index, s->renamed.len);
  const onnx_name_pair *p = &IR_VEC_AT(s->renamed, onnx_name_pair, index);
  if (onnx_name) *onnx_name = p->onnx;
  if (kiln_name) *kiln_name = p->kiln;
  return api_ok();
}

/* ---- the build: passes, descriptor and module, as kiln compile and kiln run make them ---- */

static int api_source_build(kiln_source *s, int target, int opt_level, cg_build *b) {
  api_diags x;
  char err[2048];
  cg_options co = {.opt_level = opt_level, .target = target};
  *b = (cg_build){0};
  if (api_diags_open(&x)) return KILN_ERR;
  int rc = cg_build_graphs(s->low.g, cg_target_disabled(target), &x.d, b);
  if (api_diags_close(&x, rc != 0, "the passes refused the graph")) return cg_build_free(b), KILN_ERR;
  if (cg_build_module(b, &co, err, sizeof err)) return cg_build_free(b), api_fail("%s", err);
  return KILN_OK;
}

KILN_API int kiln_source_jit(kiln_source *s, int opt_level, const void **api) {
  if (!s || !api) return api_fail("kiln_source_jit: source or api is NULL");
  *api = NULL;
  if (opt_level < 0 || opt_level > 3) return api_fail("kiln_source_jit: opt_level %d is not 0..3", opt_level);
  api_jit *j = calloc(1, sizeof *j);
  char err[2048];
  if (!j) return api_fail("out of memory");
  pthread_mutex_lock(&s->mu);
  int rc = api_source_build(s, RT_TARGET_CPU, opt_level, &j->b);
  if (!rc && cg_build_jit(&j->b, err, sizeof err)) rc = api_fail("%s", err), cg_build_free(&j->b);
  if (!rc) {
    j->api = rt_model_local_api(j->b.desc);
    j->next = s->jits, s->jits = j, *api = &j->api;
  }
  pthread_mutex_unlock(&s->mu);
  if (rc) return free(j), KILN_ERR;
  return api_ok();
}

/* ---- kiln_source_compile: the .so and NAME.h beside it, both or neither ---- */

KILN_API int kiln_source_compile(kiln_source *s, const char *so_path, const char *target, int opt_level) {
  if (!s || !so_path || !*so_path) return api_fail("kiln_source_compile: source or path is NULL");
  if (opt_level < 0 || opt_level > 3) return api_fail("kiln_source_compile: opt_level %d is not 0..3", opt_level);
  int t = !target || strcmp(target, "cpu") == 0 ? RT_TARGET_CPU : strcmp(target, "cuda") == 0 ? RT_TARGET_CUDA : -1;
  if (t < 0) return api_fail("kiln_source_compile: target '%s' is not cpu or cuda", target);
  cg_build b;
  pthread_mutex_lock(&s->mu);
  int rc = api_source_build(s, t, opt_level, &b);
  pthread_mutex_unlock(&s->mu);
  if (rc) return KILN_ERR;
  rc = api_emit_so(&b, so_path);
  cg_build_free(&b);
  return rc ? KILN_ERR : api_ok();
}

/* ---- the op table, for bindings that make one function per op (python/kiln/array.py) ---- */

KILN_API int kiln_op_count(int *n) {
  if (!n) return api_fail("kiln_op_count: n is NULL");
  *n = IR_OP_COUNT;
  return api_ok();
}

static const ir_opdef *api_op_at(int index, const char *fn) {
  if (index < 0 || index >= IR_OP_COUNT) return api_fail("%s: op %d of %d", fn, index, (int)IR_OP_COUNT), NULL;
  return &ir_ops[index];
}

KILN_API int kiln_op_info(int index, const char **name, const char **doc, int *ninputs, int *nattrs, int *variadic) {
  const ir_opdef *op = api_op_at(index, "kiln_op_info");
  if (!op) return KILN_ERR;
  int na = 0;
  while (op->attrs && op->attrs[na].name) na++;
  if (name) *name = op->name;
  if (doc) *doc = op->doc ? op->doc : "";
  if (ninputs) *ninputs = ir_op_nargs(op) + ir_op_naux(op);
  if (nattrs) *nattrs = na;
  if (variadic) *variadic = op->variadic;
  return api_ok();
}

KILN_API int kiln_op_input(int index, int i, const char **name, int *optional, int *is_aux) {
  const ir_opdef *op = api_op_at(index, "kiln_op_input");
  if (!op) return KILN_ERR;
  int nargs = ir_op_nargs(op), n = nargs + ir_op_naux(op);
  if (i < 0 || i >= n) return api_fail("kiln_op_input: %s: input %d of %d", op->name, i, n);
  if (name) *name = i < nargs ? op->args[i] : op->aux[i - nargs];
  if (optional) *optional = i < nargs && (op->optional >> i & 1);
  if (is_aux) *is_aux = i >= nargs;
  return api_ok();
}

KILN_API int kiln_op_attr(int index, int i, const char **name, int *required) {
  int na;
  if (kiln_op_info(index, NULL, NULL, NULL, &na, NULL)) return KILN_ERR;
  if (i < 0 || i >= na) return api_fail("kiln_op_attr: %s: attribute %d of %d", ir_ops[index].name, i, na);
  if (name) *name = ir_ops[index].attrs[i].name;
  if (required) *required = ir_ops[index].attrs[i].required;
  return api_ok();
}

/* ---- numbers among arrays ---- */

KILN_API int kiln_array_number(kiln_session *s, double value, kiln_array **out) {
  if (!out) return api_fail("kiln_array_number: out is NULL");
  *out = NULL;
  if (!s) return api_fail("kiln_array_number: session is NULL");
  if (!isfinite(value) || fabs(value) > FLT_MAX) return api_fail("kiln_array_number: %g is not a finite f32", value);
  return api_array_constant(s, (float)value, out);
}
