/* test_cg_cuda.c — the CUDA code generator without a GPU: which nodes it refuses (a fused
 * epilogue, which only the CPU's epilogue pass makes: kiln compile switches that pass off for
 * the GPU), that every generated step of every example gets its entry, that a repeated block's
 * groups share one body, and that the descriptor is retargeted (generated steps FUSED, no CPU
 * kernel pointers, the PTX as the module). */
#include <stdlib.h>
#include <string.h>

#include "cg_cuda.h"
#include "kiln_test.h"

static ir_graph *tc_lower(ts_front *fr, const char *rel) {
  char path[2048];
  snprintf(path, sizeof path, "%s%s", ts_root(), rel);
  return ts_lower_file(fr, path, NULL, 0);
}

/* The epilogue pass's groups are refused by name; without the pass the model is taken. */
static void tc_refuses_epilogues(void) {
  ts_front fr = {.small = true};
  ir_graph *g = tc_lower(&fr, "examples/mlp.kiln");
  ir_graph *with = g ? ts_compile(g, IR_MODE_PREDICT, 0) : NULL;
  ir_graph *without = g ? ts_compile(g, IR_MODE_PREDICT, cg_target_disabled(RT_TARGET_CUDA)) : NULL;
  char err[512] = "";
  CHECK(with && cg_cuda_check(with, err, sizeof err) && strstr(err, "a fused epilogue"),
        "an epilogue group is refused by name (got \"%s\")", err);
  err[0] = 0;
  CHECK(without && !cg_cuda_check(without, err, sizeof err), "mlp without the epilogue pass runs on the GPU: %s", err);
  ts_graph_free(with), ts_graph_free(without);
  ir_graph_free(g);
  ts_front_free(&fr);
}

static int tc_count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* Every generated step of both graphs has its entry, and the retargeted descriptor says so. */
static void tc_entries(const char *rel, bool repeats) {
  ts_front fr = {.small = true};
  ir_graph *g = tc_lower(&fr, rel);
  uint32_t off = cg_target_disabled(RT_TARGET_CUDA);
  ir_graph *p = g ? ts_compile(g, IR_MODE_PREDICT, off) : NULL, *t = g && g->has_train ? ts_compile(g, IR_MODE_TRAIN, off) : NULL;
  char err[1024] = "", *src = NULL;
  int bad = !p || cg_cuda_source(p, t, NULL, &src, err, sizeof err);
  CHECK(!bad, "%s: the CUDA C is written: %s", rel, err);
  rt_model_desc *d = bad ? NULL : cg_desc_build(p, t, err, sizeof err);
  int want = 0, fused = 0, kernels = 0;
  if (d) {
    cg_cuda_retarget(d, p, t, "// ptx", "// lib ptx");
    const rt_program *ps[2] = {&d->predict, d->has_train ? &d->train : NULL};
    const ir_graph *gs[2] = {p, t};
    for (int k = 0; k < 2; k++)
      for (int i = 0; ps[k] && i < ps[k]->nsteps; i++) {
        const rt_step *s = &ps[k]->steps[i];
        bool gen = cg_cuda_generated(ir_node_at(gs[k], i));
        char name[64], entry[96];
        rt_fused_name(name, sizeof name, k == 1, i);
        snprintf(entry, sizeof entry, "__global__ void %s(", name);
        want += gen, fused += s->kind == RT_STEP_FUSED, kernels += s->kernel != NULL || s->fused != NULL;
        CHECK(!gen || strstr(src, entry), "%s: step %s has its entry %s", rel, s->name, name);
      }
    CHECK(d->target == RT_TARGET_CUDA && d->gpu_module && strcmp(d->gpu_module, "// ptx") == 0 && d->gpu_lib_module &&
          strcmp(d->gpu_lib_module, "// lib ptx") == 0, "%s: the descriptor is CUDA's", rel);
  }
  CHECK(want > 0 && fused == want && kernels == 0, "%s: %d generated steps, %d FUSED, %d CPU pointers left", rel, want, fused, kernels);
  int bodies = src ? tc_count(src, "static __device__ void kiln_body") : 0;
  if (repeats) CHECK(bodies > 0 && bodies < want, "%s: repeated groups share bodies (%d bodies for %d steps)", rel, bodies, want);
  cg_desc_free(d);
  free(src);
  ts_graph_free(p), ts_graph_free(t);
  ir_graph_free(g);
  ts_front_free(&fr);
}

int main(void) {
  tc_refuses_epilogues();
  tc_entries("examples/mlp.kiln", false);
  tc_entries("examples/transformer.kiln", false);
  tc_entries("tests/passes/models/chains.kiln", false);
  tc_entries("tests/passes/models/repeat.kiln", true);
  return ts_summary("cuda.test_cg_cuda");
}
