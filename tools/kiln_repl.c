/* kiln_repl.c — `kiln repl`: an interactive session of .kiln statements over deferred-compute
 * arrays (the C API's kiln_session). A statement is lowered by the front end as a one-statement
 * model whose inputs are the session's arrays, so the language, its errors (file `<repl>`,
 * caret) and its attribute rules are those of a file; each node of the result becomes a lazy
 * array (kiln_array_op), so nothing runs until a value is printed or saved, and the compile
 * cache serves repeated shapes. With a terminal: libedit line editing and ~/.kiln_history;
 * without one, a script: no prompts, exit status 1 when any statement failed. */
#include <editline/readline.h>
#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln_data.h"
#include "kiln_repl.h"

/* ---- named arrays ---- */

repl_var *repl_find(repl *r, const char *name) {
  for (int i = 0; i < r->nvars; i++)
    if (strcmp(r->vars[i].name, name) == 0) return &r->vars[i];
  return NULL;
}

/* Binds name to a (the session keeps what other arrays still need of an old value). */
int repl_bind(repl *r, const char *name, kiln_array *a) {
  repl_var *v = repl_find(r, name);
  if (v) return kiln_array_free(v->a), v->a = a, 0;
  if (r->nvars == r->cap) {
    int cap = r->cap ? r->cap * 2 : 16;
    repl_var *nv = realloc(r->vars, sizeof *nv * (size_t)cap);
    if (!nv) return kiln_array_free(a), 1;
    r->vars = nv, r->cap = cap;
  }
  char *copy = api_strdup(name);
  if (!copy) return kiln_array_free(a), 1;
  r->vars[r->nvars++] = (repl_var){copy, a};
  return 0;
}

/* v's array, its name dropped from the session (the array is the caller's now). */
static kiln_array *repl_take(repl *r, repl_var *v) {
  kiln_array *a = v->a;
  free(v->name);
  *v = r->vars[--r->nvars];
  return a;
}

static void repl_clear(repl *r) {
  repl_model_free(r);
  for (int i = 0; i < r->nvars; i++) kiln_array_free(r->vars[i].a), free(r->vars[i].name);
  r->nvars = 0;
  kiln_session_free(r->s);
  r->s = NULL;
  api_buf_free(&r->dims), api_buf_free(&r->defs);
  free(r->dim_lines.stmt), free(r->def_lines.stmt);
  r->dim_lines = r->def_lines = (repl_lines){0};
}

int repl_show(repl *r, kiln_array *a) {
  if (kiln_array_eval(r->s, 1, &a)) return KILN_ERR;
  repl_print_value(a, a->data, stdout);
  return 0;
}

/* ---- diagnostics: a line of the lowered text renamed as the statement it came from ---- */

/* Appends n lines of statement stmt to m; false without memory. */
static bool repl_lines_add(repl_lines *m, int stmt, int n) {
  if (m->n + n > m->cap) {
    int cap = (m->cap ? m->cap * 2 : 16) + n;
    int *v = realloc(m->stmt, sizeof *v * (size_t)cap);
    if (!v) return false;
    m->stmt = v, m->cap = cap;
  }
  while (n-- > 0) m->stmt[m->n++] = stmt;
  return true;
}

/* The statement that line `line` of a lowered text came from: the text is the dims, then the
 * defs, then the statement being run (every line of it, and the model around it). */
static int repl_line_stmt(const repl *r, long line) {
  if (line >= 1 && line <= r->dim_lines.n) return r->dim_lines.stmt[line - 1];
  line -= r->dim_lines.n;
  if (line >= 1 && line <= r->def_lines.n) return r->def_lines.stmt[line - 1];
  return r->stmt;
}

/* The last error with each `<repl>:LINE:` renumbered by repl_line_stmt, so that a diagnostic
 * says LINE = the statement number its prompt showed, whatever the dims and defs before it
 * take in the text the front end read. Returns KILN_ERR. */
static int repl_relocate(const repl *r) {
  api_buf out = {0};
  for (const char *p = kiln_last_error(), *at; *p; p = at) {
    if (!(at = strstr(p, "<repl>:"))) { api_buf_printf(&out, "%s", p); break; }
    at += 7;
    api_buf_printf(&out, "%.*s", (int)(at - p), p);
    char *end;
    long line = strtol(at, &end, 10);
    if (end > at && *end == ':') api_buf_printf(&out, "%d", repl_line_stmt(r, line)), at = end;
  }
  int rc = out.oom ? api_fail("out of memory") : api_fail("%s", out.s ? out.s : "");
  api_buf_free(&out);
  return rc;
}

/* ---- statements: one-statement models lowered by the front end, their nodes made arrays ---- */

/* The model text: dims and defs, the session's arrays as inputs, and the statement on a
 * line of its own (a diagnostic shows the user's line; repl_relocate gives it its number);
 * `lead` ("_ =" for a bare expression) ends the line before. */
