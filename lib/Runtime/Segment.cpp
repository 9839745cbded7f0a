//===- Segment.cpp - the cross-process shared-memory segment --------------===//
//
// The segment file, its checks and its slots (layout in Segment.h).
//
// Every field of the mapping is a lock-free std::atomic, because other
// processes write it at any time; the mapping is never read with plain loads
// or memcpy. Slots change hands with compare-and-swap on State:
//
//   claim:  0 -> 1 (fill every field) -> 2
//   free:   2 (or an invalid state) -> 1 (zero every field) -> 0
//           1 -> 0 when it stayed claiming, unchanged, for StaleNs
//
// A slot in state 1 is normally held for a few hundred nanoseconds; one that
// stays there was abandoned by a process that died mid-claim. Its heartbeat
// says nothing (the claimer may not have written it yet), so reclaim()
// remembers what it saw and frees it only when a later pass, StaleNs on,
// still sees the same token and heartbeat. Every other race (a stalled owner
// writing into a slot that changed hands, two freers) ends in the owner
// finding its token gone at its next heartbeat and claiming a slot again.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/Segment.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tally::rt {

namespace {

using seg::FutureSlackNs;
using seg::HeaderBytes;
using seg::SlotBytes;
using seg::SlotCount;
using seg::StateClaiming;
using seg::StateFree;
using seg::StateLive;
using seg::TotalBytes;

using A32 = std::atomic<uint32_t>;
using A64 = std::atomic<uint64_t>;
static_assert(A32::is_always_lock_free && A64::is_always_lock_free,
              "the segment is shared between processes: atomics must be "
              "lock-free");
static_assert(sizeof(A64) == 8 && alignof(A64) == 8 && sizeof(A32) == 4,
              "the GPU writes the Finished word as a plain 8-byte value");

struct RawHeader {
  A64 Magic;
  A32 Version;
  A32 HeaderBytes;
  A32 SlotCount;
  A32 SlotBytes;
  A64 TotalBytes;
  A32 Ready;
  uint32_t Reserved[7];
};
static_assert(sizeof(RawHeader) == seg::HeaderBytes, "header layout");
static_assert(offsetof(RawHeader, Version) == 8 &&
                  offsetof(RawHeader, SlotBytes) == 20 &&
                  offsetof(RawHeader, TotalBytes) == 24 &&
                  offsetof(RawHeader, Ready) == 32,
              "header layout");

struct RawSlot {
  A32 State;
  A32 Priority;
  A32 Pid;
  A32 Flags;
  A64 StartTime;
  A64 Token;
  A64 HeartbeatNs;
  A64 Started;
  A64 Finished;
  A64 LastLaunchNs;
  A64 Preemptions;
  A32 WaitShare;
  A32 Reserved;
  unsigned char Padding[48];
};
static_assert(sizeof(RawSlot) == seg::SlotBytes, "slot layout");
static_assert(offsetof(RawSlot, StartTime) == 16 &&
                  offsetof(RawSlot, Token) == 24 &&
                  offsetof(RawSlot, HeartbeatNs) == 32 &&
                  offsetof(RawSlot, Finished) == 48 &&
                  offsetof(RawSlot, Preemptions) == 64 &&
                  offsetof(RawSlot, WaitShare) == 72,
              "slot layout");

/// Files larger than this are not a segment of any version we could grow
/// into; refusing them keeps a planted sparse file from being mapped.
constexpr uint64_t MaxFileBytes = 1u << 20;
/// A re-join goes on this far above the highest sequence number seen in the
/// lost slot, so that GPU writes of sequence numbers issued since the last
/// heartbeat stay below the new Started.
constexpr uint64_t RejoinSeqGap = uint64_t(1) << 24;

uint64_t magicWord() {
  uint64_t M;
  std::memcpy(&M, "TALLYSHM", 8);
  return M;
}

// The mapping (or an aligned image) is only ever accessed through these.
const RawHeader &headerOf(const unsigned char *Base) {
  return *reinterpret_cast<const RawHeader *>(Base);
}
RawHeader &headerOf(unsigned char *Base) {
  return *reinterpret_cast<RawHeader *>(Base);
}
const RawSlot &slotOf(const unsigned char *Base, unsigned I) {
  return *reinterpret_cast<const RawSlot *>(Base + HeaderBytes +
                                            size_t(I) * SlotBytes);
}
RawSlot &slotOf(unsigned char *Base, unsigned I) {
  return *reinterpret_cast<RawSlot *>(Base + HeaderBytes +
                                      size_t(I) * SlotBytes);
}

std::string errnoText(int E) {
  char Buf[128];
  // The GNU strerror_r (glibc, _GNU_SOURCE): thread-safe, returns the text.
  return strerror_r(E, Buf, sizeof(Buf));
}


bool headerOk(const RawHeader &H, std::string *Why) {
  auto Fail = [&](std::string W) {
    if (Why)
      *Why = std::move(W);
    return false;
  };
  // Ready first (acquire): a header being initialised reads as not ready.
  uint32_t Ready = H.Ready.load(std::memory_order_acquire);
  if (H.Magic.load(std::memory_order_relaxed) != magicWord())
    return Fail("bad magic");
  uint32_t V = H.Version.load(std::memory_order_relaxed);
  if (V != seg::Version)
    return Fail("version " + std::to_string(V) + ", expected " +
                std::to_string(seg::Version));
  uint32_t HB = H.HeaderBytes.load(std::memory_order_relaxed);
  uint32_t SC = H.SlotCount.load(std::memory_order_relaxed);
  uint32_t SB = H.SlotBytes.load(std::memory_order_relaxed);
  uint64_t TB = H.TotalBytes.load(std::memory_order_relaxed);
  if (HB != HeaderBytes || SC != SlotCount || SB != SlotBytes ||
      TB != TotalBytes)
    return Fail("sizes " + std::to_string(HB) + "/" + std::to_string(SC) + "x" +
                std::to_string(SB) + "/" + std::to_string(TB) + ", expected " +
                std::to_string(HeaderBytes) + "/" + std::to_string(SlotCount) +
                "x" + std::to_string(SlotBytes) + "/" +
                std::to_string(TotalBytes));
  if (Ready != 1)
    return Fail("not ready (" + std::to_string(Ready) + ")");
  return true;
}

bool slotOk(const RawSlot &S, unsigned I, std::string *Why) {
  uint32_t St = S.State.load(std::memory_order_acquire);
  if (St > StateLive) {
    if (Why)
      *Why = "slot " + std::to_string(I) + ": state " + std::to_string(St);
    return false;
  }
  uint32_t P = S.Priority.load(std::memory_order_relaxed);
  // A claiming slot's priority may still be its previous owner's; only a
  // live one must have a valid one.
  if (St == StateLive && P > uint32_t(SegPriority::BestEffort)) {
    if (Why)
      *Why = "slot " + std::to_string(I) + ": priority " + std::to_string(P);
    return false;
  }
  return true;
}

/// The one reader of slots for hpView and hpViewOfImage. \p Base is 8-byte
/// aligned; only whole slots within \p Size are read.
HpView viewOf(const unsigned char *Base, size_t Size, uint64_t NowNs,
              uint64_t StaleNs) {
  HpView V;
  bool WaitUnknown = false;
  if (Size < HeaderBytes || !headerOk(headerOf(Base), nullptr))
    return V;
  size_t N = std::min<size_t>(SlotCount, (Size - HeaderBytes) / SlotBytes);
  for (unsigned I = 0; I < N; ++I) {
    const RawSlot &S = slotOf(Base, I);
    if (S.State.load(std::memory_order_acquire) != StateLive)
      continue;
    uint32_t P = S.Priority.load(std::memory_order_relaxed);
    if (P > uint32_t(SegPriority::BestEffort) ||
        !heartbeatFresh(S.HeartbeatNs.load(std::memory_order_relaxed), NowNs, StaleNs))
      continue;
    if (P == uint32_t(SegPriority::BestEffort)) {
      ++V.BeProcesses;
      continue;
    }
    ++V.HpProcesses;
    // Started (acquire) before Finished: a launch that starts and finishes
    // in between reads as finished, which it is.
    uint64_t Started = S.Started.load(std::memory_order_acquire);
    uint64_t Finished = S.Finished.load(std::memory_order_acquire);
    if (Started > Finished)
      V.Active = true;
    V.Arrivals += Started;
    if (S.Flags.load(std::memory_order_relaxed) & seg::FlagNoMps)
      ++V.HpWithoutMps;
    V.LastLaunchNs = std::max(V.LastLaunchNs,
                              S.LastLaunchNs.load(std::memory_order_relaxed));
    // Permille plus one; 0 (not measured yet, or a writer that predates
    // the field) and anything past 1001 read as unknown.
    // Only from a writer that knows the field (FlagWaitShare): an older
    // one's claim leaves whatever a newer owner of the slot left there.
    uint32_t W = S.WaitShare.load(std::memory_order_relaxed);
    if (!(S.Flags.load(std::memory_order_relaxed) & seg::FlagWaitShare) || W == 0 || W > 1001)
      WaitUnknown = true;
    else
      V.WaitPermille = std::max(V.WaitPermille, W - 1);
  }
  V.WaitShareKnown = V.HpProcesses > 0 && !WaitUnknown;
  if (!V.WaitShareKnown)
    V.WaitPermille = 0;
  return V;
}

/// The one reader of whole slots for Segment::slots and slotsOfImage: the
/// slots that are claiming or live (an invalid state is skipped). \p Base
/// is 8-byte aligned (slotsOfImage checks the header first; a Segment reads
/// its own mapping as it is); only whole slots within \p Size are read.
std::vector<SlotInfo> slotsOf(const unsigned char *Base, size_t Size) {
  std::vector<SlotInfo> Out;
  if (Size < HeaderBytes)
    return Out;
  size_t N = std::min<size_t>(SlotCount, (Size - HeaderBytes) / SlotBytes);
  for (unsigned I = 0; I < N; ++I) {
    const RawSlot &S = slotOf(Base, I);
    uint32_t St = S.State.load(std::memory_order_acquire);
    if (St == StateFree || St > StateLive)
      continue;
    SlotInfo Info;
    Info.Index = I;
    Info.State = St;
    Info.Prio = SegPriority(S.Priority.load(std::memory_order_relaxed));
    Info.Pid = S.Pid.load(std::memory_order_relaxed);
    Info.HeartbeatNs = S.HeartbeatNs.load(std::memory_order_relaxed);
    Info.Started = S.Started.load(std::memory_order_acquire);
    Info.Finished = S.Finished.load(std::memory_order_acquire);
    Info.LastLaunchNs = S.LastLaunchNs.load(std::memory_order_relaxed);
    Info.Preemptions = S.Preemptions.load(std::memory_order_relaxed);
    Info.Flags = S.Flags.load(std::memory_order_relaxed);
    Info.StartTime = S.StartTime.load(std::memory_order_relaxed);
    Info.WaitShare = S.WaitShare.load(std::memory_order_relaxed);
    Out.push_back(Info);
  }
  return Out;
}

/// Raw bytes as an 8-byte aligned image: the bytes themselves when aligned,
/// else a copy of the first TotalBytes of them (nothing past those is read).
class AlignedImage {
public:
  AlignedImage(const void *Bytes, size_t BytesSize)
      : Size(std::min<size_t>(BytesSize, TotalBytes)) {
    if (reinterpret_cast<uintptr_t>(Bytes) % alignof(A64) == 0) {
      Ptr = static_cast<const unsigned char *>(Bytes);
      return;
    }
    std::memcpy(Copy, Bytes, Size);
    Ptr = Copy;
  }
  const unsigned char *data() const { return Ptr; }
  size_t size() const { return Size; }

private:
  alignas(8) unsigned char Copy[TotalBytes];
  const unsigned char *Ptr = nullptr;
  size_t Size;
};

/// Zeroes every field of a slot this process holds in state 1.
void zeroFields(RawSlot &S) {
  S.Priority.store(0, std::memory_order_relaxed);
  S.Pid.store(0, std::memory_order_relaxed);
  S.Flags.store(0, std::memory_order_relaxed);
  S.StartTime.store(0, std::memory_order_relaxed);
  S.Token.store(0, std::memory_order_relaxed);
  S.HeartbeatNs.store(0, std::memory_order_relaxed);
  S.Started.store(0, std::memory_order_relaxed);
  S.Finished.store(0, std::memory_order_relaxed);
  S.LastLaunchNs.store(0, std::memory_order_relaxed);
  S.Preemptions.store(0, std::memory_order_relaxed);
  S.WaitShare.store(0, std::memory_order_relaxed);
}

/// Frees a slot seen in state \p From (live or invalid). False when it
/// changed meanwhile (someone else freed, claimed or refreshed it).
bool freeSlot(RawSlot &S, uint32_t From, uint64_t NowNs) {
  if (!S.State.compare_exchange_strong(From, StateClaiming,
                                       std::memory_order_acq_rel))
    return false;
  // A fresh heartbeat while it is claiming tells others it is not abandoned.
  S.HeartbeatNs.store(NowNs, std::memory_order_relaxed);
  zeroFields(S);
  S.State.store(StateFree, std::memory_order_release);
  return true;
}

/// Writes a fresh version 1 image over the mapping (under the file lock).
void initImage(unsigned char *Base) {
  RawHeader &H = headerOf(Base);
  H.Ready.store(0, std::memory_order_release);
  for (unsigned I = 0; I < SlotCount; ++I) {
    RawSlot &S = slotOf(Base, I);
    zeroFields(S);
    S.State.store(StateFree, std::memory_order_release);
  }
  H.Magic.store(magicWord(), std::memory_order_relaxed);
  H.Version.store(seg::Version, std::memory_order_relaxed);
  H.HeaderBytes.store(HeaderBytes, std::memory_order_relaxed);
  H.SlotCount.store(SlotCount, std::memory_order_relaxed);
  H.SlotBytes.store(SlotBytes, std::memory_order_relaxed);
  H.TotalBytes.store(TotalBytes, std::memory_order_relaxed);
  H.Ready.store(1, std::memory_order_release);
}

uint64_t splitMix(uint64_t X) {
  X += 0x9e3779b97f4a7c15ull;
  X = (X ^ (X >> 30)) * 0xbf58476d1ce4e5b9ull;
  X = (X ^ (X >> 27)) * 0x94d049bb133111ebull;
  return X ^ (X >> 31);
}

uint64_t randomToken() {
  uint64_t T = 0;
  if (getrandom(&T, sizeof(T), GRND_NONBLOCK) != ssize_t(sizeof(T))) {
    // No entropy yet (early boot) or no getrandom: a token only has to
    // differ from the other live ones, which this does in practice.
    static std::atomic<uint64_t> Counter{0};
    T = splitMix(monotonicNs() ^ (uint64_t(getpid()) << 32) ^
                 reinterpret_cast<uintptr_t>(&T) ^
                 splitMix(Counter.fetch_add(1, std::memory_order_relaxed)));
  }
  return T ? T : 1;
}

/// Field 22 of \p StatPath, a /proc/<pid>/stat (the start time in clock
/// ticks since boot): with the pid it names a process even after the pid is
/// reused. 0 when unreadable.
uint64_t startTimeFromStat(const char *StatPath) {
  int Fd = ::open(StatPath, O_RDONLY | O_CLOEXEC);
  if (Fd < 0)
    return 0;
  char Buf[1024];
  size_t Len = 0;
  while (Len < sizeof(Buf)) {
    ssize_t R = ::read(Fd, Buf + Len, sizeof(Buf) - Len);
    if (R < 0 && errno == EINTR)
      continue;
    if (R <= 0)
      break;
    Len += size_t(R);
  }
  ::close(Fd);
  // The command name (field 2) may hold spaces and parentheses: fields 3 on
  // start after the last ')'.
  size_t I = Len;
  while (I > 0 && Buf[I - 1] != ')')
    --I;
  if (I == 0)
    return 0;
  unsigned Field = 2;
  while (I < Len) {
    while (I < Len && Buf[I] == ' ')
      ++I;
    if (I == Len)
      return 0;
    ++Field;
    if (Field == 22) {
      uint64_t V = 0;
      for (; I < Len && Buf[I] >= '0' && Buf[I] <= '9'; ++I) {
        if (V > (UINT64_MAX - 9) / 10)
          return 0;
        V = V * 10 + uint64_t(Buf[I] - '0');
      }
      return V;
    }
    while (I < Len && Buf[I] != ' ')
      ++I;
  }
  return 0;
}

uint64_t processStartTime() { return startTimeFromStat("/proc/self/stat"); }

std::string sanitizeKey(const std::string &Key) {
  std::string Out;
  for (char C : Key) {
    if ((C >= 'A' && C <= 'Z') || (C >= 'a' && C <= 'z') ||
        (C >= '0' && C <= '9') || C == '-')
      Out += C;
    if (Out.size() == 128)
      break;
  }
  return Out;
}

size_t pageBytes() {
  long P = sysconf(_SC_PAGESIZE);
  return P > 0 ? size_t(P) : 4096;
}

/// Opens the file at \p Path, creating it with mode 0600 whatever the
/// umask. -1 with \p Error set on failure.
int openFile(const std::string &Path, std::string &Error) {
  // O_NONBLOCK: a FIFO or device planted at the path must not block us
  // before fstat refuses it.
  const int Flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK;
  for (int Try = 0; Try < 3; ++Try) {
    int Fd = ::open(Path.c_str(), Flags | O_CREAT | O_EXCL, 0600);
    if (Fd >= 0) {
      if (fchmod(Fd, 0600) != 0) {
        Error =
            "cannot set the mode of segment " + Path + ": " + errnoText(errno);
        ::close(Fd);
        return -1;
      }
      return Fd;
    }
    if (errno != EEXIST)
      break;
    Fd = ::open(Path.c_str(), Flags);
    if (Fd >= 0)
      return Fd;
    if (errno != ENOENT) // else removed in between: create it again
      break;
  }
  int E = errno;
  if (E == ELOOP)
    Error = "segment " + Path + " is a symbolic link; refusing it";
  else
    Error = "cannot open segment " + Path + ": " + errnoText(E);
  return -1;
}

/// Takes the file lock, waiting at most a second: a process stopped while
/// holding it must not hang ours.
bool lockFile(int Fd) {
  for (int Try = 0; Try < 1000; ++Try) {
    if (flock(Fd, LOCK_EX | LOCK_NB) == 0)
      return true;
    if (errno != EWOULDBLOCK && errno != EINTR)
      return false;
    struct timespec Ms = {0, 1'000'000};
    nanosleep(&Ms, nullptr);
  }
  return false;
}

std::string octal(unsigned Mode) {
  char Buf[16];
  snprintf(Buf, sizeof(Buf), "%04o", Mode);
  return Buf;
}

} // namespace

