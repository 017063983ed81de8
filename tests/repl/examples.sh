#!/usr/bin/env bash
# examples.sh KILN SRC_DIR — deferred compute against the AOT path on every example: each
# examples/*.kiln is compiled to a .so (kiln compile), loaded in `kiln repl` with :model (same
# seed, so the same weights), predict(x) recorded on arrays and computed through the JIT,
# and the result must equal the .so's predict on the same input bit for bit.
set -uo pipefail
kiln=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for model in "$src"/examples/*.kiln; do
  name=$(basename "$model" .kiln)
  "$kiln" compile "$model" -o "$tmp/lib$name.so" >/dev/null 2>&1 || { echo "FAIL: $name: kiln compile"; fail=1; continue; }
  # The .so names its one predict input and its type when run without it.
  missing=$("$kiln" run "$tmp/lib$name.so" 2>&1 | grep -o 'missing --input [A-Za-z_0-9]*=FILE.npy ([fi]32\[[0-9, ]*\])')
  input=$(sed 's/missing --input \([A-Za-z_0-9]*\)=.*/\1/' <<<"$missing")
  type=$(sed 's/.*(\(.*\))/\1/; s/ //g' <<<"$missing")
  [ -n "$input" ] || { echo "FAIL: $name: cannot find its predict input"; fail=1; continue; }
  case $type in f32*) make=":rand x $type seed=7" ;; *) make=":zeros x $type" ;; esac
  printf ':model %s\n%s\np = predict(x)\n:save x %s\n:save p %s\n' "$model" "$make" "$tmp/x.npy" "$tmp/p_repl.npy" |
    HOME=$tmp "$kiln" repl > "$tmp/$name.out" 2>&1 || { echo "FAIL: $name: the REPL session:"; cat "$tmp/$name.out"; fail=1; continue; }
  output=$("$kiln" run "$tmp/lib$name.so" --input "$input=$tmp/x.npy" 2>/dev/null | head -1 | cut -d: -f1)
  "$kiln" run "$tmp/lib$name.so" --input "$input=$tmp/x.npy" --output "$output=$tmp/p_so.npy" >/dev/null 2>&1 &&
    cmp -s "$tmp/p_repl.npy" "$tmp/p_so.npy" || { echo "FAIL: $name: predict on arrays differs from the .so's"; fail=1; continue; }
  echo "$name: predict on arrays equals the .so's ($input: $type)"
done
exit $fail
