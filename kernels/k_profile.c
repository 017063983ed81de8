/* k_profile.c — the per-thread note of k_profile.h. */
#include "k_profile.h"

#include <stdarg.h>
#include <stdio.h>

atomic_int k_profile_on;

static _Thread_local char t_note[96];

void k_profile_note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_note, sizeof t_note, fmt, ap);
  va_end(ap);
}

const char *k_profile_take(void) {
  static _Thread_local char taken[sizeof t_note];
  for (unsigned i = 0; i < sizeof t_note; i++) taken[i] = t_note[i];
  t_note[0] = 0;
  return taken;
}
