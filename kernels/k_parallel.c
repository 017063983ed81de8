/* k_parallel.c — k_parallel_for on a persistent pthread pool (the contract is in k_parallel.h).
 *
 * How it works. A loop is a k_job on its caller's stack: the workers and the caller claim
 * chunk numbers from its atomic counter until none are left. The caller publishes the job
 * under the pool mutex and bumps a generation number; sleeping workers wake on work_cv, join
 * the job (users++) and leave it (users--) when no chunk is left to claim. The caller, out of
 * chunks itself, unpublishes the job and waits on done_cv until users is 0: then every chunk
 * has finished and no worker can touch the job on its stack any more. One loop holds the
 * pool at a time (a trylock); any other caller runs its chunks itself. */
#define _GNU_SOURCE
#include "k_parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
  k_range_fn fn;
  void *ctx;
  int64_t n, grain, nchunks;
  atomic_llong next;            /* next chunk number to claim */
  int users;                    /* workers inside the job (pool mutex) */
} k_job;

static struct {
  pthread_mutex_t mu;           /* guards everything below */
  pthread_cond_t work_cv;       /* a job was published, or the workers must stop */
  pthread_cond_t done_cv;       /* a worker left the job */
  k_job *job;                   /* the published job, NULL between loops */
  uint64_t gen;                 /* bumped at every publish, so a worker joins a job once */
  int stop;                     /* workers exit */
  int nworkers;                 /* started workers */
  pthread_t *workers;
  int nthreads;                 /* wanted size, caller included; 0 until first read */
  int closed;                   /* unloaded: every loop runs on its caller */
} g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .work_cv = PTHREAD_COND_INITIALIZER, .done_cv = PTHREAD_COND_INITIALIZER};

/* Held by the loop that owns the pool, and by resizing and shutdown. */
static pthread_mutex_t g_turn = PTHREAD_MUTEX_INITIALIZER;

/* Set inside a chunk (and for the workers' whole life): nested loops run inline. */
static _Thread_local int t_inside;

/* ---- sizing ---------------------------------------------------------------------------- */

int k_parallel_env_threads(void) {
  const char *s = getenv("KILN_NUM_THREADS");
  if (!s || !*s) return 0;
  char *end;
  long n = strtol(s, &end, 10);
  if (*end == '\0' && n >= 1 && n <= 1024) return (int)n;
  fprintf(stderr, "kiln: ignoring KILN_NUM_THREADS='%s' (want 1..1024)\n", s);
  return 0;
}

int k_parallel_cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (int)n;
}

static int k_par_default_threads(void) {
  int n = k_parallel_env_threads();
  return n > 0 ? n : k_parallel_cpu_count();
}

int k_parallel_threads(void) {
  pthread_mutex_lock(&g_pool.mu);
  if (!g_pool.nthreads) g_pool.nthreads = k_par_default_threads();
  int n = g_pool.nthreads;
  pthread_mutex_unlock(&g_pool.mu);
  return n;
}

/* ---- running chunks -------------------------------------------------------------------- */

static void k_par_run_chunks(k_job *j) {
  for (;;) {
    int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
    if (c >= j->nchunks) return;
    int64_t lo = c * j->grain, hi = lo + j->grain < j->n ? lo + j->grain : j->n;
    j->fn(j->ctx, lo, hi);
  }
}

static void *k_par_worker(void *arg) {
  (void)arg;
  t_inside = 1;
  uint64_t seen = 0;
  pthread_mutex_lock(&g_pool.mu);
  for (;;) {
    while (!g_pool.stop && (!g_pool.job || g_pool.gen == seen)) pthread_cond_wait(&g_pool.work_cv, &g_pool.mu);
    if (g_pool.stop) break;
    seen = g_pool.gen;
    k_job *j = g_pool.job;
    j->users++;
    pthread_mutex_unlock(&g_pool.mu);
    k_par_run_chunks(j);
    pthread_mutex_lock(&g_pool.mu);
    if (--j->users == 0) pthread_cond_signal(&g_pool.done_cv);
  }
  pthread_mutex_unlock(&g_pool.mu);
  return NULL;
}

/* Starts the workers if they are not running; 0 when the pool cannot be used (closed, or
 * one thread wanted, or no thread could be started). g_turn held. */
