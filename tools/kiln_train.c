/* kiln_train.c — `kiln train`: JIT-compiles a model (the path of `kiln run FILE.kiln`), reads
 * an MNIST-layout data set of IDX files (plain or gzipped), trains in shuffled batches (the
 * last short one too when the batch is a bounded dim) with a progress bar on stderr, and
 * prints the held-out accuracy after every epoch. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln_tools.h"
#include "runtime.h"

/* One split of the data set: n images of `size` floats each (standardised) and their labels. */
typedef struct {
  float *x;
  int32_t *y;
  long n;
} kiln_split;

typedef struct {
  kiln_split train, test;
  int rows, cols;
} kiln_dataset;

/* What kiln train reads from the model's descriptor. */
typedef struct {
  int batch, size, classes;     /* size: values per image */
  int image, label;             /* their positions in train_step's inputs */
  int bdim;                     /* the bounded dim the batch is (-1: a fixed batch): a short
                                   batch then runs at its own size, nothing dropped or padded */
  int64_t lo;                   /* its lower bound */
} kiln_fit;

typedef struct {
  unsigned char *p;
  size_t n;
} kiln_bytes;

static int kiln_train_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int kiln_train_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kiln train: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return 1;
}

/* ---- reading IDX files ---- */

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
static int kiln_split_images(const kiln_bytes *b, const char *path, long limit, kiln_split *s, uint32_t dims[3]) {
  size_t at = kiln_idx_header(b, path, 3, dims);
  if (!at) return 1;
  s->n = limit && limit < (long)dims[0] ? limit : (long)dims[0];
  size_t count = (size_t)s->n * dims[1] * dims[2];
  if (!(s->x = malloc(sizeof(float) * (count ? count : 1)))) return kiln_train_error("out of memory");
  for (size_t i = 0; i < count; i++) s->x[i] = b->p[at + i] / 255.0f;
  return 0;
}

static int kiln_split_labels(const kiln_bytes *b, const char *path, uint32_t images, kiln_split *s) {
  uint32_t n;
  size_t at = kiln_idx_header(b, path, 1, &n);
  if (!at) return 1;
  if (n != images) return kiln_train_error("%s: %u labels for %u images", path, n, images);
  if (!(s->y = malloc(sizeof(int32_t) * (size_t)(s->n ? s->n : 1)))) return kiln_train_error("out of memory");
  for (long i = 0; i < s->n; i++) s->y[i] = b->p[at + (size_t)i];
  return 0;
}

/* PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte of dir, the first `limit` of them. */
static int kiln_load_split(const char *dir, const char *prefix, long limit, kiln_split *s, uint32_t dims[3]) {
  char name[64], path[4200];
  kiln_bytes b = {0};
  snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
  int rc = kiln_read_idx(dir, name, &b, path, sizeof path) || kiln_split_images(&b, path, limit, s, dims);
  free(b.p), b.p = NULL;
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
  rc = rc || kiln_read_idx(dir, name, &b, path, sizeof path) || kiln_split_labels(&b, path, dims[0], s);
  free(b.p);
  return rc;
}

/* Both splits standardised by the training images' mean and deviation. */
static void kiln_standardise(kiln_dataset *ds) {
  size_t size = (size_t)ds->rows * (size_t)ds->cols, n = (size_t)ds->train.n * size;
  double sum = 0, sq = 0;
  for (size_t i = 0; i < n; i++) sum += ds->train.x[i], sq += (double)ds->train.x[i] * ds->train.x[i];
  double mean = n ? sum / (double)n : 0, var = n ? sq / (double)n - mean * mean : 0;
  float m = (float)mean, inv = var > 1e-12 ? (float)(1 / sqrt(var)) : 1.0f;
  for (size_t i = 0; i < n; i++) ds->train.x[i] = (ds->train.x[i] - m) * inv;
  for (size_t i = 0; i < (size_t)ds->test.n * size; i++) ds->test.x[i] = (ds->test.x[i] - m) * inv;
}

static void kiln_dataset_free(kiln_dataset *ds) {
  free(ds->train.x), free(ds->train.y), free(ds->test.x), free(ds->test.y);
}

