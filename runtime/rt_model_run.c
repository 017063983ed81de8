/* rt_model_run.c — predict and train_step: bind every tensor of a program (arena, the caller's
 * inputs, model storage), check each step can run, run the steps (in order on the calling
 * thread with the naive engine; through the threaded engine with one variable per step,
 * reading its dependencies' variables), copy results out. train_step runs its updates only
 * once every forward and backward step has succeeded. The predict steps' kernel caches live
 * here too, cleared whenever the weights change. */
#include "rt_model_int.h"

#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "k_epilogue.h"

static const k_shape rt_scalar = {0, {0}};

/* ---- per-program state: each step's kernel arguments, shapes fixed at creation ---- */

/* Out slot j's shape from the step's shape arrays (in, out: the descriptor's or an
 * instance's copies) and its tensor's shape (NULL for an absent slot): the out array's when
 * there is one, else the tensor's; an absent in_grad takes its in_data partner's. */
k_shape rt_out_shape(const rt_step *s, const k_shape *in, const k_shape *out, const k_shape *tensor, int j) {
  if (out) return out[j];
  if (tensor) return *tensor;
  int nof = (s->nin - s->nout) / 2;     /* a step with fewer inputs than outputs has no partner */
  if (s->kind == RT_STEP_BACKWARD && in && nof >= 0 && s->nin == 2 * nof + s->nout) return in[nof + j];
  return rt_scalar;
}

k_shape rt_step_out_shape(const rt_model_desc *d, const rt_step *s, int j) {
  return rt_out_shape(s, s->in_shape, s->out_shape, s->out[j] >= 0 ? &d->tensors[s->out[j]].shape : NULL, j);
}

static k_dtype rt_dtype_of(const rt_model_desc *d, int t) { return t >= 0 ? (k_dtype)d->tensors[t].dtype : K_F32; }

void rt_step_args(rt_step_run *r, const rt_model *m) {
  const rt_step *s = r->s;
  const k_shape *in = r->in_shape ? r->in_shape : s->in_shape;
  for (int j = 0; j < s->nin; j++) r->in[j] = (k_tensor){NULL, in ? in[j] : rt_scalar, rt_dtype_of(m->d, s->in[j])};
  const k_shape *out = r->out_shape ? r->out_shape : s->out_shape;
  for (int j = 0; j < s->nout; j++)
    r->out[j] = (k_tensor){NULL, rt_out_shape(s, in, out, s->out[j] >= 0 ? &m->tshape[s->out[j]] : NULL, j), rt_dtype_of(m->d, s->out[j])};
}

/* A step's param is the whole struct its kernel (an update: its optimizer) reads, whose size
 * the op gives, so param_bytes must be that size: a bounded model's instance copies
 * param_bytes bytes of it to rewrite its fields (rt_model_dims.c), and more would read past
 * the descriptor's constant, fewer would leave the kernel reading past the copy. */
static int rt_param_valid(const rt_step *s) {
  if (!s->param) return s->param_bytes == 0;
  size_t want = s->kind != RT_STEP_UPDATE ? k_op_param_bytes(s->op)
                : s->op >= 0 && s->op < K_OPT_COUNT ? k_optim_param_size(s->op) : 0;
  return want && s->param_bytes == (int64_t)want;
}

