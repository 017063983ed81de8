/* fuzz_file.h — for harnesses whose reader takes a path: a file of the given name in a folder
 * of this process's own (made once under /tmp), and the write of each input into it. Static:
 * each harness is its own program. */
#ifndef KILN_FUZZ_FILE_H
#define KILN_FUZZ_FILE_H

#include <stdio.h>
#include <stdlib.h>

/* PREFIX-XXXXXX/NAME, the folder made on the first call (abort if it cannot be). */
static const char *fuzz_file_path(const char *prefix, const char *name) {
  static char path[256];
  if (!path[0]) {
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(dir)) abort();
    snprintf(path, sizeof path, "%s/%s", dir, name);
  }
  return path;
}

/* The input into the file: 0, or nonzero when it could not be written whole. */
static int fuzz_write(const char *path, const unsigned char *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return 1;
  size_t put = size ? fwrite(data, 1, size, f) : 0;
  return (fclose(f) != 0) | (put != size);
}

#endif
