"""limits.py NAME KILN.json ORT.json PEAK — what limits a model against ONNX Runtime, from both
sides' own per-step profiles of the same .onnx (bench/onnx/limits.sh makes them): Kiln's
(`kiln run --profile`, docs/profiling.md) and ORT's (`enableProfiling`, ort_profile.js).

Each step's or node's fastest call is kept (the host's noise only ever adds), and the steps are
split in two on both sides alike:
  dense  convolutions and matrix products whose reduction is at least DENSE_K long (a 3x3
         depthwise layer's is 9) and whose every weight serves at least DENSE_REUSE outputs (a
         fully-connected layer at batch 1 reads each weight once: memory bounds it): the work
         an FMA unit can be kept busy on, so PEAK (the core's multiply-add GFLOP/s times the
         threads, bench/onnx/peak.c) bounds its rate;
  rest   everything else: depthwise layers, pools, norms, elementwise steps, copies, which the
         memory system bounds.
Printed as one Markdown row: both sides' sums, the dense part's milliseconds and GFLOP/s, the
rest's milliseconds, and the ratio Kiln would reach against ORT's sum if every dense step of
Kiln's ran at PEAK and nothing else changed ("Kiln/ORT at most"). Where that is below a target,
no kernel work on the dense steps reaches the target; the rest must shrink.
  python3 limits.py --header   prints the table's header."""
import json
import sys

from profile_threads import load

DENSE_K = 32      # the shortest reduction counted as dense
DENSE_REUSE = 8   # the fewest outputs each weight must serve to count as dense
ORT_DENSE_OPS = ("Conv", "FusedConv", "NchwcConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul")


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def dense(fl, red, out, cols):
    """Whether a step of `fl` flops, reduction `red` and output shape `out` whose weights give
    `cols` outputs each per position (a convolution's output channels, a product's columns)
    is dense (above)."""
    return fl > 0 and red >= DENSE_K and cols > 0 and numel(out) // cols >= DENSE_REUSE


def kiln_steps(path):
    """(microseconds, flops, whether dense) of each step's fastest call (profile_threads.load)."""
    steps = []
    for e in load(path).values():
        a = e["args"]
        fl, out = a.get("flops", 0), a["out"][0]
        red = fl // (2 * numel(out)) if fl else 0
        cols = a["in"][1][0] if a.get("op") in ("convolution", "fully_connected") else out[-1]
        steps.append((e["dur"], fl, dense(fl, red, out, cols)))
    return steps


def ort_flops(a):
    """ORT's node args -> (flops, whether dense) of a node, from its shapes."""
    ins = [list(t.values())[0] for t in a.get("input_type_shape", [])]
    outs = [list(t.values())[0] for t in a.get("output_type_shape", [])]
    if a.get("op_name") not in ORT_DENSE_OPS or len(ins) < 2 or not outs or not ins[0]:
        return 0, False
    if "Conv" in a["op_name"]:
        w = ins[1]
        red, cols = numel(w[1:]), w[0]   # [Cout, Cin/groups, kh, kw]: one output's multiply-adds
    else:
        red, cols = ins[0][-1], outs[0][-1]   # A's last axis (Gemm and MatMul as torch exports them)
    fl = 2 * numel(outs[0]) * red
    return fl, dense(fl, red, outs[0], cols)


def ort_steps(path):
    ev = json.load(open(path))
    if isinstance(ev, dict):
        ev = ev["traceEvents"]
    best = {}
    for e in ev:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        if e["name"] not in best or e["dur"] < best[e["name"]][0]:
            fl, is_dense = ort_flops(e["args"])
            best[e["name"]] = (e["dur"], fl, is_dense)
    return list(best.values())


def split(steps, peak):
    """Sum of all steps, of the dense ones, their flops, and the sum with each dense step at
    the peak rate (or as it is where it is already faster: Winograd does fewer multiplies than
    the shapes say), in microseconds."""
    ds = [s for s in steps if s[2]]
    t_all = sum(s[0] for s in steps)
    t_dense = sum(s[0] for s in ds)
    f_dense = sum(s[1] for s in ds)
    t_ideal = t_all - t_dense + sum(min(s[0], s[1] / (peak * 1e3)) for s in ds)
    return t_all, t_dense, f_dense, t_ideal


HEADER = ("| model | Kiln ms | ORT ms | Kiln/ORT | Kiln dense ms (GFLOP/s) | ORT dense ms (GFLOP/s) | "
          "Kiln rest ms | ORT rest ms | Kiln/ORT at most |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def main():
    if sys.argv[1:] == ["--header"]:
        print(HEADER)
        return
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    name, kpath, opath, peak = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    kt, kd, kf, best_kiln = split(kiln_steps(kpath), peak)
    ot, od, of, _ = split(ort_steps(opath), peak)

    def rate(fl, us):
        return fl / us / 1e3 if us else 0.0
    print(f"| {name} | {kt / 1e3:.2f} | {ot / 1e3:.2f} | {ot / kt:.2f} | {kd / 1e3:.2f} ({rate(kf, kd):.0f}) | "
          f"{od / 1e3:.2f} ({rate(of, od):.0f}) | {(kt - kd) / 1e3:.2f} | {(ot - od) / 1e3:.2f} | {ot / best_kiln:.2f} |")


if __name__ == "__main__":
    main()
