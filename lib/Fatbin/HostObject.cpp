//===- HostObject.cpp - Fatbins inside host ELF files --------------------===//
//
// Reads fatbin sections and wrapper records with LLVM's ELFFile, resolving
// each wrapper's fatbin pointer through the relocation that sets it, and
// writes a replacement fatbin back: in place, through LLVM's objcopy
// (relocatable objects), or appended to a linked file (appendSection()).
//
//===----------------------------------------------------------------------===//

#include "tally/Fatbin/HostObject.h"

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

using ELFT = object::ELF64LE;
using ELFFileT = object::ELFFile<ELFT>;
using Elf_Shdr = ELFT::Shdr;

static constexpr StringLiteral FatbinSectionName = ".nv_fatbin";
static constexpr StringLiteral RelFatbinSectionName = "__nv_relfatbin";
static constexpr StringLiteral SegmentSectionName = ".nvFatBinSegment";

bool hasELFMagic(StringRef Bytes) { return Bytes.starts_with(ELF::ElfMagic); }

const FatbinSection *HostFatbins::findSection(StringRef Name) const {
  for (const FatbinSection &S : Sections)
    if (S.Name == Name)
      return &S;
  return nullptr;
}

namespace {

// Opens a host ELF file, reporting problems as FormatErrors.
struct HostELF {
  StringRef Data;
  uint64_t Base;
  std::optional<ELFFileT> File;
  ArrayRef<Elf_Shdr> Sections;
  StringRef SectionNames;

  Error err(uint64_t Off, const Twine &Msg) const {
    return makeFormatError(Base + Off, Msg);
  }
  uint64_t headerOffset(size_t Index) const {
    return File->getHeader().e_shoff + Index * sizeof(Elf_Shdr);
  }

  Error open(StringRef Bytes, uint64_t BaseOffset) {
    Data = Bytes;
    Base = BaseOffset;
    if (!hasELFMagic(Data))
      return err(0, "not an ELF file");
    if (Data.size() < ELF::EI_NIDENT)
      return err(0, "ELF identification truncated");
    if (Data[ELF::EI_CLASS] != ELF::ELFCLASS64 ||
        Data[ELF::EI_DATA] != ELF::ELFDATA2LSB)
      return err(ELF::EI_CLASS, "unsupported ELF file: only 64-bit "
                                "little-endian host files are supported");
    auto FileOrErr = ELFFileT::create(Data);
    if (!FileOrErr)
      return err(0, "invalid ELF file: " + toString(FileOrErr.takeError()));
    File.emplace(std::move(*FileOrErr));
    auto SectionsOrErr = File->sections();
    if (!SectionsOrErr)
      return err(File->getHeader().e_shoff,
                 "invalid section header table: " +
                     toString(SectionsOrErr.takeError()));
    Sections = *SectionsOrErr;
    auto NamesOrErr = File->getSectionStringTable(Sections);
    if (!NamesOrErr)
      return err(File->getHeader().e_shoff,
                 "invalid section name table: " +
                     toString(NamesOrErr.takeError()));
    SectionNames = *NamesOrErr;
    return Error::success();
  }

  Expected<StringRef> name(size_t Index) const {
    auto NameOrErr = File->getSectionName(Sections[Index], SectionNames);
    if (!NameOrErr)
      return err(headerOffset(Index),
                 "invalid section name: " + toString(NameOrErr.takeError()));
    return *NameOrErr;
  }

  Expected<StringRef> contents(size_t Index, StringRef Name) const {
    const Elf_Shdr &Sec = Sections[Index];
    if (Sec.sh_type == ELF::SHT_NOBITS)
      return err(headerOffset(Index),
                 "section " + Name + " has no contents in the file");
    auto BytesOrErr = File->getSectionContents(Sec);
    if (!BytesOrErr)
      return err(headerOffset(Index),
                 "section " + Name + ": " + toString(BytesOrErr.takeError()));
    return toStringRef(*BytesOrErr);
  }
};

// A relocated 8-byte field of .nvFatBinSegment.
struct Resolved {
  uint64_t Value = 0;
  std::optional<unsigned> SymbolSection; // st_shndx, relocatable files only
  uint64_t RecordOffset = 0;             // file offset of the Rel/Rela
  uint32_t Type = 0;
  bool IsRela = false;
};

} // namespace

