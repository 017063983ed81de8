/* onnx_read.c — the ONNX file itself: mapped whole, decoded by the protobuf-c code generated
 * from onnx.proto, its opsets checked; and TensorProtos (raw, typed fields or external data
 * files beside the model) into constants, every size checked against the data before use. */
#include "onnx_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int onnx_file_error(ir_diag *d, const char *path, const char *fmt, const char *detail) {
  ir_error(d, (ir_loc){path, 0, 0}, fmt, detail);
  return 1;
}

/* The whole file mapped read-only (the decoder copies what it keeps, so the file's bytes are
 * not copied once more into a buffer of their own; they are most of a large model); NULL
 * after an error. An empty file maps nothing: *len 0 and a non-NULL dummy. */
static const uint8_t *onnx_map(const char *path, size_t *len, ir_diag *d) {
  static const uint8_t empty[1];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return onnx_file_error(d, path, "cannot read the file: %s", strerror(errno)), NULL;
  struct stat st;
  const void *p = NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) onnx_file_error(d, path, "cannot read the file: %s", "not a regular file");
  else if (st.st_size == 0) p = empty;
  else if ((p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
    p = NULL, onnx_file_error(d, path, "cannot read the file: %s", strerror(errno));
  close(fd);
  *len = p ? (size_t)st.st_size : 0;
  return p;
}

/* The decoder allocates from the graph's arena, whose failure is fatal with a message (as
 * every IR allocation); nothing is freed before the graph. */
static void *onnx_arena_alloc(void *arena, size_t n) { return ir_alloc(arena, n); }
static void onnx_arena_free(void *arena, void *p) { (void)arena, (void)p; }

Onnx__ModelProto *onnx_read_model(const char *path, ir_arena *arena, ir_diag *d) {
  size_t len = 0;
  const uint8_t *buf = onnx_map(path, &len, d);
  if (!buf) return NULL;
  ProtobufCAllocator al = {onnx_arena_alloc, onnx_arena_free, arena};
  Onnx__ModelProto *m = len ? onnx__model_proto__unpack(&al, len, buf) : NULL;
  if (len) munmap((void *)buf, len);
  if (!m) onnx_file_error(d, path, "%s", "not an ONNX model: the protobuf data is malformed or truncated");
  else if (!m->graph) onnx_file_error(d, path, "%s", "not an ONNX model: it has no graph"), m = NULL;
  return m;
}

static bool onnx_default_domain(const char *dom) { return !dom || !*dom || strcmp(dom, "ai.onnx") == 0; }

int64_t onnx_model_opset(const Onnx__ModelProto *m, const char *path, ir_diag *d) {
  int64_t opset = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (onnx_default_domain(o->domain)) opset = o->version;
  }
  if (opset < 0) return onnx_file_error(d, path, "%s", "the model imports no opset of the default ONNX domain"), -1;
  if (opset < ONNX_MIN_OPSET || opset > ONNX_MAX_OPSET) {
    ir_error(d, (ir_loc){path, 0, 0}, "opset %lld of the default domain is not supported (Kiln reads opsets %d to %d)",
             (long long)opset, ONNX_MIN_OPSET, ONNX_MAX_OPSET);
    return -1;
  }
  return opset;
}

/* ---- tensors ---- */

static int onnx_elem_size(int32_t type) {
  switch (type) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return 4;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: return 8;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: return 4;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: return 2;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: return 1;
  default: return 0;
  }
}

/* One element of little-endian raw bytes into the constant. */
static void onnx_put_raw(onnx_const *k, int32_t type, const uint8_t *p, int64_t i) {
  int64_t v64;
  int32_t v32;
  double dv;
  switch (type) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: memcpy(&k->f[i], p, 4); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: memcpy(&dv, p, 8), k->f[i] = (float)dv; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: memcpy(&v32, p, 4), k->i[i] = v32; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: memcpy(&v64, p, 8), k->i[i] = v64; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: k->i[i] = (int8_t)p[0]; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: memcpy(&v32, p, 4), k->i[i] = (uint32_t)v32; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: k->i[i] = (int16_t)(p[0] | p[1] << 8); break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: k->i[i] = (uint16_t)(p[0] | p[1] << 8); break;
  default: k->i[i] = p[0]; break;                       /* bool, uint8 */
  }
}

/* Raw little-endian bytes into the constant: float data at once (most of a model's bytes;
 * an element at a time it was a tenth of vgg11_bn's compile), others an element at a time. */
static void onnx_put_raws(onnx_const *k, int32_t type, const uint8_t *p, int esz) {
  if (type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
    if (k->n) memcpy(k->f, p, (size_t)k->n * 4);
  } else
    for (int64_t i = 0; i < k->n; i++) onnx_put_raw(k, type, p + i * esz, i);
}

/* The typed repeated fields: float_data, int32_data (also bool, int8, uint8), int64_data,
 * double_data; their count must be the element count. */
static int onnx_typed_data(onnx_ctx *c, const Onnx__TensorProto *t, onnx_const *k, const char *name) {
  size_t have = k->is_int ? (t->n_int64_data ? t->n_int64_data : t->n_int32_data)
                          : (t->n_float_data ? t->n_float_data : t->n_double_data);
  if ((int64_t)have != k->n)
    return onnx_fail(c, "tensor '%s': %lld values for shape of %lld elements", name, (long long)have, (long long)k->n);
  for (int64_t i = 0; i < k->n; i++) {
    if (!k->is_int) k->f[i] = t->n_float_data ? t->float_data[i] : (float)t->double_data[i];
    else k->i[i] = t->n_int64_data ? t->int64_data[i] : t->int32_data[i];
  }
  return 0;
}

