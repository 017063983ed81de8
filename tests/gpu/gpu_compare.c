/* gpu_compare.c — runs one model compiled twice (a CPU .so as the reference, a CUDA .so under
 * test) side by side through their name-free `kiln_model` descriptors and compares them: the
 * same tensors, predict's outputs, each train step's loss, every weight after the steps (saved
 * to safetensors and read back tensor by tensor), predict after training, and the CPU's weights
 * loaded into the second model. With --bad-inputs it also sends NULL pointers and bad weight
 * files through the second model's entry points. Any two .so files of one model work (two CPU
 * builds at different -O levels compare equal), which is how it is tested without a GPU.
 *
 * usage: gpu_compare CPU.so CUDA.so [--steps N] [--tol-predict X] [--tol-train Y] [--atol Z]
 *                    [--tol-step X] [--tol-motion Y]
 *                    [--seed S] [--seed-b S] [--bad-inputs] [--quiet] [--keep DIR]
 *                    [--extents E[,E...]] [--comm]
 * --comm trains both models as rank 0 of two through a hook whose allreduce doubles each value
 * (two ranks holding the same rows): the gradients and the loss go through the hook (the CUDA
 * target's through host buffers) and come back as they were, so every check holds as without
 * it, and the hook must have been called at every step.
 * --extents runs predict and train_step at those extents of a model with bounded dims (one per
 * dim, in declaration order), on the first rows of inputs made at the bounds.
 * --keep DIR leaves in DIR (made if missing) what a third, exact reference needs to judge the two
 * (tests/gpu/f64_step.py): the train inputs (NAME.npy), the weights at create (init.safetensors)
 * and each side's weights after the first step (a1.safetensors, b1.safetensors).
 * Prints one line per check ("ok ..." / "FAIL ...") and "N passed, N failed"; exits 0 when all
 * pass, 1 otherwise, 2 on bad usage, and 77 (CTest's SKIP_RETURN_CODE) with "SKIP: <reason>"
 * when the second model's create returns NULL (no CUDA driver, no GPU: its error(NULL) says).
 *
 * Tolerance. A tensor passes when max|a - b| <= tol * max|a| + atol, a from the CPU .so. Both
 * sides compute in f32, but not in the same order: cuBLAS and cuDNN split and tile their dot
 * products differently from the CPU kernels (and may pick a split-K or Winograd/FFT algorithm),
 * and the GPU's reductions (softmax, batch_norm statistics, bias gradients, the losses) sum in
 * a tree over thread blocks, so every value carries a rounding difference of a few ulps times
 * sqrt(length of the sum), carried through the layers: an estimated 1e-6 relative for the
 * examples' shapes (sums of up to 4608 terms, a few layers deep). 1e-4 (--tol-predict) for one
 * forward pass leaves a margin of ~100 over that, while a wrong kernel (an index off by one, a
 * missing term) is off by 1e-2 or more. Training compounds it: a gradient is a difference of
 * such sums, each step's weights feed the next, momentum and Adam carry the error on and Adam
 * divides by sqrt(v), so 1e-3 (--tol-train) for the losses after the first step and predict
 * after N <= 3 steps. Each line prints the relative difference, so the margins can be read off
 * the logs. The scale is each tensor's own largest value (a small bias is not judged against a
 * large weight matrix). atol (1e-6) is the floor for tensors that are rounding noise on both
 * sides: the bias of a convolution followed by batch_norm has an exact gradient of 0, so after
 * training it holds only each side's own rounding (~1e-9 in normdrop.kiln), which no relative
 * measure can compare. i32 tensors must be equal. A NaN or an infinity fails unless both sides
 * have it in the same place.
 *
 * Weights are judged against how far training moved them (w0: the CPU's weights at create,
 * which the second model must equal exactly: both initialise on the host with the same code).
 * After the first step the difference must be within --tol-step (1e-2) of max|w1 - w0|: that
 * step's update is lr times the gradient (and momentum, Adam's moments of it), so this checks
 * the whole backward pass to 1% of each tensor's update, where a wrong gradient is off by the
 * update itself; the 1% leaves a margin of ten over the rounding of gradients that are sums of
 * up to 65,536 nearly cancelling terms (batch_norm's beta in the ResNet: 0.085% of its update
 * in the host emulation). One thing rounding does is not small: a relu whose input lies within
 * float32 rounding of 0 (a batch_norm output of 1e-7) may take the other side in another
 * summation order, and that one element's gradient path then moves the filter before it by
 * several percent of its update. tests/gpu/f64_step.py (on --keep's files) measured it on the
 * ResNet against a float64 step: PyTorch's own float32 step on the H200 lands 2.6% (seed 42)
 * and 8.2% (seed 8) of s2b.a.c.weight's and s3b.a.c.weight's update away, the CUDA .so at the
 * same values, Kiln's CPU within 0.9% (it happens to round those elements as float64 does).
 * tests/gpu/run.sh therefore gives models with relu behind batch_norm looser limits (its
 * model_tolerance). After N steps, within --tol-motion (0.1) of max|wN - w0|, plus
 * tol-train of max|wN|: each step feeds the last one's differences back through the network
 * (the ResNet at lr 0.1 with momentum grows a 5e-6 relative difference after one step sixtyfold
 * in the next: 2.5% of the motion after three steps in the host emulation), so a tenth of the
 * motion is what two correct implementations that sum in different orders stay within, and a
 * wrong update is off by all of it. Adam divides each element's update by that element's own
 * gradient size (m / (sqrt(v) + eps)), so an element whose gradient is near eps (1e-8) turns a
 * relative difference d of that gradient into up to d/4 of lr: for a model trained with Adam
 * the first step gets --tol-motion too (the transformer: 2.1% in the host emulation), and an
 * absolute floor of 1% of lr a step, below which a parameter's gradient vanishes (the key bias
 * under softmax: exactly 0 in exact arithmetic, so both sides hold only rounding). */
#define _POSIX_C_SOURCE 200809L
#include "kiln_comm.h"
#include "rt_model.h"
#include "runtime.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GC_MAX_IO 64
#define GC_SKIP 77

typedef struct {
  int steps;
  double tol_predict, tol_train, atol, tol_step, tol_motion;
  int adam;                     /* the model trains with Adam (set from the descriptor) */
  float lr;
  uint64_t seed, seed_b;
  int bad_inputs, quiet;
  const char *keep;             /* --keep DIR: the first step's inputs and weights stay there */
  int next;                     /* --extents E[,E...]: predict and train_step at these extents of the
                                   model's bounded dims (predict_at, train_step_at), on the first
                                   rows of the bound's inputs; 0: at the bounds */
  int64_t ext[K_MAX_BDIMS];
  int comm;                     /* --comm */
} gc_opts;

