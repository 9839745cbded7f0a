//===- Runtime.cpp - libtally: variants launched in place of kernels ------===//
//
// Resolution (once per kernel handle: name, module or library, embedded
// metadata, sibling variants, parameter layout), the choice of form, and
// the statistics. The launch mechanism (control blocks, stream gates,
// preemption and resumption) is in Launcher.cpp.
//
//===----------------------------------------------------------------------===//

#include "RuntimeImpl.h"

#include <dlfcn.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tally::rt {

static LogLevel CurrentLevel = LogLevel::Warn;

void logf(LogLevel L, const char *Fmt, ...) {
  if (static_cast<int>(L) > static_cast<int>(CurrentLevel))
    return;
  static const char *Prefix[] = {"error", "warning", "info", "debug"};
  char Buf[1024];
  va_list Ap;
  va_start(Ap, Fmt);
  std::vsnprintf(Buf, sizeof Buf, Fmt, Ap);
  va_end(Ap);
  std::fprintf(stderr, "tally: %s: %s\n", Prefix[static_cast<int>(L)], Buf);
}

//===----------------------------------------------------------------------===//
// Set-up
//===----------------------------------------------------------------------===//

static const char *getEnv(const char *Name) { return std::getenv(Name); }

/// Set in a child of fork() made after the runtime started: the child has
/// a copy of the runtime's state but none of its threads (their locks may
/// be held for ever, a join of one waits for ever), and the CUDA driver is
/// not usable there. Every call then passes straight through, and the exit
/// handler does nothing (no statistics counted by the parent, no segment
/// slot that is the parent's). A child that runs exec() starts afresh.
static std::atomic<bool> ForkedAway{false};
/// The runtime's start began in this process (so a child forked from now
/// on steps aside, even one forked while another thread starts it).
static std::atomic<bool> Begun{false};

__attribute__((constructor)) static void stepAsideInForkedChildren() {
  pthread_atfork(nullptr, nullptr, [] {
    if (Begun.load(std::memory_order_relaxed))
      ForkedAway.store(true, std::memory_order_relaxed);
  });
}

Runtime *Runtime::get() {
  if (ForkedAway.load(std::memory_order_relaxed))
    return nullptr;
  static Runtime *R = []() -> Runtime * {
    Begun.store(true, std::memory_order_relaxed);
    std::string Err;
    Config C = Config::fromEnvironment(getEnv, Err);
    CurrentLevel = C.Level;
    if (!Err.empty())
      logf(LogLevel::Error, "%s", Err.c_str());
    if (!C.Enabled)
      return nullptr;
    void *H = dlopen(C.DriverPath.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!H) {
      logf(LogLevel::Warn, "cannot open the CUDA driver '%s' (%s); running without Tally",
           C.DriverPath.c_str(), dlerror());
      return nullptr;
    }
    auto *Impl = new Runtime::Impl();
    Impl->Cfg = C;
    Impl->DriverHandle = H;
    std::string Missing, MissingOptional;
    if (!Impl->D.load(H, realDlsym, Missing, MissingOptional)) {
      logf(LogLevel::Warn, "the CUDA driver lacks %s; running without Tally", Missing.c_str());
      delete Impl;
      return nullptr;
    }
    Impl->checkFeatures(MissingOptional);
    Impl->Rng.seed(C.Seed);
    // Checked when the settings were read.
    Impl->HasForceOnly = !C.ForceOnly.empty() &&
                         regcomp(&Impl->ForceOnly, C.ForceOnly.c_str(), REG_EXTENDED | REG_NOSUB) == 0;
    logf(LogLevel::Info, "runtime loaded (priority %s, form %s%s)",
         C.Prio == Priority::High ? "high" : "best-effort",
         C.Forced ? formName(C.Force) : "automatic",
         C.RandomPreemptions ? ", random preemption" : "");
    return new Runtime(Impl);
  }();
  return R;
}

void Runtime::Impl::checkFeatures(const std::string &MissingOptional) {
  const DriverTable &T = D;
  bool Lookup = T.cuFuncGetName && T.cuFuncGetModule && T.cuModuleGetFunction &&
                T.cuModuleGetGlobal;
  bool LibLookup = T.cuKernelGetName && T.cuKernelGetLibrary && T.cuLibraryGetKernel &&
                   T.cuLibraryGetGlobal && T.cuKernelGetFunction;
  bool Common = T.cuCtxGetDevice && T.cuDeviceGetAttribute &&
                T.cuOccupancyMaxActiveBlocksPerMultiprocessor && T.cuStreamIsCapturing &&
                T.cuThreadExchangeStreamCaptureMode && T.cuStreamCreateWithPriority &&
                T.cuCtxGetStreamPriorityRange && T.cuStreamSynchronize && T.cuMemcpyDtoHAsync &&
                T.cuEventCreate && T.cuEventRecord && T.cuEventQuery && T.cuEventSynchronize &&
                T.cuEventElapsedTime && (T.cuFuncGetParamInfo || T.cuKernelGetParamInfo);
  VariantsUsable = Common && (Lookup || LibLookup);
  PtbUsable = VariantsUsable && T.cuMemAlloc && T.cuMemsetD32Async && T.cuStreamWaitValue32 &&
              T.cuStreamWriteValue32 && T.cuStreamWaitEvent && T.cuCtxSetCurrent;
  if (!MissingOptional.empty() && (!VariantsUsable || !PtbUsable))
    logf(LogLevel::Warn, "the CUDA driver lacks %s: %s", MissingOptional.c_str(),
         VariantsUsable ? "PTB variants are off" : "kernels run as they are");
}

