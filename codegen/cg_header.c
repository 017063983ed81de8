/* cg_header.c — NAME.h, the C header of a generated shared object (SPEC section 3): the
 * opaque model type, one prototype per NAME_* entry point with its inputs typed by dtype,
 * and a NAME_<TENSOR>_SIZE element count for every input and output. C99 and C++ clean. */
#include <ctype.h>
#include <string.h>

#include "cg.h"

/* Words a tensor name may spell that cannot be a C or C++ parameter name, and the
 * parameter names the prototypes use themselves. */
static const char *const cg_reserved[] = {
  "m", "loss", "path", "seed", "lr", "auto", "bool", "break", "case", "catch", "char", "class",
  "const", "continue", "default", "delete", "do", "double", "else", "enum", "explicit", "export",
  "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable",
  "namespace", "new", "operator", "private", "protected", "public", "register", "restrict",
  "return", "short", "signed", "sizeof", "static", "struct", "switch", "template", "this",
  "throw", "true", "try", "typedef", "typename", "union", "unsigned", "using", "virtual", "void",
  "volatile", "while", "and", "or", "not", "xor", "asm", "NULL", NULL};

static bool cg_is_reserved(const char *s) {
  for (int i = 0; cg_reserved[i]; i++)
    if (strcmp(cg_reserved[i], s) == 0) return true;
  return false;
}

/* A C identifier for a tensor: non-identifier characters become '_', a leading digit gets a
 * '_' in front, and reserved words a '_' behind. */
static void cg_ident(char *buf, size_t n, const char *name, bool upper) {
  size_t j = 0;
  if (isdigit((unsigned char)name[0]) && j + 1 < n) buf[j++] = '_';
  for (const char *p = name; *p && j + 1 < n; p++) {
    char c = isalnum((unsigned char)*p) ? *p : '_';
    buf[j++] = upper ? (char)toupper((unsigned char)c) : c;
  }
  buf[j] = 0;
  if (!upper && cg_is_reserved(buf) && j + 1 < n) buf[j] = '_', buf[j + 1] = 0;
}

static const char *cg_ctype(int32_t dtype) { return dtype == K_I32 ? "int32_t" : "float"; }

static void cg_shape_comment(const rt_model_desc *d, int t, FILE *out) {
  char type[512];
  rt_tensor_type_text(d, t, type, sizeof type);
  fputs(type, out);
}

/* ", int64_t batch" for each bounded dim the entry point takes (rt_program.dims_used). */
static void cg_dim_params(const rt_model_desc *d, const rt_program *p, FILE *out) {
  char id[256];
  for (int k = 0; k < d->ndims; k++) {
    if (!(p->dims_used >> k & 1)) continue;
    cg_ident(id, sizeof id, d->dims[k].name, false);
    fprintf(out, ", int64_t %s", id);
  }
}

/* ", const float *data, const int32_t *label" for a program's inputs. */
static void cg_input_params(const rt_model_desc *d, const rt_program *p, FILE *out) {
  char id[256];
  for (int i = 0; i < p->ninputs; i++) {
    const rt_tensor_info *t = &d->tensors[p->inputs[i]];
    cg_ident(id, sizeof id, t->name, false);
    fprintf(out, ", const %s *%s", cg_ctype(t->dtype), id);
  }
}

static void cg_output_params(const rt_model_desc *d, const rt_program *p, FILE *out) {
  char id[256];
  for (int i = 0; i < p->noutputs; i++) {
    const rt_tensor_info *t = &d->tensors[p->outputs[i]];
    cg_ident(id, sizeof id, t->name, false);
    fprintf(out, ", %s *%s", cg_ctype(t->dtype), id);
  }
}

/* One line of documentation per tensor an entry point takes or returns. */
static void cg_doc_tensors(const rt_model_desc *d, const rt_program *p, bool outputs, FILE *out) {
  int n = outputs ? p->noutputs : p->ninputs;
  for (int i = 0; i < n; i++) {
    int t = outputs ? p->outputs[i] : p->inputs[i];
    fprintf(out, " *   %s %s: ", outputs ? "out" : "in ", d->tensors[t].name);
    cg_shape_comment(d, t, out);
    fputc('\n', out);
  }
}

