//===- VariantUtils.h - what the kernel rewrites share ----------*- C++ -*-===//
//
// The counters every rewrite fills and the names of the variants. The
// rewrites themselves: UnifySync.h, Slice.h, PTB.h (each over the PTX-text
// helpers of lib/Transforms/RewriteHelpers.h).
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_TRANSFORMS_VARIANTUTILS_H
#define TALLY_TRANSFORMS_VARIANTUTILS_H

#include "llvm/ADT/StringRef.h"

#include <string>

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

} // namespace tally

#endif
