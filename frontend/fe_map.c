/* fe_map.c — a string-keyed hash table (open addressing, arena memory) for the names that
 * lowering looks up once per statement: scope bindings and the graph's tensor names. With
 * lists, a model of n statements lowered in O(n^2) time. */
#include "fe_lower.h"

#include <string.h>

static uint64_t fe_map_hash(const char *s) {
  uint64_t h = 14695981039346656037ull;       /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int fe_map_slot(const fe_map *m, const char *key) {
  size_t i = (size_t)fe_map_hash(key) & (size_t)(m->cap - 1);
  while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & (size_t)(m->cap - 1);
  return (int)i;
}

void *fe_map_get(const fe_map *m, const char *key) {
  return m->cap ? m->vals[fe_map_slot(m, key)] : NULL;
}

/* The table at capacity cap (a power of 2), the keys it holds moved in; old tables stay in the arena. */
static void fe_map_grow(fe_map *m, ir_arena *a, int cap) {
  fe_map old = *m;
  m->cap = cap, m->len = 0;
  m->keys = ir_alloc(a, sizeof(char *) * (size_t)m->cap);
  m->vals = ir_alloc(a, sizeof(void *) * (size_t)m->cap);
  for (int i = 0; i < old.cap; i++)
    if (old.keys[i]) fe_map_put(m, a, old.keys[i], old.vals[i]);
}

void fe_map_reserve(fe_map *m, ir_arena *a, int n) {
  int cap = m->cap ? m->cap : 4;
  while (cap < 2 * n) cap *= 2;
  if (cap > m->cap) fe_map_grow(m, a, cap);
}

/* Keeps the first value given for a key (as a search from the front of a list would). */
void fe_map_put(fe_map *m, ir_arena *a, const char *key, void *val) {
  /* grow at half full; small at first: a def call makes a scope of a few names */
  if (2 * (m->len + 1) > m->cap) fe_map_grow(m, a, m->cap ? 2 * m->cap : 4);
  int i = fe_map_slot(m, key);
  if (m->keys[i]) return;
  m->keys[i] = key, m->vals[i] = val, m->len++;
}

void fe_map_set(fe_map *m, ir_arena *a, const char *key, void *val) {
  int i = m->cap ? fe_map_slot(m, key) : -1;
  if (i >= 0 && m->keys[i]) m->vals[i] = val;
  else fe_map_put(m, a, key, val);
}
