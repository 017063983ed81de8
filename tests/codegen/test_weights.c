/* test_weights.c — initial weights (ir_tensor.data, as an ONNX model's initializers) through
 * kiln compile's path: the descriptor, the weights object (cg_weights.c), the link. The .so's
 * descriptor must point at exactly the bytes given, each tensor's at a 64-byte boundary, a
 * tensor without data must keep its initializer, and a model created from the .so must save
 * the same bytes. Checked through the shared link with the default linker command and with
 * $CC=cc (GNU ld where ld.lld would otherwise be chosen), and through --emit obj's single
 * relocatable object linked afterwards. Prints "weights: N passed, N failed". */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cg.h"
#include "kiln_test.h"
#include "runtime.h"

/* Sizes that are not multiples of 64 bytes, so that the padding between tensors counts. */
static const char tw_src[] =
  "model tw {\n"
  "  input x : f32[2, 5]\n"
  "  h = fully_connected(x, num_hidden=3)\n"
  "  y = fully_connected(h, num_hidden=7)\n"
  "  output y\n"
  "}\n";

/* The last parameter keeps its initializer: no data, no place in the weights object. */
typedef struct {
  ir_graph *lowered;
  int nparam, params[8];
  uint32_t *data[8];            /* bit patterns, NaNs and denormals included */
  char dir[256];
} tw_model;

static bool tw_has_data(const tw_model *t, int k) { return k < t->nparam - 1; }

static void tw_fill(tw_model *t, ts_front *fr) {
  uint64_t rng = TS_RNG_SEED;
  t->lowered = ts_lower_text(fr, "tw.kiln", tw_src, NULL, 0);
  if (!CHECK(t->lowered != NULL, "the model lowers")) return;
  for (int i = 0; i < ir_ntensors(t->lowered) && t->nparam < 8; i++) {
    ir_tensor *x = ir_tensor_at(t->lowered, i);
    if (x->kind != IR_T_PARAM) continue;
    int k = t->nparam++;
    t->params[k] = i;
    int64_t n = ir_tensor_numel(x);
    t->data[k] = malloc((size_t)n * 4);
    for (int64_t j = 0; j < n; j++) t->data[k][j] = ts_next(&rng);
  }
  for (int k = 0; k < t->nparam; k++)
    if (tw_has_data(t, k)) ir_tensor_at(t->lowered, t->params[k])->data = t->data[k];
  CHECK(t->nparam == 4, "the model has 4 parameters (%d)", t->nparam);
}

/* ---- building: the descriptor and module as kiln compile makes them ---- */

static bool tw_build(const tw_model *t, cg_build *b) {
  char err[2048] = "";
  ir_diag d;
  ir_diag_init(&d, stderr);
  cg_options o = {.opt_level = 1};
  bool ok = !cg_build_graphs(t->lowered, 0, &d, b) && !cg_build_module(b, &o, err, sizeof err) &&
            !cg_emit_aot(b->llvm, b->desc, err, sizeof err) && !cg_optimize(b->llvm, err, sizeof err);
  ir_diag_free(&d);
  return CHECK(ok, "the model builds: %s", err);
}

static bool tw_link_so(const tw_model *t, const char *so) {
  cg_build b = {0};
  char err[8192] = "";
  bool ok = tw_build(t, &b) && CHECK(!cg_build_link(&b, so, NULL, err, sizeof err), "cg_build_link: %s", err);
  cg_build_free(&b);
  return ok;
}

/* --emit obj: one relocatable object holding the weights, which then links alone. */
static bool tw_link_via_obj(const tw_model *t, const char *so) {
  cg_build b = {0};
  char err[8192] = "", obj[512];
  snprintf(obj, sizeof obj, "%s/tw.o", t->dir);
  bool ok = tw_build(t, &b) && CHECK(!cg_build_object(&b, obj, err, sizeof err), "cg_build_object: %s", err) &&
            CHECK(!cg_link_shared(obj, NULL, so, NULL, err, sizeof err), "linking the object: %s", err);
  cg_build_free(&b);
  unlink(obj);
  return ok;
}

