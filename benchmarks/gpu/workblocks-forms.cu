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
// Usage: workblocks-forms CUBIN [--block-us U | --work W] [--launches N] [--batches B]
// Built by scripts/prepare-device.sh (with the cubin), run by
// scripts/debug/ptb-costs.sh.
#include "spin-kernels.h"

int main(int Argc, char **Argv) {
  ProgName = "workblocks-forms";
  std::string Cubin;
  BatchOptions O{10, 100, 5};
  ArgReader R(Argc, Argv);
  while (R.next()) {
    if (parseBatchOption(R, O))
      continue;
    if (R.flag("--help") || R.flag("-h")) {
      std::printf("usage: workblocks-forms CUBIN [--block-us U | --work W] [--launches N] [--batches B]\n"
                  "  CUBIN: be-spin's kernels after tally-opt, compiled by ptxas\n"
                  "  --work W: hashing rounds per thread as given (be-spin --calibrate\n"
                  "            prints them), not calibrated to --block-us (default 10):\n"
                  "            for runs under a profiler\n");
      return 0;
    } else if (R.name().rfind("--", 0) == 0)
      die("unknown option %s (--help)", R.name().c_str());
    else
      Cubin = R.name();
  }
  if (Cubin.empty())
    die("no cubin given (--help)");
  const int Launches = O.Launches, Batches = O.Batches;
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
  // One 16-byte control block per launch of a batch, as the runtime's pool.
  WorkSetup WS = workSetup((size_t)Blocks * Threads, (size_t)Launches);
  unsigned *In = WS.In, *Out = WS.Out;
  unsigned long long *Counters = WS.Counters;
  CUdeviceptr Ctrl = WS.Ctrl;
  cudaStream_t S = WS.S;
  CUstream CS = reinterpret_cast<CUstream>(S);

  // One kernel is 8 waves of blocks.
  int Timed = 0; // calls of timeWork (5 launches each), for the block count
  auto PerBlockUs = [&](unsigned W) {
    ++Timed;
    return timeWork(In, Out, W, Counters, Counters + 1, Blocks, Threads, S) / 8;
  };
  unsigned Work = batchWork(O, PerBlockUs);

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
              PerBlockUs(Work), Launches, Batches);
  unsigned long long *Sum = Counters, *Cnt = Counters + 1;
  const int Count = (int)(sizeof Rows / sizeof Rows[0]);
  auto RunBatch = [&](int RowIndex) {
    const Row &Rw = Rows[RowIndex];
    ckDrv(cuMemsetD32(Ctrl, 0, 4 * (size_t)Launches), "cuMemsetD32");
    CK(cudaDeviceSynchronize());
    unsigned Zero = 0, GX = Blocks, G1 = 1;
    return usPerLaunch(S, Launches, [&](int I) {
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
    });
  };
  std::vector<double> Med = interleavedMedians(Count, Batches, RunBatch);
  // Every form computed the same blocks: the block counter says each ran
  // once per launch.
  unsigned long long Done = 0;
  CK(cudaMemcpy(&Done, Cnt, sizeof Done, cudaMemcpyDeviceToHost));
  unsigned long long Want = (unsigned long long)Blocks * Launches * (unsigned long long)(Count * (Batches + 1)) +
                            (unsigned long long)Blocks * 5 * (unsigned long long)Timed;
  std::printf("blocks run %llu, expected %llu: %s\n", Done, Want, Done == Want ? "ok" : "MISMATCH");
  printAgainstFirst("form", Med, [&](size_t I) { return Rows[I].Name; });
  return Done == Want ? 0 : 3;
}
