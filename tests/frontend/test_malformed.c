/* test_malformed.c — the front end on hostile input: random bytes, huge lines, absurd
 * nesting, truncated and mutated models, very long files, deep and recursive defs, missing
 * files. Each input must parse, check and lower to either a clean graph or reported errors,
 * never a crash, a hang or a leak (run it in the sanitizer build). A watchdog alarm turns a
 * hang into a failure that names the case. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fe.h"

static int passed, failed;
static int last_errors;               /* the errors the last t_case counted */
static char last_msg[4096];           /* the start of its diagnostics */
static const char *current = "";     /* the case running, for the watchdog */

static void t_fail(const char *name, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "test_malformed.c: FAIL: %s: ", name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  failed++;
}

static void t_watchdog(int sig) {
  (void)sig;
  static const char msg[] = "test_malformed.c: FAIL: a case hangs: ";
  if (write(2, msg, sizeof msg - 1) < 0 || write(2, current, strlen(current)) < 0 || write(2, "\n", 1) < 0) _exit(1);
  _exit(1);
}

static double t_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the harness: parse, check, lower every model; diagnostics go to a memory stream ---- */

enum { T_ANY, T_OK, T_ERR };
typedef struct {
  int errors;                 /* diagnostics reported */
  int graphs;                 /* models lowered cleanly */
  bool readable;              /* fe_parse_* returned a file */
  char *msg;                  /* the diagnostics text (first 64 KiB at most) */
} t_result;

static t_result t_run(const char *name, const char *text, size_t len) {
  t_result r = {0};
  size_t msglen = 0;
  FILE *err = open_memstream(&r.msg, &msglen);
  ir_diag d;
  ir_diag_init(&d, err);
  current = name;
  fe_file *f = fe_parse_text(name, text, len, &d);
  r.readable = f != NULL;
  if (f && !d.errors && !fe_check_file(f, NULL, 0, &d))
    for (fe_model *m = f->models; m; m = m->next) {
      ir_graph *g = fe_lower_model(f, m, NULL, 0, &d);
      r.graphs += g != NULL;
      ir_graph_free(g);
    }
  r.errors = last_errors = d.errors;
  fe_file_free(f);
  ir_diag_free(&d);
  fclose(err);
  return r;
}

/* Every error line must look like "NAME:LINE:COL: error: ..." or "kiln: error: ...". */
static bool t_well_formed(const char *name, const char *msg) {
  size_t n = strlen(name);
  for (const char *l = msg; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (l[0] == ' ' || strncmp(l, "kiln: ", 6) == 0) continue;
    int line = 0, col = 0;
    if (strncmp(l, name, n) != 0 || sscanf(l + n, ":%d:%d:", &line, &col) != 2 || line < 1 || col < 1) return false;
  }
  return true;
}

/* Runs one case and checks what it must do: T_OK lowers cleanly, T_ERR reports at least one
 * error (and then lowers nothing), T_ANY either; errors are always well formed. */
static void t_case(const char *name, const char *text, size_t len, int want, double max_s) {
  double t0 = t_now();
  alarm(60);
  t_result r = t_run(name, text, len);
  alarm(0);
  double dt = t_now() - t0;
  bool ok = true;
  if (want == T_OK && (r.errors || !r.graphs)) ok = false, t_fail(name, "must lower cleanly:\n%.2000s", r.msg);
  if (want == T_ERR && !r.errors) ok = false, t_fail(name, "must report an error");
  if (r.errors && r.graphs) ok = false, t_fail(name, "lowered a graph despite %d errors", r.errors);
  if (!r.errors && r.msg[0]) ok = false, t_fail(name, "printed diagnostics without counting an error:\n%.2000s", r.msg);
  if (!t_well_formed(name, r.msg)) ok = false, t_fail(name, "malformed diagnostics:\n%.2000s", r.msg);
  if (dt > max_s) ok = false, t_fail(name, "took %.2f s (limit %.0f s)", dt, max_s);
  if (dt > 0.5 && getenv("T_TIMES")) fprintf(stderr, "%s: %.2f s\n", name, dt);
  passed += ok;
  snprintf(last_msg, sizeof last_msg, "%s", r.msg ? r.msg : "");
  free(r.msg);
}

