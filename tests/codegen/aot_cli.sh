#!/usr/bin/env bash
# aot_cli.sh — kiln compile on every example and tests/passes/models/*.kiln (small dims): the
# header compiles as C99 and C++ with every warning an error; the .so needs only libc, libm,
# pthreads and the BLAS and exports only NAME_* and kiln_model; --emit ll|obj|c-header write
# their files; repeated fused groups become aliases; usage and CUDA errors exit as documented. Also times kiln compile on the full
# resnet. usage: aot_cli.sh KILN SRCROOT (a sanitizer build sets KILN_SANITIZER_LIBS, a regex of
# the sanitizer runtimes its objects may also need).
set -u
KILN=$(realpath "$1") ROOT=$(realpath "$2")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kiln-aotcli-XXXXXX")
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

small_flags() {   # -D for each small dim the file declares
  local f=$1 out=""
  for kv in batch=4 seq=8 vocab=50 d_model=16 heads=2 d_ff=32; do
    grep -qE "^\s*dim\s+${kv%%=*}\s*=" "$f" && out="$out -D $kv"
  done
  echo "$out"
}

check_header() {   # NAME.h alone, as C99 and as C++
  local h=$1 dir name
  dir=$(dirname "$h") name=$(basename "$h")
  printf '#include "%s"\nint main(void) { return 0; }\n' "$name" > "$dir/hdr_c.c"
  cp "$dir/hdr_c.c" "$dir/hdr_cxx.cc"
  cc -std=c99 -Wall -Wextra -Werror -pedantic -I"$dir" -c "$dir/hdr_c.c" -o /dev/null && ok || bad "$h: does not compile as C99"
  c++ -Wall -Wextra -Werror -I"$dir" -c "$dir/hdr_cxx.cc" -o /dev/null && ok || bad "$h: does not compile as C++"
}

check_so() {   # dependencies and exports
  local so=$1 model=$2 needed exports
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
           grep -vE '^(libc\.so|libm\.so|libpthread\.so|ld-linux[-a-z0-9_.]*\.so|libopenblas[a-z0-9_]*\.so|libblas\.so|libcblas\.so)' |
           grep -vE "${KILN_SANITIZER_LIBS:-^\$}")
  [ -z "$needed" ] && ok || bad "$so: unexpected dynamic dependencies: $needed"
  exports=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -vE "^(${model}_(create|destroy|load|save|load_state|save_state|predict|train_step|set_lr|lr|error|set_comm)|kiln_model)\$")
  [ -z "$exports" ] && ok || bad "$so: exports more than ${model}_* and kiln_model: $(echo $exports | head -c 300)"
  nm -D --defined-only "$so" | grep -q ' kiln_model$' && ok || bad "$so: kiln_model not exported"
}

check_emits() {   # --emit ll | obj | c-header
  local f=$1 model=$2 flags=$3 dir=$4
  "$KILN" compile "$f" --model "$model" $flags --emit ll -o "$dir/$model.ll" 2>/dev/null && grep -q '@kiln_model' "$dir/$model.ll" \
    && ok || bad "$f: --emit ll"
  "$KILN" compile "$f" --model "$model" $flags --emit obj -o "$dir/$model.o" 2>/dev/null &&
    readelf -h "$dir/$model.o" | grep -q 'REL (Relocatable' && ok || bad "$f: --emit obj"
  "$KILN" compile "$f" --model "$model" $flags --emit c-header -o "$dir/hdr_only.h" 2>/dev/null &&
    cmp -s "$dir/hdr_only.h" "$dir/$model.h" && ok || bad "$f: --emit c-header differs from the header beside the .so"
}