/* ---- reading back ---- */

static void tw_check_desc(const tw_model *t, const rt_model_desc *d, const char *how) {
  for (int k = 0; k < t->nparam; k++) {
    const rt_tensor_info *ti = &d->tensors[t->params[k]];
    size_t bytes = (size_t)ir_tensor_numel(ir_tensor_at(t->lowered, t->params[k])) * 4;
    if (!tw_has_data(t, k)) {
      CHECK(ti->data == NULL, "%s: %s has no data in the .so", how, ti->name);
      continue;
    }
    if (!CHECK(ti->data != NULL, "%s: %s has data in the .so", how, ti->name)) continue;
    CHECK((uintptr_t)ti->data % CG_WEIGHTS_ALIGN == 0, "%s: %s's data is %d-byte aligned", how, ti->name, CG_WEIGHTS_ALIGN);
    CHECK(memcmp(ti->data, t->data[k], bytes) == 0, "%s: %s's data in the .so are the bytes given", how, ti->name);
  }
}

/* A model created from the .so starts from those bytes: its saved weights hold them. */
static void tw_check_saved(const tw_model *t, const rt_model_api *api, const char *how) {
  char path[512], err[512] = "";
  snprintf(path, sizeof path, "%s/w.safetensors", t->dir);
  rt_model *m = api->create(api->desc, 7);
  if (!CHECK(m != NULL, "%s: create", how)) return;
  rt_st_file f = {0};
  if (CHECK(api->save(m, path) == 0, "%s: save: %s", how, api->error(m)) &&
      CHECK(rt_st_open(path, &f, err, sizeof err) == 0, "%s: the saved weights read: %s", how, err))
    for (int k = 0; k < t->nparam; k++) {
      const char *name = api->desc->tensors[t->params[k]].name;
      const rt_st_entry *e = rt_st_find(&f, name);
      size_t bytes = (size_t)ir_tensor_numel(ir_tensor_at(t->lowered, t->params[k])) * 4;
      bool same = e && e->end - e->begin == bytes && memcmp(e->data, t->data[k], bytes) == 0;
      CHECK(tw_has_data(t, k) ? same : e && !same, "%s: %s is saved %s", how, name,
            tw_has_data(t, k) ? "as the bytes given" : "from its initializer");
    }
  rt_st_close(&f);
  api->destroy(m);
  unlink(path);
}

static void tw_check_so(const tw_model *t, const char *so, const char *how) {
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!CHECK(h != NULL, "%s: dlopen: %s", how, dlerror())) return;
  const rt_model_api *api = dlsym(h, "kiln_model");
  if (CHECK(api && api->desc, "%s: the .so exports kiln_model", how)) {
    tw_check_desc(t, api->desc, how);
    tw_check_saved(t, api, how);
  }
  dlclose(h);
  unlink(so);
}

int main(void) {
  ts_front fr = {0};
  tw_model t = {0};
  const char *tmp = getenv("TMPDIR");
  snprintf(t.dir, sizeof t.dir, "%s/kiln-weights-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!CHECK(mkdtemp(t.dir) != NULL, "a temporary folder")) return ts_summary("weights");
  tw_fill(&t, &fr);
  char so[512];
  snprintf(so, sizeof so, "%s/libtw.so", t.dir);
  if (t.nparam == 4) {
    const char *cc = getenv("CC");
    char *saved = cc ? strdup(cc) : NULL;
    unsetenv("CC");
    if (tw_link_so(&t, so)) tw_check_so(&t, so, "default link");
    setenv("CC", "cc", 1);
    if (tw_link_so(&t, so)) tw_check_so(&t, so, "CC=cc");
    if (saved) setenv("CC", saved, 1);
    else unsetenv("CC");
    free(saved);
    if (tw_link_via_obj(&t, so)) tw_check_so(&t, so, "--emit obj");
  }
  ir_graph_free(t.lowered);
  ts_front_free(&fr);
  for (int k = 0; k < t.nparam; k++) free(t.data[k]);
  rmdir(t.dir);
  return ts_summary("weights");
}
