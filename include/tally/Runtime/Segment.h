//===- Segment.h - the cross-process shared-memory segment ------*- C++ -*-===//
//
// High-priority (HP, latency-critical) and best-effort (BE) processes on one
// GPU coordinate through one shared-memory file per GPU and user,
// <Dir>/tally-<uid>-<Key>. Every process claims a slot; HP processes count
// their launches in it before each kernel launch and their completions after
// (on the host or, through finishedWord(), on the GPU); BE processes read all
// slots (hpView) and preempt their own kernels while an HP process is active.
// Every process refreshes its slot's heartbeat about every 10 ms; a slot whose
// heartbeat is older than StaleNs belongs to a dead or stalled process: it
// stops counting at once and the next heartbeat of any process frees it.
//
// The segment is written by other processes, so everything read from it is
// checked before use and nothing read from it indexes memory (the layout's
// sizes are this file's constants, compared with the header, never taken from
// it). Failures are error strings; nothing here throws, aborts or prints.
// Only libc and libstdc++ are used: this is linked into libtally.so.
//
// Layout, version 1 (all integers native endian, all fields naturally aligned
// std::atomic words so that every process may update them concurrently):
//
//   offset  size  header (64 bytes)
//        0     8  Magic "TALLYSHM"
//        8     4  Version = 1
//       12     4  HeaderBytes = 64
//       16     4  SlotCount = 64
//       20     4  SlotBytes = 128
//       24     8  TotalBytes = 64 + 64 * 128 = 8256 (header and slots)
//       32     4  Ready: 1 once initialised (stored last, release)
//       36    28  reserved (zero)
//
//   offset  size  slot I (128 bytes at 64 + 128 * I)
//        0     4  State: 0 free, 1 claiming (or being freed), 2 live
//        4     4  Priority: 0 high, 1 best effort (SegPriority)
//        8     4  Pid
//       12     4  Flags: bit 0 (FlagNoMps) an HP process whose context the
//                  driver says is not an MPS client; bit 1 (FlagWaitShare)
//                  the owner writes WaitShare (set by every writer since
//                  2026-11-25); other bits 0 (ignored by readers; before
//                  2026-11-25 always 0)
//       16     8  StartTime: field 22 of /proc/<pid>/stat, 0 if unknown
//       24     8  Token: random, non-zero, names the owner
//       32     8  HeartbeatNs: CLOCK_MONOTONIC of the owner's last heartbeat
//       40     8  Started: HP launches so far (a launch's sequence number)
//       48     8  Finished: highest completed sequence number
//       56     8  LastLaunchNs: CLOCK_MONOTONIC of the latest HP launch
//       64     8  Preemptions: BE preemptions (informational)
//       72     4  WaitShare: an HP process's share of its requests' time
//                  spent waiting for the GPU (Runtime: from its first launch
//                  after a wait to the end of the next wait), in permille
//                  plus one (1 to 1001), smoothed over about 200 ms; 0 not
//                  known (not measured yet, or its requests are not seen);
//                  read only when Flags has FlagWaitShare (a writer before
//                  2026-11-25 left the field, then padding, as it found
//                  it); larger values are invalid and read as unknown
//       76    52  padding
//
// The file is 8256 bytes rounded up to whole pages; it is created with mode
// 0600, checked (owner, regular file, mode) and initialised under
// flock(LOCK_EX), and never unlinked or shrunk: a process that finds it
// corrupt re-initialises it in place, and every other process notices at its
// next heartbeat that its token is gone and claims a slot again.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_SEGMENT_H
#define TALLY_RUNTIME_SEGMENT_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tally::rt {

/// A slot's priority, as stored in the segment.
enum class SegPriority : uint32_t { High = 0, BestEffort = 1 };

/// Where the segment lives and when a slot counts as dead.
struct SegmentOptions {
  /// The directory of the segment file (tests use a temporary directory).
  std::string Dir = "/dev/shm";
  /// The GPU's identity, e.g. "GPU-5f3c...". Only [A-Za-z0-9-] are kept for
  /// the file name (at most 128 of them); it must keep at least one.
  std::string Key;
  /// A slot whose heartbeat is older than this is dead: ignored by readers,
  /// then freed by the next heartbeat of any process.
  uint64_t StaleNs = 50'000'000;
};

