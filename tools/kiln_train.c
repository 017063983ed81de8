/* kiln_train.c — `kiln train`: JIT-compiles a model (the path of `kiln run FILE.kiln`), reads
 * its examples (named .npy/.npz arrays through kiln_data.c, or an MNIST-layout data set of IDX
 * files, plain or gzipped), trains in shuffled batches (the last short one too when the batch
 * is a bounded dim) that a loader thread gathers while the step before runs (when the step's
 * threads take every core, the pool's threads gather it in the step's idle moments instead),
 * with a progress bar on stderr and an optional JSON-lines log, and prints the held-out loss
 * (and accuracy, for a classifier) after every epoch. */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln_comm.h"
#include "kiln_data.h"
#include "k_parallel.h"
#include "kiln_tools.h"
#include "runtime.h"

static void (*kiln_train_sink)(const char *msg);

void kiln_train_error_sink(void (*sink)(const char *msg)) { kiln_train_sink = sink; }

int kiln_train_error(const char *fmt, ...) {
  char msg[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (kiln_train_sink) kiln_train_sink(msg);
  else fprintf(stderr, "kiln train: %s\n", msg);
  return 1;
}

/* ---- what the model takes ---- */

enum { KILN_MAX_IO = 64 };

/* What kiln train reads from the model's descriptor, and which array feeds each input. */
typedef struct {
  int batch;
  int ntrain, npred;
  int col[KILN_MAX_IO];          /* per train_step input: the data's column */
  int pcol[KILN_MAX_IO];         /* per predict input: the data's column */
  int label;                     /* the train_step input that is a class label, i32 [batch], or -1 */
  int classes;                   /* predict's first output is f32[batch, classes]: accuracy (0: none) */
  int loss_out;                  /* the loss among predict's outputs (kiln train adds it), or -1 */
  int bdim;                      /* the bounded dim the batch is (-1: a fixed batch): a short
                                    batch then runs at its own size, nothing dropped or padded */
  int64_t lo;                    /* its lower bound */
} kiln_fit;

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

/* The bounded dim tensor t's first axis is, when only that axis follows one, exactly (-1: none). */
static int kiln_fit_bdim(const rt_model_desc *d, int32_t t) {
  int bdim = -1;
  for (int i = 0; i < d->ntensor_patches; i++) {
    const rt_dimpatch *x = &d->tensor_patches[i];
    if (x->index != t) continue;
    if (x->axis != 0 || __builtin_popcount(x->v.mask) != 1 || x->v.a != 1 || x->v.b != 0) return -1;
    bdim = __builtin_ctz(x->v.mask);
  }
  return bdim;
}

/* The extents of a batch of `rows`: the batch dim at rows, every other bounded dim at its bound. */
static const int64_t *kiln_fit_extents(const rt_model_desc *d, const kiln_fit *f, long rows, int64_t *ext) {
  if (!d->ndims) return NULL;
  for (int k = 0; k < d->ndims; k++) ext[k] = k == f->bdim ? rows : d->dims[k].hi;
  return ext;
}

/* train_step: every input [batch, ...] with one batch, the batch's bounded dim if all follow it. */
static int kiln_fit_batch(const rt_model_desc *d, kiln_fit *f) {
  const rt_program *p = &d->train;
  char have[1024];
  f->ntrain = p->ninputs, f->batch = 0, f->bdim = -2, f->label = -1;
  if (p->ninputs > KILN_MAX_IO) return kiln_train_error("train_step of model '%s' takes more than %d inputs", d->name, KILN_MAX_IO);
  for (int k = 0; k < p->ninputs; k++) {
    const rt_tensor_info *t = kiln_input(d, p, k);
    int bdim = kiln_fit_bdim(d, p->inputs[k]);
    if (t->shape.rank < 1 || t->shape.d[0] < 1 || (f->batch && t->shape.d[0] != f->batch)) f->batch = -1;
    if (f->batch < 0) break;
    f->batch = (int)t->shape.d[0];
    f->bdim = f->bdim == -2 || f->bdim == bdim ? bdim : -1;
    if (t->dtype == K_I32 && t->shape.rank == 1) f->label = f->label == -1 ? k : -2;
  }
  if (f->label < 0) f->label = -1;   /* none, or more than one i32 [batch] input */
  if (f->bdim < 0) f->bdim = -1;
  f->lo = f->bdim >= 0 ? d->dims[f->bdim].lo : 0;
  if (f->batch > 0) return 0;
  kiln_tensor_list(d, p->inputs, p->ninputs, have, sizeof have);
  return kiln_train_error("train_step of model '%s' takes %s; kiln train needs inputs that share their first axis, "
                          "the batch", d->name, have);
}

/* predict: inputs among train_step's; accuracy when its first output is f32[batch, classes]
 * and train_step takes a label; the loss's place among the outputs. */
static int kiln_fit_predict(const rt_model_desc *d, kiln_fit *f) {
  const rt_program *p = &d->predict;
  const char *loss = d->train.noutputs ? d->tensors[d->train.outputs[0]].name : "";
  char have[1024];
  f->npred = p->ninputs, f->classes = 0, f->loss_out = -1;
  if (p->noutputs > KILN_MAX_IO || p->ninputs > KILN_MAX_IO)
    return kiln_train_error("predict of model '%s' has more than %d inputs or outputs", d->name, KILN_MAX_IO);
  for (int k = 0; k < p->ninputs; k++) {
    int j = 0;
    while (j < f->ntrain && strcmp(kiln_input(d, &d->train, j)->name, kiln_input(d, p, k)->name) != 0) j++;
    if (j == f->ntrain) {
      kiln_tensor_list(d, p->inputs, p->ninputs, have, sizeof have);
      return kiln_train_error("predict of model '%s' takes %s; kiln train needs it to take only train_step's inputs", d->name, have);
    }
    f->pcol[k] = j;   /* a train input for now; kiln_fit_columns makes it a column */
  }
  for (int k = 0; k < p->noutputs; k++)
    if (strcmp(d->tensors[p->outputs[k]].name, loss) == 0) f->loss_out = k;
  const rt_tensor_info *out = p->noutputs > 0 ? &d->tensors[p->outputs[0]] : NULL;
  if (f->label >= 0 && out && out->dtype == K_F32 && out->shape.rank == 2 && out->shape.d[0] == f->batch && out->shape.d[1] >= 1)
    f->classes = (int)out->shape.d[1];
  return 0;
}

static int kiln_fit_model(const rt_model_desc *d, kiln_fit *f) {
  if (!d->has_train) return kiln_train_error("model '%s' has no train statement (train LOSS with sgd(...))", d->name);
  return kiln_fit_batch(d, f) || kiln_fit_predict(d, f);
}

/* "f32[1, 28, 28]": an input's type for one example, or a column's; "one i32" for a scalar. */
static void kiln_row_type(k_dtype t, const k_shape *s, char *buf, size_t n) {
  k_shape row = {.rank = s->rank - 1};
  for (int k = 1; k < s->rank; k++) row.d[k - 1] = s->d[k];
  if (row.rank == 0) return (void)snprintf(buf, n, "one %s", ir_dtype_name(t));
  ir_type_str(t, &row, buf, n);
}

/* Each train_step input fed by the array of its name, of its dtype and example shape; every
 * array feeds one. `what` names the option ("--data", "--val"). */
static int kiln_fit_columns(const rt_model_desc *d, kiln_fit *f, const kiln_data *data, const char *what, int *col) {
  char have[1024], want[300], got[300];
  for (int k = 0; k < f->ntrain; k++) {
    const rt_tensor_info *t = kiln_input(d, &d->train, k);
    int c = kiln_data_find(data, t->name);
    if (c < 0) {
      kiln_tensor_list(d, d->train.inputs, d->train.ninputs, have, sizeof have);
      return kiln_train_error("%s gives no array for input '%s' (train_step of model '%s' takes %s)", what, t->name, d->name, have);
    }
    const kiln_column *a = &data->col[c];
    kiln_row_type((k_dtype)t->dtype, &t->shape, want, sizeof want);
    kiln_row_type(a->head.dtype, &a->head.shape, got, sizeof got);
    bool same = a->head.dtype == (k_dtype)t->dtype && a->head.shape.rank == t->shape.rank;
    for (int j = 1; same && j < t->shape.rank; j++) same = a->head.shape.d[j] == t->shape.d[j];
    if (!same)
      return kiln_train_error("%s: its examples are %s%s; input '%s' of model '%s' takes %s per example", a->source, got,
                              a->head.wide ? " (read from 8-byte values)" : "", t->name, d->name, want);
    col[k] = c;
  }
  for (int c = 0; c < data->n; c++) {
    int k = 0;
    while (k < f->ntrain && col[k] != c) k++;
    if (k == f->ntrain) {
      kiln_tensor_list(d, d->train.inputs, d->train.ninputs, have, sizeof have);
      return kiln_train_error("%s: no input of model '%s' is named '%s' (train_step takes %s)", data->col[c].source, d->name,
                              data->col[c].name, have);
    }
  }
  return 0;
}

/* Class labels in [0, classes), checked over every example before any step. */
static int kiln_fit_labels(const rt_model_desc *d, const kiln_fit *f, const kiln_data *data, const int *col, const char *split) {
  if (f->classes == 0) return 0;
  const kiln_column *c = &data->col[col[f->label]];
  enum { CHUNK = 4096 };
  long idx[CHUNK];
  int32_t y[CHUNK];
  for (long at = 0; at < data->rows; at += CHUNK) {
    long k = data->rows - at < CHUNK ? data->rows - at : CHUNK;
    for (long i = 0; i < k; i++) idx[i] = at + i;
    kiln_data_gather(c, idx, k, y);
    for (long i = 0; i < k; i++)
      if (y[i] < 0 || y[i] >= f->classes)
        return kiln_train_error("%s label %d of example %ld (%s) is not one of the %d classes of model '%s' (0 to %d)", split,
                                y[i], at + i, c->source, f->classes, d->name, f->classes - 1);
  }
  return 0;
}

/* ---- the examples: arrays, or an IDX directory ---- */

/* What is trained on and what is held out: two index lists over one or two tables. */
typedef struct {
  const kiln_data *d;
  long *idx;
  long n;
} kiln_split;

typedef struct {
  kiln_data train, held;         /* held: --val's arrays or the IDX test split (else unused) */
  kiln_split fit, val;           /* val.n == 0: nothing held out */
  const char *val_name;          /* "test" or "validation" */
  int tcol[KILN_MAX_IO], vcol[KILN_MAX_IO];   /* per train_step input: its column in fit.d, val.d */
  int rows, cols;                /* an IDX data set's image size (0 for arrays) */
} kiln_examples;

static bool kiln_examples_idx(const char *spec) { return !strchr(spec, '=') && !strstr(spec, ".np"); }

/* An IDX data set as two tables named after the model's inputs: the f32 one of rank >= 2 and
 * the label; its images take the input's shape per example. */
static int kiln_examples_load_idx(const rt_model_desc *d, const kiln_fit *f, const kiln_opts *o, kiln_examples *ex) {
  const rt_program *p = &d->train;
  int image = -1;
  char have[1024];
  for (int k = 0; k < p->ninputs; k++)
    if (kiln_input(d, p, k)->dtype == K_F32 && kiln_input(d, p, k)->shape.rank >= 2) image = k;
  if (p->ninputs != 2 || image < 0 || f->label < 0) {
    kiln_tensor_list(d, p->inputs, p->ninputs, have, sizeof have);
    return kiln_train_error("train_step of model '%s' takes %s; an IDX data set needs one f32 image tensor [batch, ...] and "
                            "one i32 label tensor [batch]", d->name, have);
  }
  if (o->val || o->val_split > 0)
    return kiln_train_error("--val and --val-split apply to arrays; %s holds its own test split (t10k-*)", o->data);
  kiln_idx_set ds = {0};
  if (kiln_idx_load(o->data, o->limit, &ds)) return kiln_idx_free(&ds), 1;
  const rt_tensor_info *x = kiln_input(d, p, image), *y = kiln_input(d, p, f->label);
  int64_t size = k_shape_numel(&x->shape) / x->shape.d[0];
  ex->rows = ds.rows, ex->cols = ds.cols;
  if (size != (int64_t)ds.rows * ds.cols) {
    kiln_idx_free(&ds);
    kiln_tensor_list(d, p->inputs, p->ninputs, have, sizeof have);
    return kiln_train_error("model '%s' takes %lld values per image (%s); the images of %s are %dx%d = %d values", d->name,
                            (long long)size, have, o->data, ex->rows, ex->cols, ex->rows * ex->cols);
  }
  char src[4200];
  kiln_idx_split *sp[2] = {&ds.train, &ds.test};
  kiln_data *tab[2] = {&ex->train, &ex->held};
  for (int s = 0; s < 2; s++) {
    k_shape xs = x->shape, ys = y->shape;
    xs.d[0] = ys.d[0] = sp[s]->n;
    snprintf(src, sizeof src, "%s (%s images)", o->data, s ? "test" : "training");
    int rc = kiln_data_column_own(tab[s], x->name, src, K_F32, &xs, sp[s]->x);
    sp[s]->x = NULL;
    snprintf(src, sizeof src, "%s (%s labels)", o->data, s ? "test" : "training");
    rc = rc || kiln_data_column_own(tab[s], y->name, src, K_I32, &ys, sp[s]->y);
    sp[s]->y = NULL;
    if (rc) return kiln_idx_free(&ds), 1;
  }
  kiln_idx_free(&ds);
  ex->val_name = "test";
  return 0;
}

/* Fisher-Yates with a fixed LCG, so a seed repeats its run. */
static void kiln_shuffle(long *order, long n, uint64_t *rng) {
  for (long i = n - 1; i > 0; i--) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    long j = (long)((*rng >> 33) % (uint64_t)(i + 1)), t = order[i];
    order[i] = order[j], order[j] = t;
  }
}

