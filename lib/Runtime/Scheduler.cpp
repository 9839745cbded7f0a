//===- Scheduler.cpp - best-effort kernels around high-priority ones ------===//
//
// Across processes on one GPU (docs/runtime.md, "Scheduling"):
//
//  * Every process joins the GPU's shared segment (Segment.h) at its first
//    launch, with its priority; a runtime thread keeps its heartbeat.
//  * HP processes launch unchanged and at once. Before each launch they
//    count it in their slot (a few atomics); right after it, the GPU writes
//    the launch's sequence number into the slot's completion word
//    (cuStreamWriteValue64 into the segment mapped for the device with
//    cuMemHostRegister, from an internal stream that waits for an event
//    recorded after the launch, so the application's stream never waits
//    for the write; TALLY_HP_COMPLETION picks another way): no host round
//    trip.
//  * BE processes ask the policy (Policy.h) at each launch. Free mode (no
//    HP activity for the silence window): the original runs at full speed.
//    Guarded mode: the launch is held until HP has been idle for the idle
//    window and the previous BE launch has ended, then runs in the form the
//    profile chose; a PTB launch is watched by the runtime thread, which
//    raises its flag as soon as HP is seen active and resumes it once HP
//    is idle again; slices are issued one at a time, each after the last
//    ended and HP is idle.
//
// The policy is plain code; everything here is the mechanism around it.
// Whatever fails (no segment, no device identity, a driver call) leaves the
// process running as without the scheduler, with one warning.
//
//===----------------------------------------------------------------------===//

#include "RuntimeImpl.h"

#include <cmath>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace tally::rt {

namespace {
/// The device's UUID as the segment's key ("GPU-xxxxxxxx-xxxx-...").
std::string uuidKey(const DriverTable &D, CUdevice Dev) {
  if (!D.cuDeviceGetUuid)
    return "";
  CUuuid U;
  if (D.cuDeviceGetUuid(&U, Dev) != CUDA_SUCCESS)
    return "";
  static const char *Hex = "0123456789abcdef";
  std::string K = "GPU-";
  for (int I = 0; I < 16; ++I) {
    unsigned char B = static_cast<unsigned char>(U.bytes[I]);
    K += Hex[B >> 4];
    K += Hex[B & 15];
    if (I == 3 || I == 5 || I == 7 || I == 9)
      K += '-';
  }
  return K;
}

/// Does an MPS control daemon seem to run for this user? Its pipe folder
/// holds the control pipe. Only informative: the file can outlive the
/// daemon (the runtime starts no process to ask it).
bool mpsRunning() {
  const char *Dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  std::string P = std::string(Dir && *Dir ? Dir : "/tmp/nvidia-mps") + "/control";
  struct stat St;
  return ::stat(P.c_str(), &St) == 0 && (S_ISSOCK(St.st_mode) || S_ISFIFO(St.st_mode));
}

} // namespace

void Runtime::Impl::coordinate(ContextState &C) {
  std::call_once(Co.Once, [&] {
    if (!Cfg.Schedule || Cfg.RandomPreemptions)
      return; // random preemption is a correctness check on its own
    std::string Key = uuidKey(D, C.Dev);
    if (Key.empty()) {
      logf(LogLevel::Warn, "cannot tell which GPU this is (cuDeviceGetUuid); no scheduling "
                           "across processes");
      return;
    }
    SegmentOptions O;
    O.Dir = Cfg.ShmDir;
    O.Key = Key;
    std::string Warning, Error;
    Co.Seg = Segment::open(O, Warning, Error);
    if (!Warning.empty())
      logf(LogLevel::Warn, "%s", Warning.c_str());
    if (!Co.Seg) {
      logf(LogLevel::Warn, "no scheduling across processes: %s", Error.c_str());
      return;
    }
    // The driver says whether this context is an MPS client (CUDA 12.4
    // and later); an older driver, only whether a control daemon's pipe is
    // there.
    int MpsOn = 0;
    bool Asked = D.cuDeviceGetAttribute &&
                 D.cuDeviceGetAttribute(&MpsOn, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, C.Dev) ==
                     CUDA_SUCCESS;
    Co.Mps = Asked ? MpsOn != 0 : mpsRunning();
    // An HP process that the driver says is no MPS client tells the BE
    // processes, whose MPS rules assume HP shares the GPU with them (set
    // before joining: the claim writes it, so no BE process sees the slot
    // without it).
    if (Cfg.Prio == Priority::High && Asked && !Co.Mps)
      Co.Seg->setFlags(seg::FlagNoMps);
    SegPriority P = Cfg.Prio == Priority::High ? SegPriority::High : SegPriority::BestEffort;
    if (!Co.Seg->join(P, monotonicNs(), Error)) {
      logf(LogLevel::Warn, "no scheduling across processes: %s", Error.c_str());
      Co.Seg.reset();
      return;
    }
    // CUDA_MPS_CLIENT_PRIORITY: 0 normal (the default), 1 below normal.
    // Only where the driver says this context is a client (not from the
    // daemon's pipe alone): the GPU then starts HP's waiting blocks before
    // any of this process's.
    const char *ClientPrio = std::getenv("CUDA_MPS_CLIENT_PRIORITY");
    const bool Low = ClientPrio && !std::strcmp(ClientPrio, "1");
    const bool BlocksFirst = Co.Mps && Asked && Low && Cfg.Prio != Priority::High;
    // The queue budget in use: as given, else the default of such a client
    // (an arriving HP kernel waits for the running blocks, not the queue).
    if (Cfg.QueueUsGiven && Cfg.Prio != Priority::High) {
      Co.QueueUs.store(Cfg.QueueUs, std::memory_order_relaxed);
    } else if (BlocksFirst) {
      Co.QueueUs.store(Config::MpsQueueUs, std::memory_order_relaxed);
      Co.QueueDefault = true;
    }
    if (Co.Mps) {
      std::string Beside;
      if (Cfg.Prio != Priority::High && Cfg.Beside) {
        Beside = "; BE kernels measured within the turnaround target run beside HP's";
        if (Cfg.BesidePtbPercent && Asked)
          Beside += ", and PTB launches with " + std::to_string(Cfg.BesidePtbPercent) +
                    " % of a wave of workers";
      }
      std::string Below;
      if (Low)
        Below = "; this process is an MPS client of below-normal priority";
      // An arriving HP kernel waits for the running blocks, not for an
      // original's later waves.
      if (BlocksFirst && Cfg.Beside)
        Below += ", so an original whose waves are within the target runs beside HP";
      if (Co.QueueDefault)
        Below += ", and launches queue within " + std::to_string(Config::MpsQueueUs) +
                 " us while HP is idle (--queue-us)";
      logf(LogLevel::Info, "MPS is %s: HP and BE kernels share the GPU side by side; an "
                           "arriving HP kernel waits for the running BE blocks to leave%s%s",
           Asked ? "on for this context" : "running (its control pipe is there)",
           Beside.c_str(), Below.c_str());
    }
    else
      logf(LogLevel::Warn, "no MPS daemon: processes time-slice the GPU, so an HP kernel also "
                           "waits for the BE context's time slice (hundreds of microseconds); "
                           "'tally mps start' runs MPS");
    // Config::WorkQueues: with too few hardware work queues, launches
    // queued behind a preemptible launch's gate kept its resumption from
    // ever starting (why is not known); launchBe queues nothing behind a
    // gate then (at 1 Launcher.cpp runs originals instead of preemptible
    // launches, and says so).
    if (Cfg.Prio != Priority::High) {
      const int Q = Cfg.WorkQueuesAsked;
      if (Q > 1 && Q < Config::WorkQueues && Co.QueueUs.load(std::memory_order_relaxed))
        logf(LogLevel::Warn,
             "CUDA_DEVICE_MAX_CONNECTIONS is %d: with fewer than %d hardware work queues, "
             "launches queued behind a preempted launch kept its resumption from ever starting "
             "on an H200 under MPS (why is not known), so no launch goes behind a preemptible "
             "launch's gate here (the next waits for it to pass; the queue budget is used "
             "behind the others only); %d is what `tally run` sets when it is unset",
             Q, Config::WorkQueues, Config::WorkQueues);
      else if (Q == 0 && Co.QueueUs.load(std::memory_order_relaxed))
        logf(LogLevel::Warn,
             "CUDA_DEVICE_MAX_CONNECTIONS is not set: with the driver's default hardware work "
             "queues, launches queued behind a preempted launch kept its resumption from ever "
             "starting on an H200 under MPS (why is not known), so no launch goes behind a "
             "preemptible launch's gate here (the next waits for it to pass); set it to %d "
             "before the program starts (`tally run` does) to queue behind them too",
             Config::WorkQueues);
    }
    if (Cfg.Prio == Priority::High) {
      // The GPU writes each launch's completion into the segment.
      void *Base = Co.Seg->mappingBase();
      CUdeviceptr Dev = 0;
      if (D.cuMemHostRegister && D.cuMemHostGetDevicePointer && D.cuStreamWriteValue64 &&
          D.cuMemHostRegister(Base, Co.Seg->mappingBytes(),
                              CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE) ==
              CUDA_SUCCESS &&
          D.cuMemHostGetDevicePointer(&Dev, Base, 0) == CUDA_SUCCESS) {
        Co.MappingDev = Dev;
        Co.FinishedDev =
            Dev + (reinterpret_cast<char *>(Co.Seg->finishedWord()) - static_cast<char *>(Base));
        Co.GpuWrites = true;
      } else {
        // Measured on an H100: a host function per launch costs a request
        // about 36 us; a GPU write into the segment about 2 us.
        logf(LogLevel::Warn,
             "cannot map the segment %s for the GPU (is its folder on tmpfs, such as "
             "/dev/shm?): HP completions are reported by host functions, which add tens of "
             "microseconds to each launch",
             Co.Seg->path().c_str());
      }
    } else {
      PolicyConfig PC;
      PC.TurnaroundUs = Cfg.TurnaroundUs;
      PC.IdleWindowNs = Cfg.IdleUs * 1000;
      PC.SilenceNs = Cfg.SilenceMs * 1000000;
      // PTB launches beside HP only where the driver says MPS is on: without
      // it they would be time-sliced against HP for their whole length.
      PC.BesidePtbPercent = Co.Mps && Asked && Cfg.Beside ? Cfg.BesidePtbPercent : 0;
      PC.WidenNs = Cfg.WidenUs * 1000;
      PC.BlocksFirst = BlocksFirst;
      PC.BesideWaveUs = double(Cfg.BesideWaveUs);
      PC.Beside = Co.Mps && Cfg.Beside;
      PC.LaunchBoundPermille = Co.Mps && Cfg.Beside ? Cfg.HpWaitSharePercent * 10 : 0;
      PC.Provisional = Cfg.Provisional;
      if (Cfg.ProfileCache) {
        std::string Dir = ProfileCache::defaultDir([](const char *N) -> const char * {
          return std::getenv(N);
        });
        if (!Dir.empty()) {
          Co.Cache = std::make_unique<ProfileCache>(ProfileCache::pathFor(Dir, Key));
          std::string W;
          if (!Co.Cache->load(W) || !W.empty())
            logf(LogLevel::Warn, "profile cache %s: %s", Co.Cache->path().c_str(), W.c_str());
        }
      }
      Co.Pol = std::make_unique<Policy>(PC, Co.Cache.get());
    }
    Co.Heart = std::thread([this] { heartbeatLoop(); });
    if (Cfg.Prio == Priority::High && Co.GpuWrites && Cfg.HpCompletion == CompletionPath::Burst)
      Co.BurstFlusher = std::thread([this] { burstFlushLoop(); });
    if (Cfg.Stats && Cfg.StatsTurnaround && Cfg.Prio == Priority::High) {
      Co.LaunchNs.reset(new std::atomic<uint64_t>[Coordination::RingSize]());
      Co.Turnaround = std::thread([this] { turnaroundLoop(); });
    }
    Co.Usable = true;
    logf(LogLevel::Info, "joined %s as %s", Co.Seg->path().c_str(),
         Cfg.Prio == Priority::High ? "high priority" : "best effort");
  });
}

