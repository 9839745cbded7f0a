//===- Stats.cpp - what the runtime did, at exit --------------------------===//
//
// Per kernel (by name, over every handle and context): launches by form,
// preemptions, resumptions, launches that went to the original because the
// stream was being captured into a graph or a variant failed, and GPU time
// (from events around each launch, on the application's stream: for a
// preempted PTB launch it includes the time the launch was held). Kernels
// without variants are listed with the reason: their GPU time is the part
// of the program that cannot be preempted. A table on stderr, and JSON when
// TALLY_STATS names a file.
//
//===----------------------------------------------------------------------===//

#include "RuntimeImpl.h"
#include "tally/Runtime/Json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tally::rt {

namespace {
struct Row {
  std::string Name;
  bool HasVariants = false;
  std::string Why;
  uint64_t Launches[3] = {};
  uint64_t Preemptions = 0, Resumptions = 0, Captured = 0, Fallbacks = 0;
  uint64_t GpuByForm[3] = {}; ///< estimated (KernelEntry::gpuNanos)
  uint64_t Timed = 0;
  uint64_t Holds = 0, HeldNs = 0; ///< BE launches' waits for HP
  uint64_t total() const { return Launches[0] + Launches[1] + Launches[2]; }
  uint64_t gpuNanos() const { return GpuByForm[0] + GpuByForm[1] + GpuByForm[2]; }
};
} // namespace