static int kiln_load_dataset(const kiln_opts *o, kiln_dataset *ds) {
  struct stat st;
  uint32_t tr[3] = {0}, te[3] = {0};
  if (stat(o->data, &st) != 0 || !S_ISDIR(st.st_mode)) return kiln_train_error("%s: no such directory", o->data);
  if (kiln_load_split(o->data, "train", o->limit, &ds->train, tr) || kiln_load_split(o->data, "t10k", o->limit, &ds->test, te))
    return 1;
  if (tr[1] != te[1] || tr[2] != te[2])
    return kiln_train_error("%s: training images are %ux%u, test images %ux%u", o->data, tr[1], tr[2], te[1], te[2]);
  if (ds->test.n == 0) return kiln_train_error("%s: the test split holds no images", o->data);
  ds->rows = (int)tr[1], ds->cols = (int)tr[2];
  kiln_standardise(ds);
  return 0;
}

/* ---- what the model takes ---- */

/* "image: f32[64, 784], label: i32[64]": the tensors of a program's input or output list. */
static void kiln_tensor_list(const rt_model_desc *d, const int32_t *list, int n, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = 0;
  for (int k = 0; k < n && at < cap; k++) {
    char type[300];
    ir_type_str((k_dtype)d->tensors[list[k]].dtype, &d->tensors[list[k]].shape, type, sizeof type);
    at += (size_t)snprintf(buf + at, cap - at, "%s%s: %s", k ? ", " : "", d->tensors[list[k]].name, type);
  }
  if (n == 0) snprintf(buf, cap, "nothing");
}

static const rt_tensor_info *kiln_input(const rt_model_desc *d, const rt_program *p, int k) {
  return &d->tensors[p->inputs[k]];
}

/* Whether the image's first axis is a bounded dim, and only it follows one (batch = 1..64). */
static void kiln_fit_bounded(const rt_model_desc *d, int image, kiln_fit *f) {
  f->bdim = -1;
  for (int i = 0; i < d->ntensor_patches; i++) {
    const rt_dimpatch *x = &d->tensor_patches[i];
    if (x->index != image) continue;
    if (x->axis != 0 || __builtin_popcount(x->v.mask) != 1 || x->v.a != 1 || x->v.b != 0) return (void)(f->bdim = -1);
    f->bdim = __builtin_ctz(x->v.mask), f->lo = d->dims[f->bdim].lo;
  }
}

/* The extents of a batch of `rows`: the batch dim at rows, every other bounded dim at its bound. */
static const int64_t *kiln_fit_extents(const rt_model_desc *d, const kiln_fit *f, long rows, int64_t *ext) {
  if (!d->ndims) return NULL;
  for (int k = 0; k < d->ndims; k++) ext[k] = k == f->bdim ? rows : d->dims[k].hi;
  return ext;
}

/* train_step: exactly one f32 image tensor [batch, ...] and one i32 label tensor [batch]. */
static int kiln_fit_train(const rt_model_desc *d, kiln_fit *f) {
  const rt_program *p = &d->train;
  char have[1024];
  f->image = f->label = -1;
  for (int k = 0; k < p->ninputs && p->ninputs == 2; k++) {
    const rt_tensor_info *t = kiln_input(d, p, k);
    if (t->dtype == K_F32 && t->shape.rank >= 2) f->image = k;
    if (t->dtype == K_I32 && t->shape.rank == 1) f->label = k;
  }
  const k_shape *x = f->image >= 0 ? &kiln_input(d, p, f->image)->shape : NULL;
  if (x && f->label >= 0 && kiln_input(d, p, f->label)->shape.d[0] == x->d[0] && x->d[0] > 0) {
    f->batch = (int)x->d[0];
    f->size = (int)(k_shape_numel(x) / x->d[0]);
    kiln_fit_bounded(d, p->inputs[f->image], f);
    return 0;
  }
  kiln_tensor_list(d, p->inputs, p->ninputs, have, sizeof have);
  return kiln_train_error("train_step of model '%s' takes %s; kiln train needs one f32 image tensor [batch, ...] and "
                          "one i32 label tensor [batch]", d->name, have);
}

/* predict: only the image tensor, and a first output [batch, classes] of scores. */
static int kiln_fit_predict(const rt_model_desc *d, kiln_fit *f) {
  const rt_program *p = &d->predict;
  const char *image = kiln_input(d, &d->train, f->image)->name;
  char have[1024];
  if (p->ninputs != 1 || strcmp(kiln_input(d, p, 0)->name, image) != 0) {
    kiln_tensor_list(d, p->inputs, p->ninputs, have, sizeof have);
    return kiln_train_error("predict of model '%s' takes %s; kiln train needs it to take only '%s'", d->name, have, image);
  }
  const rt_tensor_info *out = p->noutputs > 0 ? &d->tensors[p->outputs[0]] : NULL;
  if (out && out->dtype == K_F32 && out->shape.rank == 2 && out->shape.d[0] == f->batch && out->shape.d[1] >= 1) {
    f->classes = (int)out->shape.d[1];
    return 0;
  }
  kiln_tensor_list(d, p->outputs, p->noutputs, have, sizeof have);
  return kiln_train_error("predict of model '%s' outputs %s; kiln train reads the first output as class scores, "
                          "f32[%d, classes]", d->name, have, f->batch);
}

