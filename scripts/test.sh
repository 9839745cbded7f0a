#!/usr/bin/env bash
# test.sh - the whole test suite, from a fresh machine:
#   1. install dependencies (scripts/setup.sh),
#   2. Release build; ctest: lit tests, unit tests, the corpus round trip
#      through ptxas (../shared/corpus), GPU tests (skipped without a GPU),
#   3. ASan+UBSan build with clang: lit and unit tests again, the corpus
#      parse + fixed point, and a time-boxed libFuzzer run of each fuzzer.
# Set TALLY_FUZZ_SECONDS (default 45 per fuzzer) to change the fuzz budget.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)

echo "== Release build"
scripts/build.sh
echo "== ctest (Release)"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== ASan+UBSan build (clang-22, libFuzzer)"
CC=clang-22 CXX=clang++-22 cmake -S . -B build-asan -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_SANITIZE=ON -DTALLY_LIBFUZZER=ON \
  -DTALLY_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build-asan -j"$jobs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "== ctest (ASan+UBSan)"
ctest --test-dir build-asan --output-on-failure -j"$jobs" -E corpus-roundtrip
python3 test/corpus/roundtrip.py --no-ptxas \
  --tally-opt build-asan/bin/tally-opt --cubin-compare build-asan/bin/cubin-compare

echo "== fuzzing (ASan+UBSan, ${TALLY_FUZZ_SECONDS:-45} s per target)"
fuzzdir=$(mktemp -d)
trap 'rm -rf "$fuzzdir"' EXIT
# Seeds for the fatbin reader: small fatbins in every compression mode and
# a host object, made with the CUDA toolkit.
mkdir -p "$fuzzdir/seeds-fatbin"
(
  cd "$fuzzdir/seeds-fatbin"
  printf '__global__ void k(int *p) { p[threadIdx.x] += 1; }\n' >k.cu
  nvcc -ptx -arch=compute_90 k.cu -o k.ptx
  ptxas -arch=sm_90 k.ptx -o k.cubin
  im="--image3=kind=elf,sm=90,file=k.cubin --image3=kind=ptx,sm=90,file=k.ptx"
  for mode in none speed default; do
    fatbinary --create="k-$mode.fatbin" $im --compress-mode=$mode
  done
  fatbinary --create=k-all.fatbin $im --compress-all
  nvcc -c -arch=sm_90 k.cu -o k.o
  rm k.cu k.ptx k.cubin
) >/dev/null
# Seeds for the runtime's metadata reader: what tally-opt writes for the
# Triton kernels of test/outside-ptx.
mkdir -p "$fuzzdir/seeds-metadata"
for ptx in test/outside-ptx/triton/*.ptx; do
  seed="$fuzzdir/seeds-metadata/$(basename "$ptx" .ptx)"
  build/bin/tally-opt "$ptx" -o "$seed.ptx" --metadata "$seed.yaml"
  rm "$seed.ptx"
done
for fuzzer in build-asan/bin/*-fuzzer; do
  name=$(basename "$fuzzer")
  mkdir -p "$fuzzdir/$name"
  seeds=()
  if [[ $name == ptx-* && -d ../shared/corpus/ptx ]]; then
    seeds=(../shared/corpus/ptx/cupy ../shared/corpus/ptx/triton-hopper test/outside-ptx/triton)
  elif [[ $name == fatbin-fuzzer ]]; then
    seeds=("$fuzzdir/seeds-fatbin")
  elif [[ $name == runtime-ptxcache-fuzzer ]]; then
    seeds=(test/outside-ptx/triton)
  elif [[ $name == runtime-metadata-fuzzer ]]; then
    seeds=("$fuzzdir/seeds-metadata")
  fi
  if ! "$fuzzer" -max_total_time="${TALLY_FUZZ_SECONDS:-45}" -max_len=65536 \
      -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$fuzzdir/$name-" \
      "$fuzzdir/$name" "${seeds[@]}" \
      >"$fuzzdir/$name.log" 2>&1; then
    tail -n 60 "$fuzzdir/$name.log"
    echo "fuzzer $name found a failure" >&2
    exit 1
  fi
  grep -E "^Done|stat::number_of_executed_units" "$fuzzdir/$name.log" || true
done
echo "== all tests passed"