/* --comm's hook: rank 0 of two whose twin holds the same rows, so a sum doubles each value
 * (set_comm's broadcast, the first call, adds the twin's zeros). */
typedef struct { int calls; } gc_twin;
static int gc_twin_start(void *ctx, float *buf, int64_t n, void **req, char *err, size_t errn) {
  (void)err, (void)errn;
  gc_twin *t = ctx;
  if (t->calls++)
    for (int64_t i = 0; i < n; i++) buf[i] *= 2;
  *req = buf;
  return 0;
}
static int gc_twin_wait(void *ctx, void *req, char *err, size_t errn) {
  (void)ctx;
  return req ? 0 : (snprintf(err, errn, "no request"), 1);
}

typedef struct {
  const char *path;
  void *handle;
  const rt_model_api *api;
  rt_model *m;
  const int64_t *ext;           /* --extents, for a model with bounded dims; else NULL */
} gc_side;

static int gc_npass, gc_nfail, gc_quiet;   /* gc_quiet: print failures only */

/* ---- reporting ------------------------------------------------------------------------- */

static void gc_result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void gc_result(int ok, const char *fmt, ...) {
  ok ? gc_npass++ : gc_nfail++;
  if (ok && gc_quiet) return;
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}

static const char *gc_err(const gc_side *s) {
  const char *e = s->api->error(s->m);
  return e ? e : "(error() returned NULL)";
}

/* ---- inputs ---------------------------------------------------------------------------- */

static uint64_t gc_rng = 0x9e3779b97f4a7c15u;
static uint32_t gc_rand(void) {   /* xorshift64*: deterministic data */
  gc_rng ^= gc_rng >> 12, gc_rng ^= gc_rng << 25, gc_rng ^= gc_rng >> 27;
  return (uint32_t)((gc_rng * 0x2545f4914f6cdd1dull) >> 32);
}

static int64_t gc_numel(const rt_tensor_info *t) { return k_shape_numel(&t->shape); }

static void *gc_alloc(const rt_tensor_info *t) {
  int64_t n = gc_numel(t);
  void *buf = calloc((size_t)(n > 0 ? n : 1), 4);
  if (!buf) fprintf(stderr, "gpu_compare: out of memory\n"), exit(1);
  return buf;
}

/* One buffer per input tensor of the CPU descriptor, shared by predict and train_step. */
static void *gc_fill(const rt_model_desc *d, int32_t t) {
  const rt_tensor_info *ti = &d->tensors[t];
  int64_t n = gc_numel(ti);
  void *buf = gc_alloc(ti);
  if (ti->dtype == K_F32) {
    for (int64_t i = 0; i < n; i++) ((float *)buf)[i] = (float)gc_rand() * (2.0f / 4294967296.0f) - 1.0f;
  } else {
    int64_t r = rt_index_range(d, t);
    for (int64_t i = 0; i < n; i++) ((int32_t *)buf)[i] = (int32_t)(gc_rand() % (uint32_t)r);
  }
  return buf;
}

typedef struct {
  void **by_tensor;                 /* per tensor of the CPU descriptor: its input buffer or NULL */
  const void *pin[GC_MAX_IO], *tin[GC_MAX_IO];
  void *out_a[GC_MAX_IO], *out_b[GC_MAX_IO];
} gc_io;

static void gc_io_init(gc_io *io, const rt_model_desc *d) {
  io->by_tensor = calloc((size_t)d->ntensors, sizeof *io->by_tensor);
  if (!io->by_tensor) exit(1);
  for (int pass = 0; pass < 2; pass++) {
    const rt_program *p = pass ? &d->train : &d->predict;
    if (pass && !d->has_train) break;
    for (int i = 0; i < p->ninputs; i++) {
      int32_t t = p->inputs[i];
      if (!io->by_tensor[t]) io->by_tensor[t] = gc_fill(d, t);
      (pass ? io->tin : io->pin)[i] = io->by_tensor[t];
    }
  }
  for (int i = 0; i < d->predict.noutputs; i++) {
    io->out_a[i] = gc_alloc(&d->tensors[d->predict.outputs[i]]);
    io->out_b[i] = gc_alloc(&d->tensors[d->predict.outputs[i]]);
  }
}

static void gc_io_free(gc_io *io, const rt_model_desc *d) {
  for (int i = 0; i < d->ntensors; i++) free(io->by_tensor[i]);
  free(io->by_tensor);
  for (int i = 0; i < d->predict.noutputs; i++) free(io->out_a[i]), free(io->out_b[i]);
}

/* ---- comparing ------------------------------------------------------------------------- */

/* a (the reference) against b: 1 when within tol * max|a| + atol (i32: equal); with w0 (the
 * weights at create), within motion * max|a - w0| on top. */
static int gc_close_moved(const char *what, k_dtype dt, const void *a, const void *b, const void *w0, int64_t n, double tol,
                          double atol, double motion);
static int gc_close(const char *what, k_dtype dt, const void *a, const void *b, int64_t n, double tol, double atol) {
  return gc_close_moved(what, dt, a, b, NULL, n, tol, atol, 0);
}

static int gc_close_moved(const char *what, k_dtype dt, const void *a, const void *b, const void *w0, int64_t n, double tol,
                          double atol, double motion) {
  if (dt == K_I32) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
      if (((const int32_t *)a)[i] != ((const int32_t *)b)[i]) bad++, first = first < 0 ? i : first;
    gc_result(bad == 0, "%s: %lld of %lld i32 values differ%s", what, (long long)bad, (long long)n,
              bad ? "" : " (equal)");
    return bad == 0;
  }
  const float *x = a, *y = b, *z = w0;
  double scale = 0, worst = 0, moved = 0;
  int64_t at = 0, nonfinite = 0, first_nf = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(x[i]) || !isfinite(y[i])) {
      if (!((isnan(x[i]) && isnan(y[i])) || x[i] == y[i]) && nonfinite++ == 0) first_nf = i;
      continue;
    }
    scale = fmax(scale, fabs(x[i]));
    if (z && isfinite(z[i])) moved = fmax(moved, fabs((double)x[i] - (double)z[i]));
    double d = fabs((double)x[i] - (double)y[i]);
    if (d > worst) worst = d, at = i;
  }
  double limit = tol * scale + atol + motion * moved;
  int ok = nonfinite == 0 && worst <= limit;
  if (nonfinite)
    gc_result(0, "%s: %lld non-finite values differ (first at [%lld]: %g vs %g)", what, (long long)nonfinite,
              (long long)first_nf, x[first_nf], y[first_nf]);
  else if (z)
    gc_result(ok, "%s: max|diff| %.3g at [%lld] (%.9g vs %.9g), moved %.3g, diff/moved %.3g, limit %.3g", what, worst,
              (long long)at, n ? x[at] : 0.0, n ? y[at] : 0.0, moved, moved > 0 ? worst / moved : 0.0, limit);
  else
    gc_result(ok, "%s: max|diff| %.3g at [%lld] (%.9g vs %.9g), max|ref| %.3g, rel %.3g, limit %.3g", what, worst,
              (long long)at, n ? x[at] : 0.0, n ? y[at] : 0.0, scale, scale > 0 ? worst / scale : 0.0, limit);
  return ok;
}