static void repl_source(repl *r, const char *lead, const char *stmt, const char *outputs, api_buf *b) {
  api_buf_printf(b, "%s%s", r->dims.s ? r->dims.s : "", r->defs.s ? r->defs.s : "");
  api_buf_printf(b, "model repl {");
  for (int i = 0; i < r->nvars; i++) {
    api_buf_printf(b, " input %s : ", r->vars[i].name);
    api_type_text(b, r->vars[i].a->dtype, &r->vars[i].a->shape);
  }
  api_buf_printf(b, " %s\n%s\n output %s\n}\n", lead, stmt, outputs);
}

/* The statement's inputs are the session's arrays of their names; a parameter it would
 * create is refused (arrays create none). */
static int repl_bind_inputs(repl *r, const ir_graph *g, kiln_array **bound) {
  for (int t = 0; t < ir_ntensors(g); t++) {
    const ir_tensor *x = ir_tensor_at(g, t);
    if (x->kind == IR_T_INPUT) bound[t] = repl_find(r, x->name)->a;
    if (x->kind == IR_T_PARAM || x->kind == IR_T_AUX)
      return api_fail("'%s' would be a parameter, but arrays create none; pass it as an array (e.g. from :rand)", x->name);
  }
  return KILN_OK;
}

/* Every node of the lowered statement as a lazy array; the targets bound to theirs (`shown`:
 * the names a message gives them, the user's where the targets are fresh ones). */
static int repl_record(repl *r, const ir_graph *g, char **targets, char **shown, int ntargets) {
  kiln_array **made = calloc((size_t)ir_ntensors(g) + 1, sizeof *made), **bound = calloc((size_t)ir_ntensors(g) + 1, sizeof *bound);
  int rc = made && bound ? repl_bind_inputs(r, g, bound) : api_fail("out of memory");
  for (int i = 0; !rc && i < ir_nnodes(g); i++) rc = api_record_node(r->s, g, ir_node_at(g, i), made, bound);
  for (int i = 0; !rc && i < ntargets; i++) {
    int t = ir_graph_find_tensor(g, targets[i]);
    kiln_array *a = t >= 0 ? api_record_operand(r->s, g, t, made, bound) : NULL;
    /* the name takes over the walk's handle; an existing array has its own name already */
    if (!a || !made[t]) { rc = api_fail("'%s': assign a computed value (an op or a number)", shown[i]); break; }
    made[t] = NULL;
    if (repl_bind(r, targets[i], a)) rc = api_fail("out of memory");
  }
  for (int i = 0; made && i < ir_ntensors(g); i++) kiln_array_free(made[i]);
  free(made), free(bound);
  return rc;
}

