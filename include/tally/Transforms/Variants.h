//===- Variants.h - the sliced and PTB forms of a kernel --------*- C++ -*-===//
//
// Slice: the variant takes the original grid and a block offset; it is
// launched as a one-dimensional grid of `count` blocks and block i runs the
// original block with linear index offset + i. Every %ctaid/%nctaid read
// sees the original launch:
//
//     mov.u32 %r1, %ctaid.x;
//   becomes
//     ld.param.u32 %__tly_t0, [__tly_slice_offset];
//     mov.u32 %__tly_t1, %ctaid.x;
//     add.u32 %__tly_t0, %__tly_t0, %__tly_t1;
//     ld.param.u32 %__tly_t1, [__tly_grid_x];
//     rem.u32 %__tly_ctaid_x, %__tly_t0, %__tly_t1;
//     mov.u32 %r1, %__tly_ctaid_x;
//
// PTB: a worker loop around the body. Thread 0 checks the preemption flag,
// claims the next chunk of logical blocks (the `__tly_chunk` parameter, at
// least 1) from a global counter, and publishes each block's index and
// decoded coordinates in shared memory in turn; a barrier; every thread
// reads them (%ctaid reads become shared loads); the body runs with the
// unified synchronisation rewrite; the last barrier of the body tells the
// leader that the block is done; loop. A worker leaving adds the number of
// blocks it finished to the done count in global memory.
//
// Control block (16 bytes of global memory, zeroed before the first launch
// of a grid): [0] next logical block to claim, [4] preemption flag (nonzero:
// leave before claiming), [8] finished logical blocks (complete when it
// equals the grid's block count), [12] reserved.
//
// Unified synchronisation: `ret`/`exit` jump to a rendezvous loop whose
// threads keep taking part in the block's barriers, and every full-block
// barrier of the body becomes an instance of one hardware barrier that
// counts the live threads, so threads that left and threads that wait never
// mix and all threads leave the body together:
//
//     @%p1 ret;                 @%p1 bra $__tly_rendezvous;
//     bar.sync 0;          =>   barrier.red.popc.u32 %__tly_n, 15, !%__tly_dead;
//     ...                       ...
//                             $__tly_rendezvous:
//                               barrier.red.popc.u32 %__tly_n, 15, %__tly_dead;
//                               setp.ne.u32 %__tly_more, %__tly_n, 0;
//                               @%__tly_more bra $__tly_rendezvous;
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_TRANSFORMS_VARIANTS_H
#define TALLY_TRANSFORMS_VARIANTS_H

#include "tally/Metadata/Metadata.h"
#include "tally/PTX/IR.h"
#include "tally/Transforms/Legality.h"

#include "llvm/Support/Error.h"

namespace tally {

/// Counters of what a rewrite did (for -stats).
struct RewriteStats {
  unsigned Returns = 0;       ///< ret/exit sent to the rendezvous
  unsigned Barriers = 0;      ///< full-block barriers folded
  unsigned Reductions = 0;    ///< bar.red forms rewritten
  unsigned KeptBarriers = 0;  ///< counted barriers left in place
  unsigned SregReads = 0;     ///< %ctaid/%nctaid reads replaced
};

/// Name of a kernel's variant: `<kernel>__tally_slice`, `<kernel>__tally_ptb`.
std::string getVariantName(llvm::StringRef Kernel, llvm::StringRef Kind);

/// Adds the sliced variant of kernel \p K to \p M after it.
llvm::Expected<VariantRecord> addSliceVariant(ptx::Module &M,
                                              const ptx::Function &K,
                                              const Legality &L,
                                              RewriteStats &Stats);

/// Adds the PTB variant of kernel \p K to \p M after it.
llvm::Expected<VariantRecord> addPtbVariant(ptx::Module &M,
                                            const ptx::Function &K,
                                            const Legality &L,
                                            RewriteStats &Stats);

/// Applies the unified synchronisation rewrite to kernel \p F in place: the
/// kernel computes the same thing, with every return and full-block barrier
/// going through the rendezvous. Used by the PTB variant, and alone by the
/// `unify-sync` pass for testing.
llvm::Error unifySync(ptx::Module &M, ptx::Function &F, const Legality &L,
                      RewriteStats &Stats);

} // namespace tally

#endif
