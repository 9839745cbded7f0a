//===- ProfileCache.cpp - the runtime's persistent profile cache ----------===//
//
// The cache file is text (docs/profile-cache.md): a header line, then one
// record per (key, candidate) with a FNV-1a checksum of the line, so a
// damaged line is found and dropped alone instead of poisoning the choice
// of configuration for a kernel.
//
// Writers serialize on an flock() of a separate lock file (the data file
// itself is replaced by rename(), so a lock on it would lock a file that is
// no longer there). Under the lock a writer re-reads the file, adds the
// measurements it made since its last save, and renames a complete,
// fsync()ed temporary file over it: readers take no lock and see the old
// or the new file, never a mix. Only writers hold the lock, so any
// temporary file seen while holding it was left by a writer that died,
// and is removed.
//
// Everything here runs inside other people's programs: no exceptions leave
// (allocation failures included), no CUDA, no printing, and every read is
// bounded by the caps in ProfileCache.h.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/ProfileCache.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <ostream>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tally::rt {

using namespace profile_limits;

static constexpr std::string_view Header = "tally-profile 1";
static constexpr std::string_view HeaderPrefix = "tally-profile ";
/// Tab plus 16 hex digits.
static constexpr size_t ChecksumField = 17;
/// How long save() and clear() wait for another writer before giving up:
/// a stopped or hung process must not hang every other one with it.
static constexpr unsigned LockTimeoutMs = 10000;

//===----------------------------------------------------------------------===//
// Keys, entries and their bounds
//===----------------------------------------------------------------------===//

static int compareKeys(const ProfileKey &A, const ProfileKey &B) {
  if (int C = A.Kernel.compare(B.Kernel))
    return C < 0 ? -1 : 1;
  for (int I = 0; I < 3; ++I)
    if (A.Grid[I] != B.Grid[I])
      return A.Grid[I] < B.Grid[I] ? -1 : 1;
  for (int I = 0; I < 3; ++I)
    if (A.Block[I] != B.Block[I])
      return A.Block[I] < B.Block[I] ? -1 : 1;
  if (A.Shared != B.Shared)
    return A.Shared < B.Shared ? -1 : 1;
  return 0;
}

bool ProfileKey::operator<(const ProfileKey &O) const {
  return compareKeys(*this, O) < 0;
}

bool ProfileKey::operator==(const ProfileKey &O) const {
  return compareKeys(*this, O) == 0;
}

static bool validKernelName(std::string_view S) {
  if (S.empty() || S.size() > MaxKernelBytes)
    return false;
  // Printable ASCII without space: no field separator, line break or
  // terminal control sequence can hide in a name `tally profile show`
  // prints.
  for (char C : S)
    if (C < 0x21 || C > 0x7e)
      return false;
  return true;
}

bool isValidCandidate(std::string_view C) {
  if (C.empty() || C.size() > MaxCandidateBytes)
    return false;
  for (char Ch : C)
    if (!((Ch >= 'a' && Ch <= 'z') || (Ch >= '0' && Ch <= '9') || Ch == ':' ||
          Ch == '=' || Ch == ',' || Ch == '.'))
      return false;
  return true;
}

/// What is wrong with \p K (a string literal), or null.
static const char *keyProblem(const ProfileKey &K) {
  if (!validKernelName(K.Kernel))
    return "bad kernel name";
  if (K.Grid[0] < 1 || K.Grid[0] > MaxGridX || K.Grid[1] < 1 ||
      K.Grid[1] > MaxGridYZ || K.Grid[2] < 1 || K.Grid[2] > MaxGridYZ)
    return "grid out of range";
  if (K.Block[0] < 1 || K.Block[0] > MaxBlockXY || K.Block[1] < 1 ||
      K.Block[1] > MaxBlockXY || K.Block[2] < 1 || K.Block[2] > MaxBlockZ ||
      uint64_t(K.Block[0]) * K.Block[1] * K.Block[2] > MaxBlockThreads)
    return "block out of range";
  if (K.Shared > MaxSharedBytes)
    return "shared memory size out of range";
  return nullptr;
}

