/* rtc_lib.c — dlopen of the CUDA driver API (libcuda.so.1, which the driver installs; the
 * toolkit's stub is not looked for). The _v2 entry points are the ones cuda.h's macros name. */
#include "rtc_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static rtc_lib rtc_the_lib;
static char rtc_lib_err[512];
static pthread_once_t rtc_lib_once = PTHREAD_ONCE_INIT;

/* Each field with the symbol it comes from. */
#define RTC_SYMS(X)                                                                             \
  X(Init, "cuInit") X(DriverGetVersion, "cuDriverGetVersion") X(DeviceGetCount, "cuDeviceGetCount") \
  X(DeviceGet, "cuDeviceGet") X(DeviceGetName, "cuDeviceGetName")                                  \
  X(DeviceGetAttribute, "cuDeviceGetAttribute") X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") \
  X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") X(CtxPushCurrent, "cuCtxPushCurrent_v2") \
  X(CtxPopCurrent, "cuCtxPopCurrent_v2") X(StreamCreate, "cuStreamCreate")                         \
  X(StreamDestroy, "cuStreamDestroy_v2") X(StreamSynchronize, "cuStreamSynchronize")              \
  X(ModuleLoadDataEx, "cuModuleLoadDataEx") X(ModuleUnload, "cuModuleUnload")                      \
  X(ModuleGetFunction, "cuModuleGetFunction") X(MemAlloc, "cuMemAlloc_v2") X(MemFree, "cuMemFree_v2") \
  X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2") X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")            \
  X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2") X(MemsetD8Async, "cuMemsetD8Async")                   \
  X(LaunchKernel, "cuLaunchKernel") X(GetErrorString, "cuGetErrorString") X(EventCreate, "cuEventCreate")  \
  X(EventRecord, "cuEventRecord") X(EventSynchronize, "cuEventSynchronize")                         \
  X(EventElapsedTime, "cuEventElapsedTime_v2") X(EventDestroy, "cuEventDestroy_v2")                 \
  X(StreamBeginCapture, "cuStreamBeginCapture_v2") X(StreamEndCapture, "cuStreamEndCapture")        \
  X(GraphInstantiate, "cuGraphInstantiateWithFlags") X(GraphLaunch, "cuGraphLaunch")               \
  X(GraphExecDestroy, "cuGraphExecDestroy") X(GraphDestroy, "cuGraphDestroy")

static void rtc_lib_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(rtc_lib_err, sizeof rtc_lib_err, "no CUDA driver: %s", dlerror());
    return;
  }
  void *p;
#define RTC_LOAD(field, sym)                                                                       \
  if (!(p = dlsym(h, sym))) {                                                                      \
    snprintf(rtc_lib_err, sizeof rtc_lib_err, "the CUDA driver lacks %s (too old?)", sym);         \
    return;                                                                                        \
  }                                                                                                \
  memcpy(&rtc_the_lib.field, &p, sizeof p);
  RTC_SYMS(RTC_LOAD)
#undef RTC_LOAD
  CUresult r = rtc_the_lib.Init(0);
  if (r != CUDA_SUCCESS) snprintf(rtc_lib_err, sizeof rtc_lib_err, "the CUDA driver did not start (cuInit: %s)", rtc_lib_strerror(&rtc_the_lib, r));
}

int rtc_lib_open(const rtc_lib **lib, char *err, size_t n) {
  pthread_once(&rtc_lib_once, rtc_lib_load);
  if (rtc_lib_err[0]) return snprintf(err, n, "%s", rtc_lib_err), 1;
  *lib = &rtc_the_lib;
  return 0;
}

const char *rtc_lib_strerror(const rtc_lib *lib, CUresult r) {
  static __thread char buf[160];
  const char *s = NULL;
  if (!lib->GetErrorString || lib->GetErrorString(r, &s) != CUDA_SUCCESS || !s) s = "unknown error";
  snprintf(buf, sizeof buf, "%s (%d)", s, (int)r);
  return buf;
}
