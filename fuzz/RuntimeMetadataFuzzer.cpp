//===- RuntimeMetadataFuzzer.cpp - fuzz the runtime's metadata reader -----===//
//
// Parses arbitrary bytes with parseModuleMetadata() (from a buffer of
// exactly their size: the reader must not need a NUL). On failure the
// error must be "LINE:COL: message" and the output empty; on success every
// promise of MetadataReader.h must hold, since the runtime writes extra
// parameters into buffers of ParamBytes bytes without checking again. A
// broken promise aborts so the fuzzer keeps the input.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/MetadataReader.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

using namespace tally::rt;

static void check(bool Cond) {
  if (!Cond)
    std::abort();
}

static void checkError(const std::string &E) {
  // "LINE:COL: message", both numbers 1-based.
  size_t I = 0;
  for (int Part = 0; Part < 2; ++Part) {
    size_t Start = I;
    while (I < E.size() && E[I] >= '0' && E[I] <= '9')
      ++I;
    check(I > Start && E[Start] != '0');
    check(I < E.size() && E[I] == ':');
    ++I;
  }
  check(I + 1 < E.size() && E[I] == ' ');
}

static void checkVariant(const VariantInfo &V) {
  check(!V.Name.empty() && V.Name.find('\0') == std::string::npos);
  check(V.ParamBytes <= 32764 && V.OriginalParamBytes <= V.ParamBytes);
  unsigned Roles = 0;
  for (size_t I = 0; I < V.Extra.size(); ++I) {
    const ExtraParamSlot &S = V.Extra[I];
    unsigned R = static_cast<unsigned>(S.Role);
    check(R <= static_cast<unsigned>(ParamRole::Control));
    check(!(Roles & (1u << R)));
    Roles |= 1u << R;
    check(S.Size == (S.Role == ParamRole::Control ? 8u : 4u));
    check(S.Offset % S.Size == 0);
    check(S.Offset >= V.OriginalParamBytes);
    check(uint64_t(S.Offset) + S.Size <= V.ParamBytes);
    for (size_t J = 0; J < I; ++J)
      check(S.Offset + S.Size <= V.Extra[J].Offset ||
            V.Extra[J].Offset + V.Extra[J].Size <= S.Offset);
  }
  auto Bit = [](ParamRole R) { return 1u << static_cast<unsigned>(R); };
  unsigned Grid =
      Bit(ParamRole::GridX) | Bit(ParamRole::GridY) | Bit(ParamRole::GridZ);
  if (V.Kind == VariantKind::Slice)
    check(Roles == (Grid | Bit(ParamRole::SliceOffset)));
  else
    check(V.Kind == VariantKind::Ptb &&
          Roles == (Grid | Bit(ParamRole::Control) | Bit(ParamRole::Chunk)));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  std::unique_ptr<char[]> Buf(new char[Size ? Size : 1]);
  if (Size)
    std::memcpy(Buf.get(), Data, Size);
  ModuleMetadata M;
  M.Kernels.emplace_back(); // the reader must clear what it is given
  std::string Error = "stale";
  if (!parseModuleMetadata(std::string_view(Buf.get(), Size), M, Error)) {
    checkError(Error);
    check(M.Kernels.empty());
    return 0;
  }
  check(Error.empty());
  std::set<std::string> Names;
  for (const KernelMetadata &K : M.Kernels) {
    check(!K.Name.empty() && K.Name.find('\0') == std::string::npos);
    check(Names.insert(K.Name).second);
    check(M.find(K.Name) == &K);
    check(K.Variants.size() <= 2);
    for (const VariantInfo &V : K.Variants) {
      checkVariant(V);
      check(K.find(V.Kind) == &V);
    }
  }
  return 0;
}
