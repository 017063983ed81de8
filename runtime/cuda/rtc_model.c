/* rtc_model.c — the model ABI on the GPU (a .so compiled with --target cuda exports these as
 * its NAME_* functions and kiln_model). The host side is an rt_model made without CPU run
 * state (rt_model_new): it initialises the weights exactly as the CPU does, and keeps load,
 * save and the lr. On create everything persistent is copied into one device block laid out
 * like the host's; the planned arena is one device allocation, and each program input gets a
 * device buffer. The device copy is the live one: the host copy is refreshed before save and
 * lookups, and a load is uploaded whole.
 *
 * A run binds every tensor to its device pointer (arena offset, input buffer or store), queues
 * each step on the model's stream — a generated kernel for FUSED steps, the GPU op table for
 * the others, the optimizer kernels for updates — and synchronises once at the end, where a
 * failed launch or an error the GPU reports surfaces. Steps run in plan order on one stream,
 * so the plan's reuse of arena memory holds as it does on one CPU thread. */
#include "rtc_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k_profile.h" /* K_PROFILE_NOTE: what ran a step, for KILN_PROFILE */
#include "kernels.h"   /* K_OPI_* */
#include "rtc_blas.h"
#include "rtc_ops_lib.h"

static __thread char rtc_create_err[RT_MODEL_ERR_LEN];

int rtc_fail(rtc_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rt_verrf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return 1;
}

/* A driver call that failed: its name and the driver's words. */
int rtc_cu_check(rtc_ctx *c, CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return 0;
  return rtc_fail(c, "%s: %s", what, rtc_lib_strerror(c->cu, r));
}

void *rtc_stream(rtc_ctx *c) { return c->stream; }
void *rtc_cublas(rtc_ctx *c) { return c->blas; }
void *rtc_cudnn(rtc_ctx *c) { return c->dnn; }

int rtc_reserve_scratch(rtc_ctx *c, size_t bytes) {
  if (bytes > c->scratch_want) c->scratch_want = bytes;
  return 0;
}

void *rtc_scratch(rtc_ctx *c) { return (void *)(uintptr_t)c->scratch; }

static int64_t rtc_align(int64_t n) { return (n + 255) & ~(int64_t)255; }

/* Tensor t's element count at the run's extents (the host instance keeps its shapes there:
 * rt_model_set_extents; without bounded dims the descriptor's). */
static int64_t rtc_numel(const rtc_ctx *c, int t) { return k_shape_numel(&c->host->tshape[t]); }

/* ---- device memory ---- */

static int rtc_alloc(rtc_ctx *c, CUdeviceptr *p, int64_t bytes, const char *what) {
  *p = 0;
  if (bytes <= 0) return 0;
  CUresult r = c->cu->MemAlloc(p, (size_t)bytes);
  if (r != CUDA_SUCCESS) return *p = 0, rtc_fail(c, "cannot allocate %lld bytes of GPU memory for %s: %s", (long long)bytes, what, rtc_lib_strerror(c->cu, r));
  return 0;
}

/* Persistent tensor t in the device store, at its host offset. */
static CUdeviceptr rtc_store_ptr(const rtc_ctx *c, int t) {
  return c->dstore + (CUdeviceptr)((char *)c->host->tptr[t] - (char *)c->host->store);
}

static int rtc_upload_store(rtc_ctx *c) {
  size_t bytes = (size_t)c->host->store_bytes;
  if (!bytes) return 0;
  if (rtc_cu_check(c, c->cu->MemcpyHtoDAsync(c->dstore, c->host->store, bytes, c->stream), "copying the weights to the GPU"))
    return 1;
  return rtc_cu_check(c, c->cu->StreamSynchronize(c->stream), "copying the weights to the GPU");
}

/* The host copy made current (save, lookups, and before a load, which replaces only the weights). */
static int rtc_download_store(rtc_ctx *c) {
  if (!c->host_stale || !c->host->store_bytes) return 0;
  if (rtc_cu_check(c, c->cu->MemcpyDtoHAsync(c->host->store, c->dstore, (size_t)c->host->store_bytes, c->stream), "copying the weights from the GPU") ||
      rtc_cu_check(c, c->cu->StreamSynchronize(c->stream), "copying the weights from the GPU"))
    return 1;
  c->host_stale = 0;
  return 0;
}

/* Every program input gets a buffer of its own: the CPU binds the caller's pointer there. */
static int rtc_input_buffers(rtc_ctx *c) {
  int64_t bytes = 0;
  c->inoff = calloc((size_t)c->d->ntensors + 1, sizeof *c->inoff);
  if (!c->inoff) return rtc_fail(c, "out of memory");
  for (int t = 0; t < c->d->ntensors; t++) c->inoff[t] = -1;
  const rt_program *ps[2] = {&c->d->predict, c->d->has_train ? &c->d->train : NULL};
  for (int k = 0; k < 2; k++)
    for (int j = 0; ps[k] && j < ps[k]->ninputs; j++) {
      int t = ps[k]->inputs[j];
      if (c->inoff[t] >= 0) continue;
      c->inoff[t] = bytes;
      bytes += rtc_align(rt_tensor_numel(&c->d->tensors[t]) * 4);
    }
  return rtc_alloc(c, &c->dinputs, bytes, "the inputs");
}

static int rtc_memory(rtc_ctx *c) {
  const rt_model_desc *d = c->d;
  int64_t arena = d->predict.arena_bytes;
  if (d->has_train && d->train.arena_bytes > arena) arena = d->train.arena_bytes;
  c->dptr = calloc((size_t)d->ntensors + 1, sizeof *c->dptr);
  if (!c->dptr) return rtc_fail(c, "out of memory");
  return rtc_alloc(c, &c->dstore, c->host->store_bytes, "the weights") || rtc_alloc(c, &c->darena, arena, "the arena") ||
         rtc_input_buffers(c) || rtc_alloc(c, &c->daux, c->host->aux_elems * 4, "the aux snapshot") ||
         rtc_alloc(c, &c->dext, d->ndims ? (int64_t)sizeof c->host->extent : 0, "the extents") || rtc_upload_store(c);
}

/* ---- per-program run state ---- */

/* The generated kernel's thread count: its largest output (grid-stride beyond it). */
static int64_t rtc_fused_threads(const rtc_ctx *c, const rt_step *s) {
  int64_t n = 1;
  for (int j = 0; j < s->nout; j++)
    if (s->out[j] >= 0 && rtc_numel(c, s->out[j]) > n) n = rtc_numel(c, s->out[j]);
  return n;
}

/* Every step's call shapes (and a FUSED step's thread count) at the run's extents: the
 * descriptor's, with the program's patches applied (rt_model_dims.c does the same for the
 * CPU's steps) and each out slot without a shape array of its own taking its tensor's. */
