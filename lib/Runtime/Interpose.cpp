//===- Interpose.cpp - the driver entry points libtally.so exports --------===//
//
// The thin C shim: the symbols an application (or the CUDA runtime, cuBLAS,
// PyTorch) reaches the driver through, each forwarding to the runtime or
// straight to the real entry point. Three ways in, all covered:
//
//  * direct calls (a program linked with -lcuda): LD_PRELOAD puts these
//    definitions first;
//  * dlsym(libcuda, "cu...") (the CUDA runtime finds cuGetProcAddress this
//    way): dlsym itself is interposed and hands out the wrappers;
//  * cuGetProcAddress / cuGetProcAddress_v2 (how the CUDA runtime and the
//    libraries find everything else), every version and flag: the real
//    function answers, and for the symbols below the answer is replaced by
//    the wrapper of the same flavour (legacy or per-thread default stream),
//    with the real pointer kept behind it.
//
// Besides launches, module loads and context teardown, the calls of
// BlockingCalls.def are wrapped: they pass through unchanged, marked as
// "a program thread is in a call that may wait holding the driver's lock"
// for the preemptor (Launcher.cpp); and those of WaitCalls.def, where an
// HP process issues its pending completion write before the program
// waits. Nothing else happens here.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/Runtime.h"

#include <dlfcn.h>

#include <memory>
#include <string>

#include <atomic>
#include <cstdlib>
#include <cstring>

// cuda.h maps these names to versioned symbols; here they are the exported
// names themselves.
#undef cuGetProcAddress
#undef cuLaunchKernel
#undef cuLaunchKernelEx
#undef cuLaunchCooperativeKernel
#undef cuGraphLaunch
// Not the _v2 versions: BlockingCalls.def names both.
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync

using namespace tally::rt;

extern "C" {
CUresult cuGetProcAddress(const char *Symbol, void **Pfn, int Version, cuuint64_t Flags);
CUresult cuLaunchKernel_ptsz(CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz, unsigned Bx,
                             unsigned By, unsigned Bz, unsigned Smem, CUstream S, void **Params,
                             void **Extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *Cfg, CUfunction F, void **Params,
                               void **Extra);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz,
                                        unsigned Bx, unsigned By, unsigned Bz, unsigned Smem,
                                        CUstream S, void **Params);
CUresult cuGraphLaunch_ptsz(CUgraphExec G, CUstream S);
}

