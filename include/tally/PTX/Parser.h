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

} // namespace tally::ptx

#endif