/* The exact error count of the case just run: a refused file stops being read, so its
 * errors do not grow with its length. */
static void t_expect_errors(const char *name, int want) {
  if (last_errors == want) passed++;
  else t_fail(name, "%d errors counted, want %d", last_errors, want);
}

/* The case just run reported exactly one error, saying `says`. */
static void t_expect_one(const char *name, const char *says) {
  if (last_errors == 1 && strstr(last_msg, says)) passed++;
  else t_fail(name, "want one error saying \"%s\", got %d:\n%.2000s", says, last_errors, last_msg);
}

static void t_text(const char *name, const char *text, int want) { t_case(name, text, strlen(text), want, 5); }

/* A valid model with a def, dims, every declaration kind and parameter creation. */
static const char t_valid[] =
    "# a small net\n"
    "dim batch = 8\n"
    "def block(x, n: int, act: str = \"relu\") {\n"
    "  h = fully_connected(x, num_hidden=n)\n"
    "  return activation(h, act_type=act)\n"
    "}\n"
    "model net {\n"
    "  input data : f32[batch, 1, 12, 12]\n"
    "  input label : i32[batch]\n"
    "  param w0 : f32[4, 1, 3, 3] = normal(std=0.01)\n"
    "  c = convolution(data, w0, kernel=(3, 3), num_filter=4, no_bias=true)\n"
    "  p = pooling(relu(c), kernel=(2, 2), pool_type=\"max\")\n"
    "  b = block(flatten(p), n=16)\n"
    "  z = 0.5 * b + -b ** 2\n"
    "  logits = fully_connected(z, num_hidden=10)\n"
    "  loss = softmax_cross_entropy(logits, label)\n"
    "  output logits\n"
    "  train loss with adam(lr=0.001)\n"
    "}\n";

/* ---- deterministic random numbers (xorshift64*) ---- */
static uint64_t t_rng = 88172645463325252ull;
static uint32_t t_rand(void) {
  t_rng ^= t_rng >> 12, t_rng ^= t_rng << 25, t_rng ^= t_rng >> 27;
  return (uint32_t)((t_rng * 2685821657736338717ull) >> 32);
}

static char *t_repeat(const char *head, const char *unit, size_t times, const char *tail, size_t *len) {
  size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
  *len = hl + ul * times + tl;
  char *s = malloc(*len + 1);
  memcpy(s, head, hl);
  for (size_t i = 0; i < times; i++) memcpy(s + hl + i * ul, unit, ul);
  memcpy(s + hl + ul * times, tail, tl + 1);
  return s;
}

/* ---- the cases ---- */

static void test_trivial(void) {
  t_case("empty.kiln", "", 0, T_ERR, 5);
  t_text("bom.kiln", "\xef\xbb\xbf", T_ERR);
  t_text("bom_model.kiln", "\xef\xbb\xbfmodel m { input x : f32[2] output x }", T_OK);
  t_text("only_comment.kiln", "# nothing here", T_ERR);
  t_text("only_newlines.kiln", "\n\n\n\r\n\t \n", T_ERR);
  t_case("nul.kiln", "\0", 1, T_ERR, 5);
  t_case("nul_in_model.kiln", "model m {\n  input x : f32[2]\0\n  output x\n}\n", 40, T_ERR, 5);
  t_text("valid.kiln", t_valid, T_OK);
}

static void test_unterminated(void) {
  t_text("str_eof.kiln", "model m { input x : f32[2] a = activation(x, act_type=\"relu", T_ERR);
  t_text("str_line.kiln", "model m {\n  input x : f32[2]\n  a = activation(x, act_type=\"relu)\n  output a\n}\n", T_ERR);
  t_text("str_only.kiln", "\"", T_ERR);
  t_text("str_many.kiln", "\"\n\"\n\"a\n\"b\"\"\n\"", T_ERR);
  t_text("model_eof.kiln", "model m {", T_ERR);
  t_text("def_eof.kiln", "def f(x) { return relu(", T_ERR);
  t_text("call_eof.kiln", "model m { input x : f32[2] h = relu(x", T_ERR);
  t_text("tuple_eof.kiln", "model m { input x : f32[2] h = reshape(x, shape=(1, ", T_ERR);
}

