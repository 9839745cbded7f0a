//===- SegmentStatusTest.cpp - `tally status` on real segments -------------===//
//
// Segments made by the runtime's own Segment class in a temporary folder
// (several Segment objects stand for several processes; a forked child for
// one that exits without leaving), read back by segmentStatus as `tally
// status` does.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/Segment.h"
#include "tally/Runtime/SegmentStatus.h"

#include "gtest/gtest.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tally::rt;

namespace {

constexpr uint64_t Ms = 1'000'000;

class SegmentStatusTest : public ::testing::Test {
protected:
  void SetUp() override {
    char Tmpl[] = "/tmp/tally-statustest-XXXXXX";
    ASSERT_NE(mkdtemp(Tmpl), nullptr);
    Dir = Tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(Dir); }

  std::unique_ptr<Segment> open(const std::string &Key) {
    SegmentOptions O;
    O.Dir = Dir;
    O.Key = Key;
    std::string Warning, Error;
    std::unique_ptr<Segment> S = Segment::open(O, Warning, Error);
    EXPECT_TRUE(S) << Error;
    return S;
  }
  std::string file(const std::string &Key) const {
    return Dir + "/tally-" + std::to_string(geteuid()) + "-" + Key;
  }
  StatusReport status(uint64_t NowNs, bool Json = false, const std::string &Gpu = "") const {
    StatusOptions O;
    O.Dir = Dir;
    O.Uid = uint32_t(geteuid());
    O.NowNs = NowNs;
    O.Json = Json;
    O.Gpu = Gpu;
    return segmentStatus(O);
  }
  static std::string self() {
    std::ifstream F("/proc/self/comm");
    std::string C;
    std::getline(F, C);
    return "pid " + std::to_string(getpid()) + " (" + C + ")";
  }

