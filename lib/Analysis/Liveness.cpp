//===- Liveness.cpp - registers read before they are written --------------===//

#include "tally/Analysis/Liveness.h"
#include "tally/Analysis/Divergence.h"
#include "tally/Analysis/KernelInfo.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>

using namespace llvm;
using namespace tally::ptx;

namespace tally {

std::vector<std::string> getLiveInRegisters(const CFG &G) {
  StringMap<unsigned> Index;
  std::vector<StringRef> Names;
  auto Id = [&](StringRef R) {
    auto [It, New] = Index.try_emplace(R, Names.size());
    if (New)
      Names.push_back(R);
    return It->second;
  };
  // Per block: registers read before a write in the block (Use), and
  // registers written unconditionally (Def).
  struct Sets {
    SmallVector<unsigned, 16> Use, Def;
  };
  std::vector<Sets> Local(G.blocks().size());
  for (const BasicBlock &BB : G.blocks()) {
    Sets &S = Local[BB.Index];
    llvm::DenseSet<unsigned> Written;
    auto Read = [&](StringRef R) {
      if (!R.starts_with("%") || isSpecialRegister(R))
        return;
      unsigned I = Id(R);
      if (!Written.contains(I))
        S.Use.push_back(I);
    };
    for (const Instruction *I : BB.Insts) {
      SmallVector<StringRef, 4> Defs;
      getDefs(*I, Defs);
      if (I->isGuarded())
        Read(I->Guard);
      for (size_t O = Defs.empty() ? 0 : 1; O < I->Ops.size(); ++O)
        I->Ops[O].forEachToken([&](const Token &T) {
          if (T.is(TokKind::Ident))
            Read(T.Text);
        });
      if (!I->isGuarded())
        for (StringRef D : Defs) {
          unsigned X = Id(D);
          if (Written.insert(X).second)
            S.Def.push_back(X);
        }
    }
  }

  unsigned N = Names.size();
  std::vector<BitVector> In(G.blocks().size(), BitVector(N));
  for (bool Changed = true; Changed;) {
    Changed = false;
    for (int B = (int)G.blocks().size() - 1; B >= 0; --B) {
      BitVector Cur(N);
      for (unsigned S : G.blocks()[B].Succs)
        Cur |= In[S];
      for (unsigned D : Local[B].Def)
        Cur.reset(D);
      for (unsigned U : Local[B].Use)
        Cur.set(U);
      if (Cur != In[B]) {
        In[B] = std::move(Cur);
        Changed = true;
      }
    }
  }
  std::vector<std::string> Out;
  if (!G.blocks().empty())
    for (unsigned R : In[0].set_bits())
      Out.push_back(Names[R].str());
  std::sort(Out.begin(), Out.end());
  return Out;
}

} // namespace tally