/* A CUDA model's entry points on device pointers: cudaStream_t is `struct CUstream_st *`, so
 * the header needs no CUDA header. */
static void cg_header_device(const rt_model_desc *d, FILE *out) {
  const char *N = d->name;
  fprintf(out, "/* The same on device pointers (buffers in GPU memory): the model waits for the work queued on\n"
               " * `stream` before it reads the inputs, and its outputs are complete when the call returns. */\n");
  fprintf(out, "int %s_predict_device(%s *m", N, N);
  cg_dim_params(d, &d->predict, out);
  cg_input_params(d, &d->predict, out);
  cg_output_params(d, &d->predict, out);
  fprintf(out, ", struct CUstream_st *stream);\n");
  if (d->has_train) {
    fprintf(out, "int %s_train_step_device(%s *m", N, N);
    cg_dim_params(d, &d->train, out);
    cg_input_params(d, &d->train, out);
    fprintf(out, ", float *loss, struct CUstream_st *stream);   /* loss: a host pointer */\n");
  }
}

/* Where create's weights come from: the values compiled in (a model from ONNX embeds its
 * file's), the declared initializers (seeded), or both. */
static const char *cg_header_weights(const rt_model_desc *d) {
  int embedded = 0, drawn = 0;
  for (int i = 0; i < d->ntensors; i++) {
    const rt_tensor_info *t = &d->tensors[i];
    if (t->role != RT_ROLE_PARAM && t->role != RT_ROLE_AUX) continue;
    if (t->data) embedded++;
    else drawn++;
  }
  return embedded && drawn ? "weights compiled in (the ONNX file's) or from the declared initializers"
         : embedded        ? "weights compiled in (the ONNX file's)"
                           : "weights from the declared initializers";
}

static void cg_header_prototypes(const rt_model_desc *d, FILE *out) {
  const char *N = d->name;
  fprintf(out, "typedef struct %s %s;   /* weights, optimizer state, the planned arena */\n\n", N, N);
  if (d->target == RT_TARGET_CUDA)
    fprintf(out, "%s *%s_create(uint64_t seed);   /* on GPU 0, %s; NULL on failure (no driver, no GPU, no memory): %s_error(NULL) says why */\n", N, N, cg_header_weights(d), N);
  else fprintf(out, "%s *%s_create(uint64_t seed);   /* %s; NULL without memory */\n", N, N, cg_header_weights(d));
  fprintf(out, "void %s_destroy(%s *m);\n", N, N);
  fprintf(out, "int %s_load(%s *m, const char *path);   /* safetensors; 0 on success */\n", N, N);
  fprintf(out, "int %s_save(const %s *m, const char *path);\n", N, N);
  fprintf(out, "/* everything a train step reads (weights, optimizer state, step, schedule, seed): resuming\n"
               "   from it gives the bits of never stopping */\n");
  fprintf(out, "int %s_save_state(const %s *m, const char *path);\n", N, N);
  fprintf(out, "int %s_load_state(%s *m, const char *path);\n", N, N);
  fprintf(out, "/* data-parallel training: train_step as one rank of c's (kiln_comm.h; libkiln_mpi fills one\n"
               "   from an MPI communicator); rank 0's weights become every rank's; NULL: alone again */\n");
  fprintf(out, "struct kiln_comm;\nint %s_set_comm(%s *m, const struct kiln_comm *c);\n\n", N, N);
  if (d->ndims) {
    fprintf(out, "/* Bounded dims: predict and train_step take the extent of each one their tensors follow,\n"
                 " * right after the model, and run on buffers of that many rows (an extent outside the\n"
                 " * bounds is refused). The SIZE constants below are the element counts at the bounds.\n");
    for (int k = 0; k < d->ndims; k++)
      fprintf(out, " *   %s = %lld..%lld\n", d->dims[k].name, (long long)d->dims[k].lo, (long long)d->dims[k].hi);
    fprintf(out, " */\n");
  }
  fprintf(out, "/* predict\n");
  cg_doc_tensors(d, &d->predict, false, out);
  cg_doc_tensors(d, &d->predict, true, out);
  fprintf(out, " */\nint %s_predict(%s *m", N, N);
  cg_dim_params(d, &d->predict, out);
  cg_input_params(d, &d->predict, out);
  cg_output_params(d, &d->predict, out);
  fprintf(out, ");\n");
  if (d->has_train) {
    fprintf(out, "/* train_step: one optimizer step; the loss before the update into *loss\n");
    cg_doc_tensors(d, &d->train, false, out);
    fprintf(out, " */\nint %s_train_step(%s *m", N, N);
    cg_dim_params(d, &d->train, out);
    cg_input_params(d, &d->train, out);
    fprintf(out, ", float *loss);\n");
  }
  if (d->target == RT_TARGET_CUDA) cg_header_device(d, out);
  fprintf(out, "/* set_lr: the base learning rate (a schedule restarts from it); lr: the next train step's */\n");
  fprintf(out, "int %s_set_lr(%s *m, float lr);\n", N, N);
  fprintf(out, "float %s_lr(const %s *m);\n", N, N);
  fprintf(out, "const char *%s_error(const %s *m);   /* message for the last nonzero return */\n\n", N, N);
}