static void rtc_prog_shapes(rtc_ctx *c, rtc_prog *r) {
  const rt_program *p = r->p;
  for (int i = 0; i < p->nsteps; i++) {
    const rt_step *s = &p->steps[i];
    k_shape *sh = r->shapes + r->at[i];
    for (int j = 0; j < s->nin; j++) sh[j] = s->in_shape ? s->in_shape[j] : (k_shape){0, {0}};
    for (int j = 0; s->out_shape && j < s->nout; j++) sh[s->nin + j] = s->out_shape[j];
  }
  const int64_t *e = c->host->extent;
  for (int k = 0; k < p->npatches; k++) {
    const rt_dimpatch *x = &p->patches[k];
    k_shape *sh = r->shapes + r->at[x->index];
    if (x->kind == RT_DV_IN_SHAPE) sh[x->slot].d[x->axis] = k_dimval_eval(x->v, e);
    else if (x->kind == RT_DV_OUT_SHAPE) sh[p->steps[x->index].nin + x->slot].d[x->axis] = k_dimval_eval(x->v, e);
    else rt_dimpatch_param(x, e, r->params[x->index]);
  }
  for (int i = 0; i < p->nsteps; i++) {
    const rt_step *s = &p->steps[i];
    k_shape *sh = r->shapes + r->at[i];
    for (int j = 0; !s->out_shape && j < s->nout; j++)
      sh[s->nin + j] = rt_out_shape(s, s->in_shape ? sh : NULL, NULL, s->out[j] >= 0 ? &c->host->tshape[s->out[j]] : NULL, j);
    if (s->kind == RT_STEP_FUSED) r->threads[i] = rtc_fused_threads(c, s);
  }
}

/* Bounded dims: a copy of each param a patch rewrites (rtc_prog_shapes writes it). */
static int rtc_prog_params(rtc_ctx *c, rtc_prog *r) {
  const rt_program *p = r->p;
  if (!p->npatches) return 0;
  if (!(r->params = calloc((size_t)p->nsteps + 1, sizeof *r->params)) || rt_dims_param_copies(p, r->params))
    return rtc_fail(c, "out of memory");
  return 0;
}

/* The data-error words of a program whose steps may set them, zeroed. */
static int rtc_prog_errwords(rtc_ctx *c, rtc_prog *r) {
  for (int i = 0; i < r->p->nsteps; i++) r->checks |= r->row[i] && r->row[i]->checks_data;
  if (!r->checks) return 0;
  size_t bytes = (size_t)r->p->nsteps * 4;
  if (!(r->herr = calloc((size_t)r->p->nsteps + 1, 4))) return rtc_fail(c, "out of memory");
  return rtc_alloc(c, &r->derr, (int64_t)bytes, "the data-error words") ||
         rtc_cu_check(c, c->cu->MemsetD8Async(r->derr, 0, bytes, c->stream), "zeroing the data-error words");
}

/* A step whose values change per call reads them from its kc_live entry (rtc_live_upload): the
 * updates, and dropout in the forward pass. */
static bool rtc_step_is_live(const rt_step *s) {
  return s->kind == RT_STEP_UPDATE || (s->kind == RT_STEP_FORWARD && s->op == K_OPI_dropout);
}

/* The live entries on both sides, and the skip word the updates read, zeroed. */
static int rtc_prog_live(rtc_ctx *c, rtc_prog *r) {
  const rt_program *p = r->p;
  if (!(r->live_at = calloc((size_t)p->nsteps + 1, sizeof *r->live_at))) return rtc_fail(c, "out of memory");
  for (int i = 0; i < p->nsteps; i++) r->live_at[i] = rtc_step_is_live(&p->steps[i]) ? r->nlive++ : -1;
  if (!(r->hlive = calloc((size_t)r->nlive + 1, sizeof *r->hlive))) return rtc_fail(c, "out of memory");
  return rtc_alloc(c, &r->dlive, (int64_t)((size_t)r->nlive * sizeof *r->hlive), "the per-call values") ||
         rtc_alloc(c, &r->dskip, 4, "the skip word") || rtc_cu_check(c, c->cu->MemsetD8Async(r->dskip, 0, 4, c->stream), "zeroing the skip word");
}

static int rtc_prog_init(rtc_ctx *c, rtc_prog *r, const rt_program *p, int train) {
  r->p = p;
  r->split = rt_first_update(p);
  size_t n = (size_t)p->nsteps + 1, slots = 1;
  for (int i = 0; i < p->nsteps; i++) slots += (size_t)(p->steps[i].nin + p->steps[i].nout);
  r->fn = calloc(n, sizeof *r->fn), r->state = calloc(n, sizeof *r->state), r->threads = calloc(n, sizeof *r->threads);
  r->at = calloc(n, sizeof *r->at), r->row = calloc(n, sizeof *r->row);
  r->shapes = calloc(slots, sizeof *r->shapes), r->dtypes = calloc(slots, sizeof *r->dtypes);
  r->ptrs = calloc(slots, sizeof *r->ptrs), r->req = calloc(slots, sizeof *r->req);
  if (train && p->noutputs == 1) r->hloss = calloc((size_t)rt_tensor_numel(&c->d->tensors[p->outputs[0]]) + 1, sizeof *r->hloss);
  bool clip = train && c->d->clip_norm > 0;
  if (clip) r->clip_g = calloc(n, sizeof *r->clip_g), r->clip_n = calloc(n, sizeof *r->clip_n);
  if (!r->fn || !r->state || !r->threads || !r->at || !r->row || !r->shapes || !r->dtypes || !r->ptrs || !r->req || (train && !r->hloss) ||
      (clip && (!r->clip_g || !r->clip_n)))
    return rtc_fail(c, "out of memory");
  if (clip) rtc_reserve_scratch(c, rtc_clip_work_bytes(p->nsteps - r->split));
  for (int i = 0; i < p->nsteps; i++) {
    const rt_step *s = &p->steps[i];
    size_t at = r->at[i];
    r->at[i + 1] = at + (size_t)(s->nin + s->nout);
    for (int j = 0; j < s->nin; j++) r->dtypes[at + j] = s->in[j] >= 0 ? (k_dtype)c->d->tensors[s->in[j]].dtype : K_F32;
    if (s->kind == RT_STEP_FUSED) {
      char name[64];
      rt_fused_name(name, sizeof name, train, i);
      if (rtc_function(c, c->mod, name, &r->fn[i])) return 1;
    } else if (s->kind == RT_STEP_FORWARD || s->kind == RT_STEP_BACKWARD) {
      if (!(r->row[i] = rtc_op_row_of(s->op))) return rtc_fail(c, "%s: op %d has no GPU implementation in this runtime", s->name, s->op);
    } else if (s->kind != RT_STEP_FORWARD && s->kind != RT_STEP_BACKWARD && s->kind != RT_STEP_UPDATE) {
      return rtc_fail(c, "%s: unknown step kind %d", s->name, s->kind);
    }
  }
  if (rtc_prog_params(c, r)) return 1;
  rtc_prog_shapes(c, r);   /* at the bounds: the host instance starts there */
  return rtc_prog_errwords(c, r) || rtc_prog_live(c, r);
}

/* The call's stream waited for (the model's, unless a _device call replays on its own). */
static int rtc_sync(rtc_ctx *c, const char *what) { return rtc_cu_check(c, c->cu->StreamSynchronize(c->run), what); }

/* After a run's steps: the first step that met data its CPU kernel refuses fails the run with
 * that step's name (the words are zeroed again for the next run). Synchronises the stream. */
