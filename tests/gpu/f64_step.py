"""f64_step.py — a third, exact opinion on one train step of examples/resnet.kiln: which of two
.so files (gpu_compare's a: the CPU reference, b: the one under test) is off when they disagree.

usage: /usr/bin/python3 tests/gpu/f64_step.py [--torch-device DEV] [--tol X] KEEPDIR [KEEPDIR...]
KEEPDIR is what `gpu_compare A.so B.so --steps 1 --keep KEEPDIR` left: the train inputs
(data.npy, label.npy), the weights at create (init.safetensors) and each side's weights after the
first step (a1.safetensors, b1.safetensors). The PyTorch twin of the ResNet
(bench/models/torch_models.py, with its optimizer) starts from init in float64 on the CPU, takes
one train step as the SPEC says (F.cross_entropy, torch.optim.SGD, batch_norm with momentum 0.9
in Kiln's terms)
and each tensor of a1 and b1 is printed as max|side - f64| / max|f64 - init| (the first step's
update), the measure gpu_compare's --tol-step limits. float64 rounding is ~1e-16 relative, so
whichever side is far from it is the one whose arithmetic (or kernel) differs. With
--torch-device (cuda) a third column is PyTorch's own float32 step on that device (cuDNN,
TF32 off, deterministic algorithms): how far a framework's float32 lands from float64 there.
Needs torch.
Tensors more than 1% off are marked "<-". Exits 0 when both sides are within --tol (default
0.2) of every update, 1 otherwise, 77 without torch: a relu input within float32 rounding of 0
may fall on the other side than in float64 and move one filter by several percent of its update
(up to 8.2% measured; tests/gpu/run.sh's model_tolerance), while a wrong gradient is off by all
of it.
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:   # the SKIP a test runner shows
    print("SKIP: f64_step.py needs numpy and torch (python3-torch): %s" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))   # the repository's tests/gpu, or gpu_check's DIR/tests
sys.path[:0] = [os.path.join(HERE, "..", "..", "bench", "models"), os.path.join(HERE, "..", "support"),
                os.path.join(HERE, "..", "bench"), HERE]
import torch_models  # noqa: E402
from st_read import read_safetensors  # noqa: E402

STAGES = {"s1a": "body.0", "s1b": "body.1", "s2a": "body.2", "s2b": "body.3", "s3a": "body.4", "s3b": "body.5"}
BN = {"gamma": "1.weight", "beta": "1.bias", "moving_mean": "1.running_mean", "moving_var": "1.running_var"}


def torch_name(kiln):
    """stem.c.weight -> stem.0.weight, s2b.a.gamma -> body.3.a.1.weight, logits.* -> fc.*"""
    parts = kiln.split(".")
    if parts[0] == "logits":
        return "fc." + parts[1]
    head = [STAGES.get(parts[0], parts[0])] + parts[1:-1]
    last = parts[-1]
    if head[-1] == "c":            # conv_bn's convolution
        return ".".join(head[:-1] + ["0", last])
    return ".".join(head + [BN[last]])


def step_torch(init, data, label, dtype=torch.float64, device="cpu"):
    """One train step of the twin from init, in dtype on device; the weights after it by Kiln name."""
    net, opt, _, _ = torch_models.resnet()   # the twin and its optimizer, as bench/models has them
    net.to(device=device, dtype=dtype)         # in place: the optimizer keeps the parameters
    state = net.state_dict()
    for k, v in init.items():
        state[torch_name(k)].copy_(torch.from_numpy(v.astype(np.float64)).to(dtype))
    net.train()
    x = torch.from_numpy(data.astype(np.float64)).to(device=device, dtype=dtype)
    loss = F.cross_entropy(net(x), torch.from_numpy(label.astype(np.int64)).to(device))
    opt.zero_grad()
    loss.backward()
    opt.step()
    after = net.state_dict()
    return {k: after[torch_name(k)].double().cpu().numpy() for k in init}, float(loss.detach())


def judge(keep, device):
    init = read_safetensors(os.path.join(keep, "init.safetensors"))
    data, label = np.load(os.path.join(keep, "data.npy")), np.load(os.path.join(keep, "label.npy"))
    ref, loss = step_torch(init, data, label)
    sides = [read_safetensors(os.path.join(keep, s + "1.safetensors")) for s in "ab"]
    if device:
        sides.append(step_torch(init, data, label, torch.float32, device)[0])
    print("== %s: float64 loss %.9f; max|side - f64| / max|f64 - init| per tensor" % (keep, loss))
    print("%-22s %10s %10s %10s%s" % ("tensor", "moved", "a (ref)", "b", " %10s" % ("torch " + device) if device else ""))
    worst = 0.0
    for k, r in ref.items():
        moved = np.abs(r - init[k]).max()
        rel = [np.abs(s[k].astype(np.float64) - r).max() / moved if moved > 0 else 0.0 for s in sides]
        worst = max(worst, *rel[:2])
        mark = "  <-" if max(rel) > 0.01 else ""
        print("%-22s %10.3g %s%s" % (k, moved, " ".join("%10.3g" % x for x in rel), mark))
    return worst


def main():
    args, device, tol = sys.argv[1:], None, 0.2
    while len(args) > 1 and args[0] in ("--torch-device", "--tol"):
        if args[0] == "--tol":
            tol = float(args[1])
        else:
            device = args[1]
        args = args[2:]
    if device and device.startswith("cuda") and not torch.cuda.is_available():
        print("note: this torch has no CUDA device; no torch %s column" % device)
        device = None
    if device:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if not args or args[0].startswith("-"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    worst = max(judge(k, device) for k in args)
    print("worst: %.3g of an update" % worst)
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
