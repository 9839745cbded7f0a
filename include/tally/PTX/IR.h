//===- IR.h - PTX module representation -------------------------*- C++ -*-===//
//
// The in-memory form of a PTX module. It keeps everything ptxas sees (module
// directives, globals with initializers, functions with their parameters and
// performance directives, declarations, labels, instructions, debug sections)
// in source order, so that printing a parsed module gives PTX that compiles to
// the same machine code.
//
// Structure is explicit where passes need it (functions, parameters,
// instructions with a guard, an opcode and operands, nested scopes) and
// generic where they do not (operand expressions and the arguments of
// directives are token lists that print back as they were).
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_PTX_IR_H
#define TALLY_PTX_IR_H

#include "tally/PTX/Token.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Allocator.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/StringSaver.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tally::ptx {

using TokenList = llvm::SmallVector<Token, 4>;

//===----------------------------------------------------------------------===//
// Operands
//===----------------------------------------------------------------------===//

/// One operand of an instruction.
///  - Expr:    a token sequence: `%r1`, `%tid.x`, `0f3F800000`, `-1`, `foo`,
///             `%p1|%p2`, `!%p3`, `sym+8`.
///  - Address: `[ ... ]` with comma-separated elements: `[%rd1+8]`,
///             `[tex, {%f1, %f2}]`.
///  - Vector:  `{ ... }`: `{%r1, %r2, _, %r4}`.
///  - Paren:   `( ... )`, the argument and return lists of `call`:
///             `(param0, param1)`. In other instructions a parenthesis
///             starts an Expr: `(1+2)*3`.
struct Operand {
  enum class Kind : uint8_t { Expr, Address, Vector, Paren };
  Kind K = Kind::Expr;
  TokenList Toks;             ///< Expr only.
  std::vector<Operand> Elems; ///< Address, Vector, Paren.

  static Operand expr(TokenList T) {
    Operand O;
    O.Toks = std::move(T);
    return O;
  }

  /// For `%r1` or `%tid.x`: the register name without component.
  std::optional<llvm::StringRef> getRegister() const;
  /// For `%tid.x`: "x"; empty if there is no component.
  llvm::StringRef getComponent() const;
  /// A bare identifier that is not a register (`foo`, `$L__BB0_3`).
  std::optional<llvm::StringRef> getSymbol() const;
  /// Calls F on every token of this operand, nested elements included.
  void forEachToken(const std::function<void(const Token &)> &F) const;
  void forEachToken(const std::function<void(Token &)> &F);
};

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

/// One declared name: `%r<10>`, `smem[1024]`, `arr[2][3] = {...}`.
struct Declarator {
  llvm::StringRef Name;
  std::optional<llvm::StringRef> Range; ///< N of `%r<N>`.
  /// Array dimensions, each a token list (empty for `[]`).
  llvm::SmallVector<TokenList, 1> Dims;
  bool HasInit = false;
  TokenList Init; ///< The tokens after `=`.
  llvm::SMLoc Loc;
};

/// A variable, register or parameter declaration:
/// `[.visible] .global .align 4 .b8 x[4] = {1, 2, 3, 4};`
/// Attrs are the tokens before the first name (directives and the number of
/// `.align`), in source order.
struct VarDecl {
  TokenList Attrs;
  llvm::SmallVector<Declarator, 1> Decls;
  llvm::SMLoc Loc;

  /// The state space: ".reg", ".shared", ".param", ... or "".
  llvm::StringRef getStateSpace() const;
  /// The scalar type (".b32", ".u64", ".pred", ...) or "".
  llvm::StringRef getType() const;
  /// The `.align` value, or 0 if none.
  unsigned getAlign() const;
  /// Vector width of `.v2`/`.v4`, or 1.
  unsigned getVectorWidth() const;
  bool hasAttr(llvm::StringRef DotWord) const;
};

/// `.maxntid 256, 1, 1`, `.noreturn`, `.pragma "nounroll";`
struct Directive {
  llvm::StringRef Name; ///< With the dot.
  TokenList Args;
  bool Semicolon = false; ///< Printed with a trailing `;`.
  llvm::SMLoc Loc;
};

//===----------------------------------------------------------------------===//
// Statements of a function body
//===----------------------------------------------------------------------===//

struct Instruction {
  /// Guard predicate `@%p` / `@!%p`; empty if unguarded.
  llvm::StringRef Guard;
  bool GuardNegated = false;
  /// The full dotted opcode as written: `ld.global.nc.v4.f32`.
  llvm::StringRef Opcode;
  std::vector<Operand> Ops;
  llvm::SMLoc Loc;

  /// `ld` for `ld.global.nc.v4.f32`.
  llvm::StringRef getBaseOpcode() const { return Opcode.split('.').first; }
  /// The modifiers after the base opcode, each with its dot.
  llvm::SmallVector<llvm::StringRef, 4> getModifiers() const;
  bool hasModifier(llvm::StringRef Mod) const;
  bool isGuarded() const { return !Guard.empty(); }
};

class Stmt {
public:
  enum class Kind : uint8_t { Inst, Label, Decl, Directive, Scope };
  explicit Stmt(Kind K, llvm::SMLoc Loc = {}) : K(K), Loc(Loc) {}
  virtual ~Stmt();
  Kind getKind() const { return K; }
  llvm::SMLoc getLoc() const { return Loc; }

private:
  Kind K;
  llvm::SMLoc Loc;
};

