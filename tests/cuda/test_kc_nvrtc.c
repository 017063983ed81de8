/* test_kc_nvrtc.c — the GPU library through the code generator's own NVRTC path
 * (codegen/cuda: cg_cuda_ptx over the sources kiln embeds, cg_cuda_sources), with no model:
 * the library's program (cg_cuda_lib_source) compiled for compute_80 with the generator's
 * options. Fails with NVRTC's log; checks every KC_KERNELS kernel and kc_blas.cu's are entries
 * of the PTX; assembles the PTX with ptxas -arch=sm_80 (skipped, saying so, where CMake found
 * no ptxas). Then cg_cuda_lib_ptx, what a --target cuda compile embeds: for sm_80 the PTX built
 * into kiln, which must be this one (else the build's copy is stale); for sm_90 compiled on
 * first use, kept for the second. Needs the toolkit's NVRTC, not a GPU. */
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

/* cg_cuda_lib_ptx: the built-in sm_80 PTX is `fresh`; sm_90 is compiled once and kept. */
static int check_lib_ptx(const char *fresh) {
  char err[8192];
  const char *p80 = NULL, *p90 = NULL, *again = NULL;
  if (cg_cuda_lib_ptx("sm_80", &p80, err, sizeof err)) return fprintf(stderr, "cg_cuda_lib_ptx sm_80: %s\n", err), 1;
  if (!cg_cuda_lib_ptx_built) printf("note: no PTX was built into kiln (NVRTC did not run at build time): sm_80 compiled now\n");
  else if (p80 != cg_cuda_lib_ptx_built) return fprintf(stderr, "cg_cuda_lib_ptx sm_80 is not the built-in PTX\n"), 1;
  if (strcmp(p80, fresh) != 0) return fprintf(stderr, "the PTX built into kiln differs from NVRTC's now: a stale build\n"), 1;
  if (cg_cuda_lib_ptx("sm_90", &p90, err, sizeof err) || cg_cuda_lib_ptx("sm_90", &again, err, sizeof err))
    return fprintf(stderr, "cg_cuda_lib_ptx sm_90: %s\n", err), 1;
  if (!strstr(p90, "\n.target sm_90\n") || check_entries(p90)) return fprintf(stderr, "the sm_90 library PTX is not sm_90's\n"), 1;
  if (again != p90) return fprintf(stderr, "cg_cuda_lib_ptx compiled sm_90 twice\n"), 1;
  printf("cg_cuda_lib_ptx: sm_80 built in, sm_90 compiled once (%zu bytes)\n", strlen(p90));
  return 0;
}

int main(void) {
  char *src = cg_cuda_lib_source();
  if (!src) return 1;
  printf("NVRTC: %d embedded sources\n", cg_cuda_nsources);
  char err[8192], *ptx = NULL;
  if (cg_cuda_ptx(src, "sm_80", &ptx, err, sizeof err)) return fprintf(stderr, "%s\n", err), free(src), 1;
  printf("PTX: %zu bytes\n", strlen(ptx));
  int bad = check_entries(ptx) | run_ptxas(ptx) | check_lib_ptx(ptx);
  free(ptx), free(src);
  printf(bad ? "FAIL\n" : "ok\n");
  return bad;
}
