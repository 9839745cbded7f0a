//===- Parser.cpp - PTX parser --------------------------------------------===//
//
// A recursive-descent parser over the token vector. Module structure,
// functions, declarations and instructions are parsed into the IR;
// instruction operands and directive arguments are kept as token lists
// grouped by brackets, so any opcode with any modifiers parses (unknown
// future instructions included) and prints back unchanged.
//
//===----------------------------------------------------------------------===//

#include "tally/PTX/Parser.h"
#include "tally/PTX/Lexer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"

using namespace llvm;

namespace tally::ptx {

namespace {

/// Directives that make up the rest of their source line (no `;`).
bool isLineDirective(StringRef W) {
  return W == ".version" || W == ".target" || W == ".address_size" ||
         W == ".file" || W == ".loc";
}

bool isLinkage(StringRef W) {
  return W == ".visible" || W == ".extern" || W == ".weak" || W == ".common";
}

/// State spaces that start a variable declaration.
bool isStateSpace(StringRef W) {
  static const StringRef Spaces[] = {".reg",   ".sreg",  ".const",
                                     ".global", ".local", ".param",
                                     ".shared", ".tex"};
  return is_contained(Spaces, W);
}

/// Directives accepted as statements inside a function body (besides
/// declarations and line directives).
bool isBodyDirective(StringRef W) {
  return W == ".pragma" || W == ".branchtargets" || W == ".calltargets" ||
         W == ".callprototype";
}

/// Performance-tuning and attribute directives between a function header
/// and its body.
bool isFunctionDirective(StringRef W) {
  static const StringRef Dirs[] = {
      ".maxntid",           ".reqntid",          ".minnctapersm",
      ".maxnctapersm",      ".maxnreg",          ".maxclusterrank",
      ".reqnctapercluster", ".explicitcluster",  ".noreturn",
      ".pragma",            ".blocksareclusters", ".abi_preserve",
      ".abi_preserve_control"};
  return is_contained(Dirs, W);
}

class Parser {
public:
  Parser(Module &M, SourceMgr &SM, std::vector<Token> Toks)
      : M(M), SM(SM), Toks(std::move(Toks)) {}

  Error parseModule();
  /// Statements up to the end of input (for code that passes build).
  Error parseStatementsToEnd(StmtList &Body) {
    while (!tok().is(TokKind::Eof))
      if (Error E = parseStatement(Body))
        return E;
    return Error::success();
  }
  Expected<VarDecl> parseSingleParam() {
    auto V = parseVarDecl({}, /*Multi=*/false);
    if (V && !tok().is(TokKind::Eof))
      return err(tok(), "unexpected " + found() + " after parameter");
    return V;
  }

private:
  Module &M;
  SourceMgr &SM;
  std::vector<Token> Toks;
  size_t Pos = 0;
  /// Nesting of `{}` scopes and operand brackets, bounded so that hostile
  /// input cannot exhaust the stack (real PTX nests a few levels).
  unsigned Depth = 0;
  static constexpr unsigned MaxDepth = 256;
  Error enter(const Token &T) {
    if (++Depth > MaxDepth)
      return err(T, "nesting deeper than " + Twine(MaxDepth) + " levels");
    return Error::success();
  }

  const Token &tok() const { return Toks[Pos]; }
  const Token &peek(size_t N = 1) const {
    return Toks[std::min(Pos + N, Toks.size() - 1)];
  }
  const Token &take() {
    const Token &T = Toks[Pos];
    if (!T.is(TokKind::Eof))
      ++Pos;
    return T;
  }
  bool consumePunct(char C) {
    if (!tok().isPunct(C))
      return false;
    ++Pos;
    return true;
  }

