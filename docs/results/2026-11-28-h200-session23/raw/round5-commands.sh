#!/usr/bin/env bash
# As run on the device machine (the device tool sets OUT), from the repository root.
set -u
R=.carry/runtime
mkdir -p "$OUT/r"
date -u
for mps in 1 0; do
if ((mps)); then t=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$t/pipe CUDA_MPS_LOG_DIRECTORY=$t/log
mkdir -p "$t/pipe" "$t/log"; nvidia-cuda-mps-control -d; sleep 1; fi
for q in 2 8 32; do
  echo "== MPS $mps, CUDA_DEVICE_MAX_CONNECTIONS=$q --chain 20"
  CUDA_MPS_CLIENT_PRIORITY=1 CUDA_DEVICE_MAX_CONNECTIONS=$q timeout 30 "$R/gate-queues" --streams 6 --chain 20 2>&1 | grep -v "landed, kernel ran"
done
if ((mps)); then echo quit | nvidia-cuda-mps-control; sleep 1; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; fi
done
P0=TALLY_BESIDE_PTB_PERCENT=0
OUT=$OUT/r TRIES=4 HP_S=4 RATE=17200 VARIANTS="fix-q2=$P0,CUDA_DEVICE_MAX_CONNECTIONS=2" timeout 300 scripts/debug/be-hang.sh "$R" 2>&1 | grep -v "^\s*$" | grep -v "BE exit 0"
date -u
