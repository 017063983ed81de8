/* cg_cpu.h — private to codegen/cpu/: the LLVM handles behind cg.h's opaque cg_llvm, shared
 * by cg_llvm.c (module, target machine, pipelines, output), cg_fused.c (fused loops),
 * cg_aot.c (descriptor constants, wrappers) and cg_jit.c (ORC LLJIT). */
#ifndef KILN_CG_CPU_H
#define KILN_CG_CPU_H

#include <llvm-c/Core.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "cg.h"

struct cg_llvm {
  LLVMOrcThreadSafeContextRef tsctx;  /* owns ctx; the JIT shares it */
  LLVMContextRef ctx;
  LLVMModuleRef mod;                  /* NULL once cg_jit has handed it to the JIT */
  LLVMBuilderRef b;
  LLVMTargetMachineRef tm;            /* host (or o->cpu/features), PIC: objects go into .so */
  LLVMTargetDataRef td;               /* tm's data layout, set on mod */
  char *triple;                       /* LLVMGetDefaultTargetTriple, LLVMDisposeMessage'd */
  char *cpu, *features;               /* what tm was built for, LLVMDisposeMessage'd */
  cg_options opt;
  bool scalars_linked;                /* k_scalar.h's bitcode is in mod */
  LLVMValueRef access_group;          /* cg_access_group's node, once made */
  bool large;                         /* the large-graph mode (cg.h): heavy calls out of line
                                         (cg_outline.c) and the lean pipeline, per module */
  bool outline_kept;                  /* their vector variants listed in @llvm.compiler.used */
  LLVMOrcLLJITRef jit;                /* set by cg_jit, disposed by cg_llvm_free */
  const cg_probes *probes;            /* bounded dims: the fused loops' sizes are fitted from
                                         the probes' groups (cg_fexpr_dims); NULL without */
};

/* ---- cg_llvm.c (rt_errf is in cg.h) ---- */
/* Links kernels/k_scalar.h's bitcode into m->mod once (the wrappers k_sf_<name> with their
 * real names, external until cg_scalars_finish). 0, or 1 with a message. */
int cg_link_scalars(cg_llvm *m, char *err, size_t n);
/* The linked scalar function `k_sf_<stem><suffix>`, or NULL. suffix: "", "_grad", "_grad_a"... */
LLVMValueRef cg_scalar_fn(cg_llvm *m, const char *stem, const char *suffix);
/* The distinct, empty metadata node that marks the fused loops' loads and stores as one
 * access group (llvm.access.group), made once per module; NULL with a message if it cannot be. */
LLVMValueRef cg_access_group(cg_llvm *m, char *err, size_t n);
/* Puts a load or store into the module's access group (made first by cg_access_group). */
void cg_access_join(cg_llvm *m, LLVMValueRef mem);
/* Gives the loop whose back-edge branch is br its loop ID: a distinct node whose first
 * operand is itself, then the properties. */
void cg_loop_set(cg_llvm *m, LLVMValueRef br, LLVMMetadataRef *props, int n);
/* Loop properties: {name, v} (v NULL: the name alone); {name, an int of `bits` bits}; and
 * llvm.loop.parallel_accesses over the module's access group. */
LLVMMetadataRef cg_loop_prop(cg_llvm *m, const char *name, LLVMMetadataRef v);
LLVMMetadataRef cg_loop_int(cg_llvm *m, const char *name, unsigned bits, unsigned v);
LLVMMetadataRef cg_loop_parallel(cg_llvm *m);
/* Adds the enum attribute `name` (nounwind, noinline...) to function f. */
void cg_fn_attr(cg_llvm *m, LLVMValueRef f, const char *name);
/* The target cpu and features of m on a function it defines. */
void cg_fn_target(cg_llvm *m, LLVMValueRef f);
/* Gives every linked scalar function internal linkage and alwaysinline, so that the pipeline
 * inlines them and drops the bodies; called by cg_optimize, cg_write_* and cg_jit. */
void cg_scalars_finish(cg_llvm *m);
/* float and i8* (opaque enough for LLVM 14's typed pointers) in m's context. */
LLVMTypeRef cg_f32(cg_llvm *m);
LLVMTypeRef cg_i64(cg_llvm *m);
LLVMTypeRef cg_ptr(cg_llvm *m, LLVMTypeRef elem);
/* Runs the new pass manager's pipeline text on mod (vectorize: the default pipelines' loop and
 * SLP vectorizers on); 0, or 1 with a message naming the pipeline. */
int cg_run_passes(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *pipe, bool vectorize, char *err, size_t n);
/* A new target machine for m's cpu/features that the caller owns (the JIT takes one). */
LLVMTargetMachineRef cg_make_tm(cg_llvm *m, LLVMRelocMode reloc, LLVMCodeModel cm);

/* ---- cg_fused.c (cg_emit_fused_all is in cg.h) ---- */
/* A fused step's loop by its cg_fused_name: the function, or the alias of an equal group's
 * function; NULL when the module has neither. */
LLVMValueRef cg_fused_fn(cg_llvm *m, const char *name);

/* ---- cg_parts.c ---- */
/* How many objects cg_write_objects should write for m (cg_options.jobs, capped by the fused
 * groups there are and CG_MAX_JOBS). */
int cg_parts_count(cg_llvm *m);
/* After cg_optimize: the module as nparts objects at paths[0..nparts-1], written at once
 * (cg_write_object for one); they link together. m's module is changed: use it no more. */
int cg_write_objects(cg_llvm *m, const char *const *paths, int nparts, char *err, size_t n);

/* ---- cg_outline.c ---- */
/* Whether the k_scalar.h function `fn` is heavy (not on k_vec.h's light list). */
bool cg_outline_heavy(const char *fn);
/* A call of the scalar function f through its out-of-line wrapper, whose call sites name
 * vector variants the loop vectorizer calls on whole vectors; NULL with a message. */
LLVMValueRef cg_outline_call(cg_llvm *m, LLVMValueRef f, LLVMValueRef *args, unsigned n, char *err, size_t len);
/* Lists the vector variants in @llvm.compiler.used, beside any entries it had (once; called
 * by cg_scalars_finish). */
void cg_outline_finish(cg_llvm *m);

/* ---- cg_jit.c ---- */
/* Hands m->mod to a new LLJIT (once; m->mod is NULL afterwards). 0, or 1 with a message. */
int cg_jit_start(cg_llvm *m, char *err, size_t n);
/* The address of a JIT'd symbol (unmangled name), or NULL with a message. */
void *cg_jit_lookup(cg_llvm *m, const char *name, char *err, size_t n);

#endif
