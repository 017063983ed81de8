/* rt_safetensors.c — reading and writing safetensors weight files (F32 and I32 tensors).
 * A reader trusts nothing: the header length is bounded by the file and by 100 MB, the JSON
 * is parsed strictly, each entry must have exactly dtype, shape and data_offsets, and the
 * tensors must tile the data area exactly — sorted by offset each one starts where the
 * previous ended, the first at 0 and the last at the end of the file — which is the rule of
 * the reference implementation: no gaps, no overlaps, no trailing bytes. */
#include "runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers --------------------------------------------------------------------- */

static void fmt_shape(char *buf, size_t len, k_dtype t, const k_shape *s) {
  size_t o = (size_t)snprintf(buf, len, "%s[", nd_dtype_name(t));
  for (int i = 0; i < s->rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)s->d[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
}

static uint64_t read_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Known safetensors dtypes are named in the error, so "F16 is not supported" reads better
 * than "unknown dtype". */
static int parse_dtype(const char *s, k_dtype *t) {
  if (strcmp(s, "F32") == 0) *t = K_F32;
  else if (strcmp(s, "I32") == 0) *t = K_I32;
  else return -1;
  return 0;
}

/* ---- reading: one entry ----------------------------------------------------------------- */

typedef struct {
  const char *label;
  char *err;
  size_t err_len;
  uint64_t data_len;
} st_ctx;

static int st_fail(st_ctx *C, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int st_fail(st_ctx *C, const char *name, const char *fmt, ...) {
  char what[RT_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (name) rt_errf(C->err, C->err_len, "%s: tensor '%s': %s", C->label, name, what);
  else rt_errf(C->err, C->err_len, "%s: %s", C->label, what);
  return -1;
}

static int entry_dtype(st_ctx *C, const char *name, const rt_json *j, k_dtype *t) {
  if (!j) return st_fail(C, name, "missing field 'dtype'");
  if (j->kind != RT_JSON_STR) return st_fail(C, name, "'dtype' is not a string");
  if (parse_dtype(j->str, t)) return st_fail(C, name, "dtype '%.32s' is not supported (only F32 and I32)", j->str);
  return 0;
}

static int entry_shape(st_ctx *C, const char *name, const rt_json *j, k_shape *s) {
  if (!j) return st_fail(C, name, "missing field 'shape'");
  if (j->kind != RT_JSON_ARR) return st_fail(C, name, "'shape' is not an array");
  if (j->n > K_MAX_RANK) return st_fail(C, name, "rank %d exceeds the maximum %d", j->n, K_MAX_RANK);
  s->rank = j->n;
  for (int i = 0; i < j->n; i++) {
    if (j->items[i].kind != RT_JSON_INT || j->items[i].num < 0)
      return st_fail(C, name, "shape[%d] is not a non-negative integer", i);
    s->d[i] = j->items[i].num;
  }
  return 0;
}

static int entry_offsets(st_ctx *C, const char *name, const rt_json *j, rt_st_entry *e) {
  if (!j) return st_fail(C, name, "missing field 'data_offsets'");
  if (j->kind != RT_JSON_ARR || j->n != 2 || j->items[0].kind != RT_JSON_INT ||
      j->items[1].kind != RT_JSON_INT || j->items[0].num < 0 || j->items[1].num < 0)
    return st_fail(C, name, "'data_offsets' is not [begin, end] with integers >= 0");
  e->begin = (uint64_t)j->items[0].num;
  e->end = (uint64_t)j->items[1].num;
  if (e->begin > e->end)
    return st_fail(C, name, "data_offsets [%llu, %llu) end before they begin",
                   (unsigned long long)e->begin, (unsigned long long)e->end);
  return 0;
}

static int entry_fields_known(st_ctx *C, const char *name, const rt_json *j) {
  for (int i = 0; i < j->n; i++) {
    const char *k = j->keys[i];
    if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
      return st_fail(C, name, "unknown field '%.32s'", k);
    if (rt_json_get(j, k) != &j->items[i]) return st_fail(C, name, "field '%s' appears twice", k);
  }
  return 0;
}

static int parse_entry(st_ctx *C, const char *name, const rt_json *j, rt_st_entry *e) {
  if (!name[0]) return st_fail(C, NULL, "empty tensor name");
  if (j->kind != RT_JSON_OBJ) return st_fail(C, name, "entry is not an object");
  if (entry_fields_known(C, name, j) || entry_dtype(C, name, rt_json_get(j, "dtype"), &e->dtype) ||
      entry_shape(C, name, rt_json_get(j, "shape"), &e->shape) ||
      entry_offsets(C, name, rt_json_get(j, "data_offsets"), e))
    return -1;
  char sh[160];
  fmt_shape(sh, sizeof sh, e->dtype, &e->shape);
  size_t bytes;
  if (nd_shape_bytes(&e->shape, e->dtype, &bytes) != 0)
    return st_fail(C, name, "%s: size overflows", sh);
  if (e->end - e->begin != bytes)
    return st_fail(C, name, "data_offsets [%llu, %llu) do not match %s (%zu bytes)",
                   (unsigned long long)e->begin, (unsigned long long)e->end, sh, bytes);
  if (e->end > C->data_len)
    return st_fail(C, name, "data_offsets [%llu, %llu) run past the end of the data area (%llu bytes)",
                   (unsigned long long)e->begin, (unsigned long long)e->end,
                   (unsigned long long)C->data_len);
  e->name = strdup(name);
  return e->name ? 0 : st_fail(C, name, "out of memory");
}

/* ---- reading: the whole header ---------------------------------------------------------- */

static int parse_metadata(st_ctx *C, const rt_json *j, rt_st_file *f) {
  if (f->meta) return st_fail(C, NULL, "'__metadata__' appears twice");
  if (j->kind != RT_JSON_OBJ) return st_fail(C, NULL, "'__metadata__' is not an object");
  f->meta = calloc((size_t)j->n + 1, sizeof *f->meta);
  if (!f->meta) return st_fail(C, NULL, "out of memory");
  for (int i = 0; i < j->n; i++) {
    if (j->items[i].kind != RT_JSON_STR)
      return st_fail(C, NULL, "__metadata__ value of '%.64s' is not a string", j->keys[i]);
    if (rt_json_get(j, j->keys[i]) != &j->items[i])
      return st_fail(C, NULL, "__metadata__ key '%.64s' appears twice", j->keys[i]);
    f->meta[i].key = strdup(j->keys[i]);
    f->meta[i].value = strdup(j->items[i].str);
    f->nmeta++;
    if (!f->meta[i].key || !f->meta[i].value) return st_fail(C, NULL, "out of memory");
  }
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const rt_st_entry *)a)->name, ((const rt_st_entry *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
  const rt_st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static int check_names(st_ctx *C, rt_st_file *f) {
  qsort(f->entries, (size_t)f->n, sizeof *f->entries, cmp_name);
  for (int i = 1; i < f->n; i++)
    if (strcmp(f->entries[i - 1].name, f->entries[i].name) == 0)
      return st_fail(C, NULL, "duplicate tensor name '%.64s'", f->entries[i].name);
  return 0;
}

static int check_tiling(st_ctx *C, rt_st_file *f) {
  qsort(f->entries, (size_t)f->n, sizeof *f->entries, cmp_offset);
  uint64_t at = 0;
  for (int i = 0; i < f->n; i++) {
    const rt_st_entry *e = &f->entries[i];
    if (e->begin < at)
      return st_fail(C, e->name, "data [%llu, %llu) overlaps tensor '%.64s'", (unsigned long long)e->begin,
                     (unsigned long long)e->end, f->entries[i - 1].name);
    if (e->begin > at)
      return st_fail(C, e->name, "gap in the data area: bytes [%llu, %llu) belong to no tensor",
                     (unsigned long long)at, (unsigned long long)e->begin);
    at = e->end;
  }
  if (at != C->data_len)
    return st_fail(C, NULL, "%llu trailing bytes after the last tensor", (unsigned long long)(C->data_len - at));
  return 0;
}

static int parse_header(st_ctx *C, const rt_json *root, rt_st_file *f) {
  if (root->kind != RT_JSON_OBJ) return st_fail(C, NULL, "header is not a JSON object");
  f->entries = calloc((size_t)root->n + 1, sizeof *f->entries);
  if (!f->entries) return st_fail(C, NULL, "out of memory");
  for (int i = 0; i < root->n; i++) {
    int r = strcmp(root->keys[i], "__metadata__") == 0
                ? parse_metadata(C, &root->items[i], f)
                : parse_entry(C, root->keys[i], &root->items[i], &f->entries[f->n]);
    if (r) return -1;
    if (strcmp(root->keys[i], "__metadata__") != 0) f->n++;
  }
  return check_names(C, f) || check_tiling(C, f);
}

/* What a file that is not safetensors looks like, from its first bytes, or "". */
static const char *st_looks_like(const unsigned char *p, size_t len) {
  if (len >= 4 && memcmp(p, "PK\x03\x04", 4) == 0) return ": it is a zip archive (a PyTorch .pt or .pth file?)";
  if (len >= 6 && memcmp(p, "\x93NUMPY", 6) == 0) return ": it is a NumPy .npy file";
  if (len >= 2 && p[0] == 0x80 && p[1] <= 5) return ": it is a Python pickle";
  return "";
}

int rt_st_parse(void *image, size_t len, const char *label, rt_st_file *f, char *err,
                size_t err_len) {
  memset(f, 0, sizeof *f);
  f->image = image;
  f->image_len = len;
  st_ctx C = {label, err, err_len, 0};
  const unsigned char *p = image;
  if (len < 8) goto fail_short;
  uint64_t n = read_le64(p);
  /* A safetensors file is an 8-byte header length, then its JSON header, which opens with '{'.
   * One that is not says so, rather than quoting a header length read from other bytes. */
  if ((n > RT_ST_MAX_HEADER || n > len - 8) && (len < 9 || p[8] != '{')) {
    st_fail(&C, NULL, "not a safetensors file (no JSON header after the 8-byte length)%s", st_looks_like(p, len));
    goto fail;
  }
  if (n > RT_ST_MAX_HEADER) {
    st_fail(&C, NULL, "header length %llu exceeds the limit of %u bytes", (unsigned long long)n, RT_ST_MAX_HEADER);
    goto fail;
  }
  if (n > len - 8) {
    st_fail(&C, NULL, "header length %llu runs past the end of the file (%zu bytes)", (unsigned long long)n, len);
    goto fail;
  }
  C.data_len = len - 8 - n;
  rt_json root;
  char jerr[RT_ERR_LEN];
  if (rt_json_parse((const char *)p + 8, (size_t)n, &root, jerr, sizeof jerr)) {
    st_fail(&C, NULL, "header: %s", jerr);
    goto fail;
  }
  int r = parse_header(&C, &root, f);
  rt_json_free(&root);
  if (r) goto fail;
  for (int i = 0; i < f->n; i++) f->entries[i].data = p + 8 + n + f->entries[i].begin;
  return 0;
fail_short:
  st_fail(&C, NULL, "file too short (%zu bytes) for the 8-byte header length", len);
fail:
  rt_st_close(f);
  return -1;
}

int rt_st_open(const char *path, rt_st_file *f, char *err, size_t err_len) {
  void *img;
  size_t len;
  memset(f, 0, sizeof *f);
  if (rt_file_read_all(path, &img, &len, err, err_len)) return -1;
  return rt_st_parse(img, len, path, f, err, err_len);
}

void rt_st_close(rt_st_file *f) {
  for (int i = 0; f->entries && i < f->n; i++) free(f->entries[i].name);
  for (int i = 0; f->meta && i < f->nmeta; i++) {
    free(f->meta[i].key);
    free(f->meta[i].value);
  }
  free(f->entries);
  free(f->meta);
  free(f->image);
  memset(f, 0, sizeof *f);
}

const rt_st_entry *rt_st_find(const rt_st_file *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
  return NULL;
}

const char *rt_st_meta_get(const rt_st_file *f, const char *key) {
  for (int i = 0; i < f->nmeta; i++)
    if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
  return NULL;
}

/* ---- writing ----------------------------------------------------------------------------- */

typedef struct { char *s; size_t n, cap; int oom; } strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(strbuf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) { b->oom = 1; return; }
    if (b->s && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
    size_t cap = (b->cap + (size_t)k + 64) * 2;
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = 1; return; }
    b->s = s;
    b->cap = cap;
  }
}

static void sb_json_string(strbuf *b, const char *s) {
  sb_printf(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') sb_printf(b, "\\%c", *p);
    else if (*p < 0x20) sb_printf(b, "\\u%04x", *p);
    else sb_printf(b, "%c", *p);
  }
  sb_printf(b, "\"");
}

static int check_tensor(const rt_st_tensor *ts, int i, size_t *bytes, char *err, size_t err_len) {
  const rt_st_tensor *t = &ts[i];
  if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0) {
    rt_errf(err, err_len, "tensor %d: invalid name '%s'", i, t->name ? t->name : "(null)");
    return -1;
  }
  for (int k = 0; k < i; k++)
    if (strcmp(ts[k].name, t->name) == 0) {
      rt_errf(err, err_len, "duplicate tensor name '%s'", t->name);
      return -1;
    }
  if (nd_shape_bytes(&t->shape, t->dtype, bytes) != 0 || (*bytes && !t->data)) {
    rt_errf(err, err_len, "tensor '%s': bad dtype, shape or data", t->name);
    return -1;
  }
  return 0;
}

static void header_entry(strbuf *b, const rt_st_tensor *t, uint64_t begin, uint64_t end) {
  sb_json_string(b, t->name);
  sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", nd_dtype_name(t->dtype));
  for (int d = 0; d < t->shape.rank; d++) sb_printf(b, "%s%lld", d ? "," : "", (long long)t->shape.d[d]);
  sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin, (unsigned long long)end);
}

