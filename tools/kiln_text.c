/* kiln_text.c — string helpers the kiln commands share (kiln_tools.h), in a file of their own
 * so that the data readers link without the command line (tests/fuzz/fuzz_npz.c). */
#include <string.h>

#include "kiln_tools.h"

bool kiln_ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}
