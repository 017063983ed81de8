/* test_safetensors.c — safetensors I/O and its strict JSON parser: a round trip through an
 * atomic write, one test per validation rule with its message, and thousands of corrupted
 * files (truncations, byte flips, header-length and JSON edits) that must fail cleanly —
 * each parsed from an exact-size heap copy so ASan catches any read past the end. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_test.h"
#include "runtime.h"

static char g_dir[64];

/* ---- the JSON parser directly ------------------------------------------------------------ */

static int json_ok(const char *s) {
  rt_json v;
  char err[RT_ERR_LEN];
  int r = rt_json_parse(s, strlen(s), &v, err, sizeof err);
  rt_json_free(&v);
  return r == 0;
}

static void test_json(void) {
  rt_json v;
  char err[RT_ERR_LEN];
  const char *doc = "{\"a\\u00e9\\ud83d\\ude00\": [1, -2, true, null, \"x\\n\"], \"b\": {}}";
  CHECK(rt_json_parse(doc, strlen(doc), &v, err, sizeof err) == 0, "parse: %s", err);
  CHECK(v.kind == RT_JSON_OBJ && v.n == 2 && strcmp(v.keys[0], "a\xc3\xa9\xf0\x9f\x98\x80") == 0, "utf-8 key");
  const rt_json *a = rt_json_get(&v, v.keys[0]);
  CHECK(a && a->kind == RT_JSON_ARR && a->n == 5 && a->items[1].num == -2 && strcmp(a->items[4].str, "x\n") == 0, "array");
  rt_json_free(&v);
  const char *bad[] = {"", "{", "{\"a\":1,}", "[1 2]", "01", "1.5", "1e3", "\"\\x\"", "\"\\ud800\"",
                       "\"\\u0000\"", "\"a\tb\"", "\"\xff\"", "\"\xc0\x80\"", "{} {}", "tru",
                       "99999999999999999999", "{\"a\" 1}", "[", "\"abc"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(!json_ok(bad[i]), "accepted bad JSON '%s'", bad[i]);
  char deep[64] = {0};
  for (int i = 0; i < RT_JSON_MAX_DEPTH; i++) deep[i] = '[', deep[2 * RT_JSON_MAX_DEPTH - 1 - i] = ']';
  CHECK(json_ok(deep), "depth %d is allowed", RT_JSON_MAX_DEPTH);
  memmove(deep + 1, deep, strlen(deep) + 1);
  deep[0] = '[';
  strcat(deep, "]");
  CHECK(rt_json_parse(deep, strlen(deep), &v, err, sizeof err) != 0 && strstr(err, "deeply"), "depth+1: %s", err);
}

/* The value of a JSON integer, or 1 with the message in err. */
static int json_int(const char *s, int64_t *out, char *err, size_t n) {
  rt_json v;
  int r = rt_json_parse(s, strlen(s), &v, err, n);
  if (r == 0) *out = v.num;
  rt_json_free(&v);
  return r;
}

/* Integers at every edge of int64: the largest is read exactly, anything above is refused —
 * never wrapped (18446744073709551616 = 2^64 used to read as 0, and ...617 as 1). */
static void test_json_int_limits(void) {
  static const struct { const char *s; int64_t want; } ok[] = {
      {"0", 0}, {"-0", 0}, {"9223372036854775807", INT64_MAX}, {"-9223372036854775807", -INT64_MAX},
      {"922337203685477580", 922337203685477580}, {"9223372036854775799", 9223372036854775799}};
  static const char *const bad[] = {"9223372036854775808", "9223372036854775810", "-9223372036854775808",
                                    "18446744073709551615", "18446744073709551616", "18446744073709551617",
                                    "18446744073709551744", "92233720368547758070", "99999999999999999999999999"};
  char err[RT_ERR_LEN];
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    int64_t v = -1;
    CHECK(json_int(ok[i].s, &v, err, sizeof err) == 0 && v == ok[i].want, "'%s' reads as %lld (%s)", ok[i].s, (long long)v, err);
  }
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int64_t v = 0;
    CHECK(json_int(bad[i], &v, err, sizeof err) != 0 && strstr(err, "integer too large"), "'%s' must be refused, read %lld",
          bad[i], (long long)v);
  }
}

