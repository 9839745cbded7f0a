//===- tally-ptxas.cpp - ptxas that adds Tally's variants -----------------===//
//
//   tally-ptxas [ptxas options] FILE.ptx -o FILE.cubin
//
// A drop-in ptxas (Triton: TRITON_PTXAS_PATH=.../tally-ptxas; `tally run
// --priority=best-effort` sets it). For one PTX file compiled to a cubin it
// adds the sliced and PTB variants and the embedded metadata, compiles the
// module with the real ptxas and the same options, and checks that every
// original kernel's code is what plain ptxas makes (TALLY_PTXAS_VERIFY=0
// skips that second compilation). Its report (`-v`) and exit status are
// plain ptxas's. Anything it does not handle, and every failure, runs the
// real ptxas on the command line as given, after one line on stderr saying
// why. `--version` adds a line naming tally-ptxas, so caches keyed by the
// ptxas version (Triton's) keep kernels compiled with and without it apart.
//
// Time: the register budget's compilations use the user's options and the
// metadata is embedded before them, so the budget's last cubin is the one
// written (CompileOptions::KeepCubin; the module is compiled again only if
// a variant was dropped after it), and the check's plain compilation runs
// beside the transformation; the budget's compilations use up to four
// threads (`--split-compile=4`, unless the user chose). TALLY_PTXAS_TIMING=1
// prints one line per file with the phases' times.
//
// The real ptxas: TALLY_PTXAS_REAL, else `ptxas` on PATH other than this
// program, else /usr/local/cuda/bin/ptxas.
//
//===----------------------------------------------------------------------===//

#include "tally/Driver/Driver.h"
#include "tally/Driver/PtxasWrapper.h"
#include "tally/Fatbin/CubinCompare.h"
#include "tally/Passes/Pass.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace llvm;
using namespace tally;

