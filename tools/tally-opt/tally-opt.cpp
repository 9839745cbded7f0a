//===- tally-opt.cpp - the Tally offline compiler driver ------------------===//
//
// Parses options, reads the input, runs the pass pipeline and writes the
// result. The work is done by the libraries; this file only wires them up
// and reports errors.
//
//===----------------------------------------------------------------------===//

#include "tally/PTX/Lexer.h"
#include "tally/PTX/Parser.h"
#include "tally/PTX/Printer.h"
#include "tally/Passes/Pass.h"
#include "tally/Target/Ptxas.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

#include <string>

using namespace llvm;
using namespace tally;

namespace {

struct Options {
  std::string Input;
  std::string Output;
  std::string Passes = DefaultPipeline;
  std::string MetadataFile;
  std::string Ptxas;
  std::string Arch;
  unsigned RegisterSlack = 4;
  bool NoPtxas = false;
  bool ListPasses = false;
  bool Stats = false;
};

/// Prints an error: located diagnostics as they are, others with the tool
/// name.
void report(Error E) {
  handleAllErrors(
      std::move(E),
      [](const ptx::SourceError &SE) {
        SE.log(errs());
        errs() << '\n';
      },
      [](const ErrorInfoBase &EI) {
        WithColor::error(errs(), "tally-opt") << EI.message() << '\n';
      });
}

Error fileError(StringRef File, const Twine &Msg) {
  return createStringError(inconvertibleErrorCode(), "%s: %s", File.str().c_str(),
                           Msg.str().c_str());
}

Error runTool(const Options &O) {
  auto Pipeline = parsePipeline(O.Passes);
  if (!Pipeline)
    return Pipeline.takeError();

  auto BufOrErr = MemoryBuffer::getFileOrSTDIN(O.Input, /*IsText=*/false,
                                               /*RequiresNullTerminator=*/false);
  if (std::error_code EC = BufOrErr.getError())
    return fileError(O.Input, "cannot read file: " + EC.message());
  auto M = ptx::parseModule(std::move(*BufOrErr));
  if (!M)
    return M.takeError();

  // Printer passes write to stdout; the module goes where -o says. A
  // pipeline of printers alone writes no module unless -o is given.
  bool OnlyPrinters = !Pipeline->empty();
  for (const auto &P : *Pipeline)
    OnlyPrinters &= P->isPrinter();
  std::string Output = O.Output;
  if (Output.empty() && !OnlyPrinters)
    Output = "-";

  // Everything is produced in memory first so that a failing pass leaves no
  // half-written output file.
  std::string Analysis;
  raw_string_ostream AnalysisOS(Analysis);
  PassContext Ctx(AnalysisOS);
  if (Error E = runPipeline(*Pipeline, **M, Ctx))
    return E;

  Ctx.Meta.finalize();

  // Variants are compiled once here: ptxas checks them, reports their
  // resources, and the register budget keeps them near their originals.
  bool HasVariants = any_of(Ctx.Meta.Kernels, [](const KernelRecord &K) {
    return !K.Variants.empty();
  });
  if (HasVariants && !O.NoPtxas) {
    auto Ptxas = findPtxas(O.Ptxas);
    if (!Ptxas) {
      if (!O.Ptxas.empty())
        return Ptxas.takeError();
      WithColor::warning(errs(), "tally-opt")
          << toString(Ptxas.takeError())
          << "; variants are not compiled and no resources are recorded\n";
    } else {
      BudgetOptions B;
      B.Ptxas = *Ptxas;
      B.Arch = O.Arch.empty() ? (*M)->getTarget().str() : O.Arch;
      B.Slack = O.RegisterSlack;
      if (B.Arch.empty())
        return fileError(O.Input, "no .target in the module; pass --arch");
      if (Error E = applyRegisterBudget(**M, Ctx.Meta, B))
        return E;
    }
  }

  std::string Text;
  raw_string_ostream TextOS(Text);
  if (!Output.empty())
    ptx::printModule(**M, TextOS);

  outs() << Analysis;
  if (!Output.empty()) {
    std::error_code EC;
    ToolOutputFile Out(Output, EC, sys::fs::OF_None);
    if (EC)
      return fileError(Output, "cannot open output file: " + EC.message());
    Out.os() << Text;
    Out.os().flush();
    if (Out.os().has_error()) {
      Out.os().clear_error();
      return fileError(Output, "write failed");
    }
    Out.keep();
  }
  if (!O.MetadataFile.empty()) {
    std::error_code EC;
    ToolOutputFile Meta(O.MetadataFile, EC, sys::fs::OF_Text);
    if (EC)
      return fileError(O.MetadataFile, "cannot open metadata file: " + EC.message());
    Meta.os() << Ctx.Meta.toYAML();
    Meta.keep();
  }
  if (O.Stats)
    for (const auto &S : Ctx.Stats)
      errs() << S.getValue() << " " << S.getKey() << '\n';
  return Error::success();
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM X(argc, argv);
  Options O;
  CLI::App App{"tally-opt: rewrite GPU kernels into preemptible forms.\n\n"
               "Reads PTX, parses it into Tally's IR, runs a pipeline of passes "
               "and prints the result.\n"
               "Examples:\n"
               "  tally-opt k.ptx -o out.ptx                 add sliced and PTB variants\n"
               "  tally-opt k.ptx -o out.ptx --passes=       parse and re-print\n"
               "  tally-opt k.ptx --passes='print<kernel-info>'   describe kernels\n",
               "tally-opt"};
  App.add_option("input", O.Input, "input file: PTX text ('-' for stdin)");
  App.add_option("-o,--output", O.Output,
                 "output file ('-' for stdout); default: stdout, or nothing when "
                 "the pipeline only prints analyses");
  App.add_option("--passes", O.Passes,
                 "comma-separated pass pipeline, e.g. 'print<kernel-info>'; "
                 "default: '" + std::string(DefaultPipeline) +
                     "' (add the sliced and PTB variant of every kernel that "
                     "allows it); empty ('--passes=') parses and re-prints");
  App.add_option("--metadata", O.MetadataFile,
                 "write what the transformations did to each kernel, as YAML "
                 "(docs/metadata.md)");
  App.add_option("--arch", O.Arch,
                 "architecture to compile variants for with ptxas (default: "
                 "the module's .target, e.g. sm_90a)");
  App.add_option("--ptxas", O.Ptxas,
                 "the ptxas to use (default: on PATH, else /usr/local/cuda/bin)");
  App.add_flag("--no-ptxas", O.NoPtxas,
               "do not compile variants (no resources in the metadata, no "
               "register budget)");
  App.add_option("--register-slack", O.RegisterSlack,
                 "registers a variant may use beyond its original (rounded "
                 "up to the allocation unit of 8) before tally-opt caps it "
                 "with .maxnreg; caps that cause spills are dropped")
      ->default_val(4);
  App.add_flag("--list-passes", O.ListPasses, "list the registered passes and exit");
  App.add_flag("--stats", O.Stats, "print pass statistics to stderr");
  App.set_version_flag("--version", "tally-opt 0.1.0");
  // CLI11 reads `--passes=` (an empty pipeline, the documented way to parse
  // and re-print) as a missing value and takes the next argument instead;
  // an empty pipeline is the default, so drop the argument here.
  std::vector<std::string> Args;
  for (int I = argc - 1; I > 0; --I) {
    if (StringRef(argv[I]) == "--passes=")
      O.Passes.clear();
    else
      Args.push_back(argv[I]);
  }
  try {
    App.parse(Args);
  } catch (const CLI::ParseError &E) {
    int RC = App.exit(E);
    return RC == 0 ? 0 : 1;
  }

  if (O.ListPasses) {
    for (const PassDescription &P : getRegisteredPasses())
      outs() << "  " << P.Name << "\n      " << P.Help << '\n';
    return 0;
  }
  if (O.Input.empty()) {
    WithColor::error(errs(), "tally-opt") << "no input file (see --help)\n";
    return 1;
  }
  if (Error E = runTool(O)) {
    report(std::move(E));
    return 1;
  }
  return 0;
}
