#!/usr/bin/env bash
# triton-determinism.sh - on the GPU machine (after scripts/prepare-device.sh
# here): which runs of examples/triton/train_gpt.py give the same per-step
# losses (bits). Every run compiles with tally-ptxas into one set of caches,
# filled first (TRITON_CACHES, default a temporary folder); then: plain
# twice, under `tally run` with no HP process (originals at full speed),
# forced to the original, to PTB with random preemption and to slices, and
# under `tally run` beside hp-serve under `tally run --priority=high` (the
# scheduler's choices and measurements). Each line says whether the run's
# losses are the first plain run's, and whether the run added files to the
# caches (something was compiled again). Then (MPS=1, the default, where
# MPS is) the same under MPS: plain, with a client priority, under `tally
# run` alone and beside HP with its defaults, without PTB launches beside
# HP, and with nothing beside HP.
# Environment: OUT (default gpu-out), STEPS (default 30), ONLY_MPS=1 (after
# the first plain run, only the runs under MPS), MPS=0 (none), MPS_SEQ (under
# MPS only plain runs, e.g. "p 1 p 1": p without, 1 with client priority 1),
# TRITON_ARGS
# (default --mm-configs 2 --no-coordinate-descent --batch 32: gpu-colocate.sh's
# without --deterministic), PYTHON (see scripts/torch-env.sh).
# Found with it (H100, 2026-11-24): without --deterministic, plain runs under
# MPS gave one of two loss sequences (1 of 6 runs, 4 of 6 in another round;
# 6 of 6 the same as the first plain run without MPS, Tally's forms and
# scheduling included); with --deterministic, 6 of 6 the same under MPS.
# Writes $OUT/triton-determinism/*.{txt,err,json} and summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
src=$(pwd)
# shellcheck source=scripts/torch-env.sh
. "$src/scripts/torch-env.sh"
R=$src/.carry/runtime
TALLY=$R/prefix/bin/tally
torch_python || { echo "triton-determinism: no Python with torch and CUDA" >&2; exit 1; }
OUT=${OUT:-gpu-out}
D=$OUT/triton-determinism
mkdir -p "$D"
T=${TRITON_CACHES:-$(mktemp -d)}
export TRITON_CACHE_DIR=$T/triton TORCHINDUCTOR_CACHE_DIR=$T/inductor
export TRITON_PTXAS_PATH=$R/prefix/bin/tally-ptxas
read -ra extra <<<"${TRITON_ARGS:---mm-configs 2 --no-coordinate-descent --batch 32}"
STEPS=${STEPS:-30}
S=$D/summary.txt
# On the way out, whatever happened: no MPS daemon or HP process left, no
# temporary caches.
hp=
M=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  [[ -z $hp ]] || kill "$hp" 2>/dev/null
  if [[ -n $M ]]; then
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
    rm -rf "$M"
  fi
  [[ -n ${TRITON_CACHES:-} ]] || rm -rf "$T"
}
trap cleanup EXIT
: >"$S"
files() { find "$T" -type f 2>/dev/null | wc -l; }

# run NAME [PREFIX...]: train_gpt.py under PREFIX (a tally command line
# ending in --, or nothing).
run() {
  local name=$1 before t0=$SECONDS rc same
  shift
  before=$(files)
  timeout -k 5 420 "$@" "$PY" -u "$R/train_gpt.py" --steps "$STEPS" --seed 1 "${extra[@]}" \
    >"$D/$name.txt" 2>"$D/$name.err"
  rc=$?
  same=first
  if [[ -f $D/plain1.txt && $name != plain1 ]]; then
    if cmp -s "$D/plain1.txt" "$D/$name.txt"; then
      same=same
    else
      # (Fields: step N loss HEX DECIMAL: the step and the loss's bits.)
      same="DIFFERENT from step $(diff <(awk '{print $2, $4}' "$D/plain1.txt") <(awk '{print $2, $4}' "$D/$name.txt") |
        awk '/^[<>]/ {print $2; exit}')"
    fi
  fi
  echo "$name: exit $rc, $(grep -c '^step' "$D/$name.txt") steps in $((SECONDS - t0)) s; losses $same; cache files $before -> $(files)" | tee -a "$S"
}

run warm
run plain1
if [[ ${ONLY_MPS:-0} != 1 ]]; then
run plain2
run tally-free "$TALLY" run --priority=best-effort --triton-ptxas --stats="$D/tally-free.json" --
run tally-original "$TALLY" run --triton-ptxas --force=original --stats="$D/tally-original.json" --
run tally-ptb "$TALLY" run --triton-ptxas --force=ptb --preempt=random:6 --stats="$D/tally-ptb.json" --
run tally-slice "$TALLY" run --triton-ptxas --force=slice --stats="$D/tally-slice.json" --
# Beside an HP process: the scheduler measures forms and chooses.
if [[ -x $R/hp-serve ]]; then
  "$TALLY" run --priority=high -- "$R/hp-serve" --rate 2000 --duration 300 --seed 1 \
    >"$D/hp.log" 2>"$D/hp.err" &
  hp=$!
  sleep 2
  run tally-beside-hp "$TALLY" run --priority=best-effort --triton-ptxas --stats="$D/tally-beside-hp.json" --
  kill "$hp" 2>/dev/null
  wait "$hp" 2>/dev/null
  hp=
fi
fi
# The same under MPS (a daemon of its own), where the co-location runs
# differed: plain, under `tally run` alone, and beside HP (PTB launches run
# narrow there and short originals beside HP).
if [[ ${MPS:-1} == 1 ]] && command -v nvidia-cuda-mps-control >/dev/null; then
  M=$(mktemp -d /tmp/tally-det-mps.XXXXXX)
  mkdir -p "$M/pipe" "$M/log"
  export CUDA_MPS_PIPE_DIRECTORY=$M/pipe CUDA_MPS_LOG_DIRECTORY=$M/log
  nvidia-cuda-mps-control -d
  sleep 1
  if [[ -n ${MPS_SEQ:-} ]]; then
    # Plain runs only, in this order (p: no client priority, 1: priority 1).
    n=0
    for k in $MPS_SEQ; do
      n=$((n + 1))
      if [[ $k == 1 ]]; then run "mps-seq$n-prio" env CUDA_MPS_CLIENT_PRIORITY=1; else run "mps-seq$n-plain"; fi
    done
    exit 0
  fi
  run mps-plain
  run mps-tally-free "$TALLY" run --priority=best-effort --triton-ptxas --stats="$D/mps-tally-free.json" --
  run mps-plain-prio env CUDA_MPS_CLIENT_PRIORITY=1
  "$TALLY" run --priority=high -- "$R/hp-serve" --rate 2000 --duration 300 --seed 1 \
    >"$D/mps-hp.log" 2>"$D/mps-hp.err" &
  hp=$!
  sleep 2
  run mps-tally-beside-hp "$TALLY" run --priority=best-effort --triton-ptxas \
    --stats="$D/mps-tally-beside-hp.json" --
  run mps-tally-beside-hp-noptb "$TALLY" run --priority=best-effort --triton-ptxas --beside-ptb-percent=0 \
    --stats="$D/mps-tally-beside-hp-noptb.json" --
  run mps-tally-beside-hp-nobeside "$TALLY" run --priority=best-effort --triton-ptxas --no-beside \
    --stats="$D/mps-tally-beside-hp-nobeside.json" --
  kill "$hp" 2>/dev/null
  wait "$hp" 2>/dev/null
  hp=
fi
