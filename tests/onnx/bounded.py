#!/usr/bin/python3
"""bounded.py -- -D NAME=LO..HI on an ONNX dynamic axis (dim_param): one .so for every extent
of the range (docs/language.md, "Bounded dims"; frontend/onnx/onnx_dims.c):
  * torch models exported with a dynamic batch (dynamic_axes): a CNN whose flatten is
    x.view(x.size(0), -1) (Shape, Gather, Concat and Reshape, folded at each extent) and an
    MLP with LayerNorm, GELU and Softmax; each compiled with -D batch=1..8, and its predict at
    batch 1, 3 and 8 (kiln run of the .so, the extent read from the input) bit for bit equal
    to a .so compiled with -D batch=N, and within 1e-4 of the output's magnitude of torch;
    kiln run of the .onnx with the range (the JIT) gives the same bits; kiln check prints
    the range and its header takes the extent (int64_t batch);
  * two bounded dims (batch and a sequence length) of a torch Conv1d model, at a few pairs;
  * errors, with the .kiln front end's messages: a range on a name no input has as a
    dim_param (a suggestion offered), LO above HI, an extent where the model does not import
    (a Reshape to a fixed shape: the first such extent named), a size that is not a * dim + b
    (a stride-2 Conv over a bounded side), the dim as a value in arithmetic, and as the
    values of a weight computed at import;
  * kiln import -D batch=1..8 of the CNN: the text declares `dim batch = 1..8` and writes its
    input and its flatten's shape over batch; compiled, it gives the bits of the .onnx compiled
    with the range at batch 1, 3 and 8, and refuses batch 0 and 9; a model whose weight
    computed at import is f32[2 * batch] (no .kiln shape can say so) is refused by name, and
    so is a dim named as a tensor.

    bounded.py KILN
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
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    print("onnx bounded: skipped: %s (apt-get install python3-onnx python3-torch)" % e)
    sys.exit(77)

torch.set_num_threads(1)
KILN = sys.argv[1]
failed = 0
tmp = tempfile.mkdtemp(prefix="kiln-onnx-bounded-")


def fail(msg):
    global failed
    failed += 1
    print("FAIL:", msg)


def kiln(*args):
    """Runs kiln; its CompletedProcess, a failure recorded unless it exited 0."""
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True)
    if r.returncode != 0:
        fail("kiln %s: exit %d\n%s" % (" ".join(args), r.returncode, r.stderr))
    return r


def run(model, inputs, defines=()):
    """kiln run of model (a .so or a .onnx with its -D) on the named arrays: the output y, or None."""
    args, y = [], os.path.join(tmp, "y.npy")
    for name, a in inputs.items():
        path = os.path.join(tmp, name + ".npy")
        np.save(path, a)
        args += ["--input", "%s=%s" % (name, path)]
    args += flags(defines)
    if os.path.exists(y):
        os.remove(y)
    return np.load(y) if kiln("run", model, *args, "--output", "y=" + y).returncode == 0 else None


def export(net, example, name, axes):
    """net (one input x, one output y) exported with the dynamic axes {x or y: {axis: name}}; the path."""
    path = os.path.join(tmp, name + ".onnx")
    torch.onnx.export(net.eval(), example, path, opset_version=13, input_names=["x"], output_names=["y"], dynamic_axes=axes)
    return path


def flags(defines):
    """["batch=1..8", ...] as kiln's arguments."""
    return [a for d in defines for a in ("-D", d)]


def torch_out(net, inputs):
    with torch.no_grad():
        return net(*[torch.tensor(a) for a in inputs.values()]).numpy()


def compare(case, got, fixed, want):
    """got (the bounded .so) equals fixed (the fixed-size .so) bit for bit, and torch's want
    within 1e-4 of its magnitude."""
    if got is None or fixed is None:
        return
    tol = 1e-4 * float(np.abs(want).max())
    if got.shape != want.shape or not np.array_equal(got, fixed):
        worst = np.abs(got - fixed).max() if got.shape == fixed.shape else "shape %s vs %s" % (got.shape, fixed.shape)
        fail("%s: the bounded .so differs from the fixed-size one (worst %s)" % (case, worst))
    elif np.abs(got - want).max() > tol:
        fail("%s: differs from torch by %g (tolerance %g)" % (case, np.abs(got - want).max(), tol))
    else:
        print("ok %-28s %s: the fixed .so's bits, torch within %.1e" % (case, list(got.shape), np.abs(got - want).max()))


