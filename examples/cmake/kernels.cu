// kernels.cu - kernels of the CMake example, with a host function that runs
// them (the only thing main.cpp sees).
#include <cstdio>

__global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] *= a;
}

__global__ void block_max(const float *x, float *out, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : -1e30f;
  __syncthreads();
  for (int o = 128; o > 0; o >>= 1) {
    if (threadIdx.x < o)
      s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + o]);
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = s[0];
}

int run_example() {
  const int n = 4096, blocks = n / 256;
  float *x, *m;
  if (cudaMalloc(&x, n * 4) != cudaSuccess || cudaMalloc(&m, blocks * 4) != cudaSuccess) {
    std::printf("no GPU: the program built, nothing to run\n");
    return 0;
  }
  float h[n];
  for (int i = 0; i < n; ++i)
    h[i] = (i * 37 % 101) * 0.5f;
  cudaMemcpy(x, h, sizeof(h), cudaMemcpyHostToDevice);
  scale<<<blocks, 256>>>(x, 2.0f, n);
  block_max<<<blocks, 256>>>(x, m, n);
  float hm[blocks];
  cudaMemcpy(hm, m, sizeof(hm), cudaMemcpyDeviceToHost);
  float best = 0;
  for (float v : hm)
    best = v > best ? v : best;
  std::printf("max %.1f\n", best);
  return 0;
}
