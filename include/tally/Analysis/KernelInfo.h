//===- KernelInfo.h - what a kernel uses ------------------------*- C++ -*-===//
//
// The facts about a function that the transformations and their users ask
// about: parameters and their layout, special registers read, barriers of
// each form, returns and exits, calls, shared memory, performance
// directives. Each site carries the basic block it is in.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_ANALYSIS_KERNELINFO_H
#define TALLY_ANALYSIS_KERNELINFO_H

#include "tally/PTX/CFG.h"
#include "tally/PTX/IR.h"

#include "llvm/Support/raw_ostream.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tally {

/// Byte size of a PTX scalar type (`.b32` -> 4); 0 if unknown.
unsigned getTypeSize(llvm::StringRef Type);

struct ParamInfo {
  llvm::StringRef Name;
  llvm::StringRef Type;
  uint64_t Size = 0;
  unsigned Align = 0;
  uint64_t Offset = 0; ///< In the parameter buffer, after alignment.
};

/// The parameter buffer layout of \p F as ptxas lays it out (each
/// parameter at its alignment: its own `.align`, else its type's size);
/// \p Bytes receives the total.
std::vector<ParamInfo> getParamLayout(const ptx::Function &F, uint64_t &Bytes);

/// A `bar`/`barrier` instruction with an explicit thread count (named
/// barriers of warp subsets; `bar.arrive` always has one).
bool hasThreadCount(const ptx::Instruction &I);

/// A barrier every thread of the block takes part in: `bar.sync`,
/// `barrier.sync[.aligned]`, `bar.red`/`barrier.red` without a thread count
/// (not warp or cluster barriers, not `bar.arrive`).
bool isFullBlockBarrier(const ptx::Instruction &I);

/// The function a direct `call` names; empty for an indirect call.
llvm::StringRef getCallee(const ptx::Instruction &I);

enum class BarrierScope { Block, Warp, Cluster };

struct BarrierSite {
  const ptx::Instruction *I = nullptr;
  unsigned Block = 0;
  BarrierScope Scope = BarrierScope::Block;
  bool HasThreadCount = false;
};

struct Site {
  const ptx::Instruction *I = nullptr;
  unsigned Block = 0;
};

struct CallSite {
  const ptx::Instruction *I = nullptr;
  unsigned Block = 0;
  llvm::StringRef Callee; ///< Empty for an indirect call.
};

struct FunctionInfo {
  const ptx::Function *F = nullptr;
  std::vector<ParamInfo> Params;
  uint64_t ParamBytes = 0;
  /// `%ctaid.x` -> number of reads.
  std::map<std::string, unsigned> SpecialRegs;
  std::vector<BarrierSite> Barriers;
  std::vector<Site> Returns; ///< ret, exit, trap
  std::vector<CallSite> Calls;
  /// Module-level symbols this function references.
  std::vector<llvm::StringRef> Symbols;
  uint64_t LocalSharedBytes = 0; ///< .shared declared in the body
  unsigned NumBlocks = 0;
  unsigned NumInstructions = 0;
};

struct KernelInfo {
  FunctionInfo Own;
  /// Functions reachable through direct calls, in discovery order.
  std::vector<const FunctionInfo *> Callees;
  bool HasIndirectCalls = false;
  /// Static shared memory: the body's own plus module-level `.shared`
  /// variables the kernel or its callees use.
  uint64_t StaticSharedBytes = 0;
  /// Uses an `.extern .shared` array (dynamic shared memory).
  bool UsesDynamicShared = false;
};

/// Per-module analysis: one FunctionInfo per defined function and one
/// KernelInfo per kernel.
class ModuleInfo {
public:
  explicit ModuleInfo(ptx::Module &M);

  const FunctionInfo *getFunction(llvm::StringRef Name) const;
  const std::vector<KernelInfo> &kernels() const { return Kernels; }
  void print(llvm::raw_ostream &OS) const;

private:
  std::map<std::string, std::unique_ptr<FunctionInfo>, std::less<>> Funcs;
  std::vector<KernelInfo> Kernels;
};

void printKernelInfo(const KernelInfo &K, llvm::raw_ostream &OS);

} // namespace tally

#endif