def check_model(name, net, path, make, dims, points):
    """The .onnx at path compiled with the ranges dims ({name: (lo, hi)}); at each point (a
    tuple of extents) its predict equals a .so compiled for those extents and torch."""
    ranges = ["%s=%d..%d" % (d, lo, hi) for d, (lo, hi) in dims.items()]
    so = os.path.join(tmp, "lib%s_bounded.so" % name)
    r = kiln("check", path, *flags(ranges))
    want_line = "bounded dims: " + ", ".join("%s = %d..%d (planned at %d)" % (d, lo, hi, hi) for d, (lo, hi) in dims.items())
    if r.returncode == 0 and want_line not in r.stdout:
        fail("%s: kiln check does not say %r:\n%s" % (name, want_line, r.stdout))
    if kiln("compile", path, "-o", so, *flags(ranges)).returncode != 0:
        return
    header = open(os.path.join(tmp, name + ".h")).read()    # NAME.h beside the .so
    entry = "int %s_predict(%s *m, %s, const float *x, float *y);" % (name, name, ", ".join("int64_t " + d for d in dims))
    if entry not in header:
        fail("%s: the header lacks %r:\n%s" % (name, entry, header))
    for point in points:
        ext = dict(zip(dims, point))
        inputs = make(**ext)
        case = "%s %s" % (name, " ".join("%s=%d" % kv for kv in ext.items()))
        fixed_so = os.path.join(tmp, "lib%s_fixed.so" % name)
        fixed = None
        if kiln("compile", path, "-o", fixed_so, *flags("%s=%d" % kv for kv in ext.items())).returncode == 0:
            fixed = run(fixed_so, inputs)
        got = run(so, inputs)
        compare(case, got, fixed, torch_out(net, inputs))
        jit = run(path, inputs, ranges)
        if got is not None and jit is not None and not np.array_equal(got, jit):
            fail("%s: kiln run of the .onnx with %s differs from the compiled .so" % (case, " ".join(ranges)))


# ---- a dynamic batch ----

class Cnn(torch.nn.Module):
    """Conv, BatchNorm, pooling and a flatten by x.view(x.size(0), -1): shape arithmetic on
    the batch, folded at import at each extent."""
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc1 = torch.nn.Linear(16 * 4 * 4, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        x = torch.relu(self.conv2(x))
        x = x.view(x.size(0), -1)
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=1)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 64)
        self.ln = torch.nn.LayerNorm(64)
        self.fc2 = torch.nn.Linear(64, 7)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.ln(self.fc1(x))))


rng = np.random.default_rng(5)
torch.manual_seed(0)
cnn = Cnn()
with torch.no_grad():   # statistics that are not 0 and 1, so that the folded BatchNorm matters
    cnn.bn.running_mean.uniform_(-0.5, 0.5)
    cnn.bn.running_var.uniform_(0.5, 2.0)
cnn_path = path = export(cnn, torch.randn(2, 3, 16, 16), "cnn", {"x": {0: "batch"}, "y": {0: "batch"}})
check_model("cnn", cnn, path, lambda batch: {"x": rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)},
            {"batch": (1, 8)}, [(1,), (3,), (8,)])
mlp = Mlp()
path = export(mlp, torch.randn(2, 20), "mlp", {"x": {0: "batch"}, "y": {0: "batch"}})
check_model("mlp", mlp, path, lambda batch: {"x": rng.standard_normal((batch, 20)).astype(np.float32)},
            {"batch": (1, 8)}, [(1,), (3,), (8,)])


# ---- two bounded dims: batch and a sequence length ----

class Seq(torch.nn.Module):
    """A Conv1d over time (padded: the length is kept), a mean over time and a Linear."""
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 3, padding=1)
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=2))


seq = Seq()
path = export(seq, torch.randn(2, 4, 5), "seq", {"x": {0: "batch", 2: "time"}, "y": {0: "batch"}})
check_model("seq", seq, path, lambda batch, time: {"x": rng.standard_normal((batch, 4, time)).astype(np.float32)},
            {"batch": (1, 4), "time": (2, 9)}, [(1, 2), (3, 5), (4, 9)])


# ---- errors ----

