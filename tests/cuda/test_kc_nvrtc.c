/* test_kc_nvrtc.c — compiles the GPU library source as the code generator will: k_params.h,
 * k_scalar.h, k_philox.h and kc_args.h included first, then every kernels/cuda .cu file pasted in
 * name order, all as one NVRTC program (headers given in memory, no include path, so a
 * header the device code does not get from the generator fails here too), options
 * --gpu-architecture=compute_80 -default-device --std=c++17. Fails with NVRTC's log; checks
 * every KC_KERNELS kernel is an entry of the PTX; assembles the PTX with ptxas -arch=sm_80
 * (skipped, saying so, where CMake found no ptxas). Needs the toolkit, not a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_args.h"

#define MAX_FILES 64

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names in kernels/cuda ending in `ext`, sorted; returns how many. */
static int list_dir(const char *dir, const char *ext, char **names) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  size_t el = strlen(ext);
  if (!d) return 0;
  while ((e = readdir(d)) && n < MAX_FILES) {
    size_t l = strlen(e->d_name);
    if (l > el && strcmp(e->d_name + l - el, ext) == 0) names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_name);
  return n;
}

typedef struct {
  int n;
  const char *name[MAX_FILES];
  char *text[MAX_FILES];
} headers;

static int add_header(headers *h, const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  h->text[h->n] = slurp(path);
  if (!h->text[h->n]) {
    fprintf(stderr, "cannot read %s\n", path);
    return 1;
  }
  h->name[h->n++] = name;
  return 0;
}

/* The program: the generator's four includes, then every .cu, with a #line for each. */
static char *program(const char *cdir, char **cu, int ncu) {
  size_t cap = 1 << 16, len = 0;
  char *s = malloc(cap);
  len += (size_t)snprintf(s, cap, "#include \"k_params.h\"\n#include \"k_scalar.h\"\n"
                                  "#include \"k_philox.h\"\n#include \"kc_args.h\"\n");
  for (int i = 0; i < ncu; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", cdir, cu[i]);
    char *t = slurp(path);
    if (!t) return NULL;
    size_t need = len + strlen(t) + strlen(path) + 64;
    while (need > cap) s = realloc(s, cap *= 2);
    len += (size_t)snprintf(s + len, cap - len, "#line 1 \"%s\"\n%s\n", path, t);
    free(t);
  }
  return s;
}

static int check_entries(const char *ptx) {
  static const char *names[] = {
#define KC_NAME(n) "kc_" #n,
      KC_KERNELS(KC_NAME)
#undef KC_NAME
  };
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
  const char *kdir = KILN_SOURCE_DIR "/kernels", *cdir = KILN_SOURCE_DIR "/kernels/cuda";
  char *cu[MAX_FILES], *hh[MAX_FILES];
  int ncu = list_dir(cdir, ".cu", cu), nh = list_dir(cdir, ".h", hh);
  headers h = {0};
  static const char *base[] = {"k_base.h", "k_params.h", "k_scalar.h", "k_philox.h"};
  for (int i = 0; i < 4; i++)
    if (add_header(&h, kdir, base[i])) return 1;
  for (int i = 0; i < nh; i++)
    if (add_header(&h, cdir, hh[i])) return 1;
  char *src = program(cdir, cu, ncu);
  if (!src || ncu == 0) return fprintf(stderr, "no kernels/cuda/*.cu read\n"), 1;
  printf("NVRTC: %d .cu files, %d headers\n", ncu, h.n);

  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src, "kiln_lib.cu", h.n, (const char *const *)h.text, h.name) != NVRTC_SUCCESS)
    return fprintf(stderr, "nvrtcCreateProgram failed\n"), 1;
  const char *opts[] = {"--gpu-architecture=compute_80", "-default-device", "--std=c++17"};
  nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
  size_t loglen = 0;
  nvrtcGetProgramLogSize(prog, &loglen);
  char *log = malloc(loglen + 1);
  nvrtcGetProgramLog(prog, log);
  if (r != NVRTC_SUCCESS) {
    fprintf(stderr, "NVRTC: %s\n%s\n", nvrtcGetErrorString(r), log);
    return 1;
  }
  if (loglen > 1) printf("NVRTC log:\n%s\n", log);
  size_t n = 0;
  nvrtcGetPTXSize(prog, &n);
  char *ptx = malloc(n + 1);
  nvrtcGetPTX(prog, ptx);
  ptx[n] = 0;
  printf("PTX: %zu bytes\n", n);
  int bad = check_entries(ptx) | run_ptxas(ptx);
  nvrtcDestroyProgram(&prog);
  printf(bad ? "FAIL\n" : "ok\n");
  return bad;
}