static int rtc_data_errors(rtc_ctx *c, rtc_prog *r, const char *what) {
  if (!r->checks) return rtc_sync(c, what);
  size_t bytes = (size_t)r->p->nsteps * 4;
  if (rtc_cu_check(c, c->cu->MemcpyDtoHAsync(r->herr, r->derr, bytes, c->run), "reading the data-error words") ||
      rtc_sync(c, what))
    return 1;
  for (int i = 0; i < r->p->nsteps; i++)
    if (r->herr[i]) {
      rtc_fail(c, "%s: %s", r->p->steps[i].name, rtc_data_error_text(r->herr[i]));
      c->cu->MemsetD8Async(r->derr, 0, bytes, c->run);
      return 1;
    }
  return 0;
}

static void rtc_prog_free(rtc_ctx *c, rtc_prog *r) {
  for (int i = 0; r->state && r->row && i < r->p->nsteps; i++)
    if (r->state[i] && r->row[i] && r->row[i]->release) r->row[i]->release(c, r->state[i]);
  rtc_graph_drop(c, r);
  CUdeviceptr bufs[] = {r->derr, r->dlive, r->dskip};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    if (bufs[i]) c->cu->MemFree(bufs[i]);
  free(r->live_at), free(r->hlive);
  free(r->fn), free(r->state), free(r->threads), free(r->at), free(r->row), free(r->shapes), free(r->dtypes), free(r->ptrs), free(r->req);
  free(r->herr), free(r->hloss), free(r->clip_g), free(r->clip_n);
  for (int i = 0; r->params && i < r->p->nsteps; i++) free(r->params[i]);
  free(r->params);
  memset(r, 0, sizeof *r);
}

/* ---- binding and one step ---- */

static void rtc_bind(rtc_ctx *c, const rt_program *p) {
  for (int t = 0; t < c->d->ntensors; t++) {
    CUdeviceptr a = 0;
    if (p->offset[t] >= 0) a = c->darena + (CUdeviceptr)p->offset[t];
    else if (c->inoff[t] >= 0) a = c->dinputs + (CUdeviceptr)c->inoff[t];
    else if (c->host->tptr[t]) a = rtc_store_ptr(c, t);
    c->dptr[t] = (void *)(uintptr_t)a;
  }
}

/* Step i's call: pointers and OpReqTypes bound into the program's pools at its slots. */
static rtc_call rtc_step_call(rtc_ctx *c, rtc_prog *r, int i) {
  const rt_step *s = &r->p->steps[i];
  size_t at = r->at[i];
  void **in = r->ptrs + at, **out = r->ptrs + at + s->nin;
  k_req *req = r->req + at;
  for (int j = 0; j < s->nin; j++) in[j] = s->in[j] >= 0 ? c->dptr[s->in[j]] : NULL;
  for (int j = 0; j < s->nout; j++) {
    out[j] = s->out[j] >= 0 ? c->dptr[s->out[j]] : NULL;
    req[j] = out[j] ? s->req[j] : kNullOp;
  }
  int32_t *err = r->checks ? (int32_t *)(uintptr_t)(r->derr + (CUdeviceptr)i * 4) : NULL;
  const void *param = r->params && r->params[i] ? r->params[i] : s->param;
  void *live = r->live_at[i] >= 0 ? (void *)(uintptr_t)(r->dlive + (CUdeviceptr)((size_t)r->live_at[i] * sizeof(kc_live))) : NULL;
  return (rtc_call){s, param, s->nin, s->nout, in, out, r->shapes + at, r->shapes + at + s->nin, r->dtypes + at, req,
                    r->p->is_train, &r->state[i], err, live};
}

/* An update's optimizer parameters (its group's, else the model's); NULL when malformed. */
static const void *rtc_update_param(const rtc_ctx *c, const rt_step *s) {
  if (s->op < 0 || s->op >= K_OPT_COUNT || (s->param && !rt_update_param_ok(s))) return NULL;
  if (s->param) return s->param;
  return s->op == K_OPT_SGD ? (const void *)&c->d->sgd : (const void *)&c->d->adam;
}

static int rtc_run_update(rtc_ctx *c, const rtc_prog *r, const rtc_call *k) {
  const rt_step *s = k->s;
  int need = rt_update_nin(c->d, s);
  if (s->op < 0 || s->op >= K_OPT_COUNT) return rtc_fail(c, "unknown optimizer %d", s->op);
  for (int j = 0; j < need; j++)
    if (j >= s->nin || !k->in[j]) return rtc_fail(c, "update without its parameter, gradient or state");
  int64_t n = rtc_numel(c, s->in[0]);   /* a weight that follows a dim: its rows at this run's extents */
  void *const *in = k->in;
  const void *param = rtc_update_param(c, s);
  const int32_t *skip = (const int32_t *)(uintptr_t)r->dskip;
  if (!param) return rtc_fail(c, "malformed optimizer parameters");
  if (s->op == K_OPT_SGD) return rtc_sgd_update(c, in[0], in[1], s->nin > 2 ? in[2] : NULL, n, k->live, skip, param);
  return rtc_adam_update(c, in[0], in[1], in[2], in[3], n, k->live, skip, param, s->op == K_OPT_ADAMW);
}

/* The call's values of every live step into the host entries (after train_step's step++ and
 * with this step's lr), then to the device on stream s, ahead of the run that reads them. */
static int rtc_live_upload(rtc_ctx *c, rtc_prog *r, CUstream s) {
  const rt_model *h = c->host;
  for (int i = 0; i < r->p->nsteps; i++) {
    if (r->live_at[i] < 0) continue;
    const rt_step *st = &r->p->steps[i];
    kc_live *l = &r->hlive[r->live_at[i]];
    memset(l, 0, sizeof *l);
    const void *param = st->kind == RT_STEP_UPDATE ? rtc_update_param(c, st) : NULL;
    if (st->kind != RT_STEP_UPDATE) l->seed = h->seed + h->rng_salt, l->ctr = RT_CTR_OP(h->step, st->name_hash);
    else if (param && st->op == K_OPT_SGD) rtc_sgd_live(l, h->lr);
    else if (param) rtc_adam_live(l, h->lr, param, h->step, st->op == K_OPT_ADAMW);
  }
  if (!r->nlive) return 0;
  return rtc_cu_check(c, c->cu->MemcpyHtoDAsync(r->dlive, r->hlive, (size_t)r->nlive * sizeof *r->hlive, s), "copying the per-call values");
}

static int rtc_run_step_now(rtc_ctx *c, rtc_prog *r, int i);

/* ---- profiles: every step between two events, with a synchronisation after each (the step's
 * own GPU time, the launch included; the run as a whole is slower), no graphs. KILN_PROFILE:
 * the CPU's trace and table (runtime/rt_profile.c), each step's time taken from its events,
 * written at destroy; KILN_CUDA_PROFILE=1: a table of its own, printed at destroy ---- */

