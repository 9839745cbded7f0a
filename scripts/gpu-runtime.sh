#!/usr/bin/env bash
# gpu-runtime.sh - the runtime's round on the GPU machine (after
# scripts/prepare-device.sh here; scripts/gpu.sh runs it, or run it alone):
#   * every runtime test program (examples/runtime, the kernel suite as a
#     runtime-API program) plain, then its transformed form under
#     `tally run` with every kernel forced to its PTB variant and preempted
#     at random points, and forced to its sliced variant: the output must be
#     the same bytes as the plain run's;
#   * PyTorch under the runtime: the same losses, its kernels counted; the
#     PyTorch programs of scripts/gpu-torch-programs.sh, the same digests;
#   * benchmarks: the runtime's cost per launch, each form's run time
#     through the runtime, the preemption latency the runtime sees.
# Logs go to $OUT/runtime-logs.tgz (OUT defaults to gpu-out); a table is
# printed last.
# Exit status 1 when any output differs or a run fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
R=$(pwd)/.carry/runtime
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
O=$(mktemp -d)/runtime
TALLY=$R/prefix/bin/tally
fails=0
rows=()

row() { rows+=("| $1 | $2 |"); }

# same NAME REF -- CMD...: runs CMD (in $R) into $O/NAME.txt, compares the
# output with $O/REF.txt.
same() {
  local name=$1 ref=$2
  shift 3
  (cd "$R" && timeout -k 5 120 "$@") >"$O/$name.txt" 2>"$O/$name.err"
  local rc=$?
  [[ $rc -eq 124 ]] && echo "== $name: timed out after 120 s" >&2
  if [[ $rc -ne 0 ]]; then
    row "$name" "FAILED (exit $rc): $(tail -c 300 "$O/$name.err" | tr '\n' ' ')"
    fails=$((fails + 1))
    if [[ $rc -ge 128 && -f $R/segv-backtrace.so ]]; then
      # Where it crashed (scripts/debug/segv-backtrace.c; no gdb there).
      (cd "$R" && LD_PRELOAD=$R/segv-backtrace.so "$@") >/dev/null 2>"$O/$name.crash.txt"
      echo "== $name crashed:"
      grep -A40 "segv-backtrace" "$O/$name.crash.txt" | head -40
    fi
  elif ! cmp -s "$O/$name.txt" "$O/$ref.txt"; then
    row "$name" "DIFFERENT OUTPUT from $ref ($(diff "$O/$ref.txt" "$O/$name.txt" | grep -c '^>') lines)"
    fails=$((fails + 1))
  else
    row "$name" "same as $ref ($(wc -l <"$O/$name.txt") lines)$(stats_of "$name")"
  fi
}

# stats_of NAME: a summary of the --stats JSON of run NAME, if any.
stats_of() {
  [[ -f $O/$1.json ]] || return 0
  python3 - "$O/$1.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
k = s.get("kernels", [])
n = {f: sum(x["launches"][f] for x in k) for f in ("original", "slice", "ptb")}
n["preempted"] = sum(x["preemptions"] for x in k)
n["fallbacks"] = sum(x["fallbacks"] for x in k)
out = "; launches " + ", ".join(f"{f} {v}" for f, v in n.items())
out += f"; kernels without variants {sum(not x['has_variants'] for x in k)}"
out += f" ({100 * s['share_without_variants']:.1f} % of GPU time)"
lat = s["preemption_latency_us"]
if lat["count"]:
    out += f"; preemption latency p50 {lat['p50']:.1f} us, p99 {lat['p99']:.1f} us"
print(out, end="")
EOF
}

# forms NAME PROGRAM ARGS...: NAME-plain from the plain PROGRAM, then the
# transformed PROGRAM.tally (or the ARGS with .tally) plain, under the
# runtime with nothing forced, forced to PTB with random preemption, forced
# to slices.
run_forms() {
  local name=$1 plain=$2 tallied=$3
  shift 3
  echo "== $name" >&2
  (cd "$R" && timeout -k 5 120 $plain "$@") >"$O/$name-plain.txt" 2>"$O/$name-plain.err"
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    row "$name-plain" "FAILED (exit $rc): $(tail -c 300 "$O/$name-plain.err" | tr '\n' ' ')"
    fails=$((fails + 1))
    return
  fi
  row "$name-plain" "reference ($(wc -l <"$O/$name-plain.txt") lines)"
  local targs=("${@//.so/.tally.so}")
  targs=("${targs[@]//.fatbin/.tally.fatbin}")
  same "$name-tally" "$name-plain" -- $tallied "${targs[@]}"
  same "$name-runtime" "$name-plain" -- "$TALLY" run --stats="$O/$name-runtime.json" -- \
    $tallied "${targs[@]}"
  same "$name-ptb-preempt" "$name-plain" -- "$TALLY" run --force=ptb --preempt=random:20 \
    --stats="$O/$name-ptb-preempt.json" -- $tallied "${targs[@]}"
  # One worker per SM: every grid has logical blocks left to preempt.
  same "$name-ptb1-preempt" "$name-plain" -- "$TALLY" run --force=ptb --preempt=random:20 \
    --ptb-workers-per-sm=1 --seed=7 --stats="$O/$name-ptb1-preempt.json" -- $tallied "${targs[@]}"
  same "$name-slice" "$name-plain" -- "$TALLY" run --force=slice \
    --stats="$O/$name-slice.json" -- $tallied "${targs[@]}"
}

mkdir -p "$O"
# The logs come back even when a step hangs and the round is cut off.
trap 'tar czf "$OUT/runtime-logs.tgz" -C "$(dirname "$O")" runtime' EXIT
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
} | tee "$O/device.txt"
if ldd "$R/prefix/lib/libtally.so" | grep "not found"; then
  echo "libtally.so: missing libraries"
  exit 1
