//===- Lexer.h - PTX lexer --------------------------------------*- C++ -*-===//
#ifndef TALLY_PTX_LEXER_H
#define TALLY_PTX_LEXER_H

#include "tally/PTX/Token.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/SourceMgr.h"

#include <string>
#include <vector>

namespace tally::ptx {

/// Splits the buffer \p BufferID of \p SM into tokens. Comments are dropped
/// (they only set the layout bits of the next token). The result always ends
/// with an Eof token. Malformed input (an unterminated string or comment, a
/// byte that starts no token) gives an error located in the source.
llvm::Expected<std::vector<Token>> lex(llvm::SourceMgr &SM, unsigned BufferID);

/// A diagnostic that already names its location: `file:line:col: error: ...`
/// followed by the source line and a caret. Tools print it as it is.
class SourceError : public llvm::ErrorInfo<SourceError> {
public:
  static char ID;
  explicit SourceError(std::string Text) : Text(std::move(Text)) {}
  void log(llvm::raw_ostream &OS) const override { OS << Text; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  std::string Text;
};

/// Renders a located diagnostic the way compilers do: file:line:col, the
/// message, the source line and a caret. Used by the lexer and the parser.
llvm::Error makeSourceError(const llvm::SourceMgr &SM, llvm::SMLoc Loc,
                            const llvm::Twine &Msg);

} // namespace tally::ptx

#endif
