/* test_parallel.c — k_parallel_for on its thread pool: every chunk runs exactly once with the
 * boundaries k_parallel.h promises, nested loops run on the calling thread, many threads may
 * loop at once, a chunked reduction gives the same bits with 1 to 8 threads, and with two
 * threads two chunks really run at the same time. Also labelled "runtime", so it runs under
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
  test_env();
  return kt_finish("parallel");
}
