// spin-kernels.h - what the co-location benchmarks share (hp-serve.cu,
// be-spin.cu, colocate-streams.cu): the kernels, the HP request loop, the BE
// kernel loop, and checked CUDA calls. Each program is one translation unit
// that includes this header once, so its definitions are `static`.
//
// The kernels:
//   * spinBlocks: every block runs for a given number of nanoseconds (a
//     %globaltimer spin), reading and writing a few words of a buffer. The HP
//     service's request: one wave of blocks of a known length.
//   * workBlocks: every thread runs a fixed chain of integer hashing (the
//     `work` argument sets the length), so its output depends only on the
//     input and `work`, never on timing or preemption. Every block also adds
//     its sum and a count of one to two 64-bit device counters; after K
//     kernels they must be K times the sum of the output and K times the
//     block count, which catches a logical block that was skipped or run
//     twice in any kernel, not just the last (a PTB variant that loses or
//     repeats a block on preemption shows up here).
//
// The loops print fixed-format lines that scripts/colocate-report.py parses:
//   hp: window START_EPOCH END_EPOCH
//   hp: requests N rate R p50 X p99 Y p999 Z mean M max W us
//   hp: capacity C req/s                       (closed loop only)
//   be: t=SECONDS kernels=N epoch=EPOCH         (progress)
//   be: kernels K in T s, R kernels/s
//   be: checksum HEX work W blocks N threads T
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

//===----------------------------------------------------------------------===//
// Device code
//===----------------------------------------------------------------------===//

/// Words of the buffer each spinBlocks block reads and writes.
constexpr int kSpinWords = 4;

__device__ __forceinline__ unsigned long long globalTimerNs() {
  unsigned long long T;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(T));
  return T;
}

/// A block of spinBlocks: it spins for `ns` nanoseconds of %globaltimer,
/// then its first kSpinWords threads increment their word of `buf` (buf
/// holds gridDim.x * kSpinWords words), so the final buffer holds the number
/// of launches in every word whatever the timing. Returns its start.
__device__ __forceinline__ unsigned long long spinBlock(unsigned *buf,
                                                        unsigned long long ns) {
  unsigned long long Start = globalTimerNs();
  unsigned Idx = blockIdx.x * kSpinWords + threadIdx.x;
  unsigned V = 0;
  if (threadIdx.x < kSpinWords)
    V = buf[Idx];
  while (globalTimerNs() - Start < ns) {
  }
  if (threadIdx.x < kSpinWords)
    buf[Idx] = V + 1;
  return Start;
}

__global__ void spinBlocks(unsigned *buf, unsigned long long ns) { spinBlock(buf, ns); }

/// spinBlocks that also times itself on the %globaltimer: each block's first
/// thread folds the block's start into *first (the earliest) and its end into
/// *last (the latest), so that per kernel the first block's start and the last
/// block's end are known (hp-serve --gpu-trace). *first starts at ~0, *last
/// at 0.
__global__ void spinBlocksTimed(unsigned *buf, unsigned long long ns,
                                unsigned long long *first,
                                unsigned long long *last) {
  unsigned long long Start = spinBlock(buf, ns);
  if (threadIdx.x == 0) {
    atomicMin(first, Start);
    atomicMax(last, globalTimerNs());
  }
}

/// Each thread hashes in[i] through `work` rounds of integer arithmetic (two
/// dependent chains) and writes out[i]; out depends only on in and work. The
/// block adds the sum of its outputs to *sum and 1 to *done (integer atomics:
/// exact in any order). in and out hold gridDim.x * blockDim.x words.
__global__ void workBlocks(const unsigned *in, unsigned *out, unsigned work,
                           unsigned long long *sum, unsigned long long *done) {
  __shared__ unsigned long long BlockSum;
  unsigned I = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned X = in[I];
  unsigned Y = I * 0x9e3779b9u;
  for (unsigned K = 0; K < work; ++K) {
    X = X * 1664525u + 1013904223u;
    X ^= X >> 15;
    Y = (Y ^ X) * 0x85ebca6bu + K;
  }
  unsigned V = X ^ Y;
  out[I] = V;
  if (threadIdx.x == 0)
    BlockSum = 0;
  __syncthreads();
  // Summed in each warp first: 256 threads adding 64-bit words to one shared
  // word serialize (a compare-and-swap loop each), which made a block take
  // about 20 us whatever its work. (blockDim.x is a multiple of 32.)
  unsigned long long W = V;
  for (int Off = 16; Off > 0; Off >>= 1)
    W += __shfl_down_sync(0xffffffffu, W, Off);
  if ((threadIdx.x & 31) == 0)
    atomicAdd(&BlockSum, W);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(sum, BlockSum);
    atomicAdd(done, 1ull);
  }
}

//===----------------------------------------------------------------------===//
// Host helpers
//===----------------------------------------------------------------------===//

/// The program's name, for messages (set by main).
static const char *ProgName = "colocate";

[[noreturn]] static void die(const char *Fmt, ...) {
  std::va_list Ap;
  va_start(Ap, Fmt);
  std::fprintf(stderr, "%s: error: ", ProgName);
  std::vfprintf(stderr, Fmt, Ap);
  std::fputc('\n', stderr);
  va_end(Ap);
  std::exit(1);
}

#define CK(call)                                                               \
  do {                                                                         \
    cudaError_t Err_ = (call);                                                 \
    if (Err_ != cudaSuccess)                                                   \
      die("%s:%d: %s failed: %s", __FILE__, __LINE__, #call,                   \
          cudaGetErrorString(Err_));                                           \
  } while (0)

using Clock = std::chrono::steady_clock;

static double secondsBetween(Clock::time_point A, Clock::time_point B) {
  return std::chrono::duration<double>(B - A).count();
}

