/* kiln_idx.c — kiln train's MNIST-layout data sets: IDX files of bytes (plain, or gzipped
 * through `gzip -dc`), the images scaled to [0,1] and standardised with the training images'
 * mean and deviation, the labels as int32. Every header is checked against the file's size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln_data.h"

typedef struct {
  unsigned char *p;
  size_t n;
} kiln_bytes;

/* The whole of f into b; 1 on a read error or without memory. */
static int kiln_read_stream(FILE *f, kiln_bytes *b) {
  size_t cap = 1 << 16;
  b->n = 0;
  if (!(b->p = malloc(cap))) return 1;
  for (size_t got;; b->n += got) {
    if (b->n == cap) {
      unsigned char *bigger = realloc(b->p, cap *= 2);
      if (!bigger) return free(b->p), b->p = NULL, 1;
      b->p = bigger;
    }
    if ((got = fread(b->p + b->n, 1, cap - b->n, f)) == 0) break;
  }
  return ferror(f) ? 1 : 0;
}

/* A gzipped file through `gzip -dc`; the path goes in single quotes, so it may hold none. */
static int kiln_read_gz(const char *path, kiln_bytes *b) {
  if (strchr(path, '\'')) return kiln_train_error("%s: refusing a path that contains a quote", path);
  char *cmd = malloc(strlen(path) + 64);
  if (!cmd) return kiln_train_error("out of memory");
  sprintf(cmd, "gzip -dc -- '%s' 2>/dev/null", path);
  FILE *f = popen(cmd, "r");
  free(cmd);
  if (!f) return kiln_train_error("cannot run gzip to read %s", path);
  int rc = kiln_read_stream(f, b);
  if (pclose(f) != 0 || rc) {
    free(b->p), b->p = NULL;
    return kiln_train_error("%s: cannot decompress it (not gzip data, truncated, or no gzip)", path);
  }
  return 0;
}

static int kiln_read_plain(const char *path, kiln_bytes *b) {
  char err[RT_ERR_LEN];
  void *data = NULL;
  if (rt_file_read_all(path, &data, &b->n, err, sizeof err)) return kiln_train_error("%s", err);
  b->p = data;
  return 0;
}

/* DIR/NAME, or else DIR/NAME.gz, read whole; `path` is left naming the file read. */
static int kiln_read_idx(const char *dir, const char *name, kiln_bytes *b, char *path, size_t n) {
  snprintf(path, n, "%s/%s", dir, name);
  if (access(path, F_OK) == 0) return kiln_read_plain(path, b);
  snprintf(path, n, "%s/%s.gz", dir, name);
  if (access(path, F_OK) == 0) return kiln_read_gz(path, b);
  return kiln_train_error("%s/%s: no such file (nor %s.gz)", dir, name, name);
}

static uint32_t kiln_be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* An IDX file of unsigned bytes with `rank` dimensions: its magic, its dims, and exactly as
 * many bytes of data as the dims say. Returns the offset of the data, or 0 after a message. */
static size_t kiln_idx_header(const kiln_bytes *b, const char *path, int rank, uint32_t *dims) {
  size_t head = 4 + 4 * (size_t)rank;
  uint32_t want = 0x800u | (uint32_t)rank;
  if (b->n < head) return kiln_train_error("%s: too short for an IDX header (%zu bytes)", path, b->n), 0;
  if (kiln_be32(b->p) != want)
    return kiln_train_error("%s: not an IDX file of bytes with %d dimension%s (magic 0x%08x, expected 0x%08x)", path,
                            rank, rank == 1 ? "" : "s", kiln_be32(b->p), want), 0;
  unsigned long long bytes = 1;
  for (int k = 0; k < rank; k++) {
    dims[k] = kiln_be32(b->p + 4 + 4 * k);
    if (k > 0 && (dims[k] == 0 || dims[k] > 16384))
      return kiln_train_error("%s: an image dimension of %u is not plausible", path, dims[k]), 0;
    bytes *= dims[k];
  }
  if (bytes != b->n - head)
    return kiln_train_error("%s: the header promises %llu bytes of data, the file holds %zu", path, bytes, b->n - head), 0;
  return head;
}

