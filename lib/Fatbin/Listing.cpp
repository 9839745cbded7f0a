//===- Listing.cpp - Describe fatbin contents ----------------------------===//

#include "tally/Fatbin/Listing.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Object/ELF.h"
#include "llvm/Support/Format.h"

using namespace llvm;

namespace tally {
namespace fatbin {

// st_other bit ptxas sets on __global__ functions.
static constexpr unsigned STO_CUDA_ENTRY = 0x10;

Expected<CubinFunctions> readCubinFunctions(StringRef ELF) {
  if (ELF.size() < ELF::EI_NIDENT || !ELF.starts_with(ELF::ElfMagic))
    return createStringError("cubin is not an ELF file");
  if (ELF[ELF::EI_CLASS] != ELF::ELFCLASS64 ||
      ELF[ELF::EI_DATA] != ELF::ELFDATA2LSB)
    return createStringError("cubin is not a 64-bit little-endian ELF file");
  auto FileOrErr = object::ELFFile<object::ELF64LE>::create(ELF);
  if (!FileOrErr)
    return FileOrErr.takeError();
  const auto &File = *FileOrErr;
  auto Sections = File.sections();
  if (!Sections)
    return Sections.takeError();

  CubinFunctions Result;
  for (const auto &Sec : *Sections) {
    if (Sec.sh_type != ELF::SHT_SYMTAB)
      continue;
    auto Syms = File.symbols(&Sec);
    if (!Syms)
      return Syms.takeError();
    auto StrTab = File.getStringTableForSymtab(Sec, *Sections);
    if (!StrTab)
      return StrTab.takeError();
    if (Syms->empty())
      continue;
    // Entry 0 is the reserved null symbol.
    for (const auto &Sym : Syms->drop_front()) {
      if (Sym.getType() != ELF::STT_FUNC || Sym.isUndefined())
        continue;
      auto Name = Sym.getName(*StrTab);
      if (!Name)
        return Name.takeError();
      if (Sym.st_other & STO_CUDA_ENTRY)
        Result.Kernels.push_back(Name->str());
      else
        Result.DeviceFunctions.push_back(Name->str());
    }
  }
  return std::move(Result);
}

// True if the first directive of \p Text (after whitespace and comments) is
// `.version`.
static bool startsWithVersion(StringRef Text) {
  while (true) {
    Text = Text.ltrim();
    if (Text.consume_front("//")) {
      size_t NL = Text.find('\n');
      Text = NL == StringRef::npos ? StringRef() : Text.substr(NL);
      continue;
    }
    if (Text.consume_front("/*")) {
      size_t EndC = Text.find("*/");
      Text = EndC == StringRef::npos ? StringRef() : Text.substr(EndC + 2);
      continue;
    }
    break;
  }
  if (!Text.consume_front(".version"))
    return false;
  return Text.empty() || isSpace(Text.front());
}

Expected<std::string> getPTXText(const FatbinEntry &E) {
  if (!E.isPTX())
    return createStringError("entry is " + entryKindName(E.Kind) + ", not PTX");
  StringRef Text = E.Payload;
  Text = Text.take_until([](char C) { return C == '\0'; });
  if (startsWithVersion(Text) || (E.MajorVersion == 0 && E.MinorVersion == 0))
    return Text.str();
  return (".version " + Twine(E.MajorVersion) + "." + Twine(E.MinorVersion) +
          "\n" + Text)
      .str();
}

static bool isPrintable(StringRef S) {
  return all_of(S, [](char C) { return isPrint(C) || C == '\t' || C == '\n'; });
}

Expected<std::vector<EntryInfo>> describeFatbin(const FatbinFile &F,
                                                const ListingOptions &Opts) {
  std::vector<EntryInfo> Infos;
  size_t Index = 0;
  for (size_t CI = 0; CI < F.Containers.size(); ++CI) {
    const FatbinContainer &C = F.Containers[CI];
    for (size_t EI = 0; EI < C.Entries.size(); ++EI, ++Index) {
      const FatbinEntry &E = C.Entries[EI];
      EntryInfo I;
      I.ContainerIndex = CI;
      I.IndexInContainer = EI;
      I.Index = Index;
      I.Kind = E.Kind;
      I.KindName = entryKindName(E.Kind);
      I.Arch = E.archName();
      I.MajorVersion = E.MajorVersion;
      I.MinorVersion = E.MinorVersion;
      I.Flags = E.Flags;
      I.Comp = E.compression();
      I.PayloadSize = E.Payload.size();
      I.Obfuscated = E.isObfuscated();
      if (I.Obfuscated && E.Origin && I.Comp != Compression::None)
        I.UncompressedSize = E.Origin->UncompressedSize;
      if (E.isUnchanged()) {
        const FatbinEntry::Source &O = *E.Origin;
        I.Offset = O.Offset;
        I.HeaderSize = O.Header.size();
        I.PaddedSize = O.StoredPayload.size();
        I.StoredSize = I.Comp == Compression::None ? O.StoredPayload.size()
                                                   : O.CompressedSize;
      } else if (E.Origin) {
        I.Offset = E.Origin->Offset;
      }
      I.Identifier = E.Identifier;
      I.Options = E.Options;
      I.OptionsAreBinary = E.Options && !isPrintable(*E.Options);
      if (E.isELF()) {
        Expected<CubinFunctions> Fns = readCubinFunctions(E.Payload);
        if (!Fns)
          return createStringError(
              "entry " + Twine(Index) + " (" + I.Arch +
              "): cannot read cubin: " + toString(Fns.takeError()));
        I.Kernels = std::move(Fns->Kernels);
        if (Opts.ShowDeviceFunctions)
          I.DeviceFunctions = std::move(Fns->DeviceFunctions);
      } else if (E.isPTX() && Opts.PTXKernelNames) {
        Expected<std::string> Text = getPTXText(E);
        if (!Text)
          return Text.takeError();
        I.Kernels = Opts.PTXKernelNames(*Text);
      }
      Infos.push_back(std::move(I));
    }
  }
  return std::move(Infos);
}

static void printList(raw_ostream &OS, StringRef Label,
                      ArrayRef<std::string> Names) {
  if (Names.empty())
    return;
  OS << "    " << Label << ":";
  for (const std::string &N : Names)
    OS << ' ' << N;
  OS << '\n';
}

void printEntryInfos(ArrayRef<EntryInfo> Infos, raw_ostream &OS) {
  for (const EntryInfo &I : Infos) {
    OS << "entry " << I.Index << " (container " << I.ContainerIndex
       << ", entry " << I.IndexInContainer << ")";
    if (I.Offset)
      OS << " at 0x" << utohexstr(*I.Offset, /*LowerCase=*/true);
    OS << ": " << I.KindName << ' ' << I.Arch;
    if (I.Kind == static_cast<uint16_t>(EntryKind::PTX))
      OS << ", PTX ISA " << I.MajorVersion << '.' << I.MinorVersion;
    else
      OS << ", version " << I.MajorVersion << '.' << I.MinorVersion;
    OS << '\n';
    OS << "    size: ";
    if (I.Obfuscated)
      OS << "obfuscated payload " << I.PayloadSize;
    else
      OS << "payload " << I.PayloadSize;
    if (I.StoredSize)
      OS << ", stored " << *I.StoredSize;
    if (I.PaddedSize)
      OS << ", padded " << *I.PaddedSize;
    if (I.HeaderSize)
      OS << ", header " << *I.HeaderSize;
    if (I.UncompressedSize)
      OS << ", uncompressed " << *I.UncompressedSize;
    OS << "; compression " << compressionName(I.Comp) << '\n';
    OS << "    flags: 0x" << utohexstr(I.Flags, /*LowerCase=*/true) << " ("
       << flagsToString(I.Flags) << ")\n";
    if (!I.Identifier.empty())
      OS << "    identifier: " << I.Identifier << '\n';
    if (I.Options) {
      if (I.OptionsAreBinary) {
        OS << "    options: binary, " << I.Options->size() << " bytes:";
        for (char C : *I.Options)
          OS << ' ' << format_hex_no_prefix(uint8_t(C), 2);
        OS << '\n';
      } else {
        OS << "    options: \"";
        OS.write_escaped(*I.Options);
        OS << "\"\n";
      }
    }
    printList(OS, "kernels", I.Kernels);
    printList(OS, "device functions", I.DeviceFunctions);
  }
}

Error printFatbinListing(const FatbinFile &F, raw_ostream &OS,
                         const ListingOptions &Opts) {
  Expected<std::vector<EntryInfo>> Infos = describeFatbin(F, Opts);
  if (!Infos)
    return Infos.takeError();
  OS << "fatbin: " << F.Containers.size() << " container"
     << (F.Containers.size() == 1 ? "" : "s") << ", " << Infos->size()
     << " entr" << (Infos->size() == 1 ? "y" : "ies");
  if (!F.Trailing.empty())
    OS << ", " << F.Trailing.size() << " trailing bytes";
  OS << '\n';
  printEntryInfos(*Infos, OS);
  return Error::success();
}

} // namespace fatbin
} // namespace tally