static int kiln_split_make(kiln_split *s, const kiln_data *d, long first, long n) {
  s->d = d, s->n = n;
  if (!(s->idx = malloc(sizeof(long) * (size_t)(n ? n : 1)))) return kiln_train_error("out of memory");
  for (long i = 0; i < n; i++) s->idx[i] = first + i;
  return 0;
}

/* The training split (the first --limit examples) and the held-out one: --val's arrays, the
 * IDX test split, or a --val-split fraction drawn from the training examples with --seed. */
static int kiln_examples_split(kiln_examples *ex, const kiln_opts *o) {
  long n = o->limit && o->limit < ex->train.rows ? o->limit : ex->train.rows;
  long nv = o->val_split > 0 ? (long)ceil(o->val_split * (double)n) : 0;
  if (nv >= n)
    return kiln_train_error("--val-split %g of %ld examples leaves %ld to hold out and %ld to train on", o->val_split, n, nv, n - nv);
  if (kiln_split_make(&ex->fit, &ex->train, 0, n)) return 1;
  if (nv) {   /* one seeded permutation: its first nv examples are held out */
    uint64_t rng = o->seed + 2;
    kiln_shuffle(ex->fit.idx, n, &rng);
    if (kiln_split_make(&ex->val, &ex->train, 0, nv)) return 1;
    memcpy(ex->val.idx, ex->fit.idx, sizeof(long) * (size_t)nv);
    memmove(ex->fit.idx, ex->fit.idx + nv, sizeof(long) * (size_t)(n - nv));
    ex->fit.n = n - nv, ex->val_name = "validation";
    return 0;
  }
  long held = ex->held.n ? (o->limit && o->limit < ex->held.rows ? o->limit : ex->held.rows) : 0;
  return ex->held.n ? kiln_split_make(&ex->val, &ex->held, 0, held) : 0;
}

