// hp-launch-bench.cpp - what libtally adds to a high-priority process's
// requests on the host, without a GPU: requests of one kernel launch and a
// cuStreamSynchronize (hp-serve's shape), made against the fake driver of
// the runtime tests (test/unit/Runtime/FakeDriver.cpp) with libtally.so
// preloaded in front of it. The time per request holds the fake's work
// too (it logs every call), also for the calls libtally adds; the script
// counts libtally's own part with perf: its interception, the announcement
// in the shared segment, the completion path (an event per launch and a
// write at the wait, in bursts), the wait-share bookkeeping at the wait.
// (The real driver's cost of the calls libtally adds is not in it:
// gpu-hp-overhead.sh measures the whole on a GPU.)
//
// Usage: tally-hp-launch-bench [--requests N] [--batches B]
// Prints the median, over B batches, of the nanoseconds per request, and
// the tenth and ninetieth percentile of the batches. Run under different
// settings by scripts/bench-hp-launch.sh.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {
void *fake_add_module(int Library);
void *fake_add_kernel(void *M, const char *Name, int Kind, const size_t *Layout, size_t N,
                      size_t SliceOffsetAt, size_t GridAt, size_t CtrlAt, size_t ChunkAt);
}

int main(int Argc, char **Argv) {
  long Requests = 20000, Batches = 15;
  for (int I = 1; I < Argc; ++I) {
    std::string A = Argv[I];
    auto Value = [&](long &V) {
      if (I + 1 >= Argc || (V = std::strtol(Argv[I + 1], nullptr, 10)) <= 0) {
        std::fprintf(stderr, "hp-launch-bench: %s takes a positive number\n", A.c_str());
        std::exit(1);
      }
      ++I;
    };
    if (A == "--requests")
      Value(Requests);
    else if (A == "--batches")
      Value(Batches);
    else if (A == "--help" || A == "-h") {
      std::printf("usage: tally-hp-launch-bench [--requests N] [--batches B]\n"
                  "  requests of one launch and a stream synchronize against the fake\n"
                  "  driver; nanoseconds per request, median of B batches of N\n");
      return 0;
    } else {
      std::fprintf(stderr, "hp-launch-bench: unknown argument %s (--help)\n", A.c_str());
      return 1;
    }
  }
  // The runtime tests' kernel shape: k(int *out, int n), no variants (an HP
  // process launches its kernels unchanged).
  static const size_t Layout[] = {0, 8, 8, 4};
  void *M = fake_add_module(0);
  auto K = static_cast<CUfunction>(fake_add_kernel(M, "hp_k", 0, Layout, 2, 0, 0, 0, 0));
  CUstream S = nullptr;
  // A stream of its own, as hp-serve's (the fake has no cuStreamCreate).
  if (cuStreamCreateWithPriority(&S, CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "hp-launch-bench: cuStreamCreateWithPriority failed\n");
    return 1;
  }
  std::vector<int> Out(32);
  int *P = Out.data();
  int N = static_cast<int>(Out.size());
  void *Args[] = {&P, &N};
  auto Batch = [&](long Count) {
    auto T0 = std::chrono::steady_clock::now();
    for (long R = 0; R < Count; ++R) {
      if (cuLaunchKernel(K, 1, 1, 1, 32, 1, 1, 0, S, Args, nullptr) != CUDA_SUCCESS ||
          cuStreamSynchronize(S) != CUDA_SUCCESS) {
        std::fprintf(stderr, "hp-launch-bench: a request failed\n");
        std::exit(1);
      }
    }
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - T0)
               .count() /
           double(Count);
  };
  Batch(Requests / 10 + 1); // warm: the runtime joins the segment at its first launch
  std::vector<double> Ns;
  for (long B = 0; B < Batches; ++B)
    Ns.push_back(Batch(Requests));
  std::sort(Ns.begin(), Ns.end());
  std::printf("hp-launch-bench: %ld batches of %ld requests: median %.1f ns per request "
              "(p10 %.1f, p90 %.1f)\n",
              Batches, Requests, Ns[Ns.size() / 2], Ns[Ns.size() / 10],
              Ns[(Ns.size() * 9) / 10]);
  return 0;
}
