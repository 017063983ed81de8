#!/usr/bin/env bash
# profile.sh KILN MKIDX SRC_ROOT — per-step profiles (runtime/rt_profile.c): kiln run --profile
# on a compiled .so and on a JIT-compiled .kiln writes a valid trace with one event per step
# of every call and a table whose shares add up, and leaves the outputs bit-identical;
# KILN_PROFILE profiles kiln train's train_step and predict alike; bad arguments fail with a
# message.
set -u
kiln=$1 mkidx=$2 root=$3
check=$(dirname "$0")/profile_check.py
. "$(dirname "$0")/../support/tally.sh"   # $tmp, ok, bad

/usr/bin/python3 - "$tmp" <<'PY'
import struct, sys
def npy(path, shape, values):   # a float32 .npy without numpy
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join(f"{d}, " for d in shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{len(values)}f", *values))
n = 2 * 3 * 32 * 32
npy(sys.argv[1] + "/x.npy", (2, 3, 32, 32), [((i * 7919) % 1000) / 1000.0 for i in range(n)])
PY

# A compiled .so: profiled or not, the same bits; the trace and table of 3 calls.
"$kiln" compile "$root/examples/resnet.kiln" -D batch=2 -o "$tmp/libresnet.so" >/dev/null 2>"$tmp/err" && ok ||
  bad "compile: $(cat "$tmp/err")"
"$kiln" run "$tmp/libresnet.so" --input data="$tmp/x.npy" --output prob="$tmp/plain.npy" 2>"$tmp/err" && ok ||
  bad "run: $(cat "$tmp/err")"
"$kiln" run "$tmp/libresnet.so" --input data="$tmp/x.npy" --output prob="$tmp/prof.npy" --repeat 3 \
  --profile "$tmp/t.json" 2>"$tmp/table" && ok || bad "run --profile: $(cat "$tmp/table")"
cmp -s "$tmp/plain.npy" "$tmp/prof.npy" && ok || bad "--profile changed the output"
/usr/bin/python3 "$check" "$tmp/t.json" "$tmp/table" predict 3 && ok || bad "the .so's profile (table above: $(head -3 "$tmp/table"))"
grep -q '"path":"direct\|"path":"winograd' "$tmp/t.json" && ok || bad "no convolution says which path it took"
grep -q 'GFLOP/s' "$tmp/table" && ok || bad "the table has no GFLOP/s column"

# The same model JIT-compiled by kiln run, with two threads and with one: the same bits.
for t in 1 2; do
  KILN_NUM_THREADS=$t "$kiln" run "$root/examples/resnet.kiln" -D batch=2 --input data="$tmp/x.npy" --output prob="$tmp/jit$t.npy" \
    --profile "$tmp/j$t.json" 2>"$tmp/jtable" && ok || bad "JIT run --profile: $(cat "$tmp/jtable")"
  cmp -s "$tmp/plain.npy" "$tmp/jit$t.npy" && ok || bad "the JIT-compiled model's output at $t threads differs from the .so's"
  /usr/bin/python3 "$check" "$tmp/j$t.json" "$tmp/jtable" predict 1 && ok || bad "the JIT profile at $t threads"
done

# train_step through KILN_PROFILE, in kiln train (forward, backward and update steps).
cat >"$tmp/mlp.kiln" <<'K'
dim batch = 16
model mlp {
  input image : f32[batch, 64]
  input label : i32[batch]
  hidden = relu(fully_connected(image, num_hidden=32))
  logits = fully_connected(hidden, num_hidden=4)
  loss   = softmax_cross_entropy(logits, label)
  output logits
  train loss with adam(lr=0.01)
}
K
mkdir "$tmp/data" && "$mkidx" "$tmp/data" 64 32 || bad "mkidx"
KILN_PROFILE="$tmp/tr.json" "$kiln" train "$tmp/mlp.kiln" --data "$tmp/data" --epochs 1 >/dev/null 2>"$tmp/ttable" && ok ||
  bad "kiln train under KILN_PROFILE: $(cat "$tmp/ttable")"
/usr/bin/python3 "$check" "$tmp/tr.json" "$tmp/ttable" train_step 4 && ok || bad "train_step's profile"
for k in forward backward update; do
  grep -q "\"cat\":\"$k\"" "$tmp/tr.json" && ok || bad "train_step's trace has no $k step"
done

# Bad usage: a message and exit code 2; an unwritable trace: a message, the run still succeeds.
"$kiln" run "$tmp/libresnet.so" --input data="$tmp/x.npy" --repeat 0 >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q -- '--repeat wants a count' "$tmp/err" && ok || bad "--repeat 0: $(cat "$tmp/err")"
"$kiln" run "$tmp/libresnet.so" --input data="$tmp/x.npy" --profile >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q -- '--profile needs a value' "$tmp/err" && ok || bad "--profile without a file: $(cat "$tmp/err")"
"$kiln" run "$tmp/libresnet.so" --input data="$tmp/x.npy" --output prob="$tmp/nowhere.npy" --profile "$tmp/no/such/dir/t.json" \
  2>"$tmp/err" && ok || bad "an unwritable trace failed the run: $(cat "$tmp/err")"
grep -q 'cannot write' "$tmp/err" && ok || bad "an unwritable trace is not reported: $(cat "$tmp/err")"

echo "profile: $pass passed, $failed failed"
[ $failed = 0 ]
