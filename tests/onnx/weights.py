#!/usr/bin/python3
"""weights.py -- which initializers an imported model trains (frontend/onnx/onnx_weights.c,
docs/onnx.md "Which initializers are trained"), on one model built with onnx.helper (no torch
needed): kiln import's text must declare each tensor as a param (trained), an aux state
(printed as a param; batch_norm's running statistics) or a const:
  * params: Conv's W and B, BatchNormalization's scale and B, a MatMul's constant operand
    (through a Transpose, or a Slice of an initializer) and the Add of its bias, Gemm's B
    and C, and initializers torch names *.weight / *.bias read by Mul and Add;
  * consts: an initializer read by Mul or Add (a buffer), a float Constant, the mask added
    to a product of two computed tensors; a rank-0 initializer stays a scalar literal;
  * --trainable / --freeze PATTERN in order, by ONNX or Kiln name, the running statistics
    aux states whatever they say, a pattern matching nothing an error;
  * the text parses back (kiln check) with --train, and train_step's graph updates exactly
    the params (kiln passes --mode train).

    weights.py KILN
Exit status: 0 passed, 1 a failure, 77 (skipped, with the reason) without python3-onnx.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    print("onnx weights: skipped: %s (apt-get install python3-onnx)" % e)
    sys.exit(77)

KILN = sys.argv[1]
failed = 0
tmp = tempfile.mkdtemp(prefix="kiln-onnx-weights-")
rng = np.random.default_rng(0)


def fail(msg):
    global failed
    failed += 1
    print("FAIL:", msg)


def init(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=outs[0], **attrs)


def build():
    """x [2, 3, 4, 4] -> Conv -> BatchNorm -> * scale (buffer) + Constant -> Reshape [2, 4, 16]
    -> MatMul(Transpose(lin.w)) + lin.b -> * ln.weight + ln.bias -> a product with itself
    + mask (buffer) -> MatMul(Slice(proj)) -> Flatten -> Gemm(fc.w, fc.b) -> * s0 (rank 0)."""
    cst = helper.make_tensor("cst_value", TensorProto.FLOAT, [1, 4, 1, 1], [1.0, -2.0, 0.5, 0.25])
    nodes = [node("Conv", ["x", "layer1.0.conv.weight", "conv.b"], ["c"], kernel_shape=[1, 1]),
             node("BatchNormalization", ["c", "bn.s", "bn.b", "bn.mean", "bn.var"], ["n"]),
             node("Mul", ["n", "scale"], ["m"]),
             helper.make_node("Constant", [], ["cst"], name="cst", value=cst),
             node("Add", ["m", "cst"], ["a"]),
             node("Reshape", ["a", "shape"], ["r"]),
             node("Transpose", ["lin.w"], ["lin.wt"]),
             node("MatMul", ["r", "lin.wt"], ["mm"]),
             node("Add", ["lin.b", "mm"], ["l"]),
             node("Mul", ["l", "ln.weight"], ["g"]),
             node("Add", ["g", "ln.bias"], ["h"]),
             node("Transpose", ["h"], ["ht"], perm=[0, 2, 1]),
             node("MatMul", ["h", "ht"], ["s"]),
             node("Add", ["s", "mask"], ["sm"]),
             node("Slice", ["proj", "starts", "ends", "axes"], ["wq"]),
             node("MatMul", ["sm", "wq"], ["q"]),
             node("Flatten", ["q"], ["f"]),
             node("Gemm", ["f", "fc.w", "fc.b"], ["z"], transB=1),
             node("Mul", ["z", "s0"], ["y"])]
    inits = [init("layer1.0.conv.weight", 4, 3, 1, 1), init("conv.b", 4), init("bn.s", 4), init("bn.b", 4), init("bn.mean", 4),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "bn.var"), init("scale", 1, 4, 1, 1),
             ints("shape", [2, 4, 16]), init("lin.w", 8, 16), init("lin.b", 8), init("ln.weight", 8), init("ln.bias", 8),
             init("mask", 4, 4), init("proj", 4, 6), ints("starts", [0]), ints("ends", [3]), ints("axes", [1]),
             init("fc.w", 5, 12), init("fc.b", 5), numpy_helper.from_array(np.array(0.5, np.float32), "s0")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], inits)
    path = os.path.join(tmp, "net.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def decls(text):
    """{name: 'param' | 'const'} from the text's declarations."""
    return {m.group(2): m.group(1) for m in re.finditer(r"^  (param|const) (\S+) :", text, re.M)}


def imported(path, case, *flags):
    out = os.path.join(tmp, case + ".kiln")
    r = subprocess.run([KILN, "import", path, "-o", out] + list(flags), capture_output=True, text=True)
    if r.returncode != 0:
        fail("%s: kiln import %s: exit %d\n%s" % (case, " ".join(flags), r.returncode, r.stderr))
        return None, None
    return out, open(out).read()


