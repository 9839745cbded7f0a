#!/usr/bin/env bash
# dump-stuck.sh - what a process that does not end when asked is doing, for
# the record before it is killed (gpu-colocate.sh's stop_be, be-hang.sh):
# the Tally segments (tally status), its and its children's threads with
# their states and kernel wait channels, a gdb backtrace where gdb is, the
# GPU's processes. Writes to stdout; never waits long (timeouts on the
# tools that could hang).
# Usage: scripts/debug/dump-stuck.sh TALLY PID [tally status options...]
set -u
[[ $# -ge 2 ]] || { echo "usage: dump-stuck.sh TALLY PID [status options...]" >&2; exit 1; }
tally=$1 pid=$2
shift 2
echo "== $(date -u '+%H:%M:%S') tally status"
timeout 10 "$tally" status "$@" 2>&1
# tally run execs the program, so PID is the program; its children too.
for p in $pid $(pgrep -P "$pid" 2>/dev/null); do
  echo "== pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
  [[ -d /proc/$p/task ]] || { echo "(gone)"; continue; }
  for task in /proc/"$p"/task/*; do
    echo "$(basename "$task") $(awk '{print $3}' "$task/stat" 2>/dev/null)" \
      "$(cat "$task/comm" 2>/dev/null) wchan=$(cat "$task/wchan" 2>/dev/null)"
  done
  command -v gdb >/dev/null && timeout 60 gdb -p "$p" -batch -ex "thread apply all bt 30" 2>&1 | tail -200
done
echo "== nvidia-smi"
timeout 20 nvidia-smi 2>&1 | tail -15
exit 0
