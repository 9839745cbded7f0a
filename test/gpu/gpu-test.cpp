//===- gpu-test.cpp - run the variants on a GPU and compare ---------------===//
//
// Usage: tally-gpu-test --module SUITE.fatbin --metadata SUITE.yaml
//                       [--only NAME] [--seed N] [--quick] [--bench]
//                       [--no-stream-wait]
//                       [--timeout SECONDS]  (per wait; a longer wait is a hang)
//
// Correctness (default): for each kernel of examples/gpu/suite.cu, run the
// original, the sliced variant with several slice sizes and the PTB variant
// with several worker counts, preempted at random points and resumed until
// done, and require outputs bit-identical to the original's, no hang, the
// PTB progress counters consistent (every claimed block finished), and work
// queued on another stream behind cuStreamWaitValue32 on the done count to
// see the final outputs.
//
// --bench: run time of each variant against the original (median of 30
// runs, CUDA events) at two input scales (kernels of a few microseconds,
// and 16 times larger), PTB with one block per claim and with the chunk
// that fits a 10 us turnaround, each launch with a fresh control block from
// a pool zeroed beforehand; then the PTB preemption latency (host flag
// write to kernel done).
//
// Exits 77 (skipped) when no GPU is usable, 1 on any mismatch or error.
//
//===----------------------------------------------------------------------===//

#include "tally/Metadata/Metadata.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace tally;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string &Msg) {
  std::fprintf(stderr, "tally-gpu-test: error: %s\n", Msg.c_str());
  std::exit(1);
}

void check(CUresult R, const char *What) {
  if (R == CUDA_SUCCESS)
    return;
  const char *Name = nullptr, *Str = nullptr;
  cuGetErrorName(R, &Name);
  cuGetErrorString(R, &Str);
  die(std::string(What) + ": " + (Name ? Name : "?") + " (" + (Str ? Str : "") + ")");
}
#define CK(call) check((call), #call)

enum class Init { Random, Zero, Poison };
/// F16X2: two halves per word, small integers in [-4, 4] (exact products
/// and sums, so any summation order gives the same bits).
enum class Elem { I32, F32, F16X2 };

struct Buffer {
  size_t Count;
  Elem Type;
  Init How;
  bool Output; ///< compared after the run
};

struct Arg {
  enum Kind { Buf, I32, F32 } K;
  int Index = 0; ///< buffer index
  int32_t I = 0;
  float F = 0;
};

struct Spec {
  std::string Kernel;
  unsigned Grid[3];
  unsigned Block[3];
  unsigned DynSmem = 0;
  std::vector<Buffer> Bufs;
  std::vector<Arg> Args;
  /// Output in a __device__ global of this name (count in Bufs[0]).
  std::string GlobalOut;
};

Arg buf(int I) { return {Arg::Buf, I}; }
Arg i32(int32_t V) { Arg A{Arg::I32}; A.I = V; return A; }
Arg f32(float V) { Arg A{Arg::F32}; A.F = V; return A; }
Buffer in(size_t N, Elem T = Elem::I32) { return {N, T, Init::Random, false}; }
Buffer out(size_t N, Elem T = Elem::I32) { return {N, T, Init::Poison, true}; }
Buffer inout(size_t N, Elem T, Init How) { return {N, T, How, true}; }

