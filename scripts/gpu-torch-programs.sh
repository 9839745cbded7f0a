#!/usr/bin/env bash
# gpu-torch-programs.sh - the runtime inside PyTorch programs of the kinds
# users run, on the GPU machine (after scripts/prepare-device.sh here):
# examples/runtime/torch_programs.py (eager training, CUDA graphs captured
# by hand and by torch.compile, Inductor's Triton kernels, threads on their
# own streams, pinned copies and events, attention, cuBLASLt, the device's
# random numbers, every way PyTorch waits) plain twice, then
#   hp        under `tally run --priority=high --stats`
#   be        under `tally run --priority=best-effort --stats`
#   pair      both at once, HP and BE, each running every case twice
#   pair-mps  the same as MPS clients of a daemon of its own (BE below
#             normal priority, as `tally run` makes it)
#   async     PyTorch's cudaMallocAsync backend: plain, then under
#             `tally run --priority=best-effort` beside an HP under Tally
# Every run must exit 0 within TIMEOUT s (a hang fails the run, and its
# stacks are not needed to tell) and print, case by case, the digests of the
# plain run. A case that raised in the plain run (this PyTorch or GPU cannot
# run it) or printed different digests in the plain runs (the second
# repeats every case in one process: nondeterministic here) is listed and
# not compared; the same for the cudaMallocAsync runs. The Inductor and
# Triton caches are shared by every run (the first one compiles), so every
# run launches the same kernels.
# Usage: scripts/gpu-torch-programs.sh [DIR]   (DIR default .carry/runtime)
# Environment: OUT (default gpu-out), TIMEOUT (default 300), CASES (comma-
# separated; default all), PYTHON (see scripts/torch-env.sh).
# Writes OUT/torch-programs.md (the table, printed too) and
# OUT/torch-programs-logs.tgz. Exit status 1 when a run failed or differed,
# 0 when all passed or there is no PyTorch with CUDA (said so).
set -uo pipefail
export LC_ALL=C
src=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/torch-env.sh
. "$src/scripts/torch-env.sh"
R=$(cd "${1:-$src/.carry/runtime}" && pwd) || exit 1
T=$R/prefix/bin/tally
OUT=${OUT:-gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
TIMEOUT=${TIMEOUT:-300}
CASES=${CASES:-all}
report=$OUT/torch-programs.md
if ! torch_python; then
  echo "| torch-programs | SKIPPED: no Python that imports torch with CUDA (set PYTHON) |" | tee "$report"
  exit 0
fi
[[ -x $T && -f $R/torch_programs.py ]] ||
  { echo "gpu-torch-programs: error: $R lacks prefix/bin/tally or torch_programs.py (run scripts/prepare-device.sh)" >&2; exit 1; }
O=$(mktemp -d)/torch-programs
mkdir -p "$O"
trap 'tar czf "$OUT/torch-programs-logs.tgz" -C "$(dirname "$O")" torch-programs 2>/dev/null' EXIT
# One set of compiler caches for every run; a segment folder of its own.
export TORCHINDUCTOR_CACHE_DIR=$O/inductor-cache TRITON_CACHE_DIR=$O/triton-cache
TALLY_SHM_DIR=$(mktemp -d -p /dev/shm)
export TALLY_SHM_DIR
PROG=("$PY" "$R/torch_programs.py" --cases "$CASES")
rows=()
fails=0
row() { rows+=("| $1 | $2 |"); }
fail() { row "$1" "FAILED: $2"; fails=$((fails + 1)); }

# start NAME CMD...: runs CMD in the background, stdout NAME.txt, stderr
# NAME.err, under the time limit; its pid in PID.
start() {
  local name=$1
  shift
  (cd "$R" && exec timeout -k 5 "$TIMEOUT" "$@") >"$O/$name.txt" 2>"$O/$name.err" &
  PID=$!
}
# finish NAME PID: waits; says why a run failed (exit, time limit, signal).
finish() {
  local name=$1 rc
  wait "$2"
  rc=$?
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    fail "$name" "did not finish in $TIMEOUT s (hang?): $(tail -c 300 "$O/$name.err" | tr '\n' ' ')"
    return 1
  elif [[ $rc -ne 0 ]]; then
    fail "$name" "exit $rc: $(grep -v '^torch_programs: [a-z-]* [0-9.]* s$' "$O/$name.err" | tail -c 400 | tr '\n' ' ')"
    return 1
  fi
  return 0
}
run() {
  local name=$1
  shift
  start "$name" "$@"
  finish "$name" "$PID"
}

# compare NAME REF: NAME's case lines against REF's (each case as often as
# NAME ran it), except the cases left out (error in REF, or nondeterministic).
compare() {
  local name=$1 ref=$2 bad
  local skip=$O/skip.txt
  [[ -f $O/$ref.skip.txt ]] && skip=$O/$ref.skip.txt
  bad=$(python3 - "$O/$ref.txt" "$O/$name.txt" "$skip" <<'EOF'
import sys
ref = {}
for l in open(sys.argv[1]):
    p = l.split(maxsplit=2)
    if len(p) == 3 and p[0] == "case":
        ref[p[1]] = l.strip()
skip = set(open(sys.argv[3]).read().split())
seen = {}
bad = []
for l in open(sys.argv[2]):
    p = l.split(maxsplit=2)
    if len(p) < 3 or p[0] != "case":
        continue
    seen[p[1]] = seen.get(p[1], 0) + 1
    if p[1] in skip:
        continue
    if l.strip() != ref.get(p[1]):
        bad.append(f"{p[1]}: {p[2].strip()[:90]}")
missing = [c for c in ref if c not in seen and c not in skip]
bad += [f"{c}: not run" for c in missing]
print("; ".join(bad))
EOF
)
  if [[ -n $bad ]]; then
    fail "$name" "differs from $ref: $bad"
    return 1
  fi
  return 0
}

stats() { # a summary of a --stats JSON
  [[ -f $1 ]] || return 0
  python3 - "$1" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
k = s.get("kernels", [])
launches = sum(sum(x["launches"].values()) for x in k)
print(f"; {launches} launches of {len(k)} kernels, {sum(x['has_variants'] for x in k)} with variants", end="")
EOF
}

{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" 2>&1
} >"$O/device.txt"
cat "$O/device.txt"

echo "== plain (twice: the reference, and which cases are deterministic here)"
t0=$SECONDS
run plain-1 "${PROG[@]}" || { echo "gpu-torch-programs: the plain run failed" >&2; cat "$O/plain-1.err" >&2; exit 1; }
row plain-1 "reference: $(grep -c '^case .* sha256' "$O/plain-1.txt") cases ($((SECONDS - t0)) s, compiles included)"
# The second plain run repeats every case in one process, as the pairs do.
run plain-2 "${PROG[@]}" --repeat 2
# deterministic REF OTHER SKIP WHY: the cases of REF that raised, or whose
# digests OTHER did not repeat (each time it ran them), into SKIP.
deterministic() {
  python3 - "$1" "$2" >"$3" 2>"$4" <<'EOF'
import sys
a = {l.split()[1]: l.strip() for l in open(sys.argv[1]) if l.startswith("case ")}
b = {}
for l in open(sys.argv[2]):
    if l.startswith("case "):
        b.setdefault(l.split()[1], set()).add(l.strip())
for c, l in a.items():
    if " error " in l:
        print(c)
        print(f"{c}: raised in the plain run ({l.split(' error ', 1)[1][:120]})", file=sys.stderr)
    elif b.get(c) != {l}:
        print(c)
        print(f"{c}: different digests in plain runs (nondeterministic here)", file=sys.stderr)
EOF
}
deterministic "$O/plain-1.txt" "$O/plain-2.txt" "$O/skip.txt" "$O/skip-why.txt"
if [[ -s $O/skip-why.txt ]]; then
  row "not compared" "$(tr '\n' ';' <"$O/skip-why.txt" | sed 's/;$//; s/;/; /g')"
fi

echo "== under tally run, one at a time"
for prio in high best-effort; do
  name=hp
  [[ $prio == best-effort ]] && name=be
  t0=$SECONDS
  run "$name" "$T" run --priority=$prio --stats="$O/$name.json" -- "${PROG[@]}" &&
    compare "$name" plain-1 &&
    row "$name" "same digests ($((SECONDS - t0)) s)$(stats "$O/$name.json")"
done

# pair NAME [ENV...]: HP and BE at once, every case twice in each.
pair() {
  local name=$1 hp be t0
  shift
  t0=$SECONDS
  start "$name-hp" env "$@" "$T" run --priority=high -- "${PROG[@]}" --repeat 2
  hp=$PID
  start "$name-be" env "$@" "$T" run --priority=best-effort --stats="$O/$name-be.json" -- "${PROG[@]}" --repeat 2
  be=$PID
  local ok=1
  finish "$name-hp" "$hp" && compare "$name-hp" plain-1 || ok=0
  finish "$name-be" "$be" && compare "$name-be" plain-1 || ok=0
  ((ok)) && row "$name" "HP and BE at once: same digests, every case twice in each ($((SECONDS - t0)) s)$(stats "$O/$name-be.json")"
  grep -h "^tally:" "$O/$name-hp.err" "$O/$name-be.err" | sort | uniq -c | sort -rn | head -5 >"$O/$name-notes.txt"
}

echo "== HP and BE at once (time slicing)"
pair pair

if command -v nvidia-cuda-mps-control >/dev/null; then
  echo "== HP and BE at once, MPS"
  MPSDIR=$(mktemp -d /tmp/tally-torch-programs-mps.XXXXXX)
  mkdir -p "$MPSDIR/pipe" "$MPSDIR/log"
  menv=(CUDA_MPS_PIPE_DIRECTORY="$MPSDIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPSDIR/log")
  if env "${menv[@]}" nvidia-cuda-mps-control -d; then
    pair pair-mps "${menv[@]}"
    echo quit | env "${menv[@]}" nvidia-cuda-mps-control >/dev/null 2>&1
    sleep 1
  else
    fail pair-mps "nvidia-cuda-mps-control -d failed"
  fi
else
  row pair-mps "SKIPPED: no nvidia-cuda-mps-control"
fi

echo "== cudaMallocAsync"
# Its own reference: another allocator may place tensors elsewhere.
if run async-plain "${PROG[@]}" --alloc async && run async-plain-2 "${PROG[@]}" --alloc async; then
  deterministic "$O/async-plain.txt" "$O/async-plain-2.txt" "$O/async-plain.skip.txt" "$O/async-skip-why.txt"
  [[ -s $O/async-skip-why.txt ]] &&
    row "not compared (async)" "$(tr '\n' ';' <"$O/async-skip-why.txt" | sed 's/;$//; s/;/; /g')"
  start async-hp "$T" run --priority=high -- "${PROG[@]}" --alloc async
  hp=$PID
  start async-be "$T" run --priority=best-effort -- "${PROG[@]}" --alloc async
  be=$PID
  ok=1
  finish async-hp "$hp" && compare async-hp async-plain || ok=0
  finish async-be "$be" && compare async-be async-plain || ok=0
  ((ok)) && row async "HP and BE at once with --alloc async: same digests as plain with it"
fi

{
  echo "| run | result |"
  echo "| --- | --- |"
  printf '%s\n' "${rows[@]}"
} | tee "$report"
echo "torch-programs: $fails failed (logs: $OUT/torch-programs-logs.tgz)"
rm -rf "$TALLY_SHM_DIR"
((fails == 0))
