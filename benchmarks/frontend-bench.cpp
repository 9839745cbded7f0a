//===- frontend-bench.cpp - throughput of the PTX front end ---------------===//
//
// Usage: tally-frontend-bench [--reps N] [--ptxas PATH] DIR|FILE...
//
// Loads every .ptx file into memory, then times parse + print of all of them
// N times (default 5) and reports the median as MB/s. With --ptxas, also
// times `ptxas -c -arch=<.target>` on each file once (serially, output to a
// temporary file) and reports the front end's time as a fraction of it.
//
//===----------------------------------------------------------------------===//

#include "tally/PTX/Parser.h"
#include "tally/PTX/Printer.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <vector>

using namespace llvm;
using Clock = std::chrono::steady_clock;

static double seconds(Clock::time_point A, Clock::time_point B) {
  return std::chrono::duration<double>(B - A).count();
}

static void collect(StringRef Path, std::vector<std::string> &Files) {
  if (!sys::fs::is_directory(Path)) {
    Files.push_back(Path.str());
    return;
  }
  std::error_code EC;
  for (sys::fs::recursive_directory_iterator I(Path, EC), E; I != E && !EC;
       I.increment(EC))
    if (StringRef(I->path()).ends_with(".ptx"))
      Files.push_back(I->path());
}

int main(int argc, char **argv) {
  unsigned Reps = 5;
  std::string Ptxas;
  std::vector<std::string> Files;
  for (int I = 1; I < argc; ++I) {
    StringRef A = argv[I];
    if (A == "--reps" && I + 1 < argc)
      Reps = std::max(1u, unsigned(atoi(argv[++I])));
    else if (A == "--ptxas" && I + 1 < argc)
      Ptxas = argv[++I];
    else
      collect(A, Files);
  }
  if (Files.empty()) {
    errs() << "usage: tally-frontend-bench [--reps N] [--ptxas PATH] DIR|FILE...\n";
    return 1;
  }
  std::sort(Files.begin(), Files.end());

  std::vector<std::unique_ptr<MemoryBuffer>> Bufs;
  uint64_t Bytes = 0;
  for (const std::string &F : Files) {
    auto B = MemoryBuffer::getFile(F);
    if (!B) {
      errs() << F << ": " << B.getError().message() << '\n';
      return 1;
    }
    Bytes += (*B)->getBufferSize();
    Bufs.push_back(std::move(*B));
  }

  std::vector<double> Times;
  for (unsigned R = 0; R < Reps; ++R) {
    auto T0 = Clock::now();
    for (const auto &B : Bufs) {
      auto M = tally::ptx::parseModule(
          MemoryBuffer::getMemBuffer(B->getMemBufferRef(), false));
      if (!M) {
        logAllUnhandledErrors(M.takeError(), errs());
        return 1;
      }
      SmallString<0> Out;
      raw_svector_ostream OS(Out);
      tally::ptx::printModule(**M, OS);
    }
    Times.push_back(seconds(T0, Clock::now()));
  }
  std::sort(Times.begin(), Times.end());
  double Median = Times[Times.size() / 2];
  outs() << format("files: %zu, bytes: %.2f MB\n", Files.size(), Bytes / 1e6);
  outs() << format("parse+print: median %.3f s over %u runs (min %.3f, max %.3f), "
                   "%.1f MB/s\n",
                   Median, Reps, Times.front(), Times.back(), Bytes / 1e6 / Median);

  if (Ptxas.empty())
    return 0;
  SmallString<128> Tmp;
  sys::fs::createTemporaryFile("tally-bench", "cubin", Tmp);
  double PtxasTime = 0;
  for (size_t I = 0; I < Files.size(); ++I) {
    StringRef Text = Bufs[I]->getBuffer();
    size_t At = Text.find(".target");
    std::string Arch = "sm_90a";
    if (At != StringRef::npos) {
      StringRef Rest = Text.substr(At + 7).ltrim();
      Arch = Rest.take_while([](char C) { return isAlnum(C) || C == '_'; }).str();
    }
    std::string ArchFlag = "-arch=" + Arch;
    StringRef Args[] = {Ptxas, "-c", ArchFlag, "-o", Tmp, Files[I]};
    auto T0 = Clock::now();
    int RC = sys::ExecuteAndWait(Ptxas, Args);
    PtxasTime += seconds(T0, Clock::now());
    if (RC != 0) {
      errs() << "ptxas failed on " << Files[I] << '\n';
      return 1;
    }
  }
  sys::fs::remove(Tmp);
  outs() << format("ptxas -c: %.2f s total (serial)\n", PtxasTime);
  outs() << format("front end / ptxas: %.2f %%\n", 100.0 * Median / PtxasTime);
  return 0;
}
