#!/usr/bin/env bash
# profile.sh LIBDIR BENCH_BIN OUT — on the GPU machine, after bench/gpu/run.sh: where each
# example's GPU time goes (KILN_CUDA_PROFILE=1: every step timed with events, the table printed
# when the model is destroyed) and the bandwidth of one fused elementwise group (stream.kiln:
# 64 Mi floats read and written once: relu(2x + 1)) against a device-to-device copy by PyTorch on the same
# GPU, and each example's replayed CUDA graph: the GPU's time in it against the call's wall time
# (KILN_CUDA_PROFILE=graph). Writes OUT/profile-NAME.txt, OUT/graphs.txt and OUT/bandwidth.txt.
set -u
LIBDIR=$1 BENCH_BIN=$2 OUT=$3   # BENCH_BIN: kiln_bench_models
PY=${PYTHON:-python3}
mkdir -p "$OUT"
for m in mlp lenet resnet transformer stream; do
  [ -f "$LIBDIR/$m.cuda.so" ] || continue
  KILN_CUDA_PROFILE=1 "$BENCH_BIN" "$LIBDIR/$m.cuda.so" 0.2 >/dev/null 2>"$OUT/profile-$m.txt"
  # The replayed graph's GPU time against the call's wall time (KILN_CUDA_PROFILE=graph).
  KILN_CUDA_PROFILE=graph "$BENCH_BIN" "$LIBDIR/$m.cuda.so" 0.2 >/dev/null 2>>"$OUT/graphs.txt"
done
grep -h 'graph profile' "$OUT/graphs.txt"
# The group's mean time from the profile: its row is the only 'kernel' step of predict.
us=$(awk '/predict on/ {p=1} /train_step on/ {p=0} p && $5 == "kernel" {print $3; exit}' "$OUT/profile-stream.txt")
"$PY" - "$us" <<'PYEOF' | tee "$OUT/bandwidth.txt"
import sys, torch
n = 64 * 1024 * 1024
moved = 2 * 4 * n                        # one read and one write of each float
us = float(sys.argv[1]) if sys.argv[1] else float("nan")
x = torch.rand(n, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
best = float("inf")
for _ in range(20):
    s.record(); y.copy_(x); e.record(); torch.cuda.synchronize()
    best = min(best, s.elapsed_time(e) * 1e3)
kiln_bw, copy_bw = moved / us / 1e6, moved / best / 1e6   # bytes per us / 1e6 = TB/s
print(f"fused group (relu(2x+1), 64 Mi floats): {us:.1f} us, {kiln_bw:.2f} TB/s; "
      f"torch copy of the same bytes: {best:.1f} us, {copy_bw:.2f} TB/s; kiln / copy = {kiln_bw / copy_bw:.2f}")
PYEOF
