"""torch_models.py — the PyTorch twins of examples/{mlp,lenet,resnet,transformer}.kiln and the
same timing as bench_models.c: train_step (forward, loss, backward, optimizer step) and predict
(model.eval(), torch.no_grad(), softmax of the logits) in samples per second.

Usage: torch_models.py THREADS [seconds] [model...]; BATCH=N in the environment builds the
inputs at batch N instead of the .kiln file's own batch.
Prints TSV lines in bench_models.c's format (model, mode, batch, samples/s, iterations per run)
and a '# rss_kib' comment line per model. Besides eager train and predict it times predict
through PyTorch's own compiler for inference, mode "predict_ts":
torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model.eval(), inputs)))
(conv + batch_norm + relu folded, oneDNN blocked layouts where they pay). Architectures, initialisation (Kiln's defaults:
Linear/Conv weights U(+-1/sqrt(fan_in)), biases 0, Embedding N(0, 1), BN/LN gamma 1 beta 0)
and optimizer settings follow the .kiln files.
"""
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

RUNS = 5


def kiln_init(module):
    """Kiln's default initializers (ir/ir_optim.c: ir_init_default)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            bound = 1.0 / math.sqrt(m.weight[0].numel())
            nn.init.uniform_(m.weight, -bound, bound)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 1.0)
    return module


class MLP(nn.Module):  # examples/mlp.kiln
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(784, 128)
        self.logits = nn.Linear(128, 10)

    def forward(self, image):
        return self.logits(F.relu(self.hidden(image)))


class LeNet(nn.Module):  # examples/lenet.kiln: conv/tanh/max-pool twice, two dense layers
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 20, 5)
        self.c2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(800, 500)
        self.fc2 = nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.tanh(self.c1(x)), 2, 2)
        x = F.max_pool2d(torch.tanh(self.c2(x)), 2, 2)
        return self.fc2(torch.tanh(self.fc1(torch.flatten(x, 1))))


class ConvBN(nn.Sequential):  # resnet.kiln conv_bn: no conv bias; Kiln momentum 0.9 = torch 0.1
    def __init__(self, cin, cout, stride=1, k=3):
        super().__init__(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, bias=False),
                         nn.BatchNorm2d(cout, eps=1e-5, momentum=1 - 0.9))


class Residual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a, self.b = ConvBN(c, c), ConvBN(c, c)

    def forward(self, x):
        return F.relu(x + self.b(F.relu(self.a(x))))


class Downsample(nn.Module):
    def __init__(self, cin, c):
        super().__init__()
        self.a, self.b, self.s = ConvBN(cin, c, 2), ConvBN(c, c), ConvBN(cin, c, 2, 1)

    def forward(self, x):
        return F.relu(self.s(x) + self.b(F.relu(self.a(x))))


class ResNet(nn.Module):  # examples/resnet.kiln
    def __init__(self):
        super().__init__()
        self.stem = ConvBN(3, 16)
        self.body = nn.Sequential(Residual(16), Residual(16), Downsample(16, 32), Residual(32),
                                  Downsample(32, 64), Residual(64))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.body(F.relu(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Transformer(nn.Module):  # examples/transformer.kiln: one post-norm encoder block
    def __init__(self, batch=8, seq=64, vocab=1000, d=128, h=4, ff=512, classes=2):
        super().__init__()
        self.shape = (batch, seq, d, h)
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)
        self.f1, self.f2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.head = nn.Linear(d, classes)

    def split(self, x):
        b, s, d, h = self.shape
        return x.reshape(b, s, h, d // h).permute(0, 2, 1, 3)

    def forward(self, tokens):
        b, s, d, h = self.shape
        x = self.emb(tokens) + self.pos
        qh, kh, vh = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        p = torch.softmax(torch.matmul(qh, kh.transpose(-1, -2)) * (d / h) ** -0.5, dim=-1)
        a = self.o(torch.matmul(p, vh).permute(0, 2, 1, 3).reshape(b, s, d))
        n1 = self.ln1(x + a)
        n2 = self.ln2(n1 + self.f2(F.gelu(self.f1(n1))))
        return self.head(n2.mean(dim=1))


def batch_or(default):
    """The batch: $BATCH when set (bench/models/run.sh's BATCH=N), else the .kiln file's."""
    return int(os.environ.get("BATCH") or default)


def mlp():
    m = kiln_init(MLP())
    return m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), [torch.rand(batch_or(64), 784) * 2 - 1], 10


def lenet():
    m = kiln_init(LeNet())
    return m, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), [torch.rand(batch_or(64), 1, 28, 28) * 2 - 1], 10


def resnet():
    m = kiln_init(ResNet())
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=0.0001)
    return m, opt, [torch.rand(batch_or(64), 3, 32, 32) * 2 - 1], 10


def transformer():
    b = batch_or(8)
    m = kiln_init(Transformer(batch=b))
    return m, torch.optim.Adam(m.parameters(), lr=0.001), [torch.randint(0, 1000, (b, 64))], 2


MODELS = {"mlp": mlp, "lenet": lenet, "resnet": resnet, "transformer": transformer}


def best_per_call(fn, secs):
    """Warm-up (at least 3 calls and 0.2 s), calibrate to secs per run, best of RUNS."""
    t0, n = time.perf_counter(), 0
    while n < 3 or time.perf_counter() - t0 < 0.2:
        fn()
        n += 1
    iters = max(2, math.ceil(secs / ((time.perf_counter() - t0) / n)))
    best = math.inf
    for _ in range(RUNS):
        a = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, time.perf_counter() - a)
    return best / iters, iters


def bench(name, secs):
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model, opt, inputs, classes = MODELS[name]()
    batch = inputs[0].shape[0]
    label = torch.randint(0, classes, (batch,))

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(*inputs), label)
        loss.backward()
        opt.step()

    def predict():
        with torch.no_grad():
            torch.softmax(model(*inputs), dim=1)

    model.train()
    per, iters = best_per_call(train_step, secs)
    print(f"{name}\ttrain\t{batch}\t{batch / per:.1f}\t{iters}", flush=True)
    model.eval()
    per, iters = best_per_call(predict, secs)
    print(f"{name}\tpredict\t{batch}\t{batch / per:.1f}\t{iters}", flush=True)
    bench_torchscript(name, model, inputs, batch, secs)
    print(f"# rss_kib\t{name}\t{base}\t{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", flush=True)


def bench_torchscript(name, model, inputs, batch, secs):
    """Predict through the traced, frozen, optimized-for-inference module."""
    try:
        with torch.no_grad():
            ts = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model.eval(), tuple(inputs))))
            ts(*inputs)
    except Exception as e:  # a model torch's compiler cannot take: said, not timed
        print(f"# torchscript\t{name}\tfailed: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
        return

    def predict():
        with torch.no_grad():
            torch.softmax(ts(*inputs), dim=1)

    per, iters = best_per_call(predict, secs)
    print(f"{name}\tpredict_ts\t{batch}\t{batch / per:.1f}\t{iters}", flush=True)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
    torch.set_num_threads(threads)
    torch.manual_seed(42)
    for name in sys.argv[3:] or list(MODELS):
        bench(name, secs)


if __name__ == "__main__":
    main()
