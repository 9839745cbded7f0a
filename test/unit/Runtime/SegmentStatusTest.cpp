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

#include <cctype>
#include <cstring>
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

/// A small strict JSON checker (RFC 8259's grammar; strings' UTF-8 not
/// checked): the whole text is one value, then a newline.
class JsonCheck {
public:
  explicit JsonCheck(const std::string &T) : T(T) {}
  bool ok() {
    ws();
    if (!value())
      return false;
    ws();
    return I == T.size();
  }

private:
  void ws() {
    while (I < T.size() && std::strchr(" \t\r\n", T[I]))
      ++I;
  }
  bool lit(const char *W) {
    size_t N = std::strlen(W);
    if (T.compare(I, N, W) != 0)
      return false;
    I += N;
    return true;
  }
  bool str() {
    if (I >= T.size() || T[I] != '"')
      return false;
    for (++I; I < T.size(); ++I) {
      unsigned char C = T[I];
      if (C == '"') {
        ++I;
        return true;
      }
      if (C < 0x20)
        return false;
      if (C == '\\') {
        if (++I >= T.size())
          return false;
        if (T[I] == 'u') {
          for (int K = 0; K < 4; ++K)
            if (++I >= T.size() || !std::isxdigit(static_cast<unsigned char>(T[I])))
              return false;
        } else if (!std::strchr("\"\\/bfnrt", T[I])) {
          return false;
        }
      }
    }
    return false;
  }
  bool num() {
    size_t B = I;
    if (I < T.size() && T[I] == '-')
      ++I;
    if (I >= T.size() || !std::isdigit(static_cast<unsigned char>(T[I])))
      return false;
    if (T[I] == '0')
      ++I;
    else
      while (I < T.size() && std::isdigit(static_cast<unsigned char>(T[I])))
        ++I;
    if (I < T.size() && T[I] == '.') {
      ++I;
      if (I >= T.size() || !std::isdigit(static_cast<unsigned char>(T[I])))
        return false;
      while (I < T.size() && std::isdigit(static_cast<unsigned char>(T[I])))
        ++I;
    }
    return I > B;
  }
  bool value() {
    if (I >= T.size())
      return false;
    char C = T[I];
    if (C == '{' || C == '[') {
      const char Close = C == '{' ? '}' : ']';
      ++I;
      ws();
      if (I < T.size() && T[I] == Close) {
        ++I;
        return true;
      }
      while (true) {
        ws();
        if (C == '{') {
          if (!str())
            return false;
          ws();
          if (I >= T.size() || T[I++] != ':')
            return false;
          ws();
        }
        if (!value())
          return false;
        ws();
        if (I < T.size() && T[I] == ',') {
          ++I;
          continue;
        }
        if (I < T.size() && T[I] == Close) {
          ++I;
          return true;
        }
        return false;
      }
    }
    if (C == '"')
      return str();
    if (lit("true") || lit("false") || lit("null"))
      return true;
    return num();
  }
  const std::string &T;
  size_t I = 0;
};

