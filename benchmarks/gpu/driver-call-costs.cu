// driver-call-costs.cu - the host time of the driver calls an announced HP
// launch makes (docs/runtime.md, "Limits": what an HP launch costs a
// launch-bound service), each measured beside a stream of tiny kernels as
// a launch-bound program makes them:
//   launch          cuLaunchKernel alone
//   +iscapturing    and cuStreamIsCapturing on its stream
//   +ctxcurrent     and cuCtxGetCurrent
//   +event          and cuEventRecord of one reused event on its stream
//   +wait           and cuStreamWaitEvent of a second stream on that event
//   +write-side     and cuStreamWriteValue64 on the second stream (the
//                   runtime's default completion path, all three calls)
//   +write-own      cuLaunchKernel and cuStreamWriteValue64 on its own stream
// Prints the median over 9 repetitions of the time per iteration, in us.
// Build: nvcc -O2 -std=c++17 -arch=sm_90a driver-call-costs.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    CUresult e = (x);                                                          \
    if (e != CUDA_SUCCESS) {                                                   \
      const char *s = nullptr;                                                 \
      cuGetErrorString(e, &s);                                                 \
      std::fprintf(stderr, "%s: %s\n", #x, s ? s : "?");                       \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

__global__ void tiny(float *x) { x[threadIdx.x] += 1.0f; }

int main(int argc, char **argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  if (n < 1)
    n = 20000;
  float *x;
  if (cudaMalloc(&x, 128 * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "driver-call-costs: no GPU\n");
    return 1;
  }
  cudaMemset(x, 0, 128 * sizeof(float));
  CUcontext ctx;
  CK(cuCtxGetCurrent(&ctx));
  CUstream s, side;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  CUfunction f;
  CK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t *>(&f),
                         reinterpret_cast<const void *>(tiny)) == cudaSuccess
         ? CUDA_SUCCESS
         : CUDA_ERROR_UNKNOWN);
  CUevent ev;
  CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr word;
  CK(cuMemAlloc(&word, 8));
  void *args[] = {&x};
  const char *names[] = {"launch",     "+iscapturing", "+ctxcurrent", "+event",
                         "+wait",      "+write-side",  "+write-own"};
  for (int variant = 0; variant < 7; ++variant) {
    std::vector<double> us;
    for (int rep = 0; rep < 10; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) {
        CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr));
        if (variant == 6) {
          CK(cuStreamWriteValue64(s, word, i, 0));
          continue;
        }
        CUstreamCaptureStatus st;
        if (variant >= 1)
          CK(cuStreamIsCapturing(s, &st));
        CUcontext c;
        if (variant >= 2)
          CK(cuCtxGetCurrent(&c));
        if (variant >= 3)
          CK(cuEventRecord(ev, s));
        if (variant >= 4)
          CK(cuStreamWaitEvent(side, ev, 0));
        if (variant >= 5)
          CK(cuStreamWriteValue64(side, word, i, 0));
      }
      CK(cuStreamSynchronize(s));
      CK(cuStreamSynchronize(side));
      auto t1 = std::chrono::steady_clock::now();
      if (rep) // the first is a warm-up
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
    }
    std::sort(us.begin(), us.end());
    std::printf("%-14s %.3f us per iteration (median of 9, %d iterations each)\n",
                names[variant], us[us.size() / 2], n);
  }
  return 0;
}
