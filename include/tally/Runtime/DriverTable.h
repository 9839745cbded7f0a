//===- DriverTable.h - the CUDA driver as a table of functions ---*- C++ -*-===//
//
// Every driver call the runtime makes goes through one DriverTable, filled
// once by looking the symbols of DriverSymbols.def up in a library opened
// with dlopen (libcuda.so.1, or TALLY_DRIVER for tests). Nothing links
// against libcuda, so the runtime builds and is tested without a GPU, with
// a fake driver in its place.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_DRIVERTABLE_H
#define TALLY_RUNTIME_DRIVERTABLE_H

#include <cuda.h>

#include <string>

namespace tally::rt {

/// How to look a symbol up in an opened library (the real dlsym: the
/// runtime interposes dlsym itself).
using SymbolLookup = void *(*)(void *Handle, const char *Name);

struct DriverTable {
#define TALLY_DRIVER_REQUIRED(Name) decltype(&::Name) Name = nullptr;
#define TALLY_DRIVER_OPTIONAL(Name) decltype(&::Name) Name = nullptr;
#include "tally/Runtime/DriverSymbols.def"

  /// Fills the table from \p Handle. Returns false, with \p Missing naming
  /// the first absent required symbol, when the runtime cannot work at
  /// all; absent optional symbols are listed in \p MissingOptional.
  bool load(void *Handle, SymbolLookup Lookup, std::string &Missing,
            std::string &MissingOptional);

  /// "CUDA_ERROR_X" for \p R (or the number when the driver does not know it).
  std::string errorName(CUresult R) const;
};

} // namespace tally::rt

#endif
