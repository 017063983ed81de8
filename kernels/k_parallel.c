/* k_parallel.c — k_parallel_for. This first version runs the chunks in order on the calling
 * thread; the chunking contract (k_parallel.h) is what kernels rely on. */
#include "k_parallel.h"

void k_parallel_for(int64_t n, int64_t grain, k_range_fn fn, void *ctx) {
  if (grain < 1) grain = 1;
  for (int64_t lo = 0; lo < n; lo += grain) fn(ctx, lo, lo + grain < n ? lo + grain : n);
}

int k_parallel_threads(void) { return 1; }