namespace {

constexpr const char *Version = "2";

/// This program's identity: its size and modification time. Part of the
/// `--version` line, so that caches keyed by it (Triton's) never hand a
/// kernel compiled by one build of the transformations to another.
std::string buildIdentity() {
  sys::fs::file_status St;
  std::string Me = sys::fs::getMainExecutable(nullptr, nullptr);
  if (Me.empty() || sys::fs::status(Me, St))
    return "unknown";
  return std::to_string(St.getSize()) + "-" +
         std::to_string(sys::toTimeT(St.getLastModificationTime()));
}

/// Temporary files, removed before this process exits or becomes ptxas.
std::vector<std::string> Temps;
void removeTemps() {
  for (const std::string &T : Temps)
    sys::fs::remove(T);
  Temps.clear();
}
bool makeTemp(StringRef Suffix, SmallVectorImpl<char> &Path) {
  if (sys::fs::createTemporaryFile("tally-ptxas", Suffix, Path))
    return false;
  Temps.emplace_back(Path.begin(), Path.end());
  return true;
}

std::string self() {
  auto P = sys::fs::getMainExecutable(nullptr, nullptr);
  SmallString<256> Real;
  if (!sys::fs::real_path(P, Real))
    return std::string(Real);
  return P;
}

/// The ptxas this program stands in for ("" if none is found).
std::string realPtxas() {
  std::string Me = self();
  if (const char *E = std::getenv("TALLY_PTXAS_REAL"); E && *E) {
    // Naming this program (through a link, or another spelling of its
    // path) would make it run itself without end: look further instead.
    SmallString<256> Real;
    if (sys::fs::real_path(E, Real) || std::string(Real) != Me)
      return E;
    errs() << "tally-ptxas: TALLY_PTXAS_REAL names tally-ptxas itself (" << E
           << "); looking for ptxas on PATH\n";
  }
  if (const char *Path = std::getenv("PATH")) {
    SmallVector<StringRef, 16> Dirs;
    StringRef(Path).split(Dirs, ':', -1, false);
    for (StringRef D : Dirs) {
      SmallString<256> Cand(D);
      sys::path::append(Cand, "ptxas");
      SmallString<256> Real;
      if (!sys::fs::can_execute(Cand) || sys::fs::real_path(Cand, Real))
        continue;
      if (std::string(Real) != Me)
        return std::string(Cand);
    }
  }
  if (sys::fs::can_execute("/usr/local/cuda/bin/ptxas"))
    return "/usr/local/cuda/bin/ptxas";
  return "";
}

/// Replaces this process by the real ptxas with \p Args: the user gets
/// exactly plain ptxas's behaviour.
[[noreturn]] void execReal(const std::string &Ptxas, const std::vector<std::string> &Args) {
  removeTemps();
  std::vector<char *> Argv;
  std::string Name = Ptxas;
  Argv.push_back(Name.data());
  std::vector<std::string> Copy = Args;
  for (std::string &A : Copy)
    Argv.push_back(A.data());
  Argv.push_back(nullptr);
  execv(Ptxas.c_str(), Argv.data());
  errs() << "tally-ptxas: error: cannot run " << Ptxas << ": " << std::strerror(errno) << '\n';
  std::exit(1);
}

[[noreturn]] void fallBack(const std::string &Ptxas, const PtxasCommand &C,
                           const std::string &Why) {
  errs() << "tally-ptxas: " << Why << "; compiled by plain ptxas without Tally's variants\n";
  errs().flush();
  execReal(Ptxas, C.Args);
}

struct Run {
  int Status = -1;
  std::string Out, Err;
};

/// Runs the real ptxas with \p Args, capturing what it prints.
std::optional<Run> runReal(const std::string &Ptxas, const std::vector<std::string> &Args) {
  SmallString<128> OutFile, ErrFile;
  if (!makeTemp("out", OutFile) || !makeTemp("err", ErrFile))
    return std::nullopt;
  std::vector<StringRef> Argv = {Ptxas};
  for (const std::string &A : Args)
    Argv.push_back(A);
  std::optional<StringRef> Redirects[] = {std::nullopt, StringRef(OutFile), StringRef(ErrFile)};
  std::string Msg;
  Run R;
  R.Status = sys::ExecuteAndWait(Ptxas, Argv, std::nullopt, Redirects, 0, 0, &Msg);
  if (R.Status < 0)
    return std::nullopt;
  if (auto B = MemoryBuffer::getFile(OutFile))
    R.Out = (*B)->getBuffer().str();
  if (auto B = MemoryBuffer::getFile(ErrFile))
    R.Err = (*B)->getBuffer().str();
  return R;
}

} // namespace

