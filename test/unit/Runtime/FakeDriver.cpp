//===- FakeDriver.cpp - a CUDA driver stand-in for the runtime's tests -----===//
//
// libfakecuda.so exports the driver entry points libtally.so uses, with a
// small model behind them, so the runtime is tested without a GPU:
//
//  * device memory is host memory (CUdeviceptr = host address), handed out
//    uncleared (bytes 0xa5); memsets on a stream land lazily (LazyMemset);
//  * modules and libraries hold kernels the test registers, with their
//    parameter layout and, for variants, where their extra parameters sit;
//  * a kernel "runs" its logical blocks by adding 1 to out[block], where
//    out is its first parameter (an int pointer): the test checks that
//    every logical block ran exactly once, whatever the runtime did;
//  * a PTB launch runs lazily: when its preemption flag is raised it runs
//    a few more blocks (fake_set_blocks_before_flag) and stops, as
//    preempted workers do; when its end is waited for it runs to the end of
//    the grid (or stops at once if the flag is up). Its control block is
//    updated as the real variant does (next, flag, done);
//  * the driver's lock, as measured on the GPU: a synchronous copy
//    (cuMemcpyDtoH) holds it until every PTB launch issued so far has run
//    all its logical blocks, and event records, launches, stream waits and
//    asynchronous copies need it; stream writes and event queries do not.
//    A copy that would wait forever (a stopped launch nobody can resume)
//    gives up after 2 s, logging "copy TIMED OUT", so a test fails instead
//    of hanging;
//  * loading a kernel's code (cuFuncLoad, or its first launch: lazy
//    loading) stalls the GPU's later work until its earlier work ended (as
//    measured: benchmarks/gpu/gate-queues.cu); one made while a PTB launch
//    is stopped and not yet relaunched would stall its resumption for ever,
//    and is logged "LOAD-UNDER-STOP NAME" (a test's failure). The next
//    event a thread records after its cuFuncLoad completes once the PTB
//    launches running at the load have ended (and not while
//    fake_hold_load_marks(1)), whatever else is held. With
//    FAKE_LOOKUP_LOADS=1 looking a kernel up (cuModuleGetFunction,
//    cuLibraryGetKernel, cuKernelGetFunction) loads it too, as lazy loading
//    does, and is marked the same way;
//  * every call is logged ("launch NAME grid=.. block=.. stream=S..",
//    "waitvalue ...") for the tests to read.
//
//===----------------------------------------------------------------------===//

#include <cuda.h>

#include <atomic>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#undef cuGetProcAddress
#undef cuLaunchKernel
#undef cuLaunchKernelEx
#undef cuLaunchCooperativeKernel
#undef cuGraphLaunch

#define FAKE extern "C" __attribute__((visibility("default")))

