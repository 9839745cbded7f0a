//===- UnifySyncInternal.h - unify-sync pieces for PTB ----------*- C++ -*-===//
//
// The unified synchronisation rewrite in parts (defined in UnifySync.cpp):
// unifySync() puts them around a kernel's body on its own, the PTB variant
// puts them inside its worker loop.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_LIB_TRANSFORMS_UNIFYSYNCINTERNAL_H
#define TALLY_LIB_TRANSFORMS_UNIFYSYNCINTERNAL_H

#include "tally/PTX/IR.h"
#include "tally/Transforms/Legality.h"
#include "tally/Transforms/VariantUtils.h"

#include "llvm/Support/Error.h"

#include <string>

namespace tally {
namespace detail {

/// Adds the convergence-barrier function for barrier \p K to \p M once,
/// after the module directives.
llvm::Error addConvBarrierFunc(ptx::Module &M, unsigned K);

/// Rewrites returns and full-block barriers of \p F's body so that every
/// thread reaches one convergence block, and sets \p ConvText to that block
/// (the code to put after the body; it leaves to `$__tly_done`).
llvm::Error rewriteSyncSites(ptx::Module &M, ptx::Function &F,
                             const Legality &L, RewriteStats &Stats,
                             std::string &ConvText);

/// Declarations of the registers the rewritten body and the convergence
/// block use.
inline constexpr const char SyncDeclsText[] =
    ".reg .b32 %__tly_n, %__tly_c, %__tly_site;\n"
    ".reg .pred %__tly_live, %__tly_in, %__tly_more;\n";

} // namespace detail
} // namespace tally

#endif
