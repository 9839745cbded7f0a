//===- suite-host.cu - run the GPU kernel suite through the runtime API ---===//
//
// Usage: suite-host [--scale N]
//
// Runs every kernel of examples/gpu/suite.cu with the launch shapes,
// buffers and arguments of suite() in test/gpu/gpu-test.cpp, but as a plain
// CUDA runtime-API program (kernels launched with <<<>>>, static cudart), so
// that the Tally runtime (libtally.so, LD_PRELOAD) can run it with the
// variants tally-opt added in place of the originals. For each kernel it
// prints `NAME HASH...`, the FNV-1a 64 of each output buffer, and at the end
// `suite-host: N kernels`. The output depends on nothing but the kernels'
// results, so a plain run and a run under the runtime (PTB variants,
// preempted at random) must print byte-identical text.
//
// Each kernel runs twice: inputs reset and outputs poisoned (0xCD bytes),
// launch, outputs copied back, all asynchronously on one stream; then the
// same on a second stream ordered behind the first by an event. The streams
// rotate through the legacy default stream, a created blocking stream, a
// created non-blocking stream and cudaStreamPerThread. The two runs must
// agree.
//
// Build (sm_90a, for wgmma_tile and bulk_copy):
//   nvcc -std=c++17 -diag-suppress 20054,550 -arch=sm_90a -c suite-host.cu -o suite-host.o
//   tally-opt -q suite-host.o -o suite-host.tally.o
//   nvcc -arch=sm_90a suite-host.tally.o -o suite-host
//
// Exits 1 on any CUDA error or a disagreement between the two runs.
//
//===----------------------------------------------------------------------===//

#include "suite.cu"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string &Msg) {
  std::fprintf(stderr, "suite-host: error: %s\n", Msg.c_str());
  std::exit(1);
}

void check(cudaError_t R, const char *What, int Line) {
  if (R == cudaSuccess)
    return;
  die(std::string(What) + " (line " + std::to_string(Line) + "): " + cudaGetErrorName(R) +
      " (" + cudaGetErrorString(R) + ")");
}
#define CK(call) check((call), #call, __LINE__)
/// A launch is checked at once; its completion at the next synchronisation.
#define CK_LAUNCH() CK(cudaGetLastError())

uint64_t fnv1a64(const void *Data, size_t Bytes) {
  const unsigned char *P = static_cast<const unsigned char *>(Data);
  uint64_t H = 0xcbf29ce484222325ull;
  for (size_t I = 0; I < Bytes; ++I) {
    H ^= P[I];
    H *= 0x100000001b3ull;
  }
  return H;
}

// Buffers as in gpu-test.cpp: 32-bit words, initialised randomly, to zero,
// or poisoned; outputs are hashed after the run.
enum class Init { Random, Zero, Poison };
/// F16X2: two halves per word, small integers in [-4, 4] (exact products
/// and sums, so any summation order gives the same bits).
enum class Elem { I32, F32, F16X2 };

struct Buffer {
  size_t Count; ///< 32-bit words
  Elem Type;
  Init How;
  bool Output;
};

Buffer in(size_t N, Elem T = Elem::I32) { return {N, T, Init::Random, false}; }
Buffer out(size_t N, Elem T = Elem::I32) { return {N, T, Init::Poison, true}; }
Buffer inout(size_t N, Elem T, Init How) { return {N, T, How, true}; }

/// What a launch function gets: the shape and the device buffers.
struct Launch {
  dim3 Grid, Block;
  size_t DynSmem;
  cudaStream_t Stream;
  std::vector<void *> Ptrs;
  template <typename T> T *p(int I) const { return static_cast<T *>(Ptrs[I]); }
};

struct Spec {
  std::string Kernel;
  dim3 Grid, Block;
  unsigned DynSmem = 0;
  std::vector<Buffer> Bufs;
  /// Launches the kernel with <<<>>> and its arguments.
  std::function<void(const Launch &)> Run;
  /// The output is the __device__ array noparam_out (count in Bufs[0]).
  bool NoParamOut = false;
};

// <<<>>> with the launch's shape, for the kernel and the arguments given.
#define LAUNCH(K, L, ...) K<<<(L).Grid, (L).Block, (L).DynSmem, (L).Stream>>>(__VA_ARGS__)

