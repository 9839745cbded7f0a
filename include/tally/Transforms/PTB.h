//===- PTB.h - the persistent-thread-block form of a kernel -----*- C++ -*-===//
//
// A worker loop around the body. Thread 0 checks the preemption flag,
// claims the next chunk of logical blocks (the `__tly_chunk` parameter, at
// least 1) from a global counter, and publishes each block's index and
// decoded coordinates in shared memory in turn; a barrier; every thread
// reads them (%ctaid reads become shared loads); the body runs with the
// unified synchronisation rewrite (UnifySync.h); all threads meet at the end
// of the body; loop. A worker leaving adds the number of blocks it finished
// to the done count in global memory.
//
// Control block (16 bytes of global memory, zeroed before the first launch
// of a grid): [0] next logical block to claim, [4] preemption flag (nonzero:
// leave before claiming), [8] finished logical blocks (complete when it
// equals the grid's block count), [12] reserved.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_TRANSFORMS_PTB_H
#define TALLY_TRANSFORMS_PTB_H

#include "tally/Metadata/Metadata.h"
#include "tally/PTX/IR.h"
#include "tally/Transforms/Legality.h"
#include "tally/Transforms/VariantUtils.h"

#include "llvm/Support/Error.h"

namespace tally {

/// Adds the PTB variant of kernel \p K to \p M after it: a clone named
/// `<kernel>__tally_ptb` with the parameters `__tly_ctrl` (the control
/// block), `__tly_grid_{x,y,z}` and `__tly_chunk` appended:
///
///     .entry k(...)              .entry k__tally_ptb(..., __tly_ctrl, ...)
///     {                          {
///       mov.u32 %r1, %ctaid.x;     $__tly_claim:  <thread 0 claims a block,
///       ...                          publishes it in __tly_slot>
///       ret;                       barrier.sync 0;
///     }                  =>        <index -1: bra $__tly_exit>
///                                  ld.shared.u32 %__tly_ctaid_x,
///                                                [__tly_slot+4];
///                                  mov.u32 %r1, %__tly_ctaid_x;
///                                  ...            (unified synchronisation)
///                                  $__tly_done: bra $__tly_claim;
///                                  $__tly_exit:   <add finished blocks>
///                                }
llvm::Expected<VariantRecord> addPtbVariant(ptx::Module &M,
                                            const ptx::Function &K,
                                            const Legality &L,
                                            RewriteStats &Stats);

} // namespace tally

#endif
