//===- Listing.h - Describe fatbin contents ----------------------*- C++
//-*-===//
//
// What `cuobjdump -lelf -lptx` shows, and more: per entry its kind, target,
// versions, sizes, compression, identifier, options and the kernels it
// defines. Kernel names of cubins come from their ELF symbol tables; kernel
// names of PTX come from a caller-supplied callback (the PTX parser lives in
// another library).
//
//===----------------------------------------------------------------------===//

#ifndef TALLY_FATBIN_LISTING_H
#define TALLY_FATBIN_LISTING_H

#include "tally/Fatbin/Fatbin.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tally {
namespace fatbin {

/// The functions a cubin defines, each list in symbol table order.
struct CubinFunctions {
  /// FUNC symbols marked STO_CUDA_ENTRY (st_other 0x10): __global__ kernels.
  std::vector<std::string> Kernels;
  /// Other defined FUNC symbols (non-inlined __device__ functions).
  std::vector<std::string> DeviceFunctions;
};

/// Read the symbol table of the cubin \p ELF (a 64-bit little-endian ELF).
llvm::Expected<CubinFunctions> readCubinFunctions(llvm::StringRef ELF);

/// The text of a PTX entry: its payload up to the first NUL. If the text has
/// no `.version` directive and the entry header has a PTX version, a
/// `.version X.Y` line is put first. (nvcc 13 keeps `.version` in the
/// payload; the header copy exists for older or third-party writers.)
llvm::Expected<std::string> getPTXText(const FatbinEntry &E);

/// Returns the kernel names defined by a PTX module.
using PTXKernelNamesFn =
    std::function<std::vector<std::string>(llvm::StringRef PTXText)>;

/// One entry as the listing shows it.
struct EntryInfo {
  size_t ContainerIndex = 0;
  size_t IndexInContainer = 0;
  size_t Index = 0; ///< Across all containers.
  /// Offset of the entry header in the input (std::nullopt for new entries).
  std::optional<uint64_t> Offset;
  uint16_t Kind = 0;
  std::string KindName; ///< "PTX", "ELF", "LTO-IR".
  std::string Arch;     ///< "sm_90a", "compute_90".
  uint16_t MajorVersion = 0, MinorVersion = 0;
  uint64_t Flags = 0;
  Compression Comp = Compression::None;
  uint64_t PayloadSize = 0; ///< Decompressed (stored, if Obfuscated).
  /// The payload could not be decoded (entry_flags::Obfuscated);
  /// UncompressedSize is then the header's claim.
  bool Obfuscated = false;
  std::optional<uint64_t> UncompressedSize;
  /// Stored (compressed) size and padded size: known for unchanged entries.
  std::optional<uint64_t> StoredSize, PaddedSize, HeaderSize;
  std::string Identifier;
  std::optional<std::string> Options;
  bool OptionsAreBinary = false;
  std::vector<std::string> Kernels;
  std::vector<std::string> DeviceFunctions;
};

struct ListingOptions {
  /// Called with the text of each PTX entry. If empty, PTX entries list no
  /// kernels.
  PTXKernelNamesFn PTXKernelNames;
  /// Also list non-kernel functions of cubins.
  bool ShowDeviceFunctions = true;
};

/// Describe every entry of \p F. Fails if a cubin's ELF cannot be read.
llvm::Expected<std::vector<EntryInfo>>
describeFatbin(const FatbinFile &F, const ListingOptions &Opts = {});

/// Print the description, one block per entry.
llvm::Error printFatbinListing(const FatbinFile &F, llvm::raw_ostream &OS,
                               const ListingOptions &Opts = {});

/// Print already-gathered descriptions.
void printEntryInfos(llvm::ArrayRef<EntryInfo> Infos, llvm::raw_ostream &OS);

} // namespace fatbin
} // namespace tally

#endif // TALLY_FATBIN_LISTING_H