/* The names left of '=' when the text is an assignment ("a, b = ..."), else 0. */
static int repl_targets(const char *text, char **out, int max) {
  const char *p = text;
  int n = 0;
  while (n < max) {
    while (*p == ' ' || *p == '\t') p++;
    const char *b = p;
    while (*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9' && p > b)) p++;
    if (p == b) break;
    out[n++] = strndup(b, (size_t)(p - b));
    while (*p == ' ' || *p == '\t') p++;
    if (*p == ',') { p++; continue; }
    if (*p == '=' && p[1] != '=') return n;
    break;
  }
  while (n) free(out[--n]);
  return 0;
}

/* Lowers `stmt` with the given targets as outputs and records its nodes (shown: as repl_record). */
static int repl_lower_stmt(repl *r, const char *lead, const char *stmt, char **targets, char **shown, int ntargets) {
  api_buf outs = {0}, src = {0};
  for (int i = 0; i < ntargets; i++) api_buf_printf(&outs, "%s%s", i ? ", " : "", targets[i]);
  repl_source(r, lead, stmt, outs.s ? outs.s : "", &src);
  api_lowered low = {0};
  int rc = src.oom ? api_fail("out of memory") : api_lower_text("<repl>", src.s, &low) ? repl_relocate(r) : KILN_OK;
  if (!rc) rc = repl_record(r, low.g, targets, shown, ntargets);
  api_lowered_free(&low);
  api_buf_free(&outs), api_buf_free(&src);
  return rc;
}

/* A name no array has and no target of this statement is: "_rebind<i>", numbered on. */
static char *repl_fresh_name(repl *r, char **targets, int n, int *next) {
  char name[32];
  for (;;) {
    snprintf(name, sizeof name, "_rebind%d", (*next)++);
    bool used = repl_find(r, name) != NULL;
    for (int i = 0; i < n && !used; i++) used = strcmp(targets[i], name) == 0;
    if (!used) return api_strdup(name);
  }
}

/* An assignment. A name that already has an array is bound to the new value, as Python
 * rebinds (`b = b * 2` reads the old b): the language assigns a name once, so the statement is
 * lowered with fresh targets on the line before (the lead) and its own left side blanked,
 * which keeps the columns of its right side the user's for a diagnostic; each old name then
 * takes its fresh array. The old value stays in the graphs of the arrays made from it. */
static int repl_assign(repl *r, const char *text, char **targets, int n) {
  bool again = false;
  for (int i = 0; i < n; i++) again = again || repl_find(r, targets[i]);
  if (!again) return repl_lower_stmt(r, "", text, targets, targets, n);
  char *fresh[16] = {0}, *blank = api_strdup(text);
  api_buf lead = {0};
  int next = 0, rc = blank ? KILN_OK : api_fail("out of memory");
  for (int i = 0; !rc && i < n; i++) {
    fresh[i] = repl_fresh_name(r, targets, n, &next);
    if (!fresh[i]) rc = api_fail("out of memory");
    else api_buf_printf(&lead, "%s%s", i ? ", " : "", fresh[i]);
  }
  if (!rc) {
    api_buf_printf(&lead, " =");
    memset(blank, ' ', (size_t)(strchr(text, '=') - text) + 1);   /* repl_targets found the '=' */
    rc = lead.oom ? api_fail("out of memory") : repl_lower_stmt(r, lead.s, blank, fresh, targets, n);
  }
  for (int i = 0; !rc && i < n; i++)
    if (repl_bind(r, targets[i], repl_take(r, repl_find(r, fresh[i])))) rc = api_fail("out of memory");
  for (int i = 0; i < n; i++) free(fresh[i]);
  free(blank), api_buf_free(&lead);
  return rc;
}

/* NAME.shape: the array's shape as a tuple, as NumPy prints it, without computing it. 1 when
 * text is not NAME.shape of an array. */
static int repl_shape(repl *r, const char *text) {
  size_t n = strlen(text), k = strlen(".shape");
  if (n <= k || strcmp(text + n - k, ".shape") != 0) return 1;
  char name[256];
  if (n - k >= sizeof name) return 1;
  memcpy(name, text, n - k), name[n - k] = 0;
  repl_var *v = repl_find(r, name);
  if (!v) return 1;
  const k_shape *sh = &v->a->shape;
  printf("(");
  for (int i = 0; i < sh->rank; i++) printf("%s%lld", i ? ", " : "", (long long)sh->d[i]);
  printf("%s)\n", sh->rank == 1 ? "," : "");
  return 0;
}

/* A bare expression: recorded as `_ = expr`, printed, and the name _ dropped. */
static int repl_expr(repl *r, const char *text) {
  repl_var *v = repl_find(r, text);
  if (v) return repl_show(r, v->a);
  if (!repl_shape(r, text)) return KILN_OK;
  char *t = "_";
  int rc = repl_lower_stmt(r, "_ =", text, &t, &t, 1);
  if (rc) return rc;
  v = repl_find(r, "_");
  rc = repl_show(r, v->a);
  kiln_array_free(repl_take(r, v));
  return rc;
}

/* dim and def statements are kept as text once a parse of the file so far accepts them;
 * each line of one is mapped to its statement number for later diagnostics. */
static int repl_decl(repl *r, const char *text, bool is_dim) {
  api_buf *into = is_dim ? &r->dims : &r->defs, src = {0};
  repl_lines *lines = is_dim ? &r->dim_lines : &r->def_lines;
  size_t before = into->len;
  int nlines = lines->n, add = 1;
  for (const char *p = text; *p; p++) add += *p == '\n';
  api_buf_printf(into, "%s\n", text);
  bool mapped = repl_lines_add(lines, r->stmt, add);
  api_buf_printf(&src, "%s%smodel repl { input _x : f32[1] output _x }\n", r->dims.s ? r->dims.s : "", r->defs.s ? r->defs.s : "");
  api_lowered low = {0};
  int rc = !mapped || into->oom || src.oom ? api_fail("out of memory") : api_lower_text("<repl>", src.s, &low) ? repl_relocate(r) : KILN_OK;
  api_lowered_free(&low);
  api_buf_free(&src);
  if (rc) api_buf_truncate(into, before), lines->n = nlines;
  return rc;
}

static bool repl_starts(const char *text, const char *word) {
  size_t n = strlen(word);
  return strncmp(text, word, n) == 0 && (text[n] == ' ' || text[n] == '\t' || text[n] == '\n');
}

static int repl_statement(repl *r, const char *text) {
  char *targets[16];
  while (*text == ' ' || *text == '\t') text++;
  if (repl_starts(text, "dim")) return repl_decl(r, text, true);
  if (repl_starts(text, "def")) return repl_decl(r, text, false);
  int n = repl_targets(text, targets, 16);
  int rc = repl_model_call(r, text, targets, n);
  if (rc < 0) rc = n ? repl_assign(r, text, targets, n) : repl_expr(r, text);
  while (n) free(targets[--n]);
  return rc;
}

/* ---- commands ---- */

static const char repl_help[] =
  "Statements are the .kiln language, recorded and computed only when a value is shown:\n"
  "  x = relu(w * 2)        an assignment (assigning a name again rebinds it: x = x + 1)\n"
  "  x                      a name or an expression: its value, as NumPy prints it\n"
  "  a @ b, x[0, 1:3, ::2]  matmul, indexing and slicing (steps 1 or more), as in Python\n"
  "  x.shape                its shape, without computing it\n"
  "  dim n = 4, def f(...) { ... }   as in a .kiln file (a def may span lines)\n"
  "Every tensor input of an op is an array: arrays create no parameters.\n"
  "Commands:\n"
  "  :help                  this text\n"
  "  :load NAME FILE.npy    an array from a .npy file; FILE.npz its entry NAME, FILE.npz:KEY\n"
  "                         its entry KEY (numpy.savez and savez_compressed)\n"
  "  :save NAME FILE.npy    computes NAME and writes it\n"
  "  :rand NAME f32[2,3] [normal|uniform] [seed=N]   random values (Philox, as a model's\n"
  "                         initializer draws them); normal(0, 1) or uniform(-1, 1); the\n"
  "                         seed defaults to the statement number\n"
  "  :zeros NAME f32[2,3]   zeros (also i32)\n"
  "  :model FILE.kiln [DIM=N|DIM=LO..HI]...   a model (its dims rebound as kiln compile -D\n"
  "                         does; LO..HI: a bounded dim, arrays of any extent in range): its\n"
  "                         weights become arrays named as in it, and p = predict(x) (lazy)\n"
  "                         and l = train_step(x, y) (runs its optimizer) take arrays\n"
  "  :weights FILE.safetensors   weights into the loaded model (and its arrays)\n"
  "  :save_state FILE / :load_state FILE   the model's whole training state (weights,\n"
  "                         optimizer state, step, schedule, seed): train_step resumes\n"
  "  :vars                  the arrays, their types, and whether they are computed\n"
  "  :graph NAME            the pending graph NAME needs, as the .kiln model it compiles to\n"
  "  :passes NAME           that graph after each pass, and the passes' statistics\n"
  "  :grad LOSS W...        gradients of the scalar LOSS as lazy arrays d_W... (W made from data)\n"
  "  :seed N                the seed of dropout's masks in :grad (Philox, as a model created\n"
  "                         with seed N draws them in train_step's steps 1, 2...; starts at 0)\n"
  "  :export FILE.kiln NAME... [input=X,Y]   the graph computing NAME... as a model, with the\n"
  "                         arrays it reads as params in FILE.safetensors (X, Y as inputs)\n"
  "  :time on|off           the time of each statement (front end, compile or cache, run)\n"
  "  :reset                 forget every array, dim and def\n"
  "  :quit                  leave (also Ctrl-D)\n";

static int repl_parse_type(const char *text, k_dtype *t, int *rank, int64_t *dims) {
  if (strncmp(text, "f32[", 4) == 0) *t = K_F32;
  else if (strncmp(text, "i32[", 4) == 0) *t = K_I32;
  else return api_fail("'%s' is not a type like f32[2, 3]", text);
  const char *p = text + 4;
  for (*rank = 0; *p && *p != ']';) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || *rank == KILN_MAX_RANK) return api_fail("'%s' is not a type like f32[2, 3]", text);
    dims[(*rank)++] = v;
    p = end;
    while (*p == ' ' || *p == ',') p++;
  }
  if (*p != ']' || p[1]) return api_fail("'%s' is not a type like f32[2, 3]", text);
  return KILN_OK;
}

