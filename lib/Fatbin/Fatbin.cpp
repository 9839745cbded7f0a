//===- Fatbin.cpp - Read and write CUDA fatbins --------------------------===//
//
// The reader walks containers and entries in file order and checks each size
// and offset against what is left before reading through it; the writer keeps
// entries that did not change byte for byte and lays out the others as nvcc
// does (strings NUL terminated and padded to 8, payload padded to 8).
//
//===----------------------------------------------------------------------===//

#include "tally/Fatbin/Fatbin.h"
#include "tally/Fatbin/Compression.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

using namespace llvm;
namespace endian = llvm::support::endian;

namespace tally {
namespace fatbin {

char FormatError::ID = 0;

void FormatError::log(raw_ostream &OS) const {
  OS << "offset 0x" << utohexstr(Offset, /*LowerCase=*/true) << ": " << Message;
}

std::error_code FormatError::convertToErrorCode() const {
  return std::make_error_code(std::errc::illegal_byte_sequence);
}

Error makeFormatError(uint64_t Offset, const Twine &Message) {
  return make_error<FormatError>(Offset, Message);
}

bool EntryFields::operator==(const EntryFields &O) const {
  return Kind == O.Kind && Version == O.Version &&
         MajorVersion == O.MajorVersion && MinorVersion == O.MinorVersion &&
         Arch == O.Arch && Flags == O.Flags && Reserved == O.Reserved &&
         Identifier == O.Identifier && Options == O.Options;
}

std::string FatbinEntry::archName() const {
  return fatbin::archName(Kind, Arch, Flags);
}

bool FatbinEntry::isUnchanged() const {
  if (!Origin || ExtraPadding != 0)
    return false;
  if (static_cast<const EntryFields &>(*this) != Origin->Fields)
    return false;
  if ((Origin->Fields.Flags & entry_flags::CompressionMask) &&
      !(Origin->Fields.Flags & entry_flags::Obfuscated))
    return Payload == Origin->Payload;
  return Payload == Origin->StoredPayload;
}

FatbinEntry FatbinEntry::makePTX(StringRef Text, uint32_t Arch,
                                 uint16_t PTXMajor, uint16_t PTXMinor,
                                 Compression C, uint64_t ExtraFlags) {
  FatbinEntry E;
  E.Kind = static_cast<uint16_t>(EntryKind::PTX);
  E.Arch = Arch;
  E.MajorVersion = PTXMajor;
  E.MinorVersion = PTXMinor;
  E.Flags = flagsWithCompression(
      entry_flags::Is64Bit | entry_flags::HostLinux | ExtraFlags, C);
  E.Options = std::string();
  E.Payload = Text.str();
  // The driver reads PTX up to its NUL; nvcc stores the NUL in the payload.
  if (E.Payload.empty() || E.Payload.back() != '\0')
    E.Payload.push_back('\0');
  return E;
}

FatbinEntry FatbinEntry::makeCubin(StringRef ELF, uint32_t Arch, Compression C,
                                   uint64_t ExtraFlags) {
  FatbinEntry E;
  E.Kind = static_cast<uint16_t>(EntryKind::ELF);
  E.Arch = Arch;
  // nvcc 13 writes 1.8 where 8 is EI_ABIVERSION of the cubin.
  E.MajorVersion = 1;
  E.MinorVersion = 8;
  if (ELF.size() > 8 && ELF.starts_with("\x7f"
                                        "ELF"))
    E.MinorVersion = static_cast<uint8_t>(ELF[8]);
  E.Flags = flagsWithCompression(
      entry_flags::Is64Bit | entry_flags::HostLinux | ExtraFlags, C);
  E.Payload = ELF.str();
  return E;
}

size_t FatbinFile::numEntries() const {
  size_t N = 0;
  for (const FatbinContainer &C : Containers)
    N += C.Entries.size();
  return N;
}

bool hasFatbinMagic(StringRef Bytes) {
  return Bytes.size() >= 4 && endian::read32le(Bytes.data()) == FatbinMagic;
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

namespace {

static bool isAllZero(StringRef S) {
  return S.find_first_not_of('\0') == StringRef::npos;
}

class Reader {
public:
  Reader(StringRef Data, const ReadOptions &Opts) : Data(Data), Opts(Opts) {}

  Expected<FatbinFile> read();

private:
  StringRef Data;
  const ReadOptions &Opts;

  uint64_t abs(uint64_t Off) const { return Opts.BaseOffset + Off; }
  std::string hex(uint64_t Off) const {
    return "0x" + utohexstr(Off, /*LowerCase=*/true);
  }
  Error err(uint64_t Off, const Twine &Msg) const {
    return makeFormatError(abs(Off), Msg);
  }
  uint16_t u16(uint64_t Off) const {
    return endian::read16le(Data.data() + Off);
  }
  uint32_t u32(uint64_t Off) const {
    return endian::read32le(Data.data() + Off);
  }
  uint64_t u64(uint64_t Off) const {
    return endian::read64le(Data.data() + Off);
  }
  // How the end of a container is named in messages.
  std::string endName(uint64_t End) const {
    if (End == Data.size())
      return "end of fatbin (size " + utostr(Data.size()) + ")";
    return "end of its container at " + hex(abs(End));
  }

  Error readContainer(uint64_t Off, FatbinContainer &C, uint64_t &End);
  Error readEntry(uint64_t Off, uint64_t End, FatbinEntry &E, uint64_t &Next);
};

} // namespace

Expected<FatbinFile> Reader::read() {
  FatbinFile F;
  if (Data.empty())
    return err(0, "empty fatbin");
  uint64_t Off = 0;
  uint64_t Padding = 0;
  while (true) {
    FatbinContainer C;
    C.LeadingPadding = Padding;
    uint64_t End;
    if (Error E = readContainer(Off, C, End))
      return std::move(E);
    F.Containers.push_back(std::move(C));

    // Zero padding may separate containers (the linker aligns each input
    // section) and may follow the last one.
    uint64_t P = End;
    while (P < Data.size() && Data[P] == '\0')
      ++P;
    if (P == Data.size()) {
      F.Trailing = Data.substr(End).str();
      break;
    }
    if (hasFatbinMagic(Data.substr(P))) {
      Padding = P - End;
      Off = P;
      continue;
    }
    if (Opts.AllowTrailingData) {
      F.Trailing = Data.substr(End).str();
      break;
    }
    return err(P, formatv("unexpected data after fatbin container at {0}: "
                          "expected zero padding or magic {1:x8}",
                          hex(abs(Off)), FatbinMagic)
                      .str());
  }
  return std::move(F);
}

Error Reader::readContainer(uint64_t Off, FatbinContainer &C, uint64_t &End) {
  uint64_t Left = Data.size() - Off;
  if (Left < ContainerHeaderSize)
    return err(Off, formatv("fatbin header truncated: {0} bytes left, need {1}",
                            Left, ContainerHeaderSize)
                        .str());
  uint32_t Magic = u32(Off + container_offset::Magic);
  if (Magic != FatbinMagic)
    return err(Off, formatv("bad fatbin magic {0:x8}, expected {1:x8}", Magic,
                            FatbinMagic)
                        .str());
  C.Offset = abs(Off);
  C.Version = u16(Off + container_offset::Version);
  if (C.Version != FatbinVersion)
    return err(Off, formatv("unsupported fatbin version {0}", C.Version).str());
  uint64_t HeaderSize = u16(Off + container_offset::HeaderSize);
  if (HeaderSize < ContainerHeaderSize)
    return err(Off, formatv("fatbin header size {0} is smaller than {1}",
                            HeaderSize, ContainerHeaderSize)
                        .str());
  if (HeaderSize > Left)
    return err(Off, formatv("fatbin header size {0} extends past {1}",
                            HeaderSize, endName(Data.size()))
                        .str());
  uint64_t PayloadSize = u64(Off + container_offset::PayloadSize);
  if (PayloadSize > Left - HeaderSize)
    return err(Off, formatv("fatbin payload size {0} extends past {1}",
                            PayloadSize, endName(Data.size()))
                        .str());
  C.HeaderExtra =
      Data.substr(Off + ContainerHeaderSize, HeaderSize - ContainerHeaderSize)
          .str();

  uint64_t P = Off + HeaderSize;
  End = P + PayloadSize;
  while (P < End) {
    // nvcc never leaves padding here, and cuobjdump rejects it ("invalid
    // fatbin header") while the CUDA runtime loops forever on it.
    if (isAllZero(Data.slice(P, End)))
      return err(P, formatv("{0} zero bytes after the last entry inside the "
                            "container: the CUDA runtime does not accept "
                            "padding inside a container",
                            End - P)
                        .str());
    if (End - P < EntryHeaderSize)
      return err(P, formatv("entry header truncated: {0} bytes left in "
                            "container, need {1}",
                            End - P, EntryHeaderSize)
                        .str());
    FatbinEntry E;
    uint64_t Next;
    if (Error Err = readEntry(P, End, E, Next))
      return Err;
    C.Entries.push_back(std::move(E));
    P = Next;
  }
  return Error::success();
}

Error Reader::readEntry(uint64_t Off, uint64_t End, FatbinEntry &E,
                        uint64_t &Next) {
  using namespace entry_offset;
  uint64_t Left = End - Off;
  E.Kind = u16(Off + Kind);
  E.Version = u16(Off + Version);
  uint64_t HeaderSize = u32(Off + entry_offset::HeaderSize);
  uint64_t Padded = u64(Off + PaddedSize);
  uint64_t CompSize = u32(Off + CompressedSize);
  uint64_t OptOff = u32(Off + OptionsOffset);
  E.MinorVersion = u16(Off + MinorVersion);
  E.MajorVersion = u16(Off + MajorVersion);
  E.Arch = u32(Off + Arch);
  uint64_t IdOff = u32(Off + IdentifierOffset);
  uint64_t IdSize = u32(Off + IdentifierSize);
  E.Flags = u64(Off + Flags);
  E.Reserved = u64(Off + Reserved);
  uint64_t USize = u64(Off + UncompressedSize);

  if (HeaderSize < EntryHeaderSize)
    return err(Off, formatv("entry header size {0} is smaller than {1}",
                            HeaderSize, EntryHeaderSize)
                        .str());
  if (HeaderSize > Left)
    return err(Off, formatv("entry header size {0} extends past {1}",
                            HeaderSize, endName(End))
                        .str());
  if (Padded > Left - HeaderSize)
    return err(Off, formatv("entry payload size {0} extends past {1}", Padded,
                            endName(End))
                        .str());

  // Strings live in the header after the fixed 64 bytes.
  auto InHeader = [&](uint64_t SOff, uint64_t SSize) {
    return SOff >= EntryHeaderSize && SOff <= HeaderSize &&
           SSize <= HeaderSize - SOff;
  };
  if (IdOff != 0 || IdSize != 0) {
    if (!InHeader(IdOff, IdSize))
      return err(Off, formatv("entry identifier (offset {0}, size {1}) lies "
                              "outside the string area of the entry header "
                              "(bytes 64 to {2})",
                              IdOff, IdSize, HeaderSize)
                          .str());
    E.Identifier = Data.substr(Off + IdOff, IdSize).str();
  }
  if (OptOff != 0) {
    if (!InHeader(OptOff, 8))
      return err(Off, formatv("entry options pointer at offset {0} lies "
                              "outside the string area of the entry header "
                              "(bytes 64 to {1})",
                              OptOff, HeaderSize)
                          .str());
    uint64_t SOff = u32(Off + OptOff);
    uint64_t SSize = u32(Off + OptOff + 4);
    if (SSize != 0 && !InHeader(SOff, SSize))
      return err(Off, formatv("entry options (offset {0}, size {1}) lie "
                              "outside the string area of the entry header "
                              "(bytes 64 to {2})",
                              SOff, SSize, HeaderSize)
                          .str());
    E.Options = SSize ? Data.substr(Off + SOff, SSize).str() : std::string();
  }

  uint64_t PayloadOff = Off + HeaderSize;
  StringRef Stored = Data.substr(PayloadOff, Padded);
  if ((E.Flags & entry_flags::CompressionMask) == entry_flags::CompressionMask)
    return err(Off, formatv("entry flags {0:x} ask for both LZ4 and zstd "
                            "compression",
                            E.Flags)
                        .str());
  Compression C = compressionFromFlags(E.Flags);
  bool Obfuscated = E.Flags & entry_flags::Obfuscated;
  if (C != Compression::None) {
    if (CompSize == 0 || CompSize > Padded)
      return err(Off, formatv("entry compressed size {0} does not fit the "
                              "padded payload size {1}",
                              CompSize, Padded)
                          .str());
  }
  if (C != Compression::None && !Obfuscated) {
    if (USize > Opts.MaxUncompressedSize)
      return err(Off, formatv("entry uncompressed size {0} exceeds the limit "
                              "of {1} bytes",
                              USize, Opts.MaxUncompressedSize)
                          .str());
    Expected<std::string> Decoded =
        decompress(C, Stored.take_front(CompSize), USize);
    if (!Decoded)
      return err(PayloadOff,
                 formatv("{0} payload of {1} entry: {2}", compressionName(C),
                         entryKindName(E.Kind), toString(Decoded.takeError()))
                     .str());
    E.Payload = std::move(*Decoded);
  } else {
    E.Payload = Stored.str();
  }

  auto Src = std::make_shared<FatbinEntry::Source>();
  Src->Offset = abs(Off);
  Src->Header = Data.substr(Off, HeaderSize).str();
  Src->StoredPayload = Stored.str();
  Src->CompressedSize = CompSize;
  Src->UncompressedSize = USize;
  Src->Fields = static_cast<const EntryFields &>(E);
  if (C != Compression::None && !Obfuscated)
    Src->Payload = E.Payload;
  E.Origin = std::move(Src);
  Next = PayloadOff + Padded;
  return Error::success();
}

Expected<FatbinFile> readFatbin(StringRef Bytes, const ReadOptions &Opts) {
  return Reader(Bytes, Opts).read();
}

Expected<FatbinFile> readFatbin(MemoryBufferRef Buf, const ReadOptions &Opts) {
  return readFatbin(Buf.getBuffer(), Opts);
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

namespace {

template <typename T> static void put(std::string &S, uint64_t Off, T V) {
  endian::write<T, llvm::endianness::little>(&S[Off], V);
}

template <typename T> static void append(SmallVectorImpl<char> &Out, T V) {
  char Buf[sizeof(T)];
  endian::write<T, llvm::endianness::little>(Buf, V);
  Out.append(Buf, Buf + sizeof(T));
}

static void appendZeros(SmallVectorImpl<char> &Out, uint64_t N) {
  Out.append(N, '\0');
}

static void padTo(std::string &S, uint64_t Align) {
  S.resize(alignTo(S.size(), Align), '\0');
}

constexpr uint64_t U32Max = std::numeric_limits<uint32_t>::max();

// A fresh header: the 64 fixed bytes (filled in by the caller), then the
// identifier and the options pair and string, each NUL terminated and padded
// to 8 bytes, in the order nvcc uses.
static Error buildStrings(const FatbinEntry &E, std::string &H) {
  using namespace entry_offset;
  H.assign(EntryHeaderSize, '\0');
  if (!E.Identifier.empty()) {
    if (E.Identifier.size() > U32Max)
      return createStringError("entry identifier too long");
    put<uint32_t>(H, IdentifierOffset, uint32_t(H.size()));
    put<uint32_t>(H, IdentifierSize, uint32_t(E.Identifier.size()));
    H += E.Identifier;
    H += '\0';
    padTo(H, FatbinAlignment);
  }
  if (E.Options) {
    if (E.Options->size() > U32Max || H.size() > U32Max)
      return createStringError("entry options too long");
    uint64_t PairOff = H.size();
    put<uint32_t>(H, OptionsOffset, uint32_t(PairOff));
    H.append(8, '\0');
    put<uint32_t>(H, PairOff, uint32_t(H.size()));
    put<uint32_t>(H, PairOff + 4, uint32_t(E.Options->size()));
    H += *E.Options;
    H += '\0';
    padTo(H, FatbinAlignment);
  }
  return Error::success();
}

static Error writeEntry(const FatbinEntry &E, size_t Index,
                        SmallVectorImpl<char> &Out, const WriteOptions &Opts) {
  const FatbinEntry::Source *O = E.Origin.get();
  if (E.isUnchanged()) {
    Out.append(O->Header.begin(), O->Header.end());
    Out.append(O->StoredPayload.begin(), O->StoredPayload.end());
    return Error::success();
  }
  auto Fail = [&](const Twine &Msg) {
    return createStringError("entry " + Twine(Index) + ": " + Msg);
  };
  if ((E.Flags & entry_flags::CompressionMask) == entry_flags::CompressionMask)
    return Fail("flags ask for both LZ4 and zstd compression");
  if (E.ExtraPadding % FatbinAlignment != 0)
    return Fail("extra padding " + Twine(E.ExtraPadding) +
                " is not a multiple of 8");

  // The stored bytes: reuse the original encoding if only header fields
  // changed, else encode afresh.
  Compression C = E.compression();
  std::string Stored;
  bool Reused = false;
  uint64_t StoredSize = 0, USize = E.Payload.size();
  if (E.isObfuscated()) {
    // Only the bytes as read can be written back.
    if (!O || !(O->Fields.Flags & entry_flags::Obfuscated) ||
        (O->Fields.Flags & entry_flags::CompressionMask) !=
            (E.Flags & entry_flags::CompressionMask) ||
        E.Payload != O->StoredPayload)
      return Fail("cannot encode an obfuscated payload (flag 0x10000); only "
                  "the header of an entry read with one can change");
    Stored = O->StoredPayload;
    StoredSize = O->CompressedSize;
    USize = O->UncompressedSize;
    Reused = true;
  } else if (O && C != Compression::None &&
             C == compressionFromFlags(O->Fields.Flags) &&
             E.Payload == O->Payload) {
    Stored = StringRef(O->StoredPayload).take_front(O->CompressedSize).str();
    StoredSize = Stored.size();
    Reused = true;
  }
  if (!Reused) {
    int Level = C == Compression::LZ4 ? Opts.LZ4Acceleration : Opts.ZstdLevel;
    Expected<std::string> Enc = compress(C, E.Payload, Level);
    if (!Enc)
      return Fail(toString(Enc.takeError()));
    Stored = std::move(*Enc);
    StoredSize = Stored.size();
  }
  if (C != Compression::None && StoredSize > U32Max)
    return Fail("compressed payload does not fit the 32-bit size field");
  padTo(Stored, FatbinAlignment);
  Stored.append(E.ExtraPadding, '\0');

  // The header: keep the original bytes (and whatever this library does not
  // understand in them) if the strings are the same, else lay it out anew.
  std::string H;
  if (O && E.Identifier == O->Fields.Identifier &&
      E.Options == O->Fields.Options) {
    H = O->Header;
  } else if (Error Err = buildStrings(E, H)) {
    return Fail(toString(std::move(Err)));
  }
  if (H.size() > U32Max)
    return Fail("entry header too large");
  using namespace entry_offset;
  put<uint16_t>(H, Kind, E.Kind);
  put<uint16_t>(H, Version, E.Version);
  put<uint32_t>(H, HeaderSize, uint32_t(H.size()));
  put<uint64_t>(H, PaddedSize, Stored.size());
  put<uint32_t>(H, CompressedSize,
                C == Compression::None ? 0 : uint32_t(StoredSize));
  put<uint16_t>(H, MinorVersion, E.MinorVersion);
  put<uint16_t>(H, MajorVersion, E.MajorVersion);
  put<uint32_t>(H, Arch, E.Arch);
  put<uint64_t>(H, Flags, E.Flags);
  put<uint64_t>(H, Reserved, E.Reserved);
  put<uint64_t>(H, UncompressedSize, C == Compression::None ? 0 : USize);
  Out.append(H.begin(), H.end());
  Out.append(Stored.begin(), Stored.end());
  return Error::success();
}

} // namespace

Error writeFatbin(const FatbinFile &F, SmallVectorImpl<char> &Out,
                  const WriteOptions &Opts,
                  std::vector<uint64_t> *ContainerOffsets) {
  size_t Index = 0;
  for (size_t CI = 0; CI < F.Containers.size(); ++CI) {
    const FatbinContainer &C = F.Containers[CI];
    if (CI > 0)
      appendZeros(Out, C.LeadingPadding);
    uint64_t Start = Out.size();
    if (ContainerOffsets)
      ContainerOffsets->push_back(Start);
    uint64_t HeaderSize = ContainerHeaderSize + C.HeaderExtra.size();
    if (HeaderSize > std::numeric_limits<uint16_t>::max())
      return createStringError("container " + Twine(CI) + ": header too large");
    append<uint32_t>(Out, FatbinMagic);
    append<uint16_t>(Out, C.Version);
    append<uint16_t>(Out, uint16_t(HeaderSize));
    append<uint64_t>(Out, 0); // Patched below.
    Out.append(C.HeaderExtra.begin(), C.HeaderExtra.end());
    for (const FatbinEntry &E : C.Entries)
      if (Error Err = writeEntry(E, Index++, Out, Opts))
        return Err;
    endian::write64le(Out.data() + Start + container_offset::PayloadSize,
                      Out.size() - Start - HeaderSize);
  }
  Out.append(F.Trailing.begin(), F.Trailing.end());
  return Error::success();
}

Error writeFatbin(const FatbinFile &F, raw_ostream &OS,
                  const WriteOptions &Opts) {
  SmallVector<char, 0> Buf;
  if (Error Err = writeFatbin(F, Buf, Opts))
    return Err;
  OS.write(Buf.data(), Buf.size());
  return Error::success();
}

} // namespace fatbin
} // namespace tally
