//===- UnifySync.h - one rendezvous for returns and barriers ----*- C++ -*-===//
//
// The unified synchronisation rewrite, the part of the PTB variant that lets
// a thread that finished its logical block wait for the others at a barrier
// instead of leaving the block (docs/transformations.md).
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_TRANSFORMS_UNIFYSYNC_H
#define TALLY_TRANSFORMS_UNIFYSYNC_H

#include "tally/PTX/IR.h"
#include "tally/Transforms/Legality.h"
#include "tally/Transforms/VariantUtils.h"

#include "llvm/Support/Error.h"

namespace tally {

/// Applies the unified synchronisation rewrite to kernel \p F in place: the
/// kernel computes the same thing, with every return and full-block barrier
/// going through the rendezvous. Used by the PTB variant, and alone by the
/// `unify-sync` pass for testing.
///
/// `ret`/`exit` jump to a convergence block at the end of the body.
/// Barriers in block-uniform control flow that no thread can reach after
/// another returned stay as they are; the others are routed through the
/// convergence block, whose single barrier (in a function every round
/// calls) counts the live threads, so a warp split between returned and
/// live threads arrives at one instruction:
///
///     @%p1 ret;            @%p1 bra $__tly_conv;
///     bar.sync 0;     =>   (site 1) bra $__tly_conv;  $__tly_resume1:
///     ...                  ...
///                        $__tly_conv:
///                          <count live threads: call __tly_conv_barrier0>
///                          none live: leave; returned: wait for the next
///                          round; live: jump back behind their barrier
llvm::Error unifySync(ptx::Module &M, ptx::Function &F, const Legality &L,
                      RewriteStats &Stats);

} // namespace tally

#endif
