#!/usr/bin/env bash
# As run on the device machine (the device tool sets OUT), from the repository root.
set -u
R=.carry/runtime
t=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$t/pipe CUDA_MPS_LOG_DIRECTORY=$t/log
mkdir -p "$t/pipe" "$t/log"; nvidia-cuda-mps-control -d; sleep 1
for q in 2 8 32; do for cp in 0 1; do for b in "" --behind; do
  echo "== MPS, CUDA_DEVICE_MAX_CONNECTIONS=$q CUDA_MPS_CLIENT_PRIORITY=$cp $b"
  CUDA_MPS_CLIENT_PRIORITY=$cp CUDA_DEVICE_MAX_CONNECTIONS=$q timeout 30 "$R/gate-queues" --streams 6 $b 2>&1 | grep -v "landed, kernel ran"
done; done; done
echo quit | nvidia-cuda-mps-control