/* ---- round trip --------------------------------------------------------------------------- */

static float w1[6] = {1, 2, 3, 4, 5, 6.5f};
static int32_t w2[4] = {-1, 0, 7, 1 << 30};
static float w3 = 3.25f;

static rt_st_tensor g_ts[] = {
    {"fc1.weight", K_F32, {2, {2, 3}}, w1},
    {"labels", K_I32, {1, {4}}, w2},
    {"scale", K_F32, {0, {0}}, &w3},
    {"empty", K_F32, {2, {0, 3}}, NULL},
};
static const rt_st_meta g_meta[] = {{"format", "kiln"}, {"note", "quote \" and \\ and \n"}};

static int no_temp_files(void) {
  DIR *d = opendir(g_dir);
  struct dirent *e;
  int clean = 1;
  while (d && (e = readdir(d))) clean &= strstr(e->d_name, ".tmp.") == NULL;
  if (d) closedir(d);
  return clean;
}

static void test_round_trip(void) {
  char path[128], err[RT_ERR_LEN];
  snprintf(path, sizeof path, "%s/w.safetensors", g_dir);
  CHECK(rt_st_write(path, g_ts, 4, g_meta, 2, err, sizeof err) == 0, "write: %s", err);
  rt_st_file f;
  CHECK(rt_st_open(path, &f, err, sizeof err) == 0, "open: %s", err);
  CHECK(f.n == 4 && f.nmeta == 2, "counts %d %d", f.n, f.nmeta);
  for (int i = 0; i < 4; i++) {
    const rt_st_entry *e = rt_st_find(&f, g_ts[i].name);
    size_t bytes;
    nd_shape_bytes(&g_ts[i].shape, g_ts[i].dtype, &bytes);
    CHECK(e && e->dtype == g_ts[i].dtype && e->shape.rank == g_ts[i].shape.rank &&
          memcmp(e->shape.d, g_ts[i].shape.d, sizeof(int64_t) * (size_t)e->shape.rank) == 0 &&
          e->end - e->begin == bytes && (bytes == 0 || memcmp(e->data, g_ts[i].data, bytes) == 0),
          "tensor %s", g_ts[i].name);
  }
  CHECK(rt_st_find(&f, "nope") == NULL, "missing name");
  CHECK(strcmp(rt_st_meta_get(&f, "note"), g_meta[1].value) == 0, "metadata escapes");
  CHECK((8 + *(uint64_t *)f.image) % 8 == 0, "data area 8-aligned");
  rt_st_close(&f);
  CHECK(no_temp_files(), "no temporary file left behind");

  /* failed writes leave the old file as it was */
  rt_st_tensor dup[2] = {g_ts[0], g_ts[0]};
  CHECK(rt_st_write(path, dup, 2, NULL, 0, err, sizeof err) != 0 && strstr(err, "duplicate"), "dup: %s", err);
  CHECK(rt_st_open(path, &f, err, sizeof err) == 0 && f.n == 4, "old file intact");
  rt_st_close(&f);
  CHECK(rt_st_write("/nonexistent-dir/w.safetensors", g_ts, 1, NULL, 0, err, sizeof err) != 0 &&
        strstr(err, "nonexistent"), "bad dir: %s", err);
  CHECK(rt_st_open("/nonexistent-dir/x", &f, err, sizeof err) != 0 && strstr(err, "cannot open"), "%s", err);
  CHECK(no_temp_files(), "no temporary file after failures");
}

/* ---- one test per rule --------------------------------------------------------------------- */

