#!/usr/bin/env bash
# gpu-hp-tail.sh - where an HP service's tail goes under the runtime, alone on
# the GPU: hp-serve with Poisson arrivals (requests of KERNELS kernels of one
# wave of 20 us blocks, as in gpu-colocate.sh) plain and under `tally run
# --priority=high` in several variants, interleaved over ROUNDS rounds of
# SECONDS each. Per run: p50, p99, p99.9 and max latency, and the stalls
# (runs of requests over STALL_US, counted as one when fewer than 20 requests
# apart: a stall of the process shows as a backlog of many).
# Variants (VARIANTS, names separated by spaces; default all):
#   plain               hp-serve as it is
#   plain-record        hp-serve recording an event after each kernel (no
#                       runtime): what one more driver call per launch costs
#   plain-write-host    hp-serve with a GPU write into registered host memory
#                       after each kernel (no runtime), as HP completions
#   plain-write-device  the same write into device memory
#   tally               the default (completions in bursts) with --stats
#                       (two timing events around each launch)
#   tally-nostats       the default without --stats
#   tally-notiming      --stats with TALLY_STATS_TIMING=0 (counts only)
#   tally-turnaround    --stats with TALLY_STATS_TURNAROUND=1 (a thread
#                       spinning on the completion word)
#   tally-side          TALLY_HP_COMPLETION=side (a write per launch), --stats
#   tally-side-nostats  the same without --stats
#   tally-gpu-nostats   TALLY_HP_COMPLETION=gpu (the write on the program's
#                       stream), without --stats
#   tally-host-nostats  TALLY_HP_COMPLETION=host (a host function per launch),
#                       without --stats
#   tally-none-nostats  TALLY_HP_COMPLETION=none (announced, never reported:
#                       a diagnostic), without --stats
#   tally-noschedule    --no-schedule (interception only)
# With HP_MODEL=resnet50 or bert the service is benchmarks/torch/serve.py in
# open loop (PYTHON picks the interpreter; RATE is then required: e.g. 0.3
# of the closed-loop capacity that gpu-colocate.sh prints).
# Where a stall comes from: hp-serve writes a trace per run (NAME.R.trace:
# per request its arrival, and its latency split into late = queued or the
# sender late, issue = the launch calls, wait = launches to done); a probe
# (hiccup, a thread spinning on the clock) runs through all runs and logs
# every gap over 500 us in which it did not run (OUT/hiccup.txt); each
# run's steal time (/proc/stat) is kept; and --stats runs count the HP
# launch calls with a part over 1 ms (hp_slow_calls). The report lists the
# first stalls of each run with their parts and the probe's gaps in them.
# Usage: scripts/gpu-hp-tail.sh [DIR]   (DIR default .carry/runtime)
# Environment: RATE (default 2726 req/s, half of hp-serve's capacity on an
# H100 with 8 kernels), KERNELS (8), RUN_SECONDS (20), ROUNDS (2), STALL_US
# (1500), OUT (default gpu-out/hp-tail).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/torch-env.sh
. scripts/torch-env.sh
R=$(cd "${1:-.carry/runtime}" && pwd)
T=$R/prefix/bin/tally
OUT=${OUT:-gpu-out/hp-tail}
RATE_SET=${RATE:-}
RATE=${RATE:-2726}
KERNELS=${KERNELS:-8}
SECS=${RUN_SECONDS:-20}
ROUNDS=${ROUNDS:-2}
STALL_US=${STALL_US:-1500}
if [[ -n ${HP_MODEL:-} ]]; then
  [[ -n ${RATE_SET:-} ]] || { echo "gpu-hp-tail: error: HP_MODEL needs RATE (requests/s)" >&2; exit 2; }
  torch_python || { echo "gpu-hp-tail: error: no Python that imports torch with CUDA (set PYTHON)" >&2; exit 1; }
  torch_dir "$R" "$PWD" || { echo "gpu-hp-tail: error: no benchmarks/torch" >&2; exit 1; }
  HP=("$PY" "$TORCH/serve.py" --model "$HP_MODEL" --seed 1 --rate "$RATE" --duration "$SECS")
