//===- HostObject.h - Fatbins inside host ELF files --------------*- C++
//-*-===//
//
// nvcc puts device code in the host object it produces:
//   .nv_fatbin        the fatbin(s) the runtime registers (nvcc -c, linked
//                     executables and shared libraries: one container per
//                     translation unit plus one for the device-link output);
//   __nv_relfatbin    fatbins of -rdc=true objects, input to the device link;
//   .nvFatBinSegment  24-byte wrapper records {magic 0x466243B1, version,
//                     pointer to a fatbin, data pointer}. In relocatable
//                     objects the pointer is a relocation against the fatbin
//                     section; in PIE executables and shared libraries it is
//                     a dynamic (R_*_RELATIVE) relocation.
// This file finds and parses all of them, and can put a new fatbin back.
//
//===----------------------------------------------------------------------===//

#ifndef TALLY_FATBIN_HOSTOBJECT_H
#define TALLY_FATBIN_HOSTOBJECT_H

#include "tally/Fatbin/Fatbin.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBufferRef.h"

#include <optional>
#include <string>
#include <vector>

namespace tally {
namespace fatbin {

/// A section that holds fatbin containers.
struct FatbinSection {
  std::string Name;   ///< ".nv_fatbin" or "__nv_relfatbin".
  unsigned Index = 0; ///< Section header index.
  uint64_t FileOffset = 0;
  uint64_t Size = 0;
  uint64_t Address = 0; ///< sh_addr; 0 in relocatable objects.
  uint64_t Alignment = 0;
  /// The parsed contents. Offsets in it (FatbinContainer::Offset,
  /// FatbinEntry::Source::Offset) are file offsets.
  FatbinFile Fatbin;
};

/// One record of `.nvFatBinSegment`.
struct FatbinWrapper {
  uint64_t FileOffset = 0;
  uint32_t Version = 0; ///< 1 per object; 2 for the device-linked image.
  /// The fatbin pointer after applying its relocation (an address in linked
  /// files, a section offset plus symbol value in relocatable ones).
  uint64_t FatbinPointer = 0;
  bool PointerFromRelocation = false;
  /// The wrapper's fourth field (version 2: the prelinked-fatbin list).
  uint64_t Data = 0;
  /// Where the pointer lands: index into HostFatbins::Sections, offset in
  /// that section and the container that starts there.
  std::optional<size_t> SectionIndex;
  uint64_t SectionOffset = 0;
  std::optional<size_t> ContainerIndex;
};

struct HostFatbins {
  uint16_t ELFType = 0; ///< ELF::ET_REL, ET_EXEC or ET_DYN.
  uint16_t Machine = 0;
  std::vector<FatbinSection> Sections;
  std::vector<FatbinWrapper> Wrappers;

  const FatbinSection *findSection(llvm::StringRef Name) const;
};

/// True if \p Bytes starts with the ELF magic.
bool hasELFMagic(llvm::StringRef Bytes);

/// Find and parse every fatbin section and wrapper of the 64-bit
/// little-endian host ELF file \p Buf. An ELF file with neither is an error.
/// Offsets in errors are file offsets (plus Opts.BaseOffset).
llvm::Expected<HostFatbins> readHostFatbins(llvm::MemoryBufferRef Buf,
                                            const ReadOptions &Opts = {});

/// Replace the contents of section \p SectionName in the host ELF file \p Buf
/// with \p NewContents and return the new file. \p ContainerOffsets are the
/// container offsets in \p NewContents (as writeFatbin() reports them).
///
/// Every wrapper record that points into the section must still point at the
/// start of a container (its offset must be in \p ContainerOffsets); the
/// wrappers and their relocations are not rewritten.
/// - If the new contents are not larger than the section, they are written in
///   place and the rest of the section is zero filled (the runtime and
///   cuobjdump accept zeros after the last container). Any ELF type.
/// - Otherwise, for relocatable objects only, the section is resized with
///   LLVM's objcopy library (like `llvm-objcopy --update-section`). Growing a
///   section of a linked executable or shared library is refused: it would
///   move sections and need new dynamic relocations.
llvm::Expected<std::string>
replaceFatbinSection(llvm::MemoryBufferRef Buf, llvm::StringRef SectionName,
                     llvm::StringRef NewContents,
                     llvm::ArrayRef<uint64_t> ContainerOffsets);

/// Write \p NewFatbin into section \p SectionName of \p Buf, container i
/// replacing container i, and return the new file. When the plain layout
/// would move a container that a wrapper points to, each container that
/// shrank is padded to its old size (FatbinEntry::ExtraPadding on its last
/// entry), so linked files can be rewritten in place as long as no
/// container grows (except the last one of the section, which may use the
/// section's spare bytes). Relocatable objects whose only wrapper points at
/// the section start may grow through replaceFatbinSection().
llvm::Expected<std::string> updateFatbinSection(llvm::MemoryBufferRef Buf,
                                                llvm::StringRef SectionName,
                                                const FatbinFile &NewFatbin,
                                                const WriteOptions &Opts = {});

} // namespace fatbin
} // namespace tally

#endif // TALLY_FATBIN_HOSTOBJECT_H
