#!/usr/bin/env bash
# ncu-forms.sh - Nsight Compute on be-spin's kernel in each of Tally's
# forms (workblocks-forms, at a fixed work so the profiler's slowed
# launches do not change the kernel): executed instructions, issue stalls
# by reason, instruction-cache stalls, occupancy, per form. For where the
# sliced and PTB forms' cost on 10 us blocks goes (eighteenth to twenty-
# first rounds).
# Usage: scripts/debug/ncu-forms.sh [DIR]   (DIR default .carry/runtime)
# Environment: OUT (default gpu-out/ncu-forms), WORK (hashing rounds per
#   thread, default 135: be-spin --calibrate's for 10 us blocks on an H200)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
R=${1:-.carry/runtime}
OUT=${OUT:-gpu-out/ncu-forms}
WORK=${WORK:-135}
command -v ncu >/dev/null || { echo "ncu-forms: no ncu on PATH" >&2; exit 1; }
mkdir -p "$OUT"
# Sections rather than metric names: their names hold across ncu versions.
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats
  --section Occupancy --section SchedulerStats --section WarpStateStats --section LaunchStats)
# Each form's kernel by name; the original matches both the nvcc-linked one
# and the cubin's (the same code).
for form in "original:regex:^_Z10workBlocksPKjPjjPyS2_\$" \
  "slice:regex:__tally_slice\$" "ptb:regex:__tally_ptb\$"; do
  name=${form%%:*} k=${form#*:}
  echo "== $name"
  ncu "${sections[@]}" --kernel-name-base mangled -k "$k" -c 4 --csv --page raw \
    "$R/workblocks-forms" "$R/be-spin.tally.cubin" --work "$WORK" --launches 10 --batches 1 \
    >"$OUT/ncu-$name.csv" 2>"$OUT/ncu-$name.err"
  echo "rc=$? $(wc -l <"$OUT/ncu-$name.csv") lines"
done
# One table: per form, the mean of each metric over its profiled launches.
python3 - "$OUT" <<'PY'
import csv, sys, os, statistics
out = sys.argv[1]
rows = {}
for form in ("original", "slice", "ptb"):
    path = os.path.join(out, f"ncu-{form}.csv")
    try:
        text = open(path).read().splitlines()
    except OSError:
        continue
    start = next((i for i, l in enumerate(text) if l.startswith('"ID"')), None)
    if start is None:
        continue
    r = list(csv.reader(text[start:]))
    head, data = r[0], [x for x in r[2:] if len(x) == len(r[0])]
    for j, h in enumerate(head):
        if "__" not in h:
            continue
        vals = []
        for x in data:
            try:
                vals.append(float(x[j].replace(",", "")))
            except ValueError:
                pass
        if vals:
            rows.setdefault(h, {})[form] = statistics.mean(vals)
with open(os.path.join(out, "ncu-forms.md"), "w") as f:
    f.write("| metric | original | slice | ptb |\n| --- | ---: | ---: | ---: |\n")
    for h in sorted(rows):
        v = rows[h]
        f.write(f"| {h} | " + " | ".join(f"{v[k]:.4g}" if k in v else "" for k in ("original", "slice", "ptb")) + " |\n")
# On the terminal only what differs by over 3 % between the forms.
for h in sorted(rows):
    v = [rows[h].get(k) for k in ("original", "slice", "ptb")]
    if None in v:
        continue
    lo, hi = min(v), max(v)
    if hi > 0 and (hi - lo) / hi > 0.03:
        print(f"{h:90s} " + " ".join(f"{x:12.4g}" for x in v))
PY
