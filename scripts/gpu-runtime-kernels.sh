#!/usr/bin/env bash
# gpu-runtime-kernels.sh - kernels made at run time, on the GPU machine
# (after scripts/prepare-device.sh here):
#   nvrtc   examples/runtime/nvrtc-load (NVRTC -> PTX -> cuModuleLoadDataEx,
#           cuLibraryLoadData, cuLinkAddData) plain, then under `tally run
#           --force=ptb --preempt=random:6` with an empty run-time PTX cache
#           (tally-opt runs) and again (the cache answers), and forced to
#           slices: the same checksums; the statistics must show the modules
#           transformed, then taken from the cache, and the kernels preempted.
#           Load times with CUDA's own JIT cache off.
#   triton  examples/triton/train_gpt.py (forward, backward and AdamW
#           compiled by Inductor into Triton kernels) under `tally run
#           --priority=best-effort --triton-ptxas`: once with every kernel
#           as the original (it compiles and fills the Triton and Inductor
#           caches), once with the same kernels forced to PTB and preempted
#           at random points: the per-step losses must be the same bytes.
#           Between the first run and one with twice the steps (from the
#           caches), at least 80 % of the GPU time of the extra steps must
#           be in kernels with variants (scripts/stats-diff.py: work done
#           once per process, such as PyTorch formatting tensors while
#           compiling, is left out). The PTX
#           Triton made is kept ($OUT/triton-ptx.tgz) for compile-time
#           measurements off the GPU.
#   cupy    examples/cupy/cupy_ptx.py (RawKernel, ElementwiseKernel,
#           ReductionKernel and CuPy's own operators, all compiled by NVRTC
#           to PTX with CUPY_COMPILE_WITH_PTX=1 and loaded with
#           cuModuleLoadData) plain, then under `tally run --runtime-ptx=on`
#           forced to PTB with random preemption and forced to slices: the
#           same checksums, modules transformed, at least 80 % of the GPU
#           time in kernels with variants.
# Usage: scripts/gpu-runtime-kernels.sh [nvrtc] [cupy] [triton]   (default: all)
# Environment: OUT (default gpu-out), STEPS (train_gpt steps, default 20),
# TRAIN_ARGS (more train_gpt.py options, default --mm-configs 2
# --no-coordinate-descent), A_TIMEOUT (the compiling run's limit, 420 s),
# TRITON_CACHES (a folder that keeps the caches between rounds), CUPY_ITERS
# (cupy_ptx.py iterations, default 10).
# Writes $OUT/kernels-summary.md and $OUT/kernels-logs.tgz; exit status 1
# when a check failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
R=$(pwd)/.carry/runtime
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
O=$(mktemp -d)/kernels
mkdir -p "$O"
TALLY=$R/prefix/bin/tally
STEPS=${STEPS:-20}
# Fewer GEMM configurations to autotune: the whole compile fits the round.
TRAIN_ARGS=${TRAIN_ARGS:---mm-configs 2 --no-coordinate-descent}
# Where Triton's and Inductor's caches live: TRITON_CACHES keeps them
# between rounds on one machine (a second round reuses what compiled).
A_TIMEOUT=${A_TIMEOUT:-420}
CUPY_ITERS=${CUPY_ITERS:-10}
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(nvrtc cupy triton)
fails=0
rows=()
row() { rows+=("| $1 | $2 |"); }
fail() { row "$1" "FAILED: $2"; fails=$((fails + 1)); }
trap 'tar czf "$OUT/kernels-logs.tgz" -C "$(dirname "$O")" kernels 2>/dev/null' EXIT
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "ptxas: $(command -v ptxas || ls /usr/local/cuda/bin/ptxas 2>/dev/null || echo none)"
} | tee "$O/device.txt"

# json FILE EXPR: evaluates a Python expression over the statistics JSON `s`.
json() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print($2)" "$1"; }

