#!/usr/bin/env bash
# gpu-colocate.sh - the co-location benchmark on the GPU machine: an HP
# (latency-critical) service beside a BE (best-effort) job, under every way
# of sharing the GPU, with the same workloads:
#   alone       HP alone, closed loop (its capacity), then Poisson arrivals at
#               HP_LOAD (default 0.5) of that capacity; the same under
#               `tally run --priority=high` (the runtime's cost) and, with
#               hp-serve, as an MPS client
#   be-alone    each BE alone (its throughput and checksum), plain and under
#               `tally run --priority=best-effort` (be-spin.tally and
#               train-gpt.tally transformed; train.py as it is)
#   timeslice   HP + BE as two processes, default time slicing (no MPS)
#   mps         HP + BE as two MPS clients
#   mps-prio    as mps, with MPS client priorities: BE started with
#               CUDA_MPS_CLIENT_PRIORITY=1 (below normal), HP with 0 (normal)
#   streams     one process, HP on a greatest-priority stream, BE on a lowest
#               one: colocate-streams (hp-serve beside be10 or be100), or
#               benchmarks/torch/streams.py (HP_MODEL beside torch: two Python
#               threads sharing the GIL); other pairs have no one-process form
#   tally       HP under `tally run --priority=high`, BE (be-spin.tally,
#               train-gpt.tally or train.py) under `tally run
#               --priority=best-effort`
#   tally-mps   the same as MPS clients (`tally run` makes BE a client of
#               below-normal priority, as mps-prio does by hand)
# The MPS systems run only where nvidia-cuda-mps-control is, with a daemon of
# their own.
# HP: hp-serve (requests of HP_KERNELS kernels of one wave of HP_BLOCK_US us
# blocks), or with HP_MODEL the PyTorch service benchmarks/torch/serve.py
# (ResNet-50 or a BERT-base sized encoder, eager, bf16, batch 1; its
# capacity measured closed loop first, as hp-serve's).
# BE workloads (BE_CONFS): be-spin with 10 us and with 100 us blocks (be10,
# be100), train-gpt (gpt) when DIR has it, torch: benchmarks/torch/
# train.py, eager PyTorch training of a small GPT (BE rate in steps/s), and
# triton: examples/triton/train_gpt.py, a GPT training step compiled by
# torch.compile into Triton kernels (steps/s).
# PyTorch's kernels ship as machine code without Tally's variants (nothing
# here transforms them), so Tally can neither slice nor preempt them: the
# tally rows with PyTorch workloads mostly measure the scheduler holding BE's
# launches while HP is busy (and the runtime's per-launch cost). That is
# expected; it is not a failure. Triton's kernels get variants: every triton
# run, Tally's and the others, compiles with tally-ptxas (TRITON_PTXAS_PATH)
# into one set of Triton and Inductor caches, filled once before the runs
# (a cold compile takes minutes: TRITON_CACHES keeps them between rounds),
# so every run launches the same kernels, and the tally runs' per-step
# losses (their bits) must equal BE alone's.
# In a co-located run BE starts first and HP's measurement starts LEAD s after
# BE's first progress line (serve.py is started beside BE, warms up, and
# waits for that moment, --start-file: later where its start-up takes
# longer); BE is stopped (SIGTERM) when HP is done; BE's rate is taken over
# HP's window (the `# window` line of its CSV) from BE's progress lines.
# Then robustness with Tally, when HP is hp-serve and be10 is among BE_CONFS:
# BE killed with -9 in the middle of HP's run (HP must finish and report), HP
# killed with -9 while BE runs (BE must go on and finish, exit 0); and under
# Tally the be-spin checksum must equal BE alone's, and train-gpt's and
# train_gpt.py's per-step losses (their bits) BE alone's over the steps both
# ran.
#
# Usage: scripts/gpu-colocate.sh [--quick] [DIR]      (from anywhere)
#   DIR (default .carry/runtime) holds prefix/bin/tally, prefix/lib/libtally.so,
#   hp-serve, be-spin, be-spin.tally, colocate-streams, optionally train-gpt
#   and train-gpt.tally, and torch/ (benchmarks/torch as copied by
#   scripts/prepare-device.sh; without it the repository's benchmarks/torch).
#   --quick: short runs; under MPS neither train-gpt nor the kill checks.
#   Time, all systems: hp-serve about 2 minutes (--quick) or 9; HP_MODEL
#   (BE torch) about 3.5 or 10, with HP windows of 60 s (the budget per run
#   is listed where the timings are set); with HP_MODEL each further BE conf
#   adds about 7 minutes (full).
# Environment:
#   OUT          output folder (default gpu-out)
#   HP_LOAD      Poisson rate as a fraction of HP's capacity (default 0.5)
#   HP_KERNELS   hp-serve: kernels per request (default 8)
#   HP_BLOCK_US  hp-serve: block time, us (default 20)
#   HP_ARRIVAL   hp-serve: sleep (default) or spin between requests (its
#                --spin-arrival: a service that polls for work; a sleeping
#                sender wakes late on some virtual machines)
#   HP_TRACE     hp-serve: 1 writes per run NAME.hp-gpu.csv, where each
#                request's time went on the GPU's clock (its --gpu-trace;
#                scripts/debug/hp-parts.py tabulates them); default 0
#   HP_MODEL     empty (default): HP is hp-serve; resnet50 or bert: HP is
#                `serve.py --model HP_MODEL` (PyTorch; see PYTHON)
#   HP_SECONDS   HP's measurement window per run, s (default 15, with
#                HP_MODEL 60; --quick 3, with HP_MODEL 10)
#   BE_CONFS     the BE workloads, among be10 be100 gpt torch triton,
#                separated by spaces or commas (default "be10 be100 gpt", gpt
#                only where DIR has train-gpt; with HP_MODEL "torch", to keep
#                a full run near 10 minutes)
#   TRITON_ARGS  BE triton: train_gpt.py's options (default --mm-configs 2
#                --no-coordinate-descent --batch 32 --deterministic: few GEMM
#                configurations to autotune, so the cold compile fits a device
#                command; without --deterministic plain runs under MPS did
#                not always give the same losses, so the check means nothing)
#   TRITON_CACHES  BE triton: the folder of the Triton and Inductor caches,
#                kept (default: a temporary one, removed at the end; with a
#                kept one a second round on the machine starts in seconds)
#   TRITON_TIMEOUT BE triton: the limit of the run that fills the caches, s
#                (default 420)
#   SYSTEMS      the co-located systems, among timeslice streams tally mps
#                mps-prio tally-mps (default all). HP alone and BE alone run
#                always; under Tally when a tally system is chosen; HP alone
#                under MPS (hp-serve only) when an MPS system is. A device
#                command may take 600 s at most: a full HP_MODEL run fits
#                more surely as two, SYSTEMS="timeslice streams tally" and
#                SYSTEMS="mps mps-prio tally-mps", each with its own OUT
#   TALLY_MPS_VARIANTS  more tally-mps systems, each with settings of its
#                own: space-separated NAME=VAR=VALUE[,VAR=VALUE...] (e.g.
#                "t60=TALLY_TURNAROUND_US=60 q1k=TALLY_QUEUE_US=1000"; VAR
#                a TALLY_ or CUDA_ variable other than TALLY_CACHE_DIR); each
#                runs as system tally-mps+NAME after tally-mps, for each BE,
#                with those variables in both processes' environment
#                (default none). For trade-off curves: the settings' cost
#                in HP latency against BE kept, in one run.
#   PROFILE      cold (default), warm or shared. The runtime's profile (its measurements
#                of each BE launch shape's forms, made while HP is idle) is
#                kept in a cache that later runs reuse; each tally co-located
#                run has a cache folder of its own ($OUT/colocate/profile/,
#                its run-time PTX cache too), empty with cold: the run includes the measuring, which a short run
#                spends much of its time on while HP keeps interrupting it.
#                warm: an unrecorded run of the same pair (WARMUP_SECONDS,
#                default HP_SECONDS; logs NAME-warmup.*) fills that cache
#                first, as a training job's first minutes or an earlier run
#                would; about doubles the tally runs' time. shared: one
#                cache per BE for every tally system (tally, tally-mps and
#                TALLY_MPS_VARIANTS' systems), warmed once by the first
#                (a run of WARMUP_SECONDS); the others start from it and add
#                to it: comparisons of settings in their steady state
#   PROFILE_SEED with PROFILE=shared: a profile cache file (profile-*.v1, as
#                an earlier run left it) that becomes each shared cache,
#                under this GPU's name, instead of a warming run: every
#                tally system starts from the same measurements, so makes
#                the same choices (an A/B of settings or builds for a given
#                choice; which choice a warming run makes can differ from
#                run to run where two forms are within noise)
#   PYTHON       the Python with PyTorch that runs serve.py, train.py,
#                streams.py and train_gpt.py (default: the first of
#                /opt/torch/.venv/bin/python and python3 on PATH that imports
#                torch with CUDA); needed only with HP_MODEL or BE conf torch
#                or triton
# Writes $OUT/colocate/ (per run: NAME.hp.csv latencies, NAME.hp.log,
# NAME.be.log, stderr in *.err, Tally statistics in *.json; runs.tsv,
# checks.tsv, device.txt) and $OUT/colocate.csv; prints a markdown table
# (scripts/colocate-report.py); then, where a Python has matplotlib, the
# plots in $OUT/plots (scripts/colocate-plots.py). Exit status 1 when a check
# or a run failed.
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
# shellcheck source=scripts/torch-env.sh
. "$src/scripts/torch-env.sh"
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
  if grep -q "not found" <<<"$(ldd "$R/$f" 2>/dev/null)"; then
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

