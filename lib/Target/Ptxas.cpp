//===- Ptxas.cpp - running ptxas and reading what it reports --------------===//

#include "tally/Target/Ptxas.h"

#include "tally/PTX/Printer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace tally {

Expected<std::string> findPtxas(StringRef Explicit) {
  if (!Explicit.empty()) {
    if (sys::fs::can_execute(Explicit))
      return Explicit.str();
    return createStringError(inconvertibleErrorCode(),
                             "ptxas not found or not executable at '%s'",
                             Explicit.str().c_str());
  }
  if (auto P = sys::findProgramByName("ptxas"))
    return *P;
  if (sys::fs::can_execute("/usr/local/cuda/bin/ptxas"))
    return std::string("/usr/local/cuda/bin/ptxas");
  return createStringError(inconvertibleErrorCode(),
                           "ptxas not found on PATH or in /usr/local/cuda/bin "
                           "(install the CUDA toolkit or pass --ptxas)");
}

std::map<std::string, EntryReport, std::less<>> parsePtxasLog(StringRef Log) {
  std::map<std::string, EntryReport, std::less<>> Out;
  static const Regex Entry("Compiling entry function '([^']+)'");
  static const Regex Func("Function properties for ([^ ]+)");
  static const Regex Regs("Used ([0-9]+) registers");
  static const Regex Bars("used ([0-9]+) barriers");
  static const Regex Smem("([0-9]+) bytes smem");
  static const Regex Spill("([0-9]+) bytes stack frame, ([0-9]+) bytes spill "
                           "stores, ([0-9]+) bytes spill loads");
  static const Regex Warn("\\((C[0-9]+)\\).*function '([^']+)'");
  EntryReport *Cur = nullptr;
  bool InEntryProps = false;
  SmallVector<StringRef, 4> M;
  SmallVector<StringRef, 0> Lines;
  Log.split(Lines, '\n');
  for (StringRef L : Lines) {
    if (Entry.match(L, &M)) {
      Cur = &Out[M[1].str()];
      InEntryProps = false;
      continue;
    }
    if (Warn.match(L, &M)) {
      auto &W = Out[M[2].str()].Warnings;
      if (!is_contained(W, M[1].str()))
        W.push_back(M[1].str());
      continue;
    }
    if (Func.match(L, &M)) {
      // Properties of the entry itself come right after its "Compiling"
      // line; those of called functions name the function.
      InEntryProps = Cur && Out.count(M[1].str());
      continue;
    }
    if (!Cur)
      continue;
    if (Spill.match(L, &M) && InEntryProps) {
      Cur->StackBytes = std::stoull(M[1].str());
      Cur->SpillStores = std::stoull(M[2].str());
      Cur->SpillLoads = std::stoull(M[3].str());
    }
    if (Regs.match(L, &M)) {
      Cur->Registers = std::stoul(M[1].str());
      if (Bars.match(L, &M))
        Cur->Barriers = std::stoul(M[1].str());
      if (Smem.match(L, &M))
        Cur->SharedBytes = std::stoull(M[1].str());
    }
  }
  return Out;
}

Expected<PtxasResult> runPtxas(StringRef Ptxas, StringRef Ptx, StringRef Arch,
                               bool Relocatable, StringRef DisplayName,
                               ArrayRef<std::string> Options) {
  SmallString<128> In, Out, Log;
  if (std::error_code EC = sys::fs::createTemporaryFile("tally", "ptx", In))
    return errorCodeToError(EC);
  FileRemover RmIn(In);
  if (std::error_code EC = sys::fs::createTemporaryFile("tally", "cubin", Out))
    return errorCodeToError(EC);
  FileRemover RmOut(Out);
  if (std::error_code EC = sys::fs::createTemporaryFile("tally", "log", Log))
    return errorCodeToError(EC);
  FileRemover RmLog(Log);
  {
    std::error_code EC;
    raw_fd_ostream OS(In, EC);
    if (EC)
      return errorCodeToError(EC);
    OS << Ptx;
  }
  std::string ArchFlag = ("-arch=" + Arch).str();
  SmallVector<StringRef, 8> Args = {Ptxas, "-v"};
  if (Relocatable)
    Args.push_back("-c");
  for (const std::string &O : Options)
    Args.push_back(O);
  Args.append({ArchFlag, "-o", Out, In});
  std::optional<StringRef> Redirects[] = {std::nullopt, StringRef(Log), StringRef(Log)};
  std::string ErrMsg;
  int RC = sys::ExecuteAndWait(Ptxas, Args, std::nullopt, Redirects, 0, 0, &ErrMsg);
  PtxasResult R;
  if (auto B = MemoryBuffer::getFile(Log))
    R.Log = (*B)->getBuffer().str();
  if (!DisplayName.empty())
    for (size_t At; (At = R.Log.find(In.str())) != std::string::npos;)
      R.Log.replace(At, In.size(), DisplayName.str());
  if (RC != 0)
    return createStringError(inconvertibleErrorCode(), "ptxas failed for %s%s%s:\n%s",
                             Arch.str().c_str(), ErrMsg.empty() ? "" : ": ",
                             ErrMsg.c_str(), R.Log.c_str());
  auto Cubin = MemoryBuffer::getFile(Out, /*IsText=*/false);
  if (!Cubin)
    return errorCodeToError(Cubin.getError());
  R.Cubin = (*Cubin)->getBuffer().str();
  R.Entries = parsePtxasLog(R.Log);
  return std::move(R);
}

