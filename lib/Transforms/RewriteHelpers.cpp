//===- RewriteHelpers.cpp - helpers for PTX-text rewrites -----------------===//
//
// The helpers of RewriteHelpers.h, and the names of the variants
// (VariantUtils.h).
//
//===----------------------------------------------------------------------===//

#include "RewriteHelpers.h"

#include "tally/Analysis/KernelInfo.h"
#include "tally/PTX/Parser.h"
#include "tally/PTX/Printer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace llvm;
using namespace tally::ptx;

namespace tally {

std::string getVariantName(StringRef Kernel, StringRef Kind) {
  return (Kernel + "__tally_" + Kind).str();
}

namespace detail {

Error internalError(const Twine &Msg) {
  return createStringError(inconvertibleErrorCode(),
                           "internal error in a Tally rewrite: %s",
                           Msg.str().c_str());
}

Expected<StmtList> code(Module &M, const std::string &Text) {
  auto S = parseStatements(M, Text);
  if (!S)
    return internalError("generated PTX does not parse: " + toString(S.takeError()));
  return S;
}

std::string guardText(const Instruction &I) {
  if (!I.isGuarded())
    return "";
  return ("@" + Twine(I.GuardNegated ? "!" : "") + I.Guard + " ").str();
}

std::string operandText(const Operand &O) {
  std::string S;
  raw_string_ostream OS(S);
  printOperand(O, OS);
  return S;
}

Error rewriteInsts(StmtList &Body, const InstRewriter &Fn) {
  StmtList Out;
  Out.reserve(Body.size());
  for (auto &S : Body) {
    if (auto *Scope = dyn_cast<ScopeStmt>(S.get())) {
      if (Error E = rewriteInsts(Scope->Body, Fn))
        return E;
    } else if (auto *IS = dyn_cast<InstStmt>(S.get())) {
      auto R = Fn(IS->I);
      if (!R)
        return R.takeError();
      if (*R) {
        for (auto &N : **R)
          Out.push_back(std::move(N));
        continue;
      }
    }
    Out.push_back(std::move(S));
  }
  Body = std::move(Out);
  return Error::success();
}

void insertAtTop(Function &F, StmtList Code) {
  StmtList &Body = F.Body->Body;
  auto It = find_if(Body, [](const std::unique_ptr<Stmt> &S) {
    return !isa<DeclStmt>(S.get()) && !isa<DirectiveStmt>(S.get());
  });
  Body.insert(It, std::make_move_iterator(Code.begin()),
              std::make_move_iterator(Code.end()));
}

void append(StmtList &Body, StmtList Code) {
  for (auto &S : Code)
    Body.push_back(std::move(S));
}

/// Replaces `%ctaid.c` / `%nctaid.c` tokens in \p I by `%__tly_ctaid_c` /
/// `%__tly_nctaid_c` and returns the reads, each once.
static SmallVector<SregUse, 2> replaceGridSregs(Module &M, Instruction &I) {
  SmallVector<SregUse, 2> Uses;
  std::function<void(Operand &)> Visit = [&](Operand &O) {
    for (size_t T = 0; T + 1 < O.Toks.size(); ++T) {
      Token &Reg = O.Toks[T];
      const Token &Comp = O.Toks[T + 1];
      if (!Reg.is(TokKind::Ident) || (Reg.Text != "%ctaid" && Reg.Text != "%nctaid"))
        continue;
      if (!Comp.is(TokKind::DotWord) || Comp.SpaceBefore || Comp.Text.size() != 2 ||
          !StringRef("xyz").contains(Comp.Text[1]))
        continue;
      SregUse U{Reg.Text, Comp.Text[1]};
      if (!is_contained(Uses, U))
        Uses.push_back(U);
      Reg.Text = M.save(("%__tly_" + Reg.Text.drop_front() + "_" + Twine(U.Comp)).str());
      O.Toks.erase(O.Toks.begin() + T + 1);
    }
    for (Operand &E : O.Elems)
      Visit(E);
  };
  for (Operand &O : I.Ops)
    Visit(O);
  return Uses;
}

Error rewriteGridSregs(Module &M, Function &F, RewriteStats &Stats,
                       const std::function<std::string(SregUse)> &Load) {
  return rewriteInsts(F.Body->Body, [&](Instruction &I) -> Expected<std::optional<StmtList>> {
    Instruction Copy = I;
    auto Uses = replaceGridSregs(M, Copy);
    if (Uses.empty())
      return std::nullopt;
    Stats.SregReads += Uses.size();
    std::string Text;
    for (const SregUse &U : Uses)
      Text += Load(U);
    auto Pre = code(M, Text);
    if (!Pre)
      return Pre.takeError();
    Pre->push_back(std::make_unique<InstStmt>(std::move(Copy)));
    return std::optional<StmtList>(std::move(*Pre));
  });
}

Error addParams(Module &M, Function &F, uint64_t OrigBytes,
                ArrayRef<std::pair<const char *, const char *>> NameRole,
                ArrayRef<const char *> Types, VariantRecord &V) {
  uint64_t Off = OrigBytes;
  for (size_t I = 0; I < NameRole.size(); ++I) {
    StringRef Ty = Types[I];
    uint64_t Size = Ty == "u64" ? 8 : 4;
    Off = alignTo(Off, Size);
    auto P = parseParamDecl(M, formatv(".param .{0} {1}", Ty, NameRole[I].first).str());
    if (!P)
      return internalError(toString(P.takeError()));
    F.Params.push_back(std::move(*P));
    V.ExtraParams.push_back({NameRole[I].first, Ty.str(), Off, Size, NameRole[I].second});
    Off += Size;
  }
  F.HasParamList = true;
  V.OriginalParamBytes = OrigBytes;
  V.ParamBytes = Off;
  return Error::success();
}

Function &addClone(Module &M, const Function &K, StringRef Kind) {
  std::unique_ptr<Function> C = cloneFunction(K);
  C->Name = M.save(getVariantName(K.Name, Kind));
  Function *Raw = C.get();
  auto It = find_if(M.Items, [&](const TopItem &I) {
    return I.getKind() == TopItem::Kind::Function && I.Func.get() == &K;
  });
  M.Items.insert(It == M.Items.end() ? It : std::next(It), TopItem(std::move(C)));
  return *Raw;
}

uint64_t paramBytes(const Function &F) {
  uint64_t Bytes = 0;
  getParamLayout(F, Bytes);
  return Bytes;
}

} // namespace detail
} // namespace tally
