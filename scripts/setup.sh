#!/usr/bin/env bash
# setup.sh - install everything Tally needs to build and test on a fresh Debian 12
# machine. Idempotent: packages already present are skipped. Needs root for apt-get.
set -euo pipefail

PKGS=(
  cmake ninja-build g++ python3 python3-yaml
  llvm-22-dev llvm-22-tools
  libcli11-dev libyaml-cpp-dev libzstd-dev liblz4-dev
  libgtest-dev libbenchmark-dev
  clang-22 libclang-rt-22-dev
  shellcheck
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

if ! command -v ptxas >/dev/null 2>&1 && [[ ! -x /usr/local/cuda/bin/ptxas ]]; then
  echo "setup: warning: ptxas (CUDA toolkit) not found; corpus tests will be skipped" >&2
fi