namespace {

enum class Kind { Original, Slice, Ptb };

struct FModule;
struct FKernel {
  uint32_t Magic = 0x4b524e4c;
  std::string Name;
  FModule *M = nullptr;
  Kind K = Kind::Original;
  std::vector<std::pair<size_t, size_t>> Params;
  // Variants: where the extra parameters are (byte offsets).
  size_t SliceOffsetAt = 0, GridAt = 0, CtrlAt = 0, ChunkAt = 0;
  bool Loaded = false; ///< its code loaded (cuFuncLoad or a first launch)
};

struct FModule {
  uint32_t Magic = 0x4d4f444c;
  bool Library = false;
  std::vector<FKernel *> Kernels;
  std::map<std::string, std::string> Globals; ///< name -> bytes
};

struct PendingPtb {
  FKernel *K;
  std::vector<unsigned char> Params;
  unsigned Workers;
  CUstream Stream;
  bool Open = true;
  /// Relaunched since (a later launch with the same control block).
  bool Superseded = false;
  /// Ended with every block done (not stopped).
  bool Completed = false;
};

struct FEvent {
  CUstream Stream = nullptr;
  size_t Pending = 0; ///< launches queued before the record
  uint64_t Memsets = 0; ///< memsets queued (on any stream) before the record
  int SlowLeft = 0;   ///< queries still "not ready" (fake_slow_events at the record)
  bool Deferred = false; ///< behind a stream's wait that is not yet released
};

/// A stream waiting for a word of host memory (cuMemHostAlloc) to reach a
/// value: its later operations run once it does (the armed preemption
/// flag, Config::ArmedFlag). Waits on device memory are not modelled.
struct BlockedStream {
  CUdeviceptr Addr = 0;
  uint32_t V = 0;
  std::vector<std::function<void()>> Ops;
  /// The word arrived (the wait passed, whatever it holds later); its
  /// later operations may still be held (fake_hold_released).
  bool Released = false;
};
/// A memset not yet landed: it lands before the next launch on its stream,
/// when an event recorded after it on its stream is seen complete, or when
/// its stream or the context is synchronised; until then the memory holds
/// what it held (a control block cleared on another stream and used before
/// the clear is known done shows up as blocks not run).
struct LazyMemset {
  uint64_t Seq;
  CUstream St;
  uint32_t *P;
  uint32_t V;
  size_t N;
};
/// A write to host memory queued behind an open PTB launch on its stream:
/// it lands when the launch ends.
struct AfterLaunch {
  size_t Launch;
  CUstream St;
  CUdeviceptr Addr;
  uint32_t V;
};

struct State {
  std::recursive_mutex Mu;
  std::map<CUevent, FEvent> Events;
  /// Events created with CU_EVENT_DISABLE_TIMING: the driver refuses their
  /// elapsed time.
  std::set<CUevent> Untimed;
  std::vector<std::string> Log;
  std::vector<PendingPtb> Pending;
  std::vector<std::pair<uintptr_t, uintptr_t>> HostAllocs; ///< [begin, end)
  std::map<CUstream, BlockedStream> Blocked;
  std::vector<AfterLaunch> AfterLaunches;
  std::vector<LazyMemset> Memsets;
  uint64_t MemsetSeq = 0;
  /// The latest memset on each stream, [begin, end) (fake_fail_record_after_memset).
  std::map<CUstream, std::pair<uintptr_t, uintptr_t>> LastMemset;
  /// Memory whose memset's event record failed: the memset may land at any
  /// time, so a PTB launch on a control block there logs "POISONED".
  std::vector<std::pair<uintptr_t, uintptr_t>> Poisoned;
  bool FailRecordAfterMemset = false;
  std::map<CUstream, bool> Capturing;
  unsigned BlocksBeforeFlag = 1;
  int SMs = 4, BlocksPerSM = 2;
  CUcontext Ctx = reinterpret_cast<CUcontext>(0xC0);
  /// The context's id; a destroyed context's handle comes back with a new
  /// one (fake_new_context).
  unsigned long long CtxId = 1;
  bool PrimaryActive = true, ReleaseDestroys = false;
  /// Streams and events created in contexts destroyed since: using them is
  /// logged as "DEAD ...".
  std::set<uintptr_t> Created, Dead;
  int NextStream = 1, NextEvent = 1;
  /// Events recorded right after a cuFuncLoad by the same thread, each with
  /// the PTB launches running when the load was made: it completes once
  /// they have ended (and fake_hold_load_marks is off).
  std::map<CUevent, std::vector<size_t>> LoadMarks;
  bool FailVariantLaunch = false;
  /// The next this many memsets of a whole slab (256 words) fail
  /// (fake_fail_slab_memsets).
  int FailSlabMemsets = 0;
  /// The latest memset on each stream since the last launch there: when
  /// the launch it was queued for fails, the runtime must never use that
  /// memory again (the memset may land late); it is poisoned.
  std::map<CUstream, std::pair<uintptr_t, uintptr_t>> ClearBeforeLaunch;
};

State &S() {
  static State *St = new State();
  return *St;
}

/// fake_hold_load_marks.
std::atomic<int> HoldLoadMarks{0};
/// This thread's last cuFuncLoad: the next event it records marks it, with
/// the PTB launches running then.
thread_local bool MarkNext = false;
thread_local std::vector<size_t> MarkOpen;
/// fake_stall_ptb.
std::atomic<int> StallPtb{0};

/// The driver's lock (see the top); taken before S().Mu.
std::mutex &driverLock() {
  static std::mutex *M = new std::mutex();
  return *M;
}

void log(const std::string &L) { S().Log.push_back(L); }

/// Logs a use of a stream or event of a destroyed context.
void checkLive(const void *Handle, const char *What) {
  if (S().Dead.count(reinterpret_cast<uintptr_t>(Handle))) {
    std::string L = std::string("DEAD ") + What + " " +
                    std::to_string(reinterpret_cast<uintptr_t>(Handle));
    log(L);
    // Also where a test that ends with the process sees it.
    std::fprintf(stderr, "fake driver: %s\n", L.c_str());
  }
}

void destroyContext() {
  S().Dead.insert(S().Created.begin(), S().Created.end());
  S().Created.clear();
  S().PrimaryActive = false;
}

std::string streamName(CUstream St) {
  if (St == nullptr)
    return "null";
  if (St == CU_STREAM_LEGACY)
    return "legacy";
  if (St == CU_STREAM_PER_THREAD)
    return "per-thread";
  return "s" + std::to_string(reinterpret_cast<uintptr_t>(St));
}

FKernel *asKernel(void *P) {
  auto *K = static_cast<FKernel *>(P);
  return K && K->Magic == 0x4b524e4c ? K : nullptr;
}

uint32_t rd32(const std::vector<unsigned char> &B, size_t Off) {
  uint32_t V = 0;
  if (Off + 4 <= B.size())
    std::memcpy(&V, B.data() + Off, 4);
  return V;
}
uint64_t rd64(const std::vector<unsigned char> &B, size_t Off) {
  uint64_t V = 0;
  if (Off + 8 <= B.size())
    std::memcpy(&V, B.data() + Off, 8);
  return V;
}

/// out[Block] += 1 for a logical block of kernel K with parameters B.
void runBlock(const std::vector<unsigned char> &B, uint64_t Block) {
  if (B.size() < 8)
    return;
  int *Out = reinterpret_cast<int *>(rd64(B, 0));
  if (Out)
    Out[Block] += 1;
}

/// The logical blocks of a PTB launch (its grid parameters).
uint64_t gridBlocks(const PendingPtb &P) {
  return uint64_t(rd32(P.Params, P.K->GridAt)) * rd32(P.Params, P.K->GridAt + 4) *
         rd32(P.Params, P.K->GridAt + 8);
}

/// Runs up to \p Max more logical blocks of a PTB launch (the claim loop).
void runPtb(PendingPtb &P, uint64_t Max) {
  uint32_t *Ctrl = reinterpret_cast<uint32_t *>(rd64(P.Params, P.K->CtrlAt));
  uint64_t N = gridBlocks(P);
  for (uint64_t I = 0; I < Max && Ctrl[0] < N; ++I) {
    runBlock(P.Params, Ctrl[0]);
    ++Ctrl[0];
    ++Ctrl[2];
  }
}

void pump();

/// Lands the memsets queued on \p St (every stream: St null and All)
/// before sequence number \p Before.
void landMemsets(CUstream St, bool All, uint64_t Before = UINT64_MAX) {
  std::vector<LazyMemset> &M = S().Memsets;
  for (size_t I = 0; I < M.size();) {
    if ((All || M[I].St == St) && M[I].Seq < Before) {
      for (size_t W = 0; W < M[I].N; ++W)
        M[I].P[W] = M[I].V;
      M.erase(M.begin() + I);
    } else {
      ++I;
    }
  }
}

bool isHostMem(CUdeviceptr A) {
  for (auto [Lo, Hi] : S().HostAllocs)
    if (A >= Lo && A < Hi)
      return true;
  return false;
}

/// A PTB launch's end: stopped (flag up) or with every block done.
void closePtb(PendingPtb &P) {
  P.Open = false;
  P.Completed = reinterpret_cast<uint32_t *>(rd64(P.Params, P.K->CtrlAt))[2] >= gridBlocks(P);
}

/// A PTB launch stopped and not relaunched: its gate waits for a resumption
/// not yet queued.
bool stoppedLaunch() {
  for (const PendingPtb &P : S().Pending)
    if (!P.Open && !P.Completed && !P.Superseded)
      return true;
  return false;
}

/// \p K's code being loaded now (\p How: "funcload" or "launch").
void loadCode(FKernel *K, const char *How) {
  if (K->Loaded)
    return;
  K->Loaded = true;
  if (stoppedLaunch()) {
    log("LOAD-UNDER-STOP " + K->Name + " (" + How + ")");
    std::fprintf(stderr, "fake driver: LOAD-UNDER-STOP %s (%s)\n", K->Name.c_str(), How);
  }
  // (A variant's name is not logged: tests look for it in launch lines.)
  log(std::string("load ") + (K->K == Kind::Original ? K->Name : "(a variant)") + " by " + How);
  if (!std::strcmp(How, "funcload") || !std::strcmp(How, "lookup")) {
    MarkNext = true;
    MarkOpen.clear();
    for (size_t I = 0; I < S().Pending.size(); ++I)
      if (S().Pending[I].Open)
        MarkOpen.push_back(I);
  }
}

/// A 32-bit stream write landing. \p Deferred: it was held behind a wait;
/// a flag that then lands on a launch already ended is logged as
/// "lateflag" (the armed flag's write, released when its launch ended).
void writeValue32Now(CUstream St, CUdeviceptr Addr, uint32_t V, bool Deferred) {
  *reinterpret_cast<uint32_t *>(Addr) = V;
  if (isHostMem(Addr)) {
    log("armwrite stream=" + streamName(St) + " value=" + std::to_string(V));
    return;
  }
  bool Stops = false, Ended = false;
  for (PendingPtb &P : S().Pending)
    if (rd64(P.Params, P.K->CtrlAt) + 4 == Addr)
      (P.Open ? Stops : Ended) = true;
  log(std::string(Deferred && V && Ended && !Stops ? "lateflag" : "writevalue") +
      " stream=" + streamName(St) + " value=" + std::to_string(V));
  // A raised flag: the running launch finishes the blocks it has and stops.
  for (PendingPtb &P : S().Pending)
    if (P.Open && V && rd64(P.Params, P.K->CtrlAt) + 4 == Addr) {
      runPtb(P, S().BlocksBeforeFlag);
      closePtb(P);
    }
}

void waitValue32Now(CUstream St, CUdeviceptr Addr, uint32_t V) {
  if (isHostMem(Addr) && *reinterpret_cast<uint32_t *>(Addr) < V)
    S().Blocked[St] = {Addr, V, {}};
}

/// Runs \p Ops of stream \p St in order until one blocks it again.
void runOps(CUstream St, std::vector<std::function<void()>> &Ops) {
  for (size_t I = 0; I < Ops.size(); ++I) {
    auto B = S().Blocked.find(St);
    if (B != S().Blocked.end()) {
      B->second.Ops.insert(B->second.Ops.end(), Ops.begin() + I, Ops.end());
      return;
    }
    Ops[I]();
  }
}

static std::atomic<int> HoldReleased{0};

/// What the GPU does on its own: host writes behind ended launches land,
/// streams whose host word arrived go on (unless fake_hold_released: the
/// wait has passed, but the work behind it waits, as a busy GPU's front
/// end may make it, even if the word changes meanwhile).
void pump() {
  for (bool Progress = true; Progress;) {
    Progress = false;
    for (size_t I = 0; I < S().AfterLaunches.size(); ++I) {
      AfterLaunch A = S().AfterLaunches[I];
      if (S().Pending[A.Launch].Open)
        continue;
      S().AfterLaunches.erase(S().AfterLaunches.begin() + I);
      writeValue32Now(A.St, A.Addr, A.V, false);
      Progress = true;
      break;
    }
    for (auto It = S().Blocked.begin(); !Progress && It != S().Blocked.end(); ++It) {
      if (*reinterpret_cast<uint32_t *>(It->second.Addr) >= It->second.V)
        It->second.Released = true;
      if (!It->second.Released || HoldReleased.load())
        continue;
      CUstream St = It->first;
      auto Ops = std::move(It->second.Ops);
      S().Blocked.erase(It);
      runOps(St, Ops);
      Progress = true;
    }
  }
}

void finishPending(CUstream St, bool Any) {
  landMemsets(St, Any);
  for (PendingPtb &P : S().Pending) {
    if (!P.Open || (!Any && P.Stream != St))
      continue;
    uint32_t *Ctrl = reinterpret_cast<uint32_t *>(rd64(P.Params, P.K->CtrlAt));
    if (!Ctrl[1])
      runPtb(P, UINT64_MAX);
    closePtb(P);
  }
  pump();
}

std::vector<unsigned char> packParams(FKernel *K, void **Params, void **Extra) {
  std::vector<unsigned char> B;
  if (Extra) {
    void *Buf = nullptr;
    size_t Size = 0;
    for (void **E = Extra; *E != CU_LAUNCH_PARAM_END; E += 2) {
      if (*E == CU_LAUNCH_PARAM_BUFFER_POINTER)
        Buf = E[1];
      else if (*E == CU_LAUNCH_PARAM_BUFFER_SIZE)
        Size = *static_cast<size_t *>(E[1]);
    }
    B.assign(static_cast<unsigned char *>(Buf), static_cast<unsigned char *>(Buf) + Size);
    return B;
  }
  size_t End = 0;
  for (auto [O, Sz] : K->Params)
    End = std::max(End, O + Sz);
  B.assign(End, 0);
  for (size_t I = 0; I < K->Params.size(); ++I)
    std::memcpy(B.data() + K->Params[I].first, Params[I], K->Params[I].second);
  return B;
}

/// fake_launch_delay_us: every launch call takes this long (a driver that
/// stalls the caller).
static std::atomic<unsigned> LaunchDelayUs{0};
FAKE void fake_launch_delay_us(unsigned Us) { LaunchDelayUs = Us; }

CUresult launch(const char *Entry, CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz,
                unsigned Bx, CUstream St, void **Params, void **Extra) {
  if (unsigned Us = LaunchDelayUs.load())
    std::this_thread::sleep_for(std::chrono::microseconds(Us));
  std::lock_guard<std::mutex> DL(driverLock());
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  FKernel *K = asKernel(F);
  if (!K)
    return CUDA_ERROR_INVALID_HANDLE;
  if (K->K != Kind::Original && S().FailVariantLaunch) {
    auto Clear = S().ClearBeforeLaunch.find(St);
    if (Clear != S().ClearBeforeLaunch.end()) {
      S().Poisoned.push_back(Clear->second);
      S().ClearBeforeLaunch.erase(Clear);
    }
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  }
  S().ClearBeforeLaunch.erase(St);
  loadCode(K, "launch");
  std::vector<unsigned char> B = packParams(K, Params, Extra);
  checkLive(St, "stream in launch");
  log(std::string(Entry) + " " + K->Name + " grid=" + std::to_string(Gx) + "x" +
      std::to_string(Gy) + "x" + std::to_string(Gz) + " block=" + std::to_string(Bx) +
      " stream=" + streamName(St) + " bytes=" + std::to_string(B.size()) +
      (Extra ? " extra" : ""));
  if (S().Capturing[St])
    return CUDA_SUCCESS; // captured, not run
  landMemsets(St, false); // stream order
  switch (K->K) {
  case Kind::Original:
    for (uint64_t I = 0; I < uint64_t(Gx) * Gy * Gz; ++I)
      runBlock(B, I);
    break;
  case Kind::Slice: {
    uint32_t Off = rd32(B, K->SliceOffsetAt);
    for (uint64_t I = 0; I < Gx; ++I)
      runBlock(B, Off + I);
    break;
  }
  case Kind::Ptb: {
    uintptr_t Ctrl = rd64(B, K->CtrlAt);
    for (auto [Lo, Hi] : S().Poisoned)
      if (Ctrl >= Lo && Ctrl < Hi)
        log("POISONED control block: a memset that cannot be ordered before this launch may "
            "land on it");
    for (PendingPtb &P : S().Pending)
      if (rd64(P.Params, P.K->CtrlAt) == Ctrl)
        P.Superseded = true; // relaunched (or the block reused)
    S().Pending.push_back({K, B, Gx, St, true});
    break;
  }
  }
  return CUDA_SUCCESS;
}

} // namespace

