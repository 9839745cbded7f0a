//===- HostObject.cpp - Fatbins inside host ELF files --------------------===//
//
// Reads fatbin sections and wrapper records with LLVM's ELFFile, resolving
// each wrapper's fatbin pointer through the relocation that sets it, and
// writes a replacement fatbin back, in place or through LLVM's objcopy.
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

Expected<std::string>
replaceFatbinSection(MemoryBufferRef Buf, StringRef SectionName,
                     StringRef NewContents,
                     ArrayRef<uint64_t> ContainerOffsets) {
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
  for (const FatbinWrapper &W : Old->Wrappers) {
    if (!W.SectionIndex || Old->Sections[*W.SectionIndex].Index != *Index)
      continue;
    if (!is_contained(ContainerOffsets, W.SectionOffset))
      return makeFormatError(
          W.FileOffset, formatv("fatbin wrapper points to offset {0:x} of {1}, "
                                "where the new contents start no container",
                                W.SectionOffset, SectionName)
                            .str());
  }

  if (NewContents.size() <= Sec.sh_size) {
    std::string Out = Buf.getBuffer().str();
    std::copy(NewContents.begin(), NewContents.end(),
              Out.begin() + Sec.sh_offset);
    std::fill(Out.begin() + Sec.sh_offset + NewContents.size(),
              Out.begin() + Sec.sh_offset + Sec.sh_size, '\0');
    return std::move(Out);
  }

  if (H.File->getHeader().e_type != ELF::ET_REL)
    return H.err(H.headerOffset(*Index),
                 formatv("new contents of {0} ({1} bytes) do not fit the "
                         "section ({2} bytes); growing a section of a linked "
                         "file is not supported",
                         SectionName, NewContents.size(), Sec.sh_size)
                     .str());

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

  SmallVector<char, 0> Out;
  std::vector<uint64_t> Offsets;
  if (Error E = Write(NewFatbin, Out, Offsets))
    return std::move(E);
  bool Relocatable = Old->ELFType == ELF::ET_REL;
  bool Grows = Out.size() > S->Size;
  if (!Stays(Offsets) || (Grows && !Relocatable)) {
    // Pad every container but the last to the distance between its old start
    // and the old start of the next one.
    const std::vector<FatbinContainer> &OldCs = S->Fatbin.Containers;
    FatbinFile Padded = NewFatbin;
    for (size_t I = 0; I + 1 < Padded.Containers.size(); ++I) {
      if (I + 1 >= OldCs.size())
        break;
      uint64_t Want = OldCs[I + 1].Offset - OldCs[I].Offset;
      uint64_t Have = Offsets[I + 1] - Offsets[I];
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
      for (size_t J = I + 1; J < Offsets.size(); ++J)
        Offsets[J] += Want - Have;
    }
    if (Error E = Write(Padded, Out, Offsets))
      return std::move(E);
    if (!Stays(Offsets))
      return createStringError("cannot lay out the new fatbin so that every "
                               "wrapper of " +
                               SectionName + " still points at its container");
  }
  return replaceFatbinSection(Buf, SectionName,
                              StringRef(Out.data(), Out.size()), Offsets);
}

} // namespace fatbin
} // namespace tally
