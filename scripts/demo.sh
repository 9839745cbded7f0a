#!/usr/bin/env bash
# demo.sh - set up, build, and run tally-opt on the bundled example:
# examples/kernels.cu is compiled to PTX with nvcc; tally-opt describes its
# kernels, adds the sliced and PTB variants (with metadata), and re-prints
# the PTX, which ptxas compiles to the same code as the original.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
export PATH=/usr/local/cuda/bin:$PATH
out=build/examples
mkdir -p "$out"

echo "== nvcc -arch=sm_90 -ptx examples/kernels.cu"
nvcc -arch=sm_90 -ptx examples/kernels.cu -o "$out/kernels.ptx"

echo "== tally-opt $out/kernels.ptx --passes='print<kernel-info>'"
build/bin/tally-opt "$out/kernels.ptx" --passes='print<kernel-info>'

echo "== tally-opt $out/kernels.ptx -o $out/kernels.tally.ptx --metadata $out/kernels.yaml"
build/bin/tally-opt "$out/kernels.ptx" -o "$out/kernels.tally.ptx" --metadata "$out/kernels.yaml"
grep -E "^  - name:|status:|reason:|kind:|registers:" "$out/kernels.yaml" | cut -c1-110
echo "== entries in the transformed module:"
grep -E "^\.visible \.entry" "$out/kernels.tally.ptx"

echo "== tally-opt $out/kernels.ptx --passes= -o $out/kernels.printed.ptx"
build/bin/tally-opt "$out/kernels.ptx" --passes= -o "$out/kernels.printed.ptx"
ptxas -c -arch=sm_90 "$out/kernels.ptx" -o "$out/kernels.cubin"
ptxas -c -arch=sm_90 "$out/kernels.printed.ptx" -o "$out/kernels.printed.cubin"
echo "== machine code of the original and the re-printed PTX:"
build/bin/cubin-compare "$out/kernels.cubin" "$out/kernels.printed.cubin"
