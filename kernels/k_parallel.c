/* k_parallel.c — k_parallel_for on a persistent pthread pool (the contract is in k_parallel.h).
 *
 * How it works. A loop is a k_job on its caller's stack: the workers and the caller claim
 * runs of chunks from its homes (k_par_run_chunks) until none are left. The caller publishes the job
 * (g_pool.job, then a new generation number) and runs chunks itself; a worker announces
 * itself in g_pool.active before it reads g_pool.job and leaves it when it is out of chunks.
 * The caller, out of chunks, unpublishes the job and waits until active is 0: every chunk has
 * then finished, and a worker that arrives later reads no job, so nothing can touch the job
 * on the caller's stack any more. One loop holds the pool at a time (a trylock on g_turn);
 * any other caller runs its chunks itself.
 *
 * Why the waits spin first. A model step is a run of loops a few tens of microseconds to a
 * few milliseconds long with little between them. A worker asleep on a condition variable
 * takes tens of microseconds to wake (longer in a virtual machine, where the idle vCPU has
 * halted), by which time the caller has run most of a short loop alone: measured, a loop of
 * 8 chunks of 60 us ran no faster on 2 threads than on 1. So a worker that finished a loop
 * polls for the next one for K_PAR_SPIN_NS before it sleeps, and the caller polls for the
 * workers to finish as long; both then block. The spin is bounded, so a process whose loops
 * have stopped (between predict calls, or while a long single-threaded kernel runs) costs
 * at most that much CPU per loop, not a core.
 *
 * Background pieces. In a short step the pool's threads poll a good part of the time: a
 * worker between loops while the caller runs the serial parts (the MLP's train step at two
 * threads: a third of the worker's time), the caller at a loop's end while a worker finishes
 * its chunks. Work that may run then (kiln train's next batch) is posted as a k_background,
 * and a polling thread runs it one piece at a time, looking for its news between pieces: a
 * loop starts, or ends, at most one piece later. Measured on the MLP's train step at two
 * threads: workers alone gathered about 42 of each batch's 64 rows ahead, workers and
 * callers about 60. */
#define _GNU_SOURCE
#include "k_parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long a waiting thread polls before it blocks: longer than the gap between two loops of
 * one model step, short next to the time between steps. */
#define K_PAR_SPIN_NS 200000

/* Each thread (the caller 0, worker i, i + 1) starts on its home: an equal, contiguous share
 * of the chunks, in chunk order. Threads sharing a home (more than K_PAR_HOMES) claim from it
 * together. */
#define K_PAR_HOMES 64

/* A home's unclaimed units [lo, hi), both in one word so that its owner (from the front) and a
 * thief (from the back) claim with one compare-and-swap; a cache line each. */
typedef struct {
  _Alignas(64) atomic_ullong range;   /* lo | hi << 32 */
} k_par_home;

typedef struct {
  k_range_fn fn;
  void *ctx;
  int64_t n, grain, nchunks;
  int64_t unit;                 /* chunks a claimed unit runs: 1 unless there are 2^31 or more */
  int nhomes;
  k_par_home home[K_PAR_HOMES];
} k_job;