const Config &Runtime::config() const { return I->Cfg; }
const DriverTable &Runtime::driver() const { return I->D; }

//===----------------------------------------------------------------------===//
// Resolution
//===----------------------------------------------------------------------===//

ContextState *Runtime::Impl::context() {
  CUcontext Ctx = nullptr;
  if (D.cuCtxGetCurrent(&Ctx) != CUDA_SUCCESS || !Ctx)
    return nullptr;
  unsigned long long Id = 0;
  if (D.cuCtxGetId && D.cuCtxGetId(Ctx, &Id) != CUDA_SUCCESS)
    Id = 0;
  // The thread's last usable context, while no context was dropped since
  // (dropContextLocked bumps the generation) and its id is the same: no
  // lock, no map.
  struct Cached {
    CUcontext Ctx = nullptr;
    unsigned long long Id = 0;
    uint64_t Gen = 0;
    ContextState *C = nullptr;
  };
  thread_local Cached Last;
  const uint64_t Gen = Generation.load(std::memory_order_acquire);
  if (Last.C && Last.Ctx == Ctx && Last.Id == Id && Id && Last.Gen == Gen)
    return Last.C;
  ContextState *C = contextSlow(Ctx, Id);
  if (C && Id)
    Last = {Ctx, Id, Gen, C};
  return C;
}

ContextState *Runtime::Impl::contextSlow(CUcontext Ctx, unsigned long long Id) {
  std::lock_guard<std::mutex> G(Mu);
  auto It = Contexts.find(Ctx);
  if (It != Contexts.end() && Id && It->second->Id && It->second->Id != Id) {
    // The handle of a context destroyed behind our back, back for a new
    // one: what the runtime held in the old one is gone with it.
    logf(LogLevel::Debug, "context %p was destroyed and made anew", static_cast<void *>(Ctx));
    dropContextLocked(Ctx);
  }
  auto &Slot = Contexts[Ctx];
  if (Slot)
    return Slot->Usable ? Slot.get() : nullptr;
  Slot = std::make_unique<ContextState>();
  ContextState &C = *Slot;
  C.Ctx = Ctx;
  C.Id = Id;
  if (!VariantsUsable)
    return nullptr;
  RelaxedCaptureGuard Relax(D);
  CUdevice Dev = 0;
  int Least = 0, Greatest = 0;
  CUresult R = D.cuCtxGetDevice(&Dev);
  if (R == CUDA_SUCCESS) {
    C.Dev = Dev;
    // Is it the device's primary context? (Retaining an active primary
    // context and releasing it again changes nothing.)
    unsigned Flags = 0;
    int Active = 0;
    CUcontext P = nullptr;
    if (D.cuDevicePrimaryCtxGetState && D.cuDevicePrimaryCtxRetain &&
        D.cuDevicePrimaryCtxRelease &&
        D.cuDevicePrimaryCtxGetState(Dev, &Flags, &Active) == CUDA_SUCCESS && Active &&
        D.cuDevicePrimaryCtxRetain(&P, Dev) == CUDA_SUCCESS) {
      C.Primary = P == Ctx;
      D.cuDevicePrimaryCtxRelease(Dev);
    }
  }
  if (R == CUDA_SUCCESS)
    R = D.cuDeviceGetAttribute(&C.SMs, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, Dev);
  if (R == CUDA_SUCCESS)
    R = D.cuCtxGetStreamPriorityRange(&Least, &Greatest);
  C.LeastPriority = Least;
  // Both internal streams are non-blocking: work the application queues
  // on the legacy default stream (a gate, say) must never hold them up.
  // (The TALLY_DEBUG_*_PRIORITY settings: Config::DebugResumePriority.)
  auto Pick = [&](Config::DebugPriority P, int AsIs) {
    return P == Config::DebugPriority::Least      ? Least
           : P == Config::DebugPriority::Greatest ? Greatest
                                                  : AsIs;
  };
  if (R == CUDA_SUCCESS)
    R = D.cuStreamCreateWithPriority(&C.Resume, CU_STREAM_NON_BLOCKING,
                                     Pick(Cfg.DebugResumePriority, Least));
  // Signal carries a BE process's preemption flags (greatest priority: they
  // must not wait behind anything) and an HP process's completion writes
  // (least: work on a stream of greater priority than the service's may
  // preempt the service's kernels. On an H100 an hp-serve under Tally
  // stalled for up to 20 ms every few seconds with the greatest; with the
  // least, less often, not never: scripts/gpu-hp-tail.sh).
  if (R == CUDA_SUCCESS)
    R = D.cuStreamCreateWithPriority(
        &C.Signal, CU_STREAM_NON_BLOCKING,
        Pick(Cfg.DebugSignalPriority, Cfg.Prio == Priority::High ? Least : Greatest));
  if (R == CUDA_SUCCESS)
    R = D.cuStreamCreateWithPriority(&C.Meta, CU_STREAM_NON_BLOCKING, Least);
  if (R != CUDA_SUCCESS || C.SMs <= 0) {
    logf(LogLevel::Warn, "cannot set up a CUDA context for variants (%s); its kernels run as they are",
         D.errorName(R).c_str());
    return nullptr;
  }
  C.Usable = true;
  return &C;
}

