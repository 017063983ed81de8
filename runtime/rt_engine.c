/* rt_engine.c — the dependency engine: functions pushed with const and mutate variables run
 * as soon as the functions they depend on have finished. Naive runs each at push, in the
 * pushing thread; threaded hands ready functions to a pool of workers.
 *
 * How it works. Every variable keeps a FIFO of the pushed functions that wait for it, plus
 * how many granted readers are running and whether a granted writer is. The head of the
 * FIFO is granted while that is safe: readers go together, a writer goes alone once the
 * readers before it are done. A pushed function ("block") counts the variables that have not
 * granted it yet; at zero it is ready. One engine mutex guards all of this; functions run
 * outside it. The FIFO order is the push order, which is the ordering guarantee. */
#include "runtime.h"

#include "k_parallel.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rt_block rt_block;

typedef struct rt_vwait {     /* one block waiting in a variable's FIFO */
  rt_block *blk;
  int write;
  struct rt_vwait *next;
} rt_vwait;

struct rt_var {
  rt_vwait *head, *tail;
  int readers;                /* granted readers still running */
  int writing;                /* a granted writer is running */
  int err;                    /* status of the failure recorded here, 0 if none */
  uint64_t err_seq;           /* push number of the function that failed first */
  char msg[RT_ERR_LEN];
  rt_var *prev, *next;        /* the engine's list of live variables */
};

struct rt_opr {
  rt_sync_fn sfn;
  rt_async_fn afn;
  void *arg;
  void (*arg_free)(void *);   /* push_sync_x: runs once the function ran or was skipped */
  rt_var **vars;              /* [0, nconst) read, [nconst, nconst + nmut) written */
  int nconst, nmut;
  int temporary;              /* made by a push_sync/async: freed after its one run */
  int inflight;               /* pushed blocks not finished */
  int dead;                   /* delete_operator was called */
  rt_var *delete_var;         /* set for the function a push_delete makes */
  rt_opr *prev, *next;        /* the engine's list of user operators */
};

struct rt_block {
  rt_run_ctx rc;              /* first: rt_engine_complete gets back to the block from it */
  rt_engine *eng;
  rt_opr *op;
  int wait;                   /* variables that have not granted this block yet */
  uint64_t seq;
  int skip;                   /* inherited failure: do not call the function */
  uint64_t skip_seq;
  rt_block *next;             /* ready queue */
  char err[RT_ERR_LEN];
};

struct rt_engine {
  rt_engine_kind kind;
  int nthreads;
  pthread_mutex_t mu;
  pthread_cond_t work_cv;     /* a block became ready, or shutdown */
  pthread_cond_t idle_cv;     /* a block finished */
  rt_block *ready_head, *ready_tail;
  int64_t pending;            /* pushed blocks not finished */
  uint64_t seq;
  int shutdown;
  pthread_t *threads;
  rt_var *vars;
  int nvars;
  rt_opr *oprs;
  int err;                    /* first failure since the last wait_for_all */
  uint64_t err_seq;
  char msg[RT_ERR_LEN];
};

/* The engine cannot report running out of memory to a function that is already queued,
 * so it stops the process instead of losing an ordering promise. */
static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) {
    fputs("kiln runtime: out of memory in the engine\n", stderr);
    abort();
  }
  return p;
}

static void copy_msg(char *dst, size_t len, const char *src) {
  if (dst && len) snprintf(dst, len, "%s", src);
}

/* ---- granting ------------------------------------------------------------------------ */

static void make_ready(rt_engine *e, rt_block *b);

static void grant(rt_engine *e, rt_block *b) {
  if (--b->wait == 0) make_ready(e, b);
}

/* Grants the head of v's FIFO while that keeps readers and writers apart. Lock held. */
static void var_dispatch(rt_engine *e, rt_var *v) {
  while (v->head && !v->writing) {
    rt_vwait *w = v->head;
    if (w->write && v->readers) break;
    if (w->write) v->writing = 1;
    else v->readers++;
    v->head = w->next;
    if (!v->head) v->tail = NULL;
    rt_block *b = w->blk;
    free(w);
    grant(e, b);
  }
}

