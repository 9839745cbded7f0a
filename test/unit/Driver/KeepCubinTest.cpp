//===- KeepCubinTest.cpp - tally-ptxas's reuse of the budget's cubin ------===//
//
// With CompileOptions::KeepCubin the register budget's last compilation is
// handed back as the final cubin. It must be exactly what ptxas makes of
// the module tally-opt prints, with the same options, in every case the
// budget can end in: no cap, a cap kept, and a variant dropped after the
// compilation (then no cubin is handed back). Needs ptxas; skips without.
//
//===----------------------------------------------------------------------===//

#include "tally/Driver/Driver.h"
#include "tally/Passes/Pass.h"
#include "tally/Target/Ptxas.h"

#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"

#include <fstream>
#include <sstream>

using namespace tally;

namespace {

std::string readSource(const std::string &Rel) {
  std::ifstream In(std::string(TALLY_TEST_SOURCE_DIR) + "/" + Rel);
  std::stringstream S;
  S << In.rdbuf();
  return S.str();
}

struct Compiled {
  CompileResult R;
  std::string Ptxas;
};

std::optional<Compiled> compileKeeping(const std::string &Ptx,
                                       const std::vector<std::string> &Options,
                                       unsigned Slack = 4) {
  auto Ptxas = findPtxas();
  if (!Ptxas) {
    llvm::consumeError(Ptxas.takeError());
    return std::nullopt;
  }
  CompileOptions O;
  O.Pipeline = DefaultPipeline;
  O.Ptxas = *Ptxas;
  O.Arch = "sm_90a";
  O.Jobs = 1;
  O.KeepCubin = true;
  O.PtxasOptions = Options;
  O.RegisterSlack = Slack;
  auto R = compileInput(llvm::MemoryBufferRef(Ptx, "input.ptx"), O);
  EXPECT_TRUE(bool(R)) << (R ? "" : llvm::toString(R.takeError()));
  if (!R)
    return std::nullopt;
  return Compiled{std::move(*R), *Ptxas};
}

/// ptxas's cubin for \p Ptx, whole-program, with \p Options.
std::string plainCubin(const std::string &Ptxas, const std::string &Ptx,
                       const std::vector<std::string> &Options) {
  auto R = runPtxas(Ptxas, Ptx, "sm_90a", /*Relocatable=*/false, "", Options);
  EXPECT_TRUE(bool(R)) << (R ? "" : llvm::toString(R.takeError()));
  return R ? R->Cubin : std::string();
}

const KernelRecord *kernel(const CompileResult &R, const std::string &Name) {
  for (const KernelRecord &K : R.Meta.Kernels)
    if (K.Name == Name)
      return &K;
  return nullptr;
}

TEST(KeepCubin, IsPtxasOfTheOutputWithTheSameOptions) {
  const std::vector<std::string> Options = {"-lineinfo"};
  for (const char *Rel : {"test/outside-ptx/triton/triton_001_softmax.ptx",
                          "test/outside-ptx/triton/triton_007_matmul.ptx",
                          "test/gpu/repro/triton_red_nll_loss_33.ptx"}) {
    std::string Ptx = readSource(Rel);
    ASSERT_FALSE(Ptx.empty()) << Rel;
    auto C = compileKeeping(Ptx, Options);
    if (!C)
      GTEST_SKIP() << "no ptxas";
    ASSERT_FALSE(C->R.Cubin.empty()) << Rel;
    EXPECT_EQ(C->R.Cubin, plainCubin(C->Ptxas, C->R.Output, Options)) << Rel;
    // The embedded metadata names the variants, without resources.
    EXPECT_NE(C->R.Output.find("__tally_metadata"), std::string::npos);
    EXPECT_NE(C->R.Cubin.find("kind: ptb"), std::string::npos) << Rel;
    EXPECT_EQ(C->R.Cubin.find("registers:"), std::string::npos) << Rel;
    // The metadata handed back has them.
    ASSERT_FALSE(C->R.Meta.Kernels.empty());
    EXPECT_FALSE(C->R.Meta.Kernels.front().OriginalRes.empty()) << Rel;
  }
}

TEST(KeepCubin, CappedVariant) {
  // Compiled whole-program, the PTB form of this Inductor kernel goes over
  // its budget (14 registers in the original, 25 in the PTB form) and gets
  // `.maxnreg 24`: the cubin handed back is the capped compilation. (The
  // kernel used before went under budget once PTB variants got .maxntid.)
  std::string Ptx =
      readSource("test/outside-ptx/inductor/inductor_012_triton_poi_fused_add_addmm_view_10.ptx");
  ASSERT_FALSE(Ptx.empty());
  auto C = compileKeeping(Ptx, {"-lineinfo"});
  if (!C)
    GTEST_SKIP() << "no ptxas";
  ASSERT_NE(C->R.Output.find(".maxnreg"), std::string::npos);
  ASSERT_FALSE(C->R.Cubin.empty());
  EXPECT_EQ(C->R.Cubin, plainCubin(C->Ptxas, C->R.Output, {"-lineinfo"}));
}

TEST(KeepCubin, DroppedVariantGivesNoCubin) {
  // Under the kernel's own .maxnreg 24 the PTB form spills and is dropped
  // after the budget's compilation: the module changed, so no cubin, and
  // the embedded metadata no longer names the dropped variant.
  std::string Ptx = readSource("test/lit/Transforms/register-budget.ptx");
  size_t At = Ptx.rfind(".u32 n)");
  ASSERT_NE(At, std::string::npos);
  Ptx.insert(At + 7, "\n.maxnreg 24");
  auto C = compileKeeping(Ptx, {});
  if (!C)
    GTEST_SKIP() << "no ptxas";
  const KernelRecord *K = kernel(C->R, "pressure");
  ASSERT_TRUE(K);
  for (const VariantRecord &V : K->Variants)
    EXPECT_NE(V.Kind, "ptb");
  EXPECT_TRUE(C->R.Cubin.empty());
  EXPECT_EQ(C->R.Output.find("pressure__tally_ptb"), std::string::npos);
  std::string Cubin = plainCubin(C->Ptxas, C->R.Output, {});
  EXPECT_EQ(Cubin.find("kind: ptb"), std::string::npos);
  EXPECT_NE(Cubin.find("kind: slice"), std::string::npos);
}

} // namespace