/// What a best-effort process needs to know of the HP processes, at one
/// instant.
struct HpView {
  /// Live HP slots (heartbeat fresh).
  unsigned HpProcesses = 0;
  /// Live BE slots.
  unsigned BeProcesses = 0;
  /// Some live HP slot has Started > Finished.
  bool Active = false;
  /// The sum of Started over live HP slots. It grows with every HP launch, so
  /// any change (it also drops when an HP process goes) means an arrival or
  /// a departure.
  uint64_t Arrivals = 0;
  /// The latest LastLaunchNs over live HP slots (0 when none).
  uint64_t LastLaunchNs = 0;
  /// Live HP slots with FlagNoMps: processes that are not MPS clients, so
  /// that BE kernels beside theirs are time-sliced against them.
  unsigned HpWithoutMps = 0;
  /// Every live HP slot has a valid WaitShare (and there is one).
  bool WaitShareKnown = false;
  /// The largest WaitShare over live HP slots, in permille (0 to 1000);
  /// 0 when not WaitShareKnown.
  uint32_t WaitPermille = 0;
};

/// One slot as read (`tally status`, tests). The fields are the raw values,
/// unchecked beyond the slot's state: HeartbeatNs tells whether the slot is
/// still live, Prio may be out of range in a claiming slot, WaitShare is
/// permille plus one (0 unknown) and means something only with
/// seg::FlagWaitShare in Flags.
struct SlotInfo {
  unsigned Index;
  uint32_t State;
  SegPriority Prio;
  uint32_t Pid;
  uint64_t HeartbeatNs, Started, Finished, LastLaunchNs, Preemptions;
  uint32_t Flags = 0;
  uint64_t StartTime = 0;
  uint32_t WaitShare = 0;
};

/// Layout constants of version 1 (see the file comment).
namespace seg {
inline constexpr uint32_t Version = 1;
inline constexpr uint32_t HeaderBytes = 64;
inline constexpr uint32_t SlotCount = 64;
inline constexpr uint32_t SlotBytes = 128;
inline constexpr uint64_t TotalBytes =
    uint64_t(HeaderBytes) + uint64_t(SlotCount) * SlotBytes;
inline constexpr uint32_t StateFree = 0, StateClaiming = 1, StateLive = 2;
/// Slot flags.
inline constexpr uint32_t FlagNoMps = 1;
inline constexpr uint32_t FlagWaitShare = 2;
/// A heartbeat further in the future than this is invalid.
inline constexpr uint64_t FutureSlackNs = 1'000'000'000;
} // namespace seg

/// One process's handle on the segment of one GPU: a mapping of the file and
/// at most one slot in it. Safe to use from several threads: hpLaunch,
/// hpFinished, addPreemption and the readers are lock-free; join, leave and
/// heartbeat serialise on a mutex.
class Segment {
public:
  /// Opens (creating if needed) <Dir>/tally-<uid>-<Key>. Sets \p Warning when
  /// a stale, corrupt or other-version segment (or some of its slots) was
  /// re-initialised. Returns null with \p Error set when it cannot be used:
  /// the key is empty, the file cannot be created, opened or mapped, is a
  /// symbolic link or not a regular file, is not owned by this uid, has a
  /// mode other than 0600, has an absurd size, or stays locked by another
  /// process for a second.
  static std::unique_ptr<Segment>
  open(const SegmentOptions &O, std::string &Warning, std::string &Error);
  /// Leaves (frees this process's slot) and unmaps.
  ~Segment();

  Segment(const Segment &) = delete;
  Segment &operator=(const Segment &) = delete;

  /// Claims a slot for this process (pid, start time, priority, a random
  /// token, heartbeat \p NowNs), leaving the one it holds first. When every
  /// slot is taken it frees the dead ones and tries again; false with
  /// \p Error when still none is free.
  bool join(SegPriority P, uint64_t NowNs, std::string &Error);
  /// Frees this process's slot, if it still holds it.
  void leave();
  /// Called every ~10 ms by a runtime thread: refreshes this slot's
  /// heartbeat and frees the slots whose heartbeat is stale (older than
  /// StaleNs, or more than a second in the future) or whose state is invalid.
  /// If this process's own slot was freed or wiped (its token is gone: the
  /// process was stalled, or the segment was re-initialised by another one)
  /// it joins again, with the same priority, preferring the same slot, and
  /// sets \p Rejoined; finishedWord() may then have moved. In a child
  /// forked after join it claims the child's own slot. Returns false when
  /// this process holds no slot afterwards: it cannot join again, never
  /// joined, or left.
  bool heartbeat(uint64_t NowNs, bool &Rejoined);

  // HP side: a few atomics, no system calls, no locks.

