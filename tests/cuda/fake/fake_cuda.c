/* fake_cuda.c — a host stand-in for the CUDA driver (libcuda.so.1), so the whole GPU path of a
 * CUDA .so (runtime/cuda: memory, copies, the module, every launch) runs and is compared with
 * the CPU on a machine without a GPU. Device memory is host memory (malloc); streams run
 * everything at once; a module is the host build of the model's CUDA C (--emit cu compiled
 * with emul.h, named by $KILN_FAKE_CUDA_MODULE; PATH1:PATH2... gives the process's first model
 * module load the first, the second the second and so on, the last repeating: two models in
 * one process, as gpu_compare runs a bounded .so beside one of fixed sizes) or, for the GPU op
 * library's module (PTX that defines kc_ kernels), the host build of kernels/cuda's .cu files
 * named by $KILN_FAKE_CUDA_LIB; their kernels run as one thread of one block
 * (every kernel is grid-stride). Library kernels take one struct by value: the module defines
 * NAME__host(void **params) for each (emul_tail.h); generated kernels take only pointers and
 * are called directly. Together with the fake cuBLAS and cuDNN beside it, and ASan, an
 * out-of-bounds access on the GPU becomes a report here.
 *
 * Stream capture and graphs (the runtime's rtc_graph.c): while a capture is open, launches,
 * device copies and memsets are recorded, not run, with their arguments copied as the driver
 * copies a kernel's parameters into its node, so that a value passed by value replays as it was
 * at the capture, as on a GPU; the fake cuBLAS and cuDNN defer their calls into the record
 * (fake_capture.h); a graph's launch runs the record in order. What a GPU refuses in a capture
 * (a synchronisation, a copy to or from host memory) is refused here too. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))

/* A kernel of a module: a library kernel's trampoline (and its struct's size), or a generated
 * kernel called directly. */
typedef struct { void (*host)(void **); void *direct; size_t bytes; char name[128]; } fake_function;

/* ---- capture: the record of an open capture, and the graphs made from records ---- */

enum { FAKE_NODE_HOST_KERNEL, FAKE_NODE_PTR_KERNEL, FAKE_NODE_COPY, FAKE_NODE_SET, FAKE_NODE_CALL };
typedef struct {
  int kind;
  fake_function *f;
  void *bytes;                  /* a library kernel's struct, or a library call's arguments */
  void *ptrs[32];               /* a generated kernel's pointers */
  void *dst;
  const void *src;
  size_t n;
  unsigned char v;
  void (*run)(void *);          /* a library call: run(bytes) */
} fake_node;
typedef struct { fake_node *nodes; int n, cap, refs; } fake_graph;

static fake_graph *fake_open_capture;   /* the fake has one stream: a capture is the process's */

static CUresult fake_record(fake_node node) {
  fake_graph *g = fake_open_capture;
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    fake_node *grown = realloc(g->nodes, sizeof *grown * (size_t)cap);
    if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
    g->nodes = grown, g->cap = cap;
  }
  g->nodes[g->n++] = node;
  return CUDA_SUCCESS;
}

FAKE_API int fake_cuda_capturing(void) { return fake_open_capture != NULL; }
FAKE_API void fake_cuda_defer(void (*run)(void *), void *ctx) {
  if (fake_record((fake_node){.kind = FAKE_NODE_CALL, .bytes = ctx, .run = run}) != CUDA_SUCCESS) abort();
}

FAKE_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  (void)s, (void)mode;
  if (fake_open_capture) return CUDA_ERROR_ILLEGAL_STATE;
  if (!(fake_open_capture = calloc(1, sizeof *fake_open_capture))) return CUDA_ERROR_OUT_OF_MEMORY;
  fake_open_capture->refs = 1;
  return CUDA_SUCCESS;
}

/* KILN_FAKE_TRACE=1: each capture and graph launch on stderr (tests count them). */
static int fake_trace(void) {
  const char *e = getenv("KILN_FAKE_TRACE");
  return e && *e && *e != '0';
}

FAKE_API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
  (void)s;
  if (!fake_open_capture) return CUDA_ERROR_ILLEGAL_STATE;
  if (fake_trace()) fprintf(stderr, "[fake cuda] graph captured: %d nodes\n", fake_open_capture->n);
  *g = (CUgraph)fake_open_capture;
  fake_open_capture = NULL;
  return CUDA_SUCCESS;
}

static void fake_graph_release(fake_graph *g) {
  if (--g->refs) return;
  for (int i = 0; i < g->n; i++) free(g->nodes[i].bytes);
  free(g->nodes);
  free(g);
}

/* The executable form shares its graph's record. */
FAKE_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
  (void)flags;
  ((fake_graph *)g)->refs++;
  *e = (CUgraphExec)g;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphDestroy(CUgraph g) { fake_graph_release((fake_graph *)g); return CUDA_SUCCESS; }
