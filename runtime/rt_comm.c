/* rt_comm.c — data-parallel training through a kiln_comm (include/kiln_comm.h): the hook set
 * on a model (rt_model_set_comm: rank 0's weights to every rank), and train_step's reduction
 * between its backward steps and its updates (rt_comm_reduce): the loss and the gradients
 * summed across the ranks, the gradients divided by the world size as DDP divides them.
 *
 * The gradients go through one buffer of them all, laid out in the reverse order of the
 * updates (the backward pass writes the last layers' first) and cut into buckets of about
 * bucket_bytes (rt_comm_plan). A bucket is copied in and its allreduce started as soon as
 * the last backward step writing its gradients has run (rt_comm_after_step, when the steps
 * run in order on the caller's thread), so the transport sums it while the backward pass goes
 * on; all are waited for before the first update (rt_comm_reduce). */
#include "rt_model_int.h"
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

enum { RT_COMM_BUCKET_DEFAULT = 25 << 20 };

static int rt_comm_plan(rt_model *m);

/* The elements of every tensor of role `role`. */
static int64_t rt_comm_count(const rt_model *m, int role) {
  int64_t n = 0;
  for (int i = 0; i < m->d->ntensors; i++)
    if (m->d->tensors[i].role == role) n += rt_tensor_numel(&m->d->tensors[i]);
  return n;
}

/* The elements of every update's gradient. */
static int64_t rt_comm_grad_count(const rt_model *m) {
  const rt_program *p = &m->d->train;
  int64_t n = 0;
  for (int i = rt_first_update(p); i < p->nsteps; i++)
    if (p->steps[i].nin >= 2 && p->steps[i].in[0] >= 0) n += rt_tensor_numel(&m->d->tensors[p->steps[i].in[0]]);
  return n;
}

/* One allreduce, started and waited for: 0, or 1 after a message. */
static int rt_comm_sum(rt_model *m, float *buf, int64_t n, const char *what) {
  char err[256] = "";
  void *req = NULL;
  if (m->comm.start(m->comm.ctx, buf, n, &req, err, sizeof err) || m->comm.wait(m->comm.ctx, req, err, sizeof err))
    return rt_model_fail(m, "%s: the allreduce failed on rank %d of %d: %s", what, m->comm.rank, m->comm.size,
                         err[0] ? err : "no message");
  return 0;
}

/* Rank 0's parameters and aux states to every rank: an allreduce of them where every other
 * rank gives zeros (a sum of one term: rank 0's bits, not a rounding of them). */
static int rt_comm_broadcast(rt_model *m) {
  float *b = m->comm_buf;
  for (int i = 0; i < m->d->ntensors; i++) {
    const rt_tensor_info *t = &m->d->tensors[i];
    if (!rt_model_is_weight(t)) continue;
    size_t bytes = (size_t)rt_tensor_numel(t) * 4;
    if (m->comm.rank == 0) memcpy(b, m->tptr[i], bytes);
    else memset(b, 0, bytes);
    b += rt_tensor_numel(t);
  }
  if (b > m->comm_buf && rt_comm_sum(m, m->comm_buf, b - m->comm_buf, "set_comm: rank 0's weights")) return 1;
  b = m->comm_buf;
  for (int i = 0; i < m->d->ntensors; i++) {
    const rt_tensor_info *t = &m->d->tensors[i];
    if (!rt_model_is_weight(t)) continue;
    memcpy(m->tptr[i], b, (size_t)rt_tensor_numel(t) * 4);
    b += rt_tensor_numel(t);
  }
  rt_model_weights_changed(m);
  return 0;
}

static void rt_comm_clear(rt_model *m) {
  free(m->comm_buf), free(m->comm_req), free(m->comm_bucket), free(m->comm_ready), free(m->comm_order);
  free(m->comm_t0), free(m->comm_after);
  m->comm_buf = NULL, m->comm_req = NULL, m->comm_bucket = m->comm_ready = m->comm_order = m->comm_after = NULL;
  m->comm_t0 = NULL;
  m->has_comm = 0, m->rng_salt = 0, m->comm_nb = 0, m->comm_started = 0, m->comm_sync = 0;
  memset(&m->comm, 0, sizeof m->comm);
}

