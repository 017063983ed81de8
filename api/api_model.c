/* api_model.c — a graph compiled as `kiln compile` and `kiln run` compile it: the passes for
 * predict (and train), the descriptor, the fused loops in LLVM; then either the JIT and a
 * model in this process (kiln_graph_jit), or an object linked into a shared object with its
 * header (kiln_graph_compile). The model's calls are the runtime's (rt_model.h), which
 * serialise calls on one instance. */
#define _GNU_SOURCE   /* dladdr */
#include "api.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct kiln_model {
  cg_build b;
  rt_model *m;
};

/* The passes for the lowered graph, their diagnostics (shape errors found late) the error. */
static int api_build_graphs(const ir_graph *lowered, cg_build *b) {
  api_diags x;
  *b = (cg_build){0};
  if (api_diags_open(&x)) return KILN_ERR;
  int rc = cg_build_graphs(lowered, 0, &x.d, b);
  api_diags_close(&x, rc != 0, "the passes refused the graph");
  if (rc) cg_build_free(b);
  return rc ? KILN_ERR : KILN_OK;
}

static int api_build_module(cg_build *b, int opt_level) {
  char err[2048];
  cg_options co = {.opt_level = opt_level};
  return cg_build_module(b, &co, err, sizeof err) ? api_fail("%s", err) : KILN_OK;
}

void api_stop_init(api_stop *st) {
  atomic_init(&st->flag, 0);
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->cv, NULL);
  st->background = 0;
}

void api_stop_destroy(api_stop *st) {
  pthread_mutex_lock(&st->mu);
  while (st->background > 0) pthread_cond_wait(&st->cv, &st->mu);
  pthread_mutex_unlock(&st->mu);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->mu);
}

bool api_stopped(api_stop *stop) {
  if (!stop || !atomic_exchange(&stop->flag, 0)) return false;
  api_fail("interrupted");
  return true;
}

/* LLVM's optimisation and JIT of b on a thread of their own. The caller owns the job until
 * it is done or abandoned; an abandoned job frees itself when LLVM returns. */
typedef struct {
  cg_build b;
  api_stop *stop;
  int rc;
  bool done, abandoned;
  char err[2048];
} api_llvm_job;

static void *api_llvm_worker(void *arg) {
  api_llvm_job *j = arg;
  int rc = cg_optimize(j->b.llvm, j->err, sizeof j->err) || cg_jit(j->b.llvm, j->b.desc, j->err, sizeof j->err);
  api_stop *st = j->stop;
  pthread_mutex_lock(&st->mu);
  j->rc = rc, j->done = true;
  bool abandoned = j->abandoned;
  if (abandoned) st->background--;
  pthread_cond_broadcast(&st->cv);
  if (abandoned) cg_build_free(&j->b), free(j);   /* under mu: api_stop_destroy waits for it */
  pthread_mutex_unlock(&st->mu);
  return NULL;
}

/* Runs the job, polling the interrupt request every 20 ms; 1 when interrupted (the job is
 * then abandoned to the background), else 0 with j->rc set. */
static int api_llvm_wait(api_llvm_job *j) {
  api_stop *st = j->stop;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;   /* the worker takes no signals: a Ctrl-C is the program's to handle */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int started = pthread_create(&t, &attr, api_llvm_worker, j) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (!started) return api_llvm_worker(j), 0;   /* no thread to be had: run it here */
  pthread_mutex_lock(&st->mu);
  while (!j->done) {
    if (atomic_exchange(&st->flag, 0)) {
      j->abandoned = true, st->background++;
      pthread_mutex_unlock(&st->mu);
      return api_fail("interrupted"), 1;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 20 * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&st->cv, &st->mu, &until);
  }
  pthread_mutex_unlock(&st->mu);
  return 0;
}

int api_build_finish(cg_build *b, int opt_level, api_stop *stop) {
  char err[2048];
  if (api_build_module(b, opt_level)) return cg_build_free(b), KILN_ERR;
  if (!stop) {
    if (cg_build_jit(b, err, sizeof err)) return cg_build_free(b), api_fail("%s", err);
    return KILN_OK;
  }
  if (api_stopped(stop)) return cg_build_free(b), KILN_ERR;
  api_llvm_job *j = calloc(1, sizeof *j);
  if (!j) return cg_build_free(b), api_fail("out of memory");
  j->b = *b, j->stop = stop, *b = (cg_build){0};
  if (api_llvm_wait(j)) return KILN_ERR;   /* j is the background's now */
  int rc = j->rc ? api_fail("%s", j->err) : KILN_OK;
  *b = j->b;
  free(j);
  if (rc) cg_build_free(b);
  return rc;
}