static void test_random_junk(void) {
  for (int seed = 1; seed <= 12; seed++) {
    t_rng = 0x9e3779b97f4a7c15ull * (uint64_t)seed;
    size_t len = seed <= 4 ? (size_t)seed * 7 : (size_t)(t_rand() % 8192) + 1;
    char *buf = malloc(len), name[64];
    for (size_t i = 0; i < len; i++) buf[i] = (char)(seed % 3 == 0 ? t_rand() % 8 : t_rand());   /* some mostly NUL/control */
    snprintf(name, sizeof name, "junk%d.kiln", seed);
    t_case(name, buf, len, T_ERR, 5);
    free(buf);
  }
}

static void test_huge_lines(void) {
  size_t len, mb = 1 << 20;
  char *s = t_repeat("model m {\n  input x : f32[2]\n  h = relu(", "a", mb, ")\n  output x\n}\n", &len);
  t_case("long_name.kiln", s, len, T_ERR, 10);
  free(s);
  s = t_repeat("model m {\n  input x : f32[2]\n  h = ", "abc ", mb / 4, "\n  output x\n}\n", &len);
  t_case("many_names.kiln", s, len, T_ERR, 10);
  free(s);
  s = t_repeat("model m {\n  input x : f32[2]\n  h = x * ", "7", mb, "\n  output h\n}\n", &len);
  t_case("long_number.kiln", s, len, T_ERR, 10);
  free(s);
  s = t_repeat("model m {\n  input x : f32[2]\n  h = ", "(", mb, "\n  output x\n}\n", &len);
  t_case("open_parens.kiln", s, len, T_ERR, 10);
  free(s);
  s = t_repeat("", "#", mb, "\nmodel m { input x : f32[2] output x }\n", &len);
  t_case("long_comment.kiln", s, len, T_OK, 10);
  free(s);
  s = t_repeat("model m {\n  input x : f32[2]\n  h = x", " + x", mb / 4, "\n  output h\n}\n", &len);
  t_case("long_sum.kiln", s, len, T_ANY, 20);   /* left-recursive: shallow stack, 256K nodes */
  t_expect_errors("long_sum.kiln", 1);           /* too deep, said once; nothing read after it */
  free(s);
}

/* "h = " + open * n + mid + close * n */
static void t_nested(const char *name, const char *open, const char *mid, const char *close, int n, int want) {
  size_t a, b;
  char *head = t_repeat("model m {\n  input x : f32[2, 3]\n  h = ", open, (size_t)n, mid, &a);
  char *s = t_repeat(head, close, (size_t)n, "\n  output h\n}\n", &b);
  t_case(name, s, b, want, 10);
  free(head);
  free(s);
}

static void test_nesting(void) {
  t_nested("parens_10000.kiln", "(", "x", ")", 10000, T_ERR);
  t_nested("relu_10000.kiln", "relu(", "x", ")", 10000, T_ERR);
  t_nested("neg_10000.kiln", "-", "x", "", 10000, T_ERR);
  t_nested("pow_10000.kiln", "x ** ", "x", "", 10000, T_ERR);   /* right-associative: deep */
  t_nested("tuple_10000.kiln", "reshape(x, shape=(", "6", "))", 1, T_OK);
  size_t a, b;
  char *head = t_repeat("model m {\n  input x : f32[2, 3]\n  h = reshape(x, shape=", "(", 10000, "6", &a);
  char *s = t_repeat(head, ")", 10000, ")\n  output h\n}\n", &b);
  t_case("tuple_parens_10000.kiln", s, b, T_ERR, 10);
  free(head);
  free(s);
  head = t_repeat("model m {\n  input x : f32[2, 3]\n  h = reshape(x, shape=", "(", 10000, "", &a);
  s = t_repeat(head, "(),", 10000, ")\n  output h\n}\n", &b);
  t_case("tuple_open_10000.kiln", s, b, T_ERR, 10);
  free(head);
  free(s);
  t_nested("parens_500.kiln", "(", "x", ")", 500, T_OK);       /* deep but within the limit */
  t_nested("relu_300.kiln", "relu(", "x", ")", 300, T_OK);
}

