//===- RuntimeImpl.h - the runtime's state (private) ------------*- C++ -*-===//
#ifndef TALLY_LIB_RUNTIME_RUNTIMEIMPL_H
#define TALLY_LIB_RUNTIME_RUNTIMEIMPL_H

#include "tally/Runtime/MetadataReader.h"
#include "tally/Runtime/Policy.h"
#include "tally/Runtime/ProfileCache.h"
#include "tally/Runtime/PtxLoader.h"
#include "tally/Runtime/Runtime.h"
#include "tally/Runtime/Segment.h"

#include <regex.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace tally::rt {

void logf(LogLevel L, const char *Fmt, ...) __attribute__((format(printf, 2, 3)));

/// Runs driver calls that are not stream work (allocations, copies into
/// our own memory) in relaxed capture mode, so that they cannot invalidate
/// a graph capture another thread of the application has going.
struct RelaxedCaptureGuard {
  const DriverTable &D;
  CUstreamCaptureMode Old = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool Changed = false;
  explicit RelaxedCaptureGuard(const DriverTable &D) : D(D) {
    if (D.cuThreadExchangeStreamCaptureMode)
      Changed = D.cuThreadExchangeStreamCaptureMode(&Old) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureGuard() {
    if (Changed)
      D.cuThreadExchangeStreamCaptureMode(&Old);
  }
};

/// What the runtime knows of one launched kernel handle.
struct KernelEntry {
  std::string Name;
  void *Owner = nullptr; ///< CUmodule or CUlibrary
  /// The context of a module's kernel (dies with it); null for CUkernels.
  CUcontext Ctx = nullptr;
  bool IsLibraryKernel = false;
  bool ReadsGridSize = false;
  std::optional<VariantInfo> Slice, Ptb;
  CUfunction SliceFn = nullptr, PtbFn = nullptr; ///< CUkernel for library kernels
  /// The original's parameters: offset and size of each.
  std::vector<std::pair<uint32_t, uint32_t>> Params;
  std::string WhyNoVariants;
  /// "name@module hash": the kernel's key in the profile cache.
  std::string ProfileName;
  std::atomic<bool> Warned{false};
  /// TALLY_FORCE_ONLY matches its name (or is not set).
  bool ForceMatch = true;
  /// A variant failed at run time: the kernel runs as it is from now on.
  std::atomic<bool> Disabled{false};

  std::atomic<uint64_t> Launches[3] = {}; ///< by Form
  std::atomic<uint64_t> Preemptions{0}, Resumptions{0}, Captured{0}, Fallbacks{0};
  /// BE: how often this kernel's launches waited for HP, and how long.
  std::atomic<uint64_t> Holds{0}, HeldNs{0};
  /// By Form: the timed launches and their GPU time (all launches, or one
  /// in Config::StatsTimingEvery; gpuNanos() scales them to every launch
  /// that could have been timed: Timeable, not made while capturing).
  std::atomic<uint64_t> GpuNanos[3] = {}, TimedLaunches[3] = {}, Timeable[3] = {};
  /// By Form: launches seen by the sampled timing (the first of each form,
  /// then one in StatsTimingEvery, timed).
  std::atomic<uint64_t> TimingTurn[3] = {};

  /// Estimated GPU time of the launches in form \p F: the timed ones'
  /// mean times all that could have been timed (0 when none was timed).
  uint64_t gpuNanos(int F) const {
    uint64_t T = TimedLaunches[F].load(), N = std::max(Timeable[F].load(), T);
    return T ? static_cast<uint64_t>(double(GpuNanos[F].load()) * double(N) / double(T)) : 0;
  }

  bool hasVariants() const { return Slice || Ptb; }

