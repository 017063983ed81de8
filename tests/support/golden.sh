#!/usr/bin/env bash
# golden.sh COMMAND RC STREAM KILN DIR/NAME.kiln — the golden-file tests' one runner: runs
# `kiln COMMAND NAME.kiln [args]` inside DIR (so messages carry the bare file name), with args
# from a first line "# args: ...". Passes when the exit code is RC and the chosen output
# (STREAM: err = stderr alone, all = stdout and stderr) equals DIR/NAME.expected exactly.
# tests/frontend/golden.sh (check, diagnostics) and tests/passes/golden.sh (passes, the
# printed graph) call it.
set -u
cmd=$1 want=$2 stream=$3 kiln=$4 src=$5
dir=$(dirname "$src") name=$(basename "$src" .kiln)
args=$(head -c 4096 "$src" | head -n 1 | sed -n 's/^# args: //p')
cd "$dir" || exit 1
if [ "$stream" = err ]; then
  actual=$(timeout 20 "$kiln" "$cmd" "$name.kiln" $args 2>&1 >/dev/null)
else
  actual=$(timeout 20 "$kiln" "$cmd" "$name.kiln" $args 2>&1)
fi
rc=$?
[ "$rc" -eq "$want" ] || { echo "FAIL: $name: exit code $rc, expected $want"; echo "$actual"; exit 1; }
expected=$(cat "$name.expected")
if [ "$actual" != "$expected" ]; then
  echo "FAIL: $name: output differs"
  diff -u <(printf '%s\n' "$expected") <(printf '%s\n' "$actual")
  exit 1
fi
echo "golden $name: 1 passed, 0 failed"