static int gc_shape_same(const k_shape *a, const k_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->d[i] != b->d[i]) return 0;
  return 1;
}

static void gc_info_str(const rt_tensor_info *t, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "'%s' %s[", t->name, t->dtype == K_I32 ? "i32" : "f32");
  for (int i = 0; i < t->shape.rank && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)t->shape.d[i]);
  if (o < n) snprintf(buf + o, n - o, "] role %d", t->role);
}

static int gc_info_same(const rt_tensor_info *a, const rt_tensor_info *b) {
  return strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->role == b->role &&
         gc_shape_same(&a->shape, &b->shape);
}

static int gc_find(const rt_model_desc *d, const char *name) {
  for (int i = 0; i < d->ntensors; i++)
    if (strcmp(d->tensors[i].name, name) == 0) return i;
  return -1;
}

static int gc_is_weight(const rt_tensor_info *t) { return t->role == RT_ROLE_PARAM || t->role == RT_ROLE_AUX; }

/* Tensor t of d as a run at extents `ext` sees it (NULL: the descriptor's shapes). */
static rt_tensor_info gc_info_at(const rt_model_desc *d, int t, const int64_t *ext) {
  rt_tensor_info x = d->tensors[t];
  x.shape = rt_tensor_shape_at(d, t, ext);
  return x;
}

/* The entry points' tensors, in order, with the same names, dtypes and shapes (b's at its
 * extents `ext`: a bounded .so against one compiled at those sizes). */
static int gc_program_same(const rt_model_desc *a, const rt_program *pa, const rt_model_desc *b,
                           const rt_program *pb, const int64_t *ext, const char *which, char *why, size_t len) {
  if (pa->ninputs != pb->ninputs || pa->noutputs != pb->noutputs)
    return snprintf(why, len, "%s: %d inputs and %d outputs vs %d and %d", which, pa->ninputs, pa->noutputs,
                    pb->ninputs, pb->noutputs), 0;
  for (int i = 0; i < pa->ninputs + pa->noutputs; i++) {
    int in = i < pa->ninputs, k = in ? i : i - pa->ninputs;
    const rt_tensor_info *ta = &a->tensors[in ? pa->inputs[k] : pa->outputs[k]];
    rt_tensor_info tbx = gc_info_at(b, in ? pb->inputs[k] : pb->outputs[k], ext), *tb = &tbx;
    char sa[160], sb[160];
    gc_info_str(ta, sa, sizeof sa), gc_info_str(tb, sb, sizeof sb);
    if (!gc_info_same(ta, tb))
      return snprintf(why, len, "%s %s %d: %s vs %s", which, in ? "input" : "output", k, sa, sb), 0;
  }
  return 1;
}

/* Same name, entry points and weights (PARAM and AUX: what save writes). Values the plan
 * keeps (VALUE, STATE) may differ between back ends and are not compared. */
static int gc_desc_same(const rt_model_desc *a, const rt_model_desc *b, const int64_t *ext, char *why, size_t len) {
  if (strcmp(a->name ? a->name : "", b->name ? b->name : "") != 0)
    return snprintf(why, len, "model '%s' vs '%s'", a->name, b->name), 0;
  if (a->has_train != b->has_train) return snprintf(why, len, "has_train %d vs %d", a->has_train, b->has_train), 0;
  if (!gc_program_same(a, &a->predict, b, &b->predict, ext, "predict", why, len)) return 0;
  if (a->has_train && !gc_program_same(a, &a->train, b, &b->train, ext, "train", why, len)) return 0;
  for (int pass = 0; pass < 2; pass++) {
    const rt_model_desc *x = pass ? b : a, *y = pass ? a : b;
    for (int i = 0; i < x->ntensors; i++) {
      if (!gc_is_weight(&x->tensors[i])) continue;
      int j = gc_find(y, x->tensors[i].name);
      char sx[160], sy[160] = "";
      rt_tensor_info tx = gc_info_at(x, i, pass ? ext : NULL), ty = j >= 0 ? gc_info_at(y, j, pass ? NULL : ext) : tx;
      gc_info_str(&tx, sx, sizeof sx);
      if (j >= 0) gc_info_str(&ty, sy, sizeof sy);
      if (j < 0 || !gc_info_same(&tx, &ty))
        return snprintf(why, len, "weight %s: %s in the %s .so", sx, j < 0 ? "missing" : sy,
                        pass ? "first" : "second"), 0;
    }
  }
  return 1;
}

/* ---- the runs -------------------------------------------------------------------------- */

static int gc_open(gc_side *s, const char *path) {
  char buf[4096];   /* dlopen searches the library path for a bare name */
  snprintf(buf, sizeof buf, "%s%s", strchr(path, '/') ? "" : "./", path);
  s->path = path;
  s->handle = dlopen(buf, RTLD_NOW | RTLD_LOCAL);
  if (!s->handle) return fprintf(stderr, "gpu_compare: %s\n", dlerror()), 1;
  s->api = dlsym(s->handle, "kiln_model");
  if (!s->api || !s->api->abi || strcmp(s->api->abi, RT_MODEL_ABI) != 0 || !s->api->desc)
    return fprintf(stderr, "gpu_compare: %s: no kiln_model of ABI %s\n", path, RT_MODEL_ABI), 1;
  return 0;
}

/* predict and train_step at --extents for a model with bounded dims (the bounds otherwise). */
static int gc_call_predict(const gc_side *s, const void *const *in, void *const *out) {
  return s->ext ? s->api->predict_at(s->m, s->ext, in, out) : s->api->predict(s->m, in, out);
}
static int gc_call_train(const gc_side *s, const void *const *in, float *loss) {
  return s->ext ? s->api->train_step_at(s->m, s->ext, in, loss) : s->api->train_step(s->m, in, loss);
}
/* Tensor t's element count at the run's extents. */
static int64_t gc_numel_at(const rt_model_desc *d, int t, const gc_opts *o) {
  k_shape sh = rt_tensor_shape_at(d, t, o->next && d->ndims ? o->ext : NULL);
  return k_shape_numel(&sh);
}

