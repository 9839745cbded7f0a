#!/usr/bin/env bash
# beside-wave.sh - one device command for two questions of the sixteenth
# round (run on the GPU machine after scripts/prepare-device.sh here):
#   1. hp-serve alone (Poisson at half its capacity): how much of its tail
#      comes from the sender sleeping between requests? Sleeping and
#      spinning (--spin-arrival), interleaved, ROUNDS rounds of HP_SECONDS.
#   2. be-spin of 10 us blocks beside hp-serve under MPS: plain MPS client
#      priorities, Tally with MPS (its default: narrow PTB launches beside
#      HP) and Tally with MPS choosing originals of short waves
#      (TALLY_BESIDE_WAVE_US=15: the original at full width beside HP), HP
#      spinning between requests, each Tally run with a warm profile of its
#      own. (The sixteenth round ran this with the opposite default, 15, and
#      a variant wave0=TALLY_BESIDE_WAVE_US=0.)
# Usage: scripts/debug/beside-wave.sh [DIR]   (DIR default .carry/runtime)
# Environment: OUT (default gpu-out), HP_SECONDS (default 8), ROUNDS
# (default 2). Writes OUT/alone.tsv (mode, round, p50, p99, p999, mean us),
# OUT/colo.tar.xz (gpu-colocate.sh's output), OUT/summary.md.
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/../.." || exit 1
R=${1:-.carry/runtime}
OUT=${OUT:-gpu-out}
HP_S=${HP_SECONDS:-8}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
hp=("$R/hp-serve" --block-us 20 --kernels 8 --seed 1)
cap=$("${hp[@]}" --duration 2 | sed -n 's/^hp: capacity \([0-9.]*\) req.*/\1/p')
[[ -n $cap ]] || { echo "beside-wave: no capacity from hp-serve" >&2; exit 1; }
rate=$(python3 -c "print(round($cap * 0.5, 2))")
echo "== hp-serve capacity $cap req/s; Poisson at $rate req/s, $HP_S s per run"
printf 'mode\tround\tp50\tp99\tp999\tmean\n' >"$OUT/alone.tsv"
for ((i = 1; i <= ROUNDS; i++)); do
  for mode in sleep spin; do
    extra=()
    [[ $mode == spin ]] && extra=(--spin-arrival)
    line=$("${hp[@]}" --rate "$rate" --duration "$HP_S" "${extra[@]}" | grep '^hp: requests')
    [[ -n $line ]] || { echo "beside-wave: hp-serve ($mode) printed no result" >&2; exit 1; }
    echo "$mode $i: $line"
    # hp: requests N rate R p50 X p99 Y p999 Z mean M max W us
    read -r p50 p99 p999 mean < <(awk '{for (k = 1; k < NF; k++) v[$k] = $(k + 1);
      print v["p50"], v["p99"], v["p999"], v["mean"]}' <<<"$line")
    printf '%s\t%d\t%s\t%s\t%s\t%s\n' "$mode" "$i" "$p50" "$p99" "$p999" "$mean" >>"$OUT/alone.tsv"
  done
done
echo "== co-located: be-spin 10 us blocks, MPS client priorities and Tally with MPS"
OUT="$OUT/colo" HP_ARRIVAL=spin HP_SECONDS=$HP_S SYSTEMS="mps-prio tally-mps" BE_CONFS=be10 \
  PROFILE=warm WARMUP_SECONDS=5 TALLY_MPS_VARIANTS="wave15=TALLY_BESIDE_WAVE_US=15" \
  scripts/gpu-colocate.sh --quick "$R"
rc=$?
tar -C "$OUT" -cJf "$OUT/colo.tar.xz" colo && rm -rf "$OUT/colo"
{
  echo "# beside-wave ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo
  echo "hp-serve alone, Poisson at $rate req/s (half of $cap), $HP_S s per run:"
  echo
  cat "$OUT/alone.tsv"
  echo
  echo "gpu-colocate.sh exit status $rc (its report is in colo.tar.xz: colo/colocate.csv)"
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $rc
