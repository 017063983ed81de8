/* k_conv_direct_avx512.c — the direct convolution's block functions (k_conv_direct_isa.h) for
 * AVX-512, V = 16, each multiply-add contracted into an FMA as k_conv_direct_avx2.c says why. */
#include "k_conv_direct_impl.h"

#ifdef K_CD_X86
/* AVX-512: 32 zmm registers, broadcasts fold into the FMA. 2 x 12 or 24 accumulators. */
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#pragma GCC optimize("fp-contract=fast")
#define K_CD_V 16
#define K_CD_SFX avx512
#define K_CD_NAME "avx512"
#define K_CD_FT 12
#define K_CD_F1 24
#define K_CD_BT 24
#define K_CD_CASES_FT K_SEQ_12
#define K_CD_CASES_F1 K_SEQ_24
#define K_CD_CASES_BT K_SEQ_24
#define K_CD_CASES_V K_SEQ_16
#define K_CD_CASES_HV K_SEQ_8
#include "k_conv_direct_isa.h"   /* undefines its parameters */
#pragma GCC pop_options
#else
typedef int k_conv_direct_avx512_empty;   /* ISO C wants a declaration in every file */
#endif
