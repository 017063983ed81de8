/* opcheck.c — the C half of the PyTorch conformance suite (conformance.py is the other).
 * It runs one op's registered forward and backward kernels on tensors read from .npy files,
 * exactly as the executor calls them (declared backward dependencies only, the rest NULL),
 * and writes the results back as .npy for the script to compare with torch. A second mode
 * runs the optimizer updates over a sequence of gradients.
 *
 *   kiln_opcheck MODEL.kiln DIR [--train]
 *     MODEL holds one op node. Reads DIR/<tensor>.npy for every input, param and aux tensor;
 *     writes DIR/<outname>.npy for every output (out.npy is the visible one, then hidden ones
 *     such as mask.npy), DIR/<aux>.after.npy for aux states, and, when DIR/out_grad.npy exists,
 *     DIR/grad_<argname>.npy for every float arg (concat's pieces: grad_x0, grad_x1, ...).
 *   kiln_opcheck --optim sgd|adam|adamw DIR
 *     Reads DIR/optim.txt (lines `key value`: lr, momentum, wd, beta1, beta2, eps, steps),
 *     DIR/w.npy and DIR/g1.npy .. g<steps>.npy; writes DIR/w1.npy .. w<steps>.npy.
 *   (The bounded-dims part's train step is kiln_opcheck_at, opcheck_at.c.) */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fe.h"
#include "opcheck.h"
#include "ops.h"
#include "runtime.h"

#define OC_MAX_IO 64
#define OC_SEED 0x5eedULL
#define OC_COUNTER 7

static bool oc_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Buffers are filled with NaN so that an element a kWriteTo kernel forgets shows up. */
static void *oc_alloc(const k_shape *s, k_dtype t) {
  int64_t n = k_shape_numel(s);
  float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  if (!p) abort();
  for (int64_t i = 0; i < n; i++) p[i] = t == K_F32 ? NAN : 0;
  return p;
}

static int oc_write(const char *dir, const char *name, const char *suffix, const k_tensor *t) {
  char path[4096], err[RT_ERR_LEN];
  oc_path(path, sizeof path, dir, name, suffix);
  if (rt_npy_write(path, t->dtype, &t->shape, t->data, err, sizeof err)) return oc_fail("%s", err);
  return 0;
}

/* ---- one op: the graph, its tensors, the forward and backward calls ---- */

typedef struct {
  ir_graph *g;
  const ir_node *node;
  const ir_opdef *op;
  int nargs, naux;
  k_tensor in[OC_MAX_IO], out[OC_MAX_IO];
  void *temp;
  size_t temp_bytes;
  int is_train;
} oc_op;

/* Reads an input, param or aux tensor from DIR/<name>.npy; a constant gets its value. */
static int oc_load(const char *dir, const ir_tensor *t, k_tensor *dst) {
  dst->shape = t->shape, dst->dtype = t->dtype;
  if (t->kind == IR_T_CONST) {
    dst->data = oc_alloc(&t->shape, K_F32);
    for (int64_t i = 0; i < k_shape_numel(&t->shape); i++) ((float *)dst->data)[i] = t->value;
    return 0;
  }
  char path[4096], err[RT_ERR_LEN], want[128], got[128];
  oc_path(path, sizeof path, dir, t->name, ".npy");
  rt_npy a;
  if (rt_npy_read(path, &a, err, sizeof err)) return oc_fail("%s", err);
  ir_type_str(t->dtype, &t->shape, want, sizeof want);
  ir_type_str(a.dtype, &a.shape, got, sizeof got);
  if (strcmp(want, got) != 0) {
    rt_npy_free(&a);
    return oc_fail("%s holds %s, but the model's '%s' is %s", path, got, t->name, want);
  }
  dst->data = oc_alloc(&t->shape, t->dtype);
  memcpy(dst->data, a.data, a.nbytes);
  rt_npy_free(&a);
  return 0;
}

static int oc_lower(const char *path, ir_diag *d, fe_file **f, ir_graph **g) {
  *f = fe_parse_file(path, d);
  if (!*f || d->errors || fe_check_file(*f, NULL, 0, d)) return oc_fail("%s does not parse", path);
  if (!(*f)->models) return oc_fail("%s has no model", path);
  *g = fe_lower_model(*f, (*f)->models, NULL, 0, d);
  if (!*g) return oc_fail("%s does not lower", path);
  if (ir_nnodes(*g) != 1) return oc_fail("%s must hold exactly one op node, not %d", path, ir_nnodes(*g));
  return 0;
}

