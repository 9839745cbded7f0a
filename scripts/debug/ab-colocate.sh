#!/usr/bin/env bash
# ab-colocate.sh - an A/B of two builds of libtally.so on one GPU machine:
# scripts/gpu-colocate.sh run ROUNDS times with each build, interleaved and
# in alternating order (base, new; new, base; ...), with the same
# environment, so that the machine's moods (host stalls come and go) fall
# on both alike. Only libtally.so differs between the two: the tally
# command, tally-ptxas and the transformed programs are DIR's in both.
#
# Usage: scripts/debug/ab-colocate.sh BASE_LIB [ROUNDS] [-- gpu-colocate.sh's arguments]
#   BASE_LIB  the base build's libtally.so (an absolute or relative path),
#             loaded through TALLY_LIBRARY; the new build is the one beside
#             DIR's tally (default .carry/runtime/prefix)
#   ROUNDS    rounds of the two runs (default 2)
# Environment: OUT (default gpu-out-ab); the rest is gpu-colocate.sh's
# (BE_CONFS, SYSTEMS, HP_SECONDS, HP_MODEL...), the same for every run.
# With BE conf triton, TRITON_CACHES defaults to OUT/triton-caches, filled
# by the first run and reused by the others.
# Writes OUT/base1, OUT/new1, ... (each run's OUT) and OUT/ab.md: for each
# run the rows of the Tally systems and HP alone (HP p50 and p99 and BE kept
# from the run's colocate.csv; p90 and mean from its per-request files,
# nearest rank as the report's). Exit status 1 when a run or the table
# failed. (The first run also fills the Triton caches, if any.)
set -uo pipefail
export LC_ALL=C

[[ ${1:-} == -h || ${1:-} == --help || $# -lt 1 ]] && {
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  [[ $# -ge 1 ]]
  exit $?
}
base=$(cd "$(dirname "$1")" 2>/dev/null && pwd)/$(basename "$1")
[[ -f $base ]] || { echo "ab-colocate: error: no base library $1" >&2; exit 2; }
shift
rounds=2
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
  rounds=$((10#$1))
  shift
fi
[[ ${1:-} == -- ]] && shift
((rounds >= 1)) || { echo "ab-colocate: error: ROUNDS must be at least 1" >&2; exit 2; }
src=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-gpu-out-ab}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
export TRITON_CACHES=${TRITON_CACHES:-$OUT/triton-caches}
fails=0
for ((r = 1; r <= rounds; r++)); do
  order=(base new)
  ((r % 2 == 0)) && order=(new base)
  for v in "${order[@]}"; do
    t0=$SECONDS
    if [[ $v == base ]]; then
      TALLY_LIBRARY=$base OUT=$OUT/$v$r "$src/scripts/gpu-colocate.sh" "$@" >"$OUT/$v$r.log" 2>&1
    else
      (unset TALLY_LIBRARY; OUT=$OUT/$v$r "$src/scripts/gpu-colocate.sh" "$@") >"$OUT/$v$r.log" 2>&1
    fi
    rc=$?
    ((rc)) && fails=$((fails + 1))
    echo "== $v$r: exit $rc in $((SECONDS - t0)) s ($(grep -m1 '^co-location failures' "$OUT/$v$r.log" || echo 'no summary line'))"
  done
done

if ! python3 - "$OUT" "$rounds" >"$OUT/ab.md" <<'PYEOF'
import csv, math, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def pct(s, q):
    # Nearest rank, as colocate-report.py's p50 and p99.
    if not s:
        return float("nan")
    return s[min(max(math.ceil(q * len(s)), 1), len(s)) - 1]

def lat(path):
    try:
        with open(path) as f:
            return sorted(float(x) for x in f if x.strip() and not x.startswith("#"))
    except (OSError, ValueError):
        return []

print("| run | system | BE | HP p50 us | p90 | p99 | mean | BE kept |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
for r in range(1, rounds + 1):
    for v in ("base", "new"):
        d = os.path.join(out, f"{v}{r}")
        try:
            rows = list(csv.DictReader(x for x in open(os.path.join(d, "colocate.csv"))
                                       if not x.startswith("#")))
            runs = [l.rstrip("\n").split("\t")
                    for l in open(os.path.join(d, "colocate", "runs.tsv"))]
        except OSError:
            print(f"| {v}{r} | (no results) | | | | | | |")
            continue
        for f in runs:
            if len(f) < 4 or not f[3] or not (f[0] == "alone" or f[0].startswith("tally")):
                continue
            row = next((x for x in rows if x["system"] == f[0] and x["be_block_us"] == f[2]),
                       None)
            if row is None:
                continue
            s = lat(os.path.join(d, "colocate", os.path.basename(f[3])))
            mean = sum(s) / len(s) if s else float("nan")
            print(f"| {v}{r} | {f[0]} | {f[1]} | {row['hp_p50']} | {pct(s, 0.9):.1f} | "
                  f"{row['hp_p99']} | {mean:.1f} | "
                  f"{row.get('be_rate_fraction_of_alone') or ''} |")
PYEOF
then
  echo "ab-colocate: error: the table could not be made" >&2
  fails=$((fails + 1))
fi
cat "$OUT/ab.md"
((fails == 0))