/// Wall-clock time in seconds since the epoch: the time base that lines of
/// different processes share.
static double epochNow() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Sleeps most of the way to T, then spins the rest: sleep_until alone
/// overshoots by tens of microseconds, a Poisson schedule of 100 us gaps
/// needs better.
/// With \p Spin, spins all the way: a thread that sleeps between requests
/// wakes late on some virtual machines (1.2-1.4 ms, with launch calls
/// 3-8 times slower for tens of milliseconds after; H100 VMs, 2026-11-24),
/// which a service that polls for work never meets.
static void waitUntil(Clock::time_point T, bool Spin = false) {
  for (;;) {
    Clock::time_point Now = Clock::now();
    if (Now >= T)
      return;
    auto Left = T - Now;
    if (!Spin && Left > std::chrono::microseconds(300))
      std::this_thread::sleep_for(Left - std::chrono::microseconds(200));
  }
}

static uint64_t fnv1a(const void *Data, size_t Bytes) {
  const unsigned char *P = static_cast<const unsigned char *>(Data);
  uint64_t H = 0xcbf29ce484222325ull;
  for (size_t I = 0; I < Bytes; ++I) {
    H ^= P[I];
    H *= 0x100000001b3ull;
  }
  return H;
}

struct DeviceInfo {
  int Device = 0;
  int SMs = 0;
  std::string Name;
};

static DeviceInfo deviceInfo() {
  DeviceInfo D;
  CK(cudaGetDevice(&D.Device));
  cudaDeviceProp P;
  CK(cudaGetDeviceProperties(&P, D.Device));
  D.SMs = P.multiProcessorCount;
  D.Name = P.name;
  return D;
}

/// Stream priorities: the greatest, the lowest, or the default one.
enum class StreamPriority { Default, Greatest, Lowest };

static cudaStream_t makeStream(StreamPriority P) {
  int Least = 0, Greatest = 0;
  CK(cudaDeviceGetStreamPriorityRange(&Least, &Greatest));
  int Prio = P == StreamPriority::Greatest ? Greatest
             : P == StreamPriority::Lowest ? Least
                                           : 0;
  cudaStream_t S;
  CK(cudaStreamCreateWithPriority(&S, cudaStreamNonBlocking, Prio));
  return S;
}

static const char *priorityName(StreamPriority P) {
  return P == StreamPriority::Greatest ? "greatest"
         : P == StreamPriority::Lowest ? "lowest"
                                       : "default";
}

//===----------------------------------------------------------------------===//
// Option parsing
//===----------------------------------------------------------------------===//

/// Walks argv; accepts `--name value` and `--name=value`.
class ArgReader {
public:
  ArgReader(int Argc, char **Argv) : Argc(Argc), Argv(Argv) {}

  /// Moves to the next argument; false at the end.
  bool next() {
    if (++I >= Argc)
      return false;
    Name = Argv[I];
    Inline.clear();
    HasInline = false;
    size_t Eq = Name.find('=');
    if (Name.rfind("--", 0) == 0 && Eq != std::string::npos) {
      Inline = Name.substr(Eq + 1);
      Name = Name.substr(0, Eq);
      HasInline = true;
    }
    return true;
  }
  const std::string &name() const { return Name; }
  bool is(const char *N) const { return Name == N; }

  /// The flag takes no value.
  bool flag(const char *N) {
    if (Name != N)
      return false;
    if (HasInline)
      die("option %s takes no value", N);
    return true;
  }

  std::string value() {
    if (HasInline)
      return Inline;
    if (I + 1 >= Argc)
      die("option %s needs a value", Name.c_str());
    return Argv[++I];
  }

  double number(double Lo, double Hi) {
    std::string V = value();
    char *End = nullptr;
    double D = std::strtod(V.c_str(), &End);
    if (V.empty() || *End || !std::isfinite(D) || D < Lo || D > Hi)
      die("option %s: '%s' is not a number from %g to %g", Name.c_str(),
          V.c_str(), Lo, Hi);
    return D;
  }

  long long integer(long long Lo, long long Hi) {
    std::string V = value();
    char *End = nullptr;
    long long N = std::strtoll(V.c_str(), &End, 10);
    if (V.empty() || *End || N < Lo || N > Hi)
      die("option %s: '%s' is not an integer from %lld to %lld", Name.c_str(),
          V.c_str(), Lo, Hi);
    return N;
  }

private:
  int Argc;
  char **Argv;
  int I = 0;
  std::string Name, Inline;
  bool HasInline = false;
};

//===----------------------------------------------------------------------===//
// The HP request loop
//===----------------------------------------------------------------------===//

struct HpOptions {
  double BlockUs = 20;
  int Blocks = 0; // 0: one wave, one block per SM
  int Kernels = 1; // kernels per request, back to back on the stream
  int Threads = 128;
  double Rate = 0; // requests/s, Poisson; 0: closed loop
  uint64_t Seed = 1;
  double Duration = 10; // seconds; used when Requests == 0
  long long Requests = 0;
  long long Warmup = 50;
  double Drain = 2; // seconds after the window to finish late requests
  std::string Csv;
  std::string Trace; // per request: when, and where its time went
  std::string GpuTrace; // per request: its kernels' times on the GPU's clock
  bool SpinWait = false;
  bool SpinArrival = false; // spin, not sleep, until the next arrival
  bool RecordEach = false; // an event recorded after each kernel
  int WriteEach = 0; // 1: a GPU write to registered host memory after each kernel; 2: to device memory
  StreamPriority Priority = StreamPriority::Default;
};

