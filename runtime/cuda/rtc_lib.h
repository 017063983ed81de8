/* rtc_lib.h — the CUDA driver API, opened with dlopen (rtc_lib.c): the functions the runtime
 * calls, as pointers with the real header's types. Nothing links libcuda, so a CUDA .so loads
 * on any machine and a missing driver is an error at create. */
#ifndef KILN_RTC_LIB_H
#define KILN_RTC_LIB_H

#include <cuda.h>
#include <stddef.h>

typedef struct rtc_lib {
  CUresult (*Init)(unsigned int);
  CUresult (*DriverGetVersion)(int *);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*StreamCreate)(CUstream *, unsigned int);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void **, void **);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*EventCreate)(CUevent *, unsigned int);   /* KILN_CUDA_PROFILE's step timing */
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);   /* rtc_graph.c */
  CUresult (*StreamEndCapture)(CUstream, CUgraph *);
  CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*GraphDestroy)(CUgraph);
} rtc_lib;

/* The driver's table, opened once per process: 0, or 1 with the reason in err ("no CUDA
 * driver: ..."). Thread-safe. */
int rtc_lib_open(const rtc_lib **lib, char *err, size_t n);
/* "CUDA_ERROR_xxx: text" for a result, or the number when the driver has no string for it. */
const char *rtc_lib_strerror(const rtc_lib *lib, CUresult r);

#endif
