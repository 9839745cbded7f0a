//===- RuntimeProfileFuzzer.cpp - fuzz the runtime's profile cache reader -===//
//
// Parses arbitrary bytes with parseProfileText() (from a buffer of exactly
// their size). On a refused header the output must be empty and the reason
// given; otherwise every record must keep the promises of ProfileCache.h,
// since the runtime's policy divides by counts and compares times without
// checking again, and what was read must survive a write and a second read
// unchanged (save() writes it back). A broken promise aborts so the fuzzer
// keeps the input.
//
// Random bytes almost never carry a matching checksum, so each input is
// parsed twice: as it is, and with every line's checksum field recomputed,
// which lets the fuzzer reach the checks of the fields behind it.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/ProfileCache.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

using namespace tally::rt;
using namespace tally::rt::profile_limits;

static void check(bool Cond) {
  if (!Cond)
    std::abort();
}

static void checkRecords(const ProfileMap &M) {
  size_t Records = 0;
  for (const auto &[K, Entries] : M) {
    check(!K.Kernel.empty() && K.Kernel.size() <= MaxKernelBytes);
    check(K.Kernel.find_first_of(std::string("\t\n\r\0 ", 5)) ==
          std::string::npos);
    for (int I = 0; I < 3; ++I)
      check(K.Grid[I] >= 1 && K.Block[I] >= 1);
    check(uint64_t(K.Block[0]) * K.Block[1] * K.Block[2] <= MaxBlockThreads);
    check(K.Shared <= MaxSharedBytes);
    check(isValidProfileKey(K));
    check(!Entries.empty());
    for (size_t I = 0; I < Entries.size(); ++I) {
      const ProfileEntry &E = Entries[I];
      check(isValidCandidate(E.Candidate));
      check(E.Count >= 1 && E.Count <= MaxCount);
      check(E.BestNs <= E.TotalNs && E.BestNs <= MaxNs);
      check(E.BestNs * E.Count <= E.TotalNs);
      check(E.TotalNs <= uint64_t(E.Count) * MaxNs);
      // Sorted, each candidate once: lookup() callers rely on it.
      check(I == 0 || Entries[I - 1].Candidate < E.Candidate);
    }
    Records += Entries.size();
  }
  check(Records <= MaxRecords);
}

static bool sameRecords(const ProfileMap &A, const ProfileMap &B) {
  if (A.size() != B.size())
    return false;
  for (auto IA = A.begin(), IB = B.begin(); IA != A.end(); ++IA, ++IB) {
    if (!(IA->first == IB->first) || IA->second.size() != IB->second.size())
      return false;
    for (size_t I = 0; I < IA->second.size(); ++I) {
      const ProfileEntry &X = IA->second[I], &Y = IB->second[I];
      if (X.Candidate != Y.Candidate || X.Count != Y.Count ||
          X.BestNs != Y.BestNs || X.TotalNs != Y.TotalNs)
        return false;
    }
  }
  return true;
}

/// \p Text with the last 16 bytes of every line after a tab replaced by
/// the FNV-1a 64 checksum of what precedes that tab.
static std::string fixChecksums(std::string Text) {
  size_t Start = 0;
  while (Start < Text.size()) {
    size_t End = Text.find('\n', Start);
    if (End == std::string::npos)
      End = Text.size();
    if (End - Start >= 17 && Text[End - 17] == '\t') {
      uint64_t H = 0xcbf29ce484222325ull;
      for (size_t I = Start; I < End - 17; ++I)
        H = (H ^ static_cast<unsigned char>(Text[I])) * 0x100000001b3ull;
      for (int I = 0; I < 16; ++I)
        Text[End - 16 + I] = "0123456789abcdef"[(H >> (60 - 4 * I)) & 0xf];
    }
    Start = End + 1;
  }
  return Text;
}

static void parseAndCheck(const char *Data, size_t Size) {
  std::unique_ptr<char[]> Buf(new char[Size ? Size : 1]);
  if (Size)
    std::memcpy(Buf.get(), Data, Size);
  ProfileMap M;
  M[ProfileKey()].push_back({"stale", 1, 1, 1}); // the parser must clear it
  size_t Dropped = 12345;
  std::string Why = "stale";
  if (!parseProfileText(std::string_view(Buf.get(), Size), M, Dropped, Why)) {
    check(M.empty() && Dropped == 0 && !Why.empty() && Why != "stale");
    return;
  }
  // A reason exactly when something was dropped, naming its line.
  check(Dropped == 0 ? Why.empty() : Why.rfind("line ", 0) == 0);
  checkRecords(M);

  std::string Text = formatProfileText(M);
  ProfileMap Again;
  size_t Dropped2 = 0;
  std::string Why2;
  check(parseProfileText(Text, Again, Dropped2, Why2));
  check(Dropped2 == 0 && Why2.empty());
  check(sameRecords(M, Again));
  check(formatProfileText(Again) == Text);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  const char *Chars = reinterpret_cast<const char *>(Data);
  parseAndCheck(Chars, Size);
  std::string Fixed = fixChecksums(std::string(Chars, Size));
  parseAndCheck(Fixed.data(), Fixed.size());
  return 0;
}
