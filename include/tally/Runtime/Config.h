//===- Config.h - the runtime's settings from TALLY_* variables --*- C++ -*-===//
//
// `tally run` passes its options to the runtime as environment variables;
// LD_PRELOAD=libtally.so with the same variables does the same by hand.
// Every value is checked: a bad one disables the runtime (the program runs
// as without Tally) with one error line naming the variable.
//
//   TALLY_PRIORITY   high | best-effort (default best-effort)
//   TALLY_FORCE      original | slice | ptb: every kernel that has the form
//                    runs in it (default: automatic)
//   TALLY_FORCE_ONLY  an extended regular expression (POSIX): TALLY_FORCE
//                    applies only to kernels whose name (as the driver
//                    gives it, mangled) it matches anywhere; the others run
//                    as originals. For finding which kernel's variant is at
//                    fault (default: every kernel)
//   TALLY_PREEMPT    random:N: preempt each PTB launch at up to N random
//                    points and resume it (N 1..1000)
//   TALLY_SEED       seed of the random preemption points (default 1)
//   TALLY_STATS      1 (table on stderr at exit) or a file for the JSON too
//   TALLY_STATS_TIMING  0: the statistics count launches but do not time
//                    them (no events around each launch); 1: time every
//                    launch (default in BE processes); N (2..1000000):
//                    time the first launch and then one in N of each
//                    kernel in each form, and estimate the rest from them
//                    (default 0 in HP processes)
//   TALLY_LOG_LEVEL  error | warn | info | debug (default warn)
//   TALLY_PTB_CHUNK  logical blocks a PTB worker claims at once (default 1)
//   TALLY_PTB_WORKERS_PER_SM  at most this many PTB workers per SM (default:
//                    as many as fit)
//   TALLY_SLICE_BLOCKS  blocks per slice (default: one wave of the variant)
//   TALLY_TURNAROUND_US  how long an arriving HP kernel may wait for BE
//                    work (default 31.6): the profile-guided choice's target
//   TALLY_IDLE_US    BE work starts or resumes after HP was idle this long
//                    (default 100)
//   TALLY_BESIDE_WAVE_US  as an MPS client of below-normal priority, a
//                    kernel whose original runs in waves of at most this
//                    long is run as the original beside HP (default 0:
//                    chosen by the original's whole time only)
//   TALLY_SILENCE_MS after this long without HP activity BE kernels run as
//                    originals at full speed (default 100)
//   TALLY_SHM_DIR    where the per-GPU segment lives (default /dev/shm)
//   TALLY_SCHEDULE   0: no cross-process scheduling (default 1)
//   TALLY_HP_COMPLETION  burst (default): the GPU writes HP launches' ends
//                    into the segment from a side stream behind an event,
//                    at most one write per TALLY_HP_BURST_US of launches on
//                    one stream, the last of a burst written by a runtime
//                    thread; side: every launch's end that way; gpu: from
//                    the launch's own stream; host: a host function (for
//                    measurements)
//   TALLY_HP_BURST_US  burst: the shortest time between two completion
//                    writes (default 100)
//   TALLY_PROFILE_CACHE  0: do not read or write the profile cache (default 1)
//   TALLY_CACHE_DIR  the profile cache's folder (default
//                    $XDG_CACHE_HOME/tally or ~/.cache/tally)
//   TALLY_RUNTIME_PTX  auto | 1 | 0: give PTX loaded at run time
//                    (cuModuleLoadData(Ex), cuLibraryLoadData, cuLinkAddData)
//                    Tally's variants before the driver compiles it; auto
//                    (default): in best-effort processes and when a form is
//                    forced (docs/ptx-cache.md)
//   TALLY_OPT        the tally-opt that transforms it (default: ../bin/
//                    tally-opt beside libtally.so; `tally run` sets it)
//   TALLY_PTX_TIMEOUT_S  how long one transformation may take before the
//                    module is loaded as it is (default 120)
//   TALLY_DRIVER     the driver library to open (default libcuda.so.1)
//   TALLY_DISABLE    1: pass every call through untouched
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_CONFIG_H
#define TALLY_RUNTIME_CONFIG_H