FAKE_API CUresult cuGraphExecDestroy(CUgraphExec e) { fake_graph_release((fake_graph *)e); return CUDA_SUCCESS; }


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
FAKE_API CUresult cuStreamSynchronize(CUstream s) { (void)s; return fake_open_capture ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS; }

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  void *q = malloc(n ? n : 1);
  if (!q) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(q, 0xff, n);   /* NaN bits: a kernel that reads what nobody wrote shows up */
  *p = (CUdeviceptr)(uintptr_t)q;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return CUDA_SUCCESS; }
/* Host memory is pageable here: a GPU refuses its copies in a capture. */
FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  (void)st;
  if (fake_open_capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  memmove((void *)(uintptr_t)d, s, n);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
  (void)st;
  if (fake_open_capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  memmove(d, (void *)(uintptr_t)s, n);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  (void)st;
  if (fake_open_capture) return fake_record((fake_node){.kind = FAKE_NODE_COPY, .dst = (void *)(uintptr_t)d, .src = (const void *)(uintptr_t)s, .n = n});
  memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memmove((void *)(uintptr_t)d, s, n); return CUDA_SUCCESS; }
FAKE_API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memmove(d, (void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
FAKE_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
  (void)st;
  if (fake_open_capture) return fake_record((fake_node){.kind = FAKE_NODE_SET, .dst = (void *)(uintptr_t)d, .n = n, .v = v});
  memset((void *)(uintptr_t)d, v, n);
  return CUDA_SUCCESS;
}

/* ---- modules: the host build named by $KILN_FAKE_CUDA_MODULE ---- */

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
  (void)n, (void)o, (void)v;
  static int loads;   /* model module loads so far in this process */
  int lib = image && strstr(image, ".entry kc_") != NULL;
  const char *var = lib ? "KILN_FAKE_CUDA_LIB" : "KILN_FAKE_CUDA_MODULE", *list = getenv(var);
  if (!list) return fprintf(stderr, "fake libcuda: set %s to the %s host module\n", var, lib ? "GPU library's" : "model's"), CUDA_ERROR_INVALID_IMAGE;
  char path[4096];
  fake_module_path(list, lib ? 0 : loads++, path, sizeof path);
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
  snprintf(host, sizeof host, "%s__bytes", name);
  const size_t *bytes = dlsym(fm->so, host);
  ff->bytes = bytes ? *bytes : 0;
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
static CUresult fake_call_ptrs(fake_function *ff, void *const *a);

FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shared, CUstream s, void **params, void **extra) {
  (void)gy, (void)gz, (void)by, (void)bz, (void)shared, (void)s, (void)extra;
  fake_function *ff = (fake_function *)f;
  if (!gx || !bx) return CUDA_ERROR_INVALID_VALUE;
  if (ff->host && fake_open_capture) {   /* its struct copied, as the driver copies it */
    if (!ff->bytes) return fprintf(stderr, "fake libcuda: %s has no %s__bytes to capture it\n", ff->name, ff->name), CUDA_ERROR_INVALID_IMAGE;
    void *copy = malloc(ff->bytes);
    if (!copy) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(copy, params[0], ff->bytes);
    return fake_record((fake_node){.kind = FAKE_NODE_HOST_KERNEL, .f = ff, .bytes = copy});
  }
  if (ff->host) { ff->host(params); return CUDA_SUCCESS; }
  void *a[32] = {0};
  for (int i = 0; i < 32 && params && params[i]; i++) a[i] = *(void **)params[i];
  if (fake_open_capture) {
    fake_node node = {.kind = FAKE_NODE_PTR_KERNEL, .f = ff};
    memcpy(node.ptrs, a, sizeof a);
    return fake_record(node);
  }
  return fake_call_ptrs(ff, a);
}

static CUresult fake_call_ptrs(fake_function *ff, void *const *a) {
  fake_ptrs_fn fn;
  memcpy(&fn, &ff->direct, sizeof fn);
  fn(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17],
     a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25], a[26], a[27], a[28], a[29], a[30], a[31]);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  (void)s;
  if (fake_open_capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const fake_graph *g = (const fake_graph *)e;
  if (fake_trace()) fprintf(stderr, "[fake cuda] graph launch: %d nodes\n", g->n);
  for (int i = 0; i < g->n; i++) {
    const fake_node *k = &g->nodes[i];
    void *params[1] = {k->bytes};
    switch (k->kind) {
    case FAKE_NODE_HOST_KERNEL: k->f->host(params); break;
    case FAKE_NODE_PTR_KERNEL: fake_call_ptrs(k->f, k->ptrs); break;
    case FAKE_NODE_COPY: memmove(k->dst, k->src, k->n); break;
    case FAKE_NODE_SET: memset(k->dst, k->v, k->n); break;
    default: k->run(k->bytes); break;
    }
  }
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
