#!/usr/bin/env bash
# train.sh KILN MKIDX SRC_ROOT — kiln train end to end on a tiny synthetic MNIST-layout data
# set (8x8 images, the class is the bright quadrant): it learns, plain and gzipped IDX read
# the same, --save writes weights kiln run loads, and bad data, bad models and bad usage fail
# with a message and the right exit code, never a crash. With Fashion-MNIST installed, LeNet
# also trains briefly on it.
set -u
kiln=$1 mkidx=$2 root=$3
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
pass=0 failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
ok() { pass=$((pass + 1)); }

# model NAME INPUT_SHAPE BODY_INPUT CLASSES [TRAIN]: a small MLP for the synthetic images.
model() {
  cat >"$tmp/$1.kiln" <<K
dim batch = 32
model $1 {
  input image : f32[batch, $2]
  input label : i32[batch]
  hidden = relu(fully_connected($3, num_hidden=32))
  logits = fully_connected(hidden, num_hidden=$4)
  loss   = softmax_cross_entropy(logits, label)
  output logits
  ${5-train loss with sgd(lr=0.1, momentum=0.9)}
}
K
}
model mlp 64 image 4
model conv4d "1, 8, 8" "flatten(image)" 4
model wide 784 image 4
model twoclass 64 image 2
model notrain 64 image 4 ""