/* Tensor indices in range, dependencies on earlier steps only, and the param's size. */
static int rt_step_valid(const rt_model_desc *d, const rt_step *s, int i) {
  if (s->nin < 0 || s->nout < 0 || s->ndeps < 0 || (s->nin && !s->in) || (s->nout && !s->out)) return 0;
  if (!rt_param_valid(s)) return 0;
  if ((s->nout && !s->req) || (s->ndeps && !s->deps) || !s->name) return 0;
  if (s->epi && (s->kind != RT_STEP_FORWARD || !k_epi_valid(s->epi, s->nin, s->nout))) return 0;
  if (s->kind == RT_STEP_BACKWARD && s->nin < s->nout) return 0;   /* in_grads pair with in_data inputs */
  for (int j = 0; j < s->nin; j++)
    if (s->in[j] < -1 || s->in[j] >= d->ntensors) return 0;
  for (int j = 0; j < s->nout; j++)
    if (s->out[j] < -1 || s->out[j] >= d->ntensors) return 0;
  for (int k = 0; k < s->ndeps; k++)
    if (s->deps[k] < 0 || s->deps[k] >= i) return 0;
  /* each binary step reads within its operand */
  for (int k = 0; s->epi && k < s->epi->nsteps; k++) {
    const k_epi_step *e = &s->epi->step[k];
    if (e->kind == K_EPI_BINARY && (s->in[e->slot] < 0 || s->out[0] < 0 ||
                                    !k_epi_operand_fit(e, &d->tensors[s->in[e->slot]].shape, &d->tensors[s->out[0]].shape)))
      return 0;
  }
  /* a statistics epilogue (then nout is 2, k_epi_valid) writes one entry per plane */
  if (k_epi_has_stats(s->epi) && (s->out[0] < 0 || s->out[1] < 0 ||
                                  !k_epi_stats_fit(s->epi, &d->tensors[s->out[0]].shape, &d->tensors[s->out[1]].shape)))
    return 0;
  return 1;
}

/* A step run per sample (k_call_samples): each strided slot is an arena value or an input
 * whose first axis is the samples, and its last sample ends inside the arena (an input: the
 * caller's buffer of samples * sample_stride bytes, so the stride is its sample's size). Never
 * with bounded dims, whose runs take fewer samples than the descriptor's (the plan splits no
 * such graph). */
static int rt_samples_valid(const rt_model_desc *d, const rt_program *p, const rt_step *s) {
  if (s->samples == 0) return 1;
  if (s->samples < 2 || !s->sample_stride || s->kind != RT_STEP_FORWARD || s->out_shape || d->target != RT_TARGET_CPU ||
      d->ndims)
    return 0;
  for (int j = 0; j < s->nin + s->nout; j++) {
    int64_t st = s->sample_stride[j];
    int t = j < s->nin ? s->in[j] : s->out[j - s->nin];
    if (st == 0) continue;
    if (t < 0 || st < 0) return 0;   /* t < ntensors: rt_step_valid ran first */
    const rt_tensor_info *x = &d->tensors[t];
    if (x->shape.rank < 1 || x->shape.d[0] != s->samples) return 0;
    int64_t one = rt_tensor_numel(x) / s->samples * 4, room = p->arena_bytes - p->offset[t] - one;
    if (p->offset[t] < 0 ? x->role != RT_ROLE_INPUT || st != one : st < one || room < 0 || st > room / (s->samples - 1))
      return 0;
  }
  return 1;
}

/* Every arena interval and workspace inside the arena. */
static int rt_arena_valid(const rt_model_desc *d, const rt_program *p) {
  for (int t = 0; t < d->ntensors; t++)
    if (p->offset[t] >= 0 && p->offset[t] + rt_tensor_numel(&d->tensors[t]) * 4 > p->arena_bytes) return 0;
  for (int i = 0; i < p->nsteps; i++) {
    const rt_step *s = &p->steps[i];
    if (s->temp_bytes < 0 || (s->temp_bytes && (s->temp_offset < 0 || s->temp_offset + s->temp_bytes > p->arena_bytes))) return 0;
  }
  return 1;
}

int rt_prog_valid(const rt_model_desc *d, const rt_program *p) {
  if (p->nsteps < 0 || (p->nsteps && !p->steps) || !p->offset || p->ninputs < 0 || p->noutputs < 0) return 0;
  if ((p->ninputs && !p->inputs) || (p->noutputs && !p->outputs) || !rt_arena_valid(d, p)) return 0;
  for (int i = 0; i < p->nsteps; i++)
    if (!rt_step_valid(d, &p->steps[i], i) || !rt_samples_valid(d, p, &p->steps[i])) return 0;
  for (int k = 0; k < p->ninputs; k++)
    if (p->inputs[k] < 0 || p->inputs[k] >= d->ntensors) return 0;
  for (int k = 0; k < p->noutputs; k++)
    if (p->outputs[k] < 0 || p->outputs[k] >= d->ntensors) return 0;
  return 1;
}

