/* emul.h — put before a model's CUDA C (kiln compile --emit cu) to build it for the host as
 * the fake libcuda's module (fake_cuda.c): the CUDA keywords become nothing, every launch is
 * one thread of one block (generated and library kernels are grid-stride, so it covers every
 * element), and NVRTC's built-ins that the code uses get host definitions. */
#ifndef KILN_EMUL_H
#define KILN_EMUL_H

#include <math.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static          /* one thread: the block's shared array is its own */
static inline void __syncthreads(void) {}

struct kiln_emul_dim3 { unsigned x, y, z; };
static const kiln_emul_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
static const kiln_emul_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

struct float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) {
  float4 r = {x, y, z, w};
  return r;
}

static inline float __int_as_float(unsigned int u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#endif
