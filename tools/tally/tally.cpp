//===- tally.cpp - start a program under the Tally runtime ----------------===//
//
//   tally run [options] -- CMD ARGS...
//   tally mps start|stop|status
//   tally profile show|clear [--gpu UUID]
//   tally status [--dir DIR] [--gpu UUID] [--json]
//
// `run` sets LD_PRELOAD to libtally.so (found beside this executable, in
// ../lib/, or given with --lib) and the TALLY_* variables the options
// stand for, then executes CMD. The runtime reads the same variables, so
// `LD_PRELOAD=libtally.so TALLY_FORCE=ptb ./app` does the same by hand.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/Config.h"
#include "tally/Runtime/ProfileCache.h"
#include "tally/Runtime/PtxLoader.h"
#include "tally/Runtime/SegmentStatus.h"

#include <CLI/CLI.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

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
    "  TALLY_FORCE_ONLY   a regular expression: the kernels --force applies to\n"
    "  TALLY_PREEMPT      random:N\n"
    "  TALLY_SEED         seed of the random preemption points\n"
    "  TALLY_STATS        1, or the JSON file to write\n"
    "  TALLY_STATS_PID    the process whose JSON is that file (set by --stats); others\n"
    "                     write FILE.PID.json beside it\n"
    "  TALLY_LOG_LEVEL    error | warn | info | debug\n"
    "  TALLY_PTB_CHUNK    logical blocks a PTB worker claims at once\n"
    "  TALLY_PTB_WORKERS_PER_SM  at most this many PTB workers per SM\n"
    "  TALLY_SLICE_BLOCKS blocks per slice (default: one wave)\n"
    "  TALLY_TURNAROUND_US  how long an arriving HP kernel may wait (default 31.6)\n"
    "  TALLY_IDLE_US      BE work resumes after HP was idle this long (default 100)\n"
    "  TALLY_SILENCE_MS   after this long without HP activity, BE kernels run as\n"
    "                     originals at full speed (default 100)\n"
    "  TALLY_STATS_TURNAROUND  1: an HP process's --stats also time each launch's\n"
    "                     turnaround (a thread spins beside the service)\n"
    "  TALLY_BESIDE       0: under MPS, BE kernels wait for HP to be idle (none beside)\n"
    "  TALLY_FREE_MEASURE 0: a BE process measures its kernels' forms only while HP\n"
    "                     is present and idle (default 1: also with no HP activity)\n"
    "  TALLY_PROVISIONAL  0: under MPS, a BE launch of a shape still being measured\n"
    "                     waits for HP to be idle (default 1: while an HP request\n"
    "                     runs it starts as a narrow PTB launch beside HP)\n"
    "  TALLY_ARMED_FLAG   0: a BE PTB launch's preemption flag write is queued when\n"
    "                     HP arrives (default 1: queued ahead, raised by one store)\n"
    "  TALLY_BESIDE_PTB_PERCENT  under MPS, a BE PTB launch keeps this share of a\n"
    "                     wave of workers beside HP (default 50; 0: it leaves)\n"
    "  TALLY_BESIDE_WAVE_US  under MPS as a client of below-normal priority, a BE\n"
    "                     kernel whose original runs in waves of at most this many\n"
    "                     us runs as the original beside HP (default 0: chosen by\n"
    "                     the original's whole time only)\n"
    "  TALLY_WIDEN_US     a narrow PTB launch takes all its workers back after HP was\n"
    "                     quiet this long (default 1000)\n"
    "  TALLY_NARROW_UNWATCHED_US  a PTB launch narrow beside HP and expected to end\n"
    "                     within this many us goes without its stream's gate and is\n"
    "                     not watched (default 1000; 0: every one watched)\n"
    "  TALLY_SHM_DIR      folder of the per-GPU segment (default /dev/shm)\n"
    "  TALLY_SCHEDULE     0: no scheduling across processes\n"
    "  TALLY_HP_COMPLETION  burst (default) | side | gpu | host | none: how an HP process\n"
    "                     reports its launches' ends (docs/runtime.md)\n"
    "  TALLY_HP_BURST_US  burst: the shortest time between two completion writes\n"
    "                     (default 100)\n"
    "  TALLY_PROFILE_CACHE  0: do not read or write the profile cache\n"
    "  TALLY_CACHE_DIR    the caches' folder (default ~/.cache/tally): profiles, and\n"
    "                     run-time PTX with variants in ptx/\n"
    "  TALLY_RUNTIME_PTX  auto | 1 | 0: variants for PTX loaded at run time\n"
    "  TALLY_OPT          the tally-opt that makes them (default: beside libtally.so)\n"
    "  TALLY_PTX_TIMEOUT_S  the longest one module's transformation may take (120)\n"
    "  TALLY_DRIVER       the CUDA driver library (default libcuda.so.1)\n"
    "  TALLY_DISABLE      1: the runtime passes every call through\n"
    "  TALLY_DEBUG_RESUME_PRIORITY, TALLY_DEBUG_SIGNAL_PRIORITY  least | greatest:\n"
    "                     the internal resume and signal streams' priorities, and\n"
    "  TALLY_DEBUG_FRESH_RESUME  1: each relaunch on a stream of its own (for\n"
    "                     finding hangs: docs/runtime.md, When something is wrong)\n"
    "  TALLY_LIBRARY      where `tally run` finds libtally.so\n"
    "Also set for best-effort processes: CUDA_MPS_CLIENT_PRIORITY=1, unless it is set\n"
    "or --no-mps-priority is given; CUDA_DEVICE_MAX_CONNECTIONS=32 (hardware work\n"
    "queues: with fewer, launches queued behind a preempted launch were seen to keep\n"
    "its resumption from ever starting, so the runtime then puts none there and a\n"
    "launch waits for such a launch to end), unless it is set.\n";

