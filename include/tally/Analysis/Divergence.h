//===- Divergence.h - block-uniform control flow ----------------*- C++ -*-===//
//
// Which definitions and branches of a kernel can differ between the threads
// of a block (per definition: PTX registers are often written several
// times, so a reaching-definitions analysis decides which definitions a use
// sees). Sources of divergence: %tid, %laneid, %lanemask_*, clocks,
// atomics, warp collectives, loads other than kernel parameters and
// constants, call results; divergence flows through data (any operand) and
// control (a definition inside the region a divergent branch controls, up
// to the branch's post-dominator). Conservative: when in doubt, divergent.
//
// The transformations use it to prove that no thread can leave a kernel
// while other threads of its block still have a full-block barrier ahead.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_ANALYSIS_DIVERGENCE_H
#define TALLY_ANALYSIS_DIVERGENCE_H

#include "tally/PTX/CFG.h"
#include "tally/PTX/IR.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringSet.h"

#include <vector>

namespace tally {

class DivergenceInfo {
public:
  DivergenceInfo(ptx::Function &F, const ptx::CFG &G);

  /// A conditional branch (or `@p ret`, or `brx.idx`) whose condition
  /// differs between threads.
  bool isDivergentBranch(const ptx::Instruction &I) const;
  /// The block lies where a divergent branch decides whether it runs.
  bool inDivergentRegion(unsigned Block) const { return DivRegion.test(Block); }
  /// Blocks reachable from \p From (itself included).
  llvm::BitVector reachableFrom(unsigned From) const;
  /// Blocks controlled by the branch ending block \p B: reachable from its
  /// successors before reaching a block that post-dominates it.
  llvm::BitVector influenceRegion(unsigned B) const;

  /// For each `bar`/`barrier` instruction in block order (the order of
  /// the function's statements): whether it must go through the
  /// convergence block because threads may reach it in a block where other
  /// threads have already returned, or it runs in divergent control flow.
  /// Others (and barriers that are not full-block) may stay as they are.
  /// \p Why says why, for the last barrier that needs it.
  std::vector<bool> barriersNeedingConvergence(llvm::StringRef &Why) const;
  /// The same judgement for every instruction \p IsSite accepts (in
  /// statement order), for example calls of functions that contain
  /// barriers; sites \p IsFullBlock rejects never need it.
  std::vector<bool>
  sitesNeedingConvergence(llvm::function_ref<bool(const ptx::Instruction &)> IsSite,
                          llvm::function_ref<bool(const ptx::Instruction &)> IsFullBlock,
                          llvm::StringRef &Why) const;
  /// Every path from the entry to a return passes \p Block exactly once: it
  /// post-dominates the entry and lies on no cycle.
  bool runsOnceOnEveryPath(unsigned Block) const;

private:
  /// Blocks that may run after some threads of the block have returned.
  llvm::BitVector blocksAfterReturn() const;

  const ptx::CFG &G;
  /// Instructions whose guard (or brx.idx index) differs between threads.
  llvm::DenseMap<const ptx::Instruction *, bool> GuardDivergent;
  llvm::BitVector DivRegion;
  std::vector<llvm::BitVector> PostDom;
};

/// Registers an instruction writes (its first operand, unless the opcode
/// writes no register there: stores, branches, barriers, fences, ...).
void getDefs(const ptx::Instruction &I,
             llvm::SmallVectorImpl<llvm::StringRef> &Defs);

} // namespace tally

#endif
