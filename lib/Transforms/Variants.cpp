//===- Variants.cpp - the sliced and PTB forms of a kernel ----------------===//
//
// The rewrites build their code as PTX text, parsed into statements by the
// front end, so what is inserted reads like the PTX it becomes. Every name
// added starts with `__tly` (registers `%__tly_*`, labels `$__tly_*`); the
// legality check refuses modules that already use that prefix.
//
//===----------------------------------------------------------------------===//

#include "tally/Transforms/Variants.h"

#include "tally/Analysis/KernelInfo.h"
#include "tally/Analysis/Liveness.h"
#include "tally/PTX/CFG.h"
#include "tally/PTX/Parser.h"
#include "tally/PTX/Printer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Casting.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <functional>

using namespace llvm;
using namespace tally::ptx;

namespace tally {

std::string getVariantName(StringRef Kernel, StringRef Kind) {
  return (Kernel + "__tally_" + Kind).str();
}

namespace {

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

/// Replaces instructions anywhere in \p Body (nested scopes included). \p Fn
/// returns the statements that replace an instruction, or std::nullopt to
/// keep it.
using InstRewriter = std::function<Expected<std::optional<StmtList>>(Instruction &)>;

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

/// Inserts \p Code at the top of \p F's body, after its leading declarations.
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

/// A special register read in an instruction: base (`%ctaid`) and
/// component (`x`).
struct SregUse {
  StringRef Base;
  char Comp;
  bool operator==(const SregUse &O) const { return Base == O.Base && Comp == O.Comp; }
};

/// Replaces `%ctaid.c` / `%nctaid.c` tokens in \p I by `%__tly_ctaid_c` /
/// `%__tly_nctaid_c` and returns the reads, each once.
SmallVector<SregUse, 2> replaceGridSregs(Module &M, Instruction &I) {
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

/// Rewrites the grid special registers of \p F; \p Load gives the code that
/// loads one into its `%__tly_*` register before the instruction.
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

const char *GridSregDecls =
    ".reg .b32 %__tly_ctaid_x, %__tly_ctaid_y, %__tly_ctaid_z;\n"
    ".reg .b32 %__tly_nctaid_x, %__tly_nctaid_y, %__tly_nctaid_z;\n";

/// Appends parameters to \p F and records them (offsets follow the original
/// parameters with natural alignment).
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

/// Clones \p K as a new entry named after it and inserts it after \p K.
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

//===----------------------------------------------------------------------===//
// Unified synchronisation
//===----------------------------------------------------------------------===//


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

/// Rewrites returns and full-block barriers of \p F's body so that every
/// thread reaches one convergence block (see Variants.h): barrier site i
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

const char *SyncDeclsText = ".reg .b32 %__tly_n, %__tly_c, %__tly_site;\n"
                            ".reg .pred %__tly_live, %__tly_in, %__tly_more;\n";

} // namespace

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

/// Instructions giving a constant to each register the body of \p K may
/// read before writing it (see Liveness.h), so that no value stays live
/// from one logical block to the next. Only registers declared at the top
/// of the body (before its first instruction), of types with a plain `mov`.
std::string zeroLiveIns(const Function &K, RewriteStats &Stats) {
  CFG G(const_cast<Function &>(K));
  std::vector<std::string> Live = getLiveInRegisters(G);
  if (Live.empty())
    return {};
  // Register name -> its declaration's type; `%r<N>` covers %r0..%r(N-1).
  // Only the declarations before the first instruction: the constants go
  // there (insertAtTop), and a register is used after its declaration.
  StringMap<StringRef> Exact;
  StringMap<std::pair<StringRef, unsigned>> Ranges;
  for (const auto &S : K.Body->Body) {
    if (!isa<DeclStmt>(S.get()) && !isa<DirectiveStmt>(S.get()))
      break;
    auto *D = dyn_cast<DeclStmt>(S.get());
    if (!D || D->D.getStateSpace() != ".reg" || D->D.getVectorWidth() != 1)
      continue;
    for (const Declarator &X : D->D.Decls) {
      if (!X.Dims.empty())
        continue;
      unsigned Count = 0;
      if (!X.Range)
        Exact[X.Name] = D->D.getType();
      else if (!X.Range->getAsInteger(10, Count))
        Ranges[X.Name] = {D->D.getType(), Count};
    }
  }
  auto TypeOf = [&](StringRef R) -> StringRef {
    if (auto It = Exact.find(R); It != Exact.end())
      return It->second;
    size_t Digits = R.size();
    while (Digits > 0 && isDigit(R[Digits - 1]))
      --Digits;
    unsigned Num = 0;
    if (Digits == R.size() || R.substr(Digits).getAsInteger(10, Num))
      return {};
    if (R.size() - Digits > 1 && R[Digits] == '0')
      return {}; // %r01 is not %r<N>'s register 1
    auto It = Ranges.find(R.substr(0, Digits));
    if (It == Ranges.end() || Num >= It->second.second)
      return {};
    return It->second.first;
  };
  std::string Text;
  for (const std::string &R : Live) {
    StringRef T = TypeOf(R);
    unsigned Bits = 0;
    if (T == ".pred") {
      Text += "setp.ne.u32 " + R + ", 0, 0;\n";
      ++Stats.ZeroedRegisters;
      continue;
    }
    if (T == ".b16" || T == ".u16" || T == ".s16" || T == ".f16" || T == ".bf16")
      Bits = 16;
    else if (T == ".b32" || T == ".u32" || T == ".s32" || T == ".f32" || T == ".f16x2" ||
             T == ".bf16x2")
      Bits = 32;
    else if (T == ".b64" || T == ".u64" || T == ".s64" || T == ".f64")
      Bits = 64;
    if (!Bits)
      continue;
    Text += formatv("mov.b{0} {1}, 0;\n", Bits, R).str();
    ++Stats.ZeroedRegisters;
  }
  return Text;
}

Expected<VariantRecord> addPtbVariant(Module &M, const Function &K,
                                      const Legality &L, RewriteStats &Stats) {
  if (!L.PtbOK)
    return internalError("PTB form of a kernel that cannot take it");
  VariantRecord V;
  V.Kind = "ptb";
  V.BarrierId = L.BarrierId;
  uint64_t Orig = paramBytes(K);
  Function &F = addClone(M, K, "ptb");
  V.Name = F.Name.str();
  if (Error E = addParams(M, F, Orig,
                          {{"__tly_ctrl", "control"},
                           {"__tly_grid_x", "grid_x"},
                           {"__tly_grid_y", "grid_y"},
                           {"__tly_grid_z", "grid_z"},
                           {"__tly_chunk", "chunk"}},
                          {"u64", "u32", "u32", "u32", "u32"}, V))
    return std::move(E);

  // Slot layout in shared memory (words): [0] claimed index or -1 (leave),
  // [1..3] the block's x, y, z (only those the kernel reads are decoded),
  // [4] blocks this worker claimed (all finish before it leaves), [5] next
  // index of the claimed chunk, [6] blocks left in it, [7] the counter's
  // value after this worker's last claim. Words 4-7 belong to the leader.
  bool Reads[3] = {false, false, false};
  auto Load = [&](SregUse U) -> std::string {
    if (U.Base == "%nctaid")
      return formatv("ld.param.u32 %__tly_nctaid_{0}, [__tly_grid_{0}];\n", U.Comp).str();
    Reads[U.Comp - 'x'] = true;
    unsigned Off = 4 * (1 + (U.Comp - 'x'));
    return formatv("ld.shared.u32 %__tly_ctaid_{0}, [__tly_slot+{1}];\n", U.Comp, Off).str();
  };
  if (Error E = rewriteGridSregs(M, F, Stats, Load))
    return std::move(E);
  if (L.anyConvergedBarrier())
    if (Error E = addConvBarrierFunc(M, L.BarrierId))
      return std::move(E);
  std::string Conv;
  if (Error E = rewriteSyncSites(M, F, L, Stats, Conv))
    return std::move(E);

  // Decoding keeps few values live: the claimed index, then one divisor at
  // a time.
  std::string Decode;
  if (Reads[0] || Reads[1] || Reads[2])
    Decode += "ld.param.u32 %__tly_t1, [__tly_grid_x];\n";
  // The remainders are skipped where the quotient is already in range (a
  // 1-D grid's x, a 2-D grid's y).
  if (Reads[0])
    Decode += "setp.lt.u32 %__tly_p0, %__tly_t0, %__tly_t1;\n"
              "mov.u32 %__tly_t2, %__tly_t0;\n"
              "@!%__tly_p0 rem.u32 %__tly_t2, %__tly_t0, %__tly_t1;\n"
              "st.shared.u32 [__tly_slot+4], %__tly_t2;\n";
  if (Reads[1] || Reads[2])
    Decode += "div.u32 %__tly_t0, %__tly_t0, %__tly_t1;\n"
              "ld.param.u32 %__tly_t1, [__tly_grid_y];\n";
  if (Reads[1])
    Decode += "setp.lt.u32 %__tly_p0, %__tly_t0, %__tly_t1;\n"
              "mov.u32 %__tly_t2, %__tly_t0;\n"
              "@!%__tly_p0 rem.u32 %__tly_t2, %__tly_t0, %__tly_t1;\n"
              "st.shared.u32 [__tly_slot+8], %__tly_t2;\n";
  if (Reads[2])
    Decode += "div.u32 %__tly_t2, %__tly_t0, %__tly_t1;\n"
              "st.shared.u32 [__tly_slot+12], %__tly_t2;\n";

  // Thread 0 leads; computed where needed so nothing stays live across the
  // body.
  const char *LeaderText = "mov.u32 %__tly_t0, %tid.x;\n"
                           "mov.u32 %__tly_t1, %tid.y;\n"
                           "or.b32 %__tly_t0, %__tly_t0, %__tly_t1;\n"
                           "mov.u32 %__tly_t1, %tid.z;\n"
                           "or.b32 %__tly_t0, %__tly_t0, %__tly_t1;\n"
                           "setp.eq.u32 %__tly_lead, %__tly_t0, 0;\n";
  unsigned B = L.BarrierId;
  std::string Top = std::string(GridSregDecls) + SyncDeclsText +
                    ".reg .b32 %__tly_t<4>;\n"
                    ".reg .b64 %__tly_ctrl, %__tly_w;\n"
                    ".reg .pred %__tly_lead, %__tly_p0;\n"
                    ".shared .align 16 .b32 __tly_slot[8];\n" + LeaderText +
                    "@%__tly_lead st.shared.u32 [__tly_slot+16], 0;\n"
                    "@%__tly_lead st.shared.u32 [__tly_slot+24], 0;\n"
                    "@%__tly_lead st.shared.u32 [__tly_slot+28], 0;\n"
                    // Claim: thread 0 of the block leaves when preempted or
                    // when no block is left.
                    "$__tly_claim:\n" + LeaderText +
                    "@!%__tly_lead bra $__tly_wait;\n"
                    "mov.u32 %__tly_t3, -1;\n"
                    // Blocks left in the chunk claimed last: no atomic, no
                    // flag check (claimed blocks always run).
                    "ld.shared.u32 %__tly_t0, [__tly_slot+24];\n"
                    "setp.ne.u32 %__tly_p0, %__tly_t0, 0;\n"
                    "@%__tly_p0 bra $__tly_take;\n"
                    // One atomic claims the chunk and reads the flag: the
                    // 64-bit add lands on `next` (low word) and returns
                    // the flag (high word) as it was at that moment.
                    //
                    // The chunk: guided self-scheduling, capped by
                    // __tly_chunk (the runtime's bound on the turnaround):
                    // min(__tly_chunk, max(1, left / (2 * workers))), where
                    // `left` counts from the counter value this worker saw
                    // last (slot word 7), so few atomics while much is
                    // left and single blocks at the end, where balance
                    // matters. One counter, so blocks are still claimed in
                    // increasing order.
                    "ld.param.u32 %__tly_t1, [__tly_grid_x];\n"
                    "ld.param.u32 %__tly_t3, [__tly_grid_y];\n"
                    "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t3;\n"
                    "ld.param.u32 %__tly_t3, [__tly_grid_z];\n"
                    "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t3;\n"
                    "ld.shared.u32 %__tly_t0, [__tly_slot+28];\n"
                    "sub.u32 %__tly_t0, %__tly_t1, %__tly_t0;\n"
                    "mov.u32 %__tly_t3, %nctaid.x;\n"
                    "shl.b32 %__tly_t3, %__tly_t3, 1;\n"
                    "div.u32 %__tly_t0, %__tly_t0, %__tly_t3;\n"
                    "ld.param.u32 %__tly_t2, [__tly_chunk];\n"
                    "min.u32 %__tly_t2, %__tly_t2, %__tly_t0;\n"
                    "max.u32 %__tly_t2, %__tly_t2, 1;\n"
                    "ld.param.u64 %__tly_ctrl, [__tly_ctrl];\n"
                    "cvta.to.global.u64 %__tly_ctrl, %__tly_ctrl;\n"
                    "cvt.u64.u32 %__tly_w, %__tly_t2;\n"
                    "atom.global.add.u64 %__tly_w, [%__tly_ctrl], %__tly_w;\n"
                    "mov.b64 {%__tly_t0, %__tly_t1}, %__tly_w;\n"
                    "setp.ne.u32 %__tly_p0, %__tly_t1, 0;\n"
                    "@%__tly_p0 bra $__tly_giveback;\n"
                    "add.u32 %__tly_t3, %__tly_t0, %__tly_t2;\n"
                    "st.shared.u32 [__tly_slot+28], %__tly_t3;\n"
                    "ld.param.u32 %__tly_t1, [__tly_grid_x];\n"
                    "ld.param.u32 %__tly_t3, [__tly_grid_y];\n"
                    "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t3;\n"
                    "ld.param.u32 %__tly_t3, [__tly_grid_z];\n"
                    "mul.lo.u32 %__tly_t1, %__tly_t1, %__tly_t3;\n"
                    "mov.u32 %__tly_t3, -1;\n"
                    "setp.ge.u32 %__tly_p0, %__tly_t0, %__tly_t1;\n"
                    "@%__tly_p0 bra $__tly_publish;\n"
                    // The chunk may run past the grid's end.
                    "sub.u32 %__tly_t1, %__tly_t1, %__tly_t0;\n"
                    "min.u32 %__tly_t2, %__tly_t2, %__tly_t1;\n"
                    "st.shared.u32 [__tly_slot+20], %__tly_t0;\n"
                    "st.shared.u32 [__tly_slot+24], %__tly_t2;\n"
                    // Every block claimed here runs before the worker
                    // leaves: count the chunk as finished now, once.
                    "ld.shared.u32 %__tly_t1, [__tly_slot+16];\n"
                    "add.u32 %__tly_t1, %__tly_t1, %__tly_t2;\n"
                    "st.shared.u32 [__tly_slot+16], %__tly_t1;\n"
                    "$__tly_take:\n"
                    "ld.shared.u32 %__tly_t0, [__tly_slot+20];\n"
                    "ld.shared.u32 %__tly_t2, [__tly_slot+24];\n"
                    "add.u32 %__tly_t1, %__tly_t0, 1;\n"
                    "st.shared.u32 [__tly_slot+20], %__tly_t1;\n"
                    "sub.u32 %__tly_t2, %__tly_t2, 1;\n"
                    "st.shared.u32 [__tly_slot+24], %__tly_t2;\n"
                    "mov.u32 %__tly_t3, %__tly_t0;\n" +
                    Decode +
                    "$__tly_publish:\n"
                    "st.shared.u32 [__tly_slot], %__tly_t3;\n"
                    "$__tly_wait:\n" +
                    formatv("barrier.sync {0};\n", B).str() +
                    "ld.shared.u32 %__tly_t0, [__tly_slot];\n"
                    "setp.eq.u32 %__tly_p0, %__tly_t0, -1;\n"
                    "@%__tly_p0 bra $__tly_exit;\n" + zeroLiveIns(K, Stats);
  auto TopCode = code(M, Top);
  if (!TopCode)
    return TopCode.takeError();
  insertAtTop(F, std::move(*TopCode));

  // After the body: all threads meet and go back to claim the next block.
  auto End = code(M, Conv +
                         "$__tly_done:\n"
                         "bra $__tly_claim;\n"
                         // Leaving: the leader adds the blocks this worker
                         // finished to the done count, with release
                         // semantics so their writes are visible first.
                         "$__tly_exit:\n" + LeaderText +
                         "@!%__tly_lead bra $__tly_ret;\n"
                         "ld.shared.u32 %__tly_t0, [__tly_slot+16];\n"
                         "setp.eq.u32 %__tly_p0, %__tly_t0, 0;\n"
                         "@%__tly_p0 bra $__tly_ret;\n"
                         "ld.param.u64 %__tly_ctrl, [__tly_ctrl];\n"
                         "cvta.to.global.u64 %__tly_ctrl, %__tly_ctrl;\n"
                         "red.release.gpu.global.add.u32 [%__tly_ctrl+8], %__tly_t0;\n"
                         "$__tly_ret:\n"
                         "ret;\n"
                         // Preempted: the leader takes its claim back and
                         // publishes -1 (the worker leaves). Every claim
                         // made after the flag was set is taken back, and
                         // all come after those made before, so once the
                         // workers have left `next` is again the first
                         // block not run.
                         "$__tly_giveback:\n"
                         "mov.u32 %__tly_t3, -1;\n"
                         "cvt.u64.u32 %__tly_w, %__tly_t2;\n"
                         "neg.s64 %__tly_w, %__tly_w;\n"
                         "red.global.add.u64 [%__tly_ctrl], %__tly_w;\n"
                         "bra $__tly_publish;\n");
  if (!End)
    return End.takeError();
  append(F.Body->Body, std::move(*End));
  return std::move(V);
}

} // namespace tally
