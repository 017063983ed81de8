#!/usr/bin/python3
"""models.py -- torchvision models exported to ONNX by torch, compiled by kiln, compared with
torch (issue 11, "Real models").

    models.py KILN [--batch N] [MODEL...]
        (default: batch 1, resnet18 mobilenet_v2 mobilenet_v3_large regnet_x_400mf bert; any model of
        tests/support/onnx_models.py)

Each model is built by tests/support/onnx_models.py: a fixed seed, its BatchNorm statistics
calibrated on random batches (freshly initialised ones are 0/1, which would shrink a deep
network's outputs to nothing and make the folded convolution biases all zero, hiding any
mistake in how they are read), here also its BatchNorm affine parameters drawn at random; then
eval mode and an export with opset 13 at batch 1. mobilenet_v3_large has hard-swish (x *
hard_sigmoid(x), folded by the simplify pass) and squeeze-and-excitation blocks;
regnet_x_400mf has grouped 3x3 layers of 16 channels a group (the direct path's grouped
forward, whole blocks a group); bert has a
sequence-first attention whose projection is stored swapped at batch 1. Then:
  * kiln compile MODEL.onnx -o libMODEL.so, and kiln run libMODEL.so --input input_=x.npy with
    no other file: the .so carries the ONNX weights;
  * the same outputs must match torch's to 1e-4 relative (|kiln - torch| <= 1e-4 * max|torch|
    + 1e-4 * |torch|: the sums of a convolution differ in order, so the slack follows the
    tensor's scale); the worst absolute difference is printed;
  * for the first model also kiln import -> .kiln + .safetensors, and kiln run NAME.kiln
    --weights NAME.safetensors must give the same bits as the .so; and an export with a
    symbolic batch dimension run with -D batch=2.
Exit status: 0 passed, 1 a failure, 77 (skipped, with the reason) without torchvision or onnx.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision
    import onnx  # noqa: F401  (torch.onnx.export needs it)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import onnx_models
except ImportError as e:
    print("onnx models: skipped: %s (apt-get install python3-torchvision python3-onnx)" % e)
    sys.exit(77)

torch.set_num_threads(1)
KILN = sys.argv[1]
ARGS = sys.argv[2:]
BATCH = 1
if ARGS[:1] == ["--batch"]:
    BATCH, ARGS = int(ARGS[1]), ARGS[2:]
NAMES = ARGS or ["resnet18", "mobilenet_v2", "mobilenet_v3_large", "regnet_x_400mf", "bert"]
failed = 0


def fail(msg):
    global failed
    failed += 1
    print("FAIL:", msg)


def kiln(*args):
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True)
    if r.returncode != 0:
        fail("kiln %s: exit %d\n%s" % (" ".join(args), r.returncode, r.stderr[-2000:]))
    return r.returncode == 0


def random_affine(m):
    """Every BatchNorm2d's gamma and beta drawn at random, so a mistake in how the folded
    convolution reads them cannot hide behind 1 and 0."""
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            c = mod.num_features
            mod.weight.data = torch.rand(c, generator=g) + 0.5
            mod.bias.data = torch.randn(c, generator=g) * 0.1


def build(name):
    return onnx_models.build(name, prepare=random_affine)


def compare(name, got, ref, what):
    diff = np.abs(got - ref)
    bound = 1e-4 * np.abs(ref).max() + 1e-4 * np.abs(ref)
    worst = float(diff.max())
    ok = got.shape == ref.shape and bool((diff <= bound).all())
    print("%-14s %-28s worst abs diff %.3g (max |torch| %.3g) %s" % (name, what, worst, float(np.abs(ref).max()),
                                                                    "ok" if ok else "FAIL"))
    if not ok:
        fail("%s %s: outputs differ from torch beyond 1e-4 relative" % (name, what))


def run_model(tmp, name, first):
    m = build(name)
    x = onnx_models.example(name, BATCH)
    path = os.path.join(tmp, name + ".onnx")
    torch.onnx.export(m, x, path, opset_version=13, input_names=["input"], output_names=["output"])
    with torch.no_grad():
        ref = m(x).numpy()
    xin, so, y = os.path.join(tmp, "x.npy"), os.path.join(tmp, "lib%s.so" % name), os.path.join(tmp, "y.npy")
    np.save(xin, x.numpy())
    if not kiln("compile", path, "-o", so):
        return
    os.remove(path)                       # the .so alone must reproduce the model
    if kiln("run", so, "--input", "input_=" + xin, "--output", "output_=" + y):
        compare(name, np.load(y), ref, "compiled .so, batch %d" % BATCH)
    if first:
        check_import(tmp, m, x, name, so, xin, y)


def check_import(tmp, m, x, name, so, xin, y):
    path = os.path.join(tmp, name + ".onnx")
    torch.onnx.export(m, x, path, opset_version=13, input_names=["input"], output_names=["output"])
    text, y2 = os.path.join(tmp, name + ".kiln"), os.path.join(tmp, "y2.npy")
    if kiln("import", path, "-o", text) and \
       kiln("run", text, "--weights", os.path.join(tmp, name + ".safetensors"), "--input", "input_=" + xin,
            "--output", "output_=" + y2):
        if not np.array_equal(np.load(y), np.load(y2)):
            fail("%s: kiln import + kiln run NAME.kiln differs from the compiled .so" % name)
        else:
            print("%-14s %-28s same bits as the .so" % (name, "kiln import + run .kiln"))
    # A symbolic batch dimension, bound with -D at compile time.
    dyn = os.path.join(tmp, name + "_dyn.onnx")
    x2 = onnx_models.example(name, 2, seed=3)
    torch.onnx.export(m, x2, dyn, opset_version=13, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    with torch.no_grad():
        ref2 = m(x2).numpy()
    np.save(xin, x2.numpy())
    if kiln("run", dyn, "-D", "batch=2", "--input", "input=" + xin, "--output", "output=" + y):
        compare(name, np.load(y), ref2, "symbolic batch, -D batch=2")


with tempfile.TemporaryDirectory(prefix="kiln-onnx-") as tmp:
    for i, name in enumerate(NAMES):
        run_model(tmp, name, i == 0)
print("onnx models: %s" % ("all passed" if not failed else "%d failure(s)" % failed))
sys.exit(1 if failed else 0)