AUX = {"bn.mean", "bn.var"}
PARAMS = {"layer1_0.conv.weight", "conv.b", "bn.s", "bn.b", "lin.w", "lin.b", "ln.weight", "ln.bias", "wq", "fc.w", "fc.b"}
CONSTS = {"scale", "cst", "mask"}


def expect(case, got, params, consts):
    want = dict({n: "param" for n in params | AUX}, **{n: "const" for n in consts})
    if got != want:
        wrong = sorted(set(got.items()) ^ set(want.items()))
        fail("%s: declarations differ from what the rule gives: %s\n  got %s" % (case, wrong, got))
    else:
        print("ok %-22s %d params, %d consts, %d aux states" % (case, len(params), len(consts), len(AUX)))


path = build()

# The rule alone; the text parses back with a train statement, and only params are updated.
out, text = imported(path, "rule", "--train", "softmax_cross_entropy sgd(lr=0.1, momentum=0.9)")
if text is not None:
    expect("rule", decls(text), PARAMS, CONSTS)
    if "s0" in decls(text) or "mul(z, 0.5)" not in text:
        fail("rule: the rank-0 initializer s0 must be the literal 0.5:\n%s" % text)
    r = subprocess.run([KILN, "passes", out, "--mode", "train", "--print-after", "optimizer"], capture_output=True, text=True)
    updated = set(re.findall(r"_sgd_update\(([^,]+),", r.stdout))
    if r.returncode != 0 or updated != PARAMS:
        fail("rule: train_step should update exactly the params: exit %d, updates %s\n%s" % (r.returncode, sorted(updated), r.stderr))
    elif any("%s@" % c in r.stdout for c in CONSTS):
        fail("rule: a const has a gradient or optimizer state:\n%s" % r.stdout)
    else:
        print("ok %-22s kiln passes: %d updates, none of a const" % ("train graph", len(updated)))

# Rules in order, by ONNX name or Kiln name; running statistics stay aux states.
for case, flags, params, consts in (
        ("trainable", ["--trainable", "sc*", "--trainable", "s0"], PARAMS | {"scale", "s0"}, CONSTS - {"scale"}),
        ("freeze_all", ["--freeze", "*"], set(), PARAMS | CONSTS),
        ("last_wins", ["--freeze", "*", "--trainable", "lin.*", "--freeze", "lin.b"], {"lin.w"}, (PARAMS | CONSTS) - {"lin.w"}),
        ("onnx_name", ["--freeze", "layer1.0.*"], PARAMS - {"layer1_0.conv.weight"}, CONSTS | {"layer1_0.conv.weight"}),
        ("kiln_name", ["--freeze", "layer1_0.conv.weight"], PARAMS - {"layer1_0.conv.weight"}, CONSTS | {"layer1_0.conv.weight"})):
    out, text = imported(path, case, *flags)
    if text is not None:
        expect(case, decls(text), params, consts)

# A pattern that matches nothing (a Constant's value, the running statistics and scalars
# left as literals are not matched either) is an error, and nothing is written.
for case, flags in (("no_match", ["--freeze", "nope"]), ("constant_only", ["--trainable", "cst"]),
                    ("aux_only", ["--freeze", "bn.mean"])):
    out = os.path.join(tmp, case + ".kiln")
    r = subprocess.run([KILN, "import", path, "-o", out] + flags, capture_output=True, text=True)
    want = "%s '%s' matches no initializer" % (flags[0], flags[1])
    if r.returncode != 1 or want not in r.stderr or os.path.exists(out):
        fail("%s: exit %d (want 1), message %r lacks %r, or a file was written" % (case, r.returncode, r.stderr, want))
    else:
        print("ok %-22s %s" % (case, r.stderr.splitlines()[0]))

# The header of a .so compiled from the .onnx says create starts from the file's weights.
so = os.path.join(tmp, "libw.so")
r = subprocess.run([KILN, "compile", path, "-o", so], capture_output=True, text=True)
hdr = os.path.join(tmp, os.path.splitext(os.path.basename(path))[0] + ".h")
text = open(hdr).read() if r.returncode == 0 and os.path.exists(hdr) else ""
create = [l for l in text.splitlines() if "_create(uint64_t seed)" in l]
if not create or "weights compiled in (the ONNX file's)" not in create[0]:
    fail("header: create should say its weights are the ONNX file's: exit %d %s\n%s" % (r.returncode, r.stderr, create))
else:
    print("ok %-22s %s" % ("header", create[0].split("/*")[1].split(";")[0].strip()))

shutil.rmtree(tmp)
print("onnx weights: %s" % ("all passed" if not failed else "%d failure(s)" % failed))
sys.exit(1 if failed else 0)
