//===- Driver.cpp - what tally-opt does with each kind of input -----------===//

#include "tally/Driver/Driver.h"

#include "tally/Fatbin/CubinCompare.h"
#include "tally/Fatbin/Fatbin.h"
#include "tally/Fatbin/HostObject.h"
#include "tally/Fatbin/Listing.h"
#include "tally/PTX/Parser.h"
#include "tally/PTX/Printer.h"
#include "tally/Passes/Pass.h"
#include "tally/Target/Ptxas.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"

#include <mutex>

using namespace llvm;
using namespace tally::fatbin;

namespace tally {

InputKind detectInputKind(StringRef Bytes) {
  if (hasFatbinMagic(Bytes))
    return InputKind::Fatbin;
  if (hasELFMagic(Bytes))
    return InputKind::HostELF;
  return InputKind::PTX;
}

namespace {

Error error(const Twine &Msg) {
  return createStringError(inconvertibleErrorCode(), "%s", Msg.str().c_str());
}

/// Adds (or replaces) `.global .align 1 .b8 __tally_metadata[N] = {...}`.
Error embedMetadata(ptx::Module &M, StringRef YAML) {
  llvm::erase_if(M.Items, [](const ptx::TopItem &I) {
    return I.getKind() == ptx::TopItem::Kind::Var && !I.Var.Decls.empty() &&
           I.Var.Decls.front().Name == "__tally_metadata";
  });
  std::string Text;
  raw_string_ostream OS(Text);
  OS << ".global .align 1 .b8 __tally_metadata[" << YAML.size() + 1 << "] = {";
  for (char C : YAML)
    OS << unsigned((unsigned char)C) << ", ";
  OS << "0};\n";
  auto Stmts = ptx::parseStatements(M, Text);
  if (!Stmts)
    return Stmts.takeError();
  auto *D = dyn_cast<ptx::DeclStmt>(Stmts->front().get());
  if (!D)
    return error("internal error: metadata declaration did not parse");
  // Last, so that the globals before it keep their addresses and the
  // original kernels their machine code.
  M.Items.push_back(ptx::TopItem(std::move(D->D)));
  return Error::success();
}

/// ptxas rejected a transformed module: if it rejects the input too, say so
/// with the input's name and lines; otherwise it is a Tally bug.
Error explainPtxasFailure(Error E, StringRef Original, StringRef Name, const BudgetOptions &B) {
  auto R = runPtxas(B.Ptxas, Original, B.Arch, B.Relocatable, Name, B.Options);
  if (!R) {
    consumeError(std::move(E));
    return error(Name + ": the input does not compile with ptxas (" + B.Arch + "):\n" +
                 toString(R.takeError()));
  }
  return error(Name + ": internal error: ptxas accepts the input but rejects its "
                      "transformed form; please report this with the input:\n" +
               toString(std::move(E)));
}

/// One PTX module through the pipeline, ptxas and the register budget.
struct ModuleOutput {
  std::string Text;
  Metadata Meta;
  std::string Analysis;
  StringMap<uint64_t> Stats;
  bool HasVariants = false;
  std::string Cubin; ///< with KeepCubin, when it is of Text
};

/// The metadata's YAML without the resources ptxas reported.
std::string yamlWithoutResources(const Metadata &Meta) {
  Metadata Copy = Meta;
  for (KernelRecord &K : Copy.Kernels) {
    K.OriginalRes.clear();
    for (VariantRecord &V : K.Variants)
      V.Res.clear();
  }
  return Copy.toYAML();
}

Expected<ModuleOutput> compileModule(StringRef Text, StringRef Name,
                                     const CompileOptions &O, bool RequirePtxas) {
  auto Pipeline = parsePipeline(O.Pipeline);
  if (!Pipeline)
    return Pipeline.takeError();
  auto M = ptx::parseModule(MemoryBuffer::getMemBufferCopy(Text, Name));
  if (!M)
    return M.takeError();
  ModuleOutput Out;
  raw_string_ostream AOS(Out.Analysis);
  PassContext Ctx(AOS);
  if (Error E = runPipeline(*Pipeline, **M, Ctx))
    return std::move(E);
  Ctx.Meta.finalize();
  Out.HasVariants = any_of(Ctx.Meta.Kernels, [](const KernelRecord &K) {
    return !K.Variants.empty();
  });
  // KeepCubin: PTX inputs compiled with ptxas and embedded metadata only
  // (fatbin entries are compiled per cubin, as their ELF types ask).
  const bool Keep = O.KeepCubin && !RequirePtxas && O.UsePtxas && O.EmbedMetadata;
  if (Out.HasVariants && (O.UsePtxas || RequirePtxas)) {
    auto Ptxas = findPtxas(O.Ptxas);
    if (!Ptxas)
      return Ptxas.takeError();
    BudgetOptions B;
    B.Ptxas = *Ptxas;
    B.Arch = O.Arch.empty() ? (*M)->getTarget().str() : O.Arch;
    B.Slack = O.RegisterSlack;
    if (B.Arch.empty())
      return error(Name + ": no .target in the module; pass --arch");
    B.Options = O.PtxasOptions;
    BudgetOutcome Last;
    std::string Embedded;
    if (Keep) {
      // The metadata goes in first, so that the budget compiles the final
      // module; it cannot hold the resources the budget finds.
      B.Relocatable = false;
      Embedded = yamlWithoutResources(Ctx.Meta);
      if (Error E = embedMetadata(**M, Embedded))
        return std::move(E);
    }
    if (Error E = applyRegisterBudget(**M, Ctx.Meta, B, Keep ? &Last : nullptr))
      return explainPtxasFailure(std::move(E), Text, Name, B);
    if (Keep) {
      std::string Now = yamlWithoutResources(Ctx.Meta);
      if (Now != Embedded) {
        // Variants were dropped: the module changes, and so must its cubin.
        if (Error E = embedMetadata(**M, Now))
          return std::move(E);
      } else if (Last.CubinIsOfModule) {
        Out.Cubin = std::move(Last.Cubin);
      }
    }
  }
  if (Out.HasVariants && O.EmbedMetadata && !Keep)
    if (Error E = embedMetadata(**M, Ctx.Meta.toYAML()))
      return std::move(E);
  raw_string_ostream TOS(Out.Text);
  ptx::printModule(**M, TOS);
  Out.Meta = std::move(Ctx.Meta);
  Out.Stats = std::move(Ctx.Stats);
  return std::move(Out);
}

void mergeInto(CompileResult &R, ModuleOutput &&M) {
  for (KernelRecord &K : M.Meta.Kernels)
    if (!R.Meta.findKernel(K.Name))
      R.Meta.Kernels.push_back(std::move(K));
  R.Analysis += M.Analysis;
  for (auto &S : M.Stats)
    R.Stats[S.getKey()] += S.getValue();
}

bool isRelocatableELF(StringRef ELF) {
  // e_type at offset 16, little endian: 1 = ET_REL.
  return ELF.size() > 17 && ELF[16] == 1 && ELF[17] == 0;
}

/// Transforms every PTX entry of \p F and rebuilds the cubins of the same
/// container from it.
Error transformFatbin(FatbinFile &F, StringRef Name, const CompileOptions &O,
                      CompileResult &R) {
  auto Ptxas = findPtxas(O.Ptxas);
  if (!Ptxas)
    return Ptxas.takeError();
  struct Job {
    size_t C, E; // container, entry of the PTX
    std::vector<size_t> Cubins;
  };
  std::vector<Job> Jobs;
  for (size_t C = 0; C < F.Containers.size(); ++C) {
    auto &Entries = F.Containers[C].Entries;
    for (size_t E = 0; E < Entries.size(); ++E)
      if (Entries[E].isPTX() && !Entries[E].isObfuscated())
        Jobs.push_back({C, E, {}});
    // Each cubin is rebuilt from the PTX of its container with the highest
    // architecture not above its own.
    for (size_t E = 0; E < Entries.size(); ++E) {
      if (!Entries[E].isELF())
        continue;
      // Prefer, at equal architecture, the PTX with the same family suffix
      // (compute_90a for sm_90a).
      auto Rank = [&](const Job &J) {
        bool SameSuffix = (Entries[J.E].Flags & (entry_flags::ArchA | entry_flags::ArchF)) ==
                          (Entries[E].Flags & (entry_flags::ArchA | entry_flags::ArchF));
        return std::make_pair(Entries[J.E].Arch, SameSuffix);
      };
      Job *Best = nullptr;
      for (Job &J : Jobs)
        if (J.C == C && Entries[J.E].Arch <= Entries[E].Arch &&
            (!Best || Rank(J) > Rank(*Best)))
          Best = &J;
      if (Best)
        Best->Cubins.push_back(E);
      else
        R.Warnings.push_back(formatv("{0}: container {1} entry {2} ({3}) has no PTX "
                                     "to rebuild it from; left unchanged",
                                     Name, C, E, Entries[E].archName())
                                 .str());
    }
  }
  if (Jobs.empty())
    return error(Name + ": no PTX entry to transform (kernels compiled to SASS only "
                        "cannot be rewritten)");

  std::mutex Mu;
  Error First = Error::success();
  unsigned Done = 0;
  auto Work = [&](Job &J) {
    FatbinContainer &Cont = F.Containers[J.C];
    FatbinEntry &PTX = Cont.Entries[J.E];
    auto Text = getPTXText(PTX);
    std::string EntryName = formatv("{0}:entry{1}.{2}", Name, J.E, PTX.archName()).str();
    Expected<ModuleOutput> Mod =
        Text ? compileModule(*Text, EntryName, O, /*RequirePtxas=*/true)
             : Expected<ModuleOutput>(Text.takeError());
    std::vector<std::pair<size_t, std::string>> NewCubins;
    std::vector<std::string> Warnings;
    uint64_t AddressOnly = 0; // original kernels whose code moved addresses only
    Error Err = Mod ? Error::success() : Mod.takeError();
    for (size_t CI : J.Cubins) {
      if (Err)
        break;
      FatbinEntry &Old = Cont.Entries[CI];
      std::string Arch = Old.archName();
      BudgetOptions B;
      B.Ptxas = *Ptxas;
      B.Arch = Arch;
      B.Relocatable = isRelocatableELF(Old.Payload);
      auto Res = runPtxas(B.Ptxas, Mod->Text, Arch, B.Relocatable);
      if (!Res) {
        Err = explainPtxasFailure(Res.takeError(), *Text, EntryName, B);
        break;
      }
      // The original kernels must keep their machine code, up to addresses
      // the loader fills in, which what tally-opt adds to the module (the
      // __tally_metadata global) can move (CubinCompare.h).
      if (auto Diffs = compareKernelCode(Old.Payload, Res->Cubin)) {
        for (const KernelCodeDiff &D : *Diffs) {
          if (D.onlyAddressesDiffer()) {
            ++AddressOnly;
            continue;
          }
          Warnings.push_back(formatv("{0}: kernel {1} compiles to different code for {2} "
                                     "than in the input: {3}",
                                     EntryName, D.Kernel, Arch, D.describe())
                                 .str());
        }
      } else {
        consumeError(Diffs.takeError()); // not an ELF cubin: nothing to compare
      }
      NewCubins.push_back({CI, std::move(Res->Cubin)});
    }
    std::lock_guard<std::mutex> Lock(Mu);
    ++Done;
    if (O.Progress)
      *O.Progress << formatv("[{0}/{1}] {2}: {3} kernels, {4} cubins\n", Done,
                             Jobs.size(), EntryName,
                             Mod ? Mod->Meta.Kernels.size() : 0, NewCubins.size());
    if (Err) {
      if (!First)
        First = std::move(Err);
      else
        consumeError(std::move(Err));
      return;
    }
    // The PTX payload is NUL terminated, as nvcc writes it.
    PTX.Payload = Mod->Text + '\0';
    for (auto &[CI, Bytes] : NewCubins)
      Cont.Entries[CI].Payload = std::move(Bytes);
    R.Warnings.insert(R.Warnings.end(), Warnings.begin(), Warnings.end());
    if (AddressOnly)
      R.Stats["fatbin.kernels-recompiled-with-moved-addresses"] += AddressOnly;
    mergeInto(R, std::move(*Mod));
  };
  DefaultThreadPool Pool(hardware_concurrency(O.Jobs));
  for (Job &J : Jobs)
    Pool.async([&, JP = &J] { Work(*JP); });
  Pool.wait();
  return First;
}

Expected<std::string> writeFatbinBytes(const FatbinFile &F) {
  SmallVector<char, 0> Out;
  if (Error E = writeFatbin(F, Out))
    return std::move(E);
  return std::string(Out.data(), Out.size());
}

/// Prefixes errors that name a byte offset with the input's name.
Error inFile(StringRef Name, Error E) {
  return handleErrors(std::move(E), [&](const ErrorInfoBase &EI) -> Error {
    return error(Name + ": " + EI.message());
  });
}

} // namespace

Expected<CompileResult> compileInput(MemoryBufferRef Input, const CompileOptions &O) {
  CompileResult R;
  StringRef Name = Input.getBufferIdentifier();
  switch (detectInputKind(Input.getBuffer())) {
  case InputKind::PTX: {
    auto Mod = compileModule(Input.getBuffer(), Name, O, /*RequirePtxas=*/false);
    if (!Mod)
      return Mod.takeError();
    R.Output = Mod->Text;
    R.Cubin = std::move(Mod->Cubin);
    mergeInto(R, std::move(*Mod));
    return std::move(R);
  }
  case InputKind::Fatbin: {
    auto F = readFatbin(Input);
    if (!F)
      return inFile(Name, F.takeError());
    if (Error E = transformFatbin(*F, Name, O, R))
      return std::move(E);
    auto Bytes = writeFatbinBytes(*F);
    if (!Bytes)
      return inFile(Name, Bytes.takeError());
    R.Output = std::move(*Bytes);
    return std::move(R);
  }
  case InputKind::HostELF: {
    auto H = readHostFatbins(Input);
    if (!H)
      return inFile(Name, H.takeError());
    std::string Current = Input.getBuffer().str();
    for (FatbinSection &S : H->Sections) {
      if (Error E = transformFatbin(S.Fatbin, (Name + ":" + S.Name).str(), O, R))
        return std::move(E);
      auto New = updateFatbinSection(MemoryBufferRef(Current, Name), S.Name, S.Fatbin);
      if (!New)
        return inFile(Name, New.takeError());
      Current = std::move(*New);
    }
    R.Output = std::move(Current);
    return std::move(R);
  }
  }
  llvm_unreachable("unknown input kind");
}

static std::vector<std::string> ptxKernelNames(StringRef Text) {
  std::vector<std::string> Names;
  auto M = ptx::parseModule(Text, "<fatbin entry>");
  if (!M) {
    consumeError(M.takeError());
    return {"<PTX does not parse>"};
  }
  for (ptx::Function *F : (*M)->kernels())
    Names.push_back(F->Name.str());
  return Names;
}

Error listInput(MemoryBufferRef Input, raw_ostream &OS) {
  StringRef Name = Input.getBufferIdentifier();
  ListingOptions LO;
  LO.PTXKernelNames = ptxKernelNames;
  switch (detectInputKind(Input.getBuffer())) {
  case InputKind::PTX:
    return error(Name + ": PTX text has no fatbin to list (use "
                        "--passes='print<kernel-info>')");
  case InputKind::Fatbin: {
    auto F = readFatbin(Input);
    if (!F)
      return inFile(Name, F.takeError());
    OS << Name << ": fatbin, " << F->Containers.size() << " container(s)\n";
    return inFile(Name, printFatbinListing(*F, OS, LO));
  }
  case InputKind::HostELF: {
    auto H = readHostFatbins(Input);
    if (!H)
      return inFile(Name, H.takeError());
    for (const FatbinSection &S : H->Sections) {
      OS << Name << ": section " << S.Name << " at offset " << format_hex(S.FileOffset, 0)
         << ", " << S.Size << " bytes\n";
      if (Error E = printFatbinListing(S.Fatbin, OS, LO))
        return inFile(Name, std::move(E));
    }
    return Error::success();
  }
  }
  llvm_unreachable("unknown input kind");
}

Expected<std::vector<std::pair<std::string, std::string>>>
extractPTX(MemoryBufferRef Input) {
  StringRef Name = Input.getBufferIdentifier();
  std::vector<const FatbinFile *> Files;
  std::optional<FatbinFile> Single;
  std::optional<HostFatbins> Host;
  switch (detectInputKind(Input.getBuffer())) {
  case InputKind::PTX:
    return error(Name + ": input is already PTX text");
  case InputKind::Fatbin: {
    auto F = readFatbin(Input);
    if (!F)
      return inFile(Name, F.takeError());
    Single = std::move(*F);
    Files.push_back(&*Single);
    break;
  }
  case InputKind::HostELF: {
    auto H = readHostFatbins(Input);
    if (!H)
      return inFile(Name, H.takeError());
    Host = std::move(*H);
    for (const FatbinSection &S : Host->Sections)
      Files.push_back(&S.Fatbin);
    break;
  }
  }
  std::vector<std::pair<std::string, std::string>> Out;
  StringRef Stem = sys::path::stem(Name);
  size_t Index = 0;
  for (const FatbinFile *F : Files)
    for (const FatbinContainer &C : F->Containers)
      for (const FatbinEntry &E : C.Entries) {
        ++Index;
        if (!E.isPTX())
          continue;
        auto Text = getPTXText(E);
        if (!Text)
          return inFile(Name, Text.takeError());
        Out.push_back({formatv("{0}.{1}.{2}.ptx", Stem, Index - 1, E.archName()).str(),
                       std::move(*Text)});
      }
  return std::move(Out);
}

} // namespace tally
