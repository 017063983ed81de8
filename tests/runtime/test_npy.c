/* test_npy.c — .npy I/O: round trips of every rank through atomic files, one test per
 * validation rule with its message, and thousands of corrupted files that must fail cleanly
 * (each parsed from an exact-size heap copy so ASan catches any read past the end). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_test.h"
#include "runtime.h"

static char g_dir[64];

static void test_round_trip(void) {
  const k_shape shapes[] = {{0, {0}}, {1, {5}}, {2, {2, 3}}, {3, {2, 1, 2}}, {2, {0, 4}}, {6, {1, 2, 1, 2, 1, 2}}};
  char path[128], err[RT_ERR_LEN];
  snprintf(path, sizeof path, "%s/a.npy", g_dir);
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    for (int t = 0; t < 2; t++) {
      float data[8];
      for (int i = 0; i < 8; i++) data[i] = t ? 0.0f : (float)i - 2.5f;
      if (t) for (int i = 0; i < 8; i++) ((int32_t *)data)[i] = i * 1000 - 3;
      k_dtype dt = t ? K_I32 : K_F32;
      size_t bytes;
      nd_shape_bytes(&shapes[s], dt, &bytes);
      CHECK(rt_npy_write(path, dt, &shapes[s], data, err, sizeof err) == 0, "write: %s", err);
      rt_npy a;
      CHECK(rt_npy_read(path, &a, err, sizeof err) == 0, "read: %s", err);
      CHECK(a.dtype == dt && a.shape.rank == shapes[s].rank && a.nbytes == bytes &&
            memcmp(a.shape.d, shapes[s].d, sizeof(int64_t) * (size_t)a.shape.rank) == 0 &&
            memcmp(a.data, data, bytes) == 0 && ((uintptr_t)a.data & 63) == 0,
            "shape %zu dtype %d", s, t);
      rt_npy_free(&a);
    }
  }
  void *buf;
  size_t len;
  k_shape sh = {2, {2, 3}};
  float d[6] = {0};
  rt_npy_serialize(K_F32, &sh, d, &buf, &len, err, sizeof err);
  const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  CHECK(len == 128 + 24 && memcmp((char *)buf + 10, want, strlen(want)) == 0 && ((char *)buf)[127] == '\n',
        "numpy's own layout");
  free(buf);
  CHECK(rt_npy_write("/nonexistent-dir/a.npy", K_F32, &sh, d, err, sizeof err) != 0 && strstr(err, "nonexistent"), "%s", err);
  unlink(path);
}

/* A file image from a version, header text and n data bytes. */
static int parse_made(int ver, const char *h, size_t data, char *err, size_t err_len) {
  size_t hn = strlen(h), pre = ver == 1 ? 10 : 12, len = pre + hn + data;
  unsigned char *b = calloc(1, len);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)ver;
  for (size_t i = 8; i < pre; i++) b[i] = (unsigned char)(hn >> (8 * (i - 8)));
  memcpy(b + pre, h, hn);
  rt_npy a;
  int r = rt_npy_parse(b, len, "a.npy", &a, err, err_len);
  free(b);
  if (r == 0) rt_npy_free(&a);
  return r;
}

static void expect_error(const char *h, size_t data, const char *want) {
  char err[RT_ERR_LEN] = "";
  CHECK(parse_made(1, h, data, err, sizeof err) != 0 && strstr(err, want), "header %s: got '%s', want '%s'", h, err, want);
}