//===----------------------------------------------------------------------===//
// The test's side
//===----------------------------------------------------------------------===//

FAKE void *fake_add_module(int Library) {
  auto *M = new FModule();
  M->Library = Library;
  return M;
}

FAKE void fake_set_global(void *M, const char *Name, const char *Bytes, size_t Size) {
  static_cast<FModule *>(M)->Globals[Name] = std::string(Bytes, Size);
}

/// Kind: 0 original, 1 slice, 2 ptb. Params: N (offset, size) pairs.
FAKE void *fake_add_kernel(void *M, const char *Name, int Kind_, const size_t *Layout, size_t N,
                           size_t SliceOffsetAt, size_t GridAt, size_t CtrlAt, size_t ChunkAt) {
  auto *K = new FKernel();
  K->Name = Name;
  K->M = static_cast<FModule *>(M);
  K->K = static_cast<Kind>(Kind_);
  for (size_t I = 0; I < N; ++I)
    K->Params.emplace_back(Layout[2 * I], Layout[2 * I + 1]);
  K->SliceOffsetAt = SliceOffsetAt;
  K->GridAt = GridAt;
  K->CtrlAt = CtrlAt;
  K->ChunkAt = ChunkAt;
  K->M->Kernels.push_back(K);
  return K;
}

/// The next cuDevicePrimaryCtxRelease destroys the primary context.
FAKE void fake_release_destroys() { S().ReleaseDestroys = true; }
/// Destroys the context without a driver call the runtime sees.
FAKE void fake_destroy_context() {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  destroyContext();
}
/// A new context, with the destroyed one's handle.
FAKE void fake_new_context() {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  ++S().CtxId;
  S().PrimaryActive = true;
}
FAKE void fake_set_blocks_before_flag(unsigned N) { S().BlocksBeforeFlag = N; }
FAKE void fake_set_capturing(CUstream St, int On) { S().Capturing[St] = On; }
FAKE void fake_fail_variant_launches(int On) { S().FailVariantLaunch = On; }
FAKE size_t fake_log_size() { return S().Log.size(); }
FAKE const char *fake_log_line(size_t I) { return S().Log[I].c_str(); }
FAKE void fake_log_clear() { S().Log.clear(); }
/// Log lines that start with \p Prefix and contain \p Sub (safe while the
/// runtime's threads log).
FAKE size_t fake_log_count(const char *Prefix, const char *Sub) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  size_t N = 0;
  for (const std::string &L : S().Log)
    N += L.rfind(Prefix, 0) == 0 && L.find(Sub) != std::string::npos;
  return N;
}
/// 1: streams whose wait for host memory passed keep the work behind it
/// (a late flag that has not landed yet); 0: it runs at the next call.
FAKE void fake_hold_released(int On) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  HoldReleased = On;
  if (!On)
    pump();
}
/// Streams held by a wait on host memory (none at the end of a test: a
/// wait nothing would ever release hangs a device sync).
FAKE size_t fake_blocked_streams() {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  return S().Blocked.size();
}
/// Runs every pending PTB launch to its end (what a device sync does).
FAKE void fake_sync() {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  finishPending(nullptr, true);
}
FAKE unsigned fake_open_ptb_launches() {
  unsigned N = 0;
  for (auto &P : S().Pending)
    N += P.Open;
  return N;
}

