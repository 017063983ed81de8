/* cg_llvm.c — the LLVM side of cg_llvm: one context and module per compile, a target machine
 * for the host (or cg_options' cpu/features) with PIC relocation (objects go into shared
 * objects), k_scalar.h's bitcode linked in, LLVM's default<O0..O3> pipelines, .ll and .o. */
#include "cg_cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Transforms/PassBuilder.h>

extern const unsigned char cg_scalar_bc[];
extern const size_t cg_scalar_bc_len;


LLVMTypeRef cg_f32(cg_llvm *m) { return LLVMFloatTypeInContext(m->ctx); }
LLVMTypeRef cg_i64(cg_llvm *m) { return LLVMInt64TypeInContext(m->ctx); }
LLVMTypeRef cg_ptr(cg_llvm *m, LLVMTypeRef elem) { return LLVMPointerType(elem, 0); }

/* ---- target ---- */

static void cg_init_native_once(void) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMInitializeNativeAsmParser();
}

/* Once per process, also when several threads compile at once (the C API's sessions). */
static void cg_init_native(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, cg_init_native_once);
}

LLVMTargetMachineRef cg_make_tm(cg_llvm *m, LLVMRelocMode reloc, LLVMCodeModel cm) {
  LLVMTargetRef t;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(m->triple, &t, &msg)) {
    LLVMDisposeMessage(msg);
    return NULL;
  }
  return LLVMCreateTargetMachine(t, m->triple, m->cpu, m->features, LLVMCodeGenLevelDefault, reloc, cm);
}

static int cg_init_target(cg_llvm *m, char *err, size_t n) {
  LLVMTargetRef t;
  char *msg = NULL;
  m->triple = LLVMGetDefaultTargetTriple();
  if (LLVMGetTargetFromTriple(m->triple, &t, &msg)) {
    rt_errf(err, n, "no LLVM target for %s: %s", m->triple, msg ? msg : "?");
    LLVMDisposeMessage(msg);
    return 1;
  }
  m->cpu = m->opt.cpu ? LLVMCreateMessage(m->opt.cpu) : LLVMGetHostCPUName();
  m->features = m->opt.features ? LLVMCreateMessage(m->opt.features)
                : m->opt.cpu   ? LLVMCreateMessage("")
                               : LLVMGetHostCPUFeatures();
  m->tm = cg_make_tm(m, LLVMRelocPIC, LLVMCodeModelDefault);
  if (!m->tm) return rt_errf(err, n, "cannot create a target machine for %s (cpu %s)", m->triple, m->cpu);
  m->td = LLVMCreateTargetDataLayout(m->tm);
  LLVMSetTarget(m->mod, m->triple);
  LLVMSetModuleDataLayout(m->mod, m->td);
  return 0;
}

cg_llvm *cg_llvm_new(const char *module_name, const cg_options *o, char *err, size_t n) {
  cg_llvm *m = calloc(1, sizeof *m);
  if (!m) return rt_errf(err, n, "out of memory"), NULL;
  if (o) m->opt = *o;
  if (m->opt.opt_level < 0 || m->opt.opt_level > 3) {
    free(m);
    return rt_errf(err, n, "optimisation level %d is not 0..3", o->opt_level), NULL;
  }
  cg_init_native();
  m->tsctx = LLVMOrcCreateNewThreadSafeContext();
  m->ctx = LLVMOrcThreadSafeContextGetContext(m->tsctx);
  m->mod = LLVMModuleCreateWithNameInContext(module_name ? module_name : "kiln", m->ctx);
  m->b = LLVMCreateBuilderInContext(m->ctx);
  if (cg_init_target(m, err, n)) {
    cg_llvm_free(m);
    return NULL;
  }
  return m;
}

void cg_llvm_free(cg_llvm *m) {
  if (!m) return;
  if (m->jit) {
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(m->jit);
    if (e) LLVMConsumeError(e);
  }
  if (m->b) LLVMDisposeBuilder(m->b);
  if (m->mod) LLVMDisposeModule(m->mod);
  if (m->td) LLVMDisposeTargetData(m->td);
  if (m->tm) LLVMDisposeTargetMachine(m->tm);
  if (m->tsctx) LLVMOrcDisposeThreadSafeContext(m->tsctx);
  LLVMDisposeMessage(m->triple);
  LLVMDisposeMessage(m->cpu);
  LLVMDisposeMessage(m->features);
  free(m);
}

/* ---- the scalar functions of k_scalar.h ---- */