static void test_truncations(void) {
  size_t n = strlen(t_valid);
  for (size_t len = 0; len <= n; len++) t_case("truncated.kiln", t_valid, len, len == n ? T_OK : T_ANY, 5);
  /* the valid model with its batch bounded (lowered at every extent), its first line cut short
   * or cut into at every byte */
  char *bounded = malloc(n + 16), *cut = malloc(n + 16);
  const char *rest = strchr(strstr(t_valid, "dim batch"), '\n');
  int head = snprintf(bounded, n + 16, "# a small net\ndim batch = 1..8");
  snprintf(bounded + head, n + 16 - (size_t)head, "%s", rest);
  t_text("bounded.kiln", bounded, T_OK);
  for (int at = (int)strlen("# a small net\n"); at < head; at++) {
    size_t k = (size_t)at;
    memcpy(cut, bounded, k);
    snprintf(cut + k, n + 16 - k, "%s", rest);
    t_text("bounded_cut.kiln", cut, T_ANY);
  }
  free(bounded), free(cut);
}

/* Byte mutations of the valid model: replace, insert, delete, or copy a span elsewhere. */
static void test_mutations(void) {
  static const char alphabet[] = "(){}[],=:+-*/.\"#\n \t0123456789axyz_\x01\xff";
  size_t n = strlen(t_valid);
  char *buf = malloc(2 * n + 64);
  t_rng = 12345;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(buf, t_valid, n);
    size_t len = n;
    for (int k = 1 + (int)(t_rand() % 3); k > 0; k--) {
      size_t at = t_rand() % len;
      char c = t_rand() % 4 ? alphabet[t_rand() % (sizeof alphabet - 1)] : (char)t_rand();
      switch (t_rand() % 4) {
      case 0: buf[at] = c; break;
      case 1: memmove(buf + at + 1, buf + at, len - at), buf[at] = c, len++; break;
      case 2: memmove(buf + at, buf + at + 1, len - at - 1), len--; break;
      default: {
        size_t from = t_rand() % len, span = t_rand() % 24;
        char tmp[24];
        if (span > len - from) span = len - from;
        if (len + span > 2 * n + 32) break;
        memcpy(tmp, buf + from, span);
        memmove(buf + at + span, buf + at, len - at);
        memcpy(buf + at, tmp, span);
        len += span;
      }
      }
      if (len == 0) break;
    }
    t_case("mutated.kiln", buf, len, T_ANY, 5);
  }
  free(buf);
}