uint64_t monotonicNs() {
  struct timespec T;
  if (clock_gettime(CLOCK_MONOTONIC, &T) != 0)
    return 0;
  return uint64_t(T.tv_sec) * 1'000'000'000u + uint64_t(T.tv_nsec);
}

bool validateSegmentImage(const void *Bytes, size_t Size, std::string &Why) {
  if (!Bytes || Size < TotalBytes) {
    Why = "image of " + std::to_string(Size) + " bytes, expected at least " +
          std::to_string(TotalBytes);
    return false;
  }
  AlignedImage Img(Bytes, Size);
  if (!headerOk(headerOf(Img.data()), &Why))
    return false;
  for (unsigned I = 0; I < SlotCount; ++I)
    if (!slotOk(slotOf(Img.data(), I), I, &Why))
      return false;
  Why.clear();
  return true;
}

bool slotsOfImage(const void *Bytes, size_t Size, std::vector<SlotInfo> &Out,
                  std::string &Why) {
  Out.clear();
  if (!Bytes || Size < HeaderBytes) {
    Why = "too short for a header (" + std::to_string(Bytes ? Size : 0) + " bytes)";
    return false;
  }
  AlignedImage Img(Bytes, Size);
  if (!headerOk(headerOf(Img.data()), &Why))
    return false;
  Why.clear();
  Out = slotsOf(Img.data(), Img.size());
  return true;
}

