/* cg_cuda_nvrtc.c — NVRTC through dlopen, so kiln runs (and compiles for the CPU) where the
 * CUDA toolkit is absent; --target cuda then says what is missing. Looked for as the
 * toolkit installs it: libnvrtc.so.13 on the loader's path, then in the toolkit that kiln was
 * built against (KILN_CUDA_LIB_DIR), then any libnvrtc.so. */
#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cg_cuda.h"

#ifndef KILN_CUDA_LIB_DIR
#define KILN_CUDA_LIB_DIR "/usr/local/cuda/lib64"
#endif

typedef struct {
  nvrtcResult (*Create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
  nvrtcResult (*Compile)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*LogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*Log)(nvrtcProgram, char *);
  nvrtcResult (*PtxSize)(nvrtcProgram, size_t *);
  nvrtcResult (*Ptx)(nvrtcProgram, char *);
  nvrtcResult (*Destroy)(nvrtcProgram *);
  const char *(*ErrorString)(nvrtcResult);
} cg_nvrtc;

static cg_nvrtc cg_nv;
static char cg_nv_err[512];
static pthread_once_t cg_nv_once = PTHREAD_ONCE_INIT;

static void *cg_nvrtc_dlopen(void) {
  static const char *const names[] = {"libnvrtc.so.13", KILN_CUDA_LIB_DIR "/libnvrtc.so.13", KILN_CUDA_LIB_DIR "/libnvrtc.so",
                                      "libnvrtc.so", NULL};
  void *h = NULL;
  for (int i = 0; names[i] && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  return h;
}

static void cg_nvrtc_load(void) {
  void *h = cg_nvrtc_dlopen();
  if (!h) {
    snprintf(cg_nv_err, sizeof cg_nv_err, "the CUDA target needs NVRTC (libnvrtc.so.13 from the CUDA toolkit): %s", dlerror());
    return;
  }
  static const char *const syms[] = {"nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog",
                                     "nvrtcGetPTXSize", "nvrtcGetPTX", "nvrtcDestroyProgram", "nvrtcGetErrorString"};
  void **slots[] = {(void **)&cg_nv.Create, (void **)&cg_nv.Compile, (void **)&cg_nv.LogSize, (void **)&cg_nv.Log,
                    (void **)&cg_nv.PtxSize, (void **)&cg_nv.Ptx, (void **)&cg_nv.Destroy, (void **)&cg_nv.ErrorString};
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    void *p = dlsym(h, syms[i]);
    if (!p) {
      snprintf(cg_nv_err, sizeof cg_nv_err, "NVRTC lacks %s", syms[i]);
      return;
    }
    memcpy(slots[i], &p, sizeof p);
  }
}

/* "sm_80" or "compute_80" -> "--gpu-architecture=compute_80"; anything else is refused. */
static int cg_nvrtc_arch(const char *arch, char *opt, size_t n, char *err, size_t en) {
  const char *num = strncmp(arch, "sm_", 3) == 0 ? arch + 3 : strncmp(arch, "compute_", 8) == 0 ? arch + 8 : NULL;
  if (!num || strlen(num) < 2 || strlen(num) > 4 || strspn(num, "0123456789af") != strlen(num))
    return rt_errf(err, en, "--gpu-arch: '%s' is not a GPU architecture such as sm_80 or sm_90", arch);
  snprintf(opt, n, "--gpu-architecture=compute_%s", num);
  return 0;
}

static int cg_nvrtc_log(nvrtcProgram p, const char *what, nvrtcResult r, char *err, size_t n) {
  size_t len = 0;
  char *log = NULL;
  if (cg_nv.LogSize(p, &len) == NVRTC_SUCCESS && len > 1 && (log = malloc(len)) && cg_nv.Log(p, log) != NVRTC_SUCCESS) log[0] = 0;
  rt_errf(err, n, "NVRTC %s failed (%s)%s%s", what, cg_nv.ErrorString(r), log && log[0] ? ":\n" : "", log ? log : "");
  free(log);
  return 1;
}

char *cg_cuda_lib_source(void) {
  size_t len = 1;
  for (int k = 0; k < cg_cuda_nsources; k++) len += strlen(cg_cuda_sources[k].name) + 16;
  char *src = malloc(len), *p = src;
  if (!src) return NULL;
  *p = 0;
  for (int pass = 0; pass < 2; pass++)   /* the headers first: the library's .cu files use them */
    for (int k = 0; k < cg_cuda_nsources; k++)
      if (cg_cuda_sources[k].role == (pass ? CG_CUDA_SRC_LIB : CG_CUDA_SRC_MAIN))
        p += sprintf(p, "#include \"%s\"\n", cg_cuda_sources[k].name);
  return src;
}

int cg_cuda_ptx(const char *src, const char *arch, char **ptx, char *err, size_t n) {
  char archopt[64];
  *ptx = NULL;
  if (cg_nvrtc_arch(arch ? arch : CG_CUDA_DEFAULT_ARCH, archopt, sizeof archopt, err, n)) return 1;
  pthread_once(&cg_nv_once, cg_nvrtc_load);
  if (cg_nv_err[0]) return rt_errf(err, n, "%s", cg_nv_err);
  int nh = cg_cuda_nsources;
  const char *names[nh + 1], *texts[nh + 1];   /* NVRTC takes the headers as two arrays */
  for (int i = 0; i < nh; i++) names[i] = cg_cuda_sources[i].name, texts[i] = cg_cuda_sources[i].text;
  nvrtcProgram p;
  nvrtcResult r = cg_nv.Create(&p, src, "kiln_model.cu", nh, texts, names);
  if (r != NVRTC_SUCCESS) return rt_errf(err, n, "NVRTC could not take the program: %s", cg_nv.ErrorString(r));
  /* No FMA contraction: the CPU kernels and loops round every multiply and add on its own,
   * so the GPU's elementwise results stay within an ulp or two of theirs. */
  const char *opts[] = {archopt, "-default-device", "--std=c++17", "--fmad=false", "-w"};
  r = cg_nv.Compile(p, (int)(sizeof opts / sizeof *opts), opts);
  int bad = r != NVRTC_SUCCESS ? cg_nvrtc_log(p, "compile", r, err, n) : 0;
  size_t size = 0;
  if (!bad && (r = cg_nv.PtxSize(p, &size)) != NVRTC_SUCCESS) bad = cg_nvrtc_log(p, "PTX size", r, err, n);
  if (!bad && !(*ptx = malloc(size + 1))) bad = rt_errf(err, n, "out of memory");
  if (!bad && (r = cg_nv.Ptx(p, *ptx)) != NVRTC_SUCCESS) bad = cg_nvrtc_log(p, "PTX", r, err, n);
  if (!bad) (*ptx)[size] = 0;
  if (bad) free(*ptx), *ptx = NULL;
  cg_nv.Destroy(&p);
  return bad;
}