/* The header in the given tensor order, then spaces up to a multiple of 8 so the data area
 * (and every F32/I32 tensor in it) starts 8-byte aligned within the file. */
static int build_header(const rt_st_tensor *ts, int n, const rt_st_meta *meta, int nmeta,
                        strbuf *b, char *err, size_t err_len) {
  sb_printf(b, "{");
  if (nmeta > 0) {
    sb_printf(b, "\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
      if (i) sb_printf(b, ",");
      sb_json_string(b, meta[i].key);
      sb_printf(b, ":");
      sb_json_string(b, meta[i].value);
    }
    sb_printf(b, "}");
  }
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    size_t bytes;
    if (check_tensor(ts, i, &bytes, err, err_len)) return -1;
    if (i || nmeta > 0) sb_printf(b, ",");
    header_entry(b, &ts[i], at, at + bytes);
    at += bytes;
  }
  sb_printf(b, "}");
  while (b->n % 8) sb_printf(b, " ");
  if (b->oom) rt_errf(err, err_len, "out of memory building the header");
  return b->oom ? -1 : 0;
}

static void put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

int rt_st_serialize(const rt_st_tensor *ts, int n, const rt_st_meta *meta, int nmeta,
                    void **out, size_t *out_len, char *err, size_t err_len) {
  strbuf b = {0};
  *out = NULL;
  if (build_header(ts, n, meta, nmeta, &b, err, err_len)) { free(b.s); return -1; }
  size_t total = 8 + b.n, bytes;
  for (int i = 0; i < n; i++) total += (nd_shape_bytes(&ts[i].shape, ts[i].dtype, &bytes), bytes);
  unsigned char *buf = malloc(total);
  if (!buf) { free(b.s); rt_errf(err, err_len, "out of memory"); return -1; }
  put_le64(buf, b.n);
  memcpy(buf + 8, b.s, b.n);
  size_t at = 8 + b.n;
  for (int i = 0; i < n; i++) {
    nd_shape_bytes(&ts[i].shape, ts[i].dtype, &bytes);
    if (bytes) memcpy(buf + at, ts[i].data, bytes);
    at += bytes;
  }
  free(b.s);
  *out = buf;
  *out_len = total;
  return 0;
}

/* Writes straight from the callers' buffers (no copy of the weights) into an atomic file. */
int rt_st_write(const char *path, const rt_st_tensor *ts, int n, const rt_st_meta *meta,
                int nmeta, char *err, size_t err_len) {
  strbuf b = {0};
  char what[RT_ERR_LEN];
  if (build_header(ts, n, meta, nmeta, &b, what, sizeof what)) {
    free(b.s);
    rt_errf(err, err_len, "%s: %s", path, what);
    return -1;
  }
  rt_iovec *parts = calloc((size_t)n + 2, sizeof *parts);
  unsigned char len8[8];
  put_le64(len8, b.n);
  int r = -1;
  if (parts) {
    parts[0] = (rt_iovec){len8, 8};
    parts[1] = (rt_iovec){b.s, b.n};
    for (int i = 0; i < n; i++) {
      size_t bytes;
      nd_shape_bytes(&ts[i].shape, ts[i].dtype, &bytes);
      parts[i + 2] = (rt_iovec){ts[i].data, bytes};
    }
    r = rt_file_write_atomic(path, parts, n + 2, err, err_len);
  } else {
    rt_errf(err, err_len, "%s: out of memory", path);
  }
  free(parts);
  free(b.s);
  return r;
}
