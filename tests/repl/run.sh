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
  sed "s|OUT/|$tmp/|g" "$script" > "$tmp/$name.kiln"
  HOME=$tmp "$kiln" repl < "$tmp/$name.kiln" > "$tmp/$name.out" 2>&1
  rc=$?
  want_rc=0
  grep -q "error" "$dir/$name.expected" && want_rc=1
  sed -i "s|$tmp/|OUT/|g" "$tmp/$name.out"
  if ! diff -u "$dir/$name.expected" "$tmp/$name.out"; then echo "FAIL: $name: output differs"; fail=1; fi
  if [ "$rc" != "$want_rc" ]; then echo "FAIL: $name: exit status $rc, expected $want_rc"; fail=1; fi
  [ -e "$tmp/.kiln_history" ] && { echo "FAIL: $name: a script wrote history"; fail=1; }
done
[ $fail = 0 ] && echo "repl scripts: all match"
exit $fail