/* Bit j set when step input j is a weight or constant in model storage: the same buffer on
 * every call, changed only by load and train_step, which call rt_model_weights_changed. */
static uint32_t rt_stable_inputs(const rt_model *m, const rt_program *p, const rt_step *s) {
  uint32_t bits = 0;
  for (int j = 0; j < s->nin && j < 32; j++) {
    int t = s->in[j];
    if (t < 0 || p->offset[t] >= 0 || !m->tptr[t]) continue;
    int role = m->d->tensors[t].role;
    if (role == RT_ROLE_PARAM || role == RT_ROLE_AUX || role == RT_ROLE_CONST) bits |= 1u << j;
  }
  return bits;
}

/* The predict program's kernels may keep data derived from the weights between calls (a
 * convolution's repacked weights); train_step changes the weights on every call, so its
 * steps get no cache. */
static int rt_caches_init(rt_prog_state *ps, rt_model *m, const rt_program *p) {
  if (p != &m->d->predict) return 0;
  ps->caches = calloc((size_t)p->nsteps + 1, sizeof *ps->caches);
  if (!ps->caches) return 1;
  for (int i = 0; i < p->nsteps; i++) {
    const rt_step *s = &p->steps[i];
    ps->caches[i].stable = s->kind == RT_STEP_FORWARD ? rt_stable_inputs(m, p, s) : 0;
    ps->sr[i].cache = ps->caches[i].stable ? &ps->caches[i] : NULL;
  }
  return 0;
}

void rt_model_weights_changed(rt_model *m) {
  rt_prog_state *ps = &m->ps[0];
  for (int i = 0; ps->caches && i < ps->p->nsteps; i++) ps->caches[i].key = 0;
}

int rt_prog_state_init(rt_prog_state *ps, rt_model *m, const rt_program *p) {
  if (!rt_prog_valid(m->d, p)) return 1;
  size_t nin = 0, nout = 0, n = (size_t)p->nsteps, ndeps = 0;
  for (int i = 0; i < p->nsteps; i++) {
    nin += (size_t)p->steps[i].nin, nout += (size_t)p->steps[i].nout;
    if ((size_t)p->steps[i].ndeps > ndeps) ndeps = (size_t)p->steps[i].ndeps;
  }
  ps->p = p;
  ps->sr = calloc(n + 1, sizeof *ps->sr), ps->vars = calloc(n + 1, sizeof *ps->vars);
  ps->dvars = calloc(ndeps + 1, sizeof *ps->dvars);
  ps->tpool = calloc(nin + nout + 1, sizeof *ps->tpool), ps->rpool = calloc(nout + 1, sizeof *ps->rpool);
  ps->fpool = calloc(nin + nout + n + 1, sizeof *ps->fpool);   /* a fused step's pointers and the extents */
  if (!ps->sr || !ps->vars || !ps->dvars || !ps->tpool || !ps->rpool || !ps->fpool) return 1;
  size_t at = 0, ro = 0, fo = 0;
  for (int i = 0; i < p->nsteps; i++) {
    rt_step_run *r = &ps->sr[i];
    const rt_step *s = &p->steps[i];
    *r = (rt_step_run){m, p, s, ps->tpool + at, ps->tpool + at + s->nin, ps->rpool + ro, ps->fpool + fo, NULL, s->param, NULL, NULL};
    r->ptrs[s->nin + s->nout] = m->extent;
    at += (size_t)(s->nin + s->nout), ro += (size_t)s->nout, fo += (size_t)(s->nin + s->nout + 1);
  }
  if (m->d->ndims && rt_dims_state_init(ps)) return 1;
  for (int i = 0; i < p->nsteps; i++) rt_step_args(&ps->sr[i], m);
  return rt_caches_init(ps, m, p);
}

void rt_prog_state_free(rt_prog_state *ps) {
  for (int i = 0; ps->caches && i < ps->p->nsteps; i++) free(ps->caches[i].data);
  free(ps->caches);
  rt_dims_state_free(ps);
  free(ps->sr), free(ps->vars), free(ps->dvars), free(ps->tpool), free(ps->rpool), free(ps->fpool);
  memset(ps, 0, sizeof *ps);
}

