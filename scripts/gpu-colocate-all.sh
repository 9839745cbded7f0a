#!/usr/bin/env bash
# gpu-colocate-all.sh - every pair of the co-location benchmark in one
# command, on the GPU machine (after scripts/prepare-device.sh here): three
# runs of scripts/gpu-colocate.sh with every system, one per HP service,
#   hp-serve   beside be-spin 10 and 100 us blocks, train-gpt (where DIR has
#              it) and the Triton-compiled training (triton)
#   resnet50   the PyTorch ResNet-50 service beside eager PyTorch training
#              (torch) and the Triton-compiled training
#   bert       the BERT-base sized service beside eager PyTorch training
# then one report: OUT/all-report.md (each part's table and checks under a
# heading) and OUT/colocate-all.csv (every part's colocate.csv rows, with
# the HP service in a first column `hp`), from every part whose results are
# in OUT: parts run by earlier commands with the same OUT are kept.
# The Triton training's caches are filled once, in the first part that
# runs it (OUT/triton-caches, kept: a second round starts in seconds).
# One process per run and window: the record runs (long windows, hp-serve).
# The PyTorch services' whole evaluation within one device command is
# scripts/gpu-colocate-suite.py (processes kept across windows).
#
# Usage: scripts/gpu-colocate-all.sh [--quick] [--part=hp-serve|resnet50|bert]... [DIR]
#        scripts/gpu-colocate-all.sh --merge-only
#   --quick    each part in its quick mode
#   --merge-only  run nothing: only the merged report of the parts in OUT
#              (parts run on different machines, their folders copied into
#              one OUT); exit status 1 when one of them had failed
#   --part=P   only that part (repeatable; default all three). Measured
#              with --quick on an H100 (2026-11-24): 396, 460 and 228 s (the
#              first with the Triton compile, 100 s cold; the second reused
#              its caches, 25 s); full runs estimated from gpu-colocate.sh's
#              timings, not measured: about 16, 19 and 10 minutes. Past a
#              device command's 600 s, run one part (or one SYSTEMS subset)
#              per command
#   DIR        as gpu-colocate.sh's (default .carry/runtime)
# Environment: OUT (default gpu-out); the rest is gpu-colocate.sh's (HP_LOAD,
# SYSTEMS, HP_SECONDS, TRITON_ARGS...), passed to every part, except
# HP_MODEL and BE_CONFS, which each part sets. Exit status 1 when a part
# failed.
set -uo pipefail
export LC_ALL=C

quick=()
parts=()
dir=()
merge_only=0
for a in "$@"; do
  case $a in
    --quick) quick=(--quick) ;;
    --merge-only) merge_only=1 ;;
    --part=hp-serve | --part=resnet50 | --part=bert) parts+=("${a#--part=}") ;;
    --part=*) echo "gpu-colocate-all: error: unknown part '${a#--part=}' (hp-serve, resnet50, bert)" >&2; exit 2 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-colocate-all: error: unknown option '$a'" >&2; exit 2 ;;
    *)
      ((${#dir[@]} == 0)) || { echo "gpu-colocate-all: error: more than one DIR" >&2; exit 2; }
      dir=("$(cd "$a" 2>/dev/null && pwd || echo "$a")") ;;
  esac
done
((${#parts[@]})) || parts=(hp-serve resnet50 bert)
((merge_only)) && parts=()
src=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-gpu-out}
mkdir -p "$OUT" || { echo "gpu-colocate-all: error: cannot create $OUT" >&2; exit 1; }
OUT=$(cd "$OUT" && pwd)
export TRITON_CACHES=${TRITON_CACHES:-$OUT/triton-caches}
gpt=
[[ -x ${dir[0]:-$src/.carry/runtime}/train-gpt.tally ]] && gpt=gpt

report=$OUT/all-report.md
csv=$OUT/colocate-all.csv
fails=0
for p in "${parts[@]}"; do
  case $p in
    hp-serve) model='' confs="be10 be100 $gpt triton" ;;
    resnet50) model=resnet50 confs="torch triton" ;;
    bert) model=bert confs="torch" ;;
  esac
  echo "== part $p (BE: $confs)"
  log=$OUT/$p.log
  rm -f "$OUT/$p.status"
  t0=$SECONDS
  if HP_MODEL=$model BE_CONFS=$confs OUT=$OUT/$p \
    "$src/scripts/gpu-colocate.sh" "${quick[@]}" "${dir[@]}" >"$log" 2>&1; then
    status=passed
  else
    status=FAILED
    fails=$((fails + 1))
  fi
  status="$status in $((SECONDS - t0)) s"
  echo "$status" >"$OUT/$p.status"
  echo "   $status ($(grep -m1 '^co-location failures' "$log" || echo 'no summary line'))"
done

# The merged report: every part whose results are in OUT, from this
# command or an earlier one (one part per device command).
: >"$report"
rm -f "$csv"
merged=0
for p in hp-serve resnet50 bert; do
  [[ -f $OUT/$p.status && -f $OUT/$p.log ]] || continue
  merged=$((merged + 1))
  ((merge_only)) && grep -q '^FAILED' "$OUT/$p.status" && fails=$((fails + 1))
  log=$OUT/$p.log
  {
    echo "# $p ($(cat "$OUT/$p.status"))"
    echo
    # The part's report: from its table's heading to the end; without one,
    # the end of its log.
    if grep -q '^## Co-location: HP latency and BE throughput' "$log"; then
      sed -n '/^## Co-location: HP latency and BE throughput/,$p' "$log"
    else
      echo '```'
      tail -20 "$log"
      echo '```'
    fi
    echo
  } >>"$report"
  if [[ -f $OUT/$p/colocate.csv ]]; then
    python3 - "$OUT/$p/colocate.csv" "$csv" "$p" <<'PYEOF'
import csv, os, sys
src, dst, hp = sys.argv[1:4]
with open(src) as f:
    rows = list(csv.reader(x for x in f if not x.startswith("#")))
if rows:
    new = not os.path.exists(dst)
    with open(dst, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["hp"] + rows[0])
        for r in rows[1:]:
            w.writerow([hp] + r)
PYEOF
  fi
done
echo "written: $report$([[ -f $csv ]] && echo ", $csv")"
if ((merge_only)); then
  echo "merged: $merged parts, $fails of them failed"
else
  echo "co-location parts failed: $fails of ${#parts[@]}"
fi
exit $((fails != 0))