else
  HP=("$R/hp-serve" --block-us 20 --kernels "$KERNELS" --seed 1 --rate "$RATE" --duration "$SECS")
fi
mkdir -p "$OUT"
# On tmpfs: the GPU writes HP completions into the segment.
TALLY_SHM_DIR=$(mktemp -d -p /dev/shm)
export TALLY_SHM_DIR

# The stall probe, through every run (stopped at the end).
HICCUP_PID=
if [[ -x $R/hiccup ]]; then
  "$R/hiccup" --seconds 86400 --threshold-us 500 > "$OUT/hiccup.txt" &
  HICCUP_PID=$!
fi
trap 'rm -rf "$TALLY_SHM_DIR"; [[ -z $HICCUP_PID ]] || kill "$HICCUP_PID" 2>/dev/null' EXIT

steal() { awk '$1 == "cpu" { print $9 }' /proc/stat; }

run() {
  local name=$1 round=$2
  shift 2
  [[ -z ${VARIANTS:-} || " $VARIANTS " == *" $name "* ]] || return 0
  local csv=$OUT/$name.$round.csv trace=()
  [[ -n ${HP_MODEL:-} ]] || trace=(--trace "$OUT/$name.$round.trace")
  if [[ -z ${HP_MODEL:-} ]]; then
    case $name in
      *-record) trace+=(--record-each) ;;
      *-write-host) trace+=(--write-each host) ;;
      *-write-device) trace+=(--write-each device) ;;
    esac
  fi
  local s0
  s0=$(steal)
  if ! "$@" "${HP[@]}" --csv "$csv" "${trace[@]}" > "$OUT/$name.$round.log" \
    2> "$OUT/$name.$round.err"; then
    echo "gpu-hp-tail: $name (round $round) failed; see $OUT/$name.$round.err" >&2
  fi
  echo $(($(steal) - s0)) > "$OUT/$name.$round.steal"
}

for ((r = 1; r <= ROUNDS; ++r)); do
  run plain "$r" env
  run plain-record "$r" env
  run plain-write-host "$r" env
  run plain-write-device "$r" env
  run tally "$r" "$T" run --priority=high --stats="$OUT/tally.$r.json" --
  run tally-nostats "$r" "$T" run --priority=high --
  run tally-notiming "$r" env TALLY_STATS_TIMING=0 "$T" run --priority=high \
    --stats="$OUT/tally-notiming.$r.json" --
  run tally-turnaround "$r" env TALLY_STATS_TURNAROUND=1 "$T" run --priority=high \
    --stats="$OUT/tally-turnaround.$r.json" --
  run tally-side "$r" env TALLY_HP_COMPLETION=side "$T" run --priority=high \
    --stats="$OUT/tally-side.$r.json" --
  run tally-side-nostats "$r" env TALLY_HP_COMPLETION=side "$T" run --priority=high --
  run tally-gpu-nostats "$r" env TALLY_HP_COMPLETION=gpu "$T" run --priority=high --
  run tally-host-nostats "$r" env TALLY_HP_COMPLETION=host "$T" run --priority=high --
  run tally-none-nostats "$r" env TALLY_HP_COMPLETION=none "$T" run --priority=high --
  run tally-noschedule "$r" "$T" run --priority=high --no-schedule --
done

[[ -z $HICCUP_PID ]] || { kill "$HICCUP_PID" 2>/dev/null; wait "$HICCUP_PID" 2>/dev/null; }
HICCUP_PID=

python3 - "$OUT" "$STALL_US" <<'EOF'
import glob, json, os, sys
out, stall = sys.argv[1], float(sys.argv[2])
def pct(s, p):
    return s[min(len(s) - 1, int(p * len(s)))]