int cg_link_scalars(cg_llvm *m, char *err, size_t n) {
  if (m->scalars_linked) return 0;
  if (!m->mod) return rt_errf(err, n, "the module was already handed to the JIT");
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRange((const char *)cg_scalar_bc, cg_scalar_bc_len,
                                                                  "k_scalar.bc", 0);
  LLVMModuleRef sm = NULL;
  int bad = LLVMParseBitcodeInContext2(m->ctx, buf, &sm);
  LLVMDisposeMemoryBuffer(buf);
  if (bad || !sm) return rt_errf(err, n, "the embedded k_scalar.h bitcode does not parse");
  LLVMSetTarget(sm, m->triple);
  LLVMSetModuleDataLayout(sm, m->td);
  if (LLVMLinkModules2(m->mod, sm)) return rt_errf(err, n, "linking k_scalar.h's bitcode failed");
  m->scalars_linked = true;
  return 0;
}

/* The C API makes only uniqued metadata nodes, and an access group must be distinct: it is
 * parsed from IR text into a module of our context and linked in, where it stays as the
 * named metadata `kiln.access_group` (unused by anything else). */
LLVMValueRef cg_access_group(cg_llvm *m, char *err, size_t n) {
  static const char text[] = "!kiln.access_group = !{!0}\n!0 = distinct !{}\n";
  if (m->access_group) return m->access_group;
  if (!m->mod) return rt_errf(err, n, "the module was already handed to the JIT"), NULL;
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(text, sizeof text - 1, "kiln.access_group");
  LLVMModuleRef am = NULL;
  char *msg = NULL;
  if (LLVMParseIRInContext(m->ctx, buf, &am, &msg) || !am) {   /* takes buf in both cases */
    rt_errf(err, n, "internal error: the access group does not parse: %s", msg ? msg : "?");
    LLVMDisposeMessage(msg);
    return NULL;
  }
  LLVMSetTarget(am, m->triple);
  LLVMSetModuleDataLayout(am, m->td);
  if (LLVMLinkModules2(m->mod, am)) return rt_errf(err, n, "internal error: linking the access group failed"), NULL;
  LLVMValueRef node = NULL;
  if (LLVMGetNamedMetadataNumOperands(m->mod, "kiln.access_group") != 1)
    return rt_errf(err, n, "internal error: no access group after linking"), NULL;
  LLVMGetNamedMetadataOperands(m->mod, "kiln.access_group", &node);
  return m->access_group = node;
}

LLVMMetadataRef cg_loop_prop(cg_llvm *m, const char *name, LLVMMetadataRef v) {
  LLVMMetadataRef ops[2] = {LLVMMDStringInContext2(m->ctx, name, strlen(name)), v};
  return LLVMMDNodeInContext2(m->ctx, ops, v ? 2 : 1);
}

LLVMMetadataRef cg_loop_int(cg_llvm *m, const char *name, unsigned bits, unsigned v) {
  return cg_loop_prop(m, name, LLVMValueAsMetadata(LLVMConstInt(LLVMIntTypeInContext(m->ctx, bits), v, 0)));
}

LLVMMetadataRef cg_loop_parallel(cg_llvm *m) {
  return cg_loop_prop(m, "llvm.loop.parallel_accesses", LLVMValueAsMetadata(m->access_group));
}

/* A temporary first operand, replaced by the node itself, makes the node refer to itself (and
 * LLVM then makes it distinct), as a loop ID must. */
void cg_loop_set(cg_llvm *m, LLVMValueRef br, LLVMMetadataRef *props, int n) {
  LLVMMetadataRef ops[n + 1];
  ops[0] = LLVMTemporaryMDNode(m->ctx, NULL, 0);
  for (int i = 0; i < n; i++) ops[1 + i] = props[i];
  LLVMMetadataRef id = LLVMMDNodeInContext2(m->ctx, ops, (size_t)n + 1);
  LLVMMetadataReplaceAllUsesWith(ops[0], id);
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(m->ctx, "llvm.loop", 9), LLVMMetadataAsValue(m->ctx, id));
}

void cg_access_join(cg_llvm *m, LLVMValueRef mem) {
  LLVMSetMetadata(mem, LLVMGetMDKindIDInContext(m->ctx, "llvm.access.group", 17), m->access_group);
}

void cg_fn_attr(cg_llvm *m, LLVMValueRef f, const char *name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(m->ctx, kind, 0));
}

void cg_fn_target(cg_llvm *m, LLVMValueRef f) {
  LLVMAddTargetDependentFunctionAttr(f, "target-cpu", m->cpu);
  if (m->features && *m->features) LLVMAddTargetDependentFunctionAttr(f, "target-features", m->features);
}

LLVMValueRef cg_scalar_fn(cg_llvm *m, const char *stem, const char *suffix) {
  char name[128];
  snprintf(name, sizeof name, "k_sf_%s%s", stem, suffix);
  return m->mod ? LLVMGetNamedFunction(m->mod, name) : NULL;
}

/* clang stamped the bitcode for baseline x86-64; the functions (k_sf_* and the k_vm_* math
 * they call) take the target machine's cpu and features instead, so they inline into (and
 * vectorize with) the fused loops. */
