//===- LexerTest.cpp - token kinds, layout bits and lexical errors --------===//

#include "tally/PTX/Lexer.h"

#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"

#include <string>
#include <vector>

using namespace llvm;
using namespace tally::ptx;

namespace {

struct Lexed {
  SourceMgr SM;
  std::vector<Token> Toks;
  std::string Error;
};

std::unique_ptr<Lexed> lexText(StringRef Text) {
  auto L = std::make_unique<Lexed>();
  unsigned ID = L->SM.AddNewSourceBuffer(
      MemoryBuffer::getMemBufferCopy(Text, "lex.ptx"), SMLoc());
  auto Toks = lex(L->SM, ID);
  if (Toks)
    L->Toks = std::move(*Toks);
  else
    L->Error = toString(Toks.takeError());
  return L;
}

/// The kind of the only token of \p Text (besides Eof).
TokKind kindOf(StringRef Text) {
  auto L = lexText(Text);
  EXPECT_EQ(L->Error, "") << Text.str();
  EXPECT_EQ(L->Toks.size(), 2u) << Text.str();
  if (L->Toks.size() != 2)
    return TokKind::Eof;
  EXPECT_EQ(L->Toks[0].Text, Text);
  return L->Toks[0].Kind;
}

TEST(LexerTest, Identifiers) {
  for (StringRef S : {"mov", "%r1", "%tid", "$L__BB0_1", "_Z3fooPf", "_",
                      "func_retval0", "%p", "$str$1"})
    EXPECT_EQ(kindOf(S), TokKind::Ident) << S.str();
}

TEST(LexerTest, DotWords) {
  for (StringRef S : {".reg", ".u32", ".2d", ".shared::cluster",
                      ".mbarrier::complete_tx::bytes", ".L2::cache_hint", ".v4",
                      ".b8", ".debug_info", "._x"})
    EXPECT_EQ(kindOf(S), TokKind::DotWord) << S.str();
}

TEST(LexerTest, Integers) {
  for (StringRef S : {"0", "42", "0x1F", "0X1f", "017", "0b101", "0B1", "12U",
                      "0xFFFFFFFFU", "4611686293305294848"})
    EXPECT_EQ(kindOf(S), TokKind::Integer) << S.str();
}

TEST(LexerTest, Floats) {
  for (StringRef S :
       {"0f3F800000", "0F3f800000", "0d3FF0000000000000", "0D3ff0000000000000",
        "1.5", "1e-3", "2.5E+2", "10e3", "8.7"})
    EXPECT_EQ(kindOf(S), TokKind::Float) << S.str();
}

TEST(LexerTest, StringsAndPunctuation) {
  EXPECT_EQ(kindOf("\"nounroll\""), TokKind::String);
  EXPECT_EQ(kindOf("\"a \\\" quote\""), TokKind::String);
  for (StringRef S :
       {",", ";", ":", "{", "}", "[", "]", "(", ")", "<", ">", "+",
        "-", "*", "/", "!", "@", "|", "&", "^", "~", "=", "?", "%"})
    EXPECT_EQ(kindOf(S), TokKind::Punct) << S.str();
}

TEST(LexerTest, SplitsOperatorsFromOperands) {
  auto L = lexText("[%rd1+-8] %p1|%p2 !%p3 -1 %tid.x");
  ASSERT_EQ(L->Error, "");
  std::vector<std::string> Texts;
  for (const Token &T : L->Toks)
    Texts.push_back(T.Text.str());
  std::vector<std::string> Want = {"[",   "%rd1", "+",   "-", "8",   "]",
                                   "%p1", "|",    "%p2", "!", "%p3", "-",
                                   "1",   "%tid", ".x",  ""};
  EXPECT_EQ(Texts, Want);
  // A register's component is a dot word glued to it.
  EXPECT_TRUE(L->Toks[13].is(TokKind::Ident));
  EXPECT_TRUE(L->Toks[14].is(TokKind::DotWord));
  EXPECT_FALSE(L->Toks[14].SpaceBefore);
}

TEST(LexerTest, OpcodeModifiersAreSeparateDotWords) {
  auto L = lexText("cp.async.bulk.shared::cluster.global");
  ASSERT_EQ(L->Error, "");
  ASSERT_EQ(L->Toks.size(), 6u);
  EXPECT_EQ(L->Toks[0].Text, "cp");
  EXPECT_EQ(L->Toks[3].Text, ".shared::cluster");
  for (size_t I = 1; I < 5; ++I) {
    EXPECT_TRUE(L->Toks[I].is(TokKind::DotWord));
    EXPECT_FALSE(L->Toks[I].SpaceBefore);
  }
  // A lone `::` is not part of a dot word.
  auto M = lexText(".a::");
  ASSERT_EQ(M->Error, "");
  EXPECT_EQ(M->Toks[0].Text, ".a");
  EXPECT_TRUE(M->Toks[1].isPunct(':'));
}

TEST(LexerTest, LayoutBits) {
  auto L = lexText("a b\n  c/* x */d// y\ne/*\n*/f,g");
  ASSERT_EQ(L->Error, "");
  ASSERT_EQ(L->Toks.size(), 9u);
  // The first token starts a line.
  EXPECT_TRUE(L->Toks[0].SpaceBefore);
  EXPECT_TRUE(L->Toks[0].NewlineBefore);
  auto Bits = [&](size_t I) {
    return std::make_pair(L->Toks[I].SpaceBefore, L->Toks[I].NewlineBefore);
  };
  EXPECT_EQ(L->Toks[1].Text, "b");
  EXPECT_EQ(Bits(1), std::make_pair(true, false));
  EXPECT_EQ(L->Toks[2].Text, "c");
  EXPECT_EQ(Bits(2), std::make_pair(true, true));
  // A block comment counts as a space; one spanning lines as a line break.
  EXPECT_EQ(L->Toks[3].Text, "d");
  EXPECT_EQ(Bits(3), std::make_pair(true, false));
  EXPECT_EQ(L->Toks[4].Text, "e");
  EXPECT_EQ(Bits(4), std::make_pair(true, true));
  EXPECT_EQ(L->Toks[5].Text, "f");
  EXPECT_EQ(Bits(5), std::make_pair(true, true));
  EXPECT_EQ(L->Toks[6].Text, ",");
  EXPECT_EQ(Bits(6), std::make_pair(false, false));
  EXPECT_EQ(L->Toks[7].Text, "g");
  EXPECT_EQ(Bits(7), std::make_pair(false, false));
  EXPECT_TRUE(L->Toks[8].is(TokKind::Eof));
}

TEST(LexerTest, EmptyAndCommentOnlyInputsGiveEof) {
  for (StringRef S : {"", "   \n", "// only a comment", "/* block */"}) {
    auto L = lexText(S);
    EXPECT_EQ(L->Error, "");
    ASSERT_EQ(L->Toks.size(), 1u);
    EXPECT_TRUE(L->Toks[0].is(TokKind::Eof));
  }
}

TEST(LexerTest, TokensPointIntoTheBuffer) {
  auto L = lexText("mov.u32 %r1, 1;");
  ASSERT_EQ(L->Error, "");
  auto [Line, Col] = L->SM.getLineAndColumn(L->Toks[2].getLoc());
  EXPECT_EQ(Line, 1u);
  EXPECT_EQ(Col, 9u);
}

TEST(LexerTest, Errors) {
  auto Err = [](StringRef Text) { return lexText(Text)->Error; };
  EXPECT_EQ(Err("a \"open\n"),
            "lex.ptx:1:3: error: unterminated string literal\n"
            "a \"open\n"
            "  ^");
  EXPECT_NE(Err("x /* open")
                .find("lex.ptx:1:3: error: unterminated block "
                      "comment"),
            std::string::npos);
  EXPECT_NE(Err("mov #").find("1:5: error: unexpected character '#'"),
            std::string::npos);
  EXPECT_NE(Err("\x01").find("unexpected character '\\x01'"),
            std::string::npos);
  EXPECT_NE(Err("0f3F80").find("float literal '0f3F80' needs exactly 8 hex "
                               "digits"),
            std::string::npos);
  EXPECT_NE(Err("0d3FF0000000000000FF").find("needs exactly 16 hex digits"),
            std::string::npos);
  EXPECT_NE(Err("0x").find("hex literal without digits"), std::string::npos);
  EXPECT_NE(Err("12ab").find("malformed number '12a'"), std::string::npos);
}

} // namespace