for f in "$ROOT"/examples/*.kiln "$ROOT"/tests/passes/models/*.kiln; do
  flags=$(small_flags "$f")
  for model in $(sed -n 's/^\s*model\s\+\([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' "$f"); do
    dir="$TMP/$model"
    mkdir -p "$dir"
    if ! "$KILN" compile "$f" --model "$model" $flags -o "$dir/lib$model.so" 2>"$dir/compile.log"; then
      bad "$f: kiln compile: $(cat "$dir/compile.log")"
      continue
    fi
    ok
    [ -f "$dir/$model.h" ] && ok || bad "$f: no $model.h beside the .so"
    check_header "$dir/$model.h"
    check_so "$dir/lib$model.so" "$model"
    check_emits "$f" "$model" "$flags" "$dir"
  done
done

# Repeated blocks: each distinct fused group is emitted once, its repeats are aliases of it
# (aot_differential checks the repeat model's numbers against the executor).
f=$ROOT/tests/passes/models/repeat.kiln
groups=$(for mode in predict train; do "$KILN" passes "$f" --mode $mode --print-after plan 2>/dev/null; done | grep -c '_fused(')
defs=$(grep -cE '^define .*@kiln_fused_[pt][0-9]+\(' "$TMP/repeat/repeat.ll")
[ "$groups" -ge 12 ] && [ "$defs" -gt 0 ] && [ "$defs" -le $((groups - 5)) ] && ok ||
  bad "repeat.kiln: $groups fused groups should give at most $((groups - 5)) loop functions (5 are repeats); the .ll defines $defs"

# Errors: bad options exit 2, a bad model exits 1 leaving no .so (the CUDA target's own
# errors: tests/cuda/cli.sh).
"$KILN" compile "$ROOT/examples/mlp.kiln" --target gpu -o "$TMP/x.so" 2>/dev/null; [ $? -eq 2 ] && [ ! -e "$TMP/x.so" ] && ok || bad "--target gpu should exit 2"
"$KILN" compile "$ROOT/examples/mlp.kiln" -O7 2>/dev/null; [ $? -eq 2 ] && ok || bad "-O7 should exit 2"
"$KILN" compile "$ROOT/examples/mlp.kiln" --emit exe 2>/dev/null; [ $? -eq 2 ] && ok || bad "--emit exe should exit 2"
for j in 0 17 x ""; do
  "$KILN" compile "$ROOT/examples/mlp.kiln" --jobs $j -o "$TMP/jobs.so" 2>/dev/null; [ $? -eq 2 ] && ok || bad "--jobs '$j' should exit 2"
done
# The .so's code in three objects (a thread each) and exports: the same symbols as one.
"$KILN" compile "$ROOT/examples/resnet.kiln" --jobs 3 -o "$TMP/libresnet3.so" 2>/dev/null &&
  [ "$(nm -D --defined-only "$TMP/libresnet3.so" | awk '{print $3}' | sort | tr '\n' ' ')" = \
    "kiln_model resnet_create resnet_destroy resnet_error resnet_load resnet_load_state resnet_lr resnet_predict resnet_save resnet_save_state resnet_set_comm resnet_set_lr resnet_train_step " ] \
  && ok || bad "--jobs 3: the .so exports other symbols than NAME_* and kiln_model"
"$KILN" compile "$ROOT/examples/mlp.kiln" --disable nosuch -o "$TMP/libnosuch.so" 2>/dev/null; [ $? -eq 2 ] && [ ! -e "$TMP/libnosuch.so" ] && ok || bad "--disable of an unknown pass should exit 2 and write nothing"
# --disable reaches the passes: without the plan every tensor has its own buffer, so the
# descriptor in the module changes.
"$KILN" compile "$ROOT/examples/mlp.kiln" --emit ll -o "$TMP/plan_on.ll" 2>/dev/null &&
  "$KILN" compile "$ROOT/examples/mlp.kiln" --disable plan --emit ll -o "$TMP/plan_off.ll" 2>/dev/null &&
  ! cmp -s "$TMP/plan_on.ll" "$TMP/plan_off.ll" && ok || bad "kiln compile --disable plan should change the module"
"$KILN" run "$TMP/mlp/libmlp.so" --input nope 2>/dev/null; [ $? -eq 2 ] && ok || bad "--input without = should exit 2"
"$KILN" run "$TMP/mlp/libmlp.so" 2>/dev/null; [ $? -eq 1 ] && ok || bad "kiln run without inputs should exit 1"
"$KILN" run "$TMP/nonexistent.so" 2>/dev/null; [ $? -eq 1 ] && ok || bad "kiln run on a missing .so should exit 1"
# NumPy's defaults as kiln run inputs: float64 read as float32 and Fortran order as C order,
# each said on stderr; a batch the .so was not compiled for gets the -D hint; a --weights file
# that is not safetensors says what it is; no --weights says the parameters are drawn.
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 - "$TMP" <<'PY'
import sys, numpy as np
t = sys.argv[1]
np.save(t + "/f64.npy", np.random.default_rng(0).standard_normal((4, 784)))         # float64
np.save(t + "/fort.npy", np.asfortranarray(np.ones((4, 784), np.float32)))
np.save(t + "/one.npy", np.ones((1, 784), np.float32))
PY
  "$KILN" run "$TMP/mlp/libmlp.so" --input image="$TMP/f64.npy" --output prob="$TMP/p.npy" >/dev/null 2>"$TMP/f64.err" &&
    grep -q "float64 read as float32" "$TMP/f64.err" && ok || bad "kiln run of a float64 input: $(cat "$TMP/f64.err")"
  "$KILN" run "$TMP/mlp/libmlp.so" --input image="$TMP/fort.npy" >/dev/null 2>"$TMP/fort.err" &&
    grep -q "Fortran order read as C order" "$TMP/fort.err" && ok || bad "kiln run of a Fortran-order input: $(cat "$TMP/fort.err")"
  "$KILN" run "$TMP/mlp/libmlp.so" --input image="$TMP/one.npy" >/dev/null 2>"$TMP/one.err"; rc=$?
  [ $rc -eq 1 ] && grep -q "compile it again with -D DIM=1" "$TMP/one.err" && ok || bad "kiln run at another batch: exit $rc, $(cat "$TMP/one.err")"
  "$KILN" run "$TMP/mlp/libmlp.so" --input image="$TMP/fort.npy" --weights "$TMP/one.npy" >/dev/null 2>"$TMP/w.err"; rc=$?
  [ $rc -eq 1 ] && grep -q "not a safetensors file.*NumPy .npy file" "$TMP/w.err" && ok || bad "--weights of a .npy: exit $rc, $(cat "$TMP/w.err")"
  "$KILN" run "$ROOT/examples/mlp.kiln" -D batch=4 --input image="$TMP/fort.npy" >/dev/null 2>"$TMP/jit.err" &&
    grep -q "no --weights: 4 parameters of 'mlp' start from their initializers (seed 0)" "$TMP/jit.err" && ok ||
    bad "kiln run FILE.kiln without --weights should say so: $(cat "$TMP/jit.err")"
else
  echo "SKIP kiln run of NumPy's default arrays: no numpy for /usr/bin/python3"
fi
printf 'model broken {\n  input x : f32[2]\n  y = relu(z)\n  output y\n}\n' > "$TMP/broken.kiln"
"$KILN" compile "$TMP/broken.kiln" -o "$TMP/libbroken.so" 2>/dev/null; [ $? -eq 1 ] && [ ! -e "$TMP/libbroken.so" ] && ok || bad "a bad model should exit 1 and write nothing"
printf 'model a {\n  input x : f32[2]\n  y = relu(x)\n  output y\n}\nmodel b {\n  input x : f32[2]\n  y = tanh(x)\n  output y\n}\n' > "$TMP/two.kiln"
"$KILN" compile "$TMP/two.kiln" -o "$TMP/libtwo.so" 2>/dev/null; [ $? -eq 2 ] && [ ! -e "$TMP/libtwo.so" ] && ok || bad "-o with several models should exit 2 and write nothing"
(cd "$TMP" && "$KILN" compile two.kiln 2>/dev/null) && [ -f "$TMP/liba.so" ] && [ -f "$TMP/b.h" ] && ok || bad "without -o every model should give libNAME.so and NAME.h"
# A link that cannot succeed leaves no .so behind (no runtime archive in KILN_LIB_DIR).
KILN_LIB_DIR=/nonexistent "$KILN" compile "$ROOT/examples/mlp.kiln" -o "$TMP/liblinkfail.so" 2>"$TMP/link.log"
[ $? -eq 1 ] && [ -z "$(ls "$TMP" | grep liblinkfail)" ] && grep -q 'linking failed' "$TMP/link.log" && ok || bad "a failed link should exit 1 and leave nothing: $(cat "$TMP/link.log")"
# All outputs or none: when the header cannot be written (NAME.h is a folder) the .so is not
# written either, and a .so already there is left as it was; no temporary files remain.
mkdir -p "$TMP/both" "$TMP/both/mlp.h"
printf 'old' > "$TMP/both/libmlp.so"
"$KILN" compile "$ROOT/examples/mlp.kiln" -o "$TMP/both/libmlp.so" 2>"$TMP/both.log"
[ $? -eq 1 ] && [ "$(cat "$TMP/both/libmlp.so")" = old ] && [ -d "$TMP/both/mlp.h" ] && [ "$(ls "$TMP/both" | wc -l)" -eq 2 ] &&
  grep -q "cannot write .*mlp.h" "$TMP/both.log" && ok || bad "a header that cannot be written must leave the .so as it was: $(ls "$TMP/both"; cat "$TMP/both.log")"
rmdir "$TMP/both/mlp.h"
"$KILN" compile "$ROOT/examples/mlp.kiln" -o "$TMP/both/libmlp.so" 2>/dev/null && [ "$(cat "$TMP/both/libmlp.so")" != old ] &&
  [ -f "$TMP/both/mlp.h" ] && [ "$(ls "$TMP/both" | wc -l)" -eq 2 ] && ok || bad "a compile that succeeds replaces both outputs: $(ls "$TMP/both")"
[ "$(umask 022; "$KILN" compile "$ROOT/examples/mlp.kiln" -o "$TMP/both/libmlp.so" 2>/dev/null; stat -c %a "$TMP/both/mlp.h")" = 644 ] &&
  ok || bad "the header is readable by all under umask 022, as fopen makes files"

# The time kiln compile takes on the full-size ResNet (reported, no threshold).
start=$(date +%s.%N)
"$KILN" compile "$ROOT/examples/resnet.kiln" -o "$TMP/libresnet_full.so" 2>&1 | sed 's/^/  /'
end=$(date +%s.%N)
echo "kiln compile examples/resnet.kiln: $(awk "BEGIN { printf \"%.2f\", $end - $start }") s wall"

echo "aot_cli: $pass passed, $fail failed"
[ $fail -eq 0 ] && rm -rf "$TMP"
[ $fail -eq 0 ]
