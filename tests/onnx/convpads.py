#!/usr/bin/python3
"""convpads.py -- ONNX Conv pads that differ at start and end, imported as the convolution's own
start and end pads (docs/onnx.md), never as a pad node (a copy of the input) before it:
  * explicit pads, 2-D (stride, dilation, groups, bias) and 1-D; auto_pad SAME_UPPER and
    SAME_LOWER where the total is odd (the extra one at the end, or at the start);
  * a zero Pad before a Conv, uneven, folded into the convolution's pads (added to its own);
  * a Pad that cannot fold stays a pad node: read by a Relu too, or before an AveragePool
    (whose pads a Pad joins only when alike on both sides);
  * a PyTorch module that pads with F.pad(x, (0, 1, 0, 1)) before a stride-2 Conv2d (the
    TensorFlow "SAME" idiom of ported models), and one with a reflect F.pad (a pad node),
    exported by torch.onnx.export at opsets 10, 11 and 13 (from 11 torch computes the pads
    in the graph: Slice of step -1, Transpose, Cast, which the importer folds);
each run with kiln run against torch's F.conv2d / F.conv1d of F.pad's output, with the count of
pad nodes in kiln import's text. Uses torch only as the reference.

    convpads.py KILN
Exit status: 0 passed, 1 a failure, 77 (skipped, with the reason) without python3-onnx or torch.
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import torch
    import torch.nn.functional as F
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    print("onnx convpads: skipped: %s (apt-get install python3-onnx python3-torch)" % e)
    sys.exit(77)

torch.set_num_threads(1)
KILN = sys.argv[1]
failed = 0
tmp = tempfile.mkdtemp(prefix="kiln-onnx-convpads-")
rng = np.random.default_rng(11)


def fail(msg):
    global failed
    failed += 1
    print("FAIL:", msg)


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def save(nodes, x_shape, y_shape, inits, name):
    g = helper.make_graph(nodes, "g", [vi("x", x_shape)], [vi("y", y_shape)], inits)
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def imported(path):
    """kiln import's text of the model, or None after a failure."""
    out = os.path.join(tmp, "imported.kiln")
    r = subprocess.run([KILN, "import", path, "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        fail("kiln import %s: exit %d\n%s" % (path, r.returncode, r.stderr))
        return None
    return open(out).read()


def run(path, x):
    xin, y = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    np.save(xin, x)
    r = subprocess.run([KILN, "run", path, "--input", "x=" + xin, "--output", "y=" + y], capture_output=True, text=True)
    if r.returncode != 0:
        fail("kiln run %s: exit %d\n%s" % (path, r.returncode, r.stderr))
        return None
    return np.load(y)


def torch_conv(x, w, b, starts, ends, stride, dilation, group):
    """torch's convolution of F.pad's output: F.pad takes (start, end) pairs from the last axis."""
    fpad = [v for i in reversed(range(len(starts))) for v in (starts[i], ends[i])]
    fn = F.conv1d if len(starts) == 1 else F.conv2d
    xp = F.pad(torch.tensor(x), fpad)
    return fn(xp, torch.tensor(w), None if b is None else torch.tensor(b), stride=stride, dilation=dilation,
              groups=group).numpy()


def check(case, path, x, want, pads_want, text_has=None):
    """The model at path runs to want (torch's), with pads_want pad nodes in its imported text."""
    text, got = imported(path), run(path, x)
    if text is None or got is None:
        return
    pads = text.count("= pad(")
    scale = max(1.0, float(np.abs(want).max()))
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5 * scale):
        worst = np.abs(got - want).max() if got.shape == want.shape else "shape %s vs %s" % (got.shape, want.shape)
        fail("%s: differs from torch (worst %s)" % (case, worst))
    elif pads != pads_want:
        fail("%s: %d pad nodes, expected %d:\n%s" % (case, pads, pads_want, text))
    elif text_has and text_has not in text:
        fail("%s: the imported text lacks %r:\n%s" % (case, text_has, text))
    else:
        print("ok %-24s %s -> %s, %d pad node%s" % (case, list(x.shape), list(want.shape), pads, "" if pads == 1 else "s"))


def conv_case(case, xs, fs, kernel, stride, dilation, group, starts, ends, bias=True, auto_pad=None):
    """One Conv node; pads (starts then ends) given, or auto_pad's (starts and ends then say
    what ONNX's rule makes them, for the reference)."""
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((fs, xs[1] // group) + tuple(kernel)).astype(np.float32)
    b = rng.standard_normal(fs).astype(np.float32) if bias else None
    want = torch_conv(x, w, b, starts, ends, stride, dilation, group)
    attrs = {"kernel_shape": list(kernel), "strides": list(stride), "dilations": list(dilation), "group": group}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = list(starts) + list(ends)
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if bias else [])
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], name="conv", **attrs)
    attr = "pad=(%s)" % ", ".join(str(v) for v in list(starts) + list(ends))
    check(case, save([node], list(xs), list(want.shape), inits, case), x, want, 0, attr)


