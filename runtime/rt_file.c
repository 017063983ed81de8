/* rt_file.c — whole-file reads and atomic whole-file writes for the model I/O formats.
 * A write goes to PATH.tmp.XXXXXX in the same folder, is fsync'd, then renamed over PATH,
 * so readers see either the old file or the complete new one, never a torn write. */
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rt_verrf(char *err, size_t err_len, const char *fmt, va_list ap) {
  if (err && err_len) vsnprintf(err, err_len, fmt, ap);
  return 1;
}

int rt_errf(char *err, size_t err_len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rt_verrf(err, err_len, fmt, ap);
  va_end(ap);
  return 1;
}

static int read_fully(int fd, char *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = read(fd, buf + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

int rt_file_read_all(const char *path, void **data, size_t *len, char *err, size_t err_len) {
  *data = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    rt_errf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rt_errf(err, err_len, "%s: not a regular file", path);
    close(fd);
    return -1;
  }
  size_t n = (size_t)st.st_size;
  char *buf = malloc(n ? n : 1);
  if (!buf || read_fully(fd, buf, n) != 0) {
    rt_errf(err, err_len, "%s: cannot read %zu bytes", path, n);
    free(buf);
    close(fd);
    return -1;
  }
  close(fd);
  *data = buf;
  *len = n;
  return 0;
}

int rt_file_write_fully(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* The rename is durable only once the folder's entry is on disk; best effort, since some
 * file systems refuse fsync on a directory. */
static void fsync_parent(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir) slash[1] = '\0';
  else if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

int rt_file_write_atomic(const char *path, const rt_iovec *parts, int nparts, char *err,
                         size_t err_len) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp) {
    rt_errf(err, err_len, "%s: path too long", path);
    return -1;
  }
  int fd = mkstemp(tmp);
  if (fd < 0) {
    rt_errf(err, err_len, "%s: cannot create temporary file: %s", path, strerror(errno));
    return -1;
  }
  int bad = fchmod(fd, 0644);  /* mkstemp makes 0600; a weights file is meant to be shared */
  for (int i = 0; i < nparts && !bad; i++) bad = rt_file_write_fully(fd, parts[i].data, parts[i].len);
  if (!bad) bad = fsync(fd);
  int saved = errno;
  if (close(fd) != 0 && !bad) bad = -1, saved = errno;
  if (!bad && rename(tmp, path) != 0) bad = -1, saved = errno;
  if (bad) {
    unlink(tmp);
    rt_errf(err, err_len, "%s: write failed: %s", path, strerror(saved));
    return -1;
  }
  fsync_parent(path);
  return 0;
}