def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def save(nodes, x_shape, y_shape, inits, name):
    g = helper.make_graph(nodes, "g", [vi("x", x_shape)], [vi("y", y_shape)], inits)
    p = os.path.join(tmp, name + ".onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
    return p


def expect_error(case, path, defines, *needles):
    """kiln check with the -D must exit 1 and print every needle."""
    r = subprocess.run([KILN, "check", path] + flags(defines), capture_output=True, text=True)
    if r.returncode != 1:
        fail("%s: exit %d, expected 1\n%s" % (case, r.returncode, r.stderr))
        return
    for n in needles:
        if n not in r.stderr:
            fail("%s: the message lacks %r:\n%s" % (case, n, r.stderr))
            return
    print("ok %-28s %s" % (case, r.stderr.splitlines()[0]))


relu = save([helper.make_node("Relu", ["x"], ["y"], name="relu")], ["batch", 8], ["batch", 8], [], "relu")
expect_error("range_not_a_dim_param", relu, ["btch=1..8"],
             "relu.onnx: error: -D btch=1..8: no input has a symbolic dimension (dim_param) named 'btch'; did you mean 'batch'?")
expect_error("range_reversed", relu, ["batch=9..4"], "kiln: error: -D batch=9..4: the lower bound is above the upper one")
shape = numpy_helper.from_array(np.array([-1, 16], np.int64), "shape")
reshape = save([helper.make_node("Reshape", ["x", "shape"], ["y"], name="pairs")], ["batch", 8], ["rows", 16], [shape],
               "reshape")
expect_error("range_extent_fails", reshape, ["batch=2..8"], "node 'pairs' (Reshape): error: ",
             "kiln: note: at batch=3 (-D batch=2..8)")
w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
conv = save([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3], strides=[2, 2])],
            [1, 3, "side", "side"], [1, 4, "out", "out"], [w], "strided")
expect_error("range_not_affine", conv, ["side=8..32"],
             "tensor 'y' has shape f32[1, 4, 15, 15] at side=32 but f32[1, 4, 3, 3] at side=8: its sizes must be a * side + b")
# y = x / batch, the batch read by Shape and Gather: a value, not a size.
idx = numpy_helper.from_array(np.array(0, np.int64), "zero")
div = save([helper.make_node("Shape", ["x"], ["s"], name="shape"), helper.make_node("Gather", ["s", "zero"], ["n"], name="n"),
            helper.make_node("Cast", ["n"], ["nf"], name="cast", to=TensorProto.FLOAT),
            helper.make_node("Div", ["x", "nf"], ["y"], name="div")], ["batch", 8], ["batch", 8], [idx], "div")
expect_error("range_value", div, ["batch=1..8"], "a bounded dim may size tensors and set int attributes, not be a value")
# y = x + (a row of 8 copies of the batch), the row a weight computed at import: its values follow the dim.
eight = numpy_helper.from_array(np.array([8], np.int64), "eight")
row = save([helper.make_node("Shape", ["x"], ["s"], name="shape"), helper.make_node("Gather", ["s", "zero"], ["n"], name="n"),
            helper.make_node("Cast", ["n"], ["nf"], name="cast", to=TensorProto.FLOAT),
            helper.make_node("Expand", ["nf", "eight"], ["row"], name="row"),
            helper.make_node("Add", ["x", "row"], ["y"], name="add")], ["batch", 8], ["batch", 8], [idx, eight], "row")
expect_error("range_weight_values", row, ["batch=1..8"],
             "error: weight 'row_1' holds other values at batch=7 than at the bound: a bounded dim may size a weight, not set its values",
             "kiln: note: at batch=7 (-D batch=1..8)")


# ---- kiln import with a range: the text declares the dim and writes its sizes over it ----

def import_text(path, name):
    """kiln import of path with -D batch=1..8: the text, or None after a failure."""
    out = os.path.join(tmp, name + ".kiln")
    if kiln("import", path, "-o", out, "-D", "batch=1..8").returncode != 0:
        return None
    return open(out).read()


def run_at(so, weights, batch):
    """kiln run of the .so (with weights, if any) on a CNN input of that batch: (exit, y, stderr)."""
    x, y = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    np.save(x, np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32))
    if os.path.exists(y):
        os.remove(y)
    args = [KILN, "run", so, "--input", "x=" + x, "--output", "y=" + y] + (["--weights", weights] if weights else [])
    r = subprocess.run(args, capture_output=True, text=True)
    return r.returncode, np.load(y) if r.returncode == 0 else None, r.stderr


