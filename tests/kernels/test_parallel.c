/* test_parallel.c — k_parallel_for on its thread pool: every chunk runs exactly once with the
 * boundaries k_parallel.h promises, nested loops run on the calling thread, many threads may
 * loop at once, a chunked reduction gives the same bits with 1 to 8 threads, and with two
 * threads two chunks really run at the same time; background pieces run on idle workers and
 * stop when withdrawn. Also labelled "runtime", so it runs under
 * ThreadSanitizer. */
#include "kt_harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- every chunk once, at the promised boundaries -------------------------------------- */

typedef struct {
  int64_t n, grain;
  atomic_int *hits;             /* per item */
  atomic_int bad;               /* chunks with wrong boundaries */
  atomic_int calls;
} cover_ctx;

static void cover_fn(void *p, int64_t lo, int64_t hi) {
  cover_ctx *c = p;
  atomic_fetch_add(&c->calls, 1);
  int64_t g = c->grain < 1 ? 1 : c->grain;
  int64_t want_hi = lo + g < c->n ? lo + g : c->n;
  if (lo % g != 0 || hi != want_hi || lo >= hi) atomic_fetch_add(&c->bad, 1);
  for (int64_t i = lo; i < hi && i < c->n; i++) atomic_fetch_add(&c->hits[i], 1);
}

/* Runs one loop and says whether it covered [0, n) exactly once in the right chunks. */
static int cover_once(int64_t n, int64_t grain) {
  cover_ctx c = {n, grain, calloc((size_t)(n > 0 ? n : 1), sizeof(atomic_int)), 0, 0};
  k_parallel_for(n, grain, cover_fn, &c);
  int ok = atomic_load(&c.bad) == 0 && atomic_load(&c.calls) == k_parallel_chunks(n, grain);
  for (int64_t i = 0; i < n; i++) ok &= atomic_load(&c.hits[i]) == 1;
  free(c.hits);
  return ok;
}

/* At several pool sizes: fewer chunks than threads, more threads than the pool has homes
 * (K_PAR_HOMES, 64: threads then share one), and shares that do not divide evenly. */
static void test_cover(void) {
  const int64_t ns[] = {0, 1, 2, 7, 64, 1000, 4097};
  const int64_t grains[] = {-3, 0, 1, 3, 64, 5000};
  const int threads[] = {2, 3, 8, 70};
  for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
    k_parallel_set_threads(threads[t]);
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
      for (size_t b = 0; b < sizeof grains / sizeof *grains; b++)
        KT_CHECK(cover_once(ns[a], grains[b]), "%d threads, n=%lld grain=%lld: every chunk once", threads[t],
                 (long long)ns[a], (long long)grains[b]);
  }
  k_parallel_set_threads(0);
}

/* ---- nested loops ---------------------------------------------------------------------- */

typedef struct {
  atomic_int inner_items, wrong_thread;
  pthread_t outer_thread[16];
} nest_ctx;

typedef struct { nest_ctx *nc; pthread_t self; } nest_inner;

static void nest_inner_fn(void *p, int64_t lo, int64_t hi) {
  nest_inner *in = p;
  if (!pthread_equal(in->self, pthread_self())) atomic_fetch_add(&in->nc->wrong_thread, 1);
  atomic_fetch_add(&in->nc->inner_items, (int)(hi - lo));
}

static void nest_outer_fn(void *p, int64_t lo, int64_t hi) {
  nest_inner in = {p, pthread_self()};
  for (int64_t i = lo; i < hi; i++) k_parallel_for(100, 7, nest_inner_fn, &in);
}

static void test_nested(void) {
  nest_ctx nc = {0};
  k_parallel_for(16, 1, nest_outer_fn, &nc);
  KT_CHECK(atomic_load(&nc.inner_items) == 16 * 100, "nested loops cover their items");
  KT_CHECK(atomic_load(&nc.wrong_thread) == 0, "a nested loop runs on the thread that called it");
}

/* k_parallel_nested: set in the chunks of a loop of several chunks with any thread count
 * (kernels pick their split by it, so it must not depend on the threads), not at top level
 * nor in a loop of one chunk. */
static void nested_fn(void *p, int64_t lo, int64_t hi) {
  atomic_int *flags = p;
  atomic_fetch_add(&flags[0], 1);
  if (k_parallel_nested()) atomic_fetch_add(&flags[1], 1);
}