void Runtime::Impl::writeStats() {
  std::vector<Row> Rows;
  {
    std::lock_guard<std::mutex> G(Mu);
    for (const auto &KP : AllKernels) {
      const KernelEntry &K = *KP;
      auto It = std::find_if(Rows.begin(), Rows.end(), [&](const Row &R) { return R.Name == K.Name; });
      if (It == Rows.end()) {
        Rows.emplace_back();
        It = Rows.end() - 1;
        It->Name = K.Name;
      }
      It->HasVariants |= K.hasVariants();
      if (!K.hasVariants() && It->Why.empty())
        It->Why = K.WhyNoVariants;
      for (int F = 0; F < 3; ++F)
        It->Launches[F] += K.Launches[F].load();
      It->Preemptions += K.Preemptions.load();
      It->Resumptions += K.Resumptions.load();
      It->Captured += K.Captured.load();
      It->Fallbacks += K.Fallbacks.load();
      It->Holds += K.Holds.load();
      It->HeldNs += K.HeldNs.load();
      for (int F = 0; F < 3; ++F) {
        It->GpuByForm[F] += K.gpuNanos(F);
        It->Timed += K.TimedLaunches[F].load();
      }
    }
  }
  std::stable_sort(Rows.begin(), Rows.end(), [](const Row &A, const Row &B) {
    if (A.HasVariants != B.HasVariants)
      return A.HasVariants;
    return A.gpuNanos() > B.gpuNanos();
  });
  uint64_t Total = 0, Without = 0, LaunchesAll = 0, LaunchesWithout = 0, TimedAll = 0;
  uint64_t PtbAll = 0;
  uint64_t ByForm[3] = {};
  for (const Row &R : Rows) {
    Total += R.gpuNanos();
    TimedAll += R.Timed;
    for (int F = 0; F < 3; ++F)
      ByForm[F] += R.GpuByForm[F];
    LaunchesAll += R.total();
    PtbAll += R.Launches[2];
    if (!R.HasVariants) {
      Without += R.gpuNanos();
      LaunchesWithout += R.total();
    }
  }
  double Share = Total ? double(Without) / double(Total) : 0.0;
  // The GPU time spent in forms HP can stop (a PTB launch between logical
  // blocks, sliced work between slices).
  double Preemptible = Total ? double(ByForm[1] + ByForm[2]) / double(Total) : 0.0;
  const uint32_t Every = Cfg.StatsTiming ? Cfg.StatsTimingEvery : 0;
  std::string Mode = Cfg.Forced ? formName(Cfg.Force) : "automatic";

  FILE *E = stderr;
  std::fprintf(E, "tally: statistics of pid %d (priority %s, form %s", static_cast<int>(getpid()),
               Cfg.Prio == Priority::High ? "high" : "best-effort", Mode.c_str());
  if (Cfg.RandomPreemptions)
    std::fprintf(E, ", preempt random:%u", Cfg.RandomPreemptions);
  std::fprintf(E, ")\n");
  std::fprintf(E, "%-44s %9s %7s %7s %9s %8s %8s %10s\n", "kernel with variants", "original",
               "slice", "ptb", "preempted", "resumed", "captured", "gpu ms");
  auto Short = [](const std::string &N) {
    return N.size() > 44 ? N.substr(0, 41) + "..." : N;
  };
  for (const Row &R : Rows)
    if (R.HasVariants)
      std::fprintf(E, "%-44s %9llu %7llu %7llu %9llu %8llu %8llu %10.3f\n", Short(R.Name).c_str(),
                   (unsigned long long)R.Launches[0], (unsigned long long)R.Launches[1],
                   (unsigned long long)R.Launches[2], (unsigned long long)R.Preemptions,
                   (unsigned long long)R.Resumptions, (unsigned long long)R.Captured,
                   R.gpuNanos() / 1e6);
  std::fprintf(E, "%-44s %9s %10s  %s\n", "kernel without variants", "launches", "gpu ms", "why");
  for (const Row &R : Rows)
    if (!R.HasVariants)
      std::fprintf(E, "%-44s %9llu %10.3f  %s\n", Short(R.Name).c_str(),
                   (unsigned long long)R.total(), R.gpuNanos() / 1e6, R.Why.c_str());
  std::fprintf(E,
               "tally: %llu kernel launches, %llu of kernels without variants; GPU time %.3f ms, "
               "%.1f %% in kernels without variants (cannot be preempted); %llu cooperative "
               "launches and %llu graph launches passed through\n",
               (unsigned long long)LaunchesAll, (unsigned long long)LaunchesWithout, Total / 1e6,
               100.0 * Share, (unsigned long long)CooperativeLaunches.load(),
               (unsigned long long)GraphLaunches.load());
  if (!Every)
    std::fprintf(E, "tally: launches not timed (TALLY_STATS_TIMING=0): no GPU times\n");
  else
    std::fprintf(E,
                 "tally: GPU time by form: original %.3f ms, sliced %.3f ms, PTB %.3f ms "
                 "(%.1f %% preemptible); %llu launches timed%s\n",
                 ByForm[0] / 1e6, ByForm[1] / 1e6, ByForm[2] / 1e6, 100.0 * Preemptible,
                 (unsigned long long)TimedAll,
                 Every > 1 ? (", the first and then one in " + std::to_string(Every) +
                              " of each kernel's in each form: the times are estimates")
                                 .c_str()
                           : "");
  if (PtbAll)
    std::fprintf(E,
                 "tally: PTB control blocks: of %llu PTB launches, %llu cleared theirs on their "
                 "stream and %llu waited there for its slab's clear; the rest took one known "
                 "clear\n",
                 (unsigned long long)PtbAll, (unsigned long long)PtbStreamClears.load(),
                 (unsigned long long)PtbStreamWaits.load());
  RuntimePtxState::Counts Px;
  {
    std::lock_guard<std::mutex> G(Ptx.Mu);
    Px = Ptx.C;
  }
  if (Px.Seen)
    std::fprintf(E,
                 "tally: run-time PTX: %llu modules, %llu transformed (%llu from the cache, "
                 "%.1f ms; %llu by tally-opt, %.1f ms), %llu refused by tally-opt, %llu not "
                 "transformed (helper failed), %llu of the transformed rejected by the driver "
                 "(loaded as they came), %llu later PTX inputs of a link left as they were\n",
                 (unsigned long long)Px.Seen, (unsigned long long)Px.Transformed,
                 (unsigned long long)Px.FromCache, Px.CachedMs,
                 (unsigned long long)(Px.Transformed - Px.FromCache), Px.MadeMs,
                 (unsigned long long)Px.Refused, (unsigned long long)Px.Failed,
                 (unsigned long long)Px.Rejected, (unsigned long long)Px.SecondInLink);
  // The preemptor has been joined: its measurements are final.
  std::vector<double> Lat = PreemptLatencyUs, IssueLat = PreemptIssueUs,
                      SigLat = PreemptSignalUs, DevLat = PreemptDeviceUs;
  for (auto *V : {&Lat, &IssueLat, &SigLat, &DevLat})
    std::sort(V->begin(), V->end());
  auto PctOf = [](const std::vector<double> &V, double P) {
    return V.empty() ? 0.0 : V[std::min(V.size() - 1, size_t(P * (V.size() - 1) + 0.5))];
  };
  auto Pct = [&](double P) { return PctOf(Lat, P); };
  if (!Lat.empty()) {
    std::fprintf(E,
                 "tally: %zu preemptions, flag raised to workers gone (host-observed): p50 %.1f "
                 "us, p99 %.1f us, max %.1f us",
                 Lat.size(), Pct(0.5), Pct(0.99), Lat.back());
    if (!IssueLat.empty())
      std::fprintf(E, "; raised to the flag's write issued: p50 %.1f us, p99 %.1f us",
                   PctOf(IssueLat, 0.5), PctOf(IssueLat, 0.99));
    if (!SigLat.empty())
      std::fprintf(E, "; raised to the write seen landed: p50 %.1f us, p99 %.1f us (%zu)",
                   PctOf(SigLat, 0.5), PctOf(SigLat, 0.99), SigLat.size());
    if (!DevLat.empty())
      std::fprintf(E,
                   "; on the GPU, flag landed to workers gone: p50 %.1f us, p99 %.1f us, max "
                   "%.1f us (%zu)",
                   PctOf(DevLat, 0.5), PctOf(DevLat, 0.99), DevLat.back(), DevLat.size());
    std::fprintf(E, "\n");
  }
  if (uint64_t N = Deferred.load())
    std::fprintf(E,
                 "tally: %llu preemptions not made: a program thread was in a driver call that "
                 "may wait for the kernel holding the driver's lock (a synchronous copy, a "
                 "free)\n",
                 (unsigned long long)N);
  if (uint64_t N = LoadDeferred.load())
    std::fprintf(E,
                 "tally: %llu preemptions put off: a kernel's code had just been loaded, which "
                 "stalls the context's later work until its earlier work ended (%llu kernels "
                 "loaded when first seen, %llu of the program's own lookups and loads "
                 "marked)\n",
                 (unsigned long long)N, (unsigned long long)LoadedEarly.load(),
                 (unsigned long long)ProgramLoadMarks.load());
  uint64_t Hits = 0, Misses = 0;
  std::vector<double> Costs; // each decision's cost over the original
  size_t WithinTarget = 0, Over5 = 0;
  std::vector<Decision> Decisions; // a copy, for the JSON's list
  // Shapes of kernels without variants (measured for the beside rule):
  // how many, and how many are short enough to run beside HP.
  size_t OnlyShapes = 0, OnlyShort = 0;
  uint64_t ChecksOver = 0; // timed short launches over the target
  const uint32_t PtbPercent = Co.Pol ? Co.Pol->config().BesidePtbPercent : 0;
  if (Co.Pol) {
    std::lock_guard<std::mutex> G(Co.PolMu);
    Hits = Co.Pol->profileHits();
    Misses = Co.Pol->profileMisses();
    ChecksOver = Co.Pol->besideChecksOver();
    Decisions = Co.Pol->decisions();
    for (const Decision &D : Decisions) {
      if (D.OriginalOnly) {
        ++OnlyShapes;
        OnlyShort += D.Short; // Policy::besideOk's rule
        continue;
      }
      Costs.push_back(D.costOverOriginal());
      WithinTarget += D.MeetsTarget;
      Over5 += D.costOverOriginal() > 0.05;
    }
  }
  std::sort(Costs.begin(), Costs.end());
  const double CostP50 = Costs.empty() ? 0.0 : Costs[Costs.size() / 2];
  const double CostMax = Costs.empty() ? 0.0 : Costs.back();
  // HP: launch call to completion seen, per launch (the turnaround thread
  // has been joined).
  std::vector<double> Turn = Co.TurnaroundUs;
  std::sort(Turn.begin(), Turn.end());
  auto TPct = [&](double P) {
    return Turn.empty() ? 0.0
                        : Turn[std::min(Turn.size() - 1, size_t(P * (Turn.size() - 1) + 0.5))];
  };
  std::string Cut; // holds ended by --max-hold-us
  if (Cfg.MaxHoldUs)
    Cut = " (" + std::to_string(Co.HoldsCut.load()) + " of them ended after " +
          std::to_string(Cfg.MaxHoldUs) + " us: --max-hold-us)";
  if (Co.Usable) {
    if (Cfg.Prio == Priority::High) {
      std::fprintf(E,
                   "tally: scheduling: %llu launches announced to best-effort processes (%s; "
                   "%llu completion writes%s)\n",
                   (unsigned long long)Co.HpLaunches.load(),
                   Cfg.HpCompletion == CompletionPath::None
                       ? "completions not reported: TALLY_HP_COMPLETION=none"
                   : Co.GpuWrites ? "completions written by the GPU"
                                  : "completions from the host",
                   (unsigned long long)Co.HpWrites.load(),
                   Cfg.HpCompletion == CompletionPath::Burst ? ", one per burst" : "");
      uint64_t Slow = 0;
      for (const auto &N : Co.HpSlow)
        Slow += N.load();
      if (Slow)
        std::fprintf(E,
                     "tally: HP launch calls with a part over %llu us: %llu in the lookup "
                     "(longest %.1f us), %llu waiting for the issue lock (%.1f us), %llu in the "
                     "driver's launch (%.1f us), %llu reporting the completion (%.1f us)\n",
                     (unsigned long long)(Coordination::HpSlowNs / 1000),
                     (unsigned long long)Co.HpSlow[Coordination::HpLookup].load(),
                     Co.HpSlowest[Coordination::HpLookup].load() / 1e3,
                     (unsigned long long)Co.HpSlow[Coordination::HpLock].load(),
                     Co.HpSlowest[Coordination::HpLock].load() / 1e3,
                     (unsigned long long)Co.HpSlow[Coordination::HpDriver].load(),
                     Co.HpSlowest[Coordination::HpDriver].load() / 1e3,
                     (unsigned long long)Co.HpSlow[Coordination::HpCompletion].load(),
                     Co.HpSlowest[Coordination::HpCompletion].load() / 1e3);
      auto MeanUs = [&](int P) {
        const uint64_t N = Co.HpPartCalls[P].load();
        return N ? Co.HpPartNs[P].load() / 1e3 / double(N) : 0.0;
      };
      if (Co.HpPartCalls[Coordination::HpDriver].load())
        std::fprintf(E,
                     "tally: HP launch calls, mean per call: %.3f us in the lookup, %.3f us "
                     "waiting for the issue lock, %.3f us in the driver's launch, %.3f us "
                     "reporting the completion (%llu calls)\n",
                     MeanUs(Coordination::HpLookup), MeanUs(Coordination::HpLock),
                     MeanUs(Coordination::HpDriver), MeanUs(Coordination::HpCompletion),
                     (unsigned long long)Co.HpPartCalls[Coordination::HpDriver].load());
      {
        const uint64_t Spans = Co.Spans.load(), SpanNs = Co.SpanSumNs.load();
        const int Pub = Co.WaitPermille.load();
        char Published[96] = "none (not known: under 1 ms of requests seen, or requests not seen whole)";
        if (Pub >= 0)
          std::snprintf(Published, sizeof Published, "%.1f %%", Pub / 10.0);
        std::fprintf(E,
                     "tally: requests (launches up to a wait): %llu, %.1f %% of their time "
                     "waiting for the GPU; share last published %s\n",
                     (unsigned long long)Spans,
                     SpanNs ? 100.0 * double(Co.WaitSumNs.load()) / double(SpanNs) : 0.0,
                     Published);
      }
      if (!Turn.empty())
        std::fprintf(E,
                     "tally: HP turnaround (launch call to completion seen) over %zu launches: "
                     "p50 %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us\n",
                     Turn.size(), TPct(0.5), TPct(0.99), TPct(0.999), Turn.back());
    }
    else
      std::fprintf(E,
                   "tally: scheduling: %llu launches at full speed (no HP activity), held %llu "
                   "times for %.3f ms in all%s, %llu preemptions by HP arrivals; profile: %llu "
                   "choices from measurements, %llu launches measuring (%llu measurements kept, "
                   "%llu discarded because HP came by); %llu times HP arrived while a BE "
                   "kernel that cannot be stopped ran; grids smaller than the GPU: %llu original, "
                   "%llu sliced, %llu PTB%s\n",
                   (unsigned long long)Co.FullSpeed.load(), (unsigned long long)Co.Holds.load(),
                   Co.HeldNs.load() / 1e6, Cut.c_str(), (unsigned long long)Co.Preemptions.load(),
                   (unsigned long long)Hits, (unsigned long long)Misses,
                   (unsigned long long)Co.Measured.load(), (unsigned long long)Co.Discarded.load(),
                   (unsigned long long)Co.Unstoppable.load(),
                   (unsigned long long)Co.SmallGrid[0].load(),
                   (unsigned long long)Co.SmallGrid[1].load(),
                   (unsigned long long)Co.SmallGrid[2].load(), Co.Mps ? "; MPS on" : "; no MPS");
  if (Co.Usable && Cfg.Prio != Priority::High && Co.Pol &&
      Co.Pol->config().LaunchBoundPermille && Co.Pol->config().BlocksFirst)
    std::fprintf(E,
                 "tally: %llu launches started beside HP instead of waiting, every HP process "
                 "waiting for the GPU less than %u %% of its requests' time (--hp-wait-share)\n",
                 (unsigned long long)Co.LaunchBoundStarts.load(), Cfg.HpWaitSharePercent);
  if (Co.Usable && Cfg.Prio != Priority::High && Co.HeldNs.load()) {
    // The kernels whose launches waited for HP longest (JSON: per kernel).
    std::vector<const Row *> Held;
    for (const Row &R : Rows)
      if (R.HeldNs)
        Held.push_back(&R);
    std::sort(Held.begin(), Held.end(),
              [](const Row *A, const Row *B) { return A->HeldNs > B->HeldNs; });
    std::string Top;
    for (size_t I = 0; I < Held.size() && I < 5; ++I) {
      char B[96];
      std::snprintf(B, sizeof B, " %.1f ms (%llu holds);", Held[I]->HeldNs / 1e6,
                    (unsigned long long)Held[I]->Holds);
      Top += " " + Short(Held[I]->Name) + B;
    }
    if (!Top.empty()) { // (holds of graph and cooperative launches have no kernel)
      Top.pop_back();
      std::fprintf(E, "tally: held longest, by kernel:%s\n", Top.c_str());
    }
  }
  if (Co.Usable && Cfg.Prio != Priority::High && Co.QueueUs.load()) {
    std::fprintf(E, "tally: queue budget %llu us%s: %llu launches queued behind earlier ones",
                 (unsigned long long)Co.QueueUs.load(),
                 Co.QueueDefault ? " (the default of a below-normal-priority MPS client)" : "",
                 (unsigned long long)Co.QueuedLaunches.load());
    if (const uint64_t N = Co.GatesNotQueuedBehind.load())
      std::fprintf(E,
                   "; nothing queued behind %llu preemptible PTB launches (fewer than %d "
                   "hardware work queues: CUDA_DEVICE_MAX_CONNECTIONS)",
                   (unsigned long long)N, Config::WorkQueues);
    std::fputc('\n', E);
  }
  if (const uint64_t N = Co.GateWaits.load())
    std::fprintf(E,
                 "tally: %llu launches waited for a preemptible PTB launch to pass its gate "
                 "first (fewer than %d hardware work queues: CUDA_DEVICE_MAX_CONNECTIONS)\n",
                 (unsigned long long)N, Config::WorkQueues);
  if (Co.Usable && Cfg.Prio != Priority::High && Co.GuardedCalls.load())
    std::fprintf(E,
                 "tally: %llu launch calls made while HP was present took %.3f ms in all: "
                 "%.3f ms held for HP, %.3f ms waiting for this process's own earlier "
                 "launches to end\n",
                 (unsigned long long)Co.GuardedCalls.load(), Co.GuardedNs.load() / 1e6,
                 Co.GuardedHeldNs.load() / 1e6, Co.OwnWaitNs.load() / 1e6);
  if (Co.Usable && Cfg.Prio != Priority::High && Co.FreeMeasureLaunches.load())
    std::fprintf(E,
                 "tally: profile measured with no HP activity: %llu launches measuring "
                 "(%llu measurements kept, %llu discarded because HP came by)\n",
                 (unsigned long long)Co.FreeMeasureLaunches.load(),
                 (unsigned long long)Co.FreeMeasured.load(),
                 (unsigned long long)Co.FreeDiscarded.load());
  if (Co.Usable && Cfg.Prio != Priority::High && Co.HpOffMpsSeen.load())
    std::fprintf(E, "tally: an HP process that is no MPS client was seen: while it was there, "
                    "nothing ran beside HP and the queue's default was off\n");
  if (Co.Usable && Cfg.Prio != Priority::High && (Co.Mps || Co.BesideLaunches.load()))
    std::fprintf(E,
                 "tally: beside HP (MPS): %llu short launches started while HP was busy (%llu "
                 "of them small grids)%s; "
                 "kernels without variants measured at %zu launch shapes, %zu of them short; "
                 "%llu short launches timed again (with HP idle), %llu of them over the "
                 "target; %llu shapes timed too long too often (not beside HP from then on; "
                 "their form chosen again)\n",
                 (unsigned long long)Co.BesideLaunches.load(),
                 (unsigned long long)Co.BesideSmall.load(),
                 Cfg.Beside ? "" : " (off: TALLY_BESIDE=0)", OnlyShapes, OnlyShort,
                 (unsigned long long)Co.BesideChecks.load(), (unsigned long long)ChecksOver,
                 (unsigned long long)Co.BesideRevoked.load());
  if (Co.Usable && Cfg.Prio != Priority::High && PtbPercent)
    std::fprintf(E,
                 "tally: PTB beside HP (%u %% of a wave of workers): %llu launches started "
                 "narrow (%llu of them only for being queued behind earlier ones), %llu "
                 "narrowed for HP (counted as preemptions above), %llu widened "
                 "after %llu us of quiet; %llu launches beside HP short enough on their "
                 "narrow workers ran without a gate, not watched; %llu launches of shapes "
                 "still being measured started narrow beside a running HP request, not "
                 "widened%s\n",
                 PtbPercent, (unsigned long long)Co.NarrowLaunches.load(),
                 (unsigned long long)Co.QueuedNarrow.load(),
                 (unsigned long long)Co.Narrowed.load(), (unsigned long long)Co.Widened.load(),
                 (unsigned long long)(Co.Pol->widenNs() / 1000),
                 (unsigned long long)Co.NarrowUnwatched.load(),
                 (unsigned long long)Co.ProvisionalLaunches.load(),
                 Cfg.Provisional ? "" : " (off: TALLY_PROVISIONAL=0)");
  if (Co.Usable && Cfg.Prio != Priority::High && !Costs.empty())
    std::fprintf(E,
                 "tally: profile choices for %zu launch shapes: the chosen form's best time over "
                 "the original's, median %+.1f %%, max %+.1f %% (%zu above +5 %%); %zu within "
                 "the turnaround target\n",
                 Costs.size(), 100 * CostP50, 100 * CostMax, Over5, WithinTarget);
  }
  if (Cfg.StatsFile.empty())
    return;
  // Written whole under another name, then renamed: a reader never sees
  // half a file, and two processes never interleave theirs.
  const std::string Path = statsFileFor(Cfg.StatsFile, Cfg.StatsOwnerPid, uint64_t(getpid()));
  if (Path != Cfg.StatsFile)
    std::fprintf(E, "tally: statistics of pid %d (not the process tally run started) in %s\n",
                 static_cast<int>(getpid()), Path.c_str());
  // Only a regular file (or none yet) is replaced so: /dev/null, a pipe,
  // /dev/stdout or a link are written through, as given.
  struct stat St;
  const bool Replace = lstat(Path.c_str(), &St) != 0 ? errno == ENOENT : S_ISREG(St.st_mode);
  const std::string Tmp = Replace ? Path + ".tmp." + std::to_string(getpid()) : Path;
  FILE *J = nullptr;
  if (Replace) {
    int Fd = ::open(Tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    J = Fd >= 0 ? ::fdopen(Fd, "w") : nullptr;
    if (Fd >= 0 && !J)
      ::close(Fd);
  } else {
    J = std::fopen(Path.c_str(), "w");
  }
  if (!J) {
    logf(LogLevel::Warn, "cannot write the statistics to %s: %s", Path.c_str(), std::strerror(errno));
    if (Replace)
      std::remove(Tmp.c_str());
    return;
  }
  std::fprintf(J, "{\n  \"tally_stats_version\": 1,\n  \"pid\": %d,\n  \"priority\": \"%s\",\n"
                  "  \"form\": \"%s\",\n  \"random_preemptions\": %u,\n",
               static_cast<int>(getpid()), Cfg.Prio == Priority::High ? "high" : "best-effort",
               Mode.c_str(), Cfg.RandomPreemptions);
  std::fprintf(J,
               "  \"timing\": {\"every\": %u, \"timed_launches\": %llu},\n"
               "  \"gpu_ms_by_form\": {\"original\": %.6f, \"slice\": %.6f, \"ptb\": %.6f},\n"
               "  \"share_preemptible\": %.6f,\n",
               Every, (unsigned long long)TimedAll, ByForm[0] / 1e6, ByForm[1] / 1e6,
               ByForm[2] / 1e6, Preemptible);
  std::fprintf(J, "  \"gpu_ms\": %.6f,\n  \"gpu_ms_without_variants\": %.6f,\n"
                  "  \"share_without_variants\": %.6f,\n  \"cooperative_launches\": %llu,\n"
                  "  \"graph_launches\": %llu,\n  \"ptb_ctrl_cleared_on_stream\": %llu,\n"
                  "  \"ptb_ctrl_waited_on_stream\": %llu,\n"
                  "  \"preemption_latency_us\": {\"count\": %zu, \"p50\": %.3f, \"p99\": %.3f, "
                  "\"max\": %.3f},\n  \"preemption_issue_us\": {\"count\": %zu, \"p50\": %.3f, "
                  "\"p99\": %.3f, \"max\": %.3f},\n  \"preemption_signal_us\": {\"count\": %zu, \"p50\": %.3f, "
                  "\"p99\": %.3f, \"max\": %.3f},\n  \"preemption_device_us\": {\"count\": %zu, "
                  "\"p50\": %.3f, \"p99\": %.3f, \"max\": %.3f},\n"
                  "  \"preemptions_deferred_by_blocking_calls\": %llu,",
               Total / 1e6, Without / 1e6, Share, (unsigned long long)CooperativeLaunches.load(),
               (unsigned long long)GraphLaunches.load(),
               (unsigned long long)PtbStreamClears.load(),
               (unsigned long long)PtbStreamWaits.load(), Lat.size(), Pct(0.5), Pct(0.99),
               Lat.empty() ? 0.0 : Lat.back(), IssueLat.size(), PctOf(IssueLat, 0.5),
               PctOf(IssueLat, 0.99), IssueLat.empty() ? 0.0 : IssueLat.back(), SigLat.size(),
               PctOf(SigLat, 0.5),
               PctOf(SigLat, 0.99), SigLat.empty() ? 0.0 : SigLat.back(), DevLat.size(),
               PctOf(DevLat, 0.5), PctOf(DevLat, 0.99), DevLat.empty() ? 0.0 : DevLat.back(),
               (unsigned long long)Deferred.load());
  std::fprintf(J,
               "\n  \"kernels_loaded_early\": %llu,\n  \"program_code_loads_marked\": %llu,"
               "\n  \"preemptions_deferred_by_code_loads\": %llu,",
               (unsigned long long)LoadedEarly.load(), (unsigned long long)ProgramLoadMarks.load(),
               (unsigned long long)LoadDeferred.load());
  std::fprintf(J,
               "\n  \"runtime_ptx\": {\"modules\": %llu, \"transformed\": %llu, "
               "\"from_cache\": %llu, \"cached_ms\": %.3f, \"made_ms\": %.3f, "
               "\"refused\": %llu, \"failed\": %llu, \"rejected\": %llu, "
               "\"later_link_inputs\": %llu},",
               (unsigned long long)Px.Seen, (unsigned long long)Px.Transformed,
               (unsigned long long)Px.FromCache, Px.CachedMs, Px.MadeMs,
               (unsigned long long)Px.Refused, (unsigned long long)Px.Failed,
               (unsigned long long)Px.Rejected, (unsigned long long)Px.SecondInLink);
  {
    const char *Names[] = {"lookup", "lock", "driver", "completion"};
    static_assert(sizeof Names / sizeof *Names == Coordination::HpParts, "one name a part");
    std::fprintf(J, "\n  \"hp_slow_calls\": {\"over_us\": %llu",
                 (unsigned long long)(Coordination::HpSlowNs / 1000));
    for (int P = 0; P < Coordination::HpParts; ++P)
      std::fprintf(J, ", \"%s\": %llu", Names[P], (unsigned long long)Co.HpSlow[P].load());
    std::fprintf(J, ", \"longest_us\": {");
    for (int P = 0; P < Coordination::HpParts; ++P)
      std::fprintf(J, "%s\"%s\": %.3f", P ? ", " : "", Names[P], Co.HpSlowest[P].load() / 1e3);
    std::fprintf(J, "}, \"mean_us\": {");
    for (int P = 0; P < Coordination::HpParts; ++P) {
      const uint64_t N = Co.HpPartCalls[P].load();
      std::fprintf(J, "%s\"%s\": %.3f", P ? ", " : "", Names[P],
                   N ? Co.HpPartNs[P].load() / 1e3 / double(N) : 0.0);
    }
    std::fprintf(J, "}},");
  }
  std::fprintf(J,
               "\n  \"scheduler\": {\"enabled\": %s, \"mps\": %s, \"hp_launches\": %llu, "
               "\"hp_host_completions\": %llu, \"hp_completion_writes\": %llu, \"full_speed_launches\": %llu, \"holds\": %llu, "
               "\"held_ms\": %.6f, \"preemptions\": %llu, \"measured\": %llu, "
               "\"discarded\": %llu, \"unstoppable_at_hp_arrival\": %llu, "
               "\"queue_us\": %llu, \"queue_default\": %s, \"queued_launches\": %llu, "
               "\"gates_not_queued_behind\": %llu, \"gate_waits\": %llu, "
               "\"guarded_calls\": %llu, \"guarded_call_ms\": %.6f, \"guarded_held_ms\": %.6f, "
               "\"own_wait_ms\": %.6f, "
               "\"free_measure\": {\"enabled\": %s, \"launches\": %llu, \"kept\": %llu, "
               "\"discarded\": %llu}, "
               "\"max_hold_us\": %llu, "
               "\"holds_cut\": %llu, "
               "\"hp_wait_share_percent\": %u, \"launch_bound_starts\": %llu, "
               "\"hp_requests\": %llu, \"hp_request_ms\": %.6f, \"hp_wait_ms\": %.6f, "
               "\"hp_wait_permille_published\": %d, "
               "\"beside\": {\"enabled\": %s, \"hp_without_mps_seen\": %s, \"launches\": %llu, "
               "\"original_only_shapes\": %zu, \"original_only_short\": %zu, "
               "\"small_launches\": %llu, \"checks\": %llu, \"checks_over\": %llu, "
               "\"timed_too_long\": %llu, \"ptb_percent\": %u, \"ptb_narrow_launches\": %llu, "
               "\"ptb_queued_narrow\": %llu, \"ptb_narrow_unwatched\": %llu, "
               "\"ptb_narrowed\": %llu, \"ptb_widened\": %llu, "
               "\"provisional\": %s, \"provisional_launches\": %llu}, "
               "\"small_grids\": {\"original\": %llu, \"slice\": %llu, \"ptb\": %llu}, "
               "\"profile_hits\": %llu, \"profile_misses\": %llu, "
               "\"choices\": {\"count\": %zu, \"cost_over_original_p50\": %.6f, "
               "\"cost_over_original_max\": %.6f, \"over_5_percent\": %zu, "
               "\"within_target\": %zu}, "
               "\"hp_turnaround_us\": {\"count\": %zu, \"p50\": %.3f, \"p99\": %.3f, "
               "\"p999\": %.3f, \"max\": %.3f}},\n"
               "  \"kernels\": [",
               Co.Usable ? "true" : "false", Co.Mps ? "true" : "false",
               (unsigned long long)Co.HpLaunches.load(),
               (unsigned long long)Co.HpHostCompletions.load(),
               (unsigned long long)Co.HpWrites.load(),
               (unsigned long long)Co.FullSpeed.load(), (unsigned long long)Co.Holds.load(),
               Co.HeldNs.load() / 1e6, (unsigned long long)Co.Preemptions.load(),
               (unsigned long long)Co.Measured.load(), (unsigned long long)Co.Discarded.load(),
               (unsigned long long)Co.Unstoppable.load(), (unsigned long long)Co.QueueUs.load(),
               Co.QueueDefault ? "true" : "false",
               (unsigned long long)Co.QueuedLaunches.load(),
               (unsigned long long)Co.GatesNotQueuedBehind.load(),
               (unsigned long long)Co.GateWaits.load(),
               (unsigned long long)Co.GuardedCalls.load(), Co.GuardedNs.load() / 1e6,
               Co.GuardedHeldNs.load() / 1e6, Co.OwnWaitNs.load() / 1e6, Cfg.FreeMeasure ? "true" : "false",
               (unsigned long long)Co.FreeMeasureLaunches.load(),
               (unsigned long long)Co.FreeMeasured.load(),
               (unsigned long long)Co.FreeDiscarded.load(), (unsigned long long)Cfg.MaxHoldUs,
               (unsigned long long)Co.HoldsCut.load(), Cfg.HpWaitSharePercent,
               (unsigned long long)Co.LaunchBoundStarts.load(),
               (unsigned long long)Co.Spans.load(), Co.SpanSumNs.load() / 1e6,
               Co.WaitSumNs.load() / 1e6, Co.WaitPermille.load(),
               Co.Mps && Cfg.Beside ? "true" : "false",
               Co.HpOffMpsSeen.load() ? "true" : "false",
               (unsigned long long)Co.BesideLaunches.load(), OnlyShapes, OnlyShort,
               (unsigned long long)Co.BesideSmall.load(),
               (unsigned long long)Co.BesideChecks.load(), (unsigned long long)ChecksOver,
               (unsigned long long)Co.BesideRevoked.load(),
               PtbPercent,
               (unsigned long long)Co.NarrowLaunches.load(),
               (unsigned long long)Co.QueuedNarrow.load(),
               (unsigned long long)Co.NarrowUnwatched.load(),
               (unsigned long long)Co.Narrowed.load(), (unsigned long long)Co.Widened.load(),
               Cfg.Provisional ? "true" : "false",
               (unsigned long long)Co.ProvisionalLaunches.load(),
               (unsigned long long)Co.SmallGrid[0].load(),
               (unsigned long long)Co.SmallGrid[1].load(),
               (unsigned long long)Co.SmallGrid[2].load(), (unsigned long long)Hits,
               (unsigned long long)Misses, Costs.size(), CostP50, CostMax, Over5, WithinTarget,
               Turn.size(), TPct(0.5),
               TPct(0.99), TPct(0.999), Turn.empty() ? 0.0 : Turn.back());
  for (size_t I = 0; I < Rows.size(); ++I) {
    const Row &R = Rows[I];
    std::fprintf(J,
                 "%s\n    {\"name\": %s, \"has_variants\": %s, \"launches\": {\"original\": %llu, "
                 "\"slice\": %llu, \"ptb\": %llu}, \"preemptions\": %llu, \"resumptions\": %llu, "
                 "\"captured\": %llu, \"fallbacks\": %llu, \"gpu_ms\": %.6f, "
                 "\"gpu_ms_by_form\": {\"original\": %.6f, \"slice\": %.6f, \"ptb\": %.6f}, "
                 "\"timed_launches\": %llu, \"holds\": %llu, \"held_ms\": %.6f",
                 I ? "," : "", jsonString(R.Name).c_str(), R.HasVariants ? "true" : "false",
                 (unsigned long long)R.Launches[0], (unsigned long long)R.Launches[1],
                 (unsigned long long)R.Launches[2], (unsigned long long)R.Preemptions,
                 (unsigned long long)R.Resumptions, (unsigned long long)R.Captured,
                 (unsigned long long)R.Fallbacks, R.gpuNanos() / 1e6, R.GpuByForm[0] / 1e6,
                 R.GpuByForm[1] / 1e6, R.GpuByForm[2] / 1e6, (unsigned long long)R.Timed,
                 (unsigned long long)R.Holds, R.HeldNs / 1e6);
    if (!R.HasVariants)
      std::fprintf(J, ", \"why\": %s", jsonString(R.Why).c_str());
    std::fprintf(J, "}");
  }
  // Every choice made from a complete profile: what was chosen per launch
  // shape, and why.
  std::fprintf(J, "\n  ],\n  \"decisions\": [");
  for (size_t I = 0; I < Decisions.size(); ++I) {
    const Decision &D = Decisions[I];
    std::fprintf(J,
                 "%s\n    {\"kernel\": %s, \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], "
                 "\"shared\": %u, \"chosen\": %s, \"chosen_us\": %.3f, \"original_us\": %.3f, "
                 "\"turnaround_us\": %.3f, \"wait_us\": %.3f, \"meets_target\": %s, "
                 "\"original_only\": %s}",
                 I ? "," : "", jsonString(D.Key.Kernel).c_str(), D.Key.Grid[0], D.Key.Grid[1],
                 D.Key.Grid[2], D.Key.Block[0], D.Key.Block[1], D.Key.Block[2], D.Key.Shared,
                 jsonString(D.Chosen).c_str(), D.ChosenNs / 1e3, D.OriginalNs / 1e3,
                 D.TurnaroundUs, D.WaitUs, D.MeetsTarget ? "true" : "false",
                 D.OriginalOnly ? "true" : "false");
  }
  std::fprintf(J, "\n  ]\n}\n");
  bool Ok = !std::ferror(J);
  Ok = std::fclose(J) == 0 && Ok;
  if (!Ok || (Replace && std::rename(Tmp.c_str(), Path.c_str()) != 0)) {
    logf(LogLevel::Warn, "cannot write the statistics to %s: %s", Path.c_str(), std::strerror(errno));
    if (Replace)
      std::remove(Tmp.c_str());
  }
}

} // namespace tally::rt
