//===- SegmentTest.cpp - the cross-process shared-memory segment ----------===//
//
// Every test works in a fresh temporary directory. Several Segment objects on
// one file stand for several processes (each has its own mapping); a forked
// child stands for a real one where dying matters. Corruption is written
// into the file with pwrite, as a stray process would, and staleness is
// checked both on explicit clocks and on the real one.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/Segment.h"

#include "gtest/gtest.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tally::rt;

namespace {

constexpr uint64_t Ms = 1'000'000;
constexpr uint64_t T0 = 1'000'000 * Ms; // an explicit clock, far from 0

// Field offsets of the version 1 layout (Segment.h), for writing garbage.
constexpr off_t VersionOff = 8, HeaderBytesOff = 12, SlotCountOff = 16,
                SlotBytesOff = 20, TotalBytesOff = 24, ReadyOff = 32;
constexpr off_t StateOff = 0, PriorityOff = 4, TokenOff = 24, HeartbeatOff = 32;

off_t slotOff(unsigned I) {
  return seg::HeaderBytes + off_t(I) * seg::SlotBytes;
}

class SegmentTest : public ::testing::Test {
protected:
  void SetUp() override {
    char Tmpl[] = "/tmp/tally-segtest-XXXXXX";
    ASSERT_NE(mkdtemp(Tmpl), nullptr);
    Dir = Tmpl;
    Opts.Dir = Dir;
    Opts.Key = "GPU-test";
    File = Dir + "/tally-" + std::to_string(geteuid()) + "-GPU-test";
  }
  void TearDown() override { std::filesystem::remove_all(Dir); }

  std::unique_ptr<Segment> openOK(std::string *WarningOut = nullptr) {
    std::string Warning, Error;
    std::unique_ptr<Segment> S = Segment::open(Opts, Warning, Error);
    EXPECT_TRUE(S) << Error;
    EXPECT_TRUE(Error.empty()) << Error;
    if (WarningOut)
      *WarningOut = Warning;
    else
      EXPECT_TRUE(Warning.empty()) << Warning;
    return S;
  }

  std::string openError() {
    std::string Warning, Error;
    std::unique_ptr<Segment> S = Segment::open(Opts, Warning, Error);
    EXPECT_FALSE(S) << "opened " << File;
    EXPECT_FALSE(Error.empty());
    return Error;
  }

  template <typename T> void writeAt(off_t Off, T Value) {
    int Fd = ::open(File.c_str(), O_WRONLY);
    ASSERT_GE(Fd, 0);
    ASSERT_EQ(pwrite(Fd, &Value, sizeof(T), Off), ssize_t(sizeof(T)));
    ::close(Fd);
  }

  std::vector<unsigned char> fileBytes() {
    std::vector<unsigned char> B;
    int Fd = ::open(File.c_str(), O_RDONLY);
    EXPECT_GE(Fd, 0);
    struct stat St;
    fstat(Fd, &St);
    B.resize(size_t(St.st_size));
    EXPECT_EQ(pread(Fd, B.data(), B.size(), 0), ssize_t(B.size()));
    ::close(Fd);
    return B;
  }

