#!/usr/bin/env bash
# golden.sh KILN golden/NAME.kiln — runs `kiln passes NAME.kiln [args]` inside golden/ with
# args taken from a first line "# args: ...". Passes when it exits 0 and its stdout (the
# printed graph and the explain lines: what each pass recorded, and why) equals
# golden/NAME.expected exactly. Regenerate one with: (cd golden && kiln passes NAME.kiln ARGS > NAME.expected)
set -u
kiln=$1 src=$2
dir=$(dirname "$src") name=$(basename "$src" .kiln)
args=$(head -c 4096 "$src" | head -n 1 | sed -n 's/^# args: //p')
cd "$dir" || exit 1
actual=$(timeout 20 "$kiln" passes "$name.kiln" $args 2>&1)
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: $name: exit code $rc"; echo "$actual"; exit 1; }
expected=$(cat "$name.expected")
if [ "$actual" != "$expected" ]; then
  echo "FAIL: $name: output differs"
  diff -u <(printf '%s\n' "$expected") <(printf '%s\n' "$actual")
  exit 1
fi
echo "golden $name: 1 passed, 0 failed"