static void kiln_examples_free(kiln_examples *ex) {
  kiln_data_free(&ex->train), kiln_data_free(&ex->held);
  free(ex->fit.idx), free(ex->val.idx);
}

/* The examples opened and checked against the model, before any step runs. */
static int kiln_examples_load(const rt_model_desc *d, kiln_fit *f, const kiln_opts *o, kiln_examples *ex) {
  if (kiln_examples_idx(o->data)) {
    struct stat st;
    if (stat(o->data, &st) != 0 || !S_ISDIR(st.st_mode)) return kiln_train_error("%s: no such directory", o->data);
    if (kiln_examples_load_idx(d, f, o, ex)) return 1;
  } else {
    if (kiln_data_open(o->data, "--data", &ex->train)) return 1;
    if (o->val && kiln_data_open(o->val, "--val", &ex->held)) return 1;
    ex->val_name = "validation";
  }
  if (kiln_fit_columns(d, f, &ex->train, "--data", ex->tcol)) return 1;
  if (ex->held.n && kiln_fit_columns(d, f, &ex->held, o->val ? "--val" : "--data", ex->vcol)) return 1;
  if (!ex->held.n) memcpy(ex->vcol, ex->tcol, sizeof ex->vcol);
  if (kiln_examples_split(ex, o)) return 1;
  if (ex->held.n && ex->val.n == 0) return kiln_train_error("the %s split holds no examples", ex->val_name);
  if (ex->fit.n < f->batch && !(f->bdim >= 0 && ex->fit.n >= f->lo))
    return kiln_train_error("%ld training examples are fewer than one batch of %d", ex->fit.n, f->batch);
  return kiln_fit_labels(d, f, &ex->train, ex->tcol, "training") ||
         (ex->held.n && kiln_fit_labels(d, f, &ex->held, ex->vcol, ex->val_name));
}

/* ---- training ---- */

typedef struct {
  const rt_model_api *api;
  rt_model *m;
  const kiln_fit *fit;
  kiln_examples *ex;
  void *slot[2][KILN_MAX_IO];   /* two batches of train_step's inputs: the loader fills one
                                   while the step reads the other */
  void *pin[KILN_MAX_IO];       /* a batch of predict's inputs */
  void *outs[KILN_MAX_IO];      /* predict's outputs */
  uint64_t rng;                 /* the shuffles' generator */
  uint64_t epoch_rng;           /* its value when this epoch's shuffle was drawn */
  long *base;                   /* the training split's order before any shuffle */
  FILE *log;
  long step;                    /* train steps taken */
  const kiln_opts *o;
  int first_epoch;              /* 1, or where --resume's checkpoint stopped */
  long first_batch;             /* the batches of first_epoch already trained */
  char last_state[4200];        /* the checkpoint's state file before the newest (removed) */
  bool stopped;                 /* --max-steps reached */
  int rank, world;              /* --distributed: this rank of `world` (else 0 of 1) */
} kiln_trainer;

/* A step's rows over every rank: each of the `world` ranks takes its own batch of them. */
static long kiln_gbatch(const kiln_trainer *t) { return (long)t->fit->batch * t->world; }

/* The loader of one epoch: batch b into slot b % 2 once the step has used batch b - 2, on a
 * thread of its own when a core is free for it, else on the step's thread (inline).
 * The two sides hand batches over through the counters, each polling a while before it
 * sleeps on the condition variable, and waking the other only when that one sleeps: a step
 * of the MLP takes 0.17 ms, and a futex wake that crosses to the other vCPU cost about a
 * tenth of it. Waking is safe both ways: a side announces it sleeps (under the lock) before
 * it reads the counter a last time, and the other changes the counter before it reads that. */
typedef struct {
  kiln_trainer *t;
  long total, nb;               /* examples and batches this epoch */
  long b0;                      /* the first batch to run (a resumed epoch skips those done) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic long filled, used;    /* batches the loader has filled, the steps have used */
  _Atomic int sleepers;         /* sides waiting on cv */
  _Atomic bool stop;
  bool inline_fill;             /* no loader thread: take() fills each batch itself */
  struct kiln_ahead {           /* inline: the next batch, gathered in the pool's idle moments */
    k_background bg;
    long b;                     /* its batch, -1 when none is posted */
    long rows;
    _Atomic long next;          /* rows claimed */
  } ahead;
} kiln_loader;