bool isValidProfileKey(const ProfileKey &K, std::string *Why) {
  const char *Problem = keyProblem(K);
  if (Problem && Why)
    *Why = Problem;
  return !Problem;
}

/// The bounds every stored entry keeps; the merge below preserves them.
static bool validEntry(const ProfileEntry &E, const char *&Why) {
  if (!isValidCandidate(E.Candidate))
    return Why = "bad candidate", false;
  if (E.Count < 1 || E.Count > MaxCount)
    return Why = "count out of range", false;
  if (E.BestNs > MaxNs || E.TotalNs > uint64_t(E.Count) * MaxNs)
    return Why = "time out of range", false;
  if (E.BestNs * E.Count > E.TotalNs)
    return Why = "best time above the mean", false;
  return true;
}

/// Adds \p From's measurements to \p Into (same candidate). Both keep
/// validEntry(), so the sums cannot overflow (2 * MaxCount * MaxNs < 2^64)
/// and the result keeps it too: the minimum of the bests times the summed
/// counts stays below the summed totals.
static void mergeEntry(ProfileEntry &Into, const ProfileEntry &From) {
  uint64_t Count = uint64_t(Into.Count) + From.Count;
  uint64_t Total = Into.TotalNs + From.TotalNs;
  Into.BestNs = std::min(Into.BestNs, From.BestNs);
  if (Count > MaxCount) {
    // Keep the mean and forget half the history. An odd count first drops
    // one mean measurement so the halving is exact: Best * Count <= Total
    // and Total <= Count * MaxNs both survive the integer divisions.
    if (Count % 2) {
      Total -= Total / Count;
      --Count;
    }
    Count /= 2;
    Total /= 2;
  }
  Into.Count = static_cast<uint32_t>(Count);
  Into.TotalNs = Total;
}

static std::vector<ProfileEntry>::iterator
lowerBound(std::vector<ProfileEntry> &Entries, const std::string &Candidate) {
  return std::lower_bound(Entries.begin(), Entries.end(), Candidate,
                          [](const ProfileEntry &A, const std::string &C) {
                            return A.Candidate < C;
                          });
}

/// The entry of \p Candidate, or null.
static ProfileEntry *findEntry(std::vector<ProfileEntry> &Entries,
                               const std::string &Candidate) {
  auto It = lowerBound(Entries, Candidate);
  return It != Entries.end() && It->Candidate == Candidate ? &*It : nullptr;
}

/// Merges \p E into the entries of a key, keeping them sorted by candidate.
static void mergeInto(std::vector<ProfileEntry> &Entries,
                      const ProfileEntry &E) {
  auto It = lowerBound(Entries, E.Candidate);
  if (It != Entries.end() && It->Candidate == E.Candidate)
    mergeEntry(*It, E);
  else
    Entries.insert(It, E);
}

static void mergeAll(ProfileMap &Into, const ProfileMap &From) {
  for (const auto &[K, Entries] : From) {
    std::vector<ProfileEntry> &Dst = Into[K];
    for (const ProfileEntry &E : Entries)
      mergeInto(Dst, E);
  }
}

//===----------------------------------------------------------------------===//
// Text format
//===----------------------------------------------------------------------===//

static uint64_t fnv1a(std::string_view S) {
  uint64_t H = 0xcbf29ce484222325ull;
  for (unsigned char C : S) {
    H ^= C;
    H *= 0x100000001b3ull;
  }
  return H;
}

static void appendUInt(std::string &Out, uint64_t V) {
  char Buf[24];
  auto R = std::to_chars(Buf, Buf + sizeof(Buf), V);
  Out.append(Buf, R.ptr);
}

static void appendTriple(std::string &Out, const uint32_t (&V)[3]) {
  for (int I = 0; I < 3; ++I) {
    if (I)
      Out += ',';
    appendUInt(Out, V[I]);
  }
}

