/* k_profile.h — what a kernel tells a profile about one call: the path it took and how it
 * split the work ("direct 1x1 rows, 6 tasks"), shown beside the step's time by the
 * runtime's profiler (runtime/rt_profile.c). Off unless a profiled model exists: then each
 * note is a formatted string in a per-thread buffer; otherwise one well-predicted branch. */
#ifndef KILN_K_PROFILE_H
#define KILN_K_PROFILE_H

#include <stdatomic.h>

extern atomic_int k_profile_on;   /* set by the runtime once a model is profiled */

void k_profile_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last note made on this thread since the last take, or "" when none; clears it. */
const char *k_profile_take(void);

#define K_PROFILE_NOTE(...)                     \
  do {                                          \
    if (atomic_load_explicit(&k_profile_on, memory_order_relaxed)) k_profile_note(__VA_ARGS__); \
  } while (0)

#endif