/* A file image from header text and a data area of `data` zero bytes. */
static int parse_made(const char *header, size_t data, char *err, size_t err_len) {
  size_t hn = strlen(header), len = 8 + hn + data;
  unsigned char *b = calloc(1, len);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hn >> (8 * i));
  memcpy(b + 8, header, hn);
  rt_st_file f;
  int r = rt_st_parse(b, len, "w.st", &f, err, err_len);
  if (r == 0) rt_st_close(&f);
  return r;
}

static void expect_error(const char *header, size_t data, const char *want) {
  char err[RT_ERR_LEN] = "";
  int r = parse_made(header, data, err, sizeof err);
  CHECK(r != 0 && strstr(err, want), "header %s: got '%s', want '%s'", header, err, want);
}

static void test_rules(void) {
  char err[RT_ERR_LEN];
  CHECK(parse_made("{}", 0, err, sizeof err) == 0, "empty file is valid: %s", err);
  CHECK(parse_made("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ", 8, err, sizeof err) == 0,
        "trailing spaces are padding: %s", err);
  expect_error("{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[10,20],\"data_offsets\":[0,100]}}", 100,
               "w.st: tensor 'fc1.weight': data_offsets [0, 100) do not match F32[10, 20] (800 bytes)");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "run past the end of the data area (4 bytes)");
  expect_error("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a': missing field 'dtype'");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "missing field 'shape'");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "missing field 'data_offsets'");
  expect_error("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "dtype 'F16' is not supported");
  expect_error("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "'BF16'");
  expect_error("{\"a\":{\"dtype\":3,\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "'dtype' is not a string");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "size overflows");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "rank 7 exceeds");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551744],\"data_offsets\":[0,4]}}", 4, "integer too large");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551620]}}", 4, "integer too large");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0] is not a non-negative");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, "only integers");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before they begin");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "is not [begin, end]");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown field 'x'");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "appears twice");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate tensor name 'a'");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlaps tensor 'a'");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap in the data area: bytes [0, 4)");
  expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "4 trailing bytes");
  expect_error("{\"__metadata__\":{\"k\":1}}", 0, "is not a string");
  expect_error("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "'__metadata__' appears twice");
  expect_error("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty tensor name");
  expect_error("[]", 0, "header is not a JSON object");
  expect_error("{\"a\":[}", 0, "w.st: header: invalid JSON at byte 6");
  expect_error("", 0, "invalid JSON");

  unsigned char small[5] = {1, 0, 0, 0, 0};
  rt_st_file f;
  CHECK(rt_st_parse(memcpy(malloc(5), small, 5), 5, "s", &f, err, sizeof err) != 0 && strstr(err, "file too short"), "%s", err);
  unsigned char hdr[10] = {0, 0, 0, 0x10, 0, 0, 0, 0, '{', '}'};  /* 256 MB */
  CHECK(rt_st_parse(memcpy(malloc(10), hdr, 10), 10, "s", &f, err, sizeof err) != 0 && strstr(err, "exceeds the limit"), "%s", err);
  hdr[3] = 0, hdr[0] = 3;
  CHECK(rt_st_parse(memcpy(malloc(10), hdr, 10), 10, "s", &f, err, sizeof err) != 0 && strstr(err, "runs past the end"), "%s", err);
  /* other formats say what they are, not a header length read from their first bytes */
  static const unsigned char zip[] = "PK\x03\x04\x14\x00\x00\x00\x08\x00....", npy[] = "\x93NUMPY\x01\x00v\x00{'descr";
  CHECK(rt_st_parse(memcpy(malloc(sizeof zip), zip, sizeof zip), sizeof zip, "s", &f, err, sizeof err) != 0 &&
        strstr(err, "not a safetensors file") && strstr(err, "zip archive"), "%s", err);
  CHECK(rt_st_parse(memcpy(malloc(sizeof npy), npy, sizeof npy), sizeof npy, "s", &f, err, sizeof err) != 0 &&
        strstr(err, ".npy file"), "%s", err);
}

/* ---- corruption ----------------------------------------------------------------------------- */

static int g_fuzz_ok, g_fuzz_bad;

