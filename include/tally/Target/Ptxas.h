//===- Ptxas.h - running ptxas and reading what it reports ------*- C++ -*-===//
//
// tally-opt compiles PTX to SASS with the CUDA toolkit's ptxas (there is no
// library for it on our machines). This runs it on PTX text, returns the
// cubin and the per-entry resources that `ptxas -v` reports, and applies the
// register budget that keeps variants near their originals.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_TARGET_PTXAS_H
#define TALLY_TARGET_PTXAS_H

#include "tally/Metadata/Metadata.h"
#include "tally/PTX/IR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace tally {

struct EntryReport {
  unsigned Registers = 0;
  unsigned Barriers = 0;
  uint64_t SharedBytes = 0;
  uint64_t StackBytes = 0;
  uint64_t SpillStores = 0, SpillLoads = 0;
  /// Performance warnings ptxas tied to this entry, by code ("C7509").
  std::vector<std::string> Warnings;
  uint64_t spills() const { return SpillStores + SpillLoads; }
};

struct PtxasResult {
  std::map<std::string, EntryReport, std::less<>> Entries;
  std::string Cubin;
  std::string Log;
};

/// The ptxas to use: \p Explicit if given, else `ptxas` on PATH, else
/// /usr/local/cuda/bin/ptxas. An error says where it looked.
llvm::Expected<std::string> findPtxas(llvm::StringRef Explicit = "");

/// Compiles \p Ptx for \p Arch (`sm_90a`) with `-v`, as relocatable code
/// (`-c`, which also accepts modules with external calls) or as an
/// executable cubin.
/// \p DisplayName replaces the temporary file's name in ptxas's messages;
/// \p Options go to ptxas before the architecture (e.g. `-lineinfo`).
llvm::Expected<PtxasResult> runPtxas(llvm::StringRef Ptxas, llvm::StringRef Ptx,
                                     llvm::StringRef Arch, bool Relocatable = true,
                                     llvm::StringRef DisplayName = "",
                                     llvm::ArrayRef<std::string> Options = {});

/// Parses the `ptxas -v` log (exposed for tests).
std::map<std::string, EntryReport, std::less<>> parsePtxasLog(llvm::StringRef Log);

/// The largest number of threads per block an entry can launch with, from
/// its registers and launch-bound directives (what the driver reports as
/// CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK on Hopper: 64K registers per
/// block, allocated per warp in units of 256).
unsigned maxThreadsPerBlock(unsigned Registers, unsigned DirectiveLimit);

struct BudgetOptions {
  std::string Ptxas;
  std::string Arch;
  /// A variant may use max(round up(original, 8), original + Slack) registers.
  unsigned Slack = 4;
  /// Compile as relocatable code (`-c`: also accepts modules with external
  /// calls), or whole-program as a loadable cubin.
  bool Relocatable = true;
  /// More ptxas options (a user's command line, for tally-ptxas).
  std::vector<std::string> Options;
};

/// The last compilation the budget made, for callers that can use it as
/// their final cubin.
struct BudgetOutcome {
  std::string Cubin;
  std::string Log;
  /// Whether Cubin was compiled from exactly the module as it stands after
  /// the budget (false where variants were dropped after it).
  bool CubinIsOfModule = false;
};

/// Compiles \p M, caps the registers of every variant that grew past its
/// budget with `.maxnreg` (dropped again where the cap makes it spill more
/// than its original), and records the final resources of originals and
/// variants in \p Meta.
llvm::Error applyRegisterBudget(ptx::Module &M, Metadata &Meta,
                                const BudgetOptions &Opts,
                                BudgetOutcome *Outcome = nullptr);

} // namespace tally

#endif
