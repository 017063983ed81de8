#!/usr/bin/python3
"""training.py -- a model exported by torch in training mode (BatchNormalization kept, with
its running statistics), imported with kiln import --train "softmax_cross_entropy sgd(...)",
compiled, and one train_step compared with one torch.optim.SGD step of the original model:
the loss, every weight and both running statistics (issue 11, point 5); the same for a model
with buffers (register_buffer) and float constants, which import as consts and stay as they
were; a model with Dropout, which must import as a dropout op and train (its masks differ
from torch's); kiln train on the .onnx itself with a whole train statement in --train; and
--train "mse_loss ..." on a model whose output is not scores.

    training.py KILN
The .so is driven through its C ABI with ctypes (NAME_create, NAME_load of the imported
safetensors, NAME_train_step, NAME_save) in a child process that does not import torch
(`training.py --step ...`): in the sanitizer build the .so needs the ASan runtime preloaded,
which the child gets (LD_PRELOAD, leak checks off for Python's own allocations).
Exit 77 (skipped, saying why) without torch or onnx.
"""
import ctypes
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:
    print("onnx training: skipped: %s (apt-get install python3-numpy)" % e)
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from st_read import read_safetensors  # noqa: E402

if sys.argv[1:2] == ["--step"]:
    from so_step import step  # noqa: E402
    sys.exit(step(*sys.argv[2:7]))

try:
    import torch
    import onnx  # noqa: F401
except ImportError as e:
    print("onnx training: skipped: %s (apt-get install python3-torch python3-onnx)" % e)
    sys.exit(77)

KILN = sys.argv[1]
failed = 0


def fail(msg):
    global failed
    failed += 1
    print("FAIL:", msg)


def child_env(so):
    """The environment of the child: a .so built with the sanitizers needs their runtimes first."""
    env = dict(os.environ)
    ldd = subprocess.run(["ldd", so], capture_output=True, text=True).stdout
    pre = [ln.split("=>")[1].split()[0] for ln in ldd.splitlines() if "=>" in ln and ("libasan" in ln or "libubsan" in ln)]
    if pre:
        env["LD_PRELOAD"] = " ".join(pre)
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    return env