/* A batch_norm(sync=true) step of train_step: its kernel's sums go through the hook, started
 * and waited for inside the step (k_call.sync). */
static int rt_comm_kernel_sum(void *ctx, float *buf, int64_t n, char *err, size_t errn) {
  rt_model *m = ctx;
  void *req = NULL;
  if (m->comm.start(m->comm.ctx, buf, n, &req, err, errn) || m->comm.wait(m->comm.ctx, req, err, errn))
    return m->comm_broke = 1, 1;
  return 0;
}

int rt_step_syncs_bn(const rt_step *s, const void *param) {
  return (s->kind == RT_STEP_FORWARD || s->kind == RT_STEP_BACKWARD) && s->op == K_OPI_batch_norm && param &&
         ((const k_batch_norm_param *)param)->sync;
}

void rt_comm_kernel_hook(const rt_model *m, const rt_step *s, const void *param, k_call *c) {
  if (rt_step_syncs_bn(s, param)) c->sync = &m->comm_ksync;
}

static int rt_comm_set_locked(rt_model *m, const kiln_comm *c) {
  rt_comm_clear(m);
  if (!c) return 0;
  if (!m->d->has_train) return rt_model_fail(m, "set_comm: the model has no train statement");
  if (c->size < 1 || c->rank < 0 || c->rank >= c->size || !c->start || !c->wait || c->bucket_bytes < 0)
    return rt_model_fail(m, "set_comm: a kiln_comm needs 0 <= rank < size, start, wait and bucket_bytes >= 0 (rank %d, size %d)",
                         c->rank, c->size);
  int64_t grads = rt_comm_grad_count(m), weights = rt_comm_count(m, RT_ROLE_PARAM) + rt_comm_count(m, RT_ROLE_AUX);
  int64_t n = grads > weights ? grads : weights;
  m->comm_buf = malloc((size_t)(n + 1) * 4);
  m->comm_req = calloc((size_t)m->d->train.nsteps + 2, sizeof *m->comm_req);   /* the loss's, then a bucket's */
  if (!m->comm_buf || !m->comm_req) return rt_comm_clear(m), rt_model_fail(m, "set_comm: out of memory");
  m->comm = *c;
  if (!m->comm.bucket_bytes) m->comm.bucket_bytes = RT_COMM_BUCKET_DEFAULT;
  m->has_comm = 1;
  for (int i = 0; i < m->d->train.nsteps; i++) m->comm_sync |= rt_step_syncs_bn(&m->d->train.steps[i], m->d->train.steps[i].param);
  m->comm_ksync = (k_sync){rt_comm_kernel_sum, m, c->size};
  m->rng_salt = (uint64_t)c->rank * UINT64_C(0x9E3779B97F4A7C15);   /* rank 0 draws a lone process's masks */
  if (rt_comm_plan(m) || rt_comm_broadcast(m)) return rt_comm_clear(m), 1;
  return 0;
}

int rt_model_set_comm(rt_model *m, const kiln_comm *c) {
  if (!m) return 1;
  pthread_mutex_lock(&m->mu);
  int rc = rt_comm_set_locked(m, c);
  if (!rc) m->err[0] = 0;
  pthread_mutex_unlock(&m->mu);
  return rc;
}

void rt_comm_free(rt_model *m) { rt_comm_clear(m); }

/* ---- train_step: the plan made at set_comm, then each run ---- */

/* The last step before the updates that writes tensor t (an output, or accumulated into by
 * kAddTo), or -1. */
static int rt_comm_last_writer(const rt_program *p, int split, int t) {
  for (int i = split - 1; i >= 0; i--)
    for (int j = 0; j < p->steps[i].nout; j++)
      if (p->steps[i].out[j] == t) return i;
  return -1;
}

/* The buckets: updates [split, nsteps) taken last first, cut after the gradient that brings a
 * bucket to bucket_bytes (a gradient is never split); each ready once the last step writing
 * any of its gradients has run. The loss and the buckets start in the order of their ready
 * steps (ties: bucket order), the same order on every rank whichever engine runs the steps. */
