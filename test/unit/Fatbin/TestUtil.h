//===- TestUtil.h - Helpers for the fatbin unit tests ------------*- C++
//-*-===//

#ifndef TALLY_TEST_UNIT_FATBIN_TESTUTIL_H
#define TALLY_TEST_UNIT_FATBIN_TESTUTIL_H

#include "tally/Fatbin/Fatbin.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/Error.h"

#include "gtest/gtest.h"

#include <string>

namespace tally {
namespace fatbin {
namespace test {

/// What an llvm::Error said, taken apart.
struct ErrorParts {
  bool IsFormatError = false;
  uint64_t Offset = 0;
  std::string Message; ///< Without the offset for FormatErrors.
  std::string Full;    ///< As the user sees it.
  int Count = 0;       ///< Number of errors in the payload.
};

inline ErrorParts takeError(llvm::Error E) {
  ErrorParts P;
  llvm::handleAllErrors(
      std::move(E),
      [&](const FormatError &FE) {
        P.IsFormatError = true;
        P.Offset = FE.getOffset();
        P.Message = FE.getMessage().str();
        P.Full = FE.message();
        ++P.Count;
      },
      [&](const llvm::ErrorInfoBase &B) {
        P.Message = P.Full = B.message();
        ++P.Count;
      });
  return P;
}

template <typename T> ErrorParts takeError(llvm::Expected<T> &E) {
  return takeError(E.takeError());
}

inline std::string toStr(llvm::Error E) { return llvm::toString(std::move(E)); }

/// Lay out \p F; fails the test on error.
inline std::string writeOrFail(const FatbinFile &F,
                               const WriteOptions &Opts = {}) {
  llvm::SmallVector<char, 0> Out;
  if (llvm::Error E = writeFatbin(F, Out, Opts)) {
    ADD_FAILURE() << "writeFatbin failed: " << toStr(std::move(E));
    return std::string();
  }
  return std::string(Out.data(), Out.size());
}

inline void put16(std::string &S, uint64_t Off, uint16_t V) {
  llvm::support::endian::write16le(&S[Off], V);
}
inline void put32(std::string &S, uint64_t Off, uint32_t V) {
  llvm::support::endian::write32le(&S[Off], V);
}
inline void put64(std::string &S, uint64_t Off, uint64_t V) {
  llvm::support::endian::write64le(&S[Off], V);
}
inline uint32_t get32(llvm::StringRef S, uint64_t Off) {
  return llvm::support::endian::read32le(S.data() + Off);
}
inline uint64_t get64(llvm::StringRef S, uint64_t Off) {
  return llvm::support::endian::read64le(S.data() + Off);
}

} // namespace test
} // namespace fatbin
} // namespace tally

/// Evaluate an Expected; on error fail the test and return.
#define ASSERT_EXPECTED(Var, Expr)                                             \
  auto Var##OrErr = (Expr);                                                    \
  ASSERT_TRUE(static_cast<bool>(Var##OrErr))                                   \
      << ::llvm::toString(Var##OrErr.takeError());                             \
  auto &Var = *Var##OrErr

#define ASSERT_NO_ERROR(Expr)                                                  \
  do {                                                                         \
    if (::llvm::Error E_ = (Expr))                                             \
      FAIL() << ::llvm::toString(std::move(E_));                               \
  } while (false)

#endif // TALLY_TEST_UNIT_FATBIN_TESTUTIL_H