  /// Before each HP launch: ++Started, LastLaunchNs = max(LastLaunchNs,
  /// \p NowNs). Returns the new Started value (the launch's sequence number),
  /// or 0 when this process holds no slot (then there is nothing to finish).
  uint64_t hpLaunch(uint64_t NowNs);
  /// Host-side completion: Finished = max(Finished, \p Seq).
  void hpFinished(uint64_t Seq);
  /// The address of this slot's 8-byte Finished word inside the mapping,
  /// 8-byte aligned, so the GPU can write a sequence number into it (the
  /// runtime registers the mapping with cuMemHostRegister and writes with
  /// cuStreamWriteValue64). Null when no slot is held. Sequence numbers go on
  /// across a re-join, so late GPU writes of old ones stay below Started.
  uint64_t *finishedWord();
  /// The mapping, page aligned, for registration with the driver.
  void *mappingBase() const;
  size_t mappingBytes() const;
  /// BE: counts a preemption in this process's slot (informational).
  void addPreemption();
  /// HP: publishes this process's share of its requests' time spent
  /// waiting for the GPU, in permille (clamped to 1000); negative: not
  /// known.
  void setWaitShare(int Permille);
  /// This process's slot flags (seg::FlagNoMps), kept across a re-join.
  void setFlags(uint32_t F);

  // BE side.

  /// The live HP and BE processes at \p NowNs. Empty when the header is not
  /// (or no longer) a version 1 header.
  HpView hpView(uint64_t NowNs) const;
  /// Every slot that is claiming or live, as read (slots with an invalid
  /// state are left out: the next heartbeat frees them).
  std::vector<SlotInfo> slots() const;
  /// The segment file.
  const std::string &path() const;

private:
  Segment() = default;
  /// Claims a free slot (trying \p Preferred first) whose sequence numbers
  /// start above \p SeqBase; -1 when none is free.
  int claim(SegPriority P, uint64_t NowNs, int Preferred, uint64_t SeqBase);
  /// Frees the dead and invalid slots other than this process's own.
  void reclaim(uint64_t NowNs);
  void leaveLocked();

  std::string Path;
  uint64_t StaleNs = 0;
  unsigned char *Base = nullptr;
  size_t Bytes = 0;
  /// The process that joined; a forked child must not use the parent's slot.
  uint32_t OwnerPid = 0;
  SegPriority Prio = SegPriority::BestEffort;
  /// setFlags's value, written into every slot this process claims.
  std::atomic<uint32_t> OwnFlags{0};
  /// The slot held and its token: read without the mutex by the HP path,
  /// changed under it (Token before Slot on a claim, Slot first on a leave).
  std::atomic<int> Slot{-1};
  std::atomic<uint64_t> Token{0};
  /// Whether this process wants a slot (joined and has not left).
  bool Joined = false;
  /// The highest sequence number seen in the own slot, so that a re-join
  /// goes on above it.
  uint64_t HighSeq = 0;
  /// Claiming slots seen by reclaim(): one that stays claiming, with the same
  /// token and heartbeat, for StaleNs was abandoned mid-claim.
  struct ClaimingSighting {
    uint64_t Token = 0, HeartbeatNs = 0, SeenNs = 0;
    bool Valid = false;
  };
  ClaimingSighting Sightings[seg::SlotCount];
  std::mutex Mutex;
};

/// Checks raw bytes as a segment image: the header and every slot. False with
/// the first problem in \p Why ("bad magic", "slot 3: state 7"). Used by
/// open() and the fuzzer. Any alignment and size are accepted.
bool validateSegmentImage(const void *Bytes, size_t Size, std::string &Why);

/// Reads the slots that are not free out of a raw image (a copy of the
/// file's bytes), through the same code as Segment::slots: false with \p Why
/// ("bad magic", "not ready (0)") when the header is not a ready version 1
/// header. Never crashes on any bytes; slots past \p Size are not read, and
/// a slot whose state is invalid is skipped.
bool slotsOfImage(const void *Bytes, size_t Size, std::vector<SlotInfo> &Out,
                  std::string &Why);

/// The runtime's rule for a live slot's heartbeat: counted while at most
/// \p StaleNs old, or at most seg::FutureSlackNs in the future.
bool heartbeatFresh(uint64_t HeartbeatNs, uint64_t NowNs, uint64_t StaleNs);

/// Field 22 of /proc/<Pid>/stat, the process's start time in clock ticks
/// since boot (what a slot's StartTime holds): 0 when there is no such
/// process or it cannot be read.
uint64_t processStartTimeOf(uint32_t Pid);

/// Reads an HP view out of a raw image, through the same bounds-checked code
/// as Segment::hpView. Never crashes on any bytes: an image whose header is
/// not a version 1 header gives an empty view; slots past \p Size are not
/// read.
HpView hpViewOfImage(const void *Bytes, size_t Size, uint64_t NowNs,
                     uint64_t StaleNs);

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process on the
/// machine, the clock of every time stored in the segment.
uint64_t monotonicNs();

} // namespace tally::rt

#endif