#define HP_OPTIONS_HELP                                                        \
  "  --block-us U        each block spins U microseconds (default 20)\n"       \
  "  --blocks N          blocks per kernel (default: one wave = SM count)\n"   \
  "  --kernels K         kernels per request (default 1)\n"                   \
  "  --threads N         threads per block (default 128)\n"                    \
  "  --rate R            Poisson arrivals, R requests/s; 0: closed loop\n"     \
  "                      (back to back; default)\n"                            \
  "  --seed N            seed of the arrival times (default 1)\n"              \
  "  --duration S        measure for S seconds (default 10)\n"                 \
  "  --requests N        measure N requests instead of a duration\n"           \
  "  --warmup N          requests before the measurement (default 50)\n"       \
  "  --drain S           with --rate and --duration: requests that arrived\n"  \
  "                      in the window but are not done S seconds after it\n"  \
  "                      are counted unserved, their latency a lower bound\n"  \
  "                      (default 2)\n"                                        \
  "  --csv FILE          write every latency (us) to FILE, one per line\n"     \
  "  --trace FILE        with --rate: write per request (CSV with a header)\n" \
  "                      its arrival (s after the start), latency, and its\n" \
  "                      parts (us): late (arrival to send: queued behind\n"  \
  "                      the previous request, or the sender oversleeping),\n" \
  "                      issue (the launch calls), wait (launches to done)\n" \
  "  --gpu-trace FILE    write per request (CSV with a header) where its\n"   \
  "                      time went on the GPU's clock (%globaltimer; each\n"  \
  "                      kernel's first block start and last block end):\n"   \
  "                      host (send to done), issue (send to the last\n"     \
  "                      launch call's return), span (first kernel's start\n" \
  "                      to last kernel's end), outside (host - span: the\n" \
  "                      launch's way in and the completion's way out),\n"    \
  "                      kernels (the kernels' own times), first (the\n"      \
  "                      first kernel's), gaps (between kernels), us\n"       \
  "  --spin-wait         poll cudaEventQuery instead of\n"                     \
  "                      cudaStreamSynchronize\n"                              \
  "  --spin-arrival      with --rate: spin until each arrival instead of\n"    \
  "                      sleeping most of the way (a service that polls for\n" \
  "                      work; sleeping threads wake late on some VMs)\n"      \
  "  --record-each       record an event after each kernel (a driver call\n"  \
  "                      per launch, as the runtime's HP completions make)\n" \
  "  --write-each WHERE  after each kernel the stream writes a number\n"       \
  "                      (cuStreamWriteValue64) into WHERE: host (registered\n" \
  "                      host memory, as the runtime's HP completions) or\n"  \
  "                      device memory\n"

/// Parses the HP option at R into O; false if the name is not one.
[[maybe_unused]] static bool parseHpOption(ArgReader &R, HpOptions &O) {
  if (R.is("--block-us"))
    O.BlockUs = R.number(0, 1e7);
  else if (R.is("--blocks"))
    O.Blocks = (int)R.integer(1, 1 << 24);
  else if (R.is("--kernels"))
    O.Kernels = (int)R.integer(1, 10000);
  else if (R.is("--threads"))
    O.Threads = (int)R.integer(kSpinWords, 1024);
  else if (R.is("--rate"))
    O.Rate = R.number(0, 1e7);
  else if (R.is("--seed"))
    O.Seed = (uint64_t)R.integer(0, INT64_MAX);
  else if (R.is("--duration"))
    O.Duration = R.number(0.001, 1e6);
  else if (R.is("--requests"))
    O.Requests = R.integer(1, 1ll << 40);
  else if (R.is("--warmup"))
    O.Warmup = R.integer(0, 1ll << 40);
  else if (R.is("--drain"))
    O.Drain = R.number(0, 1e6);
  else if (R.is("--csv"))
    O.Csv = R.value();
  else if (R.is("--trace"))
    O.Trace = R.value();
  else if (R.is("--gpu-trace"))
    O.GpuTrace = R.value();
  else if (R.flag("--record-each"))
    O.RecordEach = true;
  else if (R.is("--write-each")) {
    std::string W = R.value();
    if (W != "host" && W != "device")
      die("--write-each wants host or device, not '%s'", W.c_str());
    O.WriteEach = W == "host" ? 1 : 2;
  }
  else if (R.flag("--spin-wait"))
    O.SpinWait = true;
  else if (R.flag("--spin-arrival"))
    O.SpinArrival = true;
  else
    return false;
  return true;
}

/// Nearest-rank percentile of sorted values (what colocate-report.py uses).
static double percentile(const std::vector<double> &Sorted, double Q) {
  if (Sorted.empty())
    return 0;
  size_t Rank = (size_t)std::ceil(Q * (double)Sorted.size());
  Rank = std::min(std::max<size_t>(Rank, 1), Sorted.size());
  return Sorted[Rank - 1];
}

/// A request's host-side parts (hp-serve --gpu-trace), us: from its arrival
/// to its send (0 in closed loop), and from the send to the last launch
/// call's return.
struct HostParts {
  double Late, Issue;
};

