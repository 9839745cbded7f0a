//===- UnifySync.cpp - one rendezvous for returns and barriers ------------===//
//
// Returns and full-block barriers that not every thread reaches together go
// through one convergence block at the end of the body, whose single barrier
// instruction counts the live threads (UnifySync.h). The PTB variant uses
// the pieces (UnifySyncInternal.h) inside its worker loop.
//
//===----------------------------------------------------------------------===//

#include "tally/Transforms/UnifySync.h"

#include "RewriteHelpers.h"
#include "UnifySyncInternal.h"

#include "tally/Analysis/KernelInfo.h"
#include "tally/PTX/CFG.h"
#include "tally/PTX/Parser.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Casting.h"
#include "llvm/Support/FormatVariadic.h"

using namespace llvm;
using namespace tally::ptx;
using namespace tally::detail;

namespace tally {

namespace {

/// Whether the kernel has asynchronous copies a thread must wait for before
/// it gives up its block (their shared memory is reused by the next
/// logical block).
struct AsyncCopies {
  bool Bulk = false;  ///< cp.async.bulk / cp.reduce.async.bulk out of shared
  bool Ampere = false; ///< cp.async (into shared)
};

AsyncCopies findAsyncCopies(Function &F) {
  AsyncCopies A;
  walkStmts(F.Body->Body, [&](Stmt &S) {
    auto *IS = dyn_cast<InstStmt>(&S);
    if (!IS)
      return;
    StringRef Op = IS->I.Opcode;
    if ((Op.starts_with("cp.async.bulk") || Op.starts_with("cp.reduce.async.bulk")) &&
        Op.contains(".global.shared"))
      A.Bulk = true;
    else if (Op.starts_with("cp.async.ca") || Op.starts_with("cp.async.cg"))
      A.Ampere = true;
  });
  return A;
}


bool containsFullBarrier(const StmtList &Body) {
  bool Found = false;
  walkStmts(Body, [&](Stmt &S) {
    if (auto *IS = dyn_cast<InstStmt>(&S))
      Found |= isFullBlockBarrier(IS->I);
  });
  return Found;
}

/// Renames what a scope declares (registers, register ranges, variables,
/// labels) so its statements can move into the enclosing scope.
class ScopeRenamer {
public:
  ScopeRenamer(Module &M, unsigned Id) : M(M), Id(Id) {}

  void collect(const StmtList &Body) {
    for (const auto &S : Body) {
      if (auto *D = dyn_cast<DeclStmt>(S.get())) {
        for (const Declarator &X : D->D.Decls) {
          if (X.Range) {
            unsigned N = 0;
            X.Range->getAsInteger(10, N);
            Ranges.push_back({X.Name, N});
          } else {
            Names.insert(X.Name);
          }
        }
      } else if (auto *L = dyn_cast<LabelStmt>(S.get())) {
        Names.insert(L->Name);
      }
    }
  }

  StringRef rename(StringRef T) {
    bool Hit = Names.contains(T);
    for (auto &[Base, Count] : Ranges) {
      if (Hit || !T.starts_with(Base) || T.size() == Base.size())
        continue;
      unsigned Idx = 0;
      if (!T.drop_front(Base.size()).getAsInteger(10, Idx) && Idx < Count)
        Hit = true;
    }
    return Hit ? prefixed(T) : T;
  }

  /// \p T with this scope's prefix (a range's base is renamed as its
  /// members are).
  StringRef prefixed(StringRef T) {
    StringRef Sigil = (T.starts_with("%") || T.starts_with("$")) ? T.take_front(1) : "";
    return M.save((Sigil + "__tly_s" + Twine(Id) + "_" + T.drop_front(Sigil.size())).str());
  }

