//===- TransformPasses.cpp - slice, ptb, unify-sync, print<legality> ------===//
//
// Thin wrappers over lib/Transforms: they walk the module's kernels, ask the
// legality check, apply the rewrite, and record the result in the pass
// context's metadata and counters.
//
//===----------------------------------------------------------------------===//

#include "tally/Passes/Pass.h"

#include "tally/Analysis/KernelInfo.h"
#include "tally/Transforms/Legality.h"
#include "tally/Transforms/PTB.h"
#include "tally/Transforms/Slice.h"
#include "tally/Transforms/UnifySync.h"

using namespace llvm;
using namespace tally::ptx;

namespace tally {

namespace {

/// Kernels to transform: the module's kernels that are not themselves
/// variants made by an earlier pass.
std::vector<const KernelInfo *> originalKernels(const ModuleInfo &MI) {
  std::vector<const KernelInfo *> Ks;
  for (const KernelInfo &K : MI.kernels()) {
    StringRef N = K.Own.F->Name;
    if (!N.ends_with("__tally_slice") && !N.ends_with("__tally_ptb"))
      Ks.push_back(&K);
  }
  return Ks;
}

void addReason(KernelRecord &R, StringRef Form, StringRef Why) {
  std::string Item = (Form + ": " + Why).str();
  if (StringRef(R.Reason).contains(Item))
    return;
  R.Reason += (R.Reason.empty() ? "" : "; ") + Item;
}

void addNotes(KernelRecord &R, const Legality &L) {
  R.ReadsGridSize |= L.ReadsGridSize;
  for (const std::string &N : L.Notes)
    if (!is_contained(R.Notes, N))
      R.Notes.push_back(N);
}

void countRewrite(PassContext &Ctx, StringRef Pass, const RewriteStats &S) {
  Ctx.count((Pass + ".returns-rewritten").str(), S.Returns);
  Ctx.count((Pass + ".barriers-folded").str(), S.Barriers);
  Ctx.count((Pass + ".barrier-reductions-rewritten").str(), S.Reductions);
  Ctx.count((Pass + ".counted-barriers-kept").str(), S.KeptBarriers);
  Ctx.count((Pass + ".grid-sreg-reads-replaced").str(), S.SregReads);
  Ctx.count((Pass + ".live-in-registers-reset").str(), S.ZeroedRegisters);
}

class PrintLegalityPass : public ModulePass {
public:
  StringRef getName() const override { return "print<legality>"; }
  bool isPrinter() const override { return true; }
  Error run(Module &M, PassContext &Ctx) override {
    ModuleInfo MI(M);
    for (const KernelInfo *K : originalKernels(MI)) {
      Legality L = checkLegality(*K, M);
      Ctx.Out << "kernel " << K->Own.F->Name << '\n';
      Ctx.Out << "  slice: "
              << (L.SliceOK ? "ok" : "rejected: " + L.SliceReason) << '\n';
      Ctx.Out << "  ptb: " << (L.PtbOK ? "ok" : "rejected: " + L.PtbReason);
      if (L.PtbOK)
        Ctx.Out << " (barrier " << L.BarrierId
                << (L.HasReductionBarriers ? ", reductions" : "") << ")";
      Ctx.Out << '\n';
      for (const std::string &N : L.Notes)
        Ctx.Out << "  note: " << N << '\n';
    }
    return Error::success();
  }
};

/// Shared driver of the variant passes.
class VariantPass : public ModulePass {
public:
  using Builder = Expected<VariantRecord> (*)(Module &, const Function &,
                                              const Legality &, RewriteStats &);
  VariantPass(StringRef Name, StringRef Kind, Builder Build)
      : Name(Name), Kind(Kind), Build(Build) {}
  StringRef getName() const override { return Name; }

  Error run(Module &M, PassContext &Ctx) override {
    ModuleInfo MI(M);
    RewriteStats Stats;
    for (const KernelInfo *K : originalKernels(MI)) {
      const Function &F = *K->Own.F;
      KernelRecord &R = Ctx.Meta.getOrAddKernel(F.Name);
      if (M.getFunction(getVariantName(F.Name, Kind))) {
        addReason(R, Kind, "the module already has " + getVariantName(F.Name, Kind));
        continue;
      }
      Legality L = checkLegality(*K, M);
      addNotes(R, L);
      bool OK = Kind == "slice" ? L.SliceOK : L.PtbOK;
      if (!OK) {
        addReason(R, Kind, Kind == "slice" ? L.SliceReason : L.PtbReason);
        Ctx.count((Name + ".rejected").str());
        continue;
      }
      auto V = Build(M, F, L, Stats);
      if (!V)
        return V.takeError();
      R.Variants.push_back(std::move(*V));
      Ctx.count((Name + ".variants").str());
    }
    countRewrite(Ctx, Name, Stats);
    Ctx.Meta.finalize();
    return Error::success();
  }

private:
  StringRef Name, Kind;
  Builder Build;
};

class UnifySyncPass : public ModulePass {
public:
  StringRef getName() const override { return "unify-sync"; }
  Error run(Module &M, PassContext &Ctx) override {
    ModuleInfo MI(M);
    RewriteStats Stats;
    for (const KernelInfo *K : originalKernels(MI)) {
      Legality L = checkLegality(*K, M);
      if (!L.PtbOK) {
        Ctx.count("unify-sync.skipped");
        continue;
      }
      if (Error E = unifySync(M, *const_cast<Function *>(K->Own.F), L, Stats))
        return E;
    }
    countRewrite(Ctx, "unify-sync", Stats);
    return Error::success();
  }
};

} // namespace

std::unique_ptr<ModulePass> createPrintLegalityPass() {
  return std::make_unique<PrintLegalityPass>();
}
std::unique_ptr<ModulePass> createSlicePass() {
  return std::make_unique<VariantPass>("slice", "slice", &addSliceVariant);
}
std::unique_ptr<ModulePass> createPtbPass() {
  return std::make_unique<VariantPass>("ptb", "ptb", &addPtbVariant);
}
std::unique_ptr<ModulePass> createUnifySyncPass() {
  return std::make_unique<UnifySyncPass>();
}

} // namespace tally
