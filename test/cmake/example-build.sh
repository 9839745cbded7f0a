#!/usr/bin/env bash
# Installs Tally into a temporary prefix, builds examples/cmake against the
# installed package (find_package(Tally) + tally_transform()), and checks
# that the program's fatbin holds the variants.
# Usage: example-build.sh <tally build dir> <source dir>
set -euo pipefail
build=$1 src=$2
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "SKIP: nvcc not found"; exit 77
fi
export PATH=/usr/local/cuda/bin:$PATH
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/examples/cmake" -B "$tmp/example" -G Ninja \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build "$tmp/example"
list=$("$tmp/prefix/bin/tally-opt" --list "$tmp/example/example")
for k in _Z5scalePffi _Z9block_maxPKfPfi; do
  for v in "" __tally_slice __tally_ptb; do
    grep -q "\b$k$v\b" <<<"$list" || { echo "FAIL: $k$v missing from the program"; exit 1; }
  done
done
grep -q "status: transformed" "$tmp/example/metadata/kernels.yaml" ||
  { echo "FAIL: metadata not written"; exit 1; }
# Rebuilding after touching tally-opt reruns the transformation.
touch "$tmp/prefix/bin/tally-opt"
rebuild=$(cmake --build "$tmp/example")
grep -q "tally-opt: transforming" <<<"$rebuild" ||
  { echo "FAIL: outputs do not depend on tally-opt"; exit 1; }
"$tmp/example/example"
echo "PASS: examples/cmake built with tally_transform(); variants in the program"
