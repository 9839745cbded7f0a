#!/usr/bin/env python3
"""cupy_ptx.py - CuPy kernels compiled at run time, for Tally's run-time PTX.

CuPy compiles every kernel it runs with NVRTC when it is first needed: the
user's RawKernel, ElementwiseKernel and ReductionKernel, and its own
element-wise and reduction operators. With CUPY_COMPILE_WITH_PTX=1 it
compiles to PTX and loads that with cuModuleLoadData, which libtally
intercepts (`tally run --runtime-ptx=on`, docs/ptx-cache.md). This program
sets that variable, and CUPY_ACCELERATORS="" so reductions are CuPy's own
kernels rather than CUB's precompiled ones, unless the caller set them.

It runs a fixed set of kernels ITERS times on inputs made on the GPU from
the iteration number (no cuRAND) and prints one line per kernel and
iteration: the kernel's name and a SHA-256 prefix of its output's bytes.
Two runs print the same lines exactly when every kernel computed the same
bits, whatever form (original, sliced, preempted PTB) it ran in. Kernels:
  mix        RawKernel, 1-D grid, early return past the end
  blocksum   RawKernel, shared-memory tree reduction with __syncthreads
             (threads that left early never reach a barrier)
  transpose  RawKernel, 2-D grid of 32x8 blocks, a shared tile
  poly       ElementwiseKernel
  isum       ReductionKernel over int64 (exact)
  builtins   cp.sin, cp.sum (float32) and cp.cumsum (int64), CuPy's own

Usage: cupy_ptx.py [--iters N] [--n ELEMENTS]
"""
import argparse
import hashlib
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--n", type=int, default=1 << 20)
    a = ap.parse_args()
    os.environ.setdefault("CUPY_COMPILE_WITH_PTX", "1")
    os.environ.setdefault("CUPY_ACCELERATORS", "")
    try:
        import cupy as cp
    except ImportError:
        print("cupy_ptx: error: CuPy is not installed", file=sys.stderr)
        return 2

    mix = cp.RawKernel(r"""
extern "C" __global__ void mix(const float *a, const float *b, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = a[i] * b[i] + (float)(i % 7);
}""", "mix")

    blocksum = cp.RawKernel(r"""
extern "C" __global__ void blocksum(const unsigned *in, unsigned long long *out, int n) {
  __shared__ unsigned long long s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  out[blockIdx.x] = s[0] * (blockIdx.x + 1);
}""", "blocksum")

    transpose = cp.RawKernel(r"""
extern "C" __global__ void transpose(const float *in, float *out, int rows, int cols) {
  __shared__ float tile[32][33];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x;
  y = blockIdx.x * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}""", "transpose")

    poly = cp.ElementwiseKernel("float32 x, float32 z", "float32 y",
                                "y = x * x * 0.5f + z * 3.0f - 1.0f", "tally_poly")
    isum = cp.ReductionKernel("int64 x", "int64 y", "x * x", "a + b", "y = a", "0",
                              "tally_isum")

    n = a.n
    rows, cols = 800, 1000  # not multiples of the tile: edge blocks
    threads = 256
    blocks = (n + threads - 1) // threads

    def digest(arr):
        return hashlib.sha256(cp.asnumpy(arr).tobytes()).hexdigest()[:16]

    for it in range(a.iters):
        idx = cp.arange(n, dtype=cp.int64)
        x = ((idx * 37 + it * 11) % 1009).astype(cp.float32) * cp.float32(0.001)
        y = ((idx * 53 + it * 7) % 997).astype(cp.float32) * cp.float32(0.002)
        out = cp.empty_like(x)
        mix((blocks,), (threads,), (x, y, out, cp.int32(n)))
        print(f"{it} mix {digest(out)}")

        u = ((idx * 2654435761 + it) % (1 << 31)).astype(cp.uint32)
        sums = cp.zeros(blocks, dtype=cp.uint64)
        blocksum((blocks,), (threads,), (u, sums, cp.int32(n)))
        print(f"{it} blocksum {digest(sums)}")

        m = x[: rows * cols].reshape(rows, cols) + cp.float32(it)
        t = cp.empty((cols, rows), dtype=cp.float32)
        transpose(((cols + 31) // 32, (rows + 31) // 32), (32, 8),
                  (m, t, cp.int32(rows), cp.int32(cols)))
        print(f"{it} transpose {digest(t)}")

        print(f"{it} poly {digest(poly(x, y))}")
        print(f"{it} isum {int(isum(idx % (1000 + it)))}")
        print(f"{it} builtins {digest(cp.sin(x))} {float(cp.sum(y)).hex()} "
              f"{digest(cp.cumsum(idx % 5))}")
    cp.cuda.runtime.deviceSynchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