//===----------------------------------------------------------------------===//
// Driver entry points
//===----------------------------------------------------------------------===//

FAKE CUresult cuGetErrorName(CUresult R, const char **Name) {
  *Name = R == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
FAKE CUresult cuCtxGetCurrent(CUcontext *C) {
  *C = S().Ctx;
  return CUDA_SUCCESS;
}
FAKE CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
FAKE CUresult cuCtxGetId(CUcontext, unsigned long long *Id) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  if (!S().PrimaryActive)
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *Id = S().CtxId;
  return CUDA_SUCCESS;
}
FAKE CUresult cuDevicePrimaryCtxGetState(CUdevice, unsigned *Flags, int *Active) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  *Flags = 0;
  *Active = S().PrimaryActive;
  return CUDA_SUCCESS;
}
FAKE CUresult cuDevicePrimaryCtxRetain(CUcontext *C, CUdevice) {
  *C = S().Ctx;
  return CUDA_SUCCESS;
}
/// Destroys the context when the test said the next release is the last.
FAKE CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  if (S().ReleaseDestroys) {
    log("primary context released, destroyed");
    destroyContext();
    S().ReleaseDestroys = false;
  }
  return CUDA_SUCCESS;
}
FAKE CUresult cuCtxDestroy_v2(CUcontext) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  log("context destroyed");
  destroyContext();
  return CUDA_SUCCESS;
}
FAKE CUresult cuCtxGetDevice(CUdevice *D) {
  *D = 0;
  return CUDA_SUCCESS;
}
FAKE CUresult cuDeviceGetAttribute(int *V, CUdevice_attribute A, CUdevice) {
  if (A == CU_DEVICE_ATTRIBUTE_MPS_ENABLED) {
    // FAKE_MPS=1: this context is an MPS client; unset: the attribute is
    // unknown (an older driver), so the runtime looks for the daemon's pipe.
    const char *Mps = std::getenv("FAKE_MPS");
    if (!Mps)
      return CUDA_ERROR_INVALID_VALUE;
    *V = std::atoi(Mps);
    return CUDA_SUCCESS;
  }
  *V = A == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT       ? S().SMs
       : A == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9
                                                           : 0;
  return CUDA_SUCCESS;
}
FAKE CUresult cuDeviceGetUuid_v2(CUuuid *U, CUdevice) {
  std::memset(U->bytes, 0xab, sizeof U->bytes);
  return CUDA_SUCCESS;
}
FAKE CUresult cuMemHostRegister_v2(void *, size_t Bytes, unsigned Flags) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  log("hostregister bytes=" + std::to_string(Bytes) + " flags=" + std::to_string(Flags));
  return CUDA_SUCCESS;
}
FAKE CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *D, void *P, unsigned) {
  *D = reinterpret_cast<CUdeviceptr>(P);
  return CUDA_SUCCESS;
}
/// Runs at once (the fake's original kernels run when launched).
FAKE CUresult cuStreamWriteValue64_v2(CUstream St, CUdeviceptr Addr, cuuint64_t V, unsigned) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  checkLive(St, "stream in writevalue64");
  __atomic_store_n(reinterpret_cast<uint64_t *>(Addr), V, __ATOMIC_RELEASE);
  log("writevalue64 stream=" + streamName(St) + " value=" + std::to_string(V));
  return CUDA_SUCCESS;
}
FAKE CUresult cuLaunchHostFunc(CUstream St, CUhostFn F, void *Data) {
  log("hostfunc stream=" + streamName(St));
  F(Data);
  return CUDA_SUCCESS;
}
FAKE CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *N, CUfunction, int, size_t) {
  *N = S().BlocksPerSM;
  return CUDA_SUCCESS;
}

