//===- Legality.cpp - which preemptible forms a kernel allows -------------===//

#include "tally/Transforms/Legality.h"

#include "tally/Analysis/Divergence.h"
#include "tally/PTX/Printer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Casting.h"

#include <functional>

using namespace llvm;
using namespace tally::ptx;

namespace tally {

unsigned getBarrierIdOperand(const Instruction &I) {
  // bar.red.op.pred d, a, ...; bar.red.popc.u32 d, a, ...; others: a, ...
  return I.hasModifier(".red") ? 1 : 0;
}

static bool isClusterRegister(StringRef R) {
  return R.starts_with("%cluster") || R == "%clusterid" || R == "%nclusterid" ||
         R == "%is_explicit_cluster";
}

static bool isDeviceLaunchCallee(StringRef Name) {
  return Name.starts_with("__cudaCDP") || Name.starts_with("cudaLaunchDevice") ||
         Name.starts_with("cudaGetParameterBuffer");
}

namespace {
/// Accumulates reasons; the first one per form is the one reported, the
/// others become notes so users see every obstacle.
struct Verdict {
  Legality &L;
  void rejectBoth(const std::string &Why) {
    rejectSlice(Why);
    rejectPtb(Why);
  }
  void rejectSlice(const std::string &Why) {
    if (L.SliceOK) {
      L.SliceOK = false;
      L.SliceReason = Why;
    }
  }
  void rejectPtb(const std::string &Why) {
    if (L.PtbOK) {
      L.PtbOK = false;
      L.PtbReason = Why;
    } else if (Why != L.PtbReason && !is_contained(L.Notes, "ptb: " + Why)) {
      L.Notes.push_back("ptb: " + Why);
    }
  }
};
} // namespace

/// Calls of functions that contain full-block barriers (directly or through
/// their own calls). Such a call cannot go through the convergence block,
/// so the PTB form keeps it in place, which is right only when every thread
/// of the block makes the call together and, inside the function, passes
/// each barrier exactly once: the call must be where the divergence
/// analysis proves that no thread of the block has returned and control is
/// the same for all, and in the function (and the functions it calls that
/// way) every barrier and such call must lie on every path from the entry
/// to a return, on no cycle, unguarded, and no recursion may reach them.
static void checkBarrierCalls(const KernelInfo &K, const DivergenceInfo &KernelDI,
                              Verdict &V) {
  StringMap<const FunctionInfo *> ByName;
  for (const FunctionInfo *FI : K.Callees)
    ByName[FI->F->Name] = FI;
  StringSet<> BarrierFuncs;
  for (bool Changed = true; Changed;) {
    Changed = false;
    for (const FunctionInfo *FI : K.Callees) {
      if (BarrierFuncs.contains(FI->F->Name))
        continue;
      bool Has = any_of(FI->Barriers, [](const BarrierSite &B) {
        return B.Scope == BarrierScope::Block && isFullBlockBarrier(*B.I);
      });
      Has |= any_of(FI->Calls, [&](const CallSite &C) {
        return BarrierFuncs.contains(C.Callee);
      });
      if (Has) {
        BarrierFuncs.insert(FI->F->Name);
        Changed = true;
      }
    }
  }
  if (BarrierFuncs.empty())
    return;

  // Inside each such function: barriers and barrier calls on every path,
  // once.
  for (const FunctionInfo *FI : K.Callees) {
    StringRef Name = FI->F->Name;
    if (!BarrierFuncs.contains(Name) || !FI->F->Body)
      continue;
    Function &F = *const_cast<Function *>(FI->F);
    CFG G(F);
    DivergenceInfo DI(F, G);
    auto Straight = [&](const Instruction &I, unsigned Block) {
      return !I.isGuarded() && DI.runsOnceOnEveryPath(Block);
    };
    for (const BarrierSite &B : FI->Barriers)
      if (B.Scope == BarrierScope::Block && isFullBlockBarrier(*B.I) &&
          !Straight(*B.I, B.Block))
        V.rejectPtb("barrier inside function " + Name.str() +
                    " that not every thread calling it passes exactly once");
    for (const CallSite &C : FI->Calls)
      if (BarrierFuncs.contains(C.Callee) && !Straight(*C.I, C.Block))
        V.rejectPtb("call of " + C.Callee.str() + " (which has barriers) inside function " +
                    Name.str() + " that not every thread calling it makes exactly once");
  }
  // Recursion through barrier functions: the depth may differ per thread.
  std::function<bool(StringRef, StringSet<> &)> Cycle = [&](StringRef Fn,
                                                            StringSet<> &Stack) {
    if (!Stack.insert(Fn).second)
      return true;
    const FunctionInfo *FI = ByName.lookup(Fn);
    if (FI)
      for (const CallSite &C : FI->Calls)
        if (BarrierFuncs.contains(C.Callee) && Cycle(C.Callee, Stack))
          return true;
    Stack.erase(Fn);
    return false;
  };
  for (const auto &E : BarrierFuncs) {
    StringSet<> Stack;
    if (Cycle(E.getKey(), Stack)) {
      V.rejectPtb("recursion through function " + E.getKey().str() + ", which has barriers");
      break;
    }
  }

  // In the kernel: each call where all threads are together.
  StringRef Why;
  std::vector<bool> Bad = KernelDI.sitesNeedingConvergence(
      [&](const Instruction &I) {
        return I.getBaseOpcode() == "call" && BarrierFuncs.contains(getCallee(I));
      },
      [](const Instruction &) { return true; }, Why);
  // `Why` describes the last call that needs it: name that one.
  unsigned Ordinal = 0, Kept = 0;
  std::string LastBad;
  for (const CallSite &C : K.Own.Calls) {
    if (!BarrierFuncs.contains(C.Callee))
      continue;
    bool IsBad = Ordinal < Bad.size() && Bad[Ordinal];
    if (IsBad)
      LastBad = C.Callee.str();
    Kept += !IsBad;
    ++Ordinal;
  }
  if (!LastBad.empty())
    V.rejectPtb("barrier inside function " + LastBad + ", called where not all threads of "
                "the block are together (" + Why.str() + ")");
  else if (Kept)
    V.L.Notes.push_back("ptb: " + std::to_string(Kept) +
                        " call(s) of functions with barriers stay in place (every thread "
                        "of the block makes them together)");
}

/// Why the PTB form cannot be written in module \p M: its `.version` or
/// `.target` predates what the form's own code needs; empty when it can.
static std::string ptbModuleObstacle(const Module &M) {
  StringRef Version = M.getVersion(), Target = M.getTarget();
  unsigned Major = 0, Minor = 0, Sm = 0;
  StringRef Rest = Version;
  bool VersionOK = !Rest.consumeInteger(10, Major) && Rest.consume_front(".") &&
                   !Rest.consumeInteger(10, Minor) && Rest.empty();
  Rest = Target;
  bool TargetOK = Rest.consume_front("sm_") && !Rest.consumeInteger(10, Sm);
  if (!VersionOK || !TargetOK)
    return "cannot read the module's .version '" + Version.str() + "' and .target '" +
           Target.str() + "' (the PTB form needs PTX ISA 6.0 and sm_70)";
  if (Major >= 6 && Sm >= 70)
    return {};
  return "the module's .version " + Version.str() + " and .target " + Target.str() +
         " predate what the PTB form's code needs (PTX ISA 6.0 and sm_70: barrier, "
         "bar.warp.sync, red.release.gpu)";
}

Legality checkLegality(const KernelInfo &K, const Module &M) {
  Legality L;
  Verdict V{L};
  const Function &F = *K.Own.F;
  if (std::string Why = ptbModuleObstacle(M); !Why.empty())
    V.rejectPtb(Why);

  // Names we would add must be free.
  bool Clash = false;
  for (const VarDecl &P : F.Params)
    for (const Declarator &X : P.Decls)
      if (X.Name.starts_with(ReservedPrefix))
        Clash = true;
  walkStmts(F.Body->Body, [&](Stmt &S) {
    if (auto *IS = dyn_cast<InstStmt>(&S))
      for (const Operand &O : IS->I.Ops)
        O.forEachToken([&](const Token &T) {
          if (T.is(TokKind::Ident) &&
              T.Text.ltrim("%$").starts_with(ReservedPrefix))
            Clash = true;
        });
    if (auto *D = dyn_cast<DeclStmt>(&S))
      for (const Declarator &X : D->D.Decls)
        if (X.Name.ltrim("%$").starts_with(ReservedPrefix))
          Clash = true;
  });
  if (Clash)
    V.rejectBoth(std::string("uses names starting with '") + ReservedPrefix +
                 "', which Tally reserves");

  for (const Directive &D : F.Directives)
    if (D.Name == ".reqnctapercluster" || D.Name == ".explicitcluster" ||
        D.Name == ".maxclusterrank")
      V.rejectBoth("thread-block clusters (" + D.Name.str() + ")");

  std::vector<const FunctionInfo *> All{&K.Own};
  All.insert(All.end(), K.Callees.begin(), K.Callees.end());
  if (K.HasIndirectCalls)
    V.rejectBoth("indirect call (callees unknown)");

  for (const FunctionInfo *FI : All) {
    bool IsKernel = FI == &K.Own;
    std::string Where = IsKernel ? "" : " in function " + FI->F->Name.str();
    for (auto &[Reg, N] : FI->SpecialRegs) {
      StringRef R(Reg);
      StringRef Base = R.split('.').first;
      if (Base.starts_with("%envreg"))
        V.rejectBoth("grid-wide synchronisation (reads " + Reg +
                     ", the cooperative-launch workspace)" + Where);
      else if (isClusterRegister(Base))
        V.rejectBoth("thread-block clusters (reads " + Reg + ")" + Where);
      else if (Base == "%ctaid" || Base == "%nctaid") {
        if (!R.contains('.'))
          V.rejectBoth("reads " + Reg + " as a vector" + Where);
        else if (!IsKernel)
          V.rejectBoth("reads " + Reg + " in non-inlined function " +
                       FI->F->Name.str());
        if (Base == "%nctaid")
          L.ReadsGridSize = true;
      }
    }
    for (const CallSite &C : FI->Calls)
      if (isDeviceLaunchCallee(C.Callee))
        V.rejectBoth("dynamic parallelism (calls " + C.Callee.str() + ")" + Where);
    for (const BarrierSite &B : FI->Barriers) {
      if (B.Scope == BarrierScope::Cluster) {
        V.rejectBoth("thread-block clusters (" + B.I->Opcode.str() + ")" + Where);
        continue;
      }
      if (B.Scope != BarrierScope::Block)
        continue;
      if (B.I->hasModifier(".red") && !B.HasThreadCount)
        L.HasReductionBarriers = true;
    }
    if (!IsKernel)
      for (const Site &R : FI->Returns)
        if (R.I->getBaseOpcode() == "exit")
          V.rejectPtb("exit inside function " + FI->F->Name.str());
  }

  // Instructions the PTB loop cannot repeat or that pin a block to its SM.
  walkStmts(F.Body->Body, [&](Stmt &S) {
    auto *IS = dyn_cast<InstStmt>(&S);
    if (!IS)
      return;
    StringRef Base = IS->I.getBaseOpcode();
    if (Base == "setmaxnreg")
      V.rejectPtb("setmaxnreg (per-warp register reallocation) cannot repeat "
                  "in a persistent loop");
    if (Base == "mapa")
      V.rejectBoth("thread-block clusters (mapa: distributed shared memory)");
  });

  // A hardware barrier for the PTB variant: counted barriers stay where they
  // are, so their ids must be known and differ from ours.
  bool Used[16] = {};
  for (const FunctionInfo *FI : All)
  for (const BarrierSite &B : FI->Barriers) {
    if (B.Scope != BarrierScope::Block || !B.HasThreadCount)
      continue;
    unsigned Idx = getBarrierIdOperand(*B.I);
    unsigned Id = 0;
    if (Idx >= B.I->Ops.size() || B.I->Ops[Idx].Toks.size() != 1 ||
        B.I->Ops[Idx].Toks[0].Text.getAsInteger(0, Id) || Id > 15) {
      std::string Text;
      raw_string_ostream OS(Text);
      printInstruction(*B.I, OS);
      V.rejectPtb("barrier id is not a constant (" + Text + ")");
      continue;
    }
    Used[Id] = true;
  }
  // The lowest free id: ptxas reserves barriers up to the highest id used.
  int Free = -1;
  for (int Id = 0; Id < 16 && Free < 0; ++Id)
    if (!Used[Id])
      Free = Id;
  if (Free < 0)
    V.rejectPtb("all 16 hardware barriers are in use");
  else
    L.BarrierId = Free;

  {
    CFG G(*const_cast<Function *>(&F));
    DivergenceInfo DI(*const_cast<Function *>(&F), G);
    StringRef Why;
    L.ConvergeBarrier = DI.barriersNeedingConvergence(Why);
    if (L.anyConvergedBarrier())
      L.Notes.push_back(("ptb: " + std::to_string(count(L.ConvergeBarrier, true)) +
                         " barrier(s) go through the convergence block: " + Why).str());
    checkBarrierCalls(K, DI, V);
  }

  uint64_t Extra = 28; // the larger of the two variants' additions
  if (K.Own.ParamBytes + Extra > MaxParamBytes)
    V.rejectBoth("parameter space: " + std::to_string(K.Own.ParamBytes) +
                 " bytes of parameters leave no room for Tally's " +
                 std::to_string(Extra));

  if (L.ReadsGridSize)
    L.Notes.push_back("reads %nctaid: grid-stride or persistent loop; "
                      "variants keep the original grid size");
  for (const FunctionInfo *FI : All)
    for (const CallSite &C : FI->Calls)
      if (C.Callee == "__assertfail" || C.Callee == "vprintf")
        if (!is_contained(L.Notes, "calls " + C.Callee.str()))
          L.Notes.push_back("calls " + C.Callee.str());
  return L;
}

} // namespace tally