int api_build_jit(const ir_graph *lowered, int opt_level, cg_build *b, api_stop *stop) {
  if (api_stopped(stop) || api_build_graphs(lowered, b)) return KILN_ERR;
  if (api_stopped(stop)) return cg_build_free(b), KILN_ERR;
  return api_build_finish(b, opt_level, stop);
}

int api_graph_jit(kiln_graph *g, uint64_t seed, api_stop *stop, kiln_model **out) {
  if (!out) return api_fail("kiln_graph_jit: out is NULL");
  *out = NULL;
  if (!g) return api_fail("kiln_graph_jit: graph is NULL");
  kiln_model *m = calloc(1, sizeof *m);
  if (!m) return api_fail("out of memory");
  api_graph_lock(g, true);
  const ir_graph *low;
  int rc = api_graph_get(g, &low) || api_build_jit(low, 2, &m->b, stop);
  api_graph_lock(g, false);
  if (!rc && !(m->m = rt_model_create(m->b.desc, seed))) rc = api_fail("out of memory creating the model");
  if (rc) return kiln_model_free(m), KILN_ERR;
  *out = m;
  return api_ok();
}

KILN_API int kiln_graph_jit(kiln_graph *g, uint64_t seed, kiln_model **out) { return api_graph_jit(g, seed, NULL, out); }

KILN_API void kiln_model_free(kiln_model *m) {
  if (!m) return;
  rt_model_destroy(m->m);
  cg_build_free(&m->b);
  free(m);
}

/* The runtime validates the arguments; its message becomes the error. */
static int api_model_rc(kiln_model *m, int rc) { return rc ? api_fail("%s", rt_model_error(m->m)) : api_ok(); }

KILN_API int kiln_model_predict(kiln_model *m, const void *const *inputs, void *const *outputs) {
  if (!m) return api_fail("kiln_model_predict: model is NULL");
  return api_model_rc(m, rt_model_predict(m->m, inputs, outputs));
}

KILN_API int kiln_model_train_step(kiln_model *m, const void *const *inputs, float *loss) {
  if (!m) return api_fail("kiln_model_train_step: model is NULL");
  return api_model_rc(m, rt_model_train_step(m->m, inputs, loss));
}

KILN_API int kiln_model_predict_at(kiln_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs) {
  if (!m) return api_fail("kiln_model_predict_at: model is NULL");
  return api_model_rc(m, rt_model_predict_at(m->m, extents, inputs, outputs));
}

KILN_API int kiln_model_train_step_at(kiln_model *m, const int64_t *extents, const void *const *inputs, float *loss) {
  if (!m) return api_fail("kiln_model_train_step_at: model is NULL");
  return api_model_rc(m, rt_model_train_step_at(m->m, extents, inputs, loss));
}

int api_model_extents(kiln_model *m, int train, const k_shape *shapes, int64_t *extents) {
  const rt_model_desc *d = m->b.desc;
  char err[1024];
  if (rt_extents_from_inputs(d, train ? &d->train : &d->predict, shapes, extents, err, sizeof err)) return api_fail("%s", err);
  return KILN_OK;
}

KILN_API int kiln_model_dims(kiln_model *m, int *ndims) {
  if (!m || !ndims) return api_fail("kiln_model_dims: model or ndims is NULL");
  *ndims = m->b.desc->ndims;
  return api_ok();
}

KILN_API int kiln_model_dim(kiln_model *m, int index, const char **name, int64_t *lo, int64_t *hi) {
  if (!m) return api_fail("kiln_model_dim: model is NULL");
  const rt_model_desc *d = m->b.desc;
  if (index < 0 || index >= d->ndims) return api_fail("kiln_model_dim: dim %d of %d", index, d->ndims);
  if (name) *name = d->dims[index].name;
  if (lo) *lo = d->dims[index].lo;
  if (hi) *hi = d->dims[index].hi;
  return api_ok();
}

