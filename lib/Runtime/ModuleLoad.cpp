//===- ModuleLoad.cpp - PTX loaded at run time gets Tally's variants ------===//
//
// cuModuleLoadData(Ex), cuLibraryLoadData and cuLinkAddData with PTX text
// (NVRTC programs, CuPy with PTX, Numba): before the driver compiles it,
// the module is given its sliced and PTB variants and the embedded
// metadata by tally-opt, run as a helper process with an on-disk cache
// (PtxLoader.h). The interposed entry point then loads the module with
// variants; if the driver rejects it, the original as it came. Kernels of
// a module that was not transformed simply have no variants.
//
// On by default in best-effort processes and when a form is forced (an HP
// process never runs variants); TALLY_RUNTIME_PTX=0|1 decides otherwise.
//
//===----------------------------------------------------------------------===//

#include "RuntimeImpl.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace tally::rt {

namespace {
/// tally-opt beside libtally.so: <prefix>/lib/libtally.so ->
/// <prefix>/bin/tally-opt (or in the same folder, as in a build tree).
std::string helperBesideLibrary() {
  Dl_info Info;
  if (!dladdr(reinterpret_cast<void *>(&helperBesideLibrary), &Info) || !Info.dli_fname)
    return std::string();
  std::string Lib = Info.dli_fname;
  size_t Slash = Lib.rfind('/');
  std::string Dir = Slash == std::string::npos ? std::string(".") : Lib.substr(0, Slash);
  for (const char *Rel : {"/../bin/tally-opt", "/tally-opt", "/../tools/tally-opt/tally-opt"}) {
    std::string P = Dir + Rel;
    if (::access(P.c_str(), X_OK) == 0)
      return P;
  }
  return std::string();
}
} // namespace

bool Runtime::Impl::ptxOn() {
  std::call_once(Ptx.Once, [this] {
    bool Want = Cfg.RuntimePtx == RuntimePtxMode::On ||
                (Cfg.RuntimePtx == RuntimePtxMode::Auto &&
                 (Cfg.Prio == Priority::BestEffort || (Cfg.Forced && Cfg.Force != Form::Original)));
    if (!Want || !VariantsUsable || !D.cuCtxGetDevice || !D.cuDeviceGetAttribute)
      return;
    PtxTransformer::Options O;
    O.Helper = Cfg.TallyOpt.empty() ? helperBesideLibrary() : Cfg.TallyOpt;
    std::string Dir = ProfileCache::defaultDir(nullptr);
    O.CacheDir = Dir.empty() ? std::string() : Dir + "/ptx";
    O.TimeoutSeconds = Cfg.PtxTimeoutSeconds;
    Ptx.T = std::make_unique<PtxTransformer>(std::move(O));
    Ptx.On = true;
  });
  return Ptx.On;
}

std::shared_ptr<const std::string> Runtime::Impl::ptxTransform(std::string_view Text,
                                                               const char *Where) {
  // The GPU of the current context: what the module will be compiled for.
  CUdevice Dev = -1;
  int Major = 0, Minor = 0;
  if (D.cuCtxGetDevice(&Dev) != CUDA_SUCCESS ||
      D.cuDeviceGetAttribute(&Major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, Dev) !=
          CUDA_SUCCESS ||
      D.cuDeviceGetAttribute(&Minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, Dev) !=
          CUDA_SUCCESS)
    return nullptr; // no context: the driver will say so itself
  std::string Arch = "sm_" + std::to_string(Major * 10 + Minor);

  std::lock_guard<std::mutex> G(Ptx.Mu);
  ++Ptx.C.Seen;
  PtxTransformer::Result R = Ptx.T->transform(Text, Arch);
  std::vector<std::string> Kernels = ptxEntryNames(Text);
  std::string Names;
  for (size_t I = 0; I < Kernels.size() && I < 3; ++I)
    Names += (I ? ", " : "") + Kernels[I];
  if (Kernels.size() > 3)
    Names += ", ... (" + std::to_string(Kernels.size()) + " kernels)";
  if (Names.empty())
    Names = "no kernels";
  if (R.What == PtxTransformer::Result::Transformed) {
    ++Ptx.C.Transformed;
    (R.FromCache ? Ptx.C.CachedMs : Ptx.C.MadeMs) += R.Millis;
    Ptx.C.FromCache += R.FromCache;
    logf(LogLevel::Info, "%s: PTX module (%s) given Tally's variants %s in %.1f ms", Where,
         Names.c_str(), R.FromCache ? "from the cache" : "by tally-opt", R.Millis);
    return std::make_shared<const std::string>(std::move(R.Ptx));
  }
  (R.What == PtxTransformer::Result::Refused ? Ptx.C.Refused : Ptx.C.Failed) += 1;
  // Said for the first few modules; the statistics count the rest.
  if (Ptx.Warnings < 5) {
    ++Ptx.Warnings;
    logf(LogLevel::Warn, "%s: PTX module (%s) loaded without variants: %s%s", Where,
         Names.c_str(), R.Why.c_str(),
         Ptx.Warnings == 5 ? " (further such modules are only counted)" : "");
  }
  return nullptr;
}

std::shared_ptr<const std::string> Runtime::ptxForModule(const void *Image, const char *Where) {
  if (!I->ptxOn())
    return nullptr;
  std::optional<std::string_view> Text = ptxImage(Image);
  if (!Text)
    return nullptr;
  return I->ptxTransform(*Text, Where);
}

std::shared_ptr<const std::string> Runtime::ptxForLink(CUlinkState L, const void *Data) {
  if (!I->ptxOn())
    return nullptr;
  std::optional<std::string_view> Text = ptxImage(Data);
  if (!Text)
    return nullptr;
  {
    std::lock_guard<std::mutex> G(I->Ptx.Mu);
    if (I->Ptx.Linked.count(L)) {
      // A second module with variants would define __tally_metadata again.
      ++I->Ptx.C.SecondInLink;
      return nullptr;
    }
  }
  std::shared_ptr<const std::string> T = I->ptxTransform(*Text, "cuLinkAddData");
  if (T) {
    std::lock_guard<std::mutex> G(I->Ptx.Mu);
    I->Ptx.Linked.insert(L);
  }
  return T;
}

void Runtime::ptxRejected(CUresult R, const char *Where) {
  const char *Name = nullptr;
  if (I->D.cuGetErrorName(R, &Name) != CUDA_SUCCESS || !Name)
    Name = "an error";
  std::lock_guard<std::mutex> G(I->Ptx.Mu);
  ++I->Ptx.C.Rejected;
  if (I->Ptx.Warnings < 5) {
    ++I->Ptx.Warnings;
    logf(LogLevel::Warn, "%s: the driver rejected the module with variants (%s); loaded the "
                         "original PTX instead", Where, Name);
  }
}

void Runtime::keepForLibrary(CUlibrary L, std::shared_ptr<const std::string> Image) {
  std::lock_guard<std::mutex> G(I->Ptx.Mu);
  I->Ptx.Preserved[L] = std::move(Image);
}

std::shared_ptr<const std::string> Runtime::takeLibraryImage(CUlibrary L) {
  std::lock_guard<std::mutex> G(I->Ptx.Mu);
  auto It = I->Ptx.Preserved.find(L);
  if (It == I->Ptx.Preserved.end())
    return nullptr;
  std::shared_ptr<const std::string> P = std::move(It->second);
  I->Ptx.Preserved.erase(It);
  return P;
}

void Runtime::forgetLink(CUlinkState L) {
  std::lock_guard<std::mutex> G(I->Ptx.Mu);
  I->Ptx.Linked.erase(L);
}

} // namespace tally::rt