fi
ldd "$R/prefix/lib/libtally.so" >"$O/ldd.txt"
"$TALLY" --help >"$O/help.txt" 2>&1

echo "== runtime: programs plain and under tally run"
run_forms streams ./streams ./streams.tally
run_forms streams-shared ./streams-shared ./streams-shared.tally
run_forms suite ./suite-host ./suite-host.tally
run_forms driver-api ./driver-api ./driver-api driver-kernels.fatbin
run_forms dlopen ./dlopen-main ./dlopen-main ./libkern.so
run_forms train-gpt ./train-gpt ./train-gpt.tally --steps 50
# Sampled timing (TALLY_STATS_TIMING=16) against every launch timed, the same
# forms forced: the estimated GPU time, in all and by form, within 15 %.
same train-gpt-timed-all train-gpt-plain -- env TALLY_STATS_TIMING=1 "$TALLY" run --force=ptb \
  --stats="$O/train-gpt-timed-all.json" -- ./train-gpt.tally --steps 50
same train-gpt-timed-16 train-gpt-plain -- env TALLY_STATS_TIMING=16 "$TALLY" run --force=ptb \
  --stats="$O/train-gpt-timed-16.json" -- ./train-gpt.tally --steps 50
if cmp_timing=$(python3 scripts/stats-timing-compare.py "$O/train-gpt-timed-all.json" \
  "$O/train-gpt-timed-16.json" 2>&1); then
  row "train-gpt: sampled timing (1 in 16) against all timed" "$cmp_timing"
else
  row "train-gpt: sampled timing (1 in 16) against all timed" "FAILED: $cmp_timing"
  fails=$((fails + 1))
fi
# The dlopen()ed library, with less of the runtime at work, and with the
# runtime's log.
same dlopen-debug dlopen-plain -- "$TALLY" run --force=ptb --log-level=debug -- ./dlopen-main \
  ./libkern.tally.so
same dlopen-runtime-nostats dlopen-plain -- "$TALLY" run -- ./dlopen-main ./libkern.tally.so
same dlopen-disabled dlopen-plain -- env TALLY_DISABLE=1 "$TALLY" run -- ./dlopen-main \
  ./libkern.tally.so
same dlopen-runtime-plainlib dlopen-plain -- "$TALLY" run -- ./dlopen-main ./libkern.so
# A program without variants under the runtime: passed through.
same streams-plain-runtime streams-plain -- "$TALLY" run --force=ptb -- ./streams

echo "== runtime: PyTorch"
if python3 -c "import torch" 2>/dev/null; then
  (cd "$R" && python3 torch_check.py 20) >"$O/torch-plain.txt" 2>"$O/torch-plain.err"
  row torch-plain "reference (exit $?)"
  same torch-runtime torch-plain -- "$TALLY" run --force=ptb --stats="$O/torch-runtime.json" \
    -- python3 torch_check.py 20
else
  row torch "SKIPPED: no PyTorch"
fi
# PyTorch programs of the kinds users run (graphs, torch.compile, threads,
# fork and spawn...), alone and in pairs: scripts/gpu-torch-programs.sh.
if OUT=$OUT scripts/gpu-torch-programs.sh "$R" >"$O/torch-programs.txt" 2>&1; then
  row torch-programs "$(tail -1 "$O/torch-programs.txt") (table: $OUT/torch-programs.md)"
else
  row torch-programs "FAILED: $(grep FAILED "$O/torch-programs.txt" | head -3 | tr '\n' ' ')"
  fails=$((fails + 1))
fi

echo "== runtime: benchmarks"
for _ in 1 2 3; do
  (cd "$R" && ./runtime-launch-overhead) >>"$O/launch-plain.txt" 2>&1
  (cd "$R" && "$TALLY" run --priority=high -- ./runtime-launch-overhead) \
    >>"$O/launch-runtime.txt" 2>&1
done
row "launch overhead, plain" "$(grep -h 'us per launch' "$O/launch-plain.txt" | tr '\n' ';')"
row "launch overhead, tally run" "$(grep -h 'us per launch' "$O/launch-runtime.txt" | tr '\n' ';')"
(cd "$R" && ./runtime-forms) >"$O/forms-plain.txt" 2>&1
(cd "$R" && "$TALLY" run --force=ptb -- ./runtime-forms) >"$O/forms-ptb.txt" 2>&1
(cd "$R" && "$TALLY" run --force=slice -- ./runtime-forms) >"$O/forms-slice.txt" 2>&1
(cd "$R" && "$TALLY" run --force=ptb --preempt=random:6 --stats="$O/forms-preempt.json" -- \
  ./runtime-forms) >"$O/forms-preempt.txt" 2>&1
for f in plain ptb slice preempt; do
  row "runtime-forms $f" "$(grep -v '^checksum' "$O/forms-$f.txt" | tr '\n' ';')"
done
cs=$(grep -h '^checksum' "$O"/forms-*.txt | sort -u | wc -l)
if [[ $cs -ne 1 ]]; then
  row "runtime-forms checksums" "DIFFERENT ($cs distinct)"
  fails=$((fails + 1))
else
  row "runtime-forms checksums" "identical in every form$(stats_of forms-preempt)"
fi

tar czf "$OUT/runtime-logs.tgz" -C "$(dirname "$O")" runtime
echo
echo "| runtime check | result |"
echo "| --- | --- |"
printf '%s\n' "${rows[@]}" | tee "$OUT/runtime-summary.md"
echo "runtime failures: $fails"
exit $((fails != 0))
