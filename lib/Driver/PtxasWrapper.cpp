//===- PtxasWrapper.cpp - reading ptxas command lines ---------------------===//
//
// See PtxasWrapper.h. The option table follows `ptxas --help` of CUDA 13.0:
// every option, long and short, and whether it takes a value. Options that
// change which entries are compiled or where the input comes from send the
// command to the real ptxas untouched.
//
//===----------------------------------------------------------------------===//

#include "tally/Driver/PtxasWrapper.h"

#include <algorithm>
#include <cstring>

using namespace llvm;

namespace tally {

namespace {

enum class Role {
  Plain,       ///< understood, no value
  Value,       ///< understood, takes a value
  Output,      ///< -o
  Arch,        ///< --gpu-name
  Verbose,     ///< -v
  Passthrough, ///< understood, but the command runs as it is
  PassValue,   ///< the same, with a value
};

struct OptionInfo {
  const char *Long, *Short;
  Role R;
};

const OptionInfo Options[] = {
    {"Ofast-compile", "Ofc", Role::Value},
    {"allow-expensive-optimizations", "allow-expensive-optimizations", Role::Value},
    {"compile-as-tools-patch", "astoolspatch", Role::Passthrough},
    {"compile-only", "c", Role::Passthrough},
    {"compiler-annotations", "annotate", Role::Plain},
    {"def-load-cache", "dlcm", Role::Value},
    {"def-store-cache", "dscm", Role::Value},
    {"device-debug", "g", Role::Plain},
    {"device-function-maxrregcount", "func-maxrregcount", Role::Value},
    {"device-stack-protector", "device-stack-protector", Role::Value},
    {"disable-optimizer-constants", "disable-optimizer-consts", Role::Plain},
    {"disable-warnings", "w", Role::Plain},
    {"dont-merge-basicblocks", "no-bb-merge", Role::Plain},
    {"entry", "e", Role::PassValue},
    {"extensible-whole-program", "ewp", Role::Passthrough},
    {"fmad", "fmad", Role::Value},
    {"force-load-cache", "flcm", Role::Value},
    {"force-store-cache", "fscm", Role::Value},
    {"g-tensor-memory-access-check", "g-tmem-access-check", Role::Plain},
    {"generate-line-info", "lineinfo", Role::Plain},
    {"gno-tensor-memory-access-check", "gno-tmem-access-check", Role::Plain},
    {"gpu-name", "arch", Role::Arch},
    {"help", "h", Role::Passthrough},
    {"input-as-string", "ias", Role::PassValue},
    {"legacy-bar-warp-wide-behavior", "legacy-bar-warp-wide-behavior", Role::Plain},
    {"list-version", "version-ls", Role::Passthrough},
    {"machine", "m", Role::Value},
    {"make-errors-visible-at-exit", "make-errors-visible-at-exit", Role::Plain},
    {"maxntid", "maxntid", Role::Value},
    {"maxrregcount", "maxrregcount", Role::Value},
    {"minnctapersm", "minnctapersm", Role::Value},
    {"opt-level", "O", Role::Value},
    {"optimize-float-atomics", "opt-fp-atomics", Role::Plain},
    {"options-file", "optf", Role::PassValue},
    {"output-file", "o", Role::Output},
    {"override-directive-values", "override-directive-values", Role::Plain},
    {"position-independent-code", "pic", Role::Value},
    {"preserve-relocs", "preserve-relocs", Role::Plain},
    {"register-usage-level", "regUsageLevel", Role::Value},
    {"return-at-end", "ret-end", Role::Plain},
    {"sanitize", "sanitize", Role::Value},
    {"sp-bounds-check", "sp-bounds-check", Role::Plain},
    {"split-compile", "split-compile", Role::Value},
    {"suppress-async-bulk-multicast-advisory-warning",
     "suppress-async-bulk-multicast-advisory-warning", Role::Plain},
    {"suppress-debug-info", "suppress-debug-info", Role::Plain},
    {"suppress-double-demote-warning", "suppress-double-demote-warning", Role::Plain},
    {"suppress-sparse-mma-advisory-info", "suppress-sparse-mma-advisory-info", Role::Plain},
    {"suppress-stack-size-warning", "suppress-stack-size-warning", Role::Plain},
    {"verbose", "v", Role::Verbose},
    {"version", "V", Role::Passthrough},
    {"warn-on-double-precision-use", "warn-double-usage", Role::Plain},
    {"warn-on-local-memory-usage", "warn-lmem-usage", Role::Plain},
    {"warn-on-spills", "warn-spills", Role::Plain},
    {"warning-as-error", "Werror", Role::Plain},
};

const OptionInfo *lookup(StringRef Name, bool Long) {
  for (const OptionInfo &O : Options)
    if (Name == (Long ? O.Long : O.Short))
      return &O;
  return nullptr;
}

bool takesValue(Role R) {
  return R == Role::Value || R == Role::Output || R == Role::Arch || R == Role::PassValue;
}

} // namespace

PtxasCommand parsePtxasCommand(const std::vector<std::string> &Args) {
  PtxasCommand C;
  C.Args = Args;
  auto Pass = [&](const std::string &Why) {
    if (C.Passthrough.empty())
      C.Passthrough = Why;
  };
  std::vector<int> Positional;
  for (int I = 0; I < int(Args.size()); ++I) {
    StringRef A = Args[I];
    if (A.size() < 2 || A[0] != '-') {
      Positional.push_back(I);
      continue;
    }
    bool Long = A.starts_with("--");
    StringRef Body = A.drop_front(Long ? 2 : 1);
    StringRef Name = Body, Value;
    bool HasValue = false;
    size_t Eq = Body.find('=');
    if (Eq != StringRef::npos) {
      Name = Body.take_front(Eq);
      Value = Body.drop_front(Eq + 1);
      HasValue = true;
    }
    const OptionInfo *O = lookup(Name, Long);
    if (!O && !Long && !HasValue && Body.size() > 1 && Body[0] == 'O' &&
        std::isdigit(static_cast<unsigned char>(Body[1]))) {
      O = lookup("O", false); // -O3
      Value = Body.drop_front(1);
      HasValue = true;
    }
    if (!O && !Long) // single-dash spellings of long names are accepted too
      O = lookup(Name, true);
    if (!O) {
      Pass("unknown option '" + A.str() + "'");
      continue;
    }
    const int OptionIndex = I;
    int ValueIndex = I;
    std::string Prefix = HasValue ? A.take_front(A.size() - Value.size()).str() : "";
    if (takesValue(O->R) && !HasValue) {
      if (I + 1 >= int(Args.size())) {
        Pass("option '" + A.str() + "' without its value");
        continue;
      }
      ValueIndex = ++I;
      Value = Args[I];
      Prefix.clear();
    } else if (!takesValue(O->R) && HasValue) {
      Pass("option '" + Name.str() + "' with a value");
      continue;
    }
    if (O->R == Role::Output || O->R == Role::Arch || O->R == Role::Verbose) {
      C.IOWords.push_back(OptionIndex);
      if (ValueIndex != OptionIndex)
        C.IOWords.push_back(ValueIndex);
    }
    switch (O->R) {
    case Role::Output:
      C.Output = Value.str();
      C.OutputIndex = ValueIndex;
      C.OutputPrefix = Prefix;
      break;
    case Role::Arch:
      C.Arch = Value.str();
      break;
    case Role::Verbose:
      C.Verbose = true;
      break;
    case Role::Passthrough:
    case Role::PassValue:
      Pass("option '" + A.str() + "'");
      break;
    case Role::Plain:
    case Role::Value:
      break;
    }
  }
  if (Positional.size() != 1) {
    Pass(Positional.empty() ? "no input file" : "more than one input file");
  } else {
    C.InputIndex = Positional[0];
    C.Input = Args[Positional[0]];
    C.IOWords.push_back(C.InputIndex);
  }
  if (C.Passthrough.empty() && (C.Output.empty() || C.Output == "-"))
    Pass("output to standard output");
  return C;
}

std::string filterVariantReport(StringRef Log) {
  std::string Out;
  bool Skip = false;
  while (!Log.empty()) {
    auto [Line, Rest] = Log.split('\n');
    bool HadNewline = Log.size() > Line.size();
    Log = Rest;
    // A function's report starts with one of these and names it.
    for (const char *Start : {"Compiling entry function '", "Function properties for "}) {
      size_t At = Line.find(Start);
      if (At != StringRef::npos) {
        StringRef Name = Line.drop_front(At + std::strlen(Start));
        Skip = Name.contains("__tally_") || Name.starts_with("__tly_");
      }
    }
    // Lines about the whole module end a function's report.
    if (Line.contains("bytes gmem") || Line.contains("Compile time ="))
      Skip = false;
    if (Line.contains("__tally_"))
      continue; // e.g. a warning about a variant
    if (Skip)
      continue;
    Out += Line.str();
    if (HadNewline)
      Out += '\n';
  }
  return Out;
}

std::vector<std::string> optionsWithoutIO(const PtxasCommand &C) {
  std::vector<std::string> Out;
  for (int I = 0; I < int(C.Args.size()); ++I)
    if (std::find(C.IOWords.begin(), C.IOWords.end(), I) == C.IOWords.end())
      Out.push_back(C.Args[I]);
  return Out;
}

std::vector<std::string> rewriteCommand(const PtxasCommand &C, const std::string &Input,
                                        const std::string &Output) {
  std::vector<std::string> A = C.Args;
  if (C.InputIndex >= 0)
    A[C.InputIndex] = Input;
  if (C.OutputIndex >= 0) {
    A[C.OutputIndex] = C.OutputPrefix + Output;
  } else {
    A.push_back("-o");
    A.push_back(Output);
  }
  return A;
}

} // namespace tally