  /// BE: launch shapes (LaunchArgs' grid, block and shared memory, hashed;
  /// never 0) whose profile was complete when a Free-mode launch looked
  /// (Runtime::Impl::freeMeasureWanted): the last FreeKnownWays seen.
  static constexpr unsigned FreeKnownWays = 8;
  std::atomic<uint64_t> FreeKnown[FreeKnownWays] = {};
  std::atomic<uint32_t> FreeKnownNext{0};
};

struct ModuleEntry {
  bool IsLibrary = false;
  uint64_t MetaHash = 0; ///< FNV-1a of the embedded metadata text
  CUcontext Ctx = nullptr; ///< of a module (dies with it); null for libraries
  bool HasMeta = false;
  ModuleMetadata Meta;
  std::string Problem;
  std::atomic<bool> Warned{false};
};

/// A pause in a spin on memory.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// A word of pinned host memory that the GPU reads (Config::ArmedFlag).
struct ArmWord {
  uint32_t *Host = nullptr;
  CUdeviceptr Dev = 0;
};

/// One PTB launch from its first launch to its last resumption.
struct PtbLaunch {
  KernelEntry *K = nullptr;
  struct ContextState *C = nullptr;
  CUdeviceptr Ctrl = 0;
  uint32_t Blocks = 0, Workers = 0;
  unsigned Block[3] = {1, 1, 1};
  unsigned SharedBytes = 0;
  std::vector<uint64_t> ParamBuf; ///< the variant's parameters (8-byte aligned storage)
  size_t ParamBytes = 0;
  CUevent Start = nullptr; ///< after the control block was cleared, before the launch
  CUevent End = nullptr;   ///< after the latest (re)launch
  CUevent Gate = nullptr;  ///< on the application's stream, after the gate
  CUevent Flag = nullptr;  ///< on the signal stream, after the latest flag write
  /// End and Flag record times (timed statistics): a preemption's time on
  /// the GPU, flag landed to workers gone, is the time between them.
  bool Timed = false;
  /// Config::ArmedFlag (scheduled launches): the signal stream's flag write
  /// waits for Arm >= ArmSeq, the number of the latest (re)launch, which
  /// the host stores to raise the flag and the GPU writes after that
  /// (re)launch of the kernel ends (so the wait never outlives the kernel
  /// and the write lands on a finished launch). Only (re)launches that
  /// run wide get a number (ArmCount: the numbers given so far, so they
  /// only grow); ArmSeq 0: this one has none, its flag goes up by driver
  /// calls. ArmOff: a call failed, no more numbers.
  ArmWord Arm;
  uint32_t ArmSeq = 0, ArmCount = 0;
  bool ArmOff = false;
  bool ArmQueued = false;   ///< the wait for ArmSeq is queued, not yet released
  bool ArmWrite = false;    ///< ... with the flag's write behind it
  bool ArmRecorded = false; ///< ... and Flag recorded behind the write
  /// The GPU may still use its control block or word when its events say
  /// it is done (an event or a write could not be queued): it is not
  /// watched any more, and neither is ever reused.
  bool Lost = false;
  /// Relaunched at least once (on the context's resume stream).
  bool Resumed = false;
  /// noteStuckResumption's last read of the control block: its next and
  /// done counts, and when they last changed (0: none yet); and when a
  /// read was last tried (at most once a second, landed or not).
  mutable uint32_t SeenNext = 0, SeenDone = 0;
  mutable std::chrono::steady_clock::time_point SeenAt{}, TriedAt{};
  /// Its launch failed after a clear of its control block was queued on
  /// the program's stream, which may still land: the block is never reused
  /// (its events and word are).
  bool CtrlKept = false;
  /// Preempted when HP processes are active (the scheduler), rather than
  /// at random points (--preempt).
  bool Scheduled = false;
  /// Under MPS, its workers beside HP (Policy::besideWorkers; 0: it leaves
  /// the GPU for HP) and its full width. Workers is one of the two.
  uint32_t Narrow = 0, Wide = 0;
  /// Started narrow only because it was queued behind this process's
  /// earlier launches while HP was quiet (ContextState::LaunchBehind): it
  /// is widened once it has itself been watched for the widen window, not
  /// as soon as the runtime thread reaches it.
  bool QueuedNarrow = false;
};

/// How long one preemption's parts took (us; negative: not known).
struct PreemptTimes {
  double TotalUs = 0;   ///< flag raised to workers gone, host-observed
  double IssueUs = -1;  ///< raised to the flag's write issued (driver calls)
  double SignalUs = -1; ///< raised to the write seen landed
  double DeviceUs = -1; ///< landed to workers gone, on the GPU's clock
};

/// PTB control blocks (16 bytes each) come in slabs of Count, cleared a
/// slab at a time off the program's streams: a new slab, and a slab all of
/// whose blocks the GPU is done with (every launch that had one retired),
/// gets one memset on the context's Clear stream with an event (Cleared)
/// behind it. Its blocks are handed out in order: as they are once Cleared
/// has completed; before that, the launch's stream first waits for Cleared
/// (a wait on the GPU, no host wait). Only where clears cannot be queued on
/// Clear is each block cleared on its launch's stream (a step of that
/// stream's work between kernels: about 1.4 us on an H200,
/// benchmarks/gpu/ptb-launch-costs.cu). (Launcher.cpp: acquireCtrl,
/// releaseCtrl, clearSlab.)
struct CtrlSlab {
  static constexpr uint32_t Count = 64;
  enum class State {
    Dirty,    ///< no clear queued: each block is cleared on its launch's stream
    Clearing, ///< its memset queued on Clear: streams wait for Cleared first
    Clean,    ///< Cleared has completed: blocks go out as they are
    Broken,   ///< a clear was queued but cannot be tracked: never used again
  };
  CUdeviceptr Base = 0;
  uint32_t Handed = 0;   ///< blocks handed out since the slab was last cleared
  uint32_t Returned = 0; ///< of those, given back with the GPU done with them
  CUevent Cleared = nullptr; ///< recorded on Clear behind the slab's memset
  State St = State::Dirty;
};

/// What a launch's stream does to its control block before the kernel.
enum class CtrlPrep {
  None,  ///< nothing: known clear
  Wait,  ///< cuStreamWaitEvent for its slab's clear (CtrlSlab::Cleared)
  Clear, ///< cuMemsetD32Async of the block itself
};

/// Per CUDA context: internal streams, control blocks, events.
struct ContextState {
  CUcontext Ctx = nullptr;
  unsigned long long Id = 0; ///< cuCtxGetId (0: unknown)
  CUdevice Dev = -1;
  bool Primary = false; ///< the device's primary context
  bool Usable = false;
  /// Destroyed: nothing of it may be touched again (its handles are gone).
  std::atomic<bool> Dead{false};
  int SMs = 0;
  CUstream Resume = nullptr; ///< resumptions and the preemptor's copies (non-blocking)
  CUstream Signal = nullptr; ///< preemption flags (non-blocking, highest priority)
  /// Program threads' own reads (the embedded metadata; non-blocking): never
  /// on Resume, where a read would be ordered with the preemptor's work.
  CUstream Meta = nullptr;
  /// Pinned staging for metadata reads (grown, never freed; guarded by
  /// StagingMu): copies into pageable memory go through the driver's own
  /// staging, and a program thread in one was found in every hang of a
  /// PyTorch program under preemption (docs/runtime.md).
  std::mutex StagingMu;
  char *Staging = nullptr;
  size_t StagingBytes = 0;
  /// The preemptor's pinned word for reading a launch's done count (64
  /// bytes; bytes 16-27 take readCtrl's copies).
  uint32_t *DoneWord = nullptr;
  /// readCtrl's stream (made at its first read; non-blocking).
  CUstream Peek = nullptr;
  std::mutex Mu;
  /// Control blocks (CtrlSlab; under Mu): every slab, and the one being
  /// handed out.
  std::vector<std::unique_ptr<CtrlSlab>> Slabs;
  CtrlSlab *Filling = nullptr;
  /// Where slabs are cleared (non-blocking, least priority; made at the
  /// first clear). ClearBroken: it or a clear failed; blocks are cleared on
  /// the launches' streams from then on.
  CUstream Clear = nullptr;
  bool ClearBroken = false;
  int LeastPriority = 0;
  std::vector<ArmWord> FreeArm;
  bool ArmBroken = false; ///< pinned words could not be had: flags raised by driver calls
  std::vector<CUevent> FreeEvents, FreeTimingEvents;
  /// Finished launches whose control block is still read by the GPU.
  std::deque<std::unique_ptr<PtbLaunch>> Retiring;
  /// BE launches under the scheduler: around the latest one (timing
  /// events), so the next waits for it and measured ones are timed.
  CUevent BeStart = nullptr, BeDone = nullptr;
  bool BeDoneRecorded = false;
  bool BeLastPreemptible = false; ///< the latest BE launch was PTB
  /// The sliced BE launch being issued runs beside HP (Policy::besideOk):
  /// its next slice does not wait for HP to be idle. Under BeMu.
  bool SlicesBeside = false;
  /// The BE launch being issued is queued behind earlier launches of this
  /// process that may not have ended (the queue budget): it may start on
  /// the GPU long after the call, when HP may be back, and the runtime
  /// thread watches it only once those ended. So a PTB launch starts narrow
  /// (launchPtb): wide, its workers would fill every SM and hold an HP
  /// request's kernels until the runtime thread reached it and raised its
  /// flag (on an H200, gaps of 20-70 us between hp-serve's kernels in 1.5-6
  /// % of its requests, 2026-11-28). Under BeMu.
  bool LaunchBehind = false;
  /// The BE launch being issued became a preemptible PTB launch, with a
  /// gate on its stream (set by launchPtb). Under BeMu.
  bool LaunchGated = false;
  /// With fewer hardware work queues than Config::WorkQueues: recorded on
  /// the stream behind the latest such launch's gate (GateDoneRecorded),
  /// and the next BE launch of the process, in any mode, waits for it
  /// (launchBe): nothing is queued behind a gate then. Under BeMu.
  CUevent GateDone = nullptr;
  bool GateDoneRecorded = false;
  bool BeOverlapCounted = false;  ///< HP was seen arriving during it (counted)
  /// With a queue budget (Config::QueueUs): the BE launches that may still
  /// run, each with how long it may make an arriving HP kernel wait
  /// (UINT64_MAX: unknown; nothing is queued behind it). Guarded by
  /// Coordination::BeMu, as everything about BE launches.
  struct QueuedBe {
    CUevent E = nullptr;
    uint64_t WaitNs = 0;
    CUstream S = nullptr; ///< queued only behind launches on the same stream
  };
  std::deque<QueuedBe> BeQueue;
  std::vector<CUevent> BeQueueFree;
  bool BeQueueBroken = false; ///< an event could not be made: one at a time
  /// Workers per SM by (variant, threads per block, dynamic shared bytes).
  std::map<std::tuple<CUfunction, unsigned, unsigned>, int> Occupancy;
};

struct Timing {
  CUevent Start = nullptr;
  /// The statistics' sampling for this launch: 1 timed, 0 not, -1 decided
  /// once its form is known (Runtime::Impl::startTiming).
  int Sample = 0;
};

struct TimedLaunch {
  KernelEntry *K;
  ContextState *C;
  CUevent Start, End;
  Form F;
};

/// A BE launch being measured for the profile in Guarded mode: the next
/// BE launch waits for it to end and reads it.
struct PendingMeasure {
  bool Active = false;
  ContextState *C = nullptr;
  LaunchShape Shape;
  Choice Pick;
  uint64_t Arrivals = 0;
  uint64_t Preemptions = 0; ///< the process's count when it was launched
};

/// A form measured in Free mode (Runtime::Impl::measureFree), or a short
/// launch beside HP timed again (Check; launchBe): the events around its
/// launch, read once it has ended, never waited for.
struct FreeMeasurement {
  /// Not a profile measurement: a launch allowed beside HP (made while HP
  /// was idle), timed to check that it is still short
  /// (Policy::besideChecked).
  bool Check = false;
  ContextState *C = nullptr;
  CUstream S = nullptr;
  const KernelEntry *K = nullptr;
  uint64_t Hash = 0; ///< of the launch's grid, block and shared memory
  CUevent Start = nullptr, End = nullptr;
  LaunchShape Shape;
  Choice Pick;
  uint64_t Arrivals = 0;
  uint64_t Preemptions = 0;
};

/// Cross-process scheduling (Scheduler.cpp).
/// HP: the request a thread is in, as its waits see it (Runtime::waitDone):
/// from its first announced launch after its last wait (StartNs, 0: none),
/// and the start of a run of its queries that found the work not ready
/// (PollSinceNs, 0: none).
struct HpThreadSpan {
  uint64_t StartNs = 0, PollSinceNs = 0;
};
inline HpThreadSpan &hpThreadSpan() {
  static thread_local HpThreadSpan S;
  return S;
}

struct Coordination {
  std::once_flag Once;
  std::atomic<bool> Usable{false};
  std::unique_ptr<Segment> Seg;
  std::unique_ptr<ProfileCache> Cache;
  std::unique_ptr<Policy> Pol;
  std::mutex PolMu; ///< guards Pol and Cache
  /// One BE launch decided and issued at a time.
  std::mutex BeMu;
  PendingMeasure Measure;
  /// Free-mode measurements and checks of short launches in flight (BeMu),
  /// at most FreeMeasureMax, read by the next BE launches once ended; in
  /// Free mode the launch path looks for a shape to measure at most once
  /// per FreeMeasurePollNs (FreeMeasureNextNs) while a shape's profile is
  /// incomplete.
  static constexpr size_t FreeMeasureMax = 8;
  static constexpr uint64_t FreeMeasurePollNs = 20'000;
  std::vector<FreeMeasurement> FreeMeasures;
  std::atomic<uint64_t> FreeMeasureNextNs{0};
  /// Free-mode measuring launches, and their measurements kept and
  /// discarded (HP came by while one ran).
  std::atomic<uint64_t> FreeMeasureLaunches{0}, FreeMeasured{0}, FreeDiscarded{0};
  /// Launches of shapes being measured that started narrow beside a
  /// running HP request instead (Policy::provisional).
  std::atomic<uint64_t> ProvisionalLaunches{0};
  /// HP: the segment's mapping and completion word as the GPU sees them
  /// (the word moves when the process joins again in another slot; under
  /// HpIssueMu).
  CUdeviceptr MappingDev = 0, FinishedDev = 0;
  /// HP: a launch's number is taken and its completion write issued under
  /// this lock, so the writes reach the internal stream in number order
  /// whatever thread launches (recursive: never a hang if a driver call
  /// comes back into the runtime on the same thread).
  std::recursive_mutex HpIssueMu;
  bool GpuWrites = false;
  /// HP, TALLY_HP_COMPLETION=burst (all under HpIssueMu): the latest
  /// launch without a completion write of its own (Seq 0: none), its
  /// stream and context, and the event every launch of the burst recorded
  /// on that stream; when the last write was issued; the runtime thread
  /// that writes a burst's last completion.
  struct PendingCompletion {
    uint64_t Seq = 0;
    CUstream S = nullptr;
    ContextState *C = nullptr;
    CUevent E = nullptr;
  } HpPending;
  uint64_t HpLastWriteNs = 0;
  /// When the latest HP launch was made (read by the runtime thread
  /// without the lock: it writes a burst's last completion only once
  /// launches have stopped for half a burst).
  std::atomic<uint64_t> HpLastLaunchNs{0};
  /// The context whose internal stream took the last completion write:
  /// a write from another context is ordered after it (under HpIssueMu).
  ContextState *HpLastWriteCtx = nullptr;
  std::thread BurstFlusher;
  /// A burst has a pending completion, for the program's next wait
  /// (Runtime::waitPoint) or the runtime thread (set under HpIssueMu;
  /// HpFlushCv wakes that thread only to stop it).
  std::atomic<bool> HpFlushWanted{false}, HpFlushStop{false};
  std::mutex HpFlushMu;
  std::condition_variable HpFlushCv;
  std::thread Heart;
  std::mutex HeartMu;
  std::condition_variable HeartCv;
  bool HeartStop = false;
  bool Mps = false;
  /// Free mode as last decided, and when (ns): launches within FreeCacheNs
  /// of it reuse the decision.
  std::atomic<bool> FreeCached{false};
  /// HP with --stats: launch times by sequence number (a ring), and the
  /// thread that sees completions and records each launch's turnaround.
  static constexpr uint64_t RingSize = 1 << 16;
  std::unique_ptr<std::atomic<uint64_t>[]> LaunchNs;
  std::atomic<uint64_t> LastSeq{0};
  std::thread Turnaround;
  std::vector<double> TurnaroundUs; ///< written by that thread only
  uint64_t TurnaroundLost = 0;      ///< launches whose time fell out of the ring
  std::atomic<uint64_t> FreeCheckedNs{0};
  /// HP: completion writes issued (side, gpu and burst paths).
  std::atomic<uint64_t> HpWrites{0};
  /// HP: launch calls that spent over HpSlowNs in one part of the hook
  /// (a stall of the service shows where it was spent), and each part's
  /// longest time.
  enum HpPart { HpLookup, HpLock, HpDriver, HpCompletion, HpParts };
  static constexpr uint64_t HpSlowNs = 1'000'000;
  std::atomic<uint64_t> HpSlow[HpParts] = {}, HpSlowest[HpParts] = {};
  /// Every noted part's time, summed, and how often each was noted: the
  /// mean cost of an HP launch call by part (--stats only).
  std::atomic<uint64_t> HpPartNs[HpParts] = {}, HpPartCalls[HpParts] = {};
  void noteHpPart(HpPart P, uint64_t Ns) {
    HpPartNs[P].fetch_add(Ns, std::memory_order_relaxed);
    HpPartCalls[P].fetch_add(1, std::memory_order_relaxed);
    if (Ns >= HpSlowNs)
      HpSlow[P].fetch_add(1, std::memory_order_relaxed);
    uint64_t M = HpSlowest[P].load(std::memory_order_relaxed);
    while (Ns > M && !HpSlowest[P].compare_exchange_weak(M, Ns, std::memory_order_relaxed))
      ;
  }
  std::atomic<uint64_t> HpLaunches{0}, HpHostCompletions{0}, FullSpeed{0}, Holds{0}, HeldNs{0},
      Preemptions{0}, Measured{0}, Discarded{0};
  /// BE launches that could not be stopped when HP arrived (originals,
  /// slices, graph and cooperative launches running then).
  std::atomic<uint64_t> Unstoppable{0};
  /// BE launches made while earlier ones were still queued (QueueUs).
  std::atomic<uint64_t> QueuedLaunches{0};
  /// Preemptible PTB launches behind which nothing was queued: fewer than
  /// Config::WorkQueues hardware work queues asked for (launchBe).
  std::atomic<uint64_t> GatesNotQueuedBehind{0};
  /// Of those launches, how many made a later BE launch wait for their end
  /// (ContextState::GateDone).
  std::atomic<uint64_t> GateWaits{0};
  /// Guarded BE launch calls (HP present), their time from the decision to
  /// hold to the return, and the part of it spent waiting for the
  /// process's own earlier launches to end (one at a time, or the queue's
  /// budget) rather than for HP.
  std::atomic<uint64_t> GuardedCalls{0}, GuardedNs{0}, OwnWaitNs{0};
  /// The part of those calls held for HP (HeldNs counts the holds of graph
  /// and cooperative launches too).
  std::atomic<uint64_t> GuardedHeldNs{0};
  /// Holds ended by the bound (Config::MaxHoldUs) rather than by HP idle.
  std::atomic<uint64_t> HoldsCut{0};
  /// BE launches that started beside HP instead of waiting because every
  /// HP process was launch bound (Policy::launchBound).
  std::atomic<uint64_t> LaunchBoundStarts{0};
  /// HP: this process's requests, as waits see them (waitDone; each
  /// thread's own, HpThreadSpan): the sums of the requests' lengths and of
  /// their waits, how many, and when the last one ended (LastSpanEndNs).
  /// A request longer than MaxSpanNs was not seen whole (its waits were
  /// elsewhere): the share is unknown until requests are seen again
  /// (SpanLostNs: when). The heartbeat publishes the waits' share of the
  /// requests, smoothed (WaitWin, SpanWin, LastPublishNs: its own).
  std::atomic<uint64_t> SpanSumNs{0}, WaitSumNs{0}, Spans{0}, LastSpanEndNs{0},
      SpanLostNs{0};
  static constexpr uint64_t MaxSpanNs = 200'000'000;
  uint64_t SpanSeen = 0, WaitSeen = 0, LastPublishNs = 0;
  double SpanWin = 0, WaitWin = 0;
  /// The last share published, permille (for the statistics); -1 none.
  std::atomic<int> WaitPermille{-1};
  /// The queue budget in use (Config::QueueUs, or its default under MPS),
  /// set when the process joins; whether it is that default.
  std::atomic<uint64_t> QueueUs{0};
  bool QueueDefault = false;
  /// BE: a live HP process says it is not an MPS client (seg::FlagNoMps):
  /// nothing runs beside HP, and the queue's default is off, while it is.
  std::atomic<bool> HpOffMps{false};
  /// BE: such a process was seen (warned once; statistics).
  std::atomic<bool> HpOffMpsSeen{false};
  /// BE launches started while HP was busy because they are short (MPS);
  /// short launches so far (every 16th is timed); shapes that ran long.
  std::atomic<uint64_t> BesideLaunches{0};
  uint64_t ShortLaunches = 0; ///< under BeMu
  bool CheckDue = false;      ///< under BeMu: time the next short launch made while HP is idle
  /// Short launches timed so far (checks), shapes revoked by them.
  std::atomic<uint64_t> BesideChecks{0}, BesideRevoked{0};
  /// Of BesideLaunches, those allowed for their size (Policy::besideSmall).
  std::atomic<uint64_t> BesideSmall{0};
  /// PTB launches beside HP (Policy::besideWorkers): started narrow while
  /// HP was busy; wide ones narrowed for an HP arrival; narrow ones given
  /// their workers back once HP was quiet.
  std::atomic<uint64_t> NarrowLaunches{0}, Narrowed{0}, Widened{0};
  /// PTB launches started narrow only because they were queued behind
  /// earlier ones while HP was quiet (ContextState::LaunchBehind).
  std::atomic<uint64_t> QueuedNarrow{0};
  /// PTB launches started narrow without a gate, not watched
  /// (Config::NarrowUnwatchedUs).
  std::atomic<uint64_t> NarrowUnwatched{0};
  /// Policy-chosen launches of grids smaller than the GPU, by form.
  std::atomic<uint64_t> SmallGrid[3] = {};
};

/// PTX loaded at run time (ModuleLoad.cpp).
struct RuntimePtxState {
  std::once_flag Once;
  bool On = false;
  std::unique_ptr<PtxTransformer> T;
  std::mutex Mu; ///< one transformation at a time; everything below
  /// Link states that were given one module with variants (a second would
  /// define the metadata symbol twice).
  std::set<CUlinkState> Linked;
  /// Transformed images of libraries loaded with CU_LIBRARY_BINARY_IS_PRESERVED
  /// (the driver may read them until the library is unloaded).
  std::unordered_map<CUlibrary, std::shared_ptr<const std::string>> Preserved;
  struct Counts {
    uint64_t Seen = 0, Transformed = 0, FromCache = 0, Refused = 0, Failed = 0, Rejected = 0,
             SecondInLink = 0;
    double MadeMs = 0, CachedMs = 0;
  } C;
  unsigned Warnings = 0;
};

struct Runtime::Impl {
  Config Cfg;
  DriverTable D;
  void *DriverHandle = nullptr;
  bool VariantsUsable = false, PtbUsable = false;
  /// TALLY_FORCE_ONLY, compiled (HasForceOnly: set).
  regex_t ForceOnly;
  bool HasForceOnly = false;