void Runtime::Impl::heartbeatLoop() {
  std::unique_lock<std::mutex> G(Co.HeartMu);
  while (!Co.HeartStop) {
    Co.HeartCv.wait_for(G, std::chrono::milliseconds(10));
    if (Co.HeartStop)
      break;
    bool Rejoined = false;
    if (Cfg.Prio == Priority::High)
      publishWaitShare();
    if (!Co.Seg->heartbeat(monotonicNs(), Rejoined))
      logf(LogLevel::Warn, "lost this process's slot in %s", Co.Seg->path().c_str());
    else if (Rejoined) {
      logf(LogLevel::Info, "this process's slot in %s was reclaimed (stalled?); joined again",
           Co.Seg->path().c_str());
      if (Cfg.Prio == Priority::High) {
        // The slot's numbers start again above the old ones, maybe in
        // another slot: a pending old number is dropped (written now, it
        // would be below the new start), and the GPU writes go to the new
        // slot's word.
        std::lock_guard<std::recursive_mutex> Issue(Co.HpIssueMu);
        if (Co.HpPending.Seq) {
          std::lock_guard<std::mutex> M(Co.HpPending.C->Mu);
          Co.HpPending.C->FreeEvents.push_back(Co.HpPending.E);
        }
        Co.HpPending = {};
        if (Co.MappingDev && Co.Seg->finishedWord())
          Co.FinishedDev = Co.MappingDev + (reinterpret_cast<char *>(Co.Seg->finishedWord()) -
                                            static_cast<char *>(Co.Seg->mappingBase()));
      }
    }
  }
}

/// HP, every heartbeat: the share of its requests' time this process
/// spent waiting for the GPU (Runtime::waitDone), smoothed over about the
/// last 200 ms (each 10 ms weighs 0.95 of the one after it), into the
/// segment once 1 ms of requests has been seen: BE processes start their
/// kernels beside a launch-bound service (Policy::launchBound).
void Runtime::Impl::publishWaitShare() {
  const uint64_t Now = monotonicNs();
  const uint64_t Span = Co.SpanSumNs.load(std::memory_order_relaxed);
  const uint64_t Wait = Co.WaitSumNs.load(std::memory_order_relaxed);
  // Weighed by time, not by heartbeats (which may come late): 0.95 per
  // 10 ms.
  const double Dt = Co.LastPublishNs && Now > Co.LastPublishNs ? double(Now - Co.LastPublishNs) : 1e7;
  const double Decay = std::pow(0.95, Dt / 1e7);
  Co.LastPublishNs = Now;
  Co.SpanWin = Co.SpanWin * Decay + double(Span - Co.SpanSeen);
  Co.WaitWin = Co.WaitWin * Decay + double(Wait - Co.WaitSeen);
  Co.SpanSeen = Span;
  Co.WaitSeen = Wait;
  // Not known: a request was too long to have been seen whole, or this
  // process launches but no request has ended for MaxSpanNs (it waits in
  // ways the runtime does not see). The share starts afresh after that.
  const uint64_t Lost = Co.SpanLostNs.load(std::memory_order_relaxed);
  const uint64_t LastEnd = Co.LastSpanEndNs.load(std::memory_order_relaxed);
  const uint64_t LastLaunch = Co.HpLastLaunchNs.load(std::memory_order_relaxed);
  const bool Unseen = LastLaunch && Now >= LastLaunch && Now - LastLaunch < Coordination::MaxSpanNs &&
                      (!LastEnd || Now - LastEnd > Coordination::MaxSpanNs) &&
                      LastLaunch > LastEnd;
  if ((Lost && Now >= Lost && Now - Lost < Coordination::MaxSpanNs) || Unseen) {
    Co.SpanWin = Co.WaitWin = 0;
    Co.WaitPermille.store(-1, std::memory_order_relaxed);
    Co.Seg->setWaitShare(-1);
    return;
  }
  if (Co.SpanWin < 1e6)
    return;
  const int Permille = int(std::min(1000L, std::lround(1000.0 * Co.WaitWin / Co.SpanWin)));
  Co.Seg->setWaitShare(Permille);
  Co.WaitPermille.store(Permille, std::memory_order_relaxed);
}

/// HP with --stats: watches this process's completion word and records,
/// for each launch it sees end, the time from the launch call to then. It
/// spins while launches are outstanding (a CPU core, in --stats runs only)
/// and naps when none are.
void Runtime::Impl::turnaroundLoop() {
  uint64_t Seen = 0, LastSeen = 0, Active = 0;
  const uint64_t Mask = Coordination::RingSize - 1;
  for (bool Stop = false; !Stop;) {
    {
      // One more pass after the stop: completions seen by then count.
      std::lock_guard<std::mutex> G(Co.HeartMu);
      Stop = Co.HeartStop;
    }
    uint64_t *Word = Co.Seg->finishedWord();
    uint64_t Last = Co.LastSeq.load(std::memory_order_acquire);
    if (Word && Seen > Last)
      Seen = Last; // joined again: numbers restarted elsewhere
    uint64_t F = Word ? __atomic_load_n(Word, __ATOMIC_ACQUIRE) : 0;
    F = std::min(F, Last);
    if (F <= Seen) {
      // Spin while launches are outstanding and for 2 ms after the last
      // one (a nap would delay the next completion's sighting by the
      // scheduler's wake-up time); nap after that.
      if (Last != LastSeen) {
        LastSeen = Last;
        Active = monotonicNs();
      }
      if (Seen >= Last && monotonicNs() - Active > 2'000'000)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      else
        cpuRelax();
      continue;
    }
    uint64_t Now = monotonicNs();
    if (F - Seen > Coordination::RingSize) {
      Co.TurnaroundLost += F - Seen - Coordination::RingSize;
      Seen = F - Coordination::RingSize;
    }
    for (uint64_t Q = Seen + 1; Q <= F; ++Q) {
      uint64_t T = Co.LaunchNs[Q & Mask].load(std::memory_order_relaxed);
      if (T && T <= Now && Co.TurnaroundUs.size() < (size_t(1) << 22))
        Co.TurnaroundUs.push_back(double(Now - T) / 1000.0);
    }
    Seen = F;
  }
}

void Runtime::Impl::stopCoordination() {
  if (!Co.Usable)
    return;
  {
    std::lock_guard<std::mutex> G(Co.HeartMu);
    Co.HeartStop = true;
  }
  Co.HeartCv.notify_all();
  {
    std::lock_guard<std::mutex> G(Co.HpFlushMu);
    Co.HpFlushStop.store(true, std::memory_order_release);
  }
  Co.HpFlushCv.notify_all();
  if (Co.Heart.joinable())
    Co.Heart.join();
  if (Co.BurstFlusher.joinable())
    Co.BurstFlusher.join();
  {
    // Launches still without a completion: written as usual (a host store
    // could be overtaken by an earlier write still queued).
    std::lock_guard<std::recursive_mutex> Issue(Co.HpIssueMu);
    flushPendingLocked();
  }
  if (Co.Turnaround.joinable())
    Co.Turnaround.join();
  {
    std::lock_guard<std::mutex> G(Co.BeMu);
    finishMeasurement();
  }
  if (Co.Cache && Co.Cache->dirty()) {
    std::lock_guard<std::mutex> G(Co.PolMu);
    std::string Error;
    if (!Co.Cache->save(Error))
      logf(LogLevel::Warn, "cannot save the profile cache: %s", Error.c_str());
  }
  // Leaving frees the slot at once (the others need not wait for it to go
  // stale). The HP completion word may still be written by launches in
  // flight: the mapping stays (it is registered), only the slot is freed.
  Co.Seg->leave();
}

