//===- CFGTest.cpp - basic blocks and edges -------------------------------===//

#include "PTXTestUtil.h"

#include "tally/PTX/CFG.h"

using namespace llvm;
using namespace tally::ptx;
using namespace tally::ptx::test;

namespace {

/// A parsed kernel and its CFG.
struct Built {
  std::unique_ptr<Module> M;
  std::unique_ptr<CFG> G;
  std::vector<Instruction *> Insts;
};

Built build(const std::string &Body) {
  Built B;
  B.Insts = parseBody(Body, B.M);
  if (B.M)
    B.G = std::make_unique<CFG>(*B.M->getFunction("k"));
  return B;
}

using Edges = std::vector<unsigned>;

TEST(CFGTest, StraightLine) {
  Built B = build("mov.u32 %r1, 1;\nadd.u32 %r1, %r1, 1;\nret;");
  ASSERT_TRUE(B.G);
  ASSERT_EQ(B.G->blocks().size(), 1u);
  const BasicBlock &BB = B.G->blocks()[0];
  EXPECT_EQ(BB.Insts.size(), 3u);
  EXPECT_TRUE(BB.IsExit);
  EXPECT_TRUE(BB.Succs.empty());
  EXPECT_TRUE(BB.Label.empty());
  EXPECT_EQ(B.G->getBlock(B.Insts[1]), &BB);
  EXPECT_EQ(B.G->getNumUnresolvedBranches(), 0u);
}

TEST(CFGTest, IfElse) {
  Built B = build("  @%p1 bra $L_else;\n"
                  "  mov.u32 %r1, 1;\n"
                  "  bra.uni $L_join;\n"
                  "$L_else:\n"
                  "  mov.u32 %r1, 2;\n"
                  "$L_join:\n"
                  "  ret;");
  ASSERT_TRUE(B.G);
  const auto &Bs = B.G->blocks();
  ASSERT_EQ(Bs.size(), 4u);
  // Entry: branch to else, fall through to then.
  EXPECT_EQ(Bs[0].Succs, (Edges{2, 1}));
  EXPECT_EQ(Bs[1].Succs, (Edges{3}));
  EXPECT_EQ(Bs[2].Label, "$L_else");
  EXPECT_EQ(Bs[2].Succs, (Edges{3}));
  EXPECT_EQ(Bs[2].Preds, (Edges{0}));
  EXPECT_EQ(Bs[3].Label, "$L_join");
  EXPECT_EQ(Bs[3].Preds, (Edges{1, 2}));
  EXPECT_TRUE(Bs[3].IsExit);
  EXPECT_FALSE(Bs[0].IsExit);
  EXPECT_EQ(B.G->getBlockForLabel("$L_join"), &Bs[3]);
  EXPECT_EQ(B.G->getBlockForLabel("$L_none"), nullptr);
}

TEST(CFGTest, LoopWithPredicatedRet) {
  Built B = build("  mov.u32 %r1, 0;\n"
                  "$L_loop:\n"
                  "  add.u32 %r1, %r1, 1;\n"
                  "  @%p1 ret;\n"
                  "  @%p2 bra $L_loop;\n"
                  "  exit;");
  ASSERT_TRUE(B.G);
  const auto &Bs = B.G->blocks();
  ASSERT_EQ(Bs.size(), 4u);
  EXPECT_EQ(Bs[0].Succs, (Edges{1}));
  // The guarded ret ends its block, leaves the function, and falls through.
  EXPECT_TRUE(Bs[1].IsExit);
  EXPECT_EQ(Bs[1].Succs, (Edges{2}));
  EXPECT_EQ(Bs[1].Preds, (Edges{0, 2}));
  EXPECT_EQ(Bs[2].Succs, (Edges{1, 3}));
  EXPECT_TRUE(Bs[3].IsExit);
  EXPECT_TRUE(Bs[3].Succs.empty());
}

TEST(CFGTest, UnguardedReturnsEndThePath) {
  for (const char *Term : {"ret;", "exit;", "trap;"}) {
    Built B = build(std::string("  ") + Term + "\n  mov.u32 %r1, 1;\n  ret;");
    ASSERT_TRUE(B.G);
    const auto &Bs = B.G->blocks();
    ASSERT_EQ(Bs.size(), 2u) << Term;
    EXPECT_TRUE(Bs[0].IsExit) << Term;
    EXPECT_TRUE(Bs[0].Succs.empty()) << Term;
    EXPECT_TRUE(Bs[1].Preds.empty()) << Term;
  }
}

TEST(CFGTest, BranchTargets) {
  Built B = build("$Ltbl: .branchtargets $L0, $L1, $L2;\n"
                  "  brx.idx %r1, $Ltbl;\n"
                  "$L0:\n  bra.uni $L2;\n"
                  "$L1:\n  mov.u32 %r2, 1;\n"
                  "$L2:\n  ret;");
  ASSERT_TRUE(B.G);
  const auto &Bs = B.G->blocks();
  ASSERT_EQ(Bs.size(), 4u);
  // The list's label names no block.
  EXPECT_TRUE(Bs[0].Label.empty());
  EXPECT_EQ(B.G->getBlockForLabel("$Ltbl"), nullptr);
  EXPECT_EQ(Bs[0].Succs, (Edges{1, 2, 3}));
  EXPECT_EQ(Bs[3].Preds, (Edges{0, 1, 2}));
  EXPECT_EQ(B.G->getNumUnresolvedBranches(), 0u);
}

TEST(CFGTest, UnresolvedBranches) {
  Built B = build("  @%p1 bra $L_elsewhere;\n"
                  "  brx.idx %r1, $Lno_list;\n"
                  "  bra.uni %r2;\n"
                  "  ret;");
  ASSERT_TRUE(B.G);
  EXPECT_EQ(B.G->getNumUnresolvedBranches(), 3u);
  EXPECT_EQ(B.G->blocks()[0].Succs, (Edges{1}));
}

TEST(CFGTest, ScopesDoNotSplitBlocksButScopeLabels) {
  Built B = build("  mov.u32 %r1, 0;\n"
                  "  {\n  .reg .pred c;\n  wait:\n  mov.u32 %r1, 1;\n"
                  "  @!c bra.uni wait;\n  }\n"
                  "  {\n  .reg .pred c;\n  wait:\n  mov.u32 %r1, 2;\n"
                  "  @!c bra.uni wait;\n  { bra.uni wait; }\n  }\n"
                  "  ret;");
  ASSERT_TRUE(B.G);
  const auto &Bs = B.G->blocks();
  ASSERT_EQ(Bs.size(), 5u);
  EXPECT_EQ(Bs[1].Label, "wait");
  EXPECT_EQ(Bs[1].Succs, (Edges{1, 2}));
  EXPECT_EQ(Bs[2].Label, "wait");
  EXPECT_EQ(Bs[2].Succs, (Edges{2, 3}));
  // A branch in a nested scope sees the label of the enclosing one.
  EXPECT_EQ(Bs[3].Succs, (Edges{2}));
  // The first label of the name in source order.
  EXPECT_EQ(B.G->getBlockForLabel("wait"), &Bs[1]);
  EXPECT_EQ(B.G->getNumUnresolvedBranches(), 0u);
}

TEST(CFGTest, InnerLabelsAreInvisibleOutside) {
  Built B = build("  bra.uni inner;\n  { inner: mov.u32 %r1, 1; }\n  ret;");
  ASSERT_TRUE(B.G);
  EXPECT_EQ(B.G->getNumUnresolvedBranches(), 1u);
  EXPECT_TRUE(B.G->blocks()[0].Succs.empty());
}

TEST(CFGTest, CallPrototypeLabelStartsNoBlock) {
  Built B = build("  mov.u32 %r1, 0;\n"
                  "  proto: .callprototype _ ();\n"
                  "  call %rd1, (), proto;\n"
                  "  ret;");
  ASSERT_TRUE(B.G);
  ASSERT_EQ(B.G->blocks().size(), 1u);
  EXPECT_EQ(B.G->blocks()[0].Insts.size(), 3u);
}

TEST(CFGTest, TerminatorPredicates) {
  std::unique_ptr<Module> M;
  auto Is = parseBody("bra.uni $L;\nbrx.idx %r1, $T;\nret;\nexit;\ntrap;\n"
                      "call foo;\nbar.sync 0;\n@%p1 ret;\n$L:\nnop;",
                      M);
  ASSERT_EQ(Is.size(), 9u);
  std::vector<bool> Term, Ret;
  for (Instruction *I : Is) {
    Term.push_back(isTerminator(*I));
    Ret.push_back(isReturnLike(*I));
  }
  EXPECT_EQ(Term, (std::vector<bool>{true, true, true, true, true, false, false,
                                     true, false}));
  EXPECT_EQ(Ret, (std::vector<bool>{false, false, true, true, true, false,
                                    false, true, false}));
}

} // namespace
