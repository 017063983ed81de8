/* rt_comm.c — data-parallel training through a kiln_comm (include/kiln_comm.h): the hook set
 * on a model (rt_model_set_comm: rank 0's weights to every rank), and train_step's reduction
 * between its backward steps and its updates (rt_comm_reduce): the loss and the gradients
 * summed across the ranks, the gradients divided by the world size as DDP divides them.
 *
 * The gradients go through one buffer of them all, filled in the reverse order of the
 * updates (the backward pass writes the last layers' first), cut into buckets of about
 * bucket_bytes; each bucket's allreduce starts as soon as it is filled, so the transport
 * works on one while the next is copied in, and all are waited for before any update. */
#include "rt_model_int.h"

#include <stdlib.h>
#include <string.h>

enum { RT_COMM_BUCKET_DEFAULT = 25 << 20 };

/* The elements of every tensor of role `role`, and of every update's gradient. */
static int64_t rt_comm_count(const rt_model *m, int role) {
  int64_t n = 0;
  for (int i = 0; i < m->d->ntensors; i++)
    if (m->d->tensors[i].role == role) n += rt_tensor_numel(&m->d->tensors[i]);
  return n;
}

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
  free(m->comm_buf), free(m->comm_req);
  m->comm_buf = NULL, m->comm_req = NULL, m->has_comm = 0, m->rng_salt = 0;
  memset(&m->comm, 0, sizeof m->comm);
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
  m->comm_req = calloc((size_t)m->d->train.nsteps + 1, sizeof *m->comm_req);
  if (!m->comm_buf || !m->comm_req) return rt_comm_clear(m), rt_model_fail(m, "set_comm: out of memory");
  m->comm = *c;
  if (!m->comm.bucket_bytes) m->comm.bucket_bytes = RT_COMM_BUCKET_DEFAULT;
  m->has_comm = 1;
  m->rng_salt = (uint64_t)c->rank * UINT64_C(0x9E3779B97F4A7C15);   /* rank 0 draws a lone process's masks */
  if (rt_comm_broadcast(m)) return rt_comm_clear(m), 1;
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

/* The gradients of updates [first, nsteps), last first, into the buffer; a bucket's allreduce
 * starts once it holds bucket_bytes (or the last gradient). *nreq gets the buckets started. */
static int rt_comm_start_buckets(rt_model *m, rt_prog_state *ps, int first, int *nreq, int64_t *len) {
  const rt_program *p = ps->p;
  int64_t at = 0, from = 0, cap = m->comm.bucket_bytes / 4 > 0 ? m->comm.bucket_bytes / 4 : 1;
  char err[256] = "";
  *nreq = 0;
  for (int i = p->nsteps - 1; i >= first; i--) {
    const rt_step_run *r = &ps->sr[i];
    int64_t n = k_shape_numel(&m->tshape[r->s->in[0]]);
    memcpy(m->comm_buf + at, r->in[1].data, (size_t)n * 4);
    at += n;
    if (at - from < cap && i > first) continue;
    len[*nreq] = at - from;
    if (m->comm.start(m->comm.ctx, m->comm_buf + from, at - from, &m->comm_req[*nreq], err, sizeof err))
      return rt_model_fail(m, "train_step: the allreduce of the gradients failed on rank %d of %d: %s", m->comm.rank,
                           m->comm.size, err[0] ? err : "no message");
    ++*nreq, from = at;
  }
  return 0;
}

int rt_comm_reduce(rt_model *m, rt_prog_state *ps, int first) {
  if (!m->has_comm) return 0;
  const rt_program *p = ps->p;
  const float *x = m->ptr[p->outputs[0]];
  double sum = 0;
  for (int64_t i = 0; i < k_shape_numel(&m->tshape[p->outputs[0]]); i++) sum += x[i];
  float loss = (float)sum;
  if (rt_comm_sum(m, &loss, 1, "train_step: the loss")) return 1;
  m->comm_loss = loss / (float)m->comm.size;
  int64_t *len = malloc(sizeof *len * (size_t)(p->nsteps + 1));
  int nreq = 0, rc = len ? rt_comm_start_buckets(m, ps, first, &nreq, len) : rt_model_fail(m, "train_step: out of memory");
  char err[256] = "";
  for (int k = 0; k < nreq; k++)   /* every started one is waited for, even after a failure */
    if (m->comm.wait(m->comm.ctx, m->comm_req[k], err, sizeof err) && !rc)
      rc = rt_model_fail(m, "train_step: the allreduce of the gradients failed on rank %d of %d: %s", m->comm.rank,
                         m->comm.size, err[0] ? err : "no message");
  free(len);
  if (rc) return 1;
  const float *b = m->comm_buf;
  float size = (float)m->comm.size;
  for (int i = p->nsteps - 1; i >= first; i--) {
    const rt_step_run *r = &ps->sr[i];
    float *g = r->in[1].data;
    for (int64_t j = 0, n = k_shape_numel(&m->tshape[r->s->in[0]]); j < n; j++) g[j] = b[j] / size;
    b += k_shape_numel(&m->tshape[r->s->in[0]]);
  }
  return 0;
}
