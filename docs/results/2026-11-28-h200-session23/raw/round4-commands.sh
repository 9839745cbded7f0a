#!/usr/bin/env bash
# As run on the device machine (the device tool sets OUT), from the repository root.
set -u
R=.carry/runtime
mkdir -p "$OUT/r"
date -u
t=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$t/pipe CUDA_MPS_LOG_DIRECTORY=$t/log
mkdir -p "$t/pipe" "$t/log"; nvidia-cuda-mps-control -d; sleep 1
for cp in 1 0; do for args in "--chain 20" "--chain 20 --wide" "--behind --wide"; do
  echo "== MPS, q2, CUDA_MPS_CLIENT_PRIORITY=$cp $args"
  # shellcheck disable=SC2086 # several arguments
  CUDA_MPS_CLIENT_PRIORITY=$cp CUDA_DEVICE_MAX_CONNECTIONS=2 timeout 30 "$R/gate-queues" --streams 6 $args 2>&1 | grep -v "landed, kernel ran"
done; done
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
P0=TALLY_BESIDE_PTB_PERCENT=0
OUT=$OUT/r TRIES=3 HP_S=4 RATE=17200 VARIANTS="fix-q2=$P0,CUDA_DEVICE_MAX_CONNECTIONS=2 fix-q8=$P0,CUDA_DEVICE_MAX_CONNECTIONS=8 fix-default-q2=CUDA_DEVICE_MAX_CONNECTIONS=2 fix-q32=$P0,CUDA_DEVICE_MAX_CONNECTIONS=32 fix-default-q32=CUDA_DEVICE_MAX_CONNECTIONS=32" timeout 500 scripts/debug/be-hang.sh "$R" 2>&1 | grep -v "^\s*$" | grep -v "BE exit 0"
date -u
