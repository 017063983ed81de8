/* test_graph.c — graphs built through the public API (include/kiln.h): the text a graph
 * built in C prints equals the same model parsed from text; shapes on demand; a .kiln file
 * loaded prints what `kiln check --print` prints; the JIT'd model and the .so compiled from
 * the same graph give the same outputs; NULL, unknown names and bad shapes are refused with
 * a message. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_test.h"
#include "rt_model.h"

/* The model the C code below builds, as a user would write it. */
static const char *const mlp_text =
  "dim batch = 4\n"
  "model net {\n"
  "  input x : f32[batch, 6]\n"
  "  input label : i32[batch]\n"
  "  fc = fully_connected(x, num_hidden=5)\n"
  "  h = relu(fc)\n"
  "  pool = pooling(reshape(h, shape=(4, 1, 5, 1)), kernel=(2, 1), pool_type=\"avg\")\n"
  "  logits = fully_connected(h, num_hidden=3, no_bias=true)\n"
  "  scaled = mul(logits, 0.5)\n"
  "  prob = softmax(scaled)\n"
  "  loss = softmax_cross_entropy(scaled, label)\n"
  "  output prob, pool\n"
  "  train loss with sgd(lr=0.1, momentum=0.9)\n"
  "}\n";

static bool has(const char *msg, const char *want);

static kiln_graph *build_net(void) {
  kiln_graph *g = NULL;
  kiln_attrs *a = NULL;
  const char *batch[] = {"batch", NULL}, *x[] = {"x"}, *fc[] = {"fc"}, *h[] = {"h"}, *hr[] = {"hr"},
             *lg[] = {"logits", "0.5"}, *sc[] = {"scaled"}, *sl[] = {"scaled", "label"};
  int64_t six[] = {0, 6};
  bool ok = !kiln_graph_new("net", &g) && !kiln_graph_dim(g, "batch", 4) &&
            !kiln_graph_input(g, "x", KILN_F32, 2, six, batch) && !kiln_graph_input(g, "label", KILN_I32, 1, NULL, batch);
  ok = ok && !kiln_attrs_new(&a) && !kiln_attrs_int(a, "num_hidden", 5) && !kiln_graph_op(g, "fc", "fully_connected", 1, x, a);
  kiln_attrs_free(a), a = NULL;
  ok = ok && !kiln_graph_op(g, "h", "relu", 1, fc, NULL);
  ok = ok && !kiln_attrs_new(&a) && !kiln_attrs_parse(a, "shape", "(4, 1, 5, 1)") && !kiln_graph_op(g, "hr", "reshape", 1, h, a);
  kiln_attrs_free(a), a = NULL;
  ok = ok && !kiln_attrs_new(&a) && !kiln_attrs_ints(a, "kernel", 2, (int64_t[]){2, 1}) &&
       !kiln_attrs_str(a, "pool_type", "avg") && !kiln_graph_op(g, "pool", "pooling", 1, hr, a);
  kiln_attrs_free(a), a = NULL;
  ok = ok && !kiln_attrs_new(&a) && !kiln_attrs_int(a, "num_hidden", 3) && !kiln_attrs_bool(a, "no_bias", 1) &&
       !kiln_graph_op(g, "logits", "fully_connected", 1, h, a);
  kiln_attrs_free(a), a = NULL;
  ok = ok && !kiln_graph_op(g, "scaled", "mul", 2, lg, NULL) && !kiln_graph_op(g, "prob", "softmax", 1, sc, NULL) &&
       !kiln_graph_op(g, "loss", "softmax_cross_entropy", 2, sl, NULL);
  ok = ok && !kiln_graph_output(g, "prob") && !kiln_graph_output(g, "pool");
  ok = ok && !kiln_attrs_new(&a) && !kiln_attrs_float(a, "lr", 0.1) && !kiln_attrs_float(a, "momentum", 0.9) &&
       !kiln_graph_train(g, "loss", "sgd", a);
  kiln_attrs_free(a);
  if (!CHECK(ok, "building the graph: %s", kiln_last_error())) return kiln_graph_free(g), NULL;
  return g;
}