def main(tmp):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 5))
    x = torch.randn(4, 3, 8, 8)
    label = torch.tensor([0, 3, 1, 4], dtype=torch.int64)
    path = os.path.join(tmp, "net.onnx")
    torch.onnx.export(net, x, path, opset_version=13, input_names=["x"], output_names=["scores"],
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    net.train()                                   # export leaves the module as it found it
    text, so = os.path.join(tmp, "net.kiln"), os.path.join(tmp, "libnet.so")
    r = subprocess.run([KILN, "import", path, "-o", text, "--map", "--train", "softmax_cross_entropy sgd(lr=0.1, momentum=0.9)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return fail("kiln import --train: exit %d\n%s" % (r.returncode, r.stderr))
    names = dict(line.split(" -> ") for line in r.stdout.splitlines())
    r = subprocess.run([KILN, "compile", text, "-o", so], capture_output=True, text=True)
    if r.returncode != 0:
        return fail("kiln compile: exit %d\n%s" % (r.returncode, r.stderr))
    xin, lin, after = os.path.join(tmp, "x.npy"), os.path.join(tmp, "label.npy"), os.path.join(tmp, "after.safetensors")
    np.save(xin, x.numpy())
    np.save(lin, label.numpy().astype(np.int32))
    r = subprocess.run([sys.executable, __file__, "--step", so, xin, lin, os.path.join(tmp, "net.safetensors"), after],
                       capture_output=True, text=True, env=child_env(so))
    if r.returncode != 0:
        return fail("the .so's load, train_step or save failed (exit %d)\n%s" % (r.returncode, r.stderr[-1500:]))
    loss = ctypes.c_float(float(r.stdout.strip()))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    ref_loss = torch.nn.functional.cross_entropy(net(x), label)
    ref_loss.backward()
    opt.step()
    got = read_safetensors(after)
    print("loss: kiln %.7g, torch %.7g" % (loss.value, ref_loss.item()))
    if abs(loss.value - ref_loss.item()) > 1e-5 * max(1.0, abs(ref_loss.item())):
        fail("the loss differs")
    worst = 0.0
    for tname, want in net.state_dict().items():
        if tname.endswith("num_batches_tracked"):
            continue
        kname = names.get(tname, tname)
        if kname not in got:
            fail("%s (%s) is not among the weights kiln saved" % (tname, kname))
            continue
        want = want.numpy()
        diff = float(np.abs(got[kname] - want).max())
        worst = max(worst, diff)
        if not np.allclose(got[kname], want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max()))):
            fail("%s after one step differs from torch's (worst abs diff %.3g)" % (tname, diff))
    print("weights and running statistics after one SGD step: worst abs diff %.3g" % worst)


def compile_and_step(tag, text, so, x, second, weights, after):
    """Compiles the imported text and runs one train_step of it in the child on x and the
    second input (labels or targets), from weights, saved to after: the loss, or None (failed)."""
    r = subprocess.run([KILN, "compile", text, "-o", so], capture_output=True, text=True)
    if r.returncode != 0:
        return fail("%s: kiln compile: exit %d\n%s" % (tag, r.returncode, r.stderr))
    xin, sin = after + ".x.npy", after + ".second.npy"
    np.save(xin, x)
    np.save(sin, second)
    r = subprocess.run([sys.executable, __file__, "--step", so, xin, sin, weights, after],
                       capture_output=True, text=True, env=child_env(so))
    if r.returncode != 0:
        return fail("%s: the .so's load, train_step or save failed (exit %d)\n%s" % (tag, r.returncode, r.stderr[-1500:]))
    return float(r.stdout.strip())


def torch_step(tag, net, loss_of, loss):
    """One torch.optim.SGD step (lr 0.1, momentum 0.9) of net on loss_of(net), its loss checked
    against kiln's; torch's loss."""
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    ref = loss_of(net)
    ref.backward()
    opt.step()
    if abs(loss - ref.item()) > 1e-5 * max(1.0, abs(ref.item())):
        fail("%s: the loss differs: kiln %.7g, torch %.7g" % (tag, loss, ref.item()))
    return ref.item()


def check_weights(tag, net, names, after, exact=(), atol=1e-5, steps="one step"):
    """Every tensor of net's state_dict against kiln's saved one after `steps` (rtol 1e-4, atol
    `atol` of its magnitude); those named in exact bit for bit. The worst abs diff."""
    got, worst = read_safetensors(after), 0.0
    for tname, want in net.state_dict().items():
        if tname.endswith("num_batches_tracked"):
            continue
        kname, want = names.get(tname, tname), want.numpy()
        if kname not in got:
            fail("%s: %s (%s) is not among the weights kiln saved" % (tag, tname, kname))
            continue
        diff = float(np.abs(got[kname] - want).max())
        worst = max(worst, diff)
        if (tname in exact and not np.array_equal(got[kname], want)) or \
                not np.allclose(got[kname], want, rtol=1e-4, atol=atol * max(1.0, float(np.abs(want).max()))):
            fail("%s: %s after %s differs from torch's (worst abs diff %.3g)" % (tag, tname, steps, diff))
    return worst


class Buffers(torch.nn.Module):
    """Buffers and constants beside parameters: a fixed scale and a positional table
    (register_buffer), float constants in the code, a Linear on a rank-3 input (MatMul of the
    transposed weight, then Add of the bias) and a BatchNorm."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
        self.register_buffer("scale", torch.rand(1, 4, 1, 1) + 0.5)
        self.register_buffer("pe", torch.randn(32, 8))
        self.lin, self.fc = torch.nn.Linear(8, 8), torch.nn.Linear(256, 5)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x))) * self.scale
        h = h * 0.5 + torch.tensor([1.0, -2.0, 0.5, 0.25]).view(1, 4, 1, 1)
        z = self.lin(h.reshape(x.shape[0], 32, 8) + self.pe)
        return self.fc(z.reshape(x.shape[0], 256))


def buffers(tmp):
    """Initializers that torch does not train (its buffers) import as consts, float Constants
    too: one train_step is one torch.optim.SGD step with momentum, the buffers unchanged."""
    torch.manual_seed(0)
    net = Buffers()
    x, label = torch.randn(4, 3, 8, 8), torch.tensor([0, 3, 1, 4], dtype=torch.int64)
    os.mkdir(os.path.join(tmp, "buffers"))
    path, text, so = (os.path.join(tmp, "buffers", f) for f in ("net.onnx", "net.kiln", "libnet.so"))
    torch.onnx.export(net, x, path, opset_version=13, input_names=["x"], output_names=["scores"],
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    net.train()
    r = subprocess.run([KILN, "import", path, "-o", text, "--map", "--train", "softmax_cross_entropy sgd(lr=0.1, momentum=0.9)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return fail("buffers: kiln import --train: exit %d\n%s" % (r.returncode, r.stderr))
    names = dict(line.split(" -> ") for line in r.stdout.splitlines())
    body = open(text).read()
    for want in ("const scale : f32[1, 4, 1, 1]", "const pe : f32[32, 8]", "param lin.weight : f32[8, 8]", "param lin.bias : f32[8]"):
        if want not in body:
            return fail("buffers: the import lacks `%s`:\n%s" % (want, body))
    if len([ln for ln in body.splitlines() if ln.startswith("  const ")]) != 3:
        return fail("buffers: want three consts (scale, pe and the Constant [1, -2, 0.5, 0.25]):\n%s" % body)
    loss = compile_and_step("buffers", text, so, x.numpy(), label.numpy().astype(np.int32),
                            os.path.join(tmp, "buffers", "net.safetensors"), os.path.join(tmp, "buffers", "after.safetensors"))
    if loss is None:
        return
    ref = torch_step("buffers", net, lambda n: torch.nn.functional.cross_entropy(n(x), label), loss)
    # the buffers: the very bits they started with
    worst = check_weights("buffers", net, names, os.path.join(tmp, "buffers", "after.safetensors"), exact=("scale", "pe"))
    print("buffers: scale, pe and a Constant imported as consts; one SGD step: loss kiln %.7g, torch %.7g, "
          "weights worst abs diff %.3g, buffers unchanged" % (loss, ref, worst))


def dropout(tmp):
    """Dropout kept by a training-mode export (with its training_mode input and mask output)
    imports as a dropout op, and the model trains: its masks are Kiln's own draws, so one step
    is compared with torch's in kind (a finite loss near torch's), not bit for bit."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Dropout(0.25), torch.nn.Linear(8 * 8 * 8, 5))
    x, label = torch.randn(4, 3, 8, 8), torch.tensor([0, 3, 1, 4], dtype=torch.int64)
    os.mkdir(os.path.join(tmp, "dropout"))
    path, text, so = (os.path.join(tmp, "dropout", f) for f in ("net.onnx", "net.kiln", "libnet.so"))
    torch.onnx.export(net, x, path, opset_version=13, input_names=["x"], output_names=["scores"],
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    r = subprocess.run([KILN, "import", path, "-o", text, "--train", "softmax_cross_entropy sgd(lr=0.1)"], capture_output=True, text=True)
    if r.returncode != 0:
        return fail("dropout: kiln import --train: exit %d\n%s" % (r.returncode, r.stderr))
    body = open(text).read()
    if "= dropout(" not in body or "p=0.25" not in body or "= batch_norm(" not in body:
        return fail("dropout: the import lacks a dropout(p=0.25) or batch_norm node:\n%s" % body)
    r = subprocess.run([KILN, "compile", text, "-o", so], capture_output=True, text=True)
    if r.returncode != 0:
        return fail("dropout: kiln compile: exit %d\n%s" % (r.returncode, r.stderr))
    xin, lin = os.path.join(tmp, "dropout", "x.npy"), os.path.join(tmp, "dropout", "label.npy")
    np.save(xin, x.numpy())
    np.save(lin, label.numpy().astype(np.int32))
    r = subprocess.run([sys.executable, __file__, "--step", so, xin, lin, os.path.join(tmp, "dropout", "net.safetensors"),
                        os.path.join(tmp, "dropout", "after.safetensors")], capture_output=True, text=True, env=child_env(so))
    ref = torch.nn.functional.cross_entropy(net.train()(x), label).item()
    # the same step with the dropout left out: a loss equal to it would mean no mask was drawn
    none = torch.nn.functional.cross_entropy(net[5](net[:4](x)), label).item()
    loss = float(r.stdout.strip() or "nan") if r.returncode == 0 else float("nan")
    if not abs(loss - ref) < 0.5 * max(1.0, ref) or abs(loss - none) < 1e-4:
        return fail("dropout: train_step exit %d, loss %r (torch with its own masks: %.4g, without dropout %.4g)\n%s" %
                    (r.returncode, loss, ref, none, r.stderr[-800:]))
    print("dropout: imported as dropout(p=0.25); one train_step: loss kiln %.4g, torch %.4g (each its own masks), "
          "%.4g without dropout" % (loss, ref, none))


CLAUSE = "softmax_cross_entropy adamw(lr=0.02, wd=0.3) schedule step(step_size=1, gamma=0.5) clip_norm=0.5 wd_exclude=bias,norm"


def clause(tmp):
    """kiln train on the .onnx itself, its --train carrying the rest of a train statement
    (AdamW, a step schedule, clip_norm, wd_exclude): three steps from the ONNX weights, saved,
    against torch's AdamW with the biases and BatchNorm's weights in a group without decay,
    StepLR and clip_grad_norm_. Each epoch is one batch of the four examples (kiln train
    shuffles them; a mean over the rows does not care, but for rounding)."""
    torch.manual_seed(0)
    # no bias before the BatchNorm: its gradient would be rounding noise, which Adam scales to whole steps
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 5))
    x, label = torch.randn(4, 3, 8, 8), torch.tensor([0, 3, 1, 4], dtype=torch.int64)
    d = os.path.join(tmp, "clause")
    os.mkdir(d)
    path, xin, lin, after = (os.path.join(d, f) for f in ("net.onnx", "x.npy", "label.npy", "after.safetensors"))
    torch.onnx.export(net, x, path, opset_version=13, input_names=["x"], output_names=["scores"],
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    net.train()
    np.save(xin, x.numpy())
    np.save(lin, label.numpy().astype(np.int32))
    r = subprocess.run([KILN, "import", path, "-o", os.path.join(d, "net.kiln"), "--map", "--train", CLAUSE], capture_output=True, text=True)
    if r.returncode != 0:
        return fail("clause: kiln import --train: exit %d\n%s" % (r.returncode, r.stderr))
    names = dict(line.split(" -> ") for line in r.stdout.splitlines())
    line = [ln for ln in open(os.path.join(d, "net.kiln")).read().splitlines() if ln.startswith("  train ")]
    if not line or "schedule step(step_size=1, gamma=0.5) clip_norm=0.5 wd_exclude=bias,norm" not in line[0]:
        return fail("clause: the imported train statement lacks the schedule, clip_norm or wd_exclude: %s" % line)
    r = subprocess.run([KILN, "train", path, "--train", CLAUSE, "--data", "x=%s,label=%s" % (xin, lin), "--epochs", "3",
                        "--save", after], capture_output=True, text=True)
    if r.returncode != 0:
        return fail("clause: kiln train on the .onnx: exit %d\n%s" % (r.returncode, r.stderr[-1500:]))
    skip = {"1.weight", "1.bias", "5.bias"}
    groups = [{"params": [p for k, p in net.named_parameters() if k not in skip], "weight_decay": 0.3},
              {"params": [p for k, p in net.named_parameters() if k in skip], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=0.02)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), label).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        opt.step()
        sched.step()
    worst = check_weights("clause", net, names, after, atol=1e-4, steps="three steps")
    print("clause: kiln train on the .onnx with `%s`: three steps, weights worst abs diff %.3g" % (CLAUSE, worst))


