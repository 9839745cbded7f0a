#!/usr/bin/env bash
# hp-ablate.sh - where a PyTorch service's latency goes beside eager PyTorch
# training under MPS: the same pair (benchmarks/torch serve.py and train.py,
# BE always an MPS client of below-normal priority) with `tally run` on
# neither, one or both sides, and with the BE runtime's scheduling off, in
# interleaved rounds of alternating order (the machine's moods fall on all
# alike). A diagnostic, not a benchmark of record.
#   alone       HP plain, no BE
#   alone-t     HP under tally run --priority=high, no BE
#   prio        HP plain, BE plain (= gpu-colocate.sh's mps-prio)
#   hp-t        HP under tally, BE plain
#   both        HP and BE under tally (= tally-mps)
#   both-nosch  as both, BE with TALLY_SCHEDULE=0 (intercepted, never held)
#   both-hold1  as both, BE with TALLY_MAX_HOLD_US=1000
#   both-share0 as both, BE with TALLY_HP_WAIT_SHARE=0 (held for a launch-
#               bound service too, as before --hp-wait-share)
# Usage: scripts/debug/hp-ablate.sh [DIR]   (DIR default .carry/runtime)
# Environment: OUT (default gpu-out-ablate), HP_MODEL (resnet50 or bert;
# default resnet50), HP_SECONDS (default 10), ROUNDS (default 2), CONFIGS
# (a subset of the names above, in order), HP_LOAD (default 0.5 of the
# closed-loop capacity measured first).
# Writes OUT/ablate.md: per config and round, HP p50/p90/p99/mean (ms) and
# BE's steps/s over HP's window against BE alone's; OUT/stats.txt: the
# tally processes' statistics lines on requests' waits and launch-bound starts.
set -uo pipefail
export LC_ALL=C
[[ ${1:-} == -h || ${1:-} == --help ]] && { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
src=$(cd "$(dirname "$0")/../.." && pwd)
R=$(cd "${1:-$src/.carry/runtime}" && pwd) || exit 1
# shellcheck source=scripts/torch-env.sh
. "$src/scripts/torch-env.sh"
torch_python || { echo "hp-ablate: error: no Python with torch and CUDA" >&2; exit 1; }
torch_dir "$R" "$src" || { echo "hp-ablate: error: no benchmarks/torch" >&2; exit 1; }
TALLY=$R/prefix/bin/tally
[[ -x $TALLY ]] || { echo "hp-ablate: error: no $TALLY" >&2; exit 1; }
OUT=${OUT:-gpu-out-ablate}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
MODEL=${HP_MODEL:-resnet50}
HP_S=${HP_SECONDS:-10}
ROUNDS=${ROUNDS:-2}
read -ra configs <<<"${CONFIGS:-alone alone-t prio hp-t both both-nosch both-hold1}"

MPSROOT=$(mktemp -d /tmp/tally-ablate-mps.XXXXXX) || exit 1
mkdir -p "$MPSROOT/pipe" "$MPSROOT/log"
export CUDA_MPS_PIPE_DIRECTORY=$MPSROOT/pipe CUDA_MPS_LOG_DIRECTORY=$MPSROOT/log
nvidia-cuda-mps-control -d || { echo "hp-ablate: error: no MPS daemon" >&2; exit 1; }
trap 'echo quit | nvidia-cuda-mps-control; rm -rf "$MPSROOT"' EXIT
sleep 1

serve=("$PY" "$TORCH/serve.py" --model "$MODEL" --seed 1)
train=("$PY" "$TORCH/train.py" --seed 1)
tally_hp=("$TALLY" run --priority=high --stats --)
tally_be=(env TALLY_STATS_TIMING=16 "$TALLY" run --priority=best-effort --stats --)

echo "== capacity"
"${serve[@]}" --rate 0 --duration 3 >"$OUT/capacity.log" 2>&1
cap=$(sed -n 's/^hp: capacity \([0-9.]*\).*/\1/p' "$OUT/capacity.log")
[[ -n $cap ]] || { echo "hp-ablate: error: no capacity: $(tail -3 "$OUT/capacity.log")" >&2; exit 1; }
rate=$(awk -v c="$cap" -v l="${HP_LOAD:-0.5}" 'BEGIN { printf "%.1f", c * l }')
echo "capacity $cap req/s, rate $rate"
echo "== BE alone"
CUDA_MPS_CLIENT_PRIORITY=1 "${train[@]}" --duration 10 >"$OUT/be-alone.log" 2>&1
be_alone=$(sed -n 's/^be: steps .* s, \([0-9.]*\) steps\/s/\1/p' "$OUT/be-alone.log")
echo "BE alone $be_alone steps/s"

# one NAME TAG: one run of config NAME, its files OUT/TAG.*
one() {
  local name=$1 tag=$2 hpw=() bew=() beenv=() be=1 bepid='' go=$OUT/$2.go
  case $name in
    alone) be=0 ;;
    alone-t) be=0 hpw=("${tally_hp[@]}") ;;
    prio) ;;
    hp-t) hpw=("${tally_hp[@]}") ;;
    both) hpw=("${tally_hp[@]}") bew=("${tally_be[@]}") ;;
    both-nosch) hpw=("${tally_hp[@]}") bew=("${tally_be[@]}") beenv=(TALLY_SCHEDULE=0) ;;
    both-hold1) hpw=("${tally_hp[@]}") bew=("${tally_be[@]}") beenv=(TALLY_MAX_HOLD_US=1000) ;;
    both-share0) hpw=("${tally_hp[@]}") bew=("${tally_be[@]}") beenv=(TALLY_HP_WAIT_SHARE=0) ;;
    *) echo "hp-ablate: error: unknown config $name" >&2; exit 2 ;;
  esac
  rm -f "$go"
  if ((be)); then
    env "${beenv[@]}" CUDA_MPS_CLIENT_PRIORITY=1 "${bew[@]}" "${train[@]}" --duration $((HP_S + 120)) \
      >"$OUT/$tag.be.log" 2>"$OUT/$tag.be.err" &
    bepid=$!
  fi
  "${hpw[@]}" "${serve[@]}" --rate "$rate" --duration "$HP_S" --csv "$OUT/$tag.hp.csv" \
    --start-file "$go" --start-timeout 300 >"$OUT/$tag.hp.log" 2>"$OUT/$tag.hp.err" &
  local hppid=$! n=0
  until grep -q '^hp: warmed up' "$OUT/$tag.hp.log" 2>/dev/null &&
    { ((!be)) || grep -q '^be: t=' "$OUT/$tag.be.log" 2>/dev/null; }; do
    sleep 0.2
    n=$((n + 1))
    if ((n > 900)); then
      echo "   $tag: no start"
      break
    fi
  done
  sleep 1
  : >"$go"
  wait "$hppid"
  if [[ -n $bepid ]]; then
    kill -TERM "$bepid" 2>/dev/null
    wait "$bepid"
  fi
  grep -h -e '^tally: requests' -e 'started beside HP instead' -e '^tally: scheduling: [0-9]* launches at full' \
    "$OUT/$tag.hp.err" "$OUT/$tag.be.err" 2>/dev/null | sed "s/^/$tag: /" >>"$OUT/stats.txt"
  python3 - "$OUT/$tag" "$be_alone" "$name" <<'EOF' >>"$OUT/rows.md"
