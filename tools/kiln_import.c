/* kiln_import.c — the ONNX side of the command line: `kiln import` (an ONNX model as .kiln
 * text, with -D NAME=LO..HI its bounded dim declared and the sizes that follow it written over
 * it, and NAME.safetensors holding its initializers under the Kiln names, both written or
 * neither), and kiln_for_onnx, through which check, passes, compile and run take a .onnx
 * file as they take a .kiln one. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_tools.h"
#include "runtime.h"

const char kiln_import_usage[] =
  "usage: kiln import MODEL.onnx -o NAME.kiln [--map] [--train \"LOSS OPT(...)\"]\n"
  "                   [--trainable PATTERN]... [--freeze PATTERN]... [-D dim=N|dim=LO..HI]...\n"
  "\n"
  "Imports an ONNX model (opsets 9 to 17) and writes it as readable .kiln text (one statement\n"
  "per node, every parameter declared with its shape) and NAME.safetensors beside it, holding\n"
  "the ONNX initializers under their Kiln names: kiln run NAME.kiln --weights NAME.safetensors\n"
  "reproduces the model. ONNX names are made valid .kiln names (characters other than letters,\n"
  "digits and '_' become '_', keywords get a suffix, duplicates _1, _2, ...). Shape arithmetic\n"
  "is folded, so the text has static shapes, or, with -D NAME=LO..HI, shapes over a bounded dim.\n"
  "When the model uses ops Kiln does not support, each is listed with its count and first node\n"
  "names, and nothing is written.\n"
  "\n"
  "  -o NAME.kiln   the text to write (required); the weights go to NAME.safetensors\n"
  "  --map          print each renamed ONNX name and its Kiln name\n"
  "  --train \"LOSS OPT(...)\"  make it trainable: a new i32 input `label`, the loss of the first\n"
  "                 output and label, and `train loss with OPT(...)`, e.g.\n"
  "                 --train \"softmax_cross_entropy sgd(lr=0.01)\" (export in training mode to keep\n"
  "                 BatchNormalization and Dropout); OPT(...) may go on as a train statement\n"
  "                 does: \"softmax_cross_entropy adamw(lr=1e-3) schedule cosine(total=5000,\n"
  "                 warmup=100) clip_norm=1.0 wd_exclude=bias,norm\" (docs/language.md). LOSS\n"
  "                 mse_loss (F.mse_loss, for an output that is not [batch, classes]) adds\n"
  "                 an f32 input `target` of the first output's shape instead of `label`\n"
  "  --trainable PATTERN, --freeze PATTERN\n"
  "                 which initializers train_step trains. By default one is a param (trained)\n"
  "                 when a node reads it as a layer's weight or bias (Conv's W and B, Gemm's B\n"
  "                 and C, BatchNormalization's scale and B, a MatMul's constant operand and\n"
  "                 the Add of its bias) or torch named it *.weight or *.bias; every other\n"
  "                 initializer (a register_buffer), every float Constant and everything folded\n"
  "                 at import is a const: saved with the weights, never trained. Each flag, in\n"
  "                 order, makes the initializers whose ONNX or Kiln name matches the glob\n"
  "                 PATTERN params or consts (--trainable '*' --freeze pe: all but pe); a\n"
  "                 pattern that matches none is an error. BatchNormalization's running\n"
  "                 statistics stay aux states (batch_norm updates them)\n"
  "  -D dim=N       the size of a symbolic input dimension (dim_param), e.g. -D batch=8;\n"
  "                 unbound symbolic dimensions are 1\n"
  "  -D dim=LO..HI  a bounded dim (docs/language.md): the text declares `dim batch = 1..8` and\n"
  "                 writes every size that follows it over it (input x : f32[batch, 3, 32, 32],\n"
  "                 reshape(..., shape=(batch, 512))), so it compiles to the model that the\n"
  "                 .onnx compiles to with the range, e.g. -D batch=1..8. Refused, naming the\n"
  "                 tensor, where a declared shape would need arithmetic (f32[2 * batch])\n"
  "\n"
  "check, passes, compile and run also take MODEL.onnx directly; a .so compiled from it holds\n"
  "the ONNX weights as its initial weights.\n";

int kiln_onnx_flag(kiln_opts *o, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  bool rule = strcmp(a, "--trainable") == 0 || strcmp(a, "--freeze") == 0;
  if (!rule && strcmp(a, "--train") != 0) return 0;
  if (*i + 1 >= argc) return fprintf(stderr, "kiln %s: %s needs a value\n", o->cmd, a), 2;
  if (!rule) return o->train = argv[++*i], 1;
  if (o->nweight_rules == 64) return fprintf(stderr, "kiln %s: at most 64 --trainable and --freeze flags\n", o->cmd), 2;
  o->weight_rules[o->nweight_rules++] = (onnx_weight_rule){argv[++*i], a[2] == 't'};
  return 1;
}

int kiln_import_flag(kiln_opts *o, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  if (strcmp(a, "--map") == 0) return o->map = true, 1;
  if (strcmp(a, "-o") != 0) return 0;
  if (*i + 1 >= argc) return fprintf(stderr, "kiln import: -o needs a file name\n"), 2;
  o->out = argv[++*i];
  return 1;
}

int kiln_for_onnx(const kiln_opts *o, void (*each)(ir_graph *, const kiln_opts *, ir_diag *)) {
  ir_diag d;
  ir_diag_init(&d, stderr);
  onnx_options oo = {.defs = o->defs, .ndefs = o->ndefs, .train = o->train, .rules = o->weight_rules,
                     .nrules = o->nweight_rules};
  ir_graph *g = NULL;
  if (o->model) ir_error(&d, (ir_loc){0}, "--model applies to .kiln files; %s holds one model", o->file);
  else g = onnx_import(o->file, &oo, &d, NULL);
  if (g) each(g, o, &d);
  ir_graph_free(g);
  if (d.errors) fprintf(stderr, "%d error%s\n", d.errors, d.errors == 1 ? "" : "s");
  int rc = d.errors ? 1 : 0;
  ir_diag_free(&d);
  kiln_free_defs((kiln_opts *)o, 0);
  return rc;
}

/* ---- kiln import ---- */

