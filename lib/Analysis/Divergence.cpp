//===- Divergence.cpp - block-uniform control flow ------------------------===//

#include "tally/Analysis/Divergence.h"
#include "tally/Analysis/KernelInfo.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/SmallVector.h"

using namespace llvm;
using namespace tally::ptx;

namespace tally {

namespace {

/// Opcodes whose first operand is not a register they write (stores,
/// branches, barriers, fences, copies into memory, ...). `bar.red` and
/// `barrier.red` do write one, but its value is the same for every thread
/// of the block, so leaving it untracked (uses then see no definition:
/// uniform) is exact.
bool writesNoRegister(const Instruction &I) {
  StringRef Base = I.getBaseOpcode();
  static const StringRef NoDef[] = {
      "st",       "red",       "bar",       "barrier",    "bra",
      "brx",      "call",      "ret",       "exit",       "trap",
      "membar",   "fence",     "prefetch",  "prefetchu",  "griddepcontrol",
      "stmatrix", "tensormap", "setmaxnreg", "nanosleep", "pmevent",
      "brkpt",    "discard",   "applypriority", "sust",   "sured"};
  if (is_contained(NoDef, Base))
    return true;
  if (Base == "cp")
    return !I.Opcode.starts_with("cp.async.mbarrier");
  if (Base == "multimem")
    return !I.hasModifier(".ld_reduce");
  return false;
}

bool isDivergentSource(StringRef Reg) {
  return Reg == "%tid" || Reg == "%laneid" || Reg == "%warpid" ||
         Reg.starts_with("%lanemask") || Reg.starts_with("%clock") ||
         Reg.starts_with("%globaltimer") || Reg == "%dynamic_smem_size";
}

/// Results that differ between threads whatever the operands.
bool isInherentlyDivergent(const Instruction &I, const StringSet<> &KernelParams) {
  StringRef Base = I.getBaseOpcode();
  if (Base == "atom" || Base == "shfl" || Base == "vote" || Base == "activemask" ||
      Base == "redux" || Base == "match" || Base == "elect" || Base == "mbarrier" ||
      Base == "wgmma" || Base == "wmma" || Base == "mma" || Base == "ldmatrix" ||
      Base == "tex" || Base == "tld4" || Base == "suld" || Base == "txq" ||
      Base == "suq" || Base == "multimem")
    return true;
  if (Base == "ld" || Base == "ldu") {
    // Kernel parameters and constants are the same for every thread.
    if (I.hasModifier(".const"))
      return false;
    if (I.hasModifier(".param")) {
      if (I.Ops.size() >= 2 && I.Ops[1].K == Operand::Kind::Address &&
          !I.Ops[1].Elems.empty()) {
        const Operand &A = I.Ops[1].Elems.front();
        if (!A.Toks.empty() && KernelParams.contains(A.Toks.front().Text))
          return false;
      }
      return true; // a call's return value
    }
    // A weak load from the same address gives every thread the same value
    // in a program without data races (a concurrent write would be one).
    // Loads with stronger semantics are how threads watch memory others
    // write, and local memory is per thread: those differ. The address
    // itself is checked as an operand.
    return I.hasModifier(".local") || I.hasModifier(".volatile") ||
           I.hasModifier(".relaxed") || I.hasModifier(".acquire") ||
           I.hasModifier(".mmio");
  }
  return false;
}

void forEachReg(const Operand &O, const std::function<void(StringRef)> &Fn) {
  O.forEachToken([&](const Token &T) {
    if (T.is(TokKind::Ident) && T.Text.starts_with("%"))
      Fn(T.Text);
  });
}

} // namespace

void getDefs(const Instruction &I, SmallVectorImpl<StringRef> &Defs) {
  if (I.Ops.empty() || writesNoRegister(I))
    return;
  forEachReg(I.Ops[0], [&](StringRef R) {
    if (!isSpecialRegister(R))
      Defs.push_back(R);
  });
}

DivergenceInfo::DivergenceInfo(Function &F, const CFG &G) : G(G) {
  unsigned N = G.blocks().size();
  DivRegion.resize(N);

  // Post-dominators, with a virtual exit after every block without
  // successors. A block that ends in `trap` aborts the whole grid (device
  // asserts end so): it constrains nothing, as if every block
  // post-dominated it.
  auto Traps = [&](const BasicBlock &BB) {
    return !BB.Insts.empty() && BB.Insts.back()->getBaseOpcode() == "trap" &&
           !BB.Insts.back()->isGuarded();
  };
  PostDom.assign(N, BitVector(N, true));
  bool Changed = true;
  while (Changed) {
    Changed = false;
    for (int B = N - 1; B >= 0; --B) {
      const BasicBlock &BB = G.blocks()[B];
      if (Traps(BB))
        continue;
      BitVector New(N, BB.Succs.empty() ? false : true);
      for (unsigned S : BB.Succs)
        New &= PostDom[S];
      New.set(B);
      if (New != PostDom[B]) {
        PostDom[B] = std::move(New);
        Changed = true;
      }
    }
  }

  StringSet<> KernelParams;
  for (const VarDecl &P : F.Params)
    for (const Declarator &X : P.Decls)
      KernelParams.insert(X.Name);

  // Definitions: one per (instruction, register it writes). PTX registers
  // are often written more than once, so divergence is tracked per
  // definition, and a use is divergent when a divergent definition reaches
  // it.
  struct Def {
    const Instruction *I;
    StringRef Reg;
  };
  std::vector<Def> Defs;
  StringMap<SmallVector<unsigned, 4>> DefsOf;
  DenseMap<const Instruction *, SmallVector<unsigned, 2>> DefsAt;
  for (const BasicBlock &BB : G.blocks())
    for (const Instruction *I : BB.Insts) {
      SmallVector<StringRef, 4> Regs;
      getDefs(*I, Regs);
      for (StringRef R : Regs) {
        DefsOf[R].push_back(Defs.size());
        DefsAt[I].push_back(Defs.size());
        Defs.push_back({I, R});
      }
    }
  unsigned ND = Defs.size();
  // A definition kills the others of its register unless it is guarded.
  auto Apply = [&](const Instruction *I, BitVector &Live) {
    auto It = DefsAt.find(I);
    if (It == DefsAt.end())
      return;
    for (unsigned D : It->second) {
      if (!I->isGuarded())
        for (unsigned K : DefsOf[Defs[D].Reg])
          Live.reset(K);
      Live.set(D);
    }
  };
  std::vector<BitVector> In(N, BitVector(ND)), Out(N, BitVector(ND));
  Changed = true;
  while (Changed) {
    Changed = false;
    for (const BasicBlock &BB : G.blocks()) {
      BitVector Cur(ND);
      for (unsigned P : BB.Preds)
        Cur |= Out[P];
      In[BB.Index] = Cur;
      for (const Instruction *I : BB.Insts)
        Apply(I, Cur);
      if (Cur != Out[BB.Index]) {
        Out[BB.Index] = std::move(Cur);
        Changed = true;
      }
    }
  }

  // Fixed point over data and control dependence.
  BitVector DivDef(ND);
  Changed = true;
  while (Changed) {
    Changed = false;
    for (const BasicBlock &BB : G.blocks()) {
      BitVector Cur = In[BB.Index];
      auto UseDiv = [&](StringRef R) {
        if (isSpecialRegister(R))
          return isDivergentSource(R);
        auto It = DefsOf.find(R);
        if (It == DefsOf.end())
          return false; // never written here: undefined, same for all
        for (unsigned D : It->second)
          if (Cur.test(D) && DivDef.test(D))
            return true;
        return false;
      };
      for (const Instruction *I : BB.Insts) {
        bool Guard = I->isGuarded() && UseDiv(I->Guard);
        bool Index = false;
        if (I->getBaseOpcode() == "brx" && !I->Ops.empty())
          forEachReg(I->Ops[0], [&](StringRef R) { Index |= UseDiv(R); });
        bool &Known = GuardDivergent[I];
        if ((Guard || Index) && !Known) {
          Known = true;
          Changed = true;
        }
        auto It = DefsAt.find(I);
        if (It != DefsAt.end()) {
          bool Div = DivRegion.test(BB.Index) || Guard ||
                     isInherentlyDivergent(*I, KernelParams);
          // The first operand of a defining instruction is written, but a
          // vector or `|` destination may also be read (wgmma accumulators):
          // every register operand counts as a use.
          for (size_t O = 0; O < I->Ops.size() && !Div; ++O)
            forEachReg(I->Ops[O], [&](StringRef R) { Div |= UseDiv(R); });
          if (Div)
            for (unsigned D : It->second)
              if (!DivDef.test(D)) {
                DivDef.set(D);
                Changed = true;
              }
        }
        Apply(I, Cur);
      }
    }
    for (const BasicBlock &BB : G.blocks()) {
      if (BB.Insts.empty() || !isDivergentBranch(*BB.Insts.back()))
        continue;
      BitVector R = influenceRegion(BB.Index);
      BitVector Old = DivRegion;
      DivRegion |= R;
      Changed |= DivRegion != Old;
    }
  }
}

bool DivergenceInfo::isDivergentBranch(const Instruction &I) const {
  StringRef Base = I.getBaseOpcode();
  bool Branchy = Base == "bra" || Base == "brx" || Base == "ret" || Base == "exit";
  if (!Branchy)
    return false;
  auto It = GuardDivergent.find(&I);
  return It != GuardDivergent.end() && It->second;
}

BitVector DivergenceInfo::reachableFrom(unsigned From) const {
  BitVector Seen(G.blocks().size());
  SmallVector<unsigned, 16> Work{From};
  while (!Work.empty()) {
    unsigned B = Work.pop_back_val();
    if (Seen.test(B))
      continue;
    Seen.set(B);
    for (unsigned S : G.blocks()[B].Succs)
      Work.push_back(S);
  }
  return Seen;
}

BitVector DivergenceInfo::influenceRegion(unsigned B) const {
  unsigned N = G.blocks().size();
  BitVector Stop = PostDom[B];
  Stop.reset(B);
  BitVector Seen(N);
  SmallVector<unsigned, 16> Work(G.blocks()[B].Succs.begin(), G.blocks()[B].Succs.end());
  while (!Work.empty()) {
    unsigned X = Work.pop_back_val();
    if (Seen.test(X) || Stop.test(X))
      continue;
    Seen.set(X);
    for (unsigned S : G.blocks()[X].Succs)
      Work.push_back(S);
  }
  return Seen;
}


BitVector DivergenceInfo::blocksAfterReturn() const {
  unsigned N = G.blocks().size();
  BitVector ReturnBlocks(N);
  for (const BasicBlock &BB : G.blocks())
    for (const Instruction *I : BB.Insts)
      if (I->getBaseOpcode() == "ret" || I->getBaseOpcode() == "exit")
        ReturnBlocks.set(BB.Index);

  // Blocks that run after some threads of the block may have returned:
  // reachable from a divergent branch that decides whether threads return.
  BitVector AfterReturn(N);
  for (const BasicBlock &BB : G.blocks()) {
    if (BB.Insts.empty() || !isDivergentBranch(*BB.Insts.back()))
      continue;
    const Instruction &Br = *BB.Insts.back();
    bool DecidesReturn = influenceRegion(BB.Index).anyCommon(ReturnBlocks) ||
                         Br.getBaseOpcode() == "ret" || Br.getBaseOpcode() == "exit";
    if (!DecidesReturn)
      continue;
    for (unsigned S : BB.Succs)
      AfterReturn |= reachableFrom(S);
  }
  return AfterReturn;
}

std::vector<bool> DivergenceInfo::sitesNeedingConvergence(
    function_ref<bool(const Instruction &)> IsSite,
    function_ref<bool(const Instruction &)> IsFullBlock, StringRef &Why) const {
  BitVector AfterReturn = blocksAfterReturn();
  std::vector<bool> Merge;
  for (const BasicBlock &BB : G.blocks())
    for (const Instruction *I : BB.Insts) {
      if (!IsSite(*I))
        continue;
      bool M = false;
      if (IsFullBlock(*I)) {
        if (auto G = GuardDivergent.find(I); G != GuardDivergent.end() && G->second) {
          M = true;
          Why = "a barrier runs under a condition that differs between threads";
        } else if (DivRegion.test(BB.Index)) {
          M = true;
          Why = "a barrier runs in control flow that differs between threads";
        } else if (AfterReturn.test(BB.Index)) {
          M = true;
          Why = "threads may return while others still have a barrier ahead";
        }
      }
      Merge.push_back(M);
    }
  return Merge;
}

std::vector<bool> DivergenceInfo::barriersNeedingConvergence(StringRef &Why) const {
  return sitesNeedingConvergence(
      [](const Instruction &I) {
        return I.getBaseOpcode() == "bar" || I.getBaseOpcode() == "barrier";
      },
      [](const Instruction &I) { return isFullBlockBarrier(I); }, Why);
}

bool DivergenceInfo::runsOnceOnEveryPath(unsigned Block) const {
  if (!PostDom[0].test(Block))
    return false;
  for (unsigned S : G.blocks()[Block].Succs)
    if (reachableFrom(S).test(Block))
      return false;
  return true;
}

} // namespace tally
