//===- RewriteHelpers.h - helpers for PTX-text rewrites ---------*- C++ -*-===//
//
// What the rewrites (UnifySync.cpp, Slice.cpp, PTB.cpp) build on. They write
// the code they add as PTX text, parsed into statements by the front end
// (code()), so what is inserted reads like the PTX it becomes. Every name
// added starts with `__tly` (registers `%__tly_*`, labels `$__tly_*`); the
// legality check refuses modules that already use that prefix.
//
// A new form: clone the kernel (addClone), append its parameters
// (addParams), replace instructions (rewriteInsts, rewriteGridSregs) and put
// code around the body (insertAtTop, append); see Slice.cpp, the smallest.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_LIB_TRANSFORMS_REWRITEHELPERS_H
#define TALLY_LIB_TRANSFORMS_REWRITEHELPERS_H

#include "tally/Metadata/Metadata.h"
#include "tally/PTX/IR.h"
#include "tally/Transforms/VariantUtils.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <optional>
#include <string>

namespace tally {
namespace detail {

/// An error for a rewrite that went wrong (not the input's fault).
llvm::Error internalError(const llvm::Twine &Msg);

/// Parses generated PTX \p Text into statements of \p M.
llvm::Expected<ptx::StmtList> code(ptx::Module &M, const std::string &Text);

/// The guard of \p I as PTX text (`@!%p1 `), or "" if it has none.
std::string guardText(const ptx::Instruction &I);

/// \p O as PTX text.
std::string operandText(const ptx::Operand &O);

/// Replaces instructions anywhere in \p Body (nested scopes included). \p Fn
/// returns the statements that replace an instruction, or std::nullopt to
/// keep it.
using InstRewriter = std::function<llvm::Expected<std::optional<ptx::StmtList>>(
    ptx::Instruction &)>;
llvm::Error rewriteInsts(ptx::StmtList &Body, const InstRewriter &Fn);

/// Inserts \p Code at the top of \p F's body, after its leading declarations.
void insertAtTop(ptx::Function &F, ptx::StmtList Code);

/// Appends \p Code to \p Body.
void append(ptx::StmtList &Body, ptx::StmtList Code);

/// A special register read in an instruction: base (`%ctaid`) and
/// component (`x`).
struct SregUse {
  llvm::StringRef Base;
  char Comp;
  bool operator==(const SregUse &O) const {
    return Base == O.Base && Comp == O.Comp;
  }
};

/// Rewrites the grid special registers (%ctaid, %nctaid) of \p F into the
/// registers `%__tly_ctaid_c` / `%__tly_nctaid_c` (GridSregDecls); \p Load
/// gives the code that loads one into its register before the instruction.
llvm::Error rewriteGridSregs(ptx::Module &M, ptx::Function &F,
                             RewriteStats &Stats,
                             const std::function<std::string(SregUse)> &Load);

/// Declarations of the registers rewriteGridSregs() reads.
inline constexpr const char GridSregDecls[] =
    ".reg .b32 %__tly_ctaid_x, %__tly_ctaid_y, %__tly_ctaid_z;\n"
    ".reg .b32 %__tly_nctaid_x, %__tly_nctaid_y, %__tly_nctaid_z;\n";

/// Appends parameters to \p F and records them (offsets follow the original
/// parameters with natural alignment).
llvm::Error
addParams(ptx::Module &M, ptx::Function &F, uint64_t OrigBytes,
          llvm::ArrayRef<std::pair<const char *, const char *>> NameRole,
          llvm::ArrayRef<const char *> Types, VariantRecord &V);

/// Clones \p K as a new entry named after it and inserts it after \p K.
ptx::Function &addClone(ptx::Module &M, const ptx::Function &K,
                        llvm::StringRef Kind);

/// Bytes of \p F's parameters.
uint64_t paramBytes(const ptx::Function &F);

} // namespace detail
} // namespace tally

#endif
