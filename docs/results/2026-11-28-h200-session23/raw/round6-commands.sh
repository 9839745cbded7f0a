#!/usr/bin/env bash
# As run on the device machine (the device tool sets OUT), from the repository root.
set -u
R=.carry/runtime
mkdir -p "$OUT/r"
date -u
t=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$t/pipe CUDA_MPS_LOG_DIRECTORY=$t/log
mkdir -p "$t/pipe" "$t/log"; nvidia-cuda-mps-control -d; sleep 1
TALLY_SHM_DIR=$(mktemp -d -p /dev/shm)
export TALLY_SHM_DIR
for i in 1 2 3 4; do
  echo "hp alone $i: $("$R/prefix/bin/tally" run --priority=high -- "$R/hp-serve" --block-us 20 --kernels 1 --seed "$i" --rate 17200 --duration 4 2>&1 | grep '^hp: requests')"
done
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY TALLY_SHM_DIR
OUT=$OUT/r TRIES=4 HP_S=4 RATE=17200 VARIANTS="d-q8=CUDA_DEVICE_MAX_CONNECTIONS=8 d-q32=CUDA_DEVICE_MAX_CONNECTIONS=32 d-q2=CUDA_DEVICE_MAX_CONNECTIONS=2" timeout 400 scripts/debug/be-hang.sh "$R" 2>&1 | grep "HP exit\|hung\|^d-"
date -u
