/* ir_arena.c — bump allocation for a compile's IR, freed all at once, and a growable array.
 * Allocation failure is fatal here: the compiler cannot continue without memory, and the
 * message says so instead of crashing later on a NULL. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

struct ir_arena_chunk {
  ir_arena_chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

static void *ir_xmalloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (!p) {
    fprintf(stderr, "kiln: out of memory (allocating %zu bytes)\n", n);
    exit(1);
  }
  return p;
}

void *ir_alloc(ir_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  ir_arena_chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    c = ir_xmalloc(sizeof *c + cap);
    c->cap = cap;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  a->bytes += n;
  return p;                       /* chunks come from calloc, never reused: already zero */
}

char *ir_strndup(ir_arena *a, const char *s, size_t n) {
  char *p = ir_alloc(a, n + 1);
  memcpy(p, s, n);
  return p;
}

char *ir_strdup(ir_arena *a, const char *s) { return ir_strndup(a, s, strlen(s)); }

char *ir_strfmt(ir_arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = ir_alloc(a, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

void ir_arena_free(ir_arena *a) {
  for (ir_arena_chunk *c = a->head, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  a->head = NULL;
  a->bytes = 0;
}

void *ir_vec_push(ir_vec *v) {
  if (v->len == v->cap) {
    int cap = v->cap ? v->cap * 2 : 8;
    void *d = realloc(v->data, (size_t)cap * v->elem);
    if (!d) {
      fprintf(stderr, "kiln: out of memory (growing an array to %d items)\n", cap);
      exit(1);
    }
    v->data = d;
    v->cap = cap;
  }
  void *slot = (char *)v->data + (size_t)v->len++ * v->elem;
  memset(slot, 0, v->elem);
  return slot;
}

void ir_vec_free(ir_vec *v) {
  free(v->data);
  v->data = NULL;
  v->len = v->cap = 0;
}
