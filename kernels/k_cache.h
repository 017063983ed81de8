/* k_cache.h — claiming a k_cache (k_base.h) for what a kernel packs once per weight change:
 * the convolutions' blocked weights (k_conv_direct.c, k_conv_dw.c) and the GEMM's packed B
 * (k_gemm.c). Internal to the kernel library. */
#ifndef KILN_K_CACHE_H
#define KILN_K_CACHE_H

#include <stdlib.h>

#include "k_base.h"

/* Whether input slots [first, first + n) of the call are all stable in the cache: the same
 * buffer with the same contents on every call until its key is cleared. */
static inline int k_cache_stable(const k_cache *k, int first, int n) {
  for (int i = first; i < first + n; i++)
    if (i >= 32 || !(k->stable >> i & 1u)) return 0;
  return 1;
}

/* The cache's data for key, at least bytes long. When it already holds key, its data, with
 * *fill = 0. Otherwise the key is cleared, the data (re)allocated 64-byte aligned when too
 * small, and *fill = 1: the caller packs into it and then sets k->key = key. NULL (and
 * *fill = 0) when there is no memory for it: the caller packs into its own workspace. */
static inline void *k_cache_reserve(k_cache *k, uint64_t key, size_t bytes, int *fill) {
  *fill = 0;
  if (k->key == key && k->bytes >= bytes) return k->data;
  k->key = 0;
  if (k->bytes < bytes) {
    free(k->data);
    k->data = aligned_alloc(64, (bytes + 63) / 64 * 64), k->bytes = k->data ? bytes : 0;
  }
  *fill = k->data != NULL;
  return k->data;
}

#endif
