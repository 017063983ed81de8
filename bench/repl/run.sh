#!/usr/bin/env bash
# run.sh [KILN] — the REPL's latency for a statement that prints a small elementwise result
# (`exp(x) * 2 + 1` on a 4xN array), through `kiln repl`'s `:time on`: the first statement of
# each shape pays its compile (front end, passes, LLVM, JIT), a repeat finds it in the
# session's cache. Prints the median of each over 10 shapes (the very first statement, which
# also starts LLVM, is reported apart). Issue 10's targets: <= 20 ms compiled, <= 1 ms cached.
set -euo pipefail
kiln=${1:-$(dirname "$0")/../../build/tools/kiln}
script=$(mktemp)
trap 'rm -f "$script"' EXIT
{
  echo ":time on"
  for n in $(seq 1 11); do
    echo ":rand x$n f32[4,$n] seed=$n"
    for rep in 1 2 3; do echo "exp(x$n) * 2 + 1"; done
  done
} > "$script"
"$kiln" repl < "$script" | grep -o '^([0-9.]* ms: front end, [a-z ]*' | awk '
  { t = substr($1, 2) + 0; if ($0 ~ /compile/) c[nc++] = t; else h[nh++] = t }
  function median(a, n,   i, j, x) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x }
                                     return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2 }
  END {
    printf "first statement (starts LLVM): %.2f ms\n", c[0]
    for (i = 1; i < nc; i++) d[i - 1] = c[i]
    printf "compiled (new shape), median of %d: %.2f ms\n", nc - 1, median(d, nc - 1)
    printf "cached, median of %d: %.3f ms\n", nh, median(h, nh)
  }'