/* How long a side polls the other's counter before it sleeps: about ten MLP steps, so the
 * loader of a fast model never sleeps, and one of a slow model sleeps after a moment. */
#define KILN_LOADER_SPIN_NS 2000000

/* Waits until *v >= want (or stop): polls, then sleeps. */
static void kiln_loader_await(kiln_loader *L, _Atomic long *v, long want) {
  if (atomic_load(v) >= want || atomic_load(&L->stop)) return;
  double until = kiln_now() + 1e-9 * KILN_LOADER_SPIN_NS;
  for (unsigned i = 1;; i++) {
    if (atomic_load(v) >= want || atomic_load(&L->stop)) return;
    if ((i & 255) == 0 && kiln_now() > until) break;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  pthread_mutex_lock(&L->mu);
  atomic_fetch_add(&L->sleepers, 1);
  while (atomic_load(v) < want && !atomic_load(&L->stop)) pthread_cond_wait(&L->cv, &L->mu);
  atomic_fetch_sub(&L->sleepers, 1);
  pthread_mutex_unlock(&L->mu);
}

/* Sets *v = val, waking the other side when it sleeps. */
static void kiln_loader_post(kiln_loader *L, _Atomic long *v, long val) {
  atomic_store(v, val);
  if (atomic_load(&L->sleepers)) {
    pthread_mutex_lock(&L->mu);
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
  }
}

/* This rank's rows of step b (a short last step only alone: distributed epochs hold whole
 * global batches). */
static long kiln_batch_rows(const kiln_loader *L, long b) {
  long at = b * kiln_gbatch(L->t);
  return L->total - at < L->t->fit->batch ? L->total - at : L->t->fit->batch;
}

/* Examples idx[0..rows) into the n buffers dst: buffer k from train_step input which[k]'s
 * column (which NULL: input k's). */
static void kiln_fill(const kiln_split *s, const long *idx, long rows, const int *col, void *const *dst, int n,
                      const int *which) {
  for (int k = 0; k < n; k++) kiln_data_gather(&s->d->col[col[which ? which[k] : k]], idx, rows, dst[k]);
}

/* Rows [lo, hi) of step b into slot b % 2: step b's rows are the epoch's order
 * [b * gbatch, (b + 1) * gbatch), this rank's the rank-th batch of them. */
static void kiln_loader_fill(kiln_loader *L, long b, int64_t lo, int64_t hi) {
  kiln_trainer *t = L->t;
  const long *idx = t->ex->fit.idx + (b * t->world + t->rank) * t->fit->batch;
  for (int k = 0; k < t->fit->ntrain; k++) {
    const kiln_column *c = &t->ex->fit.d->col[t->ex->tcol[k]];
    kiln_data_gather(c, idx + lo, (long)(hi - lo), (unsigned char *)t->slot[b % 2][k] + (size_t)lo * (size_t)c->row_elems * 4);
  }
}

static void *kiln_loader_run(void *arg) {
  kiln_loader *L = arg;
  for (long b = L->b0; b < L->nb; b++) {
    kiln_loader_await(L, &L->used, b - 1);   /* slot b % 2 is free once step b - 2 is done */
    if (atomic_load(&L->stop)) break;
    kiln_loader_fill(L, b, 0, kiln_batch_rows(L, b));
    kiln_loader_post(L, &L->filled, b + 1);
  }
  return NULL;
}

/* Inline, the step's threads gather a batch: the pool's threads a row at a time while they
 * poll in the step before (the background job), then all of them together, a run of rows
 * each, whatever rows are left when its step comes. The rows are the same whoever copies
 * them. */
typedef struct {
  kiln_loader *L;
  long b, from;
} kiln_fill_job;

static void kiln_loader_fill_rows(void *ctx, int64_t lo, int64_t hi) {
  const kiln_fill_job *j = ctx;
  kiln_loader_fill(j->L, j->b, j->from + lo, j->from + hi);
}

/* One row of the batch ahead; 0 once all are claimed. */
static int kiln_loader_ahead_piece(void *ctx) {
  kiln_loader *L = ctx;
  long r = atomic_fetch_add(&L->ahead.next, 1);
  if (r >= L->ahead.rows) return 0;
  kiln_loader_fill(L, L->ahead.b, r, r + 1);
  return r + 1 < L->ahead.rows;
}

/* Withdraws the batch ahead (the one take() posted last: the batch now due, or none); the
 * rows of it already gathered. */
static long kiln_loader_ahead_end(kiln_loader *L) {
  if (L->ahead.b < 0) return 0;
  k_parallel_background_withdraw();
  L->ahead.b = -1;
  long n = atomic_load(&L->ahead.next);
  return n < L->ahead.rows ? n : L->ahead.rows;
}

/* Inline: batch b's rows not yet gathered, then batch b + 1 posted to the pool. Slot
 * (b + 1) % 2 is free: step b - 1, its last reader, is done. */
static void kiln_loader_take_inline(kiln_loader *L, long b) {
  kiln_fill_job j = {L, b, kiln_loader_ahead_end(L)};
  k_parallel_for(kiln_batch_rows(L, b) - j.from, 16, kiln_loader_fill_rows, &j);
  if (b + 1 < L->nb) {
    L->ahead.b = b + 1, L->ahead.rows = kiln_batch_rows(L, b + 1);
    atomic_store(&L->ahead.next, 0);
    k_parallel_background_post(&L->ahead.bg);
  }
}

/* Waits for batch b (inline: fills it); marks batch b - 1 used first, which frees its slot. */
static void kiln_loader_take(kiln_loader *L, long b) {
  if (L->inline_fill) {
    kiln_loader_take_inline(L, b);
    return;
  }
  kiln_loader_post(L, &L->used, b);
  kiln_loader_await(L, &L->filled, b + 1);
}

typedef struct {
  int epoch, epochs;
  long total;
  double t0, last;
  int decile;
  bool tty;
  bool quiet;                   /* a rank other than 0 shows nothing */
} kiln_progress;

/* On a terminal in place (at most ten times a second, the rest of the line cleared); in a
 * log, one line per tenth of the epoch. */
static void kiln_progress_show(kiln_progress *p, long done, double loss) {
  double now = kiln_now();
  int decile = (int)(done * 10 / p->total), width = 30, fill = (int)(done * width / p->total);
  bool end = done == p->total;
  if (p->quiet || (!end && (p->tty ? now - p->last < 0.1 : decile == p->decile))) return;
  p->last = now, p->decile = decile;
  char bar[32];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
  bar[width] = 0;
  fprintf(stderr, "%sepoch %d/%d [%s] %ld/%ld loss %.4f %.0f img/s%s%s", p->tty ? "\r" : "", p->epoch, p->epochs, bar,
          done, p->total, loss, (double)done / (now - p->t0 > 1e-9 ? now - p->t0 : 1e-9), p->tty ? "\033[K" : "",
          p->tty && !end ? "" : "\n");
  fflush(stderr);
}

/* A JSON number, or null for what JSON cannot write (a loss gone to NaN). */
static void kiln_log_num(FILE *f, const char *key, double v) {
  if (isfinite(v)) fprintf(f, ", \"%s\": %.8g", key, v);
  else fprintf(f, ", \"%s\": null", key);
}

static int kiln_train_step(kiln_trainer *t, void *const *in, long rows, float *loss) {
  int64_t ext[K_MAX_BDIMS];
  const int64_t *e = kiln_fit_extents(t->api->desc, t->fit, rows, ext);
  if (e ? t->api->train_step_at(t->m, e, (const void *const *)in, loss) : t->api->train_step(t->m, (const void *const *)in, loss))
    return fputc('\n', stderr), kiln_train_error("train_step failed: %s", t->api->error(t->m));
  return 0;
}

/* How many examples an epoch trains on: every one with a bounded batch (the last batch short,
 * when it is not below the bound's lo), else the full batches; on `world` ranks, the whole
 * global batches. */
static long kiln_epoch_images(const kiln_fit *f, long n, int world) {
  long g = (long)f->batch * world, full = n / g * g;
  return world == 1 && f->bdim >= 0 && n - full >= f->lo ? n : full;
}

/* The lr of the next step: the schedule's when the model has one. */
static float kiln_lr(const kiln_trainer *t) { return t->api->lr(t->m); }

static int kiln_checkpoint(kiln_trainer *t, int epoch, long batch, uint64_t rng);

/* The steps of one epoch, their inputs gathered by a loader thread one batch ahead; with
 * --checkpoint --every N, a checkpoint every N steps inside the epoch. */
static int kiln_train_batches(kiln_trainer *t, kiln_loader *L, kiln_progress *p, double *loss) {
  double sum = 0;
  for (long b = L->b0; b < L->nb; b++) {
    float l, lr = kiln_lr(t);   /* this step's, before it moves on */
    long rows = kiln_batch_rows(L, b);
    kiln_loader_take(L, b);
    if (kiln_train_step(t, t->slot[b % 2], rows, &l)) return 1;
    sum += l, t->step++;
    long done = b * kiln_gbatch(t) + rows * t->world;   /* every rank's rows: the throughput shown is the job's */
    kiln_progress_show(p, done, sum / (double)(b - L->b0 + 1));
    if (t->log) {
      double secs = kiln_now() - p->t0;
      fprintf(t->log, "{\"step\": %ld, \"epoch\": %d", t->step, p->epoch);
      kiln_log_num(t->log, "loss", l), kiln_log_num(t->log, "lr", lr);
      kiln_log_num(t->log, "images_per_s", (double)done / (secs > 1e-9 ? secs : 1e-9));
      fputs("}\n", t->log);
    }
    bool stop = t->o->max_steps && t->step >= t->o->max_steps && b + 1 < L->nb;
    if (t->o->checkpoint && b + 1 < L->nb && ((t->o->every && t->step % t->o->every == 0) || stop) &&
        kiln_checkpoint(t, p->epoch, b + 1, t->epoch_rng))
      return 1;
    if (stop) return fputc('\n', stderr), t->stopped = true, *loss = sum / (double)(b - L->b0 + 1), 0;
  }
  *loss = sum / (double)(L->nb - L->b0);
  return 0;
}

/* One pass over the training examples in a fresh shuffle of the split's order (drawn from the
 * generator alone, so a checkpoint needs only its value); the mean of the batches' losses.
 * A resumed epoch skips the batches its checkpoint had trained. */
static int kiln_train_epoch(kiln_trainer *t, int epoch, int epochs, long first_batch, double *loss) {
  kiln_loader L = {.t = t, .total = kiln_epoch_images(t->fit, t->ex->fit.n, t->world), .b0 = first_batch};
  L.ahead.bg = (k_background){kiln_loader_ahead_piece, &L}, L.ahead.b = -1;
  L.nb = (L.total + kiln_gbatch(t) - 1) / kiln_gbatch(t);
  atomic_init(&L.filled, first_batch), atomic_init(&L.used, first_batch);
  kiln_progress p = {epoch, epochs, L.total, kiln_now(), 0, 0, isatty(STDERR_FILENO) == 1, t->rank != 0};
  t->epoch_rng = t->rng;
  memcpy(t->ex->fit.idx, t->base, sizeof(long) * (size_t)t->ex->fit.n);
  kiln_shuffle(t->ex->fit.idx, t->ex->fit.n, &t->rng);
  pthread_t th;
  pthread_mutex_init(&L.mu, NULL), pthread_cond_init(&L.cv, NULL);
  /* A loader thread needs a core the step's threads leave free; without one, it would take
   * turns with them on every step (the MLP at two threads on two cores: 28-64% slower). */
  L.inline_fill = k_parallel_threads() >= k_parallel_cpu_count();
  if (!L.inline_fill && pthread_create(&th, NULL, kiln_loader_run, &L) != 0)
    return kiln_train_error("cannot start the loader thread");
  int rc = kiln_train_batches(t, &L, &p, loss);
  kiln_loader_ahead_end(&L);   /* a stop or an error leaves the next batch posted */
  if (!L.inline_fill) {
    atomic_store(&L.stop, true);
    pthread_mutex_lock(&L.mu);
    pthread_cond_broadcast(&L.cv);
    pthread_mutex_unlock(&L.mu);
    pthread_join(th, NULL);
  }
  pthread_mutex_destroy(&L.mu), pthread_cond_destroy(&L.cv);
  return rc;
}

static int kiln_argmax(const float *row, int n) {
  int best = 0;
  for (int c = 1; c < n; c++) best = row[c] > row[best] ? c : best;
  return best;
}

typedef struct {
  long correct, n;              /* accuracy: right predictions of n examples */
  double loss_sum;              /* the loss times the examples of each batch it was measured on */
  long loss_n;
} kiln_scores;

/* Predict over every held-out example in order. The last short batch runs at its own size
 * with a bounded batch; else it is padded, the padding ignored by the accuracy, and the loss
 * (a mean over the whole batch) is left out of the loss's mean. */
static int kiln_evaluate(kiln_trainer *t, kiln_scores *sc) {
  const kiln_fit *f = t->fit;
  const kiln_split *s = &t->ex->val;
  int64_t ext[K_MAX_BDIMS];
  memset(sc, 0, sizeof *sc);
  /* the labels, for the accuracy, in a train slot: the loader thread has ended */
  int32_t *label = f->classes ? t->slot[0][f->label] : NULL;
  for (long at = 0; at < s->n; at += f->batch) {
    long k = s->n - at < f->batch ? s->n - at : f->batch;
    bool own = k == f->batch || (f->bdim >= 0 && k >= f->lo);
    for (int j = 0; j < f->npred; j++) {
      const kiln_column *c = &s->d->col[t->ex->vcol[f->pcol[j]]];
      memset(t->pin[j], 0, (size_t)f->batch * (size_t)c->row_elems * 4);
    }
    kiln_fill(s, s->idx + at, k, t->ex->vcol, t->pin, f->npred, f->pcol);
    if (label) kiln_data_gather(&s->d->col[t->ex->vcol[f->label]], s->idx + at, k, label);
    const int64_t *e = kiln_fit_extents(t->api->desc, f, own ? k : f->batch, ext);
    if (e ? t->api->predict_at(t->m, e, (const void *const *)t->pin, t->outs) : t->api->predict(t->m, (const void *const *)t->pin, t->outs))
      return kiln_train_error("predict failed: %s", t->api->error(t->m));
    for (long i = 0; label && i < k; i++) sc->correct += kiln_argmax((const float *)t->outs[0] + i * f->classes, f->classes) == label[i];
    sc->n += k;
    if (f->loss_out >= 0 && own) sc->loss_sum += (double)*(const float *)t->outs[f->loss_out] * (double)k, sc->loss_n += k;
  }
  return 0;
}

static void kiln_trainer_free(kiln_trainer *t) {
  if (t->m) t->api->destroy(t->m);
  free(t->base);
  for (int k = 0; k < KILN_MAX_IO; k++) free(t->slot[0][k]), free(t->slot[1][k]), free(t->pin[k]), free(t->outs[k]);
}

static void *kiln_alloc_numel(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * 4); }

