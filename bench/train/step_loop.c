/* step_loop.c — a compiled model's train_step alone, in a loop on one fixed batch of real
 * data: the side of bench/train/run.sh that has no loader. It opens the .so through its
 * name-free `kiln_model` descriptor (as bench/models/bench_models.c does), creates the model
 * with seed 0 (as `kiln train` does by default) and feeds each train_step input the first
 * `batch` rows of the .npy array of its name, the same values `kiln train --data` reads.
 *
 * Usage: step_loop LIB.so SECS NAME=X.npy [NAME=Y.npy ...]
 *   SECS   minimum length of one timed run: warm-up (3 calls and 0.2 s), then iterations
 *          calibrated to SECS, best of 5 runs
 *   NAME=X.npy  a C-order little-endian .npy array per train_step input: float32 for an f32
 *          input, int32 for an i32 one, its first axis over the examples, the rest the input's
 * Prints one TSV line: model, "train", batch, samples/s, iterations per run. Threads come from
 * the environment (KILN_NUM_THREADS). */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include "rt_model.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SL_MAX_IO 64

static double sl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sl_die(const char *msg, const char *what) {
  fprintf(stderr, "step_loop: %s%s%s\n", what ? what : "", what ? ": " : "", msg);
  exit(1);
}

/* The first `rows` rows of the .npy file at path into a new buffer of rows * row_elems 4-byte
 * values; its dtype must be `descr` ("<f4" or "<i4") and its rows row_elems values long. */
static void *sl_read_npy(const char *path, const char *descr, int64_t rows, int64_t row_elems) {
  FILE *f = fopen(path, "rb");
  if (!f) sl_die("cannot open", path);
  unsigned char pre[12];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) sl_die("not a .npy file", path);
  size_t hlen = pre[8] | (size_t)pre[9] << 8;
  if (pre[6] >= 2) {   /* version 2 and 3: a 4-byte header length */
    if (fread(pre + 10, 1, 2, f) != 2) sl_die("truncated header", path);
    hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  }
  char *h = calloc(1, hlen + 1);
  if (!h || fread(h, 1, hlen, f) != hlen) sl_die("truncated header", path);
  char want[32];
  snprintf(want, sizeof want, "'descr': '%s'", descr);
  if (!strstr(h, want)) sl_die(descr[1] == 'f' ? "not float32 (an f32 input)" : "not int32 (an i32 input)", path);
  if (!strstr(h, "'fortran_order': False")) sl_die("Fortran order", path);
  const char *s = strstr(h, "'shape': (");
  if (!s) sl_die("no shape in the header", path);
  s += strlen("'shape': (");
  char *end;
  int64_t n = strtoll(s, &end, 10), elems = 1;
  for (s = end; *s == ',' || *s == ' ';) {
    s++;
    if (*s == ' ' || *s == ')') continue;
    elems *= strtoll(s, &end, 10);
    if (end == s) break;
    s = end;
  }
  free(h);
  if (elems != row_elems) sl_die("its rows do not hold as many values as the input's", path);
  if (n < rows) sl_die("fewer rows than the batch", path);
  void *buf = malloc((size_t)(rows * row_elems) * 4);
  if (!buf || fread(buf, 4, (size_t)(rows * row_elems), f) != (size_t)(rows * row_elems)) sl_die("truncated data", path);
  fclose(f);
  return buf;
}

static void sl_step(const rt_model_api *api, rt_model *m, const void *const *in) {
  float loss;
  if (api->train_step(m, in, &loss)) sl_die(api->error(m), "train_step");
}

int main(int argc, char **argv) {
  if (argc < 4) return fprintf(stderr, "usage: %s LIB.so SECS NAME=X.npy [NAME=Y.npy ...]\n", argv[0]), 2;
  double secs = atof(argv[2]);
  if (!(secs > 0)) secs = 0.5;
  char path[4096];   /* dlopen searches the library path for a bare name */
  snprintf(path, sizeof path, "%s%s", strchr(argv[1], '/') ? "" : "./", argv[1]);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) sl_die(dlerror(), NULL);
  const rt_model_api *api = dlsym(h, "kiln_model");
  if (!api || !api->abi || strcmp(api->abi, RT_MODEL_ABI) != 0) sl_die("no kiln_model of this ABI", argv[1]);
  const rt_model_desc *d = api->desc;
  if (!d->has_train) sl_die("no train_step", argv[1]);
  if (d->ndims) sl_die("bounded dims are not supported here", argv[1]);
  if (d->train.ninputs > SL_MAX_IO) sl_die("too many inputs", argv[1]);
  const void *in[SL_MAX_IO] = {0};
  int64_t batch = d->tensors[d->train.inputs[0]].shape.d[0];
  for (int i = 0; i < d->train.ninputs; i++) {
    const rt_tensor_info *ti = &d->tensors[d->train.inputs[i]];
    size_t len = strlen(ti->name);
    for (int a = 3; a < argc && !in[i]; a++)
      if (strncmp(argv[a], ti->name, len) == 0 && argv[a][len] == '=') {
        int64_t rows = ti->shape.d[0], elems = 1;
        for (int k = 1; k < ti->shape.rank; k++) elems *= ti->shape.d[k];
        in[i] = sl_read_npy(argv[a] + len + 1, ti->dtype == K_F32 ? "<f4" : "<i4", rows, elems);
      }
    if (!in[i]) sl_die("no NAME=X.npy for this train_step input", ti->name);
  }
  rt_model *m = api->create(d, 0);
  if (!m) sl_die("create failed", d->name);
  double t0 = sl_now();
  int n = 0;
  do sl_step(api, m, in), n++;
  while (n < 3 || sl_now() - t0 < 0.2);
  int iters = (int)ceil(secs / ((sl_now() - t0) / n));
  if (iters < 2) iters = 2;
  double best = INFINITY;
  for (int r = 0; r < 5; r++) {
    double a = sl_now();
    for (int i = 0; i < iters; i++) sl_step(api, m, in);
    double t = sl_now() - a;
    if (t < best) best = t;
  }
  printf("%s\ttrain\t%lld\t%.1f\t%d\n", d->name, (long long)batch, (double)batch * iters / best, iters);
  api->destroy(m);
  for (int i = 0; i < d->train.ninputs; i++) free((void *)in[i]);
  dlclose(h);
  return 0;
}
