"""mknpy.py DIR — the arrays the kiln train tests read (tests/tools/train_npy.sh), written with
NumPy's own writers: 8x8 images whose class (0-3) is the bright quadrant, as in mkidx.c, in
every form kiln train must read (float32/int32, float64/int64, .npz stored and deflated) and
every form it must refuse with a message (a wrong shape, dtype or length, Fortran order, a
truncated file, values that do not fit 4 bytes, labels out of range)."""
import os
import sys

import numpy as np


def images(rng, n):
    label = rng.integers(0, 4, n).astype(np.int32)
    x = rng.integers(0, 90, (n, 8, 8)).astype(np.float32)
    for i in range(n):
        r, c = divmod(int(label[i]), 2)
        x[i, 4 * r:4 * r + 4, 4 * c:4 * c + 4] = rng.integers(150, 256, (4, 4))
    x = (x / 255.0 - 0.3) / 0.3
    return x.reshape(n, 64).astype(np.float32), label


def main(out):
    rng = np.random.default_rng(7)
    x, y = images(rng, 512)
    xv, yv = images(rng, 100)
    save = lambda name, a: np.save(os.path.join(out, name), a)
    save("x.npy", x), save("y.npy", y), save("xv.npy", xv), save("yv.npy", yv)
    save("x64.npy", x.astype(np.float64)), save("y64.npy", y.astype(np.int64))
    np.savez(os.path.join(out, "train.npz"), image=x, label=y)
    np.savez_compressed(os.path.join(out, "train_c.npz"), image=x, label=y)
    np.savez(os.path.join(out, "other.npz"), pixels=x, classes=y)
    # refused
    save("x63.npy", x[:, :63].copy()), save("y500.npy", y[:500]), save("x16.npy", x.astype(np.float16))
    save("xf.npy", np.asfortranarray(x)), save("ybad.npy", np.where(np.arange(512) == 300, 4, y).astype(np.int32))
    save("xhuge.npy", np.where(np.arange(512 * 64).reshape(512, 64) == 777, 1e300, x.astype(np.float64)))
    save("ylong.npy", np.where(np.arange(512) == 9, 2 ** 40, y.astype(np.int64)))
    raw = open(os.path.join(out, "x.npy"), "rb").read()
    open(os.path.join(out, "xcut.npy"), "wb").write(raw[:len(raw) - 100])
    raw = open(os.path.join(out, "train_c.npz"), "rb").read()
    open(os.path.join(out, "cut.npz"), "wb").write(raw[:len(raw) // 2])
    bad = bytearray(raw)
    bad[200] ^= 0xFF   # inside the first entry's deflated data
    open(os.path.join(out, "flip.npz"), "wb").write(bytes(bad))


if __name__ == "__main__":
    main(sys.argv[1])
