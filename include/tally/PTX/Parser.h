//===- Parser.h - PTX parser ------------------------------------*- C++ -*-===//
#ifndef TALLY_PTX_PARSER_H
#define TALLY_PTX_PARSER_H

#include "tally/PTX/IR.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <memory>

namespace tally::ptx {

/// Parses a whole PTX module. The module takes ownership of \p Buffer (its
/// identifier names the file in diagnostics). Errors are located
/// (`file:line:col: error: ...` with the source line and a caret); the
/// parser stops at the first one.
llvm::Expected<std::unique_ptr<Module>>
parseModule(std::unique_ptr<llvm::MemoryBuffer> Buffer);

/// Convenience for tests: parses \p Text, naming it \p Name in diagnostics.
llvm::Expected<std::unique_ptr<Module>> parseModule(llvm::StringRef Text,
                                                    llvm::StringRef Name);

/// Parses statements (instructions, labels, declarations, scopes) written as
/// PTX text, for passes that build code. The text is saved in \p M, so the
/// statements may be inserted into any function of \p M.
llvm::Expected<StmtList> parseStatements(Module &M, llvm::StringRef Text);

/// Parses one parameter declaration such as `.param .u64 foo`.
llvm::Expected<VarDecl> parseParamDecl(Module &M, llvm::StringRef Text);

} // namespace tally::ptx

#endif