/* Both predicts, then each output compared; `when` names the moment in the lines. */
static void gc_predict(gc_side *a, gc_side *b, gc_io *io, const char *when, double tol, const gc_opts *o) {
  const rt_model_desc *d = a->api->desc;
  int ra = gc_call_predict(a, io->pin, io->out_a), rb = gc_call_predict(b, io->pin, io->out_b);
  if (ra || rb) {
    gc_result(0, "predict %s: %s", when, ra ? gc_err(a) : gc_err(b));
    return;
  }
  for (int k = 0; k < d->predict.noutputs; k++) {
    const rt_tensor_info *t = &d->tensors[d->predict.outputs[k]];
    char what[256];
    snprintf(what, sizeof what, "predict %s: %s", when, t->name);
    gc_close(what, (k_dtype)t->dtype, io->out_a[k], io->out_b[k], gc_numel_at(d, d->predict.outputs[k], o), tol, o->atol);
  }
}

static void gc_train(gc_side *a, gc_side *b, gc_io *io, const gc_opts *o, int first, int last) {
  for (int s = first; s <= last; s++) {
    float la = NAN, lb = NAN;
    int ra = gc_call_train(a, io->tin, &la), rb = gc_call_train(b, io->tin, &lb);
    char what[64];
    snprintf(what, sizeof what, "train_step %d: loss", s);
    if (ra || rb) gc_result(0, "%s: %s", what, ra ? gc_err(a) : gc_err(b));
    else gc_close(what, K_F32, &la, &lb, 1, s == 1 ? o->tol_predict : o->tol_train, o->atol);
  }
}

/* Saves both models' weights and compares them tensor by tensor through the runtime's reader,
 * after `steps` train steps: at create exactly, after training against the motion from the
 * weights at create (w0, the file init.safetensors in dir: the reference's at create). */
static void gc_weights(gc_side *a, gc_side *b, const char *dir, int steps, const gc_opts *o) {
  char pa[4096], pb[4096], p0[4096], err[RT_ERR_LEN];
  snprintf(pa, sizeof pa, "%s/a.safetensors", dir), snprintf(pb, sizeof pb, "%s/b.safetensors", dir);
  snprintf(p0, sizeof p0, "%s/init.safetensors", dir);
  double motion = steps == 0 ? 0 : steps == 1 && !o->adam ? o->tol_step : o->tol_motion;
  double tol = steps <= 1 ? 0 : o->tol_train, atol = steps == 0 ? 0 : o->atol;
  if (steps > 0 && o->adam) atol = fmax(atol, 0.01 * o->lr * steps);
  rt_st_file f0 = {0};
  if (steps == 0 && a->api->save(a->m, p0)) {
    gc_result(0, "save the weights at create: %s", gc_err(a));
    return;
  }
  if (steps > 0 && rt_st_open(p0, &f0, err, sizeof err)) {
    gc_result(0, "read the weights at create: %s", err);
    return;
  }
  if (a->api->save(a->m, pa) || b->api->save(b->m, pb)) {
    gc_result(0, "save: %s", a->api->error(a->m)[0] ? gc_err(a) : gc_err(b));
    return;
  }
  rt_st_file fa, fb;
  if (rt_st_open(pa, &fa, err, sizeof err)) {
    gc_result(0, "read the weights of %s: %s", a->path, err);
    if (steps > 0) rt_st_close(&f0);
    return;
  }
  if (rt_st_open(pb, &fb, err, sizeof err)) {
    gc_result(0, "read the weights of %s: %s", b->path, err);
    rt_st_close(&fa);
    if (steps > 0) rt_st_close(&f0);
    return;
  }
  int extra = 0;
  for (int k = 0; k < fb.n; k++) extra += rt_st_find(&fa, fb.entries[k].name) == NULL;
  if (extra || fa.n != fb.n)
    gc_result(0, "weights: the files hold %d and %d tensors (%d only in the second)", fa.n, fb.n, extra);
  for (int k = 0; k < fa.n; k++) {
    const rt_st_entry *ea = &fa.entries[k], *eb = rt_st_find(&fb, ea->name);
    char what[256];
    if (steps == 0) snprintf(what, sizeof what, "weights at create: %s", ea->name);
    else snprintf(what, sizeof what, "weights after %d step%s: %s", steps, steps > 1 ? "s" : "", ea->name);
    if (!eb || eb->dtype != ea->dtype || !gc_shape_same(&ea->shape, &eb->shape)) {
      gc_result(0, "%s: %s in the second file", what, eb ? "another dtype or shape" : "missing");
      continue;
    }
    int64_t n = k_shape_numel(&ea->shape);
    void *xa = malloc((size_t)(n ? n : 1) * 4), *xb = malloc((size_t)(n ? n : 1) * 4);   /* data may be unaligned */
    if (!xa || !xb) exit(1);
    memcpy(xa, ea->data, (size_t)n * 4), memcpy(xb, eb->data, (size_t)n * 4);
    const rt_st_entry *e0 = steps > 0 ? rt_st_find(&f0, ea->name) : NULL;
    void *x0 = NULL;
    if (e0 && e0->dtype == K_F32 && gc_shape_same(&e0->shape, &ea->shape) && (x0 = malloc((size_t)(n ? n : 1) * 4)))
      memcpy(x0, e0->data, (size_t)n * 4);
    gc_close_moved(what, ea->dtype, xa, xb, x0, n, tol, atol, x0 ? motion : 0);
    free(xa), free(xb), free(x0);
  }
  rt_st_close(&fa), rt_st_close(&fb);
  if (steps > 0) rt_st_close(&f0);
}

/* The CPU's weights loaded into the second model: predict agrees as it did before training. */
static void gc_cross_load(gc_side *a, gc_side *b, gc_io *io, const char *dir, const gc_opts *o) {
  char pa[4096];
  snprintf(pa, sizeof pa, "%s/a.safetensors", dir);
  if (b->api->load(b->m, pa)) {
    gc_result(0, "load the first model's weights into the second: %s", gc_err(b));
    return;
  }
  gc_result(1, "load the first model's weights into the second");
  gc_predict(a, b, io, "with the first model's weights", o->tol_predict, o);
}

/* ---- --keep: what a third reference needs ----------------------------------------------- */

static int gc_copy_file(const char *from, const char *to) {
  FILE *f = fopen(from, "rb"), *g = f ? fopen(to, "wb") : NULL;
  char buf[65536];
  size_t n;
  int bad = !f || !g;
  while (!bad && (n = fread(buf, 1, sizeof buf, f)) > 0) bad = fwrite(buf, 1, n, g) != n;
  if (f) bad |= ferror(f), fclose(f);
  if (g) bad |= fclose(g) != 0;
  return bad;
}

/* After the first step: the train inputs, the weights at create (wd/init.safetensors) and both
 * sides' weights, into keep. */