HpObservation Runtime::Impl::observeHp(uint64_t Now) {
  HpView V = Co.Seg->hpView(Now);
  const bool OffMps = V.HpWithoutMps > 0;
  Co.HpOffMps.store(OffMps, std::memory_order_relaxed);
  if (OffMps && Co.Mps && !Co.HpOffMpsSeen.exchange(true, std::memory_order_relaxed))
    logf(LogLevel::Warn, "an HP process is not an MPS client (started before the MPS daemon, or "
                         "with a pipe folder where none runs?): its kernels and this process's are "
                         "time-sliced, so none of this process's runs beside HP's while it is "
                         "there (start both under 'tally mps start')");
  HpObservation O;
  O.HpProcesses = V.HpProcesses;
  O.Active = V.Active;
  O.Arrivals = V.Arrivals;
  // An HP process time-sliced against this one is exposed to every BE
  // kernel, whatever its share.
  O.WaitShareKnown = V.WaitShareKnown && !OffMps;
  O.WaitPermille = V.WaitPermille;
  return O;
}

bool Runtime::Impl::observeBusy(Policy::Mode *Mode, bool *Widen, bool *LaunchBound,
                                bool *Active) {
  uint64_t Now = monotonicNs();
  std::lock_guard<std::mutex> G(Co.PolMu);
  Co.Pol->observe(Now, observeHp(Now));
  if (Mode)
    *Mode = Co.Pol->mode(Now);
  if (Widen)
    *Widen = Co.Pol->widen(Now);
  if (LaunchBound)
    *LaunchBound = Co.Pol->launchBound();
  if (Active)
    *Active = Co.Pol->hpActive();
  return Co.Pol->hpBusy(Now);
}

/// How long a Free-mode decision stands: an HP arrival within it still
/// finds BE originals started in it (as it would find one started just
/// before it).
static constexpr uint64_t FreeCacheNs = 20'000;

bool Runtime::Impl::freeMode() {
  uint64_t Now = monotonicNs();
  uint64_t Checked = Co.FreeCheckedNs.load(std::memory_order_acquire);
  if (Checked && Now >= Checked && Now - Checked < FreeCacheNs)
    return Co.FreeCached.load(std::memory_order_relaxed);
  Policy::Mode Mode;
  observeBusy(&Mode);
  bool Free = Mode == Policy::Mode::Free;
  Co.FreeCached.store(Free, std::memory_order_relaxed);
  Co.FreeCheckedNs.store(Now, std::memory_order_release);
  return Free;
}

//===----------------------------------------------------------------------===//
// High priority
//===----------------------------------------------------------------------===//

namespace {
struct HostCompletion {
  Segment *Seg;
  uint64_t Seq;
};
void CUDA_CB hostCompleted(void *P) {
  auto *H = static_cast<HostCompletion *>(P);
  H->Seg->hpFinished(H->Seq);
  delete H;
}
} // namespace

namespace {
/// Notes the time from its start to its end as one part of an HP launch.
class HpPartTimer {
public:
  /// Start 0: not timed.
  HpPartTimer(Coordination &Co, Coordination::HpPart P, uint64_t Start)
      : Co(Co), P(P), Start(Start) {}
  ~HpPartTimer() {
    if (Start)
      Co.noteHpPart(P, monotonicNs() - Start);
  }
  HpPartTimer(const HpPartTimer &) = delete;
  HpPartTimer &operator=(const HpPartTimer &) = delete;

private:
  Coordination &Co;
  Coordination::HpPart P;
  uint64_t Start;
};
} // namespace

std::unique_lock<std::recursive_mutex> Runtime::Impl::lockIssue() {
  std::unique_lock<std::recursive_mutex> Issue(Co.HpIssueMu, std::defer_lock);
  for (unsigned Spin = 0; !Issue.try_lock(); ++Spin)
    if (Spin < 4096)
      cpuRelax();
    else {
      Issue.lock();
      break;
    }
  return Issue;
}

CUresult Runtime::Impl::launchHp(const LaunchArgs &A, PassThrough Original, ContextState *C,
                                 CUstream S, bool Capturing, uint64_t EnteredNs) {
  (void)A;
  if (C)
    coordinate(*C);
  // A launch captured into a graph runs later, maybe many times: it is not
  // announced (a completion written from a graph would be stale).
  if (!Co.Usable || Capturing)
    return Original();
  // The parts' times (EnteredNs set: --stats) for the slow-call counts.
  const uint64_t Entered = EnteredNs ? monotonicNs() : 0;
  if (EnteredNs && Entered >= EnteredNs)
    Co.noteHpPart(Coordination::HpLookup, Entered - EnteredNs);
  // From the number to the completion write, one launch at a time: on the
  // internal stream the writes then come in number order, so the word
  // only grows and N means every launch up to N ended (launches on several
  // streams or threads included).
  std::unique_lock<std::recursive_mutex> Issue = lockIssue();
  uint64_t LaunchedAt = monotonicNs();
  Co.HpLastLaunchNs.store(LaunchedAt, std::memory_order_relaxed);
  // The first launch after a wait starts this thread's request
  // (Runtime::waitDone).
  if (HpThreadSpan &Req = hpThreadSpan(); !Req.StartNs)
    Req.StartNs = LaunchedAt;
  if (Entered)
    Co.noteHpPart(Coordination::HpLock, LaunchedAt - Entered);
  uint64_t Seq = Co.Seg->hpLaunch(LaunchedAt);
  if (Seq && Co.LaunchNs) {
    Co.LaunchNs[Seq & (Coordination::RingSize - 1)].store(LaunchedAt, std::memory_order_relaxed);
    uint64_t Prev = Co.LastSeq.load(std::memory_order_relaxed);
    while (Prev < Seq && !Co.LastSeq.compare_exchange_weak(Prev, Seq, std::memory_order_release,
                                                            std::memory_order_relaxed))
      ;
  }
  CUresult R = Original();
  const uint64_t Returned = Entered ? monotonicNs() : 0;
  if (Entered)
    Co.noteHpPart(Coordination::HpDriver, Returned - LaunchedAt);
  HpPartTimer Completion(Co, Coordination::HpCompletion, Returned);
  if (!Seq)
    return R; // no slot right now (reclaimed while stalled): not announced
  Co.HpLaunches.fetch_add(1, std::memory_order_relaxed);
  if (Cfg.HpCompletion == CompletionPath::None) {
    // A diagnostic: announced, never reported (numbers taken and finished
    // under the issue lock, so the word only grows).
    Co.Seg->hpFinished(Seq);
    return R;
  }
  const bool Ordered = Co.GpuWrites && C && C->Signal &&
                       (Cfg.HpCompletion == CompletionPath::Side ||
                        Cfg.HpCompletion == CompletionPath::Burst);
  if (R != CUDA_SUCCESS) {
    // Nothing was queued: this number ends once everything before it has.
    // Written behind the earlier writes (a host store could be overtaken
    // by one of them and the word would go down).
    if (Co.HpPending.Seq) {
      Co.HpPending.Seq = Seq; // the pending write covers it
      return R;
    }
    if (Ordered && orderedWrite(*C, Seq))
      return R;
    Co.Seg->hpFinished(Seq);
    return R;
  }
  if (Ordered && Cfg.HpCompletion == CompletionPath::Burst) {
    // One write covers every earlier launch on its stream: a launch soon
    // after the last write gets only an event (re-recorded by each launch
    // of the burst); the next write, or the runtime thread at the burst's
    // end, waits for it on the internal stream and writes its number. The
    // runtime thread never touches the program's streams. Launches on
    // another stream or context write the pending one first. Launches on
    // the per-thread default stream are always written: its handle names
    // a different stream in every thread, so a later launch's event there
    // would not cover an earlier one's.
    if (Co.HpPending.Seq && (Co.HpPending.S != S || Co.HpPending.C != C))
      flushPendingLocked();
    if (S != CU_STREAM_PER_THREAD && Co.HpLastWriteNs &&
        LaunchedAt - Co.HpLastWriteNs < hpBurstNs()) {
      CUevent E = Co.HpPending.Seq ? Co.HpPending.E : acquireEvent(*C, false);
      if (E && D.cuEventRecord(E, S) == CUDA_SUCCESS) {
        Co.HpPending = {Seq, S, C, E};
        // Written at the program's next wait (WaitCalls.def), or by the
        // runtime thread, which looks every millisecond (not woken: a
        // wake-up per request is what a busy host delays).
        if (!Co.HpFlushWanted.load(std::memory_order_relaxed))
          Co.HpFlushWanted.store(true, std::memory_order_release);
        return R;
      }
      if (E && !Co.HpPending.Seq) {
        std::lock_guard<std::mutex> G(C->Mu);
        C->FreeEvents.push_back(E);
      }
      flushPendingLocked(); // its event still holds the launches before
    }
    if (Co.HpPending.Seq) {
      // This launch's write covers the pending ones (same stream).
      std::lock_guard<std::mutex> G(C->Mu);
      C->FreeEvents.push_back(Co.HpPending.E);
      Co.HpPending = {};
    }
    if (sideWrite(*C, S, Seq)) {
      Co.HpLastWriteNs = LaunchedAt;
      return R;
    }
  }
  // The write on a side stream behind an event: the application's stream
  // does not wait for it.
  if (R == CUDA_SUCCESS && Co.GpuWrites && Cfg.HpCompletion == CompletionPath::Side && C &&
      C->Signal && sideWrite(*C, S, Seq))
    return R;
  if (R == CUDA_SUCCESS && Co.GpuWrites && Cfg.HpCompletion != CompletionPath::Host &&
      D.cuStreamWriteValue64(S, Co.FinishedDev, Seq, CU_STREAM_WRITE_VALUE_DEFAULT) ==
          CUDA_SUCCESS) {
    Co.HpWrites.fetch_add(1, std::memory_order_relaxed);
    return R;
  }
  if (R == CUDA_SUCCESS && D.cuLaunchHostFunc) {
    auto *H = new HostCompletion{Co.Seg.get(), Seq};
    if (D.cuLaunchHostFunc(S, hostCompleted, H) == CUDA_SUCCESS) {
      Co.HpHostCompletions.fetch_add(1, std::memory_order_relaxed);
      return R;
    }
    delete H;
  }
  // Cannot tell when it ends: count it done now (the arrival still shows).
  Co.Seg->hpFinished(Seq);
  return R;
}

