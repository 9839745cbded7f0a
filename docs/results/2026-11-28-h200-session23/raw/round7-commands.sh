#!/usr/bin/env bash
# As run on the device machine (the device tool sets OUT), from the repository root.
set -u
R=.carry/runtime
date -u
OUT=$OUT/tp TIMEOUT=240 timeout 420 scripts/gpu-torch-programs.sh "$R" 2>&1 | tail -15
date -u
S=$PWD/docs/results/2026-11-28-h200-session17/raw/seed-w1056.v1
OUT=$OUT/colo HP_LOAD=0.5 HP_KERNELS=1 HP_SECONDS=5 SYSTEMS=tally-mps BE_CONFS=be10 PROFILE=shared PROFILE_SEED=$S timeout 170 scripts/gpu-colocate.sh --quick "$R" 2>&1 | tail -25
date -u
cd "$OUT" && tar czf r7.tgz tp colo 2>/dev/null; rm -rf tp colo