run_nvrtc() {
  local lib
  lib=${NVRTC_LIBRARY:-}
  if [[ -z $lib ]]; then
    lib=$(python3 - <<'EOF' 2>/dev/null
import glob, os, site
dirs = site.getsitepackages() + ["/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"]
for d in dirs:
    for p in sorted(glob.glob(os.path.join(d, "**", "libnvrtc.so*"), recursive=True)):
        if "builtins" not in p and "alt" not in p:
            print(p)
            raise SystemExit
EOF
)
  fi
  if [[ -z $lib ]]; then
    row nvrtc "SKIPPED: no libnvrtc.so on this machine"
    return
  fi
  export NVRTC_LIBRARY=$lib
  echo "nvrtc: $lib" >>"$O/device.txt"
  # CUDA's own JIT cache off: every load compiles, so the times compare.
  export CUDA_CACHE_DISABLE=1
  local cache=$O/ptx-cache
  rm -rf "$cache"
  (cd "$R" && timeout -k 5 120 ./nvrtc-load) >"$O/nvrtc-plain.txt" 2>"$O/nvrtc-plain.err" ||
    { fail nvrtc-plain "$(tail -c 300 "$O/nvrtc-plain.err")"; return; }
  row nvrtc-plain "reference ($(wc -l <"$O/nvrtc-plain.txt") checksums); loads: $(grep -h '^load' "$O/nvrtc-plain.err" | tr '\n' ';')"
  local name
  for name in first cached slice workers1; do
    local extra=(--force=ptb --preempt=random:6)
    [[ $name == slice ]] && extra=(--force=slice)
    [[ $name == workers1 ]] && extra=(--force=ptb --preempt=random:20 --ptb-workers-per-sm=1 --seed=3)
    (cd "$R" && TALLY_CACHE_DIR=$cache timeout -k 5 300 "$TALLY" run "${extra[@]}" \
      --stats="$O/nvrtc-$name.json" -- ./nvrtc-load) >"$O/nvrtc-$name.txt" 2>"$O/nvrtc-$name.err"
    local rc=$?
    if [[ $rc -ne 0 ]]; then
      fail "nvrtc-$name" "exit $rc: $(tail -c 300 "$O/nvrtc-$name.err" | tr '\n' ' ')"
      continue
    fi
    if ! cmp -s "$O/nvrtc-plain.txt" "$O/nvrtc-$name.txt"; then
      fail "nvrtc-$name" "checksums differ from the plain run"
      continue
    fi
    local s=$O/nvrtc-$name.json
    local px
    px=$(json "$s" '"%d modules, %d transformed (%d from the cache; tally-opt %.0f ms, cache %.1f ms), %d refused, %d failed, %d rejected" % tuple(s["runtime_ptx"][k] for k in ("modules","transformed","from_cache","made_ms","cached_ms","refused","failed","rejected"))')
    local k
    k=$(json "$s" '"launches ptb %d slice %d original %d, preempted %d, %.1f %% of GPU time without variants" % (sum(x["launches"]["ptb"] for x in s["kernels"]), sum(x["launches"]["slice"] for x in s["kernels"]), sum(x["launches"]["original"] for x in s["kernels"]), sum(x["preemptions"] for x in s["kernels"]), 100*s["share_without_variants"])')
    row "nvrtc-$name" "same checksums; $px; $k; loads: $(grep -h '^load' "$O/nvrtc-$name.err" | tr '\n' ';')"
    # What each run must show.
    local want
    case $name in
      # (The library loads the module's PTX again: a hit in the first run too.)
      first) want='s["runtime_ptx"]["transformed"] == 3 and s["runtime_ptx"]["from_cache"] < 3 and s["runtime_ptx"]["made_ms"] > 0' ;;
      *) want='s["runtime_ptx"]["transformed"] == 3 and s["runtime_ptx"]["from_cache"] == 3' ;;
    esac
    [[ $(json "$s" "$want") == True ]] || fail "nvrtc-$name" "run-time PTX counts: $px"
    if [[ $name != slice ]]; then
      [[ $(json "$s" 'sum(x["launches"]["ptb"] for x in s["kernels"]) > 0 and sum(x["preemptions"] for x in s["kernels"]) > 0 and s["share_without_variants"] == 0') == True ]] ||
        fail "nvrtc-$name" "kernels not run as preempted PTB: $k"
    else
      [[ $(json "$s" 'sum(x["launches"]["slice"] for x in s["kernels"]) > 0') == True ]] ||
        fail "nvrtc-$name" "no sliced launches: $k"
    fi
  done
  TALLY_CACHE_DIR=$cache "$TALLY" ptx-cache show >"$O/nvrtc-cache-show.txt" 2>&1
  unset CUDA_CACHE_DISABLE
}