static void test_nested_flag(void) {
  const int counts[] = {1, 2};
  for (int i = 0; i < 2; i++) {
    k_parallel_set_threads(counts[i]);
    atomic_int flags[2] = {0, 0};
    k_parallel_for(8, 1, nested_fn, flags);
    KT_CHECK(atomic_load(&flags[0]) == 8 && atomic_load(&flags[1]) == 8, "%d threads: chunks are nested", counts[i]);
    atomic_int one[2] = {0, 0};
    k_parallel_for(8, 8, nested_fn, one);
    KT_CHECK(atomic_load(&one[0]) == 1 && atomic_load(&one[1]) == 0, "%d threads: a one-chunk loop is not", counts[i]);
    KT_CHECK(!k_parallel_nested(), "%d threads: top level is not nested", counts[i]);
  }
  k_parallel_set_threads(0);
}

/* ---- a chunked reduction: same bits with any thread count ------------------------------- */

#define RED_N 100003
#define RED_GRAIN 1000

typedef struct { const float *x; float part[RED_N / RED_GRAIN + 1]; } red_ctx;

static void red_fn(void *p, int64_t lo, int64_t hi) {
  red_ctx *r = p;
  float s = 0.0f;
  for (int64_t i = lo; i < hi; i++) s += r->x[i] * r->x[i];
  r->part[lo / RED_GRAIN] = s;
}

static float red_sum(const float *x) {
  red_ctx *r = calloc(1, sizeof *r);
  r->x = x;
  k_parallel_for(RED_N, RED_GRAIN, red_fn, r);
  float s = 0.0f;
  for (int64_t c = 0; c < k_parallel_chunks(RED_N, RED_GRAIN); c++) s += r->part[c];
  free(r);
  return s;
}

static void test_thread_counts(void) {
  float *x = malloc(RED_N * sizeof *x);
  kt_fill_uniform(x, RED_N, -1.0f, 1.0f, 99);
  k_parallel_set_threads(1);
  KT_CHECK(k_parallel_threads() == 1, "resized to 1 thread");
  float one = red_sum(x);
  const int counts[] = {2, 3, 8};
  for (int i = 0; i < 3; i++) {
    k_parallel_set_threads(counts[i]);
    KT_CHECK(k_parallel_threads() == counts[i], "resized to %d threads", counts[i]);
    float s = red_sum(x);
    KT_CHECK(memcmp(&s, &one, sizeof s) == 0, "%d threads: %.9g, 1 thread: %.9g", counts[i], s, one);
    KT_CHECK(cover_once(4097, 3), "%d threads: every chunk once", counts[i]);
  }
  free(x);
}

/* ---- two threads really run two chunks at once ------------------------------------------ */

typedef struct { atomic_int arrived; atomic_int met; } meet_ctx;

/* Each of the two chunks waits (up to a minute) for the other to start: with one thread the
 * first chunk would wait for nothing, so meeting proves two threads ran them. */
static void meet_fn(void *p, int64_t lo, int64_t hi) {
  meet_ctx *m = p;
  atomic_fetch_add(&m->arrived, 1);
  struct timespec nap = {0, 1000000};
  for (int i = 0; i < 60000 && atomic_load(&m->arrived) < 2; i++) nanosleep(&nap, NULL);
  if (atomic_load(&m->arrived) >= 2) atomic_fetch_add(&m->met, 1);
}

static void test_two_at_once(void) {
  k_parallel_set_threads(2);
  meet_ctx m = {0, 0};
  k_parallel_for(2, 1, meet_fn, &m);
  KT_CHECK(atomic_load(&m.met) == 2, "with 2 threads both chunks ran at the same time");
}

/* ---- many callers at once ---------------------------------------------------------------- */

static void *caller_main(void *arg) {
  atomic_int *bad = arg;
  for (int i = 0; i < 200; i++)
    if (!cover_once(257 + i, 1 + i % 13)) atomic_fetch_add(bad, 1);
  return NULL;
}

static void test_many_callers(void) {
  k_parallel_set_threads(3);
  atomic_int bad = 0;
  pthread_t t[6];
  for (int i = 0; i < 6; i++) pthread_create(&t[i], NULL, caller_main, &bad);
  for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
  KT_CHECK(atomic_load(&bad) == 0, "6 threads looping at once: every chunk once");
}

/* ---- background pieces in the workers' idle moments ------------------------------------- */

#define BG_ITEMS 300

typedef struct {
  atomic_int next;              /* items claimed */
  atomic_int hits[BG_ITEMS];
  atomic_int outside;           /* pieces the posting thread ran outside a loop */
  atomic_int in_loop;           /* the posting thread is inside k_parallel_for */
  atomic_int inside;            /* pieces running now */
  atomic_int late;              /* pieces that started after the withdrawal returned */
  atomic_int withdrawn;
  pthread_t caller;
  long nap_ns;                  /* each piece's length */
} bg_ctx;