/* The weights: every parameter and aux state that holds data, under its Kiln name. */
static int kiln_import_weights(const ir_graph *g, const char *path, ir_diag *d) {
  rt_st_tensor *ts = calloc((size_t)ir_ntensors(g) + 1, sizeof *ts);
  int n = 0, rc = 0;
  char err[1024];
  void *buf = NULL;
  size_t len = 0;
  if (!ts) return ir_error(d, (ir_loc){0}, "out of memory"), 1;
  for (int i = 0; i < ir_ntensors(g); i++) {
    const ir_tensor *t = ir_tensor_at(g, i);
    if ((t->kind == IR_T_PARAM || t->kind == IR_T_AUX) && t->data)
      ts[n++] = (rt_st_tensor){t->name, t->dtype, t->shape, t->data};
  }
  FILE *f = NULL;
  if (rt_st_serialize(ts, n, NULL, 0, &buf, &len, err, sizeof err)) rc = 1, ir_error(d, (ir_loc){0}, "%s", err);
  else if (!(f = fopen(path, "wb")) || fwrite(buf, 1, len, f) != len) rc = 1;
  if (f && fclose(f)) rc = 1;
  if (rc && f) ir_error(d, (ir_loc){0}, "cannot write '%s'", path);
  free(buf);
  free(ts);
  return rc;
}

/* A bounded dim's name is written as a .kiln name, in its `dim` line and the sizes that
 * follow it: it must be one (a dim_param may be any string), no keyword, and no tensor's,
 * which would hide the dim where an attribute names it. 0, or 1 after saying why not. */
