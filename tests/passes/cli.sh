#!/usr/bin/env bash
# cli.sh KILN MODEL.kiln — `kiln passes` on a model, in both modes and with every flag: exits
# 0, prints the stats table and the plan figures, a DOT file with balanced braces, the
# graph after every pass, and rejects an unknown pass name with exit 2.
set -u
kiln=$1 src=$2
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for mode in predict train; do
  grep -q '^ *train ' "$src" || [ "$mode" = predict ] || continue
  "$kiln" passes "$src" --mode $mode --stats >"$tmp/stats" 2>"$tmp/err" || fail "--stats --mode $mode: $(cat "$tmp/err")"
  grep -q '^plan ' "$tmp/stats" || fail "no plan row in the stats ($mode)"
  grep -q '% of naive' "$tmp/stats" || fail "no memory figure ($mode)"
  for view in dot dot-full; do
    "$kiln" passes "$src" --mode $mode --$view "$tmp/g.dot" >/dev/null || fail "--$view ($mode)"
    open=$(tr -cd '{' <"$tmp/g.dot" | wc -c) close=$(tr -cd '}' <"$tmp/g.dot" | wc -c)
    [ "$open" -gt 0 ] && [ "$open" -eq "$close" ] || fail "DOT braces unbalanced ($open vs $close, --$view)"
    if command -v dot >/dev/null; then
      dot -Tsvg "$tmp/g.dot" -o "$tmp/g.svg" 2>"$tmp/doterr" || fail "graphviz cannot render the --$view DOT ($mode): $(cat "$tmp/doterr")"
      [ -s "$tmp/doterr" ] && fail "graphviz warned on the --$view DOT ($mode): $(head -3 "$tmp/doterr")"
    else
      echo "note: graphviz is not installed; the DOT file was checked but not rendered"
    fi
  done
  "$kiln" passes "$src" --mode $mode --print-after all >"$tmp/all" || fail "--print-after all ($mode)"
  want=9; [ $mode = train ] && want=12       # backward, prune and optimizer run only for train (samples runs in both, and changes nothing in train)
  [ "$(grep -c '^# after pass' "$tmp/all")" -eq $want ] || fail "--print-after all did not print after each of the $want passes ($mode)"
  "$kiln" passes "$src" --mode $mode --disable fusion --disable epilogue --disable inplace --disable layout --disable plan --stats >"$tmp/off" || fail "--disable ($mode)"
  grep -q 'switched off' "$tmp/off" || fail "switched-off passes not marked ($mode)"
done
"$kiln" passes "$src" --explain >/dev/null || fail "--explain"
"$kiln" passes "$src" --print-after nosuchpass >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown pass name must exit 2"
echo "cli $(basename "$src"): 1 passed, 0 failed"
