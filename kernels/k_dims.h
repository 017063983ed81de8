/* k_dims.h — bounded dims (`dim batch = 1..64`, docs/language.md): one compiled model serves
 * every extent of such a dim up to its bound. A model is lowered and planned at the bound; a
 * size that follows the bounded dims (a shape's axis, an attribute, a loop's trip count or
 * stride) is carried as a k_dimval, which every layer that sizes things at run time (the
 * runtime's step shapes, the fused loops) evaluates alike. The IR fits them
 * (ir/ir_dims.c), the code generator emits them, the runtime evaluates them per call. */
#ifndef KILN_K_DIMS_H
#define KILN_K_DIMS_H

#include "k_base.h"

#define K_MAX_BDIMS 8   /* bounded dims a model may declare */

/* a * prod(extent[d] for each bit d of mask) + b; mask 0: the constant b. */
typedef struct {
  uint32_t mask;
  int64_t a, b;
} k_dimval;

static inline int64_t k_dimval_eval(k_dimval v, const int64_t *extent) {
  if (!v.mask) return v.b;
  int64_t p = v.a;
  for (int d = 0; d < K_MAX_BDIMS; d++)
    if (v.mask >> d & 1) p *= extent[d];
  return p + v.b;
}

#endif