using StmtList = std::vector<std::unique_ptr<Stmt>>;

class InstStmt : public Stmt {
public:
  explicit InstStmt(Instruction I) : Stmt(Kind::Inst, I.Loc), I(std::move(I)) {}
  static bool classof(const Stmt *S) { return S->getKind() == Kind::Inst; }
  Instruction I;
};

class LabelStmt : public Stmt {
public:
  LabelStmt(llvm::StringRef Name, llvm::SMLoc Loc)
      : Stmt(Kind::Label, Loc), Name(Name) {}
  static bool classof(const Stmt *S) { return S->getKind() == Kind::Label; }
  llvm::StringRef Name;
};

class DeclStmt : public Stmt {
public:
  explicit DeclStmt(VarDecl D) : Stmt(Kind::Decl, D.Loc), D(std::move(D)) {}
  static bool classof(const Stmt *S) { return S->getKind() == Kind::Decl; }
  VarDecl D;
};

/// A directive inside a body: `.loc 1 5 3`, `.pragma "nounroll";`,
/// `.branchtargets L1, L2;` (after its label), `.callprototype ...;`.
class DirectiveStmt : public Stmt {
public:
  explicit DirectiveStmt(Directive D) : Stmt(Kind::Directive, D.Loc), D(std::move(D)) {}
  static bool classof(const Stmt *S) { return S->getKind() == Kind::Directive; }
  Directive D;
};

/// A nested `{ ... }` block with its own declarations.
class ScopeStmt : public Stmt {
public:
  explicit ScopeStmt(llvm::SMLoc Loc = {}) : Stmt(Kind::Scope, Loc) {}
  static bool classof(const Stmt *S) { return S->getKind() == Kind::Scope; }
  StmtList Body;
};

//===----------------------------------------------------------------------===//
// Module-level items
//===----------------------------------------------------------------------===//

struct Function {
  /// Linkage directives before `.entry`/`.func`: `.visible`, `.extern`, `.weak`.
  TokenList Linkage;
  bool IsEntry = false;
  llvm::StringRef Name;
  bool HasRetList = false;
  std::vector<VarDecl> Rets;
  bool HasParamList = false;
  std::vector<VarDecl> Params;
  /// Performance directives between the header and the body.
  std::vector<Directive> Directives;
  /// The body; null for a declaration (`.extern .func foo(...);`).
  std::unique_ptr<ScopeStmt> Body;
  llvm::SMLoc Loc;

  bool isDeclaration() const { return !Body; }
  bool hasLinkage(llvm::StringRef L) const;
  const Directive *getDirective(llvm::StringRef Name) const;
};

/// One line inside a `.section` body: a label or a data directive
/// (`.b8 1, 2`, `.b32 .debug_abbrev`).
struct SectionLine {
  bool IsLabel = false;
  llvm::StringRef Label;
  Directive Data;
};

struct Section {
  llvm::StringRef Name; ///< `.debug_info`
  std::vector<SectionLine> Lines;
  llvm::SMLoc Loc;
};

class TopItem {
public:
  enum class Kind : uint8_t { Directive, Var, Function, Section };
  TopItem(Directive D) : K(Kind::Directive), Dir(std::move(D)) {}
  TopItem(VarDecl V) : K(Kind::Var), Var(std::move(V)) {}
  TopItem(std::unique_ptr<Function> F) : K(Kind::Function), Func(std::move(F)) {}
  TopItem(Section S) : K(Kind::Section), Sec(std::move(S)) {}
  Kind getKind() const { return K; }

  Kind K;
  Directive Dir;
  VarDecl Var;
  std::unique_ptr<Function> Func;
  Section Sec;
};

/// A parsed PTX module. It owns the source buffer its tokens point into and
/// a string saver for text that passes create.
class Module {
public:
  Module();
  ~Module();
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  std::vector<TopItem> Items;

  /// The source manager holding the buffer(s) this module was parsed from.
  llvm::SourceMgr &getSourceMgr() { return SM; }
  /// Copies \p S into storage owned by the module.
  llvm::StringRef save(llvm::StringRef S) { return Saver.save(S); }

  /// `.version`, `.target` (first argument) and `.address_size` values.
  llvm::StringRef getVersion() const;
  llvm::StringRef getTarget() const;

  /// All functions (entries and funcs, declarations too) in source order.
  std::vector<Function *> functions() const;
  std::vector<Function *> kernels() const;
  Function *getFunction(llvm::StringRef Name) const;

private:
  llvm::SourceMgr SM;
  llvm::BumpPtrAllocator Alloc;
  llvm::UniqueStringSaver Saver{Alloc};
};

/// Deep copies. Tokens keep pointing at the same text, which the module
/// owns, so a clone may live in the same module as its original.
StmtList cloneStmts(const StmtList &Body);
std::unique_ptr<Function> cloneFunction(const Function &F);

/// Calls F on every statement of \p Body, descending into nested scopes, in
/// source order.
void walkStmts(const StmtList &Body, const std::function<void(Stmt &)> &F);

/// The special registers of the PTX ISA that a kernel may read
/// (`%tid`, `%ctaid`, `%nctaid`, `%cluster_ctaid`, `%smid`, ...).
bool isSpecialRegister(llvm::StringRef Name);

} // namespace tally::ptx

#endif