/// The suite, as suite() in test/gpu/gpu-test.cpp builds it for scale \p S.
std::vector<Spec> suite(unsigned S) {
  const Elem F = Elem::F32;
  std::vector<Spec> V;
  {
    int N = 40 * S * 256 - 100;
    V.push_back({"early_return_before_sync", dim3(40 * S), dim3(256), 0,
                 {in(40 * S * 256), out(40 * S * 256)}, [N](const Launch &L) {
                   LAUNCH(early_return_before_sync, L, L.p<int>(0), L.p<int>(1), N);
                 }});
  }
  V.push_back({"early_return_after_sync", dim3(50 * S), dim3(128), 0,
               {in(50 * S * 128), out(50 * S * 128)}, [](const Launch &L) {
                 LAUNCH(early_return_after_sync, L, L.p<int>(0), L.p<int>(1));
               }});
  V.push_back({"syncthreads_or", dim3(30 * S), dim3(256), 0,
               {in(30 * S * 256), out(30 * S * 256)},
               [](const Launch &L) { LAUNCH(syncthreads_or, L, L.p<int>(0), L.p<int>(1)); }});
  V.push_back({"syncthreads_and", dim3(30 * S), dim3(256), 0,
               {in(30 * S * 256), out(30 * S * 256)},
               [](const Launch &L) { LAUNCH(syncthreads_and, L, L.p<int>(0), L.p<int>(1)); }});
  V.push_back({"syncthreads_count", dim3(30 * S), dim3(256), 0,
               {in(30 * S * 256), out(30 * S * 256)}, [](const Launch &L) {
                 LAUNCH(syncthreads_count, L, L.p<int>(0), L.p<int>(1));
               }});
  V.push_back({"cg_block_sync", dim3(30 * S), dim3(256), 0,
               {in(30 * S * 256, F), out(30 * S * 256, F)}, [](const Launch &L) {
                 LAUNCH(cg_block_sync, L, L.p<float>(0), L.p<float>(1));
               }});
  V.push_back({"named_barriers", dim3(40 * S), dim3(128), 0,
               {in(40 * S * 128), out(40 * S * 128)},
               [](const Launch &L) { LAUNCH(named_barriers, L, L.p<int>(0), L.p<int>(1)); }});
  {
    int W = 300, H = 200 * S;
    V.push_back({"grid2d", dim3((W + 15) / 16, (H + 7) / 8), dim3(16, 8), 0,
                 {in(W * H, F), out(W * H, F)}, [W, H](const Launch &L) {
                   LAUNCH(grid2d, L, L.p<float>(0), L.p<float>(1), W, H);
                 }});
  }
  V.push_back({"grid3d", dim3(5, 3, 4 * S), dim3(8, 4, 2), 0, {out(40 * 12 * 8 * S)},
               [](const Launch &L) { LAUNCH(grid3d, L, L.p<int>(0)); }});
  {
    int N = 100000 * S;
    V.push_back({"grid_stride", dim3(37), dim3(128), 0,
                 {in(N, F), inout(N, F, Init::Random)}, [N](const Launch &L) {
                   LAUNCH(grid_stride, L, N, 1.5f, L.p<float>(0), L.p<float>(1));
                 }});
  }
  V.push_back({"dyn_smem_reverse", dim3(30 * S), dim3(256), 1024,
               {in(30 * S * 256), out(30 * S * 256)}, [](const Launch &L) {
                 LAUNCH(dyn_smem_reverse, L, L.p<int>(0), L.p<int>(1));
               }});
  V.push_back({"warp_shuffle", dim3(30 * S), dim3(256), 0,
               {in(30 * S * 256), out(30 * S * 8)},
               [](const Launch &L) { LAUNCH(warp_shuffle, L, L.p<int>(0), L.p<int>(1)); }});
  V.push_back({"warp_vote", dim3(30 * S), dim3(256), 0,
               {in(30 * S * 256), out(30 * S * 256)},
               [](const Launch &L) { LAUNCH(warp_vote, L, L.p<int>(0), L.p<unsigned>(1)); }});
  {
    int N = 50000 * S;
    V.push_back({"atomic_histogram", dim3((N + 255) / 256), dim3(256), 0,
                 {in(N), inout(64, Elem::I32, Init::Zero)}, [N](const Launch &L) {
                   LAUNCH(atomic_histogram, L, L.p<int>(0), L.p<unsigned>(1), N);
                 }});
  }
  {
    unsigned N = 128 * std::min(S, 16u);
    V.push_back({"gemm_tiled", dim3(N / 16, N / 16), dim3(16, 16), 0,
                 {in(N * N, F), in(N * N, F), out(N * N, F)}, [N](const Launch &L) {
                   LAUNCH(gemm_tiled, L, L.p<float>(0), L.p<float>(1), L.p<float>(2), (int)N);
                 }});
  }
  V.push_back({"func_with_barrier", dim3(40 * S), dim3(128), 0,
               {in(40 * S * 128), out(40 * S * 128)}, [](const Launch &L) {
                 LAUNCH(func_with_barrier, L, L.p<int>(0), L.p<int>(1));
               }});
  V.push_back({"mbarrier_phases", dim3(40 * S), dim3(128), 0,
               {in(40 * S * 128), out(40 * S * 128)}, [](const Launch &L) {
                 LAUNCH(mbarrier_phases, L, L.p<int>(0), L.p<int>(1));
               }});
  V.push_back({"staggered_returns", dim3(40 * S), dim3(128), 0,
               {in(40 * S * 128), out(40 * S * 128)}, [](const Launch &L) {
                 LAUNCH(staggered_returns, L, L.p<int>(0), L.p<int>(1));
               }});
  V.push_back({"bulk_copy", dim3(40 * S), dim3(64), 0,
               {in(40 * S * 64 * 4), out(40 * S * 64 * 4)},
               [](const Launch &L) { LAUNCH(bulk_copy, L, L.p<int4>(0), L.p<int4>(1)); }});
  V.push_back({"block_scan", dim3(30 * S), dim3(256), 0,
               {in(30 * S * 256), out(30 * S * 256)},
               [](const Launch &L) { LAUNCH(block_scan, L, L.p<int>(0), L.p<int>(1)); }});
  V.push_back({"thread_exit", dim3(30 * S), dim3(256), 0,
               {in(30 * S * 256), out(30 * S * 256)},
               [](const Launch &L) { LAUNCH(thread_exit, L, L.p<int>(0), L.p<int>(1)); }});
  V.push_back({"wgmma_tile", dim3(40 * S), dim3(128), 0,
               {in(40 * S * 64 * 16 / 2, Elem::F16X2), in(40 * S * 16 * 8 / 2, Elem::F16X2),
                out(40 * S * 128 * 4, F)},
               [](const Launch &L) {
                 LAUNCH(wgmma_tile, L, L.p<__half>(0), L.p<__half>(1), L.p<float>(2));
               }});
  {
    Spec NP{"no_params", dim3(64), dim3(32), 0, {out(64 * 32)},
            [](const Launch &L) { LAUNCH(no_params, L); }};
    NP.NoParamOut = true;
    V.push_back(NP);
  }
  {
    int N = 30 * S * 256 - 77;
    V.push_back({"block_reduce", dim3(30 * S), dim3(256), 0, {in(N + 77), out(30 * S)},
                 [N](const Launch &L) {
                   LAUNCH(block_reduce, L, L.p<int>(0), L.p<int>(1), N);
                 }});
  }
  return V;
}