static int kiln_fit_model(const rt_model_desc *d, kiln_fit *f) {
  if (!d->has_train) return kiln_train_error("model '%s' has no train statement (train LOSS with sgd(...))", d->name);
  if (d->predict.noutputs > 64) return kiln_train_error("predict of model '%s' has more than 64 outputs", d->name);
  return kiln_fit_train(d, f) || kiln_fit_predict(d, f);
}

static int kiln_fit_labels(const rt_model_desc *d, const kiln_split *s, const char *split, int classes) {
  for (long i = 0; i < s->n; i++)
    if (s->y[i] >= classes)
      return kiln_train_error("%s label %d (image %ld) is not below the %d classes of model '%s'", split, s->y[i], i,
                              classes, d->name);
  return 0;
}

/* The data against the model: the image size, the labels, at least one full batch. */
static int kiln_fit_data(const rt_model_desc *d, const kiln_fit *f, const kiln_dataset *ds, const char *dir) {
  char have[1024];
  if (f->size != ds->rows * ds->cols) {
    kiln_tensor_list(d, d->train.inputs, d->train.ninputs, have, sizeof have);
    return kiln_train_error("model '%s' takes %d values per image (%s); the images of %s are %dx%d = %d values", d->name,
                            f->size, have, dir, ds->rows, ds->cols, ds->rows * ds->cols);
  }
  if (ds->train.n < f->batch)
    return kiln_train_error("%ld training images are fewer than one batch of %d", ds->train.n, f->batch);
  return kiln_fit_labels(d, &ds->train, "training", f->classes) || kiln_fit_labels(d, &ds->test, "test", f->classes);
}

/* ---- training ---- */

typedef struct {
  const rt_model_api *api;
  rt_model *m;
  const kiln_fit *fit;
  const kiln_dataset *ds;
  float *x;                     /* one batch of images */
  int32_t *y;
  void *outs[64];               /* predict's outputs */
  long *order;                  /* the shuffled training indices */
  uint64_t rng;
} kiln_trainer;

typedef struct {
  int epoch, epochs;
  long total;
  double t0, last;
  int decile;
  bool tty;
} kiln_progress;

/* On a terminal in place (at most ten times a second, the rest of the line cleared); in a
 * log, one line per tenth of the epoch. */
static void kiln_progress_show(kiln_progress *p, long done, double loss) {
  double now = kiln_now();
  int decile = (int)(done * 10 / p->total), width = 30, fill = (int)(done * width / p->total);
  bool end = done == p->total;
  if (!end && (p->tty ? now - p->last < 0.1 : decile == p->decile)) return;
  p->last = now, p->decile = decile;
  char bar[32];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
  bar[width] = 0;
  fprintf(stderr, "%sepoch %d/%d [%s] %ld/%ld loss %.4f %.0f img/s%s%s", p->tty ? "\r" : "", p->epoch, p->epochs, bar,
          done, p->total, loss, (double)done / (now - p->t0 > 1e-9 ? now - p->t0 : 1e-9), p->tty ? "\033[K" : "",
          p->tty && !end ? "" : "\n");
  fflush(stderr);
}

/* Fisher-Yates with a fixed LCG, so a seed repeats its run. */
static void kiln_shuffle(long *order, long n, uint64_t *rng) {
  for (long i = 0; i < n; i++) order[i] = i;
  for (long i = n - 1; i > 0; i--) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    long j = (long)((*rng >> 33) % (uint64_t)(i + 1)), t = order[i];
    order[i] = order[j], order[j] = t;
  }
}

/* Batch b of the shuffled order, `rows` images (the batch size, or fewer for the last one of
 * a bounded batch). */
static int kiln_train_batch(kiln_trainer *t, long b, long rows, float *loss) {
  const kiln_fit *f = t->fit;
  const void *in[2];
  int64_t ext[K_MAX_BDIMS];
  for (long k = 0; k < rows; k++) {
    long i = t->order[b * f->batch + k];
    memcpy(t->x + (size_t)k * f->size, t->ds->train.x + (size_t)i * f->size, sizeof(float) * (size_t)f->size);
    t->y[k] = t->ds->train.y[i];
  }
  in[f->image] = t->x, in[f->label] = t->y;
  const int64_t *e = kiln_fit_extents(t->api->desc, f, rows, ext);
  if (e ? t->api->train_step_at(t->m, e, in, loss) : t->api->train_step(t->m, in, loss))
    return fputc('\n', stderr), kiln_train_error("train_step failed: %s", t->api->error(t->m));
  return 0;
}