/* n statements in a chain: h1 = relu(h0) ... and n lines of errors. */
static void test_many_statements(void) {
  enum { N = 20000 };
  size_t cap = (size_t)N * 64 + 256, w = 0;
  char *s = malloc(cap);
  w += (size_t)snprintf(s + w, cap - w, "model m {\n  input h0 : f32[2, 3]\n");
  for (int i = 1; i < N; i++) w += (size_t)snprintf(s + w, cap - w, "  h%d = relu(h%d)\n", i, i - 1);
  w += (size_t)snprintf(s + w, cap - w, "  output h%d\n}\n", N - 1);
  t_case("statements_20000.kiln", s, w, T_OK, 20);
  w = (size_t)snprintf(s, cap, "model m {\n  input x : f32[2, 3]\n");
  for (int i = 1; i < N; i++) w += (size_t)snprintf(s + w, cap - w, "  h%d = fully_connected(x, num_hidden=%d)\n", i, i % 7 + 1);
  w += (size_t)snprintf(s + w, cap - w, "  output h1\n}\n");
  t_case("params_20000.kiln", s, w, T_OK, 20);
  w = (size_t)snprintf(s, cap, "model m {\n  input x : f32[2, 3]\n");
  for (int i = 1; i < N; i++) w += (size_t)snprintf(s + w, cap - w, "  h%d = rleu(x) )\n", i);
  w += (size_t)snprintf(s + w, cap - w, "  output x\n}\n");
  t_case("errors_20000.kiln", s, w, T_ERR, 20);
  t_expect_errors("errors_20000.kiln", 100);     /* reading stops at the error limit */
  w = (size_t)snprintf(s, cap, "model m {\n  input x : f32[2, 3]\n");
  for (int i = 1; i < N; i++) w += (size_t)snprintf(s + w, cap - w, "  h%d = rleu(x)\n", i);
  w += (size_t)snprintf(s + w, cap - w, "  output x\n}\n");
  t_case("lower_errors_20000.kiln", s, w, T_ERR, 20);
  t_expect_errors("lower_errors_20000.kiln", 100);   /* and so does lowering */
  free(s);
}

/* def d0(x) { return relu(x) }, def dK(x) { return d(K-1)(x) } and a model calling dN. */
static void t_def_chain(const char *name, int n, int want) {
  size_t cap = (size_t)n * 64 + 256, w = 0;
  char *s = malloc(cap);
  w += (size_t)snprintf(s + w, cap - w, "def d0(x) {\n  return relu(x)\n}\n");
  for (int i = 1; i <= n; i++) w += (size_t)snprintf(s + w, cap - w, "def d%d(x) {\n  y = d%d(x)\n  return y\n}\n", i, i - 1);
  w += (size_t)snprintf(s + w, cap - w, "model m {\n  input x : f32[2]\n  h = d%d(x)\n  output h\n}\n", n);
  t_case(name, s, w, want, 10);
  free(s);
}

static void test_defs(void) {
  t_def_chain("defs_40.kiln", 40, T_OK);
  t_def_chain("defs_1000.kiln", 1000, T_ERR);
  t_text("self_recursion.kiln", "def f(x) {\n  return f(x)\n}\nmodel m {\n  input x : f32[2]\n  h = f(x)\n  output h\n}\n", T_ERR);
  t_text("mutual_recursion.kiln",
         "def a(x) {\n  return b(x)\n}\ndef b(x) {\n  y = c(x)\n  return y\n}\ndef c(x) {\n  return relu(a(x))\n}\n"
         "model m {\n  input x : f32[2]\n  h = a(x)\n  g = c(x)\n  output h\n}\n", T_ERR);
  /* a def that doubles the work at each level: 2^12 relu nodes, not exponential blow-up of time */
  size_t cap = 16384, w = 0;
  char *s = malloc(cap);
  w += (size_t)snprintf(s + w, cap - w, "def d0(x) {\n  return relu(x)\n}\n");
  for (int i = 1; i <= 12; i++) w += (size_t)snprintf(s + w, cap - w, "def d%d(x) {\n  a = d%d(x)\n  b = d%d(a)\n  return b\n}\n", i, i - 1, i - 1);
  w += (size_t)snprintf(s + w, cap - w, "model m {\n  input x : f32[2]\n  h = d12(x)\n  output h\n}\n");
  t_case("defs_doubling.kiln", s, w, T_OK, 20);
  /* each def's return is a chain 900 deep with the next def's call at its bottom: deep C
   * recursion through 60 defs, which must be an error, not a stack overflow */
  free(s);
  cap = 60 * 8192, w = 0;
  s = malloc(cap);
  w += (size_t)snprintf(s + w, cap - w, "def d0(x) {\n  return relu(x)\n}\n");
  for (int i = 1; i <= 60; i++) {
    w += (size_t)snprintf(s + w, cap - w, "def d%d(x) {\n  return d%d(x)", i, i - 1);
    for (int k = 0; k < 900; k++) w += (size_t)snprintf(s + w, cap - w, " + x");
    w += (size_t)snprintf(s + w, cap - w, "\n}\n");
  }
  w += (size_t)snprintf(s + w, cap - w, "model m {\n  input x : f32[2]\n  h = d60(x)\n  output h\n}\n");
  t_case("defs_deep_chains.kiln", s, w, T_ERR, 20);
  free(s);
}

