// be-spin.cu - the best-effort (BE) workload of the co-location benchmark
// (scripts/gpu-colocate.sh): kernels of integer work with a known block
// length, back to back. Prints progress lines `be: t=S kernels=N epoch=E`
// (so the rate inside another process's window can be computed), then
//   be: kernels K in T s, R kernels/s
//   be: checksum HEX work W blocks N threads T
// The checksum depends only on the arguments (--work, --blocks, --threads),
// never on timing or preemption; every block adds to two device counters, so
// a logical block skipped or run twice is reported (`be: verify FAILED`,
// exit status 3). SIGTERM or SIGINT end the loop cleanly: the in-flight
// kernels finish and the summary is printed.
//
// Build (plain and transformed):
//   nvcc -arch=sm_90a -O2 -std=c++17 -c be-spin.cu -o be-spin.o
//   nvcc -arch=sm_90a be-spin.o -o be-spin
//   tally-opt -q be-spin.o -o be-spin.tally.o
//   nvcc -arch=sm_90a be-spin.tally.o -o be-spin.tally
#include "spin-kernels.h"

#include <csignal>

static const char *UsageHead =
    "usage: be-spin [options]\n"
    "Runs BE kernels back to back and prints their rate and a checksum.\n";
static const char *UsageTail =
    "  --iters N           run N kernels\n"
    "  --duration S        run for S seconds (without --iters or --duration:\n"
    "                      until SIGTERM or SIGINT)\n"
    "  --calibrate         print the work for --block-us and exit\n"
    "  --low-priority-stream  launch on a stream of the lowest priority\n"
    "  --help              this text\n";

static void onSignal(int) { BeStop = true; }

int main(int Argc, char **Argv) {
  ProgName = "be-spin";
  BeOptions O;
  ArgReader R(Argc, Argv);
  while (R.next()) {
    if (parseBeOption(R, O, "--"))
      continue;
    if (R.is("--iters")) {
      O.Iters = R.integer(1, 1ll << 50);
    } else if (R.is("--duration")) {
      O.Duration = R.number(0.001, 1e7);
    } else if (R.flag("--calibrate")) {
      O.CalibrateOnly = true;
    } else if (R.flag("--low-priority-stream")) {
      O.Priority = StreamPriority::Lowest;
    } else if (R.flag("--help") || R.flag("-h")) {
      std::printf("%s%s%s", UsageHead, beOptionsHelp("--").c_str(), UsageTail);
      return 0;
    } else {
      std::fprintf(stderr, "be-spin: error: unknown option '%s' (see --help)\n",
                   R.name().c_str());
      return 2;
    }
  }
  struct sigaction Sa;
  std::memset(&Sa, 0, sizeof Sa);
  Sa.sa_handler = onSignal;
  sigemptyset(&Sa.sa_mask);
  sigaction(SIGTERM, &Sa, nullptr);
  sigaction(SIGINT, &Sa, nullptr);

  DeviceInfo Dev = deviceInfo();
  cudaStream_t S = makeStream(O.Priority);
  int Rc = runBe(O, S, Dev);
  CK(cudaStreamDestroy(S));
  return Rc;
}