unsigned maxThreadsPerBlock(unsigned Registers, unsigned DirectiveLimit) {
  unsigned Limit = 1024;
  if (Registers) {
    unsigned PerWarp = alignTo(std::max(Registers, 1u) * 32, 256);
    Limit = std::min(Limit, (65536 / PerWarp) * 32);
  }
  if (DirectiveLimit)
    Limit = std::min(Limit, DirectiveLimit);
  return Limit;
}

/// Product of the .maxntid or .reqntid dimensions, 0 if neither.
static unsigned threadLimit(const ptx::Function &F) {
  for (StringRef D : {".reqntid", ".maxntid"})
    if (const ptx::Directive *Dir = F.getDirective(D)) {
      unsigned N = 1;
      for (const ptx::Token &T : Dir->Args) {
        unsigned V = 0;
        if (T.is(ptx::TokKind::Integer) && !T.Text.getAsInteger(0, V))
          N *= V;
      }
      return N;
    }
  return 0;
}

static Resources toResources(const EntryReport &E, StringRef Arch,
                             const ptx::Function *F) {
  Resources R;
  R.Arch = Arch.str();
  R.Registers = E.Registers;
  R.SharedBytes = E.SharedBytes;
  R.StackBytes = E.StackBytes;
  R.SpillStores = E.SpillStores;
  R.SpillLoads = E.SpillLoads;
  R.MaxThreadsPerBlock = maxThreadsPerBlock(E.Registers, F ? threadLimit(*F) : 0);
  return R;
}

/// Sets (Cap > 0) or removes (Cap == 0) the `.maxnreg` Tally added.
static void setCap(ptx::Module &M, ptx::Function &F, unsigned Cap,
                   unsigned OriginalCap) {
  auto It = find_if(F.Directives, [](const ptx::Directive &D) { return D.Name == ".maxnreg"; });
  if (Cap == 0) {
    if (It == F.Directives.end())
      return;
    if (OriginalCap)
      It->Args = {ptx::Token(ptx::TokKind::Integer, M.save(std::to_string(OriginalCap)))};
    else
      F.Directives.erase(It);
    return;
  }
  ptx::Token T(ptx::TokKind::Integer, M.save(std::to_string(Cap)));
  if (It != F.Directives.end()) {
    It->Args = {T};
    return;
  }
  ptx::Directive D;
  D.Name = ".maxnreg";
  D.Args = {T};
  F.Directives.push_back(std::move(D));
}

static unsigned directiveValue(const ptx::Function &F, StringRef Name) {
  unsigned V = 0;
  if (const ptx::Directive *D = F.getDirective(Name))
    if (!D->Args.empty())
      (void)D->Args.front().Text.getAsInteger(0, V);
  return V;
}

static std::string printed(const ptx::Module &M) {
  std::string Text;
  raw_string_ostream OS(Text);
  ptx::printModule(M, OS);
  return Text;
}

static Expected<PtxasResult> compile(ptx::Module &M, const BudgetOptions &O,
                                     std::string *Text = nullptr) {
  std::string T = printed(M);
  auto R = runPtxas(O.Ptxas, T, O.Arch, O.Relocatable, "", O.Options);
  if (Text)
    *Text = std::move(T);
  return R;
}

