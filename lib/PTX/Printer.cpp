//===- Printer.cpp - PTX printer ------------------------------------------===//
//
// Canonical layout: one statement per line, instructions and declarations
// indented by a tab per scope level, labels at column 0, operands separated
// by ", ". Token lists print with a single space wherever the source had
// whitespace, so generic constructs keep their token boundaries.
//
//===----------------------------------------------------------------------===//

#include "tally/PTX/Printer.h"

#include "llvm/Support/Casting.h"

using namespace llvm;

namespace tally::ptx {

void printTokens(ArrayRef<Token> Toks, raw_ostream &OS) {
  // Commas are canonical (", "); elsewhere a space stands where the source
  // had whitespace.
  for (size_t I = 0; I < Toks.size(); ++I) {
    bool Space = I && !Toks[I].isPunct(',') &&
                 (Toks[I].SpaceBefore || Toks[I - 1].isPunct(','));
    if (Space)
      OS << ' ';
    OS << Toks[I].Text;
  }
}

void printOperand(const Operand &O, raw_ostream &OS) {
  if (O.K == Operand::Kind::Expr) {
    printTokens(O.Toks, OS);
    return;
  }
  char Open = O.K == Operand::Kind::Address  ? '['
              : O.K == Operand::Kind::Vector ? '{'
                                             : '(';
  char Close = Open == '[' ? ']' : Open == '{' ? '}' : ')';
  OS << Open;
  for (size_t I = 0; I < O.Elems.size(); ++I) {
    if (I)
      OS << ", ";
    printOperand(O.Elems[I], OS);
  }
  OS << Close;
}

void printInstruction(const Instruction &I, raw_ostream &OS) {
  if (I.isGuarded())
    OS << '@' << (I.GuardNegated ? "!" : "") << I.Guard << ' ';
  OS << I.Opcode;
  for (size_t N = 0; N < I.Ops.size(); ++N) {
    OS << (N ? ", " : " ");
    printOperand(I.Ops[N], OS);
  }
  OS << ';';
}

void printVarDecl(const VarDecl &D, raw_ostream &OS) {
  printTokens(D.Attrs, OS);
  for (size_t N = 0; N < D.Decls.size(); ++N) {
    const Declarator &X = D.Decls[N];
    OS << (N ? ", " : " ") << X.Name;
    if (X.Range)
      OS << '<' << *X.Range << '>';
    for (const TokenList &Dim : X.Dims) {
      OS << '[';
      printTokens(Dim, OS);
      OS << ']';
    }
    if (X.HasInit) {
      OS << " = ";
      printTokens(X.Init, OS);
    }
  }
}

static void printDirective(const Directive &D, raw_ostream &OS) {
  OS << D.Name;
  if (!D.Args.empty()) {
    OS << ' ';
    printTokens(D.Args, OS);
  }
  if (D.Semicolon)
    OS << ';';
}

static void printBody(const StmtList &Body, unsigned Depth, raw_ostream &OS) {
  auto Indent = [&] {
    for (unsigned I = 0; I < Depth; ++I)
      OS << '\t';
  };
  for (const auto &S : Body) {
    switch (S->getKind()) {
    case Stmt::Kind::Inst:
      Indent();
      printInstruction(cast<InstStmt>(*S).I, OS);
      break;
    case Stmt::Kind::Label:
      OS << cast<LabelStmt>(*S).Name << ':';
      break;
    case Stmt::Kind::Decl:
      Indent();
      printVarDecl(cast<DeclStmt>(*S).D, OS);
      OS << ';';
      break;
    case Stmt::Kind::Directive:
      Indent();
      printDirective(cast<DirectiveStmt>(*S).D, OS);
      break;
    case Stmt::Kind::Scope:
      Indent();
      OS << "{\n";
      printBody(cast<ScopeStmt>(*S).Body, Depth + 1, OS);
      Indent();
      OS << '}';
      break;
    }
    OS << '\n';
  }
}

static void printParamList(const std::vector<VarDecl> &Params, bool Multiline,
                           raw_ostream &OS) {
  OS << '(';
  for (size_t I = 0; I < Params.size(); ++I) {
    if (I)
      OS << ',';
    if (Multiline)
      OS << "\n\t";
    else if (I)
      OS << ' ';
    printVarDecl(Params[I], OS);
  }
  if (Multiline && !Params.empty())
    OS << '\n';
  OS << ')';
}

void printFunction(const Function &F, raw_ostream &OS) {
  if (!F.Linkage.empty()) {
    printTokens(F.Linkage, OS);
    OS << ' ';
  }
  OS << (F.IsEntry ? ".entry " : ".func ");
  if (F.HasRetList) {
    printParamList(F.Rets, /*Multiline=*/false, OS);
    OS << ' ';
  }
  OS << F.Name;
  if (F.HasParamList)
    printParamList(F.Params, /*Multiline=*/true, OS);
  OS << '\n';
  for (const Directive &D : F.Directives) {
    printDirective(D, OS);
    OS << '\n';
  }
  if (!F.Body) {
    OS << ";\n";
    return;
  }
  OS << "{\n";
  printBody(F.Body->Body, 1, OS);
  OS << "}\n";
}

void printModule(const Module &M, raw_ostream &OS) {
  TopItem::Kind Prev = TopItem::Kind::Directive;
  bool First = true;
  for (const TopItem &I : M.Items) {
    // A blank line between items of different kinds and around functions.
    if (!First && (I.getKind() != Prev || I.getKind() == TopItem::Kind::Function))
      OS << '\n';
    First = false;
    Prev = I.getKind();
    switch (I.getKind()) {
    case TopItem::Kind::Directive:
      printDirective(I.Dir, OS);
      OS << '\n';
      break;
    case TopItem::Kind::Var:
      printVarDecl(I.Var, OS);
      OS << ";\n";
      break;
    case TopItem::Kind::Function:
      printFunction(*I.Func, OS);
      break;
    case TopItem::Kind::Section:
      OS << ".section " << I.Sec.Name << "\n{\n";
      for (const SectionLine &L : I.Sec.Lines) {
        if (L.IsLabel)
          OS << L.Label << ':';
        else
          printDirective(L.Data, OS);
        OS << '\n';
      }
      OS << "}\n";
      break;
    }
  }
}

} // namespace tally::ptx
