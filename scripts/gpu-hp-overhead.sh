#!/usr/bin/env bash
# gpu-hp-overhead.sh - what the runtime costs a latency-critical process:
# hp-serve closed loop (back-to-back requests of one kernel of one wave of
# 20 us blocks, host synchronised) plain and under `tally run
# --priority=high` with the scheduler off, on (launches announced, GPU-written
# completions), with the completion written from a side stream
# (TALLY_HP_COMPLETION=side), by a host function (=host), and with timed
# statistics; three rounds, interleaved. With HP_MODEL=resnet50 or bert the
# service is benchmarks/torch/serve.py (eager PyTorch, closed loop, SECONDS
# per run, default 5; PYTHON picks the interpreter). A run with every
# call passed through (TALLY_DISABLE=1: the cost of the preload alone) comes
# with either. KERNELS (default 1) sets hp-serve's kernels per request.
# RATE (requests/s, default 0: closed loop) makes hp-serve's arrivals
# Poisson at that rate for DURATION s (default 2; the sender spins until
# each arrival unless ARRIVAL=sleep), so the latency includes queueing as
# in gpu-colocate.sh. TRACE=1 (hp-serve only) times each request's kernels
# on the GPU (--gpu-trace) into TRACE_DIR (default gpu-out/hp-overhead,
# emptied first) and ends with scripts/debug/hp-parts.py's table of
# where the requests' time went, a row per run (NAME-rROUND).
# ROUNDS (default 3) sets the rounds; VARIANTS (names separated by
# spaces, default all) picks the runs: plain tally-disabled (every call
# passed through: the cost of the preload alone) tally-no-schedule
# tally tally-side tally-gpu tally-burst tally-burst1ms (bursts of 1 ms,
# TALLY_HP_BURST_US=1000) tally-none (announced, no completion written: a
# diagnostic) tally-host tally-stats tally-stats-timed.
# Usage: scripts/gpu-hp-overhead.sh [DIR]   (DIR default .carry/runtime)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/torch-env.sh
. scripts/torch-env.sh
R=$(cd "${1:-.carry/runtime}" && pwd)
T=$R/prefix/bin/tally
# On tmpfs: the GPU writes HP completions into the segment (a folder on
# another file system cannot be mapped for the GPU).
TALLY_SHM_DIR=$(mktemp -d -p /dev/shm)
export TALLY_SHM_DIR
HP_MODEL=${HP_MODEL:-}
if [[ -n $HP_MODEL ]]; then
  torch_python || { echo "gpu-hp-overhead: error: no Python that imports torch with CUDA (set PYTHON)" >&2; exit 1; }
  torch_dir "$R" "$PWD" || { echo "gpu-hp-overhead: error: no benchmarks/torch" >&2; exit 1; }
  HP=("$PY" "$TORCH/serve.py" --model "$HP_MODEL" --mode capacity --seconds "${SECONDS_PER_RUN:-5}")
else
  HP=("$R/hp-serve" --rate "${RATE:-0}" --duration "${DURATION:-2}" --block-us "${BLOCK_US:-20}"
      --kernels "${KERNELS:-1}")
  [[ ${RATE:-0} != 0 && ${ARRIVAL:-spin} == spin ]] && HP+=(--spin-arrival)
fi
TRACE=${TRACE:-0}
[[ $TRACE == 0 || $TRACE == 1 ]] || { echo "gpu-hp-overhead: error: TRACE '$TRACE': 0 or 1" >&2; exit 1; }
[[ $TRACE == 1 && -n $HP_MODEL ]] && { echo "gpu-hp-overhead: error: TRACE is hp-serve's (no HP_MODEL)" >&2; exit 1; }
if ((TRACE)); then
  TRACE_DIR=${TRACE_DIR:-gpu-out/hp-overhead}
  rm -rf "$TRACE_DIR" && mkdir -p "$TRACE_DIR" || { echo "gpu-hp-overhead: error: cannot create $TRACE_DIR" >&2; exit 1; }
fi
round=0
run() {
  local name=$1
  shift
  [[ -z ${VARIANTS:-} || " $VARIANTS " == *" $name "* ]] || return 0
  local extra=()
  ((TRACE)) && extra=(--gpu-trace "$TRACE_DIR/$name-r$round.hp-gpu.csv")
  "$@" "${HP[@]}" "${extra[@]}" 2>/dev/null |
    awk -v n="$name" '/^hp: requests/ { line = sprintf("%-22s p50 %7s p99 %7s p999 %7s us", n, $7, $9, $11) }
                      /^hp: capacity/ { cap = sprintf("  capacity %s req/s", $3) }
                      END { if (line != "") print line cap; else printf "%-22s failed\n", n }'
}
for ((round = 0; round < ${ROUNDS:-3}; ++round)); do
  run plain env
  run tally-disabled env TALLY_DISABLE=1 "$T" run --priority=high --
  run tally-no-schedule "$T" run --priority=high --no-schedule --
  run tally "$T" run --priority=high --
  run tally-side env TALLY_HP_COMPLETION=side "$T" run --priority=high --
  run tally-gpu env TALLY_HP_COMPLETION=gpu "$T" run --priority=high --
  run tally-burst env TALLY_HP_COMPLETION=burst "$T" run --priority=high --
  run tally-burst1ms env TALLY_HP_BURST_US=1000 "$T" run --priority=high --
  run tally-none env TALLY_HP_COMPLETION=none "$T" run --priority=high --
  run tally-host env TALLY_HP_COMPLETION=host "$T" run --priority=high --
  run tally-stats env TALLY_STATS_TIMING=0 "$T" run --priority=high --stats=/dev/null --
  run tally-stats-timed "$T" run --priority=high --stats=/dev/null --
done
((TRACE)) && python3 scripts/debug/hp-parts.py "$TRACE_DIR"
exit 0