static void gc_keep(gc_side *a, gc_side *b, const gc_io *io, const char *wd, const char *keep) {
  const rt_model_desc *d = a->api->desc;
  char p[4096], q[4096], err[RT_ERR_LEN] = "";
  int bad = mkdir(keep, 0777) != 0 && errno != EEXIST;
  for (int i = 0; !bad && i < d->train.ninputs; i++) {
    const rt_tensor_info *t = &d->tensors[d->train.inputs[i]];
    snprintf(p, sizeof p, "%s/%s.npy", keep, t->name);
    bad = rt_npy_write(p, (k_dtype)t->dtype, &t->shape, io->tin[i], err, sizeof err) != 0;
  }
  snprintf(p, sizeof p, "%s/init.safetensors", wd), snprintf(q, sizeof q, "%s/init.safetensors", keep);
  bad = bad || gc_copy_file(p, q);
  snprintf(p, sizeof p, "%s/a1.safetensors", keep), snprintf(q, sizeof q, "%s/b1.safetensors", keep);
  bad = bad || a->api->save(a->m, p) || b->api->save(b->m, q);
  gc_result(!bad, "kept the first step's inputs and weights in %s%s%s", keep, err[0] ? ": " : "", err);
}

/* ---- bad inputs (the second model) ------------------------------------------------------- */

/* A call that must fail: nonzero, with a message. */
static void gc_must_fail(const gc_side *s, int rc, const char *what) {
  const char *e = s->api->error(s->m);
  int ok = rc != 0 && e && e[0];
  gc_result(ok, "bad input: %s: %s", what,
            rc == 0 ? "accepted" : !e ? "error() returned NULL" : !e[0] ? "no message" : e);
}

static int gc_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  int bad = !f || (len && fwrite(data, len, 1, f) != 1);
  if (f) bad |= fclose(f) != 0;
  return bad;
}

/* Weight files that load must reject: the model's weights at other values (0.25) with the last
 * one's shape wrong, or the last one missing — a load that copies before it checks shows up
 * as a changed predict — then garbage and a truncated save. */
static void gc_bad_files(const gc_side *b, const char *dir, char paths[4][4096]) {
  const rt_model_desc *d = b->api->desc;
  rt_st_tensor *ts = calloc((size_t)d->ntensors + 1, sizeof *ts);
  void **bufs = calloc((size_t)d->ntensors + 1, sizeof *bufs);
  char err[RT_ERR_LEN];
  int n = 0;
  if (!ts || !bufs) exit(1);
  for (int i = 0; i < d->ntensors; i++) {
    const rt_tensor_info *t = &d->tensors[i];
    if (!gc_is_weight(t)) continue;
    ts[n] = (rt_st_tensor){t->name, (k_dtype)t->dtype, t->shape, NULL};
    int64_t m = gc_numel(t) + 8;
    float *v = malloc((size_t)m * 4);
    if (!v) exit(1);
    for (int64_t j = 0; j < m; j++) v[j] = 0.25f;
    if (t->dtype == K_I32) memset(v, 0, (size_t)m * 4);
    ts[n].data = bufs[n] = v;
    n++;
  }
  snprintf(paths[0], 4096, "%s/wrong_shape.safetensors", dir);
  snprintf(paths[1], 4096, "%s/missing.safetensors", dir);
  snprintf(paths[2], 4096, "%s/garbage.safetensors", dir);
  snprintf(paths[3], 4096, "%s/truncated.safetensors", dir);
  if (n > 0) {
    k_shape *last = &ts[n - 1].shape;
    k_shape keep = *last;
    if (last->rank == 0) last->rank = 1, last->d[0] = 1;
    last->d[0] += 1;
    if (rt_st_write(paths[0], ts, n, NULL, 0, err, sizeof err)) fprintf(stderr, "gpu_compare: %s\n", err);
    *last = keep;
    if (rt_st_write(paths[1], ts, n - 1, NULL, 0, err, sizeof err)) fprintf(stderr, "gpu_compare: %s\n", err);
  }
  static const char garbage[] = "\x10\x00\x00\x00\x00\x00\x00\x00{\"x\": nonsense} and more bytes";
  gc_write_file(paths[2], garbage, sizeof garbage - 1);
  char good[4096];
  snprintf(good, sizeof good, "%s/b.safetensors", dir);
  void *img = NULL;
  size_t len = 0;
  if (!rt_file_read_all(good, &img, &len, err, sizeof err)) gc_write_file(paths[3], img, len / 2);
  free(img);
  for (int i = 0; i < n; i++) free(bufs[i]);
  free(bufs), free(ts);
}

static int gc_outputs_equal(const rt_model_desc *d, void *const *x, void *const *y) {
  for (int k = 0; k < d->predict.noutputs; k++)
    if (memcmp(x[k], y[k], (size_t)gc_numel(&d->tensors[d->predict.outputs[k]]) * 4) != 0) return 0;
  return 1;
}

