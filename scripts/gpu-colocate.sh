#!/usr/bin/env bash
# gpu-colocate.sh - the co-location benchmark on the GPU machine: the HP
# service (hp-serve: Poisson requests of one wave of 20 us blocks) beside a
# BE job, under every way of sharing the GPU, with the same workloads:
#   alone       HP alone, closed loop (its capacity), then Poisson arrivals at
#               HP_LOAD (default 0.5) of that capacity; the same under
#               `tally run --priority=high` (the runtime's cost) and MPS
#   be-alone    each BE alone (its throughput and checksum), plain and
#               transformed under `tally run --priority=best-effort`
#   timeslice   HP + BE as two processes, default time slicing (no MPS)
#   mps         HP + BE as two MPS clients
#   streams     one process, HP on a greatest-priority stream, BE on a lowest
#               one (colocate-streams)
#   tally       HP under `tally run --priority=high`, BE (be-spin.tally, or
#               train-gpt.tally) under `tally run --priority=best-effort`
#   tally-mps   the same as MPS clients
# BE workloads: be-spin with 10 us and with 100 us blocks (be10, be100), and
# train-gpt (gpt) when DIR has it. In a co-located run BE starts first, HP's
# measurement starts LEAD s after BE's first kernel, BE is stopped (SIGTERM)
# when HP is done; BE's rate is taken over HP's window from its progress lines.
# Then robustness with Tally: BE killed with -9 in the middle of HP's run (HP
# must finish and report), HP killed with -9 while BE runs (BE must go on and
# finish, exit 0); and under Tally the BE checksum must equal BE alone's.
#
# Usage: scripts/gpu-colocate.sh [--quick] [DIR]      (from anywhere)
#   DIR (default .carry/runtime) holds prefix/bin/tally, prefix/lib/libtally.so,
#   hp-serve, be-spin, be-spin.tally, colocate-streams, and optionally
#   train-gpt and train-gpt.tally.
#   --quick: short runs (about 2 minutes instead of about 8); under MPS
#   neither train-gpt nor the kill checks.
# Environment: OUT (default gpu-out), HP_LOAD (default 0.5), HP_KERNELS
# (kernels per request, default 8), HP_BLOCK_US (default 20).
# Writes $OUT/colocate/ (per run: NAME.hp.csv latencies, NAME.hp.log,
# NAME.be.log, stderr in *.err, Tally statistics in *.json; runs.tsv,
# checks.tsv, device.txt) and $OUT/colocate.csv; prints a markdown table
# (scripts/colocate-report.py). Exit status 1 when a check or a run failed.
set -uo pipefail
export LC_ALL=C

quick=0
dir=
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-colocate: error: unknown option '$a'" >&2; exit 2 ;;
    *) [[ -z $dir ]] || { echo "gpu-colocate: error: more than one DIR" >&2; exit 2; }; dir=$a ;;
  esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
# DIR is relative to the current folder; the default, to the repository.
[[ -z $dir || ! -d $dir ]] || dir=$(cd "$dir" && pwd)
cd "$src" || exit 1
dir=${dir:-.carry/runtime}

die() { echo "gpu-colocate: error: $*" >&2; exit 1; }
say() { echo "== $*"; }

[[ -d $dir ]] || die "no directory $dir (the built programs)"
R=$(cd "$dir" && pwd)
TALLY=$R/prefix/bin/tally
for f in prefix/bin/tally prefix/lib/libtally.so hp-serve be-spin be-spin.tally colocate-streams; do
  [[ -f $R/$f ]] || die "$R/$f is missing (see the usage at the top of $0)"
done
for f in prefix/bin/tally hp-serve be-spin be-spin.tally colocate-streams; do
  [[ -x $R/$f ]] || die "$R/$f is not executable"
  if ldd "$R/$f" 2>/dev/null | grep -q "not found"; then
    die "$R/$f: missing libraries: $(ldd "$R/$f" | grep "not found" | tr '\n' ' ')"
  fi
