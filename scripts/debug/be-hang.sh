#!/usr/bin/env bash
# be-hang.sh - looks for a BE process under Tally that does not end when
# asked. The twenty-first round saw one: be-spin (10 us blocks) beside
# hp-serve at half load under MPS with TALLY_BESIDE_PTB_PERCENT=0 (PTB
# launches leave the GPU for every HP request) did not exit within 30 s of
# SIGTERM after HP's window, once in three runs. Each try here runs that
# pair (BE first, HP for HP_S seconds), then sends BE SIGTERM; a BE still
# there after 10 s is dumped (tally status, its threads' states and kernel
# wait channels, a gdb backtrace where gdb is, its log) and killed.
# Not reproduced here in that round (10 tries): HP served only 15k of the
# 16.7k requests/s asked (p50 0.2-0.37 s), so the pair ran otherwise than
# in gpu-colocate.sh, which found it (and now dumps a stuck BE itself).
# Lower RATE to what HP serves beside BE before trusting a clean result.
# The cause (a resumption behind its stream's gate in a shared hardware
# work queue) and the setting that ended it: docs/runtime-rounds.md,
# twenty-first round.
# Usage: scripts/debug/be-hang.sh [DIR]   (DIR default .carry/runtime)
# Environment: OUT (default gpu-out/be-hang), TRIES (default 6), HP_S
#   (default 6), RATE (HP requests/s, default 16700: half of hp-serve's
#   capacity on an H200), WORK (be-spin's, default 138: 10 us blocks),
#   BE_ENV (settings for BE, default TALLY_BESIDE_PTB_PERCENT=0), SEED (a
#   profile cache file to start BE from, default DIR/seed-w1056.v1), MPS
#   (1, the default: under a private MPS daemon; 0: time slicing)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
R=$(cd "${1:-.carry/runtime}" && pwd)
OUT=${OUT:-gpu-out/be-hang}
TRIES=${TRIES:-6} HP_S=${HP_S:-6} RATE=${RATE:-16700} WORK=${WORK:-138}
BE_ENV=${BE_ENV:-TALLY_BESIDE_PTB_PERCENT=0} SEED=${SEED:-$R/seed-w1056.v1} MPS=${MPS:-1}
TALLY=$R/prefix/bin/tally
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
tmp=$(mktemp -d /tmp/be-hang.XXXXXX)
export TALLY_SHM_DIR=$tmp/shm
mkdir -p "$TALLY_SHM_DIR"
if ((MPS)); then
  export CUDA_MPS_PIPE_DIRECTORY=$tmp/pipe CUDA_MPS_LOG_DIRECTORY=$tmp/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "be-hang: no MPS daemon" >&2; exit 1; }
  sleep 1
fi
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | head -n1)
hangs=0
read -ra benv <<<"$BE_ENV"
for ((t = 1; t <= TRIES; ++t)); do
  d=$OUT/try$t
  mkdir -p "$d" "$tmp/cache$t"
  [[ -f $SEED ]] && cp "$SEED" "$tmp/cache$t/profile-$uuid.v1"
  env TALLY_CACHE_DIR="$tmp/cache$t" "${benv[@]}" "$TALLY" run --priority=best-effort \
    --stats="$d/be.json" -- "$R/be-spin.tally" --work "$WORK" --duration 600 \
    >"$d/be.log" 2>"$d/be.err" &
  be=$!
  sleep 2
  "$TALLY" run --priority=high -- "$R/hp-serve" --block-us 20 --kernels 1 --seed "$t" \
    --rate "$RATE" --duration "$HP_S" >"$d/hp.log" 2>"$d/hp.err"
  echo "try $t: HP exit $? ($(grep -m1 '^hp: requests' "$d/hp.log"))"
  kill -TERM "$be"
  for ((i = 0; i < 100; ++i)); do
    kill -0 "$be" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$be" 2>/dev/null; then
    hangs=$((hangs + 1))
    echo "try $t: BE $be still there 10 s after SIGTERM: dumping"
    scripts/debug/dump-stuck.sh "$TALLY" "$be" --dir "$TALLY_SHM_DIR" >"$d/dump.txt" 2>&1
    kill -9 "$be" $(pgrep -P "$be") 2>/dev/null
  fi
  wait "$be" 2>/dev/null
  echo "try $t: BE exit $? ($(grep -m1 '^be: kernels' "$d/be.log"); $(tail -c 300 "$d/be.err" | tr '\n' ' '))"
done
((MPS)) && echo quit | nvidia-cuda-mps-control
echo "hangs: $hangs of $TRIES"
(cd "$OUT" && tar czf "$OUT/be-hang.tgz" try* && rm -rf try*)
rm -rf "$tmp"
