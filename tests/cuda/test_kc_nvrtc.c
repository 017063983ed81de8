/* test_kc_nvrtc.c — the GPU library through the code generator's own NVRTC path
 * (codegen/cuda: cg_cuda_ptx over the sources kiln embeds, cg_cuda_sources), with no model:
 * every embedded file the generated program includes, compiled for compute_80 with the
 * generator's options. Fails with NVRTC's log; checks every KC_KERNELS kernel and kc_blas.cu's
 * are entries of the PTX; assembles the PTX with ptxas -arch=sm_80 (skipped, saying so, where
 * CMake found no ptxas). Needs the toolkit's NVRTC, not a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cg_cuda.h"
#include "kc_args.h"

static int check_entries(const char *ptx) {
  static const char *names[] = {
#define KC_NAME(n) "kc_" #n,
      KC_KERNELS(KC_NAME)
#undef KC_NAME
      "kc_blas_bias_add", "kc_blas_bias_grad", "kc_blas_zero"};
  int bad = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char want[128];
    snprintf(want, sizeof want, ".entry %s(", names[i]);
    if (!strstr(ptx, want)) fprintf(stderr, "kernel %s is not in the PTX\n", names[i]), bad = 1;
  }
  return bad;
}

static int run_ptxas(const char *ptx) {
  const char *ptxas = KILN_PTXAS;
  if (!ptxas[0] || access(ptxas, X_OK) != 0) {
    printf("SKIP ptxas: not found by CMake (KILN_PTXAS)\n");
    return 0;
  }
  char path[] = "/tmp/kiln_kc_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return perror("mkstemp"), 1;
  FILE *f = fdopen(fd, "w");
  fputs(ptx, f);
  fclose(f);
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' -arch=sm_80 '%s' -o /dev/null", ptxas, path);
  int rc = system(cmd);
  unlink(path);
  if (rc != 0) fprintf(stderr, "ptxas failed (%d): %s\n", rc, cmd);
  return rc != 0;
}

int main(void) {
  size_t cap = 4096, len = 0;
  char *src = malloc(cap);
  if (!src) return 1;
  src[0] = 0;
  for (int i = 0; i < cg_cuda_nsources && len < cap / 2; i++)   /* a few dozen short lines */
    if (cg_cuda_sources[i].main) len += (size_t)snprintf(src + len, cap - len, "#include \"%s\"\n", cg_cuda_sources[i].name);
  printf("NVRTC: %d embedded sources\n", cg_cuda_nsources);
  char err[8192], *ptx = NULL;
  if (cg_cuda_ptx(src, "sm_80", &ptx, err, sizeof err)) return fprintf(stderr, "%s\n", err), free(src), 1;
  printf("PTX: %zu bytes\n", strlen(ptx));
  int bad = check_entries(ptx) | run_ptxas(ptx);
  free(ptx), free(src);
  printf(bad ? "FAIL\n" : "ok\n");
  return bad;
}