bool validJson(const std::string &T) { return JsonCheck(T).ok(); }

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
                             "(launches not yet reported finished)\n"))
      << R.Out;
  EXPECT_TRUE(has(R.Out, ": " + self() + ", high priority, heartbeat 5.0 ms ago; launch number "
                                         "3, 1 not yet reported finished, the last 4.0 ms ago; "
                                         "waits for the GPU 35.0 % of its requests' time; not an "
                                         "MPS client"))
      << R.Out;
  EXPECT_TRUE(has(R.Out, ": " + self() + ", best effort, heartbeat 5.0 ms ago; 2 preemptions\n"))
      << R.Out;
  EXPECT_FALSE(has(R.Out, "stale")) << R.Out;

  R = status(T + 5 * Ms, /*Json=*/true);
  EXPECT_TRUE(validJson(R.Out)) << R.Out;
  EXPECT_TRUE(has(R.Out, "\"processes\": 2, \"high_priority\": 1, \"best_effort\": 1, "
                         "\"not_counted\": 0, \"hp_active\": true"))
      << R.Out;
  EXPECT_TRUE(has(R.Out, "\"priority\": \"high\", \"heartbeat_age_ms\": 5.000, \"stale\": false, "
                         "\"process\": \"running\", \"launch_number\": 3, \"unreported\": 1, "
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
  EXPECT_TRUE(has(R.Out, "launch number 3, 0 not yet reported finished")) << R.Out;

  // A second later nobody has beaten: both stale, none counted.
  R = status(T + 1000 * Ms);
  EXPECT_TRUE(has(R.Out, "): 0 processes, 2 stale or invalid slots\n")) << R.Out;
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
  // Aged against the child's own heartbeat (a loaded machine may take
  // longer than the stale limit between its join and this read).
  uint64_t Beat = 0;
  for (const SlotInfo &S : Mine->slots())
    if (S.Pid == uint32_t(Child))
      Beat = S.HeartbeatNs;
  ASSERT_NE(Beat, 0u) << "the child's slot is not there";
  StatusReport R = status(Beat + 1 * Ms);
  EXPECT_TRUE(has(R.Out, Who)) << R.Out;
  EXPECT_TRUE(has(R.Out, "(process not found: in another pid namespace?)")) << R.Out;
  R = status(Beat + 100 * Ms);
  EXPECT_TRUE(has(R.Out, ": stale, not counted by the runtime (process not found; the slot is "
                         "freed at the next heartbeat of any process)"))
      << R.Out;
  R = status(Beat + 100 * Ms, /*Json=*/true);
  EXPECT_TRUE(validJson(R.Out)) << R.Out;
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
  EXPECT_TRUE(validJson(R.Out)) << R.Out;
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

TEST_F(SegmentStatusTest, TheJsonCheckerRejectsWhatIsNotJson) {
  EXPECT_TRUE(validJson("{\"a\": [1, -2.5, true, null, \"x\\u0041\"], \"b\": {}}\n"));
  for (const char *Bad : {"", "{", "{\"a\": }", "[1,]", "{\"a\" 1}", "[01]", "\"\x01\"",
                          "[1] [2]", "{\"a\": 1.}", "[\"\\x\"]", "nul"})
    EXPECT_FALSE(validJson(Bad)) << Bad;
}

TEST_F(SegmentStatusTest, AnInvalidPriorityIsNotCounted) {
  std::unique_ptr<Segment> Hp = open("GPU-test");
  ASSERT_TRUE(Hp);
  std::string Error;
  const uint64_t T = monotonicNs();
  ASSERT_TRUE(Hp->join(SegPriority::High, T, Error)) << Error;
  int Fd = ::open(file("GPU-test").c_str(), O_WRONLY);
  ASSERT_GE(Fd, 0);
  uint32_t Seven = 7;
  ASSERT_EQ(pwrite(Fd, &Seven, 4, off_t(seg::HeaderBytes + 4)), 4); // slot 0's priority
  ::close(Fd);
  StatusReport R = status(T + 1 * Ms);
  EXPECT_TRUE(has(R.Out, "): 0 processes, 1 stale or invalid slot\n")) << R.Out;
  EXPECT_TRUE(has(R.Out, "  slot 0: " + self() + ", priority 7: invalid, not counted by the "
                         "runtime (the next heartbeat of any process frees the slot)\n"))
      << R.Out;
  R = status(T + 1 * Ms, /*Json=*/true);
  EXPECT_TRUE(validJson(R.Out)) << R.Out;
  EXPECT_TRUE(has(R.Out, "\"priority\": \"invalid\"")) << R.Out;
  EXPECT_TRUE(has(R.Out, "\"not_counted\": 1")) << R.Out;
}

TEST_F(SegmentStatusTest, OddNamesArePrintedSafely) {
  // Any user may name a file so in a shared folder: escapes and a newline
  // in it must not reach the terminal or split the error's line.
  const std::string Odd = file("GPU-\x1b[31m\nred");
  {
    std::ofstream F(Odd, std::ios::binary);
    F << "x";
  }
  StatusReport R = status(monotonicNs());
  EXPECT_EQ(R.Problems, 1u);
  EXPECT_EQ(R.Errors, file("GPU-?[31m?red") +
                          ": not a Tally segment of version 1: too short for a header (1 bytes)\n");
  R = status(monotonicNs(), /*Json=*/true);
  EXPECT_TRUE(validJson(R.Out)) << R.Out;
  EXPECT_TRUE(has(R.Out, "GPU-\\u001b[31m\\nred") || has(R.Out, "GPU-\\u001b[31m\\u000ared"))
      << R.Out;
  // A folder named in UTF-8 stays UTF-8 in the JSON.
  const std::string Utf = Dir + "/caf\xc3\xa9";
  ASSERT_EQ(mkdir(Utf.c_str(), 0700), 0);
  StatusOptions O;
  O.Dir = Utf;
  O.Uid = uint32_t(geteuid());
  O.Json = true;
  R = segmentStatus(O);
  EXPECT_TRUE(validJson(R.Out)) << R.Out;
  EXPECT_TRUE(has(R.Out, "\"dir\": \"" + Utf + "\"")) << R.Out;
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
  EXPECT_TRUE(validJson(R.Out)) << R.Out;
  EXPECT_TRUE(has(R.Out, "{\"slot\": 5, \"state\": \"claiming\", \"pid\": 4242}")) << R.Out;

  if (geteuid() != 0)
    GTEST_SKIP() << "changing a file's owner needs root";
  ASSERT_EQ(chown(file("GPU-test").c_str(), 12345, 12345), 0);
  R = status(monotonicNs());
  EXPECT_EQ(R.Errors, file("GPU-test") + ": owned by uid 12345, not 0\n");
}

} // namespace
