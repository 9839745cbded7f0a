// runtime-forms.cu - the same kernels launched by a plain program, timed
// with CUDA events around each launch (median of 50 after warm-up). Run
// plain, under `tally run --force=ptb` and `--force=slice`: the ratios are
// the cost of each form through the runtime (compare with the harness's
// tally-gpu-test --bench). Under `--preempt=random:N --stats=F` the
// statistics hold the preemption latency through the runtime.
// Also prints a checksum of the outputs (identical in every form).
#include <algorithm>
#include <cstdint>
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

// Each block iterates `iters` dependent FMAs per thread: block duration
// grows with iters (about 1 us per 1000 on an H100).
__global__ void spin_blocks(const float *in, float *out, int iters) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = in[i];
  for (int k = 0; k < iters; ++k)
    v = v * 0.999f + 0.001f;
  out[i] = v;
}

// A memory-bound kernel with ~1 us blocks.
__global__ void scale_add(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    c[i] = 2.0f * a[i] + b[i];
}

static uint64_t fnv(const std::vector<float> &v) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char *p = reinterpret_cast<const unsigned char *>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

template <typename F> double median_us(F launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i)
    launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 50; ++i) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1000.0;
}

int main() {
  const int blocks = 4096, threads = 256, n = blocks * threads;
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i)
    h[i] = float((i * 2654435761u) % 1000) / 1000.0f;
  float *a, *b, *c, *d;
  CK(cudaMalloc(&a, n * 4));
  CK(cudaMalloc(&b, n * 4));
  CK(cudaMalloc(&c, n * 4));
  CK(cudaMalloc(&d, n * 4));
  CK(cudaMemcpy(a, h.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b, h.data(), n * 4, cudaMemcpyHostToDevice));
  struct Case {
    const char *name;
    int iters;
  } cases[] = {{"spin_blocks 2us", 2000}, {"spin_blocks 20us", 20000}};
  for (const Case &cs : cases) {
    double t = median_us([&] { spin_blocks<<<blocks, threads>>>(a, c, cs.iters); });
    std::printf("kernel %-18s %5d blocks: median %9.1f us\n", cs.name, blocks, t);
  }
  double t = median_us([&] { scale_add<<<blocks, threads>>>(a, b, d, n); });
  std::printf("kernel %-18s %5d blocks: median %9.1f us\n", "scale_add", blocks, t);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> oc(n), od(n);
  CK(cudaMemcpy(oc.data(), c, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(od.data(), d, n * 4, cudaMemcpyDeviceToHost));
  std::printf("checksum %016llx %016llx\n", (unsigned long long)fnv(oc), (unsigned long long)fnv(od));
  return 0;
}
