/* rt_npy.c — NumPy .npy files (format 1.0 and 2.0) for `kiln run --input/--output`.
 * The header is a Python dict literal, read by a small tokenizer that accepts exactly the
 * keys 'descr', 'fortran_order' and 'shape'; the data must be exactly the size the header
 * promises. Kiln's tensors are little-endian float32 and int32 in C order; NumPy's defaults
 * (float64, int64) and Fortran order are converted as they are read, within the kind (NumPy's
 * same_kind rule), when nothing is lost but float rounding: a float64 beyond float32's range,
 * or an int64 beyond int32's, is refused with a hint. rt_npy.note says what was converted. */
#include "runtime.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAX_HEADER (1u << 20)   /* numpy itself refuses headers past 10 kB by default */

typedef struct {
  const char *p, *end;
  const char *label;
  char *err;
  size_t err_len;
  int wide;              /* the data is 8-byte ('<f8', '<i8'), converted to the 4-byte dtype */
} npy_parser;

static int npy_fail(npy_parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int npy_fail(npy_parser *P, const char *fmt, ...) {
  char what[RT_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  rt_errf(P->err, P->err_len, "%s: %s", P->label, what);
  return -1;
}

static void npy_ws(npy_parser *P) {
  while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r')) P->p++;
}

/* Consumes c (after blanks) if it is next. */
static int npy_eat(npy_parser *P, char c) {
  npy_ws(P);
  if (P->p < P->end && *P->p == c) {
    P->p++;
    return 1;
  }
  return 0;
}

/* A quoted literal of printable ASCII without escapes, copied into buf. */
static int npy_string(npy_parser *P, char *buf, size_t len) {
  npy_ws(P);
  if (P->p >= P->end || (*P->p != '\'' && *P->p != '"')) return npy_fail(P, "header: expected a quoted string");
  char q = *P->p++;
  size_t n = 0;
  while (P->p < P->end && *P->p != q) {
    if (*P->p < 0x20 || *P->p > 0x7e || *P->p == '\\') return npy_fail(P, "header: bad character in string");
    if (n + 1 >= len) return npy_fail(P, "header: string too long");
    buf[n++] = *P->p++;
  }
  if (P->p >= P->end) return npy_fail(P, "header: unterminated string");
  P->p++;
  buf[n] = 0;
  return 0;
}

static int npy_bool(npy_parser *P, int *out) {
  npy_ws(P);
  size_t left = (size_t)(P->end - P->p);
  if (left >= 4 && memcmp(P->p, "True", 4) == 0) *out = 1, P->p += 4;
  else if (left >= 5 && memcmp(P->p, "False", 5) == 0) *out = 0, P->p += 5;
  else return npy_fail(P, "header: 'fortran_order' is not True or False");
  return 0;
}

static int npy_int(npy_parser *P, int64_t *out) {
  npy_ws(P);
  if (P->p >= P->end || *P->p < '0' || *P->p > '9') return npy_fail(P, "header: shape entries must be non-negative integers");
  int64_t v = 0;
  while (P->p < P->end && *P->p >= '0' && *P->p <= '9') {
    if (v > (INT64_MAX - 9) / 10) return npy_fail(P, "header: shape entry too large");
    v = v * 10 + (*P->p++ - '0');
  }
  *out = v;
  return 0;
}

/* A Python tuple: (), (3,), (3, 4) or (3, 4,) — "(3)" is an int in Python, so refused. */
static int npy_shape(npy_parser *P, k_shape *s) {
  if (!npy_eat(P, '(')) return npy_fail(P, "header: 'shape' is not a tuple");
  s->rank = 0;
  int comma = 0;
  while (!npy_eat(P, ')')) {
    if (s->rank == K_MAX_RANK) return npy_fail(P, "header: rank exceeds the maximum %d", K_MAX_RANK);
    if (npy_int(P, &s->d[s->rank++])) return -1;
    comma = npy_eat(P, ',');
    npy_ws(P);
    if (!comma && (P->p >= P->end || *P->p != ')')) return npy_fail(P, "header: expected ',' or ')' in shape");
  }
  if (s->rank == 1 && !comma) return npy_fail(P, "header: 'shape' is not a tuple");
  return 0;
}

static int npy_descr(npy_parser *P, const char *d, k_dtype *t) {
  if (strcmp(d, "<f4") == 0 || strcmp(d, "<f8") == 0) *t = K_F32;
  else if (strcmp(d, "<i4") == 0 || strcmp(d, "<i8") == 0) *t = K_I32;
  else if (d[0] == '>') return npy_fail(P, "big-endian data ('%s') is not supported", d);
  else
    return npy_fail(P, "dtype '%s' is not supported (float32 and int32 are; float64 and int64 are converted): "
                       "save it with .astype(numpy.float32) or .astype(numpy.int32)", d);
  P->wide = d[2] == '8';
  return 0;
}

/* One "'key': value" pair; seen[] catches repeated keys. */
static int npy_item(npy_parser *P, int seen[3], rt_npy *out, int *fortran) {
  char key[32], descr[32];
  if (npy_string(P, key, sizeof key)) return -1;
  if (!npy_eat(P, ':')) return npy_fail(P, "header: expected ':' after '%s'", key);
  int k = strcmp(key, "descr") == 0 ? 0 : strcmp(key, "fortran_order") == 0 ? 1 : strcmp(key, "shape") == 0 ? 2 : -1;
  if (k < 0) return npy_fail(P, "header: unknown key '%s'", key);
  if (seen[k]++) return npy_fail(P, "header: key '%s' appears twice", key);
  if (k == 0) return npy_string(P, descr, sizeof descr) || npy_descr(P, descr, &out->dtype);
  if (k == 1) return npy_bool(P, fortran);
  return npy_shape(P, &out->shape);
}

static int npy_dict(npy_parser *P, rt_npy *out, int *fortran_out) {
  int seen[3] = {0}, fortran = 0;
  if (!npy_eat(P, '{')) return npy_fail(P, "header: not a dict");
  while (!npy_eat(P, '}')) {
    if (npy_item(P, seen, out, &fortran)) return -1;
    if (!npy_eat(P, ',')) {
      if (!npy_eat(P, '}')) return npy_fail(P, "header: expected ',' or '}'");
      break;
    }
  }
  npy_ws(P);
  if (P->p != P->end) return npy_fail(P, "header: trailing characters after the dict");
  const char *names[3] = {"descr", "fortran_order", "shape"};
  for (int k = 0; k < 3; k++)
    if (!seen[k]) return npy_fail(P, "header: missing key '%s'", names[k]);
  *fortran_out = fortran;
  return 0;
}

/* Element i of the file's data (8 bytes wide or not) as the 4-byte dtype t into dst[j]; a
 * value the conversion would lose is refused. */
static int npy_convert_one(npy_parser *P, const unsigned char *src, int64_t i, k_dtype t, void *dst, int64_t j) {
  if (!P->wide) return memcpy((char *)dst + 4 * j, src + 4 * i, 4), 0;
  if (t == K_F32) {
    double v;
    memcpy(&v, src + 8 * i, 8);
    float f = (float)v;
    if (isfinite(v) && isinf(f))   /* finite, yet beyond float32 */
      return npy_fail(P, "float64 value %g at element %lld is beyond float32's range", v, (long long)i);
    memcpy((char *)dst + 4 * j, &f, 4);
    return 0;
  }
  int64_t v;
  memcpy(&v, src + 8 * i, 8);
  if (v < INT32_MIN || v > INT32_MAX)
    return npy_fail(P, "int64 value %lld at element %lld is beyond int32's range", (long long)v, (long long)i);
  int32_t w = (int32_t)v;
  memcpy((char *)dst + 4 * j, &w, 4);
  return 0;
}

/* The data (n elements) into dst in C order as the 4-byte dtype: element o of C order is, in
 * Fortran order, at the offset whose index strides run the other way. */
static int npy_convert(npy_parser *P, const unsigned char *src, const k_shape *s, k_dtype t, int fortran, void *dst) {
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++) n *= s->d[d];
  for (int64_t o = 0; o < n; o++) {
    int64_t at = o;
    if (fortran) {   /* o's index, last axis fastest; then its offset, first axis fastest */
      int64_t idx[K_MAX_RANK], rest = o, stride = 1;
      for (int d = s->rank - 1; d >= 0; d--) idx[d] = rest % s->d[d], rest /= s->d[d];
      at = 0;
      for (int d = 0; d < s->rank; d++) at += idx[d] * stride, stride *= s->d[d];
    }
    if (npy_convert_one(P, src, at, t, dst, o)) return -1;
  }
  return 0;
}

int rt_npy_narrow(const rt_npy_head *h, const void *data, int64_t first, int64_t n, void *dst, const char *label,
                  char *err, size_t err_len) {
  npy_parser P = {NULL, NULL, label, err, err_len, h->wide};
  const unsigned char *src = data;
  for (int64_t o = 0; o < n; o++)
    if (npy_convert_one(&P, src, first + o, h->dtype, dst, o)) return -1;
  return 0;
}

/* Magic, version and header length; sets *hdr and *hlen to the dict text. */
static int npy_preamble(npy_parser *P, const unsigned char *b, size_t len, size_t *hdr, size_t *hlen) {
  if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) return npy_fail(P, "not a .npy file (bad magic or too short)");
  if (b[6] != 1 && b[6] != 2) return npy_fail(P, ".npy format version %d.%d is not supported (1.0 and 2.0 are)", b[6], b[7]);
  if (b[6] == 1) {
    *hlen = (size_t)b[8] | (size_t)b[9] << 8;
    *hdr = 10;
  } else {
    if (len < 12) return npy_fail(P, "file too short for a 2.0 header length");
    *hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    *hdr = 12;
  }
  if (*hlen > NPY_MAX_HEADER) return npy_fail(P, "header length %zu exceeds the limit of %u bytes", *hlen, NPY_MAX_HEADER);
  if (*hlen > len - *hdr) return npy_fail(P, "header length %zu runs past the end of the file (%zu bytes)", *hlen, len);
  return 0;
}

