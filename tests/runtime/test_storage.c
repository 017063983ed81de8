/* test_storage.c — the pooled allocator: alignment, size classes, exact statistics after
 * known sequences, reuse from the pool, release, and consistency under concurrent use. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "rt_test.h"
#include "runtime.h"

static void test_classes(void) {
  CHECK(rt_storage_class_size(0) == 64 && rt_storage_class_size(1) == 64, "min class");
  CHECK(rt_storage_class_size(64) == 64 && rt_storage_class_size(65) == 128, "64/65");
  CHECK(rt_storage_class_size((1u << 20) + 1) == (size_t)1 << 21, "2^20+1");
  CHECK(rt_storage_class_size(SIZE_MAX) == 0, "no class for SIZE_MAX");
}

static void test_sequence(void) {
  rt_storage *s = rt_storage_create((rt_ctx){RT_CPU, 0});
  const size_t req[6] = {1, 64, 65, 100, 4096, 5000}, cls[6] = {64, 64, 128, 128, 4096, 8192};
  rt_chunk c[6];
  size_t total = 0;
  for (int i = 0; i < 6; i++) {
    CHECK(rt_storage_alloc(s, req[i], &c[i]) == 0, "alloc %zu", req[i]);
    CHECK((uintptr_t)c[i].ptr % RT_STORAGE_ALIGN == 0, "alignment of %p", c[i].ptr);
    CHECK(c[i].size == cls[i], "class of %zu: %zu", req[i], c[i].size);
    memset(c[i].ptr, 0xab, c[i].size);  /* the whole class is usable (ASan checks) */
    total += cls[i];
  }
  rt_storage_stats st;
  rt_storage_get_stats(s, &st);
  CHECK(st.bytes_in_use == total && st.bytes_peak == total, "in use %zu", st.bytes_in_use);
  CHECK(st.n_alloc == 6 && st.n_sys_alloc == 6 && st.n_pool_hit == 0, "counts");
  void *p65 = c[2].ptr;
  rt_storage_free(&c[2]);
  rt_storage_free(&c[5]);
  CHECK(c[2].ptr == NULL && c[2].size == 0, "free clears the chunk");
  rt_storage_get_stats(s, &st);
  CHECK(st.bytes_in_use == total - 128 - 8192 && st.bytes_peak == total, "after free");
  CHECK(st.bytes_pooled == 128 + 8192 && st.n_free == 2, "pooled %zu", st.bytes_pooled);
  CHECK(rt_storage_alloc(s, 120, &c[2]) == 0 && c[2].ptr == p65, "pool reuse of class 128");
  rt_storage_get_stats(s, &st);
  CHECK(st.n_pool_hit == 1 && st.n_sys_alloc == 6 && st.bytes_pooled == 8192, "pool hit");
  rt_storage_reset_peak(s);
  rt_storage_get_stats(s, &st);
  CHECK(st.bytes_peak == total - 8192, "reset peak %zu", st.bytes_peak);
  rt_storage_release_pool(s);
  rt_storage_get_stats(s, &st);
  CHECK(st.bytes_pooled == 0, "released");
  CHECK(rt_storage_alloc(s, 5000, &c[5]) == 0, "realloc");
  rt_storage_get_stats(s, &st);
  CHECK(st.n_sys_alloc == 7 && st.bytes_peak == total, "after release: sys %llu peak %zu",
        (unsigned long long)st.n_sys_alloc, st.bytes_peak);
  for (int i = 0; i < 6; i++) rt_storage_free(&c[i]);
  rt_storage_get_stats(s, &st);
  CHECK(st.bytes_in_use == 0 && st.n_alloc == st.n_free, "all freed");
  rt_chunk big;
  CHECK(rt_storage_alloc(s, SIZE_MAX, &big) == -1 && big.ptr == NULL, "absurd size fails");
  rt_storage_destroy(s);
}

static void test_contexts(void) {
  CHECK(rt_storage_create((rt_ctx){RT_GPU, 0}) == NULL, "no GPU memory yet");
  CHECK(rt_storage_default((rt_ctx){RT_GPU, 0}) == NULL, "no default GPU manager");
  rt_storage *d = rt_storage_default((rt_ctx){RT_CPU, 0});
  CHECK(d && d == rt_storage_default((rt_ctx){RT_CPU, 0}), "one default CPU manager");
}

#define NTHREADS 4
#define NITER 5000

static void *hammer(void *arg) {
  rt_storage *s = arg;
  rt_chunk held[8] = {{0}};
  unsigned long long seed = (unsigned long long)(uintptr_t)&held | 1;
  for (int i = 0; i < NITER; i++) {
    int k = (int)(rt_test_rand(&seed) % 8);
    if (held[k].ptr) rt_storage_free(&held[k]);
    else if (rt_storage_alloc(s, rt_test_rand(&seed) % 20000, &held[k]) == 0)
      memset(held[k].ptr, k, 16);
  }
  for (int k = 0; k < 8; k++) rt_storage_free(&held[k]);
  return NULL;
}

static void test_threads(void) {
  rt_storage *s = rt_storage_create((rt_ctx){RT_CPU, 0});
  pthread_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) pthread_create(&t[i], NULL, hammer, s);
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  rt_storage_stats st;
  rt_storage_get_stats(s, &st);
  CHECK(st.bytes_in_use == 0 && st.n_alloc == st.n_free, "balanced: %zu in use", st.bytes_in_use);
  CHECK(st.n_alloc == st.n_pool_hit + st.n_sys_alloc, "every alloc is a hit or a sys alloc");
  CHECK(st.n_pool_hit > st.n_sys_alloc, "the pool serves most requests (%llu hits)",
        (unsigned long long)st.n_pool_hit);
  rt_storage_destroy(s);
}

int main(void) {
  test_classes();
  test_sequence();
  test_contexts();
  test_threads();
  return rt_test_done("storage");
}