/* The limits that keep a refused file cheap (fe.h, fe_lower.h): each hostile input below took
 * 1 to 8 GB and seconds to minutes at 50 MB before; here a few MB of each must give one clear
 * error at the limit it crosses (memory then stays bounded by the limit, not the input). */
static char *t_model_lines(const char *head, const char *fmt, int n, const char *tail, size_t *len) {
  size_t cap = strlen(head) + strlen(tail) + (size_t)n * (strlen(fmt) + 24) + 64, w = 0;
  char *s = malloc(cap);
  w += (size_t)snprintf(s + w, cap - w, "%s", head);
  for (int i = 0; i < n; i++) w += (size_t)snprintf(s + w, cap - w, fmt, i, i);
  w += (size_t)snprintf(s + w, cap - w, "%s", tail);
  *len = w;
  return s;
}

static void test_limits(void) {
  size_t len;
  enum { N = 300000 + 1 };            /* FE_MAX_NODES + 1 statements */
  char *s = t_model_lines("model m {\n  input x : f32[4]\n", "  y%d = x + q%d\n", N, "  output x\n}\n", &len);
  t_case("statements.kiln", s, len, T_ERR, 20);
  t_expect_one("statements.kiln", "statements.kiln:300002:3: error: model 'm' has more than 300000 statements");
  free(s);
  s = t_model_lines("def f(x) {\n", "  y%d = x + x%d\n", N, "  return x\n}\nmodel m {\n  input x : f32[4]\n  output x\n}\n", &len);
  t_case("def_statements.kiln", s, len, T_ERR, 20);
  t_expect_one("def_statements.kiln", "def 'f' has more than 300000 statements");
  free(s);
  /* 400 statements of 900 additions each: past the node limit in lowering, once */
  char line[8192];
  size_t w = (size_t)snprintf(line, sizeof line, "  v%%d = x");
  for (int k = 0; k < 900; k++) w += (size_t)snprintf(line + w, sizeof line - w, " + x");
  snprintf(line + w, sizeof line - w, " # %%d\n");
  s = t_model_lines("model m {\n  input x : f32[4]\n", line, 400, "  output v0\n}\n", &len);
  t_case("nodes.kiln", s, len, T_ERR, 30);
  t_expect_one("nodes.kiln", "error: model 'm' grows past 300000 nodes; lowering one model makes at most 300000");
  free(s);
  for (char *c = strchr(line, 'x'); c; c = strchr(c + 1, 'x')) *c = '2';     /* constants: folded, no nodes */
  s = t_model_lines("model m {\n  input x : f32[4]\n", line, 400, "  output x\n}\n", &len);
  t_case("constants.kiln", s, len, T_ERR, 30);
  t_expect_one("constants.kiln", "error: model 'm' grows past 300000 constants");
  free(s);
  /* defs that call the one before twice and build nothing: 2^24 calls */
  char *defs = malloc(4096);
  w = (size_t)snprintf(defs, 4096, "def d0(x) {\n  return x\n}\n");
  for (int i = 1; i <= 24; i++) w += (size_t)snprintf(defs + w, 4096 - w, "def d%d(x) {\n  a = d%d(x)\n  return d%d(a)\n}\n", i, i - 1, i - 1);
  snprintf(defs + w, 4096 - w, "model m {\n  input x : f32[4]\n  y = d24(x) + 1.0\n  output y\n}\n");
  t_case("def_calls.kiln", defs, strlen(defs), T_ERR, 30);
  t_expect_one("def_calls.kiln", "the model grows past 1200000 def calls while inlining defs");
  free(defs);
  /* a bounded dim is lowered at each of its extents: a range of a billion is refused at
   * once, not lowered a billion times */
  t_text("range.kiln", "dim b = 1..1000000000\nmodel m {\n  input x : f32[b, 2]\n  y = relu(x)\n  output y\n}\n", T_ERR);
  t_expect_one("range.kiln", "span 999999999 extents; each is lowered to check the model");
  /* and a long model at fewer extents, as each costs a lowering of every node */
  s = t_model_lines("dim b = 1..2000\nmodel m {\n  input x : f32[b, 2]\n", "  y%d = relu(x) # %d\n", 20000, "  output y0\n}\n", &len);
  t_case("range_work.kiln", s, len, T_ERR, 20);
  t_expect_one("range_work.kiln", "span 1999 extents, each lowered to check the model's");
  free(s);
  /* one call with a million arguments: past the syntax-tree limit while reading */
  s = t_repeat("model m {\n  input x : f32[4]\n  v = concat(x", ", x", 1000000, ")\n  output v\n}\n", &len);
  t_case("arguments.kiln", s, len, T_ERR, 20);
  t_expect_one("arguments.kiln", "error: the file holds more than 1800000 syntax items");
  free(s);
}

