#!/usr/bin/env python3
"""numpy_print.py KILN — `kiln repl` prints a value as NumPy's print() does (its default options).
Arrays made here (random shapes, magnitudes, integers, nan and inf, summarised sizes, long
rows that wrap, 0-d values) go into the REPL through `:load`; what it prints after each type
line must equal str() of the same array, character for character. Exits 77 (skipped) where
NumPy is missing."""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed")
    sys.exit(77)

F32 = np.float32


def chosen():
    """Arrays for each rule of the format: scientific by size and by range, unique digits,
    trailing zeros dropped, nan/inf widths, integers, summaries, wrapping, 0-d values."""
    a = {
        "sci_ratio": np.array([1.0, 2000.0], F32),
        "sci_small": np.array([1e-5, 3.8040068e-06], F32),
        "sci_big": np.array([1e8, 1.0], F32),
        "nonfinite": np.array([1.5, np.nan, -np.inf, 2.25], F32),
        "only_nonfinite": np.array([np.nan, np.inf], F32),
        "zeros": np.zeros((2, 2), F32),
        "ints_i32": np.array([[1, 2], [3, 4]], np.int32) * 100000,
        "wrap": np.arange(20, dtype=F32) / 3,
        "summary_sci": np.arange(40 * 50, dtype=F32).reshape(40, 50) / 7,
        "summary_1d": np.arange(1001, dtype=F32),
        "summary_i32": np.arange(-1200, 1200, dtype=np.int32).reshape(2, 1200),
        "rank3": np.arange(24, dtype=F32).reshape(2, 3, 4) / 4,
        "rank4": (np.arange(120, dtype=F32).reshape(2, 3, 4, 5) - 60) / 9,
        "neg_zero_big": np.array([-0.0, 1.0, 16777216.0], F32),
        "cut_at_8": np.array([0.00012345678, 0.5, 0.003198], F32),
        "large_positional": np.array([99999992.0, 999999.0], F32),
        "tiny_denormal": np.array([3.0e-45, 1.0], F32),
    }
    for i, v in enumerate([1e-5, 1.0086969, 7.0, 1e16, 1e-4, -0.0, 3.4e38, 1.5e-5, np.nan,
                           0.1, 123456789.0, -52243886080.0, -0.109670095]):
        a[f"scalar{i}"] = np.array(F32(v))
    return a


def random_arrays(n):
    rng = np.random.default_rng(1)
    out = {}
    for k in range(n):
        rank = int(rng.integers(0, 5))
        shape = tuple(int(x) for x in rng.integers(1, 9 if rank > 1 else 40, rank))
        if rng.random() < 0.1 and rank >= 1:
            shape = (1100,) + shape[1:]
        kind = int(rng.integers(0, 6))
        if kind == 0:
            v = rng.standard_normal(shape)
        elif kind == 1:
            v = rng.standard_normal(shape) * 10.0 ** rng.integers(-12, 12)
        elif kind == 2:
            v = np.round(rng.standard_normal(shape) * 100)
        elif kind == 3:
            v = rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 9, shape)
        elif kind == 4:
            v = rng.integers(-3, 4, shape) / 4.0
        else:
            v = rng.integers(-100000, 100000, shape)
        if kind == 5 and rng.random() < 0.5:
            v = np.asarray(v, np.int32)
        else:
            v = np.asarray(v, F32)
            if rng.random() < 0.1 and v.size > 1:
                v.flat[0], v.flat[-1] = np.nan, -np.inf
        out[f"r{k}"] = v
    return out


def main():
    kiln = sys.argv[1]
    arrays = {**chosen(), **random_arrays(300)}
    with tempfile.TemporaryDirectory() as tmp:
        lines = []
        for name, v in arrays.items():
            path = os.path.join(tmp, name + ".npy")
            np.save(path, v)
            lines += [f":load {name} {path}", name]
        run = subprocess.run([kiln, "repl"], input="\n".join(lines) + "\n", capture_output=True, text=True,
                             env={**os.environ, "HOME": tmp})
    if run.returncode != 0:
        print(f"FAIL: kiln repl exited {run.returncode}:\n{run.stderr}")
        return 1
    got = run.stdout.split("\n")
    fail = 0
    i = 0
    for name, v in arrays.items():
        want = str(v).split("\n")
        shown = got[i + 1:i + 1 + len(want)]
        if shown != want:
            print(f"FAIL: {name} {v.dtype}{list(v.shape)}: NumPy prints")
            print("\n".join(want))
            print("kiln repl prints")
            print("\n".join(shown))
            fail += 1
        i += 1 + len(want)
    print(f"repl prints as NumPy {np.__version__}: {len(arrays) - fail} of {len(arrays)} arrays the same")
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
