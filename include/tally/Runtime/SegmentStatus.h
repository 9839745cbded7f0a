//===- SegmentStatus.h - `tally status`: who shares the GPU ------*- C++ -*-===//
//
// Reads the cross-process segments of one user (Segment.h) without joining
// or changing them, and says which processes share each GPU under Tally:
// their priority, whether they are alive (heartbeat, pid and start time),
// an HP process's launch number and launches not yet reported finished, a
// BE process's
// preemptions. What an operator asks when a best-effort job is slow or a
// service's latency moved. Reads files only: no GPU, no driver.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_SEGMENTSTATUS_H
#define TALLY_RUNTIME_SEGMENTSTATUS_H

#include <cstdint>
#include <string>

namespace tally::rt {

struct StatusOptions {
  /// The segments' folder (the runtime's TALLY_SHM_DIR, default /dev/shm).
  std::string Dir = "/dev/shm";
  /// Whose segments: files tally-<Uid>-<GPU UUID>.
  uint32_t Uid = 0;
  /// The CLOCK_MONOTONIC time against which heartbeats and launches are
  /// aged; 0 (what `tally status` gives): the clock read right after each
  /// file is read.
  uint64_t NowNs = 0;
  /// A heartbeat older than this is stale (the runtime's limit).
  uint64_t StaleNs = 50'000'000;
  /// Only segments whose GPU UUID contains this (empty: all).
  std::string Gpu;
  /// JSON instead of text.
  bool Json = false;
};

struct StatusReport {
  /// The report (text or JSON), ending in a newline.
  std::string Out;
  /// Messages about files that could not be read as segments, a line each
  /// ("FILE: why"); also in the JSON.
  std::string Errors;
  unsigned Segments = 0;
  unsigned Problems = 0;
};

/// Reads every segment of \p O.Uid in \p O.Dir. A folder that cannot be
/// read is a problem; no segment at all is not.
StatusReport segmentStatus(const StatusOptions &O);

} // namespace tally::rt

#endif