/* The model created with --seed (and --lr), and the buffers the batches need. */
static int kiln_trainer_init(kiln_trainer *t, const kiln_opts *o) {
  const rt_model_desc *d = t->api->desc;
  const kiln_fit *f = t->fit;
  bool ok = true;
  for (int k = 0; k < f->ntrain && ok; k++) {
    int64_t n = k_shape_numel(&kiln_input(d, &d->train, k)->shape);
    ok = (t->slot[0][k] = kiln_alloc_numel(n)) && (t->slot[1][k] = kiln_alloc_numel(n));
  }
  for (int k = 0; k < f->npred && ok; k++) ok = (t->pin[k] = kiln_alloc_numel(k_shape_numel(&kiln_input(d, &d->predict, k)->shape)));
  for (int k = 0; k < d->predict.noutputs && ok; k++)
    ok = (t->outs[k] = kiln_alloc_numel(k_shape_numel(&d->tensors[d->predict.outputs[k]].shape))) != NULL;
  ok = ok && (t->base = malloc(sizeof(long) * (size_t)(t->ex->fit.n ? t->ex->fit.n : 1)));
  if (ok) memcpy(t->base, t->ex->fit.idx, sizeof(long) * (size_t)t->ex->fit.n);
  if (!ok || !(t->m = t->api->create(d, o->seed))) return kiln_train_error("out of memory creating model '%s'", d->name);
  if (o->lr > 0 && t->api->set_lr(t->m, o->lr)) return kiln_train_error("--lr %g: %s", o->lr, t->api->error(t->m));
  t->rng = o->seed + 1, t->o = o, t->first_epoch = 1;
  return 0;
}