#include <cstdint>
#include <string>

namespace tally::rt {

enum class Priority { High, BestEffort };
enum class Form { Original, Slice, Ptb };
/// How an HP process reports the end of each launch to the others.
/// None: no report (each launch counts as ended as soon as it is queued),
/// a diagnostic that leaves BE unprotected.
enum class CompletionPath { Gpu, Side, Host, Burst, None };
enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };
enum class RuntimePtxMode { Auto, On, Off };

const char *formName(Form F);

struct Config {
  bool Enabled = true;
  Priority Prio = Priority::BestEffort;
  bool Forced = false;
  Form Force = Form::Original;
  std::string ForceOnly; ///< "" = every kernel (a checked regular expression)
  unsigned RandomPreemptions = 0; ///< 0: no random preemption
  uint64_t Seed = 1;
  bool Stats = false;
  std::string StatsFile; ///< JSON destination ("" = table only)
  /// The process `tally run` started (TALLY_STATS_PID, set by it); 0 when
  /// unknown. Another process (a child that inherited the settings) writes
  /// its JSON beside StatsFile, under its own pid (statsFileFor).
  uint64_t StatsOwnerPid = 0;
  /// GPU time per kernel (two events per launch). Default: on in BE
  /// processes, off in HP ones (it raised hp-serve's median latency by half
  /// on an H100).
  bool StatsTiming = true;
  /// With StatsTiming: one launch in this many of each kernel is timed.
  uint32_t StatsTimingEvery = 1;
  /// HP with Stats: a thread spins on the completion word to time each
  /// launch's turnaround (off by default: a core spinning beside the
  /// service).
  bool StatsTurnaround = false;
  LogLevel Level = LogLevel::Warn;
  uint32_t PtbChunk = 1;
  uint32_t PtbWorkersPerSM = 0; ///< 0: as many as fit (the occupancy)
  uint32_t SliceBlocks = 0; ///< 0: one wave
  std::string DriverPath = "libcuda.so.1";
  double TurnaroundUs = 31.6;
  uint64_t IdleUs = 100;
  uint64_t SilenceMs = 100;
  /// Guarded mode: BE may queue launches while HP is idle as long as the
  /// estimated time of the queued work stays within this (0: one launch at
  /// a time). As given (QueueUsGiven); otherwise the budget in use, which
  /// the runtime decides when it joins (Coordination::QueueUs; this field
  /// stays 0), is MpsQueueUs for a BE process that is an MPS client of
  /// below-normal priority (the GPU then starts HP's waiting blocks before
  /// any of BE's queued ones), else 0.
  uint64_t QueueUs = 0;
  bool QueueUsGiven = false;
  /// Guarded mode: a BE launch waits for HP to be idle at most this long,
  /// then starts beside HP (0: no bound; it waits until HP is idle). For a
  /// service that is never idle for the window long (an eager PyTorch
  /// service launches for most of each request), kernels that cannot be
  /// stopped would otherwise wait for most of the time.
  uint64_t MaxHoldUs = 0;
  /// Under MPS as a client of below-normal priority: while every HP
  /// process waits for the GPU less than this percentage of its requests'
  /// time (a launch-bound service, such as eager PyTorch at batch 1, whose
  /// requests are mostly the host issuing launches), launches that would
  /// wait for HP to be idle start beside it instead, and the GPU's block
  /// priority keeps them out of HP's way. 0: they always wait. (Measured on
  /// an H100, 2026-11-25: eager training beside eager ResNet-50 and BERT
  /// services kept 0.23-0.31 of its speed held and 0.96-0.97 not held,
  /// HP's median within the runs' spread.)
  uint32_t HpWaitSharePercent = 25;
  /// The queue budget of a below-normal-priority MPS client, measured on an
  /// H100 beside an HP service at half load: the CUDA training example kept
  /// 0.40 of its speed one launch at a time, 0.54 with 150 us and 0.56 with
  /// 1000 us (10 s, HP's p50 the same in all three); the Triton training,
  /// its profile warm, 0.55-0.63 with 200 us and 0.70-0.72 with 1000 us
  /// (four and three runs, HP's p50 227.5 and 231.6 us at the median), and
  /// be-spin of 10 and 100 us blocks the same with both (HP's p50 beside
  /// 10 us blocks 3 % higher).
  static constexpr uint64_t MpsQueueUs = 1000;
  /// The hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS) `tally run`
  /// asks for in a best-effort process where the variable is not set. On
  /// an H200 under MPS, be-spin with every PTB launch leaving for HP hung
  /// in every run with 2 queues (13 of 13) and in 4 of 6 with the default,
  /// none of 6 with 32: a resumption's kernel never started (the event
  /// before it on its stream completed, and so did a write there), nor did
  /// the flag's write on the signal stream. It needed launches queued
  /// behind the preempted launch's gate (the queue budget): without them
  /// (TALLY_QUEUE_US=0, or a client of normal priority, which has no
  /// budget) none of 4 runs with 2 queues hung (twenty-third round). Why is
  /// not known: in benchmarks/gpu/gate-queues.cu a stream waiting at a
  /// gate, with kernels and further gates queued behind it, held up no
  /// other stream's writes or kernels with 2, 8 or 32 queues. So with fewer
  /// than this many queues asked for nothing is queued behind a
  /// preemptible launch (launchBe; then none of 10 runs with 2 or 8 queues
  /// hung). The most the driver takes.
  static constexpr int WorkQueues = 32;
  /// CUDA_DEVICE_MAX_CONNECTIONS as the process was started with (0: not
  /// set, or not a whole number). At 1 every stream shares one queue, so a
  /// preemptible PTB launch would hang at its first preemption: PTB
  /// launches that could be preempted run as originals instead.
  int WorkQueuesAsked = 0;
  /// Under MPS, BE launches measured to be short (an original whose time,
  /// with a quarter more, is within TurnaroundUs) may start while HP works:
  /// they run beside it instead of waiting for HP to be idle.
  bool Beside = true;
  /// A BE process measures its kernels' forms in Free mode too (no HP
  /// activity for the silence window): a launch of a shape whose profile is
  /// incomplete runs the candidate due, timed among the program's other
  /// launches without holding it (Runtime::Impl::measureFree), so that the
  /// profile is filled before HP's load comes rather than while it does.
  bool FreeMeasure = true;
  /// Under MPS (with Beside and BesidePtbPercent), a launch of a shape whose
  /// profile is incomplete made while an HP request is running starts at
  /// once as its PTB variant on the share of workers beside HP, never
  /// widened, instead of waiting for HP to be idle to be measured
  /// (Policy::provisional); its forms are measured at launches made while
  /// HP is idle.
  bool Provisional = true;
  /// A scheduled PTB launch's flag write is queued on the signal stream
  /// ahead of time, behind a wait on a word in pinned host memory: raising
  /// the flag is then one store from the host, no driver call (the wait is
  /// also released from the GPU when the launch ends). False: the write is
  /// queued when the flag is raised.
  bool ArmedFlag = true;
  /// For finding the hang with few hardware work queues (WorkQueues):
  /// the priorities of a context's resume and signal streams (AsIs: least
  /// for resume, greatest for a BE process's signal stream, as
  /// ContextState says) and a relaunch on a stream made for it alone
  /// (destroyed behind it) instead of the resume stream. From
  /// TALLY_DEBUG_RESUME_PRIORITY, TALLY_DEBUG_SIGNAL_PRIORITY (least or
  /// greatest) and TALLY_DEBUG_FRESH_RESUME (0 or 1); no `tally run`
  /// options (docs/runtime.md, When something is wrong).
  enum class DebugPriority { AsIs, Least, Greatest };
  DebugPriority DebugResumePriority = DebugPriority::AsIs;
  DebugPriority DebugSignalPriority = DebugPriority::AsIs;
  bool DebugFreshResume = false;
  /// Under MPS (and with Beside), a BE PTB launch keeps this percentage of
  /// a full wave of workers (at least one) while HP works instead of leaving
  /// the GPU: it starts narrow, or is narrowed when HP arrives (0: PTB
  /// launches leave for HP and wait for it to be idle).
  uint32_t BesidePtbPercent = 50;
  /// As an MPS client of below-normal priority (and with Beside): a kernel
  /// whose original runs in waves of at most this many microseconds (its
  /// measured time over its waves) is chosen as the original, which runs
  /// beside HP at full width, rather than a variant: the GPU starts HP's
  /// waiting blocks before any of BE's, so an arriving HP kernel waits for
  /// one such wave at most, and BE is spared a variant's overhead
  /// (Policy::withinTarget). A wave with a quarter more must also be within
  /// TurnaroundUs (so at most 25 us at the default 31.6).
  /// 0 (the default): an original is chosen by its whole time only. Off by
  /// default because HP pays for it: on an H200 beside hp-serve (requests
  /// of 8 one-wave kernels), be-spin's 10 us blocks chosen so (15) kept
  /// 0.88 of BE where narrow PTB launches kept 0.79, but HP's median was
  /// 216 us in both runs against 212 and 208, its p99 880 and 884 against
  /// 867 and 846 (two runs, 2026-11-27); its 22 us blocks chosen so took
  /// HP's median 61 us above narrow PTB launches' on an H100 (2026-11-25).
  uint32_t BesideWaveUs = 0;
  /// A narrow PTB launch gets its full width back once HP has been idle
  /// this long (at least the idle window).
  uint64_t WidenUs = 1000;
  /// A PTB launch that starts narrow beside HP and is expected to end
  /// within this many microseconds on its narrow workers (its profile
  /// time, scaled from its chosen workers) runs without a gate on its
  /// stream and is not watched: nothing stops or widens it. The gate's
  /// wait, pending while the kernel runs, lengthened the gaps between an
  /// HP request's kernels by about 4 us per hp-serve request on an H200
  /// (2026-11-28). 0: every narrow launch is watched.
  uint64_t NarrowUnwatchedUs = 1000;
  std::string ShmDir = "/dev/shm";
  bool Schedule = true;
  bool ProfileCache = true;
  CompletionPath HpCompletion = CompletionPath::Burst;
  /// HpCompletion Burst: launches within this long of the last completion
  /// write get none of their own (a later write, or the runtime thread's
  /// at the end of the burst, covers them).
  uint64_t HpBurstUs = 100;
  RuntimePtxMode RuntimePtx = RuntimePtxMode::Auto;
  std::string TallyOpt; ///< "" = beside libtally.so
  unsigned PtxTimeoutSeconds = 120;

  /// Reads the settings through \p GetEnv (getenv, or a map in tests). On a
  /// bad value returns a config with Enabled = false and \p Error set.
  static Config fromEnvironment(const char *(*GetEnv)(const char *), std::string &Error);
};

/// Where process \p Pid writes the JSON statistics named \p File: File itself
/// when \p Pid is the process `tally run` started (\p OwnerPid) or that is
/// unknown (0); otherwise File with ".PID" before its extension
/// (stats.json -> stats.4242.json; no extension: stats -> stats.4242), so
/// the children of one `tally run` (spawned workers, the ranks of a
/// launcher) do not overwrite one another's.
std::string statsFileFor(const std::string &File, uint64_t OwnerPid, uint64_t Pid);

} // namespace tally::rt

#endif