static char *print_lowered_dims(const char *name, const char *src, const char *path, const fe_define *defs, int ndefs) {
  ts_front fr = {.capture = true};
  ir_graph *low = src ? ts_lower_text(&fr, name, src, defs, ndefs) : ts_lower_file(&fr, path, defs, ndefs);
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (low) ir_print(low, mem);
  fclose(mem);
  CHECK(low != NULL, "%s does not lower: %s", name, ts_diags(&fr));
  ir_graph_free(low);
  ts_front_free(&fr);
  return text;
}

static char *print_lowered(const char *name, const char *src, const char *path) {
  return print_lowered_dims(name, src, path, NULL, 0);
}

/* The reshape/pool pair is written nested in the text and flat in C: the same graph. */
static void test_same_text(kiln_graph *g) {
  char *from_c = NULL, *from_text = print_lowered("net.kiln", mlp_text, NULL);
  CHECK(!kiln_graph_text(g, &from_c), "kiln_graph_text: %s", kiln_last_error());
  /* the C graph names the reshape 'hr'; the text's nested call names it after its target */
  char *fixed = from_text;
  const char *from = "pool.reshape", *to = "hr";
  for (char *p; (p = strstr(fixed, from));) {
    memmove(p + strlen(to), p + strlen(from), strlen(p + strlen(from)) + 1);
    memcpy(p, to, strlen(to));
  }
  CHECK(from_c && strcmp(from_c, fixed) == 0, "the graph built in C prints\n%s\nthe text model prints\n%s", from_c, fixed);
  /* the printed text is a model kiln check accepts, and it parses back to the same graph */
  char *again = from_c ? print_lowered("printed.kiln", from_c, NULL) : NULL;
  CHECK(again && strcmp(again, from_c) == 0, "the printed text parses back to itself:\n%s", again ? again : "");
  free(again);
  kiln_free(from_c), free(from_text);
}

static void test_shapes(kiln_graph *g) {
  kiln_dtype t;
  int rank = -1;
  int64_t d[KILN_MAX_RANK];
  CHECK(!kiln_graph_shape(g, "fc.weight", &t, &rank, d) && rank == 2 && d[0] == 5 && d[1] == 6 && t == KILN_F32,
        "fc.weight is f32[5, 6]: %s", kiln_last_error());
  CHECK(!kiln_graph_shape(g, "pool", &t, &rank, d) && rank == 4 && d[2] == 2, "pool is [4, 1, 2, 1]");
  CHECK(kiln_graph_shape(g, "nothing", &t, &rank, d) && strstr(kiln_last_error(), "no tensor 'nothing'"), "unknown name");
}

static bool has(const char *msg, const char *want) { return strstr(msg, want) != NULL; }