/* ---- checkpoints ---- */

/* DIR/train.json says where training stands; DIR/state-STEP.safetensors (NAME_save_state)
 * holds the model at that step. The state is written first, then train.json atomically, then
 * the state before it is removed: a crash at any point leaves a pair that matches. */
#define KILN_CKPT_FORMAT "kiln-train-1"

static int kiln_checkpoint(kiln_trainer *t, int epoch, long batch, uint64_t rng) {
  const char *dir = t->o->checkpoint, *name = t->api->desc->name;
  char state[4200], json[4200], tmp[4300];
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) return kiln_train_error("--checkpoint %s: %s", dir, strerror(errno));
  snprintf(state, sizeof state, "%s/state-%ld.safetensors", dir, t->step);
  if (t->api->save_state(t->m, state)) return kiln_train_error("checkpoint: %s", t->api->error(t->m));
  snprintf(json, sizeof json, "%s/train.json", dir), snprintf(tmp, sizeof tmp, "%s.tmp", json);
  FILE *f = fopen(tmp, "w");
  if (!f) return kiln_train_error("%s: %s", tmp, strerror(errno));
  fprintf(f, "{\"format\": \"%s\", \"model\": \"%s\", \"epoch\": %d, \"batch\": %ld, \"rng\": %llu, \"step\": %ld, "
             "\"state\": \"state-%ld.safetensors\"}\n", KILN_CKPT_FORMAT, name, epoch, batch, (unsigned long long)rng, t->step, t->step);
  if ((fclose(f) | rename(tmp, json)) != 0) return remove(tmp), kiln_train_error("%s: %s", json, strerror(errno));
  if (t->last_state[0] && strcmp(t->last_state, state) != 0) remove(t->last_state);
  snprintf(t->last_state, sizeof t->last_state, "%s", state);
  return 0;
}

/* The value of "key": in train.json as kiln_checkpoint writes it: 1 when absent. */
static int kiln_json_field(const char *text, const char *key, char *out, size_t n) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *at = strstr(text, pat);
  if (!at) return 1;
  at += strlen(pat);
  size_t len = at[0] == '"' ? strcspn(++at, "\"") : strcspn(at, ",}");
  snprintf(out, n, "%.*s", (int)len, at);
  return 0;
}