/// The host images of a kernel's buffers before a run (inputs, zeroed and
/// poisoned outputs), from a generator seeded as gpu-test.cpp seeds it.
std::vector<std::vector<uint32_t>> initialImages(const Spec &Sp) {
  const uint32_t Seed = 12345u ^ (uint32_t)std::hash<std::string>()(Sp.Kernel);
  std::mt19937 Rng(Seed);
  std::vector<std::vector<uint32_t>> Images;
  for (const Buffer &Bf : Sp.Bufs) {
    std::vector<uint32_t> H(Bf.Count);
    for (uint32_t &W : H) {
      if (Bf.How == Init::Zero) {
        W = 0;
      } else if (Bf.How == Init::Poison) {
        W = 0xCDCDCDCDu;
      } else if (Bf.Type == Elem::F16X2) {
        static const uint16_t Small[] = {0x0000, 0x3C00, 0x4000, 0x4200, 0x4400,
                                         0xBC00, 0xC000, 0xC200, 0xC400};
        uint32_t Lo = Small[Rng() % 9];
        uint32_t Hi = Small[Rng() % 9];
        W = Lo | (Hi << 16);
      } else if (Bf.Type == Elem::F32) {
        float F = std::uniform_real_distribution<float>(-1.0f, 1.0f)(Rng);
        std::memcpy(&W, &F, 4);
      } else {
        W = Rng() % 1000;
      }
    }
    Images.push_back(std::move(H));
  }
  return Images;
}

/// Pinned host memory, so that the copies are truly asynchronous and only
/// the stream orders them against the kernel.
struct Pinned {
  uint32_t *P = nullptr;
  size_t Count = 0;
  explicit Pinned(size_t N) : Count(N) { CK(cudaMallocHost(&P, N * 4)); }
  Pinned(const Pinned &) = delete;
  Pinned(Pinned &&O) noexcept : P(O.P), Count(O.Count) { O.P = nullptr; }
  ~Pinned() {
    if (P)
      cudaFreeHost(P);
  }
};

