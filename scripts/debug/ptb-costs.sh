#!/usr/bin/env bash
# ptb-costs.sh - one device command for the eighteenth round's question: what
# does be-spin (10 us blocks) lose under Tally while HP is present but idle
# (#9's goal: the chosen configuration within 5 % of the original), and where?
#   1. benchmarks/gpu/ptb-launch-costs: the stream operations around a PTB
#      launch (clear, events, gate) on the GPU, against the kernel alone.
#   2. be-spin alone for BE_SECONDS (default 4) each, twice, with the work
#      of one plain calibration: plain; be-spin.tally under `tally run
#      --priority=best-effort` (no HP: Free mode, originals); with
#      `--force=ptb` at 8 and 4 workers per SM (every launch PTB, no HP to
#      leave for); with `--force=slice` as one slice; with OLD_LIB (a
#      libtally.so), its forced PTB runs too (an A/B of the runtime).
#   3. benchmarks/gpu/workblocks-forms: be-spin's kernel in each form
#      (tally-opt's cubin, DIR/be-spin.tally.cubin) launched directly.
#   4. gpu-colocate.sh --quick, SYSTEMS=tally-mps, at HP_LOAD (default 0.01:
#      HP present, nearly idle), be10, PROFILE (default warm), with
#      TALLY_MPS_VARIANTS=$VARIANTS: BE kept, and BE's statistics (the
#      choices' cost over the original, launches by form).
# Usage: scripts/debug/ptb-costs.sh [DIR]   (DIR default .carry/runtime)
# Environment: OUT (default gpu-out), BE_SECONDS, HP_LOAD, HP_SECONDS (8),
# PROFILE, PROFILE_SEED (see gpu-colocate.sh), VARIANTS (default empty:
# more tally-mps systems, TALLY_MPS_VARIANTS), OLD_LIB, COLO (0: no step 4),
# STATS (0: step 2 without --stats).
# Writes OUT/summary.md, OUT/be-alone.tar.xz (step 2's logs and statistics)
# and OUT/colo.tar.xz.
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/../.." || exit 1
R=${1:-.carry/runtime}
OUT=${OUT:-gpu-out}
BE_S=${BE_SECONDS:-4}
mkdir -p "$OUT"
rc=0
TALLY=$R/prefix/bin/tally
S=$OUT/summary.md
{
  echo "# ptb-costs ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo
  echo '## Stream operations around a launch (ptb-launch-costs --block-us 10)'
  echo '```'
} >"$S"
if [[ -x $R/ptb-launch-costs ]]; then
  "$R/ptb-launch-costs" --block-us 10 --launches 100 --batches 5 >>"$S" 2>&1 || rc=1
else
  echo "(no $R/ptb-launch-costs)" >>"$S"
fi
echo '```' >>"$S"

be_rate() { sed -n 's/^be: kernels .* \([0-9.]*\) kernels\/s$/\1/p' "$1" | tail -n1; }
# One calibration (plain), then every run with that work: a run's own
# calibration through the runtime would time the form, not the original.
work=$("$R/be-spin" --calibrate | sed -n 's/^be: work \([0-9]*\) .*/\1/p')
{
  echo
  echo '## be-spin alone (kernels/s)'
  echo
  echo "work $work, $BE_S s per run, each run twice (interleaved); the ratio is to plain's first; statistics $([[ ${STATS:-1} == 0 ]] && echo off || echo "on (every launch timed)")"
  echo
  echo '| run | kernels/s | ratio | verify |'
  echo '| --- | ---: | ---: | --- |'
} >>"$S"
runs=(plain tally ptb-w8 ptb-w4 slice)
[[ -n ${OLD_LIB:-} ]] && runs+=(old-ptb-w8 old-ptb-w4)
base=
for rep in 1 2; do
  for run in "${runs[@]}"; do
    log=$OUT/be-$run-$rep.log
    lib=()
    [[ $run == old-* ]] && lib=(env "TALLY_LIBRARY=$OLD_LIB")
    # Statistics time every launch (two events each: about 5 % of this
    # kernel's speed); STATS=0 runs without them.
    stats=(--stats="$OUT/be-$run-$rep.json")
    [[ ${STATS:-1} == 0 ]] && stats=()
    case $run in
    plain) cmd=("$R/be-spin") ;;
    tally) cmd=("$TALLY" run --priority=best-effort "${stats[@]}" -- "$R/be-spin.tally") ;;
    *ptb-w8) cmd=("${lib[@]}" env TALLY_PTB_WORKERS_PER_SM=8 "$TALLY" run --priority=best-effort --force=ptb
      "${stats[@]}" -- "$R/be-spin.tally") ;;
    *ptb-w4) cmd=("${lib[@]}" env TALLY_PTB_WORKERS_PER_SM=4 "$TALLY" run --priority=best-effort --force=ptb
      "${stats[@]}" -- "$R/be-spin.tally") ;;
    slice) cmd=(env TALLY_SLICE_BLOCKS=1048576 "$TALLY" run --priority=best-effort --force=slice
      "${stats[@]}" -- "$R/be-spin.tally") ;;
    esac
    "${cmd[@]}" --duration "$BE_S" --work "$work" >"$log" 2>&1
    r=$?
    ((r)) && rc=$r
    k=$(be_rate "$log")
    [[ -z $base ]] && base=$k
    ratio=$(awk -v a="$k" -v b="$base" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b }')
    ok=$(grep -c '^be: verify ok' "$log")
    echo "| $run ($rep) | ${k:-?} | ${ratio:-?} | $([[ $ok == 1 ]] && echo ok || echo "FAILED (exit $r)") |" >>"$S"
  done
