/* k_parallel.h — the one way a kernel splits its work across threads. Kernels are the lowest
 * layer, so the parallel loop lives here and the runtime sizes it.
 *
 * Work [0, n) is cut into chunks of `grain` items (the last may be shorter). The chunks depend
 * only on n and grain, never on the thread count: a kernel that reduces within each chunk and
 * then combines the chunk results in chunk order gets the same bits with any number of
 * threads. */
#ifndef KILN_K_PARALLEL_H
#define KILN_K_PARALLEL_H

#include <stdint.h>

/* Does items [lo, hi) of the work; ctx is the kernel's own argument block. */
typedef void (*k_range_fn)(void *ctx, int64_t lo, int64_t hi);

/* Number of chunks k_parallel_for makes of n items with this grain (grain < 1 counts as 1). */
static inline int64_t k_parallel_chunks(int64_t n, int64_t grain) {
  if (grain < 1) grain = 1;
  return n <= 0 ? 0 : (n + grain - 1) / grain;
}

/* Calls fn once per chunk, [c*grain, min(n, (c+1)*grain)), and returns when every chunk is
 * done. Safe to call from inside a chunk (the nested loop then runs on the calling thread). */
void k_parallel_for(int64_t n, int64_t grain, k_range_fn fn, void *ctx);

/* The threads k_parallel_for may use (1 when it runs everything on the caller's thread). */
int k_parallel_threads(void);

#endif
