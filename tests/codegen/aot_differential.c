/* aot_differential.c — the AOT path end to end against the reference executor: for every
 * example and tests/passes/models/ (small dims), `kiln compile` to a temporary folder, dlopen
 * the .so and check its kiln_model descriptor field by field against cg_desc_build's (which
 * proves the LLVM struct layouts), then predict, 3 train steps (losses and every weight via
 * save) and predict again through kiln_model, `kiln run` on the .so and on the .kiln, and for
 * the MLP a C driver compiled against mlp.h — all within 1e-5 relative of the executor. The
 * test models are compiled with --jobs 3, so their code comes in three objects.
 * usage: codegen_aot_differential KILN [SRCROOT]. Prints "aot: N passed, N failed". */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cg.h"
#include "exec.h"
#include "kiln_test.h"
#include "runtime.h"

#define AT_STEPS 3
#define AT_SEED 20261122u
#define AT_RTOL 1e-5
#define AT_MAX 16
#ifdef KILN_SANITIZE
#define AT_SAN_FLAGS " " KILN_SANITIZE_FLAG   /* the .so carries the sanitizer runtimes' references */
#else
#define AT_SAN_FLAGS ""
#endif

static int at_passed, at_failed;
static const char *at_kiln;
static char at_root[1024], at_tmp[1024];

