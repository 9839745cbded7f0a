//===- CubinCompare.cpp - how a kernel's code differs in two cubins -------===//
//
// Reads both cubins with LLVM's ELFFile, indexes their relocations by the
// section they patch, and classifies each differing byte of a kernel's
// `.text` section (see CubinCompare.h).
//
//===----------------------------------------------------------------------===//

#include "tally/Fatbin/CubinCompare.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Object/ELF.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <optional>
#include <tuple>

using namespace llvm;
namespace endian = llvm::support::endian;

namespace tally {
namespace fatbin {

namespace {

using ELFT = object::ELF64LE;
using Elf_Shdr = ELFT::Shdr;

/// What a relocation writes: type, symbol (by name; a section symbol by its
/// section's name) and addend.
struct RelocTarget {
  uint32_t Type = 0;
  std::string Symbol;
  int64_t Addend = 0;
  bool operator==(const RelocTarget &O) const {
    return std::tie(Type, Symbol, Addend) ==
           std::tie(O.Type, O.Symbol, O.Addend);
  }
};

/// Relocations by section offset.
using RelocMap = std::map<uint64_t, RelocTarget>;

struct Cubin {
  StringRef What; // "the input", in errors
  std::optional<object::ELFFile<ELFT>> File;
  ArrayRef<Elf_Shdr> Sections;
  /// Kernel name -> contents of its .text section and its index.
  std::map<std::string, std::pair<StringRef, size_t>> Text;
  /// Relocations by the index of the section they patch.
  std::map<size_t, RelocMap> Relocs;
  /// Constant banks with address slots (.nv.constant<N> patched by
  /// relocations): bank number -> slots.
  std::map<unsigned, const RelocMap *> Banks;

  Error err(const Twine &Msg) const {
    return createStringError(inconvertibleErrorCode(), "%s",
                             (What + ": " + Msg).str().c_str());
  }

  Error open(StringRef Bytes) {
    auto F = object::ELFFile<ELFT>::create(Bytes);
    if (!F)
      return err("not a 64-bit ELF cubin: " + toString(F.takeError()));
    File.emplace(std::move(*F));
    auto Secs = File->sections();
    if (!Secs)
      return err(toString(Secs.takeError()));
    Sections = *Secs;
    auto Names = File->getSectionStringTable(Sections);
    if (!Names)
      return err(toString(Names.takeError()));
    std::vector<StringRef> SecNames(Sections.size());
    for (size_t I = 0; I < Sections.size(); ++I) {
      auto N = File->getSectionName(Sections[I], *Names);
      if (!N)
        return err(toString(N.takeError()));
      SecNames[I] = *N;
    }
    for (size_t I = 0; I < Sections.size(); ++I) {
      const Elf_Shdr &S = Sections[I];
      if (SecNames[I].starts_with(".text.")) {
        auto C = File->getSectionContents(S);
        if (!C)
          return err(toString(C.takeError()));
        Text[SecNames[I].drop_front(6).str()] = {toStringRef(*C), I};
      }
      if (S.sh_type != ELF::SHT_REL && S.sh_type != ELF::SHT_RELA)
        continue;
      if (S.sh_link >= Sections.size() || S.sh_info >= Sections.size())
        return err(formatv("relocation section {0} links to a section past the "
                           "{1} sections",
                           SecNames[I], Sections.size()));
      const Elf_Shdr *SymTab = &Sections[S.sh_link];
      auto StrTab = File->getStringTableForSymtab(*SymTab);
      if (!StrTab)
        return err(toString(StrTab.takeError()));
      RelocMap &Out = Relocs[S.sh_info];
      auto Add = [&](const ELFT::Rel &R, int64_t Addend) -> Error {
        RelocTarget T;
        T.Type = R.getType(false);
        T.Addend = Addend;
        auto Sym = File->getRelocationSymbol(R, SymTab);
        if (!Sym)
          return err(toString(Sym.takeError()));
        if (*Sym) {
          if ((*Sym)->getType() == ELF::STT_SECTION &&
              (*Sym)->st_shndx < SecNames.size()) {
            T.Symbol = SecNames[(*Sym)->st_shndx].str();
          } else {
            auto N = (*Sym)->getName(*StrTab);
            if (!N)
              return err(toString(N.takeError()));
            T.Symbol = N->str();
          }
        }
        Out[R.r_offset] = std::move(T);
        return Error::success();
      };
      if (S.sh_type == ELF::SHT_RELA) {
        auto Rs = File->relas(S);
        if (!Rs)
          return err(toString(Rs.takeError()));
        for (const ELFT::Rela &R : *Rs)
          if (Error E = Add(R, R.r_addend))
            return E;
      } else {
        auto Rs = File->rels(S);
        if (!Rs)
          return err(toString(Rs.takeError()));
        for (const ELFT::Rel &R : *Rs)
          if (Error E = Add(R, 0))
            return E;
      }
    }
    // `.nv.constant<N>`, not the kernels' `.nv.constant0.<kernel>`.
    for (auto &[Index, Map] : Relocs) {
      StringRef Name = SecNames[Index];
      unsigned Bank = 0;
      if (Name.consume_front(".nv.constant") && !Name.getAsInteger(10, Bank))
        Banks[Bank] = &Map;
    }
    return Error::success();
  }

