// workblocks-forms.cu - be-spin's kernel (spin-kernels.h's workBlocks) in
// each of Tally's forms, launched directly with the driver API, without the
// runtime: how much of a form's cost is the kernel's own. Loads a cubin
// that tally-opt's output was compiled into (the original and both
// variants, compiled alike), launches each form back to back in batches
// (CUDA events around a batch, median of several batches, interleaved) and
// prints the GPU time per launch against the original. The nvcc-compiled
// original linked into this program is a row too. PTB launches take their
// control blocks from a pool cleared before the batch (no clear per
// launch: ptb-launch-costs measures those).
// Usage: workblocks-forms CUBIN [--block-us U] [--launches N] [--batches B]
// Built by scripts/prepare-device.sh (with the cubin), run by
// scripts/debug/ptb-costs.sh.
#include "spin-kernels.h"

static void ckDrv(CUresult R, const char *What) {
  if (R != CUDA_SUCCESS) {
    const char *S = nullptr;
    cuGetErrorString(R, &S);
    die("%s failed: %s", What, S ? S : "?");
  }
}

int main(int Argc, char **Argv) {
  ProgName = "workblocks-forms";
  std::string Cubin;
  double BlockUs = 10;
  int Launches = 100, Batches = 5;
  ArgReader R(Argc, Argv);
  while (R.next()) {
    if (R.is("--block-us"))
      BlockUs = R.number(0.1, 1e5);
    else if (R.is("--launches"))
      Launches = (int)R.integer(1, 100000);
    else if (R.is("--batches"))
      Batches = (int)R.integer(1, 1000);
    else if (R.flag("--help") || R.flag("-h")) {
      std::printf("usage: workblocks-forms CUBIN [--block-us U] [--launches N] [--batches B]\n"
                  "  CUBIN: be-spin's kernels after tally-opt, compiled by ptxas\n");
      return 0;
    } else if (R.name().rfind("--", 0) == 0)
      die("unknown option %s (--help)", R.name().c_str());
    else
      Cubin = R.name();
  }
  if (Cubin.empty())
    die("no cubin given (--help)");
  DeviceInfo Dev = deviceInfo();
  CK(cudaFree(nullptr));
  CUmodule M;
  ckDrv(cuModuleLoad(&M, Cubin.c_str()), "cuModuleLoad");
  const char *Kernel = "_Z10workBlocksPKjPjjPyS2_";
  CUfunction FOrig, FSlice, FPtb;
  ckDrv(cuModuleGetFunction(&FOrig, M, Kernel), "cuModuleGetFunction (original)");
  ckDrv(cuModuleGetFunction(&FSlice, M, (std::string(Kernel) + "__tally_slice").c_str()),
        "cuModuleGetFunction (slice)");
  ckDrv(cuModuleGetFunction(&FPtb, M, (std::string(Kernel) + "__tally_ptb").c_str()),
        "cuModuleGetFunction (ptb)");
  int PerSM = 0, PtbPerSM = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&PerSM, workBlocks, 256, 0));
  ckDrv(cuOccupancyMaxActiveBlocksPerMultiprocessor(&PtbPerSM, FPtb, 256, 0), "occupancy");
  const unsigned Threads = 256, Blocks = 8 * Dev.SMs * PerSM;
  size_t N = (size_t)Blocks * Threads;
  unsigned *In, *Out;
  unsigned long long *Counters;
  CK(cudaMalloc(&In, N * sizeof(unsigned)));
  CK(cudaMalloc(&Out, N * sizeof(unsigned)));
  CK(cudaMalloc(&Counters, 2 * sizeof(unsigned long long)));
  CK(cudaMemset(In, 0x5a, N * sizeof(unsigned)));
  CUdeviceptr Ctrl = 0;
  ckDrv(cuMemAlloc(&Ctrl, 16 * (size_t)Launches), "cuMemAlloc");
  cudaStream_t S = makeStream(StreamPriority::Default);
  CUstream CS = reinterpret_cast<CUstream>(S);

  unsigned Work = 256;
  auto TimeNvcc = [&](unsigned W) {
    cudaEvent_t A, B;
    CK(cudaEventCreate(&A));
    CK(cudaEventCreate(&B));
    std::vector<float> Ms;
    for (int I = 0; I < 5; ++I) {
      CK(cudaEventRecord(A, S));
      workBlocks<<<Blocks, Threads, 0, S>>>(In, Out, W, Counters, Counters + 1);
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
    Work = (unsigned)std::max(1.0, std::round(Work * BlockUs / std::max(TimeNvcc(Work), 0.01)));

  struct Row {
    const char *Name;
    int Kind; // 0 nvcc original, 1 cubin original, 2 slice, 3 ptb
    unsigned WorkersPerSM = 0, Chunk = 1;
  };
  const Row Rows[] = {
      {"original (nvcc, linked)", 0},
      {"original (tally-opt cubin)", 1},
      {"slice, one slice of all", 2},
      {"ptb, 8 per SM, chunk 1", 3, 8, 1},
      {"ptb, 4 per SM, chunk 1", 3, 4, 1},
      {"ptb, 8 per SM, chunk 4", 3, 8, 4},
      {"ptb, 4 per SM, chunk 4", 3, 4, 4},
  };
  std::printf("device %s, %d SMs, %u blocks of %u threads (%d per SM; PTB variant %d), work %u "
              "(block %.1f us), %d launches per batch, median of %d batches\n",
              Dev.Name.c_str(), Dev.SMs, Blocks, Threads, PerSM, PtbPerSM, Work,
              TimeNvcc(Work), Launches, Batches);
  unsigned long long *Sum = Counters, *Cnt = Counters + 1;
  auto RunBatch = [&](const Row &Rw) {
    ckDrv(cuMemsetD32(Ctrl, 0, 4 * (size_t)Launches), "cuMemsetD32");
    CK(cudaDeviceSynchronize());
    cudaEvent_t A, B;
    CK(cudaEventCreate(&A));
    CK(cudaEventCreate(&B));
    CK(cudaEventRecord(A, S));
    unsigned Zero = 0, GX = Blocks, G1 = 1;
    for (int I = 0; I < Launches; ++I) {
      CUdeviceptr C = Ctrl + 16 * (size_t)I;
      unsigned Chunk = Rw.Chunk;
      void *Orig[] = {&In, &Out, &Work, &Sum, &Cnt};
      void *Slice[] = {&In, &Out, &Work, &Sum, &Cnt, &Zero, &GX, &G1, &G1};
      void *Ptb[] = {&In, &Out, &Work, &Sum, &Cnt, &C, &GX, &G1, &G1, &Chunk};
      switch (Rw.Kind) {
      case 0:
        workBlocks<<<Blocks, Threads, 0, S>>>(In, Out, Work, Sum, Cnt);
        CK(cudaGetLastError());
        break;
      case 1:
        ckDrv(cuLaunchKernel(FOrig, Blocks, 1, 1, Threads, 1, 1, 0, CS, Orig, nullptr), "launch");
        break;
      case 2:
        ckDrv(cuLaunchKernel(FSlice, Blocks, 1, 1, Threads, 1, 1, 0, CS, Slice, nullptr), "launch");
        break;
      default: {
        unsigned W = std::min<unsigned>(Rw.WorkersPerSM, (unsigned)PtbPerSM) * Dev.SMs;
        ckDrv(cuLaunchKernel(FPtb, W, 1, 1, Threads, 1, 1, 0, CS, Ptb, nullptr), "launch");
      }
      }
    }
    CK(cudaEventRecord(B, S));
    CK(cudaEventSynchronize(B));
    float Ms;
    CK(cudaEventElapsedTime(&Ms, A, B));
    CK(cudaEventDestroy(A));
    CK(cudaEventDestroy(B));
    return Ms * 1000.0 / Launches;
  };
  const int Count = (int)(sizeof Rows / sizeof Rows[0]);
  std::vector<std::vector<double>> Us(Count);
  for (int I = 0; I < Count; ++I)
    RunBatch(Rows[I]); // warm-up
  for (int B = 0; B < Batches; ++B)
    for (int I = 0; I < Count; ++I)
      Us[I].push_back(RunBatch(Rows[I]));
  // Every form computed the same blocks: the block counter says each ran
  // once per launch.
  unsigned long long Done = 0;
  CK(cudaMemcpy(&Done, Cnt, sizeof Done, cudaMemcpyDeviceToHost));
  unsigned long long Want = (unsigned long long)Blocks * Launches * (unsigned long long)(Count * (Batches + 1)) +
                            (unsigned long long)Blocks * 5 * 5; // the calibration's
  std::printf("blocks run %llu, expected %llu: %s\n", Done, Want, Done == Want ? "ok" : "MISMATCH");
  double Base = 0;
  std::printf("%-30s %12s %10s %8s\n", "form", "us/launch", "added us", "ratio");
  for (int I = 0; I < Count; ++I) {
    std::vector<double> V = Us[I];
    std::sort(V.begin(), V.end());
    double Med = V[V.size() / 2];
    if (I == 0)
      Base = Med;
    std::printf("%-30s %12.2f %10.2f %8.3f\n", Rows[I].Name, Med, Med - Base, Med / Base);
  }
  return Done == Want ? 0 : 3;
}
