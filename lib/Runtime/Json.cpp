//===- Json.cpp - JSON strings for the runtime's reports ------------------===//

#include "tally/Runtime/Json.h"

#include <cstdio>

namespace tally::rt {
namespace {

/// The length of the valid UTF-8 sequence at \p S[I] (0: not one).
size_t utf8Length(const std::string &S, size_t I) {
  const unsigned char C = S[I];
  size_t N = C >= 0xf0 && C <= 0xf4 ? 4 : C >= 0xe0 ? 3 : C >= 0xc2 && C <= 0xdf ? 2 : 0;
  if (N == 0 || I + N > S.size())
    return 0;
  for (size_t K = 1; K < N; ++K)
    if ((static_cast<unsigned char>(S[I + K]) & 0xc0) != 0x80)
      return 0;
  return N; // (overlong three- and four-byte forms pass; harmless here)
}

} // namespace

std::string jsonString(const std::string &S) {
  std::string Out = "\"";
  for (size_t I = 0; I < S.size(); ++I) {
    const unsigned char C = S[I];
    if (C == '"' || C == '\\') {
      Out += {'\\', char(C)};
    } else if (C < 0x20) {
      char B[8];
      std::snprintf(B, sizeof B, "\\u%04x", C);
      Out += B;
    } else if (C < 0x80) {
      Out += char(C);
    } else if (size_t N = utf8Length(S, I)) {
      Out.append(S, I, N);
      I += N - 1;
    } else {
      Out += '?';
    }
  }
  return Out + "\"";
}

} // namespace tally::rt
