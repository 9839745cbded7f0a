//===- Runtime.h - libtally: variants launched in place of kernels -*- C++ -*-===//
//
// The runtime behind the interposed driver entry points (Interpose.cpp).
// For every launch it finds, once per kernel handle, the kernel's name, its
// module or library, the metadata tally-opt embedded there and the sibling
// variants; then it runs the launch in the form the policy picks: the
// original (passed through untouched), sliced (sub-grids in order on the
// application's stream) or PTB (persistent workers that can be preempted
// and resumed, with the application's stream gated on the completion count
// so that later work starts only after every logical block ran).
//
// Whatever fails (a missing driver feature, bad metadata, a variant that
// does not load or launch) makes that kernel run as without Tally, with one
// warning naming it. Nothing here may change a result or stop a program.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_RUNTIME_H
#define TALLY_RUNTIME_RUNTIME_H

#include "tally/Runtime/Config.h"
#include "tally/Runtime/DriverTable.h"

#include <cuda.h>

#include <memory>
#include <string>

namespace tally::rt {

/// One launch as an entry point received it.
struct LaunchArgs {
  CUfunction F = nullptr;
  unsigned Grid[3] = {1, 1, 1};
  unsigned Block[3] = {1, 1, 1};
  unsigned SharedBytes = 0;
  CUstream Stream = nullptr;
  void **Params = nullptr;
  void **Extra = nullptr;
  /// Came through a per-thread-default-stream entry point (_ptsz): a null
  /// stream means CU_STREAM_PER_THREAD.
  bool PerThreadStream = false;
  /// cuLaunchKernelEx attributes that only the original honours
  /// (cooperative, clusters, programmatic dependencies, unknown ones).
  bool OriginalOnly = false;
};

/// Calls the real entry point the application's call was meant for.
struct PassThrough {
  CUresult (*Fn)(const void *Ctx) = nullptr;
  const void *Ctx = nullptr;
  CUresult operator()() const { return Fn(Ctx); }
};

/// Kinds of calls that pass through untouched but are counted.
enum class Counted { CooperativeLaunch, GraphLaunch };

class Runtime {
public:
  /// The runtime, set up on first use; null when it is disabled or the
  /// driver cannot be opened (then every call passes through).
  static Runtime *get();

  CUresult launch(const LaunchArgs &A, PassThrough Original);
  void count(Counted What);
  /// A launch that passes through untouched (cooperative, graph): counted;
  /// announced to the other processes by an HP process, held while HP is
  /// busy in a BE process.
  CUresult otherLaunch(Counted What, CUstream S, bool PerThreadStream, PassThrough Original);
  /// PTX loaded at run time (cuModuleLoadData(Ex), cuLibraryLoadData): the
  /// module with Tally's variants to load in place of \p Image, or null to
  /// load \p Image as it is (not PTX, turned off, refused, failed).
  std::shared_ptr<const std::string> ptxForModule(const void *Image, const char *Where);
  /// The same for cuLinkAddData of \p Data (a PTX input) into \p L: only the
  /// first PTX input of a link gets variants.
  std::shared_ptr<const std::string> ptxForLink(CUlinkState L, const void *Data);
  /// The driver rejected the module with variants (\p R): the caller loads
  /// the original; said once.
  void ptxRejected(CUresult R, const char *Where);
  /// The driver may keep reading \p Image, the module with variants of
  /// library \p L, until it is unloaded.
  void keepForLibrary(CUlibrary L, std::shared_ptr<const std::string> Image);
  /// At cuLibraryUnload: the kept image, to be freed after the unload.
  std::shared_ptr<const std::string> takeLibraryImage(CUlibrary L);
  void forgetLink(CUlinkState L);
  void forgetModule(CUmodule M);
  void forgetLibrary(CUlibrary L);
  /// Before cuCtxDestroy: finishes the runtime's work in \p Ctx and drops
  /// what it holds there.
  void contextGoing(CUcontext Ctx);
  /// Around cuDevicePrimaryCtxRelease/Reset of \p Dev: before, the work in
  /// the device's contexts is finished; after, what the runtime held in a
  /// primary context that is gone is dropped.
  void primaryGoing(CUdevice Dev);
  void primaryGone(CUdevice Dev);
  /// Before cuStreamDestroy of \p S: an HP completion still to be written
  /// for launches on it is written now.
  void streamGoing(CUstream S);
  /// Before a call of WaitCalls.def (the program waits for its work): an
  /// HP completion pending for the burst so far is written now, on this
  /// thread (nothing to do elsewhere: one atomic load). \p Poll: the call
  /// only asks (a query, also made between launches): written only once
  /// launches have stopped for half a burst. Returns the time (monotonic
  /// ns) to hand to waitDone after the call when an HP process times this
  /// wait (its launches since the last wait make a request), else 0.
  uint64_t waitPoint(bool Poll);
  /// After that call, with waitPoint's non-zero time \p Start and the
  /// call's result \p R: an HP process notes how long its request waited
  /// for the GPU (a query that found the work not ready starts a wait; the
  /// first one that found it done ends it).
  void waitDone(bool Poll, uint64_t Start, CUresult R);

  /// Around a call of BlockingCalls.def made by a program thread: such a
  /// call may wait for GPU work holding the driver's lock, so no preemption
  /// starts while one is in progress, and one that starts while a launch is
  /// stopped waits (in Begin) until its resumption is queued.
  void blockingCallBegin();
  void blockingCallEnd();
  /// A program thread's call that may have loaded a kernel's code
  /// (BlockingCalls.def, TALLY_LOAD: a lookup under lazy loading,
  /// cuFuncLoad, a module load), made between blockingCallBegin and End:
  /// in a process that preempts, an event is recorded behind it, and no
  /// flag goes up until that event completes (the load's stall is over).
  void codeLoaded();

  /// Finishes every preempted launch and writes the statistics. Runs at
  /// exit (atexit, registered at the first launch, so before the CUDA
  /// runtime's own teardown) and is safe to call more than once.
  void shutdown();

  const Config &config() const;
  const DriverTable &driver() const;

  struct Impl;

private:
  explicit Runtime(Impl *I) : I(I) {}
  Impl *I;
};

/// The real dlsym (Interpose.cpp), for looking up driver symbols.
void *realDlsym(void *Handle, const char *Name);

} // namespace tally::rt

#endif