  Error err(const Token &T, const Twine &Msg) {
    return makeSourceError(SM, T.getLoc(), Msg);
  }
  /// An error located just after the last token taken (for a missing `;`).
  Error errAfterPrev(const Twine &Msg) {
    const Token &Prev = Toks[Pos ? Pos - 1 : 0];
    return makeSourceError(SM, SMLoc::getFromPointer(Prev.Text.end()), Msg);
  }
  /// Describes the current token for "expected X, found Y" messages.
  std::string found() const {
    if (tok().is(TokKind::Eof))
      return "end of file";
    return ("'" + tok().Text + "'").str();
  }
  Error expectPunct(char C, StringRef What) {
    if (consumePunct(C))
      return Error::success();
    return err(tok(), "expected '" + Twine(C) + "' " + What + ", found " + found());
  }

  Error parseTopLevel();
  Expected<Directive> parseLineDirective();
  Expected<Directive> parseDirectiveToSemicolon();
  Error parseSection();
  Expected<VarDecl> parseVarDecl(TokenList Prefix, bool Multi);
  Error parseDeclarator(Declarator &D);
  Error parseInitializer(TokenList &Init);
  Error parseFunction(TokenList Linkage);
  Error parseParamList(std::vector<VarDecl> &Params);
  Error parseScopeBody(ScopeStmt &Scope, const Token &Open);
  Error parseStatement(StmtList &Body);
  Expected<Instruction> parseInstruction();
  Expected<Operand> parseOperand(char Closer, bool ParenLists);
  Error parseGroup(Operand &O, char Closer);
};

Error Parser::parseModule() {
  while (!tok().is(TokKind::Eof))
    if (Error E = parseTopLevel())
      return E;
  return Error::success();
}

Error Parser::parseTopLevel() {
  const Token &T = tok();
  if (!T.is(TokKind::DotWord))
    return err(T, "expected a directive, a declaration or a function at module "
                  "level, found " + found());
  if (isLineDirective(T.Text)) {
    if (T.Text == ".loc")
      return err(T, "'.loc' is only allowed inside a function body");
    auto D = parseLineDirective();
    if (!D)
      return D.takeError();
    M.Items.emplace_back(std::move(*D));
    return Error::success();
  }
  if (T.Text == ".section")
    return parseSection();
  if (T.Text == ".alias" || T.Text == ".pragma") {
    auto D = parseDirectiveToSemicolon();
    if (!D)
      return D.takeError();
    M.Items.emplace_back(std::move(*D));
    return Error::success();
  }

  TokenList Linkage;
  while (tok().is(TokKind::DotWord) && isLinkage(tok().Text))
    Linkage.push_back(take());
  const Token &K = tok();
  if (K.isDot(".entry") || K.isDot(".func"))
    return parseFunction(std::move(Linkage));
  if (K.is(TokKind::DotWord) && isStateSpace(K.Text)) {
    if (K.Text == ".reg" || K.Text == ".param" || K.Text == ".sreg")
      return err(K, "'" + K.Text + "' variables are not allowed at module level");
    auto V = parseVarDecl(std::move(Linkage), /*Multi=*/true);
    if (!V)
      return V.takeError();
    if (Error E = expectPunct(';', "after declaration"))
      return E;
    M.Items.emplace_back(std::move(*V));
    return Error::success();
  }
  if (K.is(TokKind::DotWord))
    return err(K, "unknown directive '" + K.Text + "'");
  return err(K, "expected '.entry', '.func' or a state space after linkage, found " +
                    found());
}

Expected<Directive> Parser::parseLineDirective() {
  Directive D;
  const Token &Name = take();
  D.Name = Name.Text;
  D.Loc = Name.getLoc();
  // These directives usually end their line, but PTX does not require it:
  // `.loc 1 2 3 mov.u32 %r1, 1;` and `.version 8.7 .target sm_90a` are
  // valid. So their arguments follow their grammar: a head on the
  // directive's line (`.loc` file line column, `.file` index and name, one
  // value for the others), then comma-separated clauses.
  auto OnLine = [&] {
    return !tok().is(TokKind::Eof) && !tok().NewlineBefore &&
           !tok().isPunct(';');
  };
  auto Take = [&](unsigned N) {
    for (unsigned I = 0; I < N && OnLine(); ++I)
      D.Args.push_back(take());
  };
  unsigned Head = D.Name == ".loc" ? 3 : D.Name == ".file" ? 2 : 1;
  for (unsigned I = 0; I < Head && OnLine() && !tok().is(TokKind::DotWord); ++I)
    D.Args.push_back(take());
  while (OnLine() && tok().isPunct(',')) {
    D.Args.push_back(take());
    if (D.Name != ".loc") {
      Take(1); // `.target sm_90a, debug`, `.file 1 "a.cu", 0, 0`
    } else if (tok().isIdent("function_name")) {
      Take(2); // function_name $L__info_string0 [+ 8]
      if (OnLine() && tok().isPunct('+'))
        Take(2);
    } else if (tok().isIdent("inlined_at")) {
      Take(4); // inlined_at 1 2 3
    } else {
      // A clause this parser does not know: to the next ',' or line end.
      while (OnLine() && !tok().isPunct(','))
        D.Args.push_back(take());
    }
  }
  if (D.Args.empty() && D.Name != ".target")
    return err(Name, "'" + D.Name + "' needs an argument on the same line");
  return std::move(D);
}

Expected<Directive> Parser::parseDirectiveToSemicolon() {
  Directive D;
  const Token &Name = take();
  D.Name = Name.Text;
  D.Loc = Name.getLoc();
  D.Semicolon = true;
  int Depth = 0;
  while (true) {
    const Token &T = tok();
    if (T.is(TokKind::Eof))
      return err(Name, "missing ';' after '" + D.Name + "'");
    if (Depth == 0 && T.isPunct(';'))
      break;
    if (T.isPunct('(') || T.isPunct('[') || T.isPunct('{'))
      ++Depth;
    else if (T.isPunct(')') || T.isPunct(']') || T.isPunct('}')) {
      if (Depth == 0)
        return err(T, "unbalanced '" + T.Text + "' in '" + D.Name + "'");
      --Depth;
    }
    D.Args.push_back(take());
  }
  take(); // ';'
  return std::move(D);
}

Error Parser::parseSection() {
  Section S;
  const Token &Kw = take();
  S.Loc = Kw.getLoc();
  if (!tok().is(TokKind::DotWord) && !tok().is(TokKind::Ident))
    return err(tok(), "expected a section name after '.section', found " + found());
  S.Name = take().Text;
  const Token &Open = tok();
  if (Error E = expectPunct('{', "to open the section body"))
    return E;
  while (!consumePunct('}')) {
    const Token &T = tok();
    if (T.is(TokKind::Eof))
      return err(Open, "unterminated section body");
    SectionLine L;
    if (T.is(TokKind::Ident) && peek().isPunct(':')) {
      L.IsLabel = true;
      L.Label = take().Text;
      take();
    } else if (T.is(TokKind::DotWord)) {
      L.Data.Name = take().Text;
      L.Data.Loc = T.getLoc();
      while (!tok().is(TokKind::Eof) && !tok().NewlineBefore && !tok().isPunct('}'))
        L.Data.Args.push_back(take());
    } else {
      return err(T, "expected a label or a data directive in section, found " +
                        found());
    }
    S.Lines.push_back(std::move(L));
  }
  M.Items.emplace_back(std::move(S));
  return Error::success();
}

Expected<VarDecl> Parser::parseVarDecl(TokenList Prefix, bool Multi) {
  VarDecl V;
  V.Attrs = std::move(Prefix);
  V.Loc = V.Attrs.empty() ? tok().getLoc() : V.Attrs.front().getLoc();
  bool SawSpace = false;
  for (const Token &A : V.Attrs)
    SawSpace |= A.is(TokKind::DotWord) && isStateSpace(A.Text);
  while (tok().is(TokKind::DotWord)) {
    const Token &A = take();
    V.Attrs.push_back(A);
    SawSpace |= isStateSpace(A.Text);
    if (A.Text == ".align") {
      if (!tok().is(TokKind::Integer))
        return err(tok(), "expected an alignment after '.align', found " + found());
      V.Attrs.push_back(take());
    } else if (A.Text == ".attribute") {
      // .attribute(.managed)
      const Token &Open = tok();
      if (Error E = expectPunct('(', "after '.attribute'"))
        return std::move(E);
      V.Attrs.push_back(Open);
      while (!tok().isPunct(')')) {
        if (tok().is(TokKind::Eof) || tok().isPunct(';'))
          return err(Open, "unterminated '.attribute('");
        V.Attrs.push_back(take());
      }
      V.Attrs.push_back(take());
    }
  }
  if (!SawSpace)
    return err(V.Attrs.empty() ? tok() : V.Attrs.front(),
               "declaration has no state space");
  while (true) {
    Declarator D;
    if (Error E = parseDeclarator(D))
      return std::move(E);
    V.Decls.push_back(std::move(D));
    if (!Multi || !tok().isPunct(','))
      break;
    take();
  }
  return std::move(V);
}

Error Parser::parseDeclarator(Declarator &D) {
  const Token &N = tok();
  if (!N.is(TokKind::Ident))
    return err(N, N.is(TokKind::DotWord)
                      ? "unknown or misplaced directive '" + N.Text +
                            "' in declaration"
                      : "expected a name in declaration, found " + found());
  D.Name = take().Text;
  D.Loc = N.getLoc();
  if (tok().isPunct('<')) {
    take();
    if (!tok().is(TokKind::Integer))
      return err(tok(), "expected a register count in '<>', found " + found());
    D.Range = take().Text;
    if (Error E = expectPunct('>', "to close the register range"))
      return E;
  }
  while (tok().isPunct('[')) {
    const Token &Open = take();
    TokenList Dim;
    while (!tok().isPunct(']')) {
      if (tok().is(TokKind::Eof) || tok().isPunct(';'))
        return err(Open, "unterminated array dimension");
      Dim.push_back(take());
    }
    take();
    D.Dims.push_back(std::move(Dim));
  }
  if (tok().isPunct('=')) {
    take();
    D.HasInit = true;
    if (Error E = parseInitializer(D.Init))
      return E;
  }
  return Error::success();
}

Error Parser::parseInitializer(TokenList &Init) {
  const Token &Start = tok();
  int Depth = 0;
  while (true) {
    const Token &T = tok();
    if (T.is(TokKind::Eof))
      return err(Start, "unterminated initializer");
    if (Depth == 0 && (T.isPunct(',') || T.isPunct(';')))
      break;
    if (T.isPunct('{') || T.isPunct('('))
      ++Depth;
    else if (T.isPunct('}') || T.isPunct(')')) {
      if (Depth == 0)
        return err(T, "unbalanced '" + T.Text + "' in initializer");
      --Depth;
    }
    Init.push_back(take());
  }
  if (Init.empty())
    return err(Start, "expected an initializer after '='");
  return Error::success();
}

Error Parser::parseParamList(std::vector<VarDecl> &Params) {
  const Token &Open = take(); // '('
  if (consumePunct(')'))
    return Error::success();
  while (true) {
    if (tok().is(TokKind::Eof))
      return err(Open, "unterminated parameter list");
    if (!tok().isDot(".param") && !tok().isDot(".reg"))
      return err(tok(), "expected '.param' or '.reg' in parameter list, found " +
                            found());
    auto V = parseVarDecl({}, /*Multi=*/false);
    if (!V)
      return V.takeError();
    Params.push_back(std::move(*V));
    if (consumePunct(','))
      continue;
    if (consumePunct(')'))
      return Error::success();
    if (tok().is(TokKind::Eof))
      return err(Open, "unterminated parameter list");
    return err(tok(), "expected ',' or ')' in parameter list, found " + found());
  }
}

Error Parser::parseFunction(TokenList Linkage) {
  auto F = std::make_unique<Function>();
  F->Linkage = std::move(Linkage);
  const Token &Kw = take();
  F->Loc = F->Linkage.empty() ? Kw.getLoc() : F->Linkage.front().getLoc();
  F->IsEntry = Kw.Text == ".entry";
  if (tok().isPunct('(')) {
    if (F->IsEntry)
      return err(tok(), "a '.entry' cannot have return values");
    F->HasRetList = true;
    if (Error E = parseParamList(F->Rets))
      return E;
  }
  if (!tok().is(TokKind::Ident))
    return err(tok(), "expected a function name after '" + Kw.Text + "', found " +
                          found());
  F->Name = take().Text;
  if (tok().isPunct('(')) {
    F->HasParamList = true;
    if (Error E = parseParamList(F->Params))
      return E;
  }
  while (tok().is(TokKind::DotWord)) {
    const Token &T = tok();
    if (!isFunctionDirective(T.Text))
      return err(T, "unknown function directive '" + T.Text + "'");
    if (T.Text == ".pragma") {
      auto D = parseDirectiveToSemicolon();
      if (!D)
        return D.takeError();
      F->Directives.push_back(std::move(*D));
      continue;
    }
    Directive D;
    D.Name = take().Text;
    D.Loc = T.getLoc();
    while (tok().is(TokKind::Integer)) {
      D.Args.push_back(take());
      if (!tok().isPunct(','))
        break;
      D.Args.push_back(take());
      if (!tok().is(TokKind::Integer))
        return err(tok(), "expected a number in '" + D.Name + "', found " + found());
    }
    F->Directives.push_back(std::move(D));
  }
  const Token &Open = tok();
  if (Open.isPunct('{')) {
    take();
    F->Body = std::make_unique<ScopeStmt>(Open.getLoc());
    if (Error E = parseScopeBody(*F->Body, Open))
      return E;
  } else if (!consumePunct(';')) {
    return err(Open, "expected '{' or ';' after the header of '" + F->Name +
                         "', found " + found());
  }
  M.Items.emplace_back(std::move(F));
  return Error::success();
}

Error Parser::parseScopeBody(ScopeStmt &Scope, const Token &Open) {
  if (Error E = enter(Open))
    return E;
  llvm::scope_exit Leave([&] { --Depth; });
  while (true) {
    if (consumePunct('}'))
      return Error::success();
    if (tok().is(TokKind::Eof))
      return err(Open, "unterminated '{' block");
    if (Error E = parseStatement(Scope.Body))
      return E;
  }
}

Error Parser::parseStatement(StmtList &Body) {
  const Token &T = tok();
  if (T.isPunct('{')) {
    take();
    auto S = std::make_unique<ScopeStmt>(T.getLoc());
    if (Error E = parseScopeBody(*S, T))
      return E;
    Body.push_back(std::move(S));
    return Error::success();
  }
  if (T.is(TokKind::Ident) && peek().isPunct(':')) {
    take();
    take();
    Body.push_back(std::make_unique<LabelStmt>(T.Text, T.getLoc()));
    return Error::success();
  }
  if (T.is(TokKind::DotWord)) {
    if (isStateSpace(T.Text)) {
      auto V = parseVarDecl({}, /*Multi=*/true);
      if (!V)
        return V.takeError();
      if (Error E = expectPunct(';', "after declaration"))
        return E;
      Body.push_back(std::make_unique<DeclStmt>(std::move(*V)));
      return Error::success();
    }
    Expected<Directive> D = isLineDirective(T.Text) ? parseLineDirective()
                            : isBodyDirective(T.Text)
                                ? parseDirectiveToSemicolon()
                                : Expected<Directive>(err(
                                      T, "unknown directive '" + T.Text +
                                             "' in function body"));
    if (!D)
      return D.takeError();
    if (D->Name == ".version" || D->Name == ".target" || D->Name == ".address_size")
      return err(T, "'" + D->Name + "' is only allowed at module level");
    Body.push_back(std::make_unique<DirectiveStmt>(std::move(*D)));
    return Error::success();
  }
  if (T.is(TokKind::Ident) || T.isPunct('@')) {
    auto I = parseInstruction();
    if (!I)
      return I.takeError();
    Body.push_back(std::make_unique<InstStmt>(std::move(*I)));
    return Error::success();
  }
  return err(T, "expected an instruction, a label or a directive, found " + found());
}

Expected<Instruction> Parser::parseInstruction() {
  Instruction I;
  I.Loc = tok().getLoc();
  if (consumePunct('@')) {
    if (consumePunct('!'))
      I.GuardNegated = true;
    if (!tok().is(TokKind::Ident))
      return err(tok(), "expected a predicate register after '@', found " + found());
    I.Guard = take().Text;
  }
  const Token &Op = tok();
  // Opcodes are lower-case words; `$L1 ret;` is a label without its ':'.
  if (!Op.is(TokKind::Ident) || !isAlpha(Op.Text.front()))
    return err(Op, "expected an opcode, found " + found());
  take();
  const char *Begin = Op.Text.begin(), *End = Op.Text.end();
  // ptxas takes modifiers apart from their opcode too (`ld.global .u32`):
  // a word after a space (an operand never starts with one) is joined in.
  std::string Spaced;
  while (tok().is(TokKind::DotWord) &&
         (!tok().SpaceBefore || (tok().Text.size() > 1 && isAlpha(tok().Text[1])))) {
    const Token &Mod = take();
    if (Mod.SpaceBefore && Spaced.empty())
      Spaced = StringRef(Begin, End - Begin).str();
    if (!Spaced.empty())
      Spaced += Mod.Text.str();
    End = Mod.Text.end();
  }
  I.Opcode = Spaced.empty() ? StringRef(Begin, End - Begin) : M.save(Spaced);
  if (consumePunct(';'))
    return std::move(I);
  // Only `call` has `( ... )` operand lists; elsewhere a parenthesis starts
  // a constant expression: `(1+2)*3`.
  bool ParenLists = Op.Text == "call";
  while (true) {
    auto O = parseOperand(';', ParenLists);
    if (!O)
      return O.takeError();
    I.Ops.push_back(std::move(*O));
    if (consumePunct(','))
      continue;
    if (consumePunct(';'))
      return std::move(I);
    // What follows on a new line starts the next statement.
    if (tok().is(TokKind::Eof) || tok().NewlineBefore)
      return errAfterPrev("missing ';' after instruction '" + I.Opcode + "'");
    return err(tok(), "expected ',' or ';' after operand of '" + I.Opcode +
                          "', found " + found());
  }
}

Expected<Operand> Parser::parseOperand(char Closer, bool ParenLists) {
  Operand O;
  const Token &T = tok();
  char GroupCloser = T.isPunct('[')                 ? ']'
                     : T.isPunct('{')               ? '}'
                     : T.isPunct('(') && ParenLists ? ')'
                                                    : 0;
  if (GroupCloser) {
    O.K = GroupCloser == ']'   ? Operand::Kind::Address
          : GroupCloser == '}' ? Operand::Kind::Vector
                               : Operand::Kind::Paren;
    if (Error E = parseGroup(O, GroupCloser))
      return std::move(E);
    return std::move(O);
  }
  int Depth = 0;
  auto IsTerm = [](const Token &X) {
    return X.is(TokKind::Ident) || X.is(TokKind::Integer) ||
           X.is(TokKind::Float) || X.is(TokKind::String);
  };
  while (true) {
    const Token &C = tok();
    if (C.is(TokKind::Eof)) {
      if (Depth == 0 && !O.Toks.empty())
        break;
      return err(T, "unterminated operand");
    }
    if (Depth == 0 && (C.isPunct(',') || C.isPunct(';') || C.isPunct(Closer)))
      break;
    // No operand has two terms side by side (`1 ret`), nor a term right
    // after a component (`%nctaid.x%rd25`: rewriting `%nctaid.x` into one
    // register would make the first case of it), or a guard in it: the
    // instruction ended without its ';'.
    if (Depth == 0 && !O.Toks.empty() &&
        (C.isPunct('@') ||
         (IsTerm(C) && (IsTerm(O.Toks.back()) || O.Toks.back().is(TokKind::DotWord)))))
      break;
    if (C.isPunct(';'))
      return err(C, "unexpected ';' inside brackets");
    if (C.isPunct('(') || C.isPunct('[') || C.isPunct('{'))
      ++Depth;
    else if (C.isPunct(')') || C.isPunct(']') || C.isPunct('}')) {
      if (Depth == 0)
        return err(C, "unbalanced '" + C.Text + "' in operand");
      --Depth;
    }
    O.Toks.push_back(take());
  }
  if (O.Toks.empty())
    return err(T, "expected an operand, found " + found());
  return std::move(O);
}

Error Parser::parseGroup(Operand &O, char Closer) {
  const Token &Open = take();
  if (Error E = enter(Open))
    return E;
  llvm::scope_exit Leave([&] { --Depth; });
  if (consumePunct(Closer))
    return Error::success();
  while (true) {
    auto E = parseOperand(Closer, /*ParenLists=*/false);
    if (!E)
      return E.takeError();
    O.Elems.push_back(std::move(*E));
    if (consumePunct(','))
      continue;
    if (consumePunct(Closer))
      return Error::success();
    return err(tok().is(TokKind::Eof) ? Open : tok(),
               "expected ',' or '" + Twine(Closer) + "' to close '" + Open.Text +
                   "', found " + found());
  }
}

} // namespace

Expected<std::unique_ptr<Module>>
parseModule(std::unique_ptr<MemoryBuffer> Buffer) {
  auto M = std::make_unique<Module>();
  SourceMgr &SM = M->getSourceMgr();
  unsigned ID = SM.AddNewSourceBuffer(std::move(Buffer), SMLoc());
  auto Toks = lex(SM, ID);
  if (!Toks)
    return Toks.takeError();
  Parser P(*M, SM, std::move(*Toks));
  if (Error E = P.parseModule())
    return std::move(E);
  return std::move(M);
}

Expected<std::unique_ptr<Module>> parseModule(StringRef Text, StringRef Name) {
  return parseModule(MemoryBuffer::getMemBufferCopy(Text, Name));
}

/// Lexes \p Text saved in \p M (so tokens outlive the call) and hands a
/// parser over it to \p Fn.
template <typename T, typename FnT>
static Expected<T> parseSnippet(Module &M, StringRef Text, FnT Fn) {
  StringRef Saved = M.save(Text);
  SourceMgr SM;
  unsigned ID = SM.AddNewSourceBuffer(
      MemoryBuffer::getMemBuffer(Saved, "<tally-generated>", false), SMLoc());
  auto Toks = lex(SM, ID);
  if (!Toks)
    return Toks.takeError();
  Parser P(M, SM, std::move(*Toks));
  return Fn(P);
}

Expected<StmtList> parseStatements(Module &M, StringRef Text) {
  return parseSnippet<StmtList>(M, Text, [](Parser &P) -> Expected<StmtList> {
    StmtList Body;
    if (Error E = P.parseStatementsToEnd(Body))
      return std::move(E);
    return std::move(Body);
  });
}

Expected<VarDecl> parseParamDecl(Module &M, StringRef Text) {
  return parseSnippet<VarDecl>(M, Text,
                               [](Parser &P) { return P.parseSingleParam(); });
}

} // namespace tally::ptx