static void gc_bad_inputs(gc_side *b, gc_io *io, const char *dir) {
  const rt_model_desc *d = b->api->desc;
  const rt_model_api *api = b->api;
  const void *pin[GC_MAX_IO], *tin[GC_MAX_IO];
  void *out[GC_MAX_IO], *before[GC_MAX_IO];
  memcpy(pin, io->pin, sizeof pin), memcpy(tin, io->tin, sizeof tin), memcpy(out, io->out_b, sizeof out);
  float loss;
  if (d->predict.ninputs) {
    gc_must_fail(b, api->predict(b->m, NULL, out), "predict(inputs = NULL)");
    pin[d->predict.ninputs - 1] = NULL;
    gc_must_fail(b, api->predict(b->m, pin, out), "predict(inputs[last] = NULL)");
    pin[d->predict.ninputs - 1] = io->pin[d->predict.ninputs - 1];
  }
  gc_must_fail(b, api->predict(b->m, pin, NULL), "predict(outputs = NULL)");
  if (d->predict.noutputs) {
    out[0] = NULL;
    gc_must_fail(b, api->predict(b->m, pin, out), "predict(outputs[0] = NULL)");
    out[0] = io->out_b[0];
  }
  if (d->has_train) {
    gc_must_fail(b, api->train_step(b->m, NULL, &loss), "train_step(inputs = NULL)");
    tin[0] = NULL;
    gc_must_fail(b, api->train_step(b->m, tin, &loss), "train_step(inputs[0] = NULL)");
    tin[0] = io->tin[0];
    gc_must_fail(b, api->train_step(b->m, tin, NULL), "train_step(loss = NULL)");
  }
  gc_must_fail(b, api->save(b->m, NULL), "save(path = NULL)");
  gc_must_fail(b, api->save(b->m, "/nonexistent-dir/kiln/w.safetensors"), "save(into a missing folder)");
  gc_result(api->predict(NULL, pin, out) != 0 && api->train_step(NULL, tin, &loss) != 0 &&
                api->save(NULL, "/dev/null") != 0 && api->load(NULL, "/dev/null") != 0 && api->error(NULL) != NULL,
            "bad input: every entry point with model = NULL returns nonzero");
  api->destroy(NULL);

  /* Failing loads leave the weights, so predict's result, exactly as they were. */
  for (int k = 0; k < d->predict.noutputs; k++) before[k] = gc_alloc(&d->tensors[d->predict.outputs[k]]);
  if (api->predict(b->m, io->pin, before)) gc_result(0, "predict before the bad loads: %s", gc_err(b));
  char files[4][4096];
  gc_bad_files(b, dir, files);
  gc_must_fail(b, api->load(b->m, NULL), "load(path = NULL)");
  gc_must_fail(b, api->load(b->m, "/nonexistent-dir/w.safetensors"), "load(a missing file)");
  static const char *what[4] = {"load(the last weight's shape wrong)", "load(the last weight missing)",
                                "load(garbage)", "load(a truncated file)"};
  for (int i = 0; i < 4; i++) gc_must_fail(b, api->load(b->m, files[i]), what[i]);
  int rc = api->predict(b->m, io->pin, out);
  gc_result(rc == 0 && gc_outputs_equal(d, before, out), "bad input: predict after the failed loads is unchanged%s%s",
            rc ? ": " : "", rc ? gc_err(b) : "");
  const char *e = api->error(b->m);
  gc_result(rc == 0 && e && e[0] == 0, "bad input: error() is \"\" after a call that succeeds (got \"%s\")",
            e ? e : "NULL");
  for (int k = 0; k < d->predict.noutputs; k++) free(before[k]);
  for (int i = 0; i < 4; i++) unlink(files[i]);
}

/* A program's first i32 input (labels, token indices) with one value far out of range: the
 * entry point fails with a message, as the CPU's kernels refuse it, and the model is as it was
 * (predict gives the same bits before and after). */
static void gc_bad_data(gc_side *b, gc_io *io, int train) {
  const rt_model_api *api = b->api;
  const rt_model_desc *d = api->desc;
  const rt_program *p = train ? &d->train : &d->predict;
  int k = 0;
  while (k < p->ninputs && d->tensors[p->inputs[k]].dtype != K_I32) k++;
  if (k == p->ninputs || (train && !d->has_train)) return;
  const rt_tensor_info *t = &d->tensors[p->inputs[k]];
  int64_t n = gc_numel(t);
  const void *in[GC_MAX_IO];
  memcpy(in, train ? io->tin : io->pin, sizeof in);
  int32_t *bad = malloc((size_t)(n ? n : 1) * 4);
  void *before[GC_MAX_IO] = {0}, *out = NULL;
  if (!bad) exit(1);
  memcpy(bad, in[k], (size_t)n * 4);
  bad[n - 1] = 1 << 30;
  in[k] = bad;
  int ok = api->predict(b->m, io->pin, io->out_b) == 0;
  for (int j = 0; ok && j < d->predict.noutputs; j++) {
    size_t bytes = (size_t)gc_numel(&d->tensors[d->predict.outputs[j]]) * 4;
    if (!(before[j] = malloc(bytes ? bytes : 4))) exit(1);
    memcpy(before[j], io->out_b[j], bytes);
  }
  float loss;
  char what[160];
  snprintf(what, sizeof what, "%s with input '%s' out of range", train ? "train_step" : "predict", t->name);
  int rc = train ? api->train_step(b->m, in, &loss) : api->predict(b->m, in, io->out_b);
  gc_must_fail(b, rc, what);
  ok = ok && api->predict(b->m, io->pin, io->out_b) == 0;
  for (int j = 0; ok && j < d->predict.noutputs; j++)
    ok = memcmp(before[j], io->out_b[j], (size_t)gc_numel(&d->tensors[d->predict.outputs[j]]) * 4) == 0;
  gc_result(ok, "bad input: the model is unchanged after %s", what);
  for (int j = 0; j < GC_MAX_IO; j++) free(before[j]);
  free(bad), free(out);
}

/* ---- the device entry points (a CUDA .so's NAME_predict_device / NAME_train_step_device) ---- */

/* The few driver calls the check needs, opened as the runtime opens them (no CUDA header: the
 * types are the driver API's, spelled out). */
typedef struct {
  int (*DeviceGet)(int *, int);
  int (*PrimaryCtxRetain)(void **, int);
  int (*PushCurrent)(void *);
  int (*PopCurrent)(void **);
  int (*MemAlloc)(unsigned long long *, size_t);
  int (*MemFree)(unsigned long long);
  int (*HtoD)(unsigned long long, const void *, size_t);
  int (*DtoH)(void *, unsigned long long, size_t);
} gc_cu;

static int gc_cu_open(gc_cu *cu) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  const char *names[] = {"cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2",
                         "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2"};
  void **slots[] = {(void **)&cu->DeviceGet, (void **)&cu->PrimaryCtxRetain, (void **)&cu->PushCurrent,
                    (void **)&cu->PopCurrent, (void **)&cu->MemAlloc, (void **)&cu->MemFree, (void **)&cu->HtoD,
                    (void **)&cu->DtoH};
  for (int i = 0; h && i < 8; i++) {
    void *p = dlsym(h, names[i]);
    if (!p) return 1;
    memcpy(slots[i], &p, sizeof p);
  }
  int dev;
  void *ctx;
  return !h || cu->DeviceGet(&dev, 0) || cu->PrimaryCtxRetain(&ctx, dev) || cu->PushCurrent(ctx);
}

/* Device copies of a program's inputs, `skew` bytes past the start of their allocations (a
 * caller's pointer need not be aligned: generated kernels fall back from float4 access); the
 * allocations themselves in base[]. 0 on success. */
static int gc_dev_inputs(const gc_cu *cu, const rt_model_desc *d, const rt_program *p, const void *const *host,
                         unsigned long long *dev, unsigned long long *base, size_t skew) {
  for (int k = 0; k < p->ninputs; k++) {
    size_t bytes = (size_t)gc_numel(&d->tensors[p->inputs[k]]) * 4;
    if (cu->MemAlloc(&base[k], bytes + skew + 4)) return 1;
    dev[k] = base[k] + skew;
    if (cu->HtoD(dev[k], host[k], bytes)) return 1;
  }
  return 0;
}

/* predict_device on device copies of the inputs gives predict's bits; train_step_device on a
 * fresh model gives train_step's loss and weights' effect on a fresh twin, bit for bit (the
 * same kernels in the same order); NULLs are refused with a message. */
