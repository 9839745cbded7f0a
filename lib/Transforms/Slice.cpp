//===- Slice.cpp - the sliced form of a kernel ----------------------------===//
//
// A clone of the kernel whose %ctaid/%nctaid reads are computed from the
// slice offset and the original grid, passed as extra parameters (Slice.h).
//
//===----------------------------------------------------------------------===//

#include "tally/Transforms/Slice.h"

#include "RewriteHelpers.h"

#include "llvm/Support/FormatVariadic.h"

using namespace llvm;
using namespace tally::ptx;
using namespace tally::detail;

namespace tally {

Expected<VariantRecord> addSliceVariant(Module &M, const Function &K,
                                        const Legality &L, RewriteStats &Stats) {
  if (!L.SliceOK)
    return internalError("slice of a kernel that cannot be sliced");
  VariantRecord V;
  V.Kind = "slice";
  uint64_t Orig = paramBytes(K);
  Function &F = addClone(M, K, "slice");
  V.Name = F.Name.str();
  if (Error E = addParams(M, F, Orig,
                          {{"__tly_slice_offset", "slice_offset"},
                           {"__tly_grid_x", "grid_x"},
                           {"__tly_grid_y", "grid_y"},
                           {"__tly_grid_z", "grid_z"}},
                          {"u32", "u32", "u32", "u32"}, V))
    return std::move(E);

  auto Load = [](SregUse U) -> std::string {
    if (U.Base == "%nctaid")
      return formatv("ld.param.u32 %__tly_nctaid_{0}, [__tly_grid_{0}];\n", U.Comp).str();
    // The block's linear index in the original grid, then its coordinates.
    std::string T = "ld.param.u32 %__tly_s0, [__tly_slice_offset];\n"
                    "mov.u32 %__tly_s1, %ctaid.x;\n"
                    "add.u32 %__tly_s0, %__tly_s0, %__tly_s1;\n"
                    "ld.param.u32 %__tly_s1, [__tly_grid_x];\n";
    if (U.Comp == 'x')
      return T + "rem.u32 %__tly_ctaid_x, %__tly_s0, %__tly_s1;\n";
    T += "div.u32 %__tly_s0, %__tly_s0, %__tly_s1;\n"
         "ld.param.u32 %__tly_s1, [__tly_grid_y];\n";
    if (U.Comp == 'y')
      return T + "rem.u32 %__tly_ctaid_y, %__tly_s0, %__tly_s1;\n";
    return T + "div.u32 %__tly_ctaid_z, %__tly_s0, %__tly_s1;\n";
  };
  if (Error E = rewriteGridSregs(M, F, Stats, Load))
    return std::move(E);
  auto Decls = code(M, std::string(GridSregDecls) + ".reg .b32 %__tly_s0, %__tly_s1;\n");
  if (!Decls)
    return Decls.takeError();
  insertAtTop(F, std::move(*Decls));
  return std::move(V);
}

} // namespace tally