# The HP service: hp-serve, or the PyTorch one (HP_MODEL).
HP_MODEL=${HP_MODEL:-}
case $HP_MODEL in
  '' | resnet50 | bert) ;;
  *) die "HP_MODEL '$HP_MODEL': resnet50, bert, or empty for hp-serve" ;;
esac
torch_hp=0
[[ -z $HP_MODEL ]] || torch_hp=1
if ((torch_hp)); then HP_NAME="serve.py --model $HP_MODEL"; else HP_NAME=hp-serve; fi

# The BE workloads (BE_CONFS) and the co-located systems (SYSTEMS).
if [[ -n ${BE_CONFS:-} ]]; then
  read -ra confs <<<"${BE_CONFS//,/ }"
  ((${#confs[@]})) || die "BE_CONFS '$BE_CONFS' names no BE workload"
elif ((torch_hp)); then
  confs=(torch)
else
  confs=(be10 be100)
  [[ -n $GPT_TALLY ]] && confs+=(gpt)
fi
has_conf() { [[ " ${confs[*]} " == *" $1 "* ]]; }
seen=' '
for conf in "${confs[@]}"; do
  case $conf in
    be10 | be100 | torch) ;;
    gpt) [[ -n $GPT_TALLY ]] || die "BE_CONFS has gpt, but $R has no train-gpt.tally (or there is no stdbuf)" ;;
    triton)
      [[ -x $R/prefix/bin/tally-ptxas ]] || die "BE_CONFS has triton, but $R/prefix/bin/tally-ptxas is missing"
      TRITON_PY=$R/train_gpt.py
      [[ -f $TRITON_PY ]] || TRITON_PY=$src/examples/triton/train_gpt.py
      [[ -f $TRITON_PY ]] || die "BE_CONFS has triton, but there is no train_gpt.py in $R or examples/triton" ;;
    *) die "BE_CONFS: unknown BE workload '$conf' (be10, be100, gpt, torch, triton)" ;;
  esac
  [[ $seen != *" $conf "* ]] || die "BE_CONFS names $conf twice"
  seen+="$conf "