static void var_append(rt_var *v, rt_block *b, int write) {
  rt_vwait *w = xcalloc(1, sizeof *w);
  w->blk = b;
  w->write = write;
  if (v->tail) v->tail->next = w;
  else v->head = w;
  v->tail = w;
}

/* All variables of b have granted it, so every writer before it has finished: whether one
 * of them failed is settled now, which makes skipping deterministic. Lock held. */
static void decide_skip(rt_block *b) {
  rt_opr *op = b->op;
  if (op->delete_var) return;  /* deleting must happen even after a failure */
  for (int i = 0; i < op->nconst + op->nmut; i++) {
    rt_var *v = op->vars[i];
    if (v->err && (!b->skip || v->err_seq < b->skip_seq)) {
      b->skip = v->err;
      b->skip_seq = v->err_seq;
      copy_msg(b->err, sizeof b->err, v->msg);
    }
  }
}

static void make_ready(rt_engine *e, rt_block *b) {
  decide_skip(b);
  if (e->ready_tail) e->ready_tail->next = b;
  else e->ready_head = b;
  e->ready_tail = b;
  pthread_cond_signal(&e->work_cv);
}

static rt_block *pop_ready(rt_engine *e) {
  rt_block *b = e->ready_head;
  if (!b) return NULL;
  e->ready_head = b->next;
  if (!e->ready_head) e->ready_tail = NULL;
  b->next = NULL;
  return b;
}

/* ---- finishing ----------------------------------------------------------------------- */

static void var_unlink_free(rt_engine *e, rt_var *v) {
  if (v->prev) v->prev->next = v->next;
  else e->vars = v->next;
  if (v->next) v->next->prev = v->prev;
  e->nvars--;
  free(v);
}

static void opr_unlink_free(rt_engine *e, rt_opr *op) {
  if (!op->temporary) {
    if (op->prev) op->prev->next = op->next;
    else e->oprs = op->next;
    if (op->next) op->next->prev = op->prev;
  }
  free(op->vars);
  free(op);
}

/* Records a failure (new or inherited) on the block's mutated variables and the engine. */
static void record_error(rt_engine *e, rt_block *b, int status) {
  uint64_t seq = b->skip ? b->skip_seq : b->seq;
  if (!b->skip && !b->err[0]) snprintf(b->err, sizeof b->err, "function failed with status %d", status);
  rt_opr *op = b->op;
  for (int i = op->nconst; i < op->nconst + op->nmut; i++) {
    rt_var *v = op->vars[i];
    if (v->err && v->err_seq <= seq) continue;
    v->err = status;
    v->err_seq = seq;
    copy_msg(v->msg, sizeof v->msg, b->err);
  }
  if (!e->err || seq < e->err_seq) {
    e->err = status;
    e->err_seq = seq;
    copy_msg(e->msg, sizeof e->msg, b->err);
  }
}

static void release_vars(rt_engine *e, rt_opr *op) {
  for (int i = 0; i < op->nconst; i++) {
    op->vars[i]->readers--;
    var_dispatch(e, op->vars[i]);
  }
  for (int i = op->nconst; i < op->nconst + op->nmut; i++) {
    rt_var *v = op->vars[i];
    v->writing = 0;
    if (v == op->delete_var) var_unlink_free(e, v);
    else var_dispatch(e, v);
  }
}

/* arg_free runs before the variables are released, so whatever it frees is not yet visible
 * to the next function on them. */
static void finish(rt_engine *e, rt_block *b, int status) {
  if (b->op->arg_free) b->op->arg_free(b->op->arg);
  pthread_mutex_lock(&e->mu);
  if (status) record_error(e, b, status);
  rt_opr *op = b->op;
  release_vars(e, op);
  op->inflight--;
  if (op->temporary || (op->dead && op->inflight == 0)) opr_unlink_free(e, op);
  e->pending--;
  pthread_cond_broadcast(&e->idle_cv);
  pthread_mutex_unlock(&e->mu);
  free(b);
}

