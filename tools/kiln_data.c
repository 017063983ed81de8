/* kiln_data.c — the arrays kiln train reads (kiln_data.h). A .npy file is mapped and only
 * its header parsed (rt_npy_header); a batch copies the rows it takes. A .npz is a zip
 * archive of .npy files: its central directory (zip64 too, which NumPy writes) names the
 * entries; a stored entry is an .npy inside the mapped archive, a deflated one is inflated
 * once through zlib and its CRC checked. Every check that can fail runs here, before the
 * first step: kiln_data_gather cannot fail. */
#include "kiln_data.h"
#include "kiln_tools.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- one mapped file ---- */

typedef struct {
  unsigned char *p;
  size_t n;
} kiln_map;

static int kiln_map_file(const char *path, kiln_map *m) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  m->p = NULL, m->n = 0;
  if (fd < 0) return kiln_train_error("%s: %s", path, strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return close(fd), kiln_train_error("%s: not a regular file", path);
  m->n = (size_t)st.st_size;
  if (m->n == 0) return close(fd), kiln_train_error("%s: the file is empty", path);
  void *p = mmap(NULL, m->n, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return kiln_train_error("%s: cannot map it: %s", path, strerror(errno));
  m->p = p;
  return 0;
}

/* ---- columns ---- */

static kiln_column *kiln_data_add(kiln_data *d, const char *name, const char *source) {
  if (d->n == KILN_MAX_COLUMNS) return kiln_train_error("more than %d arrays", KILN_MAX_COLUMNS), NULL;
  if (strlen(name) >= sizeof d->col[0].name) return kiln_train_error("%s: the name '%s' is too long", source, name), NULL;
  if (kiln_data_find(d, name) >= 0)
    return kiln_train_error("%s: a second array for '%s' (the first is %s)", source, name, d->col[kiln_data_find(d, name)].source), NULL;
  kiln_column *c = &d->col[d->n++];
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", name);
  snprintf(c->source, sizeof c->source, "%s", source);
  return c;
}

/* The column's shape-derived sizes; the shape must have an example axis. */
static int kiln_data_shape(kiln_column *c) {
  if (c->head.shape.rank < 1) return kiln_train_error("%s: a scalar array has no examples (its first axis runs over them)", c->source);
  c->row_elems = 1;
  for (int k = 1; k < c->head.shape.rank; k++) c->row_elems *= c->head.shape.d[k];
  c->row_bytes = (size_t)c->row_elems * (c->head.wide ? 8 : 4);
  return 0;
}

/* 8-byte values narrowed once over the whole array, in chunks, so a value that does not fit
 * is reported now and kiln_data_gather's narrowing cannot fail later. */
static int kiln_data_scan(const kiln_column *c) {
  if (!c->head.wide) return 0;
  enum { CHUNK = 1 << 14 };
  char err[RT_ERR_LEN];
  float *scratch = malloc(sizeof(float) * CHUNK);
  int64_t n = c->head.shape.d[0] * c->row_elems;
  int rc = scratch ? 0 : kiln_train_error("out of memory");
  for (int64_t at = 0; at < n && !rc; at += CHUNK)
    if (rt_npy_narrow(&c->head, c->data, at, n - at < CHUNK ? n - at : CHUNK, scratch, c->source, err, sizeof err))
      rc = kiln_train_error("%s", err);
  free(scratch);
  return rc;
}

/* An .npy image (a file, or an entry of an archive) at buf as column c. */
static int kiln_data_npy(kiln_column *c, const unsigned char *buf, size_t len) {
  char err[RT_ERR_LEN];
  if (rt_npy_header(buf, len, c->source, &c->head, err, sizeof err)) return kiln_train_error("%s", err);
  if (c->head.fortran && c->head.shape.rank > 1)
    return kiln_train_error("%s: the array is in Fortran order; kiln train reads examples as C-order rows "
                           "(save numpy.ascontiguousarray(x))", c->source);
  c->data = buf + c->head.offset;
  return kiln_data_shape(c) || kiln_data_scan(c);
}

static int kiln_data_npy_file(kiln_data *d, const char *name, const char *path) {
  kiln_column *c = kiln_data_add(d, name, path);
  kiln_map m;
  if (!c || kiln_map_file(path, &m)) return 1;
  c->map = m.p, c->map_len = m.n;
  return kiln_data_npy(c, m.p, m.n);
}

/* ---- .npz: a zip archive ---- */

static uint32_t kiln_le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t kiln_le32(const unsigned char *p) { return kiln_le16(p) | kiln_le16(p + 2) << 16; }
static uint64_t kiln_le64(const unsigned char *p) { return kiln_le32(p) | (uint64_t)kiln_le32(p + 4) << 32; }

typedef struct {
  const char *path;
  kiln_map m;
  uint64_t cd, count;           /* the central directory's offset and entries */
} kiln_zip;

typedef struct {
  char name[256];
  uint32_t method, flags, crc;
  uint64_t csize, usize, local;
} kiln_zip_entry;

#define KILN_ZIP_BAD(z, what) kiln_train_error("%s: not a readable .npz (zip) archive: %s", (z)->path, what)

/* The end of central directory record, and zip64's when the short one says so. */
static int kiln_zip_end(kiln_zip *z) {
  const unsigned char *p = z->m.p;
  size_t n = z->m.n, min = n > 22 + 65535 ? n - 22 - 65535 : 0;
  if (n < 22) return KILN_ZIP_BAD(z, "too short");
  size_t at = n - 22;
  while (kiln_le32(p + at) != 0x06054b50u || at + 22 + kiln_le16(p + at + 20) != n) {
    if (at == min) return KILN_ZIP_BAD(z, "no end of central directory record");
    at--;
  }
  z->count = kiln_le16(p + at + 10), z->cd = kiln_le32(p + at + 16);
  if (z->count == 0xffff || z->cd == 0xffffffffu) {   /* zip64: its locator sits just before */
    if (at < 20 || kiln_le32(p + at - 20) != 0x07064b50u) return KILN_ZIP_BAD(z, "no zip64 locator");
    uint64_t e = kiln_le64(p + at - 12);
    if (n < 56 || e > n - 56 || kiln_le32(p + e) != 0x06064b50u) return KILN_ZIP_BAD(z, "bad zip64 end record");
    z->count = kiln_le64(p + e + 32), z->cd = kiln_le64(p + e + 48);
  }
  if (z->cd >= n) return KILN_ZIP_BAD(z, "the central directory lies past the end");
  return 0;
}

/* Zip64's extra field (id 1) holds the 8-byte sizes and offset whose 4-byte fields are full. */
static int kiln_zip_extra64(const kiln_zip *z, const unsigned char *x, size_t len, kiln_zip_entry *e) {
  for (size_t at = 0; at + 4 <= len;) {
    uint32_t id = kiln_le16(x + at), sz = kiln_le16(x + at + 2);
    if (at + 4 + sz > len) break;
    if (id == 1) {
      const unsigned char *q = x + at + 4, *end = q + sz;
      uint64_t *fields[3] = {&e->usize, &e->csize, &e->local};
      for (int k = 0; k < 3; k++) {
        if (*fields[k] != 0xffffffffu) continue;
        if (q + 8 > end) return KILN_ZIP_BAD(z, "short zip64 extra field");
        *fields[k] = kiln_le64(q), q += 8;
      }
    }
    at += 4 + sz;
  }
  return 0;
}

/* The central directory entry at *at; *at moves past it. */
static int kiln_zip_entry_at(const kiln_zip *z, uint64_t *at, kiln_zip_entry *e) {
  const unsigned char *p = z->m.p;
  if (z->m.n < 46 || *at > z->m.n - 46 || kiln_le32(p + *at) != 0x02014b50u) return KILN_ZIP_BAD(z, "bad central directory entry");
  const unsigned char *h = p + *at;
  uint32_t nlen = kiln_le16(h + 28), xlen = kiln_le16(h + 30), clen = kiln_le16(h + 32);
  if (*at + 46 + nlen + xlen + clen > z->m.n) return KILN_ZIP_BAD(z, "central directory entry past the end");
  e->flags = kiln_le16(h + 8), e->method = kiln_le16(h + 10), e->crc = kiln_le32(h + 16);
  e->csize = kiln_le32(h + 20), e->usize = kiln_le32(h + 24), e->local = kiln_le32(h + 42);
  snprintf(e->name, sizeof e->name, "%.*s", (int)(nlen < sizeof e->name ? nlen : sizeof e->name - 1), (const char *)h + 46);
  *at += 46 + nlen + xlen + clen;
  return kiln_zip_extra64(z, h + 46 + nlen, xlen, e);
}

/* Where the entry's data starts, past its local header. */
static int kiln_zip_data(const kiln_zip *z, const kiln_zip_entry *e, const unsigned char **data) {
  const unsigned char *p = z->m.p;
  if (z->m.n < 30 || e->local > z->m.n - 30 || kiln_le32(p + e->local) != 0x04034b50u) return KILN_ZIP_BAD(z, "bad local header");
  uint64_t at = e->local + 30 + kiln_le16(p + e->local + 26) + kiln_le16(p + e->local + 28);
  if (at > z->m.n || e->csize > z->m.n - at) return KILN_ZIP_BAD(z, "an entry runs past the end");
  *data = p + at;
  return 0;
}

/* A deflated entry inflated into memory the column owns, its CRC checked. */
static int kiln_zip_inflate(const kiln_zip *z, const kiln_zip_entry *e, const unsigned char *src, kiln_column *c) {
  if (e->usize > (uint64_t)SIZE_MAX / 2) return KILN_ZIP_BAD(z, "an entry too large");
  unsigned char *out = malloc(e->usize ? (size_t)e->usize : 1);
  if (!out) return kiln_train_error("%s: out of memory inflating %llu bytes", c->source, (unsigned long long)e->usize);
  c->owned = out;
  z_stream s = {0};
  if (inflateInit2(&s, -MAX_WBITS) != Z_OK) return kiln_train_error("%s: zlib would not start", c->source);
  uint64_t in_left = e->csize, out_left = e->usize;
  const uInt piece = 1u << 30;   /* avail_in and avail_out are 32-bit: feed and drain in pieces */
  int rc;
  s.next_in = (unsigned char *)src, s.next_out = out;
  do {
    if (s.avail_in == 0 && in_left) s.avail_in = (uInt)(in_left < piece ? in_left : piece), in_left -= s.avail_in;
    if (s.avail_out == 0 && out_left) s.avail_out = (uInt)(out_left < piece ? out_left : piece), out_left -= s.avail_out;
    rc = inflate(&s, Z_NO_FLUSH);
  } while (rc == Z_OK);   /* Z_BUF_ERROR: no progress (input or room used up) */
  uint64_t out_done = (uint64_t)(s.next_out - out);
  inflateEnd(&s);
  if (rc != Z_STREAM_END || out_done != e->usize)
    return kiln_train_error("%s: the deflated data is corrupt or truncated", c->source);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (uint64_t at = 0; at < out_done; at += 1u << 30)
    crc = crc32(crc, out + at, (uInt)(out_done - at < 1u << 30 ? out_done - at : 1u << 30));
  if (crc != e->crc) return kiln_train_error("%s: CRC mismatch (the archive is corrupt)", c->source);
  return kiln_data_npy(c, out, (size_t)e->usize);
}

/* Entry KEY.npy of the archive as column `name`. */
static int kiln_zip_column(kiln_data *d, const kiln_zip *z, const kiln_zip_entry *e, const char *name) {
  char source[4200];
  snprintf(source, sizeof source, "%s:%.*s", z->path, (int)strlen(e->name) - 4, e->name);
  kiln_column *c = kiln_data_add(d, name, source);
  const unsigned char *data = NULL;
  if (!c || kiln_zip_data(z, e, &data)) return 1;
  if (e->flags & 1) return kiln_train_error("%s: the entry is encrypted", source);
  if (e->method == 0) return e->csize != e->usize ? KILN_ZIP_BAD(z, "a stored entry's sizes differ") : kiln_data_npy(c, data, (size_t)e->csize);
  if (e->method == 8) return kiln_zip_inflate(z, e, data, c);
  return kiln_train_error("%s: compression method %u is not supported (stored and deflated are: numpy.savez and savez_compressed)",
                         source, e->method);
}

/* The archive's arrays: only entry KEY when key is set (as column `name`), else every one
 * under its own name. The archive stays mapped while a column refers to it: the first
 * column made from it owns the mapping. */
static int kiln_data_npz(kiln_data *d, const char *path, const char *key, const char *name) {
  kiln_zip z = {.path = path};
  if (kiln_map_file(path, &z.m)) return 1;
  int first = d->n, rc = kiln_zip_end(&z), found = 0;
  uint64_t at = z.cd;
  for (uint64_t k = 0; k < z.count && !rc; k++) {
    kiln_zip_entry e;
    if ((rc = kiln_zip_entry_at(&z, &at, &e))) break;
    if (!kiln_ends_with(e.name, ".npy")) continue;
    char base[256];
    snprintf(base, sizeof base, "%.*s", (int)strlen(e.name) - 4, e.name);
    if (key && strcmp(base, key) != 0) continue;
    found++;
    rc = kiln_zip_column(d, &z, &e, key ? name : base);
  }
  if (!rc && !found) rc = key ? kiln_train_error("%s: no array '%s' in the archive", path, key) : kiln_train_error("%s: the archive holds no .npy arrays", path);
  if (d->n > first) d->col[first].map = z.m.p, d->col[first].map_len = z.m.n;
  else munmap(z.m.p, z.m.n);
  return rc;
}

/* ---- the option's list ---- */

/* One item of the list: NAME=X.npy, NAME=Y.npz[:KEY] or Y.npz. */
static int kiln_data_item(kiln_data *d, char *item, const char *flag) {
  char *eq = strchr(item, '='), *path = eq ? eq + 1 : item;
  const char *name = eq ? item : NULL;
  if (eq) *eq = 0;
  if (name && !*name) return kiln_train_error("%s %s=%s: the input's name is empty", flag, name, path);
  char *npz = strstr(path, ".npz:");
  const char *key = npz ? npz + 5 : name;   /* NAME=Y.npz takes the entry NAME */
  if (npz) npz[4] = 0;
  if (kiln_ends_with(path, ".npz")) return kiln_data_npz(d, path, key, name ? name : key);
  if (!kiln_ends_with(path, ".npy"))
    return kiln_train_error("%s %s: expected NAME=FILE.npy, NAME=FILE.npz[:KEY] or FILE.npz", flag, path);
  if (!name) return kiln_train_error("%s %s: name the model input it feeds (NAME=%s)", flag, path, path);
  return kiln_data_npy_file(d, name, path);
}

/* Every column the same number of examples. */
static int kiln_data_lengths(kiln_data *d, const char *flag) {
  if (d->n == 0) return kiln_train_error("%s: no arrays given", flag);
  d->rows = (long)d->col[0].head.shape.d[0];
  for (int k = 1; k < d->n; k++)
    if (d->col[k].head.shape.d[0] != d->rows)
      return kiln_train_error("%s: %s holds %lld examples, %s holds %ld (the first axis runs over examples)", flag,
                             d->col[k].source, (long long)d->col[k].head.shape.d[0], d->col[0].source, d->rows);
  return 0;
}

int kiln_data_open(const char *spec, const char *flag, kiln_data *d) {
  char *copy = strdup(spec), *save = NULL;
  int rc = 0;
  memset(d, 0, sizeof *d);
  if (!copy) return kiln_train_error("out of memory");
  for (char *item = strtok_r(copy, ",", &save); item && !rc; item = strtok_r(NULL, ",", &save)) rc = kiln_data_item(d, item, flag);
  free(copy);
  return rc || kiln_data_lengths(d, flag);
}

int kiln_data_column_own(kiln_data *d, const char *name, const char *source, k_dtype t, const k_shape *shape, void *data) {
  kiln_column *c = kiln_data_add(d, name, source);
  if (!c) return free(data), 1;
  c->head.dtype = t, c->head.shape = *shape;
  c->data = c->owned = data;
  if (kiln_data_shape(c)) return 1;
  d->rows = (long)shape->d[0];
  return 0;
}

void kiln_data_free(kiln_data *d) {
  for (int k = 0; k < d->n; k++) {
    if (d->col[k].map) munmap(d->col[k].map, d->col[k].map_len);
    free(d->col[k].owned);
  }
  d->n = 0;
}

int kiln_data_find(const kiln_data *d, const char *name) {
  for (int k = 0; k < d->n; k++)
    if (strcmp(d->col[k].name, name) == 0) return k;
  return -1;
}

void kiln_data_gather(const kiln_column *c, const long *idx, long k, void *dst) {
  char err[RT_ERR_LEN];
  for (long r = 0; r < k; r++) {
    unsigned char *to = (unsigned char *)dst + (size_t)r * (size_t)c->row_elems * 4;
    if (!c->head.wide) memcpy(to, c->data + (size_t)idx[r] * c->row_bytes, c->row_bytes);
    else (void)rt_npy_narrow(&c->head, c->data, (int64_t)idx[r] * c->row_elems, c->row_elems, to, c->source, err, sizeof err);
  }
}