done
all_systems=(timeslice streams tally mps mps-prio tally-mps)
if [[ -n ${SYSTEMS:-} ]]; then
  read -ra systems <<<"${SYSTEMS//,/ }"
  ((${#systems[@]})) || die "SYSTEMS '$SYSTEMS' names no system"
  for sys in "${systems[@]}"; do
    [[ " ${all_systems[*]} " == *" $sys "* ]] || die "SYSTEMS: unknown system '$sys' (${all_systems[*]})"
  done
else
  systems=("${all_systems[@]}")
fi
want() { [[ " ${systems[*]} " == *" $1 "* ]]; }
# TALLY_MPS_VARIANTS: names and settings, checked now.
declare -A VARIANT_ENV=()
variant_names=()
read -ra variant_specs <<<"${TALLY_MPS_VARIANTS:-}"
for v in "${variant_specs[@]}"; do
  [[ $v =~ ^([A-Za-z0-9_.-]+)=((TALLY|CUDA)_[A-Z0-9_]*=[^,]+(,(TALLY|CUDA)_[A-Z0-9_]*=[^,]+)*)$ ]] ||
    die "TALLY_MPS_VARIANTS: '$v' is not NAME=VAR=VALUE[,VAR=VALUE...] (VAR a TALLY_ or CUDA_ variable, VALUE not empty)"
  [[ ${BASH_REMATCH[2]} != *TALLY_CACHE_DIR=* ]] || die "TALLY_MPS_VARIANTS: '$v': TALLY_CACHE_DIR is the script's (PROFILE)"
  [[ -z ${VARIANT_ENV[${BASH_REMATCH[1]}]:-} ]] || die "TALLY_MPS_VARIANTS: '${BASH_REMATCH[1]}' given twice"
  VARIANT_ENV[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
  variant_names+=("${BASH_REMATCH[1]}")
done
((${#variant_names[@]} == 0)) || want tally-mps || die "TALLY_MPS_VARIANTS needs tally-mps among SYSTEMS"
# colo_variant NAME CONF: colo as system tally-mps+NAME, with its settings.
colo_variant() {
  local kv kvs
  IFS=, read -ra kvs <<<"${VARIANT_ENV[$1]}"
  for kv in "${kvs[@]}"; do
    local -x "$kv"
  done
  colo "tally-mps+$1" "$2"
}
any_tally=0
want tally || want tally-mps && any_tally=1
any_mps=0
want mps || want mps-prio || want tally-mps && any_mps=1

# The PyTorch workloads: the copy in DIR/torch (scripts/prepare-device.sh),
# else the repository's; a Python that imports torch with CUDA.
PY=
TORCH=
if ((torch_hp)) || has_conf torch || has_conf triton; then
  torch_dir "$R" "$src" ||
    die "no serve.py, train.py, streams.py and workloads.py in $R/torch or $src/benchmarks/torch"
  torch_python || die "no Python that imports torch with CUDA available (PYTHON, or /opt/torch/.venv/bin/python and python3)"
fi
# BE triton: every run compiles with tally-ptxas into the same caches.
TRITON_ENV=()
TRITON_TMP=
TRITON_ARGS=${TRITON_ARGS:---mm-configs 2 --no-coordinate-descent --batch 32 --deterministic}
TRITON_TIMEOUT=${TRITON_TIMEOUT:-420}
if has_conf triton; then
  "$PY" -c 'import triton' >/dev/null 2>&1 || die "BE_CONFS has triton, but $PY cannot import triton"
  [[ $TRITON_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "TRITON_TIMEOUT '$TRITON_TIMEOUT': a whole number of seconds"
  if [[ -n ${TRITON_CACHES:-} ]]; then
    mkdir -p "$TRITON_CACHES" || die "cannot create TRITON_CACHES $TRITON_CACHES"
    TRITON_CACHES=$(cd "$TRITON_CACHES" && pwd)
  else
    TRITON_TMP=$(mktemp -d) || die "mktemp failed"
    TRITON_CACHES=$TRITON_TMP
  fi
  TRITON_ENV=(env TRITON_CACHE_DIR="$TRITON_CACHES/triton" TORCHINDUCTOR_CACHE_DIR="$TRITON_CACHES/inductor"
    TRITON_PTXAS_PATH="$R/prefix/bin/tally-ptxas")
fi

have_mps=0
command -v nvidia-cuda-mps-control >/dev/null && have_mps=1
# Only the MPS runs are MPS clients; only mps-prio's have a client priority.
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_MPS_CLIENT_PRIORITY

# Timings, s. A full run with HP_MODEL (BE_CONFS torch, all systems, MPS
# there), taking about 8 s for a PyTorch process to start (import, CUDA
# context, model, warmup; under Tally perhaps more):
#   HP capacity, closed loop              8 + 5                  13
#   be-spin calibration (the MPS probe)                           2
#   alone, tally-alone                    2 x (8 + 60)          136
#   be-alone, tally-be-alone              2 x (8 + 8)            32
#   timeslice, tally (serve.py starts     2 x (8 + 1 + 60 + 1)  140
#     beside BE: its start-up overlaps BE's)
#   streams (one process)                 8 + 1 + 60 + 1         70
#   MPS daemon and its probe                                      3
#   mps, mps-prio, tally-mps              3 x 70                210
#   report and plots                                              3
#   total                                                       609 s, about 10 min
# (no MPS HP-alone run and no kill checks: those are hp-serve's). --quick:
# 11 + 2 + 2 x 18 + 2 x 13 + 3 x 20 + 3 + 3 x 20 + 3 = 201 s, about 3.5 min.
# Each further BE conf adds its BE-alone pair and 6 co-located runs (about
# 7 minutes full). Past the 600 s a device command may take, split the
# systems over two commands: SYSTEMS="timeslice streams tally", then
# SYSTEMS="mps mps-prio tally-mps" (about 6.5 minutes each, other OUTs).
# hp-serve (HP_MODEL empty): about 9 minutes full, 2 with --quick.
if ((torch_hp)); then
  if ((quick)); then
    CAP_S=3 HP_S=10 BE_S=5 LEAD=1 KILL_S=4
  else
    CAP_S=5 HP_S=60 BE_S=8 LEAD=1 KILL_S=8
  fi
elif ((quick)); then
  CAP_S=1 HP_S=3 BE_S=2 LEAD=1 KILL_S=4
else
  CAP_S=3 HP_S=15 BE_S=5 LEAD=1 KILL_S=8
fi
HP_S=${HP_SECONDS:-$HP_S}
[[ $HP_S =~ ^[1-9][0-9]*$ ]] || die "HP_SECONDS '$HP_S': a whole number of seconds, at least 1"
PROFILE=${PROFILE:-cold}
[[ $PROFILE == cold || $PROFILE == warm || $PROFILE == shared ]] || die "PROFILE '$PROFILE': cold, warm or shared"
PROFILE_SEED=${PROFILE_SEED:-}
GPU_UUID=
if [[ -n $PROFILE_SEED ]]; then
  [[ $PROFILE == shared ]] || die "PROFILE_SEED needs PROFILE=shared"
  [[ -f $PROFILE_SEED ]] || die "PROFILE_SEED '$PROFILE_SEED': no such file"
  head -n1 "$PROFILE_SEED" | grep -q '^tally-profile ' ||
    die "PROFILE_SEED '$PROFILE_SEED': not a profile cache file (no 'tally-profile' header)"
  PROFILE_SEED=$(cd "$(dirname "$PROFILE_SEED")" && pwd)/$(basename "$PROFILE_SEED")
  # The cache's file is named after the GPU (profile-GPU-<uuid>.v1).
  GPU_UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i "${CUDA_VISIBLE_DEVICES:-0}" 2>/dev/null | head -n1)
  [[ $GPU_UUID == GPU-* ]] || die "PROFILE_SEED: cannot read the GPU's UUID from nvidia-smi"
fi
WARM_S=${WARMUP_SECONDS:-$HP_S}
[[ $WARM_S =~ ^[1-9][0-9]*$ ]] || die "WARMUP_SECONDS '$WARM_S': a whole number of seconds, at least 1"
# What a run may take beyond its window before it counts as hung: with
# PyTorch, the start-up too.
SLACK=120
((torch_hp)) && SLACK=240
HP_LOAD=${HP_LOAD:-0.5}
HP_BLOCK_US=${HP_BLOCK_US:-20}
# Kernels per HP request (one wave each): an inference request is a
# sequence of kernels, not one.
HP_KERNELS=${HP_KERNELS:-8}
HP_ARRIVAL=${HP_ARRIVAL:-sleep}
[[ $HP_ARRIVAL == sleep || $HP_ARRIVAL == spin ]] || die "HP_ARRIVAL '$HP_ARRIVAL': sleep or spin"
HP_TRACE=${HP_TRACE:-0}
[[ $HP_TRACE == 0 || $HP_TRACE == 1 ]] || die "HP_TRACE '$HP_TRACE': 0 or 1"
((torch_hp && HP_TRACE)) && die "HP_TRACE is hp-serve's (no HP_MODEL)"
# The statistics count without timing every launch (two events each would
# cost the workloads more than the runtime itself): HP's not at all, BE's
# one launch in 16 of each kernel (BE_TIMING), enough for the share of its
# GPU time in preemptible forms.
export TALLY_STATS_TIMING=0
BE_TIMING=TALLY_STATS_TIMING=16
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
# The runtime's profile caches are here, not in the machine's ~/.cache:
# the runs outside a co-located pair share this one (colo sets a pair's).
export TALLY_CACHE_DIR=$L/profile/other

# Processes started in the background here, killed (by id) on the way out.
bg=()
MPSROOT=
mps_on=0
ENVP=()
ENVP_HP=()
ENVP_BE=()

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
  [[ -z $TRITON_TMP ]] || rm -rf "$TRITON_TMP"
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

check() { # NAME PASS|FAIL|SKIP DETAIL
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

# set_env SYSTEM: the environment of MPS clients (ENVP), or none; ENVP_HP
# and ENVP_BE add mps-prio's client priorities (HP normal, BE below).
set_env() {
  case $1 in
    mps* | tally-mps*)
      ((mps_on)) || die "internal: MPS run $1 without the daemon"
      ENVP=(env CUDA_MPS_PIPE_DIRECTORY="$MPSROOT/pipe" CUDA_MPS_LOG_DIRECTORY="$MPSROOT/log") ;;
    *) ENVP=() ;;
  esac
  ENVP_HP=("${ENVP[@]}")
  ENVP_BE=("${ENVP[@]}")
  if [[ $1 == mps-prio* ]]; then
    ENVP_HP+=(CUDA_MPS_CLIENT_PRIORITY=0)
    ENVP_BE+=(CUDA_MPS_CLIENT_PRIORITY=1)
  fi
}
is_tally() { [[ $1 == tally* ]]; }

# be_kind CONF: how colocate-report.py reads the BE log (spin: be-spin's
# progress lines; torch: train.py's, the same format in steps; gpt and
# triton: train-gpt's and train_gpt.py's time-stamped step lines).
be_kind() {
  case $1 in
    gpt | torch | triton) echo "$1" ;;
    *) echo spin ;;
  esac
}

# streams_form CONF: the one-process baseline exists for HP beside CONF.
streams_form() {
  if ((torch_hp)); then [[ $1 == torch ]]; else [[ $1 == be10 || $1 == be100 ]]; fi
}

# hp_cmd SYSTEM NAME: HPCMD, the HP service's command line (hp-serve, or
# serve.py with HP_MODEL), under Tally for the tally systems.
hp_cmd() {
  local base
  if ((torch_hp)); then
    base=("$PY" "$TORCH/serve.py" --model "$HP_MODEL" --seed 1)
  else
    base=("$R/hp-serve" --block-us "$HP_BLOCK_US" --kernels "$HP_KERNELS" --seed 1)
    [[ $HP_ARRIVAL == spin ]] && base+=(--spin-arrival)
    [[ $HP_TRACE == 1 ]] && base+=(--gpu-trace "$L/$2.hp-gpu.csv")
  fi
  if is_tally "$1"; then
    HPCMD=("$TALLY" run --priority=high --stats="$L/$2.hp.json" -- "${base[@]}")
  else
    HPCMD=("${base[@]}")
  fi
}

# be_cmd SYSTEM CONF NAME DURATION: BECMD, the BE job's command line
# (DURATION: be-spin's and train.py's own limit; train-gpt runs until
# stopped).
be_cmd() {
  local sys=$1 conf=$2 name=$3 dur=$4
  local tl=(env "$BE_TIMING" "$TALLY" run --priority=best-effort --stats="$L/$name.be.json" --)
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
    torch)
      # PyTorch's kernels as they are (no transformed copy exists).
      local args=("$PY" "$TORCH/train.py" --seed 1 --duration "$dur")
      if is_tally "$sys"; then
        BECMD=("${tl[@]}" "${args[@]}")
      else
        BECMD=("${args[@]}")
      fi ;;
    triton)
      # Runs until stopped; the kernels come from the filled caches.
      local args=("$PY" -u "$TRITON_PY" --steps 100000000 --seed 1) extra
      read -ra extra <<<"$TRITON_ARGS"
      args+=("${extra[@]}")
      if is_tally "$sys"; then
        BECMD=("${TRITON_ENV[@]}" "$BE_TIMING" "$TALLY" run --priority=best-effort --triton-ptxas
          --stats="$L/$name.be.json" -- "${args[@]}")
      else
        BECMD=("${TRITON_ENV[@]}" "${args[@]}")
      fi ;;
  esac
}

# triton_warm: BE triton fills the Triton and Inductor caches (a few steps,
# outside every measurement); false when it failed.
triton_warm() {
  say "triton: filling the caches in $TRITON_CACHES (minutes when cold)"
  local t0=$SECONDS rc extra
  read -ra extra <<<"$TRITON_ARGS"
  "${TRITON_ENV[@]}" timeout -k 5 "$TRITON_TIMEOUT" "$PY" -u "$TRITON_PY" --steps 3 --seed 1 "${extra[@]}" \
    >"$L/triton-warm.log" 2>"$L/triton-warm.err"
  rc=$?
  if [[ $rc != 0 ]] || [[ $(grep -c '^step ' "$L/triton-warm.log") != 3 ]]; then
    check "triton: caches filled" FAIL "exit $rc after $((SECONDS - t0)) s: $(errtail "$L/triton-warm.err")"
    return 1
  fi
  check "triton: caches filled" PASS "3 steps in $((SECONDS - t0)) s"
  echo "be triton: train_gpt.py $TRITON_ARGS (Triton kernels compiled by tally-ptxas; caches filled in $((SECONDS - t0)) s)" >>"$L/device.txt"
}

# start_be CONF NAME: starts BECMD in the background (BEPID); false when it
# did not print its first progress line within 60 s (train.py: 180 s, its
# start-up included).
start_be() {
  local conf=$1 name=$2 log=$L/$2.be.log pat='^be: t=' lim=600
  [[ $conf != torch && $conf != triton ]] || lim=1800
  if [[ $conf == gpt || $conf == triton ]]; then
    "${ENVP_BE[@]}" "${BECMD[@]}" > >(stamp >"$log") 2>"$L/$name.be.err" &
    pat='^[0-9.]* step '
  else
    "${ENVP_BE[@]}" "${BECMD[@]}" >"$log" 2>"$L/$name.be.err" &
  fi
  BEPID=$!
  bg+=("$BEPID")
  local n=0
  until grep -q "$pat" "$log" 2>/dev/null; do
    alive "$BEPID" || return 1
    sleep 0.1
    n=$((n + 1))
    ((n < lim)) || return 1
  done
}

# stop_be PID: SIGTERM, then -9 after 30 s (dumped first into
# $L/stuck-PID.txt); BERC is its exit status.
stop_be() {
  kill -TERM "$1" 2>/dev/null
  if wait_exit "$1" 30; then
    reap "$1"
    BERC=$?
  else
    "$src/scripts/debug/dump-stuck.sh" "$TALLY" "$1" >"$L/stuck-$1.txt" 2>&1
    echo "   a BE process did not end within 30 s of SIGTERM: $L/stuck-$1.txt" >&2
    kill -9 "$1" 2>/dev/null
    reap "$1"
    BERC=timeout
  fi
  sleep 0.3 # the time stamper's last lines
}

# be_checksum LOG: the checksum line of a be-spin log.
be_checksum() { grep -m1 '^be: checksum' "$1" 2>/dev/null | sed 's/^be: checksum //'; }

# check_be NAME CONF LOG RC: a be-spin run ended well and its checksum equals
# BE alone's; a train.py run ended well (exit 0, its summary; its losses
# are not compared: PyTorch's kernels need not be deterministic).
check_be() {
  local name=$1 conf=$2 log=$3 rc=$4 ref got
  case $conf in
    gpt | triton) return 0 ;;
    torch)
      if [[ $rc != 0 ]]; then
        check "$name: BE run" FAIL "exit $rc: $(errtail "${log%.log}.err")"
      elif ! grep -q '^be: steps' "$log"; then
        check "$name: BE run" FAIL "no 'be: steps' summary: $(errtail "${log%.log}.err")"
      fi
      return 0 ;;
  esac
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

# check_losses NAME CONF: train-gpt's or train_gpt.py's per-step losses
# (deterministic: the same bits in every run with the same kernels) beside
# HP under Tally, preempted and resumed, equal BE alone's over the steps
# both ran (at least 50 of train-gpt's, 10 of train_gpt.py's, whose steps
# are longer).
check_losses() {
  local name=$1 ref=$L/be-alone-$2.be.log got=$L/$1.be.log out
  out=$(python3 - "$ref" "$got" "$2" <<'PYEOF'
import re, sys
# train-gpt: "step N loss D bits HEX"; train_gpt.py: "step N loss FLOATHEX D".
pat = re.compile(r"\bstep (\d+) loss \S+ bits ([0-9a-f]+)" if sys.argv[3] == "gpt"
                 else r"\bstep (\d+) loss (\S+) ")
least = 50 if sys.argv[3] == "gpt" else 10
def steps(path):
    d = {}
    for line in open(path, errors="replace"):
        m = pat.search(line)
        if m:
            d[int(m.group(1))] = m.group(2)
    return d
a, b = steps(sys.argv[1]), steps(sys.argv[2])
common = sorted(set(a) & set(b))
bad = [k for k in common if a[k] != b[k]]
if bad:
    print(f"FAIL step {bad[0]}: {b[bad[0]]} but BE alone gave {a[bad[0]]} ({len(bad)} of {len(common)} steps differ)")
elif len(common) < least:
    print(f"FAIL only {len(common)} steps to compare")
else:
    print(f"PASS {len(common)} steps, every loss's bits as BE alone's")
PYEOF
)
  check "$name: BE losses" "${out%% *}" "${out#* }"
}

# hp_ok NAME RC: the HP run ended well.
hp_ok() {
  if [[ $2 != 0 ]] || ! grep -q '^hp: requests' "$L/$1.hp.log"; then
    check "$1: HP run" FAIL "exit $2: $(errtail "$L/$1.hp.err")"
    return 1
  fi
}

# colo SYSTEM CONF [warmup]: one co-located run; with warmup, the one that
# fills a tally pair's profile cache before it (PROFILE=warm): WARM_S long,
# not a row of the report.
colo() {
  local sys=$1 conf=$2 name=$1-$2 hprc kind hppid='' go='' warmup=${3:-}
  local HP_S=$HP_S profile=
  if is_tally "$sys" && [[ $PROFILE == shared ]]; then
    # One cache per BE conf for every tally system, warmed once, by the
    # first (each process makes its own choices from the measurements; which
    # forms were measured depends on the warming run's settings, as an
    # original within its target ends the measuring: a later system with a
    # tighter target, or under MPS after one without, measures the rest in
    # its recorded run).
    local -x TALLY_CACHE_DIR=$L/profile/shared-$conf
    if [[ -n $warmup ]]; then
      name=$name-warmup HP_S=$WARM_S
      rm -rf "$TALLY_CACHE_DIR"
    elif [[ -n $PROFILE_SEED && ! -e $L/profile/shared-$conf.warmed ]]; then
      mkdir -p "$TALLY_CACHE_DIR" &&
        cp "$PROFILE_SEED" "$TALLY_CACHE_DIR/profile-$GPU_UUID.v1" &&
        : >"$L/profile/shared-$conf.warmed" || die "cannot seed $TALLY_CACHE_DIR"
      profile="profile seeded from $(basename "$PROFILE_SEED") (shared)"
    elif [[ -n $PROFILE_SEED ]]; then
      profile="profile seeded from $(basename "$PROFILE_SEED") (shared), used before"
    elif [[ ! -e $L/profile/shared-$conf.warmed ]]; then
      colo "$sys" "$conf" warmup
      if find "$TALLY_CACHE_DIR" -name 'profile-*.v1' 2>/dev/null | grep -q .; then
        mkdir -p "$L/profile" && : >"$L/profile/shared-$conf.warmed"
        profile="profile warmed by a ${WARM_S} s run (shared)"
      elif grep -Eq '"profile_misses": 0[,}]' "$L/$sys-$conf-warmup.be.json" 2>/dev/null; then
        # Nothing to measure: every launch started beside a launch-bound
        # HP service (an eager PyTorch one), or none had a shape to profile.
        mkdir -p "$L/profile" && : >"$L/profile/shared-$conf.warmed"
        profile="profile warm-up measured nothing (no launch needed a measurement)"
      else
        check "$sys-$conf: profile warm-up" FAIL "the warm-up run left no profile in $TALLY_CACHE_DIR"
        profile="profile warm-up failed: cold"
      fi
    else
      profile="profile shared, warmed before"
    fi
  elif is_tally "$sys"; then
    # Each pair's own profile cache: a run does not start from another's
    # (a local exported variable: the others' stays once this returns).
    local -x TALLY_CACHE_DIR=$L/profile/$sys-$conf
    if [[ -n $warmup ]]; then
      name=$name-warmup HP_S=$WARM_S
      rm -rf "$TALLY_CACHE_DIR"
    elif [[ $PROFILE == warm ]]; then
      colo "$sys" "$conf" warmup
      profile="profile warmed by a ${WARM_S} s run"
    else
      rm -rf "$TALLY_CACHE_DIR"
      profile="profile cold"
    fi
  fi
  kind=$(be_kind "$conf")
  say "$name"
  set_env "$sys"
  if [[ $sys == streams ]]; then
    local notes="one process, two threads"
    if [[ $conf == torch ]]; then
      "${ENVP[@]}" timeout -k 5 $((HP_S + SLACK)) "$PY" "$TORCH/streams.py" --model "$HP_MODEL" \
        --seed 1 --rate "$RATE" --duration "$HP_S" --csv "$L/$name.hp.csv" --be-lead "$LEAD" \
        >"$L/$name.hp.log" 2>"$L/$name.hp.err"
      hprc=$?
      notes="one process, two Python threads sharing the GIL (streams.py)"
    else
      "${ENVP[@]}" timeout -k 5 $((HP_S + SLACK)) "$R/colocate-streams" --block-us "$HP_BLOCK_US" \
        --kernels "$HP_KERNELS" --seed 1 --rate "$RATE" --duration "$HP_S" --csv "$L/$name.hp.csv" \
        --be-work "${WORK[$conf]}" --be-lead "$LEAD" >"$L/$name.hp.log" 2>"$L/$name.hp.err"
      hprc=$?
    fi
    hp_ok "$name" "$hprc"
    check_be "$name" "$conf" "$L/$name.hp.log" "$hprc"
    run_row "$sys" "$conf" "${BLOCK[$conf]}" "$L/$name.hp.csv" "$L/$name.hp.log" "$kind" \
      "$L/be-alone-$conf.be.log" "" "$notes"
    return
  fi
  be_cmd "$sys" "$conf" "$name" $((LEAD + HP_S + SLACK))
  hp_cmd "$sys" "$name"
  if ((torch_hp)); then
    # serve.py starts beside BE (its start-up takes seconds), warms up, and
    # waits for the file $go to start its window.
    go=$L/$name.go
    rm -f "$go"
    "${ENVP_HP[@]}" "${HPCMD[@]}" --rate "$RATE" --duration "$HP_S" --csv "$L/$name.hp.csv" \
      --start-file "$go" --start-timeout 600 >"$L/$name.hp.log" 2>"$L/$name.hp.err" &
    hppid=$!
    bg+=("$hppid")
  fi
  if ! start_be "$conf" "$name"; then
    check "$name: BE start" FAIL "no progress line (it ended, or none in $([[ $conf == torch || $conf == triton ]] && echo 180 || echo 60) s): $(errtail "$L/$name.be.err")"
    alive "$BEPID" && kill -9 "$BEPID"
    reap "$BEPID"
    if [[ -n $hppid ]]; then
      kill -9 "$hppid" 2>/dev/null
      reap "$hppid"
    fi
    return
  fi
  sleep "$LEAD"
  if [[ -n $hppid ]]; then
    : >"$go"
    if wait_exit "$hppid" $((HP_S + SLACK)); then
      reap "$hppid"
      hprc=$?
    else
      kill -9 "$hppid" 2>/dev/null
      reap "$hppid"
      hprc="hung (killed $((HP_S + SLACK)) s after its start signal)"
    fi
    rm -f "$go"
  else
    "${ENVP_HP[@]}" timeout -k 5 $((HP_S + SLACK)) "${HPCMD[@]}" --rate "$RATE" --duration "$HP_S" \
      --csv "$L/$name.hp.csv" >"$L/$name.hp.log" 2>"$L/$name.hp.err"
    hprc=$?
  fi
  local bealive=1
  alive "$BEPID" || bealive=0
  stop_be "$BEPID"
  hp_ok "$name" "$hprc"
  local notes=
  ((bealive)) || notes="BE ended before HP did (exit $BERC)"
  if [[ $conf == gpt || $conf == torch || $conf == triton ]]; then
    # Stopped by SIGTERM: train.py, train-gpt and train_gpt.py end cleanly
    # (0; 143 from an older train-gpt).
    [[ $BERC == 143 || $BERC == 0 ]] || check "$name: BE run" FAIL "exit $BERC: $(errtail "$L/$name.be.err")"
    [[ $conf == gpt || $conf == triton ]] && is_tally "$sys" && check_losses "$name" "$conf"
  else
    check_be "$name" "$conf" "$L/$name.be.log" "$BERC"
  fi
  [[ -z $warmup ]] || return 0
  local stats=
  is_tally "$sys" && stats="$L/$name.hp.json,$L/$name.be.json"
  [[ -n $profile ]] && notes="${notes:+$notes; }$profile"
  run_row "$sys" "$conf" "${BLOCK[$conf]}" "$L/$name.hp.csv" "$L/$name.be.log" "$kind" \
    "$L/be-alone-$conf.be.log" "$stats" "$notes"
}

# hp_alone SYSTEM: HP alone with Poisson arrivals.
hp_alone() {
  local sys=$1 name=$1-hp rc
  say "$name"
  set_env "$sys"
  hp_cmd "$sys" "$name"
  "${ENVP_HP[@]}" timeout -k 5 $((HP_S + SLACK)) "${HPCMD[@]}" --rate "$RATE" --duration "$HP_S" \
    --csv "$L/$name.hp.csv" >"$L/$name.hp.log" 2>"$L/$name.hp.err"
  rc=$?
  hp_ok "$name" $rc || return
  local stats=
  is_tally "$sys" && stats="$L/$name.hp.json"
  run_row "$sys" none "" "$L/$name.hp.csv" "" "" "" "$stats" "HP alone"
}

# be_alone SYSTEM CONF: BE alone for BE_S s (SYSTEM: be-alone or tally-be-alone).
be_alone() {
  local sys=$1 conf=$2 name=$1-$2 kind
  kind=$(be_kind "$conf")
  say "$name"
  set_env "$sys"
  be_cmd "$sys" "$conf" "$name" "$BE_S"
  if [[ $conf == gpt || $conf == triton ]]; then
    if ! start_be "$conf" "$name"; then
      check "$name: BE start" FAIL "no step within $([[ $conf == triton ]] && echo 180 || echo 60) s: $(errtail "$L/$name.be.err")"
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
    "${ENVP_BE[@]}" timeout -k 5 $((BE_S + SLACK)) "${BECMD[@]}" >"$L/$name.be.log" 2>"$L/$name.be.err"
    local rc=$?
    if [[ $sys == be-alone ]]; then
      local ok=
      if [[ $conf == torch ]]; then
        grep -q '^be: steps' "$L/$name.be.log" && ok=1
      else
        [[ -n $(be_checksum "$L/$name.be.log") ]] && ok=1
      fi
      if [[ $rc != 0 || -z $ok ]]; then
        check "$name: BE run" FAIL "exit $rc: $(errtail "$L/$name.be.err")"
        return 1
      fi
    else
      check_be "$name" "$conf" "$L/$name.be.log" $rc
    fi
  fi
  local stats=
  is_tally "$sys" && stats="$L/$name.be.json"
  run_row "$sys" "$conf" "${BLOCK[$conf]}" "" "$L/$name.be.log" "$kind" "$L/be-alone-$conf.be.log" \
    "$stats" "BE alone"
}

# kill_be SUFFIX: with Tally, BE is killed (-9) in the middle of HP's run;
# HP must finish and report. (This check and kill_hp's use hp-serve and
# be10: they run only without HP_MODEL, with be10 among BE_CONFS.)
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
  "${ENVP_HP[@]}" "${HPCMD[@]}" --rate "$RATE" --duration "$KILL_S" --csv "$L/$name.hp.csv" \
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
  "${ENVP_HP[@]}" "${HPCMD[@]}" --rate "$RATE" --duration 600 >"$L/$name.hp.log" 2>"$L/$name.hp.err" &
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
say "HP $HP_NAME; BE ${confs[*]}; systems ${systems[*]}"
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  echo "device: $(nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv,noheader | head -1)"
  echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  echo "host: $(uname -r), $(nproc) cores"
  if [[ -n $PY ]]; then
    echo "python: $PY, $("$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1); workloads from $TORCH"
  fi
  [[ -d /tmp/nvidia-mps ]] && echo "warning: /tmp/nvidia-mps exists: is a system MPS daemon running?"
} >"$L/device.txt"
cat "$L/device.txt"

