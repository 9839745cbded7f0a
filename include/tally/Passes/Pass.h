//===- Pass.h - passes and pipelines ----------------------------*- C++ -*-===//
//
// A pass runs over a whole PTX module. Pipelines are text: a comma-separated
// list of registered pass names (`unify-sync,ptb`, `print<kernel-info>`).
// Every pass is registered once, in lib/Passes/PassRegistry.def.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_PASSES_PASS_H
#define TALLY_PASSES_PASS_H

#include "tally/Metadata/Metadata.h"
#include "tally/PTX/IR.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

namespace tally {

/// What passes share while a pipeline runs.
struct PassContext {
  explicit PassContext(llvm::raw_ostream &Out) : Out(Out) {}
  /// Where printer passes write.
  llvm::raw_ostream &Out;
  /// Named counters (`-stats`): "<pass>.<what>" -> count.
  llvm::StringMap<uint64_t> Stats;
  void count(llvm::StringRef Key, uint64_t N = 1) { Stats[Key] += N; }
  /// What the transformations did to each kernel (`--metadata`).
  Metadata Meta;
};

/// The pipeline tally-opt runs when --passes is not given.
constexpr const char *DefaultPipeline = "slice,ptb";

class ModulePass {
public:
  virtual ~ModulePass();
  virtual llvm::StringRef getName() const = 0;
  virtual llvm::Error run(ptx::Module &M, PassContext &Ctx) = 0;
  /// Printer passes only print; a pipeline of printers writes no module by
  /// default.
  virtual bool isPrinter() const { return false; }
};

struct PassDescription {
  llvm::StringRef Name;
  llvm::StringRef Help;
};

/// All registered passes, in registry order.
llvm::ArrayRef<PassDescription> getRegisteredPasses();

/// Parses a pipeline description. An empty text gives an empty pipeline.
llvm::Expected<std::vector<std::unique_ptr<ModulePass>>>
parsePipeline(llvm::StringRef Text);

/// True for a non-empty pipeline of printer passes only (it writes no
/// module unless asked to).
bool isPrintOnly(llvm::ArrayRef<std::unique_ptr<ModulePass>> Passes);

/// Runs the passes in order; stops at the first error.
llvm::Error runPipeline(llvm::ArrayRef<std::unique_ptr<ModulePass>> Passes,
                        ptx::Module &M, PassContext &Ctx);

} // namespace tally

#endif
