//===- Compression.cpp - Fatbin payload compression -----------------------===//

#include "tally/Fatbin/Compression.h"

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FormatVariadic.h"

#include <lz4.h>
#include <zstd.h>

#include <limits>

using namespace llvm;

namespace tally {
namespace fatbin {

static Error compressionError(const Twine &Msg) {
  return createStringError(Msg);
}

Expected<std::string> decompress(Compression C, StringRef In,
                                 uint64_t UncompressedSize) {
  switch (C) {
  case Compression::None:
    if (In.size() != UncompressedSize)
      return compressionError(formatv("stored size {0} differs from size {1}",
                                      In.size(), UncompressedSize));
    return In.str();
  case Compression::LZ4: {
    // LZ4's API takes int sizes.
    constexpr uint64_t IntMax = std::numeric_limits<int>::max();
    if (In.size() > IntMax || UncompressedSize > IntMax)
      return compressionError("LZ4 block too large");
    std::string Out(UncompressedSize, '\0');
    int N = LZ4_decompress_safe(In.data(), Out.data(), int(In.size()),
                                int(UncompressedSize));
    if (N < 0)
      return compressionError("corrupt LZ4 block");
    if (uint64_t(N) != UncompressedSize)
      return compressionError(
          formatv("LZ4 block decompressed to {0} bytes, header says {1}", N,
                  UncompressedSize));
    return std::move(Out);
  }
  case Compression::Zstd: {
    unsigned long long FrameSize =
        ZSTD_getFrameContentSize(In.data(), In.size());
    if (FrameSize == ZSTD_CONTENTSIZE_ERROR)
      return compressionError("corrupt zstd frame: bad frame header");
    if (FrameSize != ZSTD_CONTENTSIZE_UNKNOWN && FrameSize != UncompressedSize)
      return compressionError(
          formatv("zstd frame content size {0} differs from header size {1}",
                  FrameSize, UncompressedSize));
    std::string Out(UncompressedSize, '\0');
    size_t N = ZSTD_decompress(Out.data(), Out.size(), In.data(), In.size());
    if (ZSTD_isError(N))
      return compressionError(Twine("corrupt zstd frame: ") +
                              ZSTD_getErrorName(N));
    if (N != UncompressedSize)
      return compressionError(
          formatv("zstd frame decompressed to {0} bytes, header says {1}", N,
                  UncompressedSize));
    return std::move(Out);
  }
  }
  llvm_unreachable("bad compression");
}

Expected<std::string> compress(Compression C, StringRef In, int Level) {
  switch (C) {
  case Compression::None:
    return In.str();
  case Compression::LZ4: {
    if (In.size() > uint64_t(LZ4_MAX_INPUT_SIZE))
      return compressionError(
          formatv("payload of {0} bytes is too large for LZ4", In.size()));
    std::string Out(LZ4_compressBound(int(In.size())), '\0');
    int N = LZ4_compress_fast(In.data(), Out.data(), int(In.size()),
                              int(Out.size()), Level < 1 ? 1 : Level);
    if (N <= 0)
      return compressionError("LZ4 compression failed");
    Out.resize(N);
    return std::move(Out);
  }
  case Compression::Zstd: {
    std::string Out(ZSTD_compressBound(In.size()), '\0');
    size_t N =
        ZSTD_compress(Out.data(), Out.size(), In.data(), In.size(), Level);
    if (ZSTD_isError(N))
      return compressionError(Twine("zstd compression failed: ") +
                              ZSTD_getErrorName(N));
    Out.resize(N);
    return std::move(Out);
  }
  }
  llvm_unreachable("bad compression");
}

unsigned zstdVersionNumber() { return ZSTD_versionNumber(); }

} // namespace fatbin
} // namespace tally