run_triton() {
  if ! python3 -c "import torch, triton" 2>/dev/null; then
    row triton "SKIPPED: no PyTorch with Triton"
    return
  fi
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >>"$O/device.txt"
  local T=${TRITON_CACHES:-$O/triton-caches}
  [[ -n ${TRITON_CACHES:-} ]] || rm -rf "$T"
  mkdir -p "$T"
  export TRITON_CACHE_DIR=$T/triton TORCHINDUCTOR_CACHE_DIR=$T/inductor
  local t0 t1
  t0=$(date +%s)
  (cd "$R" && timeout -k 5 "$A_TIMEOUT" "$TALLY" run --priority=best-effort --triton-ptxas --force=original \
    --stats="$O/triton-original.json" -- python3 train_gpt.py --steps "$STEPS" $TRAIN_ARGS) \
    >"$O/triton-original.txt" 2>"$O/triton-original.err"
  local rc=$?
  t1=$(date +%s)
  local fallbacks
  fallbacks=$(grep -c "compiled by plain ptxas" "$O/triton-original.err")
  if [[ $rc -ne 0 ]]; then
    fail triton-original "exit $rc after $((t1 - t0)) s: $(grep -v '^step' "$O/triton-original.err" | tail -c 400 | tr '\n' ' ')"
  else
    row triton-original "$(grep -c '^step' "$O/triton-original.txt") steps in $((t1 - t0)) s (compile included); tally-ptxas fell back $fallbacks times; $(json "$O/triton-original.json" '"%.1f %% of GPU time in kernels with variants (%d kernels with, %d without)" % (100*(1-s["share_without_variants"]), sum(x["has_variants"] for x in s["kernels"]), sum(not x["has_variants"] for x in s["kernels"]))')"
    # The steady state: the same run with twice the steps, from the caches;
    # what the extra steps launched (scripts/stats-diff.py) leaves out the
    # work done once per process.
    (cd "$R" && timeout -k 5 240 "$TALLY" run --priority=best-effort --triton-ptxas --force=original \
      --stats="$O/triton-original-long.json" -- python3 train_gpt.py --steps $((2 * STEPS)) $TRAIN_ARGS) \
      >"$O/triton-original-long.txt" 2>"$O/triton-original-long.err" &&
      python3 scripts/stats-diff.py "$O/triton-original.json" "$O/triton-original-long.json" \
        >"$O/triton-steady.txt" 2>&1
    if [[ -s $O/triton-steady.txt ]] && grep -q '^steady state' "$O/triton-steady.txt"; then
      row triton-steady "$STEPS more steps: $(head -1 "$O/triton-steady.txt" | sed 's/^steady state: //')"
      grep -q "[0-9.]* % in kernels with variants" "$O/triton-steady.txt" &&
        python3 -c "import re,sys; t=open(sys.argv[1]).readline(); sys.exit(0 if float(re.search(r'([0-9.]+) % in kernels', t).group(1)) >= 80 else 1)" "$O/triton-steady.txt" ||
        fail triton-steady "under 80 % of the steady state's GPU time in kernels with variants"
    else
      fail triton-steady "no steady state: $(tail -c 300 "$O/triton-original-long.err" "$O/triton-steady.txt" 2>/dev/null | tr '\n' ' ')"
    fi
    t0=$(date +%s)
    (cd "$R" && timeout -k 5 240 "$TALLY" run --priority=best-effort --triton-ptxas --force=ptb \
      --preempt=random:6 --stats="$O/triton-ptb.json" -- python3 train_gpt.py --steps "$STEPS" $TRAIN_ARGS) \
      >"$O/triton-ptb.txt" 2>"$O/triton-ptb.err"
    rc=$?
    t1=$(date +%s)
    if [[ $rc -ne 0 ]]; then
      fail triton-ptb "exit $rc: $(grep -v '^step' "$O/triton-ptb.err" | tail -c 400 | tr '\n' ' ')"
    elif ! cmp -s "$O/triton-original.txt" "$O/triton-ptb.txt"; then
      fail triton-ptb "losses differ: $(diff "$O/triton-original.txt" "$O/triton-ptb.txt" | head -4 | tr '\n' ' ')"
    else
      local k
      k=$(json "$O/triton-ptb.json" '"%.1f %% of GPU time in kernels with variants; launches ptb %d, original %d; %d preemptions" % (100*(1-s["share_without_variants"]), sum(x["launches"]["ptb"] for x in s["kernels"]), sum(x["launches"]["original"] for x in s["kernels"]), sum(x["preemptions"] for x in s["kernels"]))')
      row triton-ptb "losses identical over $(grep -c '^step' "$O/triton-ptb.txt") steps ($((t1 - t0)) s); $k"
    fi
  fi
  # Eager, for the record: no kernel has PTX.
  (cd "$R" && timeout -k 5 120 "$TALLY" run --priority=best-effort --stats="$O/triton-eager.json" \
    -- python3 train_gpt.py --steps 5 --eager) >"$O/triton-eager.txt" 2>"$O/triton-eager.err" &&
    row triton-eager "$(json "$O/triton-eager.json" '"%.1f %% of GPU time in kernels with variants" % (100*(1-s["share_without_variants"]))')"
  # The PTX Triton made, for compile-time measurements elsewhere.
  (cd "$T" && find triton -name '*.ptx' | tar czf "$OUT/triton-ptx.tgz" -T -) 2>/dev/null
  row triton-ptx "$(tar tzf "$OUT/triton-ptx.tgz" 2>/dev/null | wc -l) PTX files kept"
  [[ -n ${TRITON_CACHES:-} ]] || rm -rf "$T"
  unset TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR
}