/* Has an earlier input or output of the descriptor the same SIZE constant name? */
static bool cg_size_seen(const rt_model_desc *d, const int *list, int k, const char *id) {
  char other[256];
  for (int i = 0; i < k; i++) {
    cg_ident(other, sizeof other, d->tensors[list[i]].name, true);
    if (strcmp(other, id) == 0) return true;
  }
  return false;
}

/* Every INPUT tensor (predict's or train's) and every predict output, in tensor order. */
static int cg_sized_tensors(const rt_model_desc *d, int *list, int max) {
  int k = 0;
  for (int t = 0; t < d->ntensors && k < max; t++) {
    bool is_out = false;
    for (int i = 0; i < d->predict.noutputs; i++) is_out |= d->predict.outputs[i] == t;
    if (d->tensors[t].role == RT_ROLE_INPUT || is_out) list[k++] = t;
  }
  return k;
}

static int cg_header_sizes(const rt_model_desc *d, FILE *out) {
  int list[256], n = cg_sized_tensors(d, list, 256);
  char id[256];
  if (n == 0) return 0;
  fprintf(out, "enum {\n");
  for (int i = 0, first = 1; i < n; i++) {
    cg_ident(id, sizeof id, d->tensors[list[i]].name, true);
    if (cg_size_seen(d, list, i, id)) continue;
    fprintf(out, "%s  %s_%s_SIZE = %lld", first ? "" : ",\n", d->name, id,
            (long long)k_shape_numel(&d->tensors[list[i]].shape));
    first = 0;
  }
  fprintf(out, "\n};\n\n");
  return 0;
}

int cg_write_header(const rt_model_desc *d, FILE *out) {
  char guard[256];
  cg_ident(guard, sizeof guard, d->name, true);
  fprintf(out, "/* %s.h — generated by kiln compile from model '%s'; do not edit.\n", d->name, d->name);
  fprintf(out, " * Every entry point returns 0 on success and nonzero on failure (see %s_error).\n", d->name);
  fprintf(out, " * Buffers are dense, row-major, of the declared dtype, owned by the caller. */\n");
  fprintf(out, "#ifndef KILN_MODEL_%s_H\n#define KILN_MODEL_%s_H\n\n#include <stdint.h>\n\n", guard, guard);
  fprintf(out, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  cg_header_prototypes(d, out);
  cg_header_sizes(d, out);
  fprintf(out, "#ifdef __cplusplus\n}\n#endif\n\n#endif\n");
  return ferror(out) ? 1 : 0;
}
