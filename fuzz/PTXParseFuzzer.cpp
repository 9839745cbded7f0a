//===- PTXParseFuzzer.cpp - fuzz the PTX lexer, parser and printer --------===//
//
// Parses arbitrary bytes; whatever parses is printed, and the printed text
// must parse again and print identically (the printer's fixed point).
//
//===----------------------------------------------------------------------===//

#include "tally/PTX/Parser.h"
#include "tally/PTX/Printer.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>

using namespace tally;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  llvm::StringRef Text(reinterpret_cast<const char *>(Data), Size);
  auto M = ptx::parseModule(Text, "fuzz.ptx");
  if (!M) {
    llvm::consumeError(M.takeError());
    return 0;
  }
  std::string Once;
  llvm::raw_string_ostream OS1(Once);
  ptx::printModule(**M, OS1);
  auto M2 = ptx::parseModule(Once, "fuzz-printed.ptx");
  if (!M2) {
    llvm::errs() << "printed module does not parse:\n";
    llvm::logAllUnhandledErrors(M2.takeError(), llvm::errs());
    llvm::errs() << Once;
    std::abort();
  }
  std::string Twice;
  llvm::raw_string_ostream OS2(Twice);
  ptx::printModule(**M2, OS2);
  if (Once != Twice) {
    llvm::errs() << "printer is not a fixed point\n";
    std::abort();
  }
  return 0;
}