KILN_API int kiln_model_set_lr(kiln_model *m, float lr) {
  if (!m) return api_fail("kiln_model_set_lr: model is NULL");
  return api_model_rc(m, rt_model_set_lr(m->m, lr));
}

KILN_API int kiln_model_lr(const kiln_model *m, float *lr) {
  if (!m || !lr) return api_fail("kiln_model_lr: %s is NULL", m ? "lr" : "model");
  *lr = rt_model_lr(m->m);
  return api_ok();
}

KILN_API int kiln_model_save_state(kiln_model *m, const char *path) {
  if (!m) return api_fail("kiln_model_save_state: model is NULL");
  return api_model_rc(m, rt_model_save_state(m->m, path));
}

KILN_API int kiln_model_set_comm(kiln_model *m, const struct kiln_comm *c) {
  if (!m) return api_fail("kiln_model_set_comm: model is NULL");
  return api_model_rc(m, rt_model_set_comm(m->m, c));
}

KILN_API int kiln_model_load_state(kiln_model *m, const char *path) {
  if (!m) return api_fail("kiln_model_load_state: model is NULL");
  return api_model_rc(m, rt_model_load_state(m->m, path));
}

KILN_API int kiln_model_load(kiln_model *m, const char *path) {
  if (!m) return api_fail("kiln_model_load: model is NULL");
  return api_model_rc(m, rt_model_load(m->m, path));
}

KILN_API int kiln_model_save(kiln_model *m, const char *path) {
  if (!m) return api_fail("kiln_model_save: model is NULL");
  return api_model_rc(m, rt_model_save(m->m, path));
}

KILN_API int kiln_model_count(kiln_model *m, int train, int *ninputs, int *noutputs) {
  if (!m || !ninputs || !noutputs) return api_fail("kiln_model_count: model, ninputs or noutputs is NULL");
  const rt_model_desc *d = m->b.desc;
  if (train && !d->has_train) return api_fail("kiln_model_count: model '%s' has no train statement", d->name);
  const rt_program *p = train ? &d->train : &d->predict;
  *ninputs = p->ninputs, *noutputs = train ? 0 : p->noutputs;
  return api_ok();
}

KILN_API int kiln_model_tensor(kiln_model *m, int train, int output, int index, const char **name,
                               kiln_dtype *dtype, int *rank, int64_t *dims) {
  int nin, nout;
  if (kiln_model_count(m, train, &nin, &nout)) return KILN_ERR;
  const rt_model_desc *d = m->b.desc;
  const rt_program *p = train ? &d->train : &d->predict;
  if (index < 0 || index >= (output ? nout : nin))
    return api_fail("kiln_model_tensor: %s %d of %d", output ? "output" : "input", index, output ? nout : nin);
  const rt_tensor_info *t = &d->tensors[(output ? p->outputs : p->inputs)[index]];
  if (name) *name = t->name;
  if (dtype) *dtype = (kiln_dtype)t->dtype;
  if (rank) *rank = t->shape.rank;
  for (int i = 0; dims && i < t->shape.rank; i++) dims[i] = t->shape.d[i];
  return api_ok();
}

/* ---- kiln_graph_compile: the .so and its header, both or neither ---- */

static int api_tmp_beside(const char *dest, char *buf, size_t n) {
  snprintf(buf, n, "%s.tmpXXXXXX", dest);
  int fd = mkstemp(buf);
  if (fd < 0) return api_fail("cannot write '%s': %s", dest, strerror(errno));
  mode_t um = umask(0);
  umask(um);
  (void)fchmod(fd, 0666 & ~um);
  close(fd);
  return KILN_OK;
}

static int api_write_header(const rt_model_desc *d, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return api_fail("cannot write '%s': %s", path, strerror(errno));
  int rc = cg_write_header(d, f);
  if (fclose(f) || rc) return api_fail("cannot write '%s'", path);
  return KILN_OK;
}

