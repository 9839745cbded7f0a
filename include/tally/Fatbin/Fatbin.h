//===- Fatbin.h - In-memory model of CUDA fatbins ----------------*- C++
//-*-===//
//
// A fatbin is one or more containers laid end to end; a container is a list of
// entries (PTX, cubin, LTO-IR) for different targets. readFatbin() checks every
// size and offset and decompresses the payloads; writeFatbin() lays the model
// out again. Entries that were read and not changed are written from the bytes
// they were read from, so an unchanged round trip is byte-identical even where
// this library does not understand a header byte.
//
//===----------------------------------------------------------------------===//

#ifndef TALLY_FATBIN_FATBIN_H
#define TALLY_FATBIN_FATBIN_H

#include "tally/Fatbin/FatbinFormat.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBufferRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tally {
namespace fatbin {

/// An error in binary input, at a byte offset. Its message reads
/// "offset 0x40: entry payload size 123456 extends past end of ...".
/// The caller prefixes the file name.
class FormatError : public llvm::ErrorInfo<FormatError> {
public:
  static char ID;
  FormatError(uint64_t Offset, const llvm::Twine &Message)
      : Offset(Offset), Message(Message.str()) {}
  uint64_t getOffset() const { return Offset; }
  /// The message without the offset prefix.
  llvm::StringRef getMessage() const { return Message; }
  void log(llvm::raw_ostream &OS) const override;
  std::error_code convertToErrorCode() const override;

private:
  uint64_t Offset;
  std::string Message;
};

/// Shorthand for llvm::make_error<FormatError>(Offset, Message).
llvm::Error makeFormatError(uint64_t Offset, const llvm::Twine &Message);

/// The header fields of an entry that the model exposes. Sizes and offsets are
/// not here: the writer computes them.
struct EntryFields {
  uint16_t Kind = static_cast<uint16_t>(EntryKind::PTX);
  uint16_t Version = EntryHeaderVersion;
  /// For PTX the PTX ISA version (9.0); for ELF 1.8 with CUDA 13 (8 is the
  /// cubin's ELF ABI version); for LTO-IR 1.65.
  uint16_t MajorVersion = 0;
  uint16_t MinorVersion = 0;
  /// The SM number: 90 for sm_90, sm_90a and compute_90.
  uint32_t Arch = 0;
  /// See entry_flags. The compression bits say how the writer stores Payload.
  uint64_t Flags = entry_flags::Is64Bit | entry_flags::HostLinux;
  /// The u64 at header offset 0x30 (nonzero only on compressed LTO-IR).
  uint64_t Reserved = 0;
  /// Usually the source file name; empty when absent.
  std::string Identifier;
  /// The options region: ptxas options text for PTX, a binary record for
  /// cubins with entry_flags::BinaryOptions. std::nullopt when the header has
  /// no options pointer (cubins for sm_90 and older); PTX entries always have
  /// one, possibly empty.
  std::optional<std::string> Options;

  bool operator==(const EntryFields &O) const;
  bool operator!=(const EntryFields &O) const { return !(*this == O); }
};

/// One entry of a container.
struct FatbinEntry : EntryFields {
  /// The decompressed payload. For an uncompressed entry read from a file this
  /// is every stored byte including the alignment padding, because the header
  /// records no unpadded size; PTX text is NUL terminated within it. For an
  /// obfuscated entry (isObfuscated()) it is the stored bytes, undecoded.
  std::string Payload;

  /// Zero bytes the writer adds after the padded payload, counted in the
  /// padded size; a multiple of 8. Lets a rewritten container keep its old
  /// size (the CUDA runtime accepts padding there, but not zero bytes after
  /// the last entry of a container). The reader leaves it 0: padding it
  /// reads stays part of the stored payload.
  uint64_t ExtraPadding = 0;

  /// What the reader saw: the writer reuses these bytes while the fields and
  /// payload still equal the snapshot. Shared so that copying a FatbinFile
  /// does not copy the bytes.
  struct Source {
    uint64_t Offset = 0;       ///< Of the entry header, in the input.
    std::string Header;        ///< HeaderSize bytes.
    std::string StoredPayload; ///< PaddedSize bytes, as stored.
    uint64_t CompressedSize = 0;
    uint64_t UncompressedSize = 0;
    EntryFields Fields;  ///< Fields as read.
    std::string Payload; ///< Decompressed payload as read (compressed
                         ///< entries only; else see StoredPayload).
  };
  std::shared_ptr<const Source> Origin;