/* ---- binding ---- */

static void rt_bind(rt_model *m, const rt_program *p, const void *const *inputs) {
  for (int t = 0; t < m->d->ntensors; t++)
    m->ptr[t] = p->offset[t] >= 0 ? (char *)m->arena + p->offset[t] : m->tptr[t];
  for (int k = 0; k < p->ninputs; k++) m->ptr[p->inputs[k]] = (void *)inputs[k];
}

static void rt_bind_step(rt_model *m, rt_step_run *r) {
  const rt_step *s = r->s;
  for (int j = 0; j < s->nin; j++) r->in[j].data = s->in[j] >= 0 ? m->ptr[s->in[j]] : NULL;
  for (int j = 0; j < s->nout; j++) {
    r->out[j].data = s->out[j] >= 0 ? m->ptr[s->out[j]] : NULL;
    r->req[j] = r->out[j].data ? s->req[j] : kNullOp;     /* no storage: not written */
  }
  for (int j = 0; j < s->nin; j++) r->ptrs[j] = r->in[j].data;
  for (int j = 0; j < s->nout; j++) r->ptrs[s->nin + j] = r->out[j].data;
}

/* ---- checks made before anything runs, so a step can fail only on its data ---- */

int rt_update_nin(const rt_model_desc *d, const rt_step *s) {
  return 2 + (k_optim_moments(s->op) ? 2 : d->sgd.momentum != 0.0f);
}

bool rt_update_param_ok(const rt_step *s) {
  return s->param_bytes == (int32_t)k_optim_param_size(s->op);
}

/* An update runs over the elements in use: with bounded dims, a weight that follows them
 * (a position table of `seq` rows) is stored at the bound and its first rows are in use. */
static int64_t rt_update_numel(const rt_model *m, int t) { return k_shape_numel(&m->tshape[t]); }

static int rt_check_update(rt_model *m, const rt_step *s) {
  const rt_model_desc *d = m->d;
  int64_t n = s->nin > 0 && s->in[0] >= 0 ? rt_update_numel(m, s->in[0]) : -1;
  int need = rt_update_nin(d, s);
  if (s->op < 0 || s->op >= K_OPT_COUNT) return rt_model_fail(m, "%s: unknown optimizer %d", s->name, s->op);
  if (s->param && !rt_update_param_ok(s)) return rt_model_fail(m, "%s: its optimizer parameters are malformed", s->name);
  for (int j = 0; j < need; j++)
    if (j >= s->nin || s->in[j] < 0 || !m->ptr[s->in[j]] || rt_update_numel(m, s->in[j]) != n)
      return rt_model_fail(m, "%s: update without its parameter, gradient or state", s->name);
  return 0;
}

static int rt_check_step(rt_model *m, const rt_step_run *r) {
  const rt_step *s = r->s;
  if (s->kind == RT_STEP_UPDATE) return rt_check_update(m, s);
  if (s->kind == RT_STEP_FUSED && !s->fused) return rt_model_fail(m, "step %s has no code", s->name);
  if (s->kind != RT_STEP_FUSED && s->kind != RT_STEP_FORWARD && s->kind != RT_STEP_BACKWARD)
    return rt_model_fail(m, "%s: unknown step kind %d", s->name, s->kind);
  if (s->kind != RT_STEP_FUSED && !s->kernel) return rt_model_fail(m, "%s: no kernel", s->name);
  for (int j = 0; j < s->nin; j++)
    if (s->in[j] >= 0 && !r->in[j].data) return rt_model_fail(m, "%s: input %s has no storage", s->name, m->d->tensors[s->in[j]].name);
  for (int j = 0; s->kind == RT_STEP_FUSED && j < s->nout; j++)
    if (!r->out[j].data) return rt_model_fail(m, "%s: output %d has no storage", s->name, j);
  return 0;
}

static int rt_prepare(rt_model *m, rt_prog_state *ps, const void *const *inputs) {
  rt_bind(m, ps->p, inputs);
  for (int i = 0; i < ps->p->nsteps; i++) {
    rt_bind_step(m, &ps->sr[i]);
    if (rt_check_step(m, &ps->sr[i])) return 1;
  }
  return 0;
}