static int oc_setup(oc_op *o, const char *dir) {
  o->node = ir_node_at(o->g, 0);
  o->op = &ir_ops[o->node->op];
  o->naux = ir_op_naux(o->op);
  o->nargs = o->node->nin - o->naux;
  if (o->node->nin > OC_MAX_IO || o->node->nout > OC_MAX_IO) return oc_fail("too many tensors");
  for (int i = 0; i < o->node->nin; i++)
    if (oc_load(dir, ir_tensor_at(o->g, o->node->in[i]), &o->in[i])) return 1;
  for (int i = 0; i < o->node->nout; i++) {
    const ir_tensor *t = ir_tensor_at(o->g, o->node->out[i]);
    o->out[i] = (k_tensor){oc_alloc(&t->shape, t->dtype), t->shape, t->dtype};
  }
  if (o->op->temp) {            /* the row's size function, as the memory planner calls it */
    k_shape args[OC_MAX_IO];
    for (int i = 0; i < o->nargs; i++) args[i] = o->in[i].shape;
    o->temp_bytes = o->op->temp(args, o->node->param);
  }
  o->temp = o->temp_bytes ? malloc(o->temp_bytes) : NULL;
  return 0;
}

static int oc_run(const oc_op *o, k_fn fn, const k_tensor *in, int nin, k_tensor *out, int nout,
                  const k_req *req, const char *what) {
  char err[512] = "";
  k_call c = {in, nin, out, nout, req, o->node->param, o->temp, o->temp_bytes,
              OC_SEED, OC_COUNTER, o->is_train, err, sizeof err, NULL, NULL, NULL};
  if (fn(&c)) return oc_fail("%s %s: %s", o->op->name, what, err[0] ? err : "the kernel failed");
  return 0;
}

/* Forward, then every output and the aux states as they stand afterwards. */
static int oc_forward(oc_op *o, const char *dir) {
  k_req req[OC_MAX_IO];
  for (int i = 0; i < o->node->nout; i++) req[i] = kWriteTo;
  if (oc_run(o, o->op->forward, o->in, o->node->nin, o->out, o->node->nout, req, "forward")) return 1;
  for (int i = 0; i < o->node->nout; i++)
    if (oc_write(dir, o->op->outs[i], ".npy", &o->out[i])) return 1;
  for (int i = 0; i < o->naux; i++)
    if (oc_write(dir, ir_tensor_at(o->g, o->node->in[o->nargs + i])->name, ".after.npy", &o->in[o->nargs + i]))
      return 1;
  return 0;
}

/* Backward in = [out_grad.., in_data.., out_data..], each NULL unless declared. */
static void oc_bwd_inputs(const oc_op *o, const k_tensor *og, k_tensor *bin) {
  int nout = o->node->nout;
  for (int i = 0; i < nout; i++) {
    bin[i] = o->out[i];
    bin[i].data = i == 0 && (o->op->deps.out_grad & 1) ? og->data : NULL;
    bin[nout + o->nargs + i] = o->out[i];
    if (!(o->op->deps.out_data >> i & 1)) bin[nout + o->nargs + i].data = NULL;
  }
  for (int j = 0; j < o->nargs; j++) {
    bin[nout + j] = o->in[j];
    if (!(o->op->deps.in_data >> j & 1)) bin[nout + j].data = NULL;
  }
}

static const char *oc_arg_name(const oc_op *o, int j, char *buf, size_t n) {
  if (o->op->variadic) snprintf(buf, n, "grad_%s%d", o->op->args[0], j);
  else snprintf(buf, n, "grad_%s", o->op->args[j]);
  return buf;
}

static int oc_backward(oc_op *o, const char *dir, const k_tensor *og) {
  k_tensor bin[3 * OC_MAX_IO], bout[OC_MAX_IO];
  k_req req[OC_MAX_IO];
  oc_bwd_inputs(o, og, bin);
  for (int j = 0; j < o->nargs; j++) {
    bool i32 = !o->op->variadic && (o->op->i32_args >> j & 1);
    req[j] = i32 ? kNullOp : kWriteTo;
    bout[j] = (k_tensor){i32 ? NULL : oc_alloc(&o->in[j].shape, K_F32), o->in[j].shape, K_F32};
  }
  int rc = oc_run(o, o->op->backward, bin, 2 * o->node->nout + o->nargs, bout, o->nargs, req, "backward");
  for (int j = 0; j < o->nargs; j++) {
    char name[128];
    if (!rc && req[j] != kNullOp) rc = oc_write(dir, oc_arg_name(o, j, name, sizeof name), ".npy", &bout[j]);
    free(bout[j].data);
  }
  return rc;
}