/// The suite. Sizes are small for the correctness runs; --bench scales the
/// grid-size-dependent ones with \p S.
std::vector<Spec> suite(unsigned S = 1) {
  const Elem F = Elem::F32;
  std::vector<Spec> V;
  V.push_back({"early_return_before_sync", {40 * S, 1, 1}, {256, 1, 1}, 0,
               {in(40 * S * 256), out(40 * S * 256)}, {buf(0), buf(1), i32(40 * S * 256 - 100)}});
  V.push_back({"early_return_after_sync", {50 * S, 1, 1}, {128, 1, 1}, 0,
               {in(50 * S * 128), out(50 * S * 128)}, {buf(0), buf(1)}});
  for (const char *K : {"syncthreads_or", "syncthreads_and", "syncthreads_count"})
    V.push_back({K, {30 * S, 1, 1}, {256, 1, 1}, 0, {in(30 * S * 256), out(30 * S * 256)},
                 {buf(0), buf(1)}});
  V.push_back({"cg_block_sync", {30 * S, 1, 1}, {256, 1, 1}, 0,
               {in(30 * S * 256, F), out(30 * S * 256, F)}, {buf(0), buf(1)}});
  V.push_back({"named_barriers", {40 * S, 1, 1}, {128, 1, 1}, 0,
               {in(40 * S * 128), out(40 * S * 128)}, {buf(0), buf(1)}});
  {
    int W = 300, H = 200 * S;
    V.push_back({"grid2d", {(W + 15) / 16, (unsigned)(H + 7) / 8, 1}, {16, 8, 1}, 0,
                 {in(W * H, F), out(W * H, F)}, {buf(0), buf(1), i32(W), i32(H)}});
  }
  V.push_back({"grid3d", {5, 3, 4 * S}, {8, 4, 2}, 0, {out(40 * 12 * 8 * S)}, {buf(0)}});
  {
    int N = 100000 * S;
    V.push_back({"grid_stride", {37, 1, 1}, {128, 1, 1}, 0,
                 {in(N, F), inout(N, F, Init::Random)},
                 {i32(N), f32(1.5f), buf(0), buf(1)}});
  }
  V.push_back({"dyn_smem_reverse", {30 * S, 1, 1}, {256, 1, 1}, 1024,
               {in(30 * S * 256), out(30 * S * 256)}, {buf(0), buf(1)}});
  V.push_back({"warp_shuffle", {30 * S, 1, 1}, {256, 1, 1}, 0,
               {in(30 * S * 256), out(30 * S * 8)}, {buf(0), buf(1)}});
  V.push_back({"warp_vote", {30 * S, 1, 1}, {256, 1, 1}, 0,
               {in(30 * S * 256), out(30 * S * 256)}, {buf(0), buf(1)}});
  {
    int N = 50000 * S;
    V.push_back({"atomic_histogram", {(unsigned)(N + 255) / 256, 1, 1}, {256, 1, 1}, 0,
                 {in(N), inout(64, Elem::I32, Init::Zero)}, {buf(0), buf(1), i32(N)}});
  }
  {
    unsigned N = 128 * std::min(S, 16u);
    V.push_back({"gemm_tiled", {N / 16, N / 16, 1}, {16, 16, 1}, 0,
                 {in(N * N, F), in(N * N, F), out(N * N, F)},
                 {buf(0), buf(1), buf(2), i32(N)}});
  }
  for (const char *K : {"func_with_barrier", "mbarrier_phases", "staggered_returns"})
    V.push_back({K, {40 * S, 1, 1}, {128, 1, 1}, 0, {in(40 * S * 128), out(40 * S * 128)},
                 {buf(0), buf(1)}});
  V.push_back({"bulk_copy", {40 * S, 1, 1}, {64, 1, 1}, 0,
               {in(40 * S * 64 * 4), out(40 * S * 64 * 4)}, {buf(0), buf(1)}});
  V.push_back({"block_scan", {30 * S, 1, 1}, {256, 1, 1}, 0,
               {in(30 * S * 256), out(30 * S * 256)}, {buf(0), buf(1)}});
  V.push_back({"thread_exit", {30 * S, 1, 1}, {256, 1, 1}, 0,
               {in(30 * S * 256), out(30 * S * 256)}, {buf(0), buf(1)}});
  V.push_back({"wgmma_tile", {40 * S, 1, 1}, {128, 1, 1}, 0,
               {in(40 * S * 64 * 16 / 2, Elem::F16X2), in(40 * S * 16 * 8 / 2, Elem::F16X2),
                out(40 * S * 128 * 4, F)},
               {buf(0), buf(1), buf(2)}});
  Spec NP{"no_params", {64, 1, 1}, {32, 1, 1}, 0, {out(64 * 32)}, {}};
  NP.GlobalOut = "noparam_out";
  V.push_back(NP);
  {
    int N = 30 * S * 256 - 77;
    V.push_back({"block_reduce", {30 * S, 1, 1}, {256, 1, 1}, 0, {in(N + 77), out(30 * S)},
                 {buf(0), buf(1), i32(N)}});
  }
  return V;
}

struct Device {
  CUdevice Dev;
  CUcontext Ctx;
  CUmodule Mod;
  CUstream S, S2, S3;
  int SMs = 0;
};

struct Instance {
  const Spec *Sp;
  std::vector<CUdeviceptr> Ptrs;
  std::vector<std::vector<uint32_t>> Initial; ///< host images of the inputs
  uint64_t Blocks = 0;
};

uint32_t poisonWord() { return 0xCDCDCDCDu; }