static int kiln_import_dim_name(const ir_graph *g, const char *name, ir_diag *d) {
  bool word = (isalpha((unsigned char)name[0]) || name[0] == '_') && !fe_is_keyword(name);
  for (const char *c = name; word && *c; c++) word = isalnum((unsigned char)*c) || *c == '_';
  const char *why = word ? NULL : "which is not a .kiln name";
  for (int i = 0; !why && i < ir_ntensors(g); i++)
    if (strcmp(ir_tensor_at(g, i)->name, name) == 0) why = "which a tensor of the model is named too";
  if (why) ir_error(d, (ir_loc){0}, "the imported text would declare the bounded dim '%s', %s; import at one size, or compile "
                    "or run the .onnx with the range", name, why);
  return why != NULL;
}

static int kiln_import_text(const ir_graph *g, const kiln_opts *o, const char *weights, const char *path, ir_diag *d) {
  for (int i = 0; i < g->nbdims; i++)
    if (kiln_import_dim_name(g, g->bdims[i].name, d)) return 1;
  FILE *f = fopen(path, "w");
  if (!f) return ir_error(d, (ir_loc){0}, "cannot write '%s'", path), 1;
  fprintf(f, "# Imported from %s by kiln import; its weights are in %s\n", o->file, weights);
  fprintf(f, "# (kiln run %s --weights %s ...).\n", o->out, weights);
  int rc = ir_print_dims(g, f, d) != 0;
  return fclose(f) ? ir_error(d, (ir_loc){0}, "cannot write '%s'", path), 1 : rc;
}

/* NAME.kiln -> NAME.safetensors */
static char *kiln_weights_path(const char *out) {
  size_t n = strlen(out);
  if (n > 5 && strcmp(out + n - 5, ".kiln") == 0) n -= 5;
  char *p = malloc(n + 13);
  if (p) snprintf(p, n + 13, "%.*s.safetensors", (int)n, out);
  return p;
}

static void kiln_print_map(const ir_vec *map) {
  for (int i = 0; i < map->len; i++) {
    const onnx_name_pair *p = &IR_VEC_AT(*map, onnx_name_pair, i);
    printf("%s -> %s\n", p->onnx, p->kiln);
  }
}

static int kiln_import_write(const ir_graph *g, const kiln_opts *o, ir_diag *d) {
  char *wpath = kiln_weights_path(o->out);
  kiln_outs outs = {.n = 0};
  const char *t_tmp = wpath ? kiln_outs_add(&outs, o->out, d) : NULL;
  const char *w_tmp = t_tmp ? kiln_outs_add(&outs, wpath, d) : NULL;
  const char *wbase = wpath && strrchr(wpath, '/') ? strrchr(wpath, '/') + 1 : wpath;
  int rc = !w_tmp || kiln_import_text(g, o, wbase, t_tmp, d) || kiln_import_weights(g, w_tmp, d);
  if (rc) kiln_outs_discard(&outs);
  else rc = kiln_outs_commit(&outs, d);
  if (!rc) fprintf(stderr, "imported %s: %d nodes -> %s, %s\n", o->file, ir_nnodes(g), o->out, wpath);
  free(wpath);
  return rc;
}

int kiln_import_main(int argc, char **argv) {
  kiln_opts o = {.cmd = "import", .print_after = -1};
  int rc = kiln_args(argc, argv, &o);
  if (rc) return rc;
  if (!o.out) return fprintf(stderr, "kiln import: -o NAME.kiln is required\n"), kiln_free_defs(&o, 2);
  ir_diag d;
  ir_diag_init(&d, stderr);
  ir_vec map = {.elem = sizeof(onnx_name_pair)};
  onnx_options oo = {.defs = o.defs, .ndefs = o.ndefs, .train = o.train, .rules = o.weight_rules,
                     .nrules = o.nweight_rules};
  ir_graph *g = onnx_import(o.file, &oo, &d, &map);
  if (g && o.map) kiln_print_map(&map);
  if (g) kiln_import_write(g, &o, &d);
  ir_graph_free(g);
  ir_vec_free(&map);
  if (d.errors) fprintf(stderr, "%d error%s\n", d.errors, d.errors == 1 ? "" : "s");
  rc = d.errors ? 1 : 0;
  ir_diag_free(&d);
  return kiln_free_defs(&o, rc);
}