  std::string Dir, File;
  SegmentOptions Opts;
};

/// The slot index a Segment holds, from where its Finished word lies.
int slotOf(Segment &S) {
  uint64_t *W = S.finishedWord();
  if (!W)
    return -1;
  auto Off = reinterpret_cast<unsigned char *>(W) -
             static_cast<unsigned char *>(S.mappingBase());
  return int((Off - seg::HeaderBytes) / seg::SlotBytes);
}

std::optional<SlotInfo> findSlot(const std::vector<SlotInfo> &Slots,
                                 int Index) {
  for (const SlotInfo &I : Slots)
    if (int(I.Index) == Index)
      return I;
  return std::nullopt;
}

TEST_F(SegmentTest, CreateJoinAndReadFromASecondMapping) {
  std::unique_ptr<Segment> A = openOK();
  ASSERT_TRUE(A);
  EXPECT_EQ(A->path(), File);
  struct stat St;
  ASSERT_EQ(lstat(File.c_str(), &St), 0);
  EXPECT_TRUE(S_ISREG(St.st_mode));
  EXPECT_EQ(St.st_mode & 07777, 0600u);
  size_t Page = size_t(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(A->mappingBytes() % Page, 0u);
  EXPECT_GE(A->mappingBytes(), seg::TotalBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(A->mappingBase()) % Page, 0u);
  EXPECT_EQ(uint64_t(St.st_size), A->mappingBytes());

  std::string Why;
  std::vector<unsigned char> Img = fileBytes();
  EXPECT_TRUE(validateSegmentImage(Img.data(), Img.size(), Why)) << Why;

  std::string Error;
  ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
  std::unique_ptr<Segment> B = openOK();
  ASSERT_TRUE(B);
  EXPECT_NE(A->mappingBase(), B->mappingBase());
  ASSERT_TRUE(B->join(SegPriority::BestEffort, T0, Error)) << Error;
  EXPECT_NE(slotOf(*A), slotOf(*B));

  HpView V = B->hpView(T0);
  EXPECT_EQ(V.HpProcesses, 1u);
  EXPECT_EQ(V.BeProcesses, 1u);
  EXPECT_FALSE(V.Active);
  EXPECT_EQ(V.Arrivals, 0u);
  EXPECT_EQ(V.LastLaunchNs, 0u);

  std::vector<SlotInfo> Slots = B->slots();
  ASSERT_EQ(Slots.size(), 2u);
  for (const SlotInfo &I : Slots) {
    EXPECT_EQ(I.State, seg::StateLive);
    EXPECT_EQ(I.Pid, uint32_t(getpid()));
    EXPECT_EQ(I.HeartbeatNs, T0);
    EXPECT_EQ(I.Prio, int(I.Index) == slotOf(*A) ? SegPriority::High
                                                 : SegPriority::BestEffort);
  }

  // Leaving frees the slot at once; the destructor leaves too.
  A->leave();
  EXPECT_EQ(A->finishedWord(), nullptr);
  EXPECT_EQ(B->hpView(T0).HpProcesses, 0u);
  EXPECT_EQ(B->slots().size(), 1u);
  A.reset();
  B.reset();
  Img = fileBytes();
  EXPECT_EQ(hpViewOfImage(Img.data(), Img.size(), T0, Opts.StaleNs).BeProcesses,
            0u);
}

TEST_F(SegmentTest, KeyIsSanitisedForTheFileName) {
  Opts.Key = "GPU-ab/../c d\n";
  std::unique_ptr<Segment> S = openOK();
  ASSERT_TRUE(S);
  EXPECT_EQ(S->path(),
            Dir + "/tally-" + std::to_string(geteuid()) + "-GPU-abcd");
  Opts.Key = "/..//";
  EXPECT_NE(openError().find("key"), std::string::npos);
}

TEST_F(SegmentTest, LaunchesAndCompletions) {
  std::unique_ptr<Segment> A = openOK(), B = openOK();
  ASSERT_TRUE(A && B);
  EXPECT_EQ(A->hpLaunch(T0), 0u) << "no slot yet";
  EXPECT_EQ(A->finishedWord(), nullptr);
  std::string Error;
  ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
  ASSERT_TRUE(B->join(SegPriority::BestEffort, T0, Error)) << Error;

  EXPECT_EQ(A->hpLaunch(T0 + 10), 1u);
  EXPECT_EQ(A->hpLaunch(T0 + 20), 2u);
  EXPECT_EQ(A->hpLaunch(T0 + 15), 3u); // a late clock read: no step back
  HpView V = B->hpView(T0 + 30);
  EXPECT_TRUE(V.Active);
  EXPECT_EQ(V.Arrivals, 3u);
  EXPECT_EQ(V.LastLaunchNs, T0 + 20);

  A->hpFinished(1);
  EXPECT_TRUE(B->hpView(T0 + 30).Active);
  A->hpFinished(3);
  EXPECT_FALSE(B->hpView(T0 + 30).Active);
  A->hpFinished(2); // out of order: Finished stays the maximum
  std::optional<SlotInfo> I = findSlot(B->slots(), slotOf(*A));
  ASSERT_TRUE(I);
  EXPECT_EQ(I->Started, 3u);
  EXPECT_EQ(I->Finished, 3u);
  EXPECT_EQ(B->hpView(T0 + 30).Arrivals, 3u);

  // A BE process's launches and preemptions are not HP arrivals.
  B->hpLaunch(T0 + 40);
  B->addPreemption();
  B->addPreemption();
  V = B->hpView(T0 + 50);
  EXPECT_EQ(V.Arrivals, 3u);
  EXPECT_FALSE(V.Active);
  EXPECT_EQ(V.LastLaunchNs, T0 + 20);
  I = findSlot(A->slots(), slotOf(*B));
  ASSERT_TRUE(I);
  EXPECT_EQ(I->Preemptions, 2u);
}

TEST_F(SegmentTest, FinishedWordWrittenAsTheGpuWould) {
  std::unique_ptr<Segment> A = openOK(), B = openOK();
  ASSERT_TRUE(A && B);
  std::string Error;
  ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
  uint64_t *W = A->finishedWord();
  ASSERT_NE(W, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(W) % 8, 0u);
  auto *Lo = static_cast<unsigned char *>(A->mappingBase());
  auto *P = reinterpret_cast<unsigned char *>(W);
  EXPECT_TRUE(P >= Lo && P + 8 <= Lo + A->mappingBytes());

  for (int K = 0; K < 3; ++K)
    A->hpLaunch(T0);
  EXPECT_TRUE(B->hpView(T0).Active);
  __atomic_store_n(W, uint64_t(3), __ATOMIC_RELEASE);
  EXPECT_FALSE(B->hpView(T0).Active);
  __atomic_store_n(W, uint64_t(2), __ATOMIC_RELEASE);
  EXPECT_TRUE(B->hpView(T0).Active);

  // A write above Started (a late one of a slot's previous owner) reads as
  // finished, and the owner's next heartbeat brings it back to Started so
  // that its next launch counts.
  __atomic_store_n(W, uint64_t(1000), __ATOMIC_RELEASE);
  EXPECT_FALSE(B->hpView(T0).Active);
  bool Rejoined = true;
  ASSERT_TRUE(A->heartbeat(T0 + Ms, Rejoined));
  EXPECT_FALSE(Rejoined);
  EXPECT_EQ(__atomic_load_n(W, __ATOMIC_ACQUIRE), 3u);
  EXPECT_EQ(A->hpLaunch(T0 + Ms), 4u);
  EXPECT_TRUE(B->hpView(T0 + Ms).Active);
}

TEST_F(SegmentTest, StaleHeartbeatsStopCountingAndAreReclaimed) {
  std::unique_ptr<Segment> A = openOK(), B = openOK();
  ASSERT_TRUE(A && B);
  std::string Error;
  const uint64_t Stale = Opts.StaleNs;
  ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
  ASSERT_TRUE(B->join(SegPriority::BestEffort, T0, Error)) << Error;
  int ASlot = slotOf(*A);
  A->hpLaunch(T0);

  HpView V = B->hpView(T0 + Stale);
  EXPECT_EQ(V.HpProcesses, 1u);
  EXPECT_TRUE(V.Active);
  EXPECT_EQ(V.Arrivals, 1u);
  V = B->hpView(T0 + Stale + 1);
  EXPECT_EQ(V.HpProcesses, 0u);
  EXPECT_FALSE(V.Active);
  EXPECT_EQ(V.Arrivals, 0u);
  EXPECT_EQ(V.LastLaunchNs, 0u);
  // Not counted, but still there until someone's heartbeat frees it.
  EXPECT_TRUE(findSlot(B->slots(), ASlot));

  bool Rejoined = true;
  ASSERT_TRUE(B->heartbeat(T0 + Stale, Rejoined));
  EXPECT_FALSE(Rejoined);
  EXPECT_TRUE(findSlot(B->slots(), ASlot)) << "freed while fresh";
  ASSERT_TRUE(B->heartbeat(T0 + Stale + 1, Rejoined));
  EXPECT_FALSE(Rejoined);
  EXPECT_FALSE(findSlot(B->slots(), ASlot)) << "stale slot kept";
  EXPECT_EQ(B->slots().size(), 1u);
  EXPECT_EQ(A->hpLaunch(T0 + Stale + 1), 0u) << "launch counted in a lost slot";

  // The stalled process wakes up: its heartbeat claims a slot again, and its
  // sequence numbers go on above the old ones.
  ASSERT_TRUE(A->heartbeat(T0 + Stale + 2, Rejoined));
  EXPECT_TRUE(Rejoined);
  EXPECT_EQ(slotOf(*A), ASlot) << "the free old slot is preferred";
  EXPECT_GT(A->hpLaunch(T0 + Stale + 2), 1u);
  V = B->hpView(T0 + Stale + 2);
  EXPECT_EQ(V.HpProcesses, 1u);
  EXPECT_TRUE(V.Active);

  // A heartbeat more than a second in the future is invalid too.
  ASSERT_TRUE(A->heartbeat(T0 + 10'000 * Ms, Rejoined));
  EXPECT_EQ(B->hpView(T0 + 10'000 * Ms - 999 * Ms).HpProcesses, 1u);
  EXPECT_EQ(B->hpView(T0 + 10'000 * Ms - 1001 * Ms).HpProcesses, 0u);
  ASSERT_TRUE(B->heartbeat(T0 + 10'000 * Ms - 1001 * Ms, Rejoined));
  EXPECT_EQ(B->slots().size(), 1u);
}

/// Kills and reaps a forked child when a test leaves early.
struct ChildGuard {
  pid_t Pid;
  ~ChildGuard() {
    if (Pid > 0) {
      kill(Pid, SIGKILL);
      waitpid(Pid, nullptr, 0);
    }
  }
};

/// Waits up to \p TimeoutMs for a byte on \p Fd.
bool readByte(int Fd, int TimeoutMs) {
  struct pollfd P = {Fd, POLLIN, 0};
  if (poll(&P, 1, TimeoutMs) != 1)
    return false;
  char C;
  return read(Fd, &C, 1) == 1;
}

TEST_F(SegmentTest, KilledProcessIsReclaimedWithin100Ms) {
  int Pipe[2];
  ASSERT_EQ(pipe(Pipe), 0);
  pid_t Child = fork();
  ASSERT_GE(Child, 0);
  if (Child == 0) {
    // The child: an HP process in the middle of a launch, heartbeating
    // every 2 ms until it is killed. No gtest in here.
    close(Pipe[0]);
    std::string Warning, Error;
    std::unique_ptr<Segment> S = Segment::open(Opts, Warning, Error);
    if (!S || !S->join(SegPriority::High, monotonicNs(), Error))
      _exit(2);
    S->hpLaunch(monotonicNs());
    if (write(Pipe[1], "x", 1) != 1)
      _exit(3);
    // Bounded, should the parent die without killing it.
    for (int K = 0; K < 10'000; ++K) {
      bool Rejoined;
      S->heartbeat(monotonicNs(), Rejoined);
      usleep(2000);
    }
    _exit(4);
  }
  ChildGuard Guard{Child};
  close(Pipe[1]);
  bool Ready = readByte(Pipe[0], 10'000);
  close(Pipe[0]);
  ASSERT_TRUE(Ready) << "the child did not join";

  std::unique_ptr<Segment> B = openOK();
  ASSERT_TRUE(B);
  std::string Error;
  ASSERT_TRUE(B->join(SegPriority::BestEffort, monotonicNs(), Error)) << Error;
  HpView V = B->hpView(monotonicNs());
  EXPECT_EQ(V.HpProcesses, 1u);
  EXPECT_TRUE(V.Active);
  int ChildSlot = -1;
  for (const SlotInfo &I : B->slots())
    if (I.Pid == uint32_t(Child))
      ChildSlot = int(I.Index);
  ASSERT_GE(ChildSlot, 0);

  ASSERT_EQ(kill(Child, SIGKILL), 0);
  uint64_t Killed = monotonicNs();
  ASSERT_EQ(waitpid(Child, nullptr, 0), Child);
  Guard.Pid = -1;
  std::vector<SlotInfo> Slots = B->slots();
  std::optional<SlotInfo> Last = findSlot(Slots, ChildSlot);
  ASSERT_TRUE(Last);
  uint64_t LastBeat = Last->HeartbeatNs;
  EXPECT_LE(LastBeat, Killed);

  // The survivor's runtime thread: heartbeat() every 10 ms. At each step
  // the child counts exactly while its last heartbeat is fresh, and the
  // first heartbeat after that frees its slot.
  uint64_t Inactive = 0, Freed = 0;
  while (monotonicNs() - Killed < 1000 * Ms && !(Inactive && Freed)) {
    uint64_t Now = monotonicNs();
    bool Stale = Now - LastBeat > Opts.StaleNs;
    EXPECT_EQ(B->hpView(Now).Active, !Stale) << (Now - LastBeat) / Ms << " ms";
    bool Rejoined;
    ASSERT_TRUE(B->heartbeat(Now, Rejoined));
    EXPECT_FALSE(Rejoined);
    EXPECT_EQ(!findSlot(B->slots(), ChildSlot), Stale);
    if (Stale && !Inactive && !B->hpView(Now).Active)
      Inactive = Now;
    if (Stale && !Freed && !findSlot(B->slots(), ChildSlot))
      Freed = Now;
    usleep(10'000);
  }
  ASSERT_TRUE(Inactive && Freed) << "the dead child's slot is still counted";
  // The bound of the design; a heavily loaded machine may oversleep it.
  EXPECT_LE(Inactive - Killed, 100 * Ms)
      << "last beat " << (Killed - LastBeat) / Ms << " ms before the kill";
  EXPECT_LE(Freed - Killed, 100 * Ms);
  EXPECT_EQ(B->hpView(monotonicNs()).HpProcesses, 0u);
}

TEST_F(SegmentTest, ExitingProcessFreesItsSlotAtOnce) {
  pid_t Child = fork();
  ASSERT_GE(Child, 0);
  if (Child == 0) {
    std::string Warning, Error;
    std::unique_ptr<Segment> S = Segment::open(Opts, Warning, Error);
    if (!S || !S->join(SegPriority::High, monotonicNs(), Error))
      _exit(2);
    S->hpLaunch(monotonicNs());
    S.reset();
    _exit(0);
  }
  int Status = 0;
  ASSERT_EQ(waitpid(Child, &Status, 0), Child);
  ASSERT_TRUE(WIFEXITED(Status) && WEXITSTATUS(Status) == 0);
  std::unique_ptr<Segment> B = openOK();
  ASSERT_TRUE(B);
  EXPECT_TRUE(B->slots().empty());
  EXPECT_FALSE(B->hpView(monotonicNs()).Active);
}

TEST_F(SegmentTest, ForkedChildDoesNotTakeOverTheParentsSlot) {
  // About ownership, not timing: a fork under ASan may take longer than
  // the default 50 ms.
  Opts.StaleNs = 10'000 * Ms;
  std::unique_ptr<Segment> A = openOK();
  ASSERT_TRUE(A);
  std::string Error;
  ASSERT_TRUE(A->join(SegPriority::High, monotonicNs(), Error)) << Error;
  int ParentSlot = slotOf(*A);
  pid_t Child = fork();
  ASSERT_GE(Child, 0);
  if (Child == 0) {
    // The child's copy of the object must claim a slot of its own, and its
    // destructor must free only that one.
    bool Rejoined = false;
    if (!A->heartbeat(monotonicNs(), Rejoined) || !Rejoined)
      _exit(2);
    if (slotOf(*A) == ParentSlot || slotOf(*A) < 0)
      _exit(3);
    if (A->slots().size() != 2)
      _exit(4);
    A.reset();
    _exit(0);
  }
  int Status = 0;
  ASSERT_EQ(waitpid(Child, &Status, 0), Child);
  ASSERT_TRUE(WIFEXITED(Status));
  EXPECT_EQ(WEXITSTATUS(Status), 0);
  bool Rejoined = true;
  ASSERT_TRUE(A->heartbeat(monotonicNs(), Rejoined));
  EXPECT_FALSE(Rejoined);
  EXPECT_EQ(slotOf(*A), ParentSlot);
  ASSERT_EQ(A->slots().size(), 1u);
  EXPECT_EQ(A->slots()[0].Pid, uint32_t(getpid()));
}

TEST_F(SegmentTest, CorruptHeadersAreReinitialised) {
  struct Corruption {
    const char *Name;
    std::function<void()> Apply;
    const char *Why;
  } Cases[] = {
      {"magic", [&] { writeAt<uint64_t>(0, 0x4d48535959454154ull); },
       "bad magic"},
      {"version", [&] { writeAt<uint32_t>(VersionOff, 2); }, "version 2"},
      {"header bytes", [&] { writeAt<uint32_t>(HeaderBytesOff, 128); },
       "sizes 128/64x128/8256"},
      {"slot count", [&] { writeAt<uint32_t>(SlotCountOff, 100000); },
       "sizes 64/100000x128"},
      {"slot bytes", [&] { writeAt<uint32_t>(SlotBytesOff, 8); },
       "sizes 64/64x8"},
      {"total bytes", [&] { writeAt<uint64_t>(TotalBytesOff, 1); },
       "sizes 64/64x128/1,"},
      {"not ready", [&] { writeAt<uint32_t>(ReadyOff, 0); }, "not ready"},
      // Cut inside Version (its low bytes, 1, survive): the sizes read 0.
      {"truncated", [&] { ASSERT_EQ(truncate(File.c_str(), 10), 0); },
       "sizes 0/0x0/0,"},
  };
  for (const Corruption &C : Cases) {
    SCOPED_TRACE(C.Name);
    std::unique_ptr<Segment> A = openOK();
    ASSERT_TRUE(A);
    std::string Error;
    ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
    C.Apply();
    if (std::string(C.Name) != "truncated") {
      // The live mapping sees it at once: no view out of a bad header.
      A->hpLaunch(T0);
      EXPECT_EQ(A->hpView(T0).HpProcesses, 0u);
    }
    std::string Warning;
    std::unique_ptr<Segment> B = openOK(&Warning);
    ASSERT_TRUE(B);
    EXPECT_NE(Warning.find("segment " + File + " was invalid ("),
              std::string::npos)
        << Warning;
    EXPECT_NE(Warning.find(C.Why), std::string::npos) << Warning;
    EXPECT_NE(Warning.find("re-initialised"), std::string::npos) << Warning;

    std::vector<unsigned char> Img = fileBytes();
    std::string Why;
    EXPECT_TRUE(validateSegmentImage(Img.data(), Img.size(), Why)) << Why;
    EXPECT_TRUE(B->slots().empty()) << "the old slots survived";
    ASSERT_TRUE(B->join(SegPriority::BestEffort, T0, Error)) << Error;
    EXPECT_EQ(B->hpView(T0).BeProcesses, 1u);
    // The process whose slot was wiped claims one again.
    bool Rejoined = false;
    ASSERT_TRUE(A->heartbeat(T0 + 1, Rejoined));
    EXPECT_TRUE(Rejoined);
    HpView V = B->hpView(T0 + 1);
    EXPECT_EQ(V.HpProcesses, 1u);
    EXPECT_EQ(V.BeProcesses, 1u);
    A.reset();
    B.reset();
    // The next open finds it sound.
    EXPECT_TRUE(openOK());
  }
}

TEST_F(SegmentTest, InvalidSlotsAreCleared) {
  std::unique_ptr<Segment> A = openOK();
  ASSERT_TRUE(A);
  std::string Error;
  ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
  int ASlot = slotOf(*A);
  ASSERT_NE(ASlot, 3);
  ASSERT_NE(ASlot, 5);
  writeAt<uint32_t>(slotOff(3) + StateOff, 7);
  writeAt<uint32_t>(slotOff(5) + PriorityOff, 9);
  writeAt<uint64_t>(slotOff(5) + HeartbeatOff, T0);
  writeAt<uint32_t>(slotOff(5) + StateOff, seg::StateLive);

  std::vector<unsigned char> Img = fileBytes();
  std::string Why;
  EXPECT_FALSE(validateSegmentImage(Img.data(), Img.size(), Why));
  EXPECT_EQ(Why, "slot 3: state 7");
  // Nothing invalid counts.
  EXPECT_EQ(A->hpView(T0).HpProcesses, 1u);
  EXPECT_EQ(A->hpView(T0).BeProcesses, 0u);

  std::string Warning;
  std::unique_ptr<Segment> B = openOK(&Warning);
  ASSERT_TRUE(B);
  EXPECT_NE(Warning.find("2 invalid slot(s) (slot 3: state 7)"),
            std::string::npos)
      << Warning;
  Img = fileBytes();
  EXPECT_TRUE(validateSegmentImage(Img.data(), Img.size(), Why)) << Why;
  // The valid slot was left alone.
  ASSERT_EQ(B->slots().size(), 1u);
  EXPECT_EQ(int(B->slots()[0].Index), ASlot);
  bool Rejoined = true;
  ASSERT_TRUE(A->heartbeat(T0 + 1, Rejoined));
  EXPECT_FALSE(Rejoined);

  // Written while everyone runs: the next heartbeat frees it.
  writeAt<uint32_t>(slotOff(7) + StateOff, 0xdeadbeef);
  ASSERT_TRUE(A->heartbeat(T0 + 2, Rejoined));
  // (slots() skips invalid states: the file's own word says it was freed.)
  Img = fileBytes();
  uint32_t State7;
  std::memcpy(&State7, Img.data() + slotOff(7) + StateOff, 4);
  EXPECT_EQ(State7, seg::StateFree);
}

TEST_F(SegmentTest, AbandonedClaimIsFreedAfterStaleNs) {
  std::unique_ptr<Segment> A = openOK();
  ASSERT_TRUE(A);
  std::string Error;
  ASSERT_TRUE(A->join(SegPriority::BestEffort, T0, Error)) << Error;
  // A process that died between claiming a slot and making it live.
  writeAt<uint64_t>(slotOff(9) + TokenOff, 42);
  writeAt<uint32_t>(slotOff(9) + StateOff, seg::StateClaiming);
  bool Rejoined;
  ASSERT_TRUE(A->heartbeat(T0 + 10 * Ms, Rejoined));
  ASSERT_TRUE(A->heartbeat(T0 + 10 * Ms + Opts.StaleNs - 1, Rejoined));
  EXPECT_TRUE(findSlot(A->slots(), 9)) << "freed mid-claim";
  ASSERT_TRUE(A->heartbeat(T0 + 10 * Ms + Opts.StaleNs, Rejoined));
  EXPECT_FALSE(findSlot(A->slots(), 9));
}

TEST_F(SegmentTest, RefusesUnsafeFiles) {
  // Another mode: refused and left as it is.
  int Fd = ::open(File.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(Fd, 0);
  ASSERT_EQ(fchmod(Fd, 0644), 0);
  ::close(Fd);
  EXPECT_NE(openError().find("mode 0644, expected 0600"), std::string::npos);
  struct stat St;
  ASSERT_EQ(stat(File.c_str(), &St), 0);
  EXPECT_EQ(St.st_mode & 07777, 0644u);
  EXPECT_EQ(St.st_size, 0);
  ASSERT_EQ(unlink(File.c_str()), 0);

  // A directory, a symbolic link (even to a good segment), a FIFO.
  ASSERT_EQ(mkdir(File.c_str(), 0700), 0);
  EXPECT_NE(openError().find(File), std::string::npos);
  ASSERT_EQ(rmdir(File.c_str()), 0);

  std::string Real = Dir + "/real";
  {
    SegmentOptions Other = Opts;
    Other.Key = "real";
    std::string Warning, Error;
    ASSERT_TRUE(Segment::open(Other, Warning, Error)) << Error;
    Real = Dir + "/tally-" + std::to_string(geteuid()) + "-real";
  }
  ASSERT_EQ(symlink(Real.c_str(), File.c_str()), 0);
  EXPECT_NE(openError().find("symbolic link"), std::string::npos);
  ASSERT_EQ(unlink(File.c_str()), 0);

  ASSERT_EQ(mkfifo(File.c_str(), 0600), 0);
  EXPECT_NE(openError().find("not a regular file"), std::string::npos);
  ASSERT_EQ(unlink(File.c_str()), 0);

  // An absurd size (sparse, so cheap).
  Fd = ::open(File.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(Fd, 0);
  ASSERT_EQ(ftruncate(Fd, off_t(1) << 30), 0);
  ::close(Fd);
  EXPECT_NE(openError().find("absurd size"), std::string::npos);
  ASSERT_EQ(unlink(File.c_str()), 0);

  // Another owner: only root can make one.
  if (geteuid() == 0) {
    Fd = ::open(File.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(Fd, 0);
    ASSERT_EQ(fchown(Fd, 65534, 65534), 0);
    ::close(Fd);
    EXPECT_NE(openError().find("owned by uid 65534"), std::string::npos);
    ASSERT_EQ(unlink(File.c_str()), 0);
  }

  // A directory that does not exist.
  Opts.Dir = Dir + "/missing";
  EXPECT_NE(openError().find("cannot open segment"), std::string::npos);

  // With a restrictive umask the file is still created with 0600.
  Opts.Dir = Dir;
  mode_t Old = umask(0277);
  std::unique_ptr<Segment> S = openOK();
  umask(Old);
  EXPECT_TRUE(S);
  ASSERT_EQ(stat(File.c_str(), &St), 0);
  EXPECT_EQ(St.st_mode & 07777, 0600u);
}

TEST_F(SegmentTest, AllSlotsTaken) {
  std::vector<std::unique_ptr<Segment>> Procs;
  std::string Error;
  for (unsigned I = 0; I < seg::SlotCount; ++I) {
    Procs.push_back(openOK());
    ASSERT_TRUE(Procs.back());
    ASSERT_TRUE(Procs.back()->join(SegPriority::BestEffort, T0, Error))
        << I << ": " << Error;
  }
  std::unique_ptr<Segment> Late = openOK();
  ASSERT_TRUE(Late);
  EXPECT_FALSE(Late->join(SegPriority::High, T0, Error));
  EXPECT_NE(Error.find("all 64 slots of segment " + File + " are taken"),
            std::string::npos)
      << Error;
  EXPECT_EQ(Late->finishedWord(), nullptr);
  EXPECT_EQ(Late->hpView(T0).BeProcesses, 64u);

  Procs[17]->leave();
  Error.clear();
  ASSERT_TRUE(Late->join(SegPriority::High, T0, Error)) << Error;
  EXPECT_EQ(slotOf(*Late), 17);

  // Full again; one process stalls: a join after StaleNs frees its slot,
  // and the stalled one then cannot come back.
  EXPECT_FALSE(Procs[17]->join(SegPriority::BestEffort, T0, Error));
  uint64_t Later = T0 + Opts.StaleNs + 1;
  bool Rejoined;
  for (unsigned I = 0; I < seg::SlotCount; ++I) {
    if (I != 17 && I != 40) {
      ASSERT_TRUE(Procs[I]->heartbeat(Later, Rejoined));
    }
  }
  ASSERT_TRUE(Late->heartbeat(Later, Rejoined));
  ASSERT_TRUE(Procs[17]->join(SegPriority::BestEffort, Later, Error)) << Error;
  EXPECT_EQ(slotOf(*Procs[17]), 40);
  EXPECT_FALSE(Procs[40]->heartbeat(Later, Rejoined));
  EXPECT_EQ(Procs[40]->finishedWord(), nullptr);
  EXPECT_EQ(Late->hpView(Later).BeProcesses, 63u);
  EXPECT_EQ(Late->hpView(Later).HpProcesses, 1u);
}

TEST_F(SegmentTest, RejoinsAfterItsSlotWasWiped) {
  std::unique_ptr<Segment> A = openOK(), B = openOK();
  ASSERT_TRUE(A && B);
  std::string Error;
  ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
  int ASlot = slotOf(*A);
  EXPECT_EQ(A->hpLaunch(T0), 1u);

  // Wiped to free: the same slot is claimed again.
  for (off_t Off = 0; Off < seg::SlotBytes; Off += 8)
    writeAt<uint64_t>(slotOff(unsigned(ASlot)) + Off, 0);
  EXPECT_EQ(A->hpLaunch(T0), 0u);
  bool Rejoined = false;
  ASSERT_TRUE(A->heartbeat(T0 + 1, Rejoined));
  EXPECT_TRUE(Rejoined);
  EXPECT_EQ(slotOf(*A), ASlot);
  uint64_t Seq = A->hpLaunch(T0 + 1);
  EXPECT_GT(Seq, 1u);
  EXPECT_TRUE(B->hpView(T0 + 1).Active);
  A->hpFinished(Seq);
  EXPECT_FALSE(B->hpView(T0 + 1).Active);

  // Taken by someone else (another token): A moves to another slot.
  writeAt<uint64_t>(slotOff(unsigned(ASlot)) + TokenOff, 12345);
  ASSERT_TRUE(A->heartbeat(T0 + 2, Rejoined));
  EXPECT_TRUE(Rejoined);
  EXPECT_NE(slotOf(*A), ASlot);
  ASSERT_GE(slotOf(*A), 0);
  EXPECT_GT(A->hpLaunch(T0 + 2), Seq);
  ASSERT_TRUE(A->heartbeat(T0 + 3, Rejoined));
  EXPECT_FALSE(Rejoined);
}

// An HP process's wait share: published in permille plus one; BE sees the
// largest over live HP slots, known only when every one has published a
// valid value (0, an older writer's padding, and values past 1001 are
// unknown); a BE slot's field counts for nothing; a re-join clears it.
TEST_F(SegmentTest, WaitShareOfHpProcesses) {
  std::unique_ptr<Segment> A = openOK(), B = openOK(), Be = openOK();
  ASSERT_TRUE(A && B && Be);
  std::string Error;
  ASSERT_TRUE(Be->join(SegPriority::BestEffort, T0, Error)) << Error;
  EXPECT_FALSE(Be->hpView(T0).WaitShareKnown); // no HP process
  ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
  EXPECT_FALSE(Be->hpView(T0).WaitShareKnown); // not published yet
  A->setWaitShare(12);
  HpView V = Be->hpView(T0);
  EXPECT_TRUE(V.WaitShareKnown);
  EXPECT_EQ(V.WaitPermille, 12u);
  A->setWaitShare(0);
  EXPECT_TRUE(Be->hpView(T0).WaitShareKnown); // 0 permille is a share
  EXPECT_EQ(Be->hpView(T0).WaitPermille, 0u);
  A->setWaitShare(5000); // clamped
  EXPECT_EQ(Be->hpView(T0).WaitPermille, 1000u);
  ASSERT_TRUE(B->join(SegPriority::High, T0, Error)) << Error;
  EXPECT_FALSE(Be->hpView(T0).WaitShareKnown); // B has not published
  EXPECT_EQ(Be->hpView(T0).WaitPermille, 0u);
  A->setWaitShare(30);
  B->setWaitShare(700);
  EXPECT_EQ(Be->hpView(T0).WaitPermille, 700u); // the largest
  Be->setWaitShare(999);                        // a BE slot's: ignored
  EXPECT_EQ(Be->hpView(T0).WaitPermille, 700u);
  const off_t WaitOff = 72;
  writeAt<uint32_t>(slotOff(unsigned(slotOf(*B))) + WaitOff, 1002); // invalid
  EXPECT_FALSE(Be->hpView(T0).WaitShareKnown);
  writeAt<uint32_t>(slotOff(unsigned(slotOf(*B))) + WaitOff, 1); // 0 permille
  EXPECT_TRUE(Be->hpView(T0).WaitShareKnown);
  EXPECT_EQ(Be->hpView(T0).WaitPermille, 30u);
  // A slot whose owner does not write the field (an older runtime: no
  // FlagWaitShare) has no known share, whatever the field holds.
  const off_t FlagsOff = 12;
  writeAt<uint32_t>(slotOff(unsigned(slotOf(*B))) + FlagsOff, 0);
  EXPECT_FALSE(Be->hpView(T0).WaitShareKnown);
  B->setFlags(0); // the owner's own flags keep the bit
  EXPECT_TRUE(Be->hpView(T0).WaitShareKnown);
  EXPECT_EQ(Be->hpView(T0).HpWithoutMps, 0u);
  B->setWaitShare(-1); // not known
  EXPECT_FALSE(Be->hpView(T0).WaitShareKnown);
  B->setWaitShare(0);
  // Wiped: the re-join starts unknown until the next publication.
  int BSlot = slotOf(*B);
  for (off_t Off = 0; Off < seg::SlotBytes; Off += 8)
    writeAt<uint64_t>(slotOff(unsigned(BSlot)) + Off, 0);
  bool Rejoined = false;
  ASSERT_TRUE(B->heartbeat(T0 + 1, Rejoined));
  EXPECT_TRUE(Rejoined);
  EXPECT_FALSE(Be->hpView(T0 + 1).WaitShareKnown);
  B->setWaitShare(40);
  EXPECT_EQ(Be->hpView(T0 + 1).WaitPermille, 40u);
  // Gone stale: B no longer counts.
  ASSERT_TRUE(A->heartbeat(T0 + 2 * Opts.StaleNs, Rejoined));
  ASSERT_TRUE(Be->heartbeat(T0 + 2 * Opts.StaleNs, Rejoined));
  EXPECT_EQ(Be->hpView(T0 + 2 * Opts.StaleNs).WaitPermille, 30u);
}

// An HP process that is no MPS client says so in its slot (set before or
// after joining, kept across a re-join); BE processes count such slots;
// a BE slot's flags, and unknown bits, count for nothing.
TEST_F(SegmentTest, FlagsOfHpProcessesWithoutMps) {
  std::unique_ptr<Segment> A = openOK(), B = openOK(), Be = openOK();
  ASSERT_TRUE(A && B && Be);
  std::string Error;
  A->setFlags(seg::FlagNoMps); // before joining: written by the claim
  ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
  ASSERT_TRUE(B->join(SegPriority::High, T0, Error)) << Error;
  ASSERT_TRUE(Be->join(SegPriority::BestEffort, T0, Error)) << Error;
  EXPECT_EQ(Be->hpView(T0).HpProcesses, 2u);
  EXPECT_EQ(Be->hpView(T0).HpWithoutMps, 1u);
  B->setFlags(seg::FlagNoMps); // after joining: into the slot at once
  EXPECT_EQ(Be->hpView(T0).HpWithoutMps, 2u);
  B->setFlags(0);
  EXPECT_EQ(Be->hpView(T0).HpWithoutMps, 1u);
  Be->setFlags(seg::FlagNoMps | 6); // a BE slot's flags are not HP's
  writeAt<uint32_t>(slotOff(unsigned(slotOf(*B))) + 12, 6); // unknown bits
  EXPECT_EQ(Be->hpView(T0).HpWithoutMps, 1u);
  // Wiped: the re-join writes the flag again.
  int ASlot = slotOf(*A);
  for (off_t Off = 0; Off < seg::SlotBytes; Off += 8)
    writeAt<uint64_t>(slotOff(unsigned(ASlot)) + Off, 0);
  EXPECT_EQ(Be->hpView(T0).HpWithoutMps, 0u);
  bool Rejoined = false;
  ASSERT_TRUE(A->heartbeat(T0 + 1, Rejoined));
  EXPECT_TRUE(Rejoined);
  EXPECT_EQ(Be->hpView(T0 + 1).HpWithoutMps, 1u);
  // Gone stale: no longer counted.
  EXPECT_EQ(Be->hpView(T0 + 1 + 2 * Opts.StaleNs).HpWithoutMps, 0u);
}

TEST_F(SegmentTest, ConcurrentLaunchesHeartbeatsAndReaders) {
  // About consistency, not timing: a loaded machine may starve the
  // heartbeat thread for longer than the default 50 ms.
  Opts.StaleNs = 10'000 * Ms;
  std::unique_ptr<Segment> A = openOK(), B = openOK();
  ASSERT_TRUE(A && B);
  std::string Error;
  ASSERT_TRUE(A->join(SegPriority::High, monotonicNs(), Error)) << Error;
  ASSERT_TRUE(B->join(SegPriority::BestEffort, monotonicNs(), Error)) << Error;
  constexpr unsigned Threads = 4, PerThread = 100000;
  std::atomic<bool> Stop{false};
  std::atomic<unsigned> Bad{0}, Reads{0};

  std::thread Beat([&] {
    while (!Stop.load()) {
      bool Rejoined;
      if (!A->heartbeat(monotonicNs(), Rejoined) || Rejoined)
        ++Bad;
      if (!B->heartbeat(monotonicNs(), Rejoined) || Rejoined)
        ++Bad;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::thread Reader([&] {
    uint64_t Last = 0;
    while (!Stop.load()) {
      HpView V = B->hpView(monotonicNs());
      if (V.HpProcesses != 1 || V.BeProcesses != 1 || V.Arrivals < Last ||
          V.Arrivals > Threads * PerThread)
        ++Bad;
      Last = V.Arrivals;
      ++Reads;
    }
  });
  std::vector<std::vector<uint64_t>> Seqs(Threads);
  std::vector<std::thread> Launchers;
  for (unsigned T = 0; T < Threads; ++T)
    Launchers.emplace_back([&, T] {
      for (unsigned K = 0; K < PerThread; ++K) {
        uint64_t Seq = A->hpLaunch(monotonicNs());
        Seqs[T].push_back(Seq);
        if (K % 16 == 0)
          B->addPreemption();
        A->hpFinished(Seq);
      }
    });
  for (std::thread &L : Launchers)
    L.join();
  Stop.store(true);
  Beat.join();
  Reader.join();

  EXPECT_EQ(Bad.load(), 0u);
  EXPECT_GT(Reads.load(), 0u);
  std::set<uint64_t> All;
  for (const std::vector<uint64_t> &S : Seqs)
    All.insert(S.begin(), S.end());
  ASSERT_EQ(All.size(), size_t(Threads) * PerThread) << "a sequence repeated";
  EXPECT_EQ(*All.begin(), 1u);
  EXPECT_EQ(*All.rbegin(), uint64_t(Threads) * PerThread);
  HpView V = B->hpView(monotonicNs());
  EXPECT_EQ(V.Arrivals, uint64_t(Threads) * PerThread);
  EXPECT_FALSE(V.Active);
  EXPECT_GT(V.LastLaunchNs, 0u);
  std::optional<SlotInfo> I = findSlot(A->slots(), slotOf(*B));
  ASSERT_TRUE(I);
  EXPECT_EQ(I->Preemptions, uint64_t(Threads) * (PerThread / 16));
}

TEST_F(SegmentTest, RawImages) {
  std::unique_ptr<Segment> A = openOK();
  ASSERT_TRUE(A);
  std::string Error, Why;
  ASSERT_TRUE(A->join(SegPriority::High, T0, Error)) << Error;
  int ASlot = slotOf(*A);
  A->hpLaunch(T0 + 5);
  std::vector<unsigned char> Img = fileBytes();
  HpView Live = A->hpView(T0);

  // Aligned and misaligned copies give the same answers.
  for (size_t Shift : {0, 1, 3}) {
    std::vector<unsigned char> Buf(Img.size() + Shift);
    std::memcpy(Buf.data() + Shift, Img.data(), Img.size());
    EXPECT_TRUE(validateSegmentImage(Buf.data() + Shift, Img.size(), Why))
        << Why;
    HpView V = hpViewOfImage(Buf.data() + Shift, Img.size(), T0, Opts.StaleNs);
    EXPECT_EQ(V.HpProcesses, Live.HpProcesses);
    EXPECT_EQ(V.Active, Live.Active);
    EXPECT_EQ(V.Arrivals, Live.Arrivals);
    EXPECT_EQ(V.LastLaunchNs, T0 + 5);
  }

  // Short images: invalid, and only the whole slots in them are read.
  size_t Cut = seg::HeaderBytes + size_t(ASlot) * seg::SlotBytes;
  EXPECT_FALSE(validateSegmentImage(Img.data(), seg::TotalBytes - 1, Why));
  EXPECT_NE(Why.find("8255 bytes"), std::string::npos) << Why;
  EXPECT_EQ(hpViewOfImage(Img.data(), Cut + seg::SlotBytes, T0, Opts.StaleNs)
                .HpProcesses,
            1u);
  EXPECT_EQ(
      hpViewOfImage(Img.data(), Cut + seg::SlotBytes - 1, T0, Opts.StaleNs)
          .HpProcesses,
      0u);
  EXPECT_EQ(hpViewOfImage(Img.data(), 10, T0, Opts.StaleNs).HpProcesses, 0u);
  EXPECT_EQ(hpViewOfImage(nullptr, 0, T0, Opts.StaleNs).HpProcesses, 0u);
  EXPECT_FALSE(validateSegmentImage(nullptr, 0, Why));

  // Slots with a bad priority or Finished beyond Started.
  std::vector<unsigned char> Bad = Img;
  uint32_t Prio = 9;
  std::memcpy(&Bad[Cut + PriorityOff], &Prio, 4);
  EXPECT_FALSE(validateSegmentImage(Bad.data(), Bad.size(), Why));
  EXPECT_EQ(Why, "slot " + std::to_string(ASlot) + ": priority 9");
  EXPECT_EQ(hpViewOfImage(Bad.data(), Bad.size(), T0, Opts.StaleNs).HpProcesses,
            0u);
  Bad = Img;
  uint64_t Finished = 99;
  std::memcpy(&Bad[Cut + 48], &Finished, 8);
  EXPECT_TRUE(validateSegmentImage(Bad.data(), Bad.size(), Why)) << Why;
  HpView V = hpViewOfImage(Bad.data(), Bad.size(), T0, Opts.StaleNs);
  EXPECT_EQ(V.HpProcesses, 1u);
  EXPECT_FALSE(V.Active);
  Bad = Img;
  Bad[0] ^= 1;
  EXPECT_FALSE(validateSegmentImage(Bad.data(), Bad.size(), Why));
  EXPECT_EQ(Why, "bad magic");
  EXPECT_EQ(hpViewOfImage(Bad.data(), Bad.size(), T0, Opts.StaleNs).HpProcesses,
            0u);
}

TEST(SegmentClock, MonotonicNs) {
  uint64_t A = monotonicNs();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  uint64_t B = monotonicNs();
  EXPECT_GT(A, 0u);
  EXPECT_GE(B - A, 2 * Ms);
  struct timespec T;
  clock_gettime(CLOCK_MONOTONIC, &T);
  uint64_t C = uint64_t(T.tv_sec) * 1'000'000'000u + uint64_t(T.tv_nsec);
  EXPECT_LE(B, C);
  EXPECT_LT(C - B, 1000 * Ms);
}

} // namespace
