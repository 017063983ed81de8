/* cg_outline.c — heavy scalar functions out of line, for graphs so large that inlining every
 * call of tanh or exp into every fused loop would make LLVM's time follow thousands of copies
 * of the same body (about 0.8 ms a node at -O2 when a quarter of a chain is tanh). Each heavy
 * k_sf_* that such a module calls gets
 *   kiln_ol_<fn>       the scalar function, noinline, which the fused loops call, and
 *   kiln_ol<W>_<fn>    a vector variant for W = 4, 8 and 16 lanes: a loop of W iterations
 *                      calling <fn>, which the loop vectorizer is told to vectorize at W, so
 *                      that it becomes the straight vector code of <fn>;
 * every call site names the variants in its vector-function-abi-variant attribute (the
 * VFABI mangling, LLVM's own ISA token), so the vectorizer of a fused loop calls
 * kiln_ol<W>_<fn> on whole vectors. The same operations on each lane: the same bits as the
 * inlined code (tests/codegen/test_fused.c checks both ways). The variants are listed in
 * @llvm.compiler.used, so that no pass drops them before the vectorizer has used them. */
#include "cg_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k_vec.h"

static const unsigned cg_ol_widths[] = {4, 8, 16};
#define CG_OL_NW (sizeof cg_ol_widths / sizeof *cg_ol_widths)

bool cg_outline_heavy(const char *fn) { return strncmp(fn, "k_sf_", 5) != 0 || !k_vec_light_stem(fn + 5); }

/* A function of this module the pipeline must not inline: nounwind, noinline, the target's. */
static LLVMValueRef cg_ol_decl(cg_llvm *m, const char *name, LLVMTypeRef type) {
  LLVMValueRef f = LLVMAddFunction(m->mod, name, type);
  cg_fn_attr(m, f, "nounwind");
  cg_fn_attr(m, f, "noinline");
  cg_fn_attr(m, f, "willreturn");
  cg_fn_target(m, f);
  return f;
}

/* kiln_ol_<fn>: f's type, its body one call of f (which inlines there), readnone so that a
 * loop calling it can be vectorized. */
static LLVMValueRef cg_ol_scalar(cg_llvm *m, LLVMValueRef f, const char *name) {
  LLVMTypeRef ft = LLVMGlobalGetValueType(f);
  LLVMValueRef w = cg_ol_decl(m, name, ft);
  cg_fn_attr(m, w, "readnone");
  LLVMSetLinkage(w, LLVMInternalLinkage);
  unsigned n = LLVMCountParams(w);
  LLVMValueRef args[16];
  for (unsigned i = 0; i < n && i < 16; i++) args[i] = LLVMGetParam(w, i);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(m->ctx);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(m->ctx, w, "entry"));
  LLVMBuildRet(b, LLVMBuildCall2(b, ft, f, args, n, ""));
  LLVMDisposeBuilder(b);
  return w;
}

/* The variant's loop: element i of each vector argument, f on them (the others passed as
 * they are), element i of the result. */
static void cg_ol_variant_loop(cg_llvm *m, LLVMBuilderRef b, LLVMValueRef v, LLVMValueRef f, unsigned W,
                               LLVMValueRef *lane, LLVMValueRef out) {
  LLVMTypeRef ft = LLVMGlobalGetValueType(f), f32 = cg_f32(m), i64 = cg_i64(m);
  unsigned n = LLVMCountParams(v);
  LLVMBasicBlockRef entry = LLVMGetInsertBlock(b), body = LLVMAppendBasicBlockInContext(m->ctx, v, "lane"),
                    done = LLVMAppendBasicBlockInContext(m->ctx, v, "done");
  LLVMBuildBr(b, body);
  LLVMPositionBuilderAtEnd(b, body);
  LLVMValueRef i = LLVMBuildPhi(b, i64, "i"), args[16];
  for (unsigned k = 0; k < n && k < 16; k++) {
    if (!lane[k]) { args[k] = LLVMGetParam(v, k); continue; }
    args[k] = LLVMBuildLoad2(b, f32, LLVMBuildInBoundsGEP2(b, f32, lane[k], &i, 1, ""), "");
    cg_access_join(m, args[k]);
  }
  cg_access_join(m, LLVMBuildStore(b, LLVMBuildCall2(b, ft, f, args, n, ""), LLVMBuildInBoundsGEP2(b, f32, out, &i, 1, "")));
  LLVMValueRef next = LLVMBuildNUWAdd(b, i, LLVMConstInt(i64, 1, 0), "");
  LLVMValueRef br = LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, next, LLVMConstInt(i64, W, 0), ""), body, done);
  LLVMValueRef zero = LLVMConstInt(i64, 0, 0);
  LLVMAddIncoming(i, &zero, &entry, 1);
  LLVMAddIncoming(i, &next, &body, 1);
  LLVMMetadataRef props[4] = {cg_loop_parallel(m), cg_loop_int(m, "llvm.loop.vectorize.enable", 1, 1),
                              cg_loop_int(m, "llvm.loop.vectorize.width", 32, W),
                              cg_loop_int(m, "llvm.loop.interleave.count", 32, 1)};
  cg_loop_set(m, br, props, 4);
  LLVMPositionBuilderAtEnd(b, done);
}

