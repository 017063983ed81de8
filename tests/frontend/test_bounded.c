/* test_bounded.c — bounded dims in the front end (frontend/fe_bound.c): `dim b = LO..HI` and
 * -D ranges parsed and overridden, the graph's bdims and probes, models whose sizes follow
 * their dims (a * dim + b, products of dims) accepted, and the refusals, each naming what
 * and where: an extent where the model does not lower (the first one), a size that no such
 * form gives, a rank that changes, a dim used as a value, ranges that are empty, start below
 * 1 or hold too many extents. Diagnostics are captured; a warning prints once, an error that
 * holds at many extents is reported once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"

#define MODEL(body) "model m {\n" body "\n}\n"

typedef struct {
  ts_front fr;
  ir_graph *g;
  const char *msg;
} tb_model;

static tb_model *tb_lower(const char *src, const fe_define *defs, int ndefs) {
  tb_model *m = calloc(1, sizeof *m);
  m->fr.capture = true;
  m->g = ts_lower_text(&m->fr, "t.kiln", src, defs, ndefs);
  m->msg = ts_diags(&m->fr);
  return m;
}

static void tb_free(tb_model *m) {
  ir_graph_free(m->g);
  ts_front_free(&m->fr);
  free(m);
}

static int tb_count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* A model that must lower cleanly (the diagnostics shown otherwise). */
static tb_model *tb_ok_line(const char *src, const fe_define *defs, int ndefs, int line) {
  tb_model *m = tb_lower(src, defs, ndefs);
  if (!ts_check(m->g != NULL, __FILE__, line, "model did not lower:\n%s\n%s", src, m->msg)) return tb_free(m), NULL;
  return m;
}
#define tb_ok(src, defs, ndefs) tb_ok_line((src), (defs), (ndefs), __LINE__)

/* A model refused with exactly one error, whose text holds every given string. */
static void tb_err_line(int line, const char *src, const fe_define *defs, int ndefs, const char *const *says) {
  tb_model *m = tb_lower(src, defs, ndefs);
  bool ok = ts_check(!m->g && m->fr.diag.errors == 1, __FILE__, line, "want one error, got %d:\n%s", m->fr.diag.errors, m->msg);
  for (; ok && *says; says++) ok = ts_check(strstr(m->msg, *says) != NULL, __FILE__, line, "error lacks \"%s\":\n%s", *says, m->msg);
  tb_free(m);
}
#define tb_err(src, defs, ndefs, ...) tb_err_line(__LINE__, (src), (defs), (ndefs), (const char *const[]){__VA_ARGS__, NULL})

static const ir_tensor *tb_tensor(const ir_graph *g, const char *name) {
  int i = ir_graph_find_tensor(g, name);
  CHECK(i >= 0, "no tensor '%s'", name);
  return i >= 0 ? ir_tensor_at(g, i) : NULL;
}

static void tb_type_line(const ir_graph *g, const char *name, const char *want, int line) {
  const ir_tensor *t = tb_tensor(g, name);
  char buf[160] = "";
  if (t) ir_type_str(t->dtype, &t->shape, buf, sizeof buf);
  ts_check(strcmp(buf, want) == 0, __FILE__, line, "'%s' is %s, want %s", name, buf, want);
}
#define tb_type(g, name, want) tb_type_line((g), (name), (want), __LINE__)

/* The fit of axis `axis` of tensor `name` from the bound and the probes. */
static k_dimval tb_fit(const ir_graph *g, const char *name, int axis) {
  int t = ir_graph_find_tensor(g, name);
  int64_t vp[K_MAX_BDIMS + 1];
  k_dimval v = {0, 0, -1};
  for (int p = 0; t >= 0 && p < ir_dims_nprobes(g->nbdims); p++) vp[p] = ir_tensor_at(g->probes[p], t)->shape.d[axis];
  CHECK(t >= 0 && !ir_dims_fit(g, ir_tensor_at(g, t)->shape.d[axis], vp, &v), "axis %d of '%s' does not fit", axis, name);
  return v;
}

