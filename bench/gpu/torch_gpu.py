"""torch_gpu.py — the PyTorch side of bench/gpu: the examples' twins from bench/models/torch_models.py
(same architectures, initialisation and optimizers) timed on a CUDA GPU at the .kiln files' own
batch, as bench/models/bench_models.c times Kiln's CUDA .so files.

Usage: torch_gpu.py [seconds] [model...]   (default 0.5 s per timed run, every model)
Environment: TORCH_DEVICE (default cuda; "cpu" only to try the script where there is no GPU).
Prints one JSON line per model and mode ({"side": "torch", "model", "mode", "batch",
"samples_per_s", ...}), which bench/gpu/run.sh puts beside Kiln's figures. Modes:
  train, predict          host tensors in, host results out, as Kiln's ABI does (copy in, run,
                          copy out and wait): the like-for-like comparison
  train_dev, predict_dev  inputs already on the GPU, the result left there (the GPU's own speed)
Exits 77 with "SKIP: ..." when there is no CUDA device. Timing: torch.cuda.synchronize() before
the clock is read at each end; warm-up (at least 3 calls and 0.2 s), iterations calibrated to
`seconds`, best of 3. TF32 is off (Kiln computes in full f32); cudnn.benchmark is on, as Kiln picks
its cuDNN algorithms once per shape at create.
"""
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "models")]  # torch_models.py: beside (gpu_check.sh's copy) or in bench/models
import torch_models  # noqa: E402

RUNS = 3


def best_per_call(fn, secs, sync):
    """Warm-up (at least 3 calls and 0.2 s), calibrate to secs per run, best of RUNS."""
    sync()
    t0, n = time.perf_counter(), 0
    while n < 3 or time.perf_counter() - t0 < 0.2:
        fn()
        n += 1
    sync()
    iters = max(2, math.ceil(secs / ((time.perf_counter() - t0) / n)))
    best = math.inf
    for _ in range(RUNS):
        sync()
        a = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        best = min(best, time.perf_counter() - a)
    return best / iters, iters


def bench(name, secs, dev):
    model, opt, inputs, classes = torch_models.MODELS[name]()
    model = model.to(dev)
    opt = type(opt)(model.parameters(), **opt.defaults)  # the same optimizer over the moved parameters
    batch = inputs[0].shape[0]
    label = torch.randint(0, classes, (batch,))
    host_in = [x.pin_memory() if dev.type == "cuda" else x for x in inputs + [label]]
    dev_in = [x.to(dev) for x in host_in]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def train_step(args):
        *xs, y = args
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(*xs), y)
        loss.backward()
        opt.step()
        return loss

    def predict(xs):
        with torch.no_grad():
            return torch.softmax(model(*xs), dim=1)

    modes = {
        "train": lambda: train_step([x.to(dev, non_blocking=True) for x in host_in]).item(),
        "train_dev": lambda: train_step(dev_in),
        "predict": lambda: predict([x.to(dev, non_blocking=True) for x in host_in[:-1]]).cpu(),
        "predict_dev": lambda: predict(dev_in[:-1]),
    }
    for mode, fn in modes.items():
        model.train(mode.startswith("train"))
        per, iters = best_per_call(fn, secs, sync)
        print(json.dumps({"side": "torch", "model": name, "mode": mode, "batch": batch,
                          "samples_per_s": round(batch / per, 1), "ms_per_call": round(1e3 * per, 4),
                          "iters": iters, "target": dev.type}), flush=True)


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
    dev = torch.device(os.environ.get("TORCH_DEVICE", "cuda"))
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device (torch %s, built for CUDA %s)" % (torch.__version__, torch.version.cuda))
        sys.exit(77)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(42)
    if dev.type == "cuda":
        print("# torch %s, CUDA %s, cuDNN %s, %s" % (torch.__version__, torch.version.cuda,
              torch.backends.cudnn.version(), torch.cuda.get_device_name(dev)), file=sys.stderr)
    for name in sys.argv[2:] or list(torch_models.MODELS):
        bench(name, secs, dev)


if __name__ == "__main__":
    main()
