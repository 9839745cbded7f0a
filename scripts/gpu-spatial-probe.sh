#!/usr/bin/env bash
# gpu-spatial-probe.sh - does HP keep its latency when BE runs beside it,
# on part of each SM, instead of leaving the GPU? (docs/runtime.md, "Where
# BE's throughput goes": the design that would reach BE >= 0.6 needs this.)
#
# Under MPS, without Tally: hp-serve (Poisson requests of one wave of 20 us
# blocks, HP_LOAD of its capacity) alone, then beside be-spin kernels of
# K blocks per SM (grids of K x SMs blocks of BE_THREADS threads, blocks of
# BE_BLOCK_US us, back to back) for K in KS. A kernel of K blocks per SM
# leaves the rest of each SM free while it runs, which is what BE workers
# capped at K per SM would do. Prints per K: HP p50/p99/p99.9 and BE's rate
# in blocks per second against BE alone at full occupancy.
#
# Usage: scripts/gpu-spatial-probe.sh [DIR]   (DIR: default .carry/runtime,
#   with hp-serve and be-spin; run after scripts/prepare-device.sh)
# Environment: OUT (default gpu-out), HP_LOAD (0.5), HP_S (seconds per run,
#   default 10), KS (default "1 2 4 8"), BE_THREADS (256), BE_BLOCK_US (100).
# Writes $OUT/spatial/ (logs, CSVs) and $OUT/spatial.md; about
# (2 + number of KS) x (HP_S + 3) s, plus the capacity run.
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.." || exit 1
R=${1:-.carry/runtime}
OUT=${OUT:-gpu-out}
HP_LOAD=${HP_LOAD:-0.5}
HP_S=${HP_S:-10}
KS=${KS:-1 2 4 8}
BE_THREADS=${BE_THREADS:-256}
BE_BLOCK_US=${BE_BLOCK_US:-100}
die() { echo "gpu-spatial-probe: error: $*" >&2; exit 1; }
[[ -x $R/hp-serve && -x $R/be-spin ]] || die "no hp-serve and be-spin in $R"
command -v nvidia-cuda-mps-control >/dev/null || die "no nvidia-cuda-mps-control (MPS)"
mkdir -p "$OUT/spatial"
L=$(cd "$OUT/spatial" && pwd)
SMS=$(nvidia-smi --query-gpu=name --format=csv,noheader >/dev/null 2>&1 &&
  python3 -c "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)" 2>/dev/null)
[[ -n $SMS ]] || SMS=132
MPSROOT=$(mktemp -d /tmp/tally-spatial-mps.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY=$MPSROOT/pipe CUDA_MPS_LOG_DIRECTORY=$MPSROOT/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || die "nvidia-cuda-mps-control -d failed"
bepid=
cleanup() {
  [[ -n $bepid ]] && kill -9 "$bepid" 2>/dev/null
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
  rm -rf "$MPSROOT"
}
trap cleanup EXIT

# HP's capacity alone (closed loop), then its Poisson rate.
timeout -k 5 60 "$R/hp-serve" --seed 1 --rate 0 --duration 5 >"$L/capacity.log" 2>&1 ||
  die "hp-serve failed: $(tail -c 300 "$L/capacity.log")"
CAP=$(awk '/^hp: capacity/ { print $3 }' "$L/capacity.log")
[[ -n $CAP ]] || die "hp-serve printed no capacity"
RATE=$(python3 -c "print(round($CAP * $HP_LOAD, 2))")

# BE's work per block for BE_BLOCK_US, once.
WORK=$("$R/be-spin" --block-us "$BE_BLOCK_US" --threads "$BE_THREADS" --calibrate 2>/dev/null |
  awk '/work/ { for (i = 1; i < NF; i++) if ($i == "work") { print $(i + 1); exit } }')
[[ -n $WORK ]] || die "be-spin --calibrate printed no work"

# hp NAME: an HP run; prints "p50 p99 p999".
hp() {
  timeout -k 5 $((HP_S + 60)) "$R/hp-serve" --seed 1 --rate "$RATE" --duration "$HP_S" \
    --csv "$L/$1.hp.csv" >"$L/$1.hp.log" 2>&1
  awk '/^hp: requests/ { for (i = 1; i < NF; i++) { if ($i == "p50") a = $(i + 1);
    if ($i == "p99") b = $(i + 1); if ($i == "p999") c = $(i + 1) } } END { print a, b, c }' \
    "$L/$1.hp.log"
}
# be_rate LOG BLOCKS: blocks per second from be-spin's summary.
be_rate() {
  awk -v b="$2" '/kernels\/s/ { for (i = 2; i <= NF; i++) if ($i ~ /kernels\/s/) r = $(i - 1) } END { if (r != "") print r * b }' "$1"
}

rows=()
read -r a b c < <(hp alone)
rows+=("| HP alone | $a | $b | $c | | |")
# BE alone at full occupancy (8 blocks of 256 threads per SM): the reference.
full=$((SMS * 2048 / BE_THREADS))
timeout -k 5 60 "$R/be-spin" --work "$WORK" --threads "$BE_THREADS" --blocks "$full" --duration 5 \
  >"$L/be-alone.log" 2>&1
ref=$(be_rate "$L/be-alone.log" "$full")
[[ -n $ref ]] || die "be-spin alone printed no rate: $(tail -c 300 "$L/be-alone.log")"
rows+=("| BE alone, $((2048 / BE_THREADS)) blocks per SM | | | | $(printf %.0f "$ref") | 1.00 |")
for k in $KS; do
  blocks=$((SMS * k))
  "$R/be-spin" --work "$WORK" --threads "$BE_THREADS" --blocks "$blocks" --duration $((HP_S + 30)) \
    >"$L/be-k$k.log" 2>&1 &
  bepid=$!
  sleep 2
  read -r a b c < <(hp "k$k")
  kill -TERM "$bepid" 2>/dev/null
  wait "$bepid" 2>/dev/null
  bepid=
  r=$(be_rate "$L/be-k$k.log" "$blocks")
  rows+=("| BE $k blocks per SM beside HP | $a | $b | $c | $(printf %.0f "${r:-0}") | $(python3 -c "print(f'{${r:-0} / $ref:.2f}')") |")
done
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "MPS; hp-serve capacity $CAP req/s, Poisson at $RATE req/s ($HP_LOAD), $HP_S s per run;"
  echo "be-spin blocks of $BE_BLOCK_US us, $BE_THREADS threads, $SMS SMs"
  echo
  echo "| run | HP p50 us | HP p99 us | HP p99.9 us | BE blocks/s | BE kept |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/spatial.md"
