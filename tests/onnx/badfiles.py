#!/usr/bin/python3
"""badfiles.py -- fuzz-style: truncated and bit-flipped copies of a real model (torchvision's
squeezenet1_1 exported by torch, opset 13) fed to kiln import. Every run must end with exit 0
(the damage was harmless: both output files written) or exit 1 with an error message and no
output file at all -- never a crash, a hang or a partial file.

    badfiles.py KILN [COUNT]      (COUNT bit-flipped copies, default 150; the seed is fixed)
Exit status: 0 passed, 1 a failure, 77 (skipped, with the reason) without torchvision or onnx.
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    import torchvision
    import onnx  # noqa: F401  (torch.onnx.export needs it)
except ImportError as e:
    print("onnx bad files: skipped: %s (apt-get install python3-torchvision python3-onnx)" % e)
    sys.exit(77)

KILN = sys.argv[1]
COUNT = int(sys.argv[2]) if len(sys.argv) > 2 else 150
failed = 0
stats = {0: 0, 1: 0}


def fail(msg):
    global failed
    failed += 1
    print("FAIL:", msg)


def check(tmp, data, what):
    path, out = os.path.join(tmp, "bad.onnx"), os.path.join(tmp, "out.kiln")
    with open(path, "wb") as f:
        f.write(data)
    try:
        r = subprocess.run([KILN, "import", path, "-o", out], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return fail("%s: kiln import hung (60 s)" % what)
    r.stderr = r.stderr.decode("utf-8", "replace")
    written = sorted(f for f in os.listdir(tmp) if f != "bad.onnx")
    if r.returncode == 0 and written == ["out.kiln", "out.safetensors"]:
        stats[0] += 1
    elif r.returncode == 1 and not written and "error:" in r.stderr:
        stats[1] += 1
    else:
        with open(os.path.join(tmp, "..", "kiln-badfile-%d.onnx" % os.getpid()), "wb") as f:
            f.write(data)
        fail("%s: exit %d, files left %s, stderr %r" % (what, r.returncode, written, r.stderr[-600:]))
    for f in written:
        os.remove(os.path.join(tmp, f))


with tempfile.TemporaryDirectory(prefix="kiln-onnx-bad-") as tmp:
    torch.manual_seed(0)
    model = torchvision.models.squeezenet1_1().eval()
    src = os.path.join(tmp, "good.onnx")
    torch.onnx.export(model, torch.randn(1, 3, 224, 224), src, opset_version=13, input_names=["input"])
    with open(src, "rb") as f:
        good = f.read()
    os.remove(src)
    work = os.path.join(tmp, "w")
    os.mkdir(work)
    check(work, good, "the intact model")
    if stats[0] != 1:
        fail("the intact model does not import")
    rng = random.Random(11)
    cuts = sorted({0, 1, 2, 7, 100, len(good) - 1, len(good) // 2} | {rng.randrange(len(good)) for _ in range(30)})
    for n in cuts:
        check(work, good[:n], "truncated to %d of %d bytes" % (n, len(good)))
    # The graph's structure (nodes, names, attributes) sits in the first bytes and the
    # initializers' raw data after it; most flips aim at the structure, some anywhere.
    head = min(len(good), 40000)
    for i in range(COUNT):
        data = bytearray(good)
        for _ in range(rng.choice([1, 1, 2, 8])):
            at = rng.randrange(head) if i % 4 else rng.randrange(len(good))
            data[at] ^= 1 << rng.randrange(8)
        check(work, bytes(data), "bit-flipped copy %d" % i)
print("onnx bad files: %d runs, %d imported (harmless damage), %d refused with a message; %s" %
      (stats[0] + stats[1], stats[0], stats[1], "all passed" if not failed else "%d failure(s)" % failed))
sys.exit(1 if failed else 0)