Instance prepare(Device &D, const Spec &Sp, uint32_t Seed) {
  Instance I;
  I.Sp = &Sp;
  I.Blocks = uint64_t(Sp.Grid[0]) * Sp.Grid[1] * Sp.Grid[2];
  std::mt19937 Rng(Seed);
  for (size_t B = 0; B < Sp.Bufs.size(); ++B) {
    const Buffer &Bf = Sp.Bufs[B];
    std::vector<uint32_t> H(Bf.Count);
    for (uint32_t &W : H) {
      if (Bf.How == Init::Zero) {
        W = 0;
      } else if (Bf.How == Init::Poison) {
        W = poisonWord();
      } else if (Bf.Type == Elem::F16X2) {
        static const uint16_t Small[] = {0x0000, 0x3C00, 0x4000, 0x4200, 0x4400,
                                         0xBC00, 0xC000, 0xC200, 0xC400};
        W = Small[Rng() % 9] | (uint32_t(Small[Rng() % 9]) << 16);
      } else if (Bf.Type == Elem::F32) {
        float F = std::uniform_real_distribution<float>(-1.0f, 1.0f)(Rng);
        std::memcpy(&W, &F, 4);
      } else {
        W = Rng() % 1000;
      }
    }
    CUdeviceptr P = 0;
    if (!Sp.GlobalOut.empty()) {
      size_t Bytes = 0;
      CK(cuModuleGetGlobal(&P, &Bytes, D.Mod, Sp.GlobalOut.c_str()));
      if (Bytes != Bf.Count * 4)
        die("global " + Sp.GlobalOut + " has an unexpected size");
    } else {
      CK(cuMemAlloc(&P, Bf.Count * 4));
    }
    I.Ptrs.push_back(P);
    I.Initial.push_back(std::move(H));
  }
  return I;
}

void resetBuffers(Device &D, Instance &I) {
  for (size_t B = 0; B < I.Ptrs.size(); ++B)
    CK(cuMemcpyHtoDAsync(I.Ptrs[B], I.Initial[B].data(), I.Initial[B].size() * 4, D.S));
}

std::vector<std::vector<uint32_t>> readOutputs(Device &D, Instance &I) {
  CK(cuStreamSynchronize(D.S));
  std::vector<std::vector<uint32_t>> Out;
  for (size_t B = 0; B < I.Ptrs.size(); ++B) {
    if (!I.Sp->Bufs[B].Output)
      continue;
    std::vector<uint32_t> H(I.Sp->Bufs[B].Count);
    CK(cuMemcpyDtoH(H.data(), I.Ptrs[B], H.size() * 4));
    Out.push_back(std::move(H));
  }
  return Out;
}

void freeInstance(Instance &I) {
  if (!I.Sp->GlobalOut.empty())
    return;
  for (CUdeviceptr P : I.Ptrs)
    cuMemFree(P);
}

/// Argument storage for cuLaunchKernel: the original arguments, then the
/// variant's extra parameters in metadata order.
struct ArgPack {
  std::vector<uint64_t> Store;
  std::vector<void *> Ptrs;
  void add(const void *V, size_t Bytes) {
    Store.push_back(0);
    std::memcpy(&Store.back(), V, Bytes);
  }
  void **finish() {
    Ptrs.clear();
    for (uint64_t &S : Store)
      Ptrs.push_back(&S);
    return Ptrs.data();
  }
};

ArgPack originalArgs(const Instance &I) {
  ArgPack P;
  P.Store.reserve(16);
  for (const Arg &A : I.Sp->Args) {
    if (A.K == Arg::Buf)
      P.add(&I.Ptrs[A.Index], 8);
    else if (A.K == Arg::I32)
      P.add(&A.I, 4);
    else
      P.add(&A.F, 4);
  }
  return P;
}

/// Appends the extra parameters by role.
void addExtras(ArgPack &P, const VariantRecord &V, const Spec &Sp, uint32_t Offset,
               CUdeviceptr Ctrl, uint32_t Chunk = 1) {
  for (const ExtraParam &E : V.ExtraParams) {
    uint32_t U = 0;
    if (E.Role == "slice_offset")
      U = Offset;
    else if (E.Role == "grid_x")
      U = Sp.Grid[0];
    else if (E.Role == "grid_y")
      U = Sp.Grid[1];
    else if (E.Role == "grid_z")
      U = Sp.Grid[2];
    else if (E.Role == "chunk")
      U = Chunk;
    else if (E.Role == "control") {
      P.add(&Ctrl, 8);
      continue;
    } else
      die("unknown extra parameter role '" + E.Role + "' in metadata");
    P.add(&U, 4);
  }
}

/// Waits for the stream with a deadline; a hang is a failure.
double WaitSeconds = 20;
/// Queue work behind cuStreamWaitValue32 on the PTB done count (off under
/// compute-sanitizer, which serialises streams: the wait, queued before the
/// relaunches it waits for, would block them).
bool StreamWait = true;