/// One run on \p St: reset every buffer, launch, copy the outputs back into
/// \p Results; nothing waits on the host.
void enqueueRun(const Spec &Sp, const std::vector<void *> &Dev,
                const std::vector<Pinned> &Initial, std::vector<Pinned> &Results,
                cudaStream_t St) {
  for (size_t B = 0; B < Dev.size(); ++B)
    CK(cudaMemcpyAsync(Dev[B], Initial[B].P, Initial[B].Count * 4, cudaMemcpyHostToDevice, St));
  Launch L{Sp.Grid, Sp.Block, Sp.DynSmem, St, Dev};
  Sp.Run(L);
  CK_LAUNCH();
  size_t O = 0;
  for (size_t B = 0; B < Dev.size(); ++B)
    if (Sp.Bufs[B].Output) {
      Pinned &R = Results[O++];
      CK(cudaMemcpyAsync(R.P, Dev[B], R.Count * 4, cudaMemcpyDeviceToHost, St));
    }
}

std::vector<uint64_t> hashes(const std::vector<Pinned> &Results) {
  std::vector<uint64_t> H;
  for (const Pinned &R : Results)
    H.push_back(fnv1a64(R.P, R.Count * 4));
  return H;
}

} // namespace

int main(int argc, char **argv) {
  unsigned Scale = 1;
  for (int I = 1; I < argc; ++I) {
    std::string A = argv[I];
    if (A == "--scale" && I + 1 < argc) {
      char *End = nullptr;
      unsigned long V = std::strtoul(argv[++I], &End, 10);
      if (*End || V == 0 || V > 1024)
        die(std::string("invalid scale '") + argv[I] + "' (expected 1 to 1024)");
      Scale = (unsigned)V;
    } else {
      die("unknown argument '" + A + "'; usage: suite-host [--scale N]");
    }
  }

  CK(cudaSetDevice(0));
  cudaStream_t Blocking, NonBlocking;
  CK(cudaStreamCreate(&Blocking));
  CK(cudaStreamCreateWithFlags(&NonBlocking, cudaStreamNonBlocking));
  const cudaStream_t Streams[] = {0, Blocking, NonBlocking, cudaStreamPerThread};
  const unsigned NumStreams = sizeof(Streams) / sizeof(Streams[0]);
  cudaEvent_t FirstDone;
  CK(cudaEventCreateWithFlags(&FirstDone, cudaEventDisableTiming));

  std::vector<Spec> Suite = suite(Scale);
  unsigned Index = 0;
  for (const Spec &Sp : Suite) {
    std::vector<std::vector<uint32_t>> Images = initialImages(Sp);
    std::vector<Pinned> Initial, First, Second;
    std::vector<void *> Dev;
    for (size_t B = 0; B < Sp.Bufs.size(); ++B) {
      Initial.emplace_back(Sp.Bufs[B].Count);
      std::memcpy(Initial.back().P, Images[B].data(), Sp.Bufs[B].Count * 4);
      if (Sp.Bufs[B].Output) {
        First.emplace_back(Sp.Bufs[B].Count);
        Second.emplace_back(Sp.Bufs[B].Count);
      }
      void *P = nullptr;
      if (Sp.NoParamOut) {
        size_t Bytes = 0;
        CK(cudaGetSymbolSize(&Bytes, noparam_out));
        if (Bytes != Sp.Bufs[B].Count * 4)
          die("noparam_out has " + std::to_string(Bytes) + " bytes, expected " +
              std::to_string(Sp.Bufs[B].Count * 4));
        CK(cudaGetSymbolAddress(&P, noparam_out));
      } else {
        CK(cudaMalloc(&P, Sp.Bufs[B].Count * 4));
      }
      Dev.push_back(P);
    }

    // Two runs on different streams; the second starts (on the GPU) once
    // the first has copied its outputs back.
    cudaStream_t S1 = Streams[Index % NumStreams], S2 = Streams[(Index + 1) % NumStreams];
    enqueueRun(Sp, Dev, Initial, First, S1);
    CK(cudaEventRecord(FirstDone, S1));
    CK(cudaStreamWaitEvent(S2, FirstDone, 0));
    enqueueRun(Sp, Dev, Initial, Second, S2);
    CK(cudaStreamSynchronize(S2));
    CK(cudaStreamSynchronize(S1));

    std::vector<uint64_t> H1 = hashes(First), H2 = hashes(Second);
    if (H1 != H2)
      die(Sp.Kernel + ": the second run's outputs differ from the first's");
    std::printf("%s", Sp.Kernel.c_str());
    for (uint64_t H : H1)
      std::printf(" %016llx", (unsigned long long)H);
    std::printf("\n");
    std::fflush(stdout);

    if (!Sp.NoParamOut)
      for (void *P : Dev)
        CK(cudaFree(P));
    ++Index;
  }

  CK(cudaDeviceSynchronize());
  CK(cudaEventDestroy(FirstDone));
  CK(cudaStreamDestroy(Blocking));
  CK(cudaStreamDestroy(NonBlocking));
  std::printf("suite-host: %zu kernels\n", Suite.size());
  return 0;
}
