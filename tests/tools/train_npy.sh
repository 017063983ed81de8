#!/usr/bin/env bash
# train_npy.sh KILN SRC_ROOT — kiln train on named NumPy arrays (tools/kiln_data.c): .npy
# files, float64/int64 data, .npz archives stored and deflated (written by NumPy itself,
# tests/tools/mknpy.py) all give the same run; --val, --val-split, --seed, --log and a bounded
# batch do what kiln train --help says; and every bad array is refused with one message
# before the first step. Needs python3-numpy to write the arrays (scripts/setup.sh installs it).
set -u
kiln=$1 root=$2
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
pass=0 failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
ok() { pass=$((pass + 1)); }
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "SKIPPED: python3-numpy is not installed; it writes the arrays (scripts/setup.sh installs it)"; exit 0
fi
/usr/bin/python3 "$root/tests/tools/mknpy.py" "$tmp" || { echo "FAIL: mknpy.py"; exit 1; }
cat >"$tmp/mlp.kiln" <<K
dim batch = 32
model mlp {
  input image : f32[batch, 64]
  input label : i32[batch]
  hidden = dropout(relu(fully_connected(image, num_hidden=32)), p=0.1)
  logits = fully_connected(hidden, num_hidden=4)
  loss   = softmax_cross_entropy(logits, label)
  output logits
  train loss with sgd(lr=0.05, momentum=0.9)
}
K
cd "$tmp" || exit 1

# train ARGS...: stdout in out, stderr in err, exit code in $rc; epochs.txt holds the epoch lines
# without their times, which two runs of the same data must share to the last digit.
train() { "$kiln" train mlp.kiln "$@" >out 2>err; rc=$?; sed -n 's/^\(epoch [0-9]*:.*\), [0-9.]* s$/\1/p' out >epochs.txt; }
same_as() {  # same_as FILE WHAT: this run's epoch lines equal FILE's
  if [ "$rc" != 0 ]; then fail "$2: exit $rc: $(cat err)"
  elif ! [ -s epochs.txt ] || ! cmp -s epochs.txt "$1"; then fail "$2: epoch lines differ: $(cat epochs.txt) vs $(cat "$1")"
  else ok; fi
}

# It learns from .npy files with a held-out set: loss and accuracy reported every epoch.
train --data image=x.npy,label=y.npy --val image=xv.npy,label=yv.npy --epochs 3 --log run.jsonl
acc=$(sed -n 's/^epoch 3: .*validation accuracy \([0-9.]*\)%.*/\1/p' out)
if [ "$rc" != 0 ]; then fail "npy run: exit $rc: $(cat err)"
elif ! grep -q "^mlp: 512 training examples, 100 validation examples; batch 32, 4 classes, 16 batches an epoch$" out
then fail "npy run's banner: $(cat out)"
elif [ -z "$acc" ] || ! awk -v a="$acc" 'BEGIN { exit !(a > 80) }'; then fail "npy run: accuracy '$acc': $(cat out)"
elif ! grep -q "^epoch 1: train loss [0-9.]*, validation loss [0-9.]*, validation accuracy [0-9.]*% (100 examples), [0-9.]* s$" out
then fail "npy run's epoch line: $(cat out)"
else ok; fi
cp epochs.txt npy.txt

# The log: one JSON object per step (48) and per epoch (3), with the fields --help names.
/usr/bin/python3 - <<'P' && ok || fail "run.jsonl: $(head -3 run.jsonl; tail -2 run.jsonl)"
import json
lines = [json.loads(l) for l in open("run.jsonl")]
steps = [l for l in lines if "step" in l]
epochs = [l for l in lines if "step" not in l]
assert [s["step"] for s in steps] == list(range(1, 49)), steps[:2]
assert all(set(s) == {"step", "epoch", "loss", "lr", "images_per_s"} for s in steps)
assert all(abs(s["lr"] - 0.05) < 1e-7 and s["images_per_s"] > 0 for s in steps)
assert [e["epoch"] for e in epochs] == [1, 2, 3]
for e in epochs:
    assert set(e) == {"epoch", "train_loss", "lr", "seconds", "images_per_s", "val_loss", "val_accuracy", "val_examples"}, e
    assert e["val_examples"] == 100 and 0 <= e["val_accuracy"] <= 1
assert epochs[-1]["val_accuracy"] > 0.8
P

# The same examples as float64/int64, in an .npz (stored), and deflated: the same run exactly.
train --data image=x64.npy,label=y64.npy --val image=xv.npy,label=yv.npy --epochs 3
same_as npy.txt "float64/int64 arrays"
train --data train.npz --val image=xv.npy,label=yv.npy --epochs 3
same_as npy.txt "train.npz (numpy.savez)"
train --data train_c.npz --val image=xv.npy,label=yv.npy --epochs 3
same_as npy.txt "train_c.npz (numpy.savez_compressed)"
train --data image=other.npz:pixels,label=other.npz:classes --val image=xv.npy,label=yv.npy --epochs 3
same_as npy.txt "NAME=FILE.npz:KEY"