/// hp-serve --gpu-trace: writes per measured request (those launched and
/// within the trace's Slots) its parts to O.GpuTrace, and prints their means
/// (`hp: gpu-parts mean ...`). Firsts and Lasts hold O.Kernels words per
/// request: each kernel's first block start and last block end, in ns.
static bool writeGpuTrace(const HpOptions &O, const char *Settings,
                          const std::vector<double> &Lat,
                          const std::vector<HostParts> &HostUs,
                          const std::vector<unsigned long long> &Firsts,
                          const std::vector<unsigned long long> &Lasts,
                          size_t Slots) {
  FILE *F = std::fopen(O.GpuTrace.c_str(), "w");
  if (!F) {
    std::fprintf(stderr, "%s: error: cannot write %s: %s\n", ProgName,
                 O.GpuTrace.c_str(), std::strerror(errno));
    return false;
  }
  std::fprintf(F, "# settings %s\n", Settings);
  std::fprintf(F, "# per request, us: latency (arrival to done), late (arrival "
                  "to send), host (send to done), issue (send to the last "
                  "launch call's return), span (first kernel's first "
                  "block start to last kernel's last block end, GPU clock), "
                  "outside (host - span), kernels (sum of each kernel's first "
                  "start to last end), first (the first kernel's), gaps (sum "
                  "of last end to next first start), max_gap; each_kernel_us "
                  "and each_gap_us: every kernel's and gap's, ';' between\n");
  std::fprintf(F, "latency_us,late_us,host_us,issue_us,span_us,outside_us,kernels_us,"
                  "first_us,gaps_us,max_gap_us,each_kernel_us,each_gap_us\n");
  size_t K = (size_t)O.Kernels, N = std::min({HostUs.size(), Lat.size(), Slots});
  double Sum[7] = {0, 0, 0, 0, 0, 0, 0};
  size_t Rows = 0, Broken = 0;
  for (size_t I = 0; I < N; ++I) {
    const unsigned long long *Fi = &Firsts[I * K], *Li = &Lasts[I * K];
    bool Ok = true;
    for (size_t J = 0; J < K; ++J)
      Ok = Ok && Fi[J] != ~0ull && Li[J] >= Fi[J] && (J == 0 || Fi[J] >= Li[J - 1]);
    if (!Ok) { // not run, or a clock that went back: say so, skip it
      ++Broken;
      continue;
    }
    double Kernels = 0, Gaps = 0, MaxGap = 0;
    for (size_t J = 0; J < K; ++J) {
      Kernels += (double)(Li[J] - Fi[J]) / 1e3;
      if (J) {
        double G = (double)(Fi[J] - Li[J - 1]) / 1e3;
        Gaps += G;
        MaxGap = std::max(MaxGap, G);
      }
    }
    double Span = (double)(Li[K - 1] - Fi[0]) / 1e3;
    double Host = Lat[I] - HostUs[I].Late;
    double FirstUs = (double)(Li[0] - Fi[0]) / 1e3;
    double V[7] = {Host, Span, Host - Span, Kernels, FirstUs, Gaps, MaxGap};
    for (int J = 0; J < 7; ++J)
      Sum[J] += V[J];
    ++Rows;
    std::fprintf(F, "%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,", Lat[I],
                 HostUs[I].Late, Host, HostUs[I].Issue, Span, Host - Span, Kernels,
                 FirstUs, Gaps, MaxGap);
    for (size_t J = 0; J < K; ++J)
      std::fprintf(F, "%s%.1f", J ? ";" : "", (double)(Li[J] - Fi[J]) / 1e3);
    std::fputc(',', F);
    for (size_t J = 1; J < K; ++J)
      std::fprintf(F, "%s%.1f", J > 1 ? ";" : "", (double)(Fi[J] - Li[J - 1]) / 1e3);
    std::fputc('\n', F);
  }
  if (std::fclose(F) != 0) {
    std::fprintf(stderr, "%s: error: cannot write %s: %s\n", ProgName,
                 O.GpuTrace.c_str(), std::strerror(errno));
    return false;
  }
  double D = Rows ? (double)Rows : 1;
  std::printf("hp: gpu-parts requests %zu skipped %zu mean host %.2f span %.2f "
              "outside %.2f kernels %.2f first %.2f gaps %.2f max_gap %.2f us\n",
              Rows, Broken + (Lat.size() > N ? Lat.size() - N : 0), Sum[0] / D,
              Sum[1] / D, Sum[2] / D, Sum[3] / D, Sum[4] / D, Sum[5] / D,
              Sum[6] / D);
  return true;
}

