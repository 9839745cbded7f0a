//===- FatbinFormat.h - CUDA fatbin on-disk layout ---------------*- C++
//-*-===//
//
// Constants describing the CUDA fatbin container format as emitted by nvcc and
// fatbinary 13.0. docs/fatbin-format.md describes every field and how each was
// verified; this header only names the numbers so that the reader, the writer
// and the tests agree on them.
//
//===----------------------------------------------------------------------===//

#ifndef TALLY_FATBIN_FATBINFORMAT_H
#define TALLY_FATBIN_FATBINFORMAT_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace tally {
namespace fatbin {

/// First four bytes (little endian) of every fatbin container.
constexpr uint32_t FatbinMagic = 0xBA55ED50;
/// The only container version nvcc has emitted so far.
constexpr uint16_t FatbinVersion = 1;
/// Size of the container header: magic, version, header size, payload size.
constexpr uint64_t ContainerHeaderSize = 16;
/// Size of the fixed part of an entry header; strings follow it.
constexpr uint64_t EntryHeaderSize = 64;
/// Entry headers, payloads and containers are padded to this alignment.
constexpr uint64_t FatbinAlignment = 8;
/// Value of the entry header's version field in every entry nvcc 13 writes.
constexpr uint16_t EntryHeaderVersion = 0x0101;

/// Magic of the host-side `__fatBinC_Wrapper_t` records in `.nvFatBinSegment`.
constexpr uint32_t WrapperMagic = 0x466243B1;
/// Size of one wrapper record: magic, version, fatbin pointer, data pointer.
constexpr uint64_t WrapperSize = 24;

/// Byte offsets of the container header fields.
namespace container_offset {
constexpr uint64_t Magic = 0x00;       // u32
constexpr uint64_t Version = 0x04;     // u16
constexpr uint64_t HeaderSize = 0x06;  // u16
constexpr uint64_t PayloadSize = 0x08; // u64
} // namespace container_offset

/// Byte offsets of the fixed entry header fields (all little endian).
namespace entry_offset {
constexpr uint64_t Kind = 0x00;             // u16
constexpr uint64_t Version = 0x02;          // u16, 0x0101
constexpr uint64_t HeaderSize = 0x04;       // u32, includes the strings
constexpr uint64_t PaddedSize = 0x08;       // u64, stored payload + padding
constexpr uint64_t CompressedSize = 0x10;   // u32, 0 when not compressed
constexpr uint64_t OptionsOffset = 0x14;    // u32, 0 when there is no options
constexpr uint64_t MinorVersion = 0x18;     // u16
constexpr uint64_t MajorVersion = 0x1a;     // u16
constexpr uint64_t Arch = 0x1c;             // u32, e.g. 90 for sm_90
constexpr uint64_t IdentifierOffset = 0x20; // u32, 0 when absent
constexpr uint64_t IdentifierSize = 0x24;   // u32, without the NUL
constexpr uint64_t Flags = 0x28;            // u64
constexpr uint64_t Reserved = 0x30;         // u64, see docs/fatbin-format.md
constexpr uint64_t UncompressedSize = 0x38; // u64, 0 when not compressed
} // namespace entry_offset

/// The kind field of an entry header.
enum class EntryKind : uint16_t {
  PTX = 1,
  ELF = 2,   ///< A cubin (SASS in an ELF file).
  LTOIR = 8, ///< NVVM IR for link-time optimization (code=lto_XX).
};

/// Bits of the entry header's flags field. Bits not named here are kept as
/// they are by the reader and the writer.
namespace entry_flags {
constexpr uint64_t Is64Bit = 0x1;           ///< 64-bit device code.
constexpr uint64_t Debug = 0x2;             ///< Compiled with -G.
constexpr uint64_t HostLinux = 0x10;        ///< Host is Linux.
constexpr uint64_t CompressedLZ4 = 0x2000;  ///< Payload is one LZ4 raw block.
constexpr uint64_t CompressedZstd = 0x8000; ///< Payload is one zstd frame.
/// The stored payload is not a plain LZ4 block or zstd frame: seen on
/// compressed LTO-IR entries, whose bytes then look encrypted (no zstd magic,
/// high entropy; the u64 at header offset 0x30 holds a value that also sits
/// at byte 40 of the plain NVVM IR). Such payloads are kept opaque.
constexpr uint64_t Obfuscated = 0x10000;
constexpr uint64_t ArchA = 0x100000; ///< Architecture-specific: sm_90a.
constexpr uint64_t ArchF = 0x200000; ///< Family-specific: sm_100f.
/// Seen on cubins for sm_100 and later: the options region holds a binary
/// record instead of ptxas options text.
constexpr uint64_t BinaryOptions = 0x1000000;
constexpr uint64_t CompressionMask = CompressedLZ4 | CompressedZstd;
} // namespace entry_flags

/// How an entry's payload is stored.
enum class Compression { None, LZ4, Zstd };

/// The compression named by \p Flags. Both compression bits set is an error
/// the reader reports; this function then answers Zstd.
inline Compression compressionFromFlags(uint64_t Flags) {
  if (Flags & entry_flags::CompressedZstd)
    return Compression::Zstd;
  if (Flags & entry_flags::CompressedLZ4)
    return Compression::LZ4;
  return Compression::None;
}

/// \p Flags with the compression bits replaced by those for \p C.
inline uint64_t flagsWithCompression(uint64_t Flags, Compression C) {
  Flags &= ~entry_flags::CompressionMask;
  if (C == Compression::LZ4)
    Flags |= entry_flags::CompressedLZ4;
  else if (C == Compression::Zstd)
    Flags |= entry_flags::CompressedZstd;
  return Flags;
}

/// "none", "lz4" or "zstd".
llvm::StringRef compressionName(Compression C);

/// "PTX", "ELF", "LTO-IR", or "kind N" for kinds this library does not know.
std::string entryKindName(uint16_t Kind);

/// The target name of an entry: "sm_90a" for an ELF entry, "compute_90a" for
/// PTX and "lto_90a" for LTO-IR, with the suffix taken from the flags.
std::string archName(uint16_t Kind, uint32_t Arch, uint64_t Flags);

/// The flag bits in \p Flags spelled out, e.g. "64bit|linux|zstd|0x400".
std::string flagsToString(uint64_t Flags);

} // namespace fatbin
} // namespace tally

#endif // TALLY_FATBIN_FATBINFORMAT_H