static void tb_fit_is_line(const ir_graph *g, const char *name, int axis, uint32_t mask, int64_t a, int64_t b, int line) {
  k_dimval v = tb_fit(g, name, axis);
  ts_check(v.mask == mask && (!mask || v.a == a) && v.b == b, __FILE__, line, "axis %d of '%s' fits %u: %lld * dims + %lld, want %u: %lld, %lld",
           axis, name, v.mask, (long long)v.a, (long long)v.b, mask, (long long)a, (long long)b);
}
#define tb_fit_is(g, name, axis, mask, a, b) tb_fit_is_line((g), (name), (axis), (mask), (a), (b), __LINE__)

/* ---- the cases ---- */

static void test_parse(void) {
  ts_front fr = {.capture = true};
  CHECK(ts_load(&fr, "t.kiln", "dim b = 1..8\ndim n = 4\ndim w = 3..3\n" MODEL("  input x : f32[b, n]\n  output x"), NULL, 0),
        "loads: %s", ts_diags(&fr));
  const fe_dim *b = fr.file ? fr.file->dims : NULL;
  CHECK(b && !strcmp(b->name, "b") && b->lo == 1 && b->value == 8, "dim b = 1..8 reads as %lld..%lld", b ? (long long)b->lo : -1LL,
        b ? (long long)b->value : -1LL);
  CHECK(b && b->next && b->next->lo == 4 && b->next->value == 4, "a fixed dim has lo == value");
  ts_front_free(&fr);
  /* numbers with a '.' still read as numbers next to ranges */
  tb_model *m = tb_ok("dim b = 2..8\n" MODEL("  input x : f32[b, 4]\n  y = x * 1.5 + .5 * x + 2. * x\n  output y"), NULL, 0);
  if (m) CHECK(m->g->nbdims == 1 && m->g->bdims[0].lo == 2 && m->g->bdims[0].hi == 8, "dim b = 2..8 is bounded to 2..8");
  if (m) tb_free(m);
  /* lo == hi is a fixed dim */
  m = tb_ok("dim b = 3..3\n" MODEL("  input x : f32[b, 4]\n  output x"), NULL, 0);
  if (m) CHECK(m->g->nbdims == 0 && !m->g->probes, "dim b = 3..3 is fixed");
  if (m) tb_type(m->g, "x", "f32[3, 4]");
  if (m) tb_free(m);
}

static void test_refused_ranges(void) {
  tb_err("dim b = 9..8\n" MODEL("  input x : f32[b]\n  output x"), NULL, 0, "t.kiln:1:5: error: dim 'b' = 9..8: the lower bound is above the upper one");
  tb_err("dim b = 0..8\n" MODEL("  input x : f32[b]\n  output x"), NULL, 0, "t.kiln:1:5: error: dim 'b' = 0..8: the lower bound must be at least 1");
  tb_err("dim b = -1..8\n" MODEL("  input x : f32[b]\n  output x"), NULL, 0, "t.kiln:1:5: error: dim 'b' must be positive (got -1)");
  tb_err("dim b = 1..\n" MODEL("  input x : f32[b]\n  output x"), NULL, 0, "t.kiln:2:1: error: unexpected 'model'; expected integer");
  fe_define above = {"b", 4, 9}, below = {"b", 4, -1};
  tb_err("dim b = 4\n" MODEL("  input x : f32[b]\n  output x"), &above, 1, "kiln: error: -D b=9..4: the lower bound is above the upper one");
  tb_err("dim b = 4\n" MODEL("  input x : f32[b]\n  output x"), &below, 1, "kiln: error: -D b=-1..4: the lower bound must be at least 1");
  /* every extent is one more lowering: a range of a million is refused, at once */
  tb_err("dim b = 1..1000000\n" MODEL("  input x : f32[b]\n  output x"), NULL, 0,
         "t.kiln:1:5: error: the bounded dims of model 'm' (dim b = 1..1000000) span 999999 extents", "at most 16384");
}