bool heartbeatFresh(uint64_t HeartbeatNs, uint64_t NowNs, uint64_t StaleNs) {
  if (HeartbeatNs <= NowNs)
    return NowNs - HeartbeatNs <= StaleNs;
  return HeartbeatNs - NowNs <= FutureSlackNs;
}

uint64_t processStartTimeOf(uint32_t Pid) {
  if (Pid == 0)
    return 0;
  std::string Path = "/proc/" + std::to_string(Pid) + "/stat";
  return startTimeFromStat(Path.c_str());
}

HpView hpViewOfImage(const void *Bytes, size_t Size, uint64_t NowNs,
                     uint64_t StaleNs) {
  if (!Bytes)
    return HpView();
  AlignedImage Img(Bytes, Size);
  return viewOf(Img.data(), Img.size(), NowNs, StaleNs);
}

std::unique_ptr<Segment> Segment::open(const SegmentOptions &O,
                                       std::string &Warning,
                                       std::string &Error) {
  Warning.clear();
  Error.clear();
  std::string Key = sanitizeKey(O.Key);
  if (Key.empty()) {
    Error = "no usable GPU key for the segment name (only [A-Za-z0-9-] are "
            "kept)";
    return nullptr;
  }
  std::string Path = O.Dir + "/tally-" + std::to_string(geteuid()) + "-" + Key;
  int Fd = openFile(Path, Error);
  if (Fd < 0)
    return nullptr;
  // The lock must be dropped explicitly: the mapping keeps the open file
  // description, and with it the lock, alive after close().
  struct FdCloser {
    int Fd;
    ~FdCloser() {
      flock(Fd, LOCK_UN);
      ::close(Fd);
    }
  } Closer{Fd};

  struct stat St;
  if (fstat(Fd, &St) != 0) {
    Error = "cannot stat segment " + Path + ": " + errnoText(errno);
    return nullptr;
  }
  // Another user could plant the file to read or steer our scheduling.
  if (!S_ISREG(St.st_mode)) {
    Error = "segment " + Path + " is not a regular file; refusing it";
    return nullptr;
  }
  if (St.st_uid != geteuid()) {
    Error = "segment " + Path + " is owned by uid " +
            std::to_string(St.st_uid) + ", not " + std::to_string(geteuid()) +
            "; refusing it";
    return nullptr;
  }
  if ((St.st_mode & 07777) != 0600) {
    Error = "segment " + Path + " has mode " + octal(St.st_mode & 07777) +
            ", expected 0600; refusing it";
    return nullptr;
  }
  if (!lockFile(Fd)) {
    Error = "cannot lock segment " + Path +
            " (held by another process for a second, or flock failed)";
    return nullptr;
  }
  // The size again, now that no one else is initialising it.
  if (fstat(Fd, &St) != 0) {
    Error = "cannot stat segment " + Path + ": " + errnoText(errno);
    return nullptr;
  }
  uint64_t FileBytes = uint64_t(St.st_size);
  if (St.st_size < 0 || FileBytes > MaxFileBytes) {
    Error = "segment " + Path + " has an absurd size (" +
            std::to_string(St.st_size) + " bytes); refusing it";
    return nullptr;
  }
  size_t Page = pageBytes();
  size_t MapBytes = (TotalBytes + Page - 1) / Page * Page;
  bool Fresh = FileBytes == 0;
  // Only ever grown: shrinking would fault other processes' mappings.
  if (FileBytes < MapBytes && ftruncate(Fd, off_t(MapBytes)) != 0) {
    Error = "cannot size segment " + Path + ": " + errnoText(errno);
    return nullptr;
  }
  void *Map =
      mmap(nullptr, MapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, Fd, 0);
  if (Map == MAP_FAILED) {
    Error = "cannot map segment " + Path + ": " + errnoText(errno);
    return nullptr;
  }

  std::unique_ptr<Segment> S(new (std::nothrow) Segment());
  if (!S) {
    munmap(Map, MapBytes);
    Error = "out of memory";
    return nullptr;
  }
  S->Path = std::move(Path);
  S->StaleNs = O.StaleNs;
  S->Base = static_cast<unsigned char *>(Map);
  S->Bytes = MapBytes;

  std::string Why;
  if (Fresh) {
    initImage(S->Base);
  } else if (!headerOk(headerOf(S->Base), &Why)) {
    initImage(S->Base);
    Warning =
        "segment " + S->Path + " was invalid (" + Why + "); re-initialised";
  } else {
    // Bad slots are freed one by one: the other processes keep theirs.
    unsigned Bad = 0;
    std::string First;
    uint64_t Now = monotonicNs();
    for (unsigned I = 0; I < SlotCount; ++I) {
      RawSlot &Sl = slotOf(S->Base, I);
      if (slotOk(Sl, I, &Why))
        continue;
      if (First.empty())
        First = Why;
      ++Bad;
      freeSlot(Sl, Sl.State.load(std::memory_order_acquire), Now);
    }
    if (Bad)
      Warning = "segment " + S->Path + " had " + std::to_string(Bad) +
                " invalid slot(s) (" + First + "); cleared them";
  }
  return S;
}