say "HP alone, closed loop (capacity)"
hp_cmd alone alone-closed
timeout -k 5 $((CAP_S + SLACK)) "${HPCMD[@]}" --rate 0 --duration "$CAP_S" --csv "$L/alone-closed.hp.csv" \
  >"$L/alone-closed.hp.log" 2>"$L/alone-closed.hp.err" ||
  die "$HP_NAME failed: $(tail -n 20 "$L/alone-closed.hp.err")"
CAP=$(awk '/^hp: capacity/ { print $3 }' "$L/alone-closed.hp.log")
[[ -n $CAP ]] || die "$HP_NAME printed no capacity (see $L/alone-closed.hp.log)"
RATE=$(calc "$CAP * $HP_LOAD")
grep '^hp: requests' "$L/alone-closed.hp.log"
echo "   capacity $CAP req/s; Poisson rate $RATE req/s (HP_LOAD $HP_LOAD)"
run_row alone-closed none "" "$L/alone-closed.hp.csv" "" "" "" "" "closed loop: capacity $CAP req/s"
if ((torch_hp)); then
  hpdesc="$HP_NAME (PyTorch eager, bf16, batch 1)"
else
  hpdesc="$HP_KERNELS kernels of one wave of $HP_BLOCK_US us blocks per request, $HP_ARRIVAL between requests"
