/* aot_driver.c — a user's program against a generated header: calls mlp_* directly (the real
 * ABI path, no kiln_model), checks the error paths, and writes predict's output, the losses of
 * 3 train steps and predict's output after training to a raw float file for
 * aot_differential.c to compare with the executor. usage: driver IMAGE LABEL OUT SEED */
#include <stdio.h>
#include <stdlib.h>

#include "mlp.h"

static int read_raw(const char *path, void *buf, size_t n) {
  FILE *f = fopen(path, "rb");
  size_t got = f ? fread(buf, 1, n, f) : 0;
  if (f) fclose(f);
  return got == n ? 0 : 1;
}

static int fail(const char *what, mlp *m) {
  fprintf(stderr, "driver: %s: %s\n", what, m ? mlp_error(m) : "");
  return 1;
}

/* Bad calls fail cleanly with a message and leave the model usable. */
static int check_errors(mlp *m, const float *image) {
  static float prob[mlp_PROB_SIZE];
  if (mlp_predict(m, NULL, prob) == 0) return fail("predict accepted a NULL input", m);
  if (mlp_error(m)[0] == 0) return fail("no message after a failure", m);
  if (mlp_load(m, "/nonexistent/weights.safetensors") == 0) return fail("load accepted a missing file", m);
  if (mlp_predict(m, image, prob) != 0) return fail("predict after failures", m);
  return 0;
}

int main(int argc, char **argv) {
  static float image[mlp_IMAGE_SIZE], prob[mlp_PROB_SIZE], out[2 * mlp_PROB_SIZE + 3];
  static int32_t label[mlp_LABEL_SIZE];
  if (argc != 5) return fprintf(stderr, "usage: driver IMAGE LABEL OUT SEED\n"), 2;
  if (read_raw(argv[1], image, sizeof image) || read_raw(argv[2], label, sizeof label)) return fail("reading inputs", NULL);
  mlp *m = mlp_create(strtoull(argv[4], NULL, 10));
  if (!m) return fail("create", NULL);
  if (check_errors(m, image)) return 1;
  if (mlp_predict(m, image, prob)) return fail("predict", m);
  for (int i = 0; i < mlp_PROB_SIZE; i++) out[i] = prob[i];
  for (int s = 0; s < 3; s++)
    if (mlp_train_step(m, image, label, &out[mlp_PROB_SIZE + s])) return fail("train_step", m);
  if (mlp_predict(m, image, out + mlp_PROB_SIZE + 3)) return fail("predict after training", m);
  if (mlp_set_lr(m, 0.01f)) return fail("set_lr", m);
  mlp_destroy(m);
  FILE *f = fopen(argv[3], "wb");
  if (!f || fwrite(out, sizeof out, 1, f) != 1 || fclose(f)) return fail("writing the output", NULL);
  return 0;
}