/* ---- one step, on whichever thread the engine picks ---- */

static int rt_run_kernel(const rt_step_run *r, k_fn fn, rt_run_ctx *rc) {
  const rt_model *m = r->m;
  const rt_step *s = r->s;
  char msg[RT_ERR_LEN];
  msg[0] = 0;     /* not `= ""`: that clears all RT_ERR_LEN bytes on every step */
  void *temp = s->temp_bytes ? (char *)m->arena + s->temp_offset : NULL;
  k_call c = {r->in, s->nin, r->out, s->nout, r->req, r->param, temp, (size_t)s->temp_bytes, m->seed + m->rng_salt,
              RT_CTR_OP(m->step, s->name_hash), r->p->is_train, msg, sizeof msg, r->cache, s->epi, NULL};
  if (m->has_comm && r->p->is_train) rt_comm_kernel_hook(m, s, r->param, &c);
  if ((s->samples > 1 ? k_call_samples(&c, fn, s->samples, s->sample_stride) : fn(&c)) == 0) return 0;
  rt_errf(rc->err, rc->err_len, "%s: %s", s->name, msg[0] ? msg : "kernel failed");
  return 1;
}

static void rt_run_update(const rt_step_run *r) {
  const rt_model *m = r->m;
  const rt_step *s = r->s;
  int64_t n = rt_update_numel(m, s->in[0]);
  float *w = r->in[0].data, *s0 = s->nin > 2 ? r->in[2].data : NULL, *s1 = s->nin > 3 ? r->in[3].data : NULL;
  if (s->op == K_OPT_SGD) k_sgd_update(w, r->in[1].data, s0, n, m->lr, s->param ? s->param : &m->d->sgd);
  else k_adam_update(w, r->in[1].data, s0, s1, n, m->lr, s->param ? s->param : &m->d->adam, m->step, s->op == K_OPT_ADAMW);
}

static int rt_step_fn(void *arg, rt_run_ctx *rc) {
  const rt_step_run *r = arg;
  switch (r->s->kind) {
  case RT_STEP_FORWARD:
  case RT_STEP_BACKWARD: return rt_run_kernel(r, r->s->kernel, rc);
  case RT_STEP_UPDATE: rt_run_update(r); return 0;
  default: r->s->fused(r->ptrs); return 0;
  }
}

/* ---- through the engine ---- */

/* Pushes steps [lo, hi), then waits for each; the first failure in step order is reported. */
/* clip_norm: every gradient the updates [first, nsteps) read, scaled together to the global
 * norm (k_clip_grad_norm) once every step before them has run; nothing else reads them. */
static int rt_clip_grads(rt_model *m, rt_prog_state *ps, int first) {
  int n = ps->p->nsteps - first;
  if (m->d->clip_norm <= 0 || n <= 0) return 0;
  float **g = malloc(sizeof *g * (size_t)n);
  int64_t *len = malloc(sizeof *len * (size_t)n);
  if (!g || !len) return free(g), free(len), rt_model_fail(m, "train_step: out of memory clipping the gradients");
  for (int i = 0; i < n; i++) {
    const rt_step_run *r = &ps->sr[first + i];
    g[i] = r->in[1].data, len[i] = rt_update_numel(m, r->s->in[0]);
  }
  k_clip_grad_norm(g, len, n, m->d->clip_norm);
  free(g), free(len);
  return 0;
}

static int rt_push_range(rt_model *m, rt_engine *e, rt_prog_state *ps, int lo, int hi) {
  for (int i = lo; i < hi; i++) {
    const rt_step *s = &ps->p->steps[i];
    for (int k = 0; k < s->ndeps; k++) ps->dvars[k] = ps->vars[s->deps[k]];
    rt_engine_push_sync(e, rt_step_fn, &ps->sr[i], ps->dvars, s->ndeps, &ps->vars[i], 1);
  }
  int rc = 0;
  for (int i = lo; i < hi; i++) {
    char msg[RT_ERR_LEN];
    if (rt_engine_wait_for_var(e, ps->vars[i], msg, sizeof msg) && !rc) rc = rt_model_fail(m, "%s", msg);
  }
  return rc;
}

