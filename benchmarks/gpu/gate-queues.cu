// gate-queues.cu - what a stream waiting at a gate holds up on other
// streams of the same process: the question behind the hang of a
// preempted PTB launch's resumption (docs/runtime.md, Limits).
//
// N non-blocking streams are made in order; stream G (the "program's") runs
// a 20 ms spin kernel and then waits, on the GPU, for a word to reach 1
// (cuStreamWaitValue32: the gate; on device memory, as the runtime's gate
// on a launch's finished-block count, or with --host-word on pinned host
// memory). Then, for every other stream in turn, it queues
//   * a write of a pinned host word (cuStreamWriteValue32), and
//   * a one-thread kernel that stores to pinned host memory,
// and reports whether each landed within 200 ms (the spin is over by then).
// Last, two new streams get the same. The gate is then opened (a host
// store with --host-word; else a kernel on the first stream whose kernel
// ran, or, if none did, a kernel on a fresh stream) and everything is
// waited for, up to 2 s; a process still stuck then exits with status 3.
// Run it with CUDA_DEVICE_MAX_CONNECTIONS at 2, 8 and 32, with and
// without MPS: one line per stream, "stream I: write landed|blocked,
// kernel ran|blocked".
//
// With --behind a kernel is queued on G behind the gate, as a program's
// next launch is.
// With --func-load (and --host-word) the kernel's first use is a
// cuFuncLoad made while the gate is pending: does it wait for the gate?
// With --cold the kernel's first launch is the one made behind the gate
// (lazy loading loads it then).
// With --op NAME one driver call is made while the gate is pending first
// (event, malloc, hostalloc, stream, memset: which of the calls the
// runtime makes as it goes stall later work as a load does?).
// With --chain K, K full-GPU kernels, each with a gate of its own (a word
// in pinned host memory), are queued behind the gate (a best-effort
// process's queued PTB launches); once the gate is opened, and the first
// of them ran, the other streams are tried again, then the host opens the
// rest;
// with --wide the probing kernels fill the GPU (a relaunch).
// With --prio least|greatest|alt the other streams are made with the
// least or the greatest priority, or alternately greatest and least
// starting with greatest (the runtime's signal and resume streams).
// Results (H200, driver 580, 2026-11-28): a plain gate held up nothing;
// a code load behind it stalled everything after it
// (docs/results/2026-11-28-h200-session22/summary.md).
// Usage: gate-queues [--streams N] [--gate G] [--host-word] [--behind]
//                    [--func-load] [--cold] [--op NAME] [--prio P]
//                    [--chain K] [--wide]
// Build: nvcc -arch=sm_90a -O2 gate-queues.cu -lcuda -o gate-queues
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    auto e = (x);                                                              \
    if (e != 0) {                                                              \
      std::fprintf(stderr, "gate-queues: %s failed: %d\n", #x, (int)e);        \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

__global__ void spin(unsigned long long Ns) {
  unsigned long long T0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(T0));
  for (;;) {
    unsigned long long T;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(T));
    if (T - T0 >= Ns)
      break;
  }
}

__global__ void store(volatile unsigned *P, unsigned V) { *P = V; }

