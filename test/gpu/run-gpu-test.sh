#!/usr/bin/env bash
# Runs tally-gpu-test, or reports a skip (exit 77) where this machine has no
# NVIDIA driver (the binary needs libcuda.so.1 to start).
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' && [[ ! -e /dev/nvidiactl ]]; then
  echo "SKIP: no NVIDIA driver on this machine (GPU tests run on the GPU machine: scripts/gpu.sh)"
  exit 77
fi
exec "$@"
