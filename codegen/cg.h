/* cg.h — code generation: from the compiled predict and train graphs (with their plans) to a
 * model descriptor (runtime/rt_model.h), LLVM IR for each fused group, and then either an
 * in-memory JIT (kiln run FILE.kiln, kiln train, kiln repl) or an object file linked into a
 * self-contained shared object with its C header (kiln compile).
 *   cg_common.c       fused-loop symbol names
 *   cg_desc.c         the descriptor, built in memory; step i of a program is node i of its graph
 *   cg_header.c       NAME.h: the SPEC section 3 ABI for one model
 *   cg_weights.c      the initial weights (an ONNX model's) as an ELF object of their own,
 *                     written straight from the descriptor: they never pass through LLVM
 *   cg_link.c         cc -shared: the objects + the runtime and kernel archives + BLAS, libm, pthreads
 *   cpu/cg_llvm.c     the LLVM module, the target machine (host CPU unless cpu/features say
 *                     otherwise), -O0..-O3 as LLVM's pipelines, .ll and .o output
 *   cpu/cg_fused.c    one function per fused group: a loop nest over the group's output
 *                     index space with broadcast strides, the members' scalar functions
 *                     inlined from kernels/k_scalar.h (compiled to bitcode at build time)
 *   cpu/cg_outline.c  for graphs past CG_LARGE_MEMBERS: heavy scalar calls out of line, with
 *                     vector variants the loop vectorizer calls (VFABI), so LLVM compiles each
 *                     heavy function once per module instead of once per call
 *   cpu/cg_parts.c    the object of a large graph written as several, one thread each
 *   cpu/cg_aot.c      the descriptor as LLVM constants (kernels and the weights object
 *                     referenced by symbol), the NAME_* wrappers and the exported
 *                     `kiln_model` (rt_model_api)
 *   cpu/cg_jit.c      ORC LLJIT: compiles the module in memory and stores each fused
 *                     function's address into the descriptor
 *   cpu/cg_build.c    the pipeline: passes, descriptor, module, JIT or objects and link
 *                     (the C API and kiln compile use it)
 *   cg_fexpr.c        the fused expression of a group, free of LLVM: cpu/cg_fused.c lowers it
 *                     to LLVM IR, cuda/cg_cuda.c prints it as CUDA C
 *   cuda/             the CUDA back end (cg_cuda.h): CUDA C, NVRTC, the descriptor retargeted */
#ifndef KILN_CG_H
#define KILN_CG_H

#include "passes.h"
#include "rt_model.h"
#include "runtime.h"   /* rt_errf: errors are reported with the runtime's helper */

typedef struct {
  int opt_level;               /* 0..3: LLVM's default<O0..O3> pipelines */
  const char *cpu;             /* NULL: the host CPU */
  const char *features;        /* NULL: the host's features */
  int target;                  /* RT_TARGET_CPU (0) or RT_TARGET_CUDA (codegen/cuda/) */
  const char *gpu_arch;        /* CUDA: the PTX's architecture, NULL for sm_80 */
  bool gpu_source_only;        /* CUDA: the CUDA C only (kiln compile --emit cu), no NVRTC */
  int large;                   /* CPU: the large-graph mode, 0 for graphs of more than
                                  CG_LARGE_MEMBERS fused members, 1 always, -1 never */
  int jobs;                    /* CPU, a .so: threads writing its code (cpu/cg_parts.c), at
                                  most one per fused group and CG_MAX_JOBS; 0: the usable
                                  cores for a large graph, else 1 */
} cg_options;

/* Fused members past which the CPU back end compiles for a large graph: heavy scalar
 * functions (tanh, exp, ...) called out of line instead of inlined into every loop
 * (cpu/cg_outline.c), and at -O2/-O3 a lean pipeline instead of LLVM's default one
 * (cg_optimize). LLVM's time follows the inlined code and the passes that walk it. */
#define CG_LARGE_MEMBERS 4096
#define CG_MAX_JOBS 16

/* The optional passes a target does without: the CUDA back end runs neither the CPU's
 * epilogues (its GEMMs and convolutions are library calls) nor its channel-blocked layout. */
