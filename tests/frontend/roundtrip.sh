#!/usr/bin/env bash
# roundtrip.sh KILN MODEL.kiln — the model checks clean (exit 0, nothing on stderr), and its
# printed graph parses back to exactly the same text: the printer and the parser agree.
set -u
kiln=$1 src=$2
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
"$kiln" check "$src" >"$tmp/table" 2>"$tmp/err" || { echo "FAIL: kiln check $src exited $?"; cat "$tmp/err"; exit 1; }
[ -s "$tmp/err" ] && { echo "FAIL: kiln check $src wrote to stderr:"; cat "$tmp/err"; exit 1; }
grep -q '^total:' "$tmp/table" || { echo "FAIL: no totals line in the table"; exit 1; }
"$kiln" check --print "$src" >"$tmp/p1.kiln" || { echo "FAIL: --print"; exit 1; }
"$kiln" check --print "$tmp/p1.kiln" >"$tmp/p2.kiln" 2>"$tmp/err2" || { echo "FAIL: printed graph does not parse:"; cat "$tmp/err2"; exit 1; }
diff -u "$tmp/p1.kiln" "$tmp/p2.kiln" || { echo "FAIL: printed graph does not round-trip"; exit 1; }
echo "roundtrip: 1 passed, 0 failed"