  std::mutex Mu; ///< guards the maps below
  std::unordered_map<CUfunction, KernelEntry *> Kernels;
  std::vector<std::unique_ptr<KernelEntry>> AllKernels; ///< never freed: stats
  std::unordered_map<void *, std::unique_ptr<ModuleEntry>> Modules;
  std::unordered_map<CUcontext, std::unique_ptr<ContextState>> Contexts;
  /// States of destroyed contexts: never used again, never freed (launches
  /// and timings queued before the context went may still point to them).
  std::vector<std::unique_ptr<ContextState>> DeadContexts;
  std::atomic<uint64_t> Generation{1};
  std::atomic<uint64_t> CooperativeLaunches{0}, GraphLaunches{0};
  /// PTB launches whose stream cleared their control block, or waited for
  /// its slab's clear (CtrlPrep; the others took a block known clear).
  std::atomic<uint64_t> PtbStreamClears{0}, PtbStreamWaits{0};

  // The preemptor thread (random preemption; the scheduler's home later).
  std::mutex QMu;
  std::condition_variable QCv;
  std::deque<std::unique_ptr<PtbLaunch>> Queue;
  const PtbLaunch *Current = nullptr;
  bool Stopping = false;
  std::thread Preemptor;
  std::mt19937_64 Rng;
  /// Of the launches that were preempted (written by the preemptor thread
  /// only; us): flag raised to workers gone, host-observed; where known,
  /// raised to the flag's write issued (the driver calls) and seen landed,
  /// and landed to workers gone on the GPU's clock (timed statistics).
  std::vector<double> PreemptLatencyUs, PreemptIssueUs, PreemptSignalUs, PreemptDeviceUs;
  void notePreemption(const PreemptTimes &T) {
    PreemptLatencyUs.push_back(T.TotalUs);
    for (auto [V, Into] : {std::pair{T.IssueUs, &PreemptIssueUs},
                           std::pair{T.SignalUs, &PreemptSignalUs},
                           std::pair{T.DeviceUs, &PreemptDeviceUs}})
      if (V >= 0)
        Into->push_back(V);
  }
  /// The drain lock: program threads hold it shared while inside a call of
  /// BlockingCalls.def (it may wait for GPU work holding the driver's
  /// lock); the preemptor holds it exclusively from before a flag goes up
  /// until the resumption is queued, and only takes it when it is free.
  std::shared_mutex Drain;
  /// Preemptions not made because a program thread was in such a call.
  std::atomic<uint64_t> Deferred{0};

