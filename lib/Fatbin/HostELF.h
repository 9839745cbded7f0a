//===- HostELF.h - a host ELF file opened for fatbin work -------*- C++ -*-===//
//
// What the reader (HostObjectReader.cpp) and the writer
// (HostObjectWriter.cpp) of host ELF files share: the ELF types, the names
// of nvcc's fatbin sections, and HostELF, a file opened with LLVM's ELFFile
// whose problems are reported as FormatErrors at file offsets.
//
//===----------------------------------------------------------------------===//

#ifndef TALLY_LIB_FATBIN_HOSTELF_H
#define TALLY_LIB_FATBIN_HOSTELF_H

#include "tally/Fatbin/Fatbin.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Object/ELF.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace tally {
namespace fatbin {

using ELFT = llvm::object::ELF64LE;
using ELFFileT = llvm::object::ELFFile<ELFT>;
using Elf_Shdr = ELFT::Shdr;

inline constexpr llvm::StringLiteral FatbinSectionName = ".nv_fatbin";
inline constexpr llvm::StringLiteral RelFatbinSectionName = "__nv_relfatbin";
inline constexpr llvm::StringLiteral SegmentSectionName = ".nvFatBinSegment";

// Opens a host ELF file, reporting problems as FormatErrors.
struct HostELF {
  llvm::StringRef Data;
  uint64_t Base;
  std::optional<ELFFileT> File;
  llvm::ArrayRef<Elf_Shdr> Sections;
  llvm::StringRef SectionNames;

  llvm::Error err(uint64_t Off, const llvm::Twine &Msg) const {
    return makeFormatError(Base + Off, Msg);
  }
  uint64_t headerOffset(size_t Index) const {
    return File->getHeader().e_shoff + Index * sizeof(Elf_Shdr);
  }

  /// Opens \p Bytes; offsets in errors are relative to \p BaseOffset.
  llvm::Error open(llvm::StringRef Bytes, uint64_t BaseOffset);
  /// The name of section \p Index.
  llvm::Expected<llvm::StringRef> name(size_t Index) const;
  /// The contents of section \p Index, named \p Name in errors.
  llvm::Expected<llvm::StringRef> contents(size_t Index,
                                           llvm::StringRef Name) const;
};

} // namespace fatbin
} // namespace tally

#endif // TALLY_LIB_FATBIN_HOSTELF_H
