#!/usr/bin/python3
"""torch_kernels.py — PyTorch's throughput (GFLOP/s) on the layer shapes bench_kernels.c
measures, at the same thread count (argument 1, default 1). Prints the same tab-separated
rows (model, layer, pass, torch_gflops) so run.sh can join the two. Timing mirrors the C
side: calibrate to >= 50 ms per batch of calls, then the best of 5 batches."""
import sys
import os
import time

import torch
import torch.nn.functional as F

# Kept in the same order and with the same numbers as the table in bench_kernels.c.
LAYERS = [
    ("mlp", "fc1 784-128", "fc", (64, 784, 128)),
    ("mlp", "fc2 128-10", "fc", (64, 128, 10)),
    ("lenet", "conv1 1-20 5x5", "conv", (64, 1, 28, 28, 20, 5, 1, 0)),
    ("lenet", "conv2 20-50 5x5", "conv", (64, 20, 12, 12, 50, 5, 1, 0)),
    ("lenet", "fc1 800-500", "fc", (64, 800, 500)),
    ("lenet", "fc2 500-10", "fc", (64, 500, 10)),
    ("resnet", "conv 3-16 32x32", "conv", (64, 3, 32, 32, 16, 3, 1, 1)),
    ("resnet", "conv 16-16 32x32", "conv", (64, 16, 32, 32, 16, 3, 1, 1)),
    ("resnet", "conv 16-32 s2", "conv", (64, 16, 32, 32, 32, 3, 2, 1)),
    ("resnet", "conv 16-32 1x1 s2", "conv", (64, 16, 32, 32, 32, 1, 2, 0)),
    ("resnet", "conv 32-32 16x16", "conv", (64, 32, 16, 16, 32, 3, 1, 1)),
    ("resnet", "conv 32-64 s2", "conv", (64, 32, 16, 16, 64, 3, 2, 1)),
    ("resnet", "conv 32-64 1x1 s2", "conv", (64, 32, 16, 16, 64, 1, 2, 0)),
    ("resnet", "conv 64-64 8x8", "conv", (64, 64, 8, 8, 64, 3, 1, 1)),
    ("resnet", "fc 64-10", "fc", (64, 64, 10)),
    ("mobilenet_v2", "dw 32 112x112 s1", "conv", (8, 32, 112, 112, 32, 3, 1, 1, 32)),
    ("mobilenet_v2", "dw 96 112x112 s2", "conv", (8, 96, 112, 112, 96, 3, 2, 1, 96)),
    ("mobilenet_v2", "dw 144 56x56 s1", "conv", (8, 144, 56, 56, 144, 3, 1, 1, 144)),
    ("mobilenet_v2", "dw 144 56x56 s2", "conv", (8, 144, 56, 56, 144, 3, 2, 1, 144)),
    ("mobilenet_v2", "dw 192 28x28 s1", "conv", (8, 192, 28, 28, 192, 3, 1, 1, 192)),
    ("mobilenet_v2", "dw 192 28x28 s2", "conv", (8, 192, 28, 28, 192, 3, 2, 1, 192)),
    ("mobilenet_v2", "dw 384 14x14 s1", "conv", (8, 384, 14, 14, 384, 3, 1, 1, 384)),
    ("mobilenet_v2", "dw 576 14x14 s1", "conv", (8, 576, 14, 14, 576, 3, 1, 1, 576)),
    ("mobilenet_v2", "dw 576 14x14 s2", "conv", (8, 576, 14, 14, 576, 3, 2, 1, 576)),
    ("mobilenet_v2", "dw 960 7x7 s1", "conv", (8, 960, 7, 7, 960, 3, 1, 1, 960)),
    ("transformer", "qkv 128-384", "fc", (512, 128, 384)),
    ("transformer", "scores QK^T", "mm", (32, 64, 64, 32, 1)),
    ("transformer", "attn x V", "mm", (32, 64, 32, 64, 0)),
    ("transformer", "out proj 128-128", "fc", (512, 128, 128)),
    ("transformer", "ffn1 128-512", "fc", (512, 128, 512)),
    ("transformer", "ffn2 512-128", "fc", (512, 512, 128)),
]


# BENCH_CLOCK=cpu: time by the process's CPU time instead of the wall clock (see run.sh).
CLOCK = time.process_time if os.environ.get("BENCH_CLOCK") == "cpu" else time.perf_counter


def seconds(fn):
    fn()
    iters = 1
    while True:
        t0 = CLOCK()
        for _ in range(iters):
            fn()
        t = CLOCK() - t0
        if t > 0.05 or iters > (1 << 20):
            break
        iters *= 2
    best = t / iters
    for _ in range(5):
        t0 = CLOCK()
        for _ in range(iters):
            fn()
        best = min(best, (CLOCK() - t0) / iters)
    return best


def fc(rows, inp, hidden):
    x = torch.randn(rows, inp, requires_grad=True)
    w = torch.randn(hidden, inp, requires_grad=True)
    b = torch.randn(hidden, requires_grad=True)
    y = F.linear(x, w, b)
    dy = torch.randn_like(y)
    flops = 2.0 * rows * inp * hidden
    with torch.no_grad():
        fwd = seconds(lambda: F.linear(x, w, b))
    bwd = seconds(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True))
    return [("fwd", flops / fwd), ("bwd", 2 * flops / bwd)]


def conv(n, c, h, w_, f, k, s, p, g=1):
    x = torch.randn(n, c, h, w_, requires_grad=True)
    w = torch.randn(f, c // g, k, k, requires_grad=True)
    b = torch.randn(f, requires_grad=True)
    y = F.conv2d(x, w, b, stride=s, padding=p, groups=g)
    dy = torch.randn_like(y)
    flops = 2.0 * f * (c // g) * k * k * y.shape[0] * y.shape[2] * y.shape[3]
    with torch.no_grad():
        fwd = seconds(lambda: F.conv2d(x, w, b, stride=s, padding=p, groups=g))
    bwd = seconds(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True))
    return [("fwd", flops / fwd), ("bwd", 2 * flops / bwd)]


def mm(batch, m, n, k, tb):
    a = torch.randn(8, batch // 8, m, k)
    b = torch.randn(8, batch // 8, n, k) if tb else torch.randn(8, batch // 8, k, n)
    op = (lambda: torch.matmul(a, b.transpose(-1, -2))) if tb else (lambda: torch.matmul(a, b))
    with torch.no_grad():
        return [("fwd", 2.0 * batch * m * n * k / seconds(op))]


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    print("model\tlayer\tpass\ttorch_gflops")
    for model, layer, kind, dims in LAYERS:
        for pss, rate in {"fc": fc, "conv": conv, "mm": mm}[kind](*dims):
            print(f"{model}\t{layer}\t{pss}\t{rate * 1e-9:.2f}", flush=True)


if __name__ == "__main__":
    main()