/* --resume DIR: its train.json read and checked, the state it names loaded. */
static int kiln_resume(kiln_trainer *t, const char *dir) {
  char path[4200], text[1024] = {0}, v[7][256];
  snprintf(path, sizeof path, "%s/train.json", dir);
  FILE *f = fopen(path, "r");
  if (!f) return kiln_train_error("--resume %s: %s", path, strerror(errno));
  size_t got = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[got] = 0;
  static const char *const keys[7] = {"format", "model", "epoch", "batch", "rng", "state", "step"};
  for (int k = 0; k < 7; k++)
    if (kiln_json_field(text, keys[k], v[k], sizeof v[k])) return kiln_train_error("--resume %s: no \"%s\" in it", path, keys[k]);
  if (strcmp(v[0], KILN_CKPT_FORMAT) != 0) return kiln_train_error("--resume %s: not a kiln train checkpoint", path);
  if (strcmp(v[1], t->api->desc->name) != 0)
    return kiln_train_error("--resume %s: a checkpoint of model '%s', not of '%s'", path, v[1], t->api->desc->name);
  long epoch = strtol(v[2], NULL, 10), batch = strtol(v[3], NULL, 10);
  unsigned long long rng = strtoull(v[4], NULL, 10);
  long nb = (kiln_epoch_images(t->fit, t->ex->fit.n, t->world) + kiln_gbatch(t) - 1) / kiln_gbatch(t);
  if (epoch < 1 || epoch > 1000001 || batch < 0 || batch >= nb || strchr(v[5], '/'))
    return kiln_train_error("--resume %s: epoch %s, batch %s do not fit these examples (%ld batches an epoch)", path, v[2], v[3], nb);
  snprintf(path, sizeof path, "%s/%s", dir, v[5]);
  if (t->api->load_state(t->m, path)) return kiln_train_error("--resume: %s", t->api->error(t->m));
  t->first_epoch = (int)epoch, t->first_batch = batch, t->rng = rng;
  t->step = strtol(v[6], NULL, 10);
  snprintf(t->last_state, sizeof t->last_state, "%s", path);
  printf("resumed from %s: epoch %ld, batch %ld of %ld, step %ld\n", dir, epoch, batch, nb, t->step);
  return 0;
}

/* "test loss 0.4123, test accuracy 85.03% (10000 images)" after an epoch, and the log's fields. */
static void kiln_report_val(const kiln_trainer *t, const kiln_scores *sc) {
  const char *what = t->ex->val_name, *unit = t->ex->rows ? "images" : "examples";
  if (sc->loss_n) printf(", %s loss %.4f", what, sc->loss_sum / (double)sc->loss_n);
  if (t->fit->classes) printf(", %s accuracy %.2f%% (%ld %s)", what, 100.0 * (double)sc->correct / (double)sc->n, sc->n, unit);
  else printf(" (%ld %s)", sc->n, unit);
  if (!t->log) return;
  if (sc->loss_n) kiln_log_num(t->log, "val_loss", sc->loss_sum / (double)sc->loss_n);
  if (t->fit->classes) kiln_log_num(t->log, "val_accuracy", (double)sc->correct / (double)sc->n);
  fprintf(t->log, ", \"val_examples\": %ld", sc->n);
}

/* One line per epoch on stdout (and in the log): the training loss, the held-out figures, the
 * epoch's time. */
static int kiln_train_loop(kiln_trainer *t, const kiln_opts *o) {
  if (t->first_epoch > o->epochs)
    printf("the checkpoint is at the end of epoch %d; --epochs %d trains no more\n", t->first_epoch - 1, o->epochs);
  for (int e = t->first_epoch; e <= o->epochs; e++) {
    double loss = 0, t0 = kiln_now(), secs;
    kiln_scores sc;
    if (kiln_train_epoch(t, e, o->epochs, e == t->first_epoch ? t->first_batch : 0, &loss)) return 1;
    secs = kiln_now() - t0;
    if (t->ex->val.n && kiln_evaluate(t, &sc)) return 1;
    printf("epoch %d: train loss %.4f", e, loss);
    if (t->log) {
      fprintf(t->log, "{\"epoch\": %d", e);
      kiln_log_num(t->log, "train_loss", loss), kiln_log_num(t->log, "lr", kiln_lr(t)), kiln_log_num(t->log, "seconds", secs);
      kiln_log_num(t->log, "images_per_s", (double)kiln_epoch_images(t->fit, t->ex->fit.n, t->world) / (secs > 1e-9 ? secs : 1e-9));
    }
    if (t->ex->val.n) kiln_report_val(t, &sc);
    printf(", %.1f s\n", secs);
    fflush(stdout);
    if (t->log) fputs("}\n", t->log), fflush(t->log);
    if (!t->stopped && o->checkpoint && kiln_checkpoint(t, e + 1, 0, t->rng)) return 1;
    if (t->stopped || (o->max_steps && t->step >= o->max_steps)) {
      printf("stopped after step %ld (--max-steps)%s\n", t->step, o->checkpoint ? "; --resume continues it" : "");
      break;
    }
  }
  if (o->save && t->api->save(t->m, o->save)) return kiln_train_error("%s: %s", o->save, t->api->error(t->m));
  if (o->save) printf("weights saved to %s\n", o->save);
  return 0;
}

/* ---- --distributed: one rank of an mpirun job ---- */

/* libkiln_mpi, opened at run time: kiln itself never links MPI. comm.size is 0 unless
 * --distributed opened it. */
static struct {
  void *lib;
  kiln_comm comm;
  void (*end)(kiln_comm *c);
  void (*abort)(int code);
} kiln_dist;

#ifndef KILN_MPI_BUILD_LIB
#define KILN_MPI_BUILD_LIB ""
#define KILN_MPI_INSTALL_LIB ""
#endif

static int kiln_dist_open(void) {
  const char *cands[] = {KILN_MPI_BUILD_LIB, KILN_MPI_INSTALL_LIB, "libkiln_mpi.so"};
  for (size_t i = 0; i < sizeof cands / sizeof *cands && !kiln_dist.lib; i++)
    if (cands[i][0]) kiln_dist.lib = dlopen(cands[i], RTLD_NOW | RTLD_GLOBAL);   /* global: Open MPI's plugins need libmpi's symbols */
  if (!kiln_dist.lib)
    return kiln_train_error("--distributed needs libkiln_mpi (built when Open MPI is installed: apt-get install "
                            "libopenmpi-dev openmpi-bin, then build again): %s", dlerror());
  int (*world)(kiln_comm *, double) = (int (*)(kiln_comm *, double))dlsym(kiln_dist.lib, "kiln_mpi_world");
  kiln_dist.end = (void (*)(kiln_comm *))dlsym(kiln_dist.lib, "kiln_mpi_world_end");
  kiln_dist.abort = (void (*)(int))dlsym(kiln_dist.lib, "kiln_mpi_abort");
  if (!world || !kiln_dist.end || !kiln_dist.abort) return kiln_train_error("--distributed: libkiln_mpi lacks kiln_mpi_world");
  return world(&kiln_dist.comm, 0) ? kiln_train_error("--distributed: MPI did not start (run kiln under mpirun)") : 0;
}

/* The job ends together: after a failure every rank is stopped (MPI_Abort), since the others
 * would wait in an allreduce this rank never joins until their timeout. */
static int kiln_dist_close(int rc) {
  if (!kiln_dist.lib) return rc;
  if (rc && kiln_dist.comm.size > 1) fflush(stdout), fflush(stderr), kiln_dist.abort(rc);
  kiln_dist.end(&kiln_dist.comm);
  return rc;
}

