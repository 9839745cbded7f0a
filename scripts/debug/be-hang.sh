#!/usr/bin/env bash
# be-hang.sh - looks for a BE process under Tally that does not end when
# asked, in one or more settings (VARIANTS), to find what a hang depends
# on. The twenty-first and twenty-second rounds saw one: be-spin (10 us
# blocks) beside hp-serve at half load under MPS with
# TALLY_BESIDE_PTB_PERCENT=0 (PTB launches leave the GPU for every HP
# request) hung in 4 of 6 gpu-colocate.sh runs with the driver's default
# hardware work queues and in 11 of 11 with CUDA_DEVICE_MAX_CONNECTIONS=2,
# within 1-2 s: a resumption's kernel never ran (docs/runtime.md, Limits).
# Each try runs that pair (BE first, HP for HP_S seconds), then sends BE
# SIGTERM; a BE still there after 10 s counts as hung, is dumped (tally
# status, its threads' states and kernel wait channels, a gdb backtrace
# where gdb is, its log) and killed. Ends with a table: per variant, the
# tries, the hangs, and how many said the runtime's stuck-resumption error.
# Check that HP served about the rate asked (its `hp: requests` line):
# beside a BE process that does not hang, the twenty-first round's H200
# served only 15k of the 16.7k requests/s asked.
# Usage: scripts/debug/be-hang.sh [DIR]   (DIR default .carry/runtime)
# Environment: OUT (default gpu-out/be-hang), TRIES (per variant, default
#   6), HP_S (default 6), RATE (HP requests/s, default 16700: half of
#   hp-serve's capacity on an H200), WORK (be-spin's, default 138: 10 us
#   blocks), SEED (a profile cache file to start BE from, default
#   DIR/seed-w1056.v1), VARIANTS (space-separated NAME=VAR=VALUE[,VAR=VALUE]
#   settings for BE, default "p0=TALLY_BESIDE_PTB_PERCENT=0"; the setting
#   MPS=0 runs that variant without an MPS daemon, time-sliced, and is
#   not passed on), BE_ENV (settings given to every variant, space-separated
#   VAR=VALUE)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
R=$(cd "${1:-.carry/runtime}" && pwd)
OUT=${OUT:-gpu-out/be-hang}
TRIES=${TRIES:-6} HP_S=${HP_S:-6} RATE=${RATE:-16700} WORK=${WORK:-138}
SEED=${SEED:-$R/seed-w1056.v1}
VARIANTS=${VARIANTS:-p0=TALLY_BESIDE_PTB_PERCENT=0}
TALLY=$R/prefix/bin/tally
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
tmp=$(mktemp -d /tmp/be-hang.XXXXXX)
# On tmpfs: elsewhere the GPU cannot write HP's completions into the
# segment, host functions do, and HP, slowed by them, never goes idle.
TALLY_SHM_DIR=$(mktemp -d -p /dev/shm be-hang.XXXXXX)
export TALLY_SHM_DIR
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | head -n1)
read -ra common <<<"${BE_ENV:-}"
read -ra variants <<<"$VARIANTS"
mps_on=0
mps() { # mps 1|0: a private MPS daemon running, or none
  if (($1 && !mps_on)); then
    export CUDA_MPS_PIPE_DIRECTORY=$tmp/pipe CUDA_MPS_LOG_DIRECTORY=$tmp/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d || { echo "be-hang: no MPS daemon" >&2; exit 1; }
    mps_on=1
    sleep 1
  elif ((!$1 && mps_on)); then
    echo quit | nvidia-cuda-mps-control
    mps_on=0
    sleep 1
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
}
trap 'mps 0; rm -rf "$tmp" "$TALLY_SHM_DIR"' EXIT
table="variant\ttries\thung\tstuck_error\tsettings"
n=0
for v in "${variants[@]}"; do
  [[ $v =~ ^([A-Za-z0-9_-]+)=(.+)$ ]] || { echo "be-hang: bad variant '$v'" >&2; exit 1; }
  name=${BASH_REMATCH[1]}
  IFS=, read -ra sets <<<"${BASH_REMATCH[2]}"
  use_mps=1 benv=("${common[@]}")
  for s in "${sets[@]}"; do
    if [[ $s == MPS=0 ]]; then use_mps=0; else benv+=("$s"); fi
  done
  mps "$use_mps"
  hangs=0 said=0
  for ((t = 1; t <= TRIES; ++t)); do
    n=$((n + 1))
    d=$OUT/$name-try$t
    mkdir -p "$d" "$tmp/cache$n"
    [[ -f $SEED ]] && cp "$SEED" "$tmp/cache$n/profile-$uuid.v1"
    env TALLY_CACHE_DIR="$tmp/cache$n" "${benv[@]}" "$TALLY" run --priority=best-effort \
      --stats="$d/be.json" -- "$R/be-spin.tally" --work "$WORK" --duration 600 \
      >"$d/be.log" 2>"$d/be.err" &
    be=$!
    sleep 2
    "$TALLY" run --priority=high -- "$R/hp-serve" --block-us 20 --kernels 1 --seed "$t" \
      --rate "$RATE" --duration "$HP_S" >"$d/hp.log" 2>"$d/hp.err"
    echo "$name try $t: HP exit $? ($(grep -m1 '^hp: requests' "$d/hp.log"))"
    grep -m1 'warning: cannot map' "$d/hp.err"
    kill -TERM "$be"
    for ((i = 0; i < 100; ++i)); do
      kill -0 "$be" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$be" 2>/dev/null; then
      hangs=$((hangs + 1))
      echo "$name try $t: BE $be still there 10 s after SIGTERM: dumping"
      scripts/debug/dump-stuck.sh "$TALLY" "$be" --dir "$TALLY_SHM_DIR" >"$d/dump.txt" 2>&1
      # shellcheck disable=SC2046 # the children's pids, one word each
      kill -9 "$be" $(pgrep -P "$be") 2>/dev/null
    fi
    wait "$be" 2>/dev/null
    rc=$?
    grep -q 'a resumed PTB launch' "$d/be.err" && said=$((said + 1))
    echo "$name try $t: BE exit $rc ($(grep -m1 '^be: kernels' "$d/be.log"); $(tail -c 300 "$d/be.err" | tr '\n' ' '))"
  done
  table+="\n$name\t$TRIES\t$hangs\t$said\t${benv[*]}$( ((use_mps)) || echo ' (no MPS)')"
done
(cd "$OUT" && tar czf "$OUT/be-hang.tgz" ./*-try* && rm -rf ./*-try*)
echo
echo -e "$table" | tee "$OUT/be-hang-table.tsv"