static bool at_check(bool ok, const char *model, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool at_check(bool ok, const char *model, const char *fmt, ...) {
  if (ok) return at_passed++, true;
  at_failed++;
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s: ", model);
  vprintf(fmt, ap);
  putchar('\n');
  va_end(ap);
  return false;
}

/* ---- helpers ---- */

static bool at_close(float a, float b) { return fabsf(a - b) <= AT_RTOL * fmaxf(1.0f, fmaxf(fabsf(a), fabsf(b))); }

/* The index of the first element that differs beyond tolerance, or -1. */
static int64_t at_diff(const void *a, const void *b, int64_t n, int32_t dtype) {
  for (int64_t i = 0; i < n; i++) {
    if (dtype == K_I32 ? ((const int32_t *)a)[i] != ((const int32_t *)b)[i]
                       : !at_close(((const float *)a)[i], ((const float *)b)[i]))
      return i;
  }
  return -1;
}

static int at_sh(const char *cmd) {
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The small dims the front end lowered with, as " -D name=N" flags for kiln compile. */
static void at_flags(const ts_front *fr, char *flags, size_t n) {
  size_t len = 0;
  flags[0] = 0;
  for (int i = 0; i < fr->ndefs; i++)
    len += (size_t)snprintf(flags + len, n - len, " -D %s=%lld", fr->defs[i].name, (long long)fr->defs[i].value);
}

/* ---- inputs ---- */

static uint64_t at_rng = TS_RNG_SEED;

/* A program's input buffers out of the batch, which is indexed as the lowered graph's
 * tensors: a descriptor entry keeps its graph index in ctr. */
static void at_args(const rt_model_desc *d, const rt_program *p, void **batch, const void **args) {
  for (int k = 0; k < p->ninputs && k < AT_MAX; k++) args[k] = batch[d->tensors[p->inputs[k]].ctr];
}

/* ---- the descriptor read back through the .so ---- */

static bool at_same_shape(const k_shape *a, const k_shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->d[i] != b->d[i]) return false;
  return true;
}

static bool at_same_ints(const int32_t *a, const int32_t *b, int n) {
  if (n <= 0) return true;
  return a && b && memcmp(a, b, sizeof *a * (size_t)n) == 0;
}

static bool at_same_str(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

static void at_cmp_tensors(const char *model, const rt_model_desc *so, const rt_model_desc *mem) {
  for (int t = 0; t < mem->ntensors && t < so->ntensors; t++) {
    const rt_tensor_info *a = &so->tensors[t], *b = &mem->tensors[t];
    at_check(at_same_str(a->name, b->name) && a->role == b->role && a->dtype == b->dtype &&
                 at_same_shape(&a->shape, &b->shape) && a->init == b->init && a->init_a == b->init_a &&
                 a->init_b == b->init_b && a->ctr == b->ctr,
             model, "tensor %d (%s) differs in the .so's descriptor", t, b->name);
  }
}

static bool at_same_step(const rt_step *a, const rt_step *b) {
  bool ok = a->kind == b->kind && a->op == b->op && !a->kernel == !b->kernel && a->nin == b->nin && a->nout == b->nout &&
            at_same_ints(a->in, b->in, b->nin) && at_same_ints(a->out, b->out, b->nout) &&
            at_same_ints((const int32_t *)a->req, (const int32_t *)b->req, b->nout) && a->temp_offset == b->temp_offset &&
            a->temp_bytes == b->temp_bytes && a->random == b->random && a->name_hash == b->name_hash &&
            at_same_str(a->name, b->name) && a->ndeps == b->ndeps && at_same_ints(a->deps, b->deps, b->ndeps) &&
            !a->param == !b->param && a->param_bytes == b->param_bytes && !a->in_shape == !b->in_shape &&
            (b->kind != RT_STEP_FUSED || a->fused != NULL) && a->samples == b->samples &&
            !a->sample_stride == !b->sample_stride;
  for (int j = 0; ok && b->sample_stride && j < b->nin + b->nout; j++) ok = a->sample_stride[j] == b->sample_stride[j];
  for (int i = 0; ok && b->in_shape && i < b->nin; i++) ok = a->in_shape && at_same_shape(&a->in_shape[i], &b->in_shape[i]);
  if (ok && b->param && (b->kind == RT_STEP_FORWARD || b->kind == RT_STEP_BACKWARD))
    ok = memcmp(a->param, b->param, ir_ops[b->op].param_size) == 0;
  return ok;
}

static bool at_same_patches(const rt_dimpatch *a, const rt_dimpatch *b, int n) {
  for (int i = 0; i < n; i++)
    if (a[i].kind != b[i].kind || a[i].index != b[i].index || a[i].slot != b[i].slot || a[i].axis != b[i].axis ||
        a[i].v.mask != b[i].v.mask || a[i].v.a != b[i].v.a || a[i].v.b != b[i].v.b)
      return false;
  return true;
}

static void at_cmp_program(const char *model, const char *which, const rt_program *a, const rt_program *b, int nt) {
  at_check(a->npatches == b->npatches && at_same_patches(a->patches, b->patches, b->npatches) && a->dims_used == b->dims_used,
           model, "%s program's bounded-dim patches differ in the .so's descriptor", which);
  at_check(a->nsteps == b->nsteps && a->arena_bytes == b->arena_bytes && a->ninputs == b->ninputs &&
               a->noutputs == b->noutputs && a->is_train == b->is_train && at_same_ints(a->inputs, b->inputs, b->ninputs) &&
               at_same_ints(a->outputs, b->outputs, b->noutputs) &&
               (!b->offset || (a->offset && memcmp(a->offset, b->offset, sizeof *b->offset * (size_t)nt) == 0)),
           model, "%s program header differs in the .so's descriptor", which);
  for (int i = 0; i < a->nsteps && i < b->nsteps; i++)
    at_check(at_same_step(&a->steps[i], &b->steps[i]), model, "%s step %d (%s) differs in the .so's descriptor", which, i,
             b->steps[i].name);
}

static void at_cmp_desc(const char *model, const rt_model_api *api, const rt_model_desc *mem) {
  const rt_model_desc *so = api->desc;
  at_check(strcmp(api->abi, RT_MODEL_ABI) == 0 && strcmp(so->abi, RT_MODEL_ABI) == 0 && at_same_str(so->name, mem->name) &&
               so->ntensors == mem->ntensors && so->has_train == mem->has_train && so->optim == mem->optim &&
               so->lr == mem->lr && memcmp(&so->sgd, &mem->sgd, sizeof so->sgd) == 0 &&
               memcmp(&so->adam, &mem->adam, sizeof so->adam) == 0,
           model, "descriptor header differs");
  at_check(api->create && api->destroy && api->load && api->save && api->predict && api->train_step && api->set_lr &&
               api->error, model, "kiln_model lacks an entry point");
  at_check(so->ndims == mem->ndims && so->ntensor_patches == mem->ntensor_patches &&
               at_same_patches(so->tensor_patches, mem->tensor_patches, mem->ntensor_patches),
           model, "the bounded dims differ in the .so's descriptor");
  for (int k = 0; k < mem->ndims && k < so->ndims; k++)
    at_check(at_same_str(so->dims[k].name, mem->dims[k].name) && so->dims[k].lo == mem->dims[k].lo && so->dims[k].hi == mem->dims[k].hi,
             model, "bounded dim %d differs in the .so's descriptor", k);
  at_check(!!api->predict_at == !mem->target && !!api->train_step_at == !mem->target, model, "kiln_model's _at entry points");
  at_cmp_tensors(model, so, mem);
  at_cmp_program(model, "predict", &so->predict, &mem->predict, mem->ntensors);
  if (mem->has_train) at_cmp_program(model, "train", &so->train, &mem->train, mem->ntensors);
}

/* ---- one model ---- */

typedef struct {
  const char *name;              /* "file.kiln:model" */
  const char *path, *flags;      /* the source and its -D flags */
  const ir_graph *lowered, *gp, *gt;
  rt_model_desc *mem;            /* cg_desc_build's */
  void **batch;
  char dir[1100];                /* the model's temporary folder */
} at_model;

/* Predict outputs of the executor into outs (one malloc'd buffer per output). */
static int at_ex_predict(at_model *t, ex_model *ex, void **outs) {
  const void *args[AT_MAX];
  char err[EX_ERR_LEN];
  at_args(t->mem, &t->mem->predict, t->batch, args);
  for (int k = 0; k < t->mem->predict.noutputs; k++)
    outs[k] = calloc((size_t)k_shape_numel(&t->mem->tensors[t->mem->predict.outputs[k]].shape) + 1, 4);
  int rc = ex_predict(ex, t->gp, args, outs, err, sizeof err);
  if (rc) printf("executor predict failed on %s: %s\n", t->name, err);
  return rc;
}

static void at_free_outs(const rt_model_desc *d, void **outs) {
  for (int k = 0; k < d->predict.noutputs; k++) free(outs[k]), outs[k] = NULL;
}

/* The .so's predict against the executor's outputs. */
static void at_cmp_predict(at_model *t, const rt_model_api *api, rt_model *m, void **ref, const char *when) {
  const rt_model_desc *d = t->mem;
  const void *args[AT_MAX];
  void *outs[AT_MAX] = {0};
  at_args(d, &d->predict, t->batch, args);
  for (int k = 0; k < d->predict.noutputs; k++)
    outs[k] = calloc((size_t)k_shape_numel(&d->tensors[d->predict.outputs[k]].shape) + 1, 4);
  if (at_check(api->predict(m, args, outs) == 0, t->name, "predict %s: %s", when, api->error(m))) {
    for (int k = 0; k < d->predict.noutputs; k++) {
      const rt_tensor_info *ti = &d->tensors[d->predict.outputs[k]];
      int64_t i = at_diff(outs[k], ref[k], k_shape_numel(&ti->shape), ti->dtype);
      at_check(i < 0, t->name, "predict %s: output %s differs at %lld", when, ti->name, (long long)i);
    }
  }
  at_free_outs(d, outs);
}

/* Each const in the .so's save after training holds the values it was created with (a
 * fresh executor's, which the initial weights match): train_step never writes one. */
static void at_cmp_consts(at_model *t, const rt_st_file *f) {
  char err[EX_ERR_LEN];
  ex_model *fresh = ex_model_new(t->lowered, AT_SEED, err, sizeof err);
  for (int i = 0; fresh && i < ir_ntensors(t->lowered); i++) {
    const ir_tensor *x = ir_tensor_at(t->lowered, i);
    const rt_st_entry *e = x->fixed ? rt_st_find(f, x->name) : NULL;
    const float *w;
    int64_t n;
    if (!x->fixed || !at_check(e && !ex_model_get(fresh, x->name, &w, &n), t->name, "const %s is saved", x->name)) continue;
    at_check((int64_t)(e->end - e->begin) == n * 4 && memcmp(e->data, w, (size_t)n * 4) == 0, t->name,
             "const %s after %d train steps holds its initial values", x->name, AT_STEPS);
  }
  at_check(fresh != NULL, t->name, "executor: %s", err);
  ex_model_free(fresh);
}

/* Every weight of the executor against the .so's, read back from a save. */
static void at_cmp_weights(at_model *t, const rt_model_api *api, rt_model *m, ex_model *ex) {
  char path[1200], err[512];
  snprintf(path, sizeof path, "%s/weights.safetensors", t->dir);
  if (!at_check(api->save(m, path) == 0, t->name, "save: %s", api->error(m))) return;
  rt_st_file f;
  if (!at_check(rt_st_open(path, &f, err, sizeof err) == 0, t->name, "reading the saved weights: %s", err)) return;
  const char *name;
  const float *w;
  int64_t n;
  int count = 0;
  for (int i = 0; ex_model_weight(ex, i, &name, &w, &n) == 0; i++, count++) {
    const rt_st_entry *e = rt_st_find(&f, name);
    if (!at_check(e && (int64_t)(e->end - e->begin) == n * 4, t->name, "weight %s missing or resized in the save", name)) continue;
    float *copy = malloc((size_t)n * 4 + 4);
    memcpy(copy, e->data, (size_t)n * 4);
    int64_t k = at_diff(copy, w, n, K_F32);
    at_check(k < 0, t->name, "weight %s after %d steps differs at %lld (%g vs %g)", name, AT_STEPS, (long long)k,
             k < 0 ? 0.0 : copy[k], k < 0 ? 0.0 : w[k]);
    free(copy);
  }
  at_check(f.n == count, t->name, "the save holds %d tensors, the executor %d weights", f.n, count);
  at_cmp_consts(t, &f);
  rt_st_close(&f);
}

static void at_train(at_model *t, const rt_model_api *api, rt_model *m, ex_model *ex) {
  const void *args[AT_MAX];
  char err[EX_ERR_LEN];
  at_args(t->mem, &t->mem->train, t->batch, args);
  for (int s = 0; s < AT_STEPS; s++) {
    float a = NAN, b = NAN;
    int ra = api->train_step(m, args, &a), rb = ex_train_step(ex, t->gt, args, &b, err, sizeof err);
    at_check(ra == 0 && rb == 0, t->name, "train step %d: %s / %s", s + 1, api->error(m), err);
    at_check(at_close(a, b), t->name, "loss of step %d: %.9g vs executor %.9g", s + 1, a, b);
  }
}

/* Predict, train and weights through the .so's kiln_model against the executor. */
static void at_run_so(at_model *t, const rt_model_api *api) {
  char err[EX_ERR_LEN];
  void *ref[AT_MAX] = {0};
  ex_model *ex = ex_model_new(t->lowered, AT_SEED, err, sizeof err);
  rt_model *m = api->create(api->desc, AT_SEED);
  if (!at_check(ex && m, t->name, "create: %s", ex ? "NULL from the .so" : err)) goto done;
  if (!at_ex_predict(t, ex, ref)) at_cmp_predict(t, api, m, ref, "before training");
  at_free_outs(t->mem, ref);
  if (!t->gt) goto done;
  at_train(t, api, m, ex);
  at_cmp_weights(t, api, m, ex);
  if (!at_ex_predict(t, ex, ref)) at_cmp_predict(t, api, m, ref, "after training");
  at_free_outs(t->mem, ref);
done:
  if (m) api->destroy(m);
  ex_model_free(ex);
}

/* ---- kiln run: the .so and the .kiln with .npy files, against the executor ---- */

static int at_write_inputs(at_model *t, char *flags, size_t n) {
  const rt_program *p = &t->mem->predict;
  size_t len = 0;
  char path[1300], err[512];
  flags[0] = 0;
  for (int k = 0; k < p->ninputs; k++) {
    const rt_tensor_info *ti = &t->mem->tensors[p->inputs[k]];
    snprintf(path, sizeof path, "%s/in_%s.npy", t->dir, ti->name);
    if (rt_npy_write(path, (k_dtype)ti->dtype, &ti->shape, t->batch[ti->ctr], err, sizeof err))
      return printf("%s\n", err), 1;
    len += (size_t)snprintf(flags + len, n - len, " --input '%s=%s'", ti->name, path);
  }
  for (int k = 0; k < t->mem->predict.noutputs; k++) {
    const char *nm = t->mem->tensors[t->mem->predict.outputs[k]].name;
    len += (size_t)snprintf(flags + len, n - len, " --output '%s=%s/out_%s.npy'", nm, t->dir, nm);
  }
  return 0;
}

static void at_cmp_npy_outputs(at_model *t, void **ref, const char *how) {
  char path[1300], err[512];
  for (int k = 0; k < t->mem->predict.noutputs; k++) {
    const rt_tensor_info *ti = &t->mem->tensors[t->mem->predict.outputs[k]];
    snprintf(path, sizeof path, "%s/out_%s.npy", t->dir, ti->name);
    rt_npy a;
    if (!at_check(rt_npy_read(path, &a, err, sizeof err) == 0, t->name, "%s: %s", how, err)) continue;
    int64_t i = at_diff(a.data, ref[k], k_shape_numel(&ti->shape), ti->dtype);
    at_check(a.dtype == (k_dtype)ti->dtype && at_same_shape(&a.shape, &ti->shape) && i < 0, t->name,
             "%s: output %s differs from the executor (at %lld)", how, ti->name, (long long)i);
    rt_npy_free(&a);
    unlink(path);
  }
}

static void at_kiln_run(at_model *t) {
  char io[8192], cmd[12000], err[EX_ERR_LEN];
  void *ref[AT_MAX] = {0};
  ex_model *ex = ex_model_new(t->lowered, AT_SEED, err, sizeof err);
  if (!ex || at_ex_predict(t, ex, ref) || at_write_inputs(t, io, sizeof io)) goto done;
  const char *model = strrchr(t->name, ':') + 1;
  snprintf(cmd, sizeof cmd, "'%s' run '%s/lib%s.so' --seed %u%s", at_kiln, t->dir, model, AT_SEED, io);
  if (at_check(at_sh(cmd) == 0, t->name, "kiln run on the .so failed: %s", cmd)) at_cmp_npy_outputs(t, ref, "kiln run LIB.so");
  snprintf(cmd, sizeof cmd, "'%s' run '%s' --model %s%s --seed %u%s", at_kiln, t->path, model, t->flags, AT_SEED, io);
  if (at_check(at_sh(cmd) == 0, t->name, "kiln run on the .kiln failed: %s", cmd)) at_cmp_npy_outputs(t, ref, "kiln run FILE.kiln");
done:
  at_free_outs(t->mem, ref);
  ex_model_free(ex);
}

/* ---- the C driver against mlp.h ---- */

static void at_raw(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f) fwrite(data, 1, n, f), fclose(f);
}

/* Compiles aot_driver.c against the generated header and the .so, runs it, and compares what
 * it wrote (predict, 3 losses, predict after training) with the executor. */
static void at_driver(at_model *t) {
  char cmd[16384], path[1300], err[EX_ERR_LEN];
  const int ti = t->mem->predict.inputs[0], tl = t->mem->train.inputs[1];
  snprintf(path, sizeof path, "%s/image.bin", t->dir);
  at_raw(path, t->batch[ti], (size_t)k_shape_numel(&t->mem->tensors[ti].shape) * 4);
  snprintf(path, sizeof path, "%s/label.bin", t->dir);
  at_raw(path, t->batch[tl], (size_t)k_shape_numel(&t->mem->tensors[tl].shape) * 4);
  snprintf(cmd, sizeof cmd,
           "cc -std=c99 -Wall -Wextra -Werror" AT_SAN_FLAGS " -I'%s' '%stests/codegen/aot_driver.c' -o '%s/driver' -L'%s' -lmlp -Wl,-rpath,'%s' && "
           "'%s/driver' '%s/image.bin' '%s/label.bin' '%s/driver.bin' %u",
           t->dir, at_root, t->dir, t->dir, t->dir, t->dir, t->dir, t->dir, t->dir, AT_SEED);
  if (!at_check(at_sh(cmd) == 0, t->name, "the C driver failed: %s", cmd)) return;
  int64_t np = k_shape_numel(&t->mem->tensors[t->mem->predict.outputs[0]].shape);
  float *got = calloc((size_t)(2 * np + AT_STEPS), 4), loss;
  snprintf(path, sizeof path, "%s/driver.bin", t->dir);
  FILE *f = fopen(path, "rb");
  size_t nread = f ? fread(got, 4, (size_t)(2 * np + AT_STEPS), f) : 0;
  if (f) fclose(f);
  at_check(nread == (size_t)(2 * np + AT_STEPS), t->name, "driver output is short");
  ex_model *ex = ex_model_new(t->lowered, AT_SEED, err, sizeof err);
  void *ref[AT_MAX] = {0};
  const void *args[AT_MAX];
  at_args(t->mem, &t->mem->train, t->batch, args);
  if (ex && !at_ex_predict(t, ex, ref)) at_check(at_diff(got, ref[0], np, K_F32) < 0, t->name, "driver predict differs");
  at_free_outs(t->mem, ref);
  for (int s = 0; ex && s < AT_STEPS; s++) {
    ex_train_step(ex, t->gt, args, &loss, err, sizeof err);
    at_check(at_close(got[np + s], loss), t->name, "driver loss %d: %g vs %g", s + 1, got[np + s], loss);
  }
  if (ex && !at_ex_predict(t, ex, ref)) at_check(at_diff(got + np + AT_STEPS, ref[0], np, K_F32) < 0, t->name, "driver predict after training differs");
  at_free_outs(t->mem, ref);
  ex_model_free(ex);
  free(got);
}

/* ---- per model ---- */

/* kiln compile into the model's folder, then everything through the .so. */
static int at_jobs;

static void at_model_so(at_model *t, const char *model) {
  char cmd[4096], so[1300], jobs[32] = "";
  if (at_jobs) snprintf(jobs, sizeof jobs, " --jobs %d", at_jobs);
  snprintf(cmd, sizeof cmd, "'%s' compile '%s' --model %s%s%s -o '%s/lib%s.so' 2>/dev/null", at_kiln, t->path, model,
           t->flags, jobs, t->dir, model);
  if (!at_check(at_sh(cmd) == 0, t->name, "kiln compile failed: %s", cmd)) return;
  snprintf(so, sizeof so, "%s/lib%s.so", t->dir, model);
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!at_check(h != NULL, t->name, "dlopen: %s", dlerror())) return;
  const rt_model_api *api = dlsym(h, "kiln_model");
  if (at_check(api != NULL, t->name, "no kiln_model in the .so")) {
    at_cmp_desc(t->name, api, t->mem);
    at_run_so(t, api);
  }
  dlclose(h);
  at_kiln_run(t);
  if (strcmp(model, "mlp") == 0) at_driver(t);
}