static void cg_scalar_strip(cg_llvm *m, LLVMValueRef f) {
  static const char *const drop[] = {"target-cpu", "target-features", "tune-cpu"};
  for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
    LLVMRemoveStringAttributeAtIndex(f, LLVMAttributeFunctionIndex, drop[i], (unsigned)strlen(drop[i]));
  LLVMRemoveEnumAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMGetEnumAttributeKindForName("noinline", 8));
  cg_fn_attr(m, f, "alwaysinline");
  LLVMSetLinkage(f, LLVMInternalLinkage);
}

void cg_scalars_finish(cg_llvm *m) {
  if (!m->mod) return;
  cg_outline_finish(m);
  for (LLVMValueRef f = LLVMGetFirstFunction(m->mod); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    const char *name = LLVMGetValueName2(f, &len);
    bool ours = len > 5 && (strncmp(name, "k_sf_", 5) == 0 || strncmp(name, "k_vm_", 5) == 0);
    if (ours && !LLVMIsDeclaration(f)) cg_scalar_strip(m, f);
  }
}

/* ---- pipelines and output ---- */

/* The scalar functions are inlined first, whatever the pipeline: the default one's GlobalOpt
 * walks a function's call sites once per call site, so a large model's thousands of calls to
 * one k_sf_* would cost time quadratic in the graph (a 100,000-node chain: seconds).
 * A large graph (cg.h) gets this lean pipeline instead of default<O2/O3>: what the fused
 * loops need (the inlined code simplified, the loops put in the vectorizer's form,
 * vectorized, and the variants' one-iteration loops of cg_outline.c unrolled and their
 * scratch promoted), without the default one's CGSCC inliner walk, GVN, SLP and unrolling,
 * which change nothing in such loops and cost a 100,000-node chain about 2.5 s of 7. LICM
 * must run under loop-mssa in LLVM 14. */
static const char cg_lean_pipeline[] =
  "always-inline,globaldce,function(sroa,early-cse,instcombine,simplifycfg,loop-simplify,lcssa,"
  "loop-mssa(loop-rotate,licm),loop(indvars),loop-vectorize,simplifycfg,loop-unroll-full,instcombine,sroa,"
  "early-cse<memssa>,simplifycfg),globaldce";

int cg_run_passes(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *pipe, bool vectorize, char *err, size_t n) {
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(po, vectorize);
  LLVMPassBuilderOptionsSetSLPVectorization(po, vectorize);
  LLVMErrorRef e = LLVMRunPasses(mod, pipe, tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (!e) return 0;
  char *em = LLVMGetErrorMessage(e);
  rt_errf(err, n, "LLVM pipeline %s: %s", pipe, em);
  LLVMDisposeErrorMessage(em);
  return 1;
}

int cg_optimize(cg_llvm *m, char *err, size_t n) {
  if (!m->mod) return rt_errf(err, n, "the module was already handed to the JIT");
  cg_scalars_finish(m);
  char *msg = NULL;
  if (LLVMVerifyModule(m->mod, LLVMReturnStatusAction, &msg)) {
    rt_errf(err, n, "internal error: the generated module does not verify: %s", msg ? msg : "?");
    LLVMDisposeMessage(msg);
    return 1;
  }
  LLVMDisposeMessage(msg);
  char pipe[sizeof cg_lean_pipeline + 32];
  if (m->large && m->opt.opt_level >= 2) snprintf(pipe, sizeof pipe, "%s", cg_lean_pipeline);
  else snprintf(pipe, sizeof pipe, "always-inline,default<O%d>", m->opt.opt_level);
  return cg_run_passes(m->mod, m->tm, pipe, m->opt.opt_level >= 2, err, n);
}

int cg_write_ir(cg_llvm *m, const char *path, char *err, size_t n) {
  if (!m->mod) return rt_errf(err, n, "the module was already handed to the JIT");
  cg_scalars_finish(m);
  char *msg = NULL;
  if (!LLVMPrintModuleToFile(m->mod, path, &msg)) return 0;
  rt_errf(err, n, "%s: %s", path, msg ? msg : "cannot write");
  LLVMDisposeMessage(msg);
  return 1;
}

int cg_write_object(cg_llvm *m, const char *path, char *err, size_t n) {
  if (!m->mod) return rt_errf(err, n, "the module was already handed to the JIT");
  cg_scalars_finish(m);
  char *msg = NULL;
  /* LLVMTargetMachineEmitToFile takes a non-const char * path. */
  char *p = strdup(path);
  if (!p) return rt_errf(err, n, "out of memory");
  int bad = LLVMTargetMachineEmitToFile(m->tm, m->mod, p, LLVMObjectFile, &msg);
  free(p);
  if (!bad) return 0;
  rt_errf(err, n, "%s: %s", path, msg ? msg : "cannot write the object");
  LLVMDisposeMessage(msg);
  return 1;
}
