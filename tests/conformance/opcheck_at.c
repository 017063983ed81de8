/* opcheck_at.c — kiln_opcheck_at N MODEL.kiln DIR: the bounded-dims part of the conformance
 * suite (bounded.py) runs one train step of MODEL, whose one bounded dim is at extent N,
 * through the C API: reads DIR/<input>.npy for each train_step input and DIR/w.safetensors,
 * writes DIR/w1.safetensors and prints "loss X". */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "opcheck.h"
#include "runtime.h"

#define OC_MAX_AT 256   /* a bounded model's train_step inputs: many cases in one model */

/* DIR/<name>.npy for train_step input `k`: its dtype, and no axis longer than at the bound (the
 * step reads the extent's rows, which the file must hold: the script writes them). */
static int oc_at_input(kiln_model *m, int k, const char *dir, rt_npy *a) {
  const char *name;
  kiln_dtype dt;
  int rank;
  int64_t dims[KILN_MAX_RANK];
  char path[4096], err[RT_ERR_LEN];
  if (kiln_model_tensor(m, 1, 0, k, &name, &dt, &rank, dims)) return oc_fail("%s", kiln_last_error());
  oc_path(path, sizeof path, dir, name, ".npy");
  if (rt_npy_read(path, a, err, sizeof err)) return oc_fail("%s", err);
  bool fits = a->shape.rank == rank && (a->dtype == K_I32) == (dt == KILN_I32);
  for (int i = 0; fits && i < rank; i++) fits = a->shape.d[i] <= dims[i];
  return fits ? 0 : oc_fail("%s does not fit train_step's input '%s'", path, name);
}

static int oc_at_step(kiln_model *m, int64_t n, const char *dir) {
  int nin, nout, ndims, rc = 0;
  if (kiln_model_count(m, 1, &nin, &nout) || kiln_model_dims(m, &ndims)) return oc_fail("%s", kiln_last_error());
  if (ndims != 1) return oc_fail("a model with one bounded dim, not %d", ndims);
  if (nin > OC_MAX_AT) return oc_fail("more than %d train_step inputs", OC_MAX_AT);
  rt_npy a[OC_MAX_AT] = {0};
  const void *ptrs[OC_MAX_AT];
  for (int k = 0; k < nin && !rc; k++) rc = oc_at_input(m, k, dir, &a[k]), ptrs[k] = a[k].data;
  char path[4096];
  float loss = 0;
  oc_path(path, sizeof path, dir, "w", ".safetensors");
  if (!rc && (kiln_model_load(m, path) || kiln_model_train_step_at(m, &n, ptrs, &loss)))
    rc = oc_fail("%s", kiln_last_error());
  oc_path(path, sizeof path, dir, "w1", ".safetensors");
  if (!rc && kiln_model_save(m, path)) rc = oc_fail("%s", kiln_last_error());
  if (!rc) printf("loss %.9g\n", loss);
  for (int k = 0; k < nin; k++)
    if (a[k].data) rt_npy_free(&a[k]);
  return rc;
}

static int oc_at_main(const char *extent, const char *model, const char *dir) {
  char *end;
  long long n = strtoll(extent, &end, 10);
  if (*end || n < 1) return oc_fail("the extent is at least 1, not '%s'", extent);
  kiln_graph *g = NULL;
  kiln_model *m = NULL;
  int rc = kiln_graph_load(model, NULL, &g) || kiln_graph_jit(g, 0, &m) ? oc_fail("%s", kiln_last_error())
                                                                          : oc_at_step(m, n, dir);
  kiln_model_free(m);
  kiln_graph_free(g);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 4) return oc_at_main(argv[1], argv[2], argv[3]);
  fputs("usage: kiln_opcheck_at N MODEL.kiln DIR\n", stderr);
  return 1;
}