/// The MPS daemon's folders: the user's settings, else NVIDIA's default
/// pipe folder (so clients need no setting) and a log folder a user may
/// write.
std::string mpsPipeDir() {
  const char *D = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  return D && *D ? D : "/tmp/nvidia-mps";
}
std::string mpsLogDir() {
  const char *D = std::getenv("CUDA_MPS_LOG_DIRECTORY");
  return D && *D ? D : "/tmp/nvidia-mps-log";
}

/// Runs nvidia-cuda-mps-control with \p Args, \p Input on its standard input
/// ("" for none). Returns its exit status (127: not found).
int mpsControl(const std::vector<std::string> &Args, const std::string &Input,
               bool Quiet = false) {
  setenv("CUDA_MPS_PIPE_DIRECTORY", mpsPipeDir().c_str(), 1);
  setenv("CUDA_MPS_LOG_DIRECTORY", mpsLogDir().c_str(), 1);
  int In[2];
  if (pipe(In) != 0)
    return 1;
  pid_t P = fork();
  if (P < 0)
    return 1;
  if (P == 0) {
    dup2(In[0], 0);
    close(In[0]);
    close(In[1]);
    if (Quiet) {
      int Null = open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (Null >= 0) {
        dup2(Null, 1);
        dup2(Null, 2);
      }
    }
    std::vector<char *> A;
    std::string Name = "nvidia-cuda-mps-control";
    A.push_back(Name.data());
    std::vector<std::string> Copy = Args;
    for (std::string &X : Copy)
      A.push_back(X.data());
    A.push_back(nullptr);
    execvp(A[0], A.data());
    _exit(127);
  }
  close(In[0]);
  if (!Input.empty() && write(In[1], Input.data(), Input.size()) < 0)
    std::perror("tally: writing to nvidia-cuda-mps-control");
  close(In[1]);
  int St = 0;
  waitpid(P, &St, 0);
  return WIFEXITED(St) ? WEXITSTATUS(St) : 1;
}

/// Is a daemon answering? Asked through the control client itself (the
/// control pipe's file outlives the daemon, and probing the pipe directly
/// gave wrong answers on the GPU machine): `get_server_list` succeeds only
/// when a daemon runs.
bool mpsRunning() {
  struct stat St;
  if (stat((mpsPipeDir() + "/control").c_str(), &St) != 0)
    return false;
  return mpsControl({}, "get_server_list\n", /*Quiet=*/true) == 0;
}

