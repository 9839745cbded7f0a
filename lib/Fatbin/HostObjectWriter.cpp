//===- HostObjectWriter.cpp - Fatbins inside host ELF files: writing ------===//
//
// Writes a replacement fatbin back into a host ELF file: in place, through
// LLVM's objcopy (relocatable objects), or appended to a linked file with a
// new PT_LOAD and re-pointed wrappers (appendSection()). What the file holds
// comes from the reader (readHostFatbins()).
//
//===----------------------------------------------------------------------===//

#include "tally/Fatbin/HostObject.h"

#include "HostELF.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/BinaryFormat/ELF.h"
#include "llvm/ObjCopy/CommonConfig.h"
#include "llvm/ObjCopy/ELF/ELFConfig.h"
#include "llvm/ObjCopy/ELF/ELFObjcopy.h"
#include "llvm/Object/ELF.h"
#include "llvm/Object/ELFObjectFile.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstddef>
#include <cstring>
#include <map>

using namespace llvm;
namespace endian = llvm::support::endian;

namespace tally {
namespace fatbin {

// Grow section \p Index of a linked file by appending \p NewContents at the
// end of the file, mapped by a PT_NOTE program header turned into a PT_LOAD,
// and re-point the section header, the wrappers (in-file value and dynamic
// relocation) and the symbols that pointed into the old bytes. \p NewOffsets
// gives, for each wrapper of \p Old that points into the section (by index
// into Old.Wrappers), the section offset it must point to afterwards.
// \p Moves maps old section offsets of containers to new ones (for symbols).
static Expected<std::string>
appendSection(const HostELF &H, size_t Index, StringRef SectionName,
              const HostFatbins &Old, StringRef NewContents,
              ArrayRef<std::pair<size_t, uint64_t>> NewOffsets,
              const std::map<uint64_t, uint64_t> &Moves) {
  using Elf_Phdr = ELFT::Phdr;
  using Elf_Sym = ELFT::Sym;
  const auto &Hdr = H.File->getHeader();
  const Elf_Shdr &Sec = H.Sections[Index];
  constexpr uint64_t PageSize = 0x1000;

  if (Hdr.e_machine != ELF::EM_X86_64)
    return H.err(0x12, formatv("growing {0} of a linked file is only "
                               "supported for x86-64 (e_machine {1})",
                               SectionName, uint16_t(Hdr.e_machine))
                           .str());
  if (Hdr.e_phnum == 0 || Hdr.e_phentsize != sizeof(Elf_Phdr))
    return H.err(Hdr.e_phoff,
                 formatv("program header table ({0} entries of {1} bytes) "
                         "cannot be rewritten",
                         uint16_t(Hdr.e_phnum), uint16_t(Hdr.e_phentsize))
                     .str());
  auto PhdrsOrErr = H.File->program_headers();
  if (!PhdrsOrErr)
    return H.err(Hdr.e_phoff, "invalid program header table: " +
                                  toString(PhdrsOrErr.takeError()));
  ArrayRef<Elf_Phdr> Phdrs = *PhdrsOrErr;
  auto PhdrOffset = [&](size_t I) {
    return uint64_t(Hdr.e_phoff) + I * sizeof(Elf_Phdr);
  };

  // Where the new segment can go: above every segment, congruent to its
  // file offset modulo the largest PT_LOAD alignment.
  uint64_t SecAlign = std::max<uint64_t>(Sec.sh_addralign, 8);
  if (!isPowerOf2_64(SecAlign) || SecAlign > (uint64_t(1) << 30))
    return H.err(H.headerOffset(Index),
                 formatv("section {0} has unsupported alignment {1}",
                         SectionName, uint64_t(Sec.sh_addralign))
                     .str());
  uint64_t Align = std::max(PageSize, SecAlign);
  uint64_t MaxEnd = 0;
  std::optional<size_t> Note, LastLoad;
  std::optional<std::pair<uint64_t, uint64_t>> Property;
  for (size_t I = 0; I < Phdrs.size(); ++I) {
    const Elf_Phdr &P = Phdrs[I];
    if (P.p_type == ELF::PT_NULL)
      continue;
    if (P.p_vaddr > UINT64_MAX - P.p_memsz)
      return H.err(PhdrOffset(I), "program header: segment end overflows");
    MaxEnd = std::max<uint64_t>(MaxEnd, P.p_vaddr + P.p_memsz);
    if (P.p_type == ELF::PT_LOAD) {
      LastLoad = I;
      if (P.p_align > 1 && !isPowerOf2_64(P.p_align))
        return H.err(PhdrOffset(I),
                     formatv("PT_LOAD alignment {0:x} is not a power of 2",
                             uint64_t(P.p_align))
                         .str());
      if (P.p_align > (uint64_t(1) << 30))
        return H.err(
            PhdrOffset(I),
            formatv("PT_LOAD alignment {0:x} is too large", uint64_t(P.p_align))
                .str());
      Align = std::max<uint64_t>(Align, P.p_align);
    } else if (P.p_type == ELF::PT_GNU_PROPERTY) {
      Property.emplace(P.p_offset, P.p_filesz);
    }
  }
  // Prefer the last PT_NOTE that does not cover .note.gnu.property (the
  // kernel and loader find properties through PT_GNU_PROPERTY, but older
  // loaders looked at PT_NOTE): usually the build-id / ABI-tag one.
  for (size_t I = 0; I < Phdrs.size(); ++I) {
    const Elf_Phdr &P = Phdrs[I];
    if (P.p_type != ELF::PT_NOTE)
      continue;
    bool HasProperty = Property && P.p_offset <= Property->first &&
                       Property->first - P.p_offset < P.p_filesz;
    if (!Note || !HasProperty)
      Note = I;
  }
  // A section that a previous rewrite put at the end of the file, alone in
  // the highest PT_LOAD, is grown where it is.
  std::optional<size_t> Reuse;
  for (size_t I = 0; I < Phdrs.size(); ++I) {
    const Elf_Phdr &P = Phdrs[I];
    if (P.p_type == ELF::PT_LOAD && P.p_offset == Sec.sh_offset &&
        P.p_vaddr == Sec.sh_addr && P.p_filesz == Sec.sh_size &&
        P.p_memsz == Sec.sh_size && P.p_vaddr + P.p_memsz == MaxEnd &&
        Sec.sh_offset + Sec.sh_size == H.Data.size())
      Reuse = I;
  }
  if (!Note && !Reuse)
    return H.err(Hdr.e_phoff,
                 "cannot grow " + SectionName +
                     ": the program header table has no PT_NOTE entry to "
                     "turn into a PT_LOAD for the new contents");
  if (!LastLoad)
    return H.err(Hdr.e_phoff, "cannot grow " + SectionName +
                                  ": the file has no PT_LOAD segment");

  uint64_t NewSize = NewContents.size();
  uint64_t FileSize = H.Data.size();
  uint64_t Limit = uint64_t(1) << 47; // user address space, file size
  if (FileSize > Limit || NewSize > Limit || MaxEnd > Limit)
    return H.err(Hdr.e_phoff, "cannot grow " + SectionName +
                                  ": file or address space too large");
  uint64_t FileOff = alignTo(FileSize, Align);
  uint64_t VAddr = alignTo(MaxEnd, Align) + FileOff % Align;
  if (Reuse) {
    FileOff = Sec.sh_offset;
    VAddr = Sec.sh_addr;
  }
  uint64_t OldAddr = Sec.sh_addr;

  std::string Out = H.Data.str();
  Out.resize(FileOff, '\0');
  Out.append(NewContents.begin(), NewContents.end());
  char *O = Out.data();

  if (Reuse) {
    Elf_Phdr P = Phdrs[*Reuse];
    P.p_filesz = NewSize;
    P.p_memsz = NewSize;
    std::memcpy(O + PhdrOffset(*Reuse), &P, sizeof(P));
  } else {
    // The new segment, kept after the last PT_LOAD so the PT_LOADs stay
    // sorted by address.
    Elf_Phdr P = Phdrs[*Note];
    P.p_type = ELF::PT_LOAD;
    P.p_flags = ELF::PF_R;
    P.p_offset = FileOff;
    P.p_vaddr = VAddr;
    P.p_paddr = VAddr;
    P.p_filesz = NewSize;
    P.p_memsz = NewSize;
    P.p_align = Align;
    size_t Dest = *Note;
    if (*Note < *LastLoad) {
      // Shift the entries after the note up by one.
      std::memmove(O + PhdrOffset(*Note), O + PhdrOffset(*Note + 1),
                   (*LastLoad - *Note) * sizeof(Elf_Phdr));
      Dest = *LastLoad;
    }
    std::memcpy(O + PhdrOffset(Dest), &P, sizeof(P));
  }

  // The section header now describes the new bytes; the old ones stay, unused.
  {
    Elf_Shdr S = Sec;
    S.sh_offset = FileOff;
    S.sh_addr = VAddr;
    S.sh_size = NewSize;
    std::memcpy(O + H.headerOffset(Index), &S, sizeof(S));
  }

  // Wrappers: the dynamic relocation's addend and the value in the file.
  uint32_t Relative = H.File->getRelativeRelocationType();
  for (const auto &[WI, NewOff] : NewOffsets) {
    const FatbinWrapper &W = Old.Wrappers[WI];
    uint64_t Field = W.FileOffset + 8;
    uint64_t Ptr = VAddr + NewOff;
    uint64_t InFile = endian::read64le(H.Data.data() + Field);
    bool WriteField = true;
    if (W.PointerRelocationOffset) {
      uint64_t R = *W.PointerRelocationOffset;
      if (W.PointerRelocationType != Relative)
        return H.err(R, formatv("fatbin wrapper at {0:x} is set by a "
                                "relocation of type {1}, not a relative "
                                "one; cannot re-point it",
                                W.FileOffset, W.PointerRelocationType)
                            .str());
      if (W.PointerRelocationIsRela) {
        endian::write64le(O + R + 16, Ptr);
        // With RELA the loader ignores the field; GNU ld writes the value
        // there too, keep that.
        WriteField = InFile == W.FatbinPointer;
      }
    }
    if (WriteField)
      endian::write64le(O + Field, Ptr);
  }

  // Symbols in the section (e.g. the local `fatbinData`), for tools.
  uint64_t OldSize = Sec.sh_size;
  for (size_t I = 0; I < H.Sections.size(); ++I) {
    const Elf_Shdr &SymSec = H.Sections[I];
    if (SymSec.sh_type != ELF::SHT_SYMTAB && SymSec.sh_type != ELF::SHT_DYNSYM)
      continue;
    auto SymsOrErr = H.File->symbols(&SymSec);
    if (!SymsOrErr)
      return H.err(H.headerOffset(I),
                   "invalid symbol table: " + toString(SymsOrErr.takeError()));
    for (const Elf_Sym &Sym : *SymsOrErr) {
      if (Sym.st_shndx != Index || Sym.st_value < OldAddr ||
          Sym.st_value - OldAddr > OldSize)
        continue;
      uint64_t Off = Sym.st_value - OldAddr;
      if (auto It = Moves.find(Off); It != Moves.end())
        Off = It->second;
      if (Off > NewSize)
        continue;
      uint64_t SymOff = reinterpret_cast<const char *>(&Sym) - H.Data.data();
      endian::write64le(O + SymOff + offsetof(Elf_Sym, st_value), VAddr + Off);
    }
  }
  return std::move(Out);
}

// Replace the contents of a section. \p Moves maps the old section offsets of
// containers that wrappers point to onto new ones (default: they stay).
static Expected<std::string>
replaceSection(MemoryBufferRef Buf, StringRef SectionName,
               StringRef NewContents, ArrayRef<uint64_t> ContainerOffsets,
               const std::map<uint64_t, uint64_t> &Moves) {
  HostELF H;
  if (Error E = H.open(Buf.getBuffer(), 0))
    return std::move(E);
  std::optional<size_t> Index;
  for (size_t I = 0; I < H.Sections.size(); ++I) {
    Expected<StringRef> Name = H.name(I);
    if (!Name)
      return Name.takeError();
    if (*Name == SectionName) {
      Index = I;
      break;
    }
  }
  if (!Index)
    return H.err(H.File->getHeader().e_shoff,
                 "no section named " + SectionName + " in ELF file");
  const Elf_Shdr &Sec = H.Sections[*Index];
  if (Expected<StringRef> Old = H.contents(*Index, SectionName); !Old)
    return Old.takeError();

  // Wrappers hold the addresses (or, in relocatable objects, relocation
  // addends) of containers; those must still start containers.
  Expected<HostFatbins> Old = readHostFatbins(Buf);
  if (!Old)
    return Old.takeError();
  std::vector<std::pair<size_t, uint64_t>> NewOffsets;
  bool Moved = false;
  for (size_t WI = 0; WI < Old->Wrappers.size(); ++WI) {
    const FatbinWrapper &W = Old->Wrappers[WI];
    if (!W.SectionIndex || Old->Sections[*W.SectionIndex].Index != *Index)
      continue;
    uint64_t NewOff = W.SectionOffset;
    if (auto It = Moves.find(NewOff); It != Moves.end())
      NewOff = It->second;
    if (!is_contained(ContainerOffsets, NewOff))
      return makeFormatError(
          W.FileOffset, formatv("fatbin wrapper points to offset {0:x} of {1}, "
                                "where the new contents start no container",
                                W.SectionOffset, SectionName)
                            .str());
    Moved |= NewOff != W.SectionOffset;
    NewOffsets.emplace_back(WI, NewOff);
  }

  uint16_t Type = H.File->getHeader().e_type;
  if (NewContents.size() <= Sec.sh_size && !Moved) {
    std::string Out = Buf.getBuffer().str();
    std::copy(NewContents.begin(), NewContents.end(),
              Out.begin() + Sec.sh_offset);
    std::fill(Out.begin() + Sec.sh_offset + NewContents.size(),
              Out.begin() + Sec.sh_offset + Sec.sh_size, '\0');
    return std::move(Out);
  }

  if (Type == ELF::ET_EXEC || Type == ELF::ET_DYN) {
    if (Sec.sh_type == ELF::SHT_NOBITS || !(Sec.sh_flags & ELF::SHF_ALLOC) ||
        Sec.sh_addr == 0)
      return H.err(H.headerOffset(*Index),
                   "section " + SectionName +
                       " of a linked file is not loaded; cannot move it");
    return appendSection(H, *Index, SectionName, *Old, NewContents, NewOffsets,
                         Moves);
  }
  if (Type != ELF::ET_REL)
    return H.err(0x10, formatv("cannot grow {0} in an ELF file of type {1}",
                               SectionName, Type)
                           .str());
  if (Moved)
    return createStringError("cannot move the containers of " + SectionName +
                             " in a relocatable object");

  // Relocatable object: let objcopy re-lay the file. Relocations refer to
  // symbols plus offsets into the section, which stay valid.
  auto ObjOrErr = object::ObjectFile::createELFObjectFile(Buf);
  if (!ObjOrErr)
    return H.err(0, "invalid ELF file: " + toString(ObjOrErr.takeError()));
  auto *ELFObj = dyn_cast<object::ELFObjectFileBase>(ObjOrErr->get());
  if (!ELFObj)
    return H.err(0, "not an ELF object");
  objcopy::CommonConfig Config;
  Config.InputFilename = Buf.getBufferIdentifier();
  Config.UpdateSection.emplace_back(
      SectionName, MemoryBuffer::getMemBufferCopy(NewContents, SectionName));
  objcopy::ELFConfig ELFConfig;
  std::string Out;
  raw_string_ostream OS(Out);
  if (Error E =
          objcopy::elf::executeObjcopyOnBinary(Config, ELFConfig, *ELFObj, OS))
    return createStringError("cannot rewrite ELF file: " +
                             toString(std::move(E)));
  OS.flush();
  return std::move(Out);
}

Expected<std::string>
replaceFatbinSection(MemoryBufferRef Buf, StringRef SectionName,
                     StringRef NewContents,
                     ArrayRef<uint64_t> ContainerOffsets) {
  return replaceSection(Buf, SectionName, NewContents, ContainerOffsets, {});
}

Expected<std::string> updateFatbinSection(MemoryBufferRef Buf,
                                          StringRef SectionName,
                                          const FatbinFile &NewFatbin,
                                          const WriteOptions &Opts) {
  Expected<HostFatbins> Old = readHostFatbins(Buf);
  if (!Old)
    return Old.takeError();
  const FatbinSection *S = Old->findSection(SectionName);
  if (!S)
    return makeFormatError(0, "no fatbin section named " + SectionName +
                                  " in ELF file");
  size_t SIndex = S - Old->Sections.data();

  // Offsets (in the section) of the containers wrappers point to, by index.
  std::vector<std::pair<size_t, uint64_t>> Pinned;
  for (const FatbinWrapper &W : Old->Wrappers) {
    if (!W.SectionIndex || *W.SectionIndex != SIndex)
      continue;
    if (!W.ContainerIndex)
      return makeFormatError(W.FileOffset,
                             formatv("fatbin wrapper points to offset {0:x} "
                                     "of {1}, which starts no container",
                                     W.SectionOffset, SectionName)
                                 .str());
    if (*W.ContainerIndex >= NewFatbin.Containers.size())
      return createStringError(
          "the new fatbin has " + Twine(NewFatbin.Containers.size()) +
          " containers, but a wrapper points to container " +
          Twine(*W.ContainerIndex) + " of " + SectionName);
    Pinned.emplace_back(*W.ContainerIndex, W.SectionOffset);
  }

  auto Write = [&](const FatbinFile &F, SmallVectorImpl<char> &Out,
                   std::vector<uint64_t> &Offsets) -> Error {
    Out.clear();
    Offsets.clear();
    return writeFatbin(F, Out, Opts, &Offsets);
  };
  auto Stays = [&](ArrayRef<uint64_t> Offsets) {
    return all_of(Pinned, [&](const std::pair<size_t, uint64_t> &P) {
      return Offsets[P.first] == P.second;
    });
  };
  auto Replace = [&](const SmallVectorImpl<char> &Out,
                     ArrayRef<uint64_t> Offsets,
                     const std::map<uint64_t, uint64_t> &Moves) {
    return replaceSection(Buf, SectionName, StringRef(Out.data(), Out.size()),
                          Offsets, Moves);
  };

  SmallVector<char, 0> Out;
  std::vector<uint64_t> Offsets;
  if (Error E = Write(NewFatbin, Out, Offsets))
    return std::move(E);
  bool Relocatable = Old->ELFType == ELF::ET_REL;
  bool Grows = Out.size() > S->Size;
  if (Stays(Offsets) && (!Grows || Relocatable))
    return Replace(Out, Offsets, {});

  // Pad every container but the last to the distance between its old start
  // and the old start of the next one, so that the wrappers' targets stay.
  const std::vector<FatbinContainer> &OldCs = S->Fatbin.Containers;
  auto Pad = [&](SmallVectorImpl<char> &POut,
                 std::vector<uint64_t> &POffsets) -> Error {
    POffsets = Offsets;
    FatbinFile Padded = NewFatbin;
    for (size_t I = 0; I + 1 < Padded.Containers.size(); ++I) {
      if (I + 1 >= OldCs.size())
        break;
      uint64_t Want = OldCs[I + 1].Offset - OldCs[I].Offset;
      uint64_t Have = POffsets[I + 1] - POffsets[I];
      if (Have > Want)
        return createStringError(
            formatv("container {0} of {1} grows from {2} to {3} bytes and "
                    "would move the containers after it",
                    I, SectionName, Want, Have)
                .str());
      if (Have == Want)
        continue;
      if (Padded.Containers[I].Entries.empty() || (Want - Have) % 8 != 0)
        return createStringError(
            formatv("container {0} of {1} cannot be padded from {2} to {3} "
                    "bytes",
                    I, SectionName, Have, Want)
                .str());
      Padded.Containers[I].Entries.back().ExtraPadding += Want - Have;
      // Later offsets shift by the padding.
      for (size_t J = I + 1; J < POffsets.size(); ++J)
        POffsets[J] += Want - Have;
    }
    if (Error E = Write(Padded, POut, POffsets))
      return E;
    if (!Stays(POffsets))
      return createStringError("cannot lay out the new fatbin so that every "
                               "wrapper of " +
                               SectionName + " still points at its container");
    return Error::success();
  };
  SmallVector<char, 0> PaddedOut;
  std::vector<uint64_t> PaddedOffsets;
  Error PadErr = Pad(PaddedOut, PaddedOffsets);
  if (!PadErr && (Relocatable || PaddedOut.size() <= S->Size))
    return Replace(PaddedOut, PaddedOffsets, {});
  if (Relocatable)
    return std::move(PadErr);
  consumeError(std::move(PadErr));

  // Linked file: the plain layout goes at the end of the file, and each
  // wrapper is re-pointed at its container's new offset.
  std::map<uint64_t, uint64_t> Moves;
  for (size_t I = 0; I < OldCs.size() && I < Offsets.size(); ++I)
    Moves[OldCs[I].Offset - S->FileOffset] = Offsets[I];
  return Replace(Out, Offsets, Moves);
}

} // namespace fatbin
} // namespace tally
