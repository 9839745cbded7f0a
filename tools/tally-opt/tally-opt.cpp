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
#include "tally/Driver/Driver.h"
#include "tally/Passes/Pass.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
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
  bool NoEmbedMetadata = false;
  bool List = false;
  std::string ExtractDir;
  unsigned Jobs = 0;
  bool Quiet = false;
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

/// Writes \p Bytes to \p Path only once they are complete, so a failure
/// leaves no partial file.
Error writeOutput(StringRef Path, StringRef Bytes) {
  std::error_code EC;
  ToolOutputFile Out(Path, EC, sys::fs::OF_None);
  if (EC)
    return fileError(Path, "cannot open output file: " + EC.message());
  Out.os() << Bytes;
  Out.os().flush();
  if (Out.os().has_error()) {
    Out.os().clear_error();
    return fileError(Path, "write failed");
  }
  Out.keep();
  return Error::success();
}

Error runTool(const Options &O) {
  // A bad pipeline is reported before anything is read.
  auto Pipeline = parsePipeline(O.Passes);
  if (!Pipeline)
    return Pipeline.takeError();
  bool PrintOnly = isPrintOnly(*Pipeline);
  auto BufOrErr = MemoryBuffer::getFileOrSTDIN(O.Input, /*IsText=*/false,
                                               /*RequiresNullTerminator=*/false);
  if (std::error_code EC = BufOrErr.getError())
    return fileError(O.Input, "cannot read file: " + EC.message());
  MemoryBufferRef Input = (*BufOrErr)->getMemBufferRef();

  if (O.List)
    return listInput(Input, outs());
  if (!O.ExtractDir.empty()) {
    auto Files = extractPTX(Input);
    if (!Files)
      return Files.takeError();
    if (std::error_code EC = sys::fs::create_directories(O.ExtractDir))
      return fileError(O.ExtractDir, "cannot create directory: " + EC.message());
    for (auto &[Name, Text] : *Files) {
      SmallString<256> Path(O.ExtractDir);
      sys::path::append(Path, Name);
      if (Error E = writeOutput(Path, Text))
        return E;
      outs() << Path << '\n';
    }
    return Error::success();
  }

  // Binary output goes to a file: say so before any work is done.
  bool Binary = detectInputKind(Input.getBuffer()) != InputKind::PTX;
  if (O.Output.empty() && Binary && !PrintOnly)
    return fileError(O.Input, "binary output needs -o FILE");

  CompileOptions C;
  C.Pipeline = O.Passes;
  C.UsePtxas = !O.NoPtxas;
  C.Ptxas = O.Ptxas;
  C.Arch = O.Arch;
  C.RegisterSlack = O.RegisterSlack;
  C.EmbedMetadata = !O.NoEmbedMetadata;
  C.Jobs = O.Jobs;
  if (!O.Quiet)
    C.Progress = &errs();
  auto R = compileInput(Input, C);
  if (!R)
    return R.takeError();
  for (const std::string &W : R->Warnings)
    WithColor::warning(errs(), "tally-opt") << W << '\n';

  outs() << R->Analysis;
  std::string Output = O.Output;
  if (Output.empty() && !PrintOnly)
    Output = "-"; // PTX input (binary inputs without -o stopped above)
  if (!Output.empty()) {
    if (Error E = writeOutput(Output, R->Output))
      return E;
    // A rewritten executable or library stays executable.
    if (Output != "-" && O.Input != "-" &&
        detectInputKind(Input.getBuffer()) == InputKind::HostELF)
      if (auto Perms = sys::fs::getPermissions(O.Input))
        (void)sys::fs::setPermissions(Output, *Perms);
  }
  if (!O.MetadataFile.empty())
    if (Error E = writeOutput(O.MetadataFile, R->Meta.toYAML()))
      return E;
  if (O.Stats)
    for (const auto &S : R->Stats)
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
  App.add_option("input", O.Input,
                 "input: PTX text, a fatbin, or a host ELF file (object, "
                 "executable, shared library) with fatbins; '-' for stdin");
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
  App.add_flag("--no-embed-metadata", O.NoEmbedMetadata,
               "do not put the metadata into the output as the global byte "
               "array __tally_metadata");
  App.add_flag("--list", O.List,
               "list the entries of a fatbin, object, executable or shared "
               "library (kind, arch, sizes, compression, kernels) and exit");
  App.add_option("--extract-ptx", O.ExtractDir,
                 "write the PTX entries of a binary input into this directory "
                 "and exit");
  App.add_option("-j,--jobs", O.Jobs,
                 "parallel transformations and ptxas runs for binary inputs "
                 "(default: one per core)");
  App.add_flag("-q,--quiet", O.Quiet, "no progress lines for binary inputs");
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