/* The out_grad file, if any, checked against the visible output's shape. */
static int oc_out_grad(const oc_op *o, const char *dir, k_tensor *og, bool *have) {
  char path[4096], err[RT_ERR_LEN];
  oc_path(path, sizeof path, dir, "out_grad", ".npy");
  if (!(*have = oc_exists(path))) return 0;
  rt_npy a;
  if (rt_npy_read(path, &a, err, sizeof err)) return oc_fail("%s", err);
  if (a.dtype != K_F32 || !ir_shape_eq(&a.shape, &o->out[0].shape)) {
    char want[128], got[128];
    ir_type_str(K_F32, &o->out[0].shape, want, sizeof want);
    ir_type_str(a.dtype, &a.shape, got, sizeof got);
    rt_npy_free(&a);
    return oc_fail("%s holds %s, but the output is %s", path, got, want);
  }
  *og = (k_tensor){oc_alloc(&a.shape, K_F32), a.shape, K_F32};
  memcpy(og->data, a.data, a.nbytes);
  rt_npy_free(&a);
  return 0;
}

static int oc_op_main(const char *model, const char *dir, int is_train) {
  ir_diag d;
  ir_diag_init(&d, stderr);
  fe_file *f = NULL;
  oc_op o = {.is_train = is_train};
  k_tensor og = {0};
  bool have_og = false;
  int rc = oc_lower(model, &d, &f, &o.g) || oc_setup(&o, dir) || oc_forward(&o, dir)
           || oc_out_grad(&o, dir, &og, &have_og) || (have_og && oc_backward(&o, dir, &og));
  for (int i = 0; o.node && i < o.node->nin; i++) free(o.in[i].data);
  for (int i = 0; o.node && i < o.node->nout; i++) free(o.out[i].data);
  free(og.data);
  free(o.temp);
  ir_graph_free(o.g);
  fe_file_free(f);
  ir_diag_free(&d);
  return rc;
}

/* ---- optimizers ---- */

/* The optimizer's attributes and, with "sched_NAME 1", a schedule's (k_schedule's fields by
 * name; "milestone V" once per milestone) from optim.txt. */
typedef struct { float lr, momentum, wd, beta1, beta2, eps, clip_norm; int nesterov, steps; k_schedule sched; } oc_optim;

static int oc_sched_key(oc_optim *p, const char *key, double v) {
  k_schedule *s = &p->sched;
  if (!strncmp(key, "sched_", 6) && ir_sched_lookup(key + 6) > 0) {   /* first: its defaults, then the keys */
    *s = (k_schedule){.kind = ir_sched_lookup(key + 6)};
    ir_attr_defaults(ir_scheds[s->kind].attrs, s);
  } else if (!strcmp(key, "step_size")) s->step_size = (int64_t)v;
  else if (!strcmp(key, "milestone") && s->milestones.n < K_MAX_RANK) s->milestones.v[s->milestones.n++] = (int64_t)v;
  else if (!strcmp(key, "total")) s->total = (int64_t)v;
  else if (!strcmp(key, "warmup")) s->warmup = (int64_t)v;
  else if (!strcmp(key, "gamma")) s->gamma = (float)v;
  else if (!strcmp(key, "min_lr")) s->min_lr = (float)v;
  else if (!strcmp(key, "pct_start")) s->pct_start = (float)v;
  else if (!strcmp(key, "div_factor")) s->div_factor = (float)v;
  else if (!strcmp(key, "final_div_factor")) s->final_div_factor = (float)v;
  else return 1;
  return 0;
}