static void gc_device_entries(gc_side *b, gc_io *io, uint64_t seed) {
  const rt_model_api *api = b->api;
  const rt_model_desc *d = api->desc;
  gc_cu cu;
  if (!api->predict_device) return;
  if (gc_cu_open(&cu)) {
    gc_result(0, "device entries: cannot open the CUDA driver to make device buffers");
    return;
  }
  unsigned long long din[GC_MAX_IO] = {0}, dout[GC_MAX_IO] = {0}, tin[GC_MAX_IO] = {0}, skewed[GC_MAX_IO] = {0};
  unsigned long long bin[GC_MAX_IO] = {0}, bskew[GC_MAX_IO] = {0}, btin[GC_MAX_IO] = {0};
  void *hout[GC_MAX_IO] = {0};
  int bad = gc_dev_inputs(&cu, d, &d->predict, io->pin, din, bin, 0) || gc_dev_inputs(&cu, d, &d->predict, io->pin, skewed, bskew, 4);
  for (int k = 0; !bad && k < d->predict.noutputs; k++) {
    size_t bytes = (size_t)gc_numel(&d->tensors[d->predict.outputs[k]]) * 4;
    bad = cu.MemAlloc(&dout[k], bytes ? bytes : 4) || !(hout[k] = malloc(bytes ? bytes : 4));
  }
  if (bad) {
    gc_result(0, "device entries: cannot allocate device buffers");
    return;
  }
  int rc = api->predict(b->m, io->pin, io->out_b);
  int rd = api->predict_device(b->m, (const void *const *)din, (void *const *)dout, NULL);
  int same = !rc && !rd;
  for (int k = 0; same && k < d->predict.noutputs; k++) {
    size_t bytes = (size_t)gc_numel(&d->tensors[d->predict.outputs[k]]) * 4;
    same = !cu.DtoH(hout[k], dout[k], bytes) && memcmp(hout[k], io->out_b[k], bytes) == 0;
  }
  gc_result(same, "device entries: predict_device on device buffers equals predict bit for bit%s%s", rd ? ": " : "",
            rd ? gc_err(b) : "");
  rd = api->predict_device(b->m, (const void *const *)skewed, (void *const *)dout, NULL);
  same = !rc && !rd;
  for (int k = 0; same && k < d->predict.noutputs; k++) {
    size_t bytes = (size_t)gc_numel(&d->tensors[d->predict.outputs[k]]) * 4;
    same = !cu.DtoH(hout[k], dout[k], bytes) && memcmp(hout[k], io->out_b[k], bytes) == 0;
  }
  gc_result(same, "device entries: predict_device on inputs 4 bytes off alignment equals predict bit for bit%s%s",
            rd ? ": " : "", rd ? gc_err(b) : "");
  gc_must_fail(b, api->predict_device(b->m, NULL, (void *const *)dout, NULL), "predict_device(inputs = NULL)");
  gc_must_fail(b, api->predict_device(b->m, (const void *const *)din, NULL, NULL), "predict_device(outputs = NULL)");
  gc_result(api->predict_device(NULL, (const void *const *)din, (void *const *)dout, NULL) != 0,
            "bad input: predict_device(model = NULL) returns nonzero");
  if (d->has_train && api->train_step_device && !gc_dev_inputs(&cu, d, &d->train, io->tin, tin, btin, 0)) {
    rt_model *m1 = api->create(d, seed), *m2 = api->create(d, seed);
    float l1 = NAN, l2 = NAN;
    int r1 = m1 ? api->train_step(m1, io->tin, &l1) : 1, r2 = m2 ? api->train_step_device(m2, (const void *const *)tin, &l2, NULL) : 1;
    int r3 = r1 || r2 ? 1 : api->predict(m1, io->pin, io->out_a) || api->predict(m2, io->pin, io->out_b);
    int eq = !r3 && memcmp(&l1, &l2, sizeof l1) == 0;
    for (int k = 0; eq && k < d->predict.noutputs; k++)
      eq = memcmp(io->out_a[k], io->out_b[k], (size_t)gc_numel(&d->tensors[d->predict.outputs[k]]) * 4) == 0;
    gc_result(eq, "device entries: train_step_device's loss and the model after it equal train_step's bit for bit");
    if (m2) {
      gc_side s2 = *b;
      s2.m = m2;
      gc_must_fail(&s2, api->train_step_device(m2, NULL, &l2, NULL), "train_step_device(inputs = NULL)");
      gc_must_fail(&s2, api->train_step_device(m2, (const void *const *)tin, NULL, NULL), "train_step_device(loss = NULL)");
    }
    api->destroy(m1), api->destroy(m2);
  }
  for (int k = 0; k < GC_MAX_IO; k++) {
    unsigned long long all[] = {bin[k], bskew[k], btin[k], dout[k]};
    for (int j = 0; j < 4; j++)
      if (all[j]) cu.MemFree(all[j]);
    free(hout[k]);
  }
  void *ctx;
  cu.PopCurrent(&ctx);
}

/* ---- main ------------------------------------------------------------------------------- */

static int gc_usage(void) {
  fprintf(stderr, "usage: gpu_compare CPU.so CUDA.so [--steps N] [--tol-predict X] [--tol-train Y] [--atol Z]\n"
                  "                   [--tol-step X] [--tol-motion Y]\n"
                  "                   [--seed S] [--seed-b S] [--bad-inputs] [--quiet] [--keep DIR] [--extents E[,E...]] [--comm]\n");
  return 2;
}

static int gc_parse(int argc, char **argv, gc_opts *o, const char **lib) {
  *o = (gc_opts){.steps = 3, .tol_predict = 1e-4, .tol_train = 1e-3, .atol = 1e-6, .tol_step = 1e-2, .tol_motion = 0.1,
                 .seed = 42, .seed_b = 42};
  int nlib = 0, seed_b_set = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (strcmp(a, "--bad-inputs") == 0) o->bad_inputs = 1;
    else if (strcmp(a, "--comm") == 0) o->comm = 1;
    else if (strcmp(a, "--quiet") == 0) o->quiet = 1;
    else if (a[0] == '-' && a[1] == '-' && !v) return gc_usage();
    else if (strcmp(a, "--steps") == 0) o->steps = (int)strtol(v, &end, 10), i++;
    else if (strcmp(a, "--tol-predict") == 0) o->tol_predict = strtod(v, &end), i++;
    else if (strcmp(a, "--tol-train") == 0) o->tol_train = strtod(v, &end), i++;
    else if (strcmp(a, "--atol") == 0) o->atol = strtod(v, &end), i++;
    else if (strcmp(a, "--tol-step") == 0) o->tol_step = strtod(v, &end), i++;
    else if (strcmp(a, "--tol-motion") == 0) o->tol_motion = strtod(v, &end), i++;
    else if (strcmp(a, "--keep") == 0) o->keep = v, i++;
    else if (strcmp(a, "--seed") == 0) o->seed = strtoull(v, &end, 10), i++;
    else if (strcmp(a, "--seed-b") == 0) o->seed_b = strtoull(v, &end, 10), i++, seed_b_set = 1;
    else if (strcmp(a, "--extents") == 0) {
      for (end = (char *)v; o->next < K_MAX_BDIMS; end++) {
        o->ext[o->next++] = strtoll(end, &end, 10);
        if (*end != ',') break;
      }
      i++;
    }
    else if (a[0] == '-') return gc_usage();
    else if (nlib < 2) lib[nlib++] = a;
    else return gc_usage();
    if (end && (*end || end == v)) return fprintf(stderr, "gpu_compare: bad value '%s' for %s\n", v, a), 2;
  }
  if (!seed_b_set) o->seed_b = o->seed;
  return nlib == 2 && o->steps >= 0 && o->steps < 1000000 ? 0 : gc_usage();
}

