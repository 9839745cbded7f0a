//===- PtxasWrapperTest.cpp - tally-ptxas's command lines -----------------===//
//
// The command lines Triton 3.6 makes (compiler.py: [ptxas, *debug_info,
// *fmad, '-v', *disable_opt, *extra, '--gpu-name=' + arch, src, '-o', bin],
// debug_info ['-lineinfo'] or ['-g'], fmad ['--fmad=false'] or [],
// disable_opt ['--opt-level', '0'] or []), other spellings ptxas accepts,
// and the lines that must go to the real ptxas untouched.
//
//===----------------------------------------------------------------------===//

#include "tally/Driver/PtxasWrapper.h"

#include "gtest/gtest.h"

using namespace tally;

namespace {

using Args = std::vector<std::string>;

TEST(PtxasCommand, TritonCommandLines) {
  const Args Lines[] = {
      {"-lineinfo", "-v", "--gpu-name=sm_90a", "/tmp/tmpab12.ptx", "-o", "/tmp/tmpab12.ptx.o"},
      {"-lineinfo", "--fmad=false", "-v", "--gpu-name=sm_90a", "/tmp/k.ptx", "-o", "/tmp/k.o"},
      {"-g", "-v", "--opt-level", "0", "--gpu-name=sm_90a", "/tmp/k.ptx", "-o", "/tmp/k.o"},
      {"-lineinfo", "-v", "--maxrregcount=128", "--gpu-name=sm_100a", "/tmp/k.ptx", "-o",
       "/tmp/k.o"},
  };
  for (const Args &A : Lines) {
    PtxasCommand C = parsePtxasCommand(A);
    EXPECT_EQ(C.Passthrough, "") << A[0];
    EXPECT_EQ(C.Input, "/tmp/" + std::string(A[A.size() - 3].substr(5)));
    EXPECT_EQ(C.Output, A.back());
    EXPECT_TRUE(C.Verbose);
    EXPECT_EQ(C.Arch, A[A.size() - 4].substr(11));
  }
}

TEST(PtxasCommand, OtherSpellings) {
  PtxasCommand C = parsePtxasCommand({"-arch", "sm_90", "-O3", "-o=out.cubin", "k.ptx"});
  EXPECT_EQ(C.Passthrough, "");
  EXPECT_EQ(C.Arch, "sm_90");
  EXPECT_EQ(C.Output, "out.cubin");
  EXPECT_EQ(C.Input, "k.ptx");
  EXPECT_FALSE(C.Verbose);
  C = parsePtxasCommand({"--output-file", "a.cubin", "--verbose", "-dlcm=cg", "--gpu-name",
                         "sm_90a", "k.ptx", "-maxrregcount", "64"});
  EXPECT_EQ(C.Passthrough, "");
  EXPECT_EQ(C.Output, "a.cubin");
  EXPECT_TRUE(C.Verbose);
  EXPECT_EQ(C.Input, "k.ptx");
  // No -o: ptxas writes elf.o.
  C = parsePtxasCommand({"--gpu-name=sm_90a", "k.ptx"});
  EXPECT_EQ(C.Passthrough, "");
  EXPECT_EQ(C.Output, "elf.o");
}

TEST(PtxasCommand, PassedThroughUntouched) {
  struct Case {
    Args A;
    const char *Why;
  } Cases[] = {
      {{"--version"}, "option '--version'"},
      {{"-h"}, "option '-h'"},
      {{"-ias", ".version 8.0", "-o", "a.o"}, "option '-ias'"},
      {{"-c", "k.ptx", "-o", "k.o"}, "option '-c'"},
      {{"-e", "only_this", "k.ptx", "-o", "k.o"}, "option '-e'"},
      {{"--options-file", "opts.txt", "k.ptx"}, "option '--options-file'"},
      {{"--frobnicate", "k.ptx", "-o", "k.o"}, "unknown option '--frobnicate'"},
      {{"-v", "-o", "k.o"}, "no input file"},
      {{"a.ptx", "b.ptx", "-o", "k.o"}, "more than one input file"},
      {{"k.ptx", "-o"}, "option '-o' without its value"},
      {{"k.ptx", "-o", "-"}, "output to standard output"},
      {{"-v=1", "k.ptx"}, "option 'v' with a value"},
  };
  for (const Case &C : Cases) {
    PtxasCommand P = parsePtxasCommand(C.A);
    EXPECT_EQ(P.Passthrough, C.Why) << C.A[0];
  }
}

TEST(PtxasCommand, Rewrite) {
  PtxasCommand C = parsePtxasCommand({"-v", "--gpu-name=sm_90a", "k.ptx", "-o", "k.o"});
  EXPECT_EQ(rewriteCommand(C, "/t/x.ptx", "/t/x.cubin"),
            (Args{"-v", "--gpu-name=sm_90a", "/t/x.ptx", "-o", "/t/x.cubin"}));
  C = parsePtxasCommand({"--output-file=k.o", "k.ptx"});
  EXPECT_EQ(rewriteCommand(C, "x.ptx", "y.o"), (Args{"--output-file=y.o", "x.ptx"}));
  C = parsePtxasCommand({"k.ptx"});
  EXPECT_EQ(rewriteCommand(C, "x.ptx", "y.o"), (Args{"x.ptx", "-o", "y.o"}));
}

TEST(PtxasCommand, OptionsWithoutIO) {
  // Triton's line: what is left changes code (-lineinfo, --fmad, -O).
  PtxasCommand C = parsePtxasCommand(
      {"-lineinfo", "--fmad=false", "-v", "--gpu-name=sm_90a", "/tmp/k.ptx", "-o", "/tmp/k.o"});
  EXPECT_EQ(optionsWithoutIO(C), (Args{"-lineinfo", "--fmad=false"}));
  C = parsePtxasCommand({"--output-file", "a.cubin", "--verbose", "-dlcm=cg", "--gpu-name",
                         "sm_90a", "k.ptx", "-maxrregcount", "64", "-O3"});
  EXPECT_EQ(optionsWithoutIO(C), (Args{"-dlcm=cg", "-maxrregcount", "64", "-O3"}));
  C = parsePtxasCommand({"-g", "--opt-level", "0", "-arch", "sm_90", "-o=out.cubin", "k.ptx"});
  EXPECT_EQ(optionsWithoutIO(C), (Args{"-g", "--opt-level", "0"}));
  C = parsePtxasCommand({"k.ptx"});
  EXPECT_EQ(optionsWithoutIO(C), Args{});
}

TEST(PtxasReport, VariantFunctionsAreDropped) {
  const char *Log =
      "ptxas info    : 1492 bytes gmem\n"
      "ptxas info    : Compiling entry function '_Z1kPii__tally_ptb' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z1kPii__tally_ptb\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 12 registers, used 1 barriers\n"
      "ptxas info    : Function properties for __tly_conv_barrier\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function '_Z1kPii' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z1kPii\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 8 registers, used 1 barriers\n"
      "ptxas info    : Compiling entry function '_Z1kPii__tally_slice' for 'sm_90a'\n"
      "ptxas info    : Used 8 registers, used 1 barriers\n"
      "ptxas info    : Compile time = 4.605 ms\n";
  EXPECT_EQ(filterVariantReport(Log),
            "ptxas info    : 1492 bytes gmem\n"
            "ptxas info    : Compiling entry function '_Z1kPii' for 'sm_90a'\n"
            "ptxas info    : Function properties for _Z1kPii\n"
            "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
            "ptxas info    : Used 8 registers, used 1 barriers\n"
            "ptxas info    : Compile time = 4.605 ms\n");
}

} // namespace