/* Parses an exact-size copy; an accepted file must still satisfy every invariant. */
static void parse_copy(const unsigned char *b, size_t len) {
  unsigned char *img = malloc(len ? len : 1);
  memcpy(img, b, len);
  char err[RT_ERR_LEN] = "";
  rt_st_file f;
  if (rt_st_parse(img, len, "fuzz", &f, err, sizeof err) != 0) {
    g_fuzz_bad += strncmp(err, "fuzz: ", 6) != 0;  /* every message names the file */
    return;
  }
  uint64_t at = 0;
  size_t data_len = f.image_len - 8 - (size_t)*(uint64_t *)f.image;
  for (int i = 0; i < f.n; i++) {
    const rt_st_entry *e = &f.entries[i];
    size_t bytes;
    g_fuzz_bad += e->begin != at || nd_shape_bytes(&e->shape, e->dtype, &bytes) || e->end - e->begin != bytes;
    at = e->end;
    volatile unsigned char sink = 0;
    for (uint64_t k = 0; k < bytes; k++) sink ^= ((const unsigned char *)e->data)[k];  /* in bounds */
  }
  g_fuzz_bad += at != data_len;
  g_fuzz_ok++;
  rt_st_close(&f);
}

static void test_fuzz(void) {
  void *buf;
  size_t len;
  char err[RT_ERR_LEN];
  CHECK(rt_st_serialize(g_ts, 4, g_meta, 2, &buf, &len, err, sizeof err) == 0, "serialize: %s", err);
  unsigned char *good = buf, *b = malloc(len + 64);
  unsigned long long seed = 0x5eed;
  g_fuzz_ok = g_fuzz_bad = 0;
  parse_copy(good, len);
  CHECK(g_fuzz_ok == 1, "the pristine image parses");
  int ok0 = g_fuzz_ok;
  for (size_t n = 0; n < len; n++) parse_copy(good, n);  /* every truncation */
  CHECK(g_fuzz_ok == ok0, "a truncated file was accepted");
  for (int it = 0; it < 4000; it++) {  /* random byte flips */
    memcpy(b, good, len);
    int k = 1 + (int)(rt_test_rand(&seed) % 4);
    for (int j = 0; j < k; j++) b[rt_test_rand(&seed) % len] = (unsigned char)rt_test_rand(&seed);
    parse_copy(b, len);
  }
  for (uint64_t h = 0; h < len + 16; h++) {  /* every header length */
    memcpy(b, good, len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(h >> (8 * i));
    parse_copy(b, len);
  }
  uint64_t hn = *(uint64_t *)good;
  const char edits[] = "{}[]\":,0123456789-. ae\\";
  for (int it = 0; it < 4000; it++) {  /* JSON edits with a consistent header length */
    size_t pos = 8 + rt_test_rand(&seed) % hn;
    size_t nh = hn;
    memcpy(b, good, len);
    if (rt_test_rand(&seed) % 2) {  /* insert one character */
      memmove(b + pos + 1, b + pos, len - pos);
      b[pos] = (unsigned char)edits[rt_test_rand(&seed) % (sizeof edits - 1)];
      nh++;
    } else {                        /* delete one character */
      memmove(b + pos, b + pos + 1, len - pos - 1);
      nh--;
    }
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(nh >> (8 * i));
    parse_copy(b, len + nh - hn);
  }
  CHECK(g_fuzz_bad == 0, "%d accepted corruptions broke an invariant or unnamed errors", g_fuzz_bad);
  printf("safetensors fuzz: %d of ~%zu corrupted images still valid (all checked)\n", g_fuzz_ok - 1, len + 8000 + len + 16);
  free(b);
  free(buf);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/kiln-st-XXXXXX");
  if (!mkdtemp(g_dir)) return 2;
  test_json();
  test_json_int_limits();
  test_round_trip();
  test_rules();
  test_fuzz();
  char path[128];
  snprintf(path, sizeof path, "%s/w.safetensors", g_dir);
  unlink(path);
  rmdir(g_dir);
  return rt_test_done("safetensors");
}