int runMps(const std::string &Action) {
  if (Action == "status") {
    bool On = mpsRunning();
    std::printf("MPS control daemon: %s (pipe folder %s, log folder %s)\n",
                On ? "running" : "not running", mpsPipeDir().c_str(), mpsLogDir().c_str());
    if (On)
      std::printf("HP and BE processes of this user share the GPU side by side: an arriving HP\n"
                  "kernel waits only for the running BE blocks to leave.\n");
    else
      std::printf("Without MPS the GPU time-slices between processes: an arriving HP kernel\n"
                  "also waits for the BE process's time slice (hundreds of microseconds).\n");
    return On ? 0 : 3;
  }
  if (Action == "start") {
    if (mpsRunning()) {
      std::printf("MPS control daemon already running (pipe folder %s)\n", mpsPipeDir().c_str());
      return 0;
    }
    for (const std::string &D : {mpsPipeDir(), mpsLogDir()})
      if (mkdir(D.c_str(), 0700) != 0 && errno != EEXIST) {
        std::fprintf(stderr, "tally: error: cannot create %s: %s\n", D.c_str(), std::strerror(errno));
        return 1;
      }
    int R = mpsControl({"-d"}, "");
    if (R == 127) {
      std::fprintf(stderr, "tally: error: nvidia-cuda-mps-control not found on PATH\n");
      return 1;
    }
    for (int I = 0; I < 50 && !mpsRunning(); ++I)
      usleep(100000);
    if (R != 0 || !mpsRunning()) {
      std::fprintf(stderr, "tally: error: the MPS control daemon did not start (exit %d; see %s)\n",
                   R, mpsLogDir().c_str());
      return 1;
    }
    std::printf("MPS control daemon started (pipe folder %s, log folder %s)\n",
                mpsPipeDir().c_str(), mpsLogDir().c_str());
    if (mpsPipeDir() != "/tmp/nvidia-mps")
      std::printf("clients need CUDA_MPS_PIPE_DIRECTORY=%s\n", mpsPipeDir().c_str());
    return 0;
  }
  // stop
  if (!mpsRunning()) {
    std::printf("MPS control daemon not running\n");
    return 0;
  }
  int R = mpsControl({}, "quit\n");
  for (int I = 0; I < 50 && mpsRunning(); ++I)
    usleep(100000);
  if (R != 0 || mpsRunning()) {
    std::fprintf(stderr, "tally: error: the MPS control daemon did not stop (exit %d)\n", R);
    return 1;
  }
  std::printf("MPS control daemon stopped\n");
  return 0;
}

int runProfile(const std::string &Action, const std::string &Gpu) {
  std::string Dir = tally::rt::ProfileCache::defaultDir(
      [](const char *N) -> const char * { return std::getenv(N); });
  if (Dir.empty()) {
    std::fprintf(stderr, "tally: error: no cache folder (set TALLY_CACHE_DIR or HOME)\n");
    return 1;
  }
  std::vector<std::string> Files;
  if (DIR *D = opendir(Dir.c_str())) {
    while (dirent *E = readdir(D)) {
      std::string N = E->d_name;
      if (N.rfind("profile-", 0) == 0 && N.size() > 3 && N.compare(N.size() - 3, 3, ".v1") == 0 &&
          (Gpu.empty() || N.find(Gpu) != std::string::npos))
        Files.push_back(Dir + "/" + N);
    }
    closedir(D);
  }
  if (Files.empty()) {
    std::printf("no profile cache in %s%s\n", Dir.c_str(),
                Gpu.empty() ? "" : (" for " + Gpu).c_str());
    return 0;
  }
  int Status = 0;
  for (const std::string &F : Files) {
    if (Action == "clear") {
      std::string Error;
      if (!tally::rt::ProfileCache::clear(F, Error)) {
        std::fprintf(stderr, "tally: error: %s\n", Error.c_str());
        Status = 1;
      } else {
        std::printf("removed %s\n", F.c_str());
      }
      continue;
    }
    tally::rt::ProfileCache C(F);
    std::string Warning;
    bool Ok = C.load(Warning);
    std::printf("%s: %zu launch shapes\n", F.c_str(), C.keys());
    if (!Warning.empty())
      std::printf("  warning: %s\n", Warning.c_str());
    if (!Ok)
      Status = 1;
    C.print(std::cout);
    std::cout.flush();
  }
  return Status;
}

