#!/usr/bin/python3
"""errors.py -- the ONNX front end's messages and file handling, on small models built with
onnx.helper (no torch needed, a few seconds):
  * every unsupported op listed at once (type, count, first node names), nothing written;
  * an opset out of 9..17, a cycle (a node's own output too), a missing initializer (also
    where its reader comes first in the file), a shape that does not check, a
    declared output shape that disagrees, negative Conv pads, a file that is not protobuf, a
    Pad mode Kiln lacks: exit 1 with a message naming the node, no output file;
  * asymmetric Conv, AveragePool and MaxPool pads, MaxPool's and AveragePool's ceil_mode and
    AveragePool's count_include_pad = 0 (asymmetric pads too), against numpy (a ceil_mode
    window of padding alone is refused), and a pad node only where the pooling row cannot
    take the pads itself (never for a Conv);
  * Pad: folded into an AveragePool, or a pad node (constant with a value and negative pads,
    reflect, edge) matching numpy; HardSigmoid's alpha and beta; Slice with steps (negative
    too) on a computed tensor; Split by the attribute, the input or in equal parts, of a
    constant too, and its bad sizes refused; Gemm with transA as a matmul with alpha and beta
    folded into constant B and C; ReduceMin, ReduceProd, ReduceLogSumExp, ReduceL1, ReduceL2,
    ReduceSumSquare, ReduceLogSum and ReduceSum's noop_with_empty_axes;
  * initializers in an external data file beside the model read as inline ones do, and a
    missing external file is an error; --map prints the renamings.

    errors.py KILN
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
    print("onnx errors: skipped: %s (apt-get install python3-onnx)" % e)
    sys.exit(77)

KILN = sys.argv[1]
failed = 0
tmp = tempfile.mkdtemp(prefix="kiln-onnx-err-")


def fail(msg):
    global failed
    failed += 1
    print("FAIL:", msg)


def model(nodes, inputs, outputs, inits=(), opset=13, domains=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=ops)


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def save(m, name):
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(m, path)
    return path


def expect_error(case, path, *needles):
    """kiln import must exit 1, print every needle, and write nothing."""
    out = os.path.join(tmp, case + ".kiln")
    r = subprocess.run([KILN, "import", path, "-o", out], capture_output=True, text=True)
    left = [f for f in os.listdir(tmp) if f.startswith(case + ".") and not f.endswith(".onnx")]
    if r.returncode != 1:
        fail("%s: exit %d, expected 1\n%s" % (case, r.returncode, r.stderr))
    elif left:
        fail("%s: a failed import left %s" % (case, left))
    for n in needles:
        if n not in r.stderr:
            fail("%s: the message lacks %r:\n%s" % (case, n, r.stderr))
    if not failed:
        print("ok %-20s %s" % (case, r.stderr.splitlines()[0] if r.stderr else ""))


def run(path, x, *extra):
    xin, y = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    np.save(xin, x)
    r = subprocess.run([KILN, "run", path, "--input", "x=" + xin, "--output", "y=" + y] + list(extra),
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("kiln run %s: exit %d\n%s" % (path, r.returncode, r.stderr))
        return None
    return np.load(y)


X = vi("x", [1, 2, 4, 4])

# Every unsupported op at once: three types, one from another domain.
unsup = model([helper.make_node("Atan", ["x"], ["a"], name="atan_%d" % 0),
               helper.make_node("Atan", ["a"], ["b"], name="atan_1"),
               helper.make_node("Softsign", ["b"], ["c"], name="ss_0"),
               helper.make_node("Atan", ["c"], ["d"], name="atan_2"),
               helper.make_node("Atan", ["d"], ["e"], name="atan_3"),
               helper.make_node("MyOp", ["e"], ["y"], name="mine", domain="com.example")],
              [X], [vi("y", [1, 2, 4, 4])], domains=["com.example"])
expect_error("unsupported", save(unsup, "unsupported"), "unsupported ONNX op Atan: 4 nodes (atan_0, atan_1, atan_2, ...)",
             "unsupported ONNX op Softsign: 1 node (ss_0)", "unsupported ONNX op MyOp (domain com.example): 1 node (mine)")

relu = helper.make_node("Relu", ["x"], ["y"], name="r")
expect_error("opset", save(model([relu], [X], [vi("y", [1, 2, 4, 4])], opset=8), "opset"),
             "opset 8 of the default domain is not supported (Kiln reads opsets 9 to 17)")

cyc = model([helper.make_node("Add", ["x", "b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second")],
            [X], [vi("a", [1, 2, 4, 4])])
expect_error("cycle", save(cyc, "cycle"), "node 'first' (Add): error: input 'b' is the output of node 'second' (Relu)",
             "the graph has a cycle")
# a node after a cycle, listed first: the message names a node on the cycle (n_c), not it
after = model([helper.make_node("Relu", ["c"], ["y"], name="n_after"), helper.make_node("Add", ["x", "c"], ["a"], name="n_a"),
               helper.make_node("Relu", ["a"], ["b"], name="n_b"), helper.make_node("Relu", ["b"], ["c"], name="n_c")],
              [X], [vi("y", [1, 2, 4, 4])])
expect_error("cycle_after", save(after, "cycle_after"), "node 'n_c' (Relu): error: input 'b' is the output of node 'n_b' (Relu)",
             "the graph has a cycle")
# a node reading its own output
loop = model([helper.make_node("Add", ["x", "s"], ["s"], name="self")], [X], [vi("s", [1, 2, 4, 4])])
expect_error("self_loop", save(loop, "self_loop"), "node 'self' (Add): error: input 's' is this node's own output")
# a missing initializer read by a node that the file lists after its reader: the missing value
# is reported, not a cycle
late = model([helper.make_node("Relu", ["c"], ["y"], name="reader"), helper.make_node("Conv", ["x", "w"], ["c"], name="conv_1",
                                                                                      kernel_shape=[3, 3])],
             [X], [vi("y", [1, 3, 2, 2])])
expect_error("missing_late", save(late, "missing_late"), "node 'conv_1' (Conv)", "input 'w'", "missing initializer")

conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv_1", kernel_shape=[3, 3])
expect_error("missing_init", save(model([conv], [X], [vi("y", [1, 3, 2, 2])]), "missing_init"),
             "node 'conv_1' (Conv)", "input 'w'", "missing initializer")

bad_add = model([helper.make_node("Add", ["x", "z"], ["y"], name="the_add")], [X, vi("z", [1, 3, 4, 4])], [vi("y", [1, 2, 4, 4])])
expect_error("shape", save(bad_add, "shape"), "node 'the_add' (Add)", "add:", "[1, 3, 4, 4]")

# no graph outputs (found by tests/fuzz/fuzz_onnx: the text written would not check)
expect_error("no_outputs", save(model([relu], [X], []), "no_outputs"), "the graph has no outputs")
# a Reshape to an absurd shape (found by tests/fuzz/fuzz_onnx: the element count overflowed)
huge = numpy_helper.from_array(np.array([2, 6989586621679009792], np.int64), "huge")
reshape = helper.make_node("Reshape", ["x", "huge"], ["y"], name="the_reshape")
expect_error("reshape_huge", save(model([reshape], [X], [vi("y", [2, 16])], [huge]), "reshape_huge"),
             "node 'the_reshape' (Reshape)", "bad entry 6989586621679009792")
# an infinite Clip bound (found by tests/fuzz/fuzz_onnx: .kiln text cannot say inf)
lo = numpy_helper.from_array(np.array(-np.inf, np.float32), "lo")
clip = helper.make_node("Clip", ["x", "lo"], ["y"], name="the_clip")
expect_error("clip_inf", save(model([clip], [X], [vi("y", [1, 2, 4, 4])], [lo]), "clip_inf"),
             "node 'the_clip' (Clip)", "'a_min' would be -inf")
# an infinite scalar initializer read as a tensor (found by tests/fuzz/fuzz_onnx: it was
# written inline as "-inf", which .kiln text cannot read back): a rank-0 const instead, its
# value in the weights, and the model computes what numpy does
ninf = numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf")
mx = helper.make_node("Max", ["x", "ninf"], ["y"], name="the_max")
path = save(model([mx], [X], [vi("y", [1, 2, 4, 4])], [ninf]), "inf_scalar")
r = subprocess.run([KILN, "import", path, "-o", os.path.join(tmp, "inf_scalar.kiln")], capture_output=True, text=True)
text = open(os.path.join(tmp, "inf_scalar.kiln")).read() if r.returncode == 0 else ""
xv = np.random.default_rng(5).standard_normal((1, 2, 4, 4)).astype(np.float32)
got = run(path, xv) if r.returncode == 0 else None
if r.returncode != 0 or "const ninf : f32[]" not in text or re.search(r"\binf\b", text):
    fail("inf_scalar: import exit %d; expected a rank-0 const and no inline inf:\n%s%s" % (r.returncode, r.stderr, text))
elif got is None or not np.array_equal(got, np.maximum(xv, -np.inf)):
    fail("inf_scalar: kiln run differs from numpy")
else:
    print("ok %-20s a rank-0 const, computed as numpy does" % "inf_scalar")
# torch's export of expand(-1, ...) and x[:, 0] (ViT's class token): the target shape computed
# by ConstantOfShape, Mul, Equal and Where on constants (folded), an Expand of a computed tensor
# (broadcast_to), and a Gather of one index of a computed tensor (a slice); against numpy.
shp = numpy_helper.from_array(np.array([1, 2, 4, 4], np.int64), "shp")
four = numpy_helper.from_array(np.array([4], np.int64), "four")
neg = numpy_helper.from_array(np.array(-1, np.int64), "neg")
g0 = numpy_helper.from_array(np.array(1, np.int64), "g0")
nodes = [helper.make_node("ConstantOfShape", ["four"], ["ones"], value=numpy_helper.from_array(np.array([1], np.int64))),
         helper.make_node("Mul", ["ones", "neg"], ["minus"]),
         helper.make_node("Equal", ["shp", "minus"], ["eq"]),
         helper.make_node("Where", ["eq", "ones", "shp"], ["target"]),
         helper.make_node("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1),
         helper.make_node("Expand", ["m", "target"], ["e"]),
         helper.make_node("Gather", ["e", "g0"], ["gx"], axis=2),
         helper.make_node("Add", ["gx", "gx"], ["y"])]
path = save(model(nodes, [X], [vi("y", [1, 2, 4])], [shp, four, neg, g0]), "expand_gather")
xv = np.random.default_rng(6).standard_normal((1, 2, 4, 4)).astype(np.float32)
got = run(path, xv)
want = np.broadcast_to(xv.mean(axis=1, keepdims=True), (1, 2, 4, 4))[:, :, 1] * 2
if got is None or got.shape != want.shape or not np.allclose(got, want, rtol=1e-6, atol=1e-6):
    fail("expand_gather: kiln run differs from numpy")
else:
    print("ok %-20s Equal and Where folded, Expand and a one-index Gather as numpy" % "expand_gather")
# INT64_MAX through folded shape arithmetic stays exact (found by tests/fuzz/fuzz_onnx: it
# went through a double and back, undefined behaviour that the ASan+UBSan build reports)
big = numpy_helper.from_array(np.array([np.iinfo(np.int64).max], np.int64), "big")
one = numpy_helper.from_array(np.array([1], np.int64), "one")
cat = helper.make_node("Concat", ["one", "big"], ["shp"], axis=0, name="the_concat")
rs = helper.make_node("Reshape", ["x", "shp"], ["y"], name="the_reshape")
expect_error("int64_max", save(model([cat, rs], [X], [vi("y", [1, 32])], [big, one]), "int64_max"),
             "node 'the_reshape' (Reshape)", "bad entry 9223372036854775807")
# a node without outputs (found by tests/fuzz/fuzz_onnx: its handler read output[0])
mute = helper.make_node("Unsqueeze", ["x", "ax0"], [], name="the_mute")
ax0 = numpy_helper.from_array(np.array([0], np.int64), "ax0")
expect_error("no_node_output", save(model([mute, relu], [X], [vi("y", [1, 2, 4, 4])], [ax0]), "no_node_output"),
             "node 'the_mute' (Unsqueeze)", "the node has no output")
# an input with a dimension of 0 (found by tests/fuzz/fuzz_onnx: .kiln dims are positive)
expect_error("zero_dim", save(model([relu], [vi("x", [1, 2, 0, 4])], [vi("y", [1, 2, 0, 4])]), "zero_dim"),
             "input 'x' has a dimension of 0: empty tensors are not supported")
expect_error("out_shape", save(model([relu], [X], [vi("y", [1, 2, 4, 5])]), "out_shape"),
             "graph output 'y' is declared with another shape than the f32[1, 2, 4, 4]")

w = numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w")
neg = helper.make_node("Conv", ["x", "w"], ["y"], name="neg", kernel_shape=[3, 3], pads=[0, -1, 1, 1])
expect_error("pads", save(model([neg], [X], [vi("y", [1, 3, 3, 3])], [w]), "pads"), "node 'neg' (Conv)", "pads must be non-negative")

with open(os.path.join(tmp, "text.onnx"), "w") as f:
    f.write("this is not a protobuf file\n" * 10)
expect_error("text", os.path.join(tmp, "text.onnx"), "not an ONNX model")

# External data: the same model with its weights inline and in a file beside it.
rng = np.random.default_rng(0)
wx = numpy_helper.from_array(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "conv.weight")
bx = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "conv.bias")
cm = model([helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["y"], name="c", kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
           [X], [vi("y", [1, 3, 4, 4])], [wx, bx])
inline = save(cm, "inline")
ext_dir = os.path.join(tmp, "ext")
os.mkdir(ext_dir)
ext = os.path.join(ext_dir, "ext.onnx")
onnx.save_model(onnx.load(inline), ext, save_as_external_data=True, all_tensors_to_one_file=True,
                location="ext.weights", size_threshold=0)
x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
a, b = run(inline, x), run(ext, x)
if a is not None and b is not None:
    if not np.array_equal(a, b):
        fail("external data: outputs differ from the inline model's")
    else:
        print("ok %-20s same outputs as inline weights" % "external_data")
os.remove(os.path.join(ext_dir, "ext.weights"))
expect_error("ext_missing", ext, "cannot read external data file")

# A zero Pad of the spatial axes folds into the AveragePool after it (torch's avg_pool2d with
# padding exports that pair): the same as the pool padding itself, counting the padding.
pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
padded = model([helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="constant"),
                helper.make_node("AveragePool", ["p"], ["y"], name="pool", kernel_shape=[3, 3])],
               [X], [vi("y", [1, 2, 4, 4])], [pads])
own = model([helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              count_include_pad=1)], [X], [vi("y", [1, 2, 4, 4])])
a, b = run(save(padded, "padded"), x), run(save(own, "own_pads"), x)
if a is not None and b is not None:
    if not np.array_equal(a, b):
        fail("Pad + AveragePool differs from AveragePool with the same pads")
    else:
        print("ok %-20s Pad folded into AveragePool" % "pad_fold")
# The same Pad read by an op it does not fold into is a pad node; so is a Pad past half a
# pool's kernel (the pool cannot take it), and any other Pad.
pad_relu = model([helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="constant"),
                  helper.make_node("Relu", ["p"], ["y"], name="relu_after_pad")], [X], [vi("y", [1, 2, 6, 6])], [pads])
xneg = x - 0.5
got = run(save(pad_relu, "pad_relu"), xneg)
if got is not None and not np.array_equal(got, np.maximum(np.pad(xneg, ((0, 0), (0, 0), (1, 1), (1, 1))), 0)):
    fail("Pad + Relu differs from numpy")
elif got is not None:
    print("ok %-20s Pad read by Relu is a pad node" % "pad_relu")
pad_out = model([helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode="constant")], [X], [vi("y", [1, 2, 6, 6])],
                [pads])
got = run(save(pad_out, "pad_out"), x)
if got is not None and not np.array_equal(got, np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))):
    fail("a zero spatial Pad as the graph output differs from numpy")
elif got is not None:
    print("ok %-20s a zero spatial Pad as the graph output" % "pad_out")
big = numpy_helper.from_array(np.array([0, 0, 2, 2, 0, 0, 2, 2], np.int64), "pads")
pad_pool = model([helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="constant"),
                  helper.make_node("AveragePool", ["p"], ["y"], name="pool", kernel_shape=[3, 3])],
                 [X], [vi("y", [1, 2, 6, 6])], [big])
got = run(save(pad_pool, "pad_pool"), x)
if got is not None:
    xp = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    want = np.stack([np.stack([xp[:, :, i:i + 3, j:j + 3].mean(axis=(2, 3)) for j in range(6)], -1) for i in range(6)], -2)
    if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
        fail("Pad past half the kernel + AveragePool differs from numpy")
    else:
        print("ok %-20s Pad past half a pool's kernel stays a pad node" % "pad_pool")
for mode, np_mode, pv, cv in (("constant", "constant", [0, 1, 2, 0, 1, 0, 0, 3], 0.5), ("reflect", "reflect", [0, 0, 3, 1, 0, 1, 0, 2], None),
                              ("edge", "edge", [1, 0, 5, 0, 0, 0, 1, 2], None), ("constant", "constant", [0, 0, -1, 2, 0, 0, 1, -2], 0.0)):
    ins = ["x", "pads"] + (["cv"] if cv else [])
    inits = [numpy_helper.from_array(np.array(pv, np.int64), "pads")]
    if cv:
        inits.append(numpy_helper.from_array(np.array(cv, np.float32), "cv"))
    r = len(pv) // 2
    width = [(pv[i], pv[r + i]) for i in range(r)]
    pos = [(max(a, 0), max(b, 0)) for a, b in width]
    want = np.pad(x, pos, mode=np_mode, **({"constant_values": cv or 0.0} if np_mode == "constant" else {}))
    want = want[tuple(slice(-min(a, 0), want.shape[i] + min(b, 0)) for i, (a, b) in enumerate(width))]
    m = model([helper.make_node("Pad", ins, ["y"], name="pad", mode=mode)], [X], [vi("y", list(want.shape))], inits)
    got = run(save(m, "pad_" + mode), x)
    if got is not None and (got.shape != want.shape or not np.array_equal(got, want)):
        fail("Pad mode %s pads %s differs from numpy" % (mode, pv))
    elif got is not None:
        print("ok %-20s Pad mode %s pads %s" % ("pad_" + mode, mode, pv))
def pad_nodes(path):
    """How many pad nodes kiln import makes of the model at path."""
    out = os.path.join(tmp, "count_pads.kiln")
    r = subprocess.run([KILN, "import", path, "-o", out], capture_output=True, text=True)
    return open(out).read().count("= pad(") if r.returncode == 0 else -1


# Asymmetric Conv and pool pads: a convolution's are its own start and end pads, with no pad
# node (convpads.py checks more); so are a pool's within half its kernel (1 of 3 here); past
# that (2 of 3) the excess on one side is a pad node (zeros, or -FLT_MAX before a max pool,
# where ONNX ignores the padding).
def windows(xp, k):
    h, w_ = xp.shape[2] - k + 1, xp.shape[3] - k + 1
    return np.stack([np.stack([xp[:, :, i:i + k, j:j + k] for j in range(w_)], 2) for i in range(h)], 2)


wts = np.random.default_rng(3).standard_normal((3, 2, 3, 3)).astype(np.float32)
for pv in ([0, 1, 2, 0], [2, 0, 1, 2], [0, 1, 1, 0]):
    xp = np.pad(x, ((0, 0), (0, 0), (pv[0], pv[2]), (pv[1], pv[3])))
    win = windows(xp, 3)                                      # [1, 2, H, W, 3, 3]
    cases = (("Conv", {}, np.einsum("cihwkl,oikl->cohw", win, wts)),
             ("AveragePool", {"count_include_pad": 1}, win.mean(axis=(4, 5))),
             ("MaxPool", {}, windows(np.pad(x, ((0, 0), (0, 0), (pv[0], pv[2]), (pv[1], pv[3])), constant_values=-np.inf), 3).max(axis=(4, 5))))
    for op, attrs, want in cases:
        ins, inits = (["x", "w"], [numpy_helper.from_array(wts, "w")]) if op == "Conv" else (["x"], [])
        m = model([helper.make_node(op, ins, ["y"], name="asym", kernel_shape=[3, 3], pads=pv, **attrs)],
                  [X], [vi("y", list(want.shape))], inits)
        path = save(m, "asym_" + op)
        got, pads_want = run(path, x), 1 if op != "Conv" and max(pv) == 2 else 0
        if got is not None and (got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5)):
            fail("%s with pads %s differs from numpy" % (op, pv))
        elif pad_nodes(path) != pads_want:
            fail("%s with pads %s: %d pad nodes, expected %d" % (op, pv, pad_nodes(path), pads_want))
        elif got is not None:
            print("ok %-20s %s with asymmetric pads %s" % ("asym_" + op, op, pv))
# MaxPool with ceil_mode = 1 where it adds a window: pooling's own ceil_mode, the window past
# the end taking the largest element it holds.
x5 = np.random.default_rng(5).standard_normal((1, 2, 5, 6)).astype(np.float32)
for k, s, pv in ((2, 2, [0, 0, 0, 0]), (3, 2, [1, 0, 1, 0])):
    xp = np.pad(x5, ((0, 0), (0, 0), (pv[0], pv[2] + 2), (pv[1], pv[3] + 2)), constant_values=-np.inf)
    oh = -(-(5 + pv[0] + pv[2] - k) // s) + 1
    ow = -(-(6 + pv[1] + pv[3] - k) // s) + 1
    want = np.array([[[xp[0, c, i * s:i * s + k, j * s:j * s + k].max() for j in range(ow)] for i in range(oh)] for c in range(2)])[None]
    m = model([helper.make_node("MaxPool", ["x"], ["y"], name="ceil", kernel_shape=[k, k], strides=[s, s], pads=pv, ceil_mode=1)],
              [vi("x", [1, 2, 5, 6])], [vi("y", list(want.shape))])
    path = save(m, "ceil_%d" % k)
    got = run(path, x5)
    if got is not None and (got.shape != want.shape or not np.array_equal(got, want)):
        fail("MaxPool ceil_mode k=%d s=%d pads %s differs from numpy" % (k, s, pv))
    elif pad_nodes(path) != 0:
        fail("MaxPool ceil_mode k=%d s=%d pads %s: a pad node where pooling's ceil_mode does" % (k, s, pv))
    elif got is not None:
        print("ok %-20s MaxPool ceil_mode kernel %d stride %d pads %s -> %s" % ("ceil_%d" % k, k, s, pv, list(want.shape)))
# AveragePool with ceil_mode (the last windows average what they hold of the padded input, or
# of the input with count_include_pad = 0) and with count_include_pad = 0 and pads.
def avg_pool_ref(xv, k, s, p, ceil, cip):
    H, W = xv.shape[2:]
    def out(n):
        o = (n + 2 * p - k + (s - 1 if ceil else 0)) // s + 1
        return o - 1 if ceil and (o - 1) * s >= n + p else o
    y = np.zeros(xv.shape[:2] + (out(H), out(W)), np.float64)
    for i in range(y.shape[2]):
        for j in range(y.shape[3]):
            h0, w0 = i * s - p, j * s - p
            lo_h, hi_h = (max(h0, -p), min(h0 + k, H + p)) if cip else (max(h0, 0), min(h0 + k, H))
            lo_w, hi_w = (max(w0, -p), min(w0 + k, W + p)) if cip else (max(w0, 0), min(w0 + k, W))
            win = xv[:, :, max(h0, 0):min(h0 + k, H), max(w0, 0):min(w0 + k, W)]
            y[:, :, i, j] = win.sum(axis=(2, 3)) / ((hi_h - lo_h) * (hi_w - lo_w))
    return y.astype(np.float32)


for k, s, p, ceil, cip in ((2, 2, 0, 1, 0), (3, 2, 1, 1, 0), (3, 2, 1, 1, 1), (3, 2, 1, 0, 0), (3, 1, 1, 0, 0)):
    want = avg_pool_ref(x5, k, s, p, ceil, cip)
    m = model([helper.make_node("AveragePool", ["x"], ["y"], name="avg", kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                                ceil_mode=ceil, count_include_pad=cip)], [vi("x", [1, 2, 5, 6])], [vi("y", list(want.shape))])
    got = run(save(m, "avg_%d%d%d%d%d" % (k, s, p, ceil, cip)), x5)
    if got is not None and (got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-6)):
        fail("AveragePool k=%d s=%d pads %d ceil_mode %d count_include_pad %d differs from numpy" % (k, s, p, ceil, cip))
    elif got is not None:
        print("ok %-20s AveragePool kernel %d stride %d pads %d ceil_mode %d count_include_pad %d -> %s" % (
            "avg_%d%d%d%d%d" % (k, s, p, ceil, cip), k, s, p, ceil, cip, list(want.shape)))
# count_include_pad = 0 with asymmetric pads (auto_pad SAME): pooling's own start and end pads
# (a pad node's zeros would count as elements).
for attrs in ({"pads": [0, 1, 1, 0], "kernel_shape": [3, 3]}, {"auto_pad": "SAME_UPPER", "kernel_shape": [2, 2]}):
    kk = attrs["kernel_shape"][0]
    pv = attrs.get("pads", [0, 0, 1, 1])
    xp = np.pad(x5, ((0, 0), (0, 0), (pv[0], pv[2]), (pv[1], pv[3])))
    ones = np.pad(np.ones_like(x5), ((0, 0), (0, 0), (pv[0], pv[2]), (pv[1], pv[3])))
    want = (windows(xp, kk).sum(axis=(4, 5)) / windows(ones, kk).sum(axis=(4, 5))).astype(np.float32)
    m = model([helper.make_node("AveragePool", ["x"], ["y"], name="avg_asym", **attrs)], [vi("x", [1, 2, 5, 6])],
              [vi("y", list(want.shape))])
    got = run(save(m, "avg_asym"), x5)
    if got is not None and (got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-6)):
        fail("AveragePool %s count_include_pad 0 differs from numpy" % attrs)
    elif got is not None:
        print("ok %-20s AveragePool %s count_include_pad 0" % ("avg_asym", attrs))
# ceil_mode where the extra window would start in the right padding: torch drops it, ONNX
# keeps it; refused.
avg_ceil = model([helper.make_node("AveragePool", ["x"], ["y"], name="avg_ceil", kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1],
                                   ceil_mode=1, count_include_pad=1)], [vi("x", [1, 2, 5, 6])], [vi("y", [1, 2, 3, 3])])
expect_error("avg_ceil", save(avg_ceil, "avg_ceil"), "node 'avg_ceil' (AveragePool)", "ceil_mode", "padding only")
wrap = model([helper.make_node("Pad", ["x", "pads"], ["y"], name="pad_wrap", mode="wrap")], [X], [vi("y", [1, 2, 6, 6])], [pads])
expect_error("pad_wrap", save(wrap, "pad_wrap"), "node 'pad_wrap' (Pad)", "mode")
hs = model([helper.make_node("HardSigmoid", ["x"], ["y"], name="hs", alpha=0.3, beta=0.4)], [X], [vi("y", [1, 2, 4, 4])])
got = run(save(hs, "hard_sigmoid"), x)
if got is not None and not np.allclose(got, np.clip(0.3 * x + 0.4, 0, 1), rtol=1e-6, atol=1e-7):
    fail("HardSigmoid alpha=0.3 beta=0.4 differs from numpy")
elif got is not None:
    print("ok %-20s HardSigmoid alpha, beta" % "hard_sigmoid")
# Slice with steps on a computed tensor (a slice node per axis), against numpy's x[b:e:s]:
# ends past either end, negative starts, ends and steps.
BIG = np.iinfo(np.int64).max
for starts, ends, axes, steps in (([0, 3], [BIG, -BIG], [2, 3], [2, -1]), ([-1], [-5], [1], [-1]),
                                  ([1, -1], [4, 0], [3, -2], [3, -2]), ([3, 0], [0, 2], [2, 0], [-2, 1])):
    idx = [slice(None)] * 4
    for b, e, a, st in zip(starts, ends, axes, steps):
        idx[a] = slice(b, e, st)
    want = x[tuple(idx)]
    inits = [numpy_helper.from_array(np.array(v, np.int64), nm) for v, nm in ((starts, "st"), (ends, "en"), (axes, "ax"), (steps, "sp"))]
    m = model([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="strided")], [X], [vi("y", list(want.shape))], inits)
    got = run(save(m, "slice_steps"), x)
    if got is not None and (got.shape != want.shape or not np.array_equal(got, want)):
        fail("Slice starts %s ends %s axes %s steps %s differs from numpy" % (starts, ends, axes, steps))
    elif got is not None:
        print("ok %-20s Slice axes %s steps %s -> %s" % ("slice_steps", axes, steps, list(want.shape)))
# Split: a slice per output; sizes from the attribute (opset 11), the input (13), or equal.
# Two outputs are summed into y after a broadcast, so every part is checked.
x6 = np.random.default_rng(6).standard_normal((2, 6, 3)).astype(np.float32)
for opset, axis, sizes, attr in ((11, 1, [1, 2, 3], True), (13, -2, [4, 1, 1], False), (13, 1, None, False), (11, 0, None, False)):
    parts = np.split(x6, np.cumsum(sizes)[:-1] if sizes else 3 if axis != 0 else 2, axis=axis)
    outs = ["p%d" % i for i in range(len(parts))]
    kw = {"axis": axis, **({"split": sizes} if attr else {})}
    ins, inits = ["x"], []
    if sizes and not attr:
        ins, inits = ["x", "sz"], [numpy_helper.from_array(np.array(sizes, np.int64), "sz")]
    nodes = [helper.make_node("Split", ins, outs, name="the_split", **kw)]
    nodes += [helper.make_node("ReduceSum", [o], ["r%d" % i], axes=[axis], keepdims=1, name="sum%d" % i)
              for i, o in enumerate(outs)] if opset == 11 else \
             [helper.make_node("ReduceSum", [o, "ax"], ["r%d" % i], keepdims=1, name="sum%d" % i) for i, o in enumerate(outs)]
    if opset == 13:
        inits.append(numpy_helper.from_array(np.array([axis], np.int64), "ax"))
    nodes += [helper.make_node("Mul", ["r0", "r1"], ["m"], name="mul"), helper.make_node("Add", ["m", outs[-1]], ["y"], name="add")]
    want = parts[0].sum(axis=axis, keepdims=True) * parts[1].sum(axis=axis, keepdims=True) + parts[-1]
    m = model(nodes, [vi("x", [2, 6, 3])], [vi("y", list(want.shape))], inits, opset=opset)
    got = run(save(m, "split"), x6)
    if got is not None and (got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5)):
        fail("Split opset %d axis %d sizes %s differs from numpy" % (opset, axis, sizes))
    elif got is not None:
        print("ok %-20s Split opset %d axis %d sizes %s" % ("split", opset, axis, sizes or "equal"))
# Gemm with transA = 1 is a matmul, alpha and beta folded into a constant B and C.
rg = np.random.default_rng(7)
a7 = rg.standard_normal((5, 3)).astype(np.float32)
for transB, alpha, beta, cshape in ((0, 0.5, 2.0, [4]), (1, 1.0, 1.0, [3, 4]), (1, -2.0, 0.25, [1, 4]), (0, 1.5, 1.0, None)):
    bmat = rg.standard_normal((4, 5) if transB else (5, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(bmat, "B")]
    ins = ["x", "B"]
    want = alpha * a7.T @ (bmat.T if transB else bmat)
    if cshape:
        cmat = rg.standard_normal(cshape).astype(np.float32)
        inits.append(numpy_helper.from_array(cmat, "C"))
        ins.append("C")
        want = want + beta * cmat
    m = model([helper.make_node("Gemm", ins, ["y"], name="gemm_ta", transA=1, transB=transB, alpha=alpha, beta=beta)],
              [vi("x", [5, 3])], [vi("y", [3, 4])], inits)
    path = save(m, "gemm_ta")
    got = run(path, a7)
    txt = subprocess.run([KILN, "import", path, "-o", os.path.join(tmp, "gemm_ta.kiln")], capture_output=True, text=True)
    nodes = open(os.path.join(tmp, "gemm_ta.kiln")).read() if txt.returncode == 0 else ""
    if got is not None and not np.allclose(got, want, rtol=1e-5, atol=1e-5):
        fail("Gemm transA transB=%d alpha %g beta %g C %s differs from numpy" % (transB, alpha, beta, cshape))
    elif "= mul(" in nodes or "matmul(" not in nodes:
        fail("Gemm transA with constant B and C: expected one matmul and no mul node:\n%s%s" % (nodes, txt.stderr))
    elif got is not None:
        print("ok %-20s Gemm transA transB=%d alpha %g beta %g C %s" % ("gemm_ta", transB, alpha, beta, cshape))
# a Split of a constant folds; bad sizes are refused naming the node
w6 = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(2, 6), "w6")
m = model([helper.make_node("Split", ["w6"], ["a", "b"], name="const_split", axis=1, split=[4, 2]),
           helper.make_node("Add", ["x", "b"], ["y"], name="add")], [vi("x", [2, 2])], [vi("y", [2, 2])], [w6], opset=11)
x22 = np.ones((2, 2), np.float32)
got = run(save(m, "split_const"), x22)
if got is not None and not np.array_equal(got, x22 + np.arange(12, dtype=np.float32).reshape(2, 6)[:, 4:]):
    fail("Split of a constant differs from numpy")
elif got is not None:
    print("ok %-20s Split of a constant folds" % "split_const")
for case, kw, needle in (("split_sum", {"split": [2, 2]}, "add up to 4, not the axis's size 6"),
                         ("split_uneven", {}, "does not split into 4 equal parts"),
                         ("split_zero", {"split": [6, 0]}, "output 2 would be empty")):
    outs = ["a", "b", "c", "d"] if case == "split_uneven" else ["a", "b"]
    m = model([helper.make_node("Split", ["x"], outs, name="bad_split", axis=1, **kw)], [vi("x", [2, 6, 3])],
              [vi(o, None) for o in outs], opset=11)
    expect_error(case, save(m, case), "node 'bad_split' (Split)", needle)
# The Reduce ops beyond sum, mean and max, on float32 (ONNX's node tests of ReduceLogSumExp
# are float64): keepdims and negative axes, logsumexp where exp overflows float32.
xr = np.random.default_rng(7).uniform(-3, 3, (2, 3, 4)).astype(np.float32)
xr[0, 1, 2] = 0.0
x64 = xr.astype(np.float64)
lse = lambda v, a: np.log(np.sum(np.exp(v - v.max(axis=a, keepdims=True)), axis=a, keepdims=True)) + v.max(axis=a, keepdims=True)
reductions = (("ReduceMin", lambda v, a: v.min(axis=a, keepdims=True)), ("ReduceProd", lambda v, a: v.prod(axis=a, keepdims=True)),
              ("ReduceLogSumExp", lse), ("ReduceL1", lambda v, a: np.abs(v).sum(axis=a, keepdims=True)),
              ("ReduceL2", lambda v, a: np.sqrt((v * v).sum(axis=a, keepdims=True))),
              ("ReduceSumSquare", lambda v, a: (v * v).sum(axis=a, keepdims=True)),
              ("ReduceLogSum", lambda v, a: np.log(v.sum(axis=a, keepdims=True))))
for op, fn in reductions:
    for axes, keep in (([1], 1), ([0, -1], 0), (None, 1)):
        a = tuple(range(3)) if axes is None else tuple(axes)
        v = x64 + 100.0 if op == "ReduceLogSumExp" else np.abs(x64) + 1 if op == "ReduceLogSum" else x64
        want = fn(v, a)
        want = want if keep else want.squeeze(a)
        attrs = {"keepdims": keep} if axes is None else {"keepdims": keep, "axes": axes}
        m = model([helper.make_node(op, ["x"], ["y"], name="red", **attrs)], [vi("x", [2, 3, 4])], [vi("y", list(want.shape))])
        got = run(save(m, "reduce_" + op), v.astype(np.float32))
        if got is not None and (got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5)):
            fail("%s axes %s keepdims %d differs from numpy" % (op, axes, keep))
        elif got is not None:
            print("ok %-20s %s axes %s keepdims %d" % ("reduce_" + op, op, axes, keep))
# ReduceSum (opset 13) with empty axes and noop_with_empty_axes = 1 is the identity; without
# it, a sum over every axis.
empty = numpy_helper.from_array(np.zeros((0,), np.int64), "axes")
for noop, want in ((1, np.maximum(xr, 0)), (0, np.maximum(xr, 0).sum(keepdims=True))):
    m = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
               helper.make_node("ReduceSum", ["r", "axes"], ["y"], name="red", noop_with_empty_axes=noop)],
              [vi("x", [2, 3, 4])], [vi("y", list(want.shape))], [empty])
    got = run(save(m, "reduce_noop%d" % noop), xr)
    if got is not None and (got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5)):
        fail("ReduceSum empty axes noop_with_empty_axes=%d differs from numpy" % noop)
    elif got is not None:
        print("ok %-20s ReduceSum empty axes, noop_with_empty_axes=%d" % ("reduce_noop%d" % noop, noop))

r = subprocess.run([KILN, "import", inline, "-o", os.path.join(tmp, "mapped.kiln"), "--map"], capture_output=True, text=True)
if r.returncode != 0 or "x" in r.stdout.split() or "conv.weight" in r.stdout:
    fail("--map: exit %d, stdout %r (names kept as they are must not be listed)" % (r.returncode, r.stdout))
r = subprocess.run([KILN, "import", save(model([helper.make_node("Relu", ["input"], ["out/put:0"], name="r")],
                                                  [vi("input", [2])], [vi("out/put:0", [2])]), "rename"),
                    "-o", os.path.join(tmp, "rename.kiln"), "--map"], capture_output=True, text=True)
if r.returncode != 0 or "input -> input_" not in r.stdout or "out/put:0 -> out_put_0" not in r.stdout:
    fail("--map: exit %d, stdout %r" % (r.returncode, r.stdout))
else:
    print("ok %-20s %s" % ("map", r.stdout.strip().replace("\n", "; ")))

shutil.rmtree(tmp)
print("onnx errors: %s" % ("all passed" if not failed else "%d failure(s)" % failed))
sys.exit(1 if failed else 0)
