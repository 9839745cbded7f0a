//===- RuntimeImpl.h - the runtime's state (private) ------------*- C++ -*-===//
#ifndef TALLY_LIB_RUNTIME_RUNTIMEIMPL_H
#define TALLY_LIB_RUNTIME_RUNTIMEIMPL_H

#include "tally/Runtime/MetadataReader.h"
#include "tally/Runtime/Runtime.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace tally::rt {

void logf(LogLevel L, const char *Fmt, ...) __attribute__((format(printf, 2, 3)));

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
  std::atomic<bool> Warned{false};
  /// A variant failed at run time: the kernel runs as it is from now on.
  std::atomic<bool> Disabled{false};

  std::atomic<uint64_t> Launches[3] = {}; ///< by Form
  std::atomic<uint64_t> Preemptions{0}, Resumptions{0}, Captured{0}, Fallbacks{0};
  std::atomic<uint64_t> GpuNanos{0}, TimedLaunches{0};

  bool hasVariants() const { return Slice || Ptb; }
};

struct ModuleEntry {
  bool IsLibrary = false;
  CUcontext Ctx = nullptr; ///< of a module (dies with it); null for libraries
  bool HasMeta = false;
  ModuleMetadata Meta;
  std::string Problem;
  std::atomic<bool> Warned{false};
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
  CUstream Resume = nullptr; ///< resumptions and internal copies (non-blocking)
  CUstream Signal = nullptr; ///< preemption flags (non-blocking, highest priority)
  std::mutex Mu;
  std::vector<CUdeviceptr> FreeCtrl;
  std::vector<CUevent> FreeEvents, FreeTimingEvents;
  /// Finished launches whose control block is still read by the GPU.
  std::deque<std::unique_ptr<PtbLaunch>> Retiring;
  /// Workers per SM by (variant, threads per block, dynamic shared bytes).
  std::map<std::tuple<CUfunction, unsigned, unsigned>, int> Occupancy;
};

struct Timing {
  CUevent Start = nullptr;
};

struct TimedLaunch {
  KernelEntry *K;
  ContextState *C;
  CUevent Start, End;
};

struct Runtime::Impl {
  Config Cfg;
  DriverTable D;
  void *DriverHandle = nullptr;
  bool VariantsUsable = false, PtbUsable = false;

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

  // The preemptor thread (random preemption; the scheduler's home later).
  std::mutex QMu;
  std::condition_variable QCv;
  std::deque<std::unique_ptr<PtbLaunch>> Queue;
  const PtbLaunch *Current = nullptr;
  bool Stopping = false;
  std::thread Preemptor;
  std::mt19937_64 Rng;
  /// Flag raised to workers gone, host-observed (us), of launches that
  /// were preempted (written by the preemptor thread only).
  std::vector<double> PreemptLatencyUs;

  std::mutex TMu;
  std::deque<TimedLaunch> Timed;

  std::once_flag ExitOnce;
  std::atomic<bool> ExitRegistered{false};
  std::atomic<bool> Shut{false};

  void checkFeatures(const std::string &MissingOptional);
  ContextState *context();
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
  void registerExit();

  // Launcher.cpp
  bool buildParams(const KernelEntry &K, const VariantInfo &V, const LaunchArgs &A,
                   uint32_t SliceOffset, CUdeviceptr Ctrl, std::vector<uint64_t> &Buf,
                   size_t &Bytes);
  int workersPerSM(ContextState &C, CUfunction VF, bool IsKernel, const LaunchArgs &A);
  bool launchPtb(KernelEntry &K, const LaunchArgs &A, ContextState &C, CUstream S, CUresult &R);
  bool launchSliced(KernelEntry &K, const LaunchArgs &A, ContextState &C, CUstream S,
                    CUresult &R);
  CUresult launchVariant(CUfunction VF, unsigned Grid, const unsigned Block[3],
                         unsigned Shared, CUstream S, void *Params, size_t Bytes);
  CUdeviceptr acquireCtrl(ContextState &C);
  CUevent acquireEvent(ContextState &C, bool Timing);
  void reclaim(ContextState &C);
  void retire(std::unique_ptr<PtbLaunch> L);
  void startPreemptor();
  void preemptorLoop();
  void handle(PtbLaunch &L);
  bool waitEvent(CUevent E);
  bool resume(PtbLaunch &L);
  void waitForOwner(void *Owner);
  void waitForContext(const ContextState *C);
  void stopPreemptor();
  Timing timingStart(ContextState *C, CUstream S);
  void timingEnd(ContextState *C, CUstream S, Timing T, KernelEntry *K, bool Launched);
  void harvestTiming(bool All);

  // Stats.cpp
  void writeStats();
};

} // namespace tally::rt

#endif
