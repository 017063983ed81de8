#!/usr/bin/env bash
# train_distributed.sh KILN ROOT — `kiln train --distributed` under mpirun: 2 ranks at batch 4
# and 3 ranks at batch 4 each train what one process trains at batch 8 and 12 (the same
# global batches of the same shuffle: rank r takes the r-th batch of each), so the saved
# weights match within 1e-5 of their magnitude (the mean of the ranks' gradients adds in
# another order: last bits); rank 0 alone prints and saves; a job whose ranks cannot start
# training exits nonzero; a job stopped at a checkpoint resumes to the same bits. Needs
# python3-numpy to write the arrays and read the weights.
set -u
kiln=$1 root=$2
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
pass=0 failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
ok() { pass=$((pass + 1)); }
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "SKIPPED: python3-numpy is not installed; it writes the arrays (scripts/setup.sh installs it)"; exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$tmp" || exit 1
cat >m.kiln <<K
dim batch = 8
model m {
  input x : f32[batch, 16]
  input label : i32[batch]
  h = relu(fully_connected(x, num_hidden=12))
  logits = fully_connected(h, num_hidden=3)
  loss = softmax_cross_entropy(logits, label)
  output logits
  train loss with adamw(lr=0.01) schedule cosine(total=30) clip_norm=5.0
}
K
/usr/bin/python3 -c "
import numpy as np
r = np.random.default_rng(0)
x = r.standard_normal((100, 16)).astype(np.float32)
np.save('x.npy', x); np.save('y.npy', ((x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0)).astype(np.int32))"
same() {  # same A B: every tensor within 1e-5 of its magnitude
  /usr/bin/python3 - "$1" "$2" "$root/tests/support" <<'P'
import sys
sys.path.insert(0, sys.argv[3])
import numpy as np
from st_read import read_safetensors
a, b = read_safetensors(sys.argv[1]), read_safetensors(sys.argv[2])
bad = [k for k in b if k not in a or np.abs(a[k] - b[k]).max() > 1e-5 * max(1e-3, float(np.abs(b[k]).max()))]
print("worst difference %.2g" % max(float(np.abs(a[k] - b[k]).max()) for k in b if k in a))
sys.exit(1 if bad or set(a) != set(b) else 0)
P
}
for np_ in 2 3; do
  g=$((4 * np_))
  "$kiln" train m.kiln -D batch=$g --data x=x.npy,label=y.npy --epochs 3 --seed 5 --save one$np_.safetensors >one$np_.out 2>&1 ||
    { fail "one process at batch $g: $(tail -3 one$np_.out)"; continue; }
  mpirun -np $np_ --oversubscribe "$kiln" train m.kiln --distributed -D batch=4 --data x=x.npy,label=y.npy --epochs 3 --seed 5 \
    --save dist$np_.safetensors >dist$np_.out 2>&1 || { fail "$np_ ranks: exit $?: $(tail -5 dist$np_.out)"; continue; }
  out=$(same dist$np_.safetensors one$np_.safetensors) && ok || fail "$np_ ranks x batch 4 differ from one process at batch $g: $out"
  echo "$np_ ranks x batch 4 against one process at batch $g: $out"
  [ "$(grep -c '^epoch 3: train loss' dist$np_.out)" = 1 ] && ok || fail "$np_ ranks: want one epoch line (rank 0's): $(grep '^epoch' dist$np_.out)"
  grep -q "batch 4 on each of $np_ ranks" dist$np_.out && ok || fail "$np_ ranks: the banner does not say the ranks: $(head -2 dist$np_.out)"
  [ "$(grep '^epoch 3: train loss' dist$np_.out | cut -d, -f1)" = "$(grep '^epoch 3: train loss' one$np_.out | cut -d, -f1)" ] && ok ||
    fail "$np_ ranks: the mean loss over the ranks differs from one process's"
done
# A job stopped at a checkpoint and resumed on the same ranks ends with the bits of one that
# never stopped (dist2.safetensors: 2 ranks, 3 epochs of 12 steps).
ck=(mpirun -np 2 --oversubscribe "$kiln" train m.kiln --distributed -D batch=4 --data x=x.npy,label=y.npy --epochs 3 --seed 5)
if "${ck[@]}" --checkpoint ck --every 5 --max-steps 17 >ck.out 2>&1 && "${ck[@]}" --resume ck --save resumed.safetensors >resumed.out 2>&1; then
  cmp -s resumed.safetensors dist2.safetensors && ok || fail "2 ranks stopped at step 17 and resumed differ from 2 ranks straight"
else fail "2 ranks with --checkpoint, then --resume: $(tail -3 ck.out resumed.out)"; fi
mpirun -np 2 --oversubscribe "$kiln" train m.kiln --distributed --data x=missing.npy,label=y.npy >bad.out 2>&1
[ $? -ne 0 ] && grep -q "missing.npy" bad.out && ok || fail "a job whose data is missing should exit nonzero saying so: $(tail -3 bad.out)"
echo "train --distributed: $pass passed, $failed failed"
[ $failed -eq 0 ]