/* Whether a command may bind an array to name: any name, a new one or an old one, which it
 * rebinds as an assignment does (repl_bind). */
static int repl_name_ok(const char *name) {
  if (!name || !api_is_name(name, false)) return api_fail("'%s' is not a name", name ? name : "");
  return KILN_OK;
}

/* A seed: decimal digits only, below 2^64 (strtoull alone takes "-1" as 2^64 - 1). */
static bool repl_parse_seed(const char *s, uint64_t *seed) {
  char *end = NULL;
  errno = 0;
  if (!(s[0] >= '0' && s[0] <= '9')) return false;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !end || *end) return false;
  *seed = (uint64_t)v;
  return true;
}

static int repl_cmd_rand(repl *r, char **arg, int n, bool zeros) {
  k_dtype t = K_F32;
  int rank = 0;
  int64_t dims[KILN_MAX_RANK];
  bool uniform = false;
  uint64_t seed = (uint64_t)r->stmt;   /* without seed=: the statement number, so two :rand differ */
  if (n < 3) return api_fail("usage: %s NAME f32[2,3]%s", arg[0], zeros ? "" : " [normal|uniform] [seed=N]");
  if (repl_name_ok(arg[1]) || repl_parse_type(arg[2], &t, &rank, dims)) return KILN_ERR;
  for (int i = 3; i < n && !zeros; i++) {
    if (strcmp(arg[i], "uniform") == 0 || strcmp(arg[i], "normal") == 0) uniform = arg[i][0] == 'u';
    else if (strncmp(arg[i], "seed=", 5) == 0) {
      if (!repl_parse_seed(arg[i] + 5, &seed)) return api_fail("%s: seed= takes a whole number from 0 to 2^64 - 1, not '%s'", arg[0], arg[i] + 5);
    }
    else return api_fail("%s: unknown option '%s'", arg[0], arg[i]);
  }
  if (!zeros && t != K_F32) return api_fail(":rand makes f32 arrays");
  kiln_array *a = NULL;
  int rc = zeros ? kiln_array_zeros(r->s, (kiln_dtype)t, rank, dims, &a)
         : uniform ? kiln_array_uniform(r->s, rank, dims, -1, 1, seed, &a) : kiln_array_normal(r->s, rank, dims, 0, 1, seed, &a);
  return rc ? rc : repl_bind(r, arg[1], a) ? api_fail("out of memory") : KILN_OK;
}

