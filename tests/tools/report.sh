#!/usr/bin/env bash
# report.sh KILN SRC_ROOT — `kiln passes --html` (passes/pass_html.c, tools/kiln_report.c):
# every example's report holds one SVG element per node of the graph after the passes and one
# timeline bar per arena buffer of its plan (both counted against `kiln passes --stats`), laid
# out by graphviz, or by Kiln itself when graphviz is not on the PATH; --profile colours the
# nodes of the predict graph from a `kiln run --profile` trace of the same model, and its
# errors (no --html, a missing file, a trace of the other mode) exit nonzero with a message and
# write nothing. Then, in a real browser: headless Chromium loads each report from disk, and
# its DOM dump holds the page's own counts (what it drew, read back through the page) and no
# script error; the console shows no error; a screenshot is taken. Without chromium that part
# says it is skipped and why.
set -u
kiln=$1 root=$2
. "$(dirname "$0")/../support/tally.sh"   # $tmp, ok, bad

# What --stats says of MODEL: "NODES BUFFERS WORKSPACES" (the plan row's node count, the arena
# buffers and the workspaces of its buffer table).
stats() {   # stats FILE MODEL ARGS...
  local f=$1 m=$2; shift 2
  "$kiln" passes "$f" --model "$m" "$@" --stats | awk '
    $1 == "plan" && NF >= 7 { nodes = $2 }
    /^buffer / { table = 1; next }
    table && /^workspace of / { ws++; next }
    table && NF >= 4 { bufs++ }
    END { print nodes + 0, bufs + 0, ws + 0 }'
}
# The page's counts as written (the ids and classes the script counts), from the file itself.
file_counts() {   # file_counts HTML -> "NODES BARS WORKSPACES"
  echo "$(grep -o 'id="kiln_n[0-9]*"' "$1" | wc -l) $(grep -o '<rect class="buf[ "]' "$1" | wc -l) $(grep -o '<rect class="ws"' "$1" | wc -l)"
}
reports=()
for f in "$root"/examples/*.kiln; do
  for m in $(sed -n 's/^model \([A-Za-z_0-9]*\).*/\1/p' "$f"); do
    out=$tmp/$m.html
    t0=$(date +%s.%N)
    if ! "$kiln" passes "$f" --model "$m" --html "$out" 2>"$tmp/err"; then bad "$m: kiln passes --html: $(cat "$tmp/err")"; continue; fi
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    want=$(stats "$f" "$m") got=$(file_counts "$out")
    [ "$want" = "$got" ] && ok || bad "$m: the report holds nodes, bars, workspaces $got; --stats says $want"
    grep -q 'Laid out by graphviz' "$out" && ok || bad "$m: not laid out by graphviz: $(grep -o 'Laid out[^<]*' "$out")"
    echo "$m: report of $want (nodes, arena buffers, workspaces) in ${secs} s"
    reports+=("$m")
  done
done
# Without graphviz on the PATH: Kiln's own layout, the same nodes.
mkdir -p "$tmp/bin" && ln -s "$(realpath "$kiln")" "$tmp/bin/kiln"
if env PATH="$tmp/bin" kiln passes "$root/examples/resnet.kiln" --html "$tmp/own.html" 2>"$tmp/err"; then
  grep -q 'Laid out by Kiln in layers: graphviz' "$tmp/own.html" && ok || bad "no dot: $(grep -o 'Laid out[^<]*' "$tmp/own.html")"
  [ "$(file_counts "$tmp/own.html")" = "$(file_counts "$tmp/resnet.html")" ] && ok ||
    bad "no dot: $(file_counts "$tmp/own.html") against graphviz's $(file_counts "$tmp/resnet.html")"
  reports+=(own)
else bad "no dot: $(cat "$tmp/err")"; fi

# --profile: a trace of the compiled predict, the report of the same graph coloured by it.
/usr/bin/python3 - "$tmp" <<'PY'
import struct, sys
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 32, 32), }"
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(sys.argv[1] + "/x.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<6144f", *[((i * 7919) % 1000) / 1000.0 for i in range(6144)]))
PY
res=$root/examples/resnet.kiln
if "$kiln" compile "$res" -D batch=2 -o "$tmp/libresnet.so" >/dev/null 2>"$tmp/err" &&
   "$kiln" run "$tmp/libresnet.so" --input data="$tmp/x.npy" --repeat 3 --profile "$tmp/t.json" >/dev/null 2>"$tmp/err" &&
   "$kiln" passes "$res" -D batch=2 --mode predict --html "$tmp/prof.html" --profile "$tmp/t.json" 2>"$tmp/err"; then
  rows=$(grep -c '^<tr><td>' <(sed -n '/<table id="profile">/,/<\/table>/p' "$tmp/prof.html"))
  filled=$(grep -c 'fill="#e06666"' "$tmp/prof.html")   # the costliest node, fully red
  [ "$rows" -gt 0 ] && [ "$filled" -ge 1 ] && ok || bad "--profile: $rows profile rows, $filled nodes at the top colour"
  grep -q "of them nodes of this graph" "$tmp/prof.html" && ok || bad "--profile: the page does not say where the profile came from"
  reports+=(prof)
