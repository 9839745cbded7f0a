#!/usr/bin/env bash
# triton-forms.sh - after gpu-runtime-kernels.sh triton with TRITON_CACHES
# set (the caches filled): train_gpt.py under each form, to find which
# breaks. Writes $OUT/triton-forms/*.{txt,err,json}.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
R=$(pwd)/.carry/runtime
T=${TRITON_CACHES:?}
export TRITON_CACHE_DIR=$T/triton TORCHINDUCTOR_CACHE_DIR=$T/inductor
D=$OUT/triton-forms
mkdir -p "$D"
run() {
  local name=$1
  shift
  (cd "$R" && timeout -k 5 150 "$@" -- python3 train_gpt.py --steps 5 --mm-configs 2 \
    --no-coordinate-descent) >"$D/$name.txt" 2>"$D/$name.err"
  echo "$name: exit $? $(grep -c '^step' "$D/$name.txt") steps; $(cmp -s "$D/$name.txt" "$D/original.txt" && echo same || echo DIFFERENT)"
}
run original "$R/prefix/bin/tally" run --triton-ptxas --force=original --stats="$D/original.json"
run ptb "$R/prefix/bin/tally" run --triton-ptxas --force=ptb --stats="$D/ptb.json"
run slice "$R/prefix/bin/tally" run --triton-ptxas --force=slice --stats="$D/slice.json"
CUDA_LAUNCH_BLOCKING=1 run ptb-blocking "$R/prefix/bin/tally" run --triton-ptxas --force=ptb \
  --log-level=debug --stats="$D/ptb-blocking.json"
grep -v "ACC_TYPE\|triton_mm\|strides\|dtypes" "$D/ptb-blocking.err" | grep -B2 -A2 -i "error\|illegal" | head -30
