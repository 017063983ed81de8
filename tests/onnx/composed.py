#!/usr/bin/python3
"""composed.py -- ONNX ops the importer composes from several Kiln rows (docs/onnx.md), each
exported from a small torch module and run through `kiln run` against torch, within 1e-4 of
the output's largest magnitude:
  * LayerNormalization (opset 17): nn.LayerNorm over the last axis, over the last two (axis
    -2: x reshaped around layer_norm), F.layer_norm without a bias; and, built with
    onnx.helper, axis 1 with B absent and the Mean and InvStdDev outputs read, against numpy;
  * Einsum: attention's and torch's contractions (bij,bjk->bik, bhid,bhjd->bhij,
    bhij,bhjd->bhid, ij,jk->ik, a transposed operand read by matmul's flag, no transpose
    node), transposes, an ellipsis, an outer and an inner product, a sum;
  * Resize and Upsample: nn.Upsample / F.interpolate nearest by integer factors (a
    broadcast_to, no matmul) and to other sizes, bilinear with align_corners False and True,
    up and down, linear on NCW, at opsets 9 (Upsample), 10, 11 and 13;
  * refusals, exit 1 with a message naming the node: an Einsum with a diagonal or three
    operands (the equation quoted), bicubic Resize, tf_crop_and_resize, a LayerNormalization
    whose Scale broadcasts.

    composed.py KILN
Exit status: 0 passed, 1 a failure, 77 (skipped, with the reason) without python3-onnx or torch.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

try:
    import numpy as np
    import onnx
    import torch
    import torch.nn.functional as F
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    print("onnx composed: skipped: %s (apt-get install python3-onnx python3-torch)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from import_refused import import_refused  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore")               # torch's export warnings (Upsample before opset 11)
KILN = sys.argv[1]
failed = 0
tmp = tempfile.mkdtemp(prefix="kiln-onnx-composed-")
torch.manual_seed(0)
rng = np.random.default_rng(5)


def fail(msg):
    global failed
    failed += 1
    print("FAIL:", msg)


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def kiln_run(path, arrays):
    """kiln run of the model on x0, x1, ...; its output y, or None after a failure."""
    args = [KILN, "run", path, "--output", "y=" + os.path.join(tmp, "y.npy")]
    for i, a in enumerate(arrays):
        np.save(os.path.join(tmp, "x%d.npy" % i), a)
        args += ["--input", "x%d=%s" % (i, os.path.join(tmp, "x%d.npy" % i))]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        fail("kiln run %s: exit %d\n%s" % (path, r.returncode, r.stderr))
        return None
    return np.load(os.path.join(tmp, "y.npy"))


def kiln_text(path):
    out = os.path.join(tmp, "imported.kiln")
    r = subprocess.run([KILN, "import", path, "-o", out], capture_output=True, text=True)
    return open(out).read() if r.returncode == 0 else ""


def close(case, got, want, extra=""):
    scale = float(np.abs(want).max())
    if got is None:
        return False
    if got.shape != want.shape:
        fail("%s: shape %s, torch's %s" % (case, got.shape, want.shape))
        return False
    worst = float(np.abs(got - want).max())
    if worst > 1e-4 * max(scale, 1e-30):
        fail("%s: worst abs diff %.3g of max |torch| %.3g" % (case, worst, scale))
        return False
    print("ok %-34s %s worst %.2g of %.3g%s" % (case, list(want.shape), worst, scale, extra))
    return True


def torch_case(case, fn, inputs, opset, op_type, text_has=(), text_lacks=()):
    """fn exported at opset, its ONNX graph holding op_type; kiln's output against torch's."""
    path = os.path.join(tmp, case + ".onnx")
    names = ["x%d" % i for i in range(len(inputs))]
    with torch.no_grad():
        want = fn(*inputs).numpy()
        torch.onnx.export(Fn(fn), tuple(inputs), path, opset_version=opset, input_names=names, output_names=["y"])
    ops = {n.op_type for n in onnx.load(path).graph.node}
    if op_type not in ops:
        return fail("%s: torch exported %s, no %s" % (case, sorted(ops), op_type))
    text = kiln_text(path)
    for t in text_has:
        if t not in text:
            return fail("%s: the imported text lacks %r:\n%s" % (case, t, text))
    for t in text_lacks:
        if t in text:
            return fail("%s: the imported text has %r:\n%s" % (case, t, text))
    close(case, kiln_run(path, [x.numpy() for x in inputs]), want)


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def helper_model(case, nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    path = os.path.join(tmp, case + ".onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def expect_error(case, path, *needles):
    """kiln import must exit 1 naming the node, print every needle, and write nothing."""
    err, first = import_refused(KILN, path, os.path.join(tmp, case + ".kiln"), needles)
    if err:
        return fail("%s: %s" % (case, err))
    print("ok %-34s %s" % (case, first))


def randn(*shape):
    return torch.randn(*shape)


# ---- LayerNormalization ----
for case, shape, norm in (("ln_last", (2, 5, 16), 16), ("ln_two_axes", (3, 4, 6), [4, 6])):
    ln = torch.nn.LayerNorm(norm)
    with torch.no_grad():
        ln.weight.copy_(torch.rand_like(ln.weight) + 0.5)
        ln.bias.copy_(torch.randn_like(ln.bias))
    torch_case(case, ln, [randn(*shape) * 3 + 1], 17, "LayerNormalization", text_has=("= layer_norm(",))
# no bias: B absent (torch 1.13 cannot export elementwise_affine=False at opset 17: it leaves
# Scale empty, which ONNX's checker refuses)
w8 = torch.rand(8) + 0.5
torch_case("ln_no_bias", lambda x: F.layer_norm(x, (8,), w8, None, 1e-3), [randn(2, 7, 8)], 17, "LayerNormalization")


def ln_numpy(x, scale, bias, axis, eps):
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    return (x - mean) * inv * scale + (0 if bias is None else bias), mean, inv


x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
scale = (rng.random((3, 4, 5)) + 0.5).astype(np.float32)
node = helper.make_node("LayerNormalization", ["x0", "scale"], ["y", "mean", "inv"], name="ln", axis=1, epsilon=1e-3)
path = helper_model("ln_stats", [node], [vi("x0", [2, 3, 4, 5])],
                    [vi("y", [2, 3, 4, 5]), vi("mean", [2, 1, 1, 1]), vi("inv", [2, 1, 1, 1])], [numpy_helper.from_array(scale, "scale")])
want = ln_numpy(x.astype(np.float64), scale, None, 1, 1e-3)
np.save(os.path.join(tmp, "x0.npy"), x)
r = subprocess.run([KILN, "run", path, "--input", "x0=" + os.path.join(tmp, "x0.npy")] +
                   [a for o in ("y", "mean", "inv") for a in ("--output", "%s=%s" % (o, os.path.join(tmp, o + ".npy")))],
                   capture_output=True, text=True)
if r.returncode != 0:
    fail("ln_stats: kiln run: exit %d\n%s" % (r.returncode, r.stderr))
else:
    for o, w in zip(("y", "mean", "inv"), want):
        close("ln_stats (%s)" % o, np.load(os.path.join(tmp, o + ".npy")), w.astype(np.float32))

bad = helper.make_node("LayerNormalization", ["x0", "s5"], ["y"], name="ln_bcast", axis=1)
expect_error("ln_broadcast", helper_model("ln_broadcast", [bad], [vi("x0", [2, 3, 4, 5])], [vi("y", [2, 3, 4, 5])],
                                          [numpy_helper.from_array(np.ones(5, np.float32), "s5")]),
             "node 'ln_bcast' (LayerNormalization)", "not supported")

# ---- Einsum ----
einsums = [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], ()), ("bhid,bhjd->bhij", [(2, 3, 5, 8), (2, 3, 6, 8)], ("transpose_b",)),
           ("bhij,bhjd->bhid", [(2, 3, 5, 6), (2, 3, 6, 8)], ()), ("ij,jk->ik", [(3, 4), (4, 5)], ()),
           ("ij->ji", [(3, 4)], ()), ("bij->bji", [(2, 3, 4)], ()), ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)], ("transpose_b",)),
           ("bji,bjk->bik", [(2, 4, 3), (2, 4, 5)], ("transpose_a",)), ("...ij,...jk->...ik", [(2, 3, 3, 4), (2, 3, 4, 5)], ()),
           ("bqhd,bkhd->bhqk", [(2, 5, 3, 4), (2, 6, 3, 4)], ()), ("i,j->ij", [(3,), (4,)], ()),
           ("bi,bi->b", [(3, 5), (3, 5)], ()), ("bij->bi", [(2, 3, 4)], ()), ("ij,kj", [(3, 4), (5, 4)], ())]
for eq, shapes, has in einsums:
    case = "einsum " + eq
    torch_case(case.replace(" ", "_").replace(",", "_").replace(">", "").replace(".", "E"),
               lambda *xs, eq=eq: torch.einsum(eq, *xs), [randn(*s) for s in shapes], 12, "Einsum", text_has=has,
               text_lacks=("= transpose(",) if has else ())

diag = helper.make_node("Einsum", ["x0"], ["y"], name="ein_diag", equation="ii->i")
expect_error("einsum_diagonal", helper_model("einsum_diagonal", [diag], [vi("x0", [3, 3])], [vi("y", [3])], opset=12),
             "node 'ein_diag' (Einsum)", "Einsum 'ii->i'", "diagonal", "not supported")
three = helper.make_node("Einsum", ["x0", "x1", "x2"], ["y"], name="ein_3", equation="ij,jk,kl->il")
expect_error("einsum_three", helper_model("einsum_three", [three], [vi("x0", [2, 3]), vi("x1", [3, 4]), vi("x2", [4, 5])],
                                          [vi("y", [2, 5])], opset=12),
             "node 'ein_3' (Einsum)", "Einsum 'ij,jk,kl->il'", "not supported")

# ---- Resize / Upsample ----
img = randn(2, 3, 5, 6)
for opset in (9, 10, 11, 13):
    op = "Upsample" if opset == 9 else "Resize"
    torch_case("nearest_x2_opset%d" % opset, torch.nn.Upsample(scale_factor=2, mode="nearest"), [img], opset, op,
               text_has=("= broadcast_to(",), text_lacks=("= matmul(",))
for opset in (11, 13):
    torch_case("nearest_2x3_opset%d" % opset, lambda x: F.interpolate(x, scale_factor=(2, 3), mode="nearest"), [img], opset, "Resize")
    torch_case("nearest_size_opset%d" % opset, lambda x: F.interpolate(x, size=(7, 4), mode="nearest"), [img], opset, "Resize")
    for ac in (False, True):
        tag = "ac" if ac else "hp"
        torch_case("bilinear_x2_%s_opset%d" % (tag, opset), lambda x, ac=ac: F.interpolate(x, scale_factor=2, mode="bilinear",
                                                                                           align_corners=ac), [img], opset, "Resize")
        torch_case("bilinear_size_%s_opset%d" % (tag, opset), lambda x, ac=ac: F.interpolate(x, size=(9, 4), mode="bilinear",
                                                                                             align_corners=ac), [img], opset, "Resize")
        torch_case("bilinear_half_%s_opset%d" % (tag, opset), lambda x, ac=ac: F.interpolate(x, scale_factor=0.5, mode="bilinear",
                                                                                             align_corners=ac), [randn(1, 2, 8, 6)],
                   opset, "Resize")
    torch_case("linear_ncw_opset%d" % opset, lambda x: F.interpolate(x, scale_factor=3, mode="linear"), [randn(2, 3, 7)], opset, "Resize")

cubic_path = os.path.join(tmp, "bicubic.onnx")
torch.onnx.export(Fn(lambda x: F.interpolate(x, scale_factor=2, mode="bicubic")), (img,), cubic_path, opset_version=13,
                  input_names=["x0"], output_names=["y"])
expect_error("resize_cubic", cubic_path, "(Resize)", "attribute 'mode'", "not supported")
scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
roi = numpy_helper.from_array(np.array([0, 0, 0.2, 0.2, 1, 1, 0.8, 0.8], np.float32), "roi")
crop = helper.make_node("Resize", ["x0", "roi", "scales"], ["y"], name="rs_crop", mode="linear",
                        coordinate_transformation_mode="tf_crop_and_resize")
expect_error("resize_crop", helper_model("resize_crop", [crop], [vi("x0", [1, 1, 4, 4])], [vi("y", [1, 1, 8, 8])], [roi, scales],
                                         opset=13),
             "node 'rs_crop' (Resize)", "coordinate_transformation_mode", "not supported")

shutil.rmtree(tmp)
print("onnx composed: %s" % ("passed" if not failed else "%d failure(s)" % failed))
sys.exit(1 if failed else 0)