  EntryKind kind() const { return static_cast<EntryKind>(Kind); }
  bool isPTX() const { return Kind == static_cast<uint16_t>(EntryKind::PTX); }
  bool isELF() const { return Kind == static_cast<uint16_t>(EntryKind::ELF); }
  bool isLTOIR() const {
    return Kind == static_cast<uint16_t>(EntryKind::LTOIR);
  }
  Compression compression() const { return compressionFromFlags(Flags); }
  /// The payload cannot be decoded (entry_flags::Obfuscated); the writer can
  /// change the header of such an entry but not its payload or compression.
  bool isObfuscated() const { return Flags & entry_flags::Obfuscated; }
  void setCompression(Compression C) { Flags = flagsWithCompression(Flags, C); }
  /// e.g. "sm_90a" or "compute_90".
  std::string archName() const;
  /// True if the writer will copy this entry's bytes from Origin.
  bool isUnchanged() const;

  /// A PTX entry as nvcc makes it: NUL-terminated text, an empty options
  /// string, the version fields from \p PTXMajor and \p PTXMinor.
  static FatbinEntry makePTX(llvm::StringRef Text, uint32_t Arch,
                             uint16_t PTXMajor, uint16_t PTXMinor,
                             Compression C = Compression::Zstd,
                             uint64_t ExtraFlags = 0);
  /// A cubin entry as nvcc makes it for sm_90 and older: version 1.<ELF ABI
  /// version>, no options. \p ExtraFlags adds e.g. entry_flags::ArchA.
  static FatbinEntry makeCubin(llvm::StringRef ELF, uint32_t Arch,
                               Compression C = Compression::None,
                               uint64_t ExtraFlags = 0);
};

/// One container: header and entries.
struct FatbinContainer {
  uint16_t Version = FatbinVersion;
  /// Header bytes past the 16 known ones (a header size above 16).
  std::string HeaderExtra;
  /// Zero bytes between the end of the previous container and this one
  /// (ignored for the first container).
  uint64_t LeadingPadding = 0;
  std::vector<FatbinEntry> Entries;
  /// Offset of the container header in the input; 0 for new containers.
  uint64_t Offset = 0;
};

/// A whole fatbin blob (e.g. an `nvcc -fatbin` file or a `.nv_fatbin`
/// section): containers followed by optional trailing bytes.
struct FatbinFile {
  std::vector<FatbinContainer> Containers;
  /// Bytes after the last container: zeros, or anything with
  /// ReadOptions::AllowTrailingData.
  std::string Trailing;

  /// Entries of all containers, in order.
  size_t numEntries() const;
};

struct ReadOptions {
  /// Added to every offset in error messages and Source::Offset, e.g. the
  /// file offset of the ELF section holding the fatbin.
  uint64_t BaseOffset = 0;
  /// Larger uncompressed-size fields are rejected before allocating.
  uint64_t MaxUncompressedSize = uint64_t(1) << 30;
  /// Keep non-zero bytes after the last container instead of rejecting them.
  bool AllowTrailingData = false;
};

/// Parse and check \p Buf. Every size and offset is checked before use; the
/// first problem is returned as a FormatError. Zero bytes between containers
/// and after the last one are accepted and kept; zero bytes after the last
/// entry inside a container are rejected (the CUDA runtime hangs on them).
llvm::Expected<FatbinFile> readFatbin(llvm::MemoryBufferRef Buf,
                                      const ReadOptions &Opts = {});
llvm::Expected<FatbinFile> readFatbin(llvm::StringRef Bytes,
                                      const ReadOptions &Opts = {});

/// True if \p Bytes starts with the fatbin magic.
bool hasFatbinMagic(llvm::StringRef Bytes);

struct WriteOptions {
  /// zstd level for re-encoded zstd entries. nvcc 13's default mode matches
  /// level 5 byte for byte (libzstd 1.5.4).
  int ZstdLevel = 5;
  /// LZ4 acceleration for re-encoded LZ4 entries (1 = LZ4_compress_default).
  int LZ4Acceleration = 1;
};

/// Lay out \p F, appending to \p Out. Unchanged entries are copied. A changed
/// entry keeps its original header bytes if its identifier and options are
/// unchanged (sizes and numeric fields rewritten), else gets a fresh header
/// laid out as fatbinary does; its payload is re-encoded only if it or the
/// compression changed. Payloads are padded to 8 bytes. If
/// \p ContainerOffsets is given, it receives the offset of each container in
/// \p Out.
llvm::Error writeFatbin(const FatbinFile &F, llvm::SmallVectorImpl<char> &Out,
                        const WriteOptions &Opts = {},
                        std::vector<uint64_t> *ContainerOffsets = nullptr);
llvm::Error writeFatbin(const FatbinFile &F, llvm::raw_ostream &OS,
                        const WriteOptions &Opts = {});

} // namespace fatbin
} // namespace tally

#endif // TALLY_FATBIN_FATBIN_H
