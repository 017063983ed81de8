/* ir_dims.c — bounded dims: which extents the probe graphs hold, and the fit of a size
 * measured at the bound and in each probe graph to a * prod(dims) + b (kernels/k_dims.h).
 * A size that no such form takes is refused by the caller with the sizes it saw, so a model
 * whose shapes do not follow its dims that simply (a stride-2 convolution over a bounded
 * image side) is told so at compile time instead of running wrong. */
#include <stdio.h>
#include <string.h>

#include "ir.h"

void ir_dims_probe_extents(const ir_graph *g, int p, int64_t *extent) {
  for (int d = 0; d < g->nbdims; d++)
    extent[d] = p == d || p == g->nbdims ? g->bdims[d].probe : g->bdims[d].hi;
}

/* prod(extent[d] for d in mask), or -1 on overflow. */
static int64_t ir_dims_prod(uint32_t mask, const int64_t *extent) {
  int64_t p = 1;
  for (int d = 0; d < K_MAX_BDIMS; d++)
    if (mask >> d & 1 && __builtin_mul_overflow(p, extent[d], &p)) return -1;
  return p;
}

static int ir_dims_check(k_dimval v, const int64_t *extent, int64_t want) {
  int64_t p = ir_dims_prod(v.mask, extent), r;
  return p < 0 || __builtin_mul_overflow(v.a, p, &r) || __builtin_add_overflow(r, v.b, &r) || r != want;
}

int ir_dims_fit(const ir_graph *g, int64_t v0, const int64_t *vp, k_dimval *out) {
  int nd = g->nbdims, np = ir_dims_nprobes(nd);
  int64_t bound[K_MAX_BDIMS], probe[K_MAX_BDIMS];
  ir_dims_probe_extents(g, -1, bound);
  k_dimval v = {0, 0, v0};
  for (int d = 0; d < nd; d++)
    if (vp[d] != v0) v.mask |= 1u << d;
  if (v.mask) {
    /* Solve from the bound and the probe that moves every dim of the mask: probe d for one
     * dim, the all-probe graph for several. */
    int p = __builtin_popcount(v.mask) == 1 ? __builtin_ctz(v.mask) : nd;
    ir_dims_probe_extents(g, p, probe);
    int64_t pb = ir_dims_prod(v.mask, bound), pq = ir_dims_prod(v.mask, probe);
    if (pb < 0 || pq < 0 || pb == pq || (v0 - vp[p]) % (pb - pq)) return 1;
    v.a = (v0 - vp[p]) / (pb - pq);
    v.b = v0 - v.a * pb;
  }
  for (int p = 0; p < np; p++) {   /* every probe must agree with the form */
    ir_dims_probe_extents(g, p, probe);
    if (ir_dims_check(v, probe, vp[p])) return 1;
  }
  *out = v;
  return 0;
}

void ir_dims_str(const ir_graph *g, const int64_t *extent, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int d = 0; d < g->nbdims && k < n; d++) {
    int w = snprintf(buf + k, n - k, "%s%s=%lld", d ? ", " : "", g->bdims[d].name, (long long)extent[d]);
    if (w < 0) break;
    k += (size_t)w;
  }
}
