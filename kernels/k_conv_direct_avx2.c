/* k_conv_direct_avx2.c — the direct convolution's block functions (k_conv_direct_isa.h) for
 * AVX2 + FMA, V = 8.
 *
 * The x86 widths contract each multiply-add into one FMA (the library is otherwise built with
 * -ffp-contract=off, for k_scalar.h's bits): it halves the instructions of the inner loops
 * (+5-15% on the ResNet layers) and rounds once instead of twice, as OpenBLAS's GEMM on the
 * im2col path does. The sums keep their order, so results still do not depend on the thread
 * count; they differ from the portable build's in the last bits, as the vector width's
 * channel blocking already made them. */
#include "k_conv_direct_impl.h"

#ifdef K_CD_X86
/* AVX2 + FMA: 16 ymm registers; a broadcast needs its own register. 2 x 6 or 12 accumulators. */
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=fast")
#define K_CD_V 8
#define K_CD_SFX avx2
#define K_CD_NAME "avx2"
#define K_CD_FT 6
#define K_CD_F1 12
#define K_CD_BT 12
#define K_CD_CASES_FT K_SEQ_6
#define K_CD_CASES_F1 K_SEQ_12
#define K_CD_CASES_BT K_SEQ_12
#define K_CD_CASES_V K_SEQ_8
#define K_CD_CASES_HV K_SEQ_4
#include "k_conv_direct_isa.h"   /* undefines its parameters */
#pragma GCC pop_options
#else
typedef int k_conv_direct_avx2_empty;   /* ISO C wants a declaration in every file */
#endif
