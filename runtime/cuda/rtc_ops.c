/* rtc_ops.c — the GPU op table, built from rtc_ops.def in kernels/k_ops.def's op order, and
 * the launches every GPU step goes through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rtc_blas.h"
#include "rtc_model.h"
#include "kc_args.h"   /* KC_BLOCK, KC_ERR_* */
#include "rtc_ops_lib.h"

/* Op indices, as ir/ops.h numbers them from the same list. */
#define K_OP(id) RTC_ID_##id,
#define K_UNARY K_OP
#define K_BINARY K_OP
enum {
#include "k_ops.def"
  RTC_NOPS
};
#undef K_OP
#undef K_UNARY
#undef K_BINARY


const char *rtc_data_error_text(int32_t code) {
  switch (code) {
  case KC_ERR_LABEL: return "a label is outside [0, classes) (the GPU does not say which)";
  case KC_ERR_INDEX: return "an index is outside [0, input_dim) (the GPU does not say which)";
  default: return "the kernel refused its data";
  }
}

static rtc_op_row rtc_rows[RTC_NOPS];
static bool rtc_has[RTC_NOPS];

static void rtc_rows_init(void) {
#define RTC_OP(op, lib, data) \
  rtc_rows[RTC_ID_##op] = (rtc_op_row){rtc_##op##_forward, rtc_##op##_backward, NULL, NULL, RTC_LIB_##lib, data}, rtc_has[RTC_ID_##op] = true;
#define RTC_OP_PREP(op, lib, data)                                                                                   \
  rtc_rows[RTC_ID_##op] = (rtc_op_row){rtc_##op##_forward, rtc_##op##_backward, rtc_##op##_prepare, rtc_##op##_release, \
                                       RTC_LIB_##lib, data},                                                           \
  rtc_has[RTC_ID_##op] = true;
#include "rtc_ops.def"
#undef RTC_OP
#undef RTC_OP_PREP
}

static pthread_once_t rtc_rows_once = PTHREAD_ONCE_INIT;

const rtc_op_row *rtc_op_row_of(int op) {
  pthread_once(&rtc_rows_once, rtc_rows_init);
  return op >= 0 && op < RTC_NOPS && rtc_has[op] ? &rtc_rows[op] : NULL;
}

/* ---- launches ---- */

int rtc_function(rtc_ctx *c, CUmodule mod, const char *name, CUfunction *fn) {
  for (int i = 0; i < c->nfns; i++)   /* the two modules' names differ: kiln_fused_*, kc_* */
    if (strcmp(c->fns[i].name, name) == 0) return *fn = c->fns[i].fn, 0;
  CUresult r = c->cu->ModuleGetFunction(fn, mod, name);
  if (r != CUDA_SUCCESS)
    return rtc_fail(c, "the %s has no kernel %s (%s)", mod == c->lib_mod ? "GPU library's module" : "model's GPU module", name,
                    rtc_lib_strerror(c->cu, r));
  if (c->nfns == c->capfns) {
    int cap = c->capfns ? 2 * c->capfns : 32;
    rtc_fn_entry *p = realloc(c->fns, sizeof *p * (size_t)cap);
    if (!p) return rtc_fail(c, "out of memory");
    c->fns = p, c->capfns = cap;
  }
  rtc_fn_entry *e = &c->fns[c->nfns++];
  snprintf(e->name, sizeof e->name, "%s", name);
  e->fn = *fn;
  return 0;
}

/* Blocks of KC_BLOCK threads; kernels loop grid-stride, so the grid is capped at what fills the GPU
 * several times over. */
static void rtc_grid(int64_t threads, unsigned *grid, unsigned *block) {
  int64_t b = KC_BLOCK, g = (threads + b - 1) / b;
  if (g < 1) g = 1;
  if (g > 65536) g = 65536;
  *grid = (unsigned)g, *block = (unsigned)b;
}

int rtc_launch_fn(rtc_ctx *c, CUfunction fn, int64_t threads, void **args, int nargs) {
  void *params[65];
  if (nargs > 64) return rtc_fail(c, "a kernel with %d arguments", nargs);
  for (int i = 0; i < nargs; i++) params[i] = &args[i];
  params[nargs] = NULL;   /* the driver counts by the kernel's signature; the host emulation by this */
  unsigned grid, block;
  rtc_grid(threads, &grid, &block);
  return rtc_cu_check(c, c->cu->LaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, c->stream, params, NULL), "cuLaunchKernel");
}

int rtc_launch(rtc_ctx *c, const char *name, int64_t threads, const void *args, size_t args_size) {
  CUfunction fn;
  if (rtc_function(c, c->lib_mod, name, &fn)) return 1;
  unsigned grid, block;
  rtc_grid(threads, &grid, &block);
  void *params[1] = {(void *)args};
  (void)args_size;                        /* the kernel's one parameter has exactly this size */
  CUresult r = c->cu->LaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, c->stream, params, NULL);
  return r == CUDA_SUCCESS ? 0 : rtc_fail(c, "launching %s: %s", name, rtc_lib_strerror(c->cu, r));
}