/* Many dims, defs, outputs: checked and looked up by hash (100,000 dims checked pairwise took
 * 23 s, 100,000 defs more than a minute). */
static void test_many_names(void) {
  size_t cap = 16 << 20, w = 0;
  char *s = malloc(cap);
  for (int i = 0; i < 200000; i++) w += (size_t)snprintf(s + w, cap - w, "dim d%d = 7\n", i);
  w += (size_t)snprintf(s + w, cap - w, "model m {\n  input x : f32[d199999]\n  output x\n}\n");
  t_case("dims.kiln", s, w, T_OK, 10);
  w = 0;
  for (int i = 0; i < 100000; i++) w += (size_t)snprintf(s + w, cap - w, "def f%d(x) {\n  return relu(x)\n}\n", i);
  w += (size_t)snprintf(s + w, cap - w, "model m {\n  input x : f32[4]\n  y = f99999(x)\n  z = f7(y)\n  output z\n}\n");
  t_case("defs.kiln", s, w, T_OK, 10);
  w = (size_t)snprintf(s, cap, "model m {\n  input x : f32[4]\n");
  for (int i = 0; i < 100000; i++) w += (size_t)snprintf(s + w, cap - w, "  y%d = relu(x)\n", i);
  w += (size_t)snprintf(s + w, cap - w, "  output y0");
  for (int i = 1; i < 100000; i++) w += (size_t)snprintf(s + w, cap - w, ", y%d", i);
  w += (size_t)snprintf(s + w, cap - w, "\n}\n");
  t_case("outputs.kiln", s, w, T_OK, 10);
  free(s);
}

/* fe_parse_file on paths that are not readable files: NULL and one clear error. */
static void test_paths(void) {
  static const struct { const char *path, *says; } cases[] = {
    {"/nonexistent/dir/model.kiln", "No such file"},
    {"/", "Is a directory"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *msg = NULL;
    size_t len = 0;
    FILE *err = open_memstream(&msg, &len);
    ir_diag d;
    ir_diag_init(&d, err);
    fe_file *f = fe_parse_file(cases[i].path, &d);
    fflush(err);
    if (f || d.errors != 1 || !strstr(msg, cases[i].says) || !strstr(msg, cases[i].path))
      t_fail(cases[i].path, "expected one error saying \"%s\", got %d:\n%s", cases[i].says, d.errors, msg);
    else
      passed++;
    fe_file_free(f);
    ir_diag_free(&d);
    fclose(err);
    free(msg);
  }
}

int main(void) {
  signal(SIGALRM, t_watchdog);
  test_trivial();
  test_unterminated();
  test_random_junk();
  test_huge_lines();
  test_nesting();
  test_truncations();
  test_mutations();
  test_many_statements();
  test_defs();
  test_many_names();
  test_limits();
  test_paths();
  printf("malformed: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
