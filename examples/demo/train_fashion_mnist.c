/* train_fashion_mnist.c — trains examples/lenet.kiln on Fashion-MNIST through the C ABI of
 * the shared object `kiln compile` generates (liblenet.so + lenet.h): one pass over the 60,000
 * training images with a progress bar (loss, images per second), then the accuracy on the
 * 10,000 held-out test images, then the weights saved as safetensors.
 *
 *   usage: train_fashion_mnist [--data DIR] [--epochs N] [--save W.safetensors] [--seed N]
 *
 * The data set is Debian's dataset-fashion-mnist (gzipped IDX files); gzip decompresses it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lenet.h"

#define IMG 784
#define BATCH (lenet_DATA_SIZE / IMG)

typedef struct {
  float *images;      /* n x 784, normalised */
  int32_t *labels;
  int n;
} dataset;

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

/* Reads a gzipped IDX file whole through `gzip -dc`; the path may not contain a quote. */
static unsigned char *read_gz(const char *path, size_t *len) {
  if (strchr(path, '\'')) return fprintf(stderr, "refusing a path with a quote: %s\n", path), NULL;
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "gzip -dc '%s' 2>/dev/null", path);
  FILE *f = popen(cmd, "r");
  if (!f) return fprintf(stderr, "cannot run gzip: %s\n", strerror(errno)), NULL;
  size_t cap = 1 << 20, n = 0;
  unsigned char *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    if ((n += got) < cap) continue;
    unsigned char *bigger = realloc(buf, cap *= 2);
    if (!bigger) free(buf);
    buf = bigger;
  }
  if (pclose(f) != 0 || !buf || n < 16) {
    fprintf(stderr, "cannot read %s (is dataset-fashion-mnist installed?)\n", path);
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

/* Images scaled to [0,1] and standardised with the training set's mean and deviation. */
static int load_split(const char *dir, const char *prefix, dataset *out) {
  char ip[4096], lp[4096];
  size_t il, ll;
  snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
  snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
  unsigned char *im = read_gz(ip, &il), *lb = im ? read_gz(lp, &ll) : NULL;
  int ok = im && lb && be32(im) == 2051 && be32(lb) == 2049 && be32(im + 4) == be32(lb + 4) &&
           be32(im + 8) == 28 && be32(im + 12) == 28 && il >= 16 + (size_t)be32(im + 4) * IMG && ll >= 8 + be32(lb + 4);
  if (!ok) {
    if (im && lb) fprintf(stderr, "%s: not a pair of Fashion-MNIST IDX files\n", ip);
    free(im), free(lb);
    return 1;
  }
  out->n = (int)be32(im + 4);
  out->images = malloc(sizeof(float) * (size_t)out->n * IMG);
  out->labels = malloc(sizeof(int32_t) * (size_t)out->n);
  for (size_t i = 0; i < (size_t)out->n * IMG; i++) out->images[i] = (im[16 + i] / 255.0f - 0.2860f) / 0.3530f;
  for (int i = 0; i < out->n; i++) out->labels[i] = lb[8 + i];
  free(im), free(lb);
  return 0;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void progress(int epoch, int done, int total, float loss, double rate) {
  int width = 30, fill = (int)((double)done / total * width);
  fprintf(stderr, "\repoch %d [", epoch);
  for (int i = 0; i < width; i++) fputc(i < fill ? '=' : i == fill ? '>' : ' ', stderr);
  fprintf(stderr, "] %5d/%d  loss %.4f  %6.0f img/s", done, total, loss, rate);
}

/* One pass over the training set in a shuffled order (a fixed LCG, so runs repeat). */
static int train_epoch(lenet *m, const dataset *d, int epoch, uint64_t *rng) {
  int nb = d->n / BATCH, *order = malloc(sizeof(int) * (size_t)d->n);
  static float x[lenet_DATA_SIZE];
  static int32_t y[lenet_LABEL_SIZE];
  for (int i = 0; i < d->n; i++) order[i] = i;
  for (int i = d->n - 1; i > 0; i--) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    int j = (int)((*rng >> 33) % (uint64_t)(i + 1)), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  double t0 = now(), avg = 0;
  for (int b = 0; b < nb; b++) {
    for (int k = 0; k < BATCH; k++) {
      int i = order[b * BATCH + k];
      memcpy(x + k * IMG, d->images + (size_t)i * IMG, sizeof(float) * IMG);
      y[k] = d->labels[i];
    }
    float loss;
    if (lenet_train_step(m, x, y, &loss)) return fprintf(stderr, "\ntrain_step: %s\n", lenet_error(m)), free(order), 1;
    avg = b ? 0.98 * avg + 0.02 * loss : loss;
    if (b % 20 == 0 || b == nb - 1) progress(epoch, (b + 1) * BATCH, nb * BATCH, (float)avg, (b + 1) * BATCH / (now() - t0));
  }
  fputc('\n', stderr);
  free(order);
  return 0;
}

/* Accuracy on every test image: the last partial batch is padded and its padding ignored. */
static int evaluate(lenet *m, const dataset *d, double *acc) {
  static float x[lenet_DATA_SIZE], prob[lenet_PROB_SIZE];
  int correct = 0;
  for (int s = 0; s < d->n; s += BATCH) {
    int k = d->n - s < BATCH ? d->n - s : BATCH;
    memset(x, 0, sizeof x);
    memcpy(x, d->images + (size_t)s * IMG, sizeof(float) * IMG * (size_t)k);
    if (lenet_predict(m, x, prob)) return fprintf(stderr, "predict: %s\n", lenet_error(m)), 1;
    for (int i = 0; i < k; i++) {
      int best = 0;
      for (int c = 1; c < 10; c++) best = prob[i * 10 + c] > prob[i * 10 + best] ? c : best;
      correct += best == d->labels[s + i];
    }
  }
  *acc = (double)correct / d->n;
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = "/usr/share/datasets/fashion-mnist", *save = "lenet.safetensors";
  int epochs = 1;
  uint64_t seed = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--data") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--save") && i + 1 < argc) save = argv[++i];
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    else return fprintf(stderr, "usage: %s [--data DIR] [--epochs N] [--save W.safetensors] [--seed N]\n", argv[0]), 2;
  }
  dataset train, test;
  if (load_split(dir, "train", &train) || load_split(dir, "t10k", &test)) return 1;
  printf("Fashion-MNIST: %d training images, %d test images; LeNet, batch %d\n", train.n, test.n, BATCH);
  lenet *m = lenet_create(seed);
  if (!m) return fprintf(stderr, "lenet_create failed\n"), 1;
  uint64_t rng = seed + 1;
  double acc = 0, t0 = now();
  int rc = 0;
  for (int e = 1; e <= epochs && !rc; e++) rc = train_epoch(m, &train, e, &rng);
  if (!rc) rc = evaluate(m, &test, &acc);
  if (!rc) printf("trained %d epoch%s in %.1f s; test accuracy %.2f%%\n", epochs, epochs == 1 ? "" : "s", now() - t0, 100 * acc);
  if (!rc && lenet_save(m, save)) {
    fprintf(stderr, "save: %s\n", lenet_error(m));
    rc = 1;
  }
  if (!rc) printf("weights saved to %s\n", save);
  lenet_destroy(m);
  free(train.images), free(train.labels), free(test.images), free(test.labels);
  return rc;
}