run_cupy() {
  if ! python3 -c "import cupy" 2>/dev/null; then
    row cupy "SKIPPED: no CuPy"
    return
  fi
  python3 -c "import cupy; print('cupy', cupy.__version__)" >>"$O/device.txt"
  # CuPy's own kernel cache, fresh: the plain run compiles (to PTX), the
  # others load that PTX from it; Tally's run-time PTX cache, fresh too.
  export CUPY_CACHE_DIR=$O/cupy-cache CUPY_COMPILE_WITH_PTX=1 CUPY_ACCELERATORS=
  local cache=$O/cupy-ptx-cache
  rm -rf "$CUPY_CACHE_DIR" "$cache"
  (cd "$R" && timeout -k 5 180 python3 cupy_ptx.py --iters "$CUPY_ITERS") \
    >"$O/cupy-plain.txt" 2>"$O/cupy-plain.err" ||
    { fail cupy-plain "$(tail -c 300 "$O/cupy-plain.err" | tr '\n' ' ')"; unset CUPY_CACHE_DIR CUPY_COMPILE_WITH_PTX CUPY_ACCELERATORS; return; }
  row cupy-plain "reference ($(wc -l <"$O/cupy-plain.txt") checksums)"
  local name
  for name in ptb slice; do
    local extra=(--force=ptb --preempt=random:6)
    [[ $name == slice ]] && extra=(--force=slice)
    # 120 s: the plain run takes seconds; a hang (docs/runtime.md, Limits)
    # should not take the round's time.
    (cd "$R" && TALLY_CACHE_DIR=$cache timeout -k 5 120 "$TALLY" run --runtime-ptx=on "${extra[@]}" \
      --stats="$O/cupy-$name.json" -- python3 cupy_ptx.py --iters "$CUPY_ITERS") \
      >"$O/cupy-$name.txt" 2>"$O/cupy-$name.err"
    local rc=$?
    if [[ $rc -ne 0 ]]; then
      fail "cupy-$name" "exit $rc: $(tail -c 300 "$O/cupy-$name.err" | tr '\n' ' ')"
      continue
    fi
    if ! cmp -s "$O/cupy-plain.txt" "$O/cupy-$name.txt"; then
      fail "cupy-$name" "checksums differ: $(diff "$O/cupy-plain.txt" "$O/cupy-$name.txt" | head -4 | tr '\n' ' ')"
      continue
    fi
    local s=$O/cupy-$name.json k
    k=$(json "$s" '"%d modules, %d transformed (tally-opt %.0f ms), %d refused, %d failed, %d rejected; launches ptb %d slice %d original %d, preempted %d; %.1f %% of GPU time in kernels with variants" % (s["runtime_ptx"]["modules"], s["runtime_ptx"]["transformed"], s["runtime_ptx"]["made_ms"], s["runtime_ptx"]["refused"], s["runtime_ptx"]["failed"], s["runtime_ptx"]["rejected"], sum(x["launches"]["ptb"] for x in s["kernels"]), sum(x["launches"]["slice"] for x in s["kernels"]), sum(x["launches"]["original"] for x in s["kernels"]), sum(x["preemptions"] for x in s["kernels"]), 100*(1-s["share_without_variants"]))')
    row "cupy-$name" "same checksums; $k"
    local want='s["runtime_ptx"]["transformed"] > 0 and s["share_without_variants"] <= 0.2'
    if [[ $name == ptb ]]; then
      want+=' and sum(x["launches"]["ptb"] for x in s["kernels"]) > 0 and sum(x["preemptions"] for x in s["kernels"]) > 0'
    else
      want+=' and sum(x["launches"]["slice"] for x in s["kernels"]) > 0'
    fi
    [[ $(json "$s" "$want") == True ]] || fail "cupy-$name" "not transformed, not run in the form, or under 80 % of GPU time with variants: $k"
  done
  unset CUPY_CACHE_DIR CUPY_COMPILE_WITH_PTX CUPY_ACCELERATORS
}

for p in "${parts[@]}"; do
  case $p in
    nvrtc) run_nvrtc ;;
    triton) run_triton ;;
    cupy) run_cupy ;;
    *) echo "unknown part $p" >&2; exit 2 ;;
  esac
done

echo
echo "| run-time kernels | result |"
echo "| --- | --- |"
printf '%s\n' "${rows[@]}" | tee "$OUT/kernels-summary.md"
echo "failures: $fails"
exit $((fails != 0))