/// Appends the record line of (\p K, \p E), newline included.
static void appendLine(std::string &Out, const ProfileKey &K,
                       const ProfileEntry &E) {
  size_t Start = Out.size();
  Out += K.Kernel;
  Out += '\t';
  appendTriple(Out, K.Grid);
  Out += '\t';
  appendTriple(Out, K.Block);
  Out += '\t';
  appendUInt(Out, K.Shared);
  Out += '\t';
  Out += E.Candidate;
  Out += '\t';
  appendUInt(Out, E.Count);
  Out += '\t';
  appendUInt(Out, E.BestNs);
  Out += '\t';
  appendUInt(Out, E.TotalNs);
  uint64_t Sum = fnv1a(std::string_view(Out).substr(Start));
  char Hex[ChecksumField + 1];
  Hex[0] = '\t';
  for (int I = 0; I < 16; ++I)
    Hex[1 + I] = "0123456789abcdef"[(Sum >> (60 - 4 * I)) & 0xf];
  Hex[ChecksumField] = '\n';
  Out.append(Hex, sizeof(Hex));
}

std::string formatProfileText(const ProfileMap &Records) {
  std::string Out;
  Out += Header;
  Out += '\n';
  for (const auto &[K, Entries] : Records)
    for (const ProfileEntry &E : Entries)
      appendLine(Out, K, E);
  return Out;
}

/// A decimal number without sign or leading zeros, at most \p Max.
static bool parseUInt(std::string_view S, uint64_t Max, uint64_t &V) {
  if (S.empty() || S.size() > 20 || (S.size() > 1 && S[0] == '0'))
    return false;
  V = 0;
  for (char C : S) {
    if (C < '0' || C > '9')
      return false;
    uint64_t D = uint64_t(C - '0');
    if (V > (Max - D) / 10)
      return false;
    V = V * 10 + D;
  }
  return true;
}

static bool parseU32(std::string_view S, uint32_t &V) {
  uint64_t W;
  if (!parseUInt(S, UINT32_MAX, W))
    return false;
  V = static_cast<uint32_t>(W);
  return true;
}

static bool parseTriple(std::string_view S, uint32_t (&V)[3]) {
  for (int I = 0; I < 3; ++I) {
    size_t Comma = I < 2 ? S.find(',') : S.size();
    if (Comma == std::string_view::npos || !parseU32(S.substr(0, Comma), V[I]))
      return false;
    S.remove_prefix(I < 2 ? Comma + 1 : Comma);
  }
  return true;
}

/// Reads one record line (without its newline); \p Why says what is wrong.
static bool parseLine(std::string_view Line, ProfileKey &K, ProfileEntry &E,
                      const char *&Why) {
  if (Line.size() > MaxLineBytes + ChecksumField)
    return Why = "line too long", false;
  if (Line.size() < ChecksumField || Line[Line.size() - ChecksumField] != '\t')
    return Why = "no checksum", false;
  std::string_view Body = Line.substr(0, Line.size() - ChecksumField);
  uint64_t Sum = 0;
  for (char C : Line.substr(Line.size() - 16)) {
    int D = C >= '0' && C <= '9'   ? C - '0'
            : C >= 'a' && C <= 'f' ? C - 'a' + 10
                                   : -1;
    if (D < 0)
      return Why = "bad checksum field", false;
    Sum = Sum << 4 | unsigned(D);
  }
  if (Sum != fnv1a(Body))
    return Why = "checksum mismatch", false;

  std::string_view F[8];
  for (int I = 0; I < 8; ++I) {
    size_t Tab = I < 7 ? Body.find('\t') : Body.size();
    if (Tab == std::string_view::npos)
      return Why = "too few fields", false;
    F[I] = Body.substr(0, Tab);
    Body.remove_prefix(I < 7 ? Tab + 1 : Tab);
  }
  if (F[7].find('\t') != std::string_view::npos)
    return Why = "too many fields", false;

  if (!validKernelName(F[0]))
    return Why = "bad kernel name", false;
  if (!parseTriple(F[1], K.Grid))
    return Why = "bad grid", false;
  if (!parseTriple(F[2], K.Block))
    return Why = "bad block", false;
  if (!parseU32(F[3], K.Shared))
    return Why = "bad shared memory size", false;
  if (!isValidCandidate(F[4]))
    return Why = "bad candidate", false;
  uint64_t Count;
  if (!parseUInt(F[5], MaxCount, Count) || !parseUInt(F[6], MaxNs, E.BestNs) ||
      !parseUInt(F[7], UINT64_MAX, E.TotalNs))
    return Why = "bad number", false;
  K.Kernel.assign(F[0].data(), F[0].size());
  E.Candidate.assign(F[4].data(), F[4].size());
  E.Count = static_cast<uint32_t>(Count);
  if ((Why = keyProblem(K)))
    return false;
  return validEntry(E, Why);
}

