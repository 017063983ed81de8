/* cg_jit.c — compiles the module in memory with ORC's LLJIT (host target machine, symbols of
 * this process such as libm's expf resolved by a search generator) and stores each fused
 * step's function address into the descriptor. The code lives until cg_llvm_free. */
#include "cg_cpu.h"

#include "k_parallel.h"

#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>

static int cg_jit_error(LLVMErrorRef e, const char *what, char *err, size_t n) {
  char *msg = LLVMGetErrorMessage(e);
  rt_errf(err, n, "JIT: %s: %s", what, msg ? msg : "?");
  LLVMDisposeErrorMessage(msg);
  return 1;
}

/* k_parallel_for, which split fused loops call, by its address in this process: the search
 * generator sees only dynamic symbols, and a kiln linked statically exports none. The JIT'd
 * loops then share the pool of the kernels the runtime calls. */
static int cg_jit_define_pool(cg_llvm *m, char *err, size_t n) {
  LLVMJITCSymbolMapPair sym = {LLVMOrcLLJITMangleAndIntern(m->jit, "k_parallel_for"),
                               {(LLVMOrcExecutorAddress)(uintptr_t)&k_parallel_for,
                                {LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable, 0}}};
  LLVMOrcMaterializationUnitRef mu = LLVMOrcAbsoluteSymbols(&sym, 1);
  LLVMErrorRef e = LLVMOrcJITDylibDefine(LLVMOrcLLJITGetMainJITDylib(m->jit), mu);
  if (e) {
    LLVMOrcDisposeMaterializationUnit(mu);
    return cg_jit_error(e, "cannot define k_parallel_for", err, n);
  }
  return 0;
}

static int cg_jit_create(cg_llvm *m, char *err, size_t n) {
  LLVMTargetMachineRef tm = cg_make_tm(m, LLVMRelocPIC, LLVMCodeModelJITDefault);
  if (!tm) return rt_errf(err, n, "JIT: no target machine for %s (cpu %s)", m->triple, m->cpu);
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  /* both take ownership: the builder of the target machine builder, the JIT of the builder */
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&m->jit, jb);
  if (e) return m->jit = NULL, cg_jit_error(e, "cannot create the LLJIT", err, n);
  LLVMOrcDefinitionGeneratorRef gen;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(m->jit), NULL, NULL);
  if (e) return cg_jit_error(e, "cannot search this process's symbols", err, n);
  LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(m->jit), gen);
  return cg_jit_define_pool(m, err, n);
}

/* Hands the module to the JIT (once); afterwards m->mod is NULL and only lookups remain. */
int cg_jit_start(cg_llvm *m, char *err, size_t n) {
  if (m->jit) return 0;
  if (!m->mod) return rt_errf(err, n, "JIT: no module");
  cg_scalars_finish(m);
  if (cg_jit_create(m, err, n)) return 1;
  LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(m->mod, m->tsctx);
  m->mod = NULL;
  LLVMErrorRef e = LLVMOrcLLJITAddLLVMIRModule(m->jit, LLVMOrcLLJITGetMainJITDylib(m->jit), tsm);
  if (e) {
    LLVMOrcDisposeThreadSafeModule(tsm);
    return cg_jit_error(e, "cannot add the module", err, n);
  }
  return 0;
}

void *cg_jit_lookup(cg_llvm *m, const char *name, char *err, size_t n) {
  LLVMOrcExecutorAddress addr = 0;
  if (!m->jit) return rt_errf(err, n, "JIT: %s: not started", name), NULL;
  LLVMErrorRef e = LLVMOrcLLJITLookup(m->jit, &addr, name);
  if (e) return cg_jit_error(e, name, err, n), NULL;
  return (void *)(uintptr_t)addr;
}

/* The descriptor's steps are const for the runtime; cg_desc_build allocated them on the heap
 * and cg_jit is their one writer, so the casts below are sound. */
static int cg_jit_fill(cg_llvm *m, const rt_program *p, bool train, char *err, size_t n) {
  rt_step *steps = (rt_step *)p->steps;
  for (int i = 0; i < p->nsteps; i++) {
    if (steps[i].kind != RT_STEP_FUSED) continue;
    char name[64];
    cg_fused_name(name, sizeof name, train, i);
    void *f = cg_jit_lookup(m, name, err, n);
    if (!f) return 1;
    steps[i].fused = (void (*)(void *const *))(uintptr_t)f;
  }
  return 0;
}

static bool cg_has_fused(const rt_program *p) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == RT_STEP_FUSED) return true;
  return false;
}

int cg_jit(cg_llvm *m, rt_model_desc *d, char *err, size_t n) {
  if (!m || !d) return rt_errf(err, n, "JIT: no module or descriptor");
  if (!cg_has_fused(&d->predict) && !(d->has_train && cg_has_fused(&d->train))) return 0;
  if (cg_jit_start(m, err, n)) return 1;
  if (cg_jit_fill(m, &d->predict, false, err, n)) return 1;
  return d->has_train ? cg_jit_fill(m, &d->train, true, err, n) : 0;
}