/* kiln_ol<W>_<fn>: f over W lanes, its float parameters and result <W x float>. */
static LLVMValueRef cg_ol_variant(cg_llvm *m, LLVMValueRef f, const char *name, unsigned W) {
  LLVMTypeRef ft = LLVMGlobalGetValueType(f), f32 = cg_f32(m), vt = LLVMVectorType(f32, W), pt[16];
  unsigned n = LLVMCountParamTypes(ft);
  LLVMGetParamTypes(ft, pt);
  for (unsigned k = 0; k < n; k++)
    if (pt[k] == f32) pt[k] = vt;
  LLVMValueRef v = cg_ol_decl(m, name, LLVMFunctionType(vt, pt, n, 0)), lane[16];
  LLVMSetLinkage(v, LLVMInternalLinkage);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(m->ctx);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(m->ctx, v, "entry"));
  for (unsigned k = 0; k < n; k++) {
    lane[k] = NULL;
    if (pt[k] != vt) continue;
    LLVMValueRef a = LLVMBuildAlloca(b, vt, "");
    LLVMBuildStore(b, LLVMGetParam(v, k), a);
    lane[k] = LLVMBuildBitCast(b, a, cg_ptr(m, f32), "");
  }
  LLVMValueRef res = LLVMBuildAlloca(b, vt, "");
  cg_ol_variant_loop(m, b, v, f, W, lane, LLVMBuildBitCast(b, res, cg_ptr(m, f32), ""));
  LLVMBuildRet(b, LLVMBuildLoad2(b, vt, res, ""));
  LLVMDisposeBuilder(b);
  return v;
}

/* The call-site attribute's value: one VFABI name per width, "v" for a float parameter (a
 * vector), "u" for another (uniform: the int constants some ops take). */
static void cg_ol_abi(LLVMTypeRef ft, LLVMTypeRef f32, const char *scalar, const char *fn, char *out, size_t len) {
  unsigned n = LLVMCountParamTypes(ft);
  LLVMTypeRef pt[16];
  LLVMGetParamTypes(ft, pt);
  char params[17] = "";
  for (unsigned k = 0; k < n && k < 16; k++) params[k] = pt[k] == f32 ? 'v' : 'u';
  size_t at = 0;
  for (size_t w = 0; w < CG_OL_NW && at < len; w++)
    at += (size_t)snprintf(out + at, len - at, "%s_ZGV_LLVM_N%u%s_%s(kiln_ol%u_%s)", w ? "," : "",
                           cg_ol_widths[w], params, scalar, cg_ol_widths[w], fn);
}

LLVMValueRef cg_outline_call(cg_llvm *m, LLVMValueRef f, LLVMValueRef *args, unsigned n, char *err, size_t len) {
  size_t fl;
  const char *fn = LLVMGetValueName2(f, &fl);
  LLVMTypeRef ft = LLVMGlobalGetValueType(f);
  if (LLVMCountParamTypes(ft) > 16 || fl > 200) return rt_errf(err, len, "%s: too many parameters to outline", fn), NULL;
  if (!cg_access_group(m, err, len)) return NULL;
  char name[256], abi[1024];
  snprintf(name, sizeof name, "kiln_ol_%s", fn);
  LLVMValueRef w = LLVMGetNamedFunction(m->mod, name);
  if (!w) {
    w = cg_ol_scalar(m, f, name);
    for (size_t k = 0; k < CG_OL_NW; k++) {
      char vname[256];
      snprintf(vname, sizeof vname, "kiln_ol%u_%s", cg_ol_widths[k], fn);
      cg_ol_variant(m, f, vname, cg_ol_widths[k]);
    }
  }
  LLVMValueRef call = LLVMBuildCall2(m->b, ft, w, args, n, "");
  cg_ol_abi(ft, cg_f32(m), name, fn, abi, sizeof abi);
  LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex,
                           LLVMCreateStringAttribute(m->ctx, "vector-function-abi-variant", 27, abi, (unsigned)strlen(abi)));
  return call;
}

/* Whether f is a vector variant: kiln_ol<digits>_... */
static bool cg_ol_is_variant(LLVMValueRef f) {
  size_t len;
  const char *name = LLVMGetValueName2(f, &len);
  return len > 8 && strncmp(name, "kiln_ol", 7) == 0 && name[7] >= '0' && name[7] <= '9';
}

/* The entries of an existing @llvm.compiler.used (none in Kiln's modules today), then the
 * variants: the list is rebuilt whole, since an appending global cannot grow in place. */
void cg_outline_finish(cg_llvm *m) {
  if (!m->mod || m->outline_kept) return;
  LLVMValueRef old = LLVMGetNamedGlobal(m->mod, "llvm.compiler.used"), init = old ? LLVMGetInitializer(old) : NULL;
  int nold = init ? LLVMGetNumOperands(init) : 0, n = nold;
  for (LLVMValueRef f = LLVMGetFirstFunction(m->mod); f; f = LLVMGetNextFunction(f)) n += cg_ol_is_variant(f);
  if (n == nold) return;
  LLVMTypeRef i8p = cg_ptr(m, LLVMInt8TypeInContext(m->ctx));
  LLVMValueRef *v = malloc(sizeof *v * (size_t)n);
  if (!v) return;     /* the variants may then be dropped: the scalar calls remain, and are right */
  int k = 0;
  for (; k < nold; k++) v[k] = LLVMGetOperand(init, (unsigned)k);
  for (LLVMValueRef f = LLVMGetFirstFunction(m->mod); f; f = LLVMGetNextFunction(f))
    if (cg_ol_is_variant(f)) v[k++] = LLVMConstBitCast(f, i8p);
  if (old) LLVMDeleteGlobal(old);
  LLVMValueRef g = LLVMAddGlobal(m->mod, LLVMArrayType(i8p, (unsigned)n), "llvm.compiler.used");
  LLVMSetInitializer(g, LLVMConstArray(i8p, v, (unsigned)n));
  LLVMSetLinkage(g, LLVMAppendingLinkage);
  LLVMSetSection(g, "llvm.metadata");
  m->outline_kept = true;
  free(v);
}
