#!/usr/bin/env bash
# machine.sh — the line every benchmark's output starts with: the UTC time, the commit, the
# CPU (its model name, and the cpu family and model that tell Zen 4 from Zen 5 or which
# Xeon), the number of CPUs and the load before the run. The benchmarks print it after "# "
# and add their own fields; the one place these greps live.
root=$(cd "$(dirname "$0")/.." && pwd)
cpu_field() { grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
[ "$dirty" = 0 ] || commit="$commit (+$dirty files changed)"
echo "$(date -u '+%Y-%m-%d %H:%M UTC')  main $commit  $(uname -m)  $(cpu_field 'model name'), cpu family" \
     "$(cpu_field 'cpu family') model $(cpu_field model)  nproc $(nproc)  load before: $(cut -d' ' -f1-3 /proc/loadavg)"
