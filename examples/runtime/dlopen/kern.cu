// kern.cu - libkern.so: two kernels and an extern "C" host function that
// launches them through the CUDA runtime API, for a program that dlopen()s
// the library (dlopen-main.cpp).
//
// It exercises kernels that live in a shared library loaded after the
// program started: the library carries its own copy of the static CUDA
// runtime (nvcc's default, -cudart static), whose constructors register the
// library's fatbin when dlopen() runs it and whose destructors unregister it
// at dlclose(), so the runtime sees modules come and go within one process.
// The static runtime is the choice that works with nothing else to ship: the
// main program need not link any CUDA runtime, and the library finds the
// driver by itself. (-cudart shared works too, with libcudart.so.13 on the
// loader's path.)
//
// Build: nvcc -arch=sm_90a -shared -Xcompiler -fPIC kern.cu -o libkern.so
//        tally-opt libkern.so -o libkern.tally.so
#include "../common.h"

#include <vector>

// Integer histogram: per-block counts in shared memory, then added to the
// global bins with integer atomics (the totals do not depend on order).
__global__ void histogram(const uint32_t *in, unsigned *bins, int n) {
  __shared__ unsigned local[256];
  local[threadIdx.x] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += blockDim.x * 64)
    atomicAdd(&local[(in[i] >> 7) & 255], 1u);
  __syncthreads();
  if (local[threadIdx.x])
    atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}

// A 1-D 3-point stencil iterated in registers; launched repeatedly,
// ping-ponging between two buffers.
__global__ void smooth(const uint32_t *in, uint32_t *out, int n,
                       uint32_t round) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  uint32_t l = in[i > 0 ? i - 1 : n - 1], c = in[i],
           r = in[i + 1 < n ? i + 1 : 0];
  uint32_t v = (l >> 1) + c + (r << 1) + round;
  for (int k = 0; k < 24; ++k)
    v = v * 2654435761u + (v >> 13);
  out[i] = v;
}

#define RCHECK(call)                                                           \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "libkern: %s failed: %s\n", #call,                  \
                   cudaGetErrorString(e_));                                    \
      return 1;                                                                \
    }                                                                          \
  } while (0)

// Runs the kernels over `n` elements seeded by `seed`; hashes[0] gets the
// smoothed data's FNV-1a 64, hashes[1] the histogram's. 0 on success.
extern "C" int kern_run(int n, uint32_t seed, uint64_t hashes[2]) {
  const int threads = 256, blocks = (n + threads - 1) / threads;
  std::vector<uint32_t> h(n);
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    h[i] = seed;
  }
  uint32_t *a, *b;
  unsigned *bins;
  cudaStream_t s;
  RCHECK(cudaStreamCreate(&s));
  RCHECK(cudaMalloc(&a, n * sizeof(uint32_t)));
  RCHECK(cudaMalloc(&b, n * sizeof(uint32_t)));
  RCHECK(cudaMalloc(&bins, 256 * sizeof(unsigned)));
  RCHECK(cudaMemcpyAsync(a, h.data(), n * sizeof(uint32_t),
                         cudaMemcpyHostToDevice, s));
  RCHECK(cudaMemsetAsync(bins, 0, 256 * sizeof(unsigned), s));
  for (uint32_t r = 0; r < 8; ++r) {
    smooth<<<blocks, threads, 0, s>>>(a, b, n, r);
    RCHECK(cudaGetLastError());
    std::swap(a, b);
  }
  histogram<<<64, 256, 0, s>>>(a, bins, n);
  RCHECK(cudaGetLastError());
  // The same on the legacy default stream, which waits for s.
  histogram<<<64, 256>>>(a, bins, n);
  RCHECK(cudaGetLastError());
  std::vector<unsigned> hb(256);
  RCHECK(cudaMemcpy(h.data(), a, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  RCHECK(cudaMemcpy(hb.data(), bins, 256 * sizeof(unsigned),
                    cudaMemcpyDeviceToHost));
  hashes[0] = fnv1a(h.data(), n * sizeof(uint32_t));
  hashes[1] = fnv1a(hb.data(), 256 * sizeof(unsigned));
  RCHECK(cudaFree(a));
  RCHECK(cudaFree(b));
  RCHECK(cudaFree(bins));
  RCHECK(cudaStreamDestroy(s));
  return 0;
}
