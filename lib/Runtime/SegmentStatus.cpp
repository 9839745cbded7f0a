//===- SegmentStatus.cpp - `tally status`: who shares the GPU -------------===//
//
// Each segment file is read with read(2) into a buffer (a snapshot; nothing
// is mapped, locked or written) and parsed by slotsOfImage, the runtime's
// own bounds-checked reader.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/SegmentStatus.h"

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

std::string jsonString(const std::string &S) {
  std::string Out = "\"";
  for (unsigned char C : S) {
    if (C == '"' || C == '\\')
      Out += {'\\', char(C)};
    else if (C < 0x20 || C >= 0x7f)
      Out += fmt("\\u%04x", C);
    else
      Out += char(C);
  }
  return Out + "\"";
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

/// Milliseconds from \p Then to \p Now; negative when \p Then is later.
double agoMs(uint64_t Then, uint64_t Now) {
  return Then <= Now ? double(Now - Then) / 1e6 : -double(Then - Now) / 1e6;
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
    std::vector<unsigned char> Buf(size_t(seg::TotalBytes));
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
    std::string Why;
    if (R.Error.empty() && !slotsOfImage(Buf.data(), Len, R.Slots, Why))
      R.Error = "not a Tally segment of version " + std::to_string(seg::Version) + ": " + Why;
  }
  ::close(Fd);
  return R;
}

std::string slotText(const SlotInfo &S, const StatusOptions &O) {
  if (S.State != seg::StateLive)
    return fmt("  slot %u: being claimed or freed (pid %u)\n", S.Index, unsigned(S.Pid));
  std::string Cmd = commandOf(S.Pid);
  const bool Hp = S.Prio == SegPriority::High;
  const bool Be = S.Prio == SegPriority::BestEffort;
  std::string L = fmt("  slot %u: pid %u", S.Index, unsigned(S.Pid));
  if (!Cmd.empty())
    L += " (" + Cmd + ")";
  L += Hp ? ", high priority" : Be ? ", best effort" : fmt(", priority %u (invalid)", unsigned(S.Prio));
  const double Age = agoMs(S.HeartbeatNs, O.NowNs);
  L += ", heartbeat " + agoText(Age);
  const char *Proc = processState(S);
  if (Age < -double(seg::FutureSlackNs) / 1e6)
    L += " (invalid: ignored by the runtime)";
  else if (Age * 1e6 > double(O.StaleNs))
    L += fmt(": stale, not counted by the runtime (process %s; the slot is freed at the next "
             "heartbeat of any process)",
             Proc);
  else if (std::strcmp(Proc, "running") != 0)
    L += fmt(" (process %s: in another pid namespace?)", Proc);
  if (Hp) {
    uint64_t InFlight = S.Started > S.Finished ? S.Started - S.Finished : 0;
    L += fmt("; %" PRIu64 " launches, %" PRIu64 " in flight", S.Started, InFlight);
    if (S.LastLaunchNs)
      L += ", the last " + agoText(agoMs(S.LastLaunchNs, O.NowNs));
    if ((S.Flags & seg::FlagWaitShare) && S.WaitShare >= 1 && S.WaitShare <= 1001)
      L += fmt("; waits for the GPU %.1f %% of its requests' time", (S.WaitShare - 1) / 10.0);
    if (S.Flags & seg::FlagNoMps)
      L += "; not an MPS client (BE's MPS rules are off while it is here)";
  } else if (Be) {
    L += fmt("; %" PRIu64 " preemption%s", S.Preemptions, S.Preemptions == 1 ? "" : "s");
  }
  return L + "\n";
}

std::string slotJson(const SlotInfo &S, const StatusOptions &O) {
  std::string J = fmt("{\"slot\": %u, \"state\": \"%s\", \"pid\": %u", S.Index,
                      S.State == seg::StateLive ? "live" : "claiming", unsigned(S.Pid));
  if (S.State != seg::StateLive)
    return J + "}";
  const bool Hp = S.Prio == SegPriority::High;
  const bool Be = S.Prio == SegPriority::BestEffort;
  const double Age = agoMs(S.HeartbeatNs, O.NowNs);
  J += ", \"command\": " + jsonString(commandOf(S.Pid));
  J += fmt(", \"priority\": \"%s\"", Hp ? "high" : Be ? "best-effort" : "invalid");
  J += fmt(", \"heartbeat_age_ms\": %.3f, \"stale\": %s, \"process\": \"%s\"", Age,
           Age * 1e6 > double(O.StaleNs) || Age < -double(seg::FutureSlackNs) / 1e6 ? "true"
                                                                                    : "false",
           processState(S));
  if (Hp) {
    uint64_t InFlight = S.Started > S.Finished ? S.Started - S.Finished : 0;
    J += fmt(", \"launches\": %" PRIu64 ", \"in_flight\": %" PRIu64, S.Started, InFlight);
    J += S.LastLaunchNs ? fmt(", \"last_launch_age_ms\": %.3f", agoMs(S.LastLaunchNs, O.NowNs))
                        : std::string(", \"last_launch_age_ms\": null");
    if ((S.Flags & seg::FlagWaitShare) && S.WaitShare >= 1 && S.WaitShare <= 1001)
      J += fmt(", \"wait_share_percent\": %.1f", (S.WaitShare - 1) / 10.0);
    else
      J += ", \"wait_share_percent\": null";
    J += fmt(", \"mps_client\": %s", S.Flags & seg::FlagNoMps ? "false" : "true");
  } else if (Be) {
    J += fmt(", \"preemptions\": %" PRIu64, S.Preemptions);
  }
  return J + "}";
}

} // namespace