/// Reads and parses the metadata of a module or library (once).
ModuleEntry *Runtime::Impl::moduleEntry(void *Owner, bool IsLibrary, ContextState *C) {
  {
    std::lock_guard<std::mutex> G(Mu);
    auto It = Modules.find(Owner);
    if (It != Modules.end())
      return It->second.get();
  }
  auto E = std::make_unique<ModuleEntry>();
  E->IsLibrary = IsLibrary;
  if (!IsLibrary && C)
    E->Ctx = C->Ctx;
  CUdeviceptr Ptr = 0;
  size_t Bytes = 0;
  CUresult R = IsLibrary ? D.cuLibraryGetGlobal(&Ptr, &Bytes, static_cast<CUlibrary>(Owner),
                                                "__tally_metadata")
                         : D.cuModuleGetGlobal(&Ptr, &Bytes, static_cast<CUmodule>(Owner),
                                               "__tally_metadata");
  if (R == CUDA_SUCCESS && C) {
    if (Bytes == 0 || Bytes > (64u << 20)) {
      E->Problem = "embedded metadata of " + std::to_string(Bytes) + " bytes";
    } else {
      std::string Text(Bytes, '\0');
      RelaxedCaptureGuard Relax(D);
      // On a stream of its own, into pinned memory where the driver gives
      // it: a read queued on Resume behind a resumption, and later one into
      // pageable memory, were in the way in hangs of a PyTorch program
      // under preemption (docs/runtime.md).
      std::lock_guard<std::mutex> G(C->StagingMu);
      if (D.cuMemHostAlloc && C->StagingBytes < Bytes) {
        void *P = nullptr;
        size_t Want = std::max<size_t>(Bytes, 64 << 10);
        if (D.cuMemHostAlloc(&P, Want, 0) == CUDA_SUCCESS) {
          C->Staging = static_cast<char *>(P); // the old one is kept (see StagingMu)
          C->StagingBytes = Want;
        }
      }
      bool Pinned = C->StagingBytes >= Bytes;
      R = D.cuMemcpyDtoHAsync(Pinned ? C->Staging : &Text[0], Ptr, Bytes, C->Meta);
      if (R == CUDA_SUCCESS)
        R = D.cuStreamSynchronize(C->Meta);
      if (R == CUDA_SUCCESS && Pinned)
        std::memcpy(&Text[0], C->Staging, Bytes);
      if (R != CUDA_SUCCESS) {
        E->Problem = "cannot read the embedded metadata (" + D.errorName(R) + ")";
      } else {
        size_t End = Text.find('\0');
        uint64_t H = 1469598103934665603ull;
        for (size_t I = 0; I < (End == std::string::npos ? Bytes : End); ++I)
          H = (H ^ static_cast<unsigned char>(Text[I])) * 1099511628211ull;
        E->MetaHash = H;
        std::string Error;
        if (!parseModuleMetadata(std::string_view(Text.data(), End == std::string::npos ? Bytes : End),
                                 E->Meta, Error))
          E->Problem = "malformed metadata (metadata:" + Error + ")";
        else
          E->HasMeta = true;
      }
    }
  }
  std::lock_guard<std::mutex> G(Mu);
  auto &Slot = Modules[Owner];
  if (!Slot)
    Slot = std::move(E);
  return Slot.get();
}

static bool paramLayout(const DriverTable &D, CUfunction F, bool IsKernel,
                        std::vector<std::pair<uint32_t, uint32_t>> &Out) {
  Out.clear();
  for (size_t I = 0; I < 4096; ++I) {
    size_t Off = 0, Size = 0;
    CUresult R = IsKernel && D.cuKernelGetParamInfo
                     ? D.cuKernelGetParamInfo(reinterpret_cast<CUkernel>(F), I, &Off, &Size)
                 : D.cuFuncGetParamInfo ? D.cuFuncGetParamInfo(F, I, &Off, &Size)
                                        : CUDA_ERROR_NOT_SUPPORTED;
    if (R == CUDA_ERROR_INVALID_VALUE)
      return true; // past the last parameter
    if (R != CUDA_SUCCESS || Off > UINT32_MAX || Size > UINT32_MAX)
      return false;
    Out.emplace_back(static_cast<uint32_t>(Off), static_cast<uint32_t>(Size));
  }
  return false;
}

