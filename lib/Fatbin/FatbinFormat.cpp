//===- FatbinFormat.cpp - Names for fatbin header values -----------------===//

#include "tally/Fatbin/FatbinFormat.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ErrorHandling.h"

using namespace llvm;

namespace tally {
namespace fatbin {

StringRef compressionName(Compression C) {
  switch (C) {
  case Compression::None:
    return "none";
  case Compression::LZ4:
    return "lz4";
  case Compression::Zstd:
    return "zstd";
  }
  llvm_unreachable("bad compression");
}

std::string entryKindName(uint16_t Kind) {
  switch (static_cast<EntryKind>(Kind)) {
  case EntryKind::PTX:
    return "PTX";
  case EntryKind::ELF:
    return "ELF";
  case EntryKind::LTOIR:
    return "LTO-IR";
  }
  return "kind " + utostr(Kind);
}

std::string archName(uint16_t Kind, uint32_t Arch, uint64_t Flags) {
  std::string Prefix;
  switch (static_cast<EntryKind>(Kind)) {
  case EntryKind::PTX:
    Prefix = "compute_";
    break;
  case EntryKind::LTOIR:
    Prefix = "lto_";
    break;
  default:
    Prefix = "sm_";
    break;
  }
  std::string Name = Prefix + utostr(Arch);
  if (Flags & entry_flags::ArchA)
    Name += 'a';
  if (Flags & entry_flags::ArchF)
    Name += 'f';
  return Name;
}

std::string flagsToString(uint64_t Flags) {
  static const struct {
    uint64_t Bit;
    const char *Name;
  } Known[] = {
      {entry_flags::Is64Bit, "64bit"},
      {entry_flags::Debug, "debug"},
      {entry_flags::HostLinux, "linux"},
      {entry_flags::CompressedLZ4, "lz4"},
      {entry_flags::CompressedZstd, "zstd"},
      {entry_flags::Obfuscated, "obfuscated"},
      {entry_flags::ArchA, "arch-a"},
      {entry_flags::ArchF, "arch-f"},
      {entry_flags::BinaryOptions, "binary-options"},
  };
  std::string S;
  for (const auto &K : Known) {
    if (!(Flags & K.Bit))
      continue;
    if (!S.empty())
      S += '|';
    S += K.Name;
    Flags &= ~K.Bit;
  }
  if (Flags) {
    if (!S.empty())
      S += '|';
    S += "0x" + utohexstr(Flags, /*LowerCase=*/true);
  }
  return S.empty() ? "0" : S;
}

} // namespace fatbin
} // namespace tally
