/* cg_scalar_bc.c — compiled by clang to LLVM bitcode (not into the library): every function
 * of kernels/k_scalar.h as an external definition under its own name k_sf_*, so that the CPU
 * code generator links and inlines them. Adding a function to k_scalar.h is enough.
 * <math.h> comes first so that only k_scalar.h sees `static inline` defined away. */
#include <math.h>

#define static
#define inline
#include "k_scalar.h"
