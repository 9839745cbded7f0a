//===- Metadata.h - what tally-opt records about each kernel ----*- C++ -*-===//
//
// The schema shared by the compiler (which writes it) and the runtime (which
// reads it): per kernel, whether it was transformed, why not, and for each
// variant the entry name, the parameters appended to the original ones and
// their layout, and the resources ptxas reports. docs/metadata.md describes
// the YAML form field by field.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_METADATA_METADATA_H
#define TALLY_METADATA_METADATA_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tally {

/// One parameter a variant appends after the original parameters.
struct ExtraParam {
  std::string Name;
  std::string Type;    ///< PTX type: "u32", "u64"
  uint64_t Offset = 0; ///< Byte offset in the variant's parameter buffer
  uint64_t Size = 0;
  std::string Role;    ///< "grid_x", "slice_offset", "control", ...
};

/// What `ptxas -v` reports for one entry on one architecture.
struct Resources {
  std::string Arch;
  unsigned Registers = 0;
  uint64_t SharedBytes = 0; ///< static shared memory
  uint64_t StackBytes = 0;
  uint64_t SpillStores = 0, SpillLoads = 0;
  unsigned MaxThreadsPerBlock = 0; ///< 0 when not limited by a directive
};

struct VariantRecord {
  std::string Kind; ///< "slice" or "ptb"
  std::string Name; ///< entry name of the variant
  uint64_t OriginalParamBytes = 0;
  std::vector<ExtraParam> ExtraParams;
  uint64_t ParamBytes = 0; ///< total, original + extra
  /// PTB: the hardware barrier id the variant uses for its own barriers.
  std::optional<unsigned> BarrierId;
  std::vector<Resources> Res;
};

struct KernelRecord {
  std::string Name;
  std::string Status; ///< "transformed", "partial", "rejected"
  std::string Reason; ///< why a form was rejected ("" when transformed)
  std::vector<VariantRecord> Variants;
  std::vector<std::string> Notes;
  std::vector<Resources> OriginalRes;
  /// The kernel reads %nctaid: a grid-stride or persistent loop (for
  /// example a persistent matmul with one block per SM), whose blocks'
  /// work depends on the grid size. The variants keep the original grid,
  /// so each logical block does its whole share: preemption comes only
  /// between these long blocks.
  bool ReadsGridSize = false;
};

struct Metadata {
  static constexpr unsigned FormatVersion = 1;
  std::vector<KernelRecord> Kernels;

  KernelRecord &getOrAddKernel(llvm::StringRef Name);
  const KernelRecord *findKernel(llvm::StringRef Name) const;
  /// Sets Status/Reason from the variants present and rejections noted.
  void finalize();

  std::string toYAML() const;
  static llvm::Expected<Metadata> fromYAML(llvm::StringRef Text);
};

} // namespace tally

#endif