uint32_t cg_target_disabled(int target);

/* ---- cg_desc.c ---- */
/* The descriptor of a model: the tensors of the train graph when there is one (the predict
 * graph's tensors are a prefix of it: both start as copies of the lowered graph) that the
 * runtime binds, renumbered (rt_tensor_info.ctr keeps each one's graph index), and one
 * program per entry point, step i = node i. The descriptor owns copies of every name,
 * param struct and array; the initial weights (rt_tensor_info.data = ir_tensor.data) it
 * borrows from the lowered graph's arena, which must outlive it. Fused steps have fused ==
 * NULL until cg_jit fills them. NULL with a message in err on failure. */
rt_model_desc *cg_desc_build(const ir_graph *predict, const ir_graph *train, char *err, size_t n);
void cg_desc_free(rt_model_desc *d);
/* n zeroed bytes the descriptor owns (freed with it); NULL without memory. */
void *cg_desc_alloc(rt_model_desc *d, size_t n);

/* ---- cg_dims.c: bounded dims (kernels/k_dims.h) ----
 * The lowered graph's probe graphs (ir_graph.probes) compiled by the same passes. A size of
 * the compiled model that differs between the bound and the probes follows the dims: it is
 * fitted (ir_dims_fit) and the descriptor lists it as a patch, which the runtime evaluates
 * at each call's extents; a fused loop's trip counts and strides the same way (cg_fexpr). */
typedef struct cg_probes {
  const ir_graph *lowered;     /* the bound's: its bdims name the dims; NULL without any */
  int n;                       /* ir_dims_nprobes(lowered->nbdims) */
  ir_graph *predict[K_MAX_BDIMS + 1], *train[K_MAX_BDIMS + 1];
  rt_model_desc *desc[K_MAX_BDIMS + 1];
} cg_probes;
/* The probes' passes (errors reported to d, with the extents named); 0 or 1. */
int cg_probes_compile(cg_probes *pr, const ir_graph *lowered, uint32_t disabled, ir_diag *d);
void cg_probes_free(cg_probes *pr);
/* The dims, patches and dims_used of d from the probes' descriptors (built here), after
 * checking that every probe compiled to the same program with other sizes, and that every
 * step's workspace at every extent fits the one planned at the bound. 0, or 1 with a message. */
int cg_desc_dims(rt_model_desc *d, cg_probes *pr, char *err, size_t n);
/* ---- cg_common.c ---- */
/* "kiln_fused_p<step>" or "kiln_fused_t<step>": the symbol of a fused step's loop. */
void cg_fused_name(char *buf, size_t n, bool train, int step);

/* ---- cg_header.c ---- */
/* NAME.h for the model: the opaque type, create/destroy/load/save/predict/train_step/
 * set_lr/error, and a NAME_<TENSOR>_SIZE constant per input and output. */
int cg_write_header(const rt_model_desc *d, FILE *out);

/* ---- cg_weights.c ---- */
/* The weights object defines one hidden symbol, CG_WEIGHTS_SYMBOL: the data of every tensor
 * whose rt_tensor_info.data is set, in tensor order, each at a multiple of CG_WEIGHTS_ALIGN
 * bytes (the section is that aligned too, so each tensor's data is in the loaded .so). */
#define CG_WEIGHTS_SYMBOL "kiln_weights"
#define CG_WEIGHTS_ALIGN 64
/* The blob's size in bytes (0: the model has no initial data); offset, when not NULL, gets
 * d->ntensors entries: where tensor i's data starts, or -1. */
int64_t cg_weights_layout(const rt_model_desc *d, int64_t *offset);
/* Writes the weights object to path, for the same machine as model_obj (the model's object,
 * whose ELF header it copies). 0, or 1 with a message. */
int cg_write_weights(const rt_model_desc *d, const char *model_obj, const char *path, char *err, size_t n);