static void test_rules(void) {
  char err[RT_ERR_LEN];
  CHECK(parse_made(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }  \n", 8, err, sizeof err) == 0, "%s", err);
  CHECK(parse_made(2, "{\"shape\": (2, 1), \"descr\": \"<i4\", \"fortran_order\": False}\n", 8, err, sizeof err) == 0,
        "v2, other key order and quotes: %s", err);
  CHECK(parse_made(1, "{'descr':'<f4','fortran_order':False,'shape':()}", 4, err, sizeof err) == 0, "scalar: %s", err);
  expect_error("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, "big-endian data ('>f4')");
  expect_error("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 8, "data is 8 bytes, the header promises 16");
  expect_error("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", 2, "dtype '|u1' is not supported");
  expect_error("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", 4, ".astype(numpy.float32)");
  expect_error("{'descr': '<f4', 'shape': (2,), }", 8, "missing key 'fortran_order'");
  expect_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8, "appears twice");
  expect_error("{'descr': '<f4', 'x': 1, 'fortran_order': False, 'shape': (2,)}", 8, "unknown key 'x'");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", 8, "'shape' is not a tuple");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", 8, "'shape' is not a tuple");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", 8, "non-negative");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1)}", 4, "rank exceeds");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}", 4, "overflows");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 8, "data is 8 bytes, the header promises 12");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 8, "data is 8 bytes, the header promises 4");
  expect_error("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", 4, "not True or False");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", 4, "trailing characters");
  expect_error("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", 4, "expected a quoted string");
  unsigned char b[16] = "\x93NUMPY\x03\x00\x04\x00{}  ";
  rt_npy a;
  CHECK(rt_npy_parse(b, 14, "a.npy", &a, err, sizeof err) != 0 && strstr(err, "version 3.0"), "%s", err);
  CHECK(rt_npy_parse("\x93NUMPX\x01\x00\x00\x00", 10, "a.npy", &a, err, sizeof err) != 0 && strstr(err, "bad magic"), "%s", err);
  b[6] = 1, b[8] = 0xff;
  CHECK(rt_npy_parse(b, 14, "a.npy", &a, err, sizeof err) != 0 && strstr(err, "runs past the end"), "%s", err);
  b[6] = 2;
  CHECK(rt_npy_parse(b, 11, "a.npy", &a, err, sizeof err) != 0 && strstr(err, "too short"), "%s", err);
  b[11] = 0x7f;
  CHECK(rt_npy_parse(b, 14, "a.npy", &a, err, sizeof err) != 0 && strstr(err, "exceeds the limit"), "%s", err);
  CHECK(rt_npy_read("/nonexistent-dir/a.npy", &a, err, sizeof err) != 0 && strstr(err, "cannot open"), "%s", err);
}

/* An image of one array: header h, then n elements of `size` bytes from data. */
static int parse_data(const char *h, const void *data, size_t bytes, rt_npy *a, char *err, size_t err_len) {
  size_t hn = strlen(h), len = 10 + hn + bytes;
  unsigned char *b = calloc(1, len);
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (unsigned char)hn, b[9] = (unsigned char)(hn >> 8);
  memcpy(b + 10, h, hn);
  memcpy(b + 10 + hn, data, bytes);
  int r = rt_npy_parse(b, len, "a.npy", a, err, err_len);
  free(b);
  return r;
}

/* NumPy's defaults read as Kiln's dtypes: float64 as float32 (rounded), int64 as int32, Fortran
 * order as C order, each said in the note; a value past the narrower range refused. */
static void test_conversions(void) {
  char err[RT_ERR_LEN] = "";
  rt_npy a;
  const double f8[3] = {0.1, -2.5, 1e30};
  CHECK(parse_data("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", f8, sizeof f8, &a, err, sizeof err) == 0 &&
        a.dtype == K_F32 && a.nbytes == 12 && ((float *)a.data)[0] == 0.1f && ((float *)a.data)[2] == 1e30f &&
        strcmp(a.note, "float64 read as float32") == 0, "float64: %s", err);
  rt_npy_free(&a);
  const int64_t i8[2] = {-7, 2147483647};
  CHECK(parse_data("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", i8, sizeof i8, &a, err, sizeof err) == 0 &&
        a.dtype == K_I32 && ((int32_t *)a.data)[0] == -7 && ((int32_t *)a.data)[1] == 2147483647 &&
        strcmp(a.note, "int64 read as int32") == 0, "int64: %s", err);
  rt_npy_free(&a);
  /* [[0, 1, 2], [3, 4, 5]] stored column by column */
  const float cols[6] = {0, 3, 1, 4, 2, 5};
  CHECK(parse_data("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", cols, sizeof cols, &a, err, sizeof err) == 0,
        "Fortran order: %s", err);
  for (int i = 0; i < 6; i++) CHECK(((float *)a.data)[i] == (float)i, "Fortran order: element %d is %g", i, ((float *)a.data)[i]);
  CHECK(strcmp(a.note, "Fortran order read as C order") == 0, "note '%s'", a.note);
  rt_npy_free(&a);
  const double fcols[6] = {0, 3, 1, 4, 2, 5};
  CHECK(parse_data("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", fcols, sizeof fcols, &a, err, sizeof err) == 0 &&
        ((float *)a.data)[1] == 1.0f && ((float *)a.data)[3] == 3.0f &&
        strcmp(a.note, "float64 read as float32, Fortran order read as C order") == 0, "both: %s / %s", err, a.note);
  rt_npy_free(&a);
  const double big[1] = {1e300};
  CHECK(parse_data("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", big, sizeof big, &a, err, sizeof err) != 0 &&
        strstr(err, "beyond float32's range"), "1e300: %s", err);
  const int64_t wide[2] = {1, (int64_t)1 << 40};
  CHECK(parse_data("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", wide, sizeof wide, &a, err, sizeof err) != 0 &&
        strstr(err, "beyond int32's range") && strstr(err, "element 1"), "2^40: %s", err);
  const float plain[2] = {1, 2};
  CHECK(parse_data("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", plain, sizeof plain, &a, err, sizeof err) == 0 &&
        a.note[0] == 0, "a float32 file has no note: '%s'", a.note);
  rt_npy_free(&a);
}

