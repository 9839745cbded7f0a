#!/usr/bin/env bash
# gpu-hp-overhead.sh - what the runtime costs a latency-critical process:
# hp-serve closed loop (back-to-back requests of one kernel of one wave of
# 20 us blocks, host synchronised) plain and under `tally run
# --priority=high` with the scheduler off, on (launches announced, GPU-written
# completions), with the completion written from a side stream
# (TALLY_HP_COMPLETION=side), by a host function (=host), and with timed
# statistics; three rounds, interleaved.
# Usage: scripts/gpu-hp-overhead.sh [DIR]   (DIR default .carry/runtime)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
R=$(cd "${1:-.carry/runtime}" && pwd)
T=$R/prefix/bin/tally
# On tmpfs: the GPU writes HP completions into the segment (a folder on
# another file system cannot be mapped for the GPU).
TALLY_SHM_DIR=$(mktemp -d -p /dev/shm)
export TALLY_SHM_DIR
run() {
  local name=$1
  shift
  "$@" "$R/hp-serve" --rate 0 --duration 2 --block-us "${BLOCK_US:-20}" 2>/dev/null |
    awk -v n="$name" '/^hp: requests/ { printf "%-22s p50 %7s p99 %7s us", n, $7, $9 }
                      /^hp: capacity/ { printf "  capacity %s req/s\n", $3 }'
}
for _ in 1 2 3; do
  run plain env
  run tally-no-schedule "$T" run --priority=high --no-schedule --
  run tally "$T" run --priority=high --
  run tally-side env TALLY_HP_COMPLETION=side "$T" run --priority=high --
  run tally-host env TALLY_HP_COMPLETION=host "$T" run --priority=high --
  run tally-stats-timed "$T" run --priority=high --stats=/dev/null --
done
