// runtime-launch-overhead.cu - a launch-bound program: many short kernels
// on one stream (what a latency-critical service looks like to the
// runtime). Run plain and under `tally run --priority=high`: the
// difference is the runtime's cost per launch (interception, the handle
// lookup, the choice of form). Built from an object tally-opt rewrote, so
// the kernels have variants and the runtime reads their metadata.
// Prints the median over 9 repetitions of the time per launch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));             \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

__global__ void tiny_a(float *x) { x[threadIdx.x] += 1.0f; }
__global__ void tiny_b(float *x, float s) { x[threadIdx.x] *= s; }

int main(int argc, char **argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  float *x;
  CK(cudaMalloc(&x, 128 * sizeof(float)));
  CK(cudaMemset(x, 0, 128 * sizeof(float)));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  for (int i = 0; i < 1000; ++i)
    tiny_a<<<1, 32, 0, s>>>(x);
  CK(cudaStreamSynchronize(s));
  std::vector<double> us;
  for (int rep = 0; rep < 9; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      if (i & 1)
        tiny_b<<<1, 32, 0, s>>>(x, 1.0f);
      else
        tiny_a<<<1, 32, 0, s>>>(x);
    }
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
  }
  std::sort(us.begin(), us.end());
  std::printf("launch-bound: %d launches x 9: median %.3f us per launch (min %.3f, max %.3f)\n", n,
              us[4], us[0], us[8]);
  return 0;
}
