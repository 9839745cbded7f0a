//===- Token.h - PTX tokens -------------------------------------*- C++ -*-===//
//
// A PTX token is a slice of a source buffer (or of a string saved in the
// module) with a kind and two layout bits. The layout bits let the printer
// keep tokens apart exactly where the source did, so constructs the parser
// keeps generically (unknown directives, operand expressions) re-print as
// valid PTX without the printer having to understand them.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_PTX_TOKEN_H
#define TALLY_PTX_TOKEN_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"

#include <cstdint>

namespace tally::ptx {

enum class TokKind : uint8_t {
  Eof,
  Ident,   ///< foo, %r1, $L__BB0_1, _Z3fooPf
  DotWord, ///< .reg, .u32, .shared::cluster, .2d
  Integer, ///< 12, 0x1F, 017, 0b101, 12U
  Float,   ///< 0f3F800000, 0d3FF0000000000000, 1.5, 1e-3
  String,  ///< "nounroll" (with the quotes)
  Punct,   ///< one of , ; : { } [ ] ( ) < > + - * / % ! @ | & ^ ~ = ?
};

struct Token {
  llvm::StringRef Text;
  TokKind Kind = TokKind::Eof;
  /// Whitespace or a comment separated this token from the previous one.
  bool SpaceBefore = false;
  /// A line break separated this token from the previous one.
  bool NewlineBefore = false;

  Token() = default;
  Token(TokKind K, llvm::StringRef T, bool Space = false, bool NL = false)
      : Text(T), Kind(K), SpaceBefore(Space), NewlineBefore(NL) {}

  bool is(TokKind K) const { return Kind == K; }
  bool isPunct(char C) const {
    return Kind == TokKind::Punct && Text.size() == 1 && Text[0] == C;
  }
  bool isDot(llvm::StringRef W) const {
    return Kind == TokKind::DotWord && Text == W;
  }
  bool isIdent(llvm::StringRef W) const {
    return Kind == TokKind::Ident && Text == W;
  }
  /// Location in the source buffer; invalid for tokens made by passes.
  llvm::SMLoc getLoc() const { return llvm::SMLoc::getFromPointer(Text.data()); }
};

} // namespace tally::ptx

#endif