done
"$TALLY" --help >/dev/null 2>&1 || die "$TALLY --help fails"
command -v python3 >/dev/null || die "python3 not found (the report needs it)"
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: is this the GPU machine?"
GPT_TALLY=''
GPT_PLAIN=''
if [[ -x $R/train-gpt.tally ]]; then
  if command -v stdbuf >/dev/null; then
    GPT_TALLY=$R/train-gpt.tally
    GPT_PLAIN=$R/train-gpt
    [[ -x $GPT_PLAIN ]] || GPT_PLAIN=$GPT_TALLY # without the runtime: the originals
  else
    echo "gpu-colocate: warning: no stdbuf; the train-gpt runs are left out" >&2
  fi
fi
have_mps=0
command -v nvidia-cuda-mps-control >/dev/null && have_mps=1
# Only the MPS runs are MPS clients.
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

if ((quick)); then
  CAP_S=1 HP_S=3 BE_S=2 LEAD=1 KILL_S=4
else
  CAP_S=3 HP_S=15 BE_S=5 LEAD=1 KILL_S=8
fi
HP_LOAD=${HP_LOAD:-0.5}
HP_BLOCK_US=${HP_BLOCK_US:-20}
# Kernels per HP request (one wave each): an inference request is a
# sequence of kernels, not one.
HP_KERNELS=${HP_KERNELS:-8}
# The statistics count without timing every launch (two events each would
# cost the workloads more than the runtime itself).
export TALLY_STATS_TIMING=0
OUT=${OUT:-gpu-out}
mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
L=$OUT/colocate
rm -rf "$L"
mkdir -p "$L"
RUNS=$L/runs.tsv
CHECKS=$L/checks.tsv
printf 'system\tbe\tbe_block_us\thp_csv\tbe_log\tbe_kind\tbe_ref\tstats\tnotes\n' >"$RUNS"
printf 'check\tresult\tdetail\n' >"$CHECKS"
fails=0

# Processes started in the background here, killed (by id) on the way out.
bg=()
MPSROOT=
mps_on=0
ENVP=()

mps_stop() {
  ((mps_on)) || return 0
  echo quit | env CUDA_MPS_PIPE_DIRECTORY="$MPSROOT/pipe" CUDA_MPS_LOG_DIRECTORY="$MPSROOT/log" \
    nvidia-cuda-mps-control >/dev/null 2>&1
  mps_on=0
  sleep 1
  cp -r "$MPSROOT/log" "$L/mps-log" 2>/dev/null
  rm -rf "$MPSROOT"
}
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local p
  for p in "${bg[@]}"; do
    alive "$p" && kill -9 "$p" 2>/dev/null
  done
  mps_stop
}
trap cleanup EXIT
trap 'echo "gpu-colocate: interrupted" >&2; exit 130' INT TERM

# alive PID: the process exists and is not a zombie.
alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [[ ${s:0:1} != Z ]]
}
# wait_exit PID SECONDS: true when PID ended within SECONDS.
wait_exit() {
  local n=0 lim
  lim=$(awk -v s="$2" 'BEGIN { printf "%d", s * 10 }')
  while alive "$1"; do
    sleep 0.1
    n=$((n + 1))
    ((n < lim)) || return 1
  done
}
# reap PID: its exit status (after it ended), and forget it.
reap() {
  wait "$1" 2>/dev/null
  local rc=$?
  local keep=() p
  for p in "${bg[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  bg=("${keep[@]}")
  return $rc
}
calc() { awk "BEGIN { printf \"%s\", $1 }"; }
errtail() { tail -c 300 "$1" 2>/dev/null | tr '\n' ' '; }

check() { # NAME PASS|FAIL DETAIL
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$CHECKS"
  echo "   $2: $1: $3"
  [[ $2 != FAIL ]] || fails=$((fails + 1))
}
run_row() { # SYSTEM BE BLOCK_US HP_CSV BE_LOG BE_KIND BE_REF STATS NOTES
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RUNS"
}

# Time stamps every line (train-gpt prints none of its own).
stamp() {
  local l
  while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done
}

