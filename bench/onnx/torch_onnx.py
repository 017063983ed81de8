"""torch_onnx.py — the PyTorch side of bench/onnx/run.sh: torchvision models built with seed 0
(the weights Kiln compiles from the export are the same), eval mode.

Usage: torch_onnx.py export MODEL BATCH OUT.onnx     (opset 13, input "input", output "output")
       torch_onnx.py time THREADS SECS MODEL BATCH   (eager predict under torch.no_grad())
`time` prints a TSV line in kiln_bench_models' format: model, predict, batch, samples/s,
iterations per run (the best of 5 runs of at least SECS seconds).
"""
import sys
import time
import warnings

import torch
import torchvision

warnings.filterwarnings("ignore")


def build(name, batch):
    torch.manual_seed(0)
    return getattr(torchvision.models, name)().eval(), torch.randn(int(batch), 3, 224, 224)


def export(name, batch, out):
    m, x = build(name, batch)
    torch.onnx.export(m, x, out, opset_version=13, input_names=["input"], output_names=["output"])


def timed(threads, secs, name, batch):
    torch.set_num_threads(int(threads))
    m, x = build(name, batch)
    best, iters = float("inf"), 1
    with torch.no_grad():
        m(x)
        for _ in range(5):
            n, t0 = 0, time.perf_counter()
            while True:
                m(x)
                n += 1
                el = time.perf_counter() - t0
                if el >= float(secs):
                    break
            if el / n < best:
                best, iters = el / n, n
    print("%s\tpredict\t%s\t%.1f\t%d" % (name, batch, int(batch) / best, iters))


if sys.argv[1] == "export":
    export(*sys.argv[2:5])
else:
    timed(*sys.argv[2:6])
