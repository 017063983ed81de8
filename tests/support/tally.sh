# tally.sh — sourced by the test scripts that count their checks: a temporary folder $tmp,
# removed on exit, and the counters ok (a check passed) and bad MESSAGE (one failed, said on
# stdout). Each script prints its own summary from $pass and $failed and exits by $failed.
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
pass=0 failed=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
