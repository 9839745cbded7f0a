//===- CFG.h - basic blocks and control flow of a PTX function --*- C++ -*-===//
//
// Basic blocks over a function body as written: a block starts at a label
// or after a terminator and ends at a branch, `ret`, `exit`, `trap` or the
// next label. Nested `{}` scopes do not split blocks, but they scope the
// labels declared in them: a branch goes to the innermost visible label of
// its name. Targets of `brx.idx` come from the `.branchtargets` list the
// instruction names.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_PTX_CFG_H
#define TALLY_PTX_CFG_H

#include "tally/PTX/IR.h"

#include "llvm/ADT/DenseMap.h"

#include <vector>

namespace tally::ptx {

struct BasicBlock {
  unsigned Index = 0;
  /// The label that starts the block (empty for the entry block or a block
  /// after a terminator without a label).
  llvm::StringRef Label;
  std::vector<Instruction *> Insts;
  std::vector<unsigned> Succs;
  std::vector<unsigned> Preds;
  /// Control leaves the function after this block (ret/exit/trap).
  bool IsExit = false;
};

class CFG {
public:
  /// Builds the CFG of a function with a body.
  explicit CFG(Function &F);

  const std::vector<BasicBlock> &blocks() const { return Blocks; }
  /// The block holding \p I.
  const BasicBlock *getBlock(const Instruction *I) const;
  /// The block of the first label named \p Label in source order (labels
  /// in nested scopes may repeat a name).
  const BasicBlock *getBlockForLabel(llvm::StringRef Label) const;
  /// Instructions that jump to a label this function does not define (or an
  /// indirect branch whose targets are unknown).
  unsigned getNumUnresolvedBranches() const { return Unresolved; }

private:
  std::vector<BasicBlock> Blocks;
  llvm::DenseMap<const Instruction *, unsigned> BlockOf;
  llvm::DenseMap<llvm::StringRef, unsigned> LabelBlock;
  unsigned Unresolved = 0;
};

/// True for instructions that end a basic block.
bool isTerminator(const Instruction &I);
/// `ret`, `exit`, `trap`.
bool isReturnLike(const Instruction &I);

} // namespace tally::ptx

#endif