static void test_defines(void) {
  static const char src[] = "dim batch = 4\ndim seq = 1..8\n" MODEL("  input x : f32[batch, seq]\n  output x");
  fe_define range = {"batch", 16, 2};       /* bounds a dim the file fixes */
  tb_model *m = tb_ok(src, &range, 1);
  if (m) {
    CHECK(m->g->nbdims == 2, "two bounded dims, got %d", m->g->nbdims);
    const ir_bdim *b = &m->g->bdims[0], *s = &m->g->bdims[1];
    CHECK(!strcmp(b->name, "batch") && b->lo == 2 && b->hi == 16 && b->probe == 15, "batch = 2..16, probe 15: %s = %lld..%lld, %lld",
          b->name, (long long)b->lo, (long long)b->hi, (long long)b->probe);
    CHECK(!strcmp(s->name, "seq") && s->lo == 1 && s->hi == 8 && s->probe == 7, "seq = 1..8, probe 7");
    tb_type(m->g, "x", "f32[16, 8]");
    tb_free(m);
  }
  fe_define fixed[] = {{"batch", 4, 0}, {"seq", 5, 0}};   /* fixes a dim the file bounds */
  m = tb_ok(src, fixed, 2);
  if (m) CHECK(m->g->nbdims == 0 && !m->g->probes, "-D seq=5 fixes seq");
  if (m) tb_type(m->g, "x", "f32[4, 5]"), tb_free(m);
  fe_define narrow = {"seq", 6, 3};         /* a range replaces the file's */
  m = tb_ok(src, &narrow, 1);
  if (m) CHECK(m->g->nbdims == 1 && m->g->bdims[0].lo == 3 && m->g->bdims[0].hi == 6, "-D seq=3..6 bounds seq to 3..6");
  if (m) tb_free(m);
}

/* The probe extents: hi - 1, or hi + 1 where that is below 2 or below lo; the probe graphs at
 * them, in ir_dims_probe_extents' order; their graphs hold nothing bounded themselves. */
static void test_probes(void) {
  tb_model *m = tb_ok("dim a = 1..2\ndim b = 5..6\ndim c = 3..9\n"
                      MODEL("  input x : f32[a, b, c]\n  output x"), NULL, 0);
  if (!m) return;
  const ir_graph *g = m->g;
  CHECK(g->nbdims == 3 && g->bdims[0].probe == 3 && g->bdims[1].probe == 5 && g->bdims[2].probe == 8,
        "probes 3, 5, 8: got %lld, %lld, %lld", (long long)g->bdims[0].probe, (long long)g->bdims[1].probe, (long long)g->bdims[2].probe);
  static const char *const want[] = {"f32[3, 6, 9]", "f32[2, 5, 9]", "f32[2, 6, 8]", "f32[3, 5, 8]"};
  for (int p = 0; g->probes && p < ir_dims_nprobes(g->nbdims); p++) {
    const ir_tensor *t = ir_tensor_at(g->probes[p], 0);
    char buf[64];
    ir_type_str(t->dtype, &t->shape, buf, sizeof buf);
    CHECK(!strcmp(buf, want[p]) && g->probes[p]->nbdims == 0, "probe %d holds x : %s, want %s", p, buf, want[p]);
  }
  CHECK(g->probes && ir_dims_nprobes(g->nbdims) == 4, "4 probe graphs");
  tb_free(m);
}

