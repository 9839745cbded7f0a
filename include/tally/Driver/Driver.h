//===- Driver.h - what tally-opt does with each kind of input ---*- C++ -*-===//
//
// The work behind the tool: PTX modules through the pass pipeline, ptxas and
// the register budget; fatbins and host ELF files (objects, executables,
// shared libraries) entry by entry, with the transformed PTX and the SASS
// rebuilt for every architecture the input carries; listings and PTX
// extraction. The tool only parses options and prints errors.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_DRIVER_DRIVER_H
#define TALLY_DRIVER_DRIVER_H

#include "tally/Metadata/Metadata.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace tally {

enum class InputKind { PTX, Fatbin, HostELF };

/// Fatbin magic, ELF magic, else PTX text.
InputKind detectInputKind(llvm::StringRef Bytes);

struct CompileOptions {
  /// Pass pipeline (see getRegisteredPasses()).
  std::string Pipeline;
  /// Compile variants with ptxas (resources, register budget). Fatbin and
  /// ELF inputs always need ptxas: they carry SASS.
  bool UsePtxas = true;
  std::string Ptxas; ///< Empty: find it.
  /// PTX inputs: the architecture to compile for (default: `.target`).
  std::string Arch;
  unsigned RegisterSlack = 4;
  /// Put the metadata into the module as `__tally_metadata` (a byte array
  /// holding the YAML text) so a runtime needs no side file.
  bool EmbedMetadata = true;
  /// PTX inputs (tally-ptxas): compile whole-program with \c PtxasOptions
  /// (the user's), with the embedded metadata already in the module, and
  /// hand back the register budget's last cubin as CompileResult::Cubin
  /// when it was compiled from the final module, saving a compilation. The
  /// embedded metadata then has no `resources` (the runtime reads none);
  /// CompileResult::Meta has them. Only with UsePtxas and EmbedMetadata,
  /// for PTX inputs (ignored for fatbins and host ELF files).
  bool KeepCubin = false;
  std::vector<std::string> PtxasOptions;
  /// Parallel ptxas runs and transformations for fatbin entries.
  unsigned Jobs = 0; ///< 0: one per core
  /// Progress lines for multi-entry inputs (nullptr: none).
  llvm::raw_ostream *Progress = nullptr;
};

struct CompileResult {
  std::string Output;   ///< PTX text, fatbin or ELF bytes
  Metadata Meta;        ///< every module's kernels
  std::string Analysis; ///< what printer passes printed
  llvm::StringMap<uint64_t> Stats;
  std::vector<std::string> Warnings;
  /// With KeepCubin: the cubin of Output, or empty when the last
  /// compilation was not of the final module.
  std::string Cubin;
};

/// Transforms \p Input (named \p Name in messages) whatever its kind.
llvm::Expected<CompileResult> compileInput(llvm::MemoryBufferRef Input,
                                           const CompileOptions &Opts);

/// Prints every fatbin entry of a fatbin or host ELF input: kind, arch,
/// sizes, compression, kernels (PTX kernels through the PTX parser).
llvm::Error listInput(llvm::MemoryBufferRef Input, llvm::raw_ostream &OS);

/// The PTX entries of a fatbin or host ELF input as (file name, text); the
/// names are `<input stem>.<entry index>.<arch>.ptx`.
llvm::Expected<std::vector<std::pair<std::string, std::string>>>
extractPTX(llvm::MemoryBufferRef Input);

} // namespace tally

#endif