static void repl_data_error(const char *msg) { api_fail("%s", msg); }

/* Whether path names an entry of a .npz archive: FILE.npz or FILE.npz:KEY. */
static bool repl_is_npz(const char *path) {
  const char *z = strstr(path, ".npz");
  for (; z; z = strstr(z + 1, ".npz"))
    if (z[4] == 0 || z[4] == ':') return true;
  return false;
}

/* An array of a .npz archive, read as kiln train reads its data (kiln_data.c: stored or
 * deflated entries, 8-byte values narrowed to 4): FILE.npz takes the entry NAME, FILE.npz:KEY
 * the entry KEY. */
static int repl_load_npz(repl *r, const char *name, const char *path, kiln_array **out) {
  size_t len = strlen(name) + strlen(path) + 2;
  char *spec = malloc(len);
  if (!spec) return api_fail("out of memory");
  snprintf(spec, len, "%s=%s", name, path);
  kiln_data d;
  kiln_train_error_sink(repl_data_error);
  int bad = kiln_data_open(spec, ":load", &d);
  kiln_train_error_sink(NULL);
  free(spec);
  if (bad) return kiln_data_free(&d), KILN_ERR;
  const kiln_column *c = &d.col[0];
  long *idx = malloc(sizeof *idx * (size_t)(d.rows ? d.rows : 1));
  void *buf = malloc((size_t)d.rows * (size_t)c->row_elems * 4 + 1);
  int rc = idx && buf ? KILN_OK : api_fail("out of memory");
  for (long i = 0; !rc && i < d.rows; i++) idx[i] = i;
  if (!rc) kiln_data_gather(c, idx, d.rows, buf);
  if (!rc) rc = kiln_array_from_data(r->s, (kiln_dtype)c->head.dtype, c->head.shape.rank, c->head.shape.d, buf, out);
  free(idx), free(buf), kiln_data_free(&d);
  return rc;
}

static int repl_cmd_load(repl *r, char **arg, int n) {
  kiln_array *a = NULL;
  if (n != 3) return api_fail("usage: :load NAME FILE.npy, or FILE.npz[:KEY]");
  if (repl_name_ok(arg[1])) return KILN_ERR;
  if (repl_is_npz(arg[2]) ? repl_load_npz(r, arg[1], arg[2], &a) : kiln_array_load_npy(r->s, arg[2], &a)) return KILN_ERR;
  return repl_bind(r, arg[1], a) ? api_fail("out of memory") : KILN_OK;
}

static repl_var *repl_var_arg(repl *r, char **arg, int n, int want, const char *usage) {
  repl_var *v = n == want ? repl_find(r, arg[1]) : NULL;
  if (n != want) api_fail("usage: %s", usage);
  else if (!v) api_fail("no array named '%s' (:vars lists them)", arg[1]);
  return v;
}

static int repl_cmd_vars(repl *r) {
  for (int i = 0; i < r->nvars; i++) {
    char type[200];
    ir_type_str(r->vars[i].a->dtype, &r->vars[i].a->shape, type, sizeof type);
    printf("%-16s %-20s %s\n", r->vars[i].name, type, r->vars[i].a->data ? "computed" : "lazy");
  }
  return KILN_OK;
}

static int repl_cmd_graph(repl *r, repl_var *v) {
  api_buf b = {0};
  int rc = api_pending_text(r->s, v->a, &b);
  if (!rc) fputs(b.s, stdout);
  api_buf_free(&b);
  return rc;
}

/* :grad LOSS W1 W2...: lazy gradients bound to d_W1, d_W2... */
static int repl_cmd_grad(repl *r, char **arg, int n) {
  kiln_array *wrt[8], *out[8];
  repl_var *loss = n >= 3 ? repl_find(r, arg[1]) : NULL;
  if (n < 3) return api_fail("usage: :grad LOSS WRT...");
  if (!loss) return api_fail("no array named '%s' (:vars lists them)", arg[1]);
  for (int i = 2; i < n; i++) {
    repl_var *v = repl_find(r, arg[i]);
    char name[256];
    snprintf(name, sizeof name, "d_%s", arg[i]);
    if (!v) return api_fail("no array named '%s' (:vars lists them)", arg[i]);
    wrt[i - 2] = v->a;   /* an old d_W is rebound below, as an assignment rebinds */
  }
  if (kiln_grad(loss->a, n - 2, wrt, out)) return KILN_ERR;
  for (int i = 2; i < n; i++) {
    char name[256];
    snprintf(name, sizeof name, "d_%s", arg[i]);
    if (repl_bind(r, name, out[i - 2])) return api_fail("out of memory");
  }
  return KILN_OK;
}