gaps, slow = [], []  # (start epoch, end epoch, us); end epochs of slow 10 ms windows
try:
    for l in open(os.path.join(out, "hiccup.txt")):
        w = l.split()
        if len(w) == 3 and w[0] == "gap":
            end, us = float(w[1]), float(w[2])
            gaps.append((end - us / 1e6, end, us))
        elif len(w) == 3 and w[0] == "slow":
            slow.append(float(w[1]))
except OSError:
    gaps = slow = None
def read_trace(path):
    start, rows = None, []
    try:
        for l in open(path):
            if l.startswith("# start "):
                start = float(l.split()[2])
            elif l[:1].isdigit():
                rows.append([float(x) for x in l.split(",")])
    except OSError:
        return None, []
    return start, rows
def slow_calls(path):
    try:
        j = json.load(open(path))["hp_slow_calls"]
    except (OSError, ValueError, KeyError):
        return ""
    parts = ["lookup", "lock", "driver", "completion"]
    return " ".join("%s %d (%.0f)" % (p, j[p], j["longest_us"][p]) for p in parts)
print("| run | requests | p50 us | p99 us | p99.9 us | max us | stalls over %.0f us | issue p50 / p99 us | steal ticks | probe's slow windows | slow launch calls: part count (longest us) |" % stall)
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
details = []
for f in sorted(glob.glob(os.path.join(out, "*.csv"))):
    v = [float(l.split(",")[0]) for l in open(f) if l.strip() and not l.startswith("#")]
    if not v:
        continue
    s = sorted(v)
    stalls, last = [], -100
    for i, x in enumerate(v):
        if x > stall:
            if i - last > 20:
                stalls.append([i, i])
            stalls[-1][1] = i
            last = i
    name = os.path.basename(f)[:-4]
    try:
        st = open(f[:-4] + ".steal").read().strip()
    except OSError:
        st = "?"
    start, rows = read_trace(f[:-4] + ".trace")
    issue, windows = "", ""
    if rows:
        iss = sorted(r[3] for r in rows)
        issue = "%.0f / %.0f" % (pct(iss, .5), pct(iss, .99))
    if rows and start is not None and slow is not None:
        end = start + rows[-1][0] + rows[-1][1] / 1e6
        windows = str(sum(start <= t <= end for t in slow))
    print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %d | %s | %s | %s | %s |" % (
        name, len(v), pct(s, .5), pct(s, .99), pct(s, .999), s[-1], len(stalls), issue, st,
        windows, slow_calls(f[:-4] + ".json")))
    if start is None or len(rows) != len(v):
        continue
    for a, b in stalls[:6]:
        seg = rows[a:b + 1]
        t0 = start + seg[0][0]
        t1 = start + max(r[0] + r[1] / 1e6 for r in seg)
        worst, first = max(seg, key=lambda r: r[1]), seg[0]
        g = "no probe" if gaps is None else (", ".join(
            "%.1f ms" % (us / 1e3) for gs, ge, us in gaps if ge >= t0 and gs <= t1) or "none") + \
            "; %d slow windows" % sum(t0 <= t <= t1 + 0.01 for t in slow)
        details.append("| %s | %.3f | %d | %.2f | %.2f | %.2f | %.2f | %s |" % (
            name, seg[0][0], b - a + 1, worst[1] / 1e3, first[2] / 1e3, first[3] / 1e3,
            first[4] / 1e3, g))
if details:
    print()
    print("Stalls (first 6 per run): the longest latency in it; the parts of its first request "
          "(the one the stall hit; later ones queue behind it); the probe's gaps over 500 us "
          "within it:")
    print()
    print("| run | at s | requests spanned | longest ms | first: late ms | issue ms | wait ms | probe |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    print("\n".join(details))
if gaps is not None:
    print()
    print("Probe: %d gaps over 500 us, longest %.1f ms; %d windows of 10 ms that lost over 1 ms" % (
        len(gaps), max((g[2] for g in gaps), default=0) / 1e3, len(slow)))
EOF