FAKE CUresult cuFuncGetName(const char **Name, CUfunction F) {
  FKernel *K = asKernel(F);
  if (!K || K->M->Library)
    return CUDA_ERROR_INVALID_HANDLE;
  *Name = K->Name.c_str();
  return CUDA_SUCCESS;
}
FAKE CUresult cuFuncGetModule(CUmodule *M, CUfunction F) {
  FKernel *K = asKernel(F);
  if (!K || K->M->Library)
    return CUDA_ERROR_INVALID_HANDLE;
  *M = reinterpret_cast<CUmodule>(K->M);
  return CUDA_SUCCESS;
}
static CUresult paramInfo(void *F, size_t I, size_t *Off, size_t *Size) {
  FKernel *K = asKernel(F);
  if (!K)
    return CUDA_ERROR_INVALID_HANDLE;
  if (I >= K->Params.size())
    return CUDA_ERROR_INVALID_VALUE;
  *Off = K->Params[I].first;
  *Size = K->Params[I].second;
  return CUDA_SUCCESS;
}
FAKE CUresult cuFuncGetParamInfo(CUfunction F, size_t I, size_t *Off, size_t *Size) {
  FKernel *K = asKernel(F);
  if (K && K->M->Library)
    return CUDA_ERROR_INVALID_HANDLE;
  return paramInfo(F, I, Off, Size);
}
FAKE CUresult cuKernelGetParamInfo(CUkernel F, size_t I, size_t *Off, size_t *Size) {
  return paramInfo(F, I, Off, Size);
}
FAKE CUresult cuKernelGetName(const char **Name, CUkernel F) {
  FKernel *K = asKernel(F);
  if (!K || !K->M->Library)
    return CUDA_ERROR_INVALID_HANDLE;
  *Name = K->Name.c_str();
  return CUDA_SUCCESS;
}
FAKE CUresult cuKernelGetLibrary(CUlibrary *L, CUkernel F) {
  FKernel *K = asKernel(F);
  if (!K || !K->M->Library)
    return CUDA_ERROR_INVALID_HANDLE;
  *L = reinterpret_cast<CUlibrary>(K->M);
  return CUDA_SUCCESS;
}
/// FAKE_LOOKUP_LOADS=1: a lookup loads the kernel's code (lazy loading).
static void lookupLoads(void *P) {
  static const bool On = [] {
    const char *V = std::getenv("FAKE_LOOKUP_LOADS");
    return V && !std::strcmp(V, "1");
  }();
  FKernel *K = asKernel(P);
  if (!On || !K)
    return;
  std::lock_guard<std::mutex> DL(driverLock());
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  loadCode(K, "lookup");
}
FAKE CUresult cuKernelGetFunction(CUfunction *F, CUkernel K) {
  *F = reinterpret_cast<CUfunction>(K);
  lookupLoads(K);
  return CUDA_SUCCESS;
}
static CUresult getKernel(void *M, const char *Name, void **Out) {
  for (FKernel *K : static_cast<FModule *>(M)->Kernels)
    if (K->Name == Name) {
      *Out = K;
      lookupLoads(K);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}
FAKE CUresult cuModuleGetFunction(CUfunction *F, CUmodule M, const char *Name) {
  return getKernel(M, Name, reinterpret_cast<void **>(F));
}
FAKE CUresult cuLibraryGetKernel(CUkernel *K, CUlibrary L, const char *Name) {
  return getKernel(L, Name, reinterpret_cast<void **>(K));
}
static CUresult getGlobal(void *M, const char *Name, CUdeviceptr *P, size_t *Bytes) {
  auto &G = static_cast<FModule *>(M)->Globals;
  auto It = G.find(Name);
  if (It == G.end())
    return CUDA_ERROR_NOT_FOUND;
  *P = reinterpret_cast<CUdeviceptr>(It->second.data());
  *Bytes = It->second.size();
  return CUDA_SUCCESS;
}
FAKE CUresult cuModuleGetGlobal_v2(CUdeviceptr *P, size_t *Bytes, CUmodule M, const char *Name) {
  return getGlobal(M, Name, P, Bytes);
}
FAKE CUresult cuLibraryGetGlobal(CUdeviceptr *P, size_t *Bytes, CUlibrary L, const char *Name) {
  return getGlobal(L, Name, P, Bytes);
}

FAKE CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *M) {
  *M = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return CUDA_SUCCESS;
}
FAKE CUresult cuStreamIsCapturing(CUstream St, CUstreamCaptureStatus *Status) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  *Status = S().Capturing[St] ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
FAKE CUresult cuCtxGetStreamPriorityRange(int *Least, int *Greatest) {
  *Least = 0;
  *Greatest = -5;
  return CUDA_SUCCESS;
}
static std::atomic<int> FailStreamCreates{0}, SkipStreamCreates{0}, FailEventCreates{0};
/// After \p Skip more stream creations, the next \p N fail, as a driver
/// call may.
FAKE void fake_fail_stream_creates(int N, int Skip) {
  SkipStreamCreates = Skip;
  FailStreamCreates = N;
}
/// The next \p N event creations fail.
FAKE void fake_fail_event_creates(int N) { FailEventCreates = N; }
FAKE CUresult cuStreamCreateWithPriority(CUstream *St, unsigned Flags, int Prio) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  if (FailStreamCreates.load() > 0 && SkipStreamCreates.load() > 0) {
    --SkipStreamCreates;
  } else if (FailStreamCreates.load() > 0) {
    --FailStreamCreates;
    log("streamcreate FAILED priority=" + std::to_string(Prio));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *St = reinterpret_cast<CUstream>(static_cast<uintptr_t>(100 + S().NextStream++));
  S().Created.insert(reinterpret_cast<uintptr_t>(*St));
  log("streamcreate " + streamName(*St) + " flags=" + std::to_string(Flags) +
      " priority=" + std::to_string(Prio));
  return CUDA_SUCCESS;
}
/// Later uses of the stream are logged as DEAD (a test's failure).
FAKE CUresult cuStreamDestroy_v2(CUstream St) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  finishPending(St, false);
  log("streamdestroy " + streamName(St));
  S().Dead.insert(reinterpret_cast<uintptr_t>(St));
  return CUDA_SUCCESS;
}
/// A stream synchronisation takes this long (the GPU still working).
static std::atomic<unsigned> SyncDelayUs{0};
/// The next this many stream queries find the work not ready.
static std::atomic<int> QueriesNotReady{0};
FAKE void fake_sync_delay_us(unsigned Us) { SyncDelayUs = Us; }
FAKE void fake_queries_not_ready(int N) { QueriesNotReady = N; }
FAKE CUresult cuStreamSynchronize(CUstream St) {
  if (unsigned Us = SyncDelayUs.load())
    usleep(Us);
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  finishPending(St, false);
  if (S().Blocked.count(St)) {
    // The real driver would wait here for ever: a test's failure.
    std::fprintf(stderr, "fake driver: stream %s waits for ever on host memory\n",
                 streamName(St).c_str());
    std::abort();
  }
  return CUDA_SUCCESS;
}
FAKE CUresult cuStreamQuery(CUstream St) {
  if (QueriesNotReady.load() > 0 && QueriesNotReady.fetch_sub(1) > 0)
    return CUDA_ERROR_NOT_READY;
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  finishPending(St, false);
  return CUDA_SUCCESS;
}
static std::atomic<unsigned> StreamWaitEvents{0};
/// The stream goes on once the event's work is done: the memsets queued
/// before the event on its stream land (launches are not modelled here).
/// Counted, not logged (fake_stream_wait_events).
FAKE CUresult cuStreamWaitEvent(CUstream, CUevent E, unsigned) {
  std::lock_guard<std::mutex> DL(driverLock());
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  ++StreamWaitEvents;
  auto It = S().Events.find(E);
  if (It != S().Events.end() && !It->second.Deferred)
    landMemsets(It->second.Stream, false, It->second.Memsets);
  return CUDA_SUCCESS;
}
FAKE unsigned fake_stream_wait_events() { return StreamWaitEvents.load(); }
FAKE CUresult cuStreamWaitValue32_v2(CUstream St, CUdeviceptr Addr, cuuint32_t V, unsigned F) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  checkLive(St, "stream in waitvalue");
  log("waitvalue stream=" + streamName(St) + " value=" + std::to_string(V) +
      " flags=" + std::to_string(F) + " addr=" + std::to_string(Addr) +
      (isHostMem(Addr) ? " host" : ""));
  pump();
  if (S().Blocked.count(St))
    S().Blocked[St].Ops.push_back([=] { waitValue32Now(St, Addr, V); });
  else
    waitValue32Now(St, Addr, V);
  return CUDA_SUCCESS;
}
static std::atomic<int> FailFlagWrites{0};
/// The next N writes of a raised flag (1 to a PTB launch's control block)
/// fail, as a driver call may.
FAKE void fake_fail_flag_writes(int N) { FailFlagWrites = N; }
/// The next event record made right after a memset on its stream fails
/// (the memset stays queued: see State::Poisoned).
FAKE void fake_fail_record_after_memset() {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  S().FailRecordAfterMemset = true;
}
FAKE CUresult cuStreamWriteValue32_v2(CUstream St, CUdeviceptr Addr, cuuint32_t V, unsigned) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  checkLive(St, "stream in writevalue");
  if (V == 1 && FailFlagWrites.load() > 0)
    for (PendingPtb &P : S().Pending)
      if (rd64(P.Params, P.K->CtrlAt) + 4 == Addr) {
        --FailFlagWrites;
        log("writevalue FAILED stream=" + streamName(St));
        return CUDA_ERROR_UNKNOWN;
      }
  pump();
  if (S().Blocked.count(St)) {
    S().Blocked[St].Ops.push_back([=] { writeValue32Now(St, Addr, V, true); });
    return CUDA_SUCCESS;
  }
  if (isHostMem(Addr))
    for (size_t I = S().Pending.size(); I-- > 0;)
      if (S().Pending[I].Open && S().Pending[I].Stream == St) {
        S().AfterLaunches.push_back({I, St, Addr, V}); // lands when the launch ends
        return CUDA_SUCCESS;
      }
  writeValue32Now(St, Addr, V, false);
  pump();
  return CUDA_SUCCESS;
}
static int slowEvents();
FAKE CUresult cuEventCreate(CUevent *E, unsigned Flags) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  if (FailEventCreates.load() > 0) {
    --FailEventCreates;
    log("eventcreate FAILED");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *E = reinterpret_cast<CUevent>(static_cast<uintptr_t>(0x10000 + S().NextEvent++));
  S().Created.insert(reinterpret_cast<uintptr_t>(*E));
  if (Flags & CU_EVENT_DISABLE_TIMING)
    S().Untimed.insert(*E);
  return CUDA_SUCCESS;
}
FAKE CUresult cuEventRecord(CUevent E, CUstream St) {
  std::lock_guard<std::mutex> DL(driverLock());
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  checkLive(E, "event in record");
  checkLive(St, "stream in record");
  auto Last = S().LastMemset.find(St);
  if (S().FailRecordAfterMemset && Last != S().LastMemset.end()) {
    S().FailRecordAfterMemset = false;
    S().Poisoned.push_back(Last->second);
    log("record FAILED stream=" + streamName(St));
    return CUDA_ERROR_UNKNOWN;
  }
  S().LastMemset.erase(St);
  if (MarkNext) {
    MarkNext = false;
    S().LoadMarks[E] = MarkOpen;
  } else {
    S().LoadMarks.erase(E);
  }
  pump();
  if (S().Blocked.count(St)) {
    S().Events[E] = {St, 0, 0, 0, true};
    S().Blocked[St].Ops.push_back(
        [=] { S().Events[E] = {St, S().Pending.size(), S().MemsetSeq, slowEvents()}; });
  } else {
    S().Events[E] = {St, S().Pending.size(), S().MemsetSeq, slowEvents()};
  }
  static const bool LogRecords = std::getenv("FAKE_LOG_RECORDS") != nullptr;
  if (LogRecords) // tests that check consecutive log lines do without
    log("record stream=" + streamName(St));
  return CUDA_SUCCESS;
}
static int holdEvents();
static int holdPtb();
/// An event completes once the PTB launches queued on its stream before it
/// are over: waiting for it runs them to their end (or stop, flag up).
FAKE CUresult cuEventQuery(CUevent E) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  // The real driver may crash on a destroyed event's handle.
  if (S().Dead.count(reinterpret_cast<uintptr_t>(E))) {
    checkLive(E, "event in query");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  pump();
  if (S().Events[E].Deferred)
    return CUDA_ERROR_NOT_READY; // behind a wait not yet released
  if (auto M = S().LoadMarks.find(E); M != S().LoadMarks.end()) {
    // Behind a load: its stall alone (what else the fake holds aside).
    if (HoldLoadMarks.load())
      return CUDA_ERROR_NOT_READY;
    for (size_t I : M->second)
      if (S().Pending[I].Open)
        return CUDA_ERROR_NOT_READY;
    return CUDA_SUCCESS;
  }
  if (holdEvents())
    return CUDA_ERROR_NOT_READY;
  if (S().Events[E].SlowLeft > 0) {
    --S().Events[E].SlowLeft;
    return CUDA_ERROR_NOT_READY; // work that takes a while
  }
  FEvent Ev = S().Events[E];
  if (const int Hold = holdPtb() ? holdPtb() : StallPtb.load() ? 1 : 0)
    for (size_t I = 0; I < Ev.Pending && I < S().Pending.size(); ++I) {
      PendingPtb &P = S().Pending[I];
      if (P.Open && P.Stream == Ev.Stream && (Hold == 1 || P.Workers == unsigned(Hold)) &&
          !reinterpret_cast<uint32_t *>(rd64(P.Params, P.K->CtrlAt))[1])
        return CUDA_ERROR_NOT_READY; // a long PTB launch: still running
    }
  for (size_t I = 0; I < Ev.Pending && I < S().Pending.size(); ++I) {
    PendingPtb &P = S().Pending[I];
    if (!P.Open || P.Stream != Ev.Stream)
      continue;
    uint32_t *Ctrl = reinterpret_cast<uint32_t *>(rd64(P.Params, P.K->CtrlAt));
    if (!Ctrl[1])
      runPtb(P, UINT64_MAX);
    closePtb(P);
  }
  landMemsets(Ev.Stream, false, Ev.Memsets);
  pump();
  return CUDA_SUCCESS;
}
FAKE CUresult cuEventSynchronize(CUevent E) { return cuEventQuery(E); }
/// Every timed launch took 0.5 ms, or FAKE_ELAPSED_US microseconds.
FAKE CUresult cuEventElapsedTime_v2(float *Ms, CUevent A, CUevent B) {
  {
    std::lock_guard<std::recursive_mutex> G(S().Mu);
    if (S().Untimed.count(A) || S().Untimed.count(B))
      return CUDA_ERROR_INVALID_HANDLE; // as the driver: no times recorded
  }
  const char *Us = std::getenv("FAKE_ELAPSED_US");
  *Ms = Us ? float(std::atof(Us) / 1000.0) : 0.5f;
  return CUDA_SUCCESS;
}
/// Device memory comes uncleared, as the driver's may (bytes 0xa5): a
/// control block used before any clear runs no blocks.
FAKE CUresult cuMemAlloc_v2(CUdeviceptr *P, size_t Bytes) {
  void *M = std::malloc(Bytes ? Bytes : 1);
  if (M)
    std::memset(M, 0xa5, Bytes);
  *P = reinterpret_cast<CUdeviceptr>(M);
  return *P ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
FAKE CUresult cuMemHostAlloc(void **P, size_t Bytes, unsigned) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  *P = std::calloc(1, Bytes);
  if (*P)
    S().HostAllocs.push_back(
        {reinterpret_cast<uintptr_t>(*P), reinterpret_cast<uintptr_t>(*P) + Bytes});
  return *P ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
/// The next \p N clears of a whole slab of control blocks (memsets of 256
/// words) fail, queuing nothing, as a driver call may.
FAKE void fake_fail_slab_memsets(int N) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  S().FailSlabMemsets = N;
}
FAKE CUresult cuMemsetD32Async(CUdeviceptr P, unsigned V, size_t N, CUstream St) {
  std::lock_guard<std::mutex> DL(driverLock());
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  if (N == 256 && S().FailSlabMemsets > 0) {
    --S().FailSlabMemsets;
    log("memset FAILED stream=" + streamName(St));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  S().Memsets.push_back({S().MemsetSeq++, St, reinterpret_cast<uint32_t *>(P), V, N});
  S().LastMemset[St] = {uintptr_t(P), uintptr_t(P) + 4 * N};
  S().ClearBeforeLaunch[St] = {uintptr_t(P), uintptr_t(P) + 4 * N};
  log("memset stream=" + streamName(St) + " words=" + std::to_string(N));
  return CUDA_SUCCESS;
}
/// On (1): PTB launches run until their flag goes up, as with
/// fake_hold_ptb(1), but make no progress: a read of a control block does
/// not move its counts (with fake_hold_ptb a read of a running launch's
/// block finds one more block done, as time would).
FAKE void fake_stall_ptb(int On) { StallPtb = On; }
FAKE CUresult cuMemcpyDtoHAsync_v2(void *Dst, CUdeviceptr Src, size_t N, CUstream St) {
  std::lock_guard<std::mutex> DL(driverLock());
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  checkLive(St, "stream in copy");
  if (!StallPtb.load())
    for (PendingPtb &P : S().Pending)
      if (P.Open && rd64(P.Params, P.K->CtrlAt) == Src &&
          !reinterpret_cast<uint32_t *>(Src)[1])
        runPtb(P, 1); // a running launch's block read later: one more done
  std::memcpy(Dst, reinterpret_cast<void *>(Src), N);
  return CUDA_SUCCESS;
}
/// A synchronous copy: holds the driver's lock while the GPU runs what was
/// issued before it (every open PTB launch without a raised flag runs to
/// its end); returns once every PTB launch's grid is complete.
FAKE CUresult cuMemcpyDtoH_v2(void *Dst, CUdeviceptr Src, size_t N) {
  std::lock_guard<std::mutex> DL(driverLock());
  for (int Try = 0;; ++Try) {
    {
      std::lock_guard<std::recursive_mutex> G(S().Mu);
      finishPending(nullptr, true);
      // The latest launch on each control block (resumptions share it).
      std::map<uint32_t *, uint64_t> Grid;
      for (PendingPtb &P : S().Pending)
        Grid[reinterpret_cast<uint32_t *>(rd64(P.Params, P.K->CtrlAt))] = gridBlocks(P);
      bool Complete = true;
      for (auto [Ctrl, Blocks] : Grid)
        Complete &= Ctrl[2] >= Blocks;
      if (Complete) {
        std::memcpy(Dst, reinterpret_cast<void *>(Src), N);
        log("copy dtoh bytes=" + std::to_string(N));
        return CUDA_SUCCESS;
      }
      if (Try == 2000) {
        log("copy TIMED OUT: a stopped launch was never resumed");
        std::fprintf(stderr, "fake driver: copy TIMED OUT: a stopped launch was never resumed\n");
        return CUDA_ERROR_LAUNCH_TIMEOUT;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

FAKE CUresult cuLaunchKernel(CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz, unsigned Bx,
                             unsigned, unsigned, unsigned, CUstream St, void **P, void **E) {
  return launch("launch", F, Gx, Gy, Gz, Bx, St, P, E);
}
FAKE CUresult cuLaunchKernel_ptsz(CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz,
                                  unsigned Bx, unsigned, unsigned, unsigned, CUstream St,
                                  void **P, void **E) {
  return launch("launch_ptsz", F, Gx, Gy, Gz, Bx, St, P, E);
}
FAKE CUresult cuLaunchKernelEx(const CUlaunchConfig *C, CUfunction F, void **P, void **E) {
  return launch("launchex", F, C->gridDimX, C->gridDimY, C->gridDimZ, C->blockDimX, C->hStream,
                P, E);
}
FAKE CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *C, CUfunction F, void **P, void **E) {
  return launch("launchex_ptsz", F, C->gridDimX, C->gridDimY, C->gridDimZ, C->blockDimX,
                C->hStream, P, E);
}
FAKE CUresult cuLaunchCooperativeKernel(CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz,
                                        unsigned Bx, unsigned, unsigned, unsigned, CUstream St,
                                        void **P) {
  return launch("launchcoop", F, Gx, Gy, Gz, Bx, St, P, nullptr);
}
FAKE CUresult cuGraphLaunch(CUgraphExec, CUstream St) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  log("graphlaunch stream=" + streamName(St));
  return CUDA_SUCCESS;
}
FAKE CUresult cuModuleUnload(CUmodule) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  log("moduleunload");
  return CUDA_SUCCESS;
}
FAKE CUresult cuLibraryUnload(CUlibrary) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  log("libraryunload");
  return CUDA_SUCCESS;
}

// Module loads: logged as "load ENTRY bytes=N variants=0|1 ptx=0|1", the
// image's length as text (0 for a binary) and whether it carries Tally's
// metadata; with fake_reject_variants(1) an image with it is refused as
// the driver refuses bad PTX.
static bool RejectVariants = false;
FAKE void fake_reject_variants(int On) { RejectVariants = On; }
/// While on, no event has completed (cuEventQuery answers NOT_READY): work
/// the runtime queued is "still running".
/// Held (1): the first event recorded after each cuFuncLoad is not ready
/// (the load's stall not over) until the hold ends (0).
FAKE void fake_hold_load_marks(int On) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  HoldLoadMarks = On;
}
FAKE CUresult cuFuncIsLoaded(CUfunctionLoadingState *St, CUfunction F) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  FKernel *K = asKernel(F);
  if (!K)
    return CUDA_ERROR_INVALID_HANDLE;
  *St = K->Loaded ? CU_FUNCTION_LOADING_STATE_LOADED : CU_FUNCTION_LOADING_STATE_UNLOADED;
  return CUDA_SUCCESS;
}
FAKE CUresult cuFuncLoad(CUfunction F) {
  std::lock_guard<std::mutex> DL(driverLock());
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  FKernel *K = asKernel(F);
  if (!K)
    return CUDA_ERROR_INVALID_HANDLE;
  log("funcload " + (K->K == Kind::Original ? K->Name : std::string("(a variant)")));
  loadCode(K, "funcload");
  return CUDA_SUCCESS;
}
static std::atomic<int> HoldEvents{0};
FAKE void fake_hold_events(int On) { HoldEvents = On; }
static int holdEvents() { return HoldEvents.load(); }
/// While N > 0, an event recorded then is "not ready" for its first N
/// queries: each launch takes a while, and is then seen to end.
static std::atomic<int> SlowEvents{0};
FAKE void fake_slow_events(int N) { SlowEvents = N; }
static int slowEvents() { return SlowEvents.load(); }
/// While on, PTB launches run until their flag is raised (long kernels):
/// events behind an open one on its stream are not reached. 1: every PTB
/// launch; N > 1: only those of N workers.
static std::atomic<int> HoldPtb{0};
FAKE void fake_hold_ptb(int On) { HoldPtb = On; }
static int holdPtb() { return HoldPtb.load(); }

