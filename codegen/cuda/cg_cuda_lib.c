/* cg_cuda_lib.c — the GPU op library's PTX, a module of its own beside each model's: the same
 * text for every model of an architecture, so it is compiled once, not per model. NVRTC takes
 * ~0.8 s over kernels/cuda/kc_ops.cu, against 0.03-0.2 s for a model's generated kernels: the
 * build runs it for CG_CUDA_DEFAULT_ARCH (cg_cuda_libptx_gen.c writes cg_cuda_lib_ptx_built),
 * and a compile for another --gpu-arch runs it once a process and keeps the result. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cg_cuda.h"

enum { CG_CUDA_LIB_CACHE = 8 };   /* architectures compiled in one process: kiln uses one */

static struct {
  char arch[16];
  char *ptx;
} cg_lib_cache[CG_CUDA_LIB_CACHE];
static int cg_lib_ncache;
static pthread_mutex_t cg_lib_mu = PTHREAD_MUTEX_INITIALIZER;

/* The cached PTX of arch, or NULL. Under cg_lib_mu. */
static const char *cg_lib_cached(const char *arch) {
  for (int i = 0; i < cg_lib_ncache; i++)
    if (strcmp(cg_lib_cache[i].arch, arch) == 0) return cg_lib_cache[i].ptx;
  return NULL;
}

/* NVRTC over the library's program; the result kept. Under cg_lib_mu. */
static int cg_lib_compile(const char *arch, const char **ptx, char *err, size_t n) {
  if (strlen(arch) >= sizeof cg_lib_cache[0].arch) return rt_errf(err, n, "--gpu-arch: '%s' is not a GPU architecture such as sm_80 or sm_90", arch);
  if (cg_lib_ncache == CG_CUDA_LIB_CACHE) return rt_errf(err, n, "the GPU library was compiled for %d architectures in this process already", CG_CUDA_LIB_CACHE);
  char *src = cg_cuda_lib_source(), *out = NULL;
  if (!src) return rt_errf(err, n, "out of memory");
  int bad = cg_cuda_ptx(src, arch, &out, err, n);
  free(src);
  if (bad) return 1;
  snprintf(cg_lib_cache[cg_lib_ncache].arch, sizeof cg_lib_cache[0].arch, "%s", arch);
  cg_lib_cache[cg_lib_ncache++].ptx = out;
  *ptx = out;
  return 0;
}

int cg_cuda_lib_ptx(const char *arch, const char **ptx, char *err, size_t n) {
  if (!arch) arch = CG_CUDA_DEFAULT_ARCH;
  if (cg_cuda_lib_ptx_built && strcmp(arch, CG_CUDA_DEFAULT_ARCH) == 0) return *ptx = cg_cuda_lib_ptx_built, 0;
  pthread_mutex_lock(&cg_lib_mu);
  int bad = (*ptx = cg_lib_cached(arch)) ? 0 : cg_lib_compile(arch, ptx, err, n);
  pthread_mutex_unlock(&cg_lib_mu);
  return bad;
}
