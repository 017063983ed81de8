#!/usr/bin/python3
"""train_fashion_mnist.py — examples/lenet.kiln trained on Fashion-MNIST from Python: the C demo
(examples/demo/train_fashion_mnist.c) step for step: the same normalisation, the same shuffled
order (its LCG), batch 64, one epoch with a progress bar, the accuracy on the 10,000 test images,
the weights saved as safetensors. The data set is Debian's dataset-fashion-mnist, read with NumPy.

    PYTHONPATH=python examples/python/train_fashion_mnist.py [--data DIR] [--epochs N]
                                                             [--save W.safetensors] [--seed N]
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kiln  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MASK = (1 << 64) - 1


def load_split(folder, prefix):
    """Images scaled to [0, 1] and standardised as the C demo does, and int32 labels."""
    with gzip.open(os.path.join(folder, "%s-images-idx3-ubyte.gz" % prefix)) as f:
        im = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(folder, "%s-labels-idx1-ubyte.gz" % prefix)) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int32)
    images = ((im.astype(np.float32) / np.float32(255) - np.float32(0.2860)) / np.float32(0.3530)).astype(np.float32)
    return images, labels


def shuffled(n, state):
    """The C demo's Fisher-Yates shuffle with its LCG; returns the order and the new state."""
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state * 6364136223846793005 + 1442695040888963407) & MASK
        j = (state >> 33) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return np.array(order), state


def train_epoch(m, images, labels, epoch, state, batch):
    order, state = shuffled(len(images), state)
    nb = len(images) // batch
    t0, avg = time.perf_counter(), 0.0
    for b in range(nb):
        idx = order[b * batch:(b + 1) * batch]
        loss = m.train_step(images[idx], labels[idx])
        avg = 0.98 * avg + 0.02 * loss if b else loss
        if b % 20 == 0 or b == nb - 1:
            done, fill = (b + 1) * batch, int((b + 1) / nb * 30)
            bar = "".join("=" if i < fill else ">" if i == fill else " " for i in range(30))
            sys.stderr.write("\repoch %d [%s] %5d/%d  loss %.4f  %6.0f img/s" % (
                epoch, bar, done, nb * batch, avg, done / (time.perf_counter() - t0)))
    sys.stderr.write("\n")
    return state, nb * batch / (time.perf_counter() - t0)


def evaluate(m, images, labels, batch):
    """Accuracy on every test image; the last partial batch is padded and its padding ignored."""
    correct, x = 0, np.zeros((batch, 1, 28, 28), np.float32)
    prob = np.empty((batch, 10), np.float32)
    for s in range(0, len(images), batch):
        k = min(batch, len(images) - s)
        x[:k] = images[s:s + k]
        x[k:] = 0
        m.predict(x, out=prob)
        correct += int((prob[:k].argmax(1) == labels[s:s + k]).sum())
    return correct / len(images)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--save", default="lenet.safetensors")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    try:
        train, test = load_split(a.data, "train"), load_split(a.data, "t10k")
    except OSError as e:
        sys.exit("cannot read the data set (is dataset-fashion-mnist installed?): %s" % e)
    m = kiln.compile(os.path.join(HERE, "..", "lenet.kiln"), seed=a.seed)
    batch = m.inputs[0].shape[0]
    print("Fashion-MNIST: %d training images, %d test images; LeNet, batch %d" % (len(train[0]), len(test[0]), batch))
    state, t0 = a.seed + 1, time.perf_counter()
    for e in range(1, a.epochs + 1):
        state, rate = train_epoch(m, *train, e, state, batch)
    acc = evaluate(m, *test, batch)
    print("trained %d epoch%s in %.1f s (%.0f img/s); test accuracy %.2f%%" % (
        a.epochs, "" if a.epochs == 1 else "s", time.perf_counter() - t0, rate, 100 * acc))
    m.save(a.save)
    print("weights saved to %s" % a.save)


if __name__ == "__main__":
    main()