void Runtime::Impl::orderWritesAfterLast(ContextState &C) {
  ContextState *Prev = Co.HpLastWriteCtx;
  Co.HpLastWriteCtx = &C;
  if (!Prev || Prev == &C || Prev->Dead.load(std::memory_order_acquire))
    return;
  CUevent E = acquireEvent(*Prev, false);
  if (!E)
    return;
  if (D.cuEventRecord(E, Prev->Signal) == CUDA_SUCCESS)
    D.cuStreamWaitEvent(C.Signal, E, 0); // across contexts: allowed
  std::lock_guard<std::mutex> G(Prev->Mu);
  Prev->FreeEvents.push_back(E);
}

bool Runtime::Impl::orderedWrite(ContextState &C, uint64_t Seq) {
  orderWritesAfterLast(C);
  if (D.cuStreamWriteValue64(C.Signal, Co.FinishedDev, Seq, CU_STREAM_WRITE_VALUE_DEFAULT) !=
      CUDA_SUCCESS)
    return false;
  Co.HpWrites.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool Runtime::Impl::sideWrite(ContextState &C, CUstream S, uint64_t Seq) {
  CUevent E = acquireEvent(C, false);
  if (!E)
    return false;
  orderWritesAfterLast(C);
  bool Ok = D.cuEventRecord(E, S) == CUDA_SUCCESS &&
            D.cuStreamWaitEvent(C.Signal, E, 0) == CUDA_SUCCESS &&
            D.cuStreamWriteValue64(C.Signal, Co.FinishedDev, Seq, CU_STREAM_WRITE_VALUE_DEFAULT) ==
                CUDA_SUCCESS;
  std::lock_guard<std::mutex> G(C.Mu);
  C.FreeEvents.push_back(E); // a recorded event may be recorded again
  if (Ok)
    Co.HpWrites.fetch_add(1, std::memory_order_relaxed);
  return Ok;
}

void Runtime::Impl::flushPendingLocked() {
  Coordination::PendingCompletion P = Co.HpPending;
  Co.HpPending = {};
  if (!P.Seq)
    return;
  ContextState &C = *P.C;
  if (C.Dead.load(std::memory_order_acquire)) {
    // Its context is gone, and with it every write still queued there.
    Co.Seg->hpFinished(P.Seq);
    return;
  }
  // Only the internal stream is touched (the event was recorded by the
  // launches themselves): in the launch's context.
  CUcontext Cur = nullptr;
  bool Switch = D.cuCtxGetCurrent(&Cur) == CUDA_SUCCESS && Cur != C.Ctx;
  bool Written = false;
  if (!Switch || D.cuCtxSetCurrent(C.Ctx) == CUDA_SUCCESS) {
    orderWritesAfterLast(C);
    Written = D.cuStreamWaitEvent(C.Signal, P.E, 0) == CUDA_SUCCESS &&
              D.cuStreamWriteValue64(C.Signal, Co.FinishedDev, P.Seq,
                                     CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS;
    if (Switch)
      D.cuCtxSetCurrent(Cur);
  }
  {
    std::lock_guard<std::mutex> G(C.Mu);
    C.FreeEvents.push_back(P.E); // a recorded event may be recorded again
  }
  if (Written) {
    Co.HpWrites.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // A driver call failed: count them done now rather than never.
  Co.Seg->hpFinished(P.Seq);
}

/// HP, burst: writes a burst's last completion when the program did not
/// wait for it (a wait writes it at once: Runtime::waitPoint), once its
/// launches have stopped for half a burst. It looks every millisecond
/// while HP launches come (every 10 ms after 100 ms without one) and is
/// never woken by a launch: a wake-up per request is what a busy virtual
/// machine host delays, and delays the service with it. While launches go
/// on, the launching thread writes one every burst itself; this thread
/// takes the issue lock only if it is free (a launch is being made
/// otherwise: the burst goes on), so the service never waits for it.
void Runtime::Impl::burstFlushLoop() {
  const uint64_t Quiet = burstQuietNs();
  const uint64_t Often = std::max<uint64_t>(Quiet, 1'000'000), Seldom = 10 * Often;
  std::unique_lock<std::mutex> G(Co.HpFlushMu);
  while (!Co.HpFlushStop.load(std::memory_order_acquire)) {
    Co.HpFlushCv.wait_for(G, std::chrono::nanoseconds(sinceHpLaunchNs() < 100'000'000 ? Often : Seldom));
    if (Co.HpFlushStop.load(std::memory_order_acquire))
      break;
    if (!Co.HpFlushWanted.load(std::memory_order_acquire) || sinceHpLaunchNs() < Quiet)
      continue;
    G.unlock();
    {
      std::unique_lock<std::recursive_mutex> Issue(Co.HpIssueMu, std::try_to_lock);
      if (Issue.owns_lock()) {
        if (!Co.HpPending.Seq) {
          Co.HpFlushWanted.store(false, std::memory_order_release);
        } else if (sinceHpLaunchNs() >= Quiet) {
          flushPendingLocked();
          Co.HpLastWriteNs = 0; // the burst is over: the next launch is written
          Co.HpFlushWanted.store(false, std::memory_order_release);
        }
      }
    }
    G.lock();
  }
}

//===----------------------------------------------------------------------===//
// Best effort
//===----------------------------------------------------------------------===//

namespace {
/// The kernel whose BE launch this thread is making (launchBe), so that its
/// waits for HP are counted for it too.
thread_local KernelEntry *HoldingFor = nullptr;
struct HoldingForGuard {
  explicit HoldingForGuard(KernelEntry &K) { HoldingFor = &K; }
  ~HoldingForGuard() { HoldingFor = nullptr; }
  HoldingForGuard(const HoldingForGuard &) = delete;
  HoldingForGuard &operator=(const HoldingForGuard &) = delete;
};
/// This thread's current BE launch: how long its holds for HP have lasted
/// (MaxHoldUs bounds the sum), and whether the bound was reached.
thread_local uint64_t LaunchHeldNs = 0;
thread_local bool LaunchHoldCut = false;
/// This thread's current BE launch is a measurement that may start as its
/// provisional form instead (Policy::provisional): a hold for HP ends when
/// an HP request is running (LaunchLeft), rather than lasting until HP is
/// idle again.
thread_local bool LaunchMayLeave = false;
thread_local bool LaunchLeft = false;

/// This thread is in a guarded BE launch call (GuardedCallTimer): its
/// holds' parts are counted for those calls too.
thread_local bool InGuardedCall = false;

/// Adds a guarded BE launch call's time, from the decision to hold it to
/// its return, to the statistics.
struct GuardedCallTimer {
  explicit GuardedCallTimer(Coordination &Co) : Co(Co), Start(monotonicNs()) {
    InGuardedCall = true;
  }
  ~GuardedCallTimer() {
    InGuardedCall = false;
    Co.GuardedCalls.fetch_add(1, std::memory_order_relaxed);
    Co.GuardedNs.fetch_add(monotonicNs() - Start, std::memory_order_relaxed);
  }
  GuardedCallTimer(const GuardedCallTimer &) = delete;
  GuardedCallTimer &operator=(const GuardedCallTimer &) = delete;
  Coordination &Co;
  uint64_t Start;
};
} // namespace

void Runtime::Impl::beginBeLaunch() {
  LaunchHeldNs = 0;
  LaunchHoldCut = false;
  LaunchMayLeave = false;
  LaunchLeft = false;
}

bool Runtime::Impl::holdCut() { return LaunchHoldCut; }

/// Holds the calling thread until the previous BE launch has ended and HP
/// has been idle for the idle window (or, with MaxHoldUs, this launch has
/// waited for HP that long in all). Never forever: a dead HP process's
/// activity stops counting once its heartbeat is stale.
template <typename OwnWork> void Runtime::Impl::holdUntil(OwnWork Busy, bool HpMatters) {
  uint64_t Start = 0, OwnStart = 0;
  for (unsigned Spin = 0;; ++Spin) {
    bool Wait = Busy();
    // The time this launch waits for the process's own earlier launches
    // (one at a time, or the queue's budget): for the statistics.
    // (Only in guarded launch calls: a graph launch's wait is not one.)
    if (Wait && !OwnStart && InGuardedCall) {
      OwnStart = monotonicNs();
    } else if (!Wait && OwnStart) {
      Co.OwnWaitNs.fetch_add(monotonicNs() - OwnStart, std::memory_order_relaxed);
      OwnStart = 0;
    }
    if (!Wait && HpMatters && !LaunchHoldCut) {
      Policy::Mode Mode;
      bool Bound = false, Active = false;
      Wait = observeBusy(&Mode, nullptr, &Bound, &Active) && Mode == Policy::Mode::Guarded;
      if (Wait && Bound && !Cfg.Forced) {
        // Every HP process is launch bound: it starts beside HP (as the
        // original, as after --max-hold-us; launchBe).
        LaunchHoldCut = true;
        Wait = false;
        Co.LaunchBoundStarts.fetch_add(1, std::memory_order_relaxed);
      }
      if (Wait && LaunchMayLeave && Active && !Co.HpOffMps.load(std::memory_order_relaxed)) {
        // A measurement held for HP's idle window; HP runs a request again:
        // the launch starts as its provisional form (launchBe). (Not while
        // an HP process that is no MPS client is there, as of the look
        // just made: nothing runs beside HP then, and a PTB launch would
        // run wide and leave for HP after a block of unknown length.)
        LaunchLeft = true;
        Wait = false;
      }
      if (Wait && !Start) {
        Start = monotonicNs();
        Co.Holds.fetch_add(1, std::memory_order_relaxed);
        if (HoldingFor)
          HoldingFor->Holds.fetch_add(1, std::memory_order_relaxed);
      }
      if (Wait && Cfg.MaxHoldUs &&
          LaunchHeldNs + (monotonicNs() - Start) >= Cfg.MaxHoldUs * 1000) {
        LaunchHoldCut = true;
        Wait = false;
        Co.HoldsCut.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (!Wait)
      break;
    if (Shut.load(std::memory_order_relaxed))
      break; // exiting: finish the program's work
    if (Spin < 200)
      cpuRelax();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
  if (OwnStart) // (only at exit)
    Co.OwnWaitNs.fetch_add(monotonicNs() - OwnStart, std::memory_order_relaxed);
  if (Start) {
    uint64_t Held = monotonicNs() - Start;
    LaunchHeldNs += Held;
    Co.HeldNs.fetch_add(Held, std::memory_order_relaxed);
    if (InGuardedCall)
      Co.GuardedHeldNs.fetch_add(Held, std::memory_order_relaxed);
    if (HoldingFor)
      HoldingFor->HeldNs.fetch_add(Held, std::memory_order_relaxed);
  }
}

void Runtime::Impl::holdWhileHpBusy(ContextState &C, bool HpMatters) {
  holdUntil([&] {
    if (!C.BeQueue.empty()) {
      queuedWait(C);
      if (!C.BeQueue.empty())
        return true; // every queued launch must have ended
    }
    if (!C.BeDoneRecorded)
      return false;
    if (D.cuEventQuery(C.BeDone) != CUDA_ERROR_NOT_READY) {
      C.BeDoneRecorded = false;
      return false;
    }
    if (!C.BeLastPreemptible && !C.BeOverlapCounted && observeBusy(nullptr)) {
      // HP arrived while a BE kernel that cannot be stopped runs.
      C.BeOverlapCounted = true;
      Co.Unstoppable.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }, HpMatters);
}

uint64_t Runtime::Impl::queuedWait(ContextState &C, CUstream S) {
  // Launches on one stream end in order: querying stops at the first that
  // has not (entries behind it, on any stream, count as still queued).
  uint64_t Sum = 0;
  bool Pending = false;
  for (auto It = C.BeQueue.begin(); It != C.BeQueue.end();) {
    if (!Pending && D.cuEventQuery(It->E) != CUDA_ERROR_NOT_READY) {
      C.BeQueueFree.push_back(It->E); // ended (or the context is gone)
      It = C.BeQueue.erase(It);
      continue;
    }
    Pending = true;
    // Behind a launch on another stream nothing is queued: a PTB launch
    // running beside another is not watched until that one ends. Each
    // thread's per-thread default stream has the same handle: never the
    // same stream.
    bool Same = S && It->S == S && S != CU_STREAM_PER_THREAD;
    uint64_t W = S && !Same ? UINT64_MAX : It->WaitNs;
    Sum = W == UINT64_MAX || Sum + W < Sum ? UINT64_MAX : Sum + W;
    ++It;
  }
  return Sum;
}

void Runtime::Impl::holdForQueue(ContextState &C, CUstream S, uint64_t WaitNs, bool HpMatters) {
  const uint64_t Budget = Co.QueueUs.load(std::memory_order_relaxed) * 1000;
  bool Behind = false;
  holdUntil([&] {
    uint64_t Queued = queuedWait(C, S);
    Behind = !C.BeQueue.empty();
    return Behind && (Queued == UINT64_MAX || WaitNs > Budget || Queued > Budget - WaitNs);
  }, HpMatters);
  if (Behind)
    Co.QueuedLaunches.fetch_add(1, std::memory_order_relaxed);
}

void Runtime::Impl::queueBe(ContextState &C, CUstream S, uint64_t WaitNs) {
  if (!Co.QueueUs.load(std::memory_order_relaxed) || C.BeQueueBroken)
    return;
  CUevent E = nullptr;
  if (!C.BeQueueFree.empty()) {
    E = C.BeQueueFree.back();
    C.BeQueueFree.pop_back();
  } else {
    RelaxedCaptureGuard Relax(D);
    if (D.cuEventCreate(&E, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
      E = nullptr;
  }
  if (!E || D.cuEventRecord(E, S) != CUDA_SUCCESS) {
    // Without an event this launch's end cannot be seen: from here one
    // launch at a time (the latest is still tracked by BeDone).
    if (E)
      C.BeQueueFree.push_back(E);
    C.BeQueueBroken = true;
    logf(LogLevel::Warn, "cannot track queued best-effort launches; one at a time from now");
    return;
  }
  C.BeQueue.push_back({E, WaitNs, S});
}

/// The measured launch (if any) has ended: its time goes to the profile
/// when HP stayed away while it ran. Called with BeMu held.
void Runtime::Impl::finishMeasurement() {
  PendingMeasure &M = Co.Measure;
  if (!M.Active)
    return;
  M.Active = false;
  ContextState &C = *M.C;
  if (C.Dead.load(std::memory_order_acquire) || D.cuEventSynchronize(C.BeDone) != CUDA_SUCCESS)
    return;
  float Ms = 0;
  if (D.cuEventElapsedTime(&Ms, C.BeStart, C.BeDone) != CUDA_SUCCESS || Ms <= 0)
    return;
  uint64_t Now = monotonicNs();
  std::lock_guard<std::mutex> G(Co.PolMu);
  Co.Pol->observe(Now, observeHp(Now));
  if (Co.Pol->arrivals() != M.Arrivals ||
      Co.Preemptions.load(std::memory_order_relaxed) != M.Preemptions) {
    Co.Discarded.fetch_add(1, std::memory_order_relaxed);
    return; // HP came by: the time says nothing about the form alone
  }
  Co.Pol->measured(M.Shape, M.Pick, static_cast<uint64_t>(double(Ms) * 1e6));
  Co.Measured.fetch_add(1, std::memory_order_relaxed);
}

bool Runtime::Impl::launchShape(KernelEntry &K, const LaunchArgs &A, ContextState &C,
                                bool Variants, bool Beside, bool OffMps, LaunchShape &Sh) {
  Sh.Key.Kernel = K.ProfileName.empty() ? K.Name : K.ProfileName;
  // Launches only the original can make (a cluster, a cooperative launch:
  // cuBLAS's and cuDNN's Hopper kernels come so) are a shape of their own:
  // the choice made for the kernel's other launches (a variant) is not
  // theirs, nor theirs (the original) the others'.
  if (A.OriginalOnly && !Sh.Key.Kernel.empty())
    Sh.Key.Kernel += "#original-only";
  for (int I = 0; I < 3; ++I) {
    Sh.Key.Grid[I] = A.Grid[I];
    Sh.Key.Block[I] = A.Block[I];
  }
  Sh.Key.Shared = A.SharedBytes;
  Sh.Blocks = uint64_t(A.Grid[0]) * A.Grid[1] * A.Grid[2];
  if (Sh.Blocks == 0 || Sh.Blocks > UINT32_MAX || Sh.Key.Kernel.empty())
    return false;
  Sh.HasPtb = Variants && K.Ptb && PtbUsable;
  Sh.HasSlice = Variants && K.Slice.has_value();
  Sh.PtbPerSM = Sh.HasPtb ? workersPerSM(C, K.PtbFn, K.IsLibraryKernel, A) : 0;
  Sh.SlicePerSM = Sh.HasSlice ? workersPerSM(C, K.SliceFn, K.IsLibraryKernel, A) : 0;
  Sh.SMs = C.SMs;
  // The original's footprint, for besideSmall (a cluster's occupancy is
  // another matter: not for those).
  // (With client priority the queue's estimate of an original is one
  // wave of it: needed then too.)
  Sh.OrigPerSM = (Beside || (Co.Pol->config().BlocksFirst && !OffMps)) && !A.OriginalOnly
                     ? workersPerSM(C, A.F, K.IsLibraryKernel, A)
                     : 0;
  return true;
}

namespace {
/// A launch's grid, block and shared memory, hashed (FNV-1a; never 0).
uint64_t shapeHash(const LaunchArgs &A) {
  uint64_t H = 1469598103934665603ull;
  for (uint64_t V : {uint64_t(A.Grid[0]), uint64_t(A.Grid[1]), uint64_t(A.Grid[2]),
                     uint64_t(A.Block[0]), uint64_t(A.Block[1]), uint64_t(A.Block[2]),
                     uint64_t(A.SharedBytes)})
    H = (H ^ V) * 1099511628211ull;
  return H | 1;
}

/// freeMeasureWanted found a look due for this thread's launch: measureFree
/// may look (a launch timed for the statistics leaves the fast path too,
/// and must not look more often than the poll period allows).
thread_local bool FreeLookDue = false;

bool freeKnown(const KernelEntry &K, uint64_t H) {
  for (const std::atomic<uint64_t> &E : K.FreeKnown)
    if (E.load(std::memory_order_relaxed) == H)
      return true;
  return false;
}

/// May launches of \p K like \p A be measured in Free mode? Only kernels
/// with variants: a choice to make. (Kernels without, which under MPS are
/// measured for running beside HP, are measured in Guarded mode as before:
/// an eager PyTorch job's launches keep the fast path.)
bool freeMeasurable(const Config &Cfg, const KernelEntry &K, const LaunchArgs &A) {
  return Cfg.FreeMeasure && !A.OriginalOnly && K.hasVariants() &&
         !K.Disabled.load(std::memory_order_relaxed);
}

void markFreeKnown(KernelEntry &K, uint64_t H) {
  uint32_t I = K.FreeKnownNext.fetch_add(1, std::memory_order_relaxed);
  K.FreeKnown[I % KernelEntry::FreeKnownWays].store(H, std::memory_order_relaxed);
}
} // namespace

bool Runtime::Impl::freeMeasureWanted(KernelEntry &K, const LaunchArgs &A) {
  if (!freeMeasurable(Cfg, K, A) || freeKnown(K, shapeHash(A)))
    return false;
  // A shape not known to be complete: a look at most once per poll period
  // (it costs a context lookup and the profile's lock).
  const uint64_t Now = monotonicNs();
  uint64_t Next = Co.FreeMeasureNextNs.load(std::memory_order_relaxed);
  if (Now < Next)
    return false;
  FreeLookDue = Co.FreeMeasureNextNs.compare_exchange_strong(
      Next, Now + Coordination::FreeMeasurePollNs, std::memory_order_relaxed);
  return FreeLookDue;
}

void Runtime::Impl::collectFreeMeasurements() {
  // (Queries made while another thread captures a graph in global mode
  // would end its capture.)
  RelaxedCaptureGuard Relax(D);
  std::vector<FreeMeasurement> &All = Co.FreeMeasures;
  for (size_t I = 0; I < All.size();) {
    FreeMeasurement &M = All[I];
    if (!M.C->Dead.load(std::memory_order_acquire)) {
      CUresult Q = D.cuEventQuery(M.End);
      if (Q == CUDA_ERROR_NOT_READY) {
        ++I;
        continue;
      }
      float Ms = 0;
      if (Q == CUDA_SUCCESS && D.cuEventElapsedTime(&Ms, M.Start, M.End) == CUDA_SUCCESS &&
          Ms > 0) {
        const uint64_t Now = monotonicNs();
        std::lock_guard<std::mutex> G(Co.PolMu);
        Co.Pol->observe(Now, observeHp(Now));
        if (Co.Pol->arrivals() != M.Arrivals ||
            Co.Preemptions.load(std::memory_order_relaxed) != M.Preemptions) {
          // HP came by: the time says nothing about the form alone.
          if (!M.Check)
            Co.FreeDiscarded.fetch_add(1, std::memory_order_relaxed);
        } else if (M.Check) {
          // A short launch, timed while HP was idle: still within the
          // target? (Admitted with a quarter to spare; revoked when it
          // keeps missing.) What HP would wait for: the whole original
          // (with BlocksFirst one of its waves), or one slice. (Several
          // checks of a shape may be in flight: those read after one
          // revoked it are not counted.)
          if (!Co.Pol->besideRevoked(M.Shape.Key)) {
            Co.BesideChecks.fetch_add(1, std::memory_order_relaxed);
            const uint64_t Ns = static_cast<uint64_t>(
                Co.Pol->waitUs(M.Shape, M.Pick, static_cast<uint64_t>(double(Ms) * 1e6)) * 1e3);
            if (Co.Pol->besideChecked(M.Shape.Key, Ns))
              Co.BesideRevoked.fetch_add(1, std::memory_order_relaxed);
          }
        } else {
          Co.Pol->measured(M.Shape, M.Pick, static_cast<uint64_t>(double(Ms) * 1e6));
          Co.Measured.fetch_add(1, std::memory_order_relaxed);
          Co.FreeMeasured.fetch_add(1, std::memory_order_relaxed);
        }
      }
      giveBackTimingEvents(*M.C, M.Start, M.End); // a recorded event may be recorded again
    } // (a dead context took its events with it)
    All.erase(All.begin() + static_cast<std::ptrdiff_t>(I));
  }
}

void Runtime::Impl::giveBackTimingEvents(ContextState &C, CUevent Start, CUevent End) {
  std::lock_guard<std::mutex> G(C.Mu);
  for (CUevent E : {Start, End})
    if (E)
      C.FreeTimingEvents.push_back(E);
}

bool Runtime::Impl::timingSlot(const ContextState &C, CUstream S) const {
  // All on one stream of one context, whose launches run one after the
  // other, so each time is its own (kernels of the program's other streams
  // may still overlap one). Each thread's per-thread stream has one handle:
  // there, only while nothing else is in flight.
  if (S == CU_STREAM_PER_THREAD)
    return Co.FreeMeasures.empty();
  if (Co.FreeMeasures.size() >= Coordination::FreeMeasureMax)
    return false;
  for (const FreeMeasurement &P : Co.FreeMeasures)
    if (P.S != S || P.C != &C)
      return false;
  return true;
}

bool Runtime::Impl::measureFree(KernelEntry &K, const LaunchArgs &A, PassThrough Original,
                                ContextState &C, CUstream S, Form &F, Timing *T, CUresult &R) {
  const bool Due = FreeLookDue;
  FreeLookDue = false;
  // (The look may be due for another kernel's launch of this thread.)
  if (!Due || !freeMeasurable(Cfg, K, A) ||
      Co.FreeMeasures.size() >= Coordination::FreeMeasureMax)
    return false;
  const uint64_t H = shapeHash(A);
  if (freeKnown(K, H))
    return false;
  // One measurement in flight per shape, all on one stream (timingSlot),
  // never the per-thread one.
  if (S == CU_STREAM_PER_THREAD || !timingSlot(C, S))
    return false;
  for (const FreeMeasurement &P : Co.FreeMeasures)
    if (P.K == &K && P.Hash == H)
      return false;
  RelaxedCaptureGuard Relax(D);
  const bool OffMps = Co.HpOffMps.load(std::memory_order_relaxed);
  const bool Beside = Co.Mps && Cfg.Beside && !OffMps;
  LaunchShape Sh;
  if (!launchShape(K, A, C, /*Variants=*/true, Beside, OffMps, Sh)) {
    markFreeKnown(K, H);
    return false;
  }
  FreeMeasurement M;
  {
    std::lock_guard<std::mutex> G(Co.PolMu);
    M.Pick = Co.Pol->choose(Sh);
    if (!M.Pick.Measuring || M.Pick.F == Form::Slice) {
      // Complete: originals at full speed from here on. Or slices are due,
      // which are measured as they run in Guarded mode (one at a time,
      // each once the last ended: the program held) and so are left to
      // Guarded mode; the shape's rest is measured there.
      markFreeKnown(K, H);
      return false;
    }
    const uint64_t Now = monotonicNs();
    Co.Pol->observe(Now, observeHp(Now));
    M.Arrivals = Co.Pol->arrivals();
  }
  M.Preemptions = Co.Preemptions.load(std::memory_order_relaxed);
  M.C = &C;
  M.S = S;
  M.K = &K;
  M.Hash = H;
  M.Start = acquireEvent(C, true);
  M.End = acquireEvent(C, true);
  auto GiveBack = [&] { giveBackTimingEvents(C, M.Start, M.End); };
  if (!M.Start || !M.End || D.cuEventRecord(M.Start, S) != CUDA_SUCCESS) {
    GiveBack();
    return false;
  }
  M.Shape = std::move(Sh);
  F = M.Pick.F;
  if (T)
    startTiming(*T, K, F, C, S);
  Co.FreeMeasureLaunches.fetch_add(1, std::memory_order_relaxed);
  const Choice Pick = M.Pick;
  R = launchForm(K, A, Original, C, S, F, &Pick, /*Scheduled=*/true, /*Paced=*/false);
  // (A variant that failed to launch went to the original: not this
  // candidate's time.)
  if (R == CUDA_SUCCESS && F == Pick.F && D.cuEventRecord(M.End, S) == CUDA_SUCCESS)
    Co.FreeMeasures.push_back(std::move(M));
  else
    GiveBack();
  return true;
}

CUresult Runtime::Impl::launchBe(KernelEntry &K, const LaunchArgs &A, PassThrough Original,
                                 ContextState &C, CUstream S, Form &F, Timing *T) {
  std::lock_guard<std::mutex> BeLock(Co.BeMu);
  // With fewer hardware work queues than Config::WorkQueues nothing goes
  // behind a preemptible launch's gate, in any mode (Free, launch bound,
  // measuring, Guarded): on an H200 under MPS, launches queued there kept
  // a preempted launch's resumption from ever starting (twenty-third
  // round). So a launch first waits for the latest such launch to have
  // passed its gate (on any stream: the wait is rare, at most once per
  // preemptible launch), and one that becomes such a launch is marked.
  waitForGate(C);
  C.LaunchGated = false;
  CUresult R = launchBeLocked(K, A, Original, C, S, F, T);
  if (C.LaunchGated && R == CUDA_SUCCESS && Cfg.WorkQueuesAsked < Config::WorkQueues) {
    RelaxedCaptureGuard Relax(D);
    if (!C.GateDone && D.cuEventCreate(&C.GateDone, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
      C.GateDone = nullptr;
    // (No event: the next launch cannot see the gate pass and goes on; the
    // queue budget still queues nothing behind it, below.)
    if (C.GateDone && D.cuEventRecord(C.GateDone, S) == CUDA_SUCCESS) {
      C.GateDoneRecorded = true;
      GatesPending.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return R;
}

void Runtime::Impl::waitForGate(ContextState &C) {
  if (!C.GateDoneRecorded)
    return;
  bool Waited = false;
  holdUntil(
      [&] {
        const bool Pending = D.cuEventQuery(C.GateDone) == CUDA_ERROR_NOT_READY;
        Waited |= Pending;
        return Pending;
      },
      /*HpMatters=*/false);
  if (Waited)
    Co.GateWaits.fetch_add(1, std::memory_order_relaxed);
  C.GateDoneRecorded = false;
  GatesPending.fetch_sub(1, std::memory_order_relaxed);
}

CUresult Runtime::Impl::launchBeLocked(KernelEntry &K, const LaunchArgs &A, PassThrough Original,
                                       ContextState &C, CUstream S, Form &F, Timing *T) {
  beginBeLaunch(); // this launch's bound on holds (--max-hold-us) starts afresh
  Policy::Mode Mode;
  bool Bound = false;
  observeBusy(&Mode, nullptr, &Bound);
  if (!Co.FreeMeasures.empty())
    collectFreeMeasurements();
  if (Mode == Policy::Mode::Free && !Cfg.Forced) {
    // The profile filled while HP is away: a launch of a shape whose forms
    // are not all measured runs the candidate due, timed, not held.
    CUresult R = CUDA_SUCCESS;
    if (measureFree(K, A, Original, C, S, F, T, R))
      return R;
  }
  if (Mode == Policy::Mode::Free || (Bound && !Cfg.Forced)) {
    // No HP work to protect: the original at full speed, untracked; or the
    // forced form, launched as in one process (a PTB launch is still
    // watched, in case HP arrives while it runs). Or every HP process is
    // launch bound (Policy::launchBound): the original at full speed beside
    // it too, as an MPS client of below-normal priority, whose blocks the
    // GPU starts after HP's; neither held nor paced by the queue budget
    // (measured with both: eager training beside an eager ResNet-50
    // service kept 0.70 of its speed with the budget, 0.97 without).
    if (Mode == Policy::Mode::Free)
      Co.FullSpeed.fetch_add(1, std::memory_order_relaxed);
    else
      Co.LaunchBoundStarts.fetch_add(1, std::memory_order_relaxed);
    F = Cfg.Forced ? choose(K, A) : Form::Original;
    if (T)
      startTiming(*T, K, F, C, S);
    return launchForm(K, A, Original, C, S, F, nullptr, /*Scheduled=*/true, /*Paced=*/false);
  }
  HoldingForGuard Holding(K);
  GuardedCallTimer Timer(Co);
  // One BE launch at a time, each after HP has been idle for the window;
  // with a queue budget, launches whose wait is known may queue (below);
  // under MPS, short originals need not wait for HP (besideOk).
  const bool Waited = Co.Measure.Active;
  if (Waited)
    holdWhileHpBusy(C, /*HpMatters=*/false); // the measured launch must end first
  finishMeasurement();
  if (Waited)
    observeBusy(nullptr); // a fresh look after that wait (HpOffMps)
  // (The default budget counts on HP's blocks going first: not while an
  // HP process is time-sliced against this one.)
  const bool OffMps = Co.HpOffMps.load(std::memory_order_relaxed);
  const bool Queue = Co.QueueUs.load(std::memory_order_relaxed) && !C.BeQueueBroken &&
                     !(Co.QueueDefault && OffMps);
  if (!C.BeStart || !C.BeDone) {
    RelaxedCaptureGuard Relax(D);
    if (!C.BeStart && D.cuEventCreate(&C.BeStart, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
      C.BeStart = nullptr;
    if (!C.BeDone && D.cuEventCreate(&C.BeDone, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
      C.BeDone = nullptr;
    if (!C.BeStart || !C.BeDone) {
      holdWhileHpBusy(C);
      F = Form::Original;
      if (T)
        startTiming(*T, K, F, C, S);
      return Original();
    }
  }
  Choice Pick;
  bool Decided = false;
  LaunchShape Sh;
  const bool Beside = Co.Mps && Cfg.Beside && !OffMps;
  Choice Prov;
  bool Provisional = false;
  // (With Co.PolMu held.)
  auto GoProvisional = [&] {
    Co.Pol->notMeasuring(); // no launch measuring after all
    Pick = Prov;
    F = Form::Ptb;
    Provisional = true;
    LaunchMayLeave = false;
    Co.Measure.Active = false;
  };
  // A launch only the original can make (a cluster, a cooperative launch:
  // cuBLAS's and cuDNN's Hopper kernels come so) is one of a kernel
  // without variants.
  const bool Variants =
      !A.OriginalOnly && K.hasVariants() && !K.Disabled.load(std::memory_order_relaxed);
  if (Cfg.Forced) {
    F = choose(K, A);
  } else if (!Variants && !Beside) {
    F = Form::Original;
  } else {
    // Kernels without variants are measured too under MPS: a short one
    // may run beside HP.
    if (!launchShape(K, A, C, Variants, Beside, OffMps, Sh)) {
      F = Form::Original;
    } else {
      std::lock_guard<std::mutex> G(Co.PolMu);
      Pick = Co.Pol->choose(Sh);
      F = Pick.F;
      Decided = true;
      // A measurement waits for HP to be idle; while an HP request runs, a
      // shape with a PTB variant starts at once instead, narrow beside HP
      // (Policy::provisional; Beside: every HP process an MPS client).
      if (Pick.Measuring && Beside && Co.Pol->provisional(Sh, Prov)) {
        if (Co.Pol->hpActive())
          GoProvisional();
        else
          LaunchMayLeave = true; // (a hold for the idle window may end so)
      }
      if (Pick.Measuring) {
        Co.Measure.Active = true;
        Co.Measure.C = &C;
        Co.Measure.Shape = Sh;
        Co.Measure.Pick = Pick;
      }
    }
  }
  bool Short = false; // may start while HP is busy
  bool Small = false; // for its size (besideSmall): its time is not checked
  if (Beside && Decided && !Pick.Measuring) {
    std::lock_guard<std::mutex> G(Co.PolMu);
    Short = Co.Pol->besideOk(Sh, Pick);
    Small = !Short && Co.Pol->besideSmall(Sh, Pick);
  }
  // A PTB launch runs beside HP with part of its workers (launchPtb) rather
  // than waiting for HP to be idle.
  bool NarrowPtb = Decided && Pick.F == Form::Ptb && !Pick.Measuring &&
                   Co.Pol->config().BesidePtbPercent > 0 && // the config never changes
                   !OffMps;
  // Every 16th short launch is timed (the next one made while HP is idle):
  // a kernel whose time depends on its arguments, not only on its shape,
  // loses the right to run beside HP.
  if (Short && Co.ShortLaunches++ % 16 == 0)
    Co.CheckDue = true;
  Short |= Small;
  uint64_t WaitNs = UINT64_MAX; // what this launch may make HP wait
  if (Queue && Decided && !Pick.Measuring) {
    std::lock_guard<std::mutex> G(Co.PolMu);
    WaitNs = Co.Pol->queuedWaitNs(Sh, Pick);
    if (!WaitNs)
      WaitNs = UINT64_MAX;
  }
  if (Queue && WaitNs != UINT64_MAX)
    holdForQueue(C, S, WaitNs, /*HpMatters=*/!Short && !NarrowPtb);
  else // alone (unmeasured, measuring, no budget)
    holdWhileHpBusy(C, /*HpMatters=*/!Short && !NarrowPtb);
  if (LaunchLeft) {
    // Held for HP's idle window to be measured, HP came again: narrow
    // beside it now (the previous launch has ended: holdWhileHpBusy waits
    // for that first).
    std::lock_guard<std::mutex> G(Co.PolMu);
    GoProvisional();
    NarrowPtb = true;
  }
  LaunchMayLeave = false;
  const bool Cut = holdCut();
  if (Cut && Decided && (Pick.Measuring || (F == Form::Ptb && !NarrowPtb) || F == Form::Slice)) {
    // Waited --max-hold-us for HP: it starts beside HP, as the original.
    // Not as a measurement (its time beside HP says nothing of the form;
    // the candidate is measured at a later launch made while HP is idle),
    // nor as a PTB launch that would be stopped at once for HP and wait
    // again, nor as slices, each of which would wait for HP.
    if (Pick.Measuring)
      Co.Measure.Active = false;
    Pick = Choice{};
    F = Form::Original;
  }
  FreeMeasurement Check; // a short launch timed again (Check.C: one)
  if (Short && observeBusy(nullptr)) {
    Co.BesideLaunches.fetch_add(1, std::memory_order_relaxed);
    if (Small)
      Co.BesideSmall.fetch_add(1, std::memory_order_relaxed);
  } else if (Short && !Small && Co.CheckDue && timingSlot(C, S)) {
    // Timed with HP idle, as it was measured: beside HP its time includes
    // waiting for room on the SMs, which says nothing about the kernel.
    // Read by a later launch once it has ended, never waited for: before
    // 2026-11-28 the next launch waited for it to end, and the GPU ran
    // dry behind every 16th short launch (be-spin's 10 us blocks chosen
    // for their waves kept 0.92 of their speed beside HP at a tenth of its
    // load, against 0.98 with the scheduler off).
    Co.CheckDue = false;
    RelaxedCaptureGuard Relax(D);
    Check.Start = acquireEvent(C, true);
    Check.End = acquireEvent(C, true);
    if (Check.Start && Check.End && D.cuEventRecord(Check.Start, S) == CUDA_SUCCESS) {
      Check.Check = true;
      Check.C = &C;
      Check.S = S;
      Check.K = &K;
      Check.Hash = shapeHash(A);
      Check.Shape = Sh;
      Check.Pick = Pick;
      std::lock_guard<std::mutex> G(Co.PolMu);
      const uint64_t Now = monotonicNs();
      Co.Pol->observe(Now, observeHp(Now));
      Check.Arrivals = Co.Pol->arrivals();
      Check.Preemptions = Co.Preemptions.load(std::memory_order_relaxed);
    } else {
      giveBackTimingEvents(C, Check.Start, Check.End);
      Check = FreeMeasurement{};
    }
  }
  if (Co.Measure.Active) {
    // The measurement counts HP arrivals from now, not from the choice.
    std::lock_guard<std::mutex> G(Co.PolMu);
    Co.Pol->observe(monotonicNs(), observeHp(monotonicNs()));
    Co.Measure.Arrivals = Co.Pol->arrivals();
    Co.Measure.Preemptions = Co.Preemptions.load(std::memory_order_relaxed);
  }
  bool Timed = Co.Measure.Active;
  if (Timed && D.cuEventRecord(C.BeStart, S) != CUDA_SUCCESS)
    Co.Measure.Active = Timed = false;
  if (T)
    startTiming(*T, K, F, C, S); // after the holds: the launch's own time
  C.SlicesBeside = Short && F == Form::Slice;
  // (queuedWait, in the holds above, forgot the queued launches seen ended.)
  C.LaunchBehind = Queue && !C.BeQueue.empty();
  // From here an HP arrival during this launch counts once (the holds
  // between its slices included).
  C.BeOverlapCounted = false;
  CUresult R = launchForm(K, A, Original, C, S, F, Decided ? &Pick : nullptr,
                          /*Scheduled=*/true, /*Paced=*/true);
  if (Check.C) {
    // (A launch that fell back to another form is not this form's time.)
    if (R == CUDA_SUCCESS && F == Pick.F && D.cuEventRecord(Check.End, S) == CUDA_SUCCESS)
      Co.FreeMeasures.push_back(std::move(Check));
    else
      giveBackTimingEvents(C, Check.Start, Check.End);
  }
  C.SlicesBeside = false;
  C.LaunchBehind = false;
  if (Provisional && F == Form::Ptb) // (not when it fell back to the original)
    Co.ProvisionalLaunches.fetch_add(1, std::memory_order_relaxed);
  if (D.cuEventRecord(C.BeDone, S) == CUDA_SUCCESS)
    C.BeDoneRecorded = true;
  else
    Co.Measure.Active = false;
  C.BeLastPreemptible = F == Form::Ptb;
  if (Queue) {
    // A failed launch (some slices may have run) queues nothing behind it.
    bool Unknown =
        R != CUDA_SUCCESS || Timed || Cut || F == Form::Slice || (Decided && F != Pick.F);
    // With fewer hardware work queues than Config::WorkQueues, nothing
    // goes behind a launch's gate on its stream: on an H200 under MPS,
    // launches queued there kept a preempted launch's resumption from
    // ever starting (be-spin with every PTB launch leaving for HP and 2
    // queues hung in 2 of 2 runs with the queue, none of 4 without it,
    // twenty-third round; why is not known).
    if (C.LaunchGated && R == CUDA_SUCCESS && Cfg.WorkQueuesAsked < Config::WorkQueues) {
      if (!Unknown)
        Co.GatesNotQueuedBehind.fetch_add(1, std::memory_order_relaxed);
      Unknown = true;
    }
    queueBe(C, S, Unknown ? UINT64_MAX : WaitNs);
    queuedWait(C); // forget what already ended
  }
  if (R != CUDA_SUCCESS)
    Co.Measure.Active = false;
  else if (Decided && Variants && uint64_t(A.Grid[0]) * A.Grid[1] * A.Grid[2] < uint64_t(C.SMs))
    Co.SmallGrid[static_cast<int>(F)].fetch_add(1, std::memory_order_relaxed);
  return R;
}

//===----------------------------------------------------------------------===//
// The runtime thread's part: preempting a PTB launch when HP arrives
//===----------------------------------------------------------------------===//

void Runtime::Impl::scheduled(PtbLaunch &L) {
  using Clock = std::chrono::steady_clock;
  ContextState &C = *L.C;
  if (C.Dead.load(std::memory_order_acquire) || D.cuCtxSetCurrent(C.Ctx) != CUDA_SUCCESS)
    return;
  while (true) {
    // Watch until the launch ends on its own, or it must change: HP shows
    // up while it runs wide (it leaves, or narrows beside HP under MPS), or
    // HP has been quiet for the widen window while it runs narrow (it takes
    // its workers back). Only when no program thread is in a call that may
    // wait for it holding the driver's lock (the drain lock, Launcher.cpp;
    // held until the resumption is queued).
    std::unique_lock<std::shared_mutex> Excl(Drain, std::defer_lock);
    bool Counted = false, Widening = false;
    // A launch narrow only for being queued is widened after the widen
    // window of its own: a short one ends narrow rather than paying for a
    // preemption and a relaunch.
    const auto Watched = Clock::now();
    const auto OwnWindow = std::chrono::nanoseconds(Co.Pol->widenNs());
    // Armed only while it runs wide, when HP is quiet: under MPS a wait
    // pending on the signal stream slowed HP's requests by about 20 us at
    // the median beside a narrow launch (2026-11-25), whose flag goes up
    // only to widen it, which is not urgent. Not when HP is busy already
    // (the flag goes up at once). (An ended launch needs none: its release
    // is queued.)
    if (L.ArmSeq && !runsNarrow(L) && !observeBusy(nullptr) &&
        D.cuEventQuery(L.End) == CUDA_ERROR_NOT_READY)
      armFlag(L);
    for (unsigned Spin = 0;; ++Spin) {
      bool LoadWait = false; // a code load's stall puts the flag off (below)
      if (C.Dead.load(std::memory_order_acquire))
        return; // destroyed behind the runtime's back: nothing to watch
      CUresult Q = D.cuEventQuery(L.End);
      if (Q != CUDA_ERROR_NOT_READY)
        return; // ended with every block done (or the context is gone)
      if (L.Resumed && (Spin & 1023) == 1023 && Clock::now() - Watched > std::chrono::seconds(2)) {
        noteStuckResumption(L); // (says it once a process)
        describeStuck(L, "end (watched)");
      }
      // Narrow beside HP only while every HP process is an MPS client (as
      // of the last look; one that is not makes a narrow launch leave).
      const bool Narrowed = runsNarrow(L);
      bool Widen = false;
      bool Busy = observeBusy(nullptr, Narrowed ? &Widen : nullptr);
      Widening = Narrowed && Widen && L.Workers < L.Wide &&
                 (!L.QueuedNarrow || Clock::now() - Watched >= OwnWindow);
      if ((Busy && !Narrowed) || Widening) {
        // Not while a code load's stall is pending (loadEarly): the
        // resumption would be stalled behind it, and the stall behind the
        // launch's gate. (Looked at with the lock held: a load is made
        // under the drain lock, its event listed before it is let go.)
        LoadWait = !loadsSettled(); // (first without the lock: no hot loop on it)
        if (!LoadWait && Excl.try_lock()) {
          if (loadsSettled())
            break;
          Excl.unlock();
          LoadWait = true;
        }
        if (!Counted && !Widening) {
          if (LoadWait)
            LoadDeferred.fetch_add(1, std::memory_order_relaxed);
          else
            deferred(L);
        }
        Counted = true;
      }
      if ((Narrowed && Busy) || LoadWait) // (only a widen can come; the stall lasts)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      else if ((Spin & 255) == 255)
        std::this_thread::yield();
      else
        cpuRelax();
    }
    // Raise the flag, ordered after the (re)launch's clear of the block:
    // armed, by releasing the write queued behind the wait (one store; the
    // fence sends it on its way); else by queueing the write now (also
    // behind a wait whose write failed, released first).
    auto Raised = Clock::now();
    bool Armed = L.ArmQueued, Recorded = Armed && L.ArmRecorded;
    if (Armed) {
      __atomic_store_n(L.Arm.Host, L.ArmSeq, __ATOMIC_RELEASE);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      L.ArmQueued = false;
    }
    if (!(Armed && L.ArmWrite) &&
        (D.cuStreamWaitEvent(C.Signal, L.Start, 0) != CUDA_SUCCESS ||
         D.cuStreamWriteValue32(C.Signal, L.Ctrl + 4, 1, CU_STREAM_WRITE_VALUE_DEFAULT) !=
             CUDA_SUCCESS))
      return; // not raised: it completes on its own
    PreemptTimes Times;
    uint32_t Done = 0;
    if (!collectPreempted(L, Raised, Times, Done, Recorded))
      return;
    if (Done >= L.Blocks)
      return; // finished before the flag was seen
    // Resume once HP has been idle for the window (at exit: at once).
    auto WaitForIdle = [&] {
      for (unsigned Spin = 0; observeBusy(nullptr) && !Shut.load(std::memory_order_relaxed);
           ++Spin) {
        if (Spin < 2000)
          cpuRelax();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(10));
      }
    };
    if (Widening) {
      // Not a preemption for HP's sake.
      if (!observeBusy(nullptr)) {
        // HP is quiet: every worker back.
        L.Workers = L.Wide;
        L.QueuedNarrow = false;
        Co.Widened.fetch_add(1, std::memory_order_relaxed);
      } else if (Co.HpOffMps.load(std::memory_order_relaxed)) {
        // HP came back, time-sliced against this process: not beside it.
        WaitForIdle();
        L.Workers = L.Wide;
      }
      // Else HP came back while the workers left: narrow again.
    } else {
      L.K->Preemptions.fetch_add(1, std::memory_order_relaxed);
      Co.Preemptions.fetch_add(1, std::memory_order_relaxed);
      Co.Seg->addPreemption();
      notePreemption(Times);
      if (L.Narrow && !Co.HpOffMps.load(std::memory_order_relaxed)) {
        // Under MPS: back at once beside HP, with part of the workers.
        L.Workers = L.Narrow;
        Co.Narrowed.fetch_add(1, std::memory_order_relaxed);
      } else {
        WaitForIdle();
        if (L.Narrow)
          L.Workers = L.Wide; // (an HP process that is no MPS client came)
      }
    }
    if (!resumeOrRelease(L, Done, /*Resumption=*/!Widening) || L.Lost)
      return;
  }
}

} // namespace tally::rt