  /// Loading a kernel's code stalls every later operation of the context
  /// until the GPU work queued before it has ended (H200, driver 580,
  /// benchmarks/gpu/gate-queues.cu): a load made while a launch stopped for
  /// HP waits at its gate would stall its resumption for ever, and one made
  /// while a launch runs would do the same if a flag already queued
  /// (armed) stopped it. So a process that preempts loads each kernel and
  /// its variants when it first sees it (lookup, under the drain lock:
  /// never between a flag and its resumption), behind which an event on
  /// the context's metadata stream completes once the load's stall is
  /// over; no flag goes up while such an event is pending (loadsSettled).
  void loadEarly(KernelEntry &K, CUfunction F);
  /// Records the event behind a code load on \p C's metadata stream and
  /// lists it as \p C's newest mark (nothing when \p C is null or the
  /// event cannot be had; false then). Under the drain lock, shared.
  bool markLoad(ContextState *C);
  /// Marks recorded for the program's own code loads (Runtime::codeLoaded).
  std::atomic<uint64_t> ProgramLoadMarks{0};
  /// The loads' events have all completed (those that have are given back).
  bool loadsSettled();
  std::mutex LoadMu;
  std::vector<std::pair<ContextState *, CUevent>> LoadMarks; ///< under LoadMu
  std::atomic<size_t> LoadMarksPending{0};
  /// Kernels loaded early (a kernel and its variants counting once), and
  /// preemptions put off because a load's stall was not over.
  std::atomic<uint64_t> LoadedEarly{0}, LoadDeferred{0};
  /// This process stops launches (the scheduler of a BE process, or random
  /// preemption): it has gates that a load could stall.
  bool preempts() const {
    return PtbUsable && (Cfg.RandomPreemptions ||
                         (Cfg.Schedule && Cfg.Prio != Priority::High));
  }

