//===- Slice.h - the sliced form of a kernel --------------------*- C++ -*-===//
//
// The variant takes the original grid and a block offset; it is launched as
// a one-dimensional grid of `count` blocks and block i runs the original
// block with linear index offset + i.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_TRANSFORMS_SLICE_H
#define TALLY_TRANSFORMS_SLICE_H

#include "tally/Metadata/Metadata.h"
#include "tally/PTX/IR.h"
#include "tally/Transforms/Legality.h"
#include "tally/Transforms/VariantUtils.h"

#include "llvm/Support/Error.h"

namespace tally {

/// Adds the sliced variant of kernel \p K to \p M after it: a clone named
/// `<kernel>__tally_slice` with the parameters `__tly_slice_offset` and
/// `__tly_grid_{x,y,z}` appended, where every %ctaid/%nctaid read sees the
/// original launch:
///
///     mov.u32 %r1, %ctaid.x;
///   becomes
///     ld.param.u32 %__tly_s0, [__tly_slice_offset];
///     mov.u32 %__tly_s1, %ctaid.x;
///     add.u32 %__tly_s0, %__tly_s0, %__tly_s1;
///     ld.param.u32 %__tly_s1, [__tly_grid_x];
///     rem.u32 %__tly_ctaid_x, %__tly_s0, %__tly_s1;
///     mov.u32 %r1, %__tly_ctaid_x;
llvm::Expected<VariantRecord> addSliceVariant(ptx::Module &M,
                                              const ptx::Function &K,
                                              const Legality &L,
                                              RewriteStats &Stats);

} // namespace tally

#endif
