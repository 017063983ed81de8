/* rt_storage.c — pooled, 64-byte aligned memory per device context.
 * Requests round up to a power-of-two size class; freed chunks wait in a per-class free
 * list so that the steady state of a training loop never calls the system allocator. */
#include "runtime.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define RT_NCLASS 58            /* classes 2^6 .. 2^63 */
#define RT_MIN_CLASS_LOG 6

/* A free-list node lives inside the pooled block itself, so pooling costs no extra memory. */
typedef struct rt_free_node { struct rt_free_node *next; } rt_free_node;

struct rt_storage {
  rt_ctx ctx;
  pthread_mutex_t mu;
  rt_free_node *free_list[RT_NCLASS];
  rt_storage_stats st;
};

static int class_index(size_t bytes) {
  int k = RT_MIN_CLASS_LOG;
  while (k < 63 && ((size_t)1 << k) < bytes) k++;
  return k - RT_MIN_CLASS_LOG;
}

size_t rt_storage_class_size(size_t bytes) {
  if (bytes > ((size_t)1 << 62)) return 0;  /* no class can hold it */
  return (size_t)1 << (class_index(bytes) + RT_MIN_CLASS_LOG);
}

rt_storage *rt_storage_create(rt_ctx ctx) {
  if (ctx.type != RT_CPU) return NULL;      /* GPU memory arrives with the GPU back end */
  rt_storage *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->ctx = ctx;
  pthread_mutex_init(&s->mu, NULL);
  return s;
}

void rt_storage_destroy(rt_storage *s) {
  if (!s) return;
  rt_storage_release_pool(s);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* Pops a pooled block of class k, or NULL. Caller holds the lock. */
static void *pool_pop(rt_storage *s, int k) {
  rt_free_node *n = s->free_list[k];
  if (!n) return NULL;
  s->free_list[k] = n->next;
  s->st.bytes_pooled -= (size_t)1 << (k + RT_MIN_CLASS_LOG);
  s->st.n_pool_hit++;
  return n;
}

int rt_storage_alloc(rt_storage *s, size_t bytes, rt_chunk *out) {
  memset(out, 0, sizeof *out);
  size_t size = rt_storage_class_size(bytes);
  if (!s || size == 0) return -1;
  int k = class_index(size);
  pthread_mutex_lock(&s->mu);
  void *p = pool_pop(s, k);
  if (!p) {
    p = aligned_alloc(RT_STORAGE_ALIGN, size);   /* size is a multiple of 64 */
    if (p) s->st.n_sys_alloc++;
  }
  if (p) {
    s->st.n_alloc++;
    s->st.bytes_in_use += size;
    if (s->st.bytes_in_use > s->st.bytes_peak) s->st.bytes_peak = s->st.bytes_in_use;
  }
  pthread_mutex_unlock(&s->mu);
  if (!p) return -1;
  *out = (rt_chunk){p, size, s};
  return 0;
}

void rt_storage_free(rt_chunk *c) {
  if (!c || !c->ptr) return;
  rt_storage *s = c->owner;
  int k = class_index(c->size);
  rt_free_node *n = c->ptr;
  pthread_mutex_lock(&s->mu);
  n->next = s->free_list[k];
  s->free_list[k] = n;
  s->st.bytes_pooled += c->size;
  s->st.bytes_in_use -= c->size;
  s->st.n_free++;
  pthread_mutex_unlock(&s->mu);
  memset(c, 0, sizeof *c);
}

void rt_storage_release_pool(rt_storage *s) {
  pthread_mutex_lock(&s->mu);
  for (int k = 0; k < RT_NCLASS; k++) {
    while (s->free_list[k]) {
      rt_free_node *n = s->free_list[k];
      s->free_list[k] = n->next;
      free(n);
    }
  }
  s->st.bytes_pooled = 0;
  pthread_mutex_unlock(&s->mu);
}

void rt_storage_get_stats(rt_storage *s, rt_storage_stats *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->st;
  pthread_mutex_unlock(&s->mu);
}

void rt_storage_reset_peak(rt_storage *s) {
  pthread_mutex_lock(&s->mu);
  s->st.bytes_peak = s->st.bytes_in_use;
  pthread_mutex_unlock(&s->mu);
}

/* The process-wide CPU manager; made once, never destroyed (the pool is released at exit
 * so leak checkers see no pooled blocks). */
static rt_storage *g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static void release_default_at_exit(void) { rt_storage_release_pool(g_cpu); }

static void make_default_cpu(void) {
  g_cpu = rt_storage_create((rt_ctx){RT_CPU, 0});
  if (g_cpu) atexit(release_default_at_exit);
}

rt_storage *rt_storage_default(rt_ctx ctx) {
  if (ctx.type != RT_CPU) return NULL;
  pthread_once(&g_cpu_once, make_default_cpu);
  return g_cpu;
}