void waitOrDie(CUstream S, const std::string &What, double Seconds = WaitSeconds) {
  auto Deadline = Clock::now() + std::chrono::duration<double>(Seconds);
  while (true) {
    CUresult R = cuStreamQuery(S);
    if (R == CUDA_SUCCESS)
      return;
    if (R != CUDA_ERROR_NOT_READY)
      check(R, What.c_str());
    auto Now = Clock::now();
    if (Now > Deadline)
      die("HANG: " + What + " did not finish within " + std::to_string(Seconds) + " s");
    // Spin for the first 20 ms so latency measurements are not rounded up
    // to the scheduler's sleep granularity; then back off.
    if (Now > Deadline - std::chrono::duration<double>(Seconds) + std::chrono::milliseconds(20))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

CUfunction getFunction(Device &D, const std::string &Name) {
  CUfunction F;
  CK(cuModuleGetFunction(&F, D.Mod, Name.c_str()));
  return F;
}

void launch(Device &D, CUfunction F, const unsigned G[3], const Spec &Sp, ArgPack &P,
            CUstream S) {
  CK(cuLaunchKernel(F, G[0], G[1], G[2], Sp.Block[0], Sp.Block[1], Sp.Block[2],
                    Sp.DynSmem, S, P.finish(), nullptr));
}

void runOriginal(Device &D, Instance &I) {
  ArgPack P = originalArgs(I);
  launch(D, getFunction(D, I.Sp->Kernel), I.Sp->Grid, *I.Sp, P, D.S);
}

void runSliced(Device &D, Instance &I, const VariantRecord &V, uint64_t SliceBlocks) {
  CUfunction F = getFunction(D, V.Name);
  for (uint64_t Off = 0; Off < I.Blocks; Off += SliceBlocks) {
    unsigned G[3] = {(unsigned)std::min<uint64_t>(SliceBlocks, I.Blocks - Off), 1, 1};
    ArgPack P = originalArgs(I);
    addExtras(P, V, *I.Sp, (uint32_t)Off, 0);
    launch(D, F, G, *I.Sp, P, D.S);
  }
}

struct PtbStats {
  unsigned Launches = 0;
  unsigned Preempted = 0;
  /// The work a third stream queued behind `done` (cuStreamWaitValue32)
  /// saw the final outputs.
  bool StreamOrderOK = true;
};

/// Runs the PTB variant to completion with \p Workers blocks, setting the
/// preemption flag after a random delay on up to \p MaxPreempt launches.
PtbStats runPtb(Device &D, Instance &I, const VariantRecord &V, unsigned Workers,
                unsigned MaxPreempt, std::mt19937 &Rng, unsigned Chunk = 1) {
  CUfunction F = getFunction(D, V.Name);
  CUdeviceptr Ctrl;
  CK(cuMemAlloc(&Ctrl, 16));
  CK(cuMemsetD32Async(Ctrl, 0, 4, D.S));
  PtbStats St;
  // What a runtime does to keep the application's stream order across
  // preemptions: work queued after the kernel waits, on the GPU, for
  // `done` to reach the block count. Here that work copies the outputs;
  // the copy must hold the final results.
  CK(cuStreamSynchronize(D.S)); // the control block is zero before the wait is read
  struct Snapshot {
    CUdeviceptr Copy, Output;
    size_t Bytes;
  };
  std::vector<Snapshot> Snaps;
  for (size_t B = 0; B < I.Ptrs.size() && StreamWait; ++B)
    if (I.Sp->Bufs[B].Output) {
      Snapshot S{0, I.Ptrs[B], I.Sp->Bufs[B].Count * 4};
      CK(cuMemAlloc(&S.Copy, S.Bytes));
      Snaps.push_back(S);
    }
  if (StreamWait)
    CK(cuStreamWaitValue32(D.S3, Ctrl + 8, (cuuint32_t)I.Blocks, CU_STREAM_WAIT_VALUE_GEQ));
  for (const Snapshot &S : Snaps)
    CK(cuMemcpyDtoDAsync(S.Copy, S.Output, S.Bytes, D.S3));
  const unsigned Delays[] = {0, 2, 10, 40, 150};
  while (true) {
    CK(cuMemsetD32Async(Ctrl + 4, 0, 1, D.S));
    unsigned G[3] = {Workers, 1, 1};
    ArgPack P = originalArgs(I);
    addExtras(P, V, *I.Sp, 0, Ctrl, Chunk);
    launch(D, F, G, *I.Sp, P, D.S);
    bool Preempt = St.Preempted < MaxPreempt;
    if (Preempt) {
      std::this_thread::sleep_for(std::chrono::microseconds(Delays[Rng() % 5]));
      CK(cuStreamWriteValue32(D.S2, Ctrl + 4, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
    }
    waitOrDie(D.S, "PTB launch of " + V.Name);
    CK(cuStreamSynchronize(D.S2));
    ++St.Launches;
    uint32_t C[4];
    CK(cuMemcpyDtoH(C, Ctrl, 16));
    uint32_t Claimed = std::min<uint64_t>(C[0], I.Blocks), Done = C[2];
    if (Done != Claimed)
      die(V.Name + ": after a launch " + std::to_string(Claimed) + " blocks were claimed but " +
          std::to_string(Done) + " finished");
    // The claims share a 64-bit word with the flag: it must read as written.
    if (C[1] != (Preempt ? 1u : 0u))
      die(V.Name + ": the preemption flag reads " + std::to_string(C[1]) + " after a launch");
    if (Done == I.Blocks)
      break;
    if (Preempt)
      ++St.Preempted;
    if (St.Launches > MaxPreempt + 2)
      die(V.Name + ": no completion after " + std::to_string(St.Launches) + " launches");
  }
  waitOrDie(D.S3, "the stream waiting for " + V.Name + " to complete");
  for (const Snapshot &S : Snaps) {
    std::vector<uint32_t> Copy(S.Bytes / 4), Final(S.Bytes / 4);
    CK(cuMemcpyDtoH(Copy.data(), S.Copy, S.Bytes));
    CK(cuMemcpyDtoH(Final.data(), S.Output, S.Bytes));
    St.StreamOrderOK &= Copy == Final;
    CK(cuMemFree(S.Copy));
  }
  CK(cuMemFree(Ctrl));
  return St;
}

bool compareOutputs(const std::vector<std::vector<uint32_t>> &Ref,
                    const std::vector<std::vector<uint32_t>> &Got, const std::string &What) {
  for (size_t B = 0; B < Ref.size(); ++B)
    for (size_t I = 0; I < Ref[B].size(); ++I)
      if (Ref[B][I] != Got[B][I]) {
        std::printf("  MISMATCH %s: output %zu word %zu: expected 0x%08x, got 0x%08x\n",
                    What.c_str(), B, I, Ref[B][I], Got[B][I]);
        return false;
      }
  return true;
}

int occupancyWorkers(Device &D, const VariantRecord &V, const Spec &Sp) {
  int PerSM = 0;
  CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(
      &PerSM, getFunction(D, V.Name), Sp.Block[0] * Sp.Block[1] * Sp.Block[2], Sp.DynSmem));
  return std::max(1, PerSM) * D.SMs;
}

int correctness(Device &D, const Metadata &Meta, const std::string &Only, uint32_t Seed,
                bool Quick) {
  std::mt19937 Rng(Seed);
  unsigned Failures = 0, Runs = 0;
  std::printf("%-26s %6s %8s %8s %10s %s\n", "kernel", "blocks", "slices", "ptb", "preempts",
              "result");
  for (const Spec &Sp : suite()) {
    if (!Only.empty() && Sp.Kernel != Only)
      continue;
    const KernelRecord *K = Meta.findKernel(Sp.Kernel);
    if (!K)
      die("kernel " + Sp.Kernel + " is not in the metadata");
    Instance I = prepare(D, Sp, Seed ^ std::hash<std::string>()(Sp.Kernel));
    resetBuffers(D, I);
    runOriginal(D, I);
    waitOrDie(D.S, Sp.Kernel);
    auto Ref = readOutputs(D, I);
    bool OK = true;
    unsigned Slices = 0, Ptbs = 0, Preempts = 0;
    for (const VariantRecord &V : K->Variants) {
      if (V.Kind == "slice") {
        std::vector<uint64_t> Sizes = {1, 3, I.Blocks / 2 + 1, I.Blocks};
        if (Quick)
          Sizes = {3, I.Blocks};
        for (uint64_t S : Sizes) {
          resetBuffers(D, I);
          runSliced(D, I, V, std::max<uint64_t>(S, 1));
          waitOrDie(D.S, V.Name);
          OK &= compareOutputs(Ref, readOutputs(D, I), V.Name + " slice=" + std::to_string(S));
          ++Slices, ++Runs;
        }
      } else if (V.Kind == "ptb") {
        std::vector<unsigned> Workers = {1, 2, 7, (unsigned)occupancyWorkers(D, V, Sp)};
        if (Quick)
          Workers = {2, Workers.back()};
        for (unsigned W : Workers)
          for (unsigned MaxPreempt : {0u, 6u})
            for (unsigned Chunk : {1u, 3u}) {
              resetBuffers(D, I);
              PtbStats St = runPtb(D, I, V, W, MaxPreempt, Rng, Chunk);
              Preempts += St.Preempted;
              if (!St.StreamOrderOK) {
                std::printf("  MISMATCH %s workers=%u: work queued behind `done` ran before "
                            "the last block\n",
                            V.Name.c_str(), W);
                OK = false;
              }
              OK &= compareOutputs(Ref, readOutputs(D, I),
                                   V.Name + " workers=" + std::to_string(W) + " chunk=" +
                                       std::to_string(Chunk) + " preemptions=" +
                                       std::to_string(St.Preempted));
              ++Ptbs, ++Runs;
            }
      }
    }
    std::printf("%-26s %6llu %8u %8u %10u %s\n", Sp.Kernel.c_str(),
                (unsigned long long)I.Blocks, Slices, Ptbs, Preempts,
                OK ? "identical" : "MISMATCH");
    Failures += !OK;
    freeInstance(I);
  }
  std::printf("%u runs; %u kernels with mismatches\n", Runs, Failures);
  return Failures ? 1 : 0;
}

double median(std::vector<double> V) {
  std::sort(V.begin(), V.end());
  return V[V.size() / 2];
}

double percentile(std::vector<double> V, double P) {
  std::sort(V.begin(), V.end());
  return V[std::min(V.size() - 1, (size_t)(P / 100.0 * (V.size() - 1) + 0.5))];
}

/// Median device time (ms) of \p Fn over \p Reps runs.
template <typename FnT> double timeIt(Device &D, unsigned Reps, FnT Fn) {
  CUevent A, B;
  CK(cuEventCreate(&A, 0));
  CK(cuEventCreate(&B, 0));
  std::vector<double> T;
  Fn(); // warm-up
  CK(cuStreamSynchronize(D.S));
  for (unsigned R = 0; R < Reps; ++R) {
    CK(cuEventRecord(A, D.S));
    Fn();
    CK(cuEventRecord(B, D.S));
    CK(cuEventSynchronize(B));
    float Ms = 0;
    CK(cuEventElapsedTime(&Ms, A, B));
    T.push_back(Ms);
  }
  cuEventDestroy(A);
  cuEventDestroy(B);
  return median(T);
}

/// Run time of each variant against the original at suite scale \p Scale.
void benchScale(Device &D, const Metadata &Meta, const std::string &Only, unsigned Scale) {
  std::printf("suite scale %u:\n", Scale);
  std::printf("%-26s %8s %10s %10s %8s %10s %8s %6s %8s\n", "kernel", "blocks", "orig_us",
              "slice_us", "ratio", "ptb_us", "ratio", "chunk", "ratio");
  std::vector<double> SliceRatios, PtbRatios, PtbChunkRatios;
  for (const Spec &Sp : suite(Scale)) {
    if (!Only.empty() && Sp.Kernel != Only)
      continue;
    if (!Sp.GlobalOut.empty())
      continue;
    const KernelRecord *K = Meta.findKernel(Sp.Kernel);
    if (!K)
      continue;
    Instance I = prepare(D, Sp, 1);
    resetBuffers(D, I);
    double Orig = timeIt(D, 30, [&] { runOriginal(D, I); });
    double SliceT = 0, PtbT = 0, PtbChunkT = 0;
    unsigned Chunk = 1;
    const unsigned Reps = 30, PoolSize = Reps + 1, CtrlStride = 256;
    CUdeviceptr Pool;
    CK(cuMemAlloc(&Pool, PoolSize * CtrlStride));
    for (const VariantRecord &V : K->Variants) {
      if (V.Kind == "slice") {
        SliceT = timeIt(D, 30, [&] { runSliced(D, I, V, I.Blocks); });
      } else if (V.Kind == "ptb") {
        unsigned W = occupancyWorkers(D, V, Sp);
        CUfunction F = getFunction(D, V.Name);
        // Each launch takes a fresh control block from a pool zeroed
        // beforehand, as a runtime would (one memset per pool, not one per
        // launch).
        auto Run = [&](unsigned Chunk) {
          CK(cuMemsetD32Async(Pool, 0, PoolSize * CtrlStride / 4, D.S));
          unsigned Next = 0;
          return timeIt(D, Reps, [&] {
            CUdeviceptr Ctrl = Pool + CUdeviceptr(Next++ % PoolSize) * CtrlStride;
            unsigned G[3] = {W, 1, 1};
            ArgPack P = originalArgs(I);
            addExtras(P, V, Sp, 0, Ctrl, Chunk);
            launch(D, F, G, Sp, P, D.S);
          });
        };
        PtbT = Run(1);
        // The largest chunk a scheduler would allow: as many blocks per
        // claim as fit in a turnaround budget of 10 us (a block's time
        // estimated as the original's time per wave of W blocks). The
        // variant claims less as the grid runs out (guided).
        double BlockUs = Orig * 1e3 / std::max(1.0, std::ceil((double)I.Blocks / W));
        uint64_t Fit = (uint64_t)(10.0 / std::max(BlockUs, 1e-3));
        Chunk = (unsigned)std::clamp<uint64_t>(Fit, 1, 64);
        PtbChunkT = Chunk > 1 ? Run(Chunk) : PtbT;
      }
    }
    CK(cuMemFree(Pool));
    if (SliceT > 0)
      SliceRatios.push_back(SliceT / Orig);
    if (PtbT > 0) {
      PtbRatios.push_back(PtbT / Orig);
      PtbChunkRatios.push_back(PtbChunkT / Orig);
    }
    std::printf("%-26s %8llu %10.1f %10.1f %8.3f %10.1f %8.3f %6u %8.3f\n", Sp.Kernel.c_str(),
                (unsigned long long)I.Blocks, Orig * 1e3, SliceT * 1e3,
                SliceT > 0 ? SliceT / Orig : 0.0, PtbT * 1e3, PtbT > 0 ? PtbT / Orig : 0.0,
                Chunk, PtbChunkT > 0 ? PtbChunkT / Orig : 0.0);
    freeInstance(I);
  }
  if (!SliceRatios.empty())
    std::printf("slice/original (scale %u): median %.3f, p95 %.3f, max %.3f\n", Scale,
                median(SliceRatios), percentile(SliceRatios, 95), percentile(SliceRatios, 100));
  if (!PtbRatios.empty())
    std::printf("ptb/original (scale %u, 1 block per claim): median %.3f, p95 %.3f, max %.3f\n",
                Scale, median(PtbRatios), percentile(PtbRatios, 95), percentile(PtbRatios, 100));
  if (!PtbChunkRatios.empty())
    std::printf("ptb/original (scale %u, chunk for a 10 us turnaround): median %.3f, p95 %.3f, "
                "max %.3f\n",
                Scale, median(PtbChunkRatios), percentile(PtbChunkRatios, 95),
                percentile(PtbChunkRatios, 100));
}

int bench(Device &D, const Metadata &Meta, const std::string &Only) {
  // Kernels of a few microseconds (scale 64), and 16 times larger ones.
  for (unsigned Scale : {64u, 1024u})
    benchScale(D, Meta, Only, Scale);

  // Preemption latency: a PTB kernel with many short logical blocks runs;
  // after a random delay the host sets the flag with cuStreamWriteValue32 on
  // another stream (the GPU's front end writes it: no SM needed); the time
  // from that call to the kernel's end is the latency. Then it resumes.
  struct LatCase {
    const char *Name;
    unsigned Scale;
  };
  for (LatCase LC : {LatCase{"block_scan", 4096}, LatCase{"grid2d", 512},
                     LatCase{"gemm_tiled", 16}}) {
    std::vector<Spec> Big = suite(LC.Scale);
    auto It = std::find_if(Big.begin(), Big.end(),
                           [&](const Spec &S) { return S.Kernel == LC.Name; });
    const KernelRecord *K = Meta.findKernel(LC.Name);
    if (It == Big.end() || !K)
      continue;
    const VariantRecord *V = nullptr;
    for (const VariantRecord &X : K->Variants)
      if (X.Kind == "ptb")
        V = &X;
    if (!V)
      continue;
    Instance I = prepare(D, *It, 2);
    resetBuffers(D, I);
    CK(cuStreamSynchronize(D.S));
    unsigned W = occupancyWorkers(D, *V, *It);
    CUfunction F = getFunction(D, V->Name);
    double Whole = timeIt(D, 3, [&] { runOriginal(D, I); });
    CUdeviceptr Ctrl;
    CK(cuMemAlloc(&Ctrl, 16));
    std::vector<double> Lat;
    std::mt19937 Rng(7);
    CK(cuMemsetD32(Ctrl, 0, 4));
    for (unsigned R = 0; R < 200; ++R) {
      uint32_t C[4];
      CK(cuMemcpyDtoH(C, Ctrl, 16));
      if (C[2] >= I.Blocks)
        CK(cuMemsetD32(Ctrl, 0, 4));
      CK(cuMemsetD32Async(Ctrl + 4, 0, 1, D.S));
      unsigned G[3] = {W, 1, 1};
      ArgPack P = originalArgs(I);
      addExtras(P, *V, *It, 0, Ctrl);
      launch(D, F, G, *It, P, D.S);
      double Delay = std::uniform_real_distribution<double>(0.1, 0.6)(Rng) * Whole * 1e3;
      std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(Delay));
      if (cuStreamQuery(D.S) == CUDA_SUCCESS)
        continue; // finished before we could preempt it
      auto T0 = Clock::now();
      CK(cuStreamWriteValue32(D.S2, Ctrl + 4, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
      waitOrDie(D.S, "preemption of " + V->Name);
      Lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - T0).count());
    }
    // Baseline: the same host calls against an idle GPU.
    std::vector<double> Base;
    for (unsigned R = 0; R < 200; ++R) {
      auto T0 = Clock::now();
      CK(cuStreamWriteValue32(D.S2, Ctrl + 4, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
      CK(cuStreamSynchronize(D.S2));
      Base.push_back(std::chrono::duration<double, std::micro>(Clock::now() - T0).count());
    }
    if (!Lat.empty())
      std::printf("preemption latency %s (%llu blocks of %u threads, %.0f us per block-wave, "
                  "%u workers, %zu samples): p50 %.1f us, p99 %.1f us (idle baseline p50 %.1f us)\n",
                  LC.Name, (unsigned long long)I.Blocks,
                  It->Block[0] * It->Block[1] * It->Block[2],
                  Whole * 1e3 / std::max<double>(1.0, (double)I.Blocks / W), W, Lat.size(),
                  percentile(Lat, 50), percentile(Lat, 99), percentile(Base, 50));
    CK(cuMemFree(Ctrl));
    freeInstance(I);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::string CubinPath, MetaPath, Only;
  uint32_t Seed = 12345;
  bool Bench = false, Quick = false;
  for (int I = 1; I < argc; ++I) {
    std::string A = argv[I];
    auto Next = [&]() -> std::string {
      if (I + 1 >= argc)
        die("missing value after " + A);
      return argv[++I];
    };
    if (A == "--module" || A == "--cubin")
      CubinPath = Next();
    else if (A == "--metadata")
      MetaPath = Next();
    else if (A == "--only")
      Only = Next();
    else if (A == "--seed")
      Seed = std::stoul(Next());
    else if (A == "--bench")
      Bench = true;
    else if (A == "--quick")
      Quick = true;
    else if (A == "--no-stream-wait")
      StreamWait = false;
    else if (A == "--timeout")
      WaitSeconds = std::stod(Next());
    else
      die("unknown argument " + A);
  }
  if (CubinPath.empty() || MetaPath.empty())
    die("usage: tally-gpu-test --module FATBIN|CUBIN --metadata F [--only K] [--seed N] "
        "[--quick] [--bench] [--no-stream-wait] [--timeout S]");

  if (cuInit(0) != CUDA_SUCCESS) {
    std::printf("SKIP: no usable GPU (cuInit failed)\n");
    return 77;
  }
  int Count = 0;
  if (cuDeviceGetCount(&Count) != CUDA_SUCCESS || Count == 0) {
    std::printf("SKIP: no GPU\n");
    return 77;
  }
  auto MB = llvm::MemoryBuffer::getFile(MetaPath);
  if (!MB)
    die(MetaPath + ": " + MB.getError().message());
  auto Meta = Metadata::fromYAML((*MB)->getBuffer());
  if (!Meta)
    die(MetaPath + ": " + llvm::toString(Meta.takeError()));
  auto CB = llvm::MemoryBuffer::getFile(CubinPath, false, false);
  if (!CB)
    die(CubinPath + ": " + CB.getError().message());

  Device D;
  CK(cuDeviceGet(&D.Dev, 0));
  CK(cuDevicePrimaryCtxRetain(&D.Ctx, D.Dev));
  CK(cuCtxSetCurrent(D.Ctx));
  CK(cuDeviceGetAttribute(&D.SMs, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, D.Dev));
  char Name[256];
  CK(cuDeviceGetName(Name, sizeof(Name), D.Dev));
  std::printf("device: %s, %d SMs\n", Name, D.SMs);
  CK(cuModuleLoadData(&D.Mod, (*CB)->getBufferStart()));
  // The metadata also travels inside the module: it must be there and say
  // the same as the side file.
  {
    CUdeviceptr P;
    size_t Bytes = 0;
    CK(cuModuleGetGlobal(&P, &Bytes, D.Mod, "__tally_metadata"));
    std::string Embedded(Bytes, '\0');
    CK(cuMemcpyDtoH(Embedded.data(), P, Bytes));
    Embedded.resize(std::strlen(Embedded.c_str()));
    auto EM = Metadata::fromYAML(Embedded);
    if (!EM)
      die("embedded metadata: " + llvm::toString(EM.takeError()));
    for (const KernelRecord &K : Meta->Kernels) {
      const KernelRecord *E = EM->findKernel(K.Name);
      if (!E || E->Variants.size() != K.Variants.size())
        die("embedded metadata disagrees with " + MetaPath + " for " + K.Name);
    }
    std::printf("embedded metadata: %zu kernels, matches %s\n", EM->Kernels.size(),
                MetaPath.c_str());
  }
  CK(cuStreamCreate(&D.S, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&D.S2, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&D.S3, CU_STREAM_NON_BLOCKING));
  int RC = Bench ? bench(D, *Meta, Only) : correctness(D, *Meta, Only, Seed, Quick);
  cuModuleUnload(D.Mod);
  cuDevicePrimaryCtxRelease(D.Dev);
  return RC;
}