static void test_refusals(void) {
  kiln_graph *g = NULL;
  const char *x[] = {"x"}, *bad[] = {"x) + relu(x"};
  int64_t shape[] = {2, 3}, zero[] = {2, 0};
  CHECK(kiln_graph_new(NULL, &g) && has(kiln_last_error(), "not a model name"), "NULL name");
  CHECK(kiln_graph_new("m", NULL) && has(kiln_last_error(), "out is NULL"), "NULL out");
  CHECK(kiln_graph_op(NULL, "y", "relu", 1, x, NULL) && has(kiln_last_error(), "graph is NULL"), "NULL graph");
  CHECK(!kiln_graph_new("m", &g), "new");
  CHECK(kiln_graph_input(g, "x", KILN_F32, 2, zero, NULL) && has(kiln_last_error(), "at least 1"), "zero dim");
  CHECK(kiln_graph_input(g, "x", KILN_F32, 9, shape, NULL) && has(kiln_last_error(), "rank 9"), "rank 9");
  CHECK(kiln_graph_input(g, "x", KILN_F32, 2, NULL, (const char *[]){"nodim", NULL}) && has(kiln_last_error(), "dim 1"), "no size");
  CHECK(kiln_graph_input(g, "x", KILN_F32, 2, NULL, (const char *[]){"nodim", "nodim"}) && has(kiln_last_error(), "nodim"), "unknown dim");
  CHECK(!kiln_graph_input(g, "x", KILN_F32, 2, shape, NULL), "input: %s", kiln_last_error());
  CHECK(kiln_graph_op(g, "y", "relux", 1, x, NULL) && has(kiln_last_error(), "'relux' is not an op; did you mean 'relu'?"), "unknown op");
  CHECK(kiln_graph_op(g, "y", "relu", 1, bad, NULL) && has(kiln_last_error(), "is not a tensor name"), "injection");
  CHECK(kiln_graph_op(g, "y", "relu", 1, (const char *[]){"z"}, NULL) && has(kiln_last_error(), "<graph>:") &&
        has(kiln_last_error(), "^"), "unknown tensor: a diagnostic with a caret: %s", kiln_last_error());
  kiln_attrs *a = NULL;
  CHECK(!kiln_attrs_new(&a) && !kiln_attrs_int(a, "num_hiden", 4), "attrs");
  CHECK(kiln_graph_op(g, "y", "fully_connected", 1, x, a) && has(kiln_last_error(), "did you mean 'num_hidden'"),
        "misspelt attribute: %s", kiln_last_error());
  kiln_attrs_free(a), a = NULL;
  CHECK(!kiln_attrs_new(&a) && kiln_attrs_parse(a, "shape", "(3, 2)) h = relu((x)") && has(kiln_last_error(), "not one attribute value"),
        "attribute text that reaches outside its value");
  CHECK(!kiln_attrs_parse(a, "shape", "(3, 2)") && !kiln_graph_op(g, "y", "reshape", 1, x, a), "reshape: %s", kiln_last_error());
  kiln_attrs_free(a), a = NULL;
  CHECK(!kiln_attrs_new(&a) && !kiln_attrs_parse(a, "shape", "(4, 2)"), "attrs");
  CHECK(kiln_graph_op(g, "w", "reshape", 1, x, a) && has(kiln_last_error(), "reshape"), "wrong shape: %s", kiln_last_error());
  kiln_attrs_free(a), a = NULL;
  /* dim is a keyword (dim declarations) that the language also takes as concat's argument */
  CHECK(!kiln_attrs_new(&a) && !kiln_attrs_int(a, "dim", 0) &&
        !kiln_graph_op(g, "c", "concat", 2, (const char *[]){"x", "x"}, a), "concat(x, x, dim=0): %s", kiln_last_error());
  CHECK(kiln_attrs_int(a, "param", 1) && has(kiln_last_error(), "'param' is not an attribute name"), "another keyword refused");
  kiln_attrs_free(a);
  CHECK(kiln_graph_op(g, "y", "relu", 1, x, NULL) && has(kiln_last_error(), "y"), "y assigned twice");
  char *text = NULL;
  CHECK(kiln_graph_text(g, &text) && has(kiln_last_error(), "no output"), "no output yet");
  CHECK(!kiln_graph_output(g, "y") && !kiln_graph_text(g, &text) && has(text, "y = reshape(x, shape=(3, 2))") &&
        has(text, "c = concat(x, x, dim=0)"),
        "after refusals the graph holds what was accepted: %s", text ? text : kiln_last_error());
  kiln_free(text);
  kiln_graph_free(g);
  kiln_graph_free(NULL);
}

static void test_load(void) {
  char path[4096];
  snprintf(path, sizeof path, "%sexamples/mlp.kiln", ts_root());
  kiln_graph *g = NULL;
  char *text = NULL, *want = print_lowered("mlp", NULL, path);
  CHECK(!kiln_graph_load(path, NULL, &g) && !kiln_graph_text(g, &text), "load: %s", kiln_last_error());
  CHECK(text && want && strcmp(text, want) == 0, "a loaded model prints as kiln check --print:\n%s\n%s", text, want);
  /* the loaded graph grows like any other */
  const char *in[] = {"prob"};
  CHECK(!kiln_graph_op(g, "top", "max", 1, in, NULL) && !kiln_graph_output(g, "top"), "grow: %s", kiln_last_error());
  kiln_free(text), free(want);
  kiln_graph_free(g);
  CHECK(kiln_graph_load("/nonexistent.kiln", NULL, &g) && has(kiln_last_error(), "nonexistent"), "missing file");
}