static int gc_rmdir(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s/a.safetensors", dir), unlink(p);
  snprintf(p, sizeof p, "%s/b.safetensors", dir), unlink(p);
  snprintf(p, sizeof p, "%s/init.safetensors", dir), unlink(p);   /* gc_weights' weights at create */
  return rmdir(dir);
}

int main(int argc, char **argv) {
  gc_opts o;
  const char *lib[2];
  int rc = gc_parse(argc, argv, &o, lib);
  if (rc) return rc;
  gc_quiet = o.quiet;
  gc_side a = {0}, b = {0};
  if (gc_open(&a, lib[0]) || gc_open(&b, lib[1])) return 1;
  const rt_model_desc *d = a.api->desc;
  char why[512];
  /* --extents: a bounded .so at those extents against the same model bounded alike, or
   * compiled at those sizes (the first .so; then the two must agree bit for bit, tolerances 0) */
  gc_side *sides[2] = {&a, &b};
  for (int k = 0; k < 2; k++) {
    const rt_model_desc *x = sides[k]->api->desc;
    if (!o.next || !x->ndims) continue;
    if (o.next != x->ndims || !sides[k]->api->predict_at)
      return fprintf(stderr, "gpu_compare: --extents gives %d extents; '%s' has %d bounded dims\n", o.next, x->name, x->ndims), 2;
    sides[k]->ext = o.ext;
  }
  if (a.ext == NULL && b.ext == NULL && o.next) return fprintf(stderr, "gpu_compare: --extents: neither .so has bounded dims\n"), 2;
  if (a.ext && !b.ext) return fprintf(stderr, "gpu_compare: --extents: give the fixed-size .so first\n"), 2;
  int mixed = !a.ext && b.ext;   /* the bound's buffers of b differ from a's: only the runs at the extents compare */
  if (!gc_desc_same(d, b.api->desc, mixed ? b.ext : NULL, why, sizeof why)) {
    gc_result(0, "the two .so files describe different models: %s", why);
    printf("%d passed, %d failed\n", gc_npass, gc_nfail);
    return 1;
  }
  if (d->predict.ninputs > GC_MAX_IO || d->predict.noutputs > GC_MAX_IO ||
      (d->has_train && d->train.ninputs > GC_MAX_IO))
    return fprintf(stderr, "gpu_compare: '%s' has more than %d inputs or outputs\n", d->name, GC_MAX_IO), 1;
  if (!(b.m = b.api->create(b.api->desc, o.seed_b))) {
    const char *e = b.api->error(NULL);
    printf("SKIP: %s\n", e && e[0] ? e : "create returned NULL and error(NULL) says nothing");
    return GC_SKIP;
  }
  if (!(a.m = a.api->create(d, o.seed)))
    return fprintf(stderr, "gpu_compare: %s: create: %s\n", lib[0], a.api->error(NULL)), 1;
  gc_result(1, "model '%s': the two .so files (%s, %s) describe the same tensors", d->name,
            d->target == RT_TARGET_CUDA ? "cuda" : "cpu", b.api->desc->target == RT_TARGET_CUDA ? "cuda" : "cpu");

  const char *tmp = getenv("TMPDIR");
  char dirbuf[4096];
  snprintf(dirbuf, sizeof dirbuf, "%s/kiln-gpu-compare-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  char *wd = mkdtemp(dirbuf);
  if (!wd) return perror("gpu_compare: mkdtemp"), 1;

  gc_twin twin_a = {0}, twin_b = {0};
  if (o.comm && d->has_train) {
    kiln_comm ca = {0, 2, &twin_a, gc_twin_start, gc_twin_wait, 0, NULL, NULL}, cb = ca;
    cb.ctx = &twin_b;
    gc_result(!a.api->set_comm(a.m, &ca) && !b.api->set_comm(b.m, &cb), "set_comm: rank 0 of two on both (%s / %s)",
              a.api->error(a.m), b.api->error(b.m));
  }
  o.adam = d->has_train && k_optim_moments(d->optim), o.lr = d->lr;
  gc_io io;
  gc_io_init(&io, d);
  gc_predict(&a, &b, &io, "at create", o.tol_predict, &o);
  gc_weights(&a, &b, wd, 0, &o);
  if (d->has_train && o.steps > 0) {
    gc_train(&a, &b, &io, &o, 1, 1);
    gc_weights(&a, &b, wd, 1, &o);
    if (o.keep) gc_keep(&a, &b, &io, wd, o.keep);
  }
  if (d->has_train && o.steps > 1) {
    gc_train(&a, &b, &io, &o, 2, o.steps);
    gc_weights(&a, &b, wd, o.steps, &o);
    char when[64];
    snprintf(when, sizeof when, "after %d steps", o.steps);
    gc_predict(&a, &b, &io, when, o.tol_train, &o);
  }
  if (o.comm && d->has_train)   /* the broadcast, then at least one allreduce a step */
    gc_result(twin_a.calls > o.steps && twin_b.calls > o.steps, "--comm: the hook summed %d and %d times over %d steps",
              twin_a.calls, twin_b.calls, o.steps);
  gc_cross_load(&a, &b, &io, wd, &o);
  if (o.bad_inputs && !mixed) gc_bad_inputs(&b, &io, wd), gc_bad_data(&b, &io, 0), gc_bad_data(&b, &io, 1);
  if (!mixed) gc_device_entries(&b, &io, o.seed_b);

  a.api->destroy(a.m), b.api->destroy(b.m);
  gc_io_free(&io, d);
  gc_rmdir(wd);
  printf("%s: %d passed, %d failed\n", d->name, gc_npass, gc_nfail);
  return gc_nfail ? 1 : 0;
}
