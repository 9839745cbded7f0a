//===- Variants.h - the sliced and PTB forms of a kernel --------*- C++ -*-===//
//
// Slice: the variant takes the original grid and a block offset; it is
// launched as a one-dimensional grid of `count` blocks and block i runs the
// original block with linear index offset + i. Every %ctaid/%nctaid read
// sees the original launch:
//
//     mov.u32 %r1, %ctaid.x;
//   becomes
//     ld.param.u32 %__tly_s0, [__tly_slice_offset];
//     mov.u32 %__tly_s1, %ctaid.x;
//     add.u32 %__tly_s0, %__tly_s0, %__tly_s1;
//     ld.param.u32 %__tly_s1, [__tly_grid_x];
//     rem.u32 %__tly_ctaid_x, %__tly_s0, %__tly_s1;
//     mov.u32 %r1, %__tly_ctaid_x;
//
// PTB: a worker loop around the body. Thread 0 checks the preemption flag,
// claims the next chunk of logical blocks (the `__tly_chunk` parameter, at
// least 1) from a global counter, and publishes each block's index and
// decoded coordinates in shared memory in turn; a barrier; every thread
// reads them (%ctaid reads become shared loads); the body runs with the
// unified synchronisation rewrite; all threads meet at the end of the body;
// loop. A worker leaving adds the number of blocks it finished to the done
// count in global memory.
//
// Control block (16 bytes of global memory, zeroed before the first launch
// of a grid): [0] next logical block to claim, [4] preemption flag (nonzero:
// leave before claiming), [8] finished logical blocks (complete when it
// equals the grid's block count), [12] reserved.
//
// Unified synchronisation: `ret`/`exit` jump to a convergence block at the
// end of the body. Barriers in block-uniform control flow that no thread
// can reach after another returned stay as they are; the others are routed
// through the convergence block, whose single barrier (in a function every
// round calls) counts the live threads, so a warp split between returned
// and live threads arrives at one instruction (docs/transformations.md):
//
//     @%p1 ret;            @%p1 bra $__tly_conv;
//     bar.sync 0;     =>   (site 1) bra $__tly_conv;  $__tly_resume1:
//     ...                  ...
//                        $__tly_conv:
//                          <count live threads: call __tly_conv_barrier0>
//                          none live: leave; returned: wait for the next
//                          round; live: jump back behind their barrier
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
  unsigned ZeroedRegisters = 0; ///< PTB: registers read before written, reset per block
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