/* kiln_graph_load_dims rebinds dims as `kiln compile -D batch=1` does: the same graph. */
static void test_load_dims(void) {
  char path[4096];
  snprintf(path, sizeof path, "%sexamples/mlp.kiln", ts_root());
  const char *names[] = {"batch"};
  int64_t one[] = {1}, zero[] = {0};
  fe_define defs[] = {{"batch", 1, 0}};
  kiln_graph *g = NULL;
  char *text = NULL, *want = print_lowered_dims("mlp", NULL, path, defs, 1);
  CHECK(!kiln_graph_load_dims(path, NULL, 1, names, one, &g) && !kiln_graph_text(g, &text), "load -D batch=1: %s", kiln_last_error());
  CHECK(text && want && strcmp(text, want) == 0, "prints as kiln check -D batch=1 --print:\n%s\n%s", text, want);
  int rank = 0;
  int64_t d[KILN_MAX_RANK] = {0};
  CHECK(!kiln_graph_shape(g, "prob", NULL, &rank, d) && rank == 2 && d[0] == 1 && d[1] == 10, "prob is f32[1, 10]");
  kiln_free(text), free(want), kiln_graph_free(g);
  g = NULL;
  CHECK(kiln_graph_load_dims(path, NULL, 1, (const char *[]){"batchh"}, one, &g) && !g && has(kiln_last_error(), "batchh"),
        "an undeclared dim is refused: %s", kiln_last_error());
  CHECK(kiln_graph_load_dims(path, NULL, 1, names, zero, &g) && has(kiln_last_error(), "1..2^40"), "batch=0 refused: %s", kiln_last_error());
  CHECK(kiln_graph_load_dims(path, NULL, 1, NULL, one, &g) && has(kiln_last_error(), "NULL"), "NULL names refused");
  CHECK(kiln_graph_load_dims(path, NULL, -1, names, one, &g) && has(kiln_last_error(), "ndims"), "ndims -1 refused");
}