/* :seed N: the session's seed (kiln_session_seed); the next :grad draws step 1's masks. */
static int repl_cmd_seed(repl *r, char **arg, int n) {
  uint64_t seed = 0;
  if (n != 2 || !repl_parse_seed(arg[1], &seed)) return api_fail("usage: :seed N (a whole number from 0 to 2^64 - 1)");
  return kiln_session_seed(r->s, seed);
}

/* The REPL's own names for the arrays an export reads. */
static const char *repl_var_name(void *ctx, const kiln_array *a) {
  repl *r = ctx;
  for (int i = 0; i < r->nvars; i++)
    if (r->vars[i].a == a) return r->vars[i].name;
  return NULL;
}

/* :export FILE.kiln NAME... [input=X,Y]: the model and FILE.safetensors beside it. */
static int repl_cmd_export(repl *r, char **arg, int n) {
  kiln_array *outs[8], *ins[8];
  const char *onames[8], *inames[8];
  int nout = 0, nin = 0;
  size_t len = n >= 3 ? strlen(arg[1]) : 0;
  if (n < 3 || len < 6 || strcmp(arg[1] + len - 5, ".kiln") != 0) return api_fail("usage: :export FILE.kiln NAME... [input=X,Y]");
  for (int i = 2; i < n; i++) {
    bool in = strncmp(arg[i], "input=", 6) == 0;
    for (char *tok = strtok(in ? arg[i] + 6 : arg[i], ","); tok; tok = strtok(NULL, ",")) {
      repl_var *v = repl_find(r, tok);
      if (!v) return api_fail("no array named '%s' (:vars lists them)", tok);
      if ((in ? nin : nout) == 8) return api_fail(":export: at most 8 outputs and 8 inputs");
      if (in) ins[nin] = v->a, inames[nin++] = v->name;
      else outs[nout] = v->a, onames[nout++] = v->name;
    }
  }
  char weights[4096], model[256];
  snprintf(weights, sizeof weights, "%.*s.safetensors", (int)(len - 5), arg[1]);
  const char *base = strrchr(arg[1], '/') ? strrchr(arg[1], '/') + 1 : arg[1];
  snprintf(model, sizeof model, "%.*s", (int)strcspn(base, "."), base);
  if (fe_is_keyword(model)) snprintf(model + strlen(model), sizeof model - strlen(model), "_model");
  if (!api_is_name(model, false)) snprintf(model, sizeof model, "exported");
  pthread_mutex_lock(&r->s->mu);
  int rc = api_export(r->s, arg[1], weights, model, nout, outs, onames, nin, ins, inames, repl_var_name, r);
  pthread_mutex_unlock(&r->s->mu);
  if (!rc) printf("wrote %s and %s\n", arg[1], weights);
  return rc;
}

/* :passes NAME: the pending graph through the pass pipeline, printed after each pass. */
static int repl_cmd_passes(repl *r, repl_var *v) {
  api_buf b = {0};
  api_lowered low = {0};
  pthread_mutex_lock(&r->s->mu);
  int rc = v->a->data ? api_fail(":passes: '%s' is computed already; nothing is pending", v->name) : api_pending_text(r->s, v->a, &b);
  pthread_mutex_unlock(&r->s->mu);
  if (!rc) rc = api_lower_text("<pending>", b.s, &low);
  api_diags x;
  if (!rc && !(rc = api_diags_open(&x))) {
    pass_ctx cx;
    pass_ctx_init(&cx, IR_MODE_PREDICT, &x.d);
    cx.print_after = PASS_COUNT, cx.print_out = stdout;
    ir_graph *g = pass_compile(low.g, &cx);
    if (g) pass_print_stats(g, &cx, stdout);
    pass_ctx_free(&cx);
    rc = api_diags_close(&x, !g, "the passes refused the graph");
    ir_graph_free(g);
  }
  api_lowered_free(&low);
  api_buf_free(&b);
  return rc;
}

/* Ctrl-C at the prompt cancels the line being typed (and a statement's continuation lines):
 * the handler only records it; readline returns and the loop starts a fresh prompt. While a
 * statement runs, it also asks the session to stop its compile (kiln_session_interrupt only
 * sets a flag, so a handler may call it): the statement fails with "interrupted" and the
 * session keeps everything it had. repl_running is the session of the statement running. */
static volatile sig_atomic_t repl_interrupted;
static kiln_session *volatile repl_running;
static void repl_on_sigint(int sig) {
  (void)sig, repl_interrupted = 1;
  kiln_session *s = repl_running;
  if (s) kiln_session_interrupt(s, 1);
}