static struct {
  pthread_mutex_t mu;           /* guards the sleeps and wake-ups, and the worker list */
  pthread_cond_t work_cv;       /* a job was published, or the workers must stop */
  pthread_cond_t done_cv;       /* the last worker left the job */
  _Atomic(k_job *) job;         /* the published job, NULL between loops */
  atomic_ullong gen;            /* bumped at every publish, so a worker joins a job once */
  atomic_int active;            /* workers that may be reading g_pool.job or running its chunks */
  atomic_int sleepers;          /* workers blocked (or about to block) on work_cv */
  atomic_int caller_sleeps;     /* callers blocked (or about to block) on done_cv: 0 or 1 */
  atomic_int stop;              /* workers exit */
  _Atomic(const k_background *) bg;   /* the posted background job, or NULL */
  atomic_int bg_inside;         /* threads that may be reading bg or running a piece */
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

int64_t k_parallel_row_major(int64_t samples, int64_t rows, int64_t parts) {
  int64_t threads = k_parallel_threads();
  const char *env = getenv("KILN_ROW_MAJOR");
  if (threads < 2 || samples >= threads || rows < 2 || (env && !strcmp(env, "0"))) return 0;
  if (parts < 1) parts = 1;
  parts = (parts + threads - 1) / threads * threads;
  return parts < rows ? parts : rows;
}

/* ---- waiting ---------------------------------------------------------------------------- */

static int64_t k_par_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void k_par_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* One piece of the posted background job, if there is one; 1 when it may have more. A thread
 * announces itself in bg_inside before it reads bg (as a worker does with active and job), so
 * a withdrawal that saw bg_inside at 0 after clearing bg has no piece left running. */
static int k_par_background_piece(void) {
  if (!atomic_load_explicit(&g_pool.bg, memory_order_relaxed)) return 0;
  atomic_fetch_add(&g_pool.bg_inside, 1);
  const k_background *bg = atomic_load(&g_pool.bg);
  int more = bg && bg->piece(bg->ctx);
  if (bg && !more) atomic_compare_exchange_strong(&g_pool.bg, &bg, NULL);   /* done: stop calling it */
  atomic_fetch_sub(&g_pool.bg_inside, 1);
  return more;
}

void k_parallel_background_post(const k_background *bg) { atomic_store(&g_pool.bg, bg); }

void k_parallel_background_withdraw(void) {
  atomic_store(&g_pool.bg, NULL);
  while (atomic_load(&g_pool.bg_inside)) k_par_pause();
}

/* Polls until done(arg) holds or K_PAR_SPIN_NS has passed; 1 when it holds. The clock is read
 * every 64 polls (a vDSO call, but not free), and from then on each round of polls ends in
 * sched_yield: on an idle machine it returns at once, on a loaded one the other processes run
 * instead of the poll. With `background`, posted background pieces run between the polls. */
static int k_par_spin(int (*done)(void *), void *arg, int background) {
  int64_t until = 0;
  for (unsigned i = 0;; i++) {
    if (done(arg)) return 1;
    if (background && k_par_background_piece()) continue;
    if ((i & 63) == 0) {
      int64_t t = k_par_now_ns();
      if (!until) until = t + K_PAR_SPIN_NS;
      else if (t > until) return 0;
      if (i) sched_yield();
    }
    k_par_pause();
  }
}

/* ---- running chunks -------------------------------------------------------------------- */

/* Which chunk runs where. A step's loops follow one another over the same activations (a
 * convolution writes its output, a depthwise layer reads it), and on the project's 2-vCPU
 * machine a cache line fetched from the other core costs about 200 ns: so thread t begins on
 * the same share of every loop, its home (neighbouring memory when the loops cut alike), and
 * only then helps the others from the back of theirs. With one shared counter handing out runs
 * of chunks to whoever came first, MobileNetV2's depthwise layers ran no faster on two threads
 * than on one, some 1.7x slower, each reading what the other core had just written.
 * Claims take half of what is left (at least one unit), so a thread slowed by the host's other
 * tenants still gets helped. Which thread runs a chunk never changes its result: the chunks
 * are the same whoever claims them. */
static int64_t k_par_claim(k_par_home *h, int back, int64_t *first) {
  unsigned long long r = atomic_load_explicit(&h->range, memory_order_relaxed), lo, hi, take;
  do {
    lo = r & 0xffffffffu, hi = r >> 32;
    if (lo >= hi) return 0;
    take = (hi - lo + 1) / 2;
  } while (!atomic_compare_exchange_weak_explicit(&h->range, &r, back ? lo | (hi - take) << 32 : (lo + take) | hi << 32,
                                                  memory_order_relaxed, memory_order_relaxed));
  *first = (int64_t)(back ? hi - take : lo);
  return (int64_t)take;
}

static void k_par_run_units(k_job *j, int64_t u0, int64_t nu) {
  for (int64_t k = u0 * j->unit; k < (u0 + nu) * j->unit && k < j->nchunks; k++) {
    int64_t lo = k * j->grain, hi = lo + j->grain < j->n ? lo + j->grain : j->n;
    j->fn(j->ctx, lo, hi);
  }
}

/* Thread `self`'s part of job j: its home from the front, then the others from the back. */
static void k_par_run_chunks(k_job *j, int self) {
  int mine = self % j->nhomes;
  int64_t u, nu;
  while ((nu = k_par_claim(&j->home[mine], 0, &u)) > 0) k_par_run_units(j, u, nu);
  for (int k = 1; k < j->nhomes; k++) {
    k_par_home *h = &j->home[(mine + k) % j->nhomes];
    while ((nu = k_par_claim(h, 1, &u)) > 0) k_par_run_units(j, u, nu);
  }
}

/* j's homes: units [h U / H, (h + 1) U / H) for home h of H. */
static void k_par_split(k_job *j, int threads) {
  j->unit = (j->nchunks + 0x7ffffffe) / 0x7fffffff;
  int64_t units = (j->nchunks + j->unit - 1) / j->unit;
  j->nhomes = threads < K_PAR_HOMES ? threads : K_PAR_HOMES;
  for (int h = 0; h < j->nhomes; h++) {
    unsigned long long lo = (unsigned long long)(units * h / j->nhomes), hi = (unsigned long long)(units * (h + 1) / j->nhomes);
    atomic_init(&j->home[h].range, lo | hi << 32);
  }
}

typedef struct { unsigned long long seen; } k_par_watch;

static int k_par_news(void *arg) {
  const k_par_watch *w = arg;
  return atomic_load(&g_pool.stop) || atomic_load(&g_pool.gen) != w->seen;
}

/* Waits until done(arg): polls, then sleeps on cv with *sleeping raised. The count is raised
 * before the last look at the condition, and whoever makes it true changes it before reading
 * the count, so one of the two always sees the other (and then signals under the mutex). */
static void k_par_await(int (*done)(void *), void *arg, atomic_int *sleeping, pthread_cond_t *cv, int background) {
  if (k_par_spin(done, arg, background)) return;
  pthread_mutex_lock(&g_pool.mu);
  atomic_fetch_add(sleeping, 1);
  while (!done(arg)) pthread_cond_wait(cv, &g_pool.mu);
  atomic_fetch_sub(sleeping, 1);
  pthread_mutex_unlock(&g_pool.mu);
}

/* A worker leaves the job; the last one out wakes a caller that went to sleep waiting. */
static void k_par_leave(void) {
  if (atomic_fetch_sub(&g_pool.active, 1) == 1 && atomic_load(&g_pool.caller_sleeps)) {
    pthread_mutex_lock(&g_pool.mu);
    pthread_cond_signal(&g_pool.done_cv);
    pthread_mutex_unlock(&g_pool.mu);
  }
}

static void *k_par_worker(void *arg) {
  int self = (int)(intptr_t)arg;   /* 1.. (the caller is 0) */
  t_inside = 1;
  k_par_watch w = {0};
  for (;;) {
    k_par_await(k_par_news, &w, &g_pool.sleepers, &g_pool.work_cv, 1);   /* a new generation, or stop */
    if (atomic_load(&g_pool.stop)) break;
    /* Announce first, then read the job: a caller that saw active == 0 after unpublishing
     * has made this read return NULL or a newer job. */
    atomic_fetch_add(&g_pool.active, 1);
    w.seen = atomic_load(&g_pool.gen);
    k_job *j = atomic_load(&g_pool.job);
    if (j) k_par_run_chunks(j, self);
    k_par_leave();
  }
  return NULL;
}

static int k_par_idle(void *arg) {
  (void)arg;
  return atomic_load(&g_pool.active) == 0;
}

/* ---- the pool's life ---------------------------------------------------------------------- */

/* Starts the workers if they are not running; 0 when the pool cannot be used (closed, or
 * one thread wanted, or no thread could be started). g_turn held. */
static int k_par_ensure_workers(void) {
  pthread_mutex_lock(&g_pool.mu);
  if (!g_pool.nthreads) g_pool.nthreads = k_par_default_threads();
  int want = g_pool.closed ? 0 : g_pool.nthreads - 1;
  if (want > 0 && !g_pool.workers) {
    g_pool.workers = calloc((size_t)want, sizeof *g_pool.workers);
    atomic_store(&g_pool.stop, 0);
    for (int i = 0; g_pool.workers && i < want; i++) {
      if (pthread_create(&g_pool.workers[i], NULL, k_par_worker, (void *)(intptr_t)(i + 1)) != 0) break;
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
  atomic_store(&g_pool.stop, 1);
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
  atomic_store(&g_pool.job, j);
  atomic_fetch_add(&g_pool.gen, 1);
  if (atomic_load(&g_pool.sleepers) > 0) {
    pthread_mutex_lock(&g_pool.mu);
    pthread_cond_broadcast(&g_pool.work_cv);
    pthread_mutex_unlock(&g_pool.mu);
  }
  t_inside = 1;
  k_par_run_chunks(j, 0);
  t_inside = 0;
  atomic_store(&g_pool.job, NULL);
  k_par_await(k_par_idle, NULL, &g_pool.caller_sleeps, &g_pool.done_cv, 1);   /* the workers still running chunks */
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
  k_job j;   /* its homes are set for the threads there are (not all K_PAR_HOMES: 4 KiB a loop) */
  j.fn = fn, j.ctx = ctx, j.n = n, j.grain = grain, j.nchunks = nchunks;
  k_par_split(&j, g_pool.nworkers + 1);
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
