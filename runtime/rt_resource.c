/* rt_resource.c — the resources a kernel can request: temp space and random numbers.
 * Temp space is pooled storage that grows to the largest request and is reused; the RNG is
 * a Philox seed plus a counter handed out in ranges, so draws never overlap and CPU and GPU
 * kernels given the same (seed, counter) produce the same numbers. */
#include "runtime.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "k_philox.h"

/* ---- temp space ---------------------------------------------------------------------- */

void rt_temp_init(rt_temp *t, rt_storage *s) {
  t->storage = s;
  t->chunk = (rt_chunk){0};
}

/* Old contents are not kept when the buffer grows: temp space is scratch by contract. */
void *rt_temp_get(rt_temp *t, size_t bytes) {
  if (t->chunk.ptr && t->chunk.size >= bytes) return t->chunk.ptr;
  rt_chunk c;
  if (rt_storage_alloc(t->storage, bytes, &c) != 0) return NULL;
  rt_storage_free(&t->chunk);
  t->chunk = c;
  return c.ptr;
}

size_t rt_temp_capacity(const rt_temp *t) { return t->chunk.size; }

void rt_temp_release(rt_temp *t) { rt_storage_free(&t->chunk); }

/* Per-thread temp space: the TLS slot holds the buffer, and a pthread key destructor frees
 * it when an engine worker (or any thread) exits. */
static pthread_key_t g_temp_key;
static pthread_once_t g_temp_once = PTHREAD_ONCE_INIT;
static _Thread_local rt_temp *t_temp;

static void temp_destructor(void *p) {
  rt_temp *t = p;
  rt_temp_release(t);
  free(t);
  t_temp = NULL;
}

static void temp_key_init(void) { pthread_key_create(&g_temp_key, temp_destructor); }

void *rt_temp_thread(size_t bytes) {
  pthread_once(&g_temp_once, temp_key_init);
  if (!t_temp) {
    t_temp = calloc(1, sizeof *t_temp);
    if (!t_temp) return NULL;
    rt_temp_init(t_temp, rt_storage_default((rt_ctx){RT_CPU, 0}));
    pthread_setspecific(g_temp_key, t_temp);
  }
  return rt_temp_get(t_temp, bytes);
}

void rt_temp_thread_release(void) {
  if (!t_temp) return;
  pthread_setspecific(g_temp_key, NULL);
  temp_destructor(t_temp);
}

/* ---- random numbers ------------------------------------------------------------------ */

void rt_rng_init(rt_rng *r, uint64_t seed, uint64_t counter) {
  r->seed = seed;
  atomic_init(&r->counter, counter);
}

uint64_t rt_rng_take(rt_rng *r, uint64_t n) { return atomic_fetch_add(&r->counter, n); }

/* Element i is k_philox_uniform(seed, counter, i): the exact formula a GPU kernel uses. */
void rt_rng_uniform(uint64_t seed, uint64_t counter, float *out, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) out[i] = lo + (hi - lo) * k_philox_uniform(seed, counter, i);
}

/* Box-Muller: pair j (elements 2j, 2j+1) comes from block j, lanes 0 and 1. u1 is in (0, 1]
 * so the log is finite. */
void rt_rng_normal(uint64_t seed, uint64_t counter, float *out, size_t n, float mean, float sd) {
  for (size_t j = 0; 2 * j < n; j++) {
    k_philox4 b = k_philox_block(seed, counter, j);
    double u1 = ((double)b.v[0] + 1.0) * (1.0 / 4294967296.0);
    double u2 = (double)b.v[1] * (1.0 / 4294967296.0);
    double r = sqrt(-2.0 * log(u1));
    double th = 6.283185307179586 * u2;
    out[2 * j] = mean + sd * (float)(r * cos(th));
    if (2 * j + 1 < n) out[2 * j + 1] = mean + sd * (float)(r * sin(th));
  }
}

void rt_rng_fill_uniform(rt_rng *r, float *out, size_t n, float lo, float hi) {
  rt_rng_uniform(r->seed, rt_rng_take(r, 1), out, n, lo, hi);
}

void rt_rng_fill_normal(rt_rng *r, float *out, size_t n, float mean, float sd) {
  rt_rng_normal(r->seed, rt_rng_take(r, 1), out, n, mean, sd);
}