/* How many images an epoch trains on: every one with a bounded batch (the last batch short,
 * when it is not below the bound's lo), else the full batches. */
static long kiln_epoch_images(const kiln_fit *f, long n) {
  long full = n / f->batch * f->batch;
  return f->bdim >= 0 && n - full >= f->lo ? n : full;
}

/* One pass over the training images; the mean of the batches' losses into *loss. */
static int kiln_train_epoch(kiln_trainer *t, int epoch, int epochs, double *loss) {
  long total = kiln_epoch_images(t->fit, t->ds->train.n), nb = 0;
  kiln_progress p = {epoch, epochs, total, kiln_now(), 0, 0, isatty(STDERR_FILENO) == 1};
  double sum = 0;
  kiln_shuffle(t->order, t->ds->train.n, &t->rng);
  for (long at = 0; at < total; at += t->fit->batch, nb++) {
    float l;
    long rows = total - at < t->fit->batch ? total - at : t->fit->batch;
    if (kiln_train_batch(t, nb, rows, &l)) return 1;
    sum += l;
    kiln_progress_show(&p, at + rows, sum / (double)(nb + 1));
  }
  *loss = sum / (double)nb;
  return 0;
}

static int kiln_argmax(const float *row, int n) {
  int best = 0;
  for (int c = 1; c < n; c++) best = row[c] > row[best] ? c : best;
  return best;
}

/* Correct predictions over every test image: the last batch runs at its own size with a
 * bounded batch, else padded, its padding ignored. */
static int kiln_evaluate(kiln_trainer *t, long *correct) {
  const kiln_fit *f = t->fit;
  const kiln_split *s = &t->ds->test;
  int64_t ext[K_MAX_BDIMS];
  *correct = 0;
  for (long at = 0; at < s->n; at += f->batch) {
    long k = s->n - at < f->batch ? s->n - at : f->batch;
    memset(t->x, 0, sizeof(float) * (size_t)f->batch * (size_t)f->size);
    memcpy(t->x, s->x + (size_t)at * f->size, sizeof(float) * (size_t)k * (size_t)f->size);
    const int64_t *e = kiln_fit_extents(t->api->desc, f, f->bdim >= 0 && k >= f->lo ? k : f->batch, ext);
    if (e ? t->api->predict_at(t->m, e, (const void *const[]){t->x}, t->outs) : t->api->predict(t->m, (const void *const[]){t->x}, t->outs))
      return kiln_train_error("predict failed: %s", t->api->error(t->m));
    for (long i = 0; i < k; i++) *correct += kiln_argmax((const float *)t->outs[0] + i * f->classes, f->classes) == s->y[at + i];
  }
  return 0;
}

static void kiln_trainer_free(kiln_trainer *t) {
  if (t->m) t->api->destroy(t->m);
  for (int k = 0; k < 64; k++) free(t->outs[k]);
  free(t->x), free(t->y), free(t->order);
}

/* The model created with --seed (and --lr), and the buffers one batch needs. */
static int kiln_trainer_init(kiln_trainer *t, const kiln_opts *o) {
  const rt_model_desc *d = t->api->desc;
  const kiln_fit *f = t->fit;
  t->x = malloc(sizeof(float) * (size_t)f->batch * (size_t)f->size);
  t->y = malloc(sizeof(int32_t) * (size_t)f->batch);
  t->order = malloc(sizeof(long) * (size_t)t->ds->train.n);
  bool ok = t->x && t->y && t->order;
  for (int k = 0; k < d->predict.noutputs && ok; k++) {
    int64_t n = k_shape_numel(&d->tensors[d->predict.outputs[k]].shape);
    ok = (t->outs[k] = malloc((size_t)(n ? n : 1) * 4)) != NULL;
  }
  if (!ok || !(t->m = t->api->create(d, o->seed))) return kiln_train_error("out of memory creating model '%s'", d->name);
  if (o->lr > 0 && t->api->set_lr(t->m, o->lr)) return kiln_train_error("--lr %g: %s", o->lr, t->api->error(t->m));
  t->rng = o->seed + 1;
  return 0;
}