namespace {

enum Hook {
  HLaunchKernel,
  HLaunchKernelPtsz,
  HLaunchKernelEx,
  HLaunchKernelExPtsz,
  HLaunchCooperative,
  HLaunchCooperativePtsz,
  HGraphLaunch,
  HGraphLaunchPtsz,
  HModuleUnload,
  HLibraryUnload,
  HModuleLoadData,
  HModuleLoadDataEx,
  HLibraryLoadData,
  HLinkAddData,
  HLinkDestroy,
  HCtxDestroy,
  HPrimaryCtxRelease,
  HPrimaryCtxReset,
  HStreamDestroy,
  HGetProcAddress,
  HGetProcAddressV2,
#define TALLY_SYNC(N, B, V0, V1, P, A) H_##N, H_##N##_ptds,
#define TALLY_ASYNC(N, B, V0, V1, P, A, S) H_##N, H_##N##_ptsz,
#define TALLY_ONE(N, B, V0, V1, P, A) H_##N,
#define TALLY_LOAD(N, B, V0, V1, P, A) H_##N,
#include "BlockingCalls.def"
#define TALLY_WAIT(N, B, V0, V1, P, A, Q) H_##N, H_##N##_ptsz,
#define TALLY_WAIT_ONE(N, B, V0, V1, P, A, Q) H_##N,
#include "WaitCalls.def"
  NumHooks
};

const char *const ExportedName[NumHooks] = {
    "cuLaunchKernel",         "cuLaunchKernel_ptsz",
    "cuLaunchKernelEx",       "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz",
    "cuGraphLaunch",          "cuGraphLaunch_ptsz",
    "cuModuleUnload",         "cuLibraryUnload",
    "cuModuleLoadData",       "cuModuleLoadDataEx",
    "cuLibraryLoadData",      "cuLinkAddData_v2",
    "cuLinkDestroy",
    "cuCtxDestroy_v2",        "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset_v2",
    "cuStreamDestroy_v2",
    "cuGetProcAddress",       "cuGetProcAddress_v2",
#define TALLY_SYNC(N, B, V0, V1, P, A) #N, #N "_ptds",
#define TALLY_ASYNC(N, B, V0, V1, P, A, S) #N, #N "_ptsz",
#define TALLY_ONE(N, B, V0, V1, P, A) #N,
#define TALLY_LOAD(N, B, V0, V1, P, A) #N,
#include "BlockingCalls.def"
#define TALLY_WAIT(N, B, V0, V1, P, A, Q) #N, #N "_ptsz",
#define TALLY_WAIT_ONE(N, B, V0, V1, P, A, Q) #N,
#include "WaitCalls.def"
};

/// The calls of BlockingCalls.def and WaitCalls.def as cuGetProcAddress
/// names them.
struct BlockingProc {
  const char *Base;
  int MinVersion, MaxVersion;
  Hook Legacy, PerThread;
};
const BlockingProc BlockingProcs[] = {
#define TALLY_SYNC(N, B, V0, V1, P, A) {#B, V0, V1, H_##N, H_##N##_ptds},
#define TALLY_ASYNC(N, B, V0, V1, P, A, S) {#B, V0, V1, H_##N, H_##N##_ptsz},
#define TALLY_ONE(N, B, V0, V1, P, A) {#B, V0, V1, H_##N, H_##N},
#define TALLY_LOAD(N, B, V0, V1, P, A) {#B, V0, V1, H_##N, H_##N},
#include "BlockingCalls.def"
#define TALLY_WAIT(N, B, V0, V1, P, A, Q) {#B, V0, V1, H_##N, H_##N##_ptsz},
#define TALLY_WAIT_ONE(N, B, V0, V1, P, A, Q) {#B, V0, V1, H_##N, H_##N},
#include "WaitCalls.def"
};

std::atomic<void *> Real[NumHooks];
extern void *const Ours[NumHooks];

using DlsymFn = void *(*)(void *, const char *);

// dlsym is called by sanitizer runtimes while they initialize, before their
// shadow memory exists: the path it takes for names that are not ours must
// not be instrumented (it matters only in the sanitizer test builds).
#if defined(__clang__)
#define TALLY_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined", "coverage")))
#else
#define TALLY_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined")))
#endif

DlsymFn RealDlsym = nullptr;

TALLY_UNINSTRUMENTED DlsymFn realDlsymFn() {
  DlsymFn F = __atomic_load_n(&RealDlsym, __ATOMIC_ACQUIRE);
  if (!F) {
    void *P = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!P)
      P = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    F = reinterpret_cast<DlsymFn>(P);
    __atomic_store_n(&RealDlsym, F, __ATOMIC_RELEASE);
  }
  return F;
}