int rt_npy_header(const void *buf, size_t len, const char *label, rt_npy_head *h, char *err, size_t err_len) {
  memset(h, 0, sizeof *h);
  npy_parser P = {NULL, NULL, label, err, err_len, 0};
  size_t hdr = 0, hlen = 0, bytes = 0;   /* set on success; gcc -O2 cannot see that */
  if (npy_preamble(&P, buf, len, &hdr, &hlen)) return -1;
  P.p = (const char *)buf + hdr;
  P.end = P.p + hlen;
  int fortran = 0;
  rt_npy shape_of = {0};
  if (npy_dict(&P, &shape_of, &fortran)) return -1;
  if (nd_shape_bytes(&shape_of.shape, shape_of.dtype, &bytes) != 0 || (P.wide && bytes > SIZE_MAX / 2))
    return npy_fail(&P, "the size of the shape overflows");
  size_t have = len - hdr - hlen, want = P.wide ? 2 * bytes : bytes;
  if (have != want) return npy_fail(&P, "data is %zu bytes, the header promises %zu", have, want);
  h->dtype = shape_of.dtype, h->shape = shape_of.shape;
  h->wide = P.wide, h->fortran = fortran;
  h->offset = hdr + hlen, h->nbytes = want;
  return 0;
}

int rt_npy_parse(const void *buf, size_t len, const char *label, rt_npy *out, char *err, size_t err_len) {
  memset(out, 0, sizeof *out);
  rt_npy_head h;
  if (rt_npy_header(buf, len, label, &h, err, err_len)) return -1;
  npy_parser P = {NULL, NULL, label, err, err_len, h.wide};
  size_t bytes = h.wide ? h.nbytes / 2 : h.nbytes;
  size_t cap = bytes ? (bytes + RT_STORAGE_ALIGN - 1) & ~(size_t)(RT_STORAGE_ALIGN - 1) : RT_STORAGE_ALIGN;
  out->dtype = h.dtype, out->shape = h.shape;
  out->data = aligned_alloc(RT_STORAGE_ALIGN, cap);  /* aligned_alloc wants a multiple */
  if (!out->data) return npy_fail(&P, "out of memory for %zu bytes", bytes);
  const unsigned char *src = (const unsigned char *)buf + h.offset;
  if (!h.wide && !h.fortran) memcpy(out->data, src, bytes);
  else if (npy_convert(&P, src, &out->shape, out->dtype, h.fortran && out->shape.rank > 1, out->data))
    return rt_npy_free(out), -1;
  out->nbytes = bytes;
  snprintf(out->note, sizeof out->note, "%s%s%s", h.wide ? (out->dtype == K_F32 ? "float64 read as float32" : "int64 read as int32") : "",
           h.wide && h.fortran ? ", " : "", h.fortran ? "Fortran order read as C order" : "");
  return 0;
}

