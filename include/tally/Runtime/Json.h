//===- Json.h - JSON strings for the runtime's reports ----------*- C++ -*-===//
//
// The statistics (Stats.cpp) and `tally status` (SegmentStatus.cpp) write
// their JSON by hand; this is the one place a string becomes a JSON string.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_JSON_H
#define TALLY_RUNTIME_JSON_H

#include <string>

namespace tally::rt {

/// \p S as a JSON string, quotes included: quotes, backslashes and control
/// characters escaped, valid UTF-8 kept, any other byte '?' (so the result
/// is valid JSON whatever the bytes: kernel, file and command names).
std::string jsonString(const std::string &S);

} // namespace tally::rt

#endif
