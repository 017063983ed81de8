/* kiln_test.c — the shared scaffolding of the C tests (kiln_test.h): lowering with captured
 * diagnostics, the small dims, walking the source tree's models, compiling, random inputs,
 * CHECK counting.
 * Each test keeps its own assertions and output; only the plumbing lives here. */
#define _GNU_SOURCE   /* open_memstream */
#include "kiln_test.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- lowering ---- */

static FILE *ts_out;

void ts_diag_to(FILE *out) { ts_out = out; }

static FILE *ts_diag_out(void) { return ts_out ? ts_out : stderr; }

/* fr->defs: the small dims of the file when asked for, then each explicit define replacing
 * the one of its name or added. */
static void ts_set_defines(ts_front *fr, const fe_define *defs, int ndefs) {
  int max = (int)(sizeof fr->defs / sizeof *fr->defs);
  fr->ndefs = fr->small && fr->file ? ts_small_defines(fr->file, fr->defs, max) : 0;
  for (int i = 0; i < ndefs; i++) {
    int j = 0;
    while (j < fr->ndefs && strcmp(fr->defs[j].name, defs[i].name) != 0) j++;
    if (j < max) fr->defs[j] = defs[i], fr->ndefs += j == fr->ndefs;
  }
}

bool ts_load(ts_front *fr, const char *name, const char *src, const fe_define *defs, int ndefs) {
  if (fr->capture) fr->mem = open_memstream(&fr->msg, &fr->len);
  ir_diag_init(&fr->diag, fr->capture ? fr->mem : ts_diag_out());
  fr->file = src ? fe_parse_text(name, src, strlen(src), &fr->diag) : fe_parse_file(name, &fr->diag);
  ts_set_defines(fr, defs, ndefs);
  bool ok = fr->file && fr->diag.errors == 0 && fe_check_file(fr->file, fr->defs, fr->ndefs, &fr->diag) == 0;
  if (fr->mem) fflush(fr->mem);
  return ok;
}

ir_graph *ts_lower(ts_front *fr, fe_model *m) {
  ir_graph *g = fe_lower_model(fr->file, m, fr->defs, fr->ndefs, &fr->diag);
  if (fr->mem) fflush(fr->mem);
  return g;
}

ir_graph *ts_lower_text(ts_front *fr, const char *name, const char *src, const fe_define *defs, int ndefs) {
  return ts_load(fr, name, src, defs, ndefs) ? ts_lower(fr, fr->file->models) : NULL;
}

ir_graph *ts_lower_file(ts_front *fr, const char *path, const fe_define *defs, int ndefs) {
  return ts_lower_text(fr, path, NULL, defs, ndefs);
}

const char *ts_diags(ts_front *fr) {
  if (fr->mem) fflush(fr->mem);
  return fr->msg ? fr->msg : "";
}

void ts_front_free(ts_front *fr) {
  fe_file_free(fr->file);
  ir_diag_free(&fr->diag);
  if (fr->mem) fclose(fr->mem);
  free(fr->msg);
  fr->file = NULL, fr->mem = NULL, fr->msg = NULL;
}

/* Small sizes for speed; each applies only where the file declares the dim. */
static const fe_define ts_small[] = {{"batch", 4, 0}, {"seq", 8, 0}, {"vocab", 50, 0}, {"d_model", 16, 0}, {"heads", 2, 0}, {"d_ff", 32, 0}};

int ts_small_defines(const fe_file *f, fe_define *out, int max) {
  int n = 0;
  for (const fe_dim *d = f->dims; d; d = d->next)
    for (size_t i = 0; i < sizeof ts_small / sizeof *ts_small; i++)
      if (n < max && strcmp(d->name, ts_small[i].name) == 0) out[n++] = ts_small[i];
  return n;
}

/* ---- the source tree ---- */

const char *ts_root(void) {
  static char root[1024];
  snprintf(root, sizeof root, "%s", __FILE__);
  char *p = strstr(root, "tests/support/kiln_test.c");
  if (p) *p = 0;
  else snprintf(root, sizeof root, "./");
  return root;
}

static bool ts_is_model(const char *name) {
  size_t n = strlen(name);
  return n > 5 && strcmp(name + n - 5, ".kiln") == 0;
}

