//===- IR.cpp - PTX module representation ---------------------------------===//

#include "tally/PTX/IR.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"

using namespace llvm;

namespace tally::ptx {

std::optional<StringRef> Operand::getRegister() const {
  if (K != Kind::Expr || Toks.empty() || Toks.size() > 2)
    return std::nullopt;
  if (!Toks[0].is(TokKind::Ident) || !Toks[0].Text.starts_with("%"))
    return std::nullopt;
  if (Toks.size() == 2 && (!Toks[1].is(TokKind::DotWord) || Toks[1].SpaceBefore))
    return std::nullopt;
  return Toks[0].Text;
}

StringRef Operand::getComponent() const {
  if (!getRegister() || Toks.size() != 2)
    return {};
  return Toks[1].Text.drop_front();
}

std::optional<StringRef> Operand::getSymbol() const {
  if (K != Kind::Expr || Toks.size() != 1 || !Toks[0].is(TokKind::Ident) ||
      Toks[0].Text.starts_with("%"))
    return std::nullopt;
  return Toks[0].Text;
}

void Operand::forEachToken(const std::function<void(const Token &)> &F) const {
  for (const Token &T : Toks)
    F(T);
  for (const Operand &E : Elems)
    E.forEachToken(F);
}

void Operand::forEachToken(const std::function<void(Token &)> &F) {
  for (Token &T : Toks)
    F(T);
  for (Operand &E : Elems)
    E.forEachToken(F);
}

StringRef VarDecl::getStateSpace() const {
  for (const Token &T : Attrs)
    if (T.is(TokKind::DotWord) &&
        is_contained({".reg", ".sreg", ".const", ".global", ".local", ".param",
                      ".shared", ".tex"},
                     T.Text))
      return T.Text;
  return {};
}

static bool isTypeWord(StringRef W) {
  if (W == ".pred" || W == ".texref" || W == ".samplerref" || W == ".surfref")
    return true;
  if (W.size() < 3 || !is_contained(StringRef("bsuf"), W[1]))
    return false;
  return all_of(W.drop_front(2), isDigit) ||
         W == ".f16x2" || W == ".bf16" || W == ".bf16x2" || W == ".e4m3" ||
         W == ".e5m2";
}

StringRef VarDecl::getType() const {
  for (const Token &T : Attrs)
    if (T.is(TokKind::DotWord) && isTypeWord(T.Text))
      return T.Text;
  return {};
}

unsigned VarDecl::getAlign() const {
  for (size_t I = 0; I + 1 < Attrs.size(); ++I)
    if (Attrs[I].isDot(".align")) {
      unsigned V = 0;
      if (!Attrs[I + 1].Text.getAsInteger(0, V))
        return V;
    }
  return 0;
}

unsigned VarDecl::getVectorWidth() const {
  for (const Token &T : Attrs)
    if (T.isDot(".v2"))
      return 2;
    else if (T.isDot(".v4"))
      return 4;
    else if (T.isDot(".v8"))
      return 8;
  return 1;
}

bool VarDecl::hasAttr(StringRef DotWord) const {
  return any_of(Attrs, [&](const Token &T) { return T.isDot(DotWord); });
}

SmallVector<StringRef, 4> Instruction::getModifiers() const {
  SmallVector<StringRef, 4> Mods;
  StringRef Rest = Opcode.split('.').second;
  // Modifiers are dot-separated; `::` stays inside one modifier.
  while (!Rest.empty()) {
    size_t Dot = Rest.find('.');
    StringRef M = Rest.substr(0, Dot);
    Mods.push_back(StringRef(M.data() - 1, M.size() + 1));
    if (Dot == StringRef::npos)
      break;
    Rest = Rest.substr(Dot + 1);
  }
  return Mods;
}

bool Instruction::hasModifier(StringRef Mod) const {
  return is_contained(getModifiers(), Mod);
}

Stmt::~Stmt() = default;

bool Function::hasLinkage(StringRef L) const {
  return any_of(Linkage, [&](const Token &T) { return T.Text == L; });
}

const Directive *Function::getDirective(StringRef Name) const {
  for (const Directive &D : Directives)
    if (D.Name == Name)
      return &D;
  return nullptr;
}

Module::Module() = default;
Module::~Module() = default;

static StringRef getModuleDirectiveArg(const std::vector<TopItem> &Items,
                                       StringRef Name) {
  for (const TopItem &I : Items)
    if (I.getKind() == TopItem::Kind::Directive && I.Dir.Name == Name &&
        !I.Dir.Args.empty())
      return I.Dir.Args.front().Text;
  return {};
}

StringRef Module::getVersion() const {
  return getModuleDirectiveArg(Items, ".version");
}

StringRef Module::getTarget() const {
  return getModuleDirectiveArg(Items, ".target");
}

std::vector<Function *> Module::functions() const {
  std::vector<Function *> Fs;
  for (const TopItem &I : Items)
    if (I.getKind() == TopItem::Kind::Function)
      Fs.push_back(I.Func.get());
  return Fs;
}

std::vector<Function *> Module::kernels() const {
  std::vector<Function *> Ks;
  for (Function *F : functions())
    if (F->IsEntry && !F->isDeclaration())
      Ks.push_back(F);
  return Ks;
}

Function *Module::getFunction(StringRef Name) const {
  for (Function *F : functions())
    if (F->Name == Name && !F->isDeclaration())
      return F;
  for (Function *F : functions())
    if (F->Name == Name)
      return F;
  return nullptr;
}

StmtList cloneStmts(const StmtList &Body) {
  StmtList Out;
  Out.reserve(Body.size());
  for (const auto &S : Body) {
    switch (S->getKind()) {
    case Stmt::Kind::Inst:
      Out.push_back(std::make_unique<InstStmt>(cast<InstStmt>(*S).I));
      break;
    case Stmt::Kind::Label: {
      auto &L = cast<LabelStmt>(*S);
      Out.push_back(std::make_unique<LabelStmt>(L.Name, L.getLoc()));
      break;
    }
    case Stmt::Kind::Decl:
      Out.push_back(std::make_unique<DeclStmt>(cast<DeclStmt>(*S).D));
      break;
    case Stmt::Kind::Directive:
      Out.push_back(std::make_unique<DirectiveStmt>(cast<DirectiveStmt>(*S).D));
      break;
    case Stmt::Kind::Scope: {
      auto Scope = std::make_unique<ScopeStmt>(S->getLoc());
      Scope->Body = cloneStmts(cast<ScopeStmt>(*S).Body);
      Out.push_back(std::move(Scope));
      break;
    }
    }
  }
  return Out;
}

std::unique_ptr<Function> cloneFunction(const Function &F) {
  auto C = std::make_unique<Function>();
  C->Linkage = F.Linkage;
  C->IsEntry = F.IsEntry;
  C->Name = F.Name;
  C->HasRetList = F.HasRetList;
  C->Rets = F.Rets;
  C->HasParamList = F.HasParamList;
  C->Params = F.Params;
  C->Directives = F.Directives;
  C->Loc = F.Loc;
  if (F.Body) {
    C->Body = std::make_unique<ScopeStmt>(F.Body->getLoc());
    C->Body->Body = cloneStmts(F.Body->Body);
  }
  return C;
}

void walkStmts(const StmtList &Body, const std::function<void(Stmt &)> &F) {
  for (const auto &S : Body) {
    F(*S);
    if (auto *Scope = dyn_cast<ScopeStmt>(S.get()))
      walkStmts(Scope->Body, F);
  }
}

bool isSpecialRegister(StringRef Name) {
  static const StringRef Fixed[] = {
      "%tid",          "%ntid",           "%laneid",
      "%warpid",       "%nwarpid",        "%ctaid",
      "%nctaid",       "%smid",           "%nsmid",
      "%gridid",       "%is_explicit_cluster", "%clusterid",
      "%nclusterid",   "%cluster_ctaid",  "%cluster_nctaid",
      "%cluster_ctarank", "%cluster_nctarank", "%lanemask_eq",
      "%lanemask_le",  "%lanemask_lt",    "%lanemask_ge",
      "%lanemask_gt",  "%clock",          "%clock_hi",
      "%clock64",      "%globaltimer",    "%globaltimer_lo",
      "%globaltimer_hi", "%total_smem_size", "%aggr_smem_size",
      "%dynamic_smem_size", "%current_graph_exec",
      "%reserved_smem_offset_begin", "%reserved_smem_offset_end",
      "%reserved_smem_offset_cap"};
  if (is_contained(Fixed, Name))
    return true;
  // Numbered families: %pm0..%pm7, %pm0_64.., %envreg0..31,
  // %reserved_smem_offset_0/1.
  for (StringRef Prefix : {"%pm", "%envreg", "%reserved_smem_offset_"}) {
    if (!Name.starts_with(Prefix))
      continue;
    StringRef Rest = Name.drop_front(Prefix.size());
    if (Prefix == "%pm" && Rest.ends_with("_64"))
      Rest = Rest.drop_back(3);
    if (!Rest.empty() && all_of(Rest, isDigit))
      return true;
  }
  return false;
}

} // namespace tally::ptx
