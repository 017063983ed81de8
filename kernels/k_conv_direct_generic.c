/* k_conv_direct_generic.c — the direct convolution's portable block functions
 * (k_conv_direct_isa.h) at V = 8 and V = 16, for CPUs without AVX2 + FMA (or
 * KILN_CONV=direct-generic). */
#include "k_conv_direct_impl.h"

#if K_CD_GNU
/* Portable: V = 8 in SSE registers (two per vector), small tiles to limit spilling. */
#define K_CD_V 8
#define K_CD_SFX generic
#define K_CD_NAME "generic"
#define K_CD_FT 2
#define K_CD_F1 4
#define K_CD_BT 4
#define K_CD_CASES_FT K_SEQ_2
#define K_CD_CASES_F1 K_SEQ_4
#define K_CD_CASES_BT K_SEQ_4
#define K_CD_CASES_V K_SEQ_8
#define K_CD_CASES_HV K_SEQ_4
#include "k_conv_direct_isa.h"   /* undefines its parameters */

/* Portable V = 16: what a layer compiled blocked at V = 16 (pass_layout.c, on an AVX-512
 * machine) runs on a CPU without AVX-512, so such a model still runs (slowly) anywhere. */
#define K_CD_V 16
#define K_CD_SFX generic16
#define K_CD_NAME "generic16"
#define K_CD_FT 2
#define K_CD_F1 4
#define K_CD_BT 4
#define K_CD_CASES_FT K_SEQ_2
#define K_CD_CASES_F1 K_SEQ_4
#define K_CD_CASES_BT K_SEQ_4
#define K_CD_CASES_V K_SEQ_16
#define K_CD_CASES_HV K_SEQ_8
#include "k_conv_direct_isa.h"   /* undefines its parameters */
#else
typedef int k_conv_direct_generic_empty;   /* ISO C wants a declaration in every file */
#endif
