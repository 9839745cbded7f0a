//===- Lexer.cpp - PTX lexer ----------------------------------------------===//
//
// One pass over the buffer into a token vector. The grammar follows the PTX
// ISA's lexical rules: identifiers may start with a letter, `_`, `$` or `%`;
// directives and modifiers are `.`-words that may hold `::` (`.shared::cta`)
// and start with a digit (`.2d`); numbers come in decimal, hex, octal and
// binary with an optional `U`, and floats as `0f`/`0d` hex images or decimal.
//
//===----------------------------------------------------------------------===//

#include "tally/PTX/Lexer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace tally::ptx {

namespace {



bool isIdentStart(char C) { return isAlpha(C) || C == '_' || C == '$' || C == '%'; }
bool isIdentChar(char C) { return isAlnum(C) || C == '_' || C == '$'; }

} // namespace

char SourceError::ID;

Error makeSourceError(const SourceMgr &SM, SMLoc Loc, const Twine &Msg) {
  std::string Text;
  raw_string_ostream OS(Text);
  SM.PrintMessage(OS, Loc, SourceMgr::DK_Error, Msg);
  // PrintMessage ends with a newline; the tool adds its own.
  while (!Text.empty() && Text.back() == '\n')
    Text.pop_back();
  return make_error<SourceError>(std::move(Text));
}

Expected<std::vector<Token>> lex(SourceMgr &SM, unsigned BufferID) {
  StringRef Buf = SM.getMemoryBuffer(BufferID)->getBuffer();
  const char *P = Buf.begin(), *End = Buf.end();
  std::vector<Token> Toks;
  Toks.reserve(Buf.size() / 5);
  bool Space = true, Newline = true;

  auto Fail = [&](const char *At, const Twine &Msg) -> Error {
    return makeSourceError(SM, SMLoc::getFromPointer(At), Msg);
  };

  while (P < End) {
    char C = *P;
    // Whitespace and comments.
    if (C == '\n') {
      Space = Newline = true;
      ++P;
      continue;
    }
    if (C == ' ' || C == '\t' || C == '\r' || C == '\f' || C == '\v') {
      Space = true;
      ++P;
      continue;
    }
    if (C == '/' && P + 1 < End && P[1] == '/') {
      while (P < End && *P != '\n')
        ++P;
      Space = true;
      continue;
    }
    if (C == '/' && P + 1 < End && P[1] == '*') {
      const char *Start = P;
      P += 2;
      while (P + 1 < End && !(P[0] == '*' && P[1] == '/')) {
        if (*P == '\n')
          Newline = true;
        ++P;
      }
      if (P + 1 >= End)
        return Fail(Start, "unterminated block comment");
      P += 2;
      Space = true;
      continue;
    }

    const char *Start = P;
    TokKind Kind;
    if (C == '.' && P + 1 < End && (isAlnum(P[1]) || P[1] == '_')) {
      ++P;
      while (P < End) {
        if (isIdentChar(*P))
          ++P;
        else if (*P == ':' && P + 2 < End && P[1] == ':' && isIdentChar(P[2]))
          P += 2;
        else
          break;
      }
      Kind = TokKind::DotWord;
    } else if (isIdentStart(C) && !(C == '%' && (P + 1 >= End || !isIdentChar(P[1])))) {
      ++P;
      while (P < End && isIdentChar(*P))
        ++P;
      Kind = TokKind::Ident;
    } else if (isDigit(C)) {
      Kind = TokKind::Integer;
      if (C == '0' && P + 1 < End && (P[1] == 'f' || P[1] == 'F' || P[1] == 'd' ||
                                      P[1] == 'D')) {
        // Hex image of a float: 0f + 8 digits or 0d + 16 digits.
        unsigned Want = (P[1] == 'f' || P[1] == 'F') ? 8 : 16;
        P += 2;
        const char *Digits = P;
        while (P < End && isHexDigit(*P))
          ++P;
        if (unsigned(P - Digits) != Want)
          return Fail(Start, "float literal '" + StringRef(Start, P - Start) +
                                 "' needs exactly " + Twine(Want) + " hex digits");
        Kind = TokKind::Float;
      } else if (C == '0' && P + 1 < End && (P[1] == 'x' || P[1] == 'X')) {
        P += 2;
        const char *Digits = P;
        while (P < End && isHexDigit(*P))
          ++P;
        if (P == Digits)
          return Fail(Start, "hex literal without digits");
      } else if (C == '0' && P + 1 < End && (P[1] == 'b' || P[1] == 'B') &&
                 P + 2 < End && (P[2] == '0' || P[2] == '1')) {
        P += 2;
        while (P < End && (*P == '0' || *P == '1'))
          ++P;
      } else {
        while (P < End && isDigit(*P))
          ++P;
        if (P < End && *P == '.' && P + 1 < End && isDigit(P[1])) {
          ++P;
          while (P < End && isDigit(*P))
            ++P;
          Kind = TokKind::Float;
        }
        if (P < End && (*P == 'e' || *P == 'E')) {
          const char *Q = P + 1;
          if (Q < End && (*Q == '+' || *Q == '-'))
            ++Q;
          if (Q < End && isDigit(*Q)) {
            while (Q < End && isDigit(*Q))
              ++Q;
            P = Q;
            Kind = TokKind::Float;
          }
        }
      }
      if (Kind == TokKind::Integer && P < End && (*P == 'U' || *P == 'u'))
        ++P;
      if (P < End && (isIdentChar(*P) || *P == '.'))
        return Fail(Start, "malformed number '" +
                               StringRef(Start, P + 1 - Start) + "'");
    } else if (C == '"') {
      ++P;
      while (P < End && *P != '"' && *P != '\n') {
        if (*P == '\\' && P + 1 < End)
          ++P;
        ++P;
      }
      if (P >= End || *P != '"')
        return Fail(Start, "unterminated string literal");
      ++P;
      Kind = TokKind::String;
    } else if (StringRef(",;:{}[]()<>+-*/%!@|&^~=?").contains(C)) {
      ++P;
      Kind = TokKind::Punct;
    } else {
      std::string Shown = isPrint(C) ? std::string(1, C)
                                     : ("\\x" + utohexstr((unsigned char)C, true, 2));
      return Fail(Start, "unexpected character '" + Shown + "'");
    }
    Toks.emplace_back(Kind, StringRef(Start, P - Start), Space, Newline);
    Space = Newline = false;
  }
  Toks.emplace_back(TokKind::Eof, StringRef(End, 0), true, true);
  return std::move(Toks);
}

} // namespace tally::ptx
