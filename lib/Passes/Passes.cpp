//===- Passes.cpp - the pass registry and the built-in passes -------------===//

#include "tally/Passes/Pass.h"

#include "tally/Analysis/Divergence.h"
#include "tally/Analysis/Liveness.h"
#include "tally/Analysis/KernelInfo.h"
#include "tally/PTX/Printer.h"
#include "tally/PTX/CFG.h"
#include "tally/PTX/Lexer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Casting.h"

using namespace llvm;
using namespace tally::ptx;

namespace tally {

ModulePass::~ModulePass() = default;

namespace {

class PrintKernelInfoPass : public ModulePass {
public:
  StringRef getName() const override { return "print<kernel-info>"; }
  bool isPrinter() const override { return true; }
  Error run(Module &M, PassContext &Ctx) override {
    ModuleInfo(M).print(Ctx.Out);
    return Error::success();
  }
};

class PrintCFGPass : public ModulePass {
public:
  StringRef getName() const override { return "print<cfg>"; }
  bool isPrinter() const override { return true; }
  Error run(Module &M, PassContext &Ctx) override {
    for (Function *F : M.functions()) {
      if (F->isDeclaration())
        continue;
      CFG G(*F);
      Ctx.Out << (F->IsEntry ? "kernel " : "function ") << F->Name << '\n';
      for (const BasicBlock &B : G.blocks()) {
        Ctx.Out << "  block " << B.Index;
        if (!B.Label.empty())
          Ctx.Out << " (" << B.Label << ")";
        Ctx.Out << ": " << B.Insts.size() << " instructions";
        if (B.IsExit)
          Ctx.Out << ", exits";
        Ctx.Out << "; succs:";
        if (B.Succs.empty())
          Ctx.Out << " none";
        for (unsigned S : B.Succs)
          Ctx.Out << ' ' << S;
        Ctx.Out << '\n';
      }
    }
    return Error::success();
  }
};

class PrintDivergencePass : public ModulePass {
public:
  StringRef getName() const override { return "print<divergence>"; }
  bool isPrinter() const override { return true; }
  Error run(Module &M, PassContext &Ctx) override {
    for (Function *F : M.kernels()) {
      CFG G(*F);
      DivergenceInfo DI(*F, G);
      Ctx.Out << "kernel " << F->Name << '\n';
      for (const BasicBlock &B : G.blocks()) {
        if (B.Insts.empty() || !DI.isDivergentBranch(*B.Insts.back()))
          continue;
        std::string Text;
        raw_string_ostream OS(Text);
        printInstruction(*B.Insts.back(), OS);
        Ctx.Out << "  divergent branch in block " << B.Index << ": " << Text << '\n';
      }
      StringRef Why;
      std::vector<bool> Conv = DI.barriersNeedingConvergence(Why);
      unsigned Ord = 0;
      for (const BasicBlock &B : G.blocks())
        for (const Instruction *I : B.Insts) {
          StringRef Base = I->getBaseOpcode();
          if (Base != "bar" && Base != "barrier")
            continue;
          std::string Text;
          raw_string_ostream OS(Text);
          printInstruction(*I, OS);
          Ctx.Out << "  barrier " << Ord << " in block " << B.Index << ": " << Text
                  << (Conv[Ord] ? " -> convergence block" : " -> stays") << '\n';
          ++Ord;
        }
    }
    return Error::success();
  }
};

/// The registers each function may read before writing them (what the PTB
/// form resets at the top of every logical block).
class PrintLivenessPass : public ModulePass {
public:
  StringRef getName() const override { return "print<liveness>"; }
  bool isPrinter() const override { return true; }
  Error run(Module &M, PassContext &Ctx) override {
    for (const TopItem &It : M.Items) {
      if (It.getKind() != TopItem::Kind::Function || !It.Func->Body)
        continue;
      CFG G(*It.Func);
      std::vector<std::string> Live = getLiveInRegisters(G);
      Ctx.Out << (It.Func->IsEntry ? "kernel " : "function ") << It.Func->Name
              << ": " << Live.size() << " register(s) read before written";
      for (const std::string &R : Live)
        Ctx.Out << ' ' << R;
      Ctx.Out << '\n';
    }
    return Error::success();
  }
};

/// Structural checks the parser does not make: every branch target is a
/// label of the same function and every direct callee is declared.
class VerifyPass : public ModulePass {
public:
  StringRef getName() const override { return "verify"; }
  Error run(Module &M, PassContext &Ctx) override {
    StringSet<> Funcs;
    for (Function *F : M.functions())
      Funcs.insert(F->Name);
    for (Function *F : M.functions()) {
      if (F->isDeclaration())
        continue;
      StringSet<> Labels;
      walkStmts(F->Body->Body, [&](Stmt &S) {
        if (auto *L = dyn_cast<LabelStmt>(&S))
          Labels.insert(L->Name);
      });
      Error Err = Error::success();
      walkStmts(F->Body->Body, [&](Stmt &S) {
        auto *IS = dyn_cast<InstStmt>(&S);
        if (!IS || Err)
          return;
        const Instruction &I = IS->I;
        StringRef Base = I.getBaseOpcode();
        if (Base == "bra" && !I.Ops.empty()) {
          auto Sym = I.Ops[0].getSymbol();
          if (Sym && !Labels.contains(*Sym))
            Err = makeSourceError(M.getSourceMgr(), I.Loc,
                                  "branch to undefined label '" + *Sym + "'");
        } else if (Base == "call") {
          for (const Operand &O : I.Ops) {
            if (O.K == Operand::Kind::Paren)
              continue;
            auto Sym = O.getSymbol();
            if (Sym && !Funcs.contains(*Sym))
              Err = makeSourceError(M.getSourceMgr(), I.Loc,
                                    "call to undeclared function '" + *Sym + "'");
            break;
          }
        }
      });
      if (Err)
        return Err;
    }
    return Error::success();
  }
};

} // namespace

// Factories, one per registry entry: create<CLASS>(). The transformation
// passes live in TransformPasses.cpp.
#define MODULE_PASS(NAME, CLASS, HELP) std::unique_ptr<ModulePass> create##CLASS();
#include "PassRegistry.def"

std::unique_ptr<ModulePass> createPrintKernelInfoPass() {
  return std::make_unique<PrintKernelInfoPass>();
}
std::unique_ptr<ModulePass> createPrintCFGPass() {
  return std::make_unique<PrintCFGPass>();
}
std::unique_ptr<ModulePass> createPrintDivergencePass() {
  return std::make_unique<PrintDivergencePass>();
}
std::unique_ptr<ModulePass> createPrintLivenessPass() {
  return std::make_unique<PrintLivenessPass>();
}
std::unique_ptr<ModulePass> createVerifyPass() {
  return std::make_unique<VerifyPass>();
}

namespace {

using PassFactory = std::unique_ptr<ModulePass> (*)();

struct RegistryEntry {
  PassDescription Desc;
  PassFactory Make;
};

const RegistryEntry Registry[] = {
#define MODULE_PASS(NAME, CLASS, HELP)                                         \
  {{NAME, HELP}, &create##CLASS},
#include "PassRegistry.def"
};

} // namespace

ArrayRef<PassDescription> getRegisteredPasses() {
  static const std::vector<PassDescription> Descs = [] {
    std::vector<PassDescription> V;
    for (const RegistryEntry &E : Registry)
      V.push_back(E.Desc);
    return V;
  }();
  return Descs;
}

Expected<std::vector<std::unique_ptr<ModulePass>>>
parsePipeline(StringRef Text) {
  std::vector<std::unique_ptr<ModulePass>> Passes;
  SmallVector<StringRef, 8> Names;
  Text.split(Names, ',', -1, /*KeepEmpty=*/false);
  for (StringRef N : Names) {
    N = N.trim();
    if (N.empty())
      continue;
    const RegistryEntry *Found = nullptr;
    for (const RegistryEntry &E : Registry)
      if (E.Desc.Name == N)
        Found = &E;
    if (!Found) {
      std::string Known;
      for (const RegistryEntry &E : Registry)
        Known += (Known.empty() ? "" : ", ") + E.Desc.Name.str();
      return createStringError(inconvertibleErrorCode(),
                               "unknown pass '%s' in pipeline (known: %s)",
                               N.str().c_str(), Known.c_str());
    }
    Passes.push_back(Found->Make());
  }
  return std::move(Passes);
}

bool isPrintOnly(ArrayRef<std::unique_ptr<ModulePass>> Passes) {
  return !Passes.empty() && all_of(Passes, [](const auto &P) { return P->isPrinter(); });
}

Error runPipeline(ArrayRef<std::unique_ptr<ModulePass>> Passes, Module &M,
                  PassContext &Ctx) {
  for (const auto &P : Passes)
    if (Error E = P->run(M, Ctx))
      return E;
  return Error::success();
}

} // namespace tally