fi
{
  echo "hp: $hpdesc; capacity $CAP req/s (closed loop, alone); Poisson at $RATE req/s ($HP_LOAD of capacity), $HP_S s per run"
  ((torch_hp)) && grep -m1 '^hp: settings' "$L/alone-closed.hp.log" | sed 's/^hp: settings /hp settings: /'
  echo "timing: lead $LEAD s, BE alone $BE_S s, kill checks $KILL_S s"
  echo "systems: ${systems[*]}; BE: ${confs[*]}"
  for v in "${variant_names[@]}"; do echo "system tally-mps+$v: tally-mps with ${VARIANT_ENV[$v]}"; done
} >>"$L/device.txt"

hp_alone alone
((any_tally)) && hp_alone tally-alone

say "BE calibration"
declare -A WORK BLOCK=([be10]=10 [be100]=100 [gpt]=gpt [torch]=torch [triton]=triton)
for conf in be10 be100; do
  "$R/be-spin" --calibrate --block-us "${BLOCK[$conf]}" >"$L/calibrate-$conf.log" 2>&1 ||
    die "be-spin --calibrate failed: $(errtail "$L/calibrate-$conf.log")"
  WORK[$conf]=$(awk '/^be: work/ { print $3; exit }' "$L/calibrate-$conf.log")
  [[ -n ${WORK[$conf]} ]] || die "be-spin --calibrate printed no work (see $L/calibrate-$conf.log)"
  echo "   $conf: $(head -1 "$L/calibrate-$conf.log")"
  echo "be $conf: $(head -1 "$L/calibrate-$conf.log")" >>"$L/device.txt"