void rt_engine_complete(rt_run_ctx *rc, int status) {
  rt_block *b = (rt_block *)rc;  /* rc is the block's first member */
  finish(b->eng, b, status);
}

static void run_block(rt_engine *e, rt_block *b, int worker) {
  b->rc.worker = worker;
  if (b->skip) {
    finish(e, b, b->skip);
    return;
  }
  rt_opr *op = b->op;
  if (op->afn) op->afn(op->arg, &b->rc);
  else finish(e, b, op->sfn ? op->sfn(op->arg, &b->rc) : 0);
}

/* ---- workers ------------------------------------------------------------------------- */

typedef struct { rt_engine *eng; int idx; } worker_arg;

static void *worker_main(void *p) {
  worker_arg wa = *(worker_arg *)p;
  free(p);
  rt_engine *e = wa.eng;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while (!e->ready_head && !e->shutdown) pthread_cond_wait(&e->work_cv, &e->mu);
    rt_block *b = pop_ready(e);
    if (!b) break;  /* shutdown with nothing left */
    pthread_mutex_unlock(&e->mu);
    run_block(e, b, wa.idx);
    pthread_mutex_lock(&e->mu);
  }
  pthread_mutex_unlock(&e->mu);
  rt_temp_thread_release();
  return NULL;
}

/* The naive engine runs what became ready in the pushing thread, then waits for async
 * functions, so each push returns with its function finished. */