static int rtc_profile_init(rtc_ctx *c) {
  const char *e = getenv("KILN_CUDA_PROFILE");
  int table = e && *e && strcmp(e, "0") != 0;
  if (table && strcmp(e, "graph") == 0)   /* rtc_graph.c's: the graphs stay on */
    return c->graph_prof = 1, rtc_cu_check(c, c->cu->EventCreate(&c->ev[0], CU_EVENT_DEFAULT), "cuEventCreate") ||
                                 rtc_cu_check(c, c->cu->EventCreate(&c->ev[1], CU_EVENT_DEFAULT), "cuEventCreate");
  c->prof = rt_profile_from_env(c->d);
  if (!table && !c->prof) return 0;
  c->profile = 1;
  for (int k = 0; table && k < 2; k++) {
    int n = c->prog[k].p ? c->prog[k].p->nsteps : 0;
    c->prof_ms[k] = calloc((size_t)n + 1, sizeof(double)), c->prof_n[k] = calloc((size_t)n + 1, sizeof(int64_t));
    if (!c->prof_ms[k] || !c->prof_n[k]) return rtc_fail(c, "out of memory");
  }
  return rtc_cu_check(c, c->cu->EventCreate(&c->ev[0], CU_EVENT_DEFAULT), "cuEventCreate") ||
         rtc_cu_check(c, c->cu->EventCreate(&c->ev[1], CU_EVENT_DEFAULT), "cuEventCreate");
}

/* What ran a step, for the profile's "path": the GPU has no kernel notes of its own. */
static const char *rtc_step_path(const rtc_prog *r, int i) {
  const rt_step *s = &r->p->steps[i];
  if (s->kind == RT_STEP_FUSED) return "generated kernel";
  int lib = s->kind == RT_STEP_UPDATE || !r->row[i] ? RTC_LIB_NONE : r->row[i]->lib;
  return lib == RTC_LIB_BLAS ? "cuBLAS" : lib == RTC_LIB_DNN ? "cuDNN" : "library kernels";
}

static int rtc_run_step_timed(rtc_ctx *c, rtc_prog *r, int i) {
  int k = r == &c->prog[1];
  float ms = 0;
  int64_t t0 = c->prof ? rt_profile_now() : 0;
  if (rtc_cu_check(c, c->cu->EventRecord(c->ev[0], c->stream), "cuEventRecord") || rtc_run_step_now(c, r, i) ||
      rtc_cu_check(c, c->cu->EventRecord(c->ev[1], c->stream), "cuEventRecord") ||
      rtc_cu_check(c, c->cu->EventSynchronize(c->ev[1]), "the step") ||
      rtc_cu_check(c, c->cu->EventElapsedTime(&ms, c->ev[0], c->ev[1]), "cuEventElapsedTime"))
    return 1;
  if (c->prof_ms[k]) c->prof_ms[k][i] += ms, c->prof_n[k][i]++;
  if (c->prof) {
    K_PROFILE_NOTE("%s", rtc_step_path(r, i));
    rt_profile_step(c->prof, k, i, t0, t0 + (int64_t)((double)ms * 1e6));
    c->call_prog = k;
  }
  return 0;
}

static const char *rtc_step_kind(const rt_step *s) {
  static const char *const kinds[] = {"forward", "backward", "update", "kernel"};
  return s->kind >= 0 && s->kind <= RT_STEP_FUSED ? kinds[s->kind] : "?";
}

static void rtc_profile_print(rtc_ctx *c) {
  rt_profile_finish(c->host, c->prof);
  for (int k = 0; k < 2 && c->prof_ms[k]; k++) {
    const rt_program *p = c->prog[k].p;
    double total = 0;
    for (int i = 0; p && i < p->nsteps; i++) total += c->prof_ms[k][i];
    if (!p || total <= 0) continue;
    fprintf(stderr, "kiln cuda profile: %s %s on %s, %.3f ms of GPU time in all\n", c->d->name, k ? "train_step" : "predict",
            c->device_name, total);
    fprintf(stderr, "  %6s %10s %8s %6s  %-8s %s\n", "step", "total ms", "mean us", "share", "kind", "name");
    for (int i = 0; i < p->nsteps; i++)
      if (c->prof_n[k][i])
        fprintf(stderr, "  %6d %10.3f %8.1f %5.1f%%  %-8s %s\n", i, c->prof_ms[k][i], 1e3 * c->prof_ms[k][i] / (double)c->prof_n[k][i],
                100 * c->prof_ms[k][i] / total, rtc_step_kind(&p->steps[i]), p->steps[i].name);
  }
}

static int rtc_run_step(rtc_ctx *c, rtc_prog *r, int i) {
  return c->profile ? rtc_run_step_timed(c, r, i) : rtc_run_step_now(c, r, i);
}

/* A generated kernel: the step's pointers, then with bounded dims the extents' device copy. */
static int rtc_launch_fused(rtc_ctx *c, rtc_prog *r, int i, const rtc_call *k) {
  int n = k->nin + k->nout;
  void *args[66];
  if (n > 64) return rtc_fail(c, "a kernel with %d arguments", n);
  memcpy(args, k->in, (size_t)n * sizeof *args);   /* in[] and out[] are adjacent in the pool */
  if (c->d->ndims) args[n++] = (void *)(uintptr_t)c->dext;
  return rtc_launch_fn(c, r->fn[i], r->threads[i], args, n);
}

static int rtc_run_step_now(rtc_ctx *c, rtc_prog *r, int i) {
  rtc_call k = rtc_step_call(c, r, i);
  const rt_step *s = k.s;
  switch (s->kind) {
  case RT_STEP_FUSED: return rtc_launch_fused(c, r, i, &k);
  case RT_STEP_UPDATE: return rtc_run_update(c, r, &k);
  case RT_STEP_FORWARD: return r->row[i]->forward(c, &k);
  default: return r->row[i]->backward(c, &k);
  }
}

/* The failing step's name before the message its call left (or a generic one). */
static int rtc_fail_step(rtc_ctx *c, const rt_step *s, const char *generic) {
  char msg[RT_MODEL_ERR_LEN];
  snprintf(msg, sizeof msg, "%s", c->err[0] ? c->err : generic);
  return rtc_fail(c, "%s: %s", s->name, msg);
}

/* Steps [lo, hi) queued on the stream; the first that cannot be queued stops the run. */
static int rtc_run_range(rtc_ctx *c, rtc_prog *r, int lo, int hi) {
  for (int i = lo; i < hi; i++) {
    c->err[0] = 0;
    if (rtc_run_step(c, r, i)) return rtc_fail_step(c, &r->p->steps[i], "step failed");
  }
  return 0;
}

/* ---- prepare: each op's one-time work at create ---- */

static int rtc_prepare_prog(rtc_ctx *c, rtc_prog *r) {
  for (int i = 0; i < r->p->nsteps; i++) {
    const rt_step *s = &r->p->steps[i];
    const rtc_op_row *row = r->row[i];
    if (!row || !row->prepare) continue;
    void *none[64] = {0};
    if (s->nin > 32 || s->nout > 32) return rtc_fail(c, "%s: too many slots", s->name);
    size_t at = r->at[i];
    const void *param = r->params && r->params[i] ? r->params[i] : s->param;
    rtc_call k = {s, param, s->nin, s->nout, none, none + 32, r->shapes + at, r->shapes + at + s->nin, r->dtypes + at,
                  s->req, r->p->is_train, &r->state[i], NULL, NULL};
    c->err[0] = 0;
    if (row->prepare(c, &k)) return rtc_fail_step(c, s, "prepare failed");
  }
  return 0;
}

