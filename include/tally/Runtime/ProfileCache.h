//===- ProfileCache.h - the runtime's persistent profile cache -*- C++ -*-===//
//
// The runtime measures each candidate configuration of a best-effort kernel
// (the original, a PTB form, a sliced form) per launch shape, and keeps the
// measurements in one text file per GPU so later runs, and other processes
// running at the same time, start from them instead of measuring again
// (docs/profile-cache.md describes the file).
//
// The file is written by many processes and may be damaged by any of them,
// by a full disk or by hand, and it is read inside other people's programs:
// every line carries a checksum and is checked against bounds before use, a
// bad line is dropped and counted, and nothing here throws, aborts or
// prints. Writers merge under an exclusive flock() and replace the file with
// rename(), so no measurement is lost and no torn file is ever visible.
//
// No CUDA, LLVM or yaml-cpp: this is linked into libtally.so.
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_PROFILECACHE_H
#define TALLY_RUNTIME_PROFILECACHE_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tally::rt {

/// Bounds every record must keep (the reader drops a line outside them) and
/// caps on the whole file. They keep a damaged or hostile file from costing
/// more than a little memory and time in the host process.
namespace profile_limits {
/// Kernel names are mangled C++ names plus a module identity; templated
/// library kernels reach a few KiB.
inline constexpr size_t MaxKernelBytes = 4096;
inline constexpr size_t MaxCandidateBytes = 64;
/// A whole record line, checksum and newline excluded.
inline constexpr size_t MaxLineBytes = 8192;
inline constexpr size_t MaxRecords = 100000;
inline constexpr size_t MaxFileBytes = 32u << 20;
/// Grid, block and shared-memory limits of current GPUs, with room.
inline constexpr uint32_t MaxGridX = 0x7fffffffu;
inline constexpr uint32_t MaxGridYZ = 65535;
inline constexpr uint32_t MaxBlockXY = 1024;
inline constexpr uint32_t MaxBlockZ = 64;
inline constexpr uint32_t MaxBlockThreads = 1024;
inline constexpr uint32_t MaxSharedBytes = 1u << 20;
/// One measurement is at most 1000 s (record() clamps longer ones).
inline constexpr uint64_t MaxNs = 1000000000000ull;
/// A record's count stays at most this; merging past it halves count and
/// total, which keeps the mean and lets old measurements fade.
inline constexpr uint32_t MaxCount = 1u << 20;
} // namespace profile_limits

/// What a measurement is about.
struct ProfileKey {
  /// Kernel name plus a module identity, e.g. "gemm_tiled@3f2a9c01":
  /// 1..MaxKernelBytes printable ASCII bytes without spaces (so no tabs or
  /// newlines).
  std::string Kernel;
  uint32_t Grid[3] = {1, 1, 1};
  uint32_t Block[3] = {1, 1, 1};
  /// Dynamic shared memory bytes of the launch.
  uint32_t Shared = 0;

  bool operator<(const ProfileKey &O) const;
  bool operator==(const ProfileKey &O) const;
  bool operator!=(const ProfileKey &O) const { return !(*this == O); }
};

/// One candidate configuration's measurements.
struct ProfileEntry {
  /// A short token: "original", "ptb:w=2,c=4", "slice:b=264"
  /// ([a-z0-9:=,.] only, 1..MaxCandidateBytes bytes).
  std::string Candidate;
  /// Number of measurements, 1..MaxCount.
  uint32_t Count = 0;
  /// Fastest measurement; BestNs * Count <= TotalNs.
  uint64_t BestNs = 0;
  /// Sum of the measurements, at most Count * MaxNs.
  uint64_t TotalNs = 0;
};

/// Every record, by key; each key's entries are sorted by candidate and
/// hold each candidate once.
using ProfileMap = std::map<ProfileKey, std::vector<ProfileEntry>>;

/// True if \p K keeps the bounds above; otherwise false with \p Why (if
/// given) saying which.
bool isValidProfileKey(const ProfileKey &K, std::string *Why = nullptr);
/// True if \p C is a valid candidate token.
bool isValidCandidate(std::string_view C);

