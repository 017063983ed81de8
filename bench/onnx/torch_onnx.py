"""torch_onnx.py — the PyTorch side of bench/onnx/run.sh: the bench models built with seed 0 (the
weights Kiln and ONNX Runtime read from the export are the same), their batch_norm running
statistics calibrated, eval mode (tests/support/onnx_models.py builds them).

Usage: torch_onnx.py export MODEL BATCH OUT.onnx [dynamic]
                                                    (opset 13, input "input", output "output";
                                                    dynamic: their first axis the dynamic "batch",
                                                    for -D batch=LO..HI, bench/bounded/run.sh)
       torch_onnx.py time THREADS SECS MODEL BATCH [DEVICE]
                                                    (eager predict under torch.no_grad(); DEVICE
                                                    cuda: on the GPU, the input copied in from
                                                    pinned host memory and the output out on
                                                    each call, as a CUDA .so's host entry
                                                    points do; TF32 off, cudnn.benchmark on)
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "tests", "support")]   # beside it: gpu_check.sh's copy
import onnx_models  # noqa: E402

warnings.filterwarnings("ignore")


def build(name, batch):
    return onnx_models.build(name), onnx_models.example(name, batch)


def export(name, batch, out, dynamic=None):
    m, x = build(name, batch)
    axes = {"input": {0: "batch"}, "output": {0: "batch"}} if dynamic == "dynamic" else None
    torch.onnx.export(m, x, out, opset_version=13, input_names=["input"], output_names=["output"], dynamic_axes=axes)


def timed(threads, secs, name, batch, device="cpu"):
    torch.set_num_threads(int(threads))
    m, x = build(name, batch)
    call, sync = m, lambda: None
    if device == "cuda":
        if not torch.cuda.is_available():
            print("SKIP: torch sees no CUDA device")
            sys.exit(77)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        m, x = m.cuda(), x.pin_memory()
        call, sync = (lambda x: m(x.cuda(non_blocking=True)).cpu()), torch.cuda.synchronize
    best, iters = float("inf"), 1
    with torch.no_grad():
        call(x)
        for _ in range(5):
            sync()
            n, t0 = 0, time.perf_counter()
            while True:
                call(x)
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
    timed(*sys.argv[2:7])
