/* k_mem.h — advice on large, long-lived blocks of memory, shared by the kernels (k_cache.h's
 * packed weights) and the runtime (a model's weights and arena, runtime/rt_model.c).
 * Header-only. */
#ifndef KILN_K_MEM_H
#define KILN_K_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

/* Asks for 2 MB pages over the whole 2 MB-aligned parts of [p, p + bytes), where the kernel
 * gives them on request only (transparent huge pages in "madvise" mode): a block of packed
 * weights is written once and then read whole at every call, and a model's tens or hundreds
 * of MB of them took one page fault and one TLB entry per 4 KB. Advice only: nothing changes
 * where it is not taken. */
static inline void k_advise_huge(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  const uintptr_t huge = (uintptr_t)2 << 20;
  uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + bytes) & ~(huge - 1);
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

#endif
