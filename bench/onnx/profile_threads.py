"""profile_threads.py ONE.json TWO.json [ROWS] — two profiles of the same model (KILN_PROFILE /
kiln run --profile, docs/profiling.md), e.g. at KILN_NUM_THREADS=1 and 2: each step's fastest
call on both sides, and the steps that lose the most against a perfect split first (the
second's time minus half the first's), with each side's kernel path."""
import json
import sys


def load(path):
    steps = {}
    for e in json.load(open(path))["traceEvents"]:
        if e.get("cat") in ("forward", "backward", "update", "fused"):
            k = (e["args"]["program"], e["args"]["step"])
            best = steps.get(k)
            if best is None or e["dur"] < best["dur"]:
                steps[k] = e
    return steps


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    both = [k for k in a if k in b]
    ta, tb = sum(a[k]["dur"] for k in both), sum(b[k]["dur"] for k in both)
    print(f"sum of the steps' fastest calls: {ta / 1e3:.3f} ms and {tb / 1e3:.3f} ms, {ta / tb:.2f}x")
    print(f"{'step':>5}  {'name':30} {'op':12} {'first us':>9} {'second us':>9} {'x':>5} {'lost us':>8}  out; paths")
    for k in sorted(both, key=lambda k: -(b[k]["dur"] - a[k]["dur"] / 2))[:rows]:
        x, y = a[k], b[k]
        paths = x["args"].get("path", "")
        if y["args"].get("path", "") != paths:
            paths += " | " + y["args"].get("path", "")
        print(f"{k[1]:5d}  {x['name'][:30]:30} {x['args']['op'][:12]:12} {x['dur']:9.1f} {y['dur']:9.1f} "
              f"{x['dur'] / y['dur']:5.2f} {y['dur'] - x['dur'] / 2:8.1f}  {x['args']['out']}; {paths}")


if __name__ == "__main__":
    main()