  std::mutex TMu;
  std::deque<TimedLaunch> Timed;

  Coordination Co;
  RuntimePtxState Ptx;

  std::once_flag ExitOnce;
  std::atomic<bool> ExitRegistered{false};
  std::atomic<bool> Shut{false};

  void checkFeatures(const std::string &MissingOptional);
  ContextState *context();
  ContextState *contextSlow(CUcontext Ctx, unsigned long long Id); ///< context()'s lookup under Mu
  ModuleEntry *moduleEntry(void *Owner, bool IsLibrary, ContextState *C);
  void resolve(KernelEntry &K, CUfunction F);
  KernelEntry *lookup(CUfunction F);
  void warnOnce(KernelEntry &K, const std::string &Msg);
  void forget(void *Owner);
  void drainContext(CUcontext Ctx);
  void dropContextLocked(CUcontext Ctx);
  void dropDeadPrimaries(CUdevice Dev);
  void dropDeadContexts();
  Form choose(const KernelEntry &K, const LaunchArgs &A) const;
  /// Launches in form \p F (Ptb, Slice or Original); a variant that cannot
  /// be launched leaves \p F as Original and runs the original.
  CUresult launchForm(KernelEntry &K, const LaunchArgs &A, PassThrough Original,
                      ContextState &C, CUstream S, Form &F, const Choice *Pick, bool Scheduled,
                      bool Paced);
  void registerExit();