int main(int Argc, char **Argv) {
  std::vector<std::string> Args(Argv + 1, Argv + Argc);
  std::string Ptxas = realPtxas();
  if (Ptxas.empty()) {
    errs() << "tally-ptxas: error: cannot find the real ptxas (set TALLY_PTXAS_REAL, or put "
              "the CUDA toolkit's bin folder on PATH)\n";
    return 1;
  }
  // --version: ptxas's, and a line that keys version-keyed caches apart.
  if (Args.size() == 1 && (Args[0] == "--version" || Args[0] == "-V")) {
    auto R = runReal(Ptxas, Args);
    if (!R)
      execReal(Ptxas, Args);
    removeTemps();
    outs() << R->Out << "tally-ptxas " << Version << " (build " << buildIdentity()
           << "): adds Tally's sliced and preemptible variants to each module\n";
    errs() << R->Err;
    return R->Status;
  }
  PtxasCommand C = parsePtxasCommand(Args);
  if (!C.Passthrough.empty()) {
    bool Quiet = C.Passthrough.find("'--help'") != std::string::npos ||
                 C.Passthrough.find("'-h'") != std::string::npos ||
                 C.Passthrough.find("version") != std::string::npos;
    if (Quiet)
      execReal(Ptxas, Args);
    fallBack(Ptxas, C, C.Passthrough);
  }
  auto Input = MemoryBuffer::getFile(C.Input);
  if (!Input)
    execReal(Ptxas, Args); // ptxas says what is wrong with it
  if (detectInputKind((*Input)->getBuffer()) != InputKind::PTX)
    fallBack(Ptxas, C, "the input is not PTX text");

  const char *VerifyEnv = std::getenv("TALLY_PTXAS_VERIFY");
  const bool Verify = !VerifyEnv || std::string(VerifyEnv) != "0";
  const char *TimingEnv = std::getenv("TALLY_PTXAS_TIMING");
  const bool Timing = TimingEnv && *TimingEnv && std::string(TimingEnv) != "0";
  using Clock = std::chrono::steady_clock;
  auto Ms = [](Clock::time_point A, Clock::time_point B) {
    return std::chrono::duration<double, std::milli>(B - A).count();
  };
  const Clock::time_point T0 = Clock::now();

  SmallString<128> TmpPtx, TmpCubin, TmpPlain, PlainOut, PlainErr;
  if (!makeTemp("ptx", TmpPtx) || !makeTemp("cubin", TmpCubin) || !makeTemp("cubin", TmpPlain) ||
      !makeTemp("out", PlainOut) || !makeTemp("err", PlainErr))
    fallBack(Ptxas, C, "cannot create temporary files");

  // The check's compilation of the input as it is runs beside the
  // transformation: it needs nothing from it.
  std::optional<sys::ProcessInfo> PlainJob;
  if (Verify) {
    std::vector<std::string> PlainArgs = rewriteCommand(C, C.Input, std::string(TmpPlain));
    std::vector<StringRef> Argv = {Ptxas};
    for (const std::string &A : PlainArgs)
      Argv.push_back(A);
    std::optional<StringRef> Redirects[] = {std::nullopt, StringRef(PlainOut), StringRef(PlainErr)};
    std::string Msg;
    bool Failed = false;
    sys::ProcessInfo PI = sys::ExecuteNoWait(Ptxas, Argv, std::nullopt, Redirects, 0, &Msg, &Failed);
    if (!Failed && PI.Pid != sys::ProcessInfo::InvalidPid)
      PlainJob = PI;
  }
  // Waits for the check's compilation; nullopt when it did not run.
  auto WaitPlain = [&]() -> std::optional<Run> {
    if (!PlainJob)
      return std::nullopt;
    sys::ProcessInfo Done = sys::Wait(*PlainJob, std::nullopt);
    PlainJob.reset();
    if (Done.ReturnCode < 0)
      return std::nullopt;
    Run R;
    R.Status = Done.ReturnCode;
    if (auto B = MemoryBuffer::getFile(PlainOut))
      R.Out = (*B)->getBuffer().str();
    if (auto B = MemoryBuffer::getFile(PlainErr))
      R.Err = (*B)->getBuffer().str();
    return R;
  };
  // Every way out waits for that child first.
  auto Fail = [&](const std::string &Why) {
    (void)WaitPlain();
    fallBack(Ptxas, C, Why);
  };

  CompileOptions O;
  O.Pipeline = DefaultPipeline;
  O.UsePtxas = true;
  O.Ptxas = Ptxas;
  O.Arch = C.Arch;
  O.Jobs = 1;
  // The register budget's compilation, made with the user's options, is the
  // final cubin when nothing changed after it. Only when the check runs:
  // without it the report shown is the variant compilation's own.
  O.KeepCubin = Verify && !C.Arch.empty();
  if (O.KeepCubin) {
    O.PtxasOptions = optionsWithoutIO(C);
    // Warnings as errors would make a variant that spills fail the module
    // (and the file fall back) where the budget drops just that variant;
    // they change no code.
    llvm::erase_if(O.PtxasOptions, [](const std::string &A) {
      return A == "-Werror" || A == "--warning-as-error";
    });
    // The module has about three times the functions of the input: ptxas
    // may compile them on a few threads (unless the user chose). The check
    // below still compares each original kernel's code with plain ptxas's.
    bool UserSplit = llvm::any_of(O.PtxasOptions, [](const std::string &A) {
      return StringRef(A).starts_with("--split-compile") ||
             StringRef(A).starts_with("-split-compile");
    });
    if (!UserSplit)
      O.PtxasOptions.push_back("--split-compile=4");
  }
  auto Res = compileInput((*Input)->getMemBufferRef(), O);
  if (!Res) {
    std::string Why = toString(Res.takeError());
    Fail("cannot add the variants (" + StringRef(Why).split('\n').first.str() + ")");
  }
  const Clock::time_point T1 = Clock::now();
  std::string Report, ReportErr;
  bool Reused = !Res->Cubin.empty();
  // Writes \p Bytes to \p Path; false on any error (a full disk included).
  auto WriteFile = [](StringRef Path, StringRef Bytes, sys::fs::OpenFlags Flags) {
    std::error_code EC;
    raw_fd_ostream OS(Path, EC, Flags);
    if (EC)
      return false;
    OS << Bytes;
    OS.close();
    if (OS.has_error()) {
      OS.clear_error();
      return false;
    }
    return true;
  };
  if (Reused) {
    if (!WriteFile(TmpCubin, Res->Cubin, sys::fs::OF_None))
      Fail("cannot write " + std::string(TmpCubin));
  } else {
    if (!WriteFile(TmpPtx, Res->Output, sys::fs::OF_Text))
      Fail("cannot write " + std::string(TmpPtx));
    auto Variant = runReal(Ptxas, rewriteCommand(C, std::string(TmpPtx), std::string(TmpCubin)));
    if (!Variant || Variant->Status != 0)
      Fail("ptxas failed on the module with variants");
    Report = filterVariantReport(Variant->Out);
    ReportErr = filterVariantReport(Variant->Err);
  }
  const Clock::time_point T2 = Clock::now();
  if (Verify) {
    // The original kernels must compile to the same code as without Tally
    // (up to addresses the loader fills in). The plain run's report is the
    // one shown: it is exactly plain ptxas's.
    auto Plain = WaitPlain();
    if (!Plain)
      Plain = runReal(Ptxas, rewriteCommand(C, C.Input, std::string(TmpPlain)));
    if (!Plain || Plain->Status != 0)
      execReal(Ptxas, Args); // plain ptxas fails: the user sees how
    auto A = MemoryBuffer::getFile(TmpPlain), B = MemoryBuffer::getFile(TmpCubin);
    if (!A || !B)
      fallBack(Ptxas, C, "cannot read the compiled cubins back");
    auto Diffs = fatbin::compareKernelCode((*A)->getBuffer(), (*B)->getBuffer());
    if (!Diffs) {
      std::string Why = toString(Diffs.takeError());
      fallBack(Ptxas, C, "cannot compare the cubins (" + Why + ")");
    }
    for (const fatbin::KernelCodeDiff &D : *Diffs)
      if (!D.onlyAddressesDiffer())
        fallBack(Ptxas, C, "kernel " + D.Kernel + " would change: " + D.describe());
    Report = Plain->Out;
    ReportErr = Plain->Err;
  }
  const Clock::time_point T3 = Clock::now();
  if (Timing)
    errs() << formatv("tally-ptxas: {0}: variants and register budget {1:f1} ms, "
                      "{2} {3:f1} ms, check {4:f1} ms more; total {5:f1} ms\n",
                      sys::path::filename(C.Input), Ms(T0, T1),
                      Reused ? "budget's cubin kept, writing it" : "final ptxas", Ms(T1, T2),
                      Ms(T2, T3), Ms(T0, T3));
  if (std::error_code EC = sys::fs::copy_file(TmpCubin, C.Output))
    fallBack(Ptxas, C, "cannot write " + C.Output + ": " + EC.message());
  removeTemps();
  outs() << Report;
  errs() << ReportErr;
  return 0;
}
