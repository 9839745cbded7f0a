// app.cu - a small CUDA program built the usual way (runtime API, static
// cudart). Used to check that programs whose fatbin tally-opt rewrote
// still run and compute the same: it prints checksums of two kernels.
#include <cstdio>
#include <vector>

__global__ void saxpy(int n, float a, const float *x, float *y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i];
}

__global__ void block_sum(const int *in, int *out, int n) {
  __shared__ int s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0;
  __syncthreads();
  for (int o = 128; o > 0; o >>= 1) {
    if (threadIdx.x < o)
      s[threadIdx.x] += s[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = s[0];
}

int main() {
  const int n = 1 << 20, blocks = (n + 255) / 256;
  std::vector<float> x(n), y(n);
  std::vector<int> v(n), sums(blocks);
  for (int i = 0; i < n; ++i) {
    x[i] = (i % 97) * 0.25f;
    y[i] = (i % 13) * 0.5f;
    v[i] = i % 1000;
  }
  float *dx, *dy;
  int *dv, *ds;
  cudaMalloc(&dx, n * 4);
  cudaMalloc(&dy, n * 4);
  cudaMalloc(&dv, n * 4);
  cudaMalloc(&ds, blocks * 4);
  cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dy, y.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v.data(), n * 4, cudaMemcpyHostToDevice);
  saxpy<<<120, 256>>>(n, 2.0f, dx, dy);
  block_sum<<<blocks, 256>>>(dv, ds, n);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(sums.data(), ds, blocks * 4, cudaMemcpyDeviceToHost);
  double sy = 0;
  long long ss = 0;
  for (float f : y)
    sy += f;
  for (int s : sums)
    ss += s;
  std::printf("saxpy checksum %.3f, block_sum checksum %lld\n", sy, ss);
  return 0;
}