/* One line per epoch on stdout: the training loss, the test accuracy, the epoch's time. */
static int kiln_train_loop(kiln_trainer *t, const kiln_opts *o) {
  for (int e = 1; e <= o->epochs; e++) {
    double loss, t0 = kiln_now(), secs;
    long correct;
    if (kiln_train_epoch(t, e, o->epochs, &loss)) return 1;
    secs = kiln_now() - t0;
    if (kiln_evaluate(t, &correct)) return 1;
    printf("epoch %d: train loss %.4f, test accuracy %.2f%% (%ld images), %.1f s\n", e, loss,
           100.0 * (double)correct / (double)t->ds->test.n, t->ds->test.n, secs);
    fflush(stdout);
  }
  if (o->save && t->api->save(t->m, o->save)) return kiln_train_error("%s: %s", o->save, t->api->error(t->m));
  if (o->save) printf("weights saved to %s\n", o->save);
  return 0;
}

/* The JIT-compiled model against the data set, then trained. */
static int kiln_train_api(const rt_model_api *api, const kiln_opts *o) {
  const rt_model_desc *d = api->desc;
  kiln_fit fit;
  kiln_dataset ds = {0};
  int rc = kiln_fit_model(d, &fit) || kiln_load_dataset(o, &ds) || kiln_fit_data(d, &fit, &ds, o->data);
  if (!rc) {
    printf("%s: %ld training images, %ld test images (%dx%d); batch %d, %d classes, %ld batches an epoch\n", d->name,
           ds.train.n, ds.test.n, ds.rows, ds.cols, fit.batch, fit.classes,
           (kiln_epoch_images(&fit, ds.train.n) + fit.batch - 1) / fit.batch);
    fflush(stdout);
    kiln_trainer t = {.api = api, .fit = &fit, .ds = &ds};
    rc = kiln_trainer_init(&t, o) || kiln_train_loop(&t, o);
    kiln_trainer_free(&t);
  }
  kiln_dataset_free(&ds);
  return rc;
}

static void kiln_train_graph(ir_graph *lowered, const kiln_opts *o, ir_diag *d) {
  kiln_jit_graph(lowered, o, d, kiln_train_api);
}

/* ---- options ---- */

/* An integer option in [lo, hi]: 1, or 2 after a message. */
static int kiln_opt_long(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end = NULL;
  long n = strtol(v, &end, 10);
  if (!*v || *end || n < lo || n > hi)
    return fprintf(stderr, "kiln train: %s expects an integer from %ld to %ld (got '%s')\n", flag, lo, hi, v), 2;
  *out = n;
  return 1;
}

static int kiln_opt_lr(kiln_opts *o, const char *v) {
  char *end = NULL;
  float lr = strtof(v, &end);
  if (!*v || *end || !(lr > 0) || !isfinite(lr))
    return fprintf(stderr, "kiln train: --lr expects a positive number (got '%s')\n", v), 2;
  o->lr = lr;
  return 1;
}

int kiln_train_flag(kiln_opts *o, int argc, char **argv, int *i) {
  static const char *const flags[] = {"--data", "--save", "--epochs", "--limit", "--lr", "--seed", NULL};
  const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  int k = 0;
  while (flags[k] && strcmp(a, flags[k]) != 0) k++;
  if (!flags[k]) return 0;
  if (!v) return fprintf(stderr, "kiln train: %s needs a value\n", a), 2;
  ++*i;
  long n;
  switch (k) {
  case 0: return o->data = v, 1;
  case 1: return o->save = v, 1;
  case 2: return kiln_opt_long(a, v, 1, 1000000, &n) == 1 ? o->epochs = (int)n, 1 : 2;
  case 3: return kiln_opt_long(a, v, 1, 1L << 40, &n) == 1 ? o->limit = n, 1 : 2;
  case 4: return kiln_opt_lr(o, v);
  default: return kiln_opt_seed(o, v);
  }
}

int kiln_train_main(int argc, char **argv) {
  kiln_opts o = {.cmd = "train", .print_after = -1, .opt_level = 2, .epochs = 1};
  int rc = kiln_args(argc, argv, &o);
  if (rc) return kiln_free_defs(&o, rc);
  size_t len = strlen(o.file);
  if (len < 5 || strcmp(o.file + len - 5, ".kiln") != 0)
    return fprintf(stderr, "kiln train: FILE must be a .kiln model (got '%s')\n", o.file), kiln_free_defs(&o, 2);
  if (!o.data) return fprintf(stderr, "kiln train: --data DIR is required (see kiln train --help)\n"), kiln_free_defs(&o, 2);
  o.one_model = "train";
  return kiln_for_models(&o, kiln_train_graph);
}
