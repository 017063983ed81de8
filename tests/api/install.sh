#!/usr/bin/env bash
# install.sh BUILD_DIR SOURCE_DIR [CFLAGS] — `cmake --install` into a temporary prefix, then
# the small program of docs/c-api.md built with `pkg-config --cflags --libs kiln` against it,
# shared and static, and run (the shared one with no LD_LIBRARY_PATH: kiln.pc has the rpath):
# the installed header, libraries and kiln.pc are all a user needs. The installed bin/kiln
# says its version and compiles a model with the installed archives. Then kiln_graph_compile from the installed libkiln.so with KILN_LIB_DIR unset: it
# links the model with the archives in PREFIX/lib/kiln (a broken copy there makes the link
# fail naming it, so the build tree's are not what it used). CFLAGS: a sanitizer build's
# -fsanitize flags (its libkiln needs their runtime).
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
# no LD_LIBRARY_PATH: kiln.pc's rpath lets the program find the installed libkiln.so
"$tmp/hello" > "$tmp/shared.out"
cc -std=c11 -Wall -Werror $extra "$tmp/hello.c" -o "$tmp/hello_static" $(pkg-config --cflags kiln) \
   $(pkg-config --static --libs kiln | sed "s|-lkiln|$libdir/libkiln.a|")
"$tmp/hello_static" > "$tmp/static.out"
cmp "$tmp/shared.out" "$tmp/static.out" || { echo "FAIL: shared and static builds print different results"; exit 1; }
grep -q "relu(x \* 2) = " "$tmp/shared.out" || { echo "FAIL: unexpected output:"; cat "$tmp/shared.out"; exit 1; }
cat "$tmp/shared.out"

# kiln_graph_compile from the installed library, with no KILN_LIB_DIR.
unset KILN_LIB_DIR
cat > "$tmp/aot.c" <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
#include <kiln.h>
int main(int argc, char **argv) {
  kiln_graph *g;
  if (argc != 2 || kiln_graph_new("tiny", &g) || kiln_graph_input(g, "x", KILN_F32, 1, (int64_t[]){4}, NULL) ||
      kiln_graph_op(g, "y", "relu", 1, (const char *[]){"x"}, NULL) || kiln_graph_output(g, "y") ||
      kiln_graph_compile(g, argv[1], 1)) {
    fprintf(stderr, "%s\n", kiln_last_error());
    return 1;
  }
  kiln_graph_free(g);
  void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!so || !dlsym(so, "tiny_create")) return fprintf(stderr, "dlopen: %s\n", dlerror()), 1;
  printf("compiled and loaded %s\n", argv[1]);
  return 0;
}
EOF
cc -std=c11 -Wall -Werror $extra "$tmp/aot.c" -o "$tmp/aot" $(pkg-config --cflags --libs kiln) -ldl
LD_LIBRARY_PATH=$libdir "$tmp/aot" "$tmp/tiny.so" || { echo "FAIL: kiln_graph_compile from the installed library"; exit 1; }
# The archives it linked are the installed ones: broken there, the link fails and says where.
cp "$libdir/kiln/libkiln_runtime.a" "$tmp/runtime.keep"
echo "not an archive" > "$libdir/kiln/libkiln_runtime.a"
if LD_LIBRARY_PATH=$libdir "$tmp/aot" "$tmp/tiny2.so" 2> "$tmp/broken.err"; then
  echo "FAIL: linking succeeded with the installed runtime archive broken (it used another)"; exit 1
fi
grep -qF "$libdir/kiln/libkiln_runtime.a" "$tmp/broken.err" || {
  echo "FAIL: the link error does not name the installed archive:"; cat "$tmp/broken.err"; exit 1; }
# The installed kiln tool: its version, and a model compiled with the installed archives (a
# broken copy there makes the link fail naming it).
kiln=$tmp/prefix/bin/kiln
test -x "$kiln" || { echo "FAIL: cmake --install did not install bin/kiln"; exit 1; }
"$kiln" --version | grep -q '^kiln [0-9]' || { echo "FAIL: kiln --version: $("$kiln" --version 2>&1)"; exit 1; }
if "$kiln" compile "$src/examples/mlp.kiln" -o "$tmp/libmlp_broken.so" 2> "$tmp/kbroken.err"; then
  echo "FAIL: the installed kiln linked with the installed runtime archive broken (it used another)"; exit 1
fi
grep -qF "$(realpath "$libdir")/kiln/libkiln_runtime.a" "$tmp/kbroken.err" || {
  echo "FAIL: the installed kiln's link error does not name the installed archive:"; cat "$tmp/kbroken.err"; exit 1; }
cp "$tmp/runtime.keep" "$libdir/kiln/libkiln_runtime.a"
"$kiln" compile "$src/examples/mlp.kiln" -o "$tmp/libmlp.so" > /dev/null || { echo "FAIL: the installed kiln compile"; exit 1; }
nm -D --defined-only "$tmp/libmlp.so" | grep -q ' mlp_create$' || { echo "FAIL: the installed kiln's .so lacks mlp_create"; exit 1; }
echo "install: PREFIX/bin/kiln $("$kiln" --version | cut -d' ' -f2) compiles with PREFIX/lib/kiln's archives"
echo "install: pkg-config --cflags --libs kiln builds and runs the example (shared and static);"
echo "install: kiln_graph_compile links with PREFIX/lib/kiln's archives, KILN_LIB_DIR unset"