/// Runs the request loop on stream S and prints the summary; returns the
/// exit status.
[[maybe_unused]] static int runHp(const HpOptions &O, cudaStream_t S,
                                  const DeviceInfo &Dev) {
  int Blocks = O.Blocks ? O.Blocks : Dev.SMs;
  unsigned long long Ns = (unsigned long long)std::llround(O.BlockUs * 1000.0);
  unsigned *Buf;
  CK(cudaMalloc(&Buf, sizeof(unsigned) * kSpinWords * (size_t)Blocks));
  CK(cudaMemset(Buf, 0, sizeof(unsigned) * kSpinWords * (size_t)Blocks));
  cudaEvent_t Done, Each;
  CK(cudaEventCreateWithFlags(&Done, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&Each, cudaEventDisableTiming));
  CK(cudaDeviceSynchronize());

  // --write-each: the driver's stream write, and where it writes.
  using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
  WriteFn Write = nullptr;
  CUdeviceptr WriteAt = 0;
  void *HostWord = nullptr;
  unsigned long long Written = 0;
  if (O.WriteEach) {
    cudaDriverEntryPointQueryResult Q;
    CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue64",
                                        reinterpret_cast<void **>(&Write), 12000,
                                        cudaEnableDefault, &Q));
    if (!Write || Q != cudaDriverEntryPointSuccess)
      die("no cuStreamWriteValue64 in this driver");
    if (O.WriteEach == 1) {
      HostWord = std::aligned_alloc(4096, 4096);
      if (!HostWord)
        die("out of memory");
      std::memset(HostWord, 0, 4096);
      CK(cudaHostRegister(HostWord, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable));
      void *Dev = nullptr;
      CK(cudaHostGetDevicePointer(&Dev, HostWord, 0));
      WriteAt = reinterpret_cast<CUdeviceptr>(Dev);
    } else {
      void *Dev = nullptr;
      CK(cudaMalloc(&Dev, 4096));
      WriteAt = reinterpret_cast<CUdeviceptr>(Dev);
    }
  }
  size_t Capacity =
      O.Requests ? (size_t)O.Requests
                 : (size_t)std::min(
                       1e8, (O.Rate ? O.Rate : 2e4) * O.Duration * 1.2 + 16);

  // --gpu-trace: per measured request and kernel, the first block's start
  // and the last block's end on the GPU's clock. Slot Slots (one past the
  // measured ones) takes the warm-up's and any beyond the capacity.
  // (At most 2^24 words per array, 128 MiB: requests beyond go untraced.)
  size_t Slots = O.GpuTrace.empty()
                     ? 0
                     : std::max<size_t>(1, std::min<size_t>(Capacity, (size_t(1) << 24) /
                                                                        size_t(O.Kernels)));
  unsigned long long *First = nullptr, *LastEnd = nullptr;
  if (!O.GpuTrace.empty()) {
    size_t Words = (Slots + 1) * (size_t)O.Kernels;
    CK(cudaMalloc(&First, sizeof(unsigned long long) * Words));
    CK(cudaMalloc(&LastEnd, sizeof(unsigned long long) * Words));
    CK(cudaMemset(First, 0xff, sizeof(unsigned long long) * Words));
    CK(cudaMemset(LastEnd, 0, sizeof(unsigned long long) * Words));
    CK(cudaDeviceSynchronize());
  }

  Clock::time_point Issued; // when the last launch call returned
  auto Request = [&](size_t Slot) {
    for (int K = 0; K < O.Kernels; ++K) {
      if (First) {
        size_t At = std::min(Slot, Slots) * (size_t)O.Kernels + (size_t)K;
        spinBlocksTimed<<<Blocks, O.Threads, 0, S>>>(Buf, Ns, First + At, LastEnd + At);
      } else {
        spinBlocks<<<Blocks, O.Threads, 0, S>>>(Buf, Ns);
      }
      if (O.RecordEach)
        CK(cudaEventRecord(Each, S));
      if (Write && Write(S, WriteAt, ++Written, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
        die("cuStreamWriteValue64 failed");
    }
    Issued = Clock::now();
    CK(cudaGetLastError());
    if (O.SpinWait) {
      CK(cudaEventRecord(Done, S));
      cudaError_t E;
      while ((E = cudaEventQuery(Done)) == cudaErrorNotReady) {
      }
      CK(E);
    } else {
      CK(cudaStreamSynchronize(S));
    }
  };

  for (long long I = 0; I < O.Warmup; ++I)
    Request(Slots);

  std::vector<double> Lat; // microseconds
  struct TraceRow {
    double At, Late, Issue, Wait; // seconds after T0; microseconds
  };
  std::vector<TraceRow> Trace;
  Lat.reserve(Capacity);
  if (!O.Trace.empty())
    Trace.reserve(Capacity);
  std::vector<HostParts> HostUs; // --gpu-trace
  if (First)
    HostUs.reserve(Capacity);
  long long Unserved = 0;
  double StartEpoch = epochNow();
  Clock::time_point T0 = Clock::now(), Last = T0;
  auto Us = [](Clock::time_point A, Clock::time_point B) {
    return std::chrono::duration<double, std::micro>(B - A).count();
  };

  if (O.Rate > 0) {
    std::mt19937_64 Rng(O.Seed);
    std::exponential_distribution<double> Gap(O.Rate);
    double Next = Gap(Rng); // seconds after T0
    Clock::time_point Cutoff =
        T0 + std::chrono::duration_cast<Clock::duration>(
                 std::chrono::duration<double>(O.Duration + O.Drain));
    for (long long I = 0;; ++I) {
      if (O.Requests ? I >= O.Requests : Next > O.Duration)
        break;
      Clock::time_point Arrival =
          T0 + std::chrono::duration_cast<Clock::duration>(
                   std::chrono::duration<double>(Next));
      if (!O.Requests && Clock::now() > Cutoff) {
        // Fallen behind for good: the rest of the window's requests get
        // their latency so far, a lower bound.
        Clock::time_point Now = Clock::now();
        for (; Next <= O.Duration; Next += Gap(Rng), ++Unserved)
          Lat.push_back(Us(T0 + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(Next)),
                           Now));
        break;
      }
      waitUntil(Arrival, O.SpinArrival);
      Clock::time_point Send = Clock::now();
      Request(Lat.size());
      Last = Clock::now();
      Lat.push_back(Us(Arrival, Last));
      if (First)
        HostUs.push_back({Us(Arrival, Send), Us(Send, Issued)});
      if (!O.Trace.empty())
        Trace.push_back({Next, Us(Arrival, Send), Us(Send, Issued), Us(Issued, Last)});
      Next += Gap(Rng);
    }
  } else {
    for (long long I = 0;; ++I) {
      if (O.Requests ? I >= O.Requests
                     : secondsBetween(T0, Clock::now()) >= O.Duration)
        break;
      Clock::time_point Send = Clock::now();
      Request(Lat.size());
      Last = Clock::now();
      Lat.push_back(Us(Send, Last));
      if (First)
        HostUs.push_back({0, Us(Send, Issued)});
    }
  }
  double Window = secondsBetween(T0, Last);
  double EndEpoch = StartEpoch + Window;
  CK(cudaDeviceSynchronize());
  std::vector<unsigned long long> Firsts, Lasts;
  if (First) {
    size_t Words = (Slots + 1) * (size_t)O.Kernels;
    Firsts.resize(Words);
    Lasts.resize(Words);
    CK(cudaMemcpy(Firsts.data(), First, sizeof(unsigned long long) * Words,
                  cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(Lasts.data(), LastEnd, sizeof(unsigned long long) * Words,
                  cudaMemcpyDeviceToHost));
    CK(cudaFree(First));
    CK(cudaFree(LastEnd));
  }
  CK(cudaEventDestroy(Done));
  CK(cudaEventDestroy(Each));
  if (HostWord) {
    CK(cudaHostUnregister(HostWord));
    std::free(HostWord);
  } else if (WriteAt) {
    CK(cudaFree(reinterpret_cast<void *>(WriteAt)));
  }
  CK(cudaFree(Buf));

  std::vector<double> Sorted = Lat;
  std::sort(Sorted.begin(), Sorted.end());
  double Mean = 0;
  for (double V : Lat)
    Mean += V;
  Mean = Lat.empty() ? 0 : Mean / (double)Lat.size();
  double Max = Sorted.empty() ? 0 : Sorted.back();
  double Achieved = Window > 0 ? (double)(Lat.size() - Unserved) / Window : 0;

  char Settings[512];
  std::snprintf(Settings, sizeof Settings,
                "block-us %g blocks %d kernels %d threads %d rate %g (%s, seed %llu) "
                "%s %g warmup %lld drain %g stream-priority %s wait %s%s%s%s "
                "device %s",
                O.BlockUs, Blocks, O.Kernels, O.Threads, O.Rate,
                O.Rate > 0 ? "poisson" : "closed loop",
                (unsigned long long)O.Seed,
                O.Requests ? "requests" : "duration",
                O.Requests ? (double)O.Requests : O.Duration,
                (long long)O.Warmup, O.Drain, priorityName(O.Priority),
                O.SpinWait ? "spin" : "sync",
                O.SpinArrival ? " spin-arrival" : "", O.RecordEach ? " record-each" : "",
                O.WriteEach == 1 ? " write-each host" : O.WriteEach == 2 ? " write-each device" : "",
                Dev.Name.c_str());

  if (!O.Csv.empty()) {
    FILE *F = std::fopen(O.Csv.c_str(), "w");
    if (!F)
      die("cannot write %s: %s", O.Csv.c_str(), std::strerror(errno));
    std::fprintf(F,
                 "# hp latencies in microseconds, one per request: scheduled "
                 "arrival (closed loop: send) to completion\n");
    std::fprintf(F, "# settings %s\n", Settings);
    std::fprintf(F, "# window %.6f %.6f\n", StartEpoch, EndEpoch);
    std::fprintf(F, "# unserved %lld\n", Unserved);
    for (double V : Lat)
      std::fprintf(F, "%.3f\n", V);
    if (std::fclose(F) != 0)
      die("cannot write %s: %s", O.Csv.c_str(), std::strerror(errno));
  }

  if (!O.Trace.empty()) {
    FILE *F = std::fopen(O.Trace.c_str(), "w");
    if (!F)
      die("cannot write %s: %s", O.Trace.c_str(), std::strerror(errno));
    std::fprintf(F, "# settings %s\n", Settings);
    std::fprintf(F, "# start %.6f (epoch seconds of arrival 0)\n", StartEpoch);
    std::fprintf(F, "at_s,latency_us,late_us,issue_us,wait_us\n");
    for (const TraceRow &T : Trace)
      std::fprintf(F, "%.6f,%.3f,%.3f,%.3f,%.3f\n", T.At, T.Late + T.Issue + T.Wait, T.Late,
                   T.Issue, T.Wait);
    if (std::fclose(F) != 0)
      die("cannot write %s: %s", O.Trace.c_str(), std::strerror(errno));
  }

  if (!O.GpuTrace.empty() &&
      !writeGpuTrace(O, Settings, Lat, HostUs, Firsts, Lasts, Slots))
    return 1;

  std::printf("hp: settings %s\n", Settings);
  std::printf("hp: window %.6f %.6f\n", StartEpoch, EndEpoch);
  if (Unserved)
    std::printf("hp: unserved %lld requests not done %g s after the window "
                "(their latencies are lower bounds)\n",
                Unserved, O.Drain);
  std::printf("hp: requests %zu rate %.1f p50 %.1f p99 %.1f p999 %.1f mean "
              "%.1f max %.1f us\n",
              Lat.size(), Achieved, percentile(Sorted, 0.5),
              percentile(Sorted, 0.99), percentile(Sorted, 0.999), Mean, Max);
  if (O.Rate <= 0)
    std::printf("hp: capacity %.1f req/s\n", Achieved);
  std::fflush(stdout);
  if (Lat.empty()) {
    std::fprintf(stderr, "%s: error: no request measured\n", ProgName);
    return 1;
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// The BE kernel loop
//===----------------------------------------------------------------------===//

struct BeOptions {
  double BlockUs = 10;
  long long Work = 0; // 0: calibrate from BlockUs
  int Blocks = 0;     // 0: 8 waves
  int Threads = 256;
  long long Iters = 0;
  double Duration = 0; // 0 with Iters == 0: until stopped
  double Progress = 0.5;
  bool CalibrateOnly = false;
  StreamPriority Priority = StreamPriority::Default;
};

/// Prefix P is "--" for be-spin and "--be-" for colocate-streams.
[[maybe_unused]] static bool parseBeOption(ArgReader &R, BeOptions &O,
                                           const std::string &P) {
  if (R.is((P + "block-us").c_str()))
    O.BlockUs = R.number(0.01, 1e7);
  else if (R.is((P + "work").c_str()))
    O.Work = R.integer(1, UINT32_MAX);
  else if (R.is((P + "blocks").c_str()))
    O.Blocks = (int)R.integer(1, 1 << 24);
  else if (R.is((P + "threads").c_str())) {
    O.Threads = (int)R.integer(32, 1024);
    if (O.Threads % 32)
      die("%sthreads: %d is not a multiple of 32 (whole warps)", P.c_str(), O.Threads);
  }
  else if (R.is((P + "progress").c_str()))
    O.Progress = R.number(0.01, 1e6);
  else
    return false;
  return true;
}

/// The help text of the BE options with prefix P.
[[maybe_unused]] static std::string beOptionsHelp(const std::string &P) {
  const char *Lines[][2] = {
      {"block-us U",
       "calibrate the work so that blocks run about U us (default 10)"},
      {"work N", "hashing rounds per thread instead of calibrating (the"},
      {"", "checksum depends on it: pass the same N to compare runs)"},
      {"blocks N", "blocks per kernel (default: 8 waves = 8 x SMs x blocks"},
      {"", "per SM)"},
      {"threads N", "threads per block, a multiple of 32 (default 256)"},
      {"progress S", "print a progress line every S s (default 0.5)"}};
  std::string Out;
  for (auto &L : Lines) {
    char Buf[160];
    std::snprintf(Buf, sizeof Buf, "  %-18s  %s\n",
                  *L[0] ? (P + L[0]).c_str() : "", L[1]);
    Out += Buf;
  }
  return Out;
}

/// Set by the caller (signal handler, or the HP thread) to end the loop.
static std::atomic<bool> BeStop{false};
/// Set by runBe when its timed loop starts.
static std::atomic<bool> BeRunning{false};

/// The median of five runs of \p Launch (work queued on \p S), each timed
/// by CUDA events around it, in microseconds.
template <class F>
[[maybe_unused]] static double medianOfFiveUs(cudaStream_t S, F Launch) {
  cudaEvent_t A, B;
  CK(cudaEventCreate(&A));
  CK(cudaEventCreate(&B));
  std::vector<float> Ms;
  for (int R = 0; R < 5; ++R) {
    CK(cudaEventRecord(A, S));
    Launch();
    CK(cudaGetLastError());
    CK(cudaEventRecord(B, S));
    CK(cudaEventSynchronize(B));
    float T;
    CK(cudaEventElapsedTime(&T, A, B));
    Ms.push_back(T);
  }
  CK(cudaEventDestroy(A));
  CK(cudaEventDestroy(B));
  std::sort(Ms.begin(), Ms.end());
  return Ms[Ms.size() / 2] * 1000.0;
}

/// Five timed kernels with `Work`; the median kernel time in microseconds.
[[maybe_unused]] static double timeWork(const unsigned *In, unsigned *Out,
                                        unsigned Work, unsigned long long *Sum,
                                        unsigned long long *Cnt, int Blocks,
                                        int Threads, cudaStream_t S) {
  return medianOfFiveUs(
      S, [&] { workBlocks<<<Blocks, Threads, 0, S>>>(In, Out, Work, Sum, Cnt); });
}

/// The work (hashing rounds) for blocks of about \p BlockUs: from 256,
/// four rounds of scaling by what \p PerBlockUs(Work) measures.
template <class F>
[[maybe_unused]] static unsigned calibrateWork(double BlockUs, F PerBlockUs) {
  unsigned Work = 256;
  for (int Round = 0; Round < 4; ++Round) {
    double Scaled = std::round(Work * BlockUs / std::max(PerBlockUs(Work), 0.01));
    Work = (unsigned)std::min(std::max(Scaled, 1.0), (double)UINT32_MAX);
  }
  return Work;
}

/// The launch-cost benchmarks' options (ptb-launch-costs.cu,
/// workblocks-forms.cu): block length, launches per batch, batches, and
/// the work itself (0: calibrated to the block length; given, it is used
/// as it is, e.g. under a profiler, whose slowed launches would make the
/// calibration pick a work of 1).
struct BatchOptions {
  double BlockUs = 10;
  int Launches, Batches;
  unsigned Work = 0;
};
/// Parses the option at R into O; false if the name is not one.
[[maybe_unused]] static bool parseBatchOption(ArgReader &R, BatchOptions &O) {
  if (R.is("--block-us"))
    O.BlockUs = R.number(0.1, 1e5);
  else if (R.is("--launches"))
    O.Launches = (int)R.integer(1, 100000);
  else if (R.is("--batches"))
    O.Batches = (int)R.integer(1, 1000);
  else if (R.is("--work"))
    O.Work = (unsigned)R.integer(1, UINT32_MAX);
  else
    return false;
  return true;
}
/// The work of a batch benchmark's blocks: --work, or calibrated to
/// --block-us through \p PerBlockUs(Work).
template <class F>
[[maybe_unused]] static unsigned batchWork(const BatchOptions &O, F PerBlockUs) {
  return O.Work ? O.Work : calibrateWork(O.BlockUs, PerBlockUs);
}

/// What the launch-cost benchmarks give workBlocks (ptb-launch-costs.cu,
/// workblocks-forms.cu): its arrays for \p Elems threads in all (the input
/// bytes 0x5a), its two counters, \p Ctrls 16-byte control blocks (as the
/// runtime's), and a stream.
struct WorkSetup {
  unsigned *In = nullptr, *Out = nullptr;
  unsigned long long *Counters = nullptr;
  CUdeviceptr Ctrl = 0;
  cudaStream_t S = nullptr;
};
[[maybe_unused]] static WorkSetup workSetup(size_t Elems, size_t Ctrls) {
  WorkSetup W;
  CK(cudaMalloc(&W.In, Elems * sizeof(unsigned)));
  CK(cudaMalloc(&W.Out, Elems * sizeof(unsigned)));
  CK(cudaMalloc(&W.Counters, 2 * sizeof(unsigned long long)));
  CK(cudaMemset(W.In, 0x5a, Elems * sizeof(unsigned)));
  CK(cudaMalloc(reinterpret_cast<void **>(&W.Ctrl), 16 * Ctrls));
  W.S = makeStream(StreamPriority::Default);
  return W;
}

/// GPU microseconds per launch of \p N launches queued back to back on
/// \p S (\p Launch(I) queues the I-th), by events around all of them.
template <class F>
[[maybe_unused]] static double usPerLaunch(cudaStream_t S, int N, F Launch) {
  cudaEvent_t A, B;
  CK(cudaEventCreate(&A));
  CK(cudaEventCreate(&B));
  CK(cudaEventRecord(A, S));
  for (int I = 0; I < N; ++I)
    Launch(I);
  CK(cudaEventRecord(B, S));
  CK(cudaEventSynchronize(B));
  float Ms;
  CK(cudaEventElapsedTime(&Ms, A, B));
  CK(cudaEventDestroy(A));
  CK(cudaEventDestroy(B));
  return Ms * 1000.0 / N;
}

/// \p Run(I) for I in [0, Count) once each to warm up, then \p Batches
/// rounds of all of them, interleaved (drift falls on all alike); each
/// one's median.
template <class F>
[[maybe_unused]] static std::vector<double> interleavedMedians(int Count, int Batches, F Run) {
  std::vector<std::vector<double>> Us(Count);
  for (int I = 0; I < Count; ++I)
    Run(I);
  for (int B = 0; B < Batches; ++B)
    for (int I = 0; I < Count; ++I)
      Us[I].push_back(Run(I));
  std::vector<double> Med;
  for (std::vector<double> &V : Us) {
    std::sort(V.begin(), V.end());
    Med.push_back(V[V.size() / 2]);
  }
  return Med;
}

/// A table of \p Med (us per launch, row I named \p Name(I)) against the
/// first row.
template <class F>
[[maybe_unused]] static void printAgainstFirst(const char *Head, const std::vector<double> &Med,
                                               F Name) {
  std::printf("%-34s %12s %10s %8s\n", Head, "us/launch", "added us", "ratio");
  for (size_t I = 0; I < Med.size(); ++I)
    std::printf("%-34s %12.2f %10.2f %8.3f\n", Name(I), Med[I], Med[I] - Med[0],
                Med[I] / Med[0]);
  std::fflush(stdout);
}

/// A checked driver API call (programs that link the driver: -lcuda).
[[maybe_unused]] static void ckDrv(CUresult R, const char *What) {
  if (R != CUDA_SUCCESS) {
    const char *Str = nullptr;
    cuGetErrorString(R, &Str);
    die("%s failed: %s", What, Str ? Str : "?");
  }
}

/// Runs BE kernels on stream S until Iters, Duration or BeStop, printing
/// progress; then verifies and prints the checksum. Returns the exit status.
[[maybe_unused]] static int runBe(const BeOptions &O, cudaStream_t S,
                                  const DeviceInfo &Dev) {
  int PerSM = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&PerSM, workBlocks,
                                                   O.Threads, 0));
  if (PerSM < 1)
    die("workBlocks does not fit on an SM with %d threads", O.Threads);
  int Wave = Dev.SMs * PerSM;
  int Blocks = O.Blocks ? O.Blocks : 8 * Wave;
  double Waves = std::ceil((double)Blocks / Wave);
  size_t N = (size_t)Blocks * O.Threads;

  std::vector<unsigned> HostIn(N);
  for (size_t I = 0; I < N; ++I) {
    uint64_t Z = (I + 1) * 0x9e3779b97f4a7c15ull; // splitmix64
    Z = (Z ^ (Z >> 30)) * 0xbf58476d1ce4e5b9ull;
    Z = (Z ^ (Z >> 27)) * 0x94d049bb133111ebull;
    HostIn[I] = (unsigned)(Z ^ (Z >> 31));
  }
  unsigned *In, *Out;
  unsigned long long *Counters; // [0] sum, [1] blocks done
  CK(cudaMalloc(&In, N * sizeof(unsigned)));
  CK(cudaMalloc(&Out, N * sizeof(unsigned)));
  CK(cudaMalloc(&Counters, 2 * sizeof(unsigned long long)));
  CK(cudaMemcpy(In, HostIn.data(), N * sizeof(unsigned),
                cudaMemcpyHostToDevice));
  CK(cudaMemset(Out, 0, N * sizeof(unsigned)));

  // Calibration: not part of the output (the counters are reset after it and
  // the output of a kernel does not depend on the ones before).
  unsigned Work = (unsigned)O.Work;
  if (!Work)
    Work = calibrateWork(O.BlockUs, [&](unsigned W) {
      return timeWork(In, Out, W, Counters, Counters + 1, Blocks, O.Threads, S) / Waves;
    });
  double BlockUs =
      timeWork(In, Out, Work, Counters, Counters + 1, Blocks, O.Threads, S) /
      Waves;
  std::printf("be: work %u blocks %d threads %d (%d per SM, %g waves) block "
              "time %.1f us%s\n",
              Work, Blocks, O.Threads, PerSM, Waves, BlockUs,
              O.Work ? ""
                     : " (calibrated: pass --work to repeat the checksum)");
  std::fflush(stdout);
  if (O.CalibrateOnly)
    return 0;
  CK(cudaMemset(Counters, 0, 2 * sizeof(unsigned long long)));
  CK(cudaDeviceSynchronize());

  cudaEvent_t Ev[2];
  for (cudaEvent_t &E : Ev)
    CK(cudaEventCreateWithFlags(&E, cudaEventDisableTiming));
  long long Launched = 0, Completed = 0;
  Clock::time_point T0 = Clock::now();
  double NextProgress = 0;
  auto Progress = [&](double T) {
    std::printf("be: t=%.3f kernels=%lld epoch=%.6f\n", T, Completed,
                epochNow());
    std::fflush(stdout);
  };
  Progress(0);
  NextProgress = O.Progress;
  BeRunning = true;
  for (;;) {
    double T = secondsBetween(T0, Clock::now());
    if (T >= NextProgress) {
      Progress(T);
      NextProgress = (std::floor(T / O.Progress) + 1) * O.Progress;
    }
    if (BeStop || (O.Iters && Launched >= O.Iters) ||
        (O.Duration > 0 && T >= O.Duration))
      break;
    // At most two kernels in flight: the GPU never idles between kernels,
    // and the completed count stays current.
    while (Completed < Launched) {
      cudaError_t E = cudaEventQuery(Ev[Completed % 2]);
      if (E == cudaErrorNotReady) {
        if (Launched - Completed < 2)
          break;
        CK(cudaEventSynchronize(Ev[Completed % 2]));
        E = cudaSuccess;
      }
      CK(E);
      ++Completed;
    }
    workBlocks<<<Blocks, O.Threads, 0, S>>>(In, Out, Work, Counters,
                                            Counters + 1);
    CK(cudaGetLastError());
    CK(cudaEventRecord(Ev[Launched % 2], S));
    ++Launched;
  }
  CK(cudaStreamSynchronize(S));
  Completed = Launched;
  double T = secondsBetween(T0, Clock::now());
  Progress(T);

  std::vector<unsigned> HostOut(N);
  unsigned long long C[2];
  CK(cudaMemcpy(HostOut.data(), Out, N * sizeof(unsigned),
                cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(C, Counters, sizeof C, cudaMemcpyDeviceToHost));
  for (cudaEvent_t E : Ev)
    CK(cudaEventDestroy(E));
  CK(cudaFree(In));
  CK(cudaFree(Out));
  CK(cudaFree(Counters));

  unsigned long long OutSum = 0;
  for (unsigned V : HostOut)
    OutSum += V;
  unsigned long long K = (unsigned long long)Launched;
  std::printf("be: kernels %lld in %.3f s, %.1f kernels/s\n", Launched, T,
              T > 0 ? (double)Launched / T : 0.0);
  std::printf("be: checksum %016llx work %u blocks %d threads %d\n",
              (unsigned long long)fnv1a(HostOut.data(), N * sizeof(unsigned)),
              Work, Blocks, O.Threads);
  bool Ok = C[1] == K * (unsigned long long)Blocks && C[0] == K * OutSum;
  if (Ok)
    std::printf("be: verify ok (%lld kernels, every block ran once)\n",
                Launched);
  else
    std::printf("be: verify FAILED: %llu blocks ran, expected %llu; block "
                "sums %016llx, expected %016llx\n",
                C[1], K * (unsigned long long)Blocks, C[0], K * OutSum);
  std::fflush(stdout);
  return Ok ? 0 : 3;
}