/* ---- cg_link.c ---- */
/* Links obj (and weights, the weights object, unless NULL) into a shared object at so_path
 * with the runtime and kernel archives, so its only dynamic dependencies are libc, libm,
 * pthreads and the BLAS; exports only the model's NAME_* functions and kiln_model. The
 * archives are taken from lib_dir (libkiln_runtime.a, libkiln_kernels.a) when $KILN_LIB_DIR
 * is unset; lib_dir NULL: the build tree's. 0, or nonzero with a message. */
int cg_link_shared(const char *obj, const char *weights, const char *so_path, const char *lib_dir, char *err, size_t n);
/* The same for a model of `target` and its code in several objects (objs, NULL-terminated: a
 * module written in parts, cpu/cg_parts.c): RT_TARGET_CUDA adds the CUDA runtime's archive
 * (libkiln_runtime_cuda.a) and libdl (the CUDA libraries are opened at create). */
int cg_link_shared_parts(const char *const *objs, const char *weights, const char *so_path, const char *lib_dir, int target,
                         char *err, size_t n);
/* obj and weights as one relocatable object at out (cc -r), for --emit obj. */
int cg_link_relocatable(const char *obj, const char *weights, const char *out, char *err, size_t n);

/* ---- cpu/ ---- */
typedef struct cg_llvm cg_llvm;
cg_llvm *cg_llvm_new(const char *module_name, const cg_options *o, char *err, size_t n);
void cg_llvm_free(cg_llvm *m);                      /* also releases JIT'd code */
/* A symbol per fused node of each graph, named by cg_fused_name: one function per distinct
 * fused expression, and for a group equal to an earlier one (a repeated block) an alias of
 * that function, so repeats cost no compile time. */
int cg_emit_fused_all(cg_llvm *m, const ir_graph *predict, const ir_graph *train, char *err, size_t n);
/* AOT: the descriptor as constants, the NAME_* wrappers, the exported kiln_model. */
int cg_emit_aot(cg_llvm *m, const rt_model_desc *d, char *err, size_t n);
int cg_optimize(cg_llvm *m, char *err, size_t n);   /* the pipeline of o->opt_level */
int cg_write_ir(cg_llvm *m, const char *path, char *err, size_t n);
int cg_write_object(cg_llvm *m, const char *path, char *err, size_t n);
/* JIT: compiles the module in memory and fills d's fused pointers; the code lives until
 * cg_llvm_free. */
int cg_jit(cg_llvm *m, rt_model_desc *d, char *err, size_t n);

/* ---- cpu/cg_build.c: the pipeline the tools and the C API share ---- */
typedef struct {
  ir_graph *predict, *train;   /* compiled by the passes, with their plans */
  cg_probes probes;            /* bounded dims: the probe graphs compiled alike */
  rt_model_desc *desc;
  cg_llvm *llvm;
  char *gpu_src, *gpu_ptx;     /* CUDA: the program's CUDA C and its PTX (desc->gpu_module) */
} cg_build;
/* The passes for predict, and for train when lowered trains, less the optional passes whose
 * bit (1 << PASS_x) is set in disabled (kiln compile --disable); errors reported to d. */
int cg_build_graphs(const ir_graph *lowered, uint32_t disabled, ir_diag *d, cg_build *b);
/* From b's compiled graphs: the descriptor and (unless o is NULL: a header needs no code)
 * the module with the fused loops; for o->target CUDA, the GPU program (NVRTC) and a module
 * that holds only the descriptor and the wrappers. */
int cg_build_module(cg_build *b, const cg_options *o, char *err, size_t n);
int cg_build_jit(cg_build *b, char *err, size_t n);    /* cg_optimize, then cg_jit */
/* After cg_emit_aot and cg_optimize: the module's object and the weights object (when the
 * model has initial weights) written to temporary files in $TMPDIR and linked into so_path
 * (cg_link_shared, lib_dir as there); the temporary files are removed. 0, or 1 with a message. */
int cg_build_link(cg_build *b, const char *so_path, const char *lib_dir, char *err, size_t n);
/* The same as one relocatable object at path (--emit obj): the module's object alone when
 * the model has no initial weights, else both objects merged by cg_link_relocatable. */
int cg_build_object(cg_build *b, const char *path, char *err, size_t n);
void cg_build_free(cg_build *b);                       /* everything b holds */

#endif