done

# BE triton's kernels are compiled once, before any run.
if has_conf triton && ! triton_warm; then
  keep=()
  for c in "${confs[@]}"; do [[ $c == triton ]] || keep+=("$c"); done
  confs=("${keep[@]}")
fi
# A BE workload that fails alone is left out of the rest (be-spin's: the
# runs beside HP need its checksum, so the benchmark stops).
for conf in "${confs[@]}"; do
  if be_alone be-alone "$conf"; then
    [[ $conf != torch ]] ||
      grep -m1 '^be: settings' "$L/be-alone-torch.be.log" | sed 's/^be: settings /be torch: /' >>"$L/device.txt"
    continue
  fi
  [[ $conf == gpt || $conf == torch || $conf == triton ]] || die "BE alone ($conf) failed: the runs beside HP need its checksum"
  keep=()
  for c in "${confs[@]}"; do [[ $c == "$conf" ]] || keep+=("$c"); done
  confs=("${keep[@]}")
done
if ((any_tally)); then
  for conf in "${confs[@]}"; do be_alone tally-be-alone "$conf"; done
fi

for sys in timeslice streams tally; do
  want "$sys" || continue
  for conf in "${confs[@]}"; do
    if [[ $sys == streams ]] && ! streams_form "$conf"; then
      say "$sys-$conf: left out (no one-process form of $HP_NAME beside $conf)"
      continue
    fi
    colo "$sys" "$conf"
  done
