#!/usr/bin/env bash
# ptb-hang.sh - on the GPU machine: runs a program under `tally run` again
# and again (forced PTB, random preemption, a new seed each time) until one
# run outlives its limit, then records what the hung process was doing: the
# GPU's utilization, the kernels on the GPU (cuda-gdb, where there is one),
# the host threads (gdb), the Python stacks (PYTHONFAULTHANDLER, SIGABRT)
# and Tally's debug log (each PTB launch, each flag, each resumption).
# Usage: scripts/debug/ptb-hang.sh NAME RUNS LIMIT_S -- PROGRAM [ARGS...]
#   run in .carry/runtime; TALLY_ARGS (default: --force=ptb
#   --preempt=random:6 --runtime-ptx=on) and TALLY_OPT pass through.
# Writes $OUT/hang-NAME.txt (the summary) and $OUT/hang-NAME-RUN.err (the
# hung run's log); exit status 1 when a run hung or failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
[[ $# -ge 5 && $4 == -- ]] || { echo "usage: $0 NAME RUNS LIMIT_S -- PROGRAM [ARGS...]" >&2; exit 2; }
name=$1 runs=$2 limit=$3
shift 4
R=$(pwd)/.carry/runtime
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
read -r -a targs <<<"${TALLY_ARGS:---force=ptb --preempt=random:6 --runtime-ptx=on}"
S=$OUT/hang-$name.txt
: >"$S"
hung=0
for ((i = 1; i <= runs; i++)); do
  log=$(mktemp)
  (cd "$R" && exec env PYTHONFAULTHANDLER=1 TALLY_LOG_LEVEL=debug "$R/prefix/bin/tally" run \
    "${targs[@]}" --seed=$((1000 + i)) -- "$@") >/dev/null 2>"$log" &
  pid=$!
  t0=$SECONDS
  while kill -0 $pid 2>/dev/null && ((SECONDS - t0 < limit)); do
    sleep 0.5
  done
  if ! kill -0 $pid 2>/dev/null; then
    wait $pid
    rc=$?
    echo "run $i (seed $((1000 + i))): exit $rc in $((SECONDS - t0)) s" | tee -a "$S"
    if [[ $rc -ne 0 ]]; then
      tail -15 "$log" | tee -a "$S"
      rm -f "$log"
      hung=1
      break
    fi
    rm -f "$log"
    continue
  fi
  hung=1
  echo "run $i (seed $((1000 + i))): HUNG after $limit s" | tee -a "$S"
  # The program itself: `tally run` execs it.
  prog=$pid
  {
    echo "== nvidia-smi"
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
    echo "== processes"
    ps -o pid,ppid,stat,etime,cmd --ppid "$prog" -p "$prog"
    if command -v cuda-gdb >/dev/null || [[ -x /usr/local/cuda/bin/cuda-gdb ]]; then
      echo "== cuda-gdb: kernels on the GPU, host threads"
      timeout 90 "$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)" -p "$prog" -batch \
        -ex "info cuda kernels" -ex "info cuda blocks" -ex "thread apply all bt 16" 2>&1 |
        grep -v "^\[New LWP\|^\[Thread .* exited\]" | head -200
    else
      echo "== no cuda-gdb"
    fi
    if command -v gdb >/dev/null; then
      echo "== gdb: host threads"
      timeout 60 gdb -p "$prog" -batch -ex "thread apply all bt 12" 2>&1 | grep -E "^#|^Thread" | head -120
    else
      echo "== no gdb"
    fi
  } >>"$S" 2>&1
  kill -ABRT "$prog" 2>/dev/null
  sleep 2
  kill -KILL "$prog" 2>/dev/null
  wait $pid 2>/dev/null
  cp "$log" "$OUT/hang-$name-$i.err"
  {
    echo "== the log's last 40 lines"
    tail -40 "$log"
  } >>"$S"
  rm -f "$log"
  break
done
exit $hung
