/* test_resource.c — temp space (growth, reuse, per-thread buffers freed at thread exit) and
 * the Philox RNG (known-answer vectors, counter ranges, uniform/normal draws). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "k_philox.h"
#include "rt_test.h"
#include "runtime.h"

static void test_temp(void) {
  rt_storage *s = rt_storage_create((rt_ctx){RT_CPU, 0});
  rt_temp t;
  rt_temp_init(&t, s);
  CHECK(rt_temp_capacity(&t) == 0, "starts empty");
  void *p = rt_temp_get(&t, 100);
  CHECK(p && rt_temp_capacity(&t) == 128, "grows to the class");
  CHECK(rt_temp_get(&t, 50) == p, "smaller request reuses");
  CHECK(rt_temp_get(&t, 1000) && rt_temp_capacity(&t) == 1024, "grows");
  rt_storage_stats st;
  rt_storage_get_stats(s, &st);
  CHECK(st.bytes_in_use == 1024, "old buffer went back: %zu", st.bytes_in_use);
  rt_temp_release(&t);
  rt_storage_get_stats(s, &st);
  CHECK(st.bytes_in_use == 0 && rt_temp_capacity(&t) == 0, "released");
  rt_storage_destroy(s);
}

static void *thread_temp(void *out) {
  void *p = rt_temp_thread(3000);
  memset(p, 1, 3000);
  *(void **)out = p;
  return rt_temp_thread(10) == p ? p : NULL;  /* same buffer within a thread */
}

static void test_thread_temp(void) {
  rt_storage *d = rt_storage_default((rt_ctx){RT_CPU, 0});
  rt_storage_stats before, after;
  rt_storage_get_stats(d, &before);
  pthread_t t[3];
  void *p[3], *ret[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, thread_temp, &p[i]);
  for (int i = 0; i < 3; i++) pthread_join(t[i], &ret[i]);
  for (int i = 0; i < 3; i++) CHECK(ret[i] == p[i], "thread %d kept its buffer", i);
  rt_storage_get_stats(d, &after);
  CHECK(after.bytes_in_use == before.bytes_in_use, "freed at thread exit");
  CHECK(after.n_alloc - before.n_alloc == 3, "one buffer per thread");
  CHECK(rt_temp_thread(64) != NULL, "main thread");
  rt_temp_thread_release();
  rt_storage_get_stats(d, &after);
  CHECK(after.bytes_in_use == before.bytes_in_use, "main thread released");
}

/* Known-answer vectors of Philox4x32-10 from Random123 (kat_vectors). */
static void test_philox_kat(void) {
  k_philox4 z = k_philox4x32((k_philox4){{0, 0, 0, 0}}, 0, 0);
  const uint32_t wz[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  CHECK(memcmp(z.v, wz, sizeof wz) == 0, "zero vector: %08x %08x %08x %08x", z.v[0], z.v[1], z.v[2], z.v[3]);
  k_philox4 f = k_philox4x32((k_philox4){{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
  const uint32_t wf[4] = {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu};
  CHECK(memcmp(f.v, wf, sizeof wf) == 0, "ones vector: %08x %08x %08x %08x", f.v[0], f.v[1], f.v[2], f.v[3]);
}

static rt_rng g_rng;
static void *taker(void *out) {
  uint64_t *got = out;
  for (int i = 0; i < 1000; i++) got[i] = rt_rng_take(&g_rng, 1);
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void test_counters(void) {
  rt_rng r;
  rt_rng_init(&r, 42, 10);
  CHECK(rt_rng_take(&r, 1) == 10 && rt_rng_take(&r, 5) == 11 && rt_rng_take(&r, 1) == 16, "ranges");
  rt_rng_init(&g_rng, 1, 100);
  static uint64_t got[4000];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, taker, got + 1000 * i);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  qsort(got, 4000, sizeof got[0], cmp_u64);
  int ok = 1;
  for (int i = 0; i < 4000; i++) ok &= got[i] == 100u + (uint64_t)i;
  CHECK(ok, "concurrent takes are disjoint and dense");
}

static void test_draws(void) {
  enum { N = 100001 };
  static float a[N], b[N];
  rt_rng_uniform(7, 3, a, N, -2.0f, 2.0f);
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= a[i] == -2.0f + 4.0f * k_philox_uniform(7, 3, (uint64_t)i) && a[i] >= -2.0f && a[i] < 2.0f;
  CHECK(ok, "uniform matches k_philox_uniform element for element");
  rt_rng_uniform(7, 4, b, N, -2.0f, 2.0f);
  CHECK(memcmp(a, b, sizeof a) != 0, "another counter, other numbers");
  rt_rng_normal(9, 0, a, N, 1.0f, 2.0f);
  double m = 0, v = 0;
  for (int i = 0; i < N; i++) m += a[i];
  m /= N;
  for (int i = 0; i < N; i++) v += (a[i] - m) * (a[i] - m);
  v /= N - 1;
  CHECK(fabs(m - 1.0) < 0.03 && fabs(v - 4.0) < 0.1, "normal moments: mean %f var %f", m, v);
  rt_rng_normal(9, 0, b, N - 1, 1.0f, 2.0f);
  CHECK(memcmp(a, b, sizeof(float) * (N - 1)) == 0, "odd n: a prefix of the same draw");
  rt_rng r;
  rt_rng_init(&r, 9, 0);
  rt_rng_fill_normal(&r, b, N, 1.0f, 2.0f);
  CHECK(memcmp(a, b, sizeof a) == 0 && rt_rng_take(&r, 1) == 1, "fill takes one counter");
}

int main(void) {
  test_temp();
  test_thread_temp();
  test_philox_kat();
  test_counters();
  test_draws();
  return rt_test_done("resource");
}