static CUresult loadImage(const char *Entry, const void *Image, size_t Size = 0) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  const char *T = static_cast<const char *>(Image);
  bool Ptx = T && T[0] != 0x7f;
  std::string Text = Ptx ? std::string(T, Size ? strnlen(T, Size) : std::strlen(T)) : "";
  bool Variants = Text.find("__tally_metadata") != std::string::npos;
  log(std::string("load ") + Entry + " bytes=" + std::to_string(Text.size()) +
      " variants=" + (Variants ? "1" : "0") + " ptx=" + (Ptx ? "1" : "0"));
  return Variants && RejectVariants ? CUDA_ERROR_INVALID_PTX : CUDA_SUCCESS;
}
FAKE CUresult cuModuleLoadData(CUmodule *M, const void *Image) {
  CUresult R = loadImage("cuModuleLoadData", Image);
  if (R == CUDA_SUCCESS)
    *M = static_cast<CUmodule>(fake_add_module(0));
  return R;
}
FAKE CUresult cuModuleLoadDataEx(CUmodule *M, const void *Image, unsigned, CUjit_option *,
                                 void **) {
  CUresult R = loadImage("cuModuleLoadDataEx", Image);
  if (R == CUDA_SUCCESS)
    *M = static_cast<CUmodule>(fake_add_module(0));
  return R;
}
FAKE CUresult cuLibraryLoadData(CUlibrary *L, const void *Code, CUjit_option *, void **, unsigned,
                                CUlibraryOption *, void **, unsigned) {
  CUresult R = loadImage("cuLibraryLoadData", Code);
  if (R == CUDA_SUCCESS)
    *L = static_cast<CUlibrary>(fake_add_module(1));
  return R;
}
FAKE CUresult cuLinkAddData_v2(CUlinkState, CUjitInputType Type, void *Data, size_t Size,
                               const char *, unsigned, CUjit_option *, void **) {
  if (Type != CU_JIT_INPUT_PTX) {
    std::lock_guard<std::recursive_mutex> G(S().Mu);
    log("load cuLinkAddData binary");
    return CUDA_SUCCESS;
  }
  return loadImage("cuLinkAddData", Data, Size);
}
FAKE CUresult cuLinkDestroy(CUlinkState) {
  std::lock_guard<std::recursive_mutex> G(S().Mu);
  log("linkdestroy");
  return CUDA_SUCCESS;
}