Segment::~Segment() {
  {
    std::lock_guard<std::mutex> Lock(Mutex);
    leaveLocked();
  }
  if (Base)
    munmap(Base, Bytes);
}

const std::string &Segment::path() const { return Path; }
void *Segment::mappingBase() const { return Base; }
size_t Segment::mappingBytes() const { return Bytes; }

int Segment::claim(SegPriority P, uint64_t NowNs, int Preferred,
                   uint64_t SeqBase) {
  uint32_t Pid = uint32_t(getpid());
  uint64_t Start = processStartTime();
  for (int K = -1; K < int(SlotCount); ++K) {
    int I = K < 0 ? Preferred : K;
    if (I < 0 || I >= int(SlotCount) || (K >= 0 && I == Preferred))
      continue;
    RawSlot &S = slotOf(Base, unsigned(I));
    uint32_t Expected = StateFree;
    if (S.State.load(std::memory_order_relaxed) != StateFree ||
        !S.State.compare_exchange_strong(Expected, StateClaiming,
                                         std::memory_order_acq_rel))
      continue;
    uint64_t T = randomToken();
    S.HeartbeatNs.store(NowNs, std::memory_order_relaxed);
    S.Token.store(T, std::memory_order_relaxed);
    S.Pid.store(Pid, std::memory_order_relaxed);
    S.Flags.store(OwnFlags.load(std::memory_order_relaxed) | seg::FlagWaitShare,
                  std::memory_order_relaxed);
    S.StartTime.store(Start, std::memory_order_relaxed);
    S.Priority.store(uint32_t(P), std::memory_order_relaxed);
    S.Started.store(SeqBase, std::memory_order_relaxed);
    S.Finished.store(SeqBase, std::memory_order_relaxed);
    S.LastLaunchNs.store(0, std::memory_order_relaxed);
    S.Preemptions.store(0, std::memory_order_relaxed);
    S.WaitShare.store(0, std::memory_order_relaxed);
    Expected = StateClaiming;
    // Fails only if this thread stalled so long that a reclaimer took the
    // slot for abandoned; it may be someone else's by now.
    if (!S.State.compare_exchange_strong(Expected, StateLive,
                                         std::memory_order_acq_rel))
      continue;
    Token.store(T, std::memory_order_release);
    Slot.store(I, std::memory_order_release);
    OwnerPid = Pid;
    Prio = P;
    HighSeq = SeqBase;
    return I;
  }
  return -1;
}