done

{
  echo
  echo '## be-spin'"'"'s kernel in each form, launched directly (workblocks-forms)'
  echo '```'
} >>"$S"
if [[ -x $R/workblocks-forms && -f $R/be-spin.tally.cubin ]]; then
  "$R/workblocks-forms" "$R/be-spin.tally.cubin" --block-us 10 >>"$S" 2>&1 || rc=1
else
  echo "(no $R/workblocks-forms or $R/be-spin.tally.cubin)" >>"$S"
fi
echo '```' >>"$S"

# (Few files come back from the device: the runs' logs and statistics go
# into one archive.)
mapfile -t logs < <(cd "$OUT" && ls be-*.log be-*.json 2>/dev/null)
((${#logs[@]})) && tar -C "$OUT" -cJf "$OUT/be-alone.tar.xz" --remove-files "${logs[@]}"
if [[ ${COLO:-1} == 0 ]]; then
  echo "exit status $rc" >>"$S"
  cat "$S"
  exit $rc
fi
load=${HP_LOAD:-0.01}
d=$OUT/colo
echo "== gpu-colocate.sh --quick, tally-mps at HP load $load"
OUT="$d" HP_LOAD=$load HP_SECONDS=${HP_SECONDS:-8} SYSTEMS="tally-mps" BE_CONFS=be10 \
  PROFILE=${PROFILE:-warm} WARMUP_SECONDS=5 TALLY_MPS_VARIANTS="${VARIANTS:-}" \
  scripts/gpu-colocate.sh --quick "$R" >"$OUT/colo.log" 2>&1
r=$?
((r)) && rc=$r
{
  echo
  echo "## Co-located at HP load $load (gpu-colocate.sh --quick, exit $r)"
  echo
  cat "$d"/colocate/colocate.md 2>/dev/null || tail -n 20 "$OUT/colo.log"
  echo
  echo "BE statistics (choices' cost over the original; launches by form):"
  echo '```'
  for j in "$d"/colocate/*be10*.be.json; do
    [[ -f $j ]] || continue
    echo "$(basename "$j"):"
    python3 - "$j" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
s = j.get("scheduler", {})
print("  gpu_ms_by_form", json.dumps(j.get("gpu_ms_by_form")))
print("  choices", json.dumps(s.get("choices")))
for d in j.get("decisions", [])[:8]:
    print("  decision", json.dumps(d))
for k in ("full_speed_launches", "holds", "held_ms", "preemptions", "measured", "discarded",
          "queued_launches", "hp_requests", "beside"):
    if k in s:
        print(" ", k, json.dumps(s[k]))
for k in j.get("kernels", []):
    print("  kernel", k.get("name"), json.dumps(k.get("launches")))
EOF
  done
  echo '```'
  echo
  echo "exit status $rc"
} >>"$S"
tar -C "$OUT" -cJf "$OUT/colo.tar.xz" colo && rm -rf "$d"
cat "$S"
exit $rc
