//===- PTXTestUtil.h - helpers for the PTX unit tests ----------*- C++ -*-===//
#ifndef TALLY_TEST_UNIT_PTX_PTXTESTUTIL_H
#define TALLY_TEST_UNIT_PTX_PTXTESTUTIL_H

#include "tally/PTX/IR.h"
#include "tally/PTX/Parser.h"

#include "llvm/Support/Casting.h"
#include "llvm/Support/Error.h"

#include "gtest/gtest.h"

#include <memory>
#include <string>
#include <vector>

namespace tally::ptx::test {

/// The module header every inline input starts with.
inline const char *const Header = ".version 8.7\n.target sm_90a\n"
                                  ".address_size 64\n";

/// Parses \p Text (a header is prepended when \p WithHeader); fails the test
/// with the diagnostic if it does not parse.
inline std::unique_ptr<Module> parse(const std::string &Text,
                                     bool WithHeader = true) {
  auto M = parseModule(WithHeader ? Header + Text : Text, "test.ptx");
  if (!M) {
    ADD_FAILURE() << llvm::toString(M.takeError());
    return nullptr;
  }
  return std::move(*M);
}

/// The diagnostic of a parse that must fail ("" if it parsed).
inline std::string parseError(const std::string &Text) {
  auto M = parseModule(Text, "test.ptx");
  if (M)
    return "";
  return llvm::toString(M.takeError());
}

/// The instructions of \p F in source order, nested scopes included.
inline std::vector<Instruction *> instructions(Function &F) {
  std::vector<Instruction *> Is;
  walkStmts(F.Body->Body, [&](Stmt &S) {
    if (auto *I = llvm::dyn_cast<InstStmt>(&S))
      Is.push_back(&I->I);
  });
  return Is;
}

/// Parses a one-kernel module whose body is \p Body and returns its
/// instructions; \p M keeps the module alive.
inline std::vector<Instruction *> parseBody(const std::string &Body,
                                            std::unique_ptr<Module> &M) {
  M = parse(".visible .entry k()\n{\n" + Body + "\n}\n");
  if (!M)
    return {};
  return instructions(*M->getFunction("k"));
}

} // namespace tally::ptx::test

#endif
