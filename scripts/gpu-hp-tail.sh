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
trap 'rm -rf "$TALLY_SHM_DIR"' EXIT

run() {
  local name=$1 round=$2
  shift 2
  [[ -z ${VARIANTS:-} || " $VARIANTS " == *" $name "* ]] || return 0
  local csv=$OUT/$name.$round.csv
  if ! "$@" "${HP[@]}" --csv "$csv" > "$OUT/$name.$round.log" 2> "$OUT/$name.$round.err"; then
    echo "gpu-hp-tail: $name (round $round) failed; see $OUT/$name.$round.err" >&2
  fi
}

for ((r = 1; r <= ROUNDS; ++r)); do
  run plain "$r" env
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

python3 - "$OUT" "$STALL_US" <<'EOF'
import glob, os, sys
out, stall = sys.argv[1], float(sys.argv[2])
def pct(s, p):
    return s[min(len(s) - 1, int(p * len(s)))]
print("| run | requests | p50 us | p99 us | p99.9 us | max us | stalls over %.0f us |" % stall)
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for f in sorted(glob.glob(os.path.join(out, "*.csv"))):
    v = [float(l.split(",")[0]) for l in open(f) if l.strip() and not l.startswith("#")]
    if not v:
        continue
    s = sorted(v)
    stalls, last = 0, -100
    for i, x in enumerate(v):
        if x > stall:
            stalls += i - last > 20
            last = i
    name = os.path.basename(f)[:-4]
    print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %d |" % (
        name, len(v), pct(s, .5), pct(s, .99), pct(s, .999), s[-1], stalls))
EOF
