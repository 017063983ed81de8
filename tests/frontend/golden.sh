#!/usr/bin/env bash
# golden.sh KILN errors/NAME.kiln — runs `kiln check NAME.kiln [args]` inside errors/ (so
# messages carry the bare file name), with args taken from a first line "# args: ...".
# Passes when the exit code is 1 and stderr equals errors/NAME.expected exactly.
set -u
kiln=$1 src=$2
dir=$(dirname "$src") name=$(basename "$src" .kiln)
args=$(head -c 4096 "$src" | head -n 1 | sed -n 's/^# args: //p')
cd "$dir" || exit 1
actual=$(timeout 20 "$kiln" check "$name.kiln" $args 2>&1 >/dev/null)
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: $name: exit code $rc, expected 1"; echo "$actual"; exit 1; }
expected=$(cat "$name.expected")
if [ "$actual" != "$expected" ]; then
  echo "FAIL: $name: diagnostics differ"
  diff -u <(printf '%s\n' "$expected") <(printf '%s\n' "$actual")
  exit 1
fi
echo "golden $name: 1 passed, 0 failed"
