// hiccup.cpp - does the machine stop this process's threads now and then?
// A thread spins on the monotonic clock for a while and reports every gap
// between two consecutive readings longer than a threshold: time in which
// the thread did not run (a preempted vCPU of a virtual machine, an
// interrupt storm, a higher-priority task). Run beside a latency benchmark
// (scripts/gpu-hp-tail.sh does), it tells a stall of the machine from one
// of the program: the gaps carry epoch times to line them up with the
// benchmark's trace.
//
// A thread that is stopped often but briefly (slices of tens of
// microseconds given to another guest) shows no long gap but a slow
// window: per 10 ms, the gaps over 5 us are summed, and a window that
// lost over a tenth of its time is reported.
//
// Output, one line per gap: `gap <epoch seconds at its end> <length us>`,
// and per slow window `slow <epoch seconds at its end> <us lost of 10000>`
// (flushed at once: a run stopped by a signal keeps them), then
// `hiccup: seconds S gaps N over T us, longest L us; slow windows W`.
//
// Build: c++ -O2 -std=c++17 hiccup.cpp -o hiccup
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

static const char *Usage =
    "usage: hiccup [--seconds S] [--threshold-us T]\n"
    "Spins on the monotonic clock for S seconds (default 10) and prints every\n"
    "gap between two readings longer than T microseconds (default 500) with\n"
    "the epoch time at its end.\n";

static double parse(const char *Name, const char *Text, double Lo, double Hi) {
  char *End = nullptr;
  double V = Text ? std::strtod(Text, &End) : 0;
  if (!Text || End == Text || *End || !(V >= Lo && V <= Hi)) {
    std::fprintf(stderr, "hiccup: error: %s wants a number in [%g, %g], got '%s'\n", Name, Lo,
                 Hi, Text ? Text : "");
    std::exit(2);
  }
  return V;
}

static double epochNow() {
  timespec T;
  clock_gettime(CLOCK_REALTIME, &T);
  return double(T.tv_sec) + double(T.tv_nsec) * 1e-9;
}

int main(int Argc, char **Argv) {
  double Seconds = 10, ThresholdUs = 500;
  for (int I = 1; I < Argc; ++I) {
    std::string A = Argv[I];
    if (A == "--seconds")
      Seconds = parse("--seconds", I + 1 < Argc ? Argv[++I] : nullptr, 0.001, 86400);
    else if (A == "--threshold-us")
      ThresholdUs = parse("--threshold-us", I + 1 < Argc ? Argv[++I] : nullptr, 1, 1e7);
    else if (A == "--help" || A == "-h") {
      std::fputs(Usage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "hiccup: error: unknown option '%s' (see --help)\n", A.c_str());
      return 2;
    }
  }
  using Clock = std::chrono::steady_clock;
  const auto Threshold = std::chrono::nanoseconds(static_cast<long long>(ThresholdUs * 1000));
  const auto Start = Clock::now();
  const auto End = Start + std::chrono::nanoseconds(static_cast<long long>(Seconds * 1e9));
  long long Gaps = 0, SlowWindows = 0;
  double Longest = 0;
  const auto Window = std::chrono::microseconds(10000);
  const auto Small = std::chrono::microseconds(5);
  auto WindowEnd = Start + Window;
  Clock::duration Lost{};
  for (auto Prev = Start;;) {
    auto Now = Clock::now();
    if (Now - Prev > Small)
      Lost += Now - Prev;
    if (Now >= WindowEnd) {
      if (Lost > Window / 10) {
        std::printf("slow %.6f %.0f\n", epochNow(),
                    std::chrono::duration<double, std::micro>(Lost).count());
        std::fflush(stdout);
        ++SlowWindows;
      }
      Lost = {};
      WindowEnd = Now + Window;
      Now = Clock::now(); // the print is not a gap
    }
    if (Now - Prev > Threshold) {
      double Us = std::chrono::duration<double, std::micro>(Now - Prev).count();
      std::printf("gap %.6f %.1f\n", epochNow(), Us);
      std::fflush(stdout); // a run cut short keeps its gaps
      ++Gaps;
      if (Us > Longest)
        Longest = Us;
      Now = Clock::now(); // the print is not a gap
    }
    if (Now >= End)
      break;
    Prev = Now;
  }
  std::printf("hiccup: seconds %g gaps %lld over %g us, longest %.1f us; slow windows %lld\n",
              Seconds, Gaps, ThresholdUs, Longest, SlowWindows);
  return 0;
}