Error applyRegisterBudget(ptx::Module &M, Metadata &Meta, const BudgetOptions &O,
                          BudgetOutcome *Outcome) {
  // The text of the last compilation, kept only when a caller wants it.
  std::string LastText;
  std::string *Keep = Outcome ? &LastText : nullptr;
  auto R0 = compile(M, O, Keep);
  if (!R0)
    return R0.takeError();
  struct Capped {
    ptx::Function *F;
    unsigned OriginalCap;
    uint64_t OriginalSpills;
  };
  std::vector<Capped> Caps;
  for (KernelRecord &K : Meta.Kernels) {
    auto Orig = R0->Entries.find(K.Name);
    if (Orig == R0->Entries.end())
      continue;
    // ptxas raises any .maxnreg below 24 to 24 (with a warning).
    unsigned Budget = std::min(
        255u, std::max<unsigned>({alignTo(Orig->second.Registers, 8),
                                  Orig->second.Registers + O.Slack, 24u}));
    for (VariantRecord &V : K.Variants) {
      auto It = R0->Entries.find(V.Name);
      ptx::Function *F = M.getFunction(V.Name);
      if (It == R0->Entries.end() || !F || It->second.Registers <= Budget)
        continue;
      unsigned Existing = directiveValue(*F, ".maxnreg");
      if (Existing && Existing <= Budget)
        continue;
      setCap(M, *F, Budget, Existing);
      Caps.push_back({F, Existing, Orig->second.spills()});
    }
  }
  PtxasResult Final = std::move(*R0);
  if (!Caps.empty()) {
    auto R1 = compile(M, O, Keep);
    if (!R1)
      return R1.takeError();
    bool Undo = false;
    for (const Capped &C : Caps) {
      auto It = R1->Entries.find(C.F->Name);
      if (It != R1->Entries.end() && It->second.spills() > C.OriginalSpills) {
        setCap(M, *C.F, 0, C.OriginalCap);
        Undo = true;
      }
    }
    if (Undo) {
      R1 = compile(M, O, Keep);
      if (!R1)
        return R1.takeError();
    }
    Final = std::move(*R1);
  }
  // A variant that still spills more than its original is not worth
  // having: drop it and say why.
  for (KernelRecord &K : Meta.Kernels) {
    auto Orig = Final.Entries.find(K.Name);
    if (Orig == Final.Entries.end())
      continue;
    for (auto V = K.Variants.begin(); V != K.Variants.end();) {
      auto It = Final.Entries.find(V->Name);
      if (It == Final.Entries.end() || It->second.spills() <= Orig->second.spills()) {
        ++V;
        continue;
      }
      std::string Why = V->Kind + ": the variant spills (" +
                        std::to_string(It->second.spills()) + " bytes at " +
                        std::to_string(It->second.Registers) +
                        " registers, the original uses " +
                        std::to_string(Orig->second.Registers) + ")";
      K.Reason += (K.Reason.empty() ? "" : "; ") + Why;
      auto Item = find_if(M.Items, [&](const ptx::TopItem &I) {
        return I.getKind() == ptx::TopItem::Kind::Function && I.Func->Name == V->Name;
      });
      if (Item != M.Items.end())
        M.Items.erase(Item);
      V = K.Variants.erase(V);
    }
  }
  Meta.finalize();
  // Convergence-barrier functions no remaining variant calls go too.
  llvm::erase_if(M.Items, [&](const ptx::TopItem &I) {
    if (I.getKind() != ptx::TopItem::Kind::Function ||
        !I.Func->Name.starts_with("__tly_conv_barrier"))
      return false;
    bool Called = false;
    for (const ptx::TopItem &J : M.Items)
      if (J.getKind() == ptx::TopItem::Kind::Function && J.Func->Body)
        ptx::walkStmts(J.Func->Body->Body, [&](ptx::Stmt &S) {
          if (auto *IS = dyn_cast<ptx::InstStmt>(&S))
            for (const ptx::Operand &O : IS->I.Ops)
              if (O.getSymbol() == I.Func->Name)
                Called = true;
        });
    return !Called;
  });

  if (Outcome) {
    Outcome->Cubin = Final.Cubin;
    Outcome->Log = Final.Log;
    Outcome->CubinIsOfModule = printed(M) == LastText;
  }
  for (KernelRecord &K : Meta.Kernels) {
    if (auto It = Final.Entries.find(K.Name); It != Final.Entries.end())
      K.OriginalRes.push_back(toResources(It->second, O.Arch, M.getFunction(K.Name)));
    for (VariantRecord &V : K.Variants)
      if (auto It = Final.Entries.find(V.Name); It != Final.Entries.end())
        V.Res.push_back(toResources(It->second, O.Arch, M.getFunction(V.Name)));
  }
  return Error::success();
}

} // namespace tally