else bad "--profile: $(cat "$tmp/err")"; fi
# Its errors: a message, a nonzero exit, no report left behind.
expect_error() {   # expect_error CODE TEXT ARGS...
  local code=$1 text=$2; shift 2
  rm -f "$tmp/bad.html"
  "$kiln" passes "$@" 2>"$tmp/err" >/dev/null
  local rc=$?
  [ $rc -eq "$code" ] && grep -q -- "$text" "$tmp/err" && [ ! -e "$tmp/bad.html" ] && ok ||
    bad "kiln passes $*: exit $rc (want $code), stderr: $(cat "$tmp/err")"
}
expect_error 2 "give --html too" "$res" --profile "$tmp/t.json"
expect_error 1 "cannot read" "$res" --html "$tmp/bad.html" --profile "$tmp/missing.json"
expect_error 1 "give --mode predict" "$res" -D batch=2 --html "$tmp/bad.html" --profile "$tmp/t.json"
expect_error 2 "needs a file name" "$res" --html
[ -z "$(ls "$tmp" | grep '\.tmp')" ] && ok || bad "temporary files left: $(ls "$tmp" | grep '\.tmp')"

# In a browser.
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIPPED (the browser part): chromium is not installed (apt-get install chromium; scripts/setup.sh installs it)"
else
  flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir="$tmp/profile" --enable-logging=stderr --v=0)
  for r in "${reports[@]}"; do
    html=$tmp/$r.html
    if ! timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$html" >"$tmp/dom" 2>"$tmp/console"; then
      bad "$r: chromium could not load the report: $(tail -3 "$tmp/console")"; continue
    fi
    counts=$(/usr/bin/python3 -c 'import re, sys; m = re.search(r"<pre id=\"counts\">(.*?)</pre>", open(sys.argv[1]).read(), re.S); print(m.group(1) if m else "(none)")' "$tmp/dom")
    errors=$(/usr/bin/python3 -c 'import re, sys; m = re.search(r"<pre id=\"errors\">(.*?)</pre>", open(sys.argv[1]).read(), re.S); print(m.group(1).strip() if m else "(no #errors element)")' "$tmp/dom")
    read -r nodes bars ws <<<"$(file_counts "$html")"
    [ "$counts" = "graph-nodes=$nodes graph-svg=1 timeline-bars=$bars timeline-workspaces=$ws pass-rows=$(
      grep -c '^<tr><td>' <(sed -n '/<table id="passes">/,/<\/table>/p' "$html")) profile-rows=$(
      grep -c '^<tr><td>' <(sed -n '/<table id="profile">/,/<\/table>/p' "$html"))" ] && ok ||
      bad "$r: the page counted '$counts'; the file holds $nodes nodes, $bars bars, $ws workspaces"
    [ -z "$errors" ] && ok || bad "$r: script errors in the page: $errors"
    # The page logs nothing: any console line (an uncaught error, a console.error) is a failure.
    if grep -q 'CONSOLE' "$tmp/console"; then bad "$r: console: $(grep CONSOLE "$tmp/console" | head -3)"
    else ok; fi
    echo "$r: chromium counted $counts"
  done
  timeout 120 "$browser" "${flags[@]}" --hide-scrollbars --window-size=1300,2600 --screenshot="$tmp/resnet.png" \
    "file://$tmp/resnet.html" >/dev/null 2>&1
  [ -s "$tmp/resnet.png" ] && ok || bad "no screenshot of the ResNet's report"
fi
echo "kiln passes --html: $pass passed, $failed failed"
[ "$failed" -eq 0 ]