static int k_par_ensure_workers(void) {
  pthread_mutex_lock(&g_pool.mu);
  if (!g_pool.nthreads) g_pool.nthreads = k_par_default_threads();
  int want = g_pool.closed ? 0 : g_pool.nthreads - 1;
  if (want > 0 && !g_pool.workers) {
    g_pool.workers = calloc((size_t)want, sizeof *g_pool.workers);
    g_pool.stop = 0;
    for (int i = 0; g_pool.workers && i < want; i++) {
      if (pthread_create(&g_pool.workers[i], NULL, k_par_worker, NULL) != 0) break;
      g_pool.nworkers++;  /* fewer workers than wanted still run every chunk */
    }
  }
  int usable = g_pool.nworkers > 0;
  pthread_mutex_unlock(&g_pool.mu);
  return usable;
}

/* Stops and joins the workers; the next loop starts new ones. g_turn held. */
static void k_par_stop_workers(void) {
  pthread_mutex_lock(&g_pool.mu);
  g_pool.stop = 1;
  pthread_cond_broadcast(&g_pool.work_cv);
  int n = g_pool.nworkers;
  pthread_t *w = g_pool.workers;
  pthread_mutex_unlock(&g_pool.mu);
  for (int i = 0; i < n; i++) pthread_join(w[i], NULL);
  pthread_mutex_lock(&g_pool.mu);
  free(w);
  g_pool.workers = NULL;
  g_pool.nworkers = 0;
  pthread_mutex_unlock(&g_pool.mu);
}

/* A loop of several chunks marks its chunks as nested even when it runs them all itself, so
 * that k_parallel_nested() says the same with any thread count. */
static void k_par_inline(int64_t n, int64_t grain, k_range_fn fn, void *ctx) {
  int outer = t_inside;
  if (n > grain) t_inside = 1;
  for (int64_t lo = 0; lo < n; lo += grain) fn(ctx, lo, lo + grain < n ? lo + grain : n);
  t_inside = outer;
}

int k_parallel_nested(void) { return t_inside; }

/* Publishes j, runs chunks alongside the workers, and returns once all have finished. */
static void k_par_run_pooled(k_job *j) {
  pthread_mutex_lock(&g_pool.mu);
  g_pool.job = j;
  g_pool.gen++;
  pthread_cond_broadcast(&g_pool.work_cv);
  pthread_mutex_unlock(&g_pool.mu);
  t_inside = 1;
  k_par_run_chunks(j);
  t_inside = 0;
  pthread_mutex_lock(&g_pool.mu);
  g_pool.job = NULL;
  while (j->users > 0) pthread_cond_wait(&g_pool.done_cv, &g_pool.mu);
  pthread_mutex_unlock(&g_pool.mu);
}

void k_parallel_for(int64_t n, int64_t grain, k_range_fn fn, void *ctx) {
  if (grain < 1) grain = 1;
  int64_t nchunks = k_parallel_chunks(n, grain);
  if (nchunks <= 1 || t_inside || pthread_mutex_trylock(&g_turn) != 0) {
    k_par_inline(n, grain, fn, ctx);
    return;
  }
  if (!k_par_ensure_workers()) {
    pthread_mutex_unlock(&g_turn);
    k_par_inline(n, grain, fn, ctx);
    return;
  }
  k_job j = {fn, ctx, n, grain, nchunks, 0, 0};
  k_par_run_pooled(&j);
  pthread_mutex_unlock(&g_turn);
}

void k_parallel_set_threads(int n) {
  pthread_mutex_lock(&g_turn);
  k_par_stop_workers();
  pthread_mutex_lock(&g_pool.mu);
  g_pool.nthreads = n > 0 ? n : k_par_default_threads();
  pthread_mutex_unlock(&g_pool.mu);
  pthread_mutex_unlock(&g_turn);
}

/* When the shared object holding the kernels is unloaded (dlclose) or the process exits, the
 * workers must stop first: their code is about to be unmapped. Loops that still come (another
 * destructor draining an engine) run on their caller. */
__attribute__((destructor)) static void k_par_unload(void) {
  pthread_mutex_lock(&g_turn);
  k_par_stop_workers();
  pthread_mutex_lock(&g_pool.mu);
  g_pool.closed = 1;
  pthread_mutex_unlock(&g_pool.mu);
  pthread_mutex_unlock(&g_turn);
}
