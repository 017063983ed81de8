#!/usr/bin/python3
"""fashion_npy.py: an MNIST-layout IDX data set (Fashion-MNIST) written as .npy arrays.

Usage: fashion_npy.py IDX_DIR OUT_DIR

Reads train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
t10k-labels-idx1-ubyte (plain or .gz) from IDX_DIR and writes to OUT_DIR:

  train_x.npy  float32 [60000, 1, 28, 28]   (LeNet's `data` input)
  train_f.npy  float32 [60000, 784]         (the MLP's `image` input: the same values, flat)
  train_y.npy  int32   [60000]
  test_x.npy, test_f.npy, test_y.npy        the same for the 10,000 test images

The pixels are normalised as `kiln train --data DIR` normalises IDX files (tools/kiln_idx.c):
scaled to [0, 1] in float32, then standardised with the training images' mean and deviation
(summed in float64, applied in float32), so `--data NAME=X.npy,...` trains on the same values
as `--data IDX_DIR`.
"""
import gzip
import os
import sys

import numpy as np


def read_idx(directory, name):
    for path in (os.path.join(directory, name), os.path.join(directory, name + ".gz")):
        if os.path.exists(path):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                raw = f.read()
            break
    else:
        sys.exit(f"fashion_npy.py: {directory}: no {name}[.gz]")
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        sys.exit(f"fashion_npy.py: {path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        sys.exit(f"fashion_npy.py: {path}: {data.size} values for dims {dims}")
    return data.reshape(dims)


def main():
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        ok = len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help")
        print(__doc__.strip(), file=sys.stdout if ok else sys.stderr)
        sys.exit(0 if ok else 2)
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    x = {s: read_idx(src, f"{p}-images-idx3-ubyte").astype(np.float32) / np.float32(255) for s, p in
         (("train", "train"), ("test", "t10k"))}
    y = {s: read_idx(src, f"{p}-labels-idx1-ubyte").astype(np.int32) for s, p in (("train", "train"), ("test", "t10k"))}
    tx = x["train"].reshape(-1).astype(np.float64)
    mean = tx.mean()
    var = (tx * tx).mean() - mean * mean
    m = np.float32(mean)
    inv = np.float32(1 / np.sqrt(var)) if var > 1e-12 else np.float32(1)
    for s in ("train", "test"):
        n, rows, cols = x[s].shape
        v = ((x[s] - m) * inv).astype(np.float32)
        np.save(os.path.join(out, f"{s}_x.npy"), v.reshape(n, 1, rows, cols))
        np.save(os.path.join(out, f"{s}_f.npy"), v.reshape(n, rows * cols))
        np.save(os.path.join(out, f"{s}_y.npy"), y[s])
    print(f"fashion_npy.py: {out}: {len(y['train'])} training and {len(y['test'])} test images "
          f"(mean {mean:.6f}, deviation {np.sqrt(var):.6f})")


if __name__ == "__main__":
    main()