# The environment of MPS clients, or none.
set_env() {
  case $1 in
    mps* | tally-mps*)
      ((mps_on)) || die "internal: MPS run $1 without the daemon"
      ENVP=(env CUDA_MPS_PIPE_DIRECTORY="$MPSROOT/pipe" CUDA_MPS_LOG_DIRECTORY="$MPSROOT/log") ;;
    *) ENVP=() ;;
  esac
}
is_tally() { [[ $1 == tally* ]]; }

# hp_cmd SYSTEM NAME: HPCMD, the HP service's command line.
hp_cmd() {
  if is_tally "$1"; then
    HPCMD=("$TALLY" run --priority=high --stats="$L/$2.hp.json" -- "$R/hp-serve")
  else
    HPCMD=("$R/hp-serve")
  fi
  HPCMD+=(--block-us "$HP_BLOCK_US" --kernels "$HP_KERNELS" --seed 1)
}

# be_cmd SYSTEM CONF NAME DURATION: BECMD, the BE job's command line
# (DURATION: be-spin's own limit; train-gpt runs until stopped).
be_cmd() {
  local sys=$1 conf=$2 name=$3 dur=$4
  local tl=("$TALLY" run --priority=best-effort --stats="$L/$name.be.json" --)
  case $conf in
    be10 | be100)
      local args=(--work "${WORK[$conf]}" --duration "$dur")
      if is_tally "$sys"; then
        BECMD=("${tl[@]}" "$R/be-spin.tally" "${args[@]}")
      else
        BECMD=("$R/be-spin" "${args[@]}")
      fi ;;
    gpt)
      if is_tally "$sys"; then
        BECMD=(stdbuf -oL "${tl[@]}" "$GPT_TALLY" --steps 100000)
      else
        BECMD=(stdbuf -oL "$GPT_PLAIN" --steps 100000)
      fi ;;
  esac
}

# start_be CONF NAME: starts BECMD in the background (BEPID); false when it
# did not print its first progress line within 60 s.
start_be() {
  local conf=$1 name=$2 log=$L/$2.be.log pat='^be: t='
  if [[ $conf == gpt ]]; then
    "${ENVP[@]}" "${BECMD[@]}" > >(stamp >"$log") 2>"$L/$name.be.err" &
    pat='^[0-9.]* step '
  else
    "${ENVP[@]}" "${BECMD[@]}" >"$log" 2>"$L/$name.be.err" &
  fi
  BEPID=$!
  bg+=("$BEPID")
  local n=0
  until grep -q "$pat" "$log" 2>/dev/null; do
    alive "$BEPID" || return 1
    sleep 0.1
    n=$((n + 1))
    ((n < 600)) || return 1
  done
}

# stop_be PID: SIGTERM, then -9 after 30 s; BERC is its exit status.
stop_be() {
  kill -TERM "$1" 2>/dev/null
  if wait_exit "$1" 30; then
    reap "$1"
    BERC=$?
  else
    kill -9 "$1" 2>/dev/null
    reap "$1"
    BERC=timeout
  fi
  sleep 0.3 # the time stamper's last lines
}

# be_checksum LOG: the checksum line of a be-spin log.
be_checksum() { grep -m1 '^be: checksum' "$1" 2>/dev/null | sed 's/^be: checksum //'; }

# check_be NAME CONF LOG RC: a be-spin run ended well and its checksum equals
# BE alone's.
check_be() {
  local name=$1 conf=$2 log=$3 rc=$4 ref got
  [[ $conf != gpt ]] || return 0
  ref=$(be_checksum "$L/be-alone-$conf.be.log")
  got=$(be_checksum "$log")
  if [[ $rc != 0 ]]; then
    check "$name: BE run" FAIL "exit $rc: $(grep -h 'verify FAILED' "$log") $(errtail "${log%.log}.err")"
  elif [[ -z $got || $got != "$ref" ]]; then
    check "$name: BE checksum" FAIL "'${got:-none}' but BE alone gave '$ref'"
  elif is_tally "$name"; then
    check "$name: BE checksum" PASS "same as BE alone ($got)"
  fi
}