/// The persistent measurements of one GPU.
///
/// An object is not thread-safe: the runtime calls it under its own lock.
/// Several objects, in one process or many, may share a file.
class ProfileCache {
public:
  /// Directory: $TALLY_CACHE_DIR, else $XDG_CACHE_HOME/tally (an absolute
  /// path only, as the XDG specification asks), else $HOME/.cache/tally;
  /// "" if none can be formed. Empty variables count as unset. \p GetEnv is
  /// getenv or a test map.
  static std::string defaultDir(const char *(*GetEnv)(const char *));
  /// File of one GPU: <Dir>/profile-<sanitized GpuKey>.v1 (bytes other
  /// than [A-Za-z0-9._-] become '_', at most 128 of them, "unknown" if
  /// empty); "" if \p Dir is empty.
  static std::string pathFor(const std::string &Dir, const std::string &GpuKey);

  explicit ProfileCache(std::string Path);

  const std::string &path() const { return Path; }

  /// Reads the file (missing file: true, empty cache). Corrupt lines are
  /// dropped and counted; \p Warning says how many and why the first was
  /// bad ("" if none was). False + \p Warning only if the file exists but
  /// cannot be read at all or its header is wrong (the cache is then empty
  /// and a later save() rewrites it), or if the path is empty (no cache
  /// directory could be formed). Measurements recorded and not yet saved
  /// stay in the view.
  bool load(std::string &Warning);

  /// The entries of \p K (sorted by candidate), or null if unknown. The
  /// pointer lives until the next load(), record() or save().
  const std::vector<ProfileEntry> *lookup(const ProfileKey &K) const;

  /// Adds one measurement (Count+1, TotalNs+=Ns, BestNs=min) and marks it
  /// dirty. An invalid key or candidate is ignored; \p Ns is clamped to
  /// MaxNs.
  void record(const ProfileKey &K, const std::string &Candidate, uint64_t Ns);

  /// Merges the dirty measurements into the file on disk: takes an
  /// exclusive flock on <Path>.lock, re-reads the file (others may have
  /// written since), adds only this process's measurements made since the
  /// last save (no double counting across repeated saves), writes
  /// <Path>.tmp.<pid>, fsync, rename over Path, creating Dir (mode 0700) if
  /// needed. Safe against concurrent writers in several processes: no
  /// measurement is lost, no torn file is ever visible. Afterwards the view
  /// is the file's content. Nothing dirty: true, the disk untouched. On
  /// failure the dirty measurements are kept for the next save. New
  /// records beyond the file caps are not stored.
  bool save(std::string &Error);

  /// Every record, in key order (for `tally profile show`).
  void forEach(
      const std::function<void(const ProfileKey &,
                               const std::vector<ProfileEntry> &)> &F) const;
  size_t keys() const { return Records.size(); }
  /// True if measurements wait for save().
  bool dirty() const { return !Pending.empty(); }

  /// Removes the file (for `tally profile clear`); true if it is gone.
  static bool clear(const std::string &Path, std::string &Error);

  /// Human-readable listing (what `tally profile show` prints): one line
  /// per (key, candidate) with count, best and mean in microseconds, the
  /// fastest candidate of each key (lowest mean) marked with '*'.
  void print(std::ostream &OS) const;

private:
  std::string Path;
  /// What lookup() sees: the file as last read or written, plus Pending.
  ProfileMap Records;
  /// Measurements recorded since the last successful save().
  ProfileMap Pending;
};

/// Parses a cache file's text (the code path load() uses; for the fuzzer).
/// Returns false if the header is wrong (\p Out then empty); DroppedLines
/// counts the records refused (what lies past a cap counts as one line)
/// and \p Why says why the first was ("line N: reason"), or why the header
/// is wrong.
bool parseProfileText(std::string_view Text, ProfileMap &Out,
                      size_t &DroppedLines, std::string &Why);

/// The file text of \p Records, header included (the code path save()
/// uses); parseProfileText() reads it back unchanged.
std::string formatProfileText(const ProfileMap &Records);

} // namespace tally::rt

#endif
