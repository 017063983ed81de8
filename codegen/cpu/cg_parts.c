/* cg_parts.c — a module's object written as several objects at once, one thread each. Code
 * generation is most of a large graph's compile (a 100,000-node chain: about 5 s of LLVM's
 * instruction selection and register allocation for 1,600 small loops), and the loops are
 * independent: each fused group's function is called only through the descriptor. So the
 * optimized module is written to bitcode once; part 0 is the module itself, every other part
 * a copy parsed into a context of its own (LLVM contexts are single-threaded), and each part
 * keeps the bodies of its share of the roots (the kiln_fused_<p|t><step> functions the
 * descriptor names), turning the others into declarations, while the descriptor and the
 * NAME_* wrappers stay in part 0. The roots become hidden globals, so the link resolves them
 * across the parts' objects and the .so still exports only NAME_* and kiln_model. What the
 * roots call (their _range loops, the outlined scalar functions) is internal and copied into
 * each part that needs it; globaldce drops the rest. */
#include "cg_cpu.h"
#include "k_parallel.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/BitReader.h>
#include <llvm-c/BitWriter.h>

/* A descriptor entry's own function: kiln_fused_p12, not kiln_fused_p12_range. */
static bool cg_part_root(LLVMValueRef f) {
  size_t len;
  const char *s = LLVMGetValueName2(f, &len);
  if (LLVMIsDeclaration(f) || len < 13 || strncmp(s, "kiln_fused_", 11) != 0 || (s[11] != 'p' && s[11] != 't')) return false;
  for (size_t i = 12; i < len; i++)
    if (!isdigit((unsigned char)s[i])) return false;
  return true;
}

/* The shared module, before it is written: each repeat of a group names the first group's
 * function directly (no alias is left to point at a body another part drops), and the roots
 * become hidden globals. */
static int cg_parts_prepare(cg_llvm *m, char *err, size_t n) {
  for (LLVMValueRef a = LLVMGetFirstGlobalAlias(m->mod); a; a = LLVMGetNextGlobalAlias(a))
    LLVMReplaceAllUsesWith(a, LLVMAliasGetAliasee(a));
  for (LLVMValueRef f = LLVMGetFirstFunction(m->mod); f; f = LLVMGetNextFunction(f))
    if (cg_part_root(f)) LLVMSetLinkage(f, LLVMExternalLinkage), LLVMSetVisibility(f, LLVMHiddenVisibility);
  return cg_run_passes(m->mod, m->tm, "globaldce", false, err, n);   /* the aliases, now unused */
}

/* Turns f into a declaration. A block cannot simply be deleted while a later block still uses
 * its values or branches to it: the freed value keeps those uses on its list, and deleting
 * the later block then unlinks them from freed memory (the heap corruption that crashed
 * --jobs at random). The C API has no Function::deleteBody, so its steps are done by hand:
 * every value an instruction makes is replaced by undef, every terminator (the only users
 * of a block; this code takes no block's address) is erased, and only then are the blocks,
 * now unused, deleted. */
static void cg_part_drop_body(LLVMValueRef f) {
  for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(f); b; b = LLVMGetNextBasicBlock(b))
    for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i))
      if (LLVMGetTypeKind(LLVMTypeOf(i)) != LLVMVoidTypeKind) LLVMReplaceAllUsesWith(i, LLVMGetUndef(LLVMTypeOf(i)));
  for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(f); b; b = LLVMGetNextBasicBlock(b)) {
    LLVMValueRef t = LLVMGetBasicBlockTerminator(b);
    if (t) LLVMInstructionEraseFromParent(t);
  }
  for (LLVMBasicBlockRef b; (b = LLVMGetFirstBasicBlock(f));) LLVMDeleteBasicBlock(b);
  LLVMSetLinkage(f, LLVMExternalLinkage);
}

/* The descriptor's data (cg_aot.c's kiln.* globals and kiln_model), which only part 0 keeps. */
static bool cg_part_desc_global(LLVMValueRef g) {
  size_t len;
  const char *s = LLVMGetValueName2(g, &len);
  return strncmp(s, "kiln.", 5) == 0 || strcmp(s, "kiln_model") == 0;
}

/* Part k of nparts: root r (in module order) stays defined when r % nparts == k; parts
 * other than 0 drop the wrappers' bodies and the descriptor's data (an undefined initializer,
 * internal, so globaldce removes it with everything only it referred to). */
static void cg_part_select(LLVMModuleRef mod, int k, int nparts) {
  int r = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    if (cg_part_root(f)) {
      if (r++ % nparts != k) cg_part_drop_body(f), LLVMSetVisibility(f, LLVMHiddenVisibility);
    } else if (k != 0 && !LLVMIsDeclaration(f) && LLVMGetLinkage(f) == LLVMExternalLinkage) {
      cg_part_drop_body(f);
    }
  }
  for (LLVMValueRef g = LLVMGetFirstGlobal(mod); k != 0 && g; g = LLVMGetNextGlobal(g)) {
    LLVMValueRef init = LLVMIsDeclaration(g) ? NULL : LLVMGetInitializer(g);
    if (!init || !cg_part_desc_global(g)) continue;
    LLVMSetInitializer(g, LLVMGetUndef(LLVMTypeOf(init)));
    LLVMSetLinkage(g, LLVMInternalLinkage);
  }
}