/// `tally status`: the processes sharing each GPU under Tally, read from
/// the segments (docs/runtime.md, "Scheduling across processes"). Exit
/// status 1 when a segment file or the folder cannot be read.
int runStatus(const std::string &Dir, const std::string &Gpu, bool Json) {
  tally::rt::StatusOptions O;
  if (!Dir.empty())
    O.Dir = Dir;
  else if (const char *E = std::getenv("TALLY_SHM_DIR"); E && *E)
    O.Dir = E;
  O.Uid = uint32_t(geteuid());
  O.Gpu = Gpu;
  O.Json = Json;
  tally::rt::StatusReport R = tally::rt::segmentStatus(O);
  std::fputs(R.Out.c_str(), stdout);
  std::fflush(stdout);
  if (!R.Errors.empty()) {
    std::istringstream Lines(R.Errors);
    for (std::string L; std::getline(Lines, L);)
      std::fprintf(stderr, "tally: error: %s\n", L.c_str());
  }
  return R.Problems ? 1 : 0;
}

/// `tally ptx-cache show|clear`: the run-time PTX cache (docs/ptx-cache.md).
int runPtxCache(const std::string &Action) {
  std::string Dir = tally::rt::ProfileCache::defaultDir(
      [](const char *N) -> const char * { return std::getenv(N); });
  if (Dir.empty()) {
    std::fprintf(stderr, "tally: error: no cache folder (set TALLY_CACHE_DIR or HOME)\n");
    return 1;
  }
  Dir += "/ptx";
  // Entries; temporary files of killed writers; inputs tally-opt failed
  // on with an internal error, kept for a report.
  std::vector<std::string> Files, Stale, Failed;
  if (DIR *D = opendir(Dir.c_str())) {
    while (dirent *E = readdir(D)) {
      std::string N = E->d_name;
      if (N.size() > 5 && N.compare(N.size() - 5, 5, ".ptxc") == 0)
        Files.push_back(N);
      else if (N.rfind(".tmp-", 0) == 0)
        Stale.push_back(N);
      else if (N.rfind("failed-", 0) == 0)
        Failed.push_back(N);
    }
    closedir(D);
  }
  std::sort(Files.begin(), Files.end());
  std::sort(Failed.begin(), Failed.end());
  if (Files.empty() && Stale.empty() && Failed.empty()) {
    std::printf("no run-time PTX cache entries in %s\n", Dir.c_str());
    return 0;
  }
  int Status = 0;
  if (Action == "clear") {
    for (const std::vector<std::string> *L : {&Files, &Stale, &Failed})
      for (const std::string &N : *L) {
        std::string P = Dir + "/" + N;
        if (unlink(P.c_str()) != 0 && errno != ENOENT) {
          std::fprintf(stderr, "tally: error: cannot remove %s: %s\n", P.c_str(),
                       std::strerror(errno));
          Status = 1;
        }
      }
    std::printf("removed %zu entries%s from %s\n", Files.size(),
                Failed.empty() ? ""
                               : (" and " + std::to_string(Failed.size()) +
                                  " inputs kept for a report").c_str(),
                Dir.c_str());
    return Status;
  }
  std::printf("%s: %zu entries\n", Dir.c_str(), Files.size());
  for (const std::string &N : Files) {
    std::ifstream F(Dir + "/" + N, std::ios::binary);
    std::stringstream Buf;
    Buf << F.rdbuf();
    std::string Text = Buf.str(), Key, Why;
    auto E = tally::rt::readPtxCacheEntry(Text, Key, Why);
    if (!E) {
      std::printf("  %s  corrupt (%s): rewritten at its next use\n", N.c_str(), Why.c_str());
      continue;
    }
    if (E->Ok) {
      std::vector<std::string> Names = tally::rt::ptxEntryNames(E->Body);
      std::printf("  %s  transformed, %zu bytes, %zu kernels with variants, %s\n", N.c_str(),
                  E->Body.size(), Names.size(), Key.c_str());
    } else {
      std::printf("  %s  refused: %s  (%s)\n", N.c_str(), E->Body.c_str(), Key.c_str());
    }
  }
  for (const std::string &N : Failed)
    std::printf("  %s  an input tally-opt failed on (internal error), kept for a report\n",
                N.c_str());
  return Status;
}

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
  std::string Priority = "best-effort", Force, ForceOnly, Preempt, Stats, LogLevel, Lib, Seed;
  unsigned Chunk = 0, SliceBlocks = 0, WorkersPerSM = 0;
  std::vector<std::string> Cmd;
  Run->add_option("--priority", Priority,
                  "high: a latency-critical service, its kernels run unchanged; "
                  "best-effort: kernels may be sliced or preempted")
      ->check(CLI::IsMember({"high", "best-effort"}))
      ->capture_default_str();
  Run->add_option("--force", Force,
                  "run every kernel that has the variant in this form (original, slice, ptb); "
                  "without it the scheduler decides (best-effort processes), or the original runs")
      ->check(CLI::IsMember({"original", "slice", "ptb"}));
  Run->add_option("--force-only", ForceOnly,
                  "REGEX: --force applies only to kernels whose (mangled) name matches this "
                  "POSIX extended regular expression; the others run as originals (to find "
                  "which kernel's variant is at fault)");
  Run->add_option("--preempt", Preempt,
                  "random:N: preempt each PTB launch at up to N random points and resume it "
                  "(a correctness check of preemption)");
  Run->add_option("--stats", Stats,
                  "print per-kernel statistics to stderr at exit; with =FILE also write "
                  "them as JSON to FILE (child processes that use CUDA: FILE.PID.json)")
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
  std::string Turnaround, ShmDir;
  unsigned IdleUs = 0, SilenceMs = 0;
  bool NoCache = false, NoSchedule = false;
  Run->add_option("--turnaround-us", Turnaround,
                  "best-effort: how long an arriving HP kernel may wait for the running BE "
                  "kernel (default 31.6 us): the profile-guided choice of form aims at it");
  Run->add_option("--idle-us", IdleUs,
                  "best-effort: start or resume BE work once HP has been idle this long "
                  "(default 100)")
      ->check(CLI::Range(0u, 10000000u));
  Run->add_option("--silence-ms", SilenceMs,
                  "best-effort: after this long without HP activity, BE kernels run as "
                  "originals at full speed (default 100)")
      ->check(CLI::Range(1u, 3600000u));
  unsigned QueueUs = 0;
  Run->add_option("--queue-us", QueueUs,
                  "best-effort: while HP is idle, queue BE launches as long as what the queued "
                  "launches may make an arriving HP kernel wait (from the profile: a PTB "
                  "launch's turnaround, an original's time, under MPS client priority one wave "
                  "of it) stays within this many us in all, instead of one launch at a time "
                  "(0). Default: " +
                      std::to_string(tally::rt::Config::MpsQueueUs) +
                      " for an MPS client of below-normal priority (the GPU starts HP's blocks "
                      "before BE's queued ones), else 0; without MPS an arriving HP kernel may "
                      "wait that long more")
      ->check(CLI::Range(0u, 1000000u));
  unsigned MaxHoldUs = 0;
  Run->add_option("--max-hold-us", MaxHoldUs,
                  "best-effort: a launch waits for HP to be idle at most this long, then "
                  "starts beside HP (default 0: until HP is idle). For a service that is "
                  "rarely idle for --idle-us, such as an eager PyTorch one, kernels that "
                  "cannot be stopped otherwise wait most of the time; an arriving HP kernel "
                  "may then wait for such a kernel's blocks")
      ->check(CLI::Range(0u, 10000000u));
  unsigned HpWaitShare = 0;
  Run->add_option("--hp-wait-share", HpWaitShare,
                  "best-effort, under MPS as a client of below-normal priority: while every HP "
                  "process waits for the GPU less than this percentage of its requests' time "
                  "(a launch-bound service, such as eager PyTorch at batch 1), kernels that "
                  "would wait for HP to be idle start beside it, and the GPU's block priority "
                  "keeps them out of HP's way; 0: they always wait (default " +
                      std::to_string(tally::rt::Config{}.HpWaitSharePercent) + ")")
      ->check(CLI::Range(0u, 100u));
  bool NoBeside = false;
  Run->add_flag("--no-beside", NoBeside,
                "best-effort: under MPS, every kernel waits for HP to be idle, none runs "
                "beside HP's (default: an original measured within --turnaround-us (as an MPS "
                "client of below-normal priority, one wave of it), or sliced "
                "work whose slices are, starts at once, as does an original whose grid fits "
                "in --beside-ptb-percent of a wave; PTB launches keep that share of their "
                "workers)");
  bool NoFreeMeasure = false;
  Run->add_flag("--no-free-measure", NoFreeMeasure,
                "best-effort: measure the forms of a kernel's launch shape only in Guarded "
                "mode, while HP is present and idle, holding the launch (default: also with "
                "no HP activity, where a launch of a shape whose profile is incomplete runs "
                "the candidate due among the program's other launches, timed, not held)");
  bool NoArmedFlag = false;
  Run->add_flag("--no-armed-flag", NoArmedFlag,
                "best-effort: raise a PTB launch's preemption flag by driver calls when HP "
                "arrives (default: the flag's write of a launch running wide is queued ahead "
                "behind a wait on a word of pinned host memory, and raising it is one store)");
  bool NoProvisional = false;
  Run->add_flag("--no-provisional", NoProvisional,
                "best-effort: under MPS, a launch of a shape whose forms are still being "
                "measured waits for HP to be idle, to be measured (default: while an HP "
                "request runs it starts at once as its PTB variant on --beside-ptb-percent of "
                "a wave of workers, never widened, unmeasured; the shape is measured at "
                "launches made while HP is idle)");
  bool NoMpsPriority = false;
  Run->add_flag("--no-mps-priority", NoMpsPriority,
                "best-effort: leave CUDA_MPS_CLIENT_PRIORITY as it is (default: unless it is "
                "set, a best-effort process becomes an MPS client of below-normal priority, "
                "1, so that the GPU gives HP's waiting blocks the SMs first; no effect "
                "without MPS)");
  unsigned BesidePtb = 50, WidenUs = 1000, BesideWaveUs = 0;
  Run->add_option("--beside-ptb-percent", BesidePtb,
                  "best-effort, under MPS: while HP works, a PTB launch keeps this percentage "
                  "of a full wave of workers (at least one) beside HP's kernels instead of "
                  "leaving the GPU (default 50; 0: it leaves and waits for HP to be idle); an "
                  "original whose grid fits in that share starts beside HP however long it is")
      ->check(CLI::Range(0u, 100u));
  Run->add_option("--beside-wave-us", BesideWaveUs,
                  "best-effort, under MPS as a client of below-normal priority: a kernel "
                  "whose original runs in waves of at most this many microseconds (measured) "
                  "runs as the original beside HP rather than as a variant; the GPU starts "
                  "HP's waiting blocks first, so HP waits for one such wave at most (a wave "
                  "with a quarter more must be within --turnaround-us); more BE "
                  "throughput for some HP latency (default 0: an original is chosen by its "
                  "whole time only; docs/runtime.md)")
      ->check(CLI::Range(0u, 1000u));
  Run->add_option("--widen-us", WidenUs,
                  "best-effort, under MPS: a PTB launch running narrow beside HP takes all its "
                  "workers back once HP has been quiet this long (default 1000; at least "
                  "--idle-us)")
      ->check(CLI::Range(0u, 10000000u));
  Run->add_option("--shm-dir", ShmDir,
                  "folder of the per-GPU segment the processes share (default /dev/shm; "
                  "containers must share it)");
  Run->add_flag("--no-profile-cache", NoCache,
                "do not read or write the profile cache (measure afresh, keep nothing)");
  Run->add_flag("--no-schedule", NoSchedule,
                "no scheduling across processes (only --force and --preempt act)");
  bool TritonPtxas = false;
  Run->add_flag("--triton-ptxas", TritonPtxas,
                "Triton compiles with tally-ptxas (beside tally), so its kernels get variants: "
                "sets TRITON_PTXAS_PATH (the ptxas it named before becomes TALLY_PTXAS_REAL). "
                "Opt-in until it has run in more programs (docs/tally-ptxas.md)");
  std::string RuntimePtx = "auto";
  Run->add_option("--runtime-ptx", RuntimePtx,
                  "PTX loaded at run time (NVRTC, CuPy with PTX, Numba: cuModuleLoadData(Ex), "
                  "cuLibraryLoadData, cuLinkAddData) gets variants from tally-opt (beside tally) "
                  "before the driver compiles it, cached on disk: auto (default: best-effort "
                  "processes, and any with --force), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  Run->add_option("--lib", Lib, "libtally.so to load (default: ../lib/libtally.so beside tally)");
  Run->add_option("command", Cmd, "the program and its arguments (after --)")->required();
  Run->footer(Variables);

  CLI::App *Mps = App.add_subcommand(
      "mps", "start, stop or check NVIDIA's MPS control daemon for this user's GPUs (HP "
             "latency in microseconds needs MPS); uses CUDA_MPS_PIPE_DIRECTORY (default "
             "/tmp/nvidia-mps) and CUDA_MPS_LOG_DIRECTORY (default /tmp/nvidia-mps-log)");
  std::string MpsAction;
  Mps->add_option("action", MpsAction, "start | stop | status (exit 3: not running)")
      ->required()
      ->check(CLI::IsMember({"start", "stop", "status"}));
  CLI::App *Prof = App.add_subcommand(
      "profile", "show or clear the profile cache: measured times of each kernel's forms per "
                 "launch shape, per GPU (docs/profile-cache.md)");
  std::string ProfAction, ProfGpu;
  Prof->add_option("action", ProfAction, "show | clear")
      ->required()
      ->check(CLI::IsMember({"show", "clear"}));
  Prof->add_option("--gpu", ProfGpu, "only the cache of the GPU whose UUID contains this");
  CLI::App *Status = App.add_subcommand(
      "status", "which processes share each GPU under Tally now: priority, liveness, an HP "
                "process's launches not yet reported finished, a BE process's preemptions (read "
                "from the shared segments; no GPU needed; exit 1 if one cannot be read)");
  std::string StatusDir, StatusGpu;
  bool StatusJson = false;
  Status->add_option("--dir", StatusDir,
                     "the segments' folder (default: TALLY_SHM_DIR, else /dev/shm)");
  Status->add_option("--gpu", StatusGpu, "only the GPUs whose UUID contains this");
  Status->add_flag("--json", StatusJson, "JSON instead of text (fields in docs/runtime.md)");
  Status->footer("Text: a line per GPU, then one per process (slot); a heartbeat older than "
                 "50 ms is stale (the process exited or stalled; the runtime no longer counts "
                 "it).");
  CLI::App *PtxC = App.add_subcommand(
      "ptx-cache", "show or clear the cache of run-time PTX given variants (--runtime-ptx; "
                   "docs/ptx-cache.md)");
  std::string PtxAction;
  PtxC->add_option("action", PtxAction, "show | clear")
      ->required()
      ->check(CLI::IsMember({"show", "clear"}));

  // `tally run [options] -- CMD ARGS...`: everything after the first `--`
  // is the command, as it is. CLI11 is given the options and the program's
  // name only: an option with an optional value (`--stats`) right before
  // `--` otherwise made it read the program's own options as ours.
  std::vector<std::string> Tail;
  int ParsedArgc = Argc;
  for (int I = 1; I + 1 < Argc; ++I)
    if (!std::strcmp(Argv[I], "--")) {
      Tail.assign(Argv + I + 1, Argv + Argc);
      ParsedArgc = I + 2; // up to the program's name
      break;
    }
  try {
    App.parse(ParsedArgc, Argv);
  } catch (const CLI::ParseError &E) {
    int RC = App.exit(E); // --help: 0; a bad option or value: 1, as everywhere
    return RC == 0 ? 0 : 1;
  }
  if (!Tail.empty() && *Run)
    Cmd = Tail;
  if (*Mps)
    return runMps(MpsAction);
  if (*Prof)
    return runProfile(ProfAction, ProfGpu);
  if (*PtxC)
    return runPtxCache(PtxAction);
  if (*Status)
    return runStatus(StatusDir, StatusGpu, StatusJson);
  if (!Turnaround.empty()) {
    char *End = nullptr;
    double T = std::strtod(Turnaround.c_str(), &End);
    size_t Dot = Turnaround.find('.');
    if (!End || *End || !(T > 0) || T > 1e6 ||
        (Dot != std::string::npos && Turnaround.size() - Dot - 1 != 1)) {
      std::fprintf(stderr,
                   "tally: error: --turnaround-us expects microseconds with one decimal at "
                   "most (e.g. 31.6), not '%s'\n",
                   Turnaround.c_str());
      return 1;
    }
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
  Set("TALLY_FORCE_ONLY", ForceOnly);
  Set("TALLY_PREEMPT", Preempt);
  if (Run->count("--stats")) {
    Set("TALLY_STATS", Stats.empty() ? "1" : Stats);
    // exec keeps the pid: the program is this process. Its children that
    // inherit the settings write their JSON under their own pids.
    Set("TALLY_STATS_PID", std::to_string(getpid()));
  }
  Set("TALLY_LOG_LEVEL", LogLevel);
  Set("TALLY_SEED", Seed);
  if (Chunk)
    Set("TALLY_PTB_CHUNK", std::to_string(Chunk));
  if (SliceBlocks)
    Set("TALLY_SLICE_BLOCKS", std::to_string(SliceBlocks));
  if (WorkersPerSM)
    Set("TALLY_PTB_WORKERS_PER_SM", std::to_string(WorkersPerSM));
  Set("TALLY_TURNAROUND_US", Turnaround);
  if (Run->count("--idle-us"))
    Set("TALLY_IDLE_US", std::to_string(IdleUs));
  if (SilenceMs)
    Set("TALLY_SILENCE_MS", std::to_string(SilenceMs));
  if (Run->count("--queue-us"))
    Set("TALLY_QUEUE_US", std::to_string(QueueUs));
  if (Run->count("--max-hold-us"))
    Set("TALLY_MAX_HOLD_US", std::to_string(MaxHoldUs));
  if (Run->count("--hp-wait-share"))
    Set("TALLY_HP_WAIT_SHARE", std::to_string(HpWaitShare));
  if (NoBeside)
    Set("TALLY_BESIDE", "0");
  if (NoFreeMeasure)
    Set("TALLY_FREE_MEASURE", "0");
  if (NoProvisional)
    Set("TALLY_PROVISIONAL", "0");
  if (NoArmedFlag)
    Set("TALLY_ARMED_FLAG", "0");
  // Under MPS, the hardware's own priority between clients: a BE process's
  // blocks are scheduled after HP's. The scheduler still holds, slices and
  // preempts BE kernels; this only orders the blocks both have waiting.
  if (Priority == "best-effort" && !NoMpsPriority && !std::getenv("CUDA_MPS_CLIENT_PRIORITY"))
    setenv("CUDA_MPS_CLIENT_PRIORITY", "1", 1);
  // Hardware work queues: with fewer than 32, launches queued behind a
  // preempted launch's gate kept its resumption from ever starting under
  // MPS (Config::WorkQueues; why is not known), so the runtime queues none
  // there below 32 (a launch waits for such a launch to pass its gate),
  // which costs the queue budget's gain. A value the user set is kept (the
  // runtime warns below 32 while it has a queue budget, and at 1 runs
  // originals instead of preemptible PTB launches).
  if (const char *Q = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
      Priority == "best-effort" && (!Q || !*Q))
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(tally::rt::Config::WorkQueues).c_str(), 1);
  if (Run->count("--beside-ptb-percent"))
    Set("TALLY_BESIDE_PTB_PERCENT", std::to_string(BesidePtb));
  if (Run->count("--beside-wave-us"))
    Set("TALLY_BESIDE_WAVE_US", std::to_string(BesideWaveUs));
  if (Run->count("--widen-us"))
    Set("TALLY_WIDEN_US", std::to_string(WidenUs));
  Set("TALLY_SHM_DIR", ShmDir);
  if (NoCache)
    Set("TALLY_PROFILE_CACHE", "0");
  if (NoSchedule)
    Set("TALLY_SCHEDULE", "0");
  if (RuntimePtx != "auto")
    Set("TALLY_RUNTIME_PTX", RuntimePtx == "on" ? "1" : "0");
  if (RuntimePtx != "off" && !std::getenv("TALLY_OPT")) {
    std::string Opt = selfDir() + "/tally-opt";
    if (access(Opt.c_str(), X_OK) == 0)
      Set("TALLY_OPT", Opt);
  }
  if (TritonPtxas) {
    std::string Wrapper = selfDir() + "/tally-ptxas";
    if (access(Wrapper.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "tally: error: --triton-ptxas: no tally-ptxas at %s\n", Wrapper.c_str());
      return 1;
    }
    // (The same program under another path, a link, is not the real ptxas.)
    if (const char *Old = std::getenv("TRITON_PTXAS_PATH"); Old && *Old && Wrapper != Old) {
      char *A = realpath(Old, nullptr), *B = realpath(Wrapper.c_str(), nullptr);
      if (!A || !B || std::strcmp(A, B) != 0)
        Set("TALLY_PTXAS_REAL", Old);
      std::free(A);
      std::free(B);
    }
    Set("TRITON_PTXAS_PATH", Wrapper);
  }

  std::vector<char *> Args;
  for (std::string &A : Cmd)
    Args.push_back(A.data());
  Args.push_back(nullptr);
  execvp(Args[0], Args.data());
  std::fprintf(stderr, "tally: error: cannot run '%s': %s\n", Args[0], std::strerror(errno));
  return 127;
}