static size_t countLines(std::string_view S) {
  size_t N = static_cast<size_t>(std::count(S.begin(), S.end(), '\n'));
  return N + (!S.empty() && S.back() != '\n');
}

bool parseProfileText(std::string_view Text, ProfileMap &Out,
                      size_t &DroppedLines, std::string &Why) {
  Out.clear();
  DroppedLines = 0;
  Why.clear();
  size_t HeaderEnd = Text.substr(0, 64).find('\n');
  if (HeaderEnd == std::string_view::npos) {
    Why = Text.empty() ? "empty file" : "no header line";
    return false;
  }
  std::string_view First = Text.substr(0, HeaderEnd);
  if (First != Header) {
    if (First.substr(0, HeaderPrefix.size()) == HeaderPrefix)
      Why = "unsupported version '" +
            std::string(First.substr(HeaderPrefix.size())) + "'";
    else
      Why = "not a tally profile file (bad header)";
    return false;
  }

  auto Drop = [&](size_t LineNo, const std::string &Reason, size_t N = 1) {
    if (!DroppedLines)
      Why = "line " + std::to_string(LineNo) + ": " + Reason;
    DroppedLines += N;
  };

  // Past MaxFileBytes nothing is read: the last line within it counts as
  // cut off by the cap, everything after as one more dropped line.
  bool OverSize = Text.size() > MaxFileBytes;
  std::string OverSizeWhy = "the file is larger than " +
                            std::to_string(MaxFileBytes >> 20) +
                            " MiB; the rest is ignored";
  std::string_view Body = Text.substr(0, MaxFileBytes).substr(HeaderEnd + 1);
  size_t LineNo = 1, Lines = 0;
  while (!Body.empty()) {
    ++LineNo;
    if (Lines == MaxRecords) {
      Drop(LineNo,
           "more than " + std::to_string(MaxRecords) +
               " records; the rest is ignored",
           countLines(Body));
      break;
    }
    size_t NL = Body.find('\n');
    if (NL == std::string_view::npos) {
      Drop(LineNo, OverSize ? OverSizeWhy : std::string("truncated line"));
      OverSize = false; // said
      break;
    }
    std::string_view Line = Body.substr(0, NL);
    Body.remove_prefix(NL + 1);
    ++Lines;
    ProfileKey K;
    ProfileEntry E;
    const char *Reason = nullptr;
    if (!parseLine(Line, K, E, Reason)) {
      Drop(LineNo, Reason);
      continue;
    }
    mergeInto(Out[K], E);
  }
  // Cut at a line's end (or past the record cap): what follows the cap is
  // one more dropped line.
  if (OverSize)
    Drop(LineNo + 1, OverSizeWhy);
  return true;
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

namespace {

/// Closes a descriptor on every path out.
struct FileDesc {
  int Fd = -1;
  FileDesc() = default;
  explicit FileDesc(int Fd) : Fd(Fd) {}
  FileDesc(const FileDesc &) = delete;
  FileDesc &operator=(const FileDesc &) = delete;
  ~FileDesc() { reset(); }
  /// close() and its result; a failed close of a written file means the
  /// data may not have reached it.
  int reset() {
    int R = 0;
    if (Fd >= 0)
      R = ::close(Fd);
    Fd = -1;
    return R;
  }
};

/// The writers' lock: an flock() of <Path>.lock.
class WriterLock {
public:
  bool acquire(const std::string &LockPath, std::string &Error);
  ~WriterLock() {
    // Unlock explicitly: a child forked meanwhile shares the open file
    // description, and a plain close() would leave the lock held by it.
    if (F.Fd >= 0)
      ::flock(F.Fd, LOCK_UN);
  }

private:
  FileDesc F;
};

} // namespace

static std::string sysError(const std::string &What, const std::string &Path,
                            int Errno) {
  return Path + ": " + What + ": " + std::strerror(Errno);
}

bool WriterLock::acquire(const std::string &LockPath, std::string &Error) {
  F.Fd =
      ::open(LockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
  if (F.Fd < 0) {
    Error = sysError("cannot open lock file", LockPath, errno);
    return false;
  }
  timespec Start;
  clock_gettime(CLOCK_MONOTONIC, &Start);
  long SleepUs = 200;
  for (;;) {
    if (::flock(F.Fd, LOCK_EX | LOCK_NB) == 0)
      return true;
    int Err = errno;
    if (Err == EINTR)
      continue;
    if (Err != EWOULDBLOCK) {
      Error = sysError("cannot lock", LockPath, Err);
      F.reset();
      return false;
    }
    timespec Now;
    clock_gettime(CLOCK_MONOTONIC, &Now);
    long long ElapsedMs = (Now.tv_sec - Start.tv_sec) * 1000LL +
                          (Now.tv_nsec - Start.tv_nsec) / 1000000;
    if (ElapsedMs >= LockTimeoutMs) {
      Error = LockPath + ": another process has held the lock for " +
              std::to_string(LockTimeoutMs / 1000) + " s";
      F.reset();
      return false;
    }
    timespec D{0, SleepUs * 1000};
    nanosleep(&D, nullptr);
    SleepUs = std::min(SleepUs * 2, 20000L);
  }
}

static std::string dirOf(const std::string &Path) {
  size_t Slash = Path.find_last_of('/');
  if (Slash == std::string::npos)
    return ".";
  if (Slash == 0)
    return "/";
  return Path.substr(0, Slash);
}

static std::string baseOf(const std::string &Path) {
  size_t Slash = Path.find_last_of('/');
  return Slash == std::string::npos ? Path : Path.substr(Slash + 1);
}

/// mkdir -p with mode 0700 for what is created (a cache of one user).
static bool makeDirs(const std::string &Dir, std::string &Error) {
  struct stat St;
  if (::stat(Dir.c_str(), &St) == 0) {
    if (S_ISDIR(St.st_mode))
      return true;
    Error = Dir + ": not a directory";
    return false;
  }
  for (size_t Pos = 1;; ++Pos) {
    Pos = Dir.find('/', Pos);
    std::string Prefix = Dir.substr(0, Pos);
    if (::mkdir(Prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      Error = sysError("cannot create directory", Prefix, errno);
      return false;
    }
    if (Pos == std::string::npos)
      break;
  }
  if (::stat(Dir.c_str(), &St) != 0 || !S_ISDIR(St.st_mode)) {
    Error = Dir + ": cannot create directory";
    return false;
  }
  return true;
}

/// Reads at most MaxFileBytes + 1 bytes of \p Path (one more than the cap,
/// so the parser sees that there was more). \p Missing: no such file.
static bool readFile(const std::string &Path, std::string &Out, bool &Missing,
                     std::string &Error) {
  Out.clear();
  Missing = false;
  // O_NONBLOCK: a FIFO put in the file's place must not block the program.
  FileDesc F(
      ::open(Path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (F.Fd < 0) {
    if (errno == ENOENT) {
      Missing = true;
      return true;
    }
    Error = sysError("cannot open", Path, errno);
    return false;
  }
  struct stat St;
  if (::fstat(F.Fd, &St) != 0) {
    Error = sysError("cannot stat", Path, errno);
    return false;
  }
  if (!S_ISREG(St.st_mode)) {
    Error = Path + ": not a regular file";
    return false;
  }
  size_t Limit = MaxFileBytes + 1;
  Out.resize(std::min<uint64_t>(uint64_t(St.st_size), Limit));
  size_t Got = 0;
  for (;;) {
    if (Got == Out.size()) {
      // The file grew, or st_size was wrong: read on, up to the limit.
      if (Out.size() == Limit)
        break;
      Out.resize(std::min(Limit, Out.size() + 65536));
    }
    ssize_t N = ::read(F.Fd, &Out[Got], Out.size() - Got);
    if (N < 0) {
      if (errno == EINTR)
        continue;
      Error = sysError("cannot read", Path, errno);
      Out.clear();
      return false;
    }
    if (N == 0)
      break;
    Got += size_t(N);
  }
  Out.resize(Got);
  return true;
}

static bool writeAll(int Fd, std::string_view Data) {
  while (!Data.empty()) {
    ssize_t N = ::write(Fd, Data.data(), Data.size());
    if (N < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    Data.remove_prefix(size_t(N));
  }
  return true;
}

/// Removes <Base>.tmp.* in \p Dir. Called with the writers' lock held, when
/// no live writer has a temporary file: any there is left by a dead one.
static void removeStaleTemps(const std::string &Dir, const std::string &Base) {
  DIR *D = ::opendir(Dir.c_str());
  if (!D)
    return;
  std::string Prefix = Base + ".tmp.";
  while (dirent *E = ::readdir(D))
    if (std::strncmp(E->d_name, Prefix.c_str(), Prefix.size()) == 0)
      ::unlinkat(::dirfd(D), E->d_name, 0);
  ::closedir(D);
}

//===----------------------------------------------------------------------===//
// ProfileCache
//===----------------------------------------------------------------------===//

std::string ProfileCache::defaultDir(const char *(*GetEnv)(const char *)) {
  auto Get = [&](const char *Name) -> std::string {
    const char *V = GetEnv ? GetEnv(Name) : std::getenv(Name);
    return V ? std::string(V) : std::string();
  };
  try {
    std::string V = Get("TALLY_CACHE_DIR");
    if (!V.empty())
      return V;
    V = Get("XDG_CACHE_HOME");
    if (!V.empty() && V[0] == '/')
      return V + "/tally";
    V = Get("HOME");
    if (!V.empty())
      return V + "/.cache/tally";
  } catch (...) {
  }
  return std::string();
}

std::string ProfileCache::pathFor(const std::string &Dir,
                                  const std::string &GpuKey) {
  if (Dir.empty())
    return std::string();
  std::string Name;
  for (char C : GpuKey.substr(0, 128))
    Name += (C >= 'a' && C <= 'z') || (C >= 'A' && C <= 'Z') ||
                    (C >= '0' && C <= '9') || C == '.' || C == '_' || C == '-'
                ? C
                : '_';
  if (Name.empty())
    Name = "unknown";
  std::string Path = Dir;
  if (Path.back() != '/')
    Path += '/';
  return Path + "profile-" + Name + ".v1";
}

ProfileCache::ProfileCache(std::string Path) : Path(std::move(Path)) {}

bool ProfileCache::load(std::string &Warning) {
  Warning.clear();
  try {
    Records.clear();
    if (Path.empty()) {
      Warning = "no profile cache file (no cache directory)";
      Records = Pending;
      return false;
    }
    std::string Text;
    bool Missing = false;
    if (!readFile(Path, Text, Missing, Warning)) {
      Records = Pending;
      return false;
    }
    if (Missing) {
      Records = Pending;
      return true;
    }
    ProfileMap Read;
    size_t Dropped = 0;
    std::string Why;
    if (!parseProfileText(Text, Read, Dropped, Why)) {
      Warning = Path + ": " + Why + "; the cache is ignored and rewritten";
      Records = Pending;
      return false;
    }
    if (Dropped)
      Warning = Path + ": dropped " + std::to_string(Dropped) +
                (Dropped == 1 ? " corrupt record" : " corrupt records") + " (" +
                Why + ")";
    Records = std::move(Read);
    mergeAll(Records, Pending);
    return true;
  } catch (...) {
    // Out of memory: run without the cache rather than take the host down.
    Records.clear();
    Warning = Path + ": out of memory reading the profile cache";
    return false;
  }
}

const std::vector<ProfileEntry> *
ProfileCache::lookup(const ProfileKey &K) const {
  auto It = Records.find(K);
  return It == Records.end() ? nullptr : &It->second;
}

void ProfileCache::record(const ProfileKey &K, const std::string &Candidate,
                          uint64_t Ns) {
  if (!isValidProfileKey(K) || !isValidCandidate(Candidate))
    return;
  try {
    ProfileEntry E;
    E.Candidate = Candidate;
    E.Count = 1;
    E.BestNs = E.TotalNs = std::min(Ns, MaxNs);
    mergeInto(Pending[K], E);
    mergeInto(Records[K], E);
  } catch (...) {
    // Out of memory: this measurement is lost, the program goes on.
  }
}

bool ProfileCache::save(std::string &Error) {
  Error.clear();
  if (Pending.empty())
    return true;
  if (Path.empty()) {
    Error = "no profile cache file (no cache directory)";
    return false;
  }
  std::string Tmp;
  try {
    std::string Dir = dirOf(Path);
    if (!makeDirs(Dir, Error))
      return false;
    WriterLock Lock;
    if (!Lock.acquire(Path + ".lock", Error))
      return false;
    removeStaleTemps(Dir, baseOf(Path));

    std::string Text;
    bool Missing = false;
    if (!readFile(Path, Text, Missing, Error))
      return false; // do not replace what cannot be read
    ProfileMap Disk;
    size_t Dropped = 0;
    std::string Why;
    // A bad header leaves Disk empty: the file is replaced, as load()
    // promises.
    if (!Missing)
      parseProfileText(Text, Disk, Dropped, Why);
    Text = std::string();

    // Measurements of candidates already on disk are always added; new
    // records only while the file stays within its caps, so that every
    // reader can load all of it.
    ProfileMap New;
    for (const auto &[K, Entries] : Pending) {
      auto It = Disk.find(K);
      for (const ProfileEntry &E : Entries) {
        ProfileEntry *D =
            It == Disk.end() ? nullptr : findEntry(It->second, E.Candidate);
        if (D)
          mergeEntry(*D, E);
        else
          New[K].push_back(E);
      }
    }
    size_t Lines = 0;
    for (const auto &KE : Disk)
      Lines += KE.second.size();
    size_t Bytes = formatProfileText(Disk).size();
    std::string Scratch;
    for (const auto &[K, Entries] : New)
      for (const ProfileEntry &E : Entries) {
        Scratch.clear();
        appendLine(Scratch, K, E);
        if (Lines + 1 > MaxRecords || Bytes + Scratch.size() > MaxFileBytes)
          continue;
        ++Lines;
        Bytes += Scratch.size();
        mergeInto(Disk[K], E);
      }

    Text = formatProfileText(Disk);
    Tmp = Path + ".tmp." + std::to_string(::getpid());
    FileDesc F(
        ::open(Tmp.c_str(),
               O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW,
               0600));
    if (F.Fd < 0) {
      Error = sysError("cannot create", Tmp, errno);
      return false;
    }
    // From here on a failure must not leave the temporary file behind.
    auto Fail = [&](const char *What) {
      Error = sysError(What, Tmp, errno);
      F.reset();
      ::unlink(Tmp.c_str());
      return false;
    };
    if (!writeAll(F.Fd, Text))
      return Fail("cannot write");
    // The data must be on disk before the rename makes it the file, or a
    // crash could leave an empty file in its place.
    if (::fsync(F.Fd) != 0)
      return Fail("cannot sync");
    if (F.reset() != 0)
      return Fail("cannot close");
    if (::rename(Tmp.c_str(), Path.c_str()) != 0)
      return Fail("cannot rename over the profile cache");
    // Make the rename itself durable; the file is already complete either
    // way, so a failure here is not an error.
    FileDesc D(::open(Dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (D.Fd >= 0)
      ::fsync(D.Fd);

    Records = std::move(Disk);
    Pending.clear();
    return true;
  } catch (...) {
    if (!Tmp.empty())
      ::unlink(Tmp.c_str());
    Error = Path + ": out of memory writing the profile cache";
    return false;
  }
}

void ProfileCache::forEach(
    const std::function<void(const ProfileKey &,
                             const std::vector<ProfileEntry> &)> &F) const {
  for (const auto &[K, Entries] : Records)
    F(K, Entries);
}

bool ProfileCache::clear(const std::string &Path, std::string &Error) {
  Error.clear();
  if (Path.empty()) {
    Error = "no profile cache file (no cache directory)";
    return false;
  }
  try {
    struct stat St;
    if (::lstat(Path.c_str(), &St) != 0 && errno == ENOENT)
      return true;
    // Under the writers' lock, so a save() in progress does not put the
    // file back a moment later with everything in it. The lock file stays:
    // removing it could let two writers lock two different files.
    WriterLock Lock;
    if (!Lock.acquire(Path + ".lock", Error))
      return false;
    removeStaleTemps(dirOf(Path), baseOf(Path));
    if (::unlink(Path.c_str()) != 0 && errno != ENOENT) {
      Error = sysError("cannot remove", Path, errno);
      return false;
    }
    return true;
  } catch (...) {
    Error = Path + ": out of memory";
    return false;
  }
}

static void appendMicros(std::string &Out, uint64_t Ns) {
  appendUInt(Out, Ns / 1000);
  char Frac[4] = {'.', char('0' + Ns / 100 % 10), char('0' + Ns / 10 % 10),
                  char('0' + Ns % 10)};
  Out.append(Frac, 4);
  Out += "us";
}

void ProfileCache::print(std::ostream &OS) const {
  std::string Line;
  for (const auto &[K, Entries] : Records) {
    // Fastest: lowest mean, then lowest best, then the first candidate.
    const ProfileEntry *Fast = nullptr;
    for (const ProfileEntry &E : Entries) {
      if (!Fast) {
        Fast = &E;
        continue;
      }
      uint64_t M = E.TotalNs / E.Count, FM = Fast->TotalNs / Fast->Count;
      if (M < FM || (M == FM && E.BestNs < Fast->BestNs))
        Fast = &E;
    }
    for (const ProfileEntry &E : Entries) {
      Line.clear();
      Line += K.Kernel;
      Line += " grid=";
      appendTriple(Line, K.Grid);
      Line += " block=";
      appendTriple(Line, K.Block);
      Line += " shared=";
      appendUInt(Line, K.Shared);
      Line += "  ";
      Line += &E == Fast ? "* " : "  ";
      Line += E.Candidate;
      Line += " count=";
      appendUInt(Line, E.Count);
      Line += " best=";
      appendMicros(Line, E.BestNs);
      Line += " mean=";
      appendMicros(Line, E.Count ? E.TotalNs / E.Count : 0);
      Line += '\n';
      OS << Line;
    }
  }
}

} // namespace tally::rt
