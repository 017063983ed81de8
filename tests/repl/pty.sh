#!/usr/bin/env bash
# pty.sh KILN SRC_DIR — `kiln repl` driven through a pseudo-terminal (util-linux `script`), as
# a person types: a statement with an error and the session going on, a def over several lines
# (the "...:" continuation prompt), a value shown; a second session that recalls the last line
# of the first from ~/.kiln_history with the up arrow; a third that loads a model and trains
# it a few steps; a fourth whose long compile Ctrl-C interrupts, and a fifth whose `:model`
# compile it interrupts.
set -uo pipefail
kiln=$1 src=$2
command -v script >/dev/null || { echo "SKIP: util-linux 'script' is not installed"; exit 77; }
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
out=$(printf ':zeros a f32[2]\nb = relu(c)\nb = exp(a)\ndef f(t) {\n  u = t * 2\n  return u\n}\nf(b)\n:quit\n' |
      HOME=$home timeout 60 script -qec "$kiln repl" /dev/null | tr -d '\r' | sed 's/\x1b\[[0-9;]*[A-Za-z]//g')
fail=0
check() { grep -qF -- "$2" <<<"$out" || { echo "FAIL: $1: no '$2' in:"; echo "$out"; fail=1; }; }
check "numbered prompt" "[3]: b = exp(a)"
check "error with its location" "<repl>:2:10: error: unknown name 'c'"
check "caret under the column" "           ^"
check "continuation prompt" "...:   return u"
check "value after the error" "[2. 2.]"
grep -q 'def\\040f(t)' "$home/.kiln_history" || { echo "FAIL: the def is not in ~/.kiln_history"; fail=1; }
# Up arrow, Enter: the last line of the history (:quit) runs again and ends the session.
out=$(printf '\033[A\n' | HOME=$home timeout 60 script -qec "$kiln repl" /dev/null | tr -d '\r' | sed 's/\x1b\[[0-9;]*[A-Za-z]//g')
check "history recalled with the up arrow" "[1]: :quit"
# Ctrl-C (ETX through the terminal: SIGINT) drops a half-typed statement; the session goes on.
out=$( (printf ':zeros a f32[2]\nb = exp('; sleep 1; printf '\003'; sleep 1; printf 'a\n:vars\n:quit\n') |
      HOME=$home timeout 60 script -qec "$kiln repl" /dev/null | tr -d '\r' | sed 's/\x1b\[[0-9;]*[A-Za-z]//g')
check "Ctrl-C cancels the line" "[2]: b = exp(^C"
check "the session goes on after Ctrl-C" "[0. 0.]"
grep -qE '^b +f32' <<<"$out" && { echo "FAIL: the cancelled statement was recorded"; fail=1; }
# A model trained three steps on one batch: the loss printed after each step goes down.
out=$(printf ':model %s/tests/repl/models/tiny.kiln\n:rand x f32[4,6] seed=1\n:zeros y i32[4]\ntrain_step(x, y)\ntrain_step(x, y)\ntrain_step(x, y)\n:quit\n' "$src" |
      HOME=$home timeout 60 script -qec "$kiln repl" /dev/null | tr -d '\r' | sed 's/\x1b\[[0-9;]*[A-Za-z]//g')
check "model loaded" "its weights are arrays now"
losses=$(grep -A1 '^f32\[\]$' <<<"$out" | grep -v -- '--' | grep -v 'f32' | tr '\n' ' ')
awk -v l="$losses" 'BEGIN { n = split(l, v, " "); if (n != 3 || !(v[1] > v[2] && v[2] > v[3])) exit 1 }' ||
  { echo "FAIL: three train_step losses going down, got '$losses':"; echo "$out"; fail=1; }
# Ctrl-D (EOT at an empty prompt) ends the session, exit status 0.
out=$( (printf ':zeros a f32[2]\n'; sleep 1; printf '\004'; sleep 1) |
      HOME=$home timeout 60 script -qec "$kiln repl; echo session-exit=\$?" /dev/null | tr -d '\r' | sed 's/\x1b\[[0-9;]*[A-Za-z]//g')
