#!/usr/bin/env bash
# gpu.sh - one round on the GPU machine (after scripts/prepare-device.sh
# here): the correctness suite (original vs sliced vs preempted PTB, bit
# for bit), compute-sanitizer (memcheck, racecheck, synccheck) on every
# variant, PTX made fresh by Triton/Inductor/JAX there and transformed
# (scripts/outside-ptx.py), and the benchmarks (variant run time,
# preemption latency, the PTB loop's costs).
# Then the runtime's round (scripts/gpu-runtime.sh).
# Usage: scripts/gpu.sh [all|compiler|runtime]   (default all)
# Logs go to $OUT (or ./gpu-out); a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
mode=${1:-all}
case $mode in
  runtime) exec scripts/gpu-runtime.sh ;;
  all | compiler) ;;
  *) echo "usage: $0 [all|compiler|runtime]" >&2; exit 2 ;;
esac
D=.carry
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
T="$D/tally-gpu-test --module $D/suite.tally.fatbin --metadata $D/suite.yaml"
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version 2>/dev/null | tail -1
} | tee "$OUT/device.txt"
missing=$(ldd $D/tally-gpu-test | grep "not found")
[[ -n $missing ]] && { echo "missing libraries: $missing"; exit 1; }

echo "== a program linked from an object file tally-opt rewrote"
$D/app | tee "$OUT/app.txt"
$D/app.tally | tee "$OUT/app.tally.txt"
cuobjdump -lelf -lptx $D/app.tally | tee "$OUT/app.tally.cuobjdump.txt"
$D/app.exe.tally | tee "$OUT/app.exe.tally.txt"
if cmp -s "$OUT/app.txt" "$OUT/app.tally.txt" && cmp -s "$OUT/app.txt" "$OUT/app.exe.tally.txt"; then
  app="same output"
else
  app="DIFFERENT OUTPUT"
fi
echo "app vs app.tally (object rewritten) vs app.exe.tally (executable rewritten): $app"

echo "== the CMake example (tally_transform())"
$D/cmake-example | tee "$OUT/cmake-example.txt"

echo "== correctness"
$T 2>&1 | tee "$OUT/correctness.txt"
corr=${PIPESTATUS[0]}

declare -A san
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer --tool $tool"
  compute-sanitizer --tool $tool --print-limit 1000000 $T --quick --no-stream-wait --timeout 120 \
    >"$OUT/sanitizer-$tool.txt" 2>&1
  # A finding in a variant counts only when the tool says nothing of its
  # original (the suite's originals have known findings: bulk_copy's TMA
  # writes confuse racecheck, staggered_returns returns before barriers).
  grep -oE "(at|access at) [A-Za-z_0-9]+\+0x" "$OUT/sanitizer-$tool.txt" |
    sed -E 's/.* ([A-Za-z_0-9]+)\+0x/\1/' | sort -u >"$OUT/flagged-$tool.txt"
  san[$tool]=0
  while read -r k; do
    base=${k%__tally_slice}; base=${base%__tally_ptb}
    if [[ $base != "$k" ]] && ! grep -qx "$base" "$OUT/flagged-$tool.txt"; then
      echo "   $tool flags variant $k but not its original"
      san[$tool]=1
    fi
  done <"$OUT/flagged-$tool.txt"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|kernels with mismatches" "$OUT/sanitizer-$tool.txt" | tail -3
  echo "   findings by kernel (original kernels are listed too):"
  grep -oE "(at|access at) [A-Za-z_0-9]+\+0x" "$OUT/sanitizer-$tool.txt" | sed -E 's/.* ([A-Za-z_0-9]+)\+0x/\1/' |
    sort | uniq -c | sed 's/^/     /'
done

echo "== SASS barrier instructions per PTB variant (a routed kernel must keep one convergence barrier)"
cuobjdump -sass $D/suite.tally.fatbin > "$OUT/suite.sass" 2>&1
cuobjdump -lelf -lptx $D/suite.tally.fatbin | tee "$OUT/cuobjdump-list.txt"
awk '/Function : /{f=$3} /BAR\./{n[f]++}
     END{for (k in n) printf "%-40s %3d BAR instructions\n", k, n[k]}' \
  "$OUT/suite.sass" | sort | tee "$OUT/sass-barriers.txt"

echo "== benchmarks"
$T --bench 2>&1 | tee "$OUT/bench.txt"
bench=${PIPESTATUS[0]}
echo "== PTX from outside the corpus (Triton, Inductor, JAX, made here), transformed"
rm -rf /tmp/outside-ptx
python3 scripts/outside-ptx.py /tmp/outside-ptx 2>&1 | tee "$OUT/outside-ptx.txt"
python3 test/corpus/transform.py --corpus /tmp/outside-ptx --tally-opt $D/tally-opt \
  --min-transformed 0 --report "$OUT/outside-ptx-report.tsv" 2>&1 | tee -a "$OUT/outside-ptx.txt"
outside=${PIPESTATUS[0]}
tar czf "$OUT/outside-ptx.tgz" -C /tmp outside-ptx
echo "== the PTB loop's costs, one mechanism at a time (benchmarks/gpu/ptb-loop-costs.cu)"
$D/ptb-loop-costs 2>&1 | tee "$OUT/ptb-loop-costs.txt"
if [[ -f $D/baseline/suite.tally.fatbin ]]; then
  echo "== benchmarks of the baseline build (prepare-device.sh with TALLY_BASELINE)"
  $D/tally-gpu-test --module $D/baseline/suite.tally.fatbin --metadata $D/baseline/suite.yaml \
    --bench 2>&1 | tee "$OUT/bench-baseline.txt"
fi

echo
echo "| check | result |"
echo "| --- | --- |"
echo "| correctness (exit $corr) | $(tail -1 "$OUT/correctness.txt") |"
echo "| rewritten object linked, rewritten executable, run | $app |"
for tool in memcheck racecheck synccheck; do
  echo "| compute-sanitizer $tool (variant-only findings: ${san[$tool]}) | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.txt" | tail -1); flagged: $(tr '\n' ' ' <"$OUT/flagged-$tool.txt") |"
done
echo "| PTX from outside the corpus (exit $outside) | $(grep -E '^kernels:' "$OUT/outside-ptx.txt" | tail -1) |"
echo "| bench (exit $bench) | |"
grep -E '^(slice|ptb)/original' "$OUT/bench.txt" | sed 's/^/| | /; s/$/ |/'
[[ -f $OUT/bench-baseline.txt ]] &&
  grep -E '^(ptb/original|preemption)' "$OUT/bench-baseline.txt" | sed 's/^/| baseline | /; s/$/ |/'
grep -E '^preemption latency' "$OUT/bench.txt" | sed 's/^/| | /; s/$/ |/'
rt=0
if [[ $mode == all ]]; then
  scripts/gpu-runtime.sh
  rt=$?
fi
exit $(( rt != 0 || corr != 0 || outside != 0 || ${#app} != 11 || san[memcheck] != 0 || san[racecheck] != 0 || san[synccheck] != 0 ))