# hp_ok NAME RC: the HP run ended well.
hp_ok() {
  if [[ $2 != 0 ]] || ! grep -q '^hp: requests' "$L/$1.hp.log"; then
    check "$1: HP run" FAIL "exit $2: $(errtail "$L/$1.hp.err")"
    return 1
  fi
}

# colo SYSTEM CONF: one co-located run.
colo() {
  local sys=$1 conf=$2 name=$1-$2 hprc kind=spin
  [[ $conf != gpt ]] || kind=gpt
  say "$name"
  set_env "$sys"
  if [[ $sys == streams ]]; then
    "${ENVP[@]}" timeout -k 5 $((HP_S + 120)) "$R/colocate-streams" --block-us "$HP_BLOCK_US" --kernels "$HP_KERNELS" \
      --seed 1 --rate "$RATE" --duration "$HP_S" --csv "$L/$name.hp.csv" \
      --be-work "${WORK[$conf]}" --be-lead "$LEAD" >"$L/$name.hp.log" 2>"$L/$name.hp.err"
    hprc=$?
    hp_ok "$name" $hprc
    check_be "$name" "$conf" "$L/$name.hp.log" $hprc
    run_row "$sys" "$conf" "${BLOCK[$conf]}" "$L/$name.hp.csv" "$L/$name.hp.log" spin \
      "$L/be-alone-$conf.be.log" "" "one process, two threads"
    return
  fi
  be_cmd "$sys" "$conf" "$name" $((LEAD + HP_S + 120))
  if ! start_be "$conf" "$name"; then
    check "$name: BE start" FAIL "no progress within 60 s: $(errtail "$L/$name.be.err")"
    alive "$BEPID" && kill -9 "$BEPID"
    reap "$BEPID"
    return
  fi
  sleep "$LEAD"
  hp_cmd "$sys" "$name"
  "${ENVP[@]}" timeout -k 5 $((HP_S + 120)) "${HPCMD[@]}" --rate "$RATE" --duration "$HP_S" \
    --csv "$L/$name.hp.csv" >"$L/$name.hp.log" 2>"$L/$name.hp.err"
  hprc=$?
  local bealive=1
  alive "$BEPID" || bealive=0
  stop_be "$BEPID"
  hp_ok "$name" $hprc
  local notes=
  ((bealive)) || notes="BE ended before HP did (exit $BERC)"
  if [[ $conf == gpt ]]; then
    [[ $BERC == 143 || $BERC == 0 ]] || check "$name: BE run" FAIL "exit $BERC: $(errtail "$L/$name.be.err")"
  else
    check_be "$name" "$conf" "$L/$name.be.log" "$BERC"
  fi
  local stats=
  is_tally "$sys" && stats="$L/$name.hp.json,$L/$name.be.json"
  run_row "$sys" "$conf" "${BLOCK[$conf]}" "$L/$name.hp.csv" "$L/$name.be.log" $kind \
    "$L/be-alone-$conf.be.log" "$stats" "$notes"
}

# hp_alone SYSTEM: HP alone with Poisson arrivals.
hp_alone() {
  local sys=$1 name=$1-hp rc
  say "$name"
  set_env "$sys"
  hp_cmd "$sys" "$name"
  "${ENVP[@]}" timeout -k 5 $((HP_S + 120)) "${HPCMD[@]}" --rate "$RATE" --duration "$HP_S" \
    --csv "$L/$name.hp.csv" >"$L/$name.hp.log" 2>"$L/$name.hp.err"
  rc=$?
  hp_ok "$name" $rc || return
  local stats=
  is_tally "$sys" && stats="$L/$name.hp.json"
  run_row "$sys" none "" "$L/$name.hp.csv" "" "" "" "$stats" "HP alone"
}