/* The scratch made as large as the steps' largest reservation, if it is not (at create, and
 * when bounded dims' new extents re-prepare the steps; the stream is idle both times: every
 * entry point synchronises before it returns). */
static int rtc_scratch_fit(rtc_ctx *c) {
  if (c->scratch && c->scratch_want <= c->scratch_have) return 0;
  if (c->scratch) c->cu->MemFree(c->scratch), c->scratch = 0;
  c->scratch_have = 0;
  for (int k = 0; k < 2; k++) rtc_graph_drop(c, &c->prog[k]);   /* their steps read the old one */
  if (rtc_alloc(c, &c->scratch, (int64_t)c->scratch_want, "the scratch space")) return 1;
  c->scratch_have = c->scratch_want;
  return 0;
}

/* ---- bounded dims: a call at other extents than the last one ---- */

/* The extents into their device copy, on the stream (the kernels queued after read them). */
static int rtc_upload_extents(rtc_ctx *c) {
  return rtc_cu_check(c, c->cu->MemcpyHtoDAsync(c->dext, c->host->extent, sizeof c->host->extent, c->stream), "copying the extents to the GPU") ||
         rtc_sync(c, "copying the extents to the GPU");
}

/* Each step that keeps state made again for the new shapes (cuDNN's descriptors and the
 * algorithms its heuristics pick at them: those a .so compiled at these extents would use). */
static int rtc_reprepare(rtc_ctx *c) {
  for (int k = 0; k < 2; k++) {
    rtc_prog *r = &c->prog[k];
    for (int i = 0; r->p && i < r->p->nsteps; i++) {
      if (!r->row[i] || !r->row[i]->prepare) continue;
      if (r->state[i] && r->row[i]->release) r->row[i]->release(c, r->state[i]);
      r->state[i] = NULL;
    }
    if (r->p && rtc_prepare_prog(c, r)) return 1;
  }
  return rtc_scratch_fit(c);
}

/* The programs set up for the call's extents (NULL: the bounds): refused when one is out of its
 * range, with nothing changed; a change re-shapes the steps, re-prepares and re-uploads. */
static int rtc_set_extents(rtc_ctx *c, const int64_t *extents, const char *what) {
  if (!c->d->ndims) return 0;
  int64_t before[K_MAX_BDIMS];
  memcpy(before, c->host->extent, sizeof before);
  if (rt_model_set_extents(c->host, extents, what)) return rtc_fail(c, "%s", rt_model_error(c->host));
  if (memcmp(before, c->host->extent, sizeof before) == 0) return 0;
  for (int k = 0; k < 2; k++)
    if (c->prog[k].p) rtc_prog_shapes(c, &c->prog[k]);
  if (!rtc_reprepare(c) && !rtc_upload_extents(c)) return 0;
  memset(c->host->extent, 0, sizeof c->host->extent);   /* no extents match: the next call sets everything up again */
  return 1;
}

/* cuBLAS and cuDNN are opened only for a model that uses them. */
static int rtc_libraries(rtc_ctx *c) {
  bool blas = false, dnn = false;
  for (int k = 0; k < 2; k++)
    for (int i = 0; c->prog[k].p && i < c->prog[k].p->nsteps; i++) {
      const rtc_op_row *row = c->prog[k].row[i];
      blas |= row && row->lib == RTC_LIB_BLAS, dnn |= row && row->lib == RTC_LIB_DNN;
    }
  return (blas && rtc_blas_open(c, &c->blas)) || (dnn && rtc_dnn_open(c, &c->dnn));
}

/* ---- create and destroy ---- */

static int rtc_module(rtc_ctx *c, CUmodule *mod, const char *ptx, const char *what) {
  char log[4096] = "";
  CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *val[2] = {log, (void *)(uintptr_t)sizeof log};
  CUresult r = c->cu->ModuleLoadDataEx(mod, ptx, 2, opt, val);
  return r != CUDA_SUCCESS ? rtc_fail(c, "loading %s: %s %s", what, rtc_lib_strerror(c->cu, r), log) : 0;
}

static int rtc_device(rtc_ctx *c) {
  int n = 0;
  if (rtc_cu_check(c, c->cu->DeviceGetCount(&n), "counting GPUs")) return 1;
  if (n < 1) return rtc_fail(c, "no GPU: the CUDA driver sees no device");
  if (rtc_cu_check(c, c->cu->DeviceGet(&c->dev, 0), "cuDeviceGet") ||
      rtc_cu_check(c, c->cu->DevicePrimaryCtxRetain(&c->cuctx, c->dev), "creating the GPU context"))
    return 1;
  c->has_ctx = 1;
  if (c->cu->DeviceGetName(c->device_name, sizeof c->device_name, c->dev) != CUDA_SUCCESS)
    snprintf(c->device_name, sizeof c->device_name, "GPU 0");
  if (rtc_cu_check(c, c->cu->CtxPushCurrent(c->cuctx), "cuCtxPushCurrent")) return 1;
  int bad = rtc_cu_check(c, c->cu->StreamCreate(&c->stream, CU_STREAM_NON_BLOCKING), "creating a stream");
  /* rtc_create_all checked the descriptor has both modules */
  return bad || rtc_module(c, &c->mod, c->d->gpu_module, "the model's PTX") ||
         rtc_module(c, &c->lib_mod, c->d->gpu_lib_module, "the GPU library's PTX");
}

static int rtc_create_all(rtc_ctx *c) {
  char err[RT_MODEL_ERR_LEN];
  if (rtc_lib_open(&c->cu, err, sizeof err)) return rtc_fail(c, "%s", err);
  if (!c->d->gpu_module || !c->d->gpu_lib_module) return rtc_fail(c, "the descriptor has no GPU module");
  if (!rt_prog_valid(c->d, &c->d->predict) || (c->d->has_train && !rt_prog_valid(c->d, &c->d->train)))
    return rtc_fail(c, "the model's descriptor is malformed");
  if (rtc_device(c)) return 1;
  if (rtc_memory(c) || rtc_prog_init(c, &c->prog[0], &c->d->predict, 0) ||
      (c->d->has_train && rtc_prog_init(c, &c->prog[1], &c->d->train, 1)) || rtc_libraries(c) ||
      rtc_prepare_prog(c, &c->prog[0]) || (c->d->has_train && rtc_prepare_prog(c, &c->prog[1])) || rtc_profile_init(c))
    return 1;
  c->graphs = rtc_graph_wanted() && !c->profile;
  return rtc_scratch_fit(c) || (c->d->ndims && rtc_upload_extents(c));
}

rt_model *rtc_model_create(const rt_model_desc *d, uint64_t seed) {
  rtc_create_err[0] = 0;
  if (!d || d->target != RT_TARGET_CUDA) {
    snprintf(rtc_create_err, sizeof rtc_create_err, "create: the descriptor is not a CUDA model's");
    return NULL;
  }
  rtc_ctx *c = calloc(1, sizeof *c);
  if (!c) return snprintf(rtc_create_err, sizeof rtc_create_err, "create: out of memory"), NULL;
  c->d = d;
  pthread_mutex_init(&c->mu, NULL);
  c->host = rt_model_new(d, seed, 0);
  int bad = c->host ? rtc_create_all(c) : rtc_fail(c, "create: out of memory or a malformed descriptor");
  if (c->has_ctx && c->cu) c->cu->CtxPopCurrent(&(CUcontext){0});
  if (bad) {
    snprintf(rtc_create_err, sizeof rtc_create_err, "%s", c->err);
    rtc_model_destroy((rt_model *)c);
    return NULL;
  }
  return (rt_model *)c;
}