// Apply the relocations that target fields of the wrapper section. The
// result maps offsets within the section to the relocated values.
static Error resolveWrapperRelocations(const HostELF &H, size_t SegIndex,
                                       std::map<uint64_t, Resolved> &Out) {
  const ELFFileT &File = *H.File;
  const Elf_Shdr &Seg = H.Sections[SegIndex];
  bool Relocatable = File.getHeader().e_type == ELF::ET_REL;
  uint32_t RelativeType = File.getRelativeRelocationType();
  StringRef SegBytes = H.Data.substr(Seg.sh_offset, Seg.sh_size);

  for (size_t I = 0; I < H.Sections.size(); ++I) {
    const Elf_Shdr &Sec = H.Sections[I];
    bool IsRela = Sec.sh_type == ELF::SHT_RELA;
    if (!IsRela && Sec.sh_type != ELF::SHT_REL)
      continue;
    // Relocatable objects: the section's own relocations. Linked files:
    // the dynamic relocations, which address memory.
    if (Relocatable && Sec.sh_info != SegIndex)
      continue;
    const Elf_Shdr *SymTab = nullptr;
    if (Sec.sh_link != 0) {
      if (Sec.sh_link >= H.Sections.size())
        return H.err(H.headerOffset(I),
                     formatv("relocation section links to section {0}, "
                             "past the {1} sections",
                             Sec.sh_link, H.Sections.size())
                         .str());
      SymTab = &H.Sections[Sec.sh_link];
    }
    uint64_t Base = Relocatable ? 0 : Seg.sh_addr;

    auto Handle = [&](const ELFT::Rel &R,
                      std::optional<int64_t> Addend) -> Error {
      uint64_t Off = R.r_offset;
      if (Off < Base || Off - Base >= Seg.sh_size ||
          Seg.sh_size - (Off - Base) < 8)
        return Error::success();
      Off -= Base;
      int64_t A =
          Addend ? *Addend : int64_t(endian::read64le(SegBytes.data() + Off));
      Resolved Res;
      uint32_t Type = R.getType(false);
      const ELFT::Sym *Sym = nullptr;
      if (Relocatable || Type != RelativeType) {
        if (SymTab && R.getSymbol(false) != 0) {
          auto SymOrErr = File.getRelocationSymbol(R, SymTab);
          if (!SymOrErr)
            return H.err(H.headerOffset(I), "invalid relocation symbol: " +
                                                toString(SymOrErr.takeError()));
          Sym = *SymOrErr;
        }
      }
      Res.Value = uint64_t(A) + (Sym ? uint64_t(Sym->st_value) : 0);
      // The records are read in place, so this is their file offset.
      Res.RecordOffset = reinterpret_cast<const char *>(&R) - H.Data.data();
      Res.Type = Type;
      Res.IsRela = Addend.has_value();
      if (Relocatable && Sym && Sym->st_shndx != ELF::SHN_UNDEF &&
          Sym->st_shndx < ELF::SHN_LORESERVE)
        Res.SymbolSection = Sym->st_shndx;
      Out[Off] = Res;
      return Error::success();
    };

    if (IsRela) {
      auto Relas = File.relas(Sec);
      if (!Relas)
        return H.err(H.headerOffset(I), "invalid relocation section: " +
                                            toString(Relas.takeError()));
      for (const ELFT::Rela &R : *Relas)
        if (Error E = Handle(R, int64_t(R.r_addend)))
          return E;
    } else {
      auto Rels = File.rels(Sec);
      if (!Rels)
        return H.err(H.headerOffset(I), "invalid relocation section: " +
                                            toString(Rels.takeError()));
      for (const ELFT::Rel &R : *Rels)
        if (Error E = Handle(R, std::nullopt))
          return E;
    }
  }
  return Error::success();
}

