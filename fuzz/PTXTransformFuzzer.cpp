//===- PTXTransformFuzzer.cpp - fuzz the analyses and the rewrites --------===//
//
// Whatever parses goes through the analyses' printers and the default
// transformations (slice, PTB with the unified synchronisation rewrite),
// without ptxas. They may refuse a kernel or report an error, but must not
// crash, and the module they produce must print to PTX that parses again.
//
//===----------------------------------------------------------------------===//

#include "tally/PTX/Parser.h"
#include "tally/PTX/Printer.h"
#include "tally/Passes/Pass.h"

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
  auto Pipeline =
      parsePipeline("print<kernel-info>,print<divergence>,print<legality>,slice,ptb,verify");
  if (!Pipeline) {
    llvm::logAllUnhandledErrors(Pipeline.takeError(), llvm::errs());
    std::abort();
  }
  std::string Printed;
  llvm::raw_string_ostream Sink(Printed);
  PassContext Ctx(Sink);
  if (llvm::Error E = runPipeline(*Pipeline, **M, Ctx)) {
    llvm::consumeError(std::move(E));
    return 0;
  }
  (void)Ctx.Meta.toYAML();
  std::string Out;
  llvm::raw_string_ostream OS(Out);
  ptx::printModule(**M, OS);
  auto Again = ptx::parseModule(Out, "fuzz-transformed.ptx");
  if (!Again) {
    llvm::errs() << "transformed module does not parse:\n";
    llvm::logAllUnhandledErrors(Again.takeError(), llvm::errs());
    llvm::errs() << Out;
    std::abort();
  }
  return 0;
}