/* The naive engine would run each pushed step at once on this thread, in push order, so the
 * steps are called here directly instead, without its per-step variables, blocks and lock.
 * Stopping at the first failure reports the same step the engine would (the first in step
 * order); the steps the engine would still run after it (those not depending on it) change
 * nothing the caller sees: predict then copies no output, train_step restores the aux states
 * and runs no update. Since every step before train_step's first update has then succeeded,
 * no split is needed. A profiled model (rt_profile.c) runs here whatever its engine, each
 * step timed: one branch a step otherwise. */
static int rt_run_direct(rt_model *m, rt_prog_state *ps, int split) {
  char msg[RT_ERR_LEN];
  rt_run_ctx rc = {NULL, -1, msg, sizeof msg};
  rt_profile *prof = m->prof;
  int prog = ps == &m->ps[1];
  int64_t start = prof ? rt_profile_now() : 0, t0 = start;
  for (int i = 0; i < ps->p->nsteps; i++) {
    msg[0] = 0;
    if (i == split && (rt_comm_reduce(m, ps, split) || rt_clip_grads(m, ps, split))) return 1;
    if (rt_step_fn(&ps->sr[i], &rc)) return rt_model_fail(m, "%s", msg[0] ? msg : "step failed");
    if (m->has_comm && rt_comm_after_step(m, ps, i)) return 1;
    if (prof) {
      int64_t t1 = rt_profile_now();
      rt_profile_step(prof, prog, i, t0, t1);
      t0 = t1;
    }
  }
  if (prof) rt_profile_run(prof, prog, start, t0);
  return 0;
}

/* Runs steps [0, split), then [split, nsteps) only if all of those succeeded, on the model's
 * own engine (the caller holds m->mu). A profiled model runs its steps in order on this
 * thread, whichever the engine, so that each step's time is its own. */
static int rt_run(rt_model *m, rt_prog_state *ps, int split) {
  int n = ps->p->nsteps;
  rt_engine *e = m->engine;
  /* A synchronised batch_norm's allreduce runs inside its step: on every rank the steps must
   * then come in the same order, which only a run in step order gives. */
  if (m->prof || rt_engine_get_kind(e) == RT_ENGINE_NAIVE || (m->comm_sync && ps == &m->ps[1]))
    return rt_run_direct(m, ps, split);
  /* Made on the first run and kept: a run ends with every pushed step waited for, which
   * leaves each variable idle and its error cleared, ready for the next run (the engine
   * frees them when the model destroys it). */
  for (int i = 0; i < n; i++)
    if (!ps->vars[i]) ps->vars[i] = rt_engine_new_var(e);
  int rc = rt_push_range(m, e, ps, 0, split);
  if (!rc && split < n) rc = rt_comm_reduce(m, ps, split) || rt_clip_grads(m, ps, split);
  if (!rc) rc = rt_push_range(m, e, ps, split, n);
  return rc;
}

/* ---- the entry points ---- */

static int rt_check_inputs(rt_model *m, const rt_program *p, const void *const *inputs, const char *what) {
  if (p->ninputs && !inputs) return rt_model_fail(m, "%s: inputs is NULL", what);
  for (int k = 0; k < p->ninputs; k++)
    if (!inputs[k]) return rt_model_fail(m, "%s: input '%s' is NULL", what, m->d->tensors[p->inputs[k]].name);
  return 0;
}

static int rt_predict_locked(rt_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs) {
  const rt_program *p = &m->d->predict;
  if (rt_check_inputs(m, p, inputs, "predict") || rt_model_set_extents(m, extents, "predict")) return 1;
  if (p->noutputs && !outputs) return rt_model_fail(m, "predict: outputs is NULL");
  for (int k = 0; k < p->noutputs; k++)
    if (!outputs[k]) return rt_model_fail(m, "predict: output '%s' is NULL", m->d->tensors[p->outputs[k]].name);
  if (rt_prepare(m, &m->ps[0], inputs) || rt_run(m, &m->ps[0], p->nsteps)) return 1;
  for (int k = 0; k < p->noutputs; k++) {
    const rt_tensor_info *t = &m->d->tensors[p->outputs[k]];
    if (!m->ptr[p->outputs[k]]) return rt_model_fail(m, "predict: output '%s' has no buffer", t->name);
    memcpy(outputs[k], m->ptr[p->outputs[k]], (size_t)k_shape_numel(&m->tshape[p->outputs[k]]) * 4);
  }
  return 0;
}