void Segment::reclaim(uint64_t NowNs) {
  int Own = Slot.load(std::memory_order_relaxed);
  for (unsigned I = 0; I < SlotCount; ++I) {
    ClaimingSighting &Seen = Sightings[I];
    if (int(I) == Own) {
      Seen.Valid = false;
      continue;
    }
    RawSlot &S = slotOf(Base, I);
    uint32_t St = S.State.load(std::memory_order_acquire);
    if (St != StateClaiming)
      Seen.Valid = false;
    if (St == StateFree)
      continue;
    if (St == StateLive) {
      uint32_t P = S.Priority.load(std::memory_order_relaxed);
      if (P <= uint32_t(SegPriority::BestEffort) &&
          heartbeatFresh(S.HeartbeatNs.load(std::memory_order_relaxed), NowNs, StaleNs))
        continue;
      freeSlot(S, StateLive, NowNs);
      continue;
    }
    if (St != StateClaiming) {
      freeSlot(S, St, NowNs);
      continue;
    }
    uint64_t T = S.Token.load(std::memory_order_relaxed);
    uint64_t Hb = S.HeartbeatNs.load(std::memory_order_relaxed);
    if (Seen.Valid && Seen.Token == T && Seen.HeartbeatNs == Hb &&
        NowNs >= Seen.SeenNs) {
      if (NowNs - Seen.SeenNs >= StaleNs) {
        // Abandoned mid-claim or mid-free; the next claimer fills every
        // field, so freeing it is enough.
        uint32_t Expected = StateClaiming;
        S.State.compare_exchange_strong(Expected, StateFree,
                                        std::memory_order_acq_rel);
        Seen.Valid = false;
      }
      continue;
    }
    Seen = {T, Hb, NowNs, true};
  }
}