static void drain_inline(rt_engine *e) {
  pthread_mutex_lock(&e->mu);
  for (;;) {
    rt_block *b = pop_ready(e);
    if (!b) break;
    pthread_mutex_unlock(&e->mu);
    run_block(e, b, -1);
    pthread_mutex_lock(&e->mu);
  }
  while (e->pending > 0) pthread_cond_wait(&e->idle_cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

/* ---- creation ------------------------------------------------------------------------ */

rt_engine *rt_engine_create(rt_engine_kind kind, int nthreads) {
  rt_engine *e = xcalloc(1, sizeof *e);
  e->kind = kind;
  e->nthreads = kind == RT_ENGINE_NAIVE ? 0 : (nthreads > 0 ? nthreads : k_parallel_cpu_count());
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->work_cv, NULL);
  pthread_cond_init(&e->idle_cv, NULL);
  e->threads = xcalloc((size_t)e->nthreads, sizeof *e->threads);
  for (int i = 0; i < e->nthreads; i++) {
    worker_arg *wa = xcalloc(1, sizeof *wa);
    *wa = (worker_arg){e, i};
    if (pthread_create(&e->threads[i], NULL, worker_main, wa) != 0) {
      fputs("kiln runtime: cannot start an engine worker thread\n", stderr);
      abort();
    }
  }
  return e;
}

/* The default is the naive engine: a compiled program is mostly one chain (the memory plan
 * reuses buffers, which orders the steps), and handing each step to a worker cost the MLP
 * 1.6x in training (bench/README.md). KILN_ENGINE=threaded runs independent steps together. */
rt_engine *rt_engine_create_from_env(void) {
  const char *s = getenv("KILN_ENGINE");
  rt_engine_kind kind = RT_ENGINE_NAIVE;
  if (s && strcmp(s, "threaded") == 0) kind = RT_ENGINE_THREADED;
  else if (s && *s && strcmp(s, "naive") != 0)
    fprintf(stderr, "kiln runtime: unknown KILN_ENGINE='%s'; using naive\n", s);
  return rt_engine_create(kind, k_parallel_env_threads());
}

static pthread_mutex_t g_default_mu = PTHREAD_MUTEX_INITIALIZER;
static rt_engine *g_default;

rt_engine *rt_engine_default(void) {
  pthread_mutex_lock(&g_default_mu);
  if (!g_default) g_default = rt_engine_create_from_env();
  rt_engine *e = g_default;
  pthread_mutex_unlock(&g_default_mu);
  return e;
}

void rt_engine_shutdown_default(void) {
  pthread_mutex_lock(&g_default_mu);
  rt_engine *e = g_default;
  g_default = NULL;
  pthread_mutex_unlock(&g_default_mu);
  if (e) rt_engine_destroy(e);
}

/* When the shared object holding this runtime is unloaded (dlclose) or the process exits,
 * the default engine's workers must stop first: their code is about to be unmapped. */
__attribute__((destructor)) static void rt_engine_unload(void) { rt_engine_shutdown_default(); }

void rt_engine_destroy(rt_engine *e) {
  if (!e) return;
  rt_engine_wait_for_all(e, NULL, 0);
  pthread_mutex_lock(&e->mu);
  e->shutdown = 1;
  pthread_cond_broadcast(&e->work_cv);
  pthread_mutex_unlock(&e->mu);
  for (int i = 0; i < e->nthreads; i++) pthread_join(e->threads[i], NULL);
  while (e->vars) var_unlink_free(e, e->vars);
  while (e->oprs) opr_unlink_free(e, e->oprs);
  free(e->threads);
  pthread_cond_destroy(&e->work_cv);
  pthread_cond_destroy(&e->idle_cv);
  pthread_mutex_destroy(&e->mu);
  free(e);
}

rt_engine_kind rt_engine_get_kind(const rt_engine *e) { return e->kind; }
int rt_engine_num_threads(const rt_engine *e) { return e->nthreads; }

int rt_engine_num_vars(rt_engine *e) {
  pthread_mutex_lock(&e->mu);
  int n = e->nvars;
  pthread_mutex_unlock(&e->mu);
  return n;
}

/* ---- variables and operators ---------------------------------------------------------- */

rt_var *rt_engine_new_var(rt_engine *e) {
  rt_var *v = xcalloc(1, sizeof *v);
  pthread_mutex_lock(&e->mu);
  v->next = e->vars;
  if (e->vars) e->vars->prev = v;
  e->vars = v;
  e->nvars++;
  pthread_mutex_unlock(&e->mu);
  return v;
}

static int has_var(rt_var *const *vs, int n, const rt_var *v) {
  for (int i = 0; i < n; i++)
    if (vs[i] == v) return 1;
  return 0;
}

/* Copies the variable lists without duplicates; a variable both read and written counts as
 * written only, since granting it twice to one function would deadlock. */
static rt_opr *make_opr(rt_var *const *cv, int nc, rt_var *const *mv, int nm) {
  rt_opr *op = xcalloc(1, sizeof *op);
  op->vars = xcalloc((size_t)(nc + nm), sizeof *op->vars);
  for (int i = 0; i < nc; i++)
    if (!has_var(mv, nm, cv[i]) && !has_var(op->vars, op->nconst, cv[i]))
      op->vars[op->nconst++] = cv[i];
  for (int i = 0; i < nm; i++)
    if (!has_var(op->vars + op->nconst, op->nmut, mv[i]))
      op->vars[op->nconst + op->nmut++] = mv[i];
  return op;
}

static void push_block(rt_engine *e, rt_opr *op) {
  rt_block *b = xcalloc(1, sizeof *b);
  b->eng = e;
  b->op = op;
  b->rc.err = b->err;
  b->rc.err_len = sizeof b->err;
  pthread_mutex_lock(&e->mu);
  b->seq = ++e->seq;
  op->inflight++;
  e->pending++;
  b->wait = 1 + op->nconst + op->nmut;  /* the 1 keeps it from running mid-push */
  for (int i = 0; i < op->nconst + op->nmut; i++) var_append(op->vars[i], b, i >= op->nconst);
  for (int i = 0; i < op->nconst + op->nmut; i++) var_dispatch(e, op->vars[i]);
  grant(e, b);
  pthread_mutex_unlock(&e->mu);
  if (e->kind == RT_ENGINE_NAIVE) drain_inline(e);
}

void rt_engine_push_sync(rt_engine *e, rt_sync_fn fn, void *arg, rt_var *const *const_vars,
                         int nconst, rt_var *const *mutate_vars, int nmutate) {
  rt_opr *op = make_opr(const_vars, nconst, mutate_vars, nmutate);
  op->sfn = fn;
  op->arg = arg;
  op->temporary = 1;
  push_block(e, op);
}

void rt_engine_push_sync_x(rt_engine *e, rt_sync_fn fn, void *arg, void (*arg_free)(void *),
                           rt_var *const *const_vars, int nconst, rt_var *const *mutate_vars,
                           int nmutate) {
  rt_opr *op = make_opr(const_vars, nconst, mutate_vars, nmutate);
  op->sfn = fn;
  op->arg = arg;
  op->arg_free = arg_free;
  op->temporary = 1;
  push_block(e, op);
}

void rt_engine_push_async(rt_engine *e, rt_async_fn fn, void *arg, rt_var *const *const_vars,
                          int nconst, rt_var *const *mutate_vars, int nmutate) {
  rt_opr *op = make_opr(const_vars, nconst, mutate_vars, nmutate);
  op->afn = fn;
  op->arg = arg;
  op->temporary = 1;
  push_block(e, op);
}

void rt_engine_push_delete(rt_engine *e, rt_var *v) {
  rt_opr *op = make_opr(NULL, 0, &v, 1);
  op->delete_var = v;
  op->temporary = 1;
  push_block(e, op);
}

static rt_opr *new_operator(rt_engine *e, rt_opr *op) {
  pthread_mutex_lock(&e->mu);
  op->next = e->oprs;
  if (e->oprs) e->oprs->prev = op;
  e->oprs = op;
  pthread_mutex_unlock(&e->mu);
  return op;
}

rt_opr *rt_engine_new_operator(rt_engine *e, rt_sync_fn fn, void *arg, rt_var *const *const_vars,
                               int nconst, rt_var *const *mutate_vars, int nmutate) {
  rt_opr *op = make_opr(const_vars, nconst, mutate_vars, nmutate);
  op->sfn = fn;
  op->arg = arg;
  return new_operator(e, op);
}

rt_opr *rt_engine_new_operator_async(rt_engine *e, rt_async_fn fn, void *arg,
                                     rt_var *const *const_vars, int nconst,
                                     rt_var *const *mutate_vars, int nmutate) {
  rt_opr *op = make_opr(const_vars, nconst, mutate_vars, nmutate);
  op->afn = fn;
  op->arg = arg;
  return new_operator(e, op);
}

void rt_engine_push_operator(rt_engine *e, rt_opr *op) { push_block(e, op); }

void rt_engine_delete_operator(rt_engine *e, rt_opr *op) {
  pthread_mutex_lock(&e->mu);
  op->dead = 1;
  if (op->inflight == 0) opr_unlink_free(e, op);
  pthread_mutex_unlock(&e->mu);
}

/* ---- waiting ------------------------------------------------------------------------- */

static int var_busy(const rt_var *v) { return v->head || v->readers || v->writing; }

int rt_engine_wait_for_var(rt_engine *e, rt_var *v, char *msg, size_t msg_len) {
  pthread_mutex_lock(&e->mu);
  while (var_busy(v)) pthread_cond_wait(&e->idle_cv, &e->mu);
  int status = v->err;
  copy_msg(msg, msg_len, status ? v->msg : "");
  if (status && e->err && e->err_seq == v->err_seq) e->err = 0;  /* reported now */
  v->err = 0;
  pthread_mutex_unlock(&e->mu);
  return status;
}

int rt_engine_wait_for_all(rt_engine *e, char *msg, size_t msg_len) {
  pthread_mutex_lock(&e->mu);
  while (e->pending > 0) pthread_cond_wait(&e->idle_cv, &e->mu);
  int status = e->err;
  copy_msg(msg, msg_len, status ? e->msg : "");
  e->err = 0;
  for (rt_var *v = e->vars; v; v = v->next) v->err = 0;
  pthread_mutex_unlock(&e->mu);
  return status;
}