  std::string Dir;
};

bool has(const std::string &Hay, const std::string &Needle) {
  return Hay.find(Needle) != std::string::npos;
}

TEST_F(SegmentStatusTest, NoSegmentIsNoProblem) {
  StatusReport R = status(monotonicNs());
  EXPECT_EQ(R.Segments, 0u);
  EXPECT_EQ(R.Problems, 0u);
  EXPECT_TRUE(has(R.Out, "no Tally segment for uid " + std::to_string(geteuid()) + " in " + Dir))
      << R.Out;
  R = status(monotonicNs(), /*Json=*/true);
  EXPECT_EQ(R.Out, "{\"dir\": \"" + Dir + "\", \"uid\": " + std::to_string(geteuid()) +
                       ", \"segments\": [], \"errors\": []}\n");
}

TEST_F(SegmentStatusTest, AnUnreadableFolderIsAProblem) {
  StatusOptions O;
  O.Dir = Dir + "/missing";
  O.NowNs = monotonicNs();
  StatusReport R = segmentStatus(O);
  EXPECT_EQ(R.Problems, 1u);
  EXPECT_EQ(R.Errors, Dir + "/missing: cannot read the folder: No such file or directory\n");
}

TEST_F(SegmentStatusTest, LiveHpAndBeProcesses) {
  std::unique_ptr<Segment> Hp = open("GPU-test"), Be = open("GPU-test");
  ASSERT_TRUE(Hp && Be);
  std::string Error;
  const uint64_t T = monotonicNs();
  ASSERT_TRUE(Hp->join(SegPriority::High, T, Error)) << Error;
  ASSERT_TRUE(Be->join(SegPriority::BestEffort, T, Error)) << Error;
  Hp->setFlags(seg::FlagNoMps);
  Hp->setWaitShare(350);
  for (int I = 0; I < 3; ++I)
    Hp->hpLaunch(T + 1 * Ms);
  Hp->hpFinished(2);
  Be->addPreemption();
  Be->addPreemption();

  StatusReport R = status(T + 5 * Ms);
  EXPECT_EQ(R.Segments, 1u);
  EXPECT_EQ(R.Problems, 0u);
  EXPECT_TRUE(has(R.Out, "GPU GPU-test (" + file("GPU-test") +
                             "): 2 processes (1 high priority, 1 best effort); HP active now "
                             "(launches in flight)\n"))
      << R.Out;
  EXPECT_TRUE(has(R.Out, ": " + self() + ", high priority, heartbeat 5.0 ms ago; 3 launches, 1 in "
                                         "flight, the last 4.0 ms ago; waits for the GPU 35.0 % "
                                         "of its requests' time; not an MPS client"))
      << R.Out;
  EXPECT_TRUE(has(R.Out, ": " + self() + ", best effort, heartbeat 5.0 ms ago; 2 preemptions\n"))
      << R.Out;
  EXPECT_FALSE(has(R.Out, "stale")) << R.Out;

  R = status(T + 5 * Ms, /*Json=*/true);
  EXPECT_TRUE(has(R.Out, "\"processes\": 2, \"high_priority\": 1, \"best_effort\": 1, \"stale\": "
                         "0, \"hp_active\": true"))
      << R.Out;
  EXPECT_TRUE(has(R.Out, "\"priority\": \"high\", \"heartbeat_age_ms\": 5.000, \"stale\": false, "
                         "\"process\": \"running\", \"launches\": 3, \"in_flight\": 1, "
                         "\"last_launch_age_ms\": 4.000, \"wait_share_percent\": 35.0, "
                         "\"mps_client\": false}"))
      << R.Out;
  EXPECT_TRUE(has(R.Out, "\"priority\": \"best-effort\", \"heartbeat_age_ms\": 5.000, \"stale\": "
                         "false, \"process\": \"running\", \"preemptions\": 2}"))
      << R.Out;

  // Everything finished: idle, with the last launch's age.
  Hp->hpFinished(3);
  R = status(T + 5 * Ms);
  EXPECT_TRUE(has(R.Out, "; HP idle, its last launch 4.0 ms ago\n")) << R.Out;
  EXPECT_TRUE(has(R.Out, "3 launches, 0 in flight")) << R.Out;

  // A second later nobody has beaten: both stale, none counted.
  R = status(T + 1000 * Ms);
  EXPECT_TRUE(has(R.Out, "): 0 processes, 2 stale slots\n")) << R.Out;
  EXPECT_TRUE(has(R.Out, "heartbeat 1000.0 ms ago: stale, not counted by the runtime (process "
                         "running; the slot is freed at the next heartbeat of any process)"))
      << R.Out;
  // Gone when they leave.
  Hp->leave();
  Be->leave();
  R = status(T + 5 * Ms);
  EXPECT_TRUE(has(R.Out, "): 0 processes\n")) << R.Out;
}

TEST_F(SegmentStatusTest, AProcessThatExitedWithoutLeaving) {
  std::unique_ptr<Segment> Mine = open("GPU-test");
  ASSERT_TRUE(Mine);
  pid_t Child = fork();
  ASSERT_GE(Child, 0);
  if (Child == 0) {
    SegmentOptions O;
    O.Dir = Dir;
    O.Key = "GPU-test";
    std::string Warning, Error;
    std::unique_ptr<Segment> S = Segment::open(O, Warning, Error);
    bool Ok = S && S->join(SegPriority::BestEffort, monotonicNs(), Error);
    _exit(Ok ? 0 : 1); // no destructor: the slot stays, as after kill -9
  }
  int St = 0;
  ASSERT_EQ(waitpid(Child, &St, 0), Child);
  ASSERT_TRUE(WIFEXITED(St) && WEXITSTATUS(St) == 0);
  const std::string Who = "pid " + std::to_string(Child) + ", best effort";
  StatusReport R = status(monotonicNs());
  EXPECT_TRUE(has(R.Out, Who)) << R.Out;
  EXPECT_TRUE(has(R.Out, "(process not found: in another pid namespace?)")) << R.Out;
  R = status(monotonicNs() + 100 * Ms);
  EXPECT_TRUE(has(R.Out, ": stale, not counted by the runtime (process not found; the slot is "
                         "freed at the next heartbeat of any process)"))
      << R.Out;
  R = status(monotonicNs() + 100 * Ms, /*Json=*/true);
  EXPECT_TRUE(has(R.Out, "\"pid\": " + std::to_string(Child) + ", \"command\": \"\"")) << R.Out;
  EXPECT_TRUE(has(R.Out, "\"stale\": true, \"process\": \"not found\"")) << R.Out;
}

TEST_F(SegmentStatusTest, BadFilesAreProblemsAndTheRestIsStillShown) {
  std::unique_ptr<Segment> Good = open("GPU-good");
  ASSERT_TRUE(Good);
  std::string Error;
  ASSERT_TRUE(Good->join(SegPriority::High, monotonicNs(), Error)) << Error;
  {
    std::ofstream F(file("GPU-bad"), std::ios::binary);
    F << std::string(size_t(seg::TotalBytes), 'x');
  }
  {
    std::ofstream F(file("GPU-short"), std::ios::binary);
    F << "TALLY";
  }
  ASSERT_EQ(symlink(file("GPU-good").c_str(), file("GPU-link").c_str()), 0);
  StatusReport R = status(monotonicNs());
  EXPECT_EQ(R.Segments, 1u);
  EXPECT_EQ(R.Problems, 3u);
  EXPECT_TRUE(has(R.Out, "GPU GPU-good (")) << R.Out;
  EXPECT_EQ(R.Errors, file("GPU-bad") + ": not a Tally segment of version 1: bad magic\n" +
                          file("GPU-link") + ": cannot open: Too many levels of symbolic links\n" +
                          file("GPU-short") +
                          ": not a Tally segment of version 1: too short for a header (5 bytes)\n");
  R = status(monotonicNs(), /*Json=*/true);
  EXPECT_TRUE(has(R.Out, "\"errors\": [{\"file\": \"" + file("GPU-bad") +
                             "\", \"error\": \"not a Tally segment of version 1: bad magic\"}"))
      << R.Out;

  // --gpu picks segments by their GPU's name.
  R = status(monotonicNs(), false, "good");
  EXPECT_EQ(R.Problems, 0u);
  EXPECT_EQ(R.Segments, 1u);
  R = status(monotonicNs(), false, "nothing-like-it");
  EXPECT_EQ(R.Segments + R.Problems, 0u);
  EXPECT_TRUE(has(R.Out, "no Tally segment")) << R.Out;
}

TEST_F(SegmentStatusTest, ASlotBeingClaimedAndAnotherUsersFile) {
  std::unique_ptr<Segment> S = open("GPU-test");
  ASSERT_TRUE(S);
  // Slot 5's state word set to "claiming", as a process between its claim
  // and its first heartbeat leaves it.
  int Fd = ::open(file("GPU-test").c_str(), O_WRONLY);
  ASSERT_GE(Fd, 0);
  uint32_t Claiming = seg::StateClaiming, Pid = 4242;
  ASSERT_EQ(pwrite(Fd, &Claiming, 4, off_t(seg::HeaderBytes + 5 * seg::SlotBytes)), 4);
  ASSERT_EQ(pwrite(Fd, &Pid, 4, off_t(seg::HeaderBytes + 5 * seg::SlotBytes + 8)), 4);
  ::close(Fd);
  StatusReport R = status(monotonicNs());
  EXPECT_TRUE(has(R.Out, "  slot 5: being claimed or freed (pid 4242)\n")) << R.Out;
  R = status(monotonicNs(), true);
  EXPECT_TRUE(has(R.Out, "{\"slot\": 5, \"state\": \"claiming\", \"pid\": 4242}")) << R.Out;

  if (geteuid() != 0)
    GTEST_SKIP() << "changing a file's owner needs root";
  ASSERT_EQ(chown(file("GPU-test").c_str(), 12345, 12345), 0);
  R = status(monotonicNs());
  EXPECT_EQ(R.Errors, file("GPU-test") + ": owned by uid 12345, not 0\n");
}

} // namespace
