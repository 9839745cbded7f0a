//===- CubinCompare.h - how a kernel's code differs in 2 cubins -*- C++ -*-===//
//
// tally-opt rebuilds the cubins of a fatbin from the transformed PTX and
// checks that the original kernels keep their machine code. Adding kernels
// and globals to a module can still move addresses that the loader fills
// in, so equal code may differ in a few bytes:
//
// - Relocation targets: the operand field (bytes 4-7) of an instruction that
//   a relocation with the same type, symbol and addend patches in both
//   cubins.
// - Address slots: executable cubins read the addresses of globals and
//   external functions (vprintf, malloc, __assertfail) from a constant bank
//   (.nv.constant4 on sm_90) whose 8-byte slots .rela.nv.constant<N> fills at
//   load time. Globals get slots first, functions after them, so one more
//   global moves every function's slot, and the instruction that holds the
//   slot's offset (`MOV R8, 0x20` before `LDC.64 R8, c[0x4][R8]`, or a
//   `c[0x4][0x20]` operand) changes, though it still reaches the same
//   symbol.
//
// compareKernelCode() lists the differing bytes and says which of them are
// such address fields. The instruction fields are those of sm_70 and later
// (16-byte instructions); elsewhere no byte is taken for an address slot.
//
//===----------------------------------------------------------------------===//

#ifndef TALLY_FATBIN_CUBINCOMPARE_H
#define TALLY_FATBIN_CUBINCOMPARE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tally {
namespace fatbin {

/// How the `.text.<kernel>` section of a kernel differs between two cubins.
struct KernelCodeDiff {
  std::string Kernel;
  uint64_t OldSize = 0, NewSize = 0;
  /// Section offsets of the differing bytes (sizes equal), in order.
  std::vector<uint64_t> Bytes;
  /// Which of Bytes are in address fields (see the file comment).
  std::vector<bool> IsAddress;

  /// The code is the same up to addresses the loader fills in.
  bool onlyAddressesDiffer() const;
  /// What differs, e.g. "section .text.k: 1 of its 640 bytes differs (at
  /// 0xe4), not in an address field".
  std::string describe() const;
};

/// Compares the code of the kernels that both ELF cubins \p Old and \p New
/// have (`.text.<kernel>` sections); returns one entry per kernel whose code
/// differs, in the order of \p Old's sections. Errors name the cubin ("the
/// input"/"the new cubin") and what could not be read.
llvm::Expected<std::vector<KernelCodeDiff>>
compareKernelCode(llvm::StringRef Old, llvm::StringRef New);

} // namespace fatbin
} // namespace tally

#endif // TALLY_FATBIN_CUBINCOMPARE_H
