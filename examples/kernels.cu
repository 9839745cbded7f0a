// kernels.cu - small CUDA kernels used by the README's demo command.
//
// saxpy: a grid-stride loop with an early return for idle threads.
// block_sum: a shared-memory tree reduction with __syncthreads() and a
//            __syncthreads_or() that lets blocks with only zeros skip work.
#include <cstdint>

extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  for (; i < n; i += gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i];
}

extern "C" __global__ void block_sum(const float *in, float *out, int n) {
  extern __shared__ float partial[];
  unsigned t = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x + t;
  float v = i < n ? in[i] : 0.0f;
  partial[t] = v;
  if (!__syncthreads_or(v != 0.0f)) {
    if (t == 0)
      out[blockIdx.x] = 0.0f;
    return;
  }
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s)
      partial[t] += partial[t + s];
    __syncthreads();
  }
  if (t == 0)
    out[blockIdx.x] = partial[0];
}
