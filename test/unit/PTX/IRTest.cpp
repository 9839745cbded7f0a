//===- IRTest.cpp - the parsed form: operands, instructions, declarations -===//

#include "PTXTestUtil.h"

#include "tally/PTX/IR.h"

using namespace llvm;
using namespace tally::ptx;
using namespace tally::ptx::test;

namespace {

TEST(OperandTest, Registers) {
  std::unique_ptr<Module> M;
  auto Is = parseBody("mov.u32 %r1, %tid.x;\n"
                      "mov.u32 %r2, %r1;\n"
                      "add.s32 %r3, %r1, 4;\n"
                      "mov.u32 %r4, %cluster_ctaid.y;\n",
                      M);
  ASSERT_EQ(Is.size(), 4u);
  const Operand &D = Is[0]->Ops[0], &Tid = Is[0]->Ops[1];
  EXPECT_EQ(D.getRegister(), std::optional<StringRef>("%r1"));
  EXPECT_EQ(D.getComponent(), "");
  EXPECT_EQ(Tid.getRegister(), std::optional<StringRef>("%tid"));
  EXPECT_EQ(Tid.getComponent(), "x");
  EXPECT_EQ(Is[3]->Ops[1].getRegister(),
            std::optional<StringRef>("%cluster_ctaid"));
  EXPECT_EQ(Is[3]->Ops[1].getComponent(), "y");
  // Registers are not symbols and immediates are neither.
  EXPECT_FALSE(D.getSymbol());
  EXPECT_FALSE(Is[2]->Ops[2].getRegister());
  EXPECT_FALSE(Is[2]->Ops[2].getSymbol());
}

TEST(OperandTest, ExpressionsAreNotRegisters) {
  std::unique_ptr<Module> M;
  auto Is = parseBody("setp.lt.s32 %p1|%p2, %r1, %r2;\n"
                      "bar.red.or.pred %p3, 0, !%p1;\n"
                      "ld.global.u32 %r3, [%rd1+8];\n"
                      "mov.u64 %rd2, sym+4;\n",
                      M);
  ASSERT_EQ(Is.size(), 4u);
  EXPECT_FALSE(Is[0]->Ops[0].getRegister()); // %p1|%p2
  EXPECT_FALSE(Is[1]->Ops[2].getRegister()); // !%p1
  EXPECT_FALSE(Is[2]->Ops[1].getRegister()); // [%rd1+8]
  EXPECT_FALSE(Is[3]->Ops[1].getRegister()); // sym+4
  EXPECT_FALSE(Is[3]->Ops[1].getSymbol());
}

TEST(OperandTest, Symbols) {
  std::unique_ptr<Module> M;
  auto Is = parseBody("bra.uni $L__BB0_3;\n"
                      "call.uni (retval0), _Z3fooi, (param0);\n"
                      "mov.u64 %rd1, smem;\n",
                      M);
  ASSERT_EQ(Is.size(), 3u);
  EXPECT_EQ(Is[0]->Ops[0].getSymbol(), std::optional<StringRef>("$L__BB0_3"));
  EXPECT_EQ(Is[1]->Ops[1].getSymbol(), std::optional<StringRef>("_Z3fooi"));
  EXPECT_EQ(Is[2]->Ops[1].getSymbol(), std::optional<StringRef>("smem"));
  // A parenthesized list is not a symbol, even with one name in it.
  EXPECT_FALSE(Is[1]->Ops[0].getSymbol());
}

TEST(OperandTest, Kinds) {
  std::unique_ptr<Module> M;
  auto Is = parseBody("tex.2d.v4.f32.f32 {%f1, _, %f3, _}, [t, {%f5, %f6}];\n"
                      "call (retval0), %rd1, (param0, param1), proto;\n",
                      M);
  ASSERT_EQ(Is.size(), 2u);
  const Operand &V = Is[0]->Ops[0];
  EXPECT_EQ(V.K, Operand::Kind::Vector);
  ASSERT_EQ(V.Elems.size(), 4u);
  ASSERT_EQ(V.Elems[1].Toks.size(), 1u);
  EXPECT_EQ(V.Elems[1].Toks[0].Text, "_");
  const Operand &A = Is[0]->Ops[1];
  EXPECT_EQ(A.K, Operand::Kind::Address);
  ASSERT_EQ(A.Elems.size(), 2u);
  EXPECT_EQ(A.Elems[0].getSymbol(), std::optional<StringRef>("t"));
  EXPECT_EQ(A.Elems[1].K, Operand::Kind::Vector);
  EXPECT_EQ(A.Elems[1].Elems[1].getRegister(), std::optional<StringRef>("%f6"));
  ASSERT_EQ(Is[1]->Ops.size(), 4u);
  EXPECT_EQ(Is[1]->Ops[0].K, Operand::Kind::Paren);
  EXPECT_EQ(Is[1]->Ops[1].K, Operand::Kind::Expr);
  EXPECT_EQ(Is[1]->Ops[2].K, Operand::Kind::Paren);
  EXPECT_EQ(Is[1]->Ops[2].Elems.size(), 2u);

  // forEachToken visits nested tokens in order.
  std::string Seen;
  A.forEachToken([&](const Token &T) { Seen += T.Text.str() + " "; });
  EXPECT_EQ(Seen, "t %f5 %f6 ");
}

TEST(OperandTest, ParenthesesOutsideCallsAreExpressions) {
  std::unique_ptr<Module> M;
  auto Is = parseBody("mov.u32 %r1, (1+2)*3;\n"
                      "mov.u32 %r2, (16);\n"
                      "ld.global.u32 %r3, [%rd1+(4*2)];\n"
                      "call.uni (retval0), f, (param0);\n",
                      M);
  ASSERT_EQ(Is.size(), 4u);
  EXPECT_EQ(Is[0]->Ops[1].K, Operand::Kind::Expr);
  EXPECT_EQ(Is[0]->Ops[1].Toks.size(), 7u);
  EXPECT_EQ(Is[1]->Ops[1].K, Operand::Kind::Expr);
  ASSERT_EQ(Is[2]->Ops[1].Elems.size(), 1u);
  EXPECT_EQ(Is[2]->Ops[1].Elems[0].K, Operand::Kind::Expr);
  EXPECT_EQ(Is[3]->Ops[0].K, Operand::Kind::Paren);
  EXPECT_EQ(Is[3]->Ops[2].K, Operand::Kind::Paren);
}

TEST(InstructionTest, OpcodeAndModifiers) {
  std::unique_ptr<Module> M;
  auto Is = parseBody(
      "ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];\n"
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx"
      "::bytes [%r1], [%rd1, {%r2, %r3}], [%r4];\n"
      "ret;\n"
      "@!%p1 bra.uni $L1;\n"
      "$L1:\n"
      "@%p2 exit;\n",
      M);
  ASSERT_EQ(Is.size(), 5u);
  EXPECT_EQ(Is[0]->Opcode, "ld.global.nc.v4.f32");
  EXPECT_EQ(Is[0]->getBaseOpcode(), "ld");
  EXPECT_EQ(Is[0]->getModifiers(),
            (SmallVector<StringRef, 4>{".global", ".nc", ".v4", ".f32"}));
  EXPECT_TRUE(Is[0]->hasModifier(".nc"));
  EXPECT_FALSE(Is[0]->hasModifier("nc"));
  EXPECT_FALSE(Is[0]->hasModifier(".shared"));

  EXPECT_EQ(Is[1]->getBaseOpcode(), "cp");
  EXPECT_EQ(Is[1]->getModifiers(),
            (SmallVector<StringRef, 4>{".async", ".bulk", ".tensor", ".2d",
                                       ".shared::cluster", ".global",
                                       ".mbarrier::complete_tx::bytes"}));
  EXPECT_TRUE(Is[1]->hasModifier(".shared::cluster"));
  EXPECT_FALSE(Is[1]->hasModifier(".shared"));

  EXPECT_EQ(Is[2]->getBaseOpcode(), "ret");
  EXPECT_TRUE(Is[2]->getModifiers().empty());
  EXPECT_TRUE(Is[2]->Ops.empty());
  EXPECT_FALSE(Is[2]->isGuarded());

  EXPECT_TRUE(Is[3]->isGuarded());
  EXPECT_EQ(Is[3]->Guard, "%p1");
  EXPECT_TRUE(Is[3]->GuardNegated);
  EXPECT_EQ(Is[4]->Guard, "%p2");
  EXPECT_FALSE(Is[4]->GuardNegated);
}

TEST(InstructionTest, UnknownOpcodeParsesGenerically) {
  std::unique_ptr<Module> M;
  auto Is =
      parseBody("frobnicate.sync.aligned.x9 %r1, [%rd1+4], {%r2, %r3};", M);
  ASSERT_EQ(Is.size(), 1u);
  EXPECT_EQ(Is[0]->getBaseOpcode(), "frobnicate");
  EXPECT_TRUE(Is[0]->hasModifier(".x9"));
  ASSERT_EQ(Is[0]->Ops.size(), 3u);
  EXPECT_EQ(Is[0]->Ops[1].K, Operand::Kind::Address);
  EXPECT_EQ(Is[0]->Ops[2].K, Operand::Kind::Vector);
}

/// The declarations of kernel k's body, in order.
std::vector<VarDecl *> decls(Module &M) {
  std::vector<VarDecl *> Ds;
  walkStmts(M.getFunction("k")->Body->Body, [&](Stmt &S) {
    if (auto *D = dyn_cast<DeclStmt>(&S))
      Ds.push_back(&D->D);
  });
  return Ds;
}

TEST(VarDeclTest, Getters) {
  auto M = parse(".visible .entry k()\n{\n"
                 "  .reg .b32 %r<100>, %x, %y;\n"
                 "  .reg .v4 .f32 %vf;\n"
                 "  .shared .align 16 .b8 smem[2][64];\n"
                 "  .local .align 8 .v2 .u64 spill[3];\n"
                 "  .reg .pred %p;\n"
                 "  ret;\n}\n");
  ASSERT_TRUE(M);
  auto Ds = decls(*M);
  ASSERT_EQ(Ds.size(), 5u);

  EXPECT_EQ(Ds[0]->getStateSpace(), ".reg");
  EXPECT_EQ(Ds[0]->getType(), ".b32");
  EXPECT_EQ(Ds[0]->getAlign(), 0u);
  EXPECT_EQ(Ds[0]->getVectorWidth(), 1u);
  ASSERT_EQ(Ds[0]->Decls.size(), 3u);
  EXPECT_EQ(Ds[0]->Decls[0].Name, "%r");
  EXPECT_EQ(Ds[0]->Decls[0].Range, std::optional<StringRef>("100"));
  EXPECT_EQ(Ds[0]->Decls[1].Name, "%x");
  EXPECT_FALSE(Ds[0]->Decls[1].Range);
  EXPECT_EQ(Ds[0]->Decls[2].Name, "%y");

  EXPECT_EQ(Ds[1]->getType(), ".f32");
  EXPECT_EQ(Ds[1]->getVectorWidth(), 4u);
  EXPECT_TRUE(Ds[1]->hasAttr(".v4"));

  EXPECT_EQ(Ds[2]->getStateSpace(), ".shared");
  EXPECT_EQ(Ds[2]->getType(), ".b8");
  EXPECT_EQ(Ds[2]->getAlign(), 16u);
  ASSERT_EQ(Ds[2]->Decls[0].Dims.size(), 2u);
  EXPECT_EQ(Ds[2]->Decls[0].Dims[0][0].Text, "2");
  EXPECT_EQ(Ds[2]->Decls[0].Dims[1][0].Text, "64");
  EXPECT_FALSE(Ds[2]->hasAttr(".extern"));

  EXPECT_EQ(Ds[3]->getStateSpace(), ".local");
  EXPECT_EQ(Ds[3]->getType(), ".u64");
  EXPECT_EQ(Ds[3]->getAlign(), 8u);
  EXPECT_EQ(Ds[3]->getVectorWidth(), 2u);

  EXPECT_EQ(Ds[4]->getType(), ".pred");
}

TEST(VarDeclTest, ModuleLevelWithInitializers) {
  auto M = parse(".extern .shared .align 16 .b8 dyn[];\n"
                 ".global .align 8 .u64 p[2] = {generic(a)+8, a}, q = 1;\n"
                 ".global .texref t;\n");
  ASSERT_TRUE(M);
  std::vector<VarDecl *> Vs;
  for (TopItem &I : M->Items)
    if (I.getKind() == TopItem::Kind::Var)
      Vs.push_back(&I.Var);
  ASSERT_EQ(Vs.size(), 3u);
  EXPECT_TRUE(Vs[0]->hasAttr(".extern"));
  EXPECT_EQ(Vs[0]->getStateSpace(), ".shared");
  ASSERT_EQ(Vs[0]->Decls[0].Dims.size(), 1u);
  EXPECT_TRUE(Vs[0]->Decls[0].Dims[0].empty()); // []
  EXPECT_FALSE(Vs[0]->Decls[0].HasInit);

  ASSERT_EQ(Vs[1]->Decls.size(), 2u);
  EXPECT_TRUE(Vs[1]->Decls[0].HasInit);
  std::string Init;
  for (const Token &T : Vs[1]->Decls[0].Init)
    Init += T.Text.str();
  EXPECT_EQ(Init, "{generic(a)+8,a}");
  EXPECT_EQ(Vs[1]->Decls[1].Name, "q");
  ASSERT_EQ(Vs[1]->Decls[1].Init.size(), 1u);
  EXPECT_EQ(Vs[1]->Decls[1].Init[0].Text, "1");

  EXPECT_EQ(Vs[2]->getType(), ".texref");
  EXPECT_EQ(Vs[2]->getStateSpace(), ".global");
}

TEST(FunctionTest, HeadersAndModuleQueries) {
  auto M =
      parse(".extern .func (.param .b32 func_retval0) ext(.param .b64 a);\n"
            ".weak .func (.reg .b32 r) f(.reg .b32 x, .reg .b32 y)\n"
            "{\n  ret;\n}\n"
            ".visible .entry k(.param .u64 k_param_0)\n"
            ".maxntid 128, 1, 1\n.minnctapersm 4\n"
            "{\n  ret;\n}\n"
            ".entry k2\n{\n  ret;\n}\n");
  ASSERT_TRUE(M);
  EXPECT_EQ(M->getVersion(), "8.7");
  EXPECT_EQ(M->getTarget(), "sm_90a");
  auto Fs = M->functions();
  ASSERT_EQ(Fs.size(), 4u);
  auto Ks = M->kernels();
  ASSERT_EQ(Ks.size(), 2u);
  EXPECT_EQ(Ks[0]->Name, "k");
  EXPECT_EQ(Ks[1]->Name, "k2");

  Function *Ext = M->getFunction("ext");
  ASSERT_TRUE(Ext);
  EXPECT_TRUE(Ext->isDeclaration());
  EXPECT_TRUE(Ext->hasLinkage(".extern"));
  EXPECT_TRUE(Ext->HasRetList);
  ASSERT_EQ(Ext->Rets.size(), 1u);
  EXPECT_EQ(Ext->Rets[0].Decls[0].Name, "func_retval0");

  Function *F = M->getFunction("f");
  ASSERT_TRUE(F);
  EXPECT_FALSE(F->IsEntry);
  EXPECT_TRUE(F->hasLinkage(".weak"));
  EXPECT_FALSE(F->hasLinkage(".visible"));
  ASSERT_EQ(F->Params.size(), 2u);
  EXPECT_EQ(F->Params[1].getStateSpace(), ".reg");

  Function *K = M->getFunction("k");
  ASSERT_TRUE(K);
  EXPECT_TRUE(K->IsEntry);
  EXPECT_FALSE(K->HasRetList);
  const Directive *MaxNTid = K->getDirective(".maxntid");
  ASSERT_TRUE(MaxNTid);
  std::string Args;
  for (const Token &T : MaxNTid->Args)
    Args += T.Text.str();
  EXPECT_EQ(Args, "128,1,1");
  EXPECT_TRUE(K->getDirective(".minnctapersm"));
  EXPECT_FALSE(K->getDirective(".reqntid"));

  Function *K2 = M->getFunction("k2");
  ASSERT_TRUE(K2);
  EXPECT_FALSE(K2->HasParamList);
  EXPECT_EQ(M->getFunction("nope"), nullptr);
}

TEST(ModuleTest, DirectivesNeedNotEndTheirLine) {
  auto M = parse(".version 8.7 .target sm_90a, debug .address_size 64\n"
                 ".visible .entry k()\n{\n"
                 "  .loc 1 2 3, function_name $L__f+8, inlined_at 1 1 1 ret;\n"
                 "}\n",
                 /*WithHeader=*/false);
  ASSERT_TRUE(M);
  EXPECT_EQ(M->getVersion(), "8.7");
  EXPECT_EQ(M->getTarget(), "sm_90a");
  ASSERT_EQ(M->Items.size(), 4u);
  EXPECT_EQ(M->Items[1].Dir.Args.size(), 3u); // sm_90a , debug
  auto Is = instructions(*M->getFunction("k"));
  ASSERT_EQ(Is.size(), 1u);
  EXPECT_EQ(Is[0]->Opcode, "ret");
}

TEST(FunctionTest, GetFunctionPrefersTheDefinition) {
  auto M = parse(".func g();\n.func g()\n{\n  ret;\n}\n");
  ASSERT_TRUE(M);
  ASSERT_TRUE(M->getFunction("g"));
  EXPECT_FALSE(M->getFunction("g")->isDeclaration());
}

TEST(SpecialRegisterTest, IsSpecialRegister) {
  for (StringRef R : {"%tid",
                      "%ntid",
                      "%ctaid",
                      "%nctaid",
                      "%laneid",
                      "%warpid",
                      "%smid",
                      "%nsmid",
                      "%gridid",
                      "%clusterid",
                      "%cluster_ctaid",
                      "%cluster_nctaid",
                      "%cluster_ctarank",
                      "%lanemask_lt",
                      "%clock",
                      "%clock64",
                      "%globaltimer",
                      "%dynamic_smem_size",
                      "%pm0",
                      "%pm7_64",
                      "%envreg31",
                      "%reserved_smem_offset_0"})
    EXPECT_TRUE(isSpecialRegister(R)) << R.str();
  for (StringRef R : {"%r1", "%tid.x", "tid", "%tidx", "%p", "%pm", "%pm_64",
                      "%envreg", "%rd", "%f1", "%ctaid_copy", ""})
    EXPECT_FALSE(isSpecialRegister(R)) << R.str();
}

TEST(WalkTest, VisitsNestedScopesInSourceOrder) {
  auto M = parse(".visible .entry k()\n{\n"
                 "  .reg .b32 %r1;\n"
                 "  { .reg .b32 %r2; { mov.u32 %r2, 1; } $L: }\n"
                 "  ret;\n}\n");
  ASSERT_TRUE(M);
  std::vector<Stmt::Kind> Kinds;
  walkStmts(M->getFunction("k")->Body->Body,
            [&](Stmt &S) { Kinds.push_back(S.getKind()); });
  using K = Stmt::Kind;
  EXPECT_EQ(Kinds, (std::vector<K>{K::Decl, K::Scope, K::Decl, K::Scope,
                                   K::Inst, K::Label, K::Inst}));
}

} // namespace