void Runtime::Impl::resolve(KernelEntry &K, CUfunction F) {
  const char *Name = nullptr;
  void *Owner = nullptr;
  bool IsKernel = false;
  if (D.cuFuncGetName && D.cuFuncGetModule && D.cuFuncGetName(&Name, F) == CUDA_SUCCESS && Name) {
    CUmodule M = nullptr;
    if (D.cuFuncGetModule(&M, F) == CUDA_SUCCESS)
      Owner = M;
  }
  if (!Owner && D.cuKernelGetName && D.cuKernelGetLibrary &&
      D.cuKernelGetName(&Name, reinterpret_cast<CUkernel>(F)) == CUDA_SUCCESS && Name) {
    CUlibrary L = nullptr;
    if (D.cuKernelGetLibrary(&L, reinterpret_cast<CUkernel>(F)) == CUDA_SUCCESS) {
      Owner = L;
      IsKernel = true;
    }
  }
  K.Name = Name ? Name : "(unnamed kernel)";
  K.ForceMatch = !HasForceOnly || regexec(&ForceOnly, K.Name.c_str(), 0, nullptr, 0) == 0;
  K.Owner = Owner;
  K.IsLibraryKernel = IsKernel;
  if (!Owner) {
    K.WhyNoVariants = "the driver does not say which module it belongs to";
    return;
  }
  ContextState *C = context();
  if (!C) {
    K.WhyNoVariants = "variants are off in this context";
    return;
  }
  if (!IsKernel)
    K.Ctx = C->Ctx;
  ModuleEntry *M = moduleEntry(Owner, IsKernel, C);
  if (!M->HasMeta) {
    K.WhyNoVariants = M->Problem.empty() ? "no Tally metadata in its module" : M->Problem;
    if (!M->Problem.empty() && !M->Warned.exchange(true))
      logf(LogLevel::Warn, "module of kernel %s: %s; its kernels run as they are",
           K.Name.c_str(), M->Problem.c_str());
    return;
  }
  const KernelMetadata *KM = M->Meta.find(K.Name);
  if (!KM) {
    K.WhyNoVariants = "not in its module's Tally metadata";
    return;
  }
  K.ReadsGridSize = KM->ReadsGridSize;
  {
    char Hash[24];
    std::snprintf(Hash, sizeof Hash, "@%08llx", (unsigned long long)(M->MetaHash & 0xffffffffu));
    K.ProfileName = K.Name + Hash;
  }
  if (KM->Variants.empty()) {
    K.WhyNoVariants = KM->Reason.empty() ? "rejected by tally-opt" : KM->Reason;
    return;
  }
  std::vector<std::pair<uint32_t, uint32_t>> Layout;
  if (!paramLayout(D, F, IsKernel, Layout)) {
    K.WhyNoVariants = "the driver does not give its parameter layout";
    warnOnce(K, K.WhyNoVariants);
    return;
  }
  for (const VariantInfo &V : KM->Variants) {
    bool Fits = true;
    for (auto [Off, Size] : Layout)
      Fits &= uint64_t(Off) + Size <= V.OriginalParamBytes;
    if (!Fits) {
      K.WhyNoVariants = "its parameters do not match the metadata of " + V.Name;
      warnOnce(K, K.WhyNoVariants);
      return;
    }
    CUfunction VF = nullptr;
    CUresult R;
    if (IsKernel) {
      CUkernel VK = nullptr;
      R = D.cuLibraryGetKernel(&VK, static_cast<CUlibrary>(Owner), V.Name.c_str());
      VF = reinterpret_cast<CUfunction>(VK);
    } else {
      R = D.cuModuleGetFunction(&VF, static_cast<CUmodule>(Owner), V.Name.c_str());
    }
    if (R != CUDA_SUCCESS || !VF) {
      warnOnce(K, "variant " + V.Name + " does not load (" + D.errorName(R) + ")");
      continue;
    }
    if (V.Kind == VariantKind::Slice) {
      K.Slice = V;
      K.SliceFn = VF;
    } else {
      K.Ptb = V;
      K.PtbFn = VF;
    }
  }
  K.Params = std::move(Layout);
  if (!K.Slice && !K.Ptb)
    K.WhyNoVariants = "its variants do not load";
}

void Runtime::Impl::warnOnce(KernelEntry &K, const std::string &Msg) {
  if (!K.Warned.exchange(true))
    logf(LogLevel::Warn, "kernel %s: %s; it runs as it is", K.Name.c_str(), Msg.c_str());
}

