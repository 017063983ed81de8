"""python_overhead.py — the Python column of bench/overhead: what one `Model.predict` call costs
from Python on a one-op model, relu of f32[4] (the work of kiln_bench_overhead's 1-step model,
whose figure is the C call's), JIT-compiled in this process by `kiln.compile`.

Usage: PYTHONPATH=python /usr/bin/python3 bench/overhead/python_overhead.py [seconds]
Prints one TSV line per way of calling: what, microseconds per call, each the best of 7 runs of
at least `seconds` (default 0.2):
  m.predict(x)          binds x, makes the output array, calls, returns it
  m(x)                  the same through __call__
  m.predict(x, out=y)   writes into the caller's array instead
  ctypes call alone     the model's predict entry point through ctypes, its pointer arrays
                        made once: ctypes' own cost; the package adds the rest
"""
import ctypes as C
import sys
import time

import numpy as np

import kiln

TEXT = """model one {
  input x : f32[4]
  y = relu(x)
  output y
}
"""
RUNS = 7


def best_us(fn, secs):
    """Microseconds per call of fn(): the best of RUNS runs of at least secs seconds."""
    n, t0 = 1, time.perf_counter()
    while True:   # calibrate: a run's call count
        for _ in range(n):
            fn()
        el = time.perf_counter() - t0
        if el >= secs / 4:
            break
        n, t0 = n * 2, time.perf_counter()
    n = max(1, int(n * secs / max(el, 1e-9)))
    best = float("inf")
    for _ in range(RUNS):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 0.2
    m = kiln.compile(TEXT)
    x = np.array([-1.0, 0.5, 0.0, 2.0], np.float32)
    y = np.empty(4, np.float32)
    want = np.maximum(x, 0)
    if not np.array_equal(m.predict(x), want) or not np.array_equal(m(x), want):
        sys.exit("python_overhead: wrong result")
    # the model's own predict entry point (its rt_model_api), as Model.predict calls it
    raw, handle = m._c_predict, m._m
    ins, outs = m._pred.in_type(x.ctypes.data), m._pred.out_type(y.ctypes.data)
    rows = [
        ("m.predict(x)", lambda: m.predict(x)),
        ("m(x)", lambda: m(x)),
        ("m.predict(x, out=y)", lambda: m.predict(x, out=y)),
        ("ctypes call alone", lambda: raw(handle, ins, outs)),
    ]
    for what, fn in rows:
        print("%s\t%.2f us" % (what, best_us(fn, secs)))
    if not np.array_equal(y, want):
        sys.exit("python_overhead: wrong result through out=")
    m.close()


if __name__ == "__main__":
    main()
