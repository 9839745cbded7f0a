#!/usr/bin/env bash
# prepare-device.sh - build here what the GPU machine runs and put it in
# .carry/ (ignored by git, carried to the device with `carry: [".carry"]`):
# the GPU test harness, the transformed kernel suite (cubin + metadata +
# PTX), and the machine facts. Then `scripts/gpu.sh` runs there.
# The runtime's programs (scripts/build-runtime-examples.sh, the kernel
# suite as a runtime-API program, the runtime benchmarks) go to
# .carry/runtime, for scripts/gpu-runtime.sh.
# TALLY_BASELINE=DIR (a suite.tally.fatbin and suite.yaml made by another
# build of tally-opt) adds that build's benchmark to the round, for A/B
# comparisons on the same machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
rm -rf .carry && mkdir -p .carry
cp build/bin/tally-gpu-test build/bin/tally-opt .carry/
cp build/gpu/suite.fatbin build/gpu/suite.tally.fatbin build/gpu/suite.yaml .carry/
strip .carry/tally-gpu-test .carry/tally-opt
# A program built the usual way, and the same program linked from the
# object file tally-opt rewrote (variants inside; the program still
# launches the originals).
export PATH=/usr/local/cuda/bin:$PATH
nvcc -arch=sm_90a -c examples/app/app.cu -o .carry/app.o
build/bin/tally-opt -q .carry/app.o -o .carry/app.tally.o --metadata .carry/app.yaml
nvcc -arch=sm_90a .carry/app.o -o .carry/app
nvcc -arch=sm_90a .carry/app.tally.o -o .carry/app.tally
rm .carry/app.o .carry/app.tally.o
# The linked program itself rewritten (its fatbin grows: a new segment).
build/bin/tally-opt -q .carry/app -o .carry/app.exe.tally
# The PTB loop's cost breakdown (benchmarks/gpu/ptb-loop-costs.cu).
nvcc -O3 -arch=sm_90a -std=c++17 benchmarks/gpu/ptb-loop-costs.cu -o .carry/ptb-loop-costs
# The CMake example, built against the installed package.
rm -rf build/example-install build/example
cmake --install build --prefix build/example-install >/dev/null
cmake -S examples/cmake -B build/example -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/example-install" \
  -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build build/example >/dev/null
cp build/example/example .carry/cmake-example
if [[ -n ${TALLY_BASELINE:-} ]]; then
  mkdir -p .carry/baseline
  cp "$TALLY_BASELINE/suite.tally.fatbin" "$TALLY_BASELINE/suite.yaml" .carry/baseline/
fi
# The runtime: its test programs plain and transformed, with the installed
# package (bin/tally, lib/libtally.so) in .carry/runtime/prefix.
R=.carry/runtime
scripts/build-runtime-examples.sh $R build >/dev/null
nvcc -std=c++17 -diag-suppress 20054,550 -arch=sm_90a -O2 -c examples/gpu/suite-host.cu \
  -o $R/obj/suite-host.o
build/bin/tally-opt -q $R/obj/suite-host.o -o $R/obj/suite-host.tally.o \
  --metadata $R/obj/suite-host.yaml
nvcc -arch=sm_90a $R/obj/suite-host.o -o $R/suite-host
nvcc -arch=sm_90a $R/obj/suite-host.tally.o -o $R/suite-host.tally
for b in runtime-launch-overhead runtime-forms; do
  nvcc -std=c++17 -arch=sm_90a -O2 -c benchmarks/gpu/$b.cu -o $R/obj/$b.o
  build/bin/tally-opt -q $R/obj/$b.o -o $R/obj/$b.tally.o --metadata $R/obj/$b.yaml
  nvcc -arch=sm_90a $R/obj/$b.tally.o -o $R/$b
done
cc -O1 -g -shared -fPIC scripts/debug/segv-backtrace.c -o $R/segv-backtrace.so
# Which driver calls keep other threads out of the driver while they wait
# (lib/Runtime/BlockingCalls.def rests on it).
nvcc -std=c++17 -arch=sm_90a -O2 benchmarks/gpu/driver-lock-probe.cu -o $R/driver-lock-probe -lcuda
nvcc -std=c++17 -arch=sm_90a -O2 benchmarks/gpu/driver-call-costs.cu -o $R/driver-call-costs -lcuda
# What a stream waiting at a gate holds up on other streams, and what a
# code load does then (docs/runtime.md, Code loads).
nvcc -std=c++17 -arch=sm_90a -O2 benchmarks/gpu/gate-queues.cu -o $R/gate-queues -lcuda
# What the stream operations around a PTB launch cost (scripts/debug/ptb-costs.sh).
nvcc -std=c++17 -arch=sm_90a -O2 benchmarks/gpu/ptb-launch-costs.cu -o $R/ptb-launch-costs -lcuda
# Co-location (scripts/gpu-colocate.sh): the HP service, the BE spinner
# plain and transformed, the one-process stream-priority baseline.
# The stall probe beside the HP tail runs (scripts/gpu-hp-tail.sh).
c++ -O2 -std=c++17 benchmarks/gpu/hiccup.cpp -o $R/hiccup
for b in hp-serve colocate-streams; do
  nvcc -std=c++17 -arch=sm_90a -O2 benchmarks/gpu/$b.cu -o $R/$b
done
nvcc -std=c++17 -arch=sm_90a -O2 -c benchmarks/gpu/be-spin.cu -o $R/obj/be-spin.o
nvcc -arch=sm_90a $R/obj/be-spin.o -o $R/be-spin
build/bin/tally-opt -q $R/obj/be-spin.o -o $R/obj/be-spin.tally.o --metadata $R/obj/be-spin.yaml
nvcc -arch=sm_90a $R/obj/be-spin.tally.o -o $R/be-spin.tally
# be-spin's kernel in each form, launched directly (workblocks-forms, run by
# scripts/debug/ptb-costs.sh): tally-opt's PTX of it compiled by ptxas.
nvcc -std=c++17 -arch=sm_90a -O2 -ptx benchmarks/gpu/be-spin.cu -o $R/obj/be-spin.ptx
build/bin/tally-opt -q $R/obj/be-spin.ptx -o $R/obj/be-spin.tally.ptx
ptxas -arch=sm_90a $R/obj/be-spin.tally.ptx -o $R/be-spin.tally.cubin
nvcc -std=c++17 -arch=sm_90a -O2 benchmarks/gpu/workblocks-forms.cu -o $R/workblocks-forms -lcuda
# What the device does not need.
# (prefix/bin/tally-opt stays: the runtime runs it on PTX loaded at run time.)
rm -rf $R/obj/*.o $R/train-gpt-build $R/prefix/include $R/prefix/lib/cmake \
  $R/prefix/lib/*.a
strip $R/prefix/bin/tally $R/prefix/bin/tally-opt $R/prefix/bin/tally-ptxas
# The Triton training script (examples/triton), the CuPy program
# (examples/cupy), and in $R/torch the PyTorch
# workloads of scripts/gpu-colocate.sh (HP_MODEL, BE_CONFS=torch).
cp examples/triton/train_gpt.py $R/
cp examples/cupy/cupy_ptx.py $R/
mkdir -p $R/torch
cp benchmarks/torch/*.py $R/torch/
du -sh .carry
