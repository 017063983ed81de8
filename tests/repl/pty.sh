#!/usr/bin/env bash
# pty.sh KILN SRC_DIR — `kiln repl` driven through a pseudo-terminal (util-linux `script`), as
# a person types: a statement with an error and the session going on, a def over several lines
# (the "...:" continuation prompt), a value shown; a second session that recalls the last line
# of the first from ~/.kiln_history with the up arrow; a third that loads a model and trains
# it a few steps.
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
[ $fail = 0 ] && echo "repl through a pseudo-terminal: as typed"
exit $fail
