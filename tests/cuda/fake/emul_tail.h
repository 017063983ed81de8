/* emul_tail.h — put after the GPU op library's kernels (kernels/cuda's .cu files) in their host
 * build (tests/cuda/emulate.sh): NAME__host(void **params) for every library kernel (kc_args.h's KC_KERNELS and kc_blas.cu's), which takes its one struct
 * argument as the driver passes it, a pointer to its bytes, and NAME__bytes, that struct's size
 * (what the driver copies into a captured launch). */
#ifndef KILN_EMUL_TAIL_H
#define KILN_EMUL_TAIL_H

#define KILN_EMUL_TRAMPOLINE(n)                                        \
  extern "C" __attribute__((visibility("default"))) void kc_##n##__host(void **p) { \
    kc_##n##_args a;                                                   \
    memcpy(&a, p[0], sizeof a);                                        \
    kc_##n(a);                                                         \
  }                                                                    \
  extern "C" __attribute__((visibility("default"))) const size_t kc_##n##__bytes = sizeof(kc_##n##_args);
KC_KERNELS(KILN_EMUL_TRAMPOLINE)
KILN_EMUL_TRAMPOLINE(blas_bias_add)
KILN_EMUL_TRAMPOLINE(blas_bias_grad)
KILN_EMUL_TRAMPOLINE(blas_zero)

#endif