static int rt_comm_plan(rt_model *m) {
  const rt_program *p = &m->d->train;
  int split = rt_first_update(p), nu = p->nsteps - split;
  int64_t cap = m->comm.bucket_bytes / 4 > 0 ? m->comm.bucket_bytes / 4 : 1, fill = 0;
  m->comm_bucket = calloc((size_t)nu + 2, sizeof *m->comm_bucket);
  m->comm_ready = calloc((size_t)nu + 2, sizeof *m->comm_ready);
  m->comm_order = calloc((size_t)nu + 2, sizeof *m->comm_order);
  m->comm_t0 = calloc((size_t)nu + 2, sizeof *m->comm_t0), m->comm_after = calloc((size_t)nu + 2, sizeof *m->comm_after);
  if (!m->comm_bucket || !m->comm_ready || !m->comm_order || !m->comm_t0 || !m->comm_after)
    return rt_model_fail(m, "set_comm: out of memory");
  m->comm_nb = 0;
  for (int k = 0; k < nu; k++) {   /* update k of the reversed list is step nsteps - 1 - k */
    const rt_step *s = &p->steps[p->nsteps - 1 - k];
    if (s->nin < 2 || s->in[0] < 0 || s->in[1] < 0) return rt_model_fail(m, "set_comm: %s has no gradient", s->name);
    if (fill == 0) m->comm_bucket[m->comm_nb] = k, m->comm_ready[m->comm_nb] = -1;
    int w = rt_comm_last_writer(p, split, s->in[1]);
    if (w > m->comm_ready[m->comm_nb]) m->comm_ready[m->comm_nb] = w;
    fill += rt_tensor_numel(&m->d->tensors[s->in[0]]);
    if (fill >= cap || k == nu - 1) m->comm_nb++, fill = 0;
  }
  m->comm_bucket[m->comm_nb] = nu;
  m->comm_loss_ready = rt_comm_last_writer(p, split, p->outputs[0]);
  for (int b = 0; b < m->comm_nb; b++) m->comm_order[b] = b;
  for (int a = 1; a < m->comm_nb; a++)   /* insertion sort by ready step: stable, so ties keep bucket order */
    for (int b = a; b > 0 && m->comm_ready[m->comm_order[b]] < m->comm_ready[m->comm_order[b - 1]]; b--) {
      int t = m->comm_order[b];
      m->comm_order[b] = m->comm_order[b - 1], m->comm_order[b - 1] = t;
    }
  return 0;
}

static int rt_comm_fail(rt_model *m, const char *what, const char *err) {
  m->comm_broke = 1;
  return rt_model_fail(m, "train_step: the allreduce of %s failed on rank %d of %d: %s", what, m->comm.rank, m->comm.size,
                       err[0] ? err : "no message");
}

/* A profiled run notes when each allreduce starts, and after which step (rt_profile_comm). */
static void rt_comm_note_start(rt_model *m, int step) {
  if (!m->prof) return;
  m->comm_t0[m->comm_started] = rt_profile_now(), m->comm_after[m->comm_started] = step;
}

/* The loss's allreduce, started (its sum waited for in rt_comm_reduce). */
static int rt_comm_start_loss(rt_model *m, rt_prog_state *ps) {
  m->comm_lossbuf = rt_loss_sum(m, ps->p);
  char err[256] = "";
  if (m->comm.start(m->comm.ctx, &m->comm_lossbuf, 1, &m->comm_req[0], err, sizeof err)) return rt_comm_fail(m, "the loss", err);
  m->comm_started = 1;
  return 0;
}

/* Update k of the reversed list (the last update first). */
static const rt_step_run *rt_comm_update(const rt_prog_state *ps, int k) { return &ps->sr[ps->p->nsteps - 1 - k]; }

/* Its gradient's elements in use: with bounded dims a gradient's rows follow the extents. */
static int64_t rt_comm_numel(rt_model *m, const rt_step_run *r) { return k_shape_numel(&m->tshape[r->s->in[0]]); }

/* Bucket b's gradients into the buffer (at the offsets this call's extents give) and its
 * allreduce started. */