void *driverHandle() {
  static void *H = [] {
    const char *Path = std::getenv("TALLY_DRIVER");
    return dlopen(Path && *Path ? Path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  }();
  return H;
}

/// The real entry point behind hook \p H.
template <typename Fn> Fn real(Hook H) {
  void *P = Real[H].load(std::memory_order_acquire);
  if (!P) {
    void *D = driverHandle();
    P = D ? realDlsymFn()(D, ExportedName[H]) : nullptr;
    if (P == Ours[H])
      P = nullptr;
    Real[H].store(P, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(P);
}

void remember(Hook H, void *RealPtr) {
  if (RealPtr && RealPtr != Ours[H])
    Real[H].store(RealPtr, std::memory_order_release);
}

TALLY_UNINSTRUMENTED int hookByName(const char *Name) {
  if (!Name || Name[0] != 'c' || Name[1] != 'u')
    return -1;
  for (int H = 0; H < NumHooks; ++H)
    if (!std::strcmp(Name, ExportedName[H]))
      return H;
  return -1;
}

/// The wrapper cuGetProcAddress hands out for \p Symbol (a base name).
int hookForProc(const char *Symbol, int Version, cuuint64_t Flags) {
  bool Ptsz = Flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (!Symbol || Symbol[0] != 'c' || Symbol[1] != 'u')
    return -1;
  if (!std::strcmp(Symbol, "cuLaunchKernel"))
    return Ptsz ? HLaunchKernelPtsz : HLaunchKernel;
  if (!std::strcmp(Symbol, "cuLaunchKernelEx"))
    return Ptsz ? HLaunchKernelExPtsz : HLaunchKernelEx;
  if (!std::strcmp(Symbol, "cuLaunchCooperativeKernel"))
    return Ptsz ? HLaunchCooperativePtsz : HLaunchCooperative;
  if (!std::strcmp(Symbol, "cuGraphLaunch"))
    return Ptsz ? HGraphLaunchPtsz : HGraphLaunch;
  if (!std::strcmp(Symbol, "cuModuleUnload"))
    return HModuleUnload;
  if (!std::strcmp(Symbol, "cuLibraryUnload"))
    return HLibraryUnload;
  if (!std::strcmp(Symbol, "cuModuleLoadData"))
    return HModuleLoadData;
  if (!std::strcmp(Symbol, "cuModuleLoadDataEx"))
    return HModuleLoadDataEx;
  if (!std::strcmp(Symbol, "cuLibraryLoadData"))
    return HLibraryLoadData;
  if (!std::strcmp(Symbol, "cuLinkAddData"))
    return Version >= 6050 ? HLinkAddData : -1;
  if (!std::strcmp(Symbol, "cuLinkDestroy"))
    return HLinkDestroy;
  // Context teardown: only the versions our wrappers' signatures are (the
  // older ones are left alone).
  if (!std::strcmp(Symbol, "cuCtxDestroy"))
    return Version >= 4000 ? HCtxDestroy : -1;
  if (!std::strcmp(Symbol, "cuDevicePrimaryCtxRelease"))
    return Version >= 11000 ? HPrimaryCtxRelease : -1;
  if (!std::strcmp(Symbol, "cuDevicePrimaryCtxReset"))
    return Version >= 11000 ? HPrimaryCtxReset : -1;
  if (!std::strcmp(Symbol, "cuStreamDestroy"))
    return Version >= 4000 ? HStreamDestroy : -1;
  if (!std::strcmp(Symbol, "cuGetProcAddress"))
    return Version >= 12000 ? HGetProcAddressV2 : HGetProcAddress;
  for (const BlockingProc &B : BlockingProcs)
    if (!std::strcmp(Symbol, B.Base) && Version >= B.MinVersion &&
        (!B.MaxVersion || Version < B.MaxVersion))
      return Ptsz ? B.PerThread : B.Legacy;
  return -1;
}

/// A program thread inside a call of BlockingCalls.def: the preemptor
/// raises no flag meanwhile (Runtime::blockingCallBegin).
class BlockingCall {
public:
  explicit BlockingCall(bool Blocking) : RT(Blocking ? Runtime::get() : nullptr) {
    if (RT)
      RT->blockingCallBegin();
  }
  ~BlockingCall() {
    if (RT)
      RT->blockingCallEnd();
  }
  BlockingCall(const BlockingCall &) = delete;
  BlockingCall &operator=(const BlockingCall &) = delete;

private:
  Runtime *RT;
};

/// A program thread inside a call that may load a kernel's code
/// (BlockingCalls.def, TALLY_LOAD): blocking, and once the call succeeded
/// the runtime marks the load (Runtime::codeLoaded) before the drain lock
/// is let go, so that no flag goes up until the load's stall is over.
class CodeLoad {
public:
  CodeLoad() : Mark(true) {}
  CUresult done(CUresult R) {
    if (R == CUDA_SUCCESS)
      if (Runtime *RT = Runtime::get())
        RT->codeLoaded();
    return R;
  }

private:
  BlockingCall Mark;
};

/// Stream-ordered calls wait in the driver (pageable memory) holding its
/// lock when they are on a default stream (measured for the legacy one).
bool onDefaultStream(CUstream S) {
  return S == nullptr || S == CU_STREAM_LEGACY || S == CU_STREAM_PER_THREAD;
}

void wrapProc(const char *Symbol, void **Pfn, int Version, cuuint64_t Flags) {
  if (!Pfn || !*Pfn)
    return;
  int H = hookForProc(Symbol, Version, Flags);
  if (H < 0)
    return;
  remember(static_cast<Hook>(H), *Pfn);
  *Pfn = Ours[H];
}

using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, unsigned, CUstream, void **, void **);
using LaunchKernelExFn = CUresult (*)(const CUlaunchConfig *, CUfunction, void **, void **);

template <Hook H>
CUresult launchKernel(CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz, unsigned Bx,
                      unsigned By, unsigned Bz, unsigned Smem, CUstream S, void **Params,
                      void **Extra) {
  auto Fn = real<LaunchKernelFn>(H);
  if (!Fn)
    return CUDA_ERROR_NOT_INITIALIZED;
  Runtime *RT = Runtime::get();
  if (!RT)
    return Fn(F, Gx, Gy, Gz, Bx, By, Bz, Smem, S, Params, Extra);
  LaunchArgs A;
  A.F = F;
  A.Grid[0] = Gx, A.Grid[1] = Gy, A.Grid[2] = Gz;
  A.Block[0] = Bx, A.Block[1] = By, A.Block[2] = Bz;
  A.SharedBytes = Smem;
  A.Stream = S;
  A.Params = Params;
  A.Extra = Extra;
  A.PerThreadStream = H == HLaunchKernelPtsz;
  struct Call {
    LaunchKernelFn Fn;
    const LaunchArgs *A;
  } C{Fn, &A};
  PassThrough P{[](const void *Ctx) {
                  auto *C = static_cast<const Call *>(Ctx);
                  const LaunchArgs &A = *C->A;
                  return C->Fn(A.F, A.Grid[0], A.Grid[1], A.Grid[2], A.Block[0], A.Block[1],
                               A.Block[2], A.SharedBytes, A.Stream, A.Params, A.Extra);
                },
                &C};
  return RT->launch(A, P);
}

/// Launch attributes under which a variant would not do what the original
/// does: cooperative launches, clusters, programmatic dependent launch,
/// and anything this runtime does not know.
bool originalOnly(const CUlaunchConfig *Cfg) {
  for (unsigned I = 0; I < Cfg->numAttrs; ++I) {
    const CUlaunchAttribute &A = Cfg->attrs[I];
    switch (A.id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      break;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
      if (A.value.cooperative)
        return true;
      break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
      if (A.value.clusterDim.x * A.value.clusterDim.y * A.value.clusterDim.z > 1)
        return true;
      break;
    default:
      return true;
    }
  }
  return false;
}

template <Hook H>
CUresult launchKernelEx(const CUlaunchConfig *Cfg, CUfunction F, void **Params, void **Extra) {
  auto Fn = real<LaunchKernelExFn>(H);
  if (!Fn)
    return CUDA_ERROR_NOT_INITIALIZED;
  Runtime *RT = Runtime::get();
  if (!RT || !Cfg || (Cfg->numAttrs && !Cfg->attrs))
    return Fn(Cfg, F, Params, Extra);
  LaunchArgs A;
  A.F = F;
  A.Grid[0] = Cfg->gridDimX, A.Grid[1] = Cfg->gridDimY, A.Grid[2] = Cfg->gridDimZ;
  A.Block[0] = Cfg->blockDimX, A.Block[1] = Cfg->blockDimY, A.Block[2] = Cfg->blockDimZ;
  A.SharedBytes = Cfg->sharedMemBytes;
  A.Stream = Cfg->hStream;
  A.Params = Params;
  A.Extra = Extra;
  A.PerThreadStream = H == HLaunchKernelExPtsz;
  A.OriginalOnly = originalOnly(Cfg);
  struct Call {
    LaunchKernelExFn Fn;
    const CUlaunchConfig *Cfg;
    CUfunction F;
    void **Params, **Extra;
  } C{Fn, Cfg, F, Params, Extra};
  PassThrough P{[](const void *Ctx) {
                  auto *C = static_cast<const Call *>(Ctx);
                  return C->Fn(C->Cfg, C->F, C->Params, C->Extra);
                },
                &C};
  return RT->launch(A, P);
}

using LaunchCoopFn = LaunchKernelFn;
template <Hook H>
CUresult launchCooperative(CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz, unsigned Bx,
                           unsigned By, unsigned Bz, unsigned Smem, CUstream S, void **Params) {
  using Fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void **);
  auto R = real<Fn>(H);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  struct Call {
    Fn R;
    CUfunction F;
    unsigned Gx, Gy, Gz, Bx, By, Bz, Smem;
    CUstream S;
    void **Params;
  } C{R, F, Gx, Gy, Gz, Bx, By, Bz, Smem, S, Params};
  PassThrough Original{[](const void *P) {
                         auto *X = static_cast<const Call *>(P);
                         return X->R(X->F, X->Gx, X->Gy, X->Gz, X->Bx, X->By, X->Bz, X->Smem,
                                     X->S, X->Params);
                       },
                       &C};
  if (Runtime *RT = Runtime::get())
    return RT->otherLaunch(Counted::CooperativeLaunch, S, H == HLaunchCooperativePtsz, Original);
  return Original();
}

template <Hook H> CUresult graphLaunch(CUgraphExec G, CUstream S) {
  using Fn = CUresult (*)(CUgraphExec, CUstream);
  auto R = real<Fn>(H);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  struct Call {
    Fn R;
    CUgraphExec G;
    CUstream S;
  } C{R, G, S};
  PassThrough Original{[](const void *P) {
                         auto *X = static_cast<const Call *>(P);
                         return X->R(X->G, X->S);
                       },
                       &C};
  if (Runtime *RT = Runtime::get())
    return RT->otherLaunch(Counted::GraphLaunch, S, H == HGraphLaunchPtsz, Original);
  return Original();
}

} // namespace

