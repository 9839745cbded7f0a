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
// This file finds and parses all of them, and can put a new fatbin back: in
// place, through objcopy (relocatable objects), or appended at the end of a
// linked file with a new PT_LOAD and re-pointed wrappers.
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
  /// The relocation that sets the pointer, if any: file offset of its
  /// Elf64_Rel / Elf64_Rela record, its type, and whether it has an addend
  /// field (RELA). Used to re-point the wrapper when a fatbin moves.
  std::optional<uint64_t> PointerRelocationOffset;
  uint32_t PointerRelocationType = 0;
  bool PointerRelocationIsRela = false;
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
/// start of a container: its section offset must be in \p ContainerOffsets.
/// - If the new contents are not larger than the section, they are written in
///   place and the rest of the section is zero filled (the runtime and
///   cuobjdump accept zeros after the last container). Any ELF type; the
///   wrappers are not touched.
/// - Relocatable objects: the section is resized with LLVM's objcopy library
///   (like `llvm-objcopy --update-section`); relocations stay valid.
/// - Linked x86-64 executables (ET_EXEC, ET_DYN: PIE) and shared libraries:
///   the new contents are appended at the end of the file (page-aligned file
///   offset) and mapped by one PT_NOTE program header turned into a
///   read-only PT_LOAD above every other segment (moved after the last
///   PT_LOAD if needed, so the PT_LOADs stay sorted). The section header is
///   re-pointed (sh_offset, sh_addr, sh_size); the old bytes stay, unused.
///   Each wrapper's pointer is re-pointed at the new address: its
///   R_X86_64_RELATIVE addend and its in-file value (absolute in non-PIE
///   files; GNU ld also writes it under RELA), and symbols in the section
///   (`fatbinData`) follow. A section that such a rewrite already put at the
///   end of the file is grown where it is. Fails (FormatError at e_phoff) if
///   there is no PT_NOTE, or at the relocation record if a wrapper's pointer
///   is set by a non-RELATIVE relocation. All other bytes stay identical.
llvm::Expected<std::string>
replaceFatbinSection(llvm::MemoryBufferRef Buf, llvm::StringRef SectionName,
                     llvm::StringRef NewContents,
                     llvm::ArrayRef<uint64_t> ContainerOffsets);

/// Write \p NewFatbin into section \p SectionName of \p Buf, container i
/// replacing container i, and return the new file. When the plain layout
/// would move a container that a wrapper points to, each container that
/// shrank is padded to its old size (FatbinEntry::ExtraPadding on its last
/// entry), so the file can be rewritten in place as long as no container
/// grows (except the last one of the section, which may use the section's
/// spare bytes). Relocatable objects grow through replaceFatbinSection() as
/// long as the wrappers' containers keep their offsets. Linked files whose
/// fatbin cannot be rewritten in place get the plain layout appended at the
/// end of the file (see replaceFatbinSection()), each wrapper re-pointed at
/// its container (index i to index i), wherever it now starts.
llvm::Expected<std::string> updateFatbinSection(llvm::MemoryBufferRef Buf,
                                                llvm::StringRef SectionName,
                                                const FatbinFile &NewFatbin,
                                                const WriteOptions &Opts = {});

} // namespace fatbin
} // namespace tally

#endif // TALLY_FATBIN_HOSTOBJECT_H