  const RelocTarget *slot(unsigned Bank, uint64_t Off) const {
    auto B = Banks.find(Bank);
    if (B == Banks.end())
      return nullptr;
    auto It = B->second->find(Off);
    return It == B->second->end() ? nullptr : &It->second;
  }
};

constexpr uint64_t InstSize = 16;
constexpr uint64_t Imm32Shift = 32, Imm32Mask = 0xffffffffULL << Imm32Shift;
// A constant-bank operand c[bank][offset]: the byte offset in bits 38-53,
// the bank in bits 54-58.
constexpr uint64_t CbankOffShift = 38,
                   CbankOffMask = 0xffffULL << CbankOffShift;
constexpr uint64_t CbankShift = 54;

/// Bytes of the instruction at \p I (a multiple of 16) of kernel section
/// \p OldSec / \p NewSec that hold addresses the loader fills in, as a
/// mask of 16 bits.
unsigned addressBytes(const Cubin &Old, const Cubin &New, size_t OldSec,
                      size_t NewSec, StringRef OldCode, StringRef NewCode,
                      uint64_t I) {
  unsigned Mask = 0;
  // The same relocations patch the instruction in both: its operand field.
  auto Relocs = [&](const Cubin &C, size_t Sec) {
    std::vector<std::pair<uint64_t, const RelocTarget *>> Out;
    auto It = C.Relocs.find(Sec);
    if (It == C.Relocs.end())
      return Out;
    for (auto R = It->second.lower_bound(I);
         R != It->second.end() && R->first < I + InstSize; ++R)
      Out.emplace_back(R->first, &R->second);
    return Out;
  };
  auto OldR = Relocs(Old, OldSec), NewR = Relocs(New, NewSec);
  if (!OldR.empty() && OldR.size() == NewR.size() &&
      all_of(zip(OldR, NewR), [](const auto &P) {
        return std::get<0>(P).first == std::get<1>(P).first &&
               *std::get<0>(P).second == *std::get<1>(P).second;
      }))
    Mask |= 0xf0;

  if (I + InstSize > OldCode.size() || I + InstSize > NewCode.size())
    return Mask;
  uint64_t OldLo = endian::read64le(OldCode.data() + I);
  uint64_t NewLo = endian::read64le(NewCode.data() + I);
  uint64_t OldHi = endian::read64le(OldCode.data() + I + 8);
  uint64_t NewHi = endian::read64le(NewCode.data() + I + 8);
  if (OldHi != NewHi)
    return Mask;
  uint64_t X = OldLo ^ NewLo;
  auto SameSlot = [&](unsigned Bank, uint64_t OldOff, uint64_t NewOff) {
    const RelocTarget *A = Old.slot(Bank, OldOff), *B = New.slot(Bank, NewOff);
    return A && B && *A == *B;
  };
  // A 32-bit immediate that is the offset of an address slot (the index of
  // an LDC from the bank).
  if ((X & ~Imm32Mask) == 0)
    for (const auto &Bank : Old.Banks)
      if (SameSlot(Bank.first, OldLo >> Imm32Shift, NewLo >> Imm32Shift))
        Mask |= 0xf0;
  // A constant-bank operand that reads an address slot.
  if ((X & ~CbankOffMask) == 0 &&
      SameSlot((OldLo >> CbankShift) & 0x1f,
               (OldLo & CbankOffMask) >> CbankOffShift,
               (NewLo & CbankOffMask) >> CbankOffShift))
    Mask |= 0x70;
  return Mask;
}

} // namespace

bool KernelCodeDiff::onlyAddressesDiffer() const {
  return OldSize == NewSize && !Bytes.empty() &&
         all_of(IsAddress, [](bool B) { return B; });
}

std::string KernelCodeDiff::describe() const {
  std::string S = "section .text." + Kernel + ": ";
  if (OldSize != NewSize)
    return S + formatv("{0} bytes in the input, {1} bytes recompiled", OldSize,
                       NewSize)
                   .str();
  size_t N = Bytes.size();
  size_t Addresses = count(IsAddress, true);
  S += formatv("{0} of its {1} bytes {2} (at ", N, OldSize,
               N == 1 ? "differs" : "differ")
           .str();
  constexpr size_t Shown = 8;
  for (size_t I = 0; I < N && I < Shown; ++I)
    S += formatv("{0}{1:x}", I ? ", " : "", Bytes[I]).str();
  if (N > Shown)
    S += ", ...";
  S += "), ";
  if (Addresses == N)
    S += N == 1 ? "an address field" : "all in address fields";
  else if (Addresses == 0)
    S += N == 1 ? "not in an address field" : "none in address fields";
  else
    S += formatv("{0} in address fields", Addresses).str();
  return S + " (relocation targets or offsets of relocated address slots)";
}

Expected<std::vector<KernelCodeDiff>> compareKernelCode(StringRef OldBytes,
                                                        StringRef NewBytes) {
  Cubin Old, New;
  Old.What = "the input cubin";
  New.What = "the new cubin";
  if (Error E = Old.open(OldBytes))
    return std::move(E);
  if (Error E = New.open(NewBytes))
    return std::move(E);
  std::vector<std::pair<size_t, KernelCodeDiff>> Out;
  for (const auto &[Kernel, OldText] : Old.Text) {
    auto NewIt = New.Text.find(Kernel);
    if (NewIt == New.Text.end())
      continue;
    StringRef OldCode = OldText.first, NewCode = NewIt->second.first;
    if (OldCode == NewCode)
      continue;
    KernelCodeDiff D;
    D.Kernel = Kernel;
    D.OldSize = OldCode.size();
    D.NewSize = NewCode.size();
    if (D.OldSize == D.NewSize) {
      for (uint64_t I = 0; I < OldCode.size(); I += InstSize) {
        uint64_t End = std::min<uint64_t>(I + InstSize, OldCode.size());
        if (OldCode.slice(I, End) == NewCode.slice(I, End))
          continue;
        unsigned Mask = addressBytes(Old, New, OldText.second,
                                     NewIt->second.second, OldCode, NewCode, I);
        for (uint64_t B = I; B < End; ++B)
          if (OldCode[B] != NewCode[B]) {
            D.Bytes.push_back(B);
            D.IsAddress.push_back(Mask & (1u << (B - I)));
          }
      }
    }
    Out.emplace_back(OldText.second, std::move(D));
  }
  llvm::sort(Out,
             [](const auto &A, const auto &B) { return A.first < B.first; });
  std::vector<KernelCodeDiff> Diffs;
  for (auto &P : Out)
    Diffs.push_back(std::move(P.second));
  return std::move(Diffs);
}

} // namespace fatbin
} // namespace tally