def mse(tmp):
    """--train "mse_loss ...": a model whose output is not scores (an encoder's [batch, seq, d])
    gets an f32 input `target` of the output's shape and F.mse_loss; one train_step is one
    torch.optim.SGD step with momentum. The same model with softmax_cross_entropy is refused,
    naming mse_loss."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    x, target = torch.randn(4, 6, 8), torch.randn(4, 6, 8)
    os.mkdir(os.path.join(tmp, "mse"))
    path, text, so = (os.path.join(tmp, "mse", f) for f in ("net.onnx", "net.kiln", "libnet.so"))
    torch.onnx.export(net, x, path, opset_version=13, input_names=["x"], output_names=["y"],
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    net.train()
    r = subprocess.run([KILN, "import", path, "-o", text, "--train", "softmax_cross_entropy sgd(lr=0.1)"], capture_output=True, text=True)
    if r.returncode == 0 or "mse_loss" not in r.stderr:
        return fail("mse: softmax_cross_entropy on a rank-3 output: want a refusal naming mse_loss, got exit %d\n%s" % (r.returncode, r.stderr))
    r = subprocess.run([KILN, "import", path, "-o", text, "--map", "--train", "mse_loss sgd(lr=0.1, momentum=0.9)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return fail("mse: kiln import --train: exit %d\n%s" % (r.returncode, r.stderr))
    names = dict(line.split(" -> ") for line in r.stdout.splitlines())
    if "input target : f32[4, 6, 8]" not in open(text).read():
        return fail("mse: the import lacks `input target : f32[4, 6, 8]`:\n%s" % open(text).read())
    loss = compile_and_step("mse", text, so, x.numpy(), target.numpy(), os.path.join(tmp, "mse", "net.safetensors"),
                            os.path.join(tmp, "mse", "after.safetensors"))
    if loss is None:
        return
    ref = torch_step("mse", net, lambda n: torch.nn.functional.mse_loss(n(x), target), loss)
    worst = check_weights("mse", net, names, os.path.join(tmp, "mse", "after.safetensors"))
    print("mse: --train \"mse_loss ...\" on a [4, 6, 8] output; one SGD step: loss kiln %.7g, torch %.7g, "
          "weights worst abs diff %.3g" % (loss, ref, worst))


with tempfile.TemporaryDirectory(prefix="kiln-onnx-train-") as tmp:
    main(tmp)
    buffers(tmp)
    dropout(tmp)
    clause(tmp)
    mse(tmp)
print("onnx training: %s" % ("passed" if not failed else "%d failure(s)" % failed))
sys.exit(1 if failed else 0)