int ts_each_model(const char *dir, void (*fn)(const char *path, void *ctx), void *ctx) {
  char folder[2048], path[4096];
  snprintf(folder, sizeof folder, "%s%s", dir[0] == '/' ? "" : ts_root(), dir);
  struct dirent **list = NULL;
  int n = scandir(folder, &list, NULL, alphasort), seen = 0;
  for (int i = 0; i < n; i++) {
    if (ts_is_model(list[i]->d_name)) {
      snprintf(path, sizeof path, "%s/%s", folder, list[i]->d_name);
      fn(path, ctx);
      seen++;
    }
    free(list[i]);
  }
  free(list);
  return n < 0 ? -1 : seen;
}

/* ---- compiling ---- */

ir_graph *ts_compile_cx(const ir_graph *lowered, ir_mode mode, uint32_t disabled, pass_ctx *cx, ir_diag *d) {
  pass_ctx_init(cx, mode, d);
  cx->disabled = disabled;
  return lowered ? pass_compile(lowered, cx) : NULL;
}

ir_graph *ts_compile(const ir_graph *lowered, ir_mode mode, uint32_t disabled) {
  ir_diag d;
  ir_diag_init(&d, ts_diag_out());
  pass_ctx cx;
  ir_graph *g = ts_compile_cx(lowered, mode, disabled, &cx, &d);
  pass_ctx_free(&cx);
  ir_diag_free(&d);
  return g;
}

void ts_graph_free(ir_graph *g) {
  ir_graph_free(g);
}

ts_run *ts_run_new(const char *name, const char *src, ir_mode mode, uint32_t disabled) {
  ts_run *r = calloc(1, sizeof *r);
  r->lowered = ts_lower_text(&r->fr, name, src, NULL, 0);
  r->g = ts_compile_cx(r->lowered, mode, disabled, &r->cx, &r->fr.diag);
  return r;
}

void ts_run_free(ts_run *r) {
  ts_graph_free(r->g);
  ir_graph_free(r->lowered);
  pass_ctx_free(&r->cx);
  ts_front_free(&r->fr);
  free(r);
}

/* ---- random inputs ---- */

uint32_t ts_next(uint64_t *rng) {
  *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
  return (uint32_t)(*rng >> 11);
}

/* Exclusive upper bound for i32 input t: the class count of the losses and the input_dim of
 * the embeddings that read it (2 when none does). */
static int64_t ts_i32_range(const ir_graph *g, int t) {
  int64_t hi = 1 << 30;
  for (int i = 0; i < ir_nnodes(g); i++) {
    const ir_node *n = ir_node_at(g, i);
    if (n->op == IR_OP_softmax_cross_entropy && n->nin > 1 && n->in[1] == t) {
      const k_shape *s = &ir_tensor_at(g, n->in[0])->shape;
      if (s->d[s->rank - 1] < hi) hi = s->d[s->rank - 1];
    }
    if (n->op == IR_OP_embedding && n->in[0] == t) {
      int64_t d = ((const k_embedding_param *)n->param)->input_dim;
      if (d < hi) hi = d;
    }
  }
  return hi == 1 << 30 ? 2 : hi;
}

void **ts_batch(const ir_graph *g, uint64_t *rng) {
  void **b = calloc((size_t)ir_ntensors(g) + 1, sizeof *b);
  for (int t = 0; t < ir_ntensors(g); t++) {
    const ir_tensor *x = ir_tensor_at(g, t);
    if (x->kind != IR_T_INPUT) continue;
    int64_t n = ir_tensor_numel(x), hi = x->dtype == K_I32 ? ts_i32_range(g, t) : 0;
    b[t] = malloc((size_t)(n ? n : 1) * 4);
    for (int64_t i = 0; i < n; i++) {
      if (x->dtype == K_I32) ((int32_t *)b[t])[i] = (int32_t)(ts_next(rng) % (uint32_t)hi);
      else ((float *)b[t])[i] = (float)(ts_next(rng) % 2000001) / 1e6f - 1.0f;
    }
  }
  return b;
}

void ts_batch_free(const ir_graph *g, void **b) {
  for (int t = 0; b && t < ir_ntensors(g); t++) free(b[t]);
  free(b);
}

/* ---- checks ---- */

int ts_passed, ts_failed;

bool ts_check(bool ok, const char *file, int line, const char *fmt, ...) {
  if (ok) return ts_passed++, true;
  const char *base = strrchr(file, '/');
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s:%d: FAIL: ", base ? base + 1 : file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  ts_failed++;
  return false;
}

int ts_summary(const char *suite) {
  printf("%s: %d passed, %d failed\n", suite, ts_passed, ts_failed);
  return ts_failed != 0;
}