void rtc_model_destroy(rt_model *m) {
  rtc_ctx *c = (rtc_ctx *)m;
  if (!c) return;
  if (c->has_ctx) {
    c->cu->CtxPushCurrent(c->cuctx);
    if (c->stream) c->cu->StreamSynchronize(c->stream);
    rtc_profile_print(c);
    rtc_graph_prof_print(c);
    for (int k = 0; k < 2; k++)
      if (c->ev[k]) c->cu->EventDestroy(c->ev[k]);
    rtc_prog_free(c, &c->prog[0]), rtc_prog_free(c, &c->prog[1]);
    if (c->blas) rtc_blas_close(c->blas);
    if (c->dnn) rtc_dnn_close(c->dnn);
    CUdeviceptr bufs[] = {c->dstore, c->darena, c->dinputs, c->daux, c->scratch, c->dext};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
      if (bufs[i]) c->cu->MemFree(bufs[i]);
    if (c->mod) c->cu->ModuleUnload(c->mod);
    if (c->lib_mod) c->cu->ModuleUnload(c->lib_mod);
    if (c->stream) c->cu->StreamDestroy(c->stream);
    c->cu->CtxPopCurrent(&(CUcontext){0});
    c->cu->DevicePrimaryCtxRelease(c->dev);
  }
  free(c->fns), free(c->dptr), free(c->inoff);
  for (int k = 0; k < 2; k++) free(c->prof_ms[k]), free(c->prof_n[k]);
  rt_profile_free(c->prof);
  rt_model_destroy(c->host);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* ---- entry points: each holds the model's lock and its GPU context ---- */

static void rtc_enter(rtc_ctx *c) {
  pthread_mutex_lock(&c->mu);
  c->cu->CtxPushCurrent(c->cuctx);
  c->run = c->stream;
  rtc_graph_prof_enter(c);
  if (c->prof) c->call_ns = rt_profile_now(), c->call_prog = -1;
}

static int rtc_leave(rtc_ctx *c, int rc) {
  rtc_graph_prof_leave(c, rc);
  if (c->prof && !rc && c->call_prog >= 0) rt_profile_run(c->prof, c->call_prog, c->call_ns, rt_profile_now());
  if (!rc) c->err[0] = 0;
  c->cu->CtxPopCurrent(&(CUcontext){0});
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* An output copied on the call's stream to the host, or (dev) to the caller's device buffer. */
static int rtc_copy_out(rtc_ctx *c, void *dst, const void *src, size_t bytes, int dev) {
  CUdeviceptr s = (CUdeviceptr)(uintptr_t)src;
  CUresult r = dev ? c->cu->MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, s, bytes, c->run) : c->cu->MemcpyDtoHAsync(dst, s, bytes, c->run);
  return rtc_cu_check(c, r, "copying an output from the GPU");
}

/* A _device call replays its program's graph on the caller's stream `user`: it is then the
 * call's stream. Otherwise its steps run on the model's stream once `user`'s work is done. */
static void rtc_run_on(rtc_ctx *c, const rtc_prog *r, int dev, CUstream user) {
  if (dev && c->graphs && !r->graph_off && !c->host->has_comm) c->run = user;
}

/* The caller's inputs into the model's input buffers, on the call's stream. A _device call's
 * inputs are read where they are, as the CPU reads the caller's buffers (the plan never writes
 * an input), once the work the caller queued on `user` is done, when the program runs step by
 * step; a replayed graph reads the model's buffers, so they are copied there. */
static int rtc_copy_inputs(rtc_ctx *c, const rt_program *p, const void *const *inputs, int dev, CUstream user, const char *what) {
  if (p->ninputs && !inputs) return rtc_fail(c, "%s: inputs is NULL", what);
  for (int k = 0; k < p->ninputs; k++)
    if (!inputs[k]) return rtc_fail(c, "%s: input '%s' is NULL", what, c->d->tensors[p->inputs[k]].name);
  if (dev && c->run != user) {
    for (int k = 0; k < p->ninputs; k++) c->dptr[p->inputs[k]] = (void *)inputs[k];
    return rtc_cu_check(c, c->cu->StreamSynchronize(user), "waiting for the caller's stream");
  }
  for (int k = 0; k < p->ninputs; k++) {
    CUdeviceptr dst = (CUdeviceptr)(uintptr_t)c->dptr[p->inputs[k]];
    size_t bytes = (size_t)rtc_numel(c, p->inputs[k]) * 4;
    CUresult e = dev ? c->cu->MemcpyDtoDAsync(dst, (CUdeviceptr)(uintptr_t)inputs[k], bytes, c->run) : c->cu->MemcpyHtoDAsync(dst, inputs[k], bytes, c->run);
    if (rtc_cu_check(c, e, "copying an input to the GPU")) return 1;
  }
  return 0;
}

/* After a failed call: nothing of it left in flight on either stream. */
static void rtc_settle(rtc_ctx *c) {
  c->cu->StreamSynchronize(c->stream);
  if (c->run != c->stream) c->cu->StreamSynchronize(c->run);
}

static int rtc_predict_enqueue(rtc_ctx *c, rtc_prog *r) { return rtc_run_range(c, r, 0, r->p->nsteps); }

static int rtc_predict_locked(rtc_ctx *c, const int64_t *extents, const void *const *inputs, void *const *outputs, int dev,
                              CUstream user) {
  const rt_program *p = &c->d->predict;
  if (rtc_set_extents(c, extents, "predict")) return 1;
  if (p->noutputs && !outputs) return rtc_fail(c, "predict: outputs is NULL");
  for (int k = 0; k < p->noutputs; k++)
    if (!outputs[k]) return rtc_fail(c, "predict: output '%s' is NULL", c->d->tensors[p->outputs[k]].name);
  rtc_prog *r = &c->prog[0];
  rtc_bind(c, p);
  rtc_run_on(c, r, dev, user);
  if (rtc_copy_inputs(c, p, inputs, dev, user, "predict") || rtc_live_upload(c, r, c->run) || rtc_graph_run(c, r, c->run, rtc_predict_enqueue))
    return rtc_settle(c), 1;
  if (c->prog[0].checks && rtc_data_errors(c, &c->prog[0], "predict")) return 1;   /* no output is copied then */
  for (int k = 0; k < p->noutputs; k++) {
    const rt_tensor_info *t = &c->d->tensors[p->outputs[k]];
    CUdeviceptr src = (CUdeviceptr)(uintptr_t)c->dptr[p->outputs[k]];
    if (!src) return rtc_fail(c, "predict: output '%s' has no buffer", t->name);
    if (rtc_copy_out(c, outputs[k], (void *)(uintptr_t)src, (size_t)rtc_numel(c, p->outputs[k]) * 4, dev)) return 1;
  }
  return rtc_sync(c, "predict");
}

int rtc_model_predict_at(rt_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs) {
  rtc_ctx *c = (rtc_ctx *)m;
  if (!c) return 1;
  rtc_enter(c);
  return rtc_leave(c, rtc_predict_locked(c, extents, inputs, outputs, 0, NULL));
}

int rtc_model_predict_device_at(rt_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs, void *stream) {
  rtc_ctx *c = (rtc_ctx *)m;
  if (!c) return 1;
  rtc_enter(c);
  return rtc_leave(c, rtc_predict_locked(c, extents, inputs, outputs, 1, stream));
}

int rtc_model_predict(rt_model *m, const void *const *inputs, void *const *outputs) {
  return rtc_model_predict_at(m, NULL, inputs, outputs);
}

int rtc_model_predict_device(rt_model *m, const void *const *inputs, void *const *outputs, void *stream) {
  return rtc_model_predict_device_at(m, NULL, inputs, outputs, stream);
}

/* Aux states (batch_norm's moving statistics) into the device snapshot, or back from it. */
static int rtc_aux_copy(rtc_ctx *c, int restore) {
  CUdeviceptr b = c->daux;
  for (int i = 0; i < c->d->ntensors; i++) {
    const rt_tensor_info *t = &c->d->tensors[i];
    if (t->role != RT_ROLE_AUX) continue;
    CUdeviceptr w = rtc_store_ptr(c, i);
    size_t bytes = (size_t)rt_tensor_numel(t) * 4;   /* the whole tensor, as rtc_memory sized the snapshot */
    if (rtc_cu_check(c, c->cu->MemcpyDtoDAsync(restore ? w : b, restore ? b : w, bytes, c->stream), "the aux snapshot")) return 1;
    b += bytes;
  }
  return 0;
}

/* The loss summed on the host in double, as the CPU runtime does (into the program's host
 * buffer for it, made at create). */
static int rtc_loss(rtc_ctx *c, const rtc_prog *r, float *loss) {
  int64_t n = rtc_numel(c, r->p->outputs[0]);
  CUdeviceptr x = (CUdeviceptr)(uintptr_t)c->dptr[r->p->outputs[0]];
  if (rtc_cu_check(c, c->cu->MemcpyDtoHAsync(r->hloss, x, (size_t)n * 4, c->run), "copying the loss") || rtc_sync(c, "train_step"))
    return 1;
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += r->hloss[i];
  *loss = (float)sum;
  return 0;
}

/* clip_norm: the gradients every update reads, scaled together on the stream (k_clip_grad_norm's
 * arithmetic, kernels/cuda/kc_ops.cu), after the backward steps and before the first update. */
static int rtc_clip(rtc_ctx *c, rtc_prog *r) {
  const rt_program *p = r->p;
  int n = p->nsteps - r->split;
  for (int k = 0; k < n; k++) {
    const rt_step *s = &p->steps[r->split + k];
    if (s->nin < 2 || s->in[0] < 0 || s->in[1] < 0) return rtc_fail(c, "%s: an update without its parameter or gradient", s->name);
    r->clip_g[k] = c->dptr[s->in[1]], r->clip_n[k] = rtc_numel(c, s->in[0]);
  }
  return rtc_clip_grad_norm(c, r->clip_g, r->clip_n, n, c->d->clip_norm, rtc_scratch(c));
}

/* ---- data-parallel training through host buffers ---- */

/* Debian's Open MPI is not CUDA-aware, so the sums go through the host: set_comm is the CPU
 * runtime's own on the host copy (rt_comm.c: the hook checked and kept, the gradient buffer
 * made, rank 0's weights and aux states to every rank, dropout's seed offset by the rank),
 * the device's store downloaded before and uploaded after. train_step copies every gradient
 * and the loss into that buffer after the backward steps (rtc_comm_reduce), sums it in one
 * allreduce, and copies the gradients, divided by the world size, back before the updates:
 * no overlap with the backward pass yet. batch_norm(sync=true) is refused: its sums would
 * run inside a step on the stream. */
int rtc_model_set_comm(rt_model *m, const kiln_comm *c) {
  rtc_ctx *k = (rtc_ctx *)m;
  if (!k) return 1;
  rtc_enter(k);
  for (int i = 0; c && i < k->d->train.nsteps; i++)
    if (rt_step_syncs_bn(&k->d->train.steps[i], k->d->train.steps[i].param))
      return rtc_leave(k, rtc_fail(k, "set_comm: %s: batch_norm(sync=true) is not on the CUDA target yet; train it on the CPU "
                                   "target, or with sync=false", k->d->train.steps[i].name));
  int rc = c ? rtc_download_store(k) : 0;
  if (!rc && rt_model_set_comm(k->host, c)) rc = rtc_fail(k, "%s", rt_model_error(k->host));
  if (!rc && c) rc = rtc_upload_store(k) || rtc_sync(k, "set_comm");
  return rtc_leave(k, rc);
}

/* The loss (the program's output, summed on the host) and every gradient the updates read,
 * summed over the ranks: gradients divided by the world size back on the device, the mean
 * loss into *loss. The buffer is the host copy's (rt_comm.c sized it for every gradient). */
/* Every gradient the updates read between the device and buf, one after another (to_host: to
 * buf); the elements copied. -1 after a failure. */
static int64_t rtc_comm_copy(rtc_ctx *c, const rtc_prog *r, float *buf, int to_host) {
  int64_t at = 0;
  for (int i = r->split; i < r->p->nsteps; i++) {
    const rt_step *s = &r->p->steps[i];
    int64_t n = rtc_numel(c, s->in[0]);
    CUdeviceptr g = (CUdeviceptr)(uintptr_t)c->dptr[s->in[1]];
    CUresult e = to_host ? c->cu->MemcpyDtoHAsync(buf + at, g, (size_t)n * 4, c->stream)
                         : c->cu->MemcpyHtoDAsync(g, buf + at, (size_t)n * 4, c->stream);
    if (rtc_cu_check(c, e, to_host ? "copying a gradient to the host" : "copying a gradient to the device")) return -1;
    at += n;
  }
  return at;
}

static int rtc_comm_reduce(rtc_ctx *c, rtc_prog *r, float *loss) {
  rt_model *h = c->host;
  float *buf = h->comm_buf;
  int64_t at = rtc_comm_copy(c, r, buf, 1);
  if (at < 0 || rtc_loss(c, r, &buf[at])) return 1;   /* rtc_loss synchronises: the gradients are in too */
  char err[256] = "";
  void *req = NULL;
  if (h->comm.start(h->comm.ctx, buf, at + 1, &req, err, sizeof err) || h->comm.wait(h->comm.ctx, req, err, sizeof err))
    return h->comm_broke = 1, rtc_fail(c, "train_step: the allreduce of the gradients failed on rank %d of %d: %s", h->comm.rank,
                                       h->comm.size, err[0] ? err : "no message");
  float inv = 1.0f / (float)h->comm.size;
  *loss = buf[at] * inv;
  for (int64_t i = 0; i < at; i++) buf[i] *= inv;
  if (rtc_comm_copy(c, r, buf, 0) < 0) return 1;
  return rtc_sync(c, "train_step");   /* the buffer is reused by the next step */
}

/* The train step's first half, on the model's stream: the aux snapshot, the forward and backward
 * steps, and the skip word the updates read (set when a step met bad data). */
static int rtc_train_front(rtc_ctx *c, rtc_prog *r) {
  if (rtc_aux_copy(c, 0) || rtc_run_range(c, r, 0, r->split)) return 1;
  return r->checks && rtc_err_any(c, (const int32_t *)(uintptr_t)r->derr, r->p->nsteps, (int32_t *)(uintptr_t)r->dskip);
}

/* Its second half: clip_norm's scaling, then the updates. */
static int rtc_train_back(rtc_ctx *c, rtc_prog *r) {
  if (c->d->clip_norm > 0 && rtc_clip(c, r)) return 1;
  return rtc_run_range(c, r, r->split, r->p->nsteps);
}

static int rtc_train_enqueue(rtc_ctx *c, rtc_prog *r) { return rtc_train_front(c, r) || rtc_train_back(c, r); }

/* Data-parallel: the halves step by step, the host's allreduce between them (after checking the
 * data-error words, so that no rank sums a gradient of bad data). */
static int rtc_train_comm(rtc_ctx *c, rtc_prog *r, float *mean_loss) {
  return rtc_train_front(c, r) || rtc_data_errors(c, r, "train_step") || rtc_comm_reduce(c, r, mean_loss) || rtc_train_back(c, r);
}

static int rtc_train_locked(rtc_ctx *c, const int64_t *extents, const void *const *inputs, float *loss, int dev, CUstream user) {
  const rt_program *p = &c->d->train;
  if (!c->d->has_train) return rtc_fail(c, "train_step: the model has no train statement");
  if (rtc_set_extents(c, extents, "train_step")) return 1;
  if (!loss) return rtc_fail(c, "train_step: loss is NULL");
  if (p->noutputs != 1) return rtc_fail(c, "train_step: the program has %d losses, not 1", p->noutputs);
  rtc_prog *r = &c->prog[1];
  rtc_bind(c, p);
  if (!c->dptr[p->outputs[0]]) return rtc_fail(c, "train_step: the loss has no buffer");
  rtc_run_on(c, r, dev, user);
  if (rtc_copy_inputs(c, p, inputs, dev, user, "train_step")) return rtc_settle(c), 1;
  c->host->lr = rt_model_lr_now(c->host); /* this step's, from the schedule */
  c->host->step++;                        /* Adam's t and the random counters start at 1 */
  float mean_loss = 0;
  int comm = c->host->has_comm;
  c->host->comm_broke = 0;
  int rc = rtc_live_upload(c, r, c->run);
  if (!rc && comm) rc = rtc_train_comm(c, r, &mean_loss);
  else if (!rc) rc = rtc_graph_run(c, r, c->run, rtc_train_enqueue) || rtc_data_errors(c, r, "train_step");
  c->host_stale = 1;
  if (rc) {   /* no update wrote anything: they skip after a data error, and are not queued after a failed step */
    char msg[RT_MODEL_ERR_LEN];
    snprintf(msg, sizeof msg, "%s", c->err);
    c->host->step--;
    rtc_settle(c);
    rtc_aux_copy(c, 1), c->cu->StreamSynchronize(c->stream);
    if (comm && !c->host->comm_broke && c->host->comm.failed) c->host->comm.failed(c->host->comm.ctx, msg);   /* its own failure */
    return rtc_fail(c, "%s", msg);
  }
  if (comm) return *loss = mean_loss, 0;
  return rtc_loss(c, r, loss);
}

int rtc_model_train_step_at(rt_model *m, const int64_t *extents, const void *const *inputs, float *loss) {
  rtc_ctx *c = (rtc_ctx *)m;
  if (!c) return 1;
  rtc_enter(c);
  return rtc_leave(c, rtc_train_locked(c, extents, inputs, loss, 0, NULL));
}

int rtc_model_train_step_device_at(rt_model *m, const int64_t *extents, const void *const *inputs, float *loss, void *stream) {
  rtc_ctx *c = (rtc_ctx *)m;
  if (!c) return 1;
  rtc_enter(c);
  return rtc_leave(c, rtc_train_locked(c, extents, inputs, loss, 1, stream));
}

int rtc_model_train_step(rt_model *m, const void *const *inputs, float *loss) {
  return rtc_model_train_step_at(m, NULL, inputs, loss);
}

int rtc_model_train_step_device(rt_model *m, const void *const *inputs, float *loss, void *stream) {
  return rtc_model_train_step_device_at(m, NULL, inputs, loss, stream);
}

/* ---- weights through the host ---- */

/* save or save_state of the host copy, after the device's store is brought over. */
static int rtc_model_write(const rt_model *m, const char *path, int (*write)(const rt_model *, const char *)) {
  rtc_ctx *c = (rtc_ctx *)m;
  if (!c) return 1;
  rtc_enter(c);
  int rc = rtc_download_store(c);
  if (!rc && write(c->host, path)) rc = rtc_fail(c, "%s", rt_model_error(c->host));
  return rtc_leave(c, rc);
}

/* load or load_state into the host copy, then up to the device. A failed load leaves the host
 * copy as it was (the runtime checks the whole file first), so the device's needs no restore. */
static int rtc_model_read(rt_model *m, const char *path, int (*read)(rt_model *, const char *)) {
  rtc_ctx *c = (rtc_ctx *)m;
  if (!c) return 1;
  rtc_enter(c);
  int rc = rtc_download_store(c);
  if (!rc && read(c->host, path)) rc = rtc_fail(c, "%s", rt_model_error(c->host));
  if (!rc) rc = rtc_upload_store(c);
  return rtc_leave(c, rc);
}

int rtc_model_save(const rt_model *m, const char *path) { return rtc_model_write(m, path, rt_model_save); }
int rtc_model_load(rt_model *m, const char *path) { return rtc_model_read(m, path, rt_model_load); }
int rtc_model_save_state(const rt_model *m, const char *path) { return rtc_model_write(m, path, rt_model_save_state); }
int rtc_model_load_state(rt_model *m, const char *path) { return rtc_model_read(m, path, rt_model_load_state); }


float rtc_model_lr(const rt_model *m) {
  rtc_ctx *c = (rtc_ctx *)m;   /* the lock is not part of the value */
  if (!c) return 0.0f;
  pthread_mutex_lock(&c->mu);
  float lr = rt_model_lr_now(c->host);
  pthread_mutex_unlock(&c->mu);
  return lr;
}

int rtc_model_set_lr(rt_model *m, float lr) {
  rtc_ctx *c = (rtc_ctx *)m;
  if (!c) return 1;
  pthread_mutex_lock(&c->mu);
  int rc = rt_model_set_lr(c->host, lr);
  if (rc) rtc_fail(c, "%s", rt_model_error(c->host));
  else c->err[0] = 0;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* NULL: why the calling thread's last create failed. */
const char *rtc_model_error(const rt_model *m) {
  const rtc_ctx *c = (const rtc_ctx *)m;
  if (!c) return rtc_create_err[0] ? rtc_create_err : "the model is NULL";
  return c->err;
}
