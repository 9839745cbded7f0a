#!/usr/bin/env bash
# gpu-hp-goal.sh - #9's HP goal judged over several runs. HP's p99 at half
# load moves by 5-15 us between runs of one setting (twentieth round), as
# much as the goal (HP p99 within 15 us of HP alone for BE blocks of about
# 10 us), so one run decides nothing. For each load this runs
# gpu-colocate.sh --quick REPEATS times (each run: HP alone, HP under Tally
# alone, HP as an MPS client alone, then SYSTEMS beside BE_CONFS, with
# TALLY_RUNS Tally-with-MPS runs), keeps each run's colocate.csv and ends
# with scripts/colocate-runs.py's table: per system the median and range of
# HP p99 over the HP alone of the same run, BE kept, and in how many runs
# the goal held.
# Usage: scripts/gpu-hp-goal.sh [DIR]   (DIR default .carry/runtime)
# Environment:
#   OUT          results folder (default gpu-out/hp-goal): LOAD/runN.csv,
#                LOAD/runN.log (gpu-colocate.sh's output), LOAD/runN-logs.tgz
#                (a failed run's logs, the CSVs left out), goal-LOAD.md,
#                summary.md
#   LOADS        HP loads, fractions of its capacity (default "0.1 0.5")
#   REPEATS      gpu-colocate.sh runs per load (default 3)
#   TALLY_RUNS   Tally-with-MPS runs per gpu-colocate.sh run (default 2; the
#                extra ones are TALLY_MPS_VARIANTS that only name a run)
#   VARIANTS     more Tally-with-MPS systems to judge alongside, once per
#                gpu-colocate.sh run: gpu-colocate.sh's TALLY_MPS_VARIANTS
#                syntax (NAME=VAR=VALUE[,VAR=VALUE...], space-separated; the
#                names tally2..tally9 are this script's); each is its own row
#                (tally-mps+NAME)
#   HP_KERNELS   kernels per HP request (default 1: the issue's request)
#   HP_SECONDS   HP's window per run, s (default 8)
#   SYSTEMS      default "mps-prio tally-mps"; BE_CONFS default be10;
#                PROFILE, PROFILE_SEED and the rest pass to gpu-colocate.sh
# Time: about 70 s per gpu-colocate.sh run at HP_SECONDS=8 with the
# defaults, and some 15 s more per extra Tally run or variant (2026-11-28,
# H200: three runs of one load in 3.5 minutes), so three repeats of two
# loads take about 7 minutes; with variants run one load per device command
# (LOADS=0.5), each with its own OUT.
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.." || exit 1
R=${1:-.carry/runtime}
OUT=${OUT:-gpu-out/hp-goal}
LOADS=${LOADS:-0.1 0.5}
REPEATS=${REPEATS:-3}
TALLY_RUNS=${TALLY_RUNS:-2}
die() {
  echo "gpu-hp-goal: error: $*" >&2
  exit 1
}
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || die "REPEATS '$REPEATS': a whole number, at least 1"
[[ $TALLY_RUNS =~ ^[1-9]$ ]] || die "TALLY_RUNS '$TALLY_RUNS': 1 to 9"
for load in $LOADS; do
  [[ $load =~ ^(0?\.[0-9]+|1(\.0+)?)$ ]] || die "LOADS: '$load' is not a fraction from 0 to 1"
done
mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
# The extra Tally runs: variants that set nothing of consequence.
variants=() aliases=()
read -ra extra <<<"${VARIANTS:-}"
for v in "${extra[@]}"; do
  [[ $v == tally[2-9]=* ]] && die "VARIANTS: '$v': the names tally2..tally9 are the extra Tally runs'"
  variants+=("$v")
done
for ((k = 2; k <= TALLY_RUNS; ++k)); do
  variants+=("tally$k=TALLY_LOG_LEVEL=warn")
  aliases+=(--alias "tally-mps+tally$k=tally-mps")
done
rc=0
for load in $LOADS; do
  d=$OUT/$load
  rm -rf "$d"
  mkdir -p "$d"
  csvs=()
  for ((i = 1; i <= REPEATS; ++i)); do
    echo "== HP at $load of its capacity, run $i of $REPEATS"
    OUT="$d/run$i" HP_LOAD=$load HP_KERNELS=${HP_KERNELS:-1} HP_SECONDS=${HP_SECONDS:-8} \
      SYSTEMS=${SYSTEMS:-mps-prio tally-mps} BE_CONFS=${BE_CONFS:-be10} \
      TALLY_MPS_VARIANTS="${variants[*]}" scripts/gpu-colocate.sh --quick "$R" >"$d/run$i.log" 2>&1
    r=$?
    if [[ -f $d/run$i/colocate.csv ]]; then
      cp "$d/run$i/colocate.csv" "$d/run$i.csv"
      csvs+=("$d/run$i.csv")
    fi
    if ((r)); then
      rc=$r
      # Its logs (not the large per-request CSVs) stay for a look.
      logs=
      [[ -d $d/run$i ]] && tar czf "$d/run$i-logs.tgz" --exclude='*.csv' -C "$d/run$i" . 2>/dev/null &&
        logs=", $d/run$i-logs.tgz"
      echo "   gpu-colocate.sh exited $r (see $d/run$i.log$logs)"
    fi
    rm -rf "$d/run$i"
  done
  if ((${#csvs[@]})); then
    python3 scripts/colocate-runs.py "${aliases[@]}" "${csvs[@]}" --out "$OUT/goal-$load.md" || rc=1
  else
    echo "(no run left a colocate.csv)" >"$OUT/goal-$load.md"
    rc=1
  fi
done
{
  echo "# gpu-hp-goal ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  echo "HP: ${HP_KERNELS:-1} kernels per request, ${HP_SECONDS:-8} s per run; BE: ${BE_CONFS:-be10};" \
    "$REPEATS runs per load, $TALLY_RUNS Tally runs in each${VARIANTS:+; variants: $VARIANTS}"
  for load in $LOADS; do
    echo
    echo "## HP at $load of its capacity"
    echo
    cat "$OUT/goal-$load.md"
  done
  echo
  echo "exit status $rc"
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $rc
