//===- DriverTable.cpp - filling the driver table -------------------------===//

#include "tally/Runtime/DriverTable.h"

#define TALLY_STR2(X) #X
#define TALLY_STR(X) TALLY_STR2(X)

namespace tally::rt {

bool DriverTable::load(void *Handle, SymbolLookup Lookup, std::string &Missing,
                       std::string &MissingOptional) {
  Missing.clear();
  MissingOptional.clear();
  // The macro argument is expanded first, so the string is the exported,
  // versioned name (cuMemAlloc -> "cuMemAlloc_v2").
#define TALLY_DRIVER_REQUIRED(Name)                                           \
  Name = reinterpret_cast<decltype(Name)>(Lookup(Handle, TALLY_STR(Name)));   \
  if (!Name && Missing.empty())                                               \
    Missing = TALLY_STR(Name);
#define TALLY_DRIVER_OPTIONAL(Name)                                           \
  Name = reinterpret_cast<decltype(Name)>(Lookup(Handle, TALLY_STR(Name)));   \
  if (!Name)                                                                  \
    MissingOptional += (MissingOptional.empty() ? "" : " ") + std::string(TALLY_STR(Name));
#include "tally/Runtime/DriverSymbols.def"
  return Missing.empty();
}

std::string DriverTable::errorName(CUresult R) const {
  const char *Name = nullptr;
  if (cuGetErrorName && cuGetErrorName(R, &Name) == CUDA_SUCCESS && Name)
    return Name;
  return "CUresult " + std::to_string(static_cast<int>(R));
}

} // namespace tally::rt