/* The images of one split, scaled to [0,1] (standardised later, once the mean is known). */
static int kiln_idx_split_images(const kiln_bytes *b, const char *path, long limit, kiln_idx_split *s, uint32_t dims[3]) {
  size_t at = kiln_idx_header(b, path, 3, dims);
  if (!at) return 1;
  s->n = limit && limit < (long)dims[0] ? limit : (long)dims[0];
  size_t count = (size_t)s->n * dims[1] * dims[2];
  if (!(s->x = malloc(sizeof(float) * (count ? count : 1)))) return kiln_train_error("out of memory");
  for (size_t i = 0; i < count; i++) s->x[i] = b->p[at + i] / 255.0f;
  return 0;
}

static int kiln_idx_split_labels(const kiln_bytes *b, const char *path, uint32_t images, kiln_idx_split *s) {
  uint32_t n;
  size_t at = kiln_idx_header(b, path, 1, &n);
  if (!at) return 1;
  if (n != images) return kiln_train_error("%s: %u labels for %u images", path, n, images);
  if (!(s->y = malloc(sizeof(int32_t) * (size_t)(s->n ? s->n : 1)))) return kiln_train_error("out of memory");
  for (long i = 0; i < s->n; i++) s->y[i] = b->p[at + (size_t)i];
  return 0;
}

/* PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte of dir, the first `limit` of them. */
static int kiln_load_split(const char *dir, const char *prefix, long limit, kiln_idx_split *s, uint32_t dims[3]) {
  char name[64], path[4200];
  kiln_bytes b = {0};
  snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
  int rc = kiln_read_idx(dir, name, &b, path, sizeof path) || kiln_idx_split_images(&b, path, limit, s, dims);
  free(b.p), b.p = NULL;
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
  rc = rc || kiln_read_idx(dir, name, &b, path, sizeof path) || kiln_idx_split_labels(&b, path, dims[0], s);
  free(b.p);
  return rc;
}

/* Both splits standardised by the training images' mean and deviation. */
static void kiln_standardise(kiln_idx_set *ds) {
  size_t size = (size_t)ds->rows * (size_t)ds->cols, n = (size_t)ds->train.n * size;
  double sum = 0, sq = 0;
  for (size_t i = 0; i < n; i++) sum += ds->train.x[i], sq += (double)ds->train.x[i] * ds->train.x[i];
  double mean = n ? sum / (double)n : 0, var = n ? sq / (double)n - mean * mean : 0;
  float m = (float)mean, inv = var > 1e-12 ? (float)(1 / sqrt(var)) : 1.0f;
  for (size_t i = 0; i < n; i++) ds->train.x[i] = (ds->train.x[i] - m) * inv;
  for (size_t i = 0; i < (size_t)ds->test.n * size; i++) ds->test.x[i] = (ds->test.x[i] - m) * inv;
}

void kiln_idx_free(kiln_idx_set *ds) {
  free(ds->train.x), free(ds->train.y), free(ds->test.x), free(ds->test.y);
}

int kiln_idx_load(const char *dir, long limit, kiln_idx_set *ds) {
  struct stat st;
  uint32_t tr[3] = {0}, te[3] = {0};
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return kiln_train_error("%s: no such directory", dir);
  if (kiln_load_split(dir, "train", limit, &ds->train, tr) || kiln_load_split(dir, "t10k", limit, &ds->test, te))
    return 1;
  if (tr[1] != te[1] || tr[2] != te[2])
    return kiln_train_error("%s: training images are %ux%u, test images %ux%u", dir, tr[1], tr[2], te[1], te[2]);
  if (ds->test.n == 0) return kiln_train_error("%s: the test split holds no images", dir);
  ds->rows = (int)tr[1], ds->cols = (int)tr[2];
  kiln_standardise(ds);
  return 0;
}

