/* fake_cuda.c — a host stand-in for the CUDA driver (libcuda.so.1), so the whole GPU path of a
 * CUDA .so (runtime/cuda: memory, copies, the module, every launch) runs and is compared with
 * the CPU on a machine without a GPU. Device memory is host memory (malloc); streams run
 * everything at once; a module is the host build of the model's CUDA C (--emit cu compiled
 * with emul.h, named by $KILN_FAKE_CUDA_MODULE; PATH1:PATH2... gives the process's first module
 * load the first, the second the second and so on, the last repeating: two models in one
 * process, as gpu_compare runs a bounded .so beside one of fixed sizes), whose kernels run as
 * one thread of one block
 * (every kernel is grid-stride). Library kernels take one struct by value: the module defines
 * NAME__host(void **params) for each (emul_tail.h); generated kernels take only pointers and
 * are called directly. Together with the fake cuBLAS and cuDNN beside it, and ASan, an
 * out-of-bounds access on the GPU becomes a report here. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))

FAKE_API CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
FAKE_API CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
FAKE_API CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
FAKE_API CUresult cuDeviceGet(CUdevice *d, int i) { *d = i; return i == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
FAKE_API CUresult cuDeviceGetName(char *name, int n, CUdevice d) {
  (void)d;
  snprintf(name, (size_t)n, "Kiln host emulation");
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) { (void)a, (void)d; *v = 1; return CUDA_SUCCESS; }

static int fake_ctx_token;
FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = (CUcontext)&fake_ctx_token; return CUDA_SUCCESS; }
FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return CUDA_SUCCESS; }
FAKE_API CUresult cuCtxPushCurrent_v2(CUcontext c) { (void)c; return CUDA_SUCCESS; }
FAKE_API CUresult cuCtxPopCurrent_v2(CUcontext *c) { if (c) *c = (CUcontext)&fake_ctx_token; return CUDA_SUCCESS; }

static int fake_stream_token;
FAKE_API CUresult cuStreamCreate(CUstream *s, unsigned int flags) { (void)flags; *s = (CUstream)&fake_stream_token; return CUDA_SUCCESS; }
FAKE_API CUresult cuStreamDestroy_v2(CUstream s) { (void)s; return CUDA_SUCCESS; }
FAKE_API CUresult cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  void *q = malloc(n ? n : 1);
  if (!q) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(q, 0xff, n);   /* NaN bits: a kernel that reads what nobody wrote shows up */
  *p = (CUdeviceptr)(uintptr_t)q;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return CUDA_SUCCESS; }
FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)st; memmove((void *)(uintptr_t)d, s, n); return CUDA_SUCCESS; }
FAKE_API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { (void)st; memmove(d, (void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
FAKE_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  (void)st;
  memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memmove((void *)(uintptr_t)d, s, n); return CUDA_SUCCESS; }
FAKE_API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memmove(d, (void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
FAKE_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) { (void)st; memset((void *)(uintptr_t)d, v, n); return CUDA_SUCCESS; }

/* ---- modules: the host build named by $KILN_FAKE_CUDA_MODULE ---- */

typedef struct { void (*host)(void **); void *direct; char name[128]; } fake_function;
typedef struct {
  void *so;
  fake_function **fns;          /* every handle cuModuleGetFunction gave out: freed with the module */
  int nfns;
} fake_module;

/* The nth entry of the ':'-separated list (the last when there are fewer), into buf. */
static const char *fake_module_path(const char *list, int nth, char *buf, size_t size) {
  const char *p = list;
  for (int k = 0; k < nth && strchr(p, ':'); k++) p = strchr(p, ':') + 1;
  size_t len = strchr(p, ':') ? (size_t)(strchr(p, ':') - p) : strlen(p);
  snprintf(buf, size, "%.*s", (int)len, p);
  return buf;
}

FAKE_API CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, CUjit_option *o, void **v) {
  (void)image, (void)n, (void)o, (void)v;
  static int loads;   /* module loads so far in this process */
  const char *list = getenv("KILN_FAKE_CUDA_MODULE");
  if (!list) return fprintf(stderr, "fake libcuda: set KILN_FAKE_CUDA_MODULE to the model's host module\n"), CUDA_ERROR_INVALID_IMAGE;
  char path[4096];
  fake_module_path(list, loads++, path, sizeof path);
  fake_module *fm = calloc(1, sizeof *fm);
  if (!fm || !(fm->so = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
    fprintf(stderr, "fake libcuda: %s\n", dlerror());
    free(fm);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  *m = (CUmodule)fm;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleUnload(CUmodule m) {
  fake_module *fm = (fake_module *)m;
  for (int i = 0; i < fm->nfns; i++) free(fm->fns[i]);
  free(fm->fns);
  dlclose(fm->so);
  free(fm);
  return CUDA_SUCCESS;
}

/* A function handle lives as long as its module. */
FAKE_API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  fake_module *fm = (fake_module *)m;
  fake_function **grown = realloc(fm->fns, sizeof *grown * (size_t)(fm->nfns + 1));
  if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
  fm->fns = grown;
  char host[160];
  snprintf(host, sizeof host, "%s__host", name);
  fake_function *ff = calloc(1, sizeof *ff);
  if (!ff) return CUDA_ERROR_OUT_OF_MEMORY;
  void *h = dlsym(fm->so, host);
  memcpy(&ff->host, &h, sizeof h);
  ff->direct = dlsym(fm->so, name);
  snprintf(ff->name, sizeof ff->name, "%s", name);
  if (!ff->host && !ff->direct) return free(ff), CUDA_ERROR_NOT_FOUND;
  fm->fns[fm->nfns++] = ff;
  *f = (CUfunction)ff;
  return CUDA_SUCCESS;
}

/* A generated kernel takes only pointers: called with up to 32 (the x86-64 convention lets a
 * caller pass more arguments than the callee reads). */
typedef void (*fake_ptrs_fn)(void *, void *, void *, void *, void *, void *, void *, void *, void *, void *, void *,
                             void *, void *, void *, void *, void *, void *, void *, void *, void *, void *, void *,
                             void *, void *, void *, void *, void *, void *, void *, void *, void *, void *);

FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shared, CUstream s, void **params, void **extra) {
  (void)gy, (void)gz, (void)by, (void)bz, (void)shared, (void)s, (void)extra;
  fake_function *ff = (fake_function *)f;
  if (!gx || !bx) return CUDA_ERROR_INVALID_VALUE;
  if (ff->host) { ff->host(params); return CUDA_SUCCESS; }
  void *a[32] = {0};
  for (int i = 0; i < 32 && params && params[i]; i++) a[i] = *(void **)params[i];
  fake_ptrs_fn fn;
  memcpy(&fn, &ff->direct, sizeof fn);
  fn(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17],
     a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25], a[26], a[27], a[28], a[29], a[30], a[31]);
  return CUDA_SUCCESS;
}

/* Events: the host clock. */
#include <time.h>
typedef struct { double t; } fake_event;
FAKE_API CUresult cuEventCreate(CUevent *e, unsigned int flags) {
  (void)flags;
  *e = (CUevent)calloc(1, sizeof(fake_event));
  return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
FAKE_API CUresult cuEventRecord(CUevent e, CUstream s) {
  (void)s;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ((fake_event *)e)->t = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuEventSynchronize(CUevent e) { (void)e; return CUDA_SUCCESS; }
FAKE_API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { *ms = (float)(((fake_event *)b)->t - ((fake_event *)a)->t); return CUDA_SUCCESS; }
FAKE_API CUresult cuEventDestroy_v2(CUevent e) { free(e); return CUDA_SUCCESS; }

FAKE_API CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == CUDA_SUCCESS ? "no error" : "fake libcuda error";
  return CUDA_SUCCESS;
}
