//===- MetadataReader.h - the runtime's reader of __tally_metadata -*- C++ -*-===//
//
// The runtime reads the metadata tally-opt embeds in every module it
// rewrites (the NUL-terminated YAML text of docs/metadata.md, in the global
// `__tally_metadata`). The runtime is loaded into other people's processes
// and must not depend on LLVM or yaml-cpp, so this is a small, strict reader
// of exactly the YAML subset tally-opt writes (block mappings and
// sequences, flow mappings for extra parameters and resources, plain and
// double-quoted scalars). Anything else is an error with its line and
// column; the runtime then runs the module's kernels as they are.
//
// It keeps only what launching a variant needs and checks it: the version,
// each variant's kind and entry name, its parameter buffer sizes, and every
// extra parameter's role, type, offset and size (known role, size matching
// the type, natural alignment, after the original parameters, inside the
// buffer, no overlap, each role at most once, the roles each kind needs).
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_METADATAREADER_H
#define TALLY_RUNTIME_METADATAREADER_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tally::rt {

enum class ParamRole : uint8_t { SliceOffset, GridX, GridY, GridZ, Chunk, Control };
enum class VariantKind : uint8_t { Slice, Ptb };

struct ExtraParamSlot {
  ParamRole Role;
  uint32_t Offset = 0; ///< byte offset in the variant's parameter buffer
  uint32_t Size = 0;   ///< 4 (u32) or 8 (u64)
};

struct VariantInfo {
  VariantKind Kind;
  std::string Name;
  uint32_t OriginalParamBytes = 0;
  uint32_t ParamBytes = 0;
  std::vector<ExtraParamSlot> Extra; ///< in the order of the metadata
};

struct KernelMetadata {
  std::string Name;
  bool ReadsGridSize = false;
  std::string Reason; ///< why a form is missing ("" when none is)
  std::vector<VariantInfo> Variants;

  const VariantInfo *find(VariantKind K) const {
    for (const VariantInfo &V : Variants)
      if (V.Kind == K)
        return &V;
    return nullptr;
  }
};

struct ModuleMetadata {
  static constexpr unsigned SupportedVersion = 1;
  std::vector<KernelMetadata> Kernels;
  const KernelMetadata *find(std::string_view Name) const;
};

/// Parses \p Text (the embedded YAML, without its NUL). Returns true on
/// success; otherwise false with \p Error set to "LINE:COL: message".
bool parseModuleMetadata(std::string_view Text, ModuleMetadata &Out, std::string &Error);

} // namespace tally::rt

#endif
