// driver-kernels.cu - the kernels of driver-api.cpp, compiled to a fatbin
// (extern "C": the driver looks them up by these names):
//   nvcc -fatbin -gencode arch=compute_90a,code=[sm_90a,compute_90a] \
//     driver-kernels.cu
//   tally-opt driver-kernels.fatbin -o driver-kernels.tally.fatbin
#include <cstdint>

extern "C" __global__ void fill_pattern(uint32_t *out, uint32_t seed, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  uint32_t v = seed ^ (uint32_t)i * 0x9e3779b9u;
  for (int r = 0; r < 32; ++r) {
    v ^= v >> 15;
    v *= 0x2c1b3c6du;
    v ^= v >> 12;
  }
  out[i] = v;
}

// Element-wise float work (exact bits are reproducible): y = a * x + y,
// iterated.
extern "C" __global__ void mad_chain(float *y, const float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float v = y[i], u = x[i];
  for (int r = 0; r < 64; ++r)
    v = fmaf(a, u, v) * 0.5f;
  y[i] = v;
}

// A 2-D grid with dynamic shared memory (blockDim.x words): the wrapped
// integer sum of each block's slice, in a fixed tree order.
extern "C" __global__ void block_sums_dyn(const uint32_t *in, uint32_t *out,
                                          int n) {
  extern __shared__ uint32_t sh[];
  int block = blockIdx.y * gridDim.x + blockIdx.x;
  int t = threadIdx.x, i = block * blockDim.x + t;
  sh[t] = i < n ? in[i] : 0u;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (t < o)
      sh[t] = sh[t] * 31u + sh[t + o];
    __syncthreads();
  }
  if (t == 0)
    out[block] = sh[0];
}

// Integer histogram with integer atomics: the counts do not depend on order.
extern "C" __global__ void histogram(const uint32_t *in, unsigned *bins,
                                     int n) {
  __shared__ unsigned local[256];
  local[threadIdx.x] = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    atomicAdd(&local[in[i] >> 24], 1u);
  __syncthreads();
  if (local[threadIdx.x])
    atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}