# --seed repeats a run (weights, shuffling, dropout, the split) and changes it.
train --data image=x.npy,label=y.npy --val-split 0.2 --seed 5 --epochs 2
grep -q "^mlp: 409 training examples, 103 validation examples" out && ok || fail "--val-split 0.2: $(cat out err)"
cp epochs.txt seed5.txt
train --data image=x.npy,label=y.npy --val-split 0.2 --seed 5 --epochs 2
same_as seed5.txt "--seed 5 again"
train --data image=x.npy,label=y.npy --val-split 0.2 --seed 6 --epochs 2
[ "$rc" = 0 ] && ! cmp -s epochs.txt seed5.txt && ok || fail "--seed 6 gave --seed 5's run: $(cat out err)"

# Without held-out examples only the training loss; --limit takes the first examples; a fixed
# batch drops the short last one, a bounded batch runs it.
train --data image=x.npy,label=y.npy --limit 500 --log fixed.jsonl
grep -q "^mlp: 500 training examples, 0 validation examples; batch 32, 4 classes, 15 batches an epoch$" out &&
  grep -q "^epoch 1: train loss [0-9.]*, [0-9.]* s$" out && [ "$(grep -c '"step"' fixed.jsonl)" = 15 ] && ok ||
  fail "fixed batch, 500 examples: $(cat out err)"
train --data image=x.npy,label=y.npy --limit 500 -D batch=1..32 --log bounded.jsonl
grep -q "16 batches an epoch$" out && [ "$(grep -c '"step"' bounded.jsonl)" = 16 ] && ok ||
  fail "bounded batch, 500 examples: $(cat out err)"

# A schedule moves the logged lr every step; --lr sets the base it starts from.
sed 's/train loss with sgd(lr=0.05, momentum=0.9)/train loss with sgd(lr=0.05, momentum=0.9, nesterov=true) schedule step(step_size=5, gamma=0.5)/' \
  mlp.kiln >sched.kiln