check "Ctrl-D quits" "session-exit=0"
# Ctrl-C during a compile: a statement whose compile takes seconds (300 distinct fused groups
# between softmaxes) is interrupted once it has started; it fails with "interrupted" at once
# (LLVM's work is left to finish in the background) and the session keeps its variables.
ops=(tanh sin cos sigmoid relu abs)
body=$home/chain.kiln
{ echo ':rand t0 f32[64,64] seed=1'
  for i in $(seq 1 300); do
    k=$i e="t$((i - 1))"
    for j in 0 1 2 3; do e="${ops[k % 6]}($e)" k=$((k / 6)); [ $((j % 2)) = 1 ] && e="($e * 1.5)"; done
    echo "u$i = $e"; echo "t$i = softmax(u$i)"
  done
  echo ':time on'; echo 'sum(t300)'; } > "$body"
mkfifo "$home/in"
HOME=$home timeout 120 script -qec "$kiln repl" /dev/null < "$home/in" > "$home/out" 2>&1 &
spid=$!
exec 3> "$home/in"
cat "$body" >&3
# wait_for TEXT SECONDS: until the session's output holds TEXT; 1 when it does not in time
wait_for() {
  for _ in $(seq 1 $(($2 * 20))); do grep -qF -- "$1" "$home/out" && return 0; sleep 0.05; done
  return 1
}
if wait_for "[603]: sum(t300)" 60; then
  sleep 0.5
  t0=$(date +%s%N)
  printf '\003' >&3
  wait_for "interrupted" 30 || { echo "FAIL: Ctrl-C during the compile did not interrupt it"; fail=1; }
  ms=$((($(date +%s%N) - t0) / 1000000))
  [ "$ms" -lt 3000 ] || { echo "FAIL: the interrupted statement returned ${ms} ms after Ctrl-C"; fail=1; }
  printf 'u1 * 0 + 1\n:vars\n:quit\n' >&3
else
  echo "FAIL: the session never reached the long statement"; fail=1
  printf ':quit\n' >&3
fi
exec 3>&-
wait $spid
out=$(tr -d '\r' < "$home/out" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g')
check "the compile interrupted" "error: interrupted"
check "the session goes on after an interrupted compile" "[[1. 1. 1. ... 1. 1. 1.]"
grep -qE '^t300 +f32\[64, 64\]' <<<"$out" || { echo "FAIL: :vars after the interrupt lacks t300:"; tail -20 <<<"$out"; fail=1; }
echo "Ctrl-C interrupted a compile ${ms:-?} ms after it was pressed"
# Ctrl-C during :model's compile: the same chain as a model file (seconds of LLVM work); the
# command fails with "interrupted" at once, no model is loaded, and a later :model works.
model=$home/chain_model.kiln
{ echo 'model chain {'; echo '  input t0 : f32[64, 64]'
  grep -E '^[ut][0-9]+ = ' "$body" | sed 's/^/  /'
  echo '  output t300'; echo '}'; } > "$model"
rm -f "$home/in" && mkfifo "$home/in"
HOME=$home timeout 120 script -qec "$kiln repl" /dev/null < "$home/in" > "$home/out" 2>&1 &
spid=$!
exec 3> "$home/in"
printf ':model %s\n' "$model" >&3
ms=
if wait_for "[1]: :model" 30; then
  sleep 0.5
  t0=$(date +%s%N)
  printf '\003' >&3
  wait_for "interrupted" 30 || { echo "FAIL: Ctrl-C during :model's compile did not interrupt it"; fail=1; }
  ms=$((($(date +%s%N) - t0) / 1000000))
  [ "$ms" -lt 3000 ] || { echo "FAIL: the interrupted :model returned ${ms} ms after Ctrl-C"; fail=1; }
  printf 'predict(t0)\n:model %s/tests/repl/models/tiny.kiln\n:vars\n:quit\n' "$src" >&3
else
  echo "FAIL: the session never reached :model"; fail=1
  printf ':quit\n' >&3
fi
exec 3>&-
wait $spid
out=$(tr -d '\r' < "$home/out" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g')
check ":model's compile interrupted" "error: interrupted"
check "no model after the interrupted :model" "predict: no model loaded"
check "a later :model loads" "its weights are arrays now"
grep -qE '^hidden\.weight +f32' <<<"$out" || { echo "FAIL: :vars after the second :model lacks hidden.weight:"; tail -20 <<<"$out"; fail=1; }
echo "Ctrl-C interrupted :model's compile ${ms:-?} ms after it was pressed"
[ $fail = 0 ] && echo "repl through a pseudo-terminal: as typed"
exit $fail