static void at_one(const char *path, ts_front *fr, fe_model *fm, const char *flags) {
  char name[512], err[512];
  snprintf(name, sizeof name, "%s:%s", strrchr(path, '/') + 1, fm->name);
  ir_graph *lowered = ts_lower(fr, fm);
  ir_graph *gp = lowered ? ts_compile(lowered, IR_MODE_PREDICT, 0) : NULL;
  ir_graph *gt = lowered && lowered->has_train ? ts_compile(lowered, IR_MODE_TRAIN, 0) : NULL;
  rt_model_desc *mem = gp && (gt || !lowered->has_train) ? cg_desc_build(gp, gt, err, sizeof err) : NULL;
  if (at_check(mem != NULL, name, "lowering, passes or cg_desc_build failed: %s", mem ? "" : err)) {
    at_model t = {.name = name, .path = path, .flags = flags, .lowered = lowered, .gp = gp, .gt = gt, .mem = mem};
    t.batch = ts_batch(lowered, &at_rng);
    snprintf(t.dir, sizeof t.dir, "%s/%s", at_tmp, fm->name);
    mkdir(t.dir, 0755);
    at_model_so(&t, fm->name);
    ts_batch_free(lowered, t.batch);
  }
  cg_desc_free(mem);
  ts_graph_free(gp), ts_graph_free(gt), ir_graph_free(lowered);
}