KernelEntry *Runtime::Impl::lookup(CUfunction F) {
  // Each thread caches the kernels it launched lately (by handle, in 64
  // ways): a model's launches cycle through tens of kernels, and take no
  // lock. Unloads and dropped contexts bump the generation.
  struct Cached {
    CUfunction F = nullptr;
    KernelEntry *K = nullptr;
    uint64_t Gen = 0;
  };
  thread_local Cached Recent[64];
  const uint64_t Gen = Generation.load(std::memory_order_acquire);
  // (Fibonacci hashing: handles are widely aligned.)
  Cached &Way = Recent[(uint64_t(reinterpret_cast<uintptr_t>(F)) * 0x9E3779B97F4A7C15ull) >> 58];
  if (Way.F == F && Way.Gen == Gen && Way.K)
    return Way.K;
  KernelEntry *K = nullptr;
  {
    std::lock_guard<std::mutex> G(Mu);
    auto It = Kernels.find(F);
    if (It != Kernels.end())
      K = It->second;
  }
  if (!K) {
    auto New = std::make_unique<KernelEntry>();
    {
      RelaxedCaptureGuard Relax(D);
      // A blocking call (BlockingCalls.def) on the program's thread: with
      // lazy module loading, looking up the variants and the metadata may
      // load the module, which waits for running kernels, and the metadata
      // read waits for its copy.
      std::shared_lock<std::shared_mutex> Mark(Drain);
      resolve(*New, F);
      if (preempts())
        loadEarly(*New, F);
    }
    if (!New->WhyNoVariants.empty())
      logf(LogLevel::Debug, "kernel %s has no variants: %s", New->Name.c_str(),
           New->WhyNoVariants.c_str());
    std::lock_guard<std::mutex> G(Mu);
    auto &Slot = Kernels[F];
    if (!Slot) {
      AllKernels.push_back(std::move(New));
      Slot = AllKernels.back().get();
    }
    K = Slot;
  }
  Way = {F, K, Gen};
  return K;
}

void Runtime::forgetModule(CUmodule M) { I->forget(M); }

void Runtime::streamGoing(CUstream S) {
  std::lock_guard<std::recursive_mutex> G(I->Co.HpIssueMu);
  if (I->Co.HpPending.Seq && I->Co.HpPending.S == S)
    I->flushPendingLocked();
}

uint64_t Runtime::waitPoint(bool Poll) {
  Coordination &Co = I->Co;
  // Timed only while launches since the last wait make a request (a
  // second wait, or a query with nothing issued, is not one).
  const uint64_t Start =
      I->Cfg.Prio == Priority::High && Co.Usable && hpThreadSpan().StartNs ? monotonicNs() : 0;
  if (!Co.HpFlushWanted.load(std::memory_order_acquire))
    return Start;
  // A query between launches (an allocator asking about its events)
  // would otherwise cost a write per launch: only once they stopped.
  if (Poll && I->sinceHpLaunchNs() < I->burstQuietNs())
    return Start;
  std::unique_lock<std::recursive_mutex> G = I->lockIssue();
  if (Co.HpPending.Seq)
    I->flushPendingLocked();
  Co.HpFlushWanted.store(false, std::memory_order_release);
  return Start;
}

void Runtime::waitDone(bool Poll, uint64_t Start, CUresult R) {
  Coordination &Co = I->Co;
  HpThreadSpan &T = hpThreadSpan();
  const uint64_t Now = monotonicNs();
  uint64_t From = Start;
  if (Poll) {
    if (R == CUDA_ERROR_NOT_READY) {
      // The program polls for its work: waiting from the first such look.
      if (!T.PollSinceNs)
        T.PollSinceNs = Start;
      return;
    }
    // Found done without having looked in vain first: not the end of a
    // wait (an allocator asking about an old event is not the request's
    // end). A service whose first look finds its work done waited for
    // nothing; its request goes on to the next wait, which errs towards
    // counting the service launch bound less often, not more.
    From = T.PollSinceNs;
    T.PollSinceNs = 0;
    if (!From)
      return;
  } else {
    T.PollSinceNs = 0;
  }
  const uint64_t Begun = T.StartNs;
  T.StartNs = 0;
  if (!Begun || Begun > Now || From > Now)
    return;
  const uint64_t Span = Now - Begun;
  if (Span > Coordination::MaxSpanNs) {
    // Its waits were not all seen (a blocking copy, a spin on host
    // memory): its length says nothing of the host's share.
    Co.SpanLostNs.store(Now, std::memory_order_relaxed);
    return;
  }
  Co.LastSpanEndNs.store(Now, std::memory_order_relaxed);
  Co.SpanSumNs.fetch_add(Span, std::memory_order_relaxed);
  Co.WaitSumNs.fetch_add(std::min(Now - From, Span), std::memory_order_relaxed);
  Co.Spans.fetch_add(1, std::memory_order_relaxed);
}

void Runtime::contextGoing(CUcontext Ctx) {
  {
    std::lock_guard<std::recursive_mutex> G(I->Co.HpIssueMu);
    if (I->Co.HpPending.Seq && I->Co.HpPending.C->Ctx == Ctx)
      I->flushPendingLocked();
  }
  I->drainContext(Ctx);
  std::lock_guard<std::mutex> G(I->Mu);
  I->dropContextLocked(Ctx);
}

