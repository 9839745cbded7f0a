// colocate-streams.cu - the "stream priorities in one process" baseline of
// the co-location benchmark (scripts/gpu-colocate.sh): one process, one CUDA
// context, two host threads. Thread BE runs the be-spin loop on a stream of
// the lowest priority from the start; --be-lead seconds after its first
// kernel, thread HP runs the hp-serve request loop on a stream of the
// greatest priority; when HP is done, BE stops. Prints the lines of both
// programs (hp: ... and be: ..., same formats).
//
// Build: nvcc -arch=sm_90a -O2 -std=c++17 colocate-streams.cu -o
// colocate-streams
#include "spin-kernels.h"

#include <csignal>

static const char *UsageHead =
    "usage: colocate-streams [options]\n"
    "HP requests on a greatest-priority stream beside BE kernels on a\n"
    "lowest-priority stream, in one process.\n"
    "HP options:\n" HP_OPTIONS_HELP "BE options:\n";
static const char *UsageTail = "  --be-lead S         BE runs alone S seconds "
                               "before HP starts (default 1)\n"
                               "  --help              this text\n";

static void onSignal(int) { BeStop = true; }

int main(int Argc, char **Argv) {
  ProgName = "colocate-streams";
  HpOptions Hp;
  Hp.Priority = StreamPriority::Greatest;
  BeOptions Be;
  Be.Priority = StreamPriority::Lowest;
  double Lead = 1;
  ArgReader R(Argc, Argv);
  while (R.next()) {
    if (parseHpOption(R, Hp) || parseBeOption(R, Be, "--be-"))
      continue;
    if (R.is("--be-lead")) {
      Lead = R.number(0, 1e6);
    } else if (R.flag("--help") || R.flag("-h")) {
      std::printf("%s%s%s", UsageHead, beOptionsHelp("--be-").c_str(),
                  UsageTail);
      return 0;
    } else {
      std::fprintf(
          stderr, "colocate-streams: error: unknown option '%s' (see --help)\n",
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
  cudaStream_t HpStream = makeStream(Hp.Priority);
  cudaStream_t BeStream = makeStream(Be.Priority);

  std::atomic<bool> BeDone{false};
  int BeRc = 0, HpRc = 0;
  std::thread BeThread([&] {
    CK(cudaSetDevice(Dev.Device));
    BeRc = runBe(Be, BeStream, Dev);
    BeDone = true;
  });
  while (!BeRunning && !BeDone)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (BeDone) {
    BeThread.join();
    std::fprintf(stderr, "colocate-streams: error: BE ended before HP began\n");
    return BeRc ? BeRc : 1;
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(Lead));
  if (!BeDone) {
    std::thread HpThread([&] {
      CK(cudaSetDevice(Dev.Device));
      HpRc = runHp(Hp, HpStream, Dev);
    });
    HpThread.join();
  } else {
    std::fprintf(stderr, "colocate-streams: error: stopped before HP began\n");
    HpRc = 1;
  }
  BeStop = true;
  BeThread.join();
  CK(cudaStreamDestroy(HpStream));
  CK(cudaStreamDestroy(BeStream));
  return HpRc ? HpRc : BeRc;
}