static int repl_reset(repl *r) {
  repl_running = NULL;   /* the session is about to go: the Ctrl-C handler must not reach it */
  repl_clear(r);
  return kiln_session_new(&r->s);
}

/* Runs a command; 1 when it asks to quit. */
static int repl_command(repl *r, char *line, bool *quit) {
  char *arg[8];
  int n = 0;
  for (char *tok = strtok(line, " \t"); tok && n < 8; tok = strtok(NULL, " \t")) arg[n++] = tok;
  repl_var *v;
  if (!strcmp(arg[0], ":quit") || !strcmp(arg[0], ":q")) return *quit = true, KILN_OK;
  if (!strcmp(arg[0], ":help")) return fputs(repl_help, stdout), KILN_OK;
  if (!strcmp(arg[0], ":rand") || !strcmp(arg[0], ":zeros")) return repl_cmd_rand(r, arg, n, arg[0][1] == 'z');
  if (!strcmp(arg[0], ":load")) return repl_cmd_load(r, arg, n);
  if (!strcmp(arg[0], ":vars")) return repl_cmd_vars(r);
  if (!strcmp(arg[0], ":reset")) return repl_reset(r);
  if (!strcmp(arg[0], ":save")) return (v = repl_var_arg(r, arg, n, 3, ":save NAME FILE.npy")) ? kiln_array_save_npy(v->a, arg[2]) : KILN_ERR;
  if (!strcmp(arg[0], ":graph")) return (v = repl_var_arg(r, arg, n, 2, ":graph NAME")) ? repl_cmd_graph(r, v) : KILN_ERR;
  if (!strcmp(arg[0], ":grad")) return repl_cmd_grad(r, arg, n);
  if (!strcmp(arg[0], ":seed")) return repl_cmd_seed(r, arg, n);
  if (!strcmp(arg[0], ":model")) return repl_cmd_model(r, arg, n);
  if (!strcmp(arg[0], ":weights")) return repl_cmd_weights(r, arg, n);
  if (!strcmp(arg[0], ":save_state") || !strcmp(arg[0], ":load_state")) return repl_cmd_state(r, arg, n, arg[0][1] == 's');
  if (!strcmp(arg[0], ":export")) return repl_cmd_export(r, arg, n);
  if (!strcmp(arg[0], ":passes")) return (v = repl_var_arg(r, arg, n, 2, ":passes NAME")) ? repl_cmd_passes(r, v) : KILN_ERR;
  if (!strcmp(arg[0], ":time") && n == 2 && (!strcmp(arg[1], "on") || !strcmp(arg[1], "off")))
    return r->timing = arg[1][1] == 'n', KILN_OK;
  if (!strcmp(arg[0], ":time")) return api_fail("usage: :time on|off");
  return api_fail("unknown command '%s' (:help lists them)", arg[0]);
}

/* ---- input: a statement may span lines while brackets are open ---- */

/* Open brackets minus closed ones, outside strings and comments. */
static int repl_depth(const char *text) {
  int depth = 0;
  bool str = false;
  for (const char *p = text; *p; p++) {
    if (str) { str = *p != '"'; continue; }
    if (*p == '#') { while (p[1] && p[1] != '\n') p++; continue; }
    str = *p == '"';
    depth += (*p == '(' || *p == '[' || *p == '{') - (*p == ')' || *p == ']' || *p == '}');
  }
  return depth;
}

static bool repl_blank(const char *text) {
  for (const char *p = text; *p; p++) {
    if (*p == '#') return true;
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return false;
  }
  return true;
}

static void repl_trim(char *text) {
  size_t n = strlen(text);
  while (n && (text[n - 1] == '\n' || text[n - 1] == ' ' || text[n - 1] == '\t' || text[n - 1] == '\r')) text[--n] = 0;
}

/* An error of statement number n (its first line p) on stderr, as the language's diagnostics read:
 * `<repl>:LINE:COL: error: ...`, the line, a caret. A message the front end already located
 * (`<repl>:7:10: ...` with its own caret lines) goes out as it is; any other (a command's, a
 * run's) loses its own prefix and is located at the start of the input. */
static void repl_report(int n, const char *p, const char *msg) {
  int line, col, used = 0;
  if (msg && sscanf(msg, "<repl>:%d:%d:%n", &line, &col, &used) == 2 && used > 0) {
    fprintf(stderr, "%s\n", msg);
    return;
  }
  if (!msg) msg = "out of memory";
  if (sscanf(msg, "<repl>:%d:%n", &line, &used) == 1 && used > 0) msg += used;
  else if (!strncmp(msg, "<repl>:", 7)) msg += 7;
  while (*msg == ' ') msg++;
  if (!strncmp(msg, "kiln: ", 6)) msg += 6;
  if (!strncmp(msg, "error: ", 7)) msg += 7;
  fprintf(stderr, "<repl>:%d:1: error: %s\n  %s\n  ^\n", n, msg, p);
}