conv_case("conv_asym", (2, 3, 7, 8), 4, (3, 3), (1, 1), (1, 1), 1, (0, 1), (2, 0))
conv_case("conv_asym_strided", (2, 4, 11, 12), 6, (3, 2), (2, 3), (2, 1), 2, (2, 0), (0, 3))
conv_case("conv_asym_depthwise", (1, 6, 9, 10), 6, (3, 3), (2, 2), (1, 1), 6, (1, 0), (0, 1), bias=False)
conv_case("conv_asym_winograd", (1, 16, 8, 8), 16, (3, 3), (1, 1), (1, 1), 1, (0, 1), (2, 1))
conv_case("conv1d_asym", (2, 3, 20), 5, (5,), (2,), (1,), 1, (0,), (3,))
# SAME with stride 2 on an even input: total (out - 1) * 2 + 3 - 8 = 1, odd
conv_case("conv_same_upper", (1, 3, 8, 8), 4, (3, 3), (2, 2), (1, 1), 1, (0, 0), (1, 1), auto_pad="SAME_UPPER")
conv_case("conv_same_lower", (1, 3, 8, 8), 4, (3, 3), (2, 2), (1, 1), 1, (1, 1), (0, 0), auto_pad="SAME_LOWER")
conv_case("conv1d_same_upper", (1, 2, 10), 3, (4,), (3,), (1,), 1, (1,), (2,), auto_pad="SAME_UPPER")

# A zero Pad before a Conv, uneven, with the Conv's own pads added: no pad node.
x = rng.standard_normal((1, 3, 6, 7)).astype(np.float32)
w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
pads = numpy_helper.from_array(np.array([0, 0, 0, 2, 0, 0, 1, 0], np.int64), "pads")    # W start 2, H end 1
want = torch_conv(x, w, None, (1, 2), (1 + 1, 0), (2, 2), (1, 1), 1)
path = save([helper.make_node("Pad", ["x", "pads"], ["xp"], name="pad"),
             helper.make_node("Conv", ["xp", "w"], ["y"], name="conv", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0])],
            [1, 3, 6, 7], list(want.shape), [pads, numpy_helper.from_array(w, "w")], "pad_conv")
check("pad_conv_folded", path, x, want, 0, "pad=(1, 2, 2, 0)")

# The same Pad also read by a Relu: the Conv still folds it, the Relu reads a pad node.
relu_want = np.maximum(np.pad(x, ((0, 0), (0, 0), (0, 1), (2, 0))), 0)
g = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["xp"], name="pad"),
                       helper.make_node("Conv", ["xp", "w"], ["c"], name="conv", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0]),
                       helper.make_node("Relu", ["xp"], ["r"], name="relu"),
                       helper.make_node("ReduceSum", ["r"], ["s"], name="sum", keepdims=0),
                       helper.make_node("Add", ["c", "s"], ["y"], name="add")],
                      "g", [vi("x", [1, 3, 6, 7])], [vi("y", list(want.shape))], [pads, numpy_helper.from_array(w, "w")])
path = os.path.join(tmp, "pad_two_readers.onnx")
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
check("pad_two_readers", path, x, want + relu_want.sum(), 1)

# An uneven Pad before an AveragePool stays a pad node (a pool joins only pads alike on both sides).
pool_want = F.avg_pool2d(torch.tensor(np.pad(x, ((0, 0), (0, 0), (0, 1), (2, 0)))), 2).numpy()
path = save([helper.make_node("Pad", ["x", "pads"], ["xp"], name="pad"),
             helper.make_node("AveragePool", ["xp"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])],
            [1, 3, 6, 7], list(pool_want.shape), [pads], "pad_pool")
check("pad_pool_kept", path, x, pool_want, 1)


# PyTorch's own export of the TensorFlow SAME idiom: F.pad then a stride-2 Conv2d.
class SamePad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2)

    def forward(self, t):
        return torch.relu(self.conv(F.pad(t, (0, 1, 0, 1))))


class ReflectPad(torch.nn.Module):
    """A reflect F.pad (no Conv can take it: it stays a pad node) before a Conv2d."""
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, t):
        return self.conv(F.pad(t, (1, 2, 0, 1), mode="reflect"))


torch.manual_seed(0)
xt = torch.randn(2, 3, 10, 10)
# At opset 10 Pad's pads are an attribute; from 11 torch computes them at run time
# (ConstantOfShape, Concat, Reshape, a Slice of step -1, Transpose, Reshape, Cast), which the
# importer folds: the same model at each opset.
for opset in (10, 11, 13):
    for name, net, pads_want, text_has in (("torch_pad_conv", SamePad(), 0, "pad=(0, 0, 1, 1)"),
                                           ("torch_reflect_pad", ReflectPad(), 1, 'mode="reflect"')):
        net = net.eval()
        path = os.path.join(tmp, "%s_%d.onnx" % (name, opset))
        torch.onnx.export(net, xt, path, opset_version=opset, input_names=["x"], output_names=["y"])
        with torch.no_grad():
            check("%s_opset%d" % (name, opset), path, xt.numpy(), net(xt).numpy(), pads_want, text_has)

if failed == 0:
    shutil.rmtree(tmp, ignore_errors=True)
print("onnx convpads: %s" % ("all passed" if failed == 0 else "%d failed (files kept in %s)" % (failed, tmp)))
sys.exit(1 if failed else 0)