  // Launcher.cpp
  bool buildParams(const KernelEntry &K, const VariantInfo &V, const LaunchArgs &A,
                   uint32_t SliceOffset, CUdeviceptr Ctrl, uint32_t Chunk,
                   std::vector<uint64_t> &Buf, size_t &Bytes);
  int workersPerSM(ContextState &C, CUfunction VF, bool IsKernel, const LaunchArgs &A);
  /// \p Pick: workers and chunk (null: the settings' defaults); \p Scheduled:
  /// preempted by the scheduler when HP is active.
  bool launchPtb(KernelEntry &K, const LaunchArgs &A, ContextState &C, CUstream S, CUresult &R,
                 const Choice *Pick = nullptr, bool Scheduled = false);
  /// \p Pick: blocks per slice (null: the settings' default); \p Paced:
  /// each slice waits for HP to be idle and for the previous one to end.
  bool launchSliced(KernelEntry &K, const LaunchArgs &A, ContextState &C, CUstream S,
                    CUresult &R, const Choice *Pick = nullptr, bool Paced = false);
  CUresult launchVariant(CUfunction VF, unsigned Grid, const unsigned Block[3],
                         unsigned Shared, CUstream S, void *Params, size_t Bytes);
  /// A control block for a PTB launch (0: none), all zeros once the
  /// launch's stream has done \p Prep (with \p WaitFor: the event to wait for).
  CUdeviceptr acquireCtrl(ContextState &C, CtrlPrep &Prep, CUevent &WaitFor);
  /// \p Ctrl back to its slab, the GPU done with it (C.Mu held).
  void releaseCtrl(ContextState &C, CUdeviceptr Ctrl);
  /// Queues the memset of slab \p S on C.Clear (C.Mu held).
  void clearSlab(ContextState &C, CtrlSlab &S);
  CUevent acquireEvent(ContextState &C, bool Timing);
  void reclaim(ContextState &C);
  /// \p L's control block and events back to \p C's free lists (C.Mu held).
  void giveBackEvents(ContextState &C, const PtbLaunch &L);
  void retire(std::unique_ptr<PtbLaunch> L);
  void startPreemptor();
  void preemptorLoop();
  void handle(PtbLaunch &L);
  /// A preemption not made: a program thread holds the drain lock.
  void deferred(PtbLaunch &L);
  /// \p L, \p What: named in a debug line if the wait passes 2 s.
  bool waitEvent(CUevent E, const PtbLaunch *L = nullptr, const char *What = nullptr);
  bool resume(PtbLaunch &L, bool Resumption = true);
  /// After the flag of \p L was raised at \p Raised: waits for the workers
  /// to leave and the flag write to land, reads `done`; \p T: how long
  /// each part took. False when the launch cannot be followed any more.
  /// \p FlagRecorded: L.Flag is already recorded behind the flag's write.
  bool collectPreempted(PtbLaunch &L, std::chrono::steady_clock::time_point Raised,
                        PreemptTimes &T, uint32_t &Done, bool FlagRecorded = false);
  /// Config::ArmedFlag: a word for a launch (none: Host null).
  ArmWord acquireArm(ContextState &C);
  /// Runs narrow beside HP under MPS (every HP process an MPS client, as
  /// of the last look): its flag goes up only to widen it, and is not armed.
  bool runsNarrow(const PtbLaunch &L) const {
    return L.Narrow && L.Workers <= L.Narrow && !Co.HpOffMps.load(std::memory_order_relaxed);
  }
  /// After a (re)launch of \p L on \p S: the GPU's release of its armed
  /// flag, with the next number, when it runs wide (else ArmSeq 0).
  void queueArmRelease(PtbLaunch &L, CUstream S);
  /// Queues \p L's flag write behind the wait for its ArmSeq on the signal
  /// stream, where it is not yet (the runtime thread, context current).
  void armFlag(PtbLaunch &L);
  /// Relaunches a preempted \p L (three tries); failing that, releases its
  /// stream with an error and returns false.
  bool resumeOrRelease(PtbLaunch &L, uint32_t Done, bool Resumption = true);
  /// Called after 2 s of waiting for \p L (again every so often): an error
  /// (once a process) when it was resumed and its resumption has not
  /// started, or its kernel has run no block for 2 s (Config::WorkQueues).
  void noteStuckResumption(const PtbLaunch &L);
  /// Reads \p L's control block (next, flag, done) on a stream of its own
  /// (the runtime's may be the ones held up) into the pinned word's spare
  /// room; false when the copy cannot be queued or has not landed within
  /// \p Ms milliseconds. The preemptor thread only.
  bool readCtrl(const PtbLaunch &L, uint32_t Out[3], unsigned Ms);
  /// Called after 2 s of waiting for \p L's \p What: at the debug level,
  /// once a process, the state of its events, flag word and control block
  /// (read on a stream of its own), for finding what a hang waits for.
  void describeStuck(const PtbLaunch &L, const char *What);
  void waitForOwner(void *Owner);
  void waitForContext(const ContextState *C);
  void stopPreemptor();
  /// A timing event recorded on \p S (null when none could be).
  CUevent timingStart(ContextState *C, CUstream S);
  /// Is a launch of \p K in form \p F one the statistics time? Every one,
  /// or one in Config::StatsTimingEvery per kernel and form.
  bool sampleTiming(KernelEntry &K, Form F) {
    return Cfg.StatsTimingEvery <= 1 ||
           K.TimingTurn[static_cast<int>(F)].fetch_add(1, std::memory_order_relaxed) %
                   Cfg.StatsTimingEvery ==
               0;
  }
  /// Decides \p T's sampling for form \p F where still open, and records
  /// its start on \p S when it is timed.
  void startTiming(Timing &T, KernelEntry &K, Form F, ContextState &C, CUstream S) {
    if (T.Sample < 0)
      T.Sample = sampleTiming(K, F) ? 1 : 0;
    if (T.Sample == 1)
      T.Start = timingStart(&C, S);
  }
  /// \p F: the form the launch was made in (its time counts there).
  void timingEnd(ContextState *C, CUstream S, Timing T, KernelEntry *K, Form F, bool Launched);
  void harvestTiming(bool All);