/* "mlp: 512 training images, 128 test images (8x8); batch 32, 4 classes, 16 batches an epoch" */
static void kiln_train_banner(const rt_model_desc *d, const kiln_fit *f, const kiln_examples *ex, int world) {
  const char *unit = ex->rows ? "images" : "examples";
  printf("%s: %ld training %s, %ld %s %s", d->name, ex->fit.n, unit, ex->val.n, ex->val_name ? ex->val_name : "held-out", unit);
  if (ex->rows) printf(" (%dx%d)", ex->rows, ex->cols);
  printf("; batch %d", f->batch);
  if (world > 1) printf(" on each of %d ranks", world);
  if (f->classes) printf(", %d classes", f->classes);
  printf(", %ld batches an epoch\n", (kiln_epoch_images(f, ex->fit.n, world) + (long)f->batch * world - 1) / ((long)f->batch * world));
  fflush(stdout);
}

/* The JIT-compiled model against its examples, then trained. */
static int kiln_train_api(const rt_model_api *api, const kiln_opts *o) {
  const rt_model_desc *d = api->desc;
  kiln_fit fit;
  kiln_examples ex = {0};
  int rc = kiln_fit_model(d, &fit) || kiln_examples_load(d, &fit, o, &ex);
  FILE *log = NULL;   /* a resumed run adds to its log */
  if (!rc && o->log && !(log = fopen(o->log, o->resume ? "a" : "w"))) rc = kiln_train_error("%s: %s", o->log, strerror(errno));
  if (!rc) {
    int world = kiln_dist.comm.size > 1 ? kiln_dist.comm.size : 1;
    kiln_train_banner(d, &fit, &ex, world);
    kiln_trainer t = {.api = api, .fit = &fit, .ex = &ex, .log = log, .rank = world > 1 ? kiln_dist.comm.rank : 0, .world = world};
    rc = kiln_trainer_init(&t, o) || (o->resume && kiln_resume(&t, o->resume)) ||
         (world > 1 && api->set_comm(t.m, &kiln_dist.comm) && kiln_train_error("--distributed: %s", api->error(t.m))) ||
         kiln_train_loop(&t, o);
    kiln_trainer_free(&t);
  }
  if (log && fclose(log) != 0 && !rc) rc = kiln_train_error("%s: %s", o->log, strerror(errno));
  kiln_examples_free(&ex);
  return rc;
}

/* The loss as one more output of g's predict, unless it is one already. */
static void kiln_train_add_loss(ir_graph *g) {
  bool listed = false;
  for (int k = 0; k < (int)g->outputs.len; k++) listed |= IR_VEC_AT(g->outputs, int, k) == g->loss;
  int *slot = g->has_train && g->loss >= 0 && !listed ? ir_vec_push(&g->outputs) : NULL;
  if (slot) *slot = g->loss;
}

/* The loss becomes one more output of predict, so the held-out examples' loss is measured as
 * predict runs (dropout off, batch_norm on its running statistics) and no weight moves. The
 * bounded dims' probe graphs get it too: they must compile to the same program. */
static void kiln_train_graph(ir_graph *lowered, const kiln_opts *o, ir_diag *d) {
  kiln_train_add_loss(lowered);
  for (int p = 0; lowered->probes && p < ir_dims_nprobes(lowered->nbdims); p++) kiln_train_add_loss(lowered->probes[p]);
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

/* A number option in (lo, hi): 1, or 2 after a message. */
static int kiln_opt_real(const char *flag, const char *v, double lo, double hi, const char *what, float *out) {
  char *end = NULL;
  float x = strtof(v, &end);
  if (!*v || *end || !(x > lo) || !(x < hi))
    return fprintf(stderr, "kiln train: %s expects %s (got '%s')\n", flag, what, v), 2;
  *out = x;
  return 1;
}

int kiln_train_flag(kiln_opts *o, int argc, char **argv, int *i) {
  if (strcmp(argv[*i], "--distributed") == 0) return o->distributed = true, 1;
  static const char *const flags[] = {"--data", "--save", "--epochs", "--limit", "--lr", "--seed", "--val", "--val-split", "--log",
                                      "--checkpoint", "--every", "--resume", "--max-steps", NULL};
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
  case 4: return kiln_opt_real(a, v, 0, INFINITY, "a positive number", &o->lr);
  case 5: return kiln_opt_seed(o, v);
  case 6: return o->val = v, 1;
  case 7: return kiln_opt_real(a, v, 0, 1, "a fraction between 0 and 1", &o->val_split);
  case 8: return o->log = v, 1;
  case 9: return o->checkpoint = v, 1;
  case 10: return kiln_opt_long(a, v, 1, 1L << 40, &o->every);
  case 11: return o->resume = v, 1;
  default: return kiln_opt_long(a, v, 1, 1L << 40, &o->max_steps);
  }
}

int kiln_train_main(int argc, char **argv) {
  kiln_opts o = {.cmd = "train", .print_after = -1, .opt_level = 2, .epochs = 1};
  int rc = kiln_args(argc, argv, &o);
  if (rc) return kiln_free_defs(&o, rc);
  bool onnx = onnx_is_onnx_path(o.file);
  if (!kiln_ends_with(o.file, ".kiln") && !onnx)
    return fprintf(stderr, "kiln train: FILE must be a .kiln or .onnx model (got '%s')\n", o.file), kiln_free_defs(&o, 2);
  if (onnx && !o.train)
    return fprintf(stderr, "kiln train: an .onnx model needs --train \"LOSS OPT(...)\" to say how it trains, e.g. "
                   "--train \"softmax_cross_entropy sgd(lr=0.01)\"\n"), kiln_free_defs(&o, 2);
  if (!o.data) return fprintf(stderr, "kiln train: --data is required (see kiln train --help)\n"), kiln_free_defs(&o, 2);
  if (o.every && !o.checkpoint)
    return fprintf(stderr, "kiln train: --every N needs --checkpoint DIR\n"), kiln_free_defs(&o, 2);
  if (o.val && o.val_split > 0)
    return fprintf(stderr, "kiln train: --val and --val-split both name the held-out examples; give one\n"), kiln_free_defs(&o, 2);
  o.one_model = "train";
  if (o.distributed && kiln_dist_open()) return kiln_dist_close(kiln_free_defs(&o, 1));
  if (kiln_dist.comm.rank > 0) {   /* rank 0 alone reports, logs, checkpoints and saves */
    o.log = o.save = o.checkpoint = NULL;
    if (!freopen("/dev/null", "w", stdout)) return kiln_dist_close(kiln_train_error("cannot quiet rank %d's output", kiln_dist.comm.rank));
  }
  return kiln_dist_close(kiln_for_models(&o, kiln_train_graph));
}