bool Segment::join(SegPriority P, uint64_t NowNs, std::string &Error) {
  std::lock_guard<std::mutex> Lock(Mutex);
  leaveLocked();
  if (claim(P, NowNs, -1, 0) < 0) {
    reclaim(NowNs);
    if (claim(P, NowNs, -1, 0) < 0) {
      Error = "all " + std::to_string(SlotCount) + " slots of segment " + Path +
              " are taken";
      return false;
    }
  }
  Joined = true;
  return true;
}

void Segment::leaveLocked() {
  int I = Slot.load(std::memory_order_relaxed);
  uint64_t T = Token.load(std::memory_order_relaxed);
  Slot.store(-1, std::memory_order_release);
  Token.store(0, std::memory_order_release);
  Joined = false;
  // A forked child holds a copy of this object, not the slot.
  if (I < 0 || uint32_t(getpid()) != OwnerPid)
    return;
  RawSlot &S = slotOf(Base, unsigned(I));
  if (S.Token.load(std::memory_order_acquire) != T)
    return;
  freeSlot(S, StateLive, S.HeartbeatNs.load(std::memory_order_relaxed));
}

void Segment::leave() {
  std::lock_guard<std::mutex> Lock(Mutex);
  leaveLocked();
}

bool Segment::heartbeat(uint64_t NowNs, bool &Rejoined) {
  Rejoined = false;
  std::lock_guard<std::mutex> Lock(Mutex);
  int I = Slot.load(std::memory_order_relaxed);
  bool Lost = false;
  if (Joined && I >= 0 && uint32_t(getpid()) == OwnerPid) {
    RawSlot &S = slotOf(Base, unsigned(I));
    uint64_t T = Token.load(std::memory_order_relaxed);
    auto Ours = [&] {
      return S.State.load(std::memory_order_acquire) == StateLive &&
             S.Token.load(std::memory_order_acquire) == T;
    };
    if (Ours()) {
      S.HeartbeatNs.store(NowNs, std::memory_order_release);
      // Check again: it may have been freed between the check and the
      // store (then the store refreshed someone else's slot, harmlessly).
      Lost = !Ours();
    } else {
      Lost = true;
    }
    if (!Lost) {
      uint64_t Started = S.Started.load(std::memory_order_acquire);
      uint64_t Finished = S.Finished.load(std::memory_order_acquire);
      // Finished above Started is a late GPU write of a previous owner of
      // this slot (ours never exceed Started); it would hide our launches.
      if (Finished > Started)
        S.Finished.compare_exchange_strong(Finished, Started,
                                           std::memory_order_acq_rel);
      HighSeq = std::max(HighSeq, Started);
    }
  } else if (Joined) {
    // Joined in a parent process before fork(): the slot is the parent's.
    Lost = true;
    I = -1;
  }

  if (Lost) {
    Slot.store(-1, std::memory_order_release);
    Token.store(0, std::memory_order_release);
    uint64_t SeqBase = HighSeq + RejoinSeqGap;
    if (claim(Prio, NowNs, I, SeqBase) < 0) {
      reclaim(NowNs);
      if (claim(Prio, NowNs, I, SeqBase) < 0) {
        Joined = false;
        return false;
      }
    }
    Rejoined = true;
  }
  reclaim(NowNs);
  return Joined;
}

