//===- Legality.h - which preemptible forms a kernel allows -----*- C++ -*-===//
//
// Decides per kernel whether the sliced and the PTB forms are safe and, if
// not, says why in words a user understands ("grid-wide synchronisation",
// "thread-block clusters (reads %cluster_ctarank)", "barrier inside
// non-inlined function foo", ...). The transformations consult it and emit
// only what it allows.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_TRANSFORMS_LEGALITY_H
#define TALLY_TRANSFORMS_LEGALITY_H

#include "tally/Analysis/KernelInfo.h"

#include "llvm/ADT/STLExtras.h"

#include <string>
#include <vector>

namespace tally {

/// The largest parameter buffer a variant may have. CUDA allows 4 KiB on
/// every architecture (32 KiB on Volta and later with CUDA 12.1); we keep the
/// portable bound so a variant launches wherever the original does.
constexpr uint64_t MaxParamBytes = 4096;

/// Prefix of every name the transformations add (registers, labels,
/// parameters, shared variables). A module that already uses it is left
/// alone.
constexpr const char *ReservedPrefix = "__tly";

struct Legality {
  bool SliceOK = true;
  std::string SliceReason;
  bool PtbOK = true;
  std::string PtbReason;
  /// PTB: the hardware barrier the variant uses for its own barriers and for
  /// the kernel's full-block barriers (folded onto it).
  unsigned BarrierId = 0;
  /// The kernel uses bar.red/barrier.red without thread count (shown by
  /// print<legality>; the rewrite decides per routed barrier).
  bool HasReductionBarriers = false;
  /// PTB: for each `bar`/`barrier` instruction of the kernel, in statement
  /// order, whether it must be routed through the convergence block (see
  /// DivergenceInfo::barriersNeedingConvergence). The others stay as they
  /// are: routing costs registers, since every routed barrier joins one
  /// block.
  std::vector<bool> ConvergeBarrier;
  bool anyConvergedBarrier() const {
    return llvm::is_contained(ConvergeBarrier, true);
  }
  /// Reads %nctaid: a grid-stride or persistent loop whose per-block work
  /// depends on the grid size.
  bool ReadsGridSize = false;
  std::vector<std::string> Notes;
};

/// Position of the barrier-id operand of a block barrier instruction.
unsigned getBarrierIdOperand(const ptx::Instruction &I);

/// The forms kernel \p K of module \p M allows. The PTB form's own code
/// (barrier, bar.warp.sync, red.release.gpu) needs PTX ISA 6.0 and
/// sm_70: in a module of an older `.version` or `.target` (cuDNN hands the
/// driver one of ISA 5.0 for sm_50 at run time) PTB is refused.
Legality checkLegality(const KernelInfo &K, const ptx::Module &M);

} // namespace tally

#endif