# be_alone SYSTEM CONF: BE alone for BE_S s (SYSTEM: be-alone or tally-be-alone).
be_alone() {
  local sys=$1 conf=$2 name=$1-$2 kind=spin
  say "$name"
  set_env "$sys"
  be_cmd "$sys" "$conf" "$name" "$BE_S"
  if [[ $conf == gpt ]]; then
    kind=gpt
    if ! start_be gpt "$name"; then
      check "$name: BE start" FAIL "no step within 60 s: $(errtail "$L/$name.be.err")"
      alive "$BEPID" && kill -9 "$BEPID"
      reap "$BEPID"
      return 1
    fi
    sleep "$BE_S"
    stop_be "$BEPID"
    [[ $BERC == 143 || $BERC == 0 ]] || {
      check "$name: BE run" FAIL "exit $BERC: $(errtail "$L/$name.be.err")"
      return 1
    }
  else
    "${ENVP[@]}" timeout -k 5 $((BE_S + 120)) "${BECMD[@]}" >"$L/$name.be.log" 2>"$L/$name.be.err"
    local rc=$?
    if [[ $sys == be-alone ]]; then
      if [[ $rc != 0 ]] || [[ -z $(be_checksum "$L/$name.be.log") ]]; then
        check "$name: BE run" FAIL "exit $rc: $(errtail "$L/$name.be.err")"
        return 1
      fi
    else
      check_be "$name" "$conf" "$L/$name.be.log" $rc
    fi
  fi
  local stats=
  is_tally "$sys" && stats="$L/$name.be.json"
  run_row "$sys" "$conf" "${BLOCK[$conf]}" "" "$L/$name.be.log" $kind "$L/be-alone-$conf.be.log" \
    "$stats" "BE alone"
}

# kill_be SUFFIX: with Tally, BE is killed (-9) in the middle of HP's run;
# HP must finish and report.
kill_be() {
  local name=kill-be$1 sys=tally$1 hppid rc
  say "$name"
  set_env "$sys"
  be_cmd "$sys" be10 "$name" $((LEAD + KILL_S + 120))
  if ! start_be be10 "$name"; then
    check "$name: BE killed during HP" FAIL "BE did not start: $(errtail "$L/$name.be.err")"
    alive "$BEPID" && kill -9 "$BEPID"
    reap "$BEPID"
    return
  fi
  sleep "$LEAD"
  hp_cmd "$sys" "$name"
  "${ENVP[@]}" "${HPCMD[@]}" --rate "$RATE" --duration "$KILL_S" --csv "$L/$name.hp.csv" \
    >"$L/$name.hp.log" 2>"$L/$name.hp.err" &
  hppid=$!
  bg+=("$hppid")
  sleep "$(calc "$KILL_S / 2")"
  local before=alive
  alive "$BEPID" || before="already ended"
  kill -9 "$BEPID" 2>/dev/null
  reap "$BEPID"
  if wait_exit "$hppid" $((KILL_S + 60)); then
    reap "$hppid"
    rc=$?
  else
    kill -9 "$hppid" 2>/dev/null
    reap "$hppid"
    rc="hung (killed after $((KILL_S + 60)) s)"
  fi
  if [[ $before != alive ]]; then
    check "$name: BE killed during HP" FAIL "BE $before before the kill: $(errtail "$L/$name.be.err")"
  elif [[ $rc == 0 ]] && grep -q '^hp: requests' "$L/$name.hp.log"; then
    check "$name: BE killed during HP" PASS "HP finished: $(grep -h '^hp: requests' "$L/$name.hp.log")"
    run_row "$name" be10 10 "$L/$name.hp.csv" "" "" "" "$L/$name.hp.json" \
      "Tally$1: BE killed -9 in the middle of the window"
  else
    check "$name: BE killed during HP" FAIL "HP exit $rc: $(errtail "$L/$name.hp.err")"
  fi
}

