//===- FatbinFuzzer.cpp - libFuzzer target for the fatbin reader ---------===//
//
// Feeds the input to readFatbin() and, if it starts with the ELF magic, to
// readHostFatbins(). Whatever the reader accepts must list without crashing
// and write back byte for byte; a difference aborts so the fuzzer keeps it.
//
//===----------------------------------------------------------------------===//

#include "tally/Fatbin/Fatbin.h"
#include "tally/Fatbin/HostObject.h"
#include "tally/Fatbin/Listing.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

using namespace llvm;
using namespace tally::fatbin;

static void checkFatbin(const FatbinFile &F, StringRef Expected) {
  SmallVector<char, 0> Out;
  if (Error E = writeFatbin(F, Out)) {
    consumeError(std::move(E));
    std::abort(); // The reader accepted something the writer cannot write.
  }
  if (!Expected.empty() && StringRef(Out.data(), Out.size()) != Expected)
    std::abort(); // Unchanged round trip is not byte-identical.
  std::string Listing;
  raw_string_ostream OS(Listing);
  // Entries with unreadable cubins make the listing fail; that is fine.
  consumeError(printFatbinListing(F, OS));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  StringRef Bytes(reinterpret_cast<const char *>(Data), Size);
  ReadOptions Opts;
  // Keep allocations small so the fuzzer explores instead of swapping.
  Opts.MaxUncompressedSize = 1 << 20;

  if (hasELFMagic(Bytes)) {
    // LLVM's ELF reader expects its buffer aligned like a MemoryBuffer.
    std::unique_ptr<MemoryBuffer> Copy =
        MemoryBuffer::getMemBufferCopy(Bytes, "fuzz");
    Expected<HostFatbins> H = readHostFatbins(Copy->getMemBufferRef(), Opts);
    if (!H) {
      consumeError(H.takeError());
      return 0;
    }
    for (const FatbinSection &S : H->Sections)
      checkFatbin(S.Fatbin, Copy->getBuffer().substr(S.FileOffset, S.Size));
    return 0;
  }

  Expected<FatbinFile> F = readFatbin(Bytes, Opts);
  if (!F) {
    consumeError(F.takeError());
    return 0;
  }
  checkFatbin(*F, Bytes);
  return 0;
}
