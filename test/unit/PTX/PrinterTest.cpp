//===- PrinterTest.cpp - printing and the printer's fixed point -----------===//

#include "PTXTestUtil.h"

#include "tally/PTX/Printer.h"

#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace tally::ptx;
using namespace tally::ptx::test;

namespace {

std::string print(const Module &M) {
  std::string S;
  raw_string_ostream OS(S);
  printModule(M, OS);
  return S;
}

/// Printing \p Text once gives text that prints back to itself.
void expectFixedPoint(const std::string &Text) {
  auto M1 = parse(Text, /*WithHeader=*/false);
  ASSERT_TRUE(M1);
  std::string Once = print(*M1);
  auto M2 = parse(Once, /*WithHeader=*/false);
  ASSERT_TRUE(M2) << Once;
  EXPECT_EQ(print(*M2), Once);
}

TEST(PrinterTest, InstructionsAndOperands) {
  std::unique_ptr<Module> M;
  auto Is = parseBody("@!%p1   ld.global.v2.u32 {%r1,_} , [ %rd1 + -8 ];\n"
                      "setp.lt.s32 %p1|%p2,%r1,0x10;\n"
                      "call.uni (retval0),\n  foo,\n  (\n  param0\n  );\n"
                      "ret;",
                      M);
  ASSERT_EQ(Is.size(), 4u);
  auto Str = [](const Instruction &I) {
    std::string S;
    raw_string_ostream OS(S);
    printInstruction(I, OS);
    return S;
  };
  EXPECT_EQ(Str(*Is[0]), "@!%p1 ld.global.v2.u32 {%r1, _}, [%rd1 + -8];");
  EXPECT_EQ(Str(*Is[1]), "setp.lt.s32 %p1|%p2, %r1, 0x10;");
  EXPECT_EQ(Str(*Is[2]), "call.uni (retval0), foo, (param0);");
  EXPECT_EQ(Str(*Is[3]), "ret;");

  std::string Op;
  raw_string_ostream OS(Op);
  printOperand(Is[0]->Ops[1], OS);
  EXPECT_EQ(Op, "[%rd1 + -8]");
}

TEST(PrinterTest, Module) {
  auto M = parse(".global .align 4 .b32 g[2] = {1,2};\n"
                 ".visible .entry k(.param .u64 a, .param .u32 b)\n"
                 ".maxntid 32,1,1\n"
                 "{\n.reg .b32 %r<2>;\n{\n.reg .pred p;\n}\n$L:\nret;\n}\n");
  ASSERT_TRUE(M);
  EXPECT_EQ(print(*M), ".version 8.7\n"
                       ".target sm_90a\n"
                       ".address_size 64\n"
                       "\n"
                       ".global .align 4 .b32 g[2] = {1, 2};\n"
                       "\n"
                       ".visible .entry k(\n"
                       "\t.param .u64 a,\n"
                       "\t.param .u32 b\n"
                       ")\n"
                       ".maxntid 32, 1, 1\n"
                       "{\n"
                       "\t.reg .b32 %r<2>;\n"
                       "\t{\n"
                       "\t\t.reg .pred p;\n"
                       "\t}\n"
                       "$L:\n"
                       "\tret;\n"
                       "}\n");
}

TEST(PrinterTest, FixedPoint) {
  expectFixedPoint(std::string(Header) +
                   ".global .align 8 .u64 p[2] = { generic(g) + 8 ,g };\n"
                   ".global .samplerref s = {addr_mode_0=wrap,\n"
                   "  filter_mode = nearest};\n"
                   ".extern .func (.param .b32 r) f(.param .b32 a) ;\n"
                   ".visible .entry k(.param .u64 k_p)\n"
                   ".reqntid 64 .pragma \"nounroll\";\n"
                   "{\n"
                   "  .reg .b32 %r<4>;  .reg .v4 .f32 %v;\n"
                   "  .loc 1 2 3, function_name $L__s, inlined_at 1 1 1\n"
                   "  $Ltbl: .branchtargets $L1,$L2;\n"
                   "  brx.idx %r1, $Ltbl;\n"
                   "$L1: { .reg .pred q; @!q bra.uni $L1; }\n"
                   "$L2:\n"
                   "  frob.x::y.9 %r1, [k_p+4], {_, %r2}, !%p1, -0x1U;\n"
                   "  mov.f32 %r3, 0F3F800000; mov.f64 %r3, 1.5e-3;\n"
                   "  ret;\n"
                   "}\n"
                   ".file 1 \"a.cu\"\n"
                   ".section .debug_str { $L__s: .b8 97,0\n"
                   ".b8 1 }\n"
                   ".section .debug_macinfo { }\n");
}

TEST(PrinterTest, FixedPointOfEmptyAndDeclarationOnlyModules) {
  expectFixedPoint("");
  expectFixedPoint(std::string(Header));
  expectFixedPoint(std::string(Header) + ".func g();\n.func h\n;\n");
}

} // namespace