"$kiln" train sched.kiln --data image=x.npy,label=y.npy --log sched.jsonl --lr 0.2 >out 2>err
[ $? = 0 ] && /usr/bin/python3 - <<'P' && ok || fail "the schedule's lr in the log: $(cat err; head -12 sched.jsonl)"
import json
lrs = [l["lr"] for l in map(json.loads, open("sched.jsonl")) if "step" in l]
want = [0.2 * 0.5 ** (i // 5) for i in range(16)]
assert len(lrs) == 16 and all(abs(a - b) < 1e-7 for a, b in zip(lrs, want)), lrs
P

# Checkpoints: 20 steps of 48 with --checkpoint (every 7 steps, and where --max-steps stops it,
# mid-epoch), then --resume to --epochs 3 in a fresh process: the weights, and every logged
# loss and lr, of the run that never stopped (AdamW, a cosine schedule, dropout).
sed 's/train loss with sgd(lr=0.05, momentum=0.9)/train loss with adamw(lr=0.01) schedule cosine(total=60, warmup=5)/' mlp.kiln >ck.kiln
"$kiln" train ck.kiln --data image=x.npy,label=y.npy --epochs 3 --log whole.jsonl --save whole.safetensors >out 2>err || fail "ck.kiln: $(cat err)"
"$kiln" train ck.kiln --data image=x.npy,label=y.npy --epochs 3 --checkpoint ck --every 7 --max-steps 20 --log part.jsonl >out 2>err
grep -q "stopped after step 20" out && [ "$(ls ck)" = "state-20.safetensors
train.json" ] && grep -q '"epoch": 2, "batch": 4' ck/train.json && ok || fail "--max-steps 20 with --checkpoint: $(cat out err; ls ck)"
"$kiln" train ck.kiln --data image=x.npy,label=y.npy --epochs 3 --resume ck --checkpoint ck --log part.jsonl --save part.safetensors >out 2>err
if ! grep -q "^resumed from ck: epoch 2, batch 4 of 16, step 20$" out; then fail "--resume: $(cat out err)"
elif ! cmp -s whole.safetensors part.safetensors; then fail "--resume: the weights differ from the run that never stopped"
else ok; fi
/usr/bin/python3 - <<'P' && ok || fail "--resume: the log differs from the run that never stopped"
import json
steps = lambda f: [(l["step"], l["loss"], l["lr"]) for l in map(json.loads, open(f)) if "step" in l]
assert steps("whole.jsonl") == steps("part.jsonl") and len(steps("whole.jsonl")) == 48
P
"$kiln" train ck.kiln --data image=x.npy,label=y.npy --epochs 3 --resume ck >out 2>err
grep -q "the checkpoint is at the end of epoch 3; --epochs 3 trains no more" out && [ "$(ls ck)" = "state-48.safetensors
train.json" ] && ok || fail "--resume at the end: $(cat out err; ls ck)"
"$kiln" train ck.kiln --data image=x.npy,label=y.npy --resume nowhere >out 2>err
[ $? = 1 ] && grep -q "nowhere/train.json: No such file" err && ok || fail "--resume nowhere: $(cat err)"
sed 's/model mlp/model other/' ck.kiln >other.kiln
"$kiln" train other.kiln --data image=x.npy,label=y.npy --resume ck >out 2>err
[ $? = 1 ] && grep -q "a checkpoint of model 'mlp', not of 'other'" err && ok || fail "--resume of another model: $(cat err)"
"$kiln" train ck.kiln --data image=x.npy,label=y.npy --every 5 >out 2>err
[ $? = 2 ] && grep -q "needs --checkpoint" err && ok || fail "--every without --checkpoint: $(cat err)"

# expect_error PATTERN ARGS...: exit 1, PATTERN on stderr, and no step taken.
expect_error() {
  local pattern=$1
  shift
  train "$@"
  if [ "$rc" != 1 ]; then fail "kiln train $*: exit $rc, expected 1: $(cat err)"
  elif ! grep -q -- "$pattern" err; then fail "kiln train $*: no '$pattern' in: $(cat err)"
  elif grep -q "^epoch" err out; then fail "kiln train $*: it trained before refusing: $(cat out err)"
  else ok; fi
}
expect_error "gives no array for input 'label'" --data image=x.npy
expect_error "no input of model 'mlp' is named 'extra'" --data image=x.npy,label=y.npy,extra=y.npy
expect_error "its examples are f32\[64\]; input 'label' of model 'mlp' takes one i32" --data image=x.npy,label=x.npy
expect_error "its examples are f32\[63\]; input 'image' of model 'mlp' takes f32\[64\]" --data image=x63.npy,label=y.npy
expect_error "y500.npy holds 500 examples, x.npy holds 512" --data image=x.npy,label=y500.npy
expect_error "xcut.npy: data is .* bytes, the header promises" --data image=xcut.npy,label=y.npy
expect_error "cut.npz: not a readable .npz" --data cut.npz
expect_error "flip.npz:image: the deflated data is corrupt" --data flip.npz
# 55 bytes whose zip64 locator points into a file shorter than a zip64 end record (a fuzzer
# find: the bound n - 56 wrapped around and the reader read far past the mapping).
cp "$root/tests/fuzz/corpus/npz/zip64_short.npz" short64.npz
expect_error "short64.npz: not a readable .npz (zip) archive: bad zip64 end record" --data short64.npz
expect_error "float64 value 1e+300 at element 777 is beyond float32's range" --data image=xhuge.npy,label=y.npy
expect_error "int64 value 1099511627776 at element 9 is beyond int32's range" --data image=x.npy,label=ylong.npy
expect_error "xf.npy: the array is in Fortran order" --data image=xf.npy,label=y.npy
expect_error "dtype '<f2' is not supported" --data image=x16.npy,label=y.npy
expect_error "nope.npy: No such file" --data image=nope.npy,label=y.npy
expect_error "name the model input it feeds" --data x.npy
expect_error "training label 4 of example 300 (ybad.npy) is not one of the 4 classes" --data image=x.npy,label=ybad.npy
expect_error "validation label 4 of example 300 (ybad.npy)" --data image=x.npy,label=y.npy --val image=x.npy,label=ybad.npy
expect_error "no array 'nothing' in the archive" --data train.npz:nothing
expect_error "a second array for 'image'" --data image=x.npy,image=x.npy,label=y.npy
expect_error "--val gives no array for input 'image'" --data image=x.npy,label=y.npy --val label=yv.npy
expect_error "--val-split 0.999 of 512 examples leaves 512 to hold out and 0 to train on" --data image=x.npy,label=y.npy --val-split 0.999
expect_error "fewer than one batch" --data image=x.npy,label=y.npy --limit 20
"$kiln" train mlp.kiln --data image=x.npy,label=y.npy --val image=xv.npy,label=yv.npy --val-split 0.1 >out 2>err
[ $? = 2 ] && grep -q "give one" err && ok || fail "--val with --val-split: $(cat err)"
"$kiln" train mlp.kiln --data image=x.npy,label=y.npy --val-split 1.5 >out 2>err
[ $? = 2 ] && grep -q "a fraction between 0 and 1" err && ok || fail "--val-split 1.5: $(cat err)"
"$kiln" train mlp.kiln --data image=x.npy,label=y.npy --log "$tmp/no/such/dir/run.jsonl" >out 2>err
[ $? = 1 ] && grep -q "No such file" err && ok || fail "--log into a missing directory: $(cat err)"

echo "train_npy: $pass passed, $failed failed"
[ "$failed" = 0 ]