/* The folder holding the archives a model's .so is linked with (libkiln_runtime.a and
 * libkiln_kernels.a), for cg_link_shared: `kiln/` beside the libkiln.so this code is in
 * (dladdr), so an installed library finds its own wherever the prefix was put; else NULL
 * (the build tree's, compiled into cg_link.c) while the build tree still has them; else the
 * configured install prefix's (a program linked with an installed libkiln.a). $KILN_LIB_DIR
 * overrides all three (cg_link.c). */
static bool api_has_runtime(const char *dir) {
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/libkiln_runtime.a", dir);
  return access(probe, R_OK) == 0;
}

static const char *api_lib_dir(char *buf, size_t n) {
  Dl_info info;
  if (dladdr((void *)api_lib_dir, &info) && info.dli_fname) {
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash) snprintf(buf, n, "%.*s/kiln", (int)(slash - info.dli_fname), info.dli_fname);
    else snprintf(buf, n, "./kiln");
    if (api_has_runtime(buf)) return buf;
  }
#if defined(KILN_BUILD_ARCHIVE_DIR) && defined(KILN_INSTALL_ARCHIVE_DIR)
  if (!api_has_runtime(KILN_BUILD_ARCHIVE_DIR) && api_has_runtime(KILN_INSTALL_ARCHIVE_DIR))
    return snprintf(buf, n, "%s", KILN_INSTALL_ARCHIVE_DIR), buf;
#endif
  return NULL;
}

static int api_link(cg_build *b, const char *so_tmp) {
  char dir[4096], err[8192];
  return cg_build_link(b, so_tmp, api_lib_dir(dir, sizeof dir), err, sizeof err) ? api_fail("%s", err) : KILN_OK;
}

/* The .so is renamed into place first, keeping a hard link to the file it replaces, so that
 * a failing header rename can put the old .so back: both files change, or neither. */
static int api_commit(const char *so_tmp, const char *so_path, const char *h_tmp, const char *hdr) {
  char keep[4200];
  snprintf(keep, sizeof keep, "%s.oldXXXXXX", so_path);
  int fd = mkstemp(keep);
  bool kept = fd >= 0 && (close(fd), unlink(keep), link(so_path, keep) == 0);
  if (rename(so_tmp, so_path) != 0) {
    int e = errno;
    if (kept) unlink(keep);
    return api_fail("cannot write '%s': %s", so_path, strerror(e));
  }
  if (rename(h_tmp, hdr) != 0) {
    int e = errno;
    if (kept) rename(keep, so_path);
    else unlink(so_path);
    return api_fail("cannot write '%s': %s", hdr, strerror(e));
  }
  if (kept) unlink(keep);
  return KILN_OK;
}

int api_emit_so(cg_build *b, const char *so_path) {
  char hdr[4096], so_tmp[4200], h_tmp[4200], err[2048];
  const char *slash = strrchr(so_path, '/');
  snprintf(hdr, sizeof hdr, "%.*s%s.h", slash ? (int)(slash - so_path + 1) : 0, so_path, b->desc->name);
  if (cg_emit_aot(b->llvm, b->desc, err, sizeof err) || cg_optimize(b->llvm, err, sizeof err)) return api_fail("%s", err);
  if (api_tmp_beside(so_path, so_tmp, sizeof so_tmp)) return KILN_ERR;
  if (api_tmp_beside(hdr, h_tmp, sizeof h_tmp)) return unlink(so_tmp), KILN_ERR;
  int rc = api_link(b, so_tmp) || api_write_header(b->desc, h_tmp) || api_commit(so_tmp, so_path, h_tmp, hdr);
  if (rc) unlink(so_tmp), unlink(h_tmp);
  return rc;
}

KILN_API int kiln_graph_compile(kiln_graph *g, const char *so_path, int opt_level) {
  if (!g || !so_path || !*so_path) return api_fail("kiln_graph_compile: graph or path is NULL");
  if (opt_level < 0 || opt_level > 3) return api_fail("kiln_graph_compile: opt_level %d is not 0..3", opt_level);
  cg_build b = {0};
  api_graph_lock(g, true);
  const ir_graph *low;
  int rc = api_graph_get(g, &low) || api_build_graphs(low, &b) || api_build_module(&b, opt_level);
  api_graph_lock(g, false);
  if (!rc) rc = api_emit_so(&b, so_path);
  cg_build_free(&b);
  return rc ? KILN_ERR : api_ok();
}