done
# The kill checks use hp-serve and be10 (and be10's checksum).
kill_ok=0
((!torch_hp)) && has_conf be10 && kill_ok=1
if want tally; then
  if ((kill_ok)); then
    kill_be ""
    kill_hp ""
  else
    check "kill checks" SKIP "they need hp-serve as HP (no HP_MODEL) and be10 among BE_CONFS"
  fi
fi

if ((!any_mps)); then
  :
elif ((!have_mps)); then
  check "MPS" FAIL "nvidia-cuda-mps-control not found: no MPS runs"
else
  say "MPS: a daemon with private pipe and log folders under /tmp"
  if ! mps_start; then
    check "MPS" FAIL "the MPS daemon did not start or serve a client (see above): no MPS runs"
    mps_stop
  else
    # With HP_MODEL no HP alone under MPS: the time budget (see the timings).
    ((torch_hp)) || hp_alone mps-alone
    for sys in mps mps-prio tally-mps; do
      want "$sys" || continue
      for conf in "${confs[@]}"; do
        ((quick)) && [[ $conf == gpt ]] && continue
        colo "$sys" "$conf"
        if [[ $sys == tally-mps ]]; then
          for v in "${variant_names[@]}"; do colo_variant "$v" "$conf"; done
        fi
      done
    done
    if ((!quick && kill_ok)) && want tally-mps; then
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
# The plots, with the first Python that has matplotlib (not counted among
# the failures: they are drawn from the report's files).
if [[ -f $OUT/colocate.csv ]]; then
  plot_py=
  for c in python3 ${PY:+"$PY"} /opt/torch/.venv/bin/python; do
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import matplotlib' >/dev/null 2>&1; then
      plot_py=$c
      break
    fi
  done
  echo
  if [[ -z $plot_py ]]; then
    echo "gpu-colocate: no plots: no Python here imports matplotlib (later, elsewhere: scripts/colocate-plots.py $OUT)"
  elif ! "$plot_py" "$src/scripts/colocate-plots.py" "$OUT"; then
    echo "gpu-colocate: warning: scripts/colocate-plots.py failed (not counted as a failure)" >&2
  fi
fi
echo
echo "co-location failures: $fails (logs in $L)"
exit $((fails != 0))
