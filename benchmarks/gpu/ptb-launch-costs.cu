// ptb-launch-costs.cu - what the stream operations around a PTB launch cost
// on the GPU. The runtime launches a PTB variant as: clear its control block
// (cuMemsetD32Async), a Start event, the kernel, an End event, a stream wait
// for the kernel's `done` word (the gate), a Gate event. Each of them is a
// step of the stream's work on the GPU, and back to back kernels of the
// same stream may lose time at each. This program enqueues the same kernel
// many times with one combination of those operations around each launch
// and prints the GPU time per launch (CUDA events around the whole batch,
// median of several batches) against the kernel alone.
//
// The kernel is spin-kernels.h's workBlocks (hashing blocks of about
// --block-us, 8 waves) plus one word per launch that each block increments
// when it ends, as a PTB launch's `done`: the gate's wait reads it.
// Built by scripts/prepare-device.sh, run by scripts/gpu.sh.
#include "spin-kernels.h"


/// workBlocks, then every block's thread 0 adds 1 to *done (after its
/// counters: a gate opened by *done sees the block's writes).
__global__ void workBlocksDone(const unsigned *in, unsigned *out, unsigned work,
                               unsigned long long *sum, unsigned long long *cnt,
                               unsigned *done) {
  // (The body of workBlocks, not a call: a __global__ cannot call one.)
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
  unsigned long long W = V;
  for (int Off = 16; Off > 0; Off >>= 1)
    W += __shfl_down_sync(0xffffffffu, W, Off);
  if ((threadIdx.x & 31) == 0)
    atomicAdd(&BlockSum, W);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(sum, BlockSum);
    atomicAdd(cnt, 1ull);
    __threadfence();
    atomicAdd(done, 1u);
  }
}

/// Which operations go around each launch.
struct Ops {
  const char *Name;
  bool Memset = false;   // cuMemsetD32Async of the 16-byte control block
  bool Writes = false;   // instead: two cuStreamWriteValue64 of 0
  bool Batch = false;    // instead: one cuStreamBatchMemOp of two 64-bit writes
  bool Events = false;   // Start before, End after (and Gate after the wait)
  bool Wait = false;     // cuStreamWaitValue32(done >= blocks) after the kernel
};

int main(int Argc, char **Argv) {
  ProgName = "ptb-launch-costs";
  BatchOptions O{10, 200, 7};
  ArgReader R(Argc, Argv);
  while (R.next()) {
    if (parseBatchOption(R, O))
      continue;
    if (R.flag("--help") || R.flag("-h")) {
      std::printf("usage: ptb-launch-costs [--block-us U | --work W] [--launches N] [--batches B]\n"
                  "  GPU time per launch of 8 waves of ~U us hashing blocks (default 10)\n"
                  "  with the stream operations of a PTB launch around each, against\n"
                  "  the kernel alone; N launches per batch (200), median of B (7)\n");
      return 0;
    } else
      die("unknown option %s (--help)", R.name().c_str());
  }
  const int Launches = O.Launches, Batches = O.Batches;
  DeviceInfo Dev = deviceInfo();
  CK(cudaFree(nullptr));
  int PerSM = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&PerSM, workBlocksDone, 256, 0));
  const int Threads = 256, Blocks = 8 * Dev.SMs * PerSM;
  // One 16-byte control block per launch of a batch, as the runtime's pool.
  WorkSetup WS = workSetup((size_t)Blocks * Threads, (size_t)Launches);
  unsigned *In = WS.In, *Out = WS.Out;
  unsigned long long *Counters = WS.Counters;
  CUdeviceptr Ctrl = WS.Ctrl;
  cudaStream_t S = WS.S;
  CUstream CS = reinterpret_cast<CUstream>(S);

  // The work for blocks of --block-us (a kernel is 8 waves), unless --work.
  auto PerBlockUs = [&](unsigned W) {
    return medianOfFiveUs(S, [&] {
             workBlocksDone<<<Blocks, Threads, 0, S>>>(In, Out, W, Counters, Counters + 1,
                                                       reinterpret_cast<unsigned *>(Ctrl + 8));
           }) /
           8;
  };
  unsigned Work = batchWork(O, PerBlockUs);
  std::printf("device %s, %d SMs, %d blocks of %d threads (%d per SM), block %.1f us, "
              "%d launches per batch, median of %d batches\n",
              Dev.Name.c_str(), Dev.SMs, Blocks, Threads, PerSM, PerBlockUs(Work), Launches,
              Batches);

  std::vector<cudaEvent_t> Evs(3 * (size_t)Launches);
  for (cudaEvent_t &E : Evs)
    CK(cudaEventCreateWithFlags(&E, cudaEventDisableTiming));

  const Ops All[] = {
      {"kernel alone"},
      {"+ memset", true},
      {"+ 2 write64", false, true},
      {"+ batch of 2 write64", false, false, true},
      {"+ events", false, false, false, true},
      {"+ wait", false, false, false, false, true},
      {"+ events + wait", false, false, false, true, true},
      {"+ memset + events (no gate)", true, false, false, true},
      {"runtime: memset + events + wait", true, false, false, true, true},
      {"batch + events + wait", false, false, true, true, true},
  };
  const int Count = (int)(sizeof All / sizeof All[0]);
  auto RunBatch = [&](int Row) {
    const Ops &O = All[Row];
    // Every control block starts at zero (what the clears would write), so
    // that the waits open whatever the clearing op.
    ckDrv(cuMemsetD32(Ctrl, 0, 4 * (size_t)Launches), "cuMemsetD32");
    CK(cudaDeviceSynchronize());
    return usPerLaunch(S, Launches, [&](int I) {
      CUdeviceptr C = Ctrl + 16 * (size_t)I;
      if (O.Memset)
        ckDrv(cuMemsetD32Async(C, 0, 4, CS), "cuMemsetD32Async");
      if (O.Writes) {
        ckDrv(cuStreamWriteValue64(CS, C, 0, CU_STREAM_WRITE_VALUE_DEFAULT), "write64");
        ckDrv(cuStreamWriteValue64(CS, C + 8, 0, CU_STREAM_WRITE_VALUE_DEFAULT), "write64");
      }
      if (O.Batch) {
        CUstreamBatchMemOpParams P[2];
        std::memset(P, 0, sizeof P);
        for (int J = 0; J < 2; ++J) {
          P[J].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
          P[J].writeValue.address = C + 8 * J;
          P[J].writeValue.value64 = 0;
          P[J].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
        }
        ckDrv(cuStreamBatchMemOp(CS, 2, P, 0), "cuStreamBatchMemOp");
      }
      if (O.Events)
        CK(cudaEventRecord(Evs[3 * I], S));
      workBlocksDone<<<Blocks, Threads, 0, S>>>(In, Out, Work, Counters, Counters + 1,
                                                reinterpret_cast<unsigned *>(C + 8));
      CK(cudaGetLastError());
      if (O.Events)
        CK(cudaEventRecord(Evs[3 * I + 1], S));
      if (O.Wait)
        ckDrv(cuStreamWaitValue32(CS, C + 8, (unsigned)Blocks, CU_STREAM_WAIT_VALUE_GEQ),
              "cuStreamWaitValue32");
      if (O.Events && O.Wait)
        CK(cudaEventRecord(Evs[3 * I + 2], S));
    });
  };
  std::vector<double> Med = interleavedMedians(Count, Batches, RunBatch);
  printAgainstFirst("operations around each launch", Med, [&](size_t I) { return All[I].Name; });
  return 0;
}