/* One complete input: a command or a statement. Errors go to stderr; the session goes on. */
static bool repl_run(repl *r, char *text) {
  bool quit = false;
  repl_trim(text);
  char *p = text;
  while (*p == ' ' || *p == '\t' || *p == '\n') p++;
  if (repl_blank(p)) return false;
  r->stmt++;
  int64_t misses0 = 0, misses1 = 0, hits;
  kiln_session_cache_stats(r->s, &hits, &misses0);
  double t0 = kiln_now();
  kiln_session_interrupt(r->s, 0);   /* a Ctrl-C from before this statement is not for it */
  repl_running = r->s;
  char shown[256];   /* the input's first line, for an error: a command cuts p into words */
  snprintf(shown, sizeof shown, "%.*s", (int)strcspn(p, "\n"), p);
  int rc = *p == ':' ? repl_command(r, p, &quit) : repl_statement(r, p);
  repl_running = NULL;
  char *msg = rc ? api_strdup(kiln_last_error()) : NULL;   /* the stats call below clears it */
  if (r->timing && *p != ':' && r->s) {
    kiln_session_cache_stats(r->s, &hits, &misses1);
    printf("(%.2f ms: front end, %s and run)\n", (kiln_now() - t0) * 1e3, misses1 > misses0 ? "compile" : "cached code");
  }
  fflush(stdout);
  if (rc) repl_report(r->stmt, shown, msg), r->failed = true;
  free(msg);
  fflush(stderr);
  return quit;
}


static void repl_catch_sigint(void) {
  struct sigaction sa = {0};
  sa.sa_handler = repl_on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);   /* no SA_RESTART: the terminal read returns */
}

typedef char *(*repl_reader)(repl *r, bool more);

/* "[3]: " for a new statement, "...: " while one continues. */
static char *repl_read_tty(repl *r, bool more) {
  char prompt[32];
  if (more) snprintf(prompt, sizeof prompt, "...: ");
  else snprintf(prompt, sizeof prompt, "[%d]: ", r->stmt + 1);
  return readline(prompt);
}

static char *repl_read_pipe(repl *r, bool more) {
  char *line = NULL;
  size_t cap = 0;
  if (getline(&line, &cap, stdin) < 0) return free(line), NULL;
  repl_trim(line);
  return line;
}

/* Lines joined until the brackets balance, then run; history gets each complete input. */
static void repl_loop(repl *r, repl_reader read, bool tty) {
  api_buf input = {0};
  for (;;) {
    repl_interrupted = 0;
    char *line = read(r, input.len > 0);
    if (repl_interrupted && tty) {   /* Ctrl-C: drop what was typed, prompt again */
      free(line);
      api_buf_truncate(&input, 0);
      printf("^C\n");
      continue;
    }
    if (!line) break;
    api_buf_printf(&input, "%s%s", input.len ? "\n" : "", line);
    free(line);
    if (input.oom) break;
    if (repl_depth(input.s) > 0 && input.s[0] != ':') continue;
    if (tty && !repl_blank(input.s)) add_history(input.s);
    bool quit = repl_run(r, input.s);
    api_buf_truncate(&input, 0);
    if (quit) break;
  }
  if (input.len) repl_run(r, input.s);   /* unbalanced at the end: the front end says where */
  api_buf_free(&input);
}

static void repl_history_path(char *buf, size_t n) {
  const char *home = getenv("HOME");
  snprintf(buf, n, "%s/.kiln_history", home && *home ? home : ".");
}

int kiln_repl_main(int argc, char **argv) {
  if (argc > 2 || (argc == 2 && argv[1][0] == '-'))
    return fprintf(stderr, "kiln repl: takes at most one SCRIPT (or a script on stdin: kiln repl < s.kiln)\n"), 2;
  /* kiln repl SCRIPT runs it as kiln repl < SCRIPT does: line by line, no prompt, exit 1 when
   * a statement failed */
  if (argc == 2 && !freopen(argv[1], "r", stdin)) return fprintf(stderr, "kiln repl: cannot open %s: %s\n", argv[1], strerror(errno)), 1;
  repl r = {0};
  if (kiln_session_new(&r.s)) return fprintf(stderr, "kiln repl: %s\n", kiln_last_error()), 1;
  bool tty = argc < 2 && isatty(STDIN_FILENO);
  char hist[4096];
  repl_history_path(hist, sizeof hist);
  if (tty) {
    repl_catch_sigint();
    rl_catch_signals = 0;
    using_history();
    read_history(hist);
    printf("Kiln (%s): statements are recorded and computed when shown; :help lists the commands.\n", kiln_version());
  }
  repl_loop(&r, tty ? repl_read_tty : repl_read_pipe, tty);
  if (tty && write_history(hist) != 0) fprintf(stderr, "kiln repl: cannot write %s: %s\n", hist, strerror(errno));
  repl_clear(&r);
  free(r.vars);
  return r.failed && !tty ? 1 : 0;
}