static bool waitFor(volatile unsigned *P, unsigned V, int Ms) {
  auto Until = std::chrono::steady_clock::now() + std::chrono::milliseconds(Ms);
  while (std::chrono::steady_clock::now() < Until) {
    if (*P >= V)
      return true;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return *P >= V;
}

int main(int Argc, char **Argv) {
  int N = 4, G = 3;
  bool HostWord = false, Behind = false, FuncLoad = false, Cold = false, Wide = false;
  int Chain = 0;
  const char *Op = nullptr, *Prio = nullptr;
  for (int I = 1; I < Argc; ++I) {
    if (!std::strcmp(Argv[I], "--streams") && I + 1 < Argc)
      N = std::atoi(Argv[++I]);
    else if (!std::strcmp(Argv[I], "--gate") && I + 1 < Argc)
      G = std::atoi(Argv[++I]);
    else if (!std::strcmp(Argv[I], "--host-word"))
      HostWord = true;
    else if (!std::strcmp(Argv[I], "--behind"))
      Behind = true;
    else if (!std::strcmp(Argv[I], "--chain") && I + 1 < Argc)
      Chain = std::atoi(Argv[++I]);
    else if (!std::strcmp(Argv[I], "--wide"))
      Wide = true;
    else if (!std::strcmp(Argv[I], "--func-load"))
      FuncLoad = true;
    else if (!std::strcmp(Argv[I], "--cold"))
      Cold = true;
    else if (!std::strcmp(Argv[I], "--op") && I + 1 < Argc)
      Op = Argv[++I];
    else if (!std::strcmp(Argv[I], "--prio") && I + 1 < Argc)
      Prio = Argv[++I];
    else {
      std::fprintf(stderr, "usage: gate-queues [--streams N] [--gate G] [--host-word] [--behind] [--func-load] [--cold] [--op NAME] [--prio least|greatest|alt] [--chain K] [--wide]\n");
      return 2;
    }
  }
  if (N < 2 || N > 64 || G < 0 || G >= N || Chain < 0 || Chain > 100) {
    std::fprintf(stderr, "gate-queues: need 2 <= N <= 64, 0 <= G < N, 0 <= chain <= 100\n");
    return 2;
  }
  const char *Conn = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  std::printf("gate-queues: CUDA_DEVICE_MAX_CONNECTIONS=%s, %d streams, gate on stream %d (%s "
              "word)%s\n",
              Conn ? Conn : "(unset)", N, G, HostWord ? "host" : "device",
              Behind ? ", a kernel queued behind it" : "");
  CK(cudaFree(nullptr));
  // Host words: [0, 64) writes, [64, 128) kernels, [128] the gate (host mode).
  unsigned *Words = nullptr;
  CK(cudaHostAlloc(&Words, 256 * sizeof(unsigned), cudaHostAllocMapped));
  std::memset(Words, 0, 256 * sizeof(unsigned));
  unsigned *WordsDev = nullptr;
  CK(cudaHostGetDevicePointer(&WordsDev, Words, 0));
  unsigned *GateDev = nullptr;
  if (HostWord) {
    GateDev = WordsDev + 128;
  } else {
    CK(cudaMalloc(&GateDev, sizeof(unsigned)));
    CK(cudaMemset(GateDev, 0, sizeof(unsigned)));
    CK(cudaDeviceSynchronize());
  }
  // Both kernels launched once first: a kernel's first launch loads it
  // (lazy loading), which waits behind the gate itself (a first version
  // of this probe saw every stream blocked so).
  spin<<<1, 32>>>(1000);
  if (!FuncLoad && !Cold)
    store<<<1, 1>>>(WordsDev + 255, 1);
  CK(cudaDeviceSynchronize());
  std::vector<cudaStream_t> St(N + 2);
  int Least = 0, Greatest = 0;
  CK(cudaDeviceGetStreamPriorityRange(&Least, &Greatest));
  // The priority of the I-th stream other than G (--prio).
  auto PrioOf = [&](int I) {
    if (!Prio)
      return 0;
    if (!std::strcmp(Prio, "least"))
      return Least;
    if (!std::strcmp(Prio, "greatest"))
      return Greatest;
    return I % 2 ? Least : Greatest;
  };
  if (Prio && std::strcmp(Prio, "least") && std::strcmp(Prio, "greatest") &&
      std::strcmp(Prio, "alt")) {
    std::fprintf(stderr, "gate-queues: --prio: least, greatest or alt\n");
    return 2;
  }
  for (int I = 0, K = 0; I < N; ++I)
    CK(cudaStreamCreateWithPriority(&St[I], cudaStreamNonBlocking, I == G ? 0 : PrioOf(K++)));
  if (Prio)
    std::printf("other streams' priorities: %s (least %d, greatest %d)\n", Prio, Least, Greatest);
  spin<<<1, 32, 0, St[G]>>>(20ull * 1000 * 1000);
  CK(cuStreamWaitValue32((CUstream)St[G], (CUdeviceptr)GateDev, 1, CU_STREAM_WAIT_VALUE_GEQ));
  if (Behind) // the program's next kernel, queued behind the gate
    store<<<1, 1, 0, St[G]>>>(WordsDev + 254, 1);
  // --chain K: K more launches queued behind the gate, each a full-GPU
  // kernel followed by a gate of its own (a word of its own, opened with
  // the first), as a best-effort process's queued PTB launches are.
  unsigned *ChainHost = nullptr, *ChainDev = nullptr; // gates [0, Chain), progress [Chain]
  int SMs = 0;
  CK(cudaDeviceGetAttribute(&SMs, cudaDevAttrMultiProcessorCount, 0));
  if (Chain) {
    CK(cudaHostAlloc(&ChainHost, (Chain + 1) * sizeof(unsigned), cudaHostAllocMapped));
    std::memset(ChainHost, 0, (Chain + 1) * sizeof(unsigned));
    CK(cudaHostGetDevicePointer(&ChainDev, ChainHost, 0));
    for (int K = 0; K < Chain; ++K) {
      spin<<<SMs * 8, 256, 0, St[G]>>>(10000);
      store<<<1, 1, 0, St[G]>>>(ChainDev + Chain, K + 1);
      CK(cuStreamWaitValue32((CUstream)St[G], (CUdeviceptr)(ChainDev + K), 1,
                             CU_STREAM_WAIT_VALUE_GEQ));
    }
    CK(cudaGetLastError());
    std::printf("%d full-GPU kernels, each with a gate, queued behind the gate\n", Chain);
  }
  if (FuncLoad) {
    // Does loading a function wait for the gate (host word: opened here)?
    cudaFunction_t Fn = nullptr;
    CK(cudaGetFuncBySymbol(&Fn, (const void *)store));
    std::atomic<int> Loaded{0};
    std::thread T([&] {
      CUresult R = cuFuncLoad((CUfunction)Fn);
      Loaded = R == CUDA_SUCCESS ? 1 : 2;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::printf("cuFuncLoad with the gate pending: %s after 300 ms\n",
                Loaded == 0 ? "not returned" : Loaded == 1 ? "returned" : "failed");
    if (Loaded == 0) {
      __atomic_store_n(Words + 128, 1u, __ATOMIC_RELEASE);
      T.join();
      std::printf("cuFuncLoad returned once the gate opened (%s)\n",
                  Loaded == 1 ? "success" : "failed");
      CK(cudaDeviceSynchronize());
      return 0;
    }
    T.join();
    // An event queued after the load, on another stream (the runtime
    // waits for one: loadEarly): does it wait too?
    cudaEvent_t E;
    CK(cudaEventCreateWithFlags(&E, cudaEventDisableTiming));
    CK(cudaEventRecord(E, St[G == 0 ? 1 : 0]));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::printf("an event recorded after the load on another stream: %s after 200 ms\n",
                cudaEventQuery(E) == cudaSuccess ? "complete" : "pending");
    // Then the streams below, the gate still pending.
  }
  if (Op) {
    // One driver call made while the gate is pending; do later
    // operations on other streams still run?
    CUresult R = CUDA_SUCCESS;
    if (!std::strcmp(Op, "event")) {
      CUevent E;
      R = cuEventCreate(&E, CU_EVENT_DISABLE_TIMING);
    } else if (!std::strcmp(Op, "malloc")) {
      CUdeviceptr P;
      R = cuMemAlloc(&P, 1 << 20);
    } else if (!std::strcmp(Op, "hostalloc")) {
      void *P;
      R = cuMemHostAlloc(&P, 4096, CU_MEMHOSTALLOC_DEVICEMAP);
    } else if (!std::strcmp(Op, "stream")) {
      CUstream X;
      R = cuStreamCreateWithPriority(&X, CU_STREAM_NON_BLOCKING, 0);
    } else if (!std::strcmp(Op, "memset")) {
      CUdeviceptr P;
      R = cuMemAlloc(&P, 4096);
      CUstream X;
      if (R == CUDA_SUCCESS)
        R = cuStreamCreateWithPriority(&X, CU_STREAM_NON_BLOCKING, 0);
      if (R == CUDA_SUCCESS)
        R = cuMemsetD32Async(P, 0, 1000, X);
    } else {
      std::fprintf(stderr, "gate-queues: --op: event, malloc, hostalloc, stream or memset\n");
      return 2;
    }
    std::printf("--op %s made while the gate is pending: %d\n", Op, (int)R);
  }
  int Ran = -1;
  auto Try = [&](int I) {
    CK(cuStreamWriteValue32((CUstream)St[I], (CUdeviceptr)(WordsDev + I), 1, 0));
    if (Wide) // a full GPU of blocks, as a relaunched PTB kernel
      store<<<SMs * 8, 256, 0, St[I]>>>(WordsDev + 64 + I, 1);
    else
      store<<<1, 1, 0, St[I]>>>(WordsDev + 64 + I, 1);
    CK(cudaGetLastError());
    bool W = waitFor(Words + I, 1, 200);
    bool K = waitFor(Words + 64 + I, 1, 200);
    std::printf("stream %d%s: write %s, kernel %s\n", I, I >= N ? " (made after the gate)" : "",
                W ? "landed" : "blocked", K ? "ran" : "blocked");
    if (K && Ran < 0)
      Ran = I;
  };
  for (int I = 0; I < N; ++I)
    if (I != G)
      Try(I);
  for (int I = N; I < N + 2; ++I) {
    CK(cudaStreamCreateWithFlags(&St[I], cudaStreamNonBlocking));
    Try(I);
  }
  std::fflush(stdout);
  if (HostWord) {
    __atomic_store_n(Words + 128, 1u, __ATOMIC_RELEASE);
  } else {
    cudaStream_t Open = nullptr;
    if (Ran >= 0) {
      Open = St[Ran];
    } else {
      CK(cudaStreamCreateWithFlags(&Open, cudaStreamNonBlocking));
    }
    store<<<1, 1, 0, Open>>>(GateDev, 1);
  }
  if (Chain) {
    // The stream now runs its first chained kernel and waits at its gate:
    // do the other streams still run, with a gate so far along the stream?
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::printf("gate opened: %u of %d chained kernels ran; the other streams again:\n",
                __atomic_load_n(ChainHost + Chain, __ATOMIC_ACQUIRE), Chain);
    for (int I = 0; I < N + 2; ++I) {
      Words[I] = 0;
      Words[64 + I] = 0;
    }
    Ran = -1;
    for (int I = 0; I < N + 2; ++I)
      if (I != G)
        Try(I);
    for (int K = 0; K < Chain; ++K) // opened from the host
      __atomic_store_n(ChainHost + K, 1u, __ATOMIC_RELEASE);
    std::fflush(stdout);
  }
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::printf("gate-queues: still stuck 2 s after the gate was opened\n");
    std::fflush(stdout);
    _exit(3);
  }).detach();
  CK(cudaDeviceSynchronize());
  std::printf("gate-queues: done\n");
  return 0;
}