typedef struct {
  cg_llvm *m;
  const char *bc;
  size_t len;
  int k, nparts;
  const char *path;
  int rc;
  char err[1024];
} cg_part;

static int cg_part_emit(cg_part *p, LLVMModuleRef mod, LLVMTargetMachineRef tm) {
  cg_part_select(mod, p->k, p->nparts);
  if (cg_run_passes(mod, tm, "globaldce", false, p->err, sizeof p->err)) return 1;
  char *msg = NULL, *path = strdup(p->path);   /* LLVMTargetMachineEmitToFile takes char * */
  int bad = !path || LLVMTargetMachineEmitToFile(tm, mod, path, LLVMObjectFile, &msg);
  free(path);
  if (bad) rt_errf(p->err, sizeof p->err, "%s: %s", p->path, msg ? msg : "cannot write the object");
  LLVMDisposeMessage(msg);
  return bad;
}

/* Parts 1.. on their own threads: a context, the module parsed from the bitcode, a target
 * machine, the object. */
static void *cg_part_thread(void *arg) {
  cg_part *p = arg;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRange(p->bc, p->len, "kiln-part", 0);
  LLVMTargetMachineRef tm = cg_make_tm(p->m, LLVMRelocPIC, LLVMCodeModelDefault);
  LLVMModuleRef mod = NULL;
  if (!ctx || !buf || !tm) rt_errf(p->err, sizeof p->err, "part %d: out of memory", p->k), p->rc = 1;
  else if (LLVMParseBitcodeInContext2(ctx, buf, &mod)) rt_errf(p->err, sizeof p->err, "part %d: cannot read the bitcode back", p->k), p->rc = 1;
  else p->rc = cg_part_emit(p, mod, tm);
  if (mod) LLVMDisposeModule(mod);
  if (buf) LLVMDisposeMemoryBuffer(buf);
  if (tm) LLVMDisposeTargetMachine(tm);
  if (ctx) LLVMContextDispose(ctx);
  return NULL;
}

/* Runs parts 1..nparts-1 on threads and part 0 here, on m's own module. */
static int cg_parts_run(cg_llvm *m, const char *bc, size_t len, const char *const *paths, int nparts, char *err, size_t n) {
  cg_part *p = calloc((size_t)nparts, sizeof *p);
  pthread_t *th = calloc((size_t)nparts, sizeof *th);
  bool *started = calloc((size_t)nparts, sizeof *started);
  if (!p || !th || !started) return free(p), free(th), free(started), rt_errf(err, n, "out of memory");
  for (int k = 0; k < nparts; k++) p[k] = (cg_part){m, bc, len, k, nparts, paths[k], 0, ""};
  for (int k = 1; k < nparts; k++) started[k] = pthread_create(&th[k], NULL, cg_part_thread, &p[k]) == 0;
  for (int k = 1; k < nparts; k++)
    if (!started[k]) cg_part_thread(&p[k]);   /* no thread to be had: the part runs here */
  p[0].rc = cg_part_emit(&p[0], m->mod, m->tm);
  int rc = 0;
  for (int k = 0; k < nparts; k++) {
    if (k > 0 && started[k]) pthread_join(th[k], NULL);
    if (p[k].rc && !rc) rc = rt_errf(err, n, "%s", p[k].err);
  }
  free(p), free(th), free(started);
  return rc;
}

int cg_write_objects(cg_llvm *m, const char *const *paths, int nparts, char *err, size_t n) {
  if (!m->mod) return rt_errf(err, n, "the module was already handed to the JIT");
  if (nparts <= 1) return cg_write_object(m, paths[0], err, n);
  cg_scalars_finish(m);
  if (cg_parts_prepare(m, err, n)) return 1;
  LLVMMemoryBufferRef bc = LLVMWriteBitcodeToMemoryBuffer(m->mod);
  if (!bc) return rt_errf(err, n, "cannot write the module's bitcode");
  int rc = cg_parts_run(m, LLVMGetBufferStart(bc), LLVMGetBufferSize(bc), paths, nparts, err, n);
  LLVMDisposeMemoryBuffer(bc);
  return rc;
}

int cg_parts_count(cg_llvm *m) {
  int roots = 0;
  for (LLVMValueRef f = m->mod ? LLVMGetFirstFunction(m->mod) : NULL; f; f = LLVMGetNextFunction(f)) roots += cg_part_root(f);
  int want = m->opt.jobs > 0 ? m->opt.jobs : m->large ? k_parallel_cpu_count() : 1;
  if (want > CG_MAX_JOBS) want = CG_MAX_JOBS;
  return roots < want ? (roots > 1 ? roots : 1) : want;
}