void Runtime::primaryGoing(CUdevice Dev) {
  {
    std::lock_guard<std::recursive_mutex> G(I->Co.HpIssueMu);
    if (I->Co.HpPending.Seq)
      I->flushPendingLocked();
  }
  std::vector<CUcontext> Primaries;
  {
    std::lock_guard<std::mutex> G(I->Mu);
    for (auto &[Ctx, C] : I->Contexts)
      if (C->Primary && C->Dev == Dev)
        Primaries.push_back(Ctx);
  }
  for (CUcontext Ctx : Primaries)
    I->drainContext(Ctx);
}

void Runtime::primaryGone(CUdevice Dev) { I->dropDeadPrimaries(Dev); }

/// The runtime's work in \p Ctx finished: preempted launches resumed to the
/// end, every timing read.
void Runtime::Impl::drainContext(CUcontext Ctx) {
  const ContextState *C = nullptr;
  {
    std::lock_guard<std::mutex> G(Mu);
    auto It = Contexts.find(Ctx);
    if (It == Contexts.end())
      return;
    C = It->second.get();
  }
  waitForContext(C);
  harvestTiming(/*All=*/true);
}

/// Drops the contexts that no longer exist, by their ids (at exit: a
/// context may have gone by a way the runtime does not see, such as the
/// teardown of a CUDA runtime inside a dlclose()d library).
void Runtime::Impl::dropDeadContexts() {
  if (!D.cuCtxGetId)
    return;
  std::lock_guard<std::mutex> G(Mu);
  std::vector<CUcontext> Dead;
  for (auto &[Ctx, C] : Contexts) {
    unsigned long long Id = 0;
    if (D.cuCtxGetId(Ctx, &Id) != CUDA_SUCCESS || (C->Id && Id != C->Id))
      Dead.push_back(Ctx);
  }
  for (CUcontext Ctx : Dead)
    dropContextLocked(Ctx);
}

void Runtime::Impl::dropDeadPrimaries(CUdevice Dev) {
  unsigned Flags = 0;
  int Active = 1;
  if (!D.cuDevicePrimaryCtxGetState ||
      D.cuDevicePrimaryCtxGetState(Dev, &Flags, &Active) != CUDA_SUCCESS || Active)
    return; // still there (or cannot tell: the context ids catch a new one)
  std::lock_guard<std::mutex> G(Mu);
  std::vector<CUcontext> Dead;
  for (auto &[Ctx, C] : Contexts)
    if (C->Primary && C->Dev == Dev)
      Dead.push_back(Ctx);
  for (CUcontext Ctx : Dead)
    dropContextLocked(Ctx);
}

/// Forgets context \p Ctx (Mu held): its state, and the modules and
/// kernel handles that lived in it.
void Runtime::Impl::dropContextLocked(CUcontext Ctx) {
  auto It = Contexts.find(Ctx);
  if (It == Contexts.end())
    return;
  ContextState *C = It->second.get();
  logf(LogLevel::Debug, "context %p is gone; the runtime forgets what it held there",
       static_cast<void *>(Ctx));
  C->Usable = false;
  C->Dead.store(true, std::memory_order_release);
  {
    // Its timings can no longer be read.
    std::lock_guard<std::mutex> G(TMu);
    Timed.erase(std::remove_if(Timed.begin(), Timed.end(),
                               [&](const TimedLaunch &T) { return T.C == C; }),
                Timed.end());
  }
  DeadContexts.push_back(std::move(It->second));
  Contexts.erase(It);
  for (auto K = Kernels.begin(); K != Kernels.end();)
    if (K->second->Ctx == Ctx)
      K = Kernels.erase(K);
    else
      ++K;
  for (auto M = Modules.begin(); M != Modules.end();)
    if (M->second->Ctx == Ctx)
      M = Modules.erase(M);
    else
      ++M;
  Generation.fetch_add(1, std::memory_order_acq_rel);
}
void Runtime::forgetLibrary(CUlibrary L) { I->forget(L); }

void Runtime::Impl::forget(void *Owner) {
  // Launches of the module's kernels still being preempted and resumed
  // need it: let the preemptor finish them first.
  waitForOwner(Owner);
  std::lock_guard<std::mutex> G(Mu);
  Modules.erase(Owner);
  for (auto It = Kernels.begin(); It != Kernels.end();)
    if (It->second->Owner == Owner)
      It = Kernels.erase(It);
    else
      ++It;
  Generation.fetch_add(1, std::memory_order_acq_rel);
}

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