static void *procFor(const char *Sym, cuuint64_t Flags) {
  std::string Name = Sym;
  if (Flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    if (Name == "cuLaunchKernel")
      return reinterpret_cast<void *>(&cuLaunchKernel_ptsz);
    if (Name == "cuLaunchKernelEx")
      return reinterpret_cast<void *>(&cuLaunchKernelEx_ptsz);
  }
  static const std::map<std::string, void *> Table = {
      {"cuLaunchKernel", reinterpret_cast<void *>(&cuLaunchKernel)},
      {"cuLaunchKernelEx", reinterpret_cast<void *>(&cuLaunchKernelEx)},
      {"cuLaunchCooperativeKernel", reinterpret_cast<void *>(&cuLaunchCooperativeKernel)},
      {"cuGraphLaunch", reinterpret_cast<void *>(&cuGraphLaunch)},
      {"cuModuleUnload", reinterpret_cast<void *>(&cuModuleUnload)},
      {"cuLibraryUnload", reinterpret_cast<void *>(&cuLibraryUnload)},
      {"cuModuleLoadData", reinterpret_cast<void *>(&cuModuleLoadData)},
      {"cuModuleLoadDataEx", reinterpret_cast<void *>(&cuModuleLoadDataEx)},
      {"cuLibraryLoadData", reinterpret_cast<void *>(&cuLibraryLoadData)},
      {"cuLinkAddData", reinterpret_cast<void *>(&cuLinkAddData_v2)},
      {"cuLinkDestroy", reinterpret_cast<void *>(&cuLinkDestroy)},
      {"cuMemcpyDtoH", reinterpret_cast<void *>(&cuMemcpyDtoH_v2)},
      {"cuCtxGetCurrent", reinterpret_cast<void *>(&cuCtxGetCurrent)},
      {"cuCtxDestroy", reinterpret_cast<void *>(&cuCtxDestroy_v2)},
      {"cuDevicePrimaryCtxRelease", reinterpret_cast<void *>(&cuDevicePrimaryCtxRelease_v2)},
      {"cuModuleGetFunction", reinterpret_cast<void *>(&cuModuleGetFunction)},
      {"cuKernelGetFunction", reinterpret_cast<void *>(&cuKernelGetFunction)},
      {"cuFuncLoad", reinterpret_cast<void *>(&cuFuncLoad)},
  };
  auto It = Table.find(Name);
  return It == Table.end() ? nullptr : It->second;
}

FAKE CUresult cuGetProcAddress_v2(const char *Sym, void **Pfn, int, cuuint64_t Flags,
                                  CUdriverProcAddressQueryResult *Status) {
  void *P = procFor(Sym, Flags);
  if (!P && !std::strcmp(Sym, "cuGetProcAddress"))
    P = reinterpret_cast<void *>(&cuGetProcAddress_v2);
  *Pfn = P;
  if (Status)
    *Status = P ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_SUCCESS;
}
FAKE CUresult cuGetProcAddress(const char *Sym, void **Pfn, int V, cuuint64_t Flags) {
  return cuGetProcAddress_v2(Sym, Pfn, V, Flags, nullptr);
}
