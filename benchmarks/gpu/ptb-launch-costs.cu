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

#include <map>

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

static void ckDrv(CUresult R, const char *What) {
  if (R != CUDA_SUCCESS) {
    const char *S = nullptr;
    cuGetErrorString(R, &S);
    die("%s failed: %s", What, S ? S : "?");
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
  double BlockUs = 10;
  int Launches = 200, Batches = 7;
  ArgReader R(Argc, Argv);
  while (R.next()) {
    if (R.is("--block-us"))
      BlockUs = R.number(0.1, 1e5);
    else if (R.is("--launches"))
      Launches = (int)R.integer(1, 100000);
    else if (R.is("--batches"))
      Batches = (int)R.integer(1, 1000);
    else if (R.flag("--help") || R.flag("-h")) {
      std::printf("usage: ptb-launch-costs [--block-us U] [--launches N] [--batches B]\n"
                  "  GPU time per launch of 8 waves of ~U us hashing blocks (default 10)\n"
                  "  with the stream operations of a PTB launch around each, against\n"
                  "  the kernel alone; N launches per batch (200), median of B (7)\n");
      return 0;
    } else
      die("unknown option %s (--help)", R.name().c_str());
  }
  DeviceInfo Dev = deviceInfo();
  CK(cudaFree(nullptr));
  int PerSM = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&PerSM, workBlocksDone, 256, 0));
  const int Threads = 256, Blocks = 8 * Dev.SMs * PerSM;
  size_t N = (size_t)Blocks * Threads;
  unsigned *In, *Out;
  unsigned long long *Counters;
  CK(cudaMalloc(&In, N * sizeof(unsigned)));
  CK(cudaMalloc(&Out, N * sizeof(unsigned)));
  CK(cudaMalloc(&Counters, 2 * sizeof(unsigned long long)));
  CK(cudaMemset(In, 0x5a, N * sizeof(unsigned)));
  // One 16-byte control block per launch of a batch, as the runtime's pool.
  CUdeviceptr Ctrl = 0;
  ckDrv(cuMemAlloc(&Ctrl, 16 * (size_t)Launches), "cuMemAlloc");
  cudaStream_t S = makeStream(StreamPriority::Default);
  CUstream CS = reinterpret_cast<CUstream>(S);

  // Calibrate the work for ~BlockUs per block.
  unsigned Work = 256;
  auto TimeOne = [&](unsigned W) {
    cudaEvent_t A, B;
    CK(cudaEventCreate(&A));
    CK(cudaEventCreate(&B));
    std::vector<float> Ms;
    for (int I = 0; I < 5; ++I) {
      CK(cudaEventRecord(A, S));
      workBlocksDone<<<Blocks, Threads, 0, S>>>(In, Out, W, Counters, Counters + 1,
                                                reinterpret_cast<unsigned *>(Ctrl + 8));
      CK(cudaEventRecord(B, S));
      CK(cudaEventSynchronize(B));
      float T;
      CK(cudaEventElapsedTime(&T, A, B));
      Ms.push_back(T);
    }
    CK(cudaEventDestroy(A));
    CK(cudaEventDestroy(B));
    std::sort(Ms.begin(), Ms.end());
    return Ms[2] * 1000.0 / 8;
  };
  for (int Round = 0; Round < 4; ++Round)
    Work = (unsigned)std::max(1.0, std::round(Work * BlockUs / std::max(TimeOne(Work), 0.01)));
  std::printf("device %s, %d SMs, %d blocks of %d threads (%d per SM), block %.1f us, "
              "%d launches per batch, median of %d batches\n",
              Dev.Name.c_str(), Dev.SMs, Blocks, Threads, PerSM, TimeOne(Work), Launches,
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
  auto RunBatch = [&](const Ops &O) {
    // Every control block starts at zero (what the clears would write), so
    // that the waits open whatever the clearing op.
    ckDrv(cuMemsetD32(Ctrl, 0, 4 * (size_t)Launches), "cuMemsetD32");
    CK(cudaDeviceSynchronize());
    cudaEvent_t A, B;
    CK(cudaEventCreate(&A));
    CK(cudaEventCreate(&B));
    CK(cudaEventRecord(A, S));
    for (int I = 0; I < Launches; ++I) {
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
    }
    CK(cudaEventRecord(B, S));
    CK(cudaEventSynchronize(B));
    float Ms;
    CK(cudaEventElapsedTime(&Ms, A, B));
    CK(cudaEventDestroy(A));
    CK(cudaEventDestroy(B));
    return Ms * 1000.0 / Launches;
  };
  // Interleaved: batch b of every combination before batch b+1 of any, so
  // that clocks and neighbours drift over all of them alike.
  std::map<int, std::vector<double>> Us;
  const int Count = (int)(sizeof All / sizeof All[0]);
  for (int I = 0; I < Count; ++I)
    RunBatch(All[I]); // warm-up
  for (int B = 0; B < Batches; ++B)
    for (int I = 0; I < Count; ++I)
      Us[I].push_back(RunBatch(All[I]));
  double Base = 0;
  std::printf("%-34s %12s %10s %8s\n", "operations around each launch", "us/launch",
              "added us", "ratio");
  for (int I = 0; I < Count; ++I) {
    std::vector<double> V = Us[I];
    std::sort(V.begin(), V.end());
    double Med = V[V.size() / 2];
    if (I == 0)
      Base = Med;
    std::printf("%-34s %12.2f %10.2f %8.3f\n", All[I].Name, Med, Med - Base, Med / Base);
  }
  std::fflush(stdout);
  return 0;
}