/* Sizes that follow the dims: a * dim + b and products, in shapes and int attributes. */
static void test_affine(void) {
  tb_model *m = tb_ok("dim batch = 1..64\n"
                      MODEL("  input x : f32[batch, 4, 8]\n  input label : i32[batch]\n"
                            "  r = reshape(x, shape=(batch, -1))\n"
                            "  h = relu(fully_connected(r, num_hidden=16))\n"
                            "  c = concat(h, h, dim=0)\n"
                            "  s = slice(c, axis=0, begin=1, end=2 * batch)\n"
                            "  logits = fully_connected(h, num_hidden=10)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "  output logits, s\n  train loss with sgd(lr=0.1)"), NULL, 0);
  if (!m) return;
  CHECK(m->g->nbdims == 1 && !strcmp(m->g->bdims[0].name, "batch") && m->g->bdims[0].probe == 63, "batch bounded, probe 63");
  tb_type(m->g, "r", "f32[64, 32]");
  tb_type(m->g, "s", "f32[127, 16]");
  tb_fit_is(m->g, "r", 0, 1, 1, 0);
  tb_fit_is(m->g, "r", 1, 0, 0, 32);
  tb_fit_is(m->g, "c", 0, 1, 2, 0);
  tb_fit_is(m->g, "s", 0, 1, 2, -1);
  CHECK(!strstr(m->msg, "warning") && !strstr(m->msg, "error"), "no diagnostics: %s", m->msg);
  tb_free(m);
  /* a size that is the product of two bounded dims */
  m = tb_ok("dim batch = 1..8\ndim seq = 2..16\n"
            MODEL("  input x : f32[batch, seq, 4]\n  z = reshape(x, shape=(batch * seq, 4))\n  output z"), NULL, 0);
  if (m) tb_fit_is(m->g, "z", 0, 3, 1, 0), tb_free(m);
}

/* A dim the model never reads is not one of its bounded dims. */
static void test_unused(void) {
  tb_model *m = tb_ok("dim b = 1..8\ndim n = 4\n" MODEL("  input x : f32[n, 2]\n  output x"), NULL, 0);
  if (m) CHECK(m->g->nbdims == 0 && !m->g->probes, "an unused bounded dim is not the model's: nbdims %d", m->g->nbdims);
  if (m) tb_free(m);
  /* the first model reads b, the second not */
  ts_front fr = {.capture = true};
  if (ts_load(&fr, "t.kiln", "dim b = 1..8\nmodel p {\n  input x : f32[b]\n  output x\n}\nmodel q {\n  input y : f32[3]\n  output y\n}\n",
              NULL, 0)) {
    ir_graph *p = ts_lower(&fr, fr.file->models), *q = ts_lower(&fr, fr.file->models->next);
    CHECK(p && q && p->nbdims == 1 && q->nbdims == 0, "p reads b, q does not");
    ir_graph_free(p), ir_graph_free(q);
  }
  ts_front_free(&fr);
}

/* A model that does not lower at some extent is refused once, at the first such extent. */
static void test_extent_errors(void) {
  static const char even[] = MODEL("  input x : f32[batch, 8]\n  r = reshape(x, shape=(batch / 2, 16))\n  output r");
  tb_err("dim batch = 1..8\n" MODEL("  input x : f32[batch, 8]\n  r = reshape(x, shape=(batch / 2, 16))\n  output r"), NULL, 0,
         "t.kiln:4:18: error: reshape: attribute 'shape' expects a tuple of ints", "note: at batch=1 (dim batch = 1..8)");
  char src[512];
  snprintf(src, sizeof src, "dim batch = 2..64\n%s", even);
  tb_err(src, NULL, 0, "note: at batch=3 (dim batch = 2..64)");
  snprintf(src, sizeof src, "dim batch = 2\n%s", even);
  fe_define range = {"batch", 10, 4};
  tb_err(src, &range, 1, "note: at batch=5 (-D batch=4..10)");
  /* the probe one past the bound must lower too, and says why */
  tb_err("dim b = 1..2\n" MODEL("  input x : f32[4, 2]\n  y = slice(x, axis=1, begin=0, end=b)\n  output y"), NULL, 0,
         "error: slice:", "note: at b=3 (dim b = 1..2), one past the bound");
}

/* Sizes no a * dims + b gives, ranks that change, a dim as a value: refused with both values. */
static void test_non_affine(void) {
  tb_err("dim side = 8..32\n" MODEL("  input x : f32[1, 3, side, side]\n"
                                    "  c = convolution(x, kernel=(3, 3), stride=(2, 2), num_filter=4)\n  output c"), NULL, 0,
         "t.kiln:4:7: error: tensor 'c' has shape f32[1, 4, 15, 15] at side=32 but f32[1, 4, 3, 3] at side=8: its sizes must be a * side + b");
  tb_err("dim batch = 1..8\ndim seq = 1..16\n" MODEL("  input x : f32[batch, 4]\n  input y : f32[seq, 4]\n  z = concat(x, y, dim=0)\n  output z"),
         NULL, 0, "tensor 'z' has shape f32[24, 4] at batch=8, seq=16 but f32[23, 4] at batch=7, seq=16 and", "a * batch * seq + b");
  /* a size that shrinks as the dim grows: the plan at the bound would be too small below it */
  tb_err("dim batch = 1..8\n" MODEL("  input x : f32[batch, 16]\n  y = slice(x, axis=1, begin=batch, end=16)\n  output y"), NULL, 0,
         "t.kiln:4:7: error: tensor 'y' has shape f32[8, 8] at batch=8 but f32[7, 9] at batch=7: its size must grow with the bounded "
         "dims, not shrink");
  tb_err("dim batch = 1..4\n" MODEL("  input x : f32[batch, 8]\n  y = squeeze(x)\n  output y"), NULL, 0,
         "tensor 'y' has shape f32[4, 8] at batch=4 but f32[8] at batch=1: its rank must be the same at every extent");
  tb_err("dim batch = 1..64\n" MODEL("  input x : f32[batch, 8]\n  y = x / batch\n  output y"), NULL, 0,
         "t.kiln:4:11: error: this number is 64 at batch=64 but 63 at batch=63: a bounded dim may size tensors");
  tb_err("dim batch = 2..6\n" MODEL("  input x : f32[batch, 8]\n  y = leaky_relu(x, slope=1.0 / batch)\n  output y"), NULL, 0,
         "node 'y' (leaky_relu) has slope=", "only sizes and int attributes may follow a bounded dim");
}

/* More than K_MAX_BDIMS bounded dims read by one model. */
static void test_too_many_dims(void) {
  char src[1024];
  int w = 0;
  for (int i = 0; i <= K_MAX_BDIMS; i++) w += snprintf(src + w, sizeof src - (size_t)w, "dim d%d = 1..2\n", i);
  w += snprintf(src + w, sizeof src - (size_t)w, "model m {\n  input x : f32[d0, d1, d2, d3, d4, d5]\n  input y : f32[d6, d7, d8]\n"
                                                 "  output x, y\n}\n");
  tb_err(src, NULL, 0, "model 'm' reads more than 8 bounded dims");
}

/* The bound's warnings print once; the probe and check lowerings print none. */
static void test_quiet(void) {
  tb_model *m = tb_ok("dim batch = 1..16\n" MODEL("  input x : f32[batch, 4]\n  input l : i32[batch]\n"
                                                 "  loss = softmax_cross_entropy(x, l)\n  output x\n  train loss with sgd(lr=0.1)"), NULL, 0);
  if (m) CHECK(tb_count(m->msg, "warning:") == 1 && !strstr(m->msg, "error"), "one warning, no error:\n%s", m->msg);
  if (m) tb_free(m);
  /* an error that holds at every extent from 1 to 63 is one error, with one note */
  tb_model *e = tb_lower("dim batch = 1..64\n" MODEL("  input x : f32[batch, 8]\n  r = reshape(x, shape=(batch / 2, 16))\n  output r"), NULL, 0);
  CHECK(!e->g && tb_count(e->msg, "error:") == 1 && tb_count(e->msg, "note:") == 1, "one error, one note:\n%s", e->msg);
  tb_free(e);
}

int main(void) {
  test_parse();
  test_refused_ranges();
  test_defines();
  test_probes();
  test_affine();
  test_unused();
  test_extent_errors();
  test_non_affine();
  test_too_many_dims();
  test_quiet();
  return ts_summary("bounded");
}
