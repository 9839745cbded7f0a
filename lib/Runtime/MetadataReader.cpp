//===- MetadataReader.cpp - the runtime's reader of __tally_metadata ------===//
// (being written)
#include "tally/Runtime/MetadataReader.h"

namespace tally::rt {

const KernelMetadata *ModuleMetadata::find(std::string_view Name) const {
  for (const KernelMetadata &K : Kernels)
    if (K.Name == Name)
      return &K;
  return nullptr;
}

bool parseModuleMetadata(std::string_view Text, ModuleMetadata &Out, std::string &Error) {
  Error = "1:1: not implemented";
  return false;
}

} // namespace tally::rt