  void apply(StmtList &Body) {
    auto Toks = [&](MutableArrayRef<Token> Ts) {
      for (Token &T : Ts)
        if (T.is(TokKind::Ident))
          T.Text = rename(T.Text);
    };
    for (auto &S : Body) {
      if (auto *IS = dyn_cast<InstStmt>(S.get())) {
        if (IS->I.isGuarded())
          IS->I.Guard = rename(IS->I.Guard);
        for (Operand &O : IS->I.Ops)
          O.forEachToken([&](Token &T) {
            if (T.is(TokKind::Ident))
              T.Text = rename(T.Text);
          });
      } else if (auto *D = dyn_cast<DeclStmt>(S.get())) {
        for (Declarator &X : D->D.Decls) {
          X.Name = X.Range ? prefixed(X.Name) : rename(X.Name);
          for (TokenList &Dim : X.Dims)
            Toks(Dim);
          Toks(X.Init);
        }
      } else if (auto *L = dyn_cast<LabelStmt>(S.get())) {
        L->Name = rename(L->Name);
      } else if (auto *Dir = dyn_cast<DirectiveStmt>(S.get())) {
        Toks(Dir->D.Args);
      } else if (auto *Sc = dyn_cast<ScopeStmt>(S.get())) {
        apply(Sc->Body);
      }
    }
  }

private:
  Module &M;
  unsigned Id;
  StringSet<> Names;
  std::vector<std::pair<StringRef, unsigned>> Ranges;
};

/// Moves the statements of nested scopes that hold a full-block barrier into
/// their parent (renaming what they declare), so the barrier's resume label
/// is visible from the convergence block. nvcc puts __syncthreads_or and
/// friends in such scopes.
void flattenBarrierScopes(Module &M, StmtList &Body, unsigned &Counter) {
  StmtList Out;
  for (auto &S : Body) {
    auto *Sc = dyn_cast<ScopeStmt>(S.get());
    if (!Sc || !containsFullBarrier(Sc->Body)) {
      Out.push_back(std::move(S));
      continue;
    }
    flattenBarrierScopes(M, Sc->Body, Counter);
    ScopeRenamer R(M, ++Counter);
    R.collect(Sc->Body);
    R.apply(Sc->Body);
    for (auto &Inner : Sc->Body)
      Out.push_back(std::move(Inner));
  }
  Body = std::move(Out);
}

/// Name of the function that holds the convergence barrier on barrier \p K.
std::string convBarrierFunc(unsigned K) {
  return formatv("__tly_conv_barrier{0}", K).str();
}

/// A round of the convergence barrier: \p Out = number of threads of the
/// block whose predicate \p In is true. The barrier instruction sits in one
/// function that every round calls, so all threads, whatever path brought
/// them, arrive at the same instruction: ptxas duplicates a barrier that is
/// written inline in a loop (loop rotation), and a warp split between two
/// copies of a barrier counts twice.
std::string convBarrierText(StringRef In, StringRef Out, unsigned K) {
  return formatv("selp.u32 {1}, 1, 0, {0};\n"
                 "{\n"
                 ".param .b32 __tly_arg;\n"
                 ".param .b32 __tly_ret;\n"
                 "st.param.b32 [__tly_arg], {1};\n"
                 "call (__tly_ret), {2}, (__tly_arg);\n"
                 "ld.param.b32 {1}, [__tly_ret];\n"
                 "}\n",
                 In, Out, convBarrierFunc(K))
      .str();
}

/// Sets %__tly_site to \p Id through a value ptxas cannot see is constant
/// (%nctaid.x >> 31 is 0 for every valid grid). With a constant, ptxas
/// specialises the convergence block per predecessor and duplicates its
/// barrier, and a warp split between two copies of a barrier counts twice.
std::string siteText(StringRef Guard, unsigned Id) {
  return formatv("{0}mov.u32 %__tly_site, %nctaid.x;\n"
                 "{0}shr.u32 %__tly_site, %__tly_site, 31;\n"
                 "{0}add.u32 %__tly_site, %__tly_site, {1};\n",
                 Guard, Id)
      .str();
}

} // namespace

namespace detail {

/// Adds the convergence-barrier function for barrier \p K to \p M once,
/// after the module directives.
Error addConvBarrierFunc(Module &M, unsigned K) {
  std::string Name = convBarrierFunc(K);
  if (M.getFunction(Name))
    return Error::success();
  auto F = std::make_unique<Function>();
  F->Name = M.save(Name);
  F->HasRetList = F->HasParamList = true;
  auto Ret = parseParamDecl(M, ".param .b32 __tly_ret");
  auto Arg = parseParamDecl(M, ".param .b32 __tly_arg");
  auto Body = code(M, formatv(".reg .b32 %a;\n"
                              ".reg .pred %p;\n"
                              "ld.param.b32 %a, [__tly_arg];\n"
                              "setp.ne.u32 %p, %a, 0;\n"
                              "barrier.red.popc.u32 %a, {0}, %p;\n"
                              "st.param.b32 [__tly_ret], %a;\n"
                              "ret;\n",
                              K)
                          .str());
  if (!Ret || !Arg || !Body) {
    consumeError(Ret.takeError());
    consumeError(Arg.takeError());
    return Body ? internalError("parameter of " + Name) : Body.takeError();
  }
  F->Rets.push_back(std::move(*Ret));
  F->Params.push_back(std::move(*Arg));
  F->Body = std::make_unique<ScopeStmt>();
  F->Body->Body = std::move(*Body);
  auto Top = find_if(M.Items, [](const TopItem &I) {
    return I.getKind() != TopItem::Kind::Directive ||
           (I.Dir.Name != ".version" && I.Dir.Name != ".target" &&
            I.Dir.Name != ".address_size");
  });
  M.Items.insert(Top, TopItem(std::move(F)));
  return Error::success();
}

/// Rewrites returns and full-block barriers of \p F's body so that every
/// thread reaches one convergence block (see UnifySync.h): barrier site i
/// records i in %__tly_site (returns record 0) and jumps there; the block's
/// single barrier instruction counts the live threads; live threads go back
/// to the point after their barrier, returned threads wait for the next
/// round, and when no thread is live all leave to `$__tly_done`.
///
/// One barrier instruction for everything is what makes this correct: a
/// barrier marks the arrival of warps, so the threads of a warp that is
/// split between a returned and a live part must arrive at the same
/// instruction to count once.
Error rewriteSyncSites(Module &M, Function &F, const Legality &L,
                       RewriteStats &Stats, std::string &ConvText) {
  AsyncCopies Async = findAsyncCopies(F);
  unsigned K = L.BarrierId;
  unsigned NumSites = 0;
  unsigned Scopes = 0, BarrierOrdinal = 0;
  if (L.anyConvergedBarrier())
    flattenBarrierScopes(M, F.Body->Body, Scopes);
  // The convergence block needs the second (reduction) round only when a
  // routed barrier is a reduction.
  bool RoutedReduction = false;
  {
    unsigned Ord = 0;
    walkStmts(F.Body->Body, [&](Stmt &S) {
      auto *IS = dyn_cast<InstStmt>(&S);
      if (!IS || (IS->I.getBaseOpcode() != "bar" && IS->I.getBaseOpcode() != "barrier"))
        return;
      unsigned O = Ord++;
      if (O < L.ConvergeBarrier.size() && L.ConvergeBarrier[O] && IS->I.hasModifier(".red"))
        RoutedReduction = true;
    });
  }
  Error Err = rewriteInsts(F.Body->Body, [&](Instruction &I) -> Expected<std::optional<StmtList>> {
    std::string G = guardText(I);
    StringRef Base = I.getBaseOpcode();
    std::string Text;
    if (Base == "ret" || Base == "exit") {
      ++Stats.Returns;
      if (Async.Bulk)
        Text += G + "cp.async.bulk.wait_group.read 0;\n";
      if (Async.Ampere)
        Text += G + "cp.async.wait_all;\n";
      if (L.anyConvergedBarrier())
        Text += siteText(G, 0);
      Text += G + "bra $__tly_conv;\n";
      return code(M, Text);
    }
    if (Base != "bar" && Base != "barrier")
      return std::nullopt;
    unsigned Ordinal = BarrierOrdinal++;
    if (Ordinal >= L.ConvergeBarrier.size() || !L.ConvergeBarrier[Ordinal]) {
      // All threads meet this barrier together: it can stay.
      if (!I.hasModifier(".warp") && !I.hasModifier(".cluster"))
        ++Stats.KeptBarriers;
      return std::nullopt;
    }
    if (!isFullBlockBarrier(I)) {
      // Warp and cluster barriers, and barriers with a thread count (named
      // barriers of warp subsets), stay as they are.
      if (!I.hasModifier(".warp") && !I.hasModifier(".cluster"))
        ++Stats.KeptBarriers;
      return std::nullopt;
    }
    bool IsRed = I.hasModifier(".red");
    size_t N = I.Ops.size();
    unsigned Id = ++NumSites;
    std::string Resume = formatv("$__tly_resume{0}", Id).str();
    // A guarded barrier is skipped by the threads whose guard is false.
    if (I.isGuarded())
      Text += formatv("@{0}{1} bra {2};\n", I.GuardNegated ? "" : "!", I.Guard, Resume).str();
    Text += siteText("", Id);
    if (!IsRed) {
      ++Stats.Barriers;
      if (RoutedReduction)
        Text += "setp.ne.u32 %__tly_in, 0, 0;\n"; // contributes nothing
      Text += "bra $__tly_conv;\n" + Resume + ":\n";
      return code(M, Text);
    }
    ++Stats.Reductions;
    if (N != 3)
      return internalError("unexpected operands of " + I.Opcode);
    std::string Dst = operandText(I.Ops[0]);
    // The reduction's input predicate, possibly negated (`!%p`).
    const Operand &In = I.Ops[2];
    bool Neg = !In.Toks.empty() && In.Toks[0].isPunct('!');
    std::string Pred = Neg ? operandText(In).substr(1) : operandText(In);
    Text += formatv("{0}.pred %__tly_in, {1};\n", Neg ? "not" : "mov", Pred).str();
    Text += "bra $__tly_conv;\n" + Resume + ":\n";
    if (I.hasModifier(".popc"))
      Text += formatv("mov.u32 {0}, %__tly_c;\n", Dst).str();
    else if (I.hasModifier(".or"))
      Text += formatv("setp.ne.u32 {0}, %__tly_c, 0;\n", Dst).str();
    else if (I.hasModifier(".and"))
      Text += formatv("setp.eq.u32 {0}, %__tly_c, %__tly_n;\n", Dst).str();
    else
      return internalError("unknown barrier reduction " + I.Opcode);
    return code(M, Text);
  });
  if (Err)
    return Err;

  // The convergence block. Falling off the end of the body is a return.
  if (NumSites == 0) {
    // No barrier is routed: threads only arrive here when they are done,
    // so one barrier (no loop, nothing live) ends the logical block. A
    // warp split by a divergent return arrives at this one instruction.
    ConvText = formatv("$__tly_conv:\nbarrier.sync {0};\n", K).str();
    return Error::success();
  }
  std::string T = siteText("", 0) +
                  "$__tly_conv:\n"
                  "setp.ne.u32 %__tly_live, %__tly_site, 0;\n";
  T += convBarrierText("%__tly_live", "%__tly_n", K);
  if (RoutedReduction)
    T += "and.pred %__tly_in, %__tly_in, %__tly_live;\n" +
         convBarrierText("%__tly_in", "%__tly_c", K);
  T += "setp.eq.u32 %__tly_more, %__tly_n, 0;\n"
       "@%__tly_more bra $__tly_done;\n"
       "@!%__tly_live bra $__tly_conv;\n";
  if (NumSites <= 8) {
    for (unsigned Id = 1; Id <= NumSites; ++Id)
      T += formatv("setp.eq.u32 %__tly_more, %__tly_site, {0};\n"
                   "@%__tly_more bra $__tly_resume{0};\n",
                   Id)
               .str();
  } else {
    T += "$__tly_targets: .branchtargets ";
    for (unsigned Id = 1; Id <= NumSites; ++Id)
      T += formatv("{0}$__tly_resume{1}", Id > 1 ? ", " : "", Id).str();
    T += ";\nsub.u32 %__tly_site, %__tly_site, 1;\n"
         "brx.idx %__tly_site, $__tly_targets;\n";
  }
  if (NumSites)
    T += "bra $__tly_conv;\n"; // not reached: every live thread has a site
  ConvText = std::move(T);
  return Error::success();
}

} // namespace detail

Error unifySync(Module &M, Function &F, const Legality &L, RewriteStats &Stats) {
  if (!F.Body)
    return internalError("unify-sync on a declaration");
  if (L.anyConvergedBarrier())
    if (Error E = addConvBarrierFunc(M, L.BarrierId))
      return E;
  std::string Conv;
  if (Error E = rewriteSyncSites(M, F, L, Stats, Conv))
    return E;
  auto Top = code(M, SyncDeclsText);
  if (!Top)
    return Top.takeError();
  insertAtTop(F, std::move(*Top));
  auto End = code(M, Conv + "$__tly_done:\nret;\n");
  if (!End)
    return End.takeError();
  append(F.Body->Body, std::move(*End));
  return Error::success();
}

} // namespace tally