int rt_model_predict(rt_model *m, const void *const *inputs, void *const *outputs) {
  return rt_model_predict_at(m, NULL, inputs, outputs);
}

int rt_model_predict_at(rt_model *m, const int64_t *extents, const void *const *inputs, void *const *outputs) {
  if (!m) return 1;
  pthread_mutex_lock(&m->mu);
  int rc = rt_predict_locked(m, extents, inputs, outputs);
  if (!rc) m->err[0] = 0;
  pthread_mutex_unlock(&m->mu);
  return rc;
}

/* Aux states into the snapshot (save) or back from it. */
static void rt_aux_copy(rt_model *m, int restore) {
  float *b = m->aux_backup;
  for (int i = 0; i < m->d->ntensors; i++) {
    const rt_tensor_info *t = &m->d->tensors[i];
    if (t->role != RT_ROLE_AUX) continue;
    size_t bytes = (size_t)rt_tensor_numel(t) * 4;
    if (restore) memcpy(m->tptr[i], b, bytes);
    else memcpy(b, m->tptr[i], bytes);
    b += rt_tensor_numel(t);
  }
}

float rt_loss_sum(const rt_model *m, const rt_program *p) {
  const float *x = m->ptr[p->outputs[0]];
  double sum = 0;
  for (int64_t i = 0; i < k_shape_numel(&m->tshape[p->outputs[0]]); i++) sum += x[i];
  return (float)sum;
}

int rt_first_update(const rt_program *p) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == RT_STEP_UPDATE) return i;
  return p->nsteps;
}

static int rt_train_locked(rt_model *m, const int64_t *extents, const void *const *inputs, float *loss) {
  const rt_program *p = &m->d->train;
  if (!m->d->has_train) return rt_model_fail(m, "train_step: the model has no train statement");
  if (rt_check_inputs(m, p, inputs, "train_step") || rt_model_set_extents(m, extents, "train_step")) return 1;
  if (!loss) return rt_model_fail(m, "train_step: loss is NULL");
  if (p->noutputs != 1) return rt_model_fail(m, "train_step: the program has %d losses, not 1", p->noutputs);
  rt_aux_copy(m, 0);
  m->lr = rt_model_lr_now(m);             /* this step's, from the schedule */
  m->step++;                              /* Adam's t and the random counters start at 1 */
  int rc = rt_prepare(m, &m->ps[1], inputs);
  const float *x = m->ptr[p->outputs[0]];
  if (!rc && !x) rc = rt_model_fail(m, "train_step: the loss has no buffer");
  if (!rc) rc = rt_run(m, &m->ps[1], rt_first_update(p));
  rt_model_weights_changed(m);            /* the updates and the aux states, or their restore */
  if (rc) {
    m->step--, rt_aux_copy(m, 1), rt_comm_settle(m);
    return 1;
  }
  /* with a hook, the sum over the ranks rt_comm_reduce waited for, as their mean */
  *loss = m->has_comm ? m->comm_lossbuf / (float)m->comm.size : rt_loss_sum(m, p);
  return 0;
}

int rt_model_train_step(rt_model *m, const void *const *inputs, float *loss) {
  return rt_model_train_step_at(m, NULL, inputs, loss);
}

int rt_model_train_step_at(rt_model *m, const int64_t *extents, const void *const *inputs, float *loss) {
  if (!m) return 1;
  pthread_mutex_lock(&m->mu);
  int rc = rt_train_locked(m, extents, inputs, loss);
  if (!rc) m->err[0] = 0;
  pthread_mutex_unlock(&m->mu);
  return rc;
}