def check_import():
    text = import_text(cnn_path, "cnn_text")
    if text is None:
        return
    for want in ("dim batch = 1..8\n", "input x : f32[batch, 3, 16, 16]", "shape=(batch, 256)"):
        if want not in text:
            return fail("import -D batch=1..8: the text lacks %r:\n%s" % (want, text))
    print("ok %-28s %s" % ("import_range_text", [l for l in text.splitlines() if "reshape(" in l][0].strip()))
    so, onnx_so = os.path.join(tmp, "libcnn_text.so"), os.path.join(tmp, "libcnn_onnx.so")
    weights = os.path.join(tmp, "cnn_text.safetensors")
    if kiln("compile", os.path.join(tmp, "cnn_text.kiln"), "-o", so).returncode != 0 or \
       kiln("compile", cnn_path, "-o", onnx_so, "-D", "batch=1..8").returncode != 0:
        return
    for batch in (1, 3, 8):
        (rc, got, err), (rc2, want, err2) = run_at(so, weights, batch), run_at(onnx_so, None, batch)
        if rc or rc2:
            fail("import batch=%d: kiln run exit %d (text) and %d (onnx)\n%s%s" % (batch, rc, rc2, err, err2))
        elif got.shape != want.shape or not np.array_equal(got, want):
            fail("import batch=%d: the imported text's .so differs from the .onnx's" % batch)
        else:
            print("ok %-28s %s: the .onnx's bits" % ("import_range batch=%d" % batch, list(got.shape)))
    for batch in (0, 9):
        rc, _, err = run_at(so, weights, batch)
        if rc == 0 or "input 'x' has shape [%d, 3, 16, 16]; the model takes f32[batch, 3, 16, 16] with batch = 1..8" \
                % batch not in err:
            fail("import batch=%d: exit %d, expected a refusal naming the bounds\n%s" % (batch, rc, err))
        else:
            print("ok %-28s %s" % ("import_range batch=%d" % batch, err.strip().splitlines()[-1]))


check_import()

# A weight computed at import as f32[2 * batch] (ConstantOfShape of twice the batch): no .kiln
# shape says 2 * batch, so the import is refused naming it, and nothing is written.
two = numpy_helper.from_array(np.array(2, np.int64), "two")
axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
ones = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
twice = save([helper.make_node("Shape", ["x"], ["s"], name="shape"), helper.make_node("Gather", ["s", "zero"], ["n"], name="n"),
              helper.make_node("Mul", ["n", "two"], ["m"], name="m"),
              helper.make_node("Unsqueeze", ["m", "axes"], ["len"], name="len"),
              helper.make_node("ConstantOfShape", ["len"], ["ones"], name="ones", value=ones),
              helper.make_node("Reshape", ["x", "len"], ["flat"], name="flat"),
              helper.make_node("Add", ["flat", "ones"], ["y"], name="add")], ["batch", 2], ["rows"], [idx, two, axes], "twice")
out = os.path.join(tmp, "twice.kiln")
r = subprocess.run([KILN, "import", twice, "-o", out, "-D", "batch=1..8"], capture_output=True, text=True)
if r.returncode != 1 or "tensor 'ones' has axis 0 of size 2 * batch over the bounded dims" not in r.stderr \
        or os.path.exists(out) or os.path.exists(os.path.join(tmp, "twice.safetensors")):
    fail("kiln import -D batch=1..8 of f32[2 * batch]: exit %d, expected 1 naming the tensor and no file\n%s"
         % (r.returncode, r.stderr))
else:
    print("ok %-28s %s" % ("import_range_refused", r.stderr.splitlines()[0]))
# A dim_param named as a tensor (y): in the text the tensor would hide the dim.
ydim = save([helper.make_node("Relu", ["x"], ["y"], name="relu")], ["y", 8], ["y", 8], [], "ydim")
r = subprocess.run([KILN, "import", ydim, "-o", os.path.join(tmp, "ydim.kiln"), "-D", "y=1..8"], capture_output=True, text=True)
if r.returncode != 1 or "the imported text would declare the bounded dim 'y', which a tensor of the model is named too" \
        not in r.stderr or os.path.exists(os.path.join(tmp, "ydim.kiln")):
    fail("kiln import -D y=1..8 with a tensor y: exit %d, expected 1 with the refusal and no file\n%s" % (r.returncode, r.stderr))
else:
    print("ok %-28s %s" % ("import_range_dim_name", r.stderr.splitlines()[0]))

if failed == 0:
    shutil.rmtree(tmp, ignore_errors=True)
print("onnx bounded: %s" % ("all passed" if failed == 0 else "%d failed (files kept in %s)" % (failed, tmp)))
sys.exit(1 if failed else 0)
