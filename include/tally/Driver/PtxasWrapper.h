//===- PtxasWrapper.h - tally-ptxas: ptxas with Tally's variants -*- C++ -*-===//
//
// `tally-ptxas` stands in for `ptxas` where a framework compiles PTX at run
// time (Triton names its ptxas with TRITON_PTXAS_PATH). For a command line
// it understands (one PTX file in, a cubin out) it adds the sliced and PTB
// variants and the embedded metadata to the module, compiles that with the
// real ptxas and the same options, checks that every original kernel's
// machine code is what plain ptxas makes (up to addresses the loader fills
// in), and shows ptxas's `-v` report as plain ptxas would have printed it.
// Anything else, and any failure, runs the real ptxas on the command line as
// it was given, with one line saying why: it never breaks a compilation.
//
// This header holds the parts that need no process: the command line's
// reading and the `-v` report's filtering (unit-tested against the command
// lines Triton makes).
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_DRIVER_PTXASWRAPPER_H
#define TALLY_DRIVER_PTXASWRAPPER_H

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace tally {

/// A ptxas command line as tally-ptxas reads it.
struct PtxasCommand {
  std::vector<std::string> Args; ///< as given, without the program name
  int InputIndex = -1;           ///< the PTX file's index in Args
  std::string Input;
  std::string Output = "elf.o"; ///< -o (ptxas's default when absent)
  int OutputIndex = -1;         ///< the word holding -o's value (-1: none)
  std::string OutputPrefix;     ///< text before the value in that word
  std::string Arch;             ///< --gpu-name (empty: ptxas's default)
  bool Verbose = false;         ///< -v
  /// Indexes in Args of the words optionsWithoutIO() leaves out: the input,
  /// -o, --gpu-name and -v with their values.
  std::vector<int> IOWords;
  /// Why the command is run as it is, without variants ("" : transform).
  std::string Passthrough;
};

/// Reads \p Args (argv[1..]) the way ptxas does: options with a value in
/// the next word or after `=`, short and long spellings, `-O3`. A command
/// that is not one PTX file compiled to one cubin, or that uses an option
/// tally-ptxas does not know, gets a Passthrough reason.
PtxasCommand parsePtxasCommand(const std::vector<std::string> &Args);

/// \p Log (ptxas's `-v` report for the module with variants) without the
/// lines about functions whose name contains `__tally_`: what plain ptxas
/// reports for the original module, but for the `bytes gmem` line, which
/// counts the `__tally_metadata` global too.
std::string filterVariantReport(llvm::StringRef Log);

/// The command's options without the input, the output, the architecture
/// and -v: what tally-opt's own ptxas runs pass on so that they compile
/// exactly as the user's command would.
std::vector<std::string> optionsWithoutIO(const PtxasCommand &C);
/// The command line with the input and the output file replaced.
std::vector<std::string> rewriteCommand(const PtxasCommand &C, const std::string &Input,
                                        const std::string &Output);

} // namespace tally

#endif
