/* mkidx.c — writes a tiny synthetic data set in the MNIST layout for the kiln train tests:
 * 8x8 images whose class (0-3) is the quadrant that is bright, on a dim noisy background.
 *
 *   usage: mkidx DIR NTRAIN NTEST */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint32_t mkidx_rand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33);
}

static void mkidx_be32(FILE *f, uint32_t v) {
  fputc((int)(v >> 24), f), fputc((int)(v >> 16 & 255), f), fputc((int)(v >> 8 & 255), f), fputc((int)(v & 255), f);
}

/* PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte with n samples. */
static int mkidx_split(const char *dir, const char *prefix, int n, uint64_t *rng) {
  char ip[4096], lp[4096];
  snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte", dir, prefix);
  snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte", dir, prefix);
  FILE *im = fopen(ip, "wb"), *lb = fopen(lp, "wb");
  if (!im || !lb) return fprintf(stderr, "mkidx: cannot write in %s\n", dir), 1;
  mkidx_be32(im, 0x803), mkidx_be32(im, (uint32_t)n), mkidx_be32(im, 8), mkidx_be32(im, 8);
  mkidx_be32(lb, 0x801), mkidx_be32(lb, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    int label = (int)(mkidx_rand(rng) % 4);
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 8; c++) {
        int q = (r >= 4) * 2 + (c >= 4);
        fputc(q == label ? 150 + (int)(mkidx_rand(rng) % 106) : (int)(mkidx_rand(rng) % 90), im);
      }
    fputc(label, lb);
  }
  return (fclose(im) | fclose(lb)) ? fprintf(stderr, "mkidx: write error in %s\n", dir), 1 : 0;
}

int main(int argc, char **argv) {
  if (argc != 4) return fprintf(stderr, "usage: mkidx DIR NTRAIN NTEST\n"), 2;
  uint64_t rng = 7;
  return mkidx_split(argv[1], "train", atoi(argv[2]), &rng) || mkidx_split(argv[1], "t10k", atoi(argv[3]), &rng);
}
