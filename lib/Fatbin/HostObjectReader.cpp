//===- HostObjectReader.cpp - Fatbins inside host ELF files: reading ------===//
//
// Reads fatbin sections and wrapper records with LLVM's ELFFile, resolving
// each wrapper's fatbin pointer through the relocation that sets it. The
// writer (HostObjectWriter.cpp) reads the file again through here before it
// changes it.
//
//===----------------------------------------------------------------------===//

#include "tally/Fatbin/HostObject.h"

#include "HostELF.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Object/ELF.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>

using namespace llvm;
namespace endian = llvm::support::endian;

namespace tally {
namespace fatbin {

bool hasELFMagic(StringRef Bytes) { return Bytes.starts_with(ELF::ElfMagic); }

const FatbinSection *HostFatbins::findSection(StringRef Name) const {
  for (const FatbinSection &S : Sections)
    if (S.Name == Name)
      return &S;
  return nullptr;
}

Error HostELF::open(StringRef Bytes, uint64_t BaseOffset) {
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
    return err(File->getHeader().e_shoff, "invalid section name table: " +
                                              toString(NamesOrErr.takeError()));
  SectionNames = *NamesOrErr;
  return Error::success();
}

Expected<StringRef> HostELF::name(size_t Index) const {
  auto NameOrErr = File->getSectionName(Sections[Index], SectionNames);
  if (!NameOrErr)
    return err(headerOffset(Index),
               "invalid section name: " + toString(NameOrErr.takeError()));
  return *NameOrErr;
}

Expected<StringRef> HostELF::contents(size_t Index, StringRef Name) const {
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

namespace {

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

} // namespace fatbin
} // namespace tally