int rt_npy_read(const char *path, rt_npy *out, char *err, size_t err_len) {
  void *buf;
  size_t len;
  memset(out, 0, sizeof *out);
  if (rt_file_read_all(path, &buf, &len, err, err_len)) return -1;
  int r = rt_npy_parse(buf, len, path, out, err, err_len);
  free(buf);
  return r;
}

void rt_npy_free(rt_npy *a) {
  free(a->data);
  memset(a, 0, sizeof *a);
}

/* The header dict, padded with spaces and a final newline so the data starts at a multiple
 * of 64 bytes, as numpy writes it; version 2.0 only if the header outgrows 65535 bytes. */
static int npy_header(k_dtype t, const k_shape *s, char *h, size_t cap, size_t *hlen, int *ver) {
  size_t n = (size_t)snprintf(h, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (", t == K_F32 ? "<f4" : "<i4");
  for (int i = 0; i < s->rank; i++) n += (size_t)snprintf(h + n, cap - n, "%lld, ", (long long)s->d[i]);
  if (s->rank > 1) n -= 2;  /* (3, 4) but (3,) */
  else if (s->rank == 1) n -= 1;
  n += (size_t)snprintf(h + n, cap - n, "), }");
  *ver = n + 11 > 65535 ? 2 : 1;
  size_t pre = *ver == 1 ? 10 : 12;
  while ((pre + n + 1) % 64) h[n++] = ' ';
  h[n++] = '\n';
  *hlen = n;
  return 0;
}

int rt_npy_serialize(k_dtype t, const k_shape *shape, const void *data, void **out, size_t *out_len, char *err, size_t err_len) {
  size_t bytes, hlen;
  int ver;
  char h[512];
  *out = NULL;
  if (nd_shape_bytes(shape, t, &bytes) != 0 || (bytes && !data)) {
    rt_errf(err, err_len, "npy: bad dtype, shape or data");
    return -1;
  }
  npy_header(t, shape, h, sizeof h, &hlen, &ver);
  size_t pre = ver == 1 ? 10 : 12;
  unsigned char *b = malloc(pre + hlen + bytes);
  if (!b) {
    rt_errf(err, err_len, "npy: out of memory");
    return -1;
  }
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)ver;
  b[7] = 0;
  for (size_t i = 8; i < pre; i++) b[i] = (unsigned char)(hlen >> (8 * (i - 8)));
  memcpy(b + pre, h, hlen);
  if (bytes) memcpy(b + pre + hlen, data, bytes);
  *out = b;
  *out_len = pre + hlen + bytes;
  return 0;
}

int rt_npy_write(const char *path, k_dtype t, const k_shape *shape, const void *data, char *err, size_t err_len) {
  void *buf;
  size_t len;
  char what[RT_ERR_LEN];
  if (rt_npy_serialize(t, shape, data, &buf, &len, what, sizeof what)) {
    rt_errf(err, err_len, "%s: %s", path, what);
    return -1;
  }
  rt_iovec part = {buf, len};
  int r = rt_file_write_atomic(path, &part, 1, err, err_len);
  free(buf);
  return r;
}
