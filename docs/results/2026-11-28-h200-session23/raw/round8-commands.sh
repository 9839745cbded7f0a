#!/usr/bin/env bash
# As run on the device machine (the device tool sets OUT), from the repository root.
set -u
R=.carry/runtime
mkdir -p "$OUT/r"
date -u
P0=TALLY_BESIDE_PTB_PERCENT=0
OUT=$OUT/r TRIES=2 HP_S=4 RATE=17200 VARIANTS="wait-q2=$P0,CUDA_DEVICE_MAX_CONNECTIONS=2 wait-q8=$P0,CUDA_DEVICE_MAX_CONNECTIONS=8 wait-default-q8=CUDA_DEVICE_MAX_CONNECTIONS=8 wait-q32=$P0,CUDA_DEVICE_MAX_CONNECTIONS=32" timeout 300 scripts/debug/be-hang.sh "$R" 2>&1 | grep -v "^\s*$" | grep -v "BE exit 0"
date -u
cd "$OUT" && tar czf r8.tgz r && rm -rf r