static int oc_optim_read(const char *dir, oc_optim *p) {
  char path[4096], key[64];
  double v;
  *p = (oc_optim){.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .steps = 1};
  oc_path(path, sizeof path, dir, "optim", ".txt");
  FILE *fp = fopen(path, "r");
  if (!fp) return oc_fail("cannot open %s", path);
  int rc = 0;
  while (!rc && fscanf(fp, "%63s %lf", key, &v) == 2) {
    if (!strcmp(key, "lr")) p->lr = (float)v;
    else if (!strcmp(key, "momentum")) p->momentum = (float)v;
    else if (!strcmp(key, "wd")) p->wd = (float)v;
    else if (!strcmp(key, "beta1")) p->beta1 = (float)v;
    else if (!strcmp(key, "beta2")) p->beta2 = (float)v;
    else if (!strcmp(key, "eps")) p->eps = (float)v;
    else if (!strcmp(key, "steps")) p->steps = (int)v;
    else if (!strcmp(key, "nesterov")) p->nesterov = (int)v;
    else if (!strcmp(key, "clip_norm")) p->clip_norm = (float)v;
    else if (oc_sched_key(p, key, v)) rc = oc_fail("%s: unknown key '%s'", path, key);
  }
  fclose(fp);
  return rc;
}

static int oc_optim_grad(const char *dir, int step, const rt_npy *w, rt_npy *g) {
  char path[4096], name[32], err[RT_ERR_LEN];
  snprintf(name, sizeof name, "g%d", step);
  oc_path(path, sizeof path, dir, name, ".npy");
  if (rt_npy_read(path, g, err, sizeof err)) return oc_fail("%s", err);
  if (g->dtype != K_F32 || !ir_shape_eq(&g->shape, &w->shape))
    return rt_npy_free(g), oc_fail("%s does not match w.npy's dtype and shape", path);
  return 0;
}

/* Each step at the schedule's lr, as the runtime computes it (k_sched_lr of the steps taken). */
static int oc_optim_steps(const char *dir, k_optim_kind kind, const oc_optim *p, rt_npy *w, float *s1, float *s2) {
  int64_t n = k_shape_numel(&w->shape);
  k_sgd_param sp = {p->momentum, p->wd, p->nesterov};
  k_adam_param ap = {p->beta1, p->beta2, p->eps, p->wd};
  for (int step = 1; step <= p->steps; step++) {
    rt_npy g;
    char name[32];
    float lr = k_sched_lr(&p->sched, p->lr, step - 1);
    if (oc_optim_grad(dir, step, w, &g)) return 1;
    if (p->clip_norm > 0) k_clip_grad_norm((float *[]){g.data}, &n, 1, p->clip_norm);
    if (k_optim_moments(kind)) k_adam_update(w->data, g.data, s1, s2, n, lr, &ap, step, kind == K_OPT_ADAMW);
    else k_sgd_update(w->data, g.data, s1, n, lr, &sp);
    rt_npy_free(&g);
    snprintf(name, sizeof name, "w%d", step);
    k_tensor t = {w->data, w->shape, K_F32};
    if (oc_write(dir, name, ".npy", &t)) return 1;
  }
  return 0;
}

static int oc_optim_main(const char *kind, const char *dir) {
  int k = ir_optim_lookup(kind);
  if (k < 0) return oc_fail("--optim takes sgd, adam or adamw, not '%s'", kind);
  oc_optim p;
  if (oc_optim_read(dir, &p)) return 1;
  char path[4096], err[RT_ERR_LEN];
  oc_path(path, sizeof path, dir, "w", ".npy");
  rt_npy w;
  if (rt_npy_read(path, &w, err, sizeof err)) return oc_fail("%s", err);
  if (w.dtype != K_F32) return rt_npy_free(&w), oc_fail("%s must hold f32", path);
  int64_t n = k_shape_numel(&w.shape);
  float *s1 = calloc((size_t)(n ? n : 1), sizeof(float)), *s2 = calloc((size_t)(n ? n : 1), sizeof(float));
  int rc = oc_optim_steps(dir, (k_optim_kind)k, &p, &w, s1, s2);
  free(s1);
  free(s2);
  rt_npy_free(&w);
  return rc;
}

static int oc_usage(void) {
  fputs("usage: kiln_opcheck MODEL.kiln DIR [--train]\n"
        "       kiln_opcheck --optim sgd|adam|adamw DIR\n", stderr);
  return 1;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--optim") == 0) return oc_optim_main(argv[2], argv[3]);
  if (argc == 3) return oc_op_main(argv[1], argv[2], 0);
  if (argc == 4 && strcmp(argv[3], "--train") == 0) return oc_op_main(argv[1], argv[2], 1);
  return oc_usage();
}
