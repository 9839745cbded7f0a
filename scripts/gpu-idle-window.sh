#!/usr/bin/env bash
# gpu-idle-window.sh - the BE idle window's trade-off under MPS: HP (8
# kernels of one wave of 20 us blocks per request, Poisson at RATE req/s)
# beside be-spin.tally (10 us blocks, work 9) under Tally, for each
# --idle-us given; prints HP p50/p99 and BE kernels/s over the HP window.
# Usage: scripts/gpu-idle-window.sh DIR RATE IDLE_US...
set -uo pipefail
R=$(cd "$1" && pwd); RATE=$2; shift 2
T=$R/prefix/bin/tally
M=$(mktemp -d /tmp/tally-idle-mps.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY=$M/pipe CUDA_MPS_LOG_DIRECTORY=$M/log TALLY_STATS_TIMING=0
"$T" mps start >/dev/null || exit 1
trap '"$T" mps stop >/dev/null' EXIT
for idle in "$@"; do
  "$T" run --priority=best-effort --idle-us="$idle" -- "$R/be-spin.tally" --work 9 --duration 14 \
    >"$M/be.log" 2>&1 &
  be=$!
  sleep 2
  s=$(date +%s.%N)
  "$T" run --priority=high -- "$R/hp-serve" --kernels 8 --rate "$RATE" --duration 8 \
    2>/dev/null | grep '^hp: requests' | awk -v i="$idle" '{printf "idle-us %-5s HP p50 %s p99 %s us", i, $7, $9}'
  e=$(date +%s.%N)
  wait $be
  awk -v s="$s" -v e="$e" '/^be: t=/ { split($3, k, "="); split($4, p, "="); t = p[2];
       if (t <= s) { k0 = k[2]; t0 = t } if (t <= e) { k1 = k[2]; t1 = t } }
       END { printf "  BE %.0f kernels/s in the HP window\n", (k1 - k0) / (t1 - t0) }' "$M/be.log"
done
