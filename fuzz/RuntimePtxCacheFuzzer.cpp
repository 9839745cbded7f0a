//===- RuntimePtxCacheFuzzer.cpp - fuzz the run-time PTX cache and scanner -===//
//
// The runtime reads cache entries from disk (PtxLoader.h) and scans the PTX
// applications hand to the driver. Arbitrary bytes go to:
//
//  * decodePtxCacheEntry(), as they are and with the source, key and body
//    lines rewritten to match (so the fuzzer gets past the checks into the
//    body): an accepted entry must be exactly what encodePtxCacheEntry()
//    writes for its body, so a corrupt file can never load other code;
//  * ptxImage(), ptxTarget() and ptxEntryNames() on a NUL-terminated copy:
//    no read past the terminator (ASan), names that are identifiers.
//
// A broken promise aborts so the fuzzer keeps the input.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/PtxLoader.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace tally::rt;

static void check(bool Cond) {
  if (!Cond)
    std::abort();
}

static void decodeChecked(std::string_view File, const PtxHash &H, uint64_t Bytes,
                          std::string_view Key) {
  std::string Why;
  auto E = decodePtxCacheEntry(File, H, Bytes, Key, Why);
  if (!E) {
    check(!Why.empty());
    return;
  }
  check(encodePtxCacheEntry(H, Bytes, Key, *E) == File);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  std::string In(reinterpret_cast<const char *>(Data), Size);
  PtxHash H{0x0123456789abcdefull, 0xfedcba9876543210ull};
  const std::string Key = "arch=sm_90 tally=0.1.0 helper=1-2";
  decodeChecked(In, H, 1234, Key);

  // The input as the body of an entry whose header lines are right, with
  // its first byte choosing the status and a truncation or extension.
  PtxCacheEntry E;
  E.Ok = Size && (Data[0] & 1);
  E.Body = In;
  std::string Good = encodePtxCacheEntry(H, 1234, Key, E);
  decodeChecked(Good, H, 1234, Key);
  if (Size) {
    size_t Cut = Data[0] % (Good.size() + 1);
    decodeChecked(std::string_view(Good).substr(0, Cut), H, 1234, Key);
    decodeChecked(Good + In.substr(0, Data[0] % 8), H, 1234, Key);
  }
  std::string Why;
  auto Back = decodePtxCacheEntry(Good, H, 1234, Key, Why);
  check(Back && Back->Ok == E.Ok && Back->Body == In);

  // The scanners, over a NUL-terminated copy.
  std::string Text = In; // c_str() adds the terminator
  if (auto P = ptxImage(Text.c_str())) {
    check(P->size() == std::strlen(Text.c_str()));
    std::string T = ptxTarget(*P);
    check(T.find_first_of(" \t\n") == std::string::npos);
    for (const std::string &N : ptxEntryNames(*P))
      check(!N.empty() && N.find_first_of(" \t\n(),;") == std::string::npos);
  }
  (void)hashPtx(In);
  return 0;
}
