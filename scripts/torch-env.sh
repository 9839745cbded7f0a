# shellcheck shell=bash disable=SC2034  # PY and TORCH are set for the sourcing script
# torch-env.sh - sourced by the GPU scripts that run benchmarks/torch.
# torch_python: sets PY to the Python that imports torch with CUDA: PYTHON if
# set, else the first of /opt/torch/.venv/bin/python and python3 on PATH;
# returns 1 (PY empty) when none does.
# torch_dir R SRC: sets TORCH to the folder holding serve.py, train.py,
# streams.py and workloads.py: R/torch (copied by prepare-device.sh), else
# SRC/benchmarks/torch; returns 1 (TORCH empty) when neither has them.

torch_python() {
  local cands c
  if [[ -n ${PYTHON:-} ]]; then
    cands=("$PYTHON")
  else
    cands=(/opt/torch/.venv/bin/python python3)
  fi
  PY=
  for c in "${cands[@]}"; do
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
      PY=$(command -v "$c")
      return 0
    fi
  done
  return 1
}

torch_dir() {
  local d
  TORCH=
  for d in "$1/torch" "$2/benchmarks/torch"; do
    if [[ -f $d/serve.py && -f $d/train.py && -f $d/streams.py && -f $d/workloads.py ]]; then
      TORCH=$d
      return 0
    fi
  done
  return 1
}
