//===- tally.cpp - start a program under the Tally runtime ----------------===//
//
//   tally run [options] -- CMD ARGS...
//
// Sets LD_PRELOAD to libtally.so (found beside this executable, in
// ../lib/, or given with --lib) and the TALLY_* variables the options
// stand for, then executes CMD. The runtime reads the same variables, so
// `LD_PRELOAD=libtally.so TALLY_FORCE=ptb ./app` does the same by hand.
//
//===----------------------------------------------------------------------===//

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string selfDir() {
  char Buf[PATH_MAX];
  ssize_t N = readlink("/proc/self/exe", Buf, sizeof Buf - 1);
  if (N <= 0)
    return ".";
  std::string P(Buf, static_cast<size_t>(N));
  size_t Slash = P.rfind('/');
  return Slash == std::string::npos ? "." : P.substr(0, Slash);
}

std::string findLibrary(const std::string &Given) {
  if (!Given.empty())
    return Given;
  if (const char *E = std::getenv("TALLY_LIBRARY"); E && *E)
    return E;
  std::string Dir = selfDir();
  for (const char *Rel : {"/../lib/libtally.so", "/../lib64/libtally.so", "/libtally.so"}) {
    std::string P = Dir + Rel;
    if (access(P.c_str(), R_OK) == 0) {
      char Real[PATH_MAX];
      return realpath(P.c_str(), Real) ? Real : P;
    }
  }
  return "";
}

const char *Variables =
    "Environment (set by the options above; LD_PRELOAD=libtally.so with these\n"
    "variables does the same by hand):\n"
    "  TALLY_PRIORITY     high | best-effort\n"
    "  TALLY_FORCE        original | slice | ptb\n"
    "  TALLY_PREEMPT      random:N\n"
    "  TALLY_SEED         seed of the random preemption points\n"
    "  TALLY_STATS        1, or the JSON file to write\n"
    "  TALLY_LOG_LEVEL    error | warn | info | debug\n"
    "  TALLY_PTB_CHUNK    logical blocks a PTB worker claims at once\n"
    "  TALLY_PTB_WORKERS_PER_SM  at most this many PTB workers per SM\n"
    "  TALLY_SLICE_BLOCKS blocks per slice (default: one wave)\n"
    "  TALLY_DRIVER       the CUDA driver library (default libcuda.so.1)\n"
    "  TALLY_DISABLE      1: the runtime passes every call through\n"
    "  TALLY_LIBRARY      where `tally run` finds libtally.so\n";

} // namespace

int main(int Argc, char **Argv) {
  CLI::App App{"tally: share a GPU between latency-critical and best-effort work.\n\n"
               "Kernels that tally-opt rewrote run through their sliced or preemptible\n"
               "(PTB) variants; every other kernel runs as it is. Results are the same\n"
               "bit for bit.",
               "tally"};
  App.require_subcommand(1);
  App.footer(Variables);
  CLI::App *Run = App.add_subcommand(
      "run", "run CMD with the Tally runtime loaded: tally run [options] -- CMD ARGS...");
  std::string Priority = "best-effort", Force, Preempt, Stats, LogLevel, Lib, Seed;
  unsigned Chunk = 0, SliceBlocks = 0, WorkersPerSM = 0;
  std::vector<std::string> Cmd;
  Run->add_option("--priority", Priority,
                  "high: a latency-critical service, its kernels run unchanged; "
                  "best-effort: kernels may be sliced or preempted")
      ->check(CLI::IsMember({"high", "best-effort"}))
      ->capture_default_str();
  Run->add_option("--force", Force,
                  "run every kernel that has the variant in this form (original, slice, ptb); "
                  "without it the runtime decides (this version: the original)")
      ->check(CLI::IsMember({"original", "slice", "ptb"}));
  Run->add_option("--preempt", Preempt,
                  "random:N: preempt each PTB launch at up to N random points and resume it "
                  "(a correctness check of preemption)");
  Run->add_option("--stats", Stats,
                  "print per-kernel statistics to stderr at exit; with =FILE also write "
                  "them as JSON to FILE")
      ->expected(0, 1)
      ->default_str("1");
  Run->add_option("--log-level", LogLevel, "error, warn (default), info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
  Run->add_option("--seed", Seed, "seed of the random preemption points (default 1)");
  Run->add_option("--ptb-chunk", Chunk,
                  "logical blocks a PTB worker claims at once (default 1; more is faster "
                  "on short blocks, preempts later)")
      ->check(CLI::Range(1u, 1u << 20));
  Run->add_option("--ptb-workers-per-sm", WorkersPerSM,
                  "at most this many PTB workers per SM (default: as many as fit; fewer "
                  "workers make each claim more logical blocks, so preemption lands mid-grid "
                  "even in one-wave kernels)")
      ->check(CLI::Range(1u, 1024u));
  Run->add_option("--slice-blocks", SliceBlocks, "blocks per slice (default: one wave)")
      ->check(CLI::Range(1u, UINT_MAX));
  Run->add_option("--lib", Lib, "libtally.so to load (default: ../lib/libtally.so beside tally)");
  Run->add_option("command", Cmd, "the program and its arguments (after --)")->required();
  Run->footer(Variables);

  try {
    App.parse(Argc, Argv);
  } catch (const CLI::ParseError &E) {
    return App.exit(E);
  }

  std::string Library = findLibrary(Lib);
  if (Library.empty() || access(Library.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "tally: error: cannot find libtally.so%s%s (use --lib or TALLY_LIBRARY)\n",
                 Library.empty() ? "" : " at ", Library.c_str());
    return 1;
  }
  if (!Preempt.empty()) {
    // Checked here too, so a typo fails at once rather than as a warning.
    bool Ok = Preempt.rfind("random:", 0) == 0 && Preempt.size() > 7 &&
              Preempt.find_first_not_of("0123456789", 7) == std::string::npos &&
              Preempt.size() < 12 && std::stoul(Preempt.substr(7)) >= 1 &&
              std::stoul(Preempt.substr(7)) <= 1000;
    if (!Ok) {
      std::fprintf(stderr, "tally: error: --preempt expects random:N with N from 1 to 1000, not '%s'\n",
                   Preempt.c_str());
      return 1;
    }
  }
  std::string Preload = Library;
  if (const char *Old = std::getenv("LD_PRELOAD"); Old && *Old)
    Preload += std::string(":") + Old;
  setenv("LD_PRELOAD", Preload.c_str(), 1);
  setenv("TALLY_PRIORITY", Priority.c_str(), 1);
  auto Set = [](const char *Name, const std::string &V) {
    if (!V.empty())
      setenv(Name, V.c_str(), 1);
  };
  Set("TALLY_FORCE", Force);
  Set("TALLY_PREEMPT", Preempt);
  if (Run->count("--stats"))
    Set("TALLY_STATS", Stats.empty() ? "1" : Stats);
  Set("TALLY_LOG_LEVEL", LogLevel);
  Set("TALLY_SEED", Seed);
  if (Chunk)
    Set("TALLY_PTB_CHUNK", std::to_string(Chunk));
  if (SliceBlocks)
    Set("TALLY_SLICE_BLOCKS", std::to_string(SliceBlocks));
  if (WorkersPerSM)
    Set("TALLY_PTB_WORKERS_PER_SM", std::to_string(WorkersPerSM));

  std::vector<char *> Args;
  for (std::string &A : Cmd)
    Args.push_back(A.data());
  Args.push_back(nullptr);
  execvp(Args[0], Args.data());
  std::fprintf(stderr, "tally: error: cannot run '%s': %s\n", Args[0], std::strerror(errno));
  return 127;
}