static const char *onnx_ext_key(const Onnx__TensorProto *t, const char *key) {
  for (size_t i = 0; i < t->n_external_data; i++)
    if (t->external_data[i]->key && strcmp(t->external_data[i]->key, key) == 0) return t->external_data[i]->value;
  return NULL;
}

static bool onnx_parse_i64(const char *s, int64_t *v) {
  char *end = NULL;
  if (!s) return true;                                  /* absent: keep the default */
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (!*s || *end || errno || x < 0) return false;
  *v = x;
  return true;
}

/* External data: location (a file in the model's folder; no absolute path, no ".."), offset
 * and length, all checked against the file. */
static int onnx_external_data(onnx_ctx *c, const Onnx__TensorProto *t, onnx_const *k, const char *name, int esz) {
  const char *loc = onnx_ext_key(t, "location");
  int64_t off = 0, want = k->n * esz, len = want;
  if (!loc || !*loc || loc[0] == '/' || strstr(loc, ".."))
    return onnx_fail(c, "tensor '%s': external data location '%s' must name a file beside the model", name, loc ? loc : "");
  if (!onnx_parse_i64(onnx_ext_key(t, "offset"), &off) || !onnx_parse_i64(onnx_ext_key(t, "length"), &len) || len != want)
    return onnx_fail(c, "tensor '%s': external data offset or length is malformed or does not match its shape", name);
  char *path = ir_strfmt(&c->g->arena, "%s%s", c->dir, loc);
  FILE *f = fopen(path, "rb");
  if (!f) return onnx_fail(c, "tensor '%s': cannot read external data file '%s': %s", name, path, strerror(errno));
  uint8_t *buf = malloc((size_t)want + 1);
  bool ok = buf && fseek(f, (long)off, SEEK_SET) == 0 && fread(buf, 1, (size_t)want, f) == (size_t)want;
  fclose(f);
  if (ok) onnx_put_raws(k, t->data_type, buf, esz);
  free(buf);
  return ok ? 0 : onnx_fail(c, "tensor '%s': external data file '%s' is shorter than offset %lld + %lld bytes", name, path,
                            (long long)off, (long long)want);
}

static int onnx_tensor_shape(onnx_ctx *c, const Onnx__TensorProto *t, k_shape *s, const char *name) {
  if (t->n_dims > K_MAX_RANK) return onnx_fail(c, "tensor '%s' has rank %zu; Kiln tensors have rank <= %d", name, t->n_dims, K_MAX_RANK);
  s->rank = (int)t->n_dims;
  for (size_t i = 0; i < t->n_dims; i++) {
    if (t->dims[i] < 0 || t->dims[i] > ONNX_MAX_DIM) return onnx_fail(c, "tensor '%s' has a bad dimension %lld", name, (long long)t->dims[i]);
    s->d[i] = t->dims[i];
  }
  return 0;
}

/* The element count of inline data (raw bytes, or the typed field in use), or -1 for external
 * data (its reader checks the file): compared with the shape before anything is allocated. */
static int64_t onnx_inline_elems(const Onnx__TensorProto *t, bool is_int, int esz) {
  if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) return -1;
  if (t->has_raw_data) return t->raw_data.len % (size_t)esz ? -2 : (int64_t)(t->raw_data.len / (size_t)esz);
  if (is_int) return (int64_t)(t->n_int64_data ? t->n_int64_data : t->n_int32_data);
  return (int64_t)(t->n_float_data ? t->n_float_data : t->n_double_data);
}

onnx_const *onnx_read_tensor(onnx_ctx *c, const Onnx__TensorProto *t) {
  const char *name = t->name ? t->name : "";
  int esz = onnx_elem_size(t->data_type);
  k_shape s;
  if (!esz)
    return onnx_fail(c, "tensor '%s' has data type %d, which is not supported (Kiln reads float, double, integers of up to 32 bits, int64 and bool)",
                     name, t->data_type), NULL;
  if (onnx_tensor_shape(c, t, &s, name)) return NULL;
  bool is_int = t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
  int64_t have = onnx_inline_elems(t, is_int, esz), want = 1;
  for (int i = 0; i < s.rank && want <= ONNX_MAX_ELEMS; i++) want *= s.d[i];
  if (have != -1 && have != want)
    return onnx_fail(c, "tensor '%s': its data holds %s elements, its shape %s", name, have < 0 ? "a partial number of" : "another number of",
                     want > ONNX_MAX_ELEMS ? "too many" : "a different count"), NULL;
  bool external = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  /* Raw float data are most of a model's bytes: used where the decoder put them, in the
   * graph's arena (onnx_read_model), 16-byte aligned. */
  bool in_place = !external && t->has_raw_data && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && want > 0;
  onnx_const *k = in_place ? onnx_const_over(c, &s, (float *)(void *)t->raw_data.data) : onnx_const_new(c, is_int, &s);
  if (!k) return onnx_fail(c, "tensor '%s' is too large (%lld elements)", name, (long long)k_shape_numel(&s)), NULL;
  k->onnx_name = ir_strdup(&c->g->arena, name);
  int rc;
  if (external) rc = onnx_external_data(c, t, k, name, esz);
  else if (t->has_raw_data && t->raw_data.len != (size_t)(k->n * esz))
    rc = onnx_fail(c, "tensor '%s': %zu bytes of raw data for %lld elements of %d bytes", name, t->raw_data.len, (long long)k->n, esz);
  else if (t->has_raw_data) {
    if (!in_place) onnx_put_raws(k, t->data_type, t->raw_data.data, esz);
    rc = 0;
  } else rc = onnx_typed_data(c, t, k, name);
  return rc ? NULL : k;
}
