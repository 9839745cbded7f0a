//===- Config.cpp - TALLY_* variables -------------------------------------===//

#include "tally/Runtime/Config.h"

#include <regex.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace tally::rt {

const char *formName(Form F) {
  switch (F) {
  case Form::Original:
    return "original";
  case Form::Slice:
    return "slice";
  case Form::Ptb:
    return "ptb";
  }
  return "?";
}

static bool parseUnsigned(const char *S, uint64_t Max, uint64_t &Out) {
  if (!S || !*S)
    return false;
  for (const char *P = S; *P; ++P)
    if (*P < '0' || *P > '9')
      return false;
  errno = 0;
  unsigned long long V = std::strtoull(S, nullptr, 10);
  if (errno || V > Max)
    return false;
  Out = V;
  return true;
}

Config Config::fromEnvironment(const char *(*GetEnv)(const char *), std::string &Error) {
  Config C;
  Error.clear();
  auto Fail = [&](const char *Var, const char *Value, const char *Expected) {
    Error = std::string("bad value '") + Value + "' for " + Var + " (expected " + Expected +
            "); running without Tally";
    C.Enabled = false;
    return C;
  };
  // A 0-or-1 variable into Out (left as it is when unset); false, with
  // Error set, for any other value.
  auto Flag = [&](const char *Var, bool &Out) {
    const char *V = GetEnv(Var);
    if (!V || !*V)
      return true;
    if (std::strcmp(V, "0") != 0 && std::strcmp(V, "1") != 0) {
      Fail(Var, V, "0 or 1");
      return false;
    }
    Out = V[0] == '1';
    return true;
  };
  if (const char *V = GetEnv("TALLY_DISABLE"); V && *V && std::strcmp(V, "0") != 0) {
    C.Enabled = false;
    return C;
  }
  if (const char *V = GetEnv("TALLY_LOG_LEVEL"); V && *V) {
    if (!std::strcmp(V, "error"))
      C.Level = LogLevel::Error;
    else if (!std::strcmp(V, "warn"))
      C.Level = LogLevel::Warn;
    else if (!std::strcmp(V, "info"))
      C.Level = LogLevel::Info;
    else if (!std::strcmp(V, "debug"))
      C.Level = LogLevel::Debug;
    else
      return Fail("TALLY_LOG_LEVEL", V, "error, warn, info or debug");
  }
  if (const char *V = GetEnv("TALLY_PRIORITY"); V && *V) {
    if (!std::strcmp(V, "high"))
      C.Prio = Priority::High;
    else if (!std::strcmp(V, "best-effort"))
      C.Prio = Priority::BestEffort;
    else
      return Fail("TALLY_PRIORITY", V, "high or best-effort");
  }
  if (const char *V = GetEnv("TALLY_FORCE"); V && *V) {
    C.Forced = true;
    if (!std::strcmp(V, "original"))
      C.Force = Form::Original;
    else if (!std::strcmp(V, "slice"))
      C.Force = Form::Slice;
    else if (!std::strcmp(V, "ptb"))
      C.Force = Form::Ptb;
    else
      return Fail("TALLY_FORCE", V, "original, slice or ptb");
  }
  if (const char *V = GetEnv("TALLY_FORCE_ONLY"); V && *V) {
    regex_t Re;
    if (regcomp(&Re, V, REG_EXTENDED | REG_NOSUB) != 0)
      return Fail("TALLY_FORCE_ONLY", V, "an extended regular expression");
    regfree(&Re);
    C.ForceOnly = V;
  }
  if (const char *V = GetEnv("TALLY_PREEMPT"); V && *V) {
    uint64_t N = 0;
    if (std::strncmp(V, "random:", 7) != 0 || !parseUnsigned(V + 7, 1000, N) || N == 0)
      return Fail("TALLY_PREEMPT", V, "random:N with N from 1 to 1000");
    C.RandomPreemptions = static_cast<unsigned>(N);
  }
  if (const char *V = GetEnv("TALLY_SEED"); V && *V) {
    if (!parseUnsigned(V, UINT64_MAX, C.Seed))
      return Fail("TALLY_SEED", V, "an unsigned integer");
  }
  if (const char *V = GetEnv("TALLY_STATS"); V && *V && std::strcmp(V, "0") != 0) {
    C.Stats = true;
    if (std::strcmp(V, "1") != 0)
      C.StatsFile = V;
  }
  if (const char *V = GetEnv("TALLY_STATS_PID"); V && *V) {
    if (!parseUnsigned(V, UINT32_MAX, C.StatsOwnerPid))
      return Fail("TALLY_STATS_PID", V, "a process id");
  }
  // Timing events around each launch cost an HP service what it exists
  // for (hp-serve's median went from 210 to 331 us on an H100): only when
  // asked for there.
  C.StatsTiming = C.Prio != Priority::High;
  if (const char *V = GetEnv("TALLY_STATS_TIMING"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 1000000, N))
      return Fail("TALLY_STATS_TIMING", V, "0, 1, or N from 2 to 1000000: one launch in N timed");
    C.StatsTiming = N > 0;
    C.StatsTimingEvery = N > 1 ? static_cast<uint32_t>(N) : 1;
  }
  if (!Flag("TALLY_STATS_TURNAROUND", C.StatsTurnaround))
    return C;
  if (const char *V = GetEnv("TALLY_PTB_CHUNK"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 1u << 20, N) || N == 0)
      return Fail("TALLY_PTB_CHUNK", V, "an integer from 1 to 1048576");
    C.PtbChunk = static_cast<uint32_t>(N);
  }
  if (const char *V = GetEnv("TALLY_PTB_WORKERS_PER_SM"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 1024, N) || N == 0)
      return Fail("TALLY_PTB_WORKERS_PER_SM", V, "an integer from 1 to 1024");
    C.PtbWorkersPerSM = static_cast<uint32_t>(N);
  }
  if (const char *V = GetEnv("TALLY_SLICE_BLOCKS"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, UINT32_MAX, N) || N == 0)
      return Fail("TALLY_SLICE_BLOCKS", V, "a positive integer");
    C.SliceBlocks = static_cast<uint32_t>(N);
  }
  if (const char *V = GetEnv("TALLY_TURNAROUND_US"); V && *V) {
    uint64_t N = 0;
    // Tenths of a microsecond: "31.6" or "40".
    const char *Dot = std::strchr(V, '.');
    std::string Whole(V, Dot ? size_t(Dot - V) : std::strlen(V));
    uint64_t Frac = 0;
    if (Whole.empty() || !parseUnsigned(Whole.c_str(), 1000000, N) ||
        (Dot && (std::strlen(Dot + 1) != 1 || !parseUnsigned(Dot + 1, 9, Frac))) ||
        N * 10 + Frac == 0)
      return Fail("TALLY_TURNAROUND_US", V, "microseconds, e.g. 31.6 (one decimal at most)");
    C.TurnaroundUs = double(N) + double(Frac) / 10.0;
  }
  if (const char *V = GetEnv("TALLY_IDLE_US"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 10000000, N))
      return Fail("TALLY_IDLE_US", V, "microseconds from 0 to 10000000");
    C.IdleUs = N;
  }
  if (const char *V = GetEnv("TALLY_SILENCE_MS"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 3600000, N) || N == 0)
      return Fail("TALLY_SILENCE_MS", V, "milliseconds from 1 to 3600000");
    C.SilenceMs = N;
  }
  if (const char *V = GetEnv("TALLY_QUEUE_US"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 1000000, N))
      return Fail("TALLY_QUEUE_US", V, "microseconds from 0 to 1000000");
    C.QueueUs = N;
    C.QueueUsGiven = true;
  }
  if (const char *V = GetEnv("TALLY_MAX_HOLD_US"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 10000000, N))
      return Fail("TALLY_MAX_HOLD_US", V, "microseconds from 0 to 10000000");
    C.MaxHoldUs = N;
  }
  if (const char *V = GetEnv("TALLY_HP_WAIT_SHARE"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 100, N))
      return Fail("TALLY_HP_WAIT_SHARE", V, "a percentage from 0 to 100");
    C.HpWaitSharePercent = static_cast<uint32_t>(N);
  }
  if (!Flag("TALLY_BESIDE", C.Beside))
    return C;
  if (!Flag("TALLY_FREE_MEASURE", C.FreeMeasure))
    return C;
  if (!Flag("TALLY_PROVISIONAL", C.Provisional))
    return C;
  if (!Flag("TALLY_ARMED_FLAG", C.ArmedFlag))
    return C;
  for (auto [Var, Out] : {std::pair{"TALLY_DEBUG_RESUME_PRIORITY", &C.DebugResumePriority},
                          std::pair{"TALLY_DEBUG_SIGNAL_PRIORITY", &C.DebugSignalPriority}}) {
    const char *V = GetEnv(Var);
    if (!V || !*V)
      continue;
    if (!std::strcmp(V, "least"))
      *Out = Config::DebugPriority::Least;
    else if (!std::strcmp(V, "greatest"))
      *Out = Config::DebugPriority::Greatest;
    else
      return Fail(Var, V, "least or greatest");
  }
  if (!Flag("TALLY_DEBUG_FRESH_RESUME", C.DebugFreshResume))
    return C;
  if (const char *V = GetEnv("TALLY_BESIDE_PTB_PERCENT"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 100, N))
      return Fail("TALLY_BESIDE_PTB_PERCENT", V, "a percentage from 0 to 100");
    C.BesidePtbPercent = static_cast<uint32_t>(N);
  }
  if (const char *V = GetEnv("TALLY_BESIDE_WAVE_US"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 1000, N))
      return Fail("TALLY_BESIDE_WAVE_US", V, "microseconds from 0 to 1000");
    C.BesideWaveUs = static_cast<uint32_t>(N);
  }
  if (const char *V = GetEnv("TALLY_WIDEN_US"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 10000000, N))
      return Fail("TALLY_WIDEN_US", V, "microseconds from 0 to 10000000");
    C.WidenUs = N;
  }
  if (const char *V = GetEnv("TALLY_NARROW_UNWATCHED_US"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 10000000, N))
      return Fail("TALLY_NARROW_UNWATCHED_US", V, "microseconds from 0 to 10000000");
    C.NarrowUnwatchedUs = N;
  }
  if (const char *V = GetEnv("TALLY_SHM_DIR"); V && *V)
    C.ShmDir = V;
  // The driver's variable, not ours: read, never refused (0: not set or
  // not a number, what the driver gives then is not known).
  if (const char *V = GetEnv("CUDA_DEVICE_MAX_CONNECTIONS"); V && *V) {
    uint64_t N = 0;
    if (parseUnsigned(V, 1u << 20, N))
      C.WorkQueuesAsked = static_cast<int>(N);
  }
  if (!Flag("TALLY_SCHEDULE", C.Schedule))
    return C;
  if (const char *V = GetEnv("TALLY_HP_COMPLETION"); V && *V) {
    if (!std::strcmp(V, "gpu"))
      C.HpCompletion = CompletionPath::Gpu;
    else if (!std::strcmp(V, "side"))
      C.HpCompletion = CompletionPath::Side;
    else if (!std::strcmp(V, "host"))
      C.HpCompletion = CompletionPath::Host;
    else if (!std::strcmp(V, "burst"))
      C.HpCompletion = CompletionPath::Burst;
    else if (!std::strcmp(V, "none"))
      C.HpCompletion = CompletionPath::None;
    else
      return Fail("TALLY_HP_COMPLETION", V, "gpu, side, host, burst or none");
  }
  if (const char *V = GetEnv("TALLY_HP_BURST_US"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 1000000, N) || N == 0)
      return Fail("TALLY_HP_BURST_US", V, "microseconds from 1 to 1000000");
    C.HpBurstUs = N;
  }
  if (!Flag("TALLY_PROFILE_CACHE", C.ProfileCache))
    return C;
  if (const char *V = GetEnv("TALLY_RUNTIME_PTX"); V && *V) {
    if (!std::strcmp(V, "auto"))
      C.RuntimePtx = RuntimePtxMode::Auto;
    else if (!std::strcmp(V, "1"))
      C.RuntimePtx = RuntimePtxMode::On;
    else if (!std::strcmp(V, "0"))
      C.RuntimePtx = RuntimePtxMode::Off;
    else
      return Fail("TALLY_RUNTIME_PTX", V, "auto, 1 or 0");
  }
  if (const char *V = GetEnv("TALLY_OPT"); V && *V)
    C.TallyOpt = V;
  if (const char *V = GetEnv("TALLY_PTX_TIMEOUT_S"); V && *V) {
    uint64_t N = 0;
    if (!parseUnsigned(V, 3600, N) || N == 0)
      return Fail("TALLY_PTX_TIMEOUT_S", V, "seconds from 1 to 3600");
    C.PtxTimeoutSeconds = static_cast<unsigned>(N);
  }
  if (const char *V = GetEnv("TALLY_DRIVER"); V && *V)
    C.DriverPath = V;
  return C;
}

std::string statsFileFor(const std::string &File, uint64_t OwnerPid, uint64_t Pid) {
  if (File.empty() || OwnerPid == 0 || OwnerPid == Pid)
    return File;
  const size_t Slash = File.rfind('/');
  const size_t Base = Slash == std::string::npos ? 0 : Slash + 1;
  size_t Dot = File.rfind('.');
  // A dot that starts the name (".stats") or lies in a folder's name is
  // not an extension.
  if (Dot == std::string::npos || Dot <= Base)
    Dot = File.size();
  return File.substr(0, Dot) + "." + std::to_string(Pid) + File.substr(Dot);
}

} // namespace tally::rt
