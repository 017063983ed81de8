#!/usr/bin/python3
"""cost_model.py TRACE.json [TRACE.json...] — data-parallel efficiency predicted for larger
clusters from one measured step (issue 33's cost model).

Each TRACE is a KILN_PROFILE trace of one process training with a hook of one rank that moves
nothing and buckets of 4 bytes (bench/dist/run.sh --trace does it: dist_bench with
DIST_BUCKET_BYTES=4): its `allreduce` track then holds, for every gradient in the order the
backward pass finishes them, the moment it is ready and its size. For the last step of the
trace the model replays the buckets Kiln would make at each bucket size on a ring allreduce of
N ranks, whose cost for n bytes is 2 (N - 1) alpha + 2 (N - 1) / N * n / bandwidth (Patarasuk
and Yuan's bandwidth-optimal ring, as Horovod's NCCL and Open MPI's large-message allreduce
run it), one allreduce at a time in bucket order, each starting when its bucket is ready and
the one before it is done. What the backward pass does not hide is added to the step:
efficiency = step / (step + exposed). It assumes the per-rank step stays as measured (the
batch per rank fixed, as DDP scales) and the links are the only shared resource.
"""
import json
import sys

LINKS = {"25 Gbit/s (TCP, alpha 25 us)": (25e9 / 8, 25e-6), "100 Gbit/s (RDMA, alpha 5 us)": (100e9 / 8, 5e-6)}
RANKS = (8, 64, 512)
BUCKETS_KIB = (64, 256, 1024, 4096, 25600)


def last_step(path):
    """(step seconds, backward end in seconds from the step's start, [(ready s, bytes)...])."""
    ev = json.load(open(path))["traceEvents"]
    runs = [e for e in ev if e.get("cat") == "run" and e.get("name") == "train_step"]
    if not runs:
        sys.exit("%s: no train_step run in the trace" % path)
    run = runs[-1]
    t0, t1 = run["ts"], run["ts"] + run["dur"]
    inside = [e for e in ev if e.get("ph") == "X" and t0 <= e["ts"] < t1]
    bwd_end = max((e["ts"] + e["dur"] for e in inside if e.get("cat") == "backward"), default=t1)
    grads = [((e["ts"] - t0) * 1e-6, 4 * e["args"]["elements"]) for e in inside
             if e.get("cat") == "allreduce" and e["args"]["bucket"] >= 0]
    if not grads:
        sys.exit("%s: no gradient allreduces: record it with DIST_BUCKET_BYTES=4" % path)
    return run["dur"] * 1e-6, (bwd_end - t0) * 1e-6, grads


def buckets(grads, cap):
    """Kiln's cut (rt_comm_plan): gradients in order, a bucket closed once it holds cap bytes;
    ready when its last gradient is."""
    out, ready, size = [], 0.0, 0
    for i, (r, n) in enumerate(grads):
        ready, size = max(ready, r), size + n
        if size >= cap or i == len(grads) - 1:
            out.append((ready, size))
            ready, size = 0.0, 0
    return out


def kib(k):
    return "%d MiB" % (k >> 10) if k >= 1024 else "%d KiB" % k


def exposed(bks, ranks, bw, alpha, bwd_end):
    end = 0.0
    for ready, n in bks:
        end = max(end, ready) + 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * n / bw
    return max(0.0, end - bwd_end)


def main(paths):
    for path in paths:
        step, bwd_end, grads = last_step(path)
        total = sum(n for _, n in grads)
        print("%s: step %.1f ms, backward pass ends at %.1f ms, %d gradients, %.2f MB" %
              (path, 1e3 * step, 1e3 * bwd_end, len(grads), total / 1e6))
        print("| link | ranks | " + " | ".join("%s buckets" % kib(b) for b in BUCKETS_KIB) + " | best |")
        print("|---|---:|" + "---:|" * (len(BUCKETS_KIB) + 1))
        for link, (bw, alpha) in LINKS.items():
            for n in RANKS:
                effs = [step / (step + exposed(buckets(grads, b << 10), n, bw, alpha, bwd_end)) for b in BUCKETS_KIB]
                best = max(range(len(effs)), key=lambda i: (round(effs[i], 3), BUCKETS_KIB[i]))
                print("| %s | %d | %s | %s |" % (link, n, " | ".join("%.3f" % e for e in effs), kib(BUCKETS_KIB[best])))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    main(sys.argv[1:])
