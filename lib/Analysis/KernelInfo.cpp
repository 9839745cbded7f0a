//===- KernelInfo.cpp - what a kernel uses --------------------------------===//

#include "tally/Analysis/KernelInfo.h"

#include "tally/PTX/Printer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Casting.h"
#include "llvm/Support/MathExtras.h"

using namespace llvm;
using namespace tally::ptx;

namespace tally {

unsigned getTypeSize(StringRef Type) {
  if (Type == ".pred")
    return 1;
  if (Type == ".bf16" || Type == ".e4m3" || Type == ".e5m2")
    return Type == ".bf16" ? 2 : 1;
  if (Type == ".f16x2" || Type == ".bf16x2")
    return 4;
  if (Type.size() < 3 || !is_contained(StringRef("bsuf"), Type[1]))
    return 0;
  unsigned Bits = 0;
  if (Type.drop_front(2).getAsInteger(10, Bits) || Bits % 8)
    return 0;
  return Bits / 8;
}

/// Total byte size of one declarator: type x vector x array dimensions.
/// Returns 0 for unsized (`[]`) or unparseable dimensions.
static uint64_t getDeclSize(const VarDecl &D, const Declarator &X) {
  uint64_t Size = uint64_t(getTypeSize(D.getType())) * D.getVectorWidth();
  for (const TokenList &Dim : X.Dims) {
    uint64_t N = 0;
    if (Dim.size() != 1 || Dim[0].Text.getAsInteger(0, N))
      return 0;
    Size *= N;
  }
  return Size;
}

/// The alignment a parameter declares for itself. In
/// `.param .u64 .ptr .global .align 16 p` the `.align` after `.ptr` is that
/// of the memory p points to; p itself is aligned like its type.
static unsigned getParamAlign(const VarDecl &P) {
  for (size_t I = 0; I + 1 < P.Attrs.size(); ++I) {
    if (P.Attrs[I].isDot(".ptr"))
      break;
    unsigned V = 0;
    if (P.Attrs[I].isDot(".align") && !P.Attrs[I + 1].Text.getAsInteger(0, V))
      return V;
  }
  return 0;
}

std::vector<ParamInfo> getParamLayout(const Function &F, uint64_t &Bytes) {
  std::vector<ParamInfo> Params;
  uint64_t Offset = 0;
  for (const VarDecl &P : F.Params) {
    if (P.Decls.empty())
      continue;
    ParamInfo PI;
    PI.Name = P.Decls.front().Name;
    PI.Type = P.getType();
    PI.Size = getDeclSize(P, P.Decls.front());
    unsigned Align = getParamAlign(P);
    PI.Align = Align ? Align : std::max(1u, getTypeSize(PI.Type));
    Offset = alignTo(Offset, PI.Align);
    PI.Offset = Offset;
    Offset += PI.Size;
    Params.push_back(PI);
  }
  Bytes = Offset;
  return Params;
}

static BarrierScope classifyBarrier(const Instruction &I, bool &IsBarrier) {
  StringRef Base = I.getBaseOpcode();
  IsBarrier = Base == "bar" || Base == "barrier";
  if (!IsBarrier)
    return BarrierScope::Block;
  if (I.hasModifier(".warp"))
    return BarrierScope::Warp;
  if (I.hasModifier(".cluster"))
    return BarrierScope::Cluster;
  return BarrierScope::Block;
}

bool isFullBlockBarrier(const Instruction &I) {
  StringRef Base = I.getBaseOpcode();
  if ((Base != "bar" && Base != "barrier") || I.hasModifier(".warp") ||
      I.hasModifier(".cluster"))
    return false;
  return !hasThreadCount(I);
}

StringRef getCallee(const Instruction &I) {
  for (const Operand &O : I.Ops) {
    if (O.K == Operand::Kind::Paren)
      continue;
    if (auto Sym = O.getSymbol())
      return *Sym;
    break;
  }
  return {};
}

bool hasThreadCount(const Instruction &I) {
  bool IsRed = I.hasModifier(".red");
  bool IsArrive = I.hasModifier(".arrive");
  size_t N = I.Ops.size();
  if (IsArrive)
    return true; // bar.arrive a, b always has one
  if (IsRed)
    return N >= 4; // d, a, b, c
  return N >= 2; // a, b
}

static std::unique_ptr<FunctionInfo>
analyzeFunction(Function &F, const StringSet<> &ModuleSymbols) {
  auto FI = std::make_unique<FunctionInfo>();
  FI->F = &F;
  FI->Params = getParamLayout(F, FI->ParamBytes);
  if (!F.Body)
    return FI;

  CFG G(F);
  FI->NumBlocks = G.blocks().size();
  StringSet<> SeenSymbols;
  walkStmts(F.Body->Body, [&](Stmt &S) {
    if (auto *D = dyn_cast<DeclStmt>(&S)) {
      if (D->D.getStateSpace() == ".shared" && !D->D.hasAttr(".extern"))
        for (const Declarator &X : D->D.Decls)
          FI->LocalSharedBytes += getDeclSize(D->D, X);
      return;
    }
    auto *IS = dyn_cast<InstStmt>(&S);
    if (!IS)
      return;
    Instruction &I = IS->I;
    ++FI->NumInstructions;
    const BasicBlock *B = G.getBlock(&I);
    unsigned BI = B ? B->Index : 0;
    for (const Operand &O : I.Ops) {
      // Special registers, with their component: %ctaid.x.
      std::optional<StringRef> PendingReg;
      O.forEachToken([&](const Token &T) {
        if (PendingReg) {
          std::string Name = PendingReg->str();
          if (T.is(TokKind::DotWord) && !T.SpaceBefore)
            Name += T.Text.str();
          ++FI->SpecialRegs[Name];
          PendingReg.reset();
          if (T.is(TokKind::DotWord) && !T.SpaceBefore)
            return;
        }
        if (T.is(TokKind::Ident) && isSpecialRegister(T.Text))
          PendingReg = T.Text;
        else if (T.is(TokKind::Ident) && ModuleSymbols.contains(T.Text) &&
                 SeenSymbols.insert(T.Text).second)
          FI->Symbols.push_back(T.Text);
      });
      if (PendingReg)
        ++FI->SpecialRegs[PendingReg->str()];
    }
    bool IsBarrier;
    BarrierScope Scope = classifyBarrier(I, IsBarrier);
    if (IsBarrier) {
      FI->Barriers.push_back({&I, BI, Scope,
                              Scope == BarrierScope::Block && hasThreadCount(I)});
    } else if (isReturnLike(I)) {
      FI->Returns.push_back({&I, BI});
    } else if (I.getBaseOpcode() == "call") {
      FI->Calls.push_back({&I, BI, getCallee(I)});
    }
  });
  return FI;
}

ModuleInfo::ModuleInfo(Module &M) {
  StringSet<> ModuleSymbols;
  StringMap<const VarDecl *> SharedVars;
  for (TopItem &I : M.Items) {
    if (I.getKind() == TopItem::Kind::Var)
      for (const Declarator &X : I.Var.Decls) {
        ModuleSymbols.insert(X.Name);
        if (I.Var.getStateSpace() == ".shared")
          SharedVars[X.Name] = &I.Var;
      }
    else if (I.getKind() == TopItem::Kind::Function)
      ModuleSymbols.insert(I.Func->Name);
  }
  for (Function *F : M.functions())
    if (!F->isDeclaration())
      Funcs[F->Name.str()] = analyzeFunction(*F, ModuleSymbols);

  for (Function *F : M.kernels()) {
    KernelInfo K;
    K.Own = *Funcs[F->Name.str()];
    // Reachable callees, breadth first.
    SmallPtrSet<const FunctionInfo *, 8> Seen;
    std::vector<const FunctionInfo *> Work{&K.Own};
    for (size_t W = 0; W < Work.size(); ++W) {
      for (const CallSite &C : Work[W]->Calls) {
        if (C.Callee.empty()) {
          K.HasIndirectCalls = true;
          continue;
        }
        const FunctionInfo *CI = getFunction(C.Callee);
        if (CI && Seen.insert(CI).second) {
          K.Callees.push_back(CI);
          Work.push_back(CI);
        }
      }
    }
    K.StaticSharedBytes = K.Own.LocalSharedBytes;
    StringSet<> Counted;
    for (const FunctionInfo *FI : Work) {
      if (FI != &K.Own)
        K.StaticSharedBytes += FI->LocalSharedBytes;
      for (StringRef Sym : FI->Symbols) {
        auto It = SharedVars.find(Sym);
        if (It == SharedVars.end() || !Counted.insert(Sym).second)
          continue;
        const VarDecl &V = *It->second;
        for (const Declarator &X : V.Decls) {
          if (X.Name != Sym)
            continue;
          if (V.hasAttr(".extern"))
            K.UsesDynamicShared = true;
          else
            K.StaticSharedBytes += getDeclSize(V, X);
        }
      }
    }
    Kernels.push_back(std::move(K));
  }
}

const FunctionInfo *ModuleInfo::getFunction(StringRef Name) const {
  auto It = Funcs.find(Name);
  return It == Funcs.end() ? nullptr : It->second.get();
}

static std::string instText(const Instruction &I) {
  std::string S;
  raw_string_ostream OS(S);
  printInstruction(I, OS);
  return S;
}

static void printSites(const FunctionInfo &FI, StringRef Indent,
                       raw_ostream &OS) {
  StringRef In = FI.F->Name;
  for (const BarrierSite &B : FI.Barriers) {
    OS << Indent << "- barrier: " << instText(*B.I) << " (";
    OS << (B.Scope == BarrierScope::Block  ? "block"
           : B.Scope == BarrierScope::Warp ? "warp"
                                           : "cluster");
    if (B.HasThreadCount)
      OS << ", thread count";
    OS << ") in " << In << " block " << B.Block << '\n';
  }
  for (const Site &R : FI.Returns)
    OS << Indent << "- " << R.I->getBaseOpcode() << ": " << instText(*R.I)
       << (R.I->isGuarded() ? " (guarded)" : "") << " in " << In << " block "
       << R.Block << '\n';
  for (const CallSite &C : FI.Calls)
    OS << Indent << "- call: " << (C.Callee.empty() ? "<indirect>" : C.Callee)
       << " in " << In << " block " << C.Block << '\n';
}

void printKernelInfo(const KernelInfo &K, raw_ostream &OS) {
  const FunctionInfo &F = K.Own;
  OS << "kernel " << F.F->Name << '\n';
  OS << "  params: " << F.Params.size() << " (" << F.ParamBytes << " bytes)\n";
  for (const ParamInfo &P : F.Params)
    OS << "    - " << P.Name << ": " << (P.Type.empty() ? "?" : P.Type)
       << " size " << P.Size << " align " << P.Align << " offset " << P.Offset
       << '\n';
  OS << "  directives:";
  if (F.F->Directives.empty())
    OS << " none";
  for (size_t I = 0; I < F.F->Directives.size(); ++I) {
    const Directive &D = F.F->Directives[I];
    OS << (I ? "; " : " ") << D.Name;
    if (!D.Args.empty()) {
      OS << ' ';
      printTokens(D.Args, OS);
    }
  }
  OS << '\n';

  // Special registers of the kernel and its callees.
  std::map<std::string, unsigned> Regs = F.SpecialRegs;
  for (const FunctionInfo *C : K.Callees)
    for (auto &[R, N] : C->SpecialRegs)
      Regs[R] += N;
  OS << "  special-registers:";
  if (Regs.empty())
    OS << " none";
  bool First = true;
  for (auto &[R, N] : Regs) {
    OS << (First ? " " : ", ") << R;
    First = false;
  }
  OS << '\n';

  auto Count = [&](auto Member) {
    size_t N = (F.*Member).size();
    for (const FunctionInfo *C : K.Callees)
      N += (C->*Member).size();
    return N;
  };
  OS << "  barriers: " << Count(&FunctionInfo::Barriers) << '\n';
  OS << "  returns: " << Count(&FunctionInfo::Returns) << '\n';
  OS << "  calls: " << Count(&FunctionInfo::Calls)
     << (K.HasIndirectCalls ? " (indirect calls present)" : "") << '\n';
  OS << "  sites:";
  bool AnySite = !F.Barriers.empty() || !F.Returns.empty() || !F.Calls.empty();
  for (const FunctionInfo *C : K.Callees)
    AnySite |= !C->Barriers.empty() || !C->Returns.empty() || !C->Calls.empty();
  OS << (AnySite ? "\n" : " none\n");
  printSites(F, "    ", OS);
  for (const FunctionInfo *C : K.Callees)
    printSites(*C, "    ", OS);
  OS << "  callees:";
  if (K.Callees.empty())
    OS << " none";
  for (size_t I = 0; I < K.Callees.size(); ++I)
    OS << (I ? ", " : " ") << K.Callees[I]->F->Name;
  OS << '\n';
  OS << "  shared-memory: " << K.StaticSharedBytes << " bytes static"
     << (K.UsesDynamicShared ? ", dynamic" : "") << '\n';
  OS << "  blocks: " << F.NumBlocks << ", instructions: " << F.NumInstructions
     << '\n';
}

void ModuleInfo::print(raw_ostream &OS) const {
  for (const KernelInfo &K : Kernels)
    printKernelInfo(K, OS);
}

} // namespace tally