  // Scheduler.cpp
  void coordinate(ContextState &C);
  void heartbeatLoop();
  void turnaroundLoop();
  void stopCoordination();
  HpObservation observeHp(uint64_t Now);
  /// Observes the HP processes now; returns whether HP is busy, and the
  /// mode in \p Mode if given, and in \p Widen whether a narrow PTB
  /// launch may take all its workers back (Policy::widen), in \p Active
  /// whether an HP request runs (Policy::hpActive, not the idle window).
  bool observeBusy(Policy::Mode *Mode, bool *Widen = nullptr, bool *LaunchBound = nullptr,
                   bool *Active = nullptr);
  /// HP: the heartbeat's update of this process's wait share.
  void publishWaitShare();
  /// Is this BE process in Free mode? (Cached for FreeCacheNs.)
  bool freeMode();
  /// HP: Co.HpIssueMu taken by a program thread, spinning first (the
  /// runtime thread holds it for a few driver calls; sleeping on it would
  /// cost a wake-up: tens of microseconds on a busy virtual machine host,
  /// a stall when the host runs something else meanwhile).
  std::unique_lock<std::recursive_mutex> lockIssue();
  /// HP, bursts: the least time between two completion writes of the
  /// launch path. HpBurstUs; at least 1 ms while this process's requests
  /// are known to wait for the GPU less than HpWaitSharePercent of their
  /// time (a launch-bound service: below-normal MPS clients run beside it
  /// anyway, its GPU idles only in gaps between launches too short to use,
  /// and a write, about 1 us of its host time, came every few launches).
  /// A request's last launches are still written at its wait.
  static constexpr uint64_t LaunchBoundBurstNs = 1'000'000;
  uint64_t hpBurstNs() const {
    const int W = Co.WaitPermille.load(std::memory_order_relaxed);
    const uint64_t B = Cfg.HpBurstUs * 1000;
    const bool LaunchBound = W >= 0 && uint64_t(W) < uint64_t(Cfg.HpWaitSharePercent) * 10;
    return LaunchBound ? std::max<uint64_t>(B, LaunchBoundBurstNs) : B;
  }
  /// HP, bursts: how long launches must have stopped for a burst to be
  /// over (half a burst, at least 20 us).
  uint64_t burstQuietNs() const {
    return std::max<uint64_t>(Cfg.HpBurstUs / 2, 20) * 1000;
  }
  /// HP: how long ago the latest launch was made (0 if it looks ahead).
  uint64_t sinceHpLaunchNs() const {
    uint64_t Now = monotonicNs(), Last = Co.HpLastLaunchNs.load(std::memory_order_relaxed);
    return Now > Last ? Now - Last : 0;
  }
  /// EnteredNs: when the hook was entered, for the slow-call accounting
  /// of --stats (0: not measured, and neither are the other parts).
  CUresult launchHp(const LaunchArgs &A, PassThrough Original, ContextState *C, CUstream S,
                    bool Capturing, uint64_t EnteredNs);
  /// \p T (when the launch is timed for the statistics): its start is
  /// recorded here, after any hold, so that the time is the launch's own.
  CUresult launchBe(KernelEntry &K, const LaunchArgs &A, PassThrough Original, ContextState &C,
                    CUstream S, Form &F, Timing *T = nullptr);
  /// Waits (BeMu held) until \p C's latest preemptible PTB launch made
  /// with fewer work queues than Config::WorkQueues has passed its gate
  /// (ContextState::GateDone); at once when none is pending.
  void waitForGate(ContextState &C);
  /// launchBe's work, with Coordination::BeMu held.
  CUresult launchBeLocked(KernelEntry &K, const LaunchArgs &A, PassThrough Original,
                          ContextState &C, CUstream S, Form &F, Timing *T);
  /// Below Config::WorkQueues queues asked for: contexts whose latest
  /// preemptible PTB launch may not have passed its gate
  /// (ContextState::GateDone); while there are any, BE launches take the
  /// slow path (launch), which waits for them.
  std::atomic<int> GatesPending{0};
  /// Holds until this context's BE launches (the last one, and the queued
  /// ones) have ended and, unless \p HpMatters is false (a launch allowed
  /// beside HP), HP is idle.
  void holdWhileHpBusy(ContextState &C, bool HpMatters = true);
  /// Spins until \p Busy() (BE's own work in the way) is false and, when
  /// \p HpMatters, HP is idle, or the runtime shuts down; counts the holds
  /// HP caused. With Config::MaxHoldUs the waits for HP of one BE launch
  /// (from beginBeLaunch on: its slices' and a fallback's included) end
  /// after that long in all; from then on holdCut() is true.
  template <typename OwnWork> void holdUntil(OwnWork Busy, bool HpMatters = true);
  /// A BE launch begins on this thread: its bound on holds starts afresh.
  static void beginBeLaunch();
  /// This thread's current BE launch waited for HP as long as MaxHoldUs
  /// allows: it starts, or goes on, beside HP.
  static bool holdCut();
  /// Queue budget: forgets the queued launches that ended and returns what
  /// the others may make HP wait (saturating; 0 when none is left).
  /// Queued launches on other streams than \p S count as unknown (a PTB
  /// launch running beside another is not watched until that one ends).
  uint64_t queuedWait(ContextState &C, CUstream S = nullptr);
  /// Queue budget: holds the calling thread until HP is idle and a launch
  /// on \p S that may make HP wait \p WaitNs fits behind the queued ones.
  void holdForQueue(ContextState &C, CUstream S, uint64_t WaitNs, bool HpMatters = true);
  /// Queue budget: remembers a launch just made on \p S.
  void queueBe(ContextState &C, CUstream S, uint64_t WaitNs);
  void finishMeasurement();
  /// The profile's key and sizes of a launch (false: none, as for an empty
  /// or oversized grid).
  bool launchShape(KernelEntry &K, const LaunchArgs &A, ContextState &C, bool Variants,
                   bool Beside, bool OffMps, LaunchShape &Sh);
  /// Free mode: should this launch leave the fast path (its shape's
  /// profile may be incomplete, and a look is due)?
  bool freeMeasureWanted(KernelEntry &K, const LaunchArgs &A);
  /// Free mode, BeMu held: launches the candidate due for this launch's
  /// shape, timed (true, with R and F), or nothing (false: the original goes
  /// as usual).
  bool measureFree(KernelEntry &K, const LaunchArgs &A, PassThrough Original, ContextState &C,
                   CUstream S, Form &F, Timing *T, CUresult &R);
  /// BeMu held: the Free-mode measurements that have ended go to the
  /// profile, and the checks of short launches to Policy::besideChecked
  /// (or either is dropped when HP came by).
  void collectFreeMeasurements();
  /// Timing events (either may be null) back to \p C's pool.
  void giveBackTimingEvents(ContextState &C, CUevent Start, CUevent End);
  /// BeMu held: may a launch on \p S of \p C be timed now, a Free-mode
  /// measurement or a check (a free place among FreeMeasures, all of them
  /// on S of C)?
  bool timingSlot(const ContextState &C, CUstream S) const;
  /// HP: the GPU writes \p Seq into the segment once the work queued on
  /// \p S so far has ended (an event on S, the signal stream waits for it
  /// and writes). False when a driver call failed (nothing written).
  bool sideWrite(ContextState &C, CUstream S, uint64_t Seq);
  /// HP: before a completion write on \p C's internal stream, orders it
  /// after the writes queued on another context's (each context has its
  /// own stream: their writes could land out of order and the word go
  /// down). HpIssueMu held.
  void orderWritesAfterLast(ContextState &C);
  /// HP: \p Seq written on \p C's internal stream, behind every earlier
  /// write, with no wait for a launch (nothing queued for it). HpIssueMu
  /// held.
  bool orderedWrite(ContextState &C, uint64_t Seq);
  /// HP, burst: writes the pending completion, if any (HpIssueMu held).
  void flushPendingLocked();
  /// HP, burst: the runtime thread writing each burst's last completion.
  void burstFlushLoop();
  void scheduled(PtbLaunch &L);

  // ModuleLoad.cpp
  bool ptxOn();
  /// The module with variants for PTX \p Text, or null (and why, once).
  std::shared_ptr<const std::string> ptxTransform(std::string_view Text, const char *Where);

  // Stats.cpp
  void writeStats();
};

} // namespace tally::rt

#endif
