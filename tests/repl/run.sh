#!/usr/bin/env bash
# run.sh KILN SRC_DIR — each tests/repl/*.kiln piped into `kiln repl` (a script: no prompts)
# must print its .expected file (stdout and stderr together) and exit 1 exactly when the
# expected output holds an error. OUT in a script is a temporary folder.
set -uo pipefail
kiln=$1 dir=$2/tests/repl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for script in "$dir"/*.kiln; do
  name=$(basename "$script" .kiln)
  sed "s|OUT/|$tmp/|g; s|SRC/|$dir/|g" "$script" > "$tmp/$name.script"
  HOME=$tmp "$kiln" repl < "$tmp/$name.script" > "$tmp/$name.out" 2>&1
  rc=$?
  want_rc=0
  grep -q "error" "$dir/$name.expected" && want_rc=1
  sed -i "s|$tmp/|OUT/|g; s|$dir/|SRC/|g" "$tmp/$name.out"
  if ! diff -u "$dir/$name.expected" "$tmp/$name.out"; then echo "FAIL: $name: output differs"; fail=1; fi
  if [ "$rc" != "$want_rc" ]; then echo "FAIL: $name: exit status $rc, expected $want_rc"; fail=1; fi
  [ -e "$tmp/.kiln_history" ] && { echo "FAIL: $name: a script wrote history"; fail=1; }
done
# grad.kiln's export runs as a model: kiln run with its weights gives the value the session printed.
out=$("$kiln" run "$tmp/exported.kiln" --weights "$tmp/exported.safetensors" --input "x=$tmp/gx.npy" 2>&1)
grep -qF "y: f32[] = 11.5587" <<<"$out" || { echo "FAIL: the exported model does not compute y = 11.5587:"; echo "$out"; fail=1; }
# const.kiln's export declares the model's const as a const and computes what predict did.
grep -q '^  const gain : f32\[3\]$' "$tmp/scaled.kiln" || { echo "FAIL: the export does not declare gain const:"; cat "$tmp/scaled.kiln"; fail=1; }
"$kiln" run "$tmp/scaled.kiln" --weights "$tmp/scaled.safetensors" --input "x=$tmp/cx.npy" --output "y=$tmp/cy_run.npy" >/dev/null 2>&1 &&
  cmp -s "$tmp/cy.npy" "$tmp/cy_run.npy" || { echo "FAIL: the exported model with a const differs from predict in the REPL"; fail=1; }
# model.kiln's predict on arrays is the JIT'd model's predict, bit for bit (same seed, same x).
"$kiln" run "$dir/models/tiny.kiln" --input "image=$tmp/mx.npy" --output "prob=$tmp/p_run.npy" >/dev/null 2>&1 &&
  cmp -s "$tmp/p.npy" "$tmp/p_run.npy" || { echo "FAIL: predict(x) in the REPL differs from kiln run's"; fail=1; }
# bounded.kiln's predict on 3 rows is kiln run's at -D batch=1..4 on the same rows, bit for bit.
"$kiln" run "$dir/models/tiny.kiln" -D batch=1..4 --input "image=$tmp/bx.npy" --output "prob=$tmp/bp_run.npy" >/dev/null 2>&1 &&
  cmp -s "$tmp/bp.npy" "$tmp/bp_run.npy" || { echo "FAIL: predict(x) of a bounded model in the REPL differs from kiln run's"; fail=1; }
# ... and the model whose reshape holds the batch, at 3 rows (twice: the graph kept) and at 4.
for rows in 3 4; do
  x=fx; [ $rows = 4 ] && x=f4
  q=fq; [ $rows = 4 ] && q=fq4
  "$kiln" run "$dir/models/flat.kiln" -D batch=1..4 --input "image=$tmp/$x.npy" --output "prob=$tmp/${q}_run.npy" >/dev/null 2>&1 &&
    cmp -s "$tmp/$q.npy" "$tmp/${q}_run.npy" || { echo "FAIL: predict on $rows rows of a bounded model with a reshape differs from kiln run's"; fail=1; }
done
cmp -s "$tmp/fq.npy" "$tmp/fq2.npy" || { echo "FAIL: a second predict at the same extents differs"; fail=1; }
"$kiln" run "$dir/models/pos.kiln" -D seq=1..4 --input "x=$tmp/px.npy" --output "y=$tmp/py_run.npy" >/dev/null 2>&1 &&
  cmp -s "$tmp/py.npy" "$tmp/py_run.npy" || { echo "FAIL: predict at seq 3 of a bounded position table differs from kiln run's"; fail=1; }
# ... and after :weights with the first weights, predict gives the first prediction again.
cmp -s "$tmp/p.npy" "$tmp/p2.npy" || { echo "FAIL: predict after :weights OUT/first.safetensors differs from the first predict"; fail=1; }
# :passes prints timings, so it is checked by content: every pass, then the statistics.
out=$(printf ':zeros a f32[2]\np = exp(a) + 1\n:passes p\n' | HOME=$tmp "$kiln" repl 2>&1)
for want in "after pass infer" "after pass fusion" "t1 = _fused(a0, a1)" "planned arena"; do
  grep -qF "$want" <<<"$out" || { echo "FAIL: :passes prints no '$want':"; echo "$out"; fail=1; }
done
# :time on prints each statement's time and whether it compiled or found the cached code.
out=$(printf ':zeros a f32[2]\n:time on\nexp(a)\nexp(a)\n:time off\nexp(a)\n' | HOME=$tmp "$kiln" repl 2>&1)
grep -qE '^\([0-9.]+ ms: front end, compile and run\)$' <<<"$out" && grep -qE '^\([0-9.]+ ms: front end, cached code and run\)$' <<<"$out" &&
  [ "$(grep -c ' ms: ' <<<"$out")" = 2 ] || { echo "FAIL: :time on/off: a compiled then a cached time, then none:"; echo "$out"; fail=1; }
# kiln repl SCRIPT runs each script as kiln repl < SCRIPT does: the same output and exit
# status; a missing file or two scripts are refused with a message.
for script in "$dir"/basics.kiln "$dir"/clean.kiln; do   # one with errors, one without
  name=$(basename "$script" .kiln)
  sed "s|OUT/|$tmp/|g; s|SRC/|$dir/|g" "$script" > "$tmp/arg.script"
  HOME=$tmp "$kiln" repl "$tmp/arg.script" > "$tmp/arg.out" 2>&1
  rc=$?
  want_rc=0
  grep -q "error" "$dir/$name.expected" && want_rc=1
  sed -i "s|$tmp/|OUT/|g; s|$dir/|SRC/|g" "$tmp/arg.out"
  diff -q "$dir/$name.expected" "$tmp/arg.out" >/dev/null && [ $rc = $want_rc ] ||
    { echo "FAIL: kiln repl $name.kiln (exit $rc) differs from kiln repl < $name.kiln (exit $want_rc)"; fail=1; }
done
out=$("$kiln" repl "$tmp/no-such.kiln" 2>&1); rc=$?
[ $rc = 1 ] && grep -q "cannot open" <<<"$out" || { echo "FAIL: kiln repl on a missing file: exit $rc: $out"; fail=1; }
out=$("$kiln" repl a.kiln b.kiln 2>&1); rc=$?
[ $rc = 2 ] && grep -q "at most one SCRIPT" <<<"$out" || { echo "FAIL: kiln repl with two scripts: exit $rc: $out"; fail=1; }
[ $fail = 0 ] && echo "repl scripts: all match"
exit $fail
