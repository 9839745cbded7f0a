#!/usr/bin/env bash
# As run on the device machine (the device tool sets OUT), from the repository root.
set -u
R=.carry/runtime
mkdir -p "$OUT/r"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u
# gate-queues with priorities, 2 queues, no MPS
for p in; do
  CUDA_DEVICE_MAX_CONNECTIONS=2 timeout 20 "$R/gate-queues" --streams 6 --prio "$p" --behind 2>&1 | tail -n +1 | sed "s/^/[q2 $p] /"
done
OUT=$OUT/r TRIES=2 HP_S=4 RATE=17200 VARIANTS="q2=TALLY_BESIDE_PTB_PERCENT=0,CUDA_DEVICE_MAX_CONNECTIONS=2 q2sl=TALLY_BESIDE_PTB_PERCENT=0,CUDA_DEVICE_MAX_CONNECTIONS=2,TALLY_DEBUG_SIGNAL_PRIORITY=least q2rg=TALLY_BESIDE_PTB_PERCENT=0,CUDA_DEVICE_MAX_CONNECTIONS=2,TALLY_DEBUG_RESUME_PRIORITY=greatest q2fresh=TALLY_BESIDE_PTB_PERCENT=0,CUDA_DEVICE_MAX_CONNECTIONS=2,TALLY_DEBUG_FRESH_RESUME=1 q2cp0=TALLY_BESIDE_PTB_PERCENT=0,CUDA_DEVICE_MAX_CONNECTIONS=2,CUDA_MPS_CLIENT_PRIORITY=0 q2qu0=TALLY_BESIDE_PTB_PERCENT=0,CUDA_DEVICE_MAX_CONNECTIONS=2,TALLY_QUEUE_US=0 q2nomps=TALLY_BESIDE_PTB_PERCENT=0,CUDA_DEVICE_MAX_CONNECTIONS=2,MPS=0 q32=TALLY_BESIDE_PTB_PERCENT=0,CUDA_DEVICE_MAX_CONNECTIONS=32" timeout 540 scripts/debug/be-hang.sh "$R" 2>&1 | grep -v "^\s*$"
date -u
