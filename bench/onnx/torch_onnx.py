"""torch_onnx.py — the PyTorch side of bench/onnx/run.sh: the bench models built with seed 0 (the
weights Kiln and ONNX Runtime read from the export are the same), their batch_norm running
statistics calibrated, eval mode (tests/support/onnx_models.py builds them).

Usage: torch_onnx.py export MODEL BATCH OUT.onnx [dynamic]
                                                    (opset 13, input "input", output "output";
                                                    dynamic: their first axis the dynamic "batch",
                                                    for -D batch=LO..HI, bench/bounded/run.sh)
       torch_onnx.py time THREADS SECS MODEL BATCH   (eager predict under torch.no_grad())
       torch_onnx.py models                          (the default model list, one line)
MODEL is one of tests/support/onnx_models.py's: a torchvision classifier's name, or "bert".
`time` prints a TSV line in kiln_bench_models' format: model, predict, batch, samples/s,
iterations per run (the best of 5 runs of at least SECS seconds).
"""
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "support"))
import onnx_models  # noqa: E402

warnings.filterwarnings("ignore")


def build(name, batch):
    return onnx_models.build(name), onnx_models.example(name, batch)


def export(name, batch, out, dynamic=None):
    m, x = build(name, batch)
    axes = {"input": {0: "batch"}, "output": {0: "batch"}} if dynamic == "dynamic" else None
    torch.onnx.export(m, x, out, opset_version=13, input_names=["input"], output_names=["output"], dynamic_axes=axes)


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
    export(*sys.argv[2:6])
elif sys.argv[1] == "models":
    print(" ".join(onnx_models.BENCH))
else:
    timed(*sys.argv[2:6])
