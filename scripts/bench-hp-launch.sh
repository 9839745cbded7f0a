#!/usr/bin/env bash
# bench-hp-launch.sh - what libtally adds to an HP process's requests on
# the host, without a GPU (benchmarks/runtime/hp-launch-bench.cpp against
# the runtime tests' fake driver): requests of one launch and a stream
# synchronize, in ROUNDS interleaved rounds of each setting:
#   passthrough   TALLY_DISABLE=1 (libtally loaded, every call passed on)
#   no-schedule   TALLY_PRIORITY=high TALLY_SCHEDULE=0
#   hp            TALLY_PRIORITY=high (the default: announced, completions
#                 in bursts)
#   hp-none       ... TALLY_HP_COMPLETION=none (announced, no completion)
#   hp-side       ... TALLY_HP_COMPLETION=side (a completion per launch)
#   be-free       TALLY_PRIORITY=best-effort, no HP process (Free mode)
# and prints per setting the median ns per request over its rounds, and
# that less passthrough's. The fake's calls are not cheap (each logs a
# line), so those differences also hold the fake's work for the calls
# libtally adds; where perf is, each run is also sampled and the share of
# samples in libtally.so and in the clock reads (the vDSO's
# clock_gettime, all libtally's here) gives libtally's own CPU time per
# request, the better figure. Neither holds the real driver's cost of the
# calls libtally adds (scripts/gpu-hp-overhead.sh on a GPU). Noisy on a
# busy machine: run it alone.
# Usage: scripts/bench-hp-launch.sh [BUILD]   (BUILD default build)
# Environment: ROUNDS (default 3), REQUESTS (per batch, default 20000),
#   BATCHES (per run, default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
BENCH=$B/bin/tally-hp-launch-bench
LIB=$B/lib/libtally.so
FAKE=$B/lib/libfakecuda.so
for f in "$BENCH" "$LIB" "$FAKE"; do
  [[ -e $f ]] || { echo "bench-hp-launch: no $f (build first: scripts/build.sh)" >&2; exit 1; }
done
ROUNDS=${ROUNDS:-3} REQUESTS=${REQUESTS:-20000} BATCHES=${BATCHES:-15}
tmp=$(mktemp -d /tmp/bench-hp-launch.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
declare -A SET=(
  [passthrough]="TALLY_DISABLE=1"
  [no-schedule]="TALLY_PRIORITY=high TALLY_SCHEDULE=0"
  [hp]="TALLY_PRIORITY=high"
  [hp-none]="TALLY_PRIORITY=high TALLY_HP_COMPLETION=none"
  [hp-side]="TALLY_PRIORITY=high TALLY_HP_COMPLETION=side"
  [be-free]="TALLY_PRIORITY=best-effort"
)
order=(passthrough no-schedule hp hp-none hp-side be-free)
perf=()
if command -v perf >/dev/null && perf record -q -o "$tmp/probe.data" true 2>/dev/null; then
  perf=(perf record -q -o "$tmp/perf.data")
else
  echo "bench-hp-launch: no usable perf: libtally's own time is not told apart" >&2
fi
declare -A RES=() OWN=()
for ((r = 1; r <= ROUNDS; ++r)); do
  for name in "${order[@]}"; do
    read -ra kv <<<"${SET[$name]}"
    mkdir -p "$tmp/shm-$name-$r"
    line=$(env LD_PRELOAD="$LIB" TALLY_DRIVER="$FAKE" TALLY_SHM_DIR="$tmp/shm-$name-$r" \
      TALLY_CACHE_DIR="$tmp/cache" FAKE_MPS=0 "${kv[@]}" \
      "${perf[@]}" "$BENCH" --requests "$REQUESTS" --batches "$BATCHES" 2>/dev/null)
    ns=$(sed -n 's/.*median \([0-9.]*\) ns per request.*/\1/p' <<<"$line")
    [[ -n $ns ]] || { echo "bench-hp-launch: $name: no result: $line" >&2; exit 1; }
    RES[$name]+="$ns "
    if ((${#perf[@]})); then
      # Percent of samples in libtally.so and in the vDSO (clock reads).
      pct=$(perf report -i "$tmp/perf.data" --no-children --stdio --sort dso -g none 2>/dev/null |
        awk '$2 == "libtally.so" || $2 == "[vdso]" {sub("%", "", $1); p += $1} END {print p + 0}')
      OWN[$name]+="$(awk -v p="$pct" -v n="$ns" 'BEGIN {printf "%.1f", p * n / 100}') "
    fi
  done
done
echo "requests of one launch and a synchronize against the fake driver; $ROUNDS rounds" \
  "of $BATCHES batches of $REQUESTS ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores)"
printf '| %-12s | %-28s | %10s | %12s | %22s |\n' setting "ns per request (each round)" median \
  "over passthrough" "in libtally (perf)"
printf '| %-12s | %-28s | %10s | %12s | %22s |\n' --- --- ---: ---: ---:
med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(med "${RES[passthrough]}")
for name in "${order[@]}"; do
  m=$(med "${RES[$name]}")
  own=-
  [[ -n ${OWN[$name]:-} ]] && own=$(med "${OWN[$name]}")
  printf '| %-12s | %-28s | %10.1f | %+12.1f | %22s |\n' "$name" "${RES[$name]% }" "$m" \
    "$(awk -v a="$m" -v b="$base" 'BEGIN {print a - b}')" "$own"
done