uint64_t Segment::hpLaunch(uint64_t NowNs) {
  int I = Slot.load(std::memory_order_acquire);
  if (I < 0)
    return 0;
  RawSlot &S = slotOf(Base, unsigned(I));
  if (S.Token.load(std::memory_order_relaxed) !=
      Token.load(std::memory_order_acquire))
    return 0;
  uint64_t Last = S.LastLaunchNs.load(std::memory_order_relaxed);
  while (Last < NowNs && !S.LastLaunchNs.compare_exchange_weak(
                             Last, NowNs, std::memory_order_relaxed))
    ;
  // Release: a reader that sees the new Started sees LastLaunchNs too.
  return S.Started.fetch_add(1, std::memory_order_acq_rel) + 1;
}

void Segment::hpFinished(uint64_t Seq) {
  int I = Slot.load(std::memory_order_acquire);
  if (I < 0 || Seq == 0)
    return;
  RawSlot &S = slotOf(Base, unsigned(I));
  if (S.Token.load(std::memory_order_relaxed) !=
      Token.load(std::memory_order_acquire))
    return;
  uint64_t F = S.Finished.load(std::memory_order_relaxed);
  while (F < Seq &&
         !S.Finished.compare_exchange_weak(F, Seq, std::memory_order_release,
                                           std::memory_order_relaxed))
    ;
}