static void at_file(const char *path, void *ctx) {
  (void)ctx;
  ts_front fr = {.small = true};
  char flags[256];
  bool ok = ts_load(&fr, path, NULL, NULL, 0);
  at_flags(&fr, flags, sizeof flags);
  if (at_check(ok, path, "does not parse"))
    for (fe_model *m = fr.file->models; m; m = m->next) at_one(path, &fr, m, flags);
  ts_front_free(&fr);
}

/* jobs: kiln compile --jobs for the folder's models (0: the default). */
static void at_dir(const char *rel, int jobs) {
  char dir[1200];
  at_jobs = jobs;
  snprintf(dir, sizeof dir, "%s%s", at_root, rel);
  if (ts_each_model(dir, at_file, NULL) < 0) at_check(false, rel, "cannot open the folder");
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: %s KILN [SRCROOT]\n", argv[0]), 2;
  at_kiln = argv[1];
  ts_diag_to(stdout);
  if (argc > 2) snprintf(at_root, sizeof at_root, "%s/", argv[2]);
  else {
    snprintf(at_root, sizeof at_root, "%s", __FILE__);
    char *p = strstr(at_root, "tests/codegen/aot_differential.c");
    if (p) *p = 0;
  }
  snprintf(at_tmp, sizeof at_tmp, "%s/kiln-aot-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(at_tmp)) return perror("mkdtemp"), 1;
  at_dir("examples", 0);
  at_dir("tests/passes/models", 3);   /* their code written by three threads (cg_parts.c) */
  printf("aot: %d passed, %d failed (files in %s)\n", at_passed, at_failed, at_tmp);
  if (at_failed == 0) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", at_tmp);
    at_sh(cmd);
  }
  return at_failed != 0;
}