Form Runtime::Impl::choose(const KernelEntry &K, const LaunchArgs &A) const {
  // Part 1 of the runtime has no scheduler: without --force kernels run as
  // they are. The cross-process policy plugs in here.
  if (!Cfg.Forced || Cfg.Force == Form::Original || A.OriginalOnly || !K.ForceMatch ||
      K.Disabled.load(std::memory_order_relaxed))
    return Form::Original;
  uint64_t Blocks = uint64_t(A.Grid[0]) * A.Grid[1] * A.Grid[2];
  if (Blocks == 0 || Blocks > UINT32_MAX)
    return Form::Original;
  if (Cfg.Force == Form::Ptb && K.Ptb && PtbUsable)
    return Form::Ptb;
  if (Cfg.Force == Form::Slice && K.Slice)
    return Form::Slice;
  return Form::Original;
}

CUresult Runtime::launch(const LaunchArgs &A, PassThrough Original) {
  Impl &S = *I;
  if (S.Shut.load(std::memory_order_acquire))
    return Original();
  const bool Hp = S.Cfg.Prio == Priority::High;
  const uint64_t EnteredNs = Hp && S.Cfg.Stats ? monotonicNs() : 0; // slow-call accounting
  S.registerExit();
  KernelEntry *K = S.lookup(A.F);
  // Scheduling across processes (not with random preemption, a check of
  // the mechanism on its own): HP launches are announced, BE launches are
  // decided by the policy in launchBe.
  bool Sched = S.Cfg.Schedule && !S.Cfg.RandomPreemptions;
  // Timed for the statistics: every launch, or one in StatsTimingEvery of
  // this kernel's in each form (Sample: 1 timed, 0 not, -1 not decided yet:
  // a scheduled BE launch decides once its form is known).
  const bool WantTiming = S.Cfg.Stats && S.Cfg.StatsTiming;
  int Sample = -1;
  // A BE process with no HP activity to protect runs originals untracked:
  // decided without capture checks or context lookups (mode cached for a
  // few microseconds); unless the statistics time this launch, or its
  // shape's forms may still need measuring (launchBe measures them).
  // (Not while a preemptible launch may still be at its gate with fewer
  // work queues than Config::WorkQueues: launchBe waits for it first.)
  if (Sched && !Hp && !S.Cfg.Forced && S.Co.Usable &&
      !S.GatesPending.load(std::memory_order_relaxed) && S.freeMode() &&
      !S.freeMeasureWanted(*K, A)) {
    if (WantTiming)
      Sample = S.sampleTiming(*K, Form::Original) ? 1 : 0;
    if (Sample != 1) {
      S.Co.FullSpeed.fetch_add(1, std::memory_order_relaxed);
      CUresult R = Original();
      if (R == CUDA_SUCCESS) {
        K->Launches[static_cast<int>(Form::Original)].fetch_add(1, std::memory_order_relaxed);
        if (WantTiming) // (its stream is not checked for a capture here)
          K->Timeable[static_cast<int>(Form::Original)].fetch_add(1, std::memory_order_relaxed);
      }
      return R;
    }
  }
  Form F = Sched ? Form::Original : S.choose(*K, A);
  if (Sched && Hp && S.Cfg.Forced)
    F = S.choose(*K, A);
  const bool BeSched = Sched && !Hp;
  if (WantTiming && Sample < 0 && !BeSched)
    Sample = S.sampleTiming(*K, F) ? 1 : 0;
  const bool TimeIt = WantTiming && Sample != 0;
  CUstream Stream = A.Stream;
  if (!Stream)
    Stream = A.PerThreadStream ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  bool Capturing = false;
  if (F != Form::Original || TimeIt || Sched) {
    CUstreamCaptureStatus St = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult R = S.D.cuStreamIsCapturing ? S.D.cuStreamIsCapturing(Stream, &St)
                                         : CUDA_ERROR_NOT_SUPPORTED;
    Capturing = R != CUDA_SUCCESS || St != CU_STREAM_CAPTURE_STATUS_NONE;
    if (Capturing && F != Form::Original) {
      K->Captured.fetch_add(1, std::memory_order_relaxed);
      F = Form::Original;
    }
  }
  ContextState *C = F != Form::Original || ((Sched || TimeIt) && !Capturing) ? S.context()
                                                                               : nullptr;
  if (!C)
    F = Form::Original;
  const bool Timed = TimeIt && C && !Capturing;
  // A scheduled BE launch starts its timing itself, after any hold.
  const bool BeScheduled = BeSched && C;
  Timing T;
  T.Sample = Timed ? Sample : 0;
  if (T.Sample && !BeScheduled)
    S.startTiming(T, *K, F, *C, Stream);
  CUresult R = CUDA_SUCCESS;
  bool Done = false;
  if (Sched && Hp && F == Form::Original) {
    R = S.launchHp(A, Original, C, Stream, Capturing, EnteredNs);
    Done = true;
  } else if (BeScheduled) {
    S.coordinate(*C);
    if (S.Co.Usable) {
      R = S.launchBe(*K, A, Original, *C, Stream, F, Timed ? &T : nullptr);
      Done = true;
    } else {
      F = S.choose(*K, A); // no scheduler: as in one process
      if (Timed)
        S.startTiming(T, *K, F, *C, Stream);
    }
  }
  if (!Done)
    R = F == Form::Original ? Original()
                            : S.launchForm(*K, A, Original, *C, Stream, F, nullptr,
                                           /*Scheduled=*/false, /*Paced=*/false);
  if (R == CUDA_SUCCESS) {
    K->Launches[static_cast<int>(F)].fetch_add(1, std::memory_order_relaxed);
    if (WantTiming && C && !Capturing)
      K->Timeable[static_cast<int>(F)].fetch_add(1, std::memory_order_relaxed);
  }
  if (T.Start)
    S.timingEnd(C, Stream, T, K, F, R == CUDA_SUCCESS);
  return R;
}