uint64_t *Segment::finishedWord() {
  int I = Slot.load(std::memory_order_acquire);
  if (I < 0)
    return nullptr;
  return reinterpret_cast<uint64_t *>(&slotOf(Base, unsigned(I)).Finished);
}

void Segment::addPreemption() {
  int I = Slot.load(std::memory_order_acquire);
  if (I < 0)
    return;
  RawSlot &S = slotOf(Base, unsigned(I));
  if (S.Token.load(std::memory_order_relaxed) ==
      Token.load(std::memory_order_acquire))
    S.Preemptions.fetch_add(1, std::memory_order_relaxed);
}

void Segment::setWaitShare(int Permille) {
  int I = Slot.load(std::memory_order_acquire);
  if (I < 0)
    return;
  RawSlot &S = slotOf(Base, unsigned(I));
  const uint32_t V = Permille < 0 ? 0 : uint32_t(std::min(Permille, 1000)) + 1;
  if (S.Token.load(std::memory_order_relaxed) == Token.load(std::memory_order_acquire))
    S.WaitShare.store(V, std::memory_order_relaxed);
}

void Segment::setFlags(uint32_t F) {
  std::lock_guard<std::mutex> G(Mutex);
  OwnFlags.store(F, std::memory_order_relaxed);
  int I = Slot.load(std::memory_order_acquire);
  if (I < 0)
    return; // written by the next claim
  RawSlot &S = slotOf(Base, unsigned(I));
  if (S.Token.load(std::memory_order_relaxed) == Token.load(std::memory_order_acquire))
    S.Flags.store(F | seg::FlagWaitShare, std::memory_order_relaxed);
}

HpView Segment::hpView(uint64_t NowNs) const {
  return viewOf(Base, Bytes, NowNs, StaleNs);
}

std::vector<SlotInfo> Segment::slots() const { return slotsOf(Base, Bytes); }

} // namespace tally::rt
