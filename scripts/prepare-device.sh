#!/usr/bin/env bash
# prepare-device.sh - build here what the GPU machine runs and put it in
# .carry/ (ignored by git, carried to the device with `carry: [".carry"]`):
# the GPU test harness, the transformed kernel suite (cubin + metadata +
# PTX), and the machine facts. Then `scripts/gpu.sh` runs there.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
rm -rf .carry && mkdir -p .carry
cp build/bin/tally-gpu-test .carry/
cp build/gpu/suite.ptx build/gpu/suite.tally.ptx build/gpu/suite.yaml build/gpu/suite.tally.cubin .carry/
strip .carry/tally-gpu-test
du -sh .carry
