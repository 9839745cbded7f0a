//===- Compression.h - Fatbin payload compression ----------------*- C++
//-*-===//
//
// The two payload encodings nvcc 13 uses: one LZ4 raw block (no frame, the
// sizes live in the entry header) and one zstd frame.
//
//===----------------------------------------------------------------------===//

#ifndef TALLY_FATBIN_COMPRESSION_H
#define TALLY_FATBIN_COMPRESSION_H

#include "tally/Fatbin/FatbinFormat.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace tally {
namespace fatbin {

/// Decode \p In, which must decode to exactly \p UncompressedSize bytes.
/// Errors carry no offset; readFatbin() adds it.
llvm::Expected<std::string> decompress(Compression C, llvm::StringRef In,
                                       uint64_t UncompressedSize);

/// Encode \p In. \p Level is the zstd level or the LZ4 acceleration.
llvm::Expected<std::string> compress(Compression C, llvm::StringRef In,
                                     int Level);

/// ZSTD_versionNumber() of the linked libzstd, e.g. 10504 for 1.5.4.
unsigned zstdVersionNumber();

} // namespace fatbin
} // namespace tally

#endif // TALLY_FATBIN_COMPRESSION_H
