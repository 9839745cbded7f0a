#!/usr/bin/env bash
# hp-parts.sh - one device command for the seventeenth round's question: under
# MPS, where does hp-serve's added time per request go beside a BE client
# (be-spin, 10 us blocks)? Each request's parts on the GPU's clock
# (hp-serve --gpu-trace: the span of its kernels, the time outside it, late
# blocks, gaps between kernels), tabulated by scripts/debug/hp-parts.py.
#   1. gpu-colocate.sh --quick with HP_TRACE=1 at HP_LOAD (default 0.5):
#      HP alone (plain, under tally run, as an MPS client), MPS client
#      priorities, Tally with MPS (default), and VARIANTS (Tally with MPS
#      with other settings), each Tally run with a warm profile of its own.
#   2. The same at LOW_LOAD (default 0.1; empty: skipped): little queueing,
#      so the latency is close to a request's own time.
# Usage: scripts/debug/hp-parts.sh [DIR]   (DIR default .carry/runtime)
# Environment: OUT (default gpu-out), HP_SECONDS (default 8), HP_LOAD,
# LOW_LOAD, BE_CONFS (default be10), PROFILE (default warm; and PROFILE_SEED,
# see gpu-colocate.sh),
# VARIANTS (default "leave=TALLY_BESIDE_PTB_PERCENT=0
# share25=TALLY_BESIDE_PTB_PERCENT=25 nosched=TALLY_SCHEDULE=0": BE
# intercepted, never held nor narrowed), HP_ARRIVAL (default spin).
# Writes OUT/parts-LOAD.md (the tables), OUT/colo-LOAD.tar.xz
# (gpu-colocate.sh's output), OUT/summary.md.
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/../.." || exit 1
R=${1:-.carry/runtime}
OUT=${OUT:-gpu-out}
HP_S=${HP_SECONDS:-8}
LOAD=${HP_LOAD:-0.5}
LOW=${LOW_LOAD-0.1}
VARIANTS=${VARIANTS-leave=TALLY_BESIDE_PTB_PERCENT=0 share25=TALLY_BESIDE_PTB_PERCENT=25 nosched=TALLY_SCHEDULE=0}
mkdir -p "$OUT"
rc=0
loads=("$LOAD")
[[ -n $LOW ]] && loads+=("$LOW")
for load in "${loads[@]}"; do
  echo "== HP at $load of its capacity: be-spin 10 us blocks, MPS client priorities and Tally with MPS"
  d=$OUT/colo-$load
  OUT="$d" HP_TRACE=1 HP_LOAD=$load HP_ARRIVAL=${HP_ARRIVAL:-spin} HP_SECONDS=$HP_S \
    SYSTEMS="mps-prio tally-mps" BE_CONFS=${BE_CONFS:-be10} PROFILE=${PROFILE:-warm} WARMUP_SECONDS=5 \
    TALLY_MPS_VARIANTS="$VARIANTS" scripts/gpu-colocate.sh --quick "$R"
  r=$?
  ((r)) && rc=$r
  python3 scripts/debug/hp-parts.py "$d/colocate" --out "$OUT/parts-$load.md" || rc=1
  tar -C "$OUT" -cJf "$OUT/colo-$load.tar.xz" "colo-$load" && rm -rf "$d"
done
{
  echo "# hp-parts ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for load in "${loads[@]}"; do
    echo
    echo "## HP at $load of its capacity"
    echo
    cat "$OUT/parts-$load.md" 2>/dev/null || echo "(no table)"
  done
  echo
  echo "exit status $rc (gpu-colocate.sh's reports are in colo-LOAD.tar.xz)"
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $rc
