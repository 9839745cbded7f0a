//===- Liveness.h - registers read before they are written ------*- C++ -*-===//
//
// Which registers a function may read, on some path from its entry, before
// any instruction writes them ("upward-exposed" uses: live at the entry).
// In a kernel such a read sees an undefined value. The PTB loop runs the
// body many times, so there the read would see the previous logical
// block's value, and ptxas keeps that value in a register across the whole
// loop; giving these registers a constant at the top of each logical block
// frees the register and changes nothing a program may rely on.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_ANALYSIS_LIVENESS_H
#define TALLY_ANALYSIS_LIVENESS_H

#include "tally/PTX/CFG.h"
#include "tally/PTX/IR.h"

#include <string>
#include <vector>

namespace tally {

/// Registers (not special registers) live at the entry of \p F, sorted.
/// A guarded write does not end a register's life; the first operand of an
/// instruction that writes registers counts as written only.
std::vector<std::string> getLiveInRegisters(const ptx::CFG &G);

} // namespace tally

#endif