static int bg_piece(void *p) {
  bg_ctx *c = p;
  atomic_fetch_add(&c->inside, 1);
  if (atomic_load(&c->withdrawn)) atomic_fetch_add(&c->late, 1);
  int i = atomic_fetch_add(&c->next, 1);
  if (i < BG_ITEMS) {
    atomic_fetch_add(&c->hits[i], 1);
    if (pthread_equal(c->caller, pthread_self()) && !atomic_load(&c->in_loop)) atomic_fetch_add(&c->outside, 1);
    struct timespec nap = {0, c->nap_ns};
    if (c->nap_ns) nanosleep(&nap, NULL);
  }
  atomic_fetch_sub(&c->inside, 1);
  return i + 1 < BG_ITEMS;
}

static void bg_tick(void *p, int64_t lo, int64_t hi) { (void)p, (void)lo, (void)hi; }

/* A loop of two empty chunks, marked on the context while it runs. */
static void bg_loop(bg_ctx *c) {
  atomic_store(&c->in_loop, 1);
  k_parallel_for(2, 1, bg_tick, NULL);
  atomic_store(&c->in_loop, 0);
}

/* With two threads every piece runs once, on the worker between loops or on the caller
 * inside one (waiting for the worker), never on the caller outside the pool; a piece that
 * says nothing is left ends the job. Withdrawing returns only once no piece runs, and after
 * it none starts. With one thread nothing runs the pieces. */
static void test_background(void) {
  k_parallel_set_threads(2);
  static bg_ctx c;
  memset(&c, 0, sizeof c);
  c.caller = pthread_self();
  k_background bg = {bg_piece, &c};
  k_parallel_background_post(&bg);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {   /* loops keep the worker polling (it sleeps after 0.2 ms without one) */
    bg_loop(&c);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while (atomic_load(&c.next) < BG_ITEMS && t.tv_sec - t0.tv_sec < 60);
  k_parallel_background_withdraw();
  int once = 1;
  for (int i = 0; i < BG_ITEMS; i++) once &= atomic_load(&c.hits[i]) == 1;
  KT_CHECK(once, "2 threads: every background piece ran once");
  KT_CHECK(atomic_load(&c.outside) == 0, "2 threads: the caller ran pieces only inside its loops");

  memset(&c, 0, sizeof c);
  c.caller = pthread_self(), c.nap_ns = 2000000;
  k_parallel_background_post(&bg);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    k_parallel_for(2, 1, bg_tick, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while (atomic_load(&c.next) < 2 && t.tv_sec - t0.tv_sec < 60);
  KT_CHECK(atomic_load(&c.next) >= 2, "2 threads: pieces of 2 ms ran");
  k_parallel_background_withdraw();
  atomic_store(&c.withdrawn, 1);
  KT_CHECK(atomic_load(&c.inside) == 0, "withdrawing waits for the piece in flight");
  for (int i = 0; i < 20; i++) k_parallel_for(2, 1, bg_tick, NULL);
  struct timespec nap = {0, 5000000};
  nanosleep(&nap, NULL);
  KT_CHECK(atomic_load(&c.late) == 0 && atomic_load(&c.next) < BG_ITEMS, "no piece starts once withdrawn");

  k_parallel_set_threads(1);
  memset(&c, 0, sizeof c);
  k_parallel_background_post(&bg);
  for (int i = 0; i < 20; i++) k_parallel_for(2, 1, bg_tick, NULL);
  k_parallel_background_withdraw();
  KT_CHECK(atomic_load(&c.next) == 0, "1 thread: no worker, no piece runs");
  k_parallel_set_threads(0);
}

/* ---- KILN_NUM_THREADS -------------------------------------------------------------------- */

static void test_env(void) {
  setenv("KILN_NUM_THREADS", "3", 1);
  KT_CHECK(k_parallel_env_threads() == 3, "KILN_NUM_THREADS=3 read");
  k_parallel_set_threads(0);
  KT_CHECK(k_parallel_threads() == 3, "the default size follows KILN_NUM_THREADS");
  setenv("KILN_NUM_THREADS", "3x", 1);
  KT_CHECK(k_parallel_env_threads() == 0, "KILN_NUM_THREADS=3x rejected");
  setenv("KILN_NUM_THREADS", "0", 1);
  KT_CHECK(k_parallel_env_threads() == 0, "KILN_NUM_THREADS=0 rejected");
  unsetenv("KILN_NUM_THREADS");
  k_parallel_set_threads(0);
  KT_CHECK(k_parallel_threads() == k_parallel_cpu_count() && k_parallel_cpu_count() >= 1,
           "unset: one thread per CPU the process may use");
}

int main(void) {
  test_cover();
  test_nested();
  test_nested_flag();
  test_thread_counts();
  test_two_at_once();
  test_many_callers();
  test_background();
  test_env();
  return kt_finish("parallel");
}
