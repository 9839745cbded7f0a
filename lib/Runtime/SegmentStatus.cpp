//===- SegmentStatus.cpp - `tally status`: who shares the GPU -------------===//
//
// Each segment file is read with read(2) into a buffer (a snapshot; nothing
// is mapped, locked or written) and parsed by slotsOfImage, the runtime's
// own bounds-checked reader.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/SegmentStatus.h"

#include "tally/Runtime/Json.h"
#include "tally/Runtime/Segment.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tally::rt {
namespace {

std::string fmt(const char *F, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char *F, ...) {
  char Buf[512];
  va_list A;
  va_start(A, F);
  vsnprintf(Buf, sizeof Buf, F, A);
  va_end(A);
  return Buf;
}

/// A file name as printed: printable ASCII kept, anything else '?' (any
/// user may create a file of that name in a shared folder).
std::string printable(const std::string &S) {
  std::string Out;
  for (char C : S)
    Out += C >= 0x20 && C < 0x7f ? C : '?';
  return Out;
}

/// /proc/<pid>/comm without its newline; "" when unreadable. Only printable
/// ASCII is kept (a command name is chosen by the process).
std::string commandOf(uint32_t Pid) {
  if (Pid == 0)
    return "";
  std::string Path = "/proc/" + std::to_string(Pid) + "/comm";
  int Fd = ::open(Path.c_str(), O_RDONLY | O_CLOEXEC);
  if (Fd < 0)
    return "";
  char Buf[64];
  ssize_t N;
  do
    N = ::read(Fd, Buf, sizeof Buf);
  while (N < 0 && errno == EINTR);
  ::close(Fd);
  std::string Out;
  for (ssize_t I = 0; I < N && Buf[I] != '\n'; ++I)
    Out += Buf[I] >= 0x20 && Buf[I] < 0x7f ? Buf[I] : '?';
  return Out;
}

/// Milliseconds from \p Then to \p Now; negative when \p Then is later by
/// more than a millisecond (less is a write made while the file was read:
/// 0).
double agoMs(uint64_t Then, uint64_t Now) {
  if (Then <= Now)
    return double(Now - Then) / 1e6;
  return Then - Now <= 1'000'000 ? 0.0 : -double(Then - Now) / 1e6;
}


std::string agoText(double Ms) {
  if (Ms < 0)
    return fmt("%.1f ms in the future", -Ms);
  if (Ms >= 10'000)
    return fmt("%.0f s ago", Ms / 1000);
  return fmt("%.1f ms ago", Ms);
}

/// What the pid says of a slot's process: running (same start time),
/// "not found" (exited, or in another pid namespace: a container sharing
/// /dev/shm), "pid reused", or "running" with an unknown start time.
const char *processState(const SlotInfo &S) {
  uint64_t Now = processStartTimeOf(S.Pid);
  if (Now == 0)
    return "not found";
  if (S.StartTime != 0 && Now != S.StartTime)
    return "pid reused";
  return "running";
}

struct FileResult {
  std::string Path, Gpu, Error;
  std::vector<SlotInfo> Slots;
  /// CLOCK_MONOTONIC right after the file was read.
  uint64_t ReadNs = 0;
};

/// Reads one segment file without following links or blocking; Error set
/// when it is not one.
FileResult readSegment(const std::string &Path, uint32_t Uid) {
  FileResult R;
  R.Path = Path;
  int Fd = ::open(Path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (Fd < 0) {
    R.Error = fmt("cannot open: %s", std::strerror(errno));
    return R;
  }
  struct stat St;
  if (fstat(Fd, &St) != 0) {
    R.Error = fmt("cannot stat: %s", std::strerror(errno));
  } else if (!S_ISREG(St.st_mode)) {
    R.Error = "not a regular file";
  } else if (St.st_uid != Uid) {
    R.Error = fmt("owned by uid %u, not %u", unsigned(St.st_uid), unsigned(Uid));
  } else {
    std::vector<unsigned char> Buf(static_cast<size_t>(seg::TotalBytes));
    size_t Len = 0;
    while (Len < Buf.size()) {
      ssize_t N = ::read(Fd, Buf.data() + Len, Buf.size() - Len);
      if (N < 0 && errno == EINTR)
        continue;
      if (N < 0) {
        R.Error = fmt("cannot read: %s", std::strerror(errno));
        break;
      }
      if (N == 0)
        break;
      Len += size_t(N);
    }
    R.ReadNs = monotonicNs();
    std::string Why;
    if (R.Error.empty() && !slotsOfImage(Buf.data(), Len, R.Slots, Why))
      R.Error = "not a Tally segment of version " + std::to_string(seg::Version) + ": " + Why;
  }
  ::close(Fd);
  return R;
}

/// One slot, read once from /proc and the clock, for both forms.
struct SlotView {
  const SlotInfo &S;
  uint64_t Now;
  double Age;             ///< heartbeat age, ms
  bool Counted;           ///< what the runtime counts: a valid priority, a fresh heartbeat
  std::string Cmd;        ///< /proc/<pid>/comm, "" if unknown
  const char *Proc;       ///< processState
  uint64_t Unreported;    ///< an HP slot's launches not yet reported finished
  bool WaitKnown;
  SlotView(const SlotInfo &S, uint64_t Now, uint64_t StaleNs)
      : S(S), Now(Now), Age(agoMs(S.HeartbeatNs, Now)),
        Counted(S.Prio <= SegPriority::BestEffort && heartbeatFresh(S.HeartbeatNs, Now, StaleNs)),
        Cmd(commandOf(S.Pid)), Proc(processState(S)),
        Unreported(S.Started > S.Finished ? S.Started - S.Finished : 0),
        WaitKnown((S.Flags & seg::FlagWaitShare) && S.WaitShare >= 1 && S.WaitShare <= 1001) {}
  bool hp() const { return S.Prio == SegPriority::High; }
  bool be() const { return S.Prio == SegPriority::BestEffort; }
};

std::string slotText(const SlotView &V) {
  const SlotInfo &S = V.S;
  if (S.State != seg::StateLive)
    return fmt("  slot %u: being claimed or freed (pid %u)\n", S.Index, unsigned(S.Pid));
  std::string L = fmt("  slot %u: pid %u", S.Index, unsigned(S.Pid));
  if (!V.Cmd.empty())
    L += " (" + V.Cmd + ")";
  if (!V.hp() && !V.be())
    return L + fmt(", priority %u: invalid, not counted by the runtime (the next heartbeat of any "
                   "process frees the slot)\n",
                   unsigned(S.Prio));
  L += V.hp() ? ", high priority" : ", best effort";
  L += ", heartbeat " + agoText(V.Age);
  if (!V.Counted && V.Age < 0)
    L += ": invalid, not counted by the runtime";
  else if (!V.Counted)
    L += std::string(": stale, not counted by the runtime (process ") + V.Proc +
         "; the slot is freed at the next heartbeat of any process)";
  else if (std::strcmp(V.Proc, "running") != 0)
    L += std::string(" (process ") + V.Proc + ": in another pid namespace?)";
  if (V.hp()) {
    // Started is the last launch's number (it jumps after a re-join), and
    // Finished the highest one reported finished (bursts report late).
    L += fmt("; launch number %" PRIu64 ", %" PRIu64 " not yet reported finished", S.Started,
             V.Unreported);
    if (S.LastLaunchNs)
      L += ", the last " + agoText(agoMs(S.LastLaunchNs, V.Now));
    if (V.WaitKnown)
      L += fmt("; waits for the GPU %.1f %% of its requests' time", (S.WaitShare - 1) / 10.0);
    if (S.Flags & seg::FlagNoMps)
      L += "; not an MPS client (BE's MPS rules are off while it is here)";
  } else {
    L += fmt("; %" PRIu64 " preemption%s", S.Preemptions, S.Preemptions == 1 ? "" : "s");
  }
  return L + "\n";
}

std::string slotJson(const SlotView &V) {
  const SlotInfo &S = V.S;
  std::string J = fmt("{\"slot\": %u, \"state\": \"%s\", \"pid\": %u", S.Index,
                      S.State == seg::StateLive ? "live" : "claiming", unsigned(S.Pid));
  if (S.State != seg::StateLive)
    return J + "}";
  J += ", \"command\": " + jsonString(V.Cmd);
  J += fmt(", \"priority\": \"%s\"", V.hp() ? "high" : V.be() ? "best-effort" : "invalid");
  J += fmt(", \"heartbeat_age_ms\": %.3f, \"stale\": %s, \"process\": \"%s\"", V.Age,
           V.Counted ? "false" : "true", V.Proc);
  if (V.hp()) {
    J += fmt(", \"launch_number\": %" PRIu64 ", \"unreported\": %" PRIu64, S.Started, V.Unreported);
    J += S.LastLaunchNs ? fmt(", \"last_launch_age_ms\": %.3f", agoMs(S.LastLaunchNs, V.Now))
                        : std::string(", \"last_launch_age_ms\": null");
    J += V.WaitKnown ? fmt(", \"wait_share_percent\": %.1f", (S.WaitShare - 1) / 10.0)
                     : std::string(", \"wait_share_percent\": null");
    J += fmt(", \"mps_client\": %s", S.Flags & seg::FlagNoMps ? "false" : "true");
  } else if (V.be()) {
    J += fmt(", \"preemptions\": %" PRIu64, S.Preemptions);
  }
  return J + "}";
}

} // namespace

StatusReport segmentStatus(const StatusOptions &O) {
  StatusReport R;
  const std::string Prefix = "tally-" + std::to_string(O.Uid) + "-";
  const std::string Uid = std::to_string(O.Uid);
  std::vector<std::string> Names;
  DIR *D = opendir(O.Dir.c_str());
  if (!D) {
    const std::string Why = std::string("cannot read the folder: ") + std::strerror(errno);
    R.Problems = 1;
    R.Errors = printable(O.Dir) + ": " + Why + "\n";
    if (O.Json)
      R.Out = "{\"dir\": " + jsonString(O.Dir) + ", \"uid\": " + Uid +
              ", \"segments\": [], \"errors\": [{\"file\": " + jsonString(O.Dir) +
              ", \"error\": " + jsonString(Why) + "}]}\n";
    return R;
  }
  while (dirent *E = readdir(D)) {
    std::string N = E->d_name;
    if (N.size() > Prefix.size() && N.compare(0, Prefix.size(), Prefix) == 0 &&
        (O.Gpu.empty() || N.find(O.Gpu, Prefix.size()) != std::string::npos))
      Names.push_back(N);
  }
  closedir(D);
  std::sort(Names.begin(), Names.end());
  std::string Text, Json = "{\"dir\": " + jsonString(O.Dir) + ", \"uid\": " + Uid + ", \"segments\": [";
  std::string JsonErrors;
  for (const std::string &N : Names) {
    FileResult F = readSegment(O.Dir + "/" + N, O.Uid);
    F.Gpu = N.substr(Prefix.size());
    if (!F.Error.empty()) {
      ++R.Problems;
      R.Errors += printable(F.Path) + ": " + F.Error + "\n";
      JsonErrors += std::string(JsonErrors.empty() ? "" : ", ") + "{\"file\": " + jsonString(F.Path) +
                    ", \"error\": " + jsonString(F.Error) + "}";
      continue;
    }
    // Aged against the clock right after this file's read (or the given
    // one): a heartbeat written meanwhile is not "in the future".
    const uint64_t Now = O.NowNs ? O.NowNs : F.ReadNs;
    std::vector<SlotView> Views;
    for (const SlotInfo &S : F.Slots)
      Views.emplace_back(S, Now, O.StaleNs);
    unsigned Live = 0, Hp = 0, Be = 0, NotCounted = 0;
    bool Active = false;
    uint64_t LastLaunch = 0;
    for (const SlotView &V : Views) {
      if (V.S.State != seg::StateLive)
        continue;
      if (!V.Counted) {
        ++NotCounted;
        continue;
      }
      ++Live;
      if (V.hp()) {
        ++Hp;
        Active |= V.Unreported > 0;
        LastLaunch = std::max(LastLaunch, V.S.LastLaunchNs);
      } else {
        ++Be;
      }
    }
    std::string Head = "GPU " + printable(F.Gpu) + " (" + printable(F.Path) + "): " +
                       std::to_string(Live) + (Live == 1 ? " process" : " processes");
    if (Live)
      Head += fmt(" (%u high priority, %u best effort)", Hp, Be);
    if (NotCounted)
      Head += fmt(", %u stale or invalid slot%s", NotCounted, NotCounted == 1 ? "" : "s");
    if (Hp)
      Head += Active ? "; HP active now (launches not yet reported finished)"
                     : (LastLaunch ? "; HP idle, its last launch " + agoText(agoMs(LastLaunch, Now))
                                   : std::string("; HP idle, no launch yet"));
    Text += Head + "\n";
    Json += std::string(R.Segments ? ", " : "") + "{\"gpu\": " + jsonString(F.Gpu) +
            ", \"file\": " + jsonString(F.Path) +
            fmt(", \"processes\": %u, \"high_priority\": %u, \"best_effort\": %u, "
                "\"not_counted\": %u, \"hp_active\": %s, \"slots\": [",
                Live, Hp, Be, NotCounted, Active ? "true" : "false");
    for (size_t I = 0; I < Views.size(); ++I) {
      Text += slotText(Views[I]);
      Json += std::string(I ? ", " : "") + slotJson(Views[I]);
    }
    Json += "]}";
    ++R.Segments;
  }
  Json += "], \"errors\": [" + JsonErrors + "]}\n";
  if (!R.Segments && !R.Problems)
    Text = "no Tally segment for uid " + Uid + " in " + printable(O.Dir) +
           " (no process has run under `tally run` there since it was last cleared)\n";
  R.Out = O.Json ? Json : Text;
  return R;
}

} // namespace tally::rt
