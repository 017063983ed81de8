/* fuzz_file.h — for harnesses whose reader takes a path: a file of the given name in a folder
 * of this process's own (made once under /tmp), and the write of each input into it. Static:
 * each harness is its own program. */
#ifndef KILN_FUZZ_FILE_H
#define KILN_FUZZ_FILE_H

#include <stdio.h>
#include <stdlib.h>

static char fuzz_file_dir[128], fuzz_file_name[256];

/* At exit (libFuzzer's driver ends its runs with exit): the file and its folder go, so runs
 * leave nothing under /tmp. */
static void fuzz_file_remove(void) {
  remove(fuzz_file_name);
  remove(fuzz_file_dir);
}

/* PREFIX-XXXXXX/NAME, the folder made on the first call (abort if it cannot be). */
static const char *fuzz_file_path(const char *prefix, const char *name) {
  if (!fuzz_file_name[0]) {
    snprintf(fuzz_file_dir, sizeof fuzz_file_dir, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(fuzz_file_dir)) abort();
    snprintf(fuzz_file_name, sizeof fuzz_file_name, "%s/%s", fuzz_file_dir, name);
    atexit(fuzz_file_remove);
  }
  return fuzz_file_name;
}

/* The input into the file: 0, or nonzero when it could not be written whole. */
static int fuzz_write(const char *path, const unsigned char *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return 1;
  size_t put = size ? fwrite(data, 1, size, f) : 0;
  return (fclose(f) != 0) | (put != size);
}

#endif