import re, sys
base, alone, name = sys.argv[1], float(sys.argv[2] or 0), sys.argv[3]
lat = sorted(float(x) for x in open(base + ".hp.csv") if re.match(r"^[0-9.]+\s*$", x))
win = [float(v) for l in open(base + ".hp.log") if l.startswith("hp: window") for v in l.split()[2:4]]
pct = lambda q: lat[min(len(lat) - 1, max(0, int(-(-q * len(lat) // 1)) - 1))] / 1000
be = "-"
try:
    pts = [(float(m.group(2)), int(m.group(1))) for l in open(base + ".be.log")
           for m in [re.match(r"be: t=\S+ kernels=(\d+) epoch=(\S+)", l)] if m]
    inw = [p for p in pts if win and win[0] <= p[0] <= win[1]]
    if len(inw) >= 2:
        r = (inw[-1][1] - inw[0][1]) / (inw[-1][0] - inw[0][0])
        be = f"{r:.1f} ({r / alone:.2f})" if alone else f"{r:.1f}"
except FileNotFoundError:
    pass
print(f"| {name} | {base.rsplit('/', 1)[1]} | {len(lat)} | {pct(0.5):.2f} | {pct(0.9):.2f} | "
      f"{pct(0.99):.2f} | {sum(lat) / len(lat) / 1000:.2f} | {be} |")
EOF
  tail -1 "$OUT/rows.md"
}

: >"$OUT/rows.md"
: >"$OUT/stats.txt"
for ((r = 1; r <= ROUNDS; r++)); do
  order=("${configs[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#configs[@]} - 1; i >= 0; i--)); do order+=("${configs[i]}"); done
  fi
  for c in "${order[@]}"; do one "$c" "$c-$r"; done
done
{
  echo "## HP $MODEL beside eager training under MPS ($(date -u '+%F %H:%M UTC'), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
  echo
  echo "capacity $cap req/s, Poisson at $rate req/s, $HP_S s windows; BE alone $be_alone steps/s"
  echo
  echo "| config | run | requests | HP p50 ms | p90 | p99 | mean | BE steps/s (kept) |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  sort -t'|' -k2,2 -s "$OUT/rows.md"
  echo
  echo '```'
  cat "$OUT/stats.txt"
  echo '```'
} >"$OUT/ablate.md"
cat "$OUT/ablate.md"
