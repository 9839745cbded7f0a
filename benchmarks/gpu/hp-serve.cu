// hp-serve.cu - the latency-critical (HP) service of the co-location
// benchmark (scripts/gpu-colocate.sh). One request = one kernel of N blocks
// that each spin U microseconds, launched on the service's stream and waited
// for. Arrivals are Poisson at a given rate (or back to back); a request's
// latency runs from its scheduled arrival, so time spent queued behind an
// earlier request counts. Prints
//   hp: requests N rate R p50 X p99 Y p999 Z mean M max W us
// (and `hp: capacity C req/s` in closed loop); --csv keeps every latency.
//
// Build: nvcc -arch=sm_90a -O2 -std=c++17 hp-serve.cu -o hp-serve
#include "spin-kernels.h"

static const char *Usage =
    "usage: hp-serve [options]\n"
    "Serves requests of one kernel each and prints their "
    "latency.\n" HP_OPTIONS_HELP
    "  --priority-stream   launch on a stream of the greatest priority\n"
    "  --help              this text\n";

int main(int Argc, char **Argv) {
  ProgName = "hp-serve";
  HpOptions O;
  ArgReader R(Argc, Argv);
  while (R.next()) {
    if (parseHpOption(R, O))
      continue;
    if (R.flag("--priority-stream")) {
      O.Priority = StreamPriority::Greatest;
    } else if (R.flag("--help") || R.flag("-h")) {
      std::fputs(Usage, stdout);
      return 0;
    } else {
      std::fprintf(stderr,
                   "hp-serve: error: unknown option '%s' (see --help)\n",
                   R.name().c_str());
      return 2;
    }
  }
  DeviceInfo Dev = deviceInfo();
  cudaStream_t S = makeStream(O.Priority);
  int Rc = runHp(O, S, Dev);
  CK(cudaStreamDestroy(S));
  return Rc;
}
