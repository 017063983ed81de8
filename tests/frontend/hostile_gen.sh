#!/usr/bin/env bash
# hostile_gen.sh CASE MB — writes to stdout a .kiln file of about MB megabytes that a hostile
# user might feed `kiln check`, for measuring the front end's peak memory and time:
#   /usr/bin/time -f '%M KB %e s' kiln check FILE
# Cases, each one model `m` with `input x : f32[4]` and MB worth of lines of:
#   syntax      `  y = = x`              (syntax errors)
#   undefined   `  yN = x + qN`          (undefined names: errors found in lowering)
#   nosuch      `  y = nosuch(x)`        (an unknown op, and y assigned again and again)
#   redefined   `  y = x + q`            (y assigned again, q undefined)
#   bad_valid   101 undefined lines, then `  vN = relu(x)`
#   flat        `  vN = relu(x)`         (valid: one node a line, far past the node limit)
#   chains      `  vN = x + x + ... + x` (valid: 900 nodes a line)
#   wide        one line `  v = concat(x, x, ..., x)`
set -euo pipefail
case=${1:-} mb=${2:-}
case $mb in ''|*[!0-9]*) echo "usage: hostile_gen.sh CASE MB" >&2; exit 2 ;; esac
bytes=$((mb * 1000000))
awk -v kase="$case" -v bytes="$bytes" '
function line(s) { printf "%s\n", s; w += length(s) + 1 }
BEGIN {
  print "model m {"; print "  input x : f32[4]"
  if (kase == "wide") {
    printf "  v = concat(x"; for (w = 0; w < bytes; w += 3) printf ", x"; print ")"
  } else if (kase == "chains") {
    s = ""; for (k = 0; k < 900; k++) s = s " + x"
    for (i = 0; w < bytes; i++) line("  v" i " = x" s)
  } else if (kase == "bad_valid") {
    for (i = 0; i < 101; i++) line("  y" i " = x + q" i)
    for (i = 0; w < bytes; i++) line("  v" i " = relu(x)")
  } else {
    if (kase == "syntax") s = "  y = = x"
    else if (kase == "nosuch") s = "  y = nosuch(x)"
    else if (kase == "redefined") s = "  y = x + q"
    else if (kase != "undefined" && kase != "flat") { print "hostile_gen.sh: unknown case " kase > "/dev/stderr"; exit 2 }
    for (i = 0; w < bytes; i++)
      line(kase == "undefined" ? "  y" i " = x + q" i : kase == "flat" ? "  v" i " = relu(x)" : s)
  }
  print "  output x"; print "}"
}'