CUresult Runtime::otherLaunch(Counted What, CUstream Stream, bool PerThreadStream,
                              PassThrough Original) {
  Impl &S = *I;
  count(What);
  if (S.Shut.load(std::memory_order_acquire) || !S.Cfg.Schedule || S.Cfg.RandomPreemptions)
    return Original();
  const uint64_t EnteredNs =
      S.Cfg.Prio == Priority::High && S.Cfg.Stats ? monotonicNs() : 0; // as in launch()
  if (!Stream)
    Stream = PerThreadStream ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  CUstreamCaptureStatus St = CU_STREAM_CAPTURE_STATUS_NONE;
  bool Capturing = !S.D.cuStreamIsCapturing || S.D.cuStreamIsCapturing(Stream, &St) != CUDA_SUCCESS ||
                   St != CU_STREAM_CAPTURE_STATUS_NONE;
  ContextState *C = Capturing ? nullptr : S.context();
  if (S.Cfg.Prio == Priority::High)
    return S.launchHp(LaunchArgs{}, Original, C, Stream, Capturing, EnteredNs);
  if (!C)
    return Original();
  S.coordinate(*C);
  if (!S.Co.Usable)
    return Original();
  // A BE graph or cooperative launch cannot be preempted: like an original
  // without variants, it waits for HP to be idle (in Guarded mode).
  std::lock_guard<std::mutex> BeLock(S.Co.BeMu);
  Runtime::Impl::beginBeLaunch();
  S.waitForGate(*C); // (fewer work queues than Config::WorkQueues: not behind a gate)
  S.holdWhileHpBusy(*C);
  S.finishMeasurement(); // before BeDone is recorded again behind this launch
  CUresult R = Original();
  if (R == CUDA_SUCCESS && C->BeDone && S.D.cuEventRecord(C->BeDone, Stream) == CUDA_SUCCESS) {
    C->BeDoneRecorded = true;
    C->BeLastPreemptible = false;
    C->BeOverlapCounted = false;
  }
  if (R == CUDA_SUCCESS)
    S.queueBe(*C, Stream, UINT64_MAX); // with a queue budget: nothing queues behind it
  return R;
}

CUresult Runtime::Impl::launchForm(KernelEntry &K, const LaunchArgs &A, PassThrough Original,
                                   ContextState &C, CUstream S, Form &F, const Choice *Pick,
                                   bool Scheduled, bool Paced) {
  CUresult R = CUDA_SUCCESS;
  bool Done = false;
  // A launch with attributes a variant cannot honour (a cluster, a
  // cooperative launch) is always the original's, whatever was chosen.
  if (A.OriginalOnly)
    F = Form::Original;
  if (F == Form::Ptb)
    Done = launchPtb(K, A, C, S, R, Pick, Scheduled);
  else if (F == Form::Slice)
    Done = launchSliced(K, A, C, S, R, Pick, Paced);
  if (!Done) {
    if (F != Form::Original) {
      K.Fallbacks.fetch_add(1, std::memory_order_relaxed);
      // Under the scheduler the variant may have been meant to run beside
      // HP: the original cannot be stopped, so it waits for HP like one.
      if (Paced)
        holdWhileHpBusy(C);
    }
    F = Form::Original;
    R = Original();
  }
  return R;
}

void Runtime::count(Counted What) {
  if (What == Counted::CooperativeLaunch)
    I->CooperativeLaunches.fetch_add(1, std::memory_order_relaxed);
  else
    I->GraphLaunches.fetch_add(1, std::memory_order_relaxed);
}

void Runtime::Impl::registerExit() {
  if (ExitRegistered.load(std::memory_order_acquire))
    return;
  std::call_once(ExitOnce, [] {
    // Registered at the first launch, after the CUDA runtime registered its
    // own teardown, so it runs first: pending preempted launches finish
    // while the context is alive.
    std::atexit([] {
      if (Runtime *R = Runtime::get())
        R->shutdown();
    });
  });
  ExitRegistered.store(true, std::memory_order_release);
}

void Runtime::shutdown() {
  if (I->Shut.exchange(true))
    return;
  I->dropDeadContexts();
  I->stopPreemptor();
  I->stopCoordination();
  I->harvestTiming(/*All=*/true);
  if (I->Cfg.Stats)
    I->writeStats();
}

} // namespace tally::rt