/* The JIT'd model and the .so built from the same graph: same weights (seed), same outputs. */
static void test_jit_equals_so(kiln_graph *g) {
  char dir[] = "/tmp/kiln-api-XXXXXX", so[4200];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(so, sizeof so, "%s/libnet.so", dir);
  kiln_model *m = NULL;
  CHECK(!kiln_graph_jit(g, 42, &m), "jit: %s", kiln_last_error());
  CHECK(!kiln_graph_compile(g, so, 2), "compile: %s", kiln_last_error());
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  const rt_model_api *api = h ? dlsym(h, "kiln_model") : NULL;
  CHECK(api != NULL, "the .so has kiln_model: %s", h ? "" : dlerror());
  int nin = 0, nout = 0;
  CHECK(m && !kiln_model_count(m, 0, &nin, &nout) && nin == 1 && nout == 2, "predict takes x, gives prob and pool");
  float x[24], prob[2][12], pool[2][8];
  for (int i = 0; i < 24; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
  const void *ins[] = {x};
  void *o1[] = {prob[0], pool[0]}, *o2[] = {prob[1], pool[1]};
  CHECK(m && !kiln_model_predict(m, ins, o1), "jit predict: %s", kiln_last_error());
  rt_model *sm = api ? api->create(api->desc, 42) : NULL;
  CHECK(sm && !api->predict(sm, ins, o2), ".so predict");
  CHECK(memcmp(prob[0], prob[1], sizeof prob[0]) == 0 && memcmp(pool[0], pool[1], sizeof pool[0]) == 0, "same outputs");
  CHECK(kiln_model_predict(m, NULL, o1) && *kiln_last_error(), "NULL inputs refused with a message");
  if (sm) api->destroy(sm);
  if (h) dlclose(h);
  kiln_model_free(m);
  char hdr[4200];
  snprintf(hdr, sizeof hdr, "%s/net.h", dir);
  CHECK(access(hdr, F_OK) == 0, "the header is written beside the .so");
  unlink(so), unlink(hdr), rmdir(dir);
}

/* A header that cannot be written (a folder has its name): the old .so stays as it was and
 * nothing else is left behind. */
static void test_compile_all_or_nothing(kiln_graph *g) {
  char dir[] = "/tmp/kiln-api-XXXXXX", so[4200], hdr[4200], buf[8] = {0};
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(so, sizeof so, "%s/libnet.so", dir), snprintf(hdr, sizeof hdr, "%s/net.h", dir);
  FILE *f = fopen(so, "w");
  fputs("old", f), fclose(f);
  mkdir(hdr, 0700);
  CHECK(kiln_graph_compile(g, so, 2) && has(kiln_last_error(), "net.h"), "the header cannot be written: %s", kiln_last_error());
  f = fopen(so, "r");
  CHECK(f && fread(buf, 1, sizeof buf - 1, f) == 3 && strcmp(buf, "old") == 0, "the old .so is back");
  if (f) fclose(f);
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  CHECK(n == 2, "nothing but libnet.so and net.h in the folder (%d entries)", n);
  unlink(so), rmdir(hdr), rmdir(dir);
}

/* kiln_graph_const declares a const as the language does: it prints as `const` and holds its
 * initializer's values; a keyword is refused as a name. */
static void test_const(void) {
  kiln_graph *g = NULL;
  kiln_attrs *a = NULL;
  int64_t xs[] = {2, 3}, cs[] = {1, 3};
  const char *xc[] = {"x", "c"};
  bool ok = !kiln_graph_new("k", &g) && !kiln_graph_input(g, "x", KILN_F32, 2, xs, NULL) &&
            !kiln_attrs_new(&a) && !kiln_attrs_float(a, "value", 0.5);
  CHECK(ok && !kiln_graph_const(g, "c", KILN_F32, 2, cs, "constant", a), "const: %s", kiln_last_error());
  kiln_attrs_free(a);
  CHECK(kiln_graph_const(g, "param", KILN_F32, 2, cs, NULL, NULL) && has(kiln_last_error(), "'param' is not a name"),
        "a keyword is not a name: %s", kiln_last_error());
  CHECK(kiln_graph_param(g, "const", KILN_F32, 2, cs, NULL, NULL) && has(kiln_last_error(), "'const' is not a name"),
        "a keyword is not a name: %s", kiln_last_error());
  CHECK(kiln_graph_const(g, "d", KILN_F32, 2, cs, "nosuchinit", NULL) && has(kiln_last_error(), "not an initializer"),
        "an unknown initializer");
  ok = !kiln_graph_op(g, "y", "mul", 2, xc, NULL) && !kiln_graph_output(g, "y");
  CHECK(ok, "ops: %s", kiln_last_error());
  char *text = NULL;
  CHECK(!kiln_graph_text(g, &text) && has(text, "const c : f32[1, 3] = constant(value=0.5)"), "printed: %s",
        text ? text : kiln_last_error());
  kiln_free(text);
  kiln_model *m = NULL;
  float x[6] = {1, 2, 3, 4, 5, 6}, out[6];
  const void *ins[] = {x};
  void *outs[] = {out};
  CHECK(!kiln_graph_jit(g, 7, &m) && !kiln_model_predict(m, ins, outs), "jit and predict: %s", kiln_last_error());
  bool half = true;
  for (int i = 0; i < 6; i++) half &= out[i] == 0.5f * x[i];
  CHECK(half, "y = x * c with c = 0.5 everywhere");
  kiln_model_free(m);
  kiln_graph_free(g);
}

/* kiln_graph_train_ex: the schedule, clip_norm and wd_exclude printed in the train statement
 * and in force: the lr follows a step schedule; refusals name the part that is wrong. */
static void test_train_options(void) {
  kiln_graph *g = NULL;
  kiln_attrs *a = NULL, *sa = NULL;
  int64_t xs[] = {4, 3};
  const char *x[] = {"x"}, *hl[] = {"h", "label"};
  bool ok = !kiln_graph_new("t", &g) && !kiln_graph_input(g, "x", KILN_F32, 2, xs, NULL) &&
            !kiln_graph_input(g, "label", KILN_I32, 1, xs, NULL) && !kiln_attrs_new(&a) && !kiln_attrs_int(a, "num_hidden", 2) &&
            !kiln_graph_op(g, "h", "fully_connected", 1, x, a) && !kiln_graph_op(g, "loss", "softmax_cross_entropy", 2, hl, NULL);
  kiln_attrs_free(a), a = NULL;
  ok = ok && !kiln_attrs_new(&a) && !kiln_attrs_float(a, "lr", 0.5) && !kiln_attrs_float(a, "wd", 0.1) && !kiln_attrs_new(&sa) &&
       !kiln_attrs_int(sa, "step_size", 2) && !kiln_attrs_float(sa, "gamma", 0.5);
  CHECK(ok, "building: %s", kiln_last_error());
  kiln_train_options bad = {.schedule = "cosin"};
  CHECK(kiln_graph_train_ex(g, "loss", "adamw", a, &bad) && has(kiln_last_error(), "'cosin' is not a schedule"), "unknown schedule");
  bad = (kiln_train_options){.clip_norm = -1};
  CHECK(kiln_graph_train_ex(g, "loss", "adamw", a, &bad) && has(kiln_last_error(), "clip_norm must be a positive"), "clip_norm < 0");
  bad = (kiln_train_options){.wd_exclude = "bias\n  output h"};
  CHECK(kiln_graph_train_ex(g, "loss", "adamw", a, &bad) && has(kiln_last_error(), "wd_exclude is"), "wd_exclude's text is checked");
  bad = (kiln_train_options){.wd_exclude = "biass"};
  CHECK(kiln_graph_train_ex(g, "loss", "adamw", a, &bad) && has(kiln_last_error(), "unknown kind 'biass'"),
        "the front end's message: %s", kiln_last_error());
  kiln_train_options o = {.schedule = "step", .schedule_attrs = sa, .clip_norm = 0.25, .wd_exclude = "bias"};
  CHECK(!kiln_graph_train_ex(g, "loss", "adamw", a, &o), "train_ex: %s", kiln_last_error());
  kiln_attrs_free(a), kiln_attrs_free(sa);
  char *text = NULL;
  CHECK(!kiln_graph_text(g, &text) && has(text, "schedule step(step_size=2, gamma=0.5) clip_norm=0.25 wd_exclude=bias"),
        "printed: %s", text ? text : kiln_last_error());
  kiln_free(text);
  kiln_model *m = NULL;
  float xv[12] = {1, -2, 3, 0.5f, 1, -1, 2, 2, -3, 0, 1, 1}, loss, lr[5];
  int32_t label[4] = {0, 1, 1, 0};
  const void *ins[] = {xv, label};
  ok = !kiln_graph_jit(g, 3, &m);
  for (int s = 0; ok && s < 5; s++) ok = !kiln_model_lr(m, &lr[s]) && !kiln_model_train_step(m, ins, &loss);
  CHECK(ok && lr[0] == 0.5f && lr[1] == 0.5f && lr[2] == 0.25f && lr[3] == 0.25f && lr[4] == 0.125f,
        "the lr steps down by half every 2 steps: %g %g %g %g %g (%s)", lr[0], lr[1], lr[2], lr[3], lr[4], kiln_last_error());
  kiln_model_free(m);
  kiln_graph_free(g);
}

int main(void) {
  test_const();
  test_train_options();
  kiln_graph *g = build_net();
  if (g) test_same_text(g), test_shapes(g), test_jit_equals_so(g), test_compile_all_or_nothing(g);
  kiln_graph_free(g);
  test_refusals();
  test_load();
  test_load_dims();
  return ts_summary("api.test_graph");
}