void *tally::rt::realDlsym(void *Handle, const char *Name) {
  DlsymFn F = realDlsymFn();
  return F ? F(Handle, Name) : nullptr;
}

namespace {
template <Hook H> CUresult primaryCtxDown(CUdevice Dev) {
  using Fn = CUresult (*)(CUdevice);
  auto R = real<Fn>(H);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  Runtime *RT = Runtime::get();
  if (RT)
    RT->primaryGoing(Dev);
  CUresult Res = R(Dev);
  if (RT)
    RT->primaryGone(Dev);
  return Res;
}
} // namespace

extern "C" {

// Declared by <dlfcn.h> as non-throwing; the definition must say so too.
__attribute__((visibility("default"))) TALLY_UNINSTRUMENTED void *dlsym(void *Handle,
                                                                   const char *Name) noexcept {
  DlsymFn F = realDlsymFn();
  if (Handle == RTLD_NEXT || !F)
    // RTLD_NEXT is relative to the caller: this must be a tail call, so the
    // real dlsym sees the application's return address, not ours.
    return F ? F(Handle, Name) : nullptr;
  void *R = F(Handle, Name);
  int H = hookByName(Name);
  if (!R || H < 0 || R == Ours[H])
    return R;
  remember(static_cast<Hook>(H), R);
  return Ours[H];
}

__attribute__((visibility("default"))) CUresult
cuGetProcAddress_v2(const char *Symbol, void **Pfn, int Version, cuuint64_t Flags,
                    CUdriverProcAddressQueryResult *Status) {
  using Fn = CUresult (*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
  auto R = real<Fn>(HGetProcAddressV2);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  CUresult Res = R(Symbol, Pfn, Version, Flags, Status);
  if (Res == CUDA_SUCCESS)
    wrapProc(Symbol, Pfn, Version, Flags);
  return Res;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress(const char *Symbol, void **Pfn,
                                                                 int Version, cuuint64_t Flags) {
  using Fn = CUresult (*)(const char *, void **, int, cuuint64_t);
  auto R = real<Fn>(HGetProcAddress);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  CUresult Res = R(Symbol, Pfn, Version, Flags);
  if (Res == CUDA_SUCCESS)
    wrapProc(Symbol, Pfn, Version, Flags);
  return Res;
}

#define TALLY_LAUNCH_EXPORT(Name, H)                                                      \
  __attribute__((visibility("default"))) CUresult Name(                                   \
      CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz, unsigned Bx, unsigned By,      \
      unsigned Bz, unsigned Smem, CUstream S, void **Params, void **Extra) {              \
    return launchKernel<H>(F, Gx, Gy, Gz, Bx, By, Bz, Smem, S, Params, Extra);            \
  }
TALLY_LAUNCH_EXPORT(cuLaunchKernel, HLaunchKernel)
TALLY_LAUNCH_EXPORT(cuLaunchKernel_ptsz, HLaunchKernelPtsz)

__attribute__((visibility("default"))) CUresult
cuLaunchKernelEx(const CUlaunchConfig *Cfg, CUfunction F, void **Params, void **Extra) {
  return launchKernelEx<HLaunchKernelEx>(Cfg, F, Params, Extra);
}
__attribute__((visibility("default"))) CUresult
cuLaunchKernelEx_ptsz(const CUlaunchConfig *Cfg, CUfunction F, void **Params, void **Extra) {
  return launchKernelEx<HLaunchKernelExPtsz>(Cfg, F, Params, Extra);
}

#define TALLY_COOP_EXPORT(Name, H)                                                        \
  __attribute__((visibility("default"))) CUresult Name(                                   \
      CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz, unsigned Bx, unsigned By,      \
      unsigned Bz, unsigned Smem, CUstream S, void **Params) {                            \
    return launchCooperative<H>(F, Gx, Gy, Gz, Bx, By, Bz, Smem, S, Params);              \
  }
TALLY_COOP_EXPORT(cuLaunchCooperativeKernel, HLaunchCooperative)
TALLY_COOP_EXPORT(cuLaunchCooperativeKernel_ptsz, HLaunchCooperativePtsz)

__attribute__((visibility("default"))) CUresult cuGraphLaunch(CUgraphExec G, CUstream S) {
  return graphLaunch<HGraphLaunch>(G, S);
}
__attribute__((visibility("default"))) CUresult cuGraphLaunch_ptsz(CUgraphExec G, CUstream S) {
  return graphLaunch<HGraphLaunchPtsz>(G, S);
}

__attribute__((visibility("default"))) CUresult cuModuleUnload(CUmodule M) {
  using Fn = CUresult (*)(CUmodule);
  auto R = real<Fn>(HModuleUnload);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (Runtime *RT = Runtime::get())
    RT->forgetModule(M);
  return R(M);
}

__attribute__((visibility("default"))) CUresult cuLibraryUnload(CUlibrary L) {
  using Fn = CUresult (*)(CUlibrary);
  auto R = real<Fn>(HLibraryUnload);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  std::shared_ptr<const std::string> Kept;
  if (Runtime *RT = Runtime::get()) {
    RT->forgetLibrary(L);
    Kept = RT->takeLibraryImage(L); // freed after the unload
  }
  return R(L);
}

// PTX loaded at run time: the module with Tally's variants goes to the
// driver in its place (ModuleLoad.cpp); if the driver rejects that, the
// image as it came.
__attribute__((visibility("default"))) CUresult cuModuleLoadData(CUmodule *M, const void *Image) {
  using Fn = CUresult (*)(CUmodule *, const void *);
  auto R = real<Fn>(HModuleLoadData);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  Runtime *RT = Runtime::get();
  std::shared_ptr<const std::string> T = RT ? RT->ptxForModule(Image, "cuModuleLoadData") : nullptr;
  CodeLoad Mark; // a load waits for running kernels, and may load code (BlockingCalls.def)
  if (!T)
    return Mark.done(R(M, Image));
  CUresult Res = R(M, T->c_str());
  if (Res == CUDA_SUCCESS)
    return Mark.done(Res);
  RT->ptxRejected(Res, "cuModuleLoadData");
  return Mark.done(R(M, Image));
}

__attribute__((visibility("default"))) CUresult
cuModuleLoadDataEx(CUmodule *M, const void *Image, unsigned N, CUjit_option *Opts, void **Vals) {
  using Fn = CUresult (*)(CUmodule *, const void *, unsigned, CUjit_option *, void **);
  auto R = real<Fn>(HModuleLoadDataEx);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  Runtime *RT = Runtime::get();
  std::shared_ptr<const std::string> T =
      RT ? RT->ptxForModule(Image, "cuModuleLoadDataEx") : nullptr;
  CodeLoad Mark;
  if (!T)
    return Mark.done(R(M, Image, N, Opts, Vals));
  CUresult Res = R(M, T->c_str(), N, Opts, Vals);
  if (Res == CUDA_SUCCESS)
    return Mark.done(Res);
  RT->ptxRejected(Res, "cuModuleLoadDataEx");
  return Mark.done(R(M, Image, N, Opts, Vals));
}

__attribute__((visibility("default"))) CUresult
cuLibraryLoadData(CUlibrary *L, const void *Code, CUjit_option *JitOpts, void **JitVals,
                  unsigned NumJit, CUlibraryOption *LibOpts, void **LibVals, unsigned NumLib) {
  using Fn = CUresult (*)(CUlibrary *, const void *, CUjit_option *, void **, unsigned,
                          CUlibraryOption *, void **, unsigned);
  auto R = real<Fn>(HLibraryLoadData);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  Runtime *RT = Runtime::get();
  std::shared_ptr<const std::string> T =
      RT ? RT->ptxForModule(Code, "cuLibraryLoadData") : nullptr;
  CodeLoad Mark;
  if (!T)
    return Mark.done(R(L, Code, JitOpts, JitVals, NumJit, LibOpts, LibVals, NumLib));
  CUresult Res = R(L, T->c_str(), JitOpts, JitVals, NumJit, LibOpts, LibVals, NumLib);
  if (Res == CUDA_SUCCESS) {
    // The driver may go on reading a preserved binary: keep ours alive.
    for (unsigned I = 0; LibOpts && I < NumLib; ++I)
      if (LibOpts[I] == CU_LIBRARY_BINARY_IS_PRESERVED && L)
        RT->keepForLibrary(*L, T);
    return Mark.done(Res);
  }
  RT->ptxRejected(Res, "cuLibraryLoadData");
  return Mark.done(R(L, Code, JitOpts, JitVals, NumJit, LibOpts, LibVals, NumLib));
}

__attribute__((visibility("default"))) CUresult
cuLinkAddData_v2(CUlinkState St, CUjitInputType Type, void *Data, size_t Size, const char *Name,
                 unsigned N, CUjit_option *Opts, void **Vals) {
  using Fn = CUresult (*)(CUlinkState, CUjitInputType, void *, size_t, const char *, unsigned,
                          CUjit_option *, void **);
  auto R = real<Fn>(HLinkAddData);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  Runtime *RT = Runtime::get();
  std::shared_ptr<const std::string> T =
      RT && Type == CU_JIT_INPUT_PTX ? RT->ptxForLink(St, Data) : nullptr;
  if (!T)
    return R(St, Type, Data, Size, Name, N, Opts, Vals);
  // The driver keeps no reference to an input after the call.
  CUresult Res = R(St, Type, const_cast<char *>(T->c_str()), T->size() + 1, Name, N, Opts, Vals);
  if (Res == CUDA_SUCCESS)
    return Res;
  RT->ptxRejected(Res, "cuLinkAddData");
  RT->forgetLink(St);
  return R(St, Type, Data, Size, Name, N, Opts, Vals);
}

__attribute__((visibility("default"))) CUresult cuLinkDestroy(CUlinkState St) {
  using Fn = CUresult (*)(CUlinkState);
  auto R = real<Fn>(HLinkDestroy);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (Runtime *RT = Runtime::get())
    RT->forgetLink(St);
  return R(St);
}

// A context going away takes the runtime's streams, events and control
// blocks in it along: the runtime finishes its work there first and
// forgets the context after.
__attribute__((visibility("default"))) CUresult cuCtxDestroy_v2(CUcontext Ctx) {
  using Fn = CUresult (*)(CUcontext);
  auto R = real<Fn>(HCtxDestroy);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (Runtime *RT = Runtime::get())
    RT->contextGoing(Ctx);
  return R(Ctx);
}

// A stream going away: an HP completion the runtime has yet to write for
// launches on it is written now, not a burst later.
__attribute__((visibility("default"))) CUresult cuStreamDestroy_v2(CUstream St) {
  using Fn = CUresult (*)(CUstream);
  auto R = real<Fn>(HStreamDestroy);
  if (!R)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (Runtime *RT = Runtime::get())
    RT->streamGoing(St);
  return R(St);
}

__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRelease_v2(CUdevice Dev) {
  return primaryCtxDown<HPrimaryCtxRelease>(Dev);
}
__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxReset_v2(CUdevice Dev) {
  return primaryCtxDown<HPrimaryCtxReset>(Dev);
}

// The calls of BlockingCalls.def: each passes through, marked as blocking
// around the real call.
#define TALLY_BLOCKING_BODY(H, Self, A, Blocking)                                           \
  {                                                                                         \
    auto Fn = real<decltype(&Self)>(H);                                                     \
    if (!Fn)                                                                                \
      return CUDA_ERROR_NOT_INITIALIZED;                                                    \
    BlockingCall Mark(Blocking);                                                            \
    return Fn A;                                                                            \
  }
#define TALLY_SYNC(N, B, V0, V1, P, A)                                                      \
  __attribute__((visibility("default"))) CUresult N P TALLY_BLOCKING_BODY(H_##N, N, A, true) \
  __attribute__((visibility("default"))) CUresult N##_ptds P                                \
      TALLY_BLOCKING_BODY(H_##N##_ptds, N##_ptds, A, true)
#define TALLY_ASYNC(N, B, V0, V1, P, A, S)                                                  \
  __attribute__((visibility("default"))) CUresult N P                                       \
      TALLY_BLOCKING_BODY(H_##N, N, A, onDefaultStream(S))                                  \
  __attribute__((visibility("default"))) CUresult N##_ptsz P                                \
      TALLY_BLOCKING_BODY(H_##N##_ptsz, N##_ptsz, A, onDefaultStream(S))
#define TALLY_ONE(N, B, V0, V1, P, A)                                                       \
  __attribute__((visibility("default"))) CUresult N P TALLY_BLOCKING_BODY(H_##N, N, A, true)
// (Marked as a code load before the drain lock is let go.)
#define TALLY_LOAD(N, B, V0, V1, P, A)                                                      \
  __attribute__((visibility("default"))) CUresult N P {                                     \
    auto Fn = real<decltype(&N)>(H_##N);                                                    \
    if (!Fn)                                                                                \
      return CUDA_ERROR_NOT_INITIALIZED;                                                    \
    CodeLoad Mark;                                                                          \
    return Mark.done(Fn A);                                                                 \
  }
#include "BlockingCalls.def"
#undef TALLY_BLOCKING_BODY

// The calls of WaitCalls.def: the program is about to wait for its work;
// an HP process issues its pending completion write first.
#define TALLY_WAIT_BODY(H, Self, A, Q)                                                      \
  {                                                                                         \
    auto Fn = real<decltype(&Self)>(H);                                                     \
    if (!Fn)                                                                                \
      return CUDA_ERROR_NOT_INITIALIZED;                                                    \
    Runtime *RT = Runtime::get();                                                           \
    uint64_t Start = RT ? RT->waitPoint(Q) : 0;                                             \
    CUresult R = Fn A;                                                                      \
    if (Start)                                                                              \
      RT->waitDone(Q, Start, R);                                                            \
    return R;                                                                               \
  }
#define TALLY_WAIT(N, B, V0, V1, P, A, Q)                                                      \
  __attribute__((visibility("default"))) CUresult N P TALLY_WAIT_BODY(H_##N, N, A, Q)           \
  __attribute__((visibility("default"))) CUresult N##_ptsz P                                \
      TALLY_WAIT_BODY(H_##N##_ptsz, N##_ptsz, A, Q)
#define TALLY_WAIT_ONE(N, B, V0, V1, P, A, Q)                                                  \
  __attribute__((visibility("default"))) CUresult N P TALLY_WAIT_BODY(H_##N, N, A, Q)
#include "WaitCalls.def"
#undef TALLY_WAIT_BODY

} // extern "C"


namespace {
/// Our wrappers, constant-initialised (relocated at load time), so that a
/// dlsym made before any constructor ran already sees them.
void *const Ours[NumHooks] = {
    reinterpret_cast<void *>(&cuLaunchKernel),
    reinterpret_cast<void *>(&cuLaunchKernel_ptsz),
    reinterpret_cast<void *>(&cuLaunchKernelEx),
    reinterpret_cast<void *>(&cuLaunchKernelEx_ptsz),
    reinterpret_cast<void *>(&cuLaunchCooperativeKernel),
    reinterpret_cast<void *>(&cuLaunchCooperativeKernel_ptsz),
    reinterpret_cast<void *>(&cuGraphLaunch),
    reinterpret_cast<void *>(&cuGraphLaunch_ptsz),
    reinterpret_cast<void *>(&cuModuleUnload),
    reinterpret_cast<void *>(&cuLibraryUnload),
    reinterpret_cast<void *>(&cuModuleLoadData),
    reinterpret_cast<void *>(&cuModuleLoadDataEx),
    reinterpret_cast<void *>(&cuLibraryLoadData),
    reinterpret_cast<void *>(&cuLinkAddData_v2),
    reinterpret_cast<void *>(&cuLinkDestroy),
    reinterpret_cast<void *>(&cuCtxDestroy_v2),
    reinterpret_cast<void *>(&cuDevicePrimaryCtxRelease_v2),
    reinterpret_cast<void *>(&cuDevicePrimaryCtxReset_v2),
    reinterpret_cast<void *>(&cuStreamDestroy_v2),
    reinterpret_cast<void *>(&cuGetProcAddress),
    reinterpret_cast<void *>(&cuGetProcAddress_v2),
#define TALLY_SYNC(N, B, V0, V1, P, A)                                                      \
  reinterpret_cast<void *>(&N), reinterpret_cast<void *>(&N##_ptds),
#define TALLY_ASYNC(N, B, V0, V1, P, A, S)                                                  \
  reinterpret_cast<void *>(&N), reinterpret_cast<void *>(&N##_ptsz),
#define TALLY_ONE(N, B, V0, V1, P, A) reinterpret_cast<void *>(&N),
#define TALLY_LOAD(N, B, V0, V1, P, A) reinterpret_cast<void *>(&N),
#include "BlockingCalls.def"
#define TALLY_WAIT(N, B, V0, V1, P, A, Q)                                                      \
  reinterpret_cast<void *>(&N), reinterpret_cast<void *>(&N##_ptsz),
#define TALLY_WAIT_ONE(N, B, V0, V1, P, A, Q) reinterpret_cast<void *>(&N),
#include "WaitCalls.def"
};
} // namespace