# train ARGS...: runs kiln train, stdout in $tmp/out, stderr in $tmp/err, exit code in $rc.
train() { "$kiln" train "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }
# expect_error RC PATTERN ARGS...: kiln train fails with exit code RC and PATTERN on stderr.
expect_error() {
  local want=$1 pattern=$2
  shift 2
  train "$@"
  if [ "$rc" != "$want" ]; then fail "kiln train $*: exit $rc, expected $want: $(cat "$tmp/err")"
  elif ! grep -q -- "$pattern" "$tmp/err"; then fail "kiln train $*: no '$pattern' in: $(cat "$tmp/err")"
  else ok; fi
}
accuracy() { sed -n "s/^epoch $1: .*test accuracy \([0-9.]*\)%.*/\1/p" "$tmp/out"; }

mkdir "$tmp/plain" && "$mkidx" "$tmp/plain" 512 128 || { echo "FAIL: mkidx"; exit 1; }
cp -r "$tmp/plain" "$tmp/gz" && gzip "$tmp/gz"/*

# It learns: two epochs of the MLP well above chance (25%), with a progress bar in the log.
train "$tmp/mlp.kiln" --data "$tmp/plain" --epochs 2 --save "$tmp/w.safetensors"
acc=$(accuracy 2)
if [ "$rc" != 0 ]; then fail "kiln train mlp: exit $rc: $(cat "$tmp/err")"
elif [ -z "$acc" ] || ! awk -v a="$acc" 'BEGIN { exit !(a > 80) }'; then fail "accuracy '$acc' after 2 epochs: $(cat "$tmp/out")"
elif ! grep -q '^epoch 1/2 \[=*\] 512/512 loss [0-9.]* [0-9]* img/s$' "$tmp/err"; then fail "no progress bar: $(cat "$tmp/err")"
elif ! grep -q '(128 images)' "$tmp/out"; then fail "not every test image was evaluated: $(cat "$tmp/out")"
else ok; fi

# Gzipped IDX files give the very same run.
train "$tmp/mlp.kiln" --data "$tmp/gz" --epochs 2
[ "$rc" = 0 ] && [ "$(accuracy 2)" = "$acc" ] && ok || fail "gzipped data: exit $rc, accuracy '$(accuracy 2)' vs '$acc': $(cat "$tmp/err")"

# The saved weights load into kiln run (-D batch=1: the weights do not depend on the batch).
{ printf '\x93NUMPY\x01\x00\x76\x00'; printf "%-117s\n" "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 64), }"
  head -c 256 /dev/zero; } >"$tmp/x.npy"
if [ ! -s "$tmp/w.safetensors" ]; then fail "--save wrote nothing"
elif ! "$kiln" run "$tmp/mlp.kiln" -D batch=1 --weights "$tmp/w.safetensors" --input image="$tmp/x.npy" >"$tmp/out" 2>"$tmp/err"
then fail "kiln run --weights of the saved file: $(cat "$tmp/err")"
else ok; fi

# Any image shape with rows*cols values per sample; --limit, --lr and --seed are taken.
train "$tmp/conv4d.kiln" --data "$tmp/gz" --limit 100 --lr 0.05 --seed 3
[ "$rc" = 0 ] && grep -q "100 training images, 100 test images" "$tmp/out" && [ -n "$(accuracy 1)" ] && ok ||
  fail "f32[batch, 1, 8, 8] with --limit 100: exit $rc: $(cat "$tmp/out" "$tmp/err")"

# Bad data: missing, truncated, wrong magic, garbage, labels that do not fit.
mkbad() { rm -rf "$tmp/bad" && cp -r "$tmp/$1" "$tmp/bad"; }
expect_error 1 "no such directory" "$tmp/mlp.kiln" --data "$tmp/nowhere"
mkbad plain && rm "$tmp/bad/t10k-labels-idx1-ubyte"
expect_error 1 "t10k-labels-idx1-ubyte: no such file" "$tmp/mlp.kiln" --data "$tmp/bad"
mkbad plain && head -c 1000 "$tmp/plain/train-images-idx3-ubyte" >"$tmp/bad/train-images-idx3-ubyte"
expect_error 1 "header promises" "$tmp/mlp.kiln" --data "$tmp/bad"
mkbad gz && head -c 300 "$tmp/gz/train-images-idx3-ubyte.gz" >"$tmp/bad/train-images-idx3-ubyte.gz"
expect_error 1 "cannot decompress" "$tmp/mlp.kiln" --data "$tmp/bad"
mkbad plain && { printf '\x00\x00\x08\x04'; tail -c +5 "$tmp/plain/t10k-images-idx3-ubyte"; } >"$tmp/bad/t10k-images-idx3-ubyte"
expect_error 1 "magic" "$tmp/mlp.kiln" --data "$tmp/bad"
mkbad plain && printf 'garbage' >"$tmp/bad/train-labels-idx1-ubyte"
expect_error 1 "too short" "$tmp/mlp.kiln" --data "$tmp/bad"
mkbad plain && printf 'garbage' | gzip >"$tmp/bad/train-labels-idx1-ubyte.gz" && rm "$tmp/bad/train-labels-idx1-ubyte"
expect_error 1 "too short" "$tmp/mlp.kiln" --data "$tmp/bad"
mkbad plain && printf '\x00\x00\x08\x03\xff\xff\xff\xff\x00\x00\x00\x08\x00\x00\x00\x08' >"$tmp/bad/train-images-idx3-ubyte"
expect_error 1 "header promises" "$tmp/mlp.kiln" --data "$tmp/bad"
mkbad plain && printf '\x00\x00\x08\x03\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x08' >"$tmp/bad/t10k-images-idx3-ubyte"
expect_error 1 "not plausible" "$tmp/mlp.kiln" --data "$tmp/bad"
expect_error 1 "fewer than one batch" "$tmp/mlp.kiln" --data "$tmp/plain" --limit 10
mkdir "$tmp/it's" && cp "$tmp/gz"/* "$tmp/it's/"
expect_error 1 "quote" "$tmp/mlp.kiln" --data "$tmp/it's"

# Models that do not fit the data or kiln train.
expect_error 1 "takes 784 values per image" "$tmp/wide.kiln" --data "$tmp/plain"
expect_error 1 "is not one of the 2 classes" "$tmp/twoclass.kiln" --data "$tmp/plain"
expect_error 1 "no train statement" "$tmp/notrain.kiln" --data "$tmp/plain"

# Usage errors.
expect_error 2 "--data is required" "$tmp/mlp.kiln"
expect_error 2 "--epochs expects an integer" "$tmp/mlp.kiln" --data "$tmp/plain" --epochs 0
expect_error 2 "--lr expects a positive number" "$tmp/mlp.kiln" --data "$tmp/plain" --lr -1
expect_error 2 "unknown option" "$tmp/mlp.kiln" --data "$tmp/plain" --bogus
expect_error 2 "no FILE given" --data "$tmp/plain"

# The real data set, briefly, where it is installed (no accuracy threshold: 2000 images).
fm=/usr/share/datasets/fashion-mnist
if [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
  train "$root/examples/lenet.kiln" --data "$fm" --limit 2000
  [ "$rc" = 0 ] && [ -n "$(accuracy 1)" ] && ok || fail "lenet on Fashion-MNIST: exit $rc: $(cat "$tmp/out" "$tmp/err")"
else
  echo "note: $fm is not installed (dataset-fashion-mnist); the LeNet run was skipped"
fi

echo "train: $pass passed, $failed failed"
[ "$failed" = 0 ]
