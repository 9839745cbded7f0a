//===- Printer.h - PTX printer ----------------------------------*- C++ -*-===//
#ifndef TALLY_PTX_PRINTER_H
#define TALLY_PTX_PRINTER_H

#include "tally/PTX/IR.h"

#include "llvm/Support/raw_ostream.h"

namespace tally::ptx {

/// Prints \p M as PTX. The output is deterministic and parses back to the
/// same module: printing is a fixed point after one round.
void printModule(const Module &M, llvm::raw_ostream &OS);
void printFunction(const Function &F, llvm::raw_ostream &OS);
void printInstruction(const Instruction &I, llvm::raw_ostream &OS);
void printOperand(const Operand &O, llvm::raw_ostream &OS);
void printTokens(llvm::ArrayRef<Token> Toks, llvm::raw_ostream &OS);
void printVarDecl(const VarDecl &D, llvm::raw_ostream &OS);

} // namespace tally::ptx

#endif