static int g_ok, g_bad;

static void parse_copy(const unsigned char *b, size_t len) {
  unsigned char *img = malloc(len ? len : 1);
  memcpy(img, b, len);
  char err[RT_ERR_LEN] = "";
  rt_npy a;
  if (rt_npy_parse(img, len, "fuzz", &a, err, sizeof err) == 0) {
    size_t bytes;
    g_bad += nd_shape_bytes(&a.shape, a.dtype, &bytes) || bytes != a.nbytes;
    g_ok++;
    rt_npy_free(&a);
  } else {
    g_bad += strncmp(err, "fuzz: ", 6) != 0;
  }
  free(img);
}

static void test_fuzz(void) {
  void *buf;
  size_t len;
  char err[RT_ERR_LEN];
  k_shape sh = {3, {2, 3, 2}};
  int32_t d[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  rt_npy_serialize(K_I32, &sh, d, &buf, &len, err, sizeof err);
  unsigned char *good = buf, *b = malloc(len + 8);
  unsigned long long seed = 99;
  g_ok = g_bad = 0;
  parse_copy(good, len);
  CHECK(g_ok == 1, "pristine parses");
  for (size_t n = 0; n < len; n++) parse_copy(good, n);
  CHECK(g_ok == 1, "a truncated file was accepted");
  for (int it = 0; it < 4000; it++) {
    memcpy(b, good, len);
    int k = 1 + (int)(rt_test_rand(&seed) % 4);
    for (int j = 0; j < k; j++) b[rt_test_rand(&seed) % len] = (unsigned char)rt_test_rand(&seed);
    parse_copy(b, len);
  }
  for (unsigned h = 0; h < 65536; h += 7) {
    memcpy(b, good, len);
    b[8] = (unsigned char)h, b[9] = (unsigned char)(h >> 8);
    parse_copy(b, len);
  }
  const char edits[] = "{}()[]':,0123456789- TrueFals";
  size_t hn = (size_t)good[8] | (size_t)good[9] << 8;
  for (int it = 0; it < 4000; it++) {
    size_t pos = 10 + rt_test_rand(&seed) % hn, nh = hn;
    memcpy(b, good, len);
    if (rt_test_rand(&seed) % 2) {
      memmove(b + pos + 1, b + pos, len - pos);
      b[pos] = (unsigned char)edits[rt_test_rand(&seed) % (sizeof edits - 1)];
      nh++;
    } else {
      memmove(b + pos, b + pos + 1, len - pos - 1);
      nh--;
    }
    b[8] = (unsigned char)nh, b[9] = (unsigned char)(nh >> 8);
    parse_copy(b, len + nh - hn);
  }
  CHECK(g_bad == 0, "%d bad outcomes", g_bad);
  printf("npy fuzz: %d corrupted images still valid (all checked)\n", g_ok - 1);
  free(b);
  free(buf);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/kiln-npy-XXXXXX");
  if (!mkdtemp(g_dir)) return 2;
  test_round_trip();
  test_rules();
  test_conversions();
  test_fuzz();
  rmdir(g_dir);
  return rt_test_done("npy");
}
