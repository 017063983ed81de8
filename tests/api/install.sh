#!/usr/bin/env bash
# install.sh BUILD_DIR SOURCE_DIR [CFLAGS] — `cmake --install` into a temporary prefix, then
# the small program of docs/c-api.md built with `pkg-config --cflags --libs kiln` against it,
# shared and static, and run: the installed header, libraries and kiln.pc are all a user
# needs. CFLAGS: a sanitizer build's -fsanitize flags (its libkiln needs their runtime).
set -euo pipefail
build=$1 src=$2 extra=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig
libdir=$(pkg-config --variable=libdir kiln)
test -f "$libdir/libkiln.so" && test -f "$libdir/libkiln.a" && test -f "$tmp/prefix/include/kiln.h" || {
  echo "FAIL: the install lacks libkiln.so, libkiln.a or kiln.h"; exit 1; }
# The program is the one docs/c-api.md shows, cut out of it (between the c-api-example markers).
sed -n '/<!-- c-api-example -->/,/<!-- \/c-api-example -->/p' "$src/docs/c-api.md" | sed '1,2d;$d' | sed '$d' > "$tmp/hello.c"
grep -q kiln_session_new "$tmp/hello.c" || { echo "FAIL: no example program found in docs/c-api.md"; exit 1; }
cc -std=c11 -Wall -Werror $extra "$tmp/hello.c" -o "$tmp/hello" $(pkg-config --cflags --libs kiln)
LD_LIBRARY_PATH=$libdir "$tmp/hello" > "$tmp/shared.out"
cc -std=c11 -Wall -Werror $extra "$tmp/hello.c" -o "$tmp/hello_static" $(pkg-config --cflags kiln) \
   $(pkg-config --static --libs kiln | sed "s|-lkiln|$libdir/libkiln.a|")
"$tmp/hello_static" > "$tmp/static.out"
cmp "$tmp/shared.out" "$tmp/static.out" || { echo "FAIL: shared and static builds print different results"; exit 1; }
grep -q "relu(x \* 2) = " "$tmp/shared.out" || { echo "FAIL: unexpected output:"; cat "$tmp/shared.out"; exit 1; }
cat "$tmp/shared.out"
echo "install: pkg-config --cflags --libs kiln builds and runs the example (shared and static)"