static int rt_comm_start_bucket(rt_model *m, rt_prog_state *ps, int b) {
  int64_t at = 0;
  for (int k = 0; k < m->comm_bucket[b]; k++) at += rt_comm_numel(m, rt_comm_update(ps, k));
  int64_t from = at;
  for (int k = m->comm_bucket[b]; k < m->comm_bucket[b + 1]; k++) {
    const rt_step_run *r = rt_comm_update(ps, k);
    int64_t n = rt_comm_numel(m, r);
    memcpy(m->comm_buf + at, r->in[1].data, (size_t)n * 4);
    at += n;
  }
  char err[256] = "";
  if (m->comm.start(m->comm.ctx, m->comm_buf + from, at - from, &m->comm_req[1 + b], err, sizeof err))
    return rt_comm_fail(m, "the gradients", err);
  m->comm_started++;
  return 0;
}

/* Bucket b's elements at the descriptor's sizes (the bounds), for the profile. */
static int64_t rt_comm_bucket_elements(const rt_model *m, int b) {
  const rt_program *p = &m->d->train;
  int64_t n = 0;
  for (int k = m->comm_bucket[b]; k < m->comm_bucket[b + 1]; k++) n += rt_tensor_numel(&m->d->tensors[p->steps[p->nsteps - 1 - k].in[0]]);
  return n;
}

/* The next items in the start order (the loss first, then the buckets by ready step) whose
 * ready step is at most `step`. */
static int rt_comm_start_ready(rt_model *m, rt_prog_state *ps, int step) {
  if (m->comm_started == 0) {   /* comm_started: 0, the loss, then the loss and that many buckets - 1 */
    if (m->comm_loss_ready > step) return 0;
    rt_comm_note_start(m, step);
    if (rt_comm_start_loss(m, ps)) return 1;
  }
  while (m->comm_started <= m->comm_nb) {
    int b = m->comm_order[m->comm_started - 1];
    if (m->comm_ready[b] > step) return 0;
    rt_comm_note_start(m, step);
    if (rt_comm_start_bucket(m, ps, b)) return 1;
  }
  return 0;
}

int rt_comm_after_step(rt_model *m, rt_prog_state *ps, int step) {
  if (ps != &m->ps[1] || step >= rt_first_update(ps->p)) return 0;
  if (m->comm_started && m->comm.progress) m->comm.progress(m->comm.ctx);
  return rt_comm_start_ready(m, ps, step);
}

/* Waits for every allreduce started (after this rank's own failure too: the other ranks joined
 * them, so they end), and forgets them; the first failure's message, unless rc is set already.
 * Once a wait fails (a rank is gone: the transport's timeout) the rest are left unwaited, not
 * each waited for to its own timeout. */
static int rt_comm_wait_started(rt_model *m, int rc) {
  char err[256] = "";
  bool gone = false;
  for (int k = 0; k < m->comm_started && !gone; k++) {
    int b = k == 0 ? -1 : m->comm_order[k - 1];
    if ((gone = m->comm.wait(m->comm.ctx, m->comm_req[1 + b], err, sizeof err) != 0) && !rc)
      rc = rt_comm_fail(m, k == 0 ? "the loss" : "the gradients", err);
    if (m->prof) rt_profile_comm(m->prof, b, m->comm_after[k], b < 0 ? 1 : rt_comm_bucket_elements(m, b), m->comm_t0[k], rt_profile_now());
  }
  m->comm_started = 0;
  return rc;
}

void rt_comm_settle(rt_model *m) {
  if (!m->has_comm) return;
  if (!m->comm_broke && m->comm.failed) m->comm.failed(m->comm.ctx, m->err);   /* its own failure: the others learn why */
  if (m->comm_started) rt_comm_wait_started(m, 1);
  m->comm_broke = 0;
}

int rt_comm_reduce(rt_model *m, rt_prog_state *ps, int first) {
  if (!m->has_comm) return 0;
  int rc = rt_comm_start_ready(m, ps, first);   /* those the run did not start (the threaded engine: all) */
  if (rt_comm_wait_started(m, rc)) return 1;
  const float *b = m->comm_buf;
  float size = (float)m->comm.size;
  for (int k = 0; k < m->comm_bucket[m->comm_nb]; k++) {
    const rt_step_run *r = rt_comm_update(ps, k);
    float *g = r->in[1].data;
    int64_t n = rt_comm_numel(m, r);
    for (int64_t j = 0; j < n; j++) g[j] = b[j] / size;
    b += n;
  }
  return 0;
}
