#!/usr/bin/env bash
# build-runtime-examples.sh - builds the runtime test programs of
# examples/runtime (for sm_90a), each in its plain and its tally-opt
# transformed form side by side, and checks that tally-opt gave every kernel
# of ours its sliced and PTB variants.
# Usage: scripts/build-runtime-examples.sh OUTDIR [TALLY_BUILD_DIR]
#   TALLY_BUILD_DIR (default: build) is installed into OUTDIR/prefix, as a
#   user would install Tally; its tally-opt does the transformations and
#   train-gpt is built against the installed package.
# Needs nvcc (PATH or /usr/local/cuda/bin), cmake and ninja; no GPU.
# Layout of OUTDIR: see examples/runtime/README.md.
set -euo pipefail
# (grep -q reads a captured output: piped, it may close the pipe early and
# the writer's SIGPIPE fails the pipeline under pipefail.)
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 OUTDIR [TALLY_BUILD_DIR]" >&2; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
tally_build=$(cd "${2:-$src/build}" && pwd)
ex=$src/examples/runtime
export PATH=$PATH:/usr/local/cuda/bin
command -v nvcc >/dev/null || { echo "error: nvcc not found" >&2; exit 1; }
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
arch=sm_90a
nice=(nice -n 10)
fail() { echo "error: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "installing Tally from $tally_build into $out/prefix"
rm -rf "$out/prefix"
cmake --install "$tally_build" --prefix "$out/prefix" >/dev/null
opt=$out/prefix/bin/tally-opt
[[ -x $opt ]] || fail "no tally-opt in the installed package"
tally() { "$opt" -q "$@"; }

# check BINARY NAME...: every named kernel and its two variants are in the
# binary's fatbin.
check() {
  local bin=$1 list k v
  shift
  list=$("$opt" --list "$bin") || fail "tally-opt --list $bin failed"
  for k in "$@"; do
    for v in "" __tally_slice __tally_ptb; do
      grep -q "\b$k$v\b" <<<"$list" || fail "$k$v missing from $bin"
    done
  done
  echo "   $(basename "$bin"): $# kernels, each with __tally_slice and __tally_ptb"
}

step "streams (static and shared cudart)"
mkdir -p "$out/obj"
"${nice[@]}" nvcc -arch=$arch -O2 -c "$ex/streams.cu" -o "$out/obj/streams.o"
tally "$out/obj/streams.o" -o "$out/obj/streams.tally.o" --metadata "$out/obj/streams.yaml"
for rt in static shared; do
  suffix=
  if [[ $rt == shared ]]; then suffix=-shared; fi
  "${nice[@]}" nvcc -arch=$arch -cudart $rt "$out/obj/streams.o" -o "$out/streams$suffix"
  "${nice[@]}" nvcc -arch=$arch -cudart $rt "$out/obj/streams.tally.o" \
    -o "$out/streams$suffix.tally"
done
streams_kernels=(_Z10chain_stepPKjPjij _Z9float_mixPKjPji _Z15block_sum_earlyPKjPjii
  _Z8volume3dPKjPjiii _Z11transpose2dPKjPji _Z12scan_dynamicPKjS0_Pji _Z7combinePKjS0_Pji)
check "$out/streams.tally" "${streams_kernels[@]}"
check "$out/streams-shared.tally" "${streams_kernels[@]}"
grep -q libcudart <<<"$(ldd "$out/streams-shared")" || fail "streams-shared does not use libcudart.so"

step "train-gpt (CMake, against the installed package)"
rm -rf "$out/train-gpt-build"
cmake -S "$ex/train-gpt" -B "$out/train-gpt-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$out/prefix" -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" >/dev/null
"${nice[@]}" cmake --build "$out/train-gpt-build" -j 2
cp "$out/train-gpt-build/train-gpt-plain" "$out/train-gpt"
cp "$out/train-gpt-build/train-gpt" "$out/train-gpt.tally"
cp "$out/train-gpt-build/metadata/gpt.yaml" "$out/obj/train-gpt.yaml"
gpt_kernels=$(grep -o '^  - name: .*' "$out/obj/train-gpt.yaml" | sed 's/^  - name: //')
[[ $(wc -w <<<"$gpt_kernels") -ge 20 ]] || fail "train-gpt: fewer kernels than expected"
# shellcheck disable=SC2086
check "$out/train-gpt.tally" $gpt_kernels
! grep -q __tally_ <<<"$("$opt" --list "$out/train-gpt")" || fail "train-gpt (plain) has variants"

step "dlopen: libkern.so and dlopen-main"
"${nice[@]}" nvcc -arch=$arch -O2 -shared -Xcompiler -fPIC "$ex/dlopen/kern.cu" \
  -o "$out/libkern.so"
# Container 0 of the library's fatbin is nvcc's device-link stub (no kernels,
# no PTX): tally-opt leaves it as it is and says so.
msg=$(tally "$out/libkern.so" -o "$out/libkern.tally.so" --metadata "$out/obj/libkern.yaml" 2>&1) ||
  fail "tally-opt failed on libkern.so: $msg"
grep -v "has no PTX to rebuild it from; left unchanged" <<<"$msg" >&2 || true
check "$out/libkern.tally.so" _Z9histogramPKjPji _Z6smoothPKjPjij
"${nice[@]}" g++ -O2 -std=c++17 "$ex/dlopen/dlopen-main.cpp" -o "$out/dlopen-main" -ldl
! grep -q cudart <<<"$(ldd "$out/dlopen-main")" || fail "dlopen-main links a CUDA runtime"

step "driver-api and its fatbin"
"${nice[@]}" nvcc -fatbin -gencode "arch=compute_90a,code=[sm_90a,compute_90a]" \
  "$ex/driver-kernels.cu" -o "$out/driver-kernels.fatbin"
tally "$out/driver-kernels.fatbin" -o "$out/driver-kernels.tally.fatbin" \
  --metadata "$out/obj/driver-kernels.yaml"
check "$out/driver-kernels.tally.fatbin" fill_pattern mad_chain block_sums_dyn histogram
"${nice[@]}" g++ -O2 -std=c++17 -I"$cuda/include" "$ex/driver-api.cpp" -o "$out/driver-api" \
  -L"$cuda/lib64/stubs" -lcuda
! grep -q cudart <<<"$(ldd "$out/driver-api")" || fail "driver-api links a CUDA runtime"

step "nvrtc-load (kernels made with NVRTC at run time, NVRTC opened with dlopen)"
"${nice[@]}" g++ -O2 -std=c++17 -I"$cuda/include" "$ex/nvrtc-load.cpp" -o "$out/nvrtc-load" \
  -L"$cuda/lib64/stubs" -lcuda -ldl
! grep -q -e cudart -e nvrtc <<<"$(ldd "$out/nvrtc-load")" || fail "nvrtc-load links cudart or NVRTC"

step "torch_check.py, torch_programs.py"
cp "$ex/torch_check.py" "$ex/torch_programs.py" "$out/"

# Every kernel of ours was transformed (no partial or rejected ones).
for y in "$out"/obj/*.yaml; do
  if grep -Eq "status: (partial|rejected)" "$y"; then
    fail "$(basename "$y"): kernels without both variants"
  fi
done
echo "PASS: runtime examples built into $out"