StatusReport segmentStatus(const StatusOptions &O) {
  StatusReport R;
  const std::string Prefix = "tally-" + std::to_string(O.Uid) + "-";
  std::vector<std::string> Names;
  DIR *D = opendir(O.Dir.c_str());
  if (!D) {
    const std::string Why = std::string("cannot read the folder: ") + std::strerror(errno);
    R.Problems = 1;
    R.Errors = O.Dir + ": " + Why + "\n";
    if (O.Json)
      R.Out = "{\"dir\": " + jsonString(O.Dir) + fmt(", \"uid\": %u", unsigned(O.Uid)) +
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
  std::vector<FileResult> Files;
  for (const std::string &N : Names) {
    Files.push_back(readSegment(O.Dir + "/" + N, O.Uid));
    Files.back().Gpu = N.substr(Prefix.size());
  }
  std::string Text, Json = "{\"dir\": " + jsonString(O.Dir) + fmt(", \"uid\": %u", unsigned(O.Uid)) +
                           ", \"segments\": [";
  std::string JsonErrors;
  for (const FileResult &F : Files) {
    if (!F.Error.empty()) {
      ++R.Problems;
      R.Errors += F.Path + ": " + F.Error + "\n";
      JsonErrors += std::string(JsonErrors.empty() ? "" : ", ") + "{\"file\": " + jsonString(F.Path) +
                    ", \"error\": " + jsonString(F.Error) + "}";
      continue;
    }
    unsigned Live = 0, Hp = 0, Be = 0, Stale = 0;
    bool Active = false;
    uint64_t LastLaunch = 0;
    for (const SlotInfo &S : F.Slots) {
      if (S.State != seg::StateLive)
        continue;
      double Age = agoMs(S.HeartbeatNs, O.NowNs);
      if (Age * 1e6 > double(O.StaleNs) || Age < -double(seg::FutureSlackNs) / 1e6) {
        ++Stale;
        continue;
      }
      ++Live;
      if (S.Prio == SegPriority::High) {
        ++Hp;
        Active |= S.Started > S.Finished;
        LastLaunch = std::max(LastLaunch, S.LastLaunchNs);
      } else if (S.Prio == SegPriority::BestEffort) {
        ++Be;
      }
    }
    std::string Head = "GPU " + F.Gpu + " (" + F.Path + "): " +
                       fmt("%u process%s", Live, Live == 1 ? "" : "es");
    if (Live)
      Head += fmt(" (%u high priority, %u best effort)", Hp, Be);
    if (Stale)
      Head += fmt(", %u stale slot%s", Stale, Stale == 1 ? "" : "s");
    if (Hp)
      Head += Active ? "; HP active now (launches in flight)"
                     : (LastLaunch ? "; HP idle, its last launch " + agoText(agoMs(LastLaunch, O.NowNs))
                                   : std::string("; HP idle, no launch yet"));
    Text += Head + "\n";
    Json += std::string(R.Segments ? ", " : "") + "{\"gpu\": " + jsonString(F.Gpu) +
            ", \"file\": " + jsonString(F.Path) +
            fmt(", \"processes\": %u, \"high_priority\": %u, \"best_effort\": %u, \"stale\": %u, "
                "\"hp_active\": %s, \"slots\": [",
                Live, Hp, Be, Stale, Active ? "true" : "false");
    bool First = true;
    for (const SlotInfo &S : F.Slots) {
      Text += slotText(S, O);
      Json += std::string(First ? "" : ", ") + slotJson(S, O);
      First = false;
    }
    Json += "]}";
    ++R.Segments;
  }
  Json += "], \"errors\": [" + JsonErrors + "]}\n";
  if (!R.Segments && !R.Problems)
    Text = fmt("no Tally segment for uid %u in %s (no process has run under `tally run` there "
               "since it was last cleared)\n",
               unsigned(O.Uid), O.Dir.c_str());
  R.Out = O.Json ? Json : Text;
  return R;
}

} // namespace tally::rt
