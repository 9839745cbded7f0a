//===- CFG.cpp - basic blocks and control flow of a PTX function ----------===//

#include "tally/PTX/CFG.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Casting.h"

using namespace llvm;

namespace tally::ptx {

bool isReturnLike(const Instruction &I) {
  StringRef B = I.getBaseOpcode();
  return B == "ret" || B == "exit" || B == "trap";
}

bool isTerminator(const Instruction &I) {
  StringRef B = I.getBaseOpcode();
  return B == "bra" || B == "brx" || isReturnLike(I);
}

CFG::CFG(Function &F) {
  assert(F.Body && "CFG of a declaration");
  // .branchtargets lists, by the label that names them. Labels of
  // `.branchtargets`, `.calltargets` and `.callprototype` name data, not
  // code: they start no block.
  StringMap<SmallVector<StringRef, 8>> TargetLists;
  StringSet<> DataLabels;
  {
    StringRef PendingLabel;
    walkStmts(F.Body->Body, [&](Stmt &S) {
      if (auto *L = dyn_cast<LabelStmt>(&S)) {
        PendingLabel = L->Name;
        return;
      }
      auto *D = dyn_cast<DirectiveStmt>(&S);
      if (D && !PendingLabel.empty() &&
          (D->D.Name == ".branchtargets" || D->D.Name == ".calltargets" ||
           D->D.Name == ".callprototype"))
        DataLabels.insert(PendingLabel);
      if (D && D->D.Name == ".branchtargets" && !PendingLabel.empty()) {
        auto &List = TargetLists[PendingLabel];
        for (const Token &T : D->D.Args)
          if (T.is(TokKind::Ident))
            List.push_back(T.Text);
      }
      if (!isa<DirectiveStmt>(&S))
        PendingLabel = {};
    });
  }

  // Split into blocks.
  auto StartBlock = [&](StringRef Label) {
    BasicBlock B;
    B.Index = Blocks.size();
    B.Label = Label;
    Blocks.push_back(std::move(B));
  };
  StartBlock({});
  bool AfterTerminator = false;
  walkStmts(F.Body->Body, [&](Stmt &S) {
    if (auto *L = dyn_cast<LabelStmt>(&S)) {
      if (DataLabels.contains(L->Name))
        return;
      // A label on a block that is still empty and unnamed names it.
      BasicBlock &Cur = Blocks.back();
      if (Cur.Insts.empty() && Cur.Label.empty())
        Cur.Label = L->Name;
      else
        StartBlock(L->Name);
      LabelBlock[L->Name] = Blocks.back().Index;
      AfterTerminator = false;
      return;
    }
    auto *IS = dyn_cast<InstStmt>(&S);
    if (!IS)
      return;
    if (AfterTerminator) {
      StartBlock({});
      AfterTerminator = false;
    }
    Blocks.back().Insts.push_back(&IS->I);
    BlockOf[&IS->I] = Blocks.back().Index;
    if (isTerminator(IS->I))
      AfterTerminator = true;
  });

  // Edges.
  auto AddEdge = [&](unsigned From, unsigned To) {
    if (!is_contained(Blocks[From].Succs, To)) {
      Blocks[From].Succs.push_back(To);
      Blocks[To].Preds.push_back(From);
    }
  };
  auto Target = [&](StringRef Label, unsigned From) {
    auto It = LabelBlock.find(Label);
    if (It == LabelBlock.end()) {
      ++Unresolved;
      return;
    }
    AddEdge(From, It->second);
  };
  for (unsigned BI = 0; BI < Blocks.size(); ++BI) {
    BasicBlock &B = Blocks[BI];
    bool FallsThrough = true;
    if (!B.Insts.empty()) {
      const Instruction &T = *B.Insts.back();
      StringRef Base = T.getBaseOpcode();
      if (Base == "bra") {
        if (!T.Ops.empty()) {
          if (auto Sym = T.Ops[0].getSymbol())
            Target(*Sym, BI);
          else
            ++Unresolved;
        }
        FallsThrough = T.isGuarded();
      } else if (Base == "brx") {
        // brx.idx %r, $Ltargets;
        std::optional<StringRef> List;
        if (T.Ops.size() >= 2)
          List = T.Ops[1].getSymbol();
        auto It = List ? TargetLists.find(*List) : TargetLists.end();
        if (It == TargetLists.end())
          ++Unresolved;
        else
          for (StringRef L : It->second)
            Target(L, BI);
        FallsThrough = T.isGuarded();
      } else if (isReturnLike(T)) {
        B.IsExit = true;
        FallsThrough = T.isGuarded();
      }
    }
    if (FallsThrough && BI + 1 < Blocks.size())
      AddEdge(BI, BI + 1);
  }
}

const BasicBlock *CFG::getBlock(const Instruction *I) const {
  auto It = BlockOf.find(I);
  return It == BlockOf.end() ? nullptr : &Blocks[It->second];
}

const BasicBlock *CFG::getBlockForLabel(StringRef Label) const {
  auto It = LabelBlock.find(Label);
  return It == LabelBlock.end() ? nullptr : &Blocks[It->second];
}

} // namespace tally::ptx