# kill_hp SUFFIX: with Tally, HP is killed (-9) while BE runs; BE must go on
# and finish (exit 0, its checksum) by its own --duration.
kill_hp() {
  local name=kill-hp$1 sys=tally$1 hppid rc tkill bedur
  say "$name"
  set_env "$sys"
  bedur=$(calc "$LEAD + $KILL_S / 2 + 3")
  be_cmd "$sys" be10 "$name" "$bedur"
  if ! start_be be10 "$name"; then
    check "$name: HP killed during BE" FAIL "BE did not start: $(errtail "$L/$name.be.err")"
    alive "$BEPID" && kill -9 "$BEPID"
    reap "$BEPID"
    return
  fi
  sleep "$LEAD"
  hp_cmd "$sys" "$name"
  "${ENVP[@]}" "${HPCMD[@]}" --rate "$RATE" --duration 600 >"$L/$name.hp.log" 2>"$L/$name.hp.err" &
  hppid=$!
  bg+=("$hppid")
  sleep "$(calc "$KILL_S / 2")"
  local hpstate=alive
  alive "$hppid" || hpstate="already ended"
  tkill=$EPOCHREALTIME
  kill -9 "$hppid" 2>/dev/null
  reap "$hppid"
  if wait_exit "$BEPID" $((${bedur%.*} + 60)); then
    reap "$BEPID"
    rc=$?
  else
    kill -9 "$BEPID" 2>/dev/null
    reap "$BEPID"
    rc="hung (killed after $((${bedur%.*} + 60)) s)"
  fi
  # Kernels done at the kill and at the end, and the rate after the kill.
  local after
  after=$(awk -v tk="$tkill" '
    /^be: t=/ { split($3, k, "="); split($4, e, "=");
                if (e[2] <= tk) { k0 = k[2]; t0 = e[2] } k1 = k[2]; t1 = e[2] }
    END { if (t1 > tk && k1 > k0) printf "%d kernels at the kill, %d at the end (%.0f/s after it)",
                                         k0, k1, (k1 - k0) / (t1 - tk) }' "$L/$name.be.log")
  local ref got
  ref=$(be_checksum "$L/be-alone-be10.be.log")
  got=$(be_checksum "$L/$name.be.log")
  if [[ $hpstate != alive ]]; then
    check "$name: HP killed during BE" FAIL "HP $hpstate before the kill: $(errtail "$L/$name.hp.err")"
  elif [[ $rc != 0 ]]; then
    check "$name: HP killed during BE" FAIL "BE exit $rc: $(errtail "$L/$name.be.err")"
  elif [[ -z $after ]]; then
    check "$name: HP killed during BE" FAIL "BE made no progress after the kill"
  elif [[ $got != "$ref" ]]; then
    check "$name: HP killed during BE" FAIL "BE checksum '$got', BE alone '$ref'"
  else
    check "$name: HP killed during BE" PASS "BE finished, exit 0, same checksum; $after"
  fi
}

mps_start() {
  MPSROOT=$(mktemp -d /tmp/tally-colocate-mps.XXXXXX) || return 1
  mkdir -p "$MPSROOT/pipe" "$MPSROOT/log"
  if ! env CUDA_MPS_PIPE_DIRECTORY="$MPSROOT/pipe" CUDA_MPS_LOG_DIRECTORY="$MPSROOT/log" \
    nvidia-cuda-mps-control -d; then
    echo "gpu-colocate: nvidia-cuda-mps-control -d failed" >&2
    return 1
  fi
  mps_on=1
  sleep 1
  # While a client runs, the daemon must list its server: the runs below are
  # MPS clients.
  set_env mps
  be_cmd mps be10 mps-probe 60
  if ! start_be be10 mps-probe; then
    echo "gpu-colocate: an MPS client failed: $(errtail "$L/mps-probe.be.err")" >&2
    cat "$MPSROOT"/log/*.log >&2 2>/dev/null
    alive "$BEPID" && kill -9 "$BEPID"
    reap "$BEPID"
    return 1
  fi
  local servers
  servers=$(echo get_server_list | "${ENVP[@]}" nvidia-cuda-mps-control 2>&1)
  stop_be "$BEPID"
  echo "mps servers: $servers" >>"$L/device.txt"
  if [[ -z $servers || $BERC != 0 ]]; then
    echo "gpu-colocate: MPS: server list '$servers' while a client ran; client exit $BERC" >&2
    return 1
  fi
}

#===------------------------------------------------------------------------===#

say "co-location benchmark ($( ((quick)) && echo quick || echo full)), programs from $R, output in $L"
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  echo "device: $(nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv,noheader | head -1)"
  echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  echo "host: $(uname -r), $(nproc) cores"
  [[ -d /tmp/nvidia-mps ]] && echo "warning: /tmp/nvidia-mps exists: is a system MPS daemon running?"
} >"$L/device.txt"
cat "$L/device.txt"

say "HP alone, closed loop (capacity)"
"$R/hp-serve" --block-us "$HP_BLOCK_US" --kernels "$HP_KERNELS" --rate 0 --duration "$CAP_S" --csv "$L/alone-closed.hp.csv" \
  >"$L/alone-closed.hp.log" 2>"$L/alone-closed.hp.err" ||
  die "hp-serve failed: $(cat "$L/alone-closed.hp.err")"
CAP=$(awk '/^hp: capacity/ { print $3 }' "$L/alone-closed.hp.log")
[[ -n $CAP ]] || die "hp-serve printed no capacity (see $L/alone-closed.hp.log)"
RATE=$(calc "$CAP * $HP_LOAD")
grep '^hp: requests' "$L/alone-closed.hp.log"
echo "   capacity $CAP req/s; Poisson rate $RATE req/s (HP_LOAD $HP_LOAD)"
run_row alone-closed none "" "$L/alone-closed.hp.csv" "" "" "" "" "closed loop: capacity $CAP req/s"
{
  echo "hp: $HP_KERNELS kernels of one wave of $HP_BLOCK_US us blocks per request; capacity $CAP req/s (closed loop, alone); Poisson at $RATE req/s ($HP_LOAD of capacity), $HP_S s per run"
  echo "timing: lead $LEAD s, BE alone $BE_S s, kill checks $KILL_S s"
} >>"$L/device.txt"

hp_alone alone
hp_alone tally-alone

say "BE calibration"
declare -A WORK BLOCK=([be10]=10 [be100]=100 [gpt]=gpt)
for conf in be10 be100; do
  "$R/be-spin" --calibrate --block-us "${BLOCK[$conf]}" >"$L/calibrate-$conf.log" 2>&1 ||
    die "be-spin --calibrate failed: $(errtail "$L/calibrate-$conf.log")"
  WORK[$conf]=$(awk '/^be: work/ { print $3; exit }' "$L/calibrate-$conf.log")
  [[ -n ${WORK[$conf]} ]] || die "be-spin --calibrate printed no work (see $L/calibrate-$conf.log)"
  echo "   $conf: $(head -1 "$L/calibrate-$conf.log")"
  echo "be $conf: $(head -1 "$L/calibrate-$conf.log")" >>"$L/device.txt"
done
confs=(be10 be100)
[[ -n $GPT_TALLY ]] && confs+=(gpt)

for conf in "${confs[@]}"; do
  be_alone be-alone "$conf" || {
    [[ $conf == gpt ]] || die "BE alone ($conf) failed: the runs beside HP need its checksum"
    confs=(be10 be100)
  }
done
for conf in "${confs[@]}"; do be_alone tally-be-alone "$conf"; done

for sys in timeslice streams tally; do
  for conf in "${confs[@]}"; do
    [[ $sys == streams && $conf == gpt ]] && continue
    colo "$sys" "$conf"
  done
done
kill_be ""
kill_hp ""

if ((!have_mps)); then
  check "MPS" FAIL "nvidia-cuda-mps-control not found: no MPS runs"
else
  say "MPS: a daemon with private pipe and log folders under /tmp"
  if ! mps_start; then
    check "MPS" FAIL "the MPS daemon did not start or serve a client (see above): no MPS runs"
    mps_stop
  else
    hp_alone mps-alone
    for sys in mps tally-mps; do
      for conf in "${confs[@]}"; do
        ((quick)) && [[ $conf == gpt ]] && continue
        colo "$sys" "$conf"
      done
    done
    if ((!quick)); then
      kill_be -mps
      kill_hp -mps
    fi
    mps_stop
  fi
fi

echo
python3 "$src/scripts/colocate-report.py" "$OUT" || {
  echo "gpu-colocate: error: the report failed" >&2
  fails=$((fails + 1))
}
echo
echo "co-location failures: $fails (logs in $L)"
exit $((fails != 0))
