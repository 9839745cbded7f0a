//===- CFG.cpp - basic blocks and control flow of a PTX function ----------===//

#include "tally/PTX/CFG.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Casting.h"

#include <functional>

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
  SmallPtrSet<const Stmt *, 4> DataLabels;
  {
    const LabelStmt *Pending = nullptr;
    walkStmts(F.Body->Body, [&](Stmt &S) {
      if (auto *L = dyn_cast<LabelStmt>(&S)) {
        Pending = L;
        return;
      }
      auto *D = dyn_cast<DirectiveStmt>(&S);
      if (!D) {
        Pending = nullptr;
        return;
      }
      if (!Pending)
        return;
      StringRef Name = D->D.Name;
      if (Name == ".branchtargets" || Name == ".calltargets" ||
          Name == ".callprototype")
        DataLabels.insert(Pending);
      if (Name == ".branchtargets") {
        auto &List = TargetLists[Pending->Name];
        for (const Token &T : D->D.Args)
          if (T.is(TokKind::Ident))
            List.push_back(T.Text);
      }
    });
  }

  // Split into blocks. Labels are scoped: one declared inside `{ }` is
  // visible there and in the blocks nested in it, and another block may
  // reuse its name (each of Triton's inline-asm blocks declares its own
  // `waitLoop`). Scope 0 is the function body.
  std::vector<unsigned> ScopeParent{0};
  std::vector<StringMap<unsigned>> ScopeLabels(1);
  DenseMap<const Instruction *, unsigned> InstScope;
  auto StartBlock = [&](StringRef Label) {
    BasicBlock B;
    B.Index = Blocks.size();
    B.Label = Label;
    Blocks.push_back(std::move(B));
  };
  StartBlock({});
  bool AfterTerminator = false;
  std::function<void(const StmtList &, unsigned)> Split =
      [&](const StmtList &Body, unsigned Scope) {
        for (const auto &S : Body) {
          if (auto *Nested = dyn_cast<ScopeStmt>(S.get())) {
            unsigned Id = ScopeParent.size();
            ScopeParent.push_back(Scope);
            ScopeLabels.emplace_back();
            Split(Nested->Body, Id);
            continue;
          }
          if (auto *L = dyn_cast<LabelStmt>(S.get())) {
            if (DataLabels.contains(L))
              continue;
            // A label on a block that is still empty and unnamed names it.
            BasicBlock &Cur = Blocks.back();
            if (Cur.Insts.empty() && Cur.Label.empty())
              Cur.Label = L->Name;
            else
              StartBlock(L->Name);
            ScopeLabels[Scope].try_emplace(L->Name, Blocks.back().Index);
            LabelBlock.try_emplace(L->Name, Blocks.back().Index);
            AfterTerminator = false;
            continue;
          }
          auto *IS = dyn_cast<InstStmt>(S.get());
          if (!IS)
            continue;
          if (AfterTerminator) {
            StartBlock({});
            AfterTerminator = false;
          }
          Blocks.back().Insts.push_back(&IS->I);
          BlockOf[&IS->I] = Blocks.back().Index;
          InstScope[&IS->I] = Scope;
          if (isTerminator(IS->I))
            AfterTerminator = true;
        }
      };
  Split(F.Body->Body, 0);

  // Edges.
  auto AddEdge = [&](unsigned From, unsigned To) {
    if (!is_contained(Blocks[From].Succs, To)) {
      Blocks[From].Succs.push_back(To);
      Blocks[To].Preds.push_back(From);
    }
  };
  // The innermost visible label of that name, from the branch's scope out.
  auto Target = [&](StringRef Label, unsigned From, unsigned Scope) {
    while (true) {
      auto It = ScopeLabels[Scope].find(Label);
      if (It != ScopeLabels[Scope].end()) {
        AddEdge(From, It->second);
        return;
      }
      if (Scope == 0)
        break;
      Scope = ScopeParent[Scope];
    }
    ++Unresolved;
  };
  for (unsigned BI = 0; BI < Blocks.size(); ++BI) {
    BasicBlock &B = Blocks[BI];
    bool FallsThrough = true;
    if (!B.Insts.empty()) {
      const Instruction &T = *B.Insts.back();
      unsigned Scope = InstScope.lookup(&T);
      StringRef Base = T.getBaseOpcode();
      if (Base == "bra") {
        if (!T.Ops.empty()) {
          if (auto Sym = T.Ops[0].getSymbol())
            Target(*Sym, BI, Scope);
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
            Target(L, BI, Scope);
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