// Parse the wrapper records of section \p SegIndex and find the container
// each one points to.
static Error readWrappers(const HostELF &H, size_t SegIndex,
                          const ReadOptions &Opts, HostFatbins &Result) {
  Expected<StringRef> SegBytes = H.contents(SegIndex, SegmentSectionName);
  if (!SegBytes)
    return SegBytes.takeError();
  uint64_t SegOff = H.Sections[SegIndex].sh_offset;
  if (SegBytes->size() % WrapperSize != 0)
    return H.err(SegOff,
                 formatv("section {0} size {1} is not a multiple of "
                         "the wrapper size {2}",
                         SegmentSectionName, SegBytes->size(), WrapperSize)
                     .str());
  std::map<uint64_t, Resolved> Relocs;
  if (Error E = resolveWrapperRelocations(H, SegIndex, Relocs))
    return E;

  bool Relocatable = Result.ELFType == ELF::ET_REL;
  for (uint64_t Off = 0; Off < SegBytes->size(); Off += WrapperSize) {
    const char *P = SegBytes->data() + Off;
    uint32_t Magic = endian::read32le(P);
    if (Magic != WrapperMagic)
      return H.err(SegOff + Off,
                   formatv("bad fatbin wrapper magic {0:x8}, expected "
                           "{1:x8}",
                           Magic, WrapperMagic)
                       .str());
    FatbinWrapper W;
    W.FileOffset = Opts.BaseOffset + SegOff + Off;
    W.Version = endian::read32le(P + 4);
    W.FatbinPointer = endian::read64le(P + 8);
    W.Data = endian::read64le(P + 16);
    std::optional<unsigned> TargetSection;
    if (auto It = Relocs.find(Off + 8); It != Relocs.end()) {
      W.FatbinPointer = It->second.Value;
      W.PointerFromRelocation = true;
      W.PointerRelocationOffset = Opts.BaseOffset + It->second.RecordOffset;
      W.PointerRelocationType = It->second.Type;
      W.PointerRelocationIsRela = It->second.IsRela;
      TargetSection = It->second.SymbolSection;
    }
    if (auto It = Relocs.find(Off + 16); It != Relocs.end())
      W.Data = It->second.Value;

    for (size_t SI = 0; SI < Result.Sections.size(); ++SI) {
      const FatbinSection &S = Result.Sections[SI];
      if (Relocatable) {
        if (!TargetSection || *TargetSection != S.Index ||
            W.FatbinPointer >= S.Size)
          continue;
        W.SectionOffset = W.FatbinPointer;
      } else {
        if (W.FatbinPointer < S.Address ||
            W.FatbinPointer - S.Address >= S.Size)
          continue;
        W.SectionOffset = W.FatbinPointer - S.Address;
      }
      W.SectionIndex = SI;
      uint64_t Target = Opts.BaseOffset + S.FileOffset + W.SectionOffset;
      for (size_t CI = 0; CI < S.Fatbin.Containers.size(); ++CI)
        if (S.Fatbin.Containers[CI].Offset == Target)
          W.ContainerIndex = CI;
      break;
    }
    Result.Wrappers.push_back(W);
  }
  return Error::success();
}

Expected<HostFatbins> readHostFatbins(MemoryBufferRef Buf,
                                      const ReadOptions &Opts) {
  HostELF H;
  if (Error E = H.open(Buf.getBuffer(), Opts.BaseOffset))
    return std::move(E);
  HostFatbins Result;
  Result.ELFType = H.File->getHeader().e_type;
  Result.Machine = H.File->getHeader().e_machine;

  // Normally one; `ld -r` output or odd linker scripts may have several.
  SmallVector<size_t, 1> SegIndices;
  for (size_t I = 0; I < H.Sections.size(); ++I) {
    Expected<StringRef> Name = H.name(I);
    if (!Name)
      return Name.takeError();
    if (*Name == SegmentSectionName) {
      SegIndices.push_back(I);
      continue;
    }
    if (*Name != FatbinSectionName && *Name != RelFatbinSectionName)
      continue;
    Expected<StringRef> Bytes = H.contents(I, *Name);
    if (!Bytes)
      return Bytes.takeError();
    const Elf_Shdr &Sec = H.Sections[I];
    FatbinSection S;
    S.Name = Name->str();
    S.Index = I;
    S.FileOffset = Sec.sh_offset;
    S.Size = Sec.sh_size;
    S.Address = Sec.sh_addr;
    S.Alignment = Sec.sh_addralign;
    ReadOptions SectionOpts = Opts;
    SectionOpts.BaseOffset = Opts.BaseOffset + Sec.sh_offset;
    Expected<FatbinFile> F = readFatbin(*Bytes, SectionOpts);
    if (!F)
      return F.takeError();
    S.Fatbin = std::move(*F);
    Result.Sections.push_back(std::move(S));
  }

  if (Result.Sections.empty() && SegIndices.empty())
    return H.err(H.File->getHeader().e_shoff,
                 "no fatbin in ELF file: no " + FatbinSectionName + ", " +
                     RelFatbinSectionName + " or " + SegmentSectionName +
                     " section");
  for (size_t SegIndex : SegIndices)
    if (Error E = readWrappers(H, SegIndex, Opts, Result))
      return std::move(E);
  return std::move(Result);
}

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
