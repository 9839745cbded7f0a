//===- Policy.cpp - when and how best-effort kernels run ------------------===//
//
// See Policy.h. Plain code over observations and measurements; the runtime
// (Scheduler.cpp) does the driver calls.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/Policy.h"

#include <algorithm>
#include <cmath>

namespace tally::rt {

std::string Choice::name() const {
  switch (F) {
  case Form::Original:
    return "original";
  case Form::Ptb:
    return "ptb:w=" + std::to_string(Workers) + ",c=" + std::to_string(Chunk);
  case Form::Slice:
    return "slice:b=" + std::to_string(SliceBlocks);
  }
  return "original";
}

void Policy::observe(uint64_t Now, const HpObservation &O) {
  Present = O.HpProcesses > 0;
  // An arrival is a launch counted since the last look, or HP work still
  // running now. Arrivals of processes that went away make the sum shrink:
  // only growth counts.
  bool Arrived = SeenArrivals && O.Arrivals > Arrivals;
  Active = O.Active;
  if (O.Active || Arrived)
    LastActive = std::max(LastActive, Now);
  Arrivals = O.Arrivals;
  SeenArrivals = true;
  WaitKnown = O.WaitShareKnown;
  WaitPermille = O.WaitPermille;
}

Policy::Mode Policy::mode(uint64_t Now) const {
  if (!Present && !Active)
    return Mode::Free;
  if (LastActive == 0 || Now > LastActive + Cfg.SilenceNs)
    return Active ? Mode::Guarded : Mode::Free;
  return Mode::Guarded;
}

bool Policy::hpBusy(uint64_t Now) const {
  return Active || (LastActive != 0 && Now < LastActive + Cfg.IdleWindowNs);
}

uint32_t Policy::besideWorkers(int PerSM, int SMs, uint32_t Wide) const {
  if (!Cfg.BesidePtbPercent || PerSM <= 0 || SMs <= 0 || !Wide)
    return 0;
  uint64_t Share = std::max<uint64_t>(1, uint64_t(PerSM) * uint64_t(SMs) * Cfg.BesidePtbPercent / 100);
  return static_cast<uint32_t>(std::min<uint64_t>(Wide, Share));
}

bool Policy::provisional(const LaunchShape &S, Choice &Out) const {
  if (!Cfg.Provisional || !Cfg.Beside || !Cfg.BesidePtbPercent || !S.HasPtb ||
      S.PtbPerSM <= 0 || S.SMs <= 0 || S.Blocks == 0)
    return false;
  Out = Choice{};
  Out.F = Form::Ptb;
  Out.Workers = static_cast<uint32_t>(std::min<uint64_t>(S.Blocks, uint64_t(S.PtbPerSM) * S.SMs));
  Out.StayNarrow = true;
  return true;
}

std::vector<Choice> Policy::candidates(const LaunchShape &S) {
  std::vector<Choice> Out;
  Out.push_back(Choice{});
  if (S.Blocks == 0 || S.SMs <= 0)
    return Out;
  if (S.HasPtb && S.PtbPerSM > 0) {
    uint64_t Full = std::min<uint64_t>(S.Blocks, uint64_t(S.PtbPerSM) * S.SMs);
    std::vector<uint64_t> Ws = {Full, (Full + 1) / 2, (Full + 3) / 4};
    for (size_t I = 0; I < Ws.size(); ++I) {
      uint64_t W = std::max<uint64_t>(1, Ws[I]);
      bool Dup = false;
      for (const Choice &C : Out)
        Dup |= C.F == Form::Ptb && C.Workers == W && C.Chunk == 1;
      if (Dup)
        continue;
      Choice C;
      C.F = Form::Ptb;
      C.Workers = static_cast<uint32_t>(W);
      Out.push_back(C);
      // Chunks of 4 on the full wave: fewer claims for short blocks.
      if (I == 0 && S.Blocks >= 4 * W) {
        C.Chunk = 4;
        Out.push_back(C);
      }
    }
  }
  if (S.HasSlice && S.SlicePerSM > 0) {
    uint64_t Wave = uint64_t(S.SlicePerSM) * S.SMs;
    for (uint64_t B : {Wave, (Wave + 3) / 4}) {
      B = std::max<uint64_t>(1, B);
      if (B >= S.Blocks)
        continue; // one slice is the whole grid: no preemption point
      bool Dup = false;
      for (const Choice &C : Out)
        Dup |= C.F == Form::Slice && C.SliceBlocks == B;
      if (Dup)
        continue;
      Choice C;
      C.F = Form::Slice;
      C.SliceBlocks = static_cast<uint32_t>(B);
      Out.push_back(C);
    }
  }
  return Out;
}

double Policy::turnaroundUs(const LaunchShape &S, const Choice &C, uint64_t Ns) {
  double T = double(Ns) / 1000.0;
  if (S.Blocks == 0)
    return T;
  double N = double(S.Blocks);
  switch (C.F) {
  case Form::Original:
    return T;
  case Form::Ptb:
    return std::min(T, double(C.Chunk) * T * double(std::max<uint32_t>(C.Workers, 1)) / N);
  case Form::Slice:
    return T / std::ceil(N / double(std::max<uint32_t>(C.SliceBlocks, 1)));
  }
  return T;
}

double Policy::waitUs(const LaunchShape &S, const Choice &C, uint64_t Ns) const {
  if (C.F != Form::Original || !Cfg.BlocksFirst || S.OrigPerSM <= 0 || S.SMs <= 0 ||
      S.Blocks == 0)
    return turnaroundUs(S, C, Ns);
  double Wave = double(S.OrigPerSM) * double(S.SMs);
  return double(Ns) / 1000.0 / std::ceil(double(S.Blocks) / Wave);
}

Policy::Measurement Policy::lookup(const ProfileKey &K, const std::string &Name) const {
  Measurement M;
  if (Cache) {
    if (const std::vector<ProfileEntry> *E = Cache->lookup(K))
      for (const ProfileEntry &P : *E)
        if (P.Candidate == Name) {
          M.Count = P.Count;
          M.BestNs = P.BestNs;
        }
    return M;
  }
  auto It = Local.find({K, Name});
  if (It != Local.end())
    M = It->second;
  return M;
}

Choice Policy::choose(const LaunchShape &S) {
  auto D = Decided.find(S.Key);
  if (D != Decided.end()) {
    // An original chosen for its short waves, launched where its waves are
    // not known (an HP process that is no MPS client: it would run whole,
    // time-sliced against HP): chosen again without them.
    if (S.OrigPerSM > 0 || !ByWaves.count(S.Key)) {
      ++Hits;
      return D->second;
    }
    Decided.erase(D);
    ByWaves.erase(S.Key);
  }
  std::vector<Choice> Cands = candidates(S);
  const bool OnlyOriginal = Cands.size() == 1;
  std::vector<Measurement> Ms;
  for (Choice &C : Cands) {
    Ms.push_back(lookup(S.Key, C.name()));
    if (Ms.back().Count < Cfg.Repeats) {
      ++Misses;
      C.Measuring = true;
      return C;
    }
    // The original (first) within the target ends the measuring: a
    // variant is the same code with more work, so none would be faster by
    // more than noise, and each of their measurements is a launch made
    // slower, held for HP to be idle and thrown away when HP comes by.
    if (Ms.size() == 1 && Cands.size() > 1 && withinTarget(S, C, Ms.back().BestNs)) {
      Cands.resize(1);
      break;
    }
  }
  // Every candidate measured: the fastest within the target, else the
  // shortest turnaround among those at most 1.5x slower than the fastest.
  size_t Best = Cands.size();
  uint64_t Fastest = UINT64_MAX;
  for (size_t I = 0; I < Cands.size(); ++I)
    Fastest = std::min(Fastest, Ms[I].BestNs);
  for (size_t I = 0; I < Cands.size(); ++I)
    if (withinTarget(S, Cands[I], Ms[I].BestNs) &&
        (Best == Cands.size() || Ms[I].BestNs < Ms[Best].BestNs))
      Best = I;
  if (Best == Cands.size()) {
    double BestTurn = 0;
    for (size_t I = 0; I < Cands.size(); ++I) {
      if (double(Ms[I].BestNs) > 1.5 * double(Fastest))
        continue;
      double Turn = turnaroundUs(S, Cands[I], Ms[I].BestNs);
      if (Best == Cands.size() || Turn < BestTurn) {
        Best = I;
        BestTurn = Turn;
      }
    }
  }
  Choice C = Cands[Best];
  C.BestNs = Ms[Best].BestNs;
  Decided[S.Key] = C;
  // (For its waves alone: an original short as a whole is chosen so by
  // the whole-time rule, which holds without its waves.)
  if (shortWaves(S, C, Ms[Best].BestNs) && !withinMargin(turnaroundUs(S, C, Ms[Best].BestNs)))
    ByWaves.insert(S.Key);
  else
    ByWaves.erase(S.Key);
  Decision Made;
  Made.Key = S.Key;
  Made.Chosen = C.name();
  Made.ChosenNs = Ms[Best].BestNs;
  Made.OriginalNs = Ms.front().BestNs; // candidates() puts the original first
  Made.TurnaroundUs = turnaroundUs(S, C, Ms[Best].BestNs);
  Made.WaitUs = waitUs(S, C, Ms[Best].BestNs);
  Made.MeetsTarget = withinTarget(S, C, Ms[Best].BestNs);
  Made.Short = double(waitNs(S, C, Ms[Best].BestNs)) <= Cfg.TurnaroundUs * 1e3;
  Made.OriginalOnly = OnlyOriginal;
  // A shape chosen again (besideChecked revoked it) keeps one entry.
  auto Old = std::find_if(Decisions.begin(), Decisions.end(),
                          [&](const Decision &D) { return D.Key == S.Key; });
  if (Old != Decisions.end())
    *Old = std::move(Made);
  else
    Decisions.push_back(std::move(Made));
  ++Hits;
  return C;
}

bool Policy::withinTarget(const LaunchShape &S, const Choice &C, uint64_t Ns) const {
  const double Turn = turnaroundUs(S, C, Ns);
  // (A small grid's original runs beside HP whatever its time: no margin
  // needed to keep it from waiting.)
  if (!Cfg.Beside || C.F == Form::Ptb || besideSmall(S, C))
    return Turn <= Cfg.TurnaroundUs;
  if (NoBeside.count(S.Key))
    return false; // timed too long too often beside HP (besideChecked)
  // As a client of below-normal priority, an original of short waves: an
  // arriving HP kernel waits for its running blocks only, one short wave
  // at most, and the GPU starts none of its later blocks before HP's (on
  // an H200 beside hp-serve's requests of 8 one-wave kernels, be-spin's 10
  // us blocks chosen so kept 0.88 of BE against 0.79 as narrow PTB
  // launches, for an HP median 4-9 us higher: off by default,
  // Config::BesideWaveUs).
  if (shortWaves(S, C, Ns))
    return true;
  // Under MPS an original or sliced form within the target is one that
  // runs beside HP: besideOk's margin (a quarter to spare). One within the
  // target but not the margin would wait for HP to be idle at every launch,
  // where a preemptible form runs beside HP (measured on an H100: a 27 us
  // one-wave reduction of the Triton training, 963 holds for 0.5 s of an
  // 8 s window). An original's whole time, not one wave of it (waitUs):
  // chosen for its waves, originals running beside HP at full width made
  // hp-serve's requests of 8 one-wave kernels wait for BE blocks at each
  // kernel (H100, be-spin of 22 us blocks: HP p50 286 us against 225 with
  // PTB launches kept to half a wave).
  return withinMargin(Turn);
}

bool Policy::shortWaves(const LaunchShape &S, const Choice &C, uint64_t Ns) const {
  if (C.F != Form::Original || !Cfg.Beside || !Cfg.BlocksFirst || Cfg.BesideWaveUs <= 0 ||
      S.OrigPerSM <= 0 || NoBeside.count(S.Key))
    return false;
  const double Wave = waitUs(S, C, Ns);
  return Wave <= Cfg.BesideWaveUs && withinMargin(Wave);
}

uint64_t Policy::marginNs(double Us) { return static_cast<uint64_t>(Us * 1e3 * 1.25) + 1; }

uint64_t Policy::queuedWaitNs(const LaunchShape &S, const Choice &C) const {
  return C.F == Form::Slice ? 0 : measuredWaitNs(S, C);
}

uint64_t Policy::measuredWaitNs(const LaunchShape &S, const Choice &C) const {
  Measurement M = lookup(S.Key, C.name());
  if (!M.Count || !M.BestNs)
    return 0;
  return waitNs(S, C, M.BestNs);
}

uint64_t Policy::waitNs(const LaunchShape &S, const Choice &C, uint64_t Ns) const {
  return marginNs(waitUs(S, C, Ns));
}

bool Policy::besideOk(const LaunchShape &S, const Choice &C) const {
  if (C.F == Form::Ptb || C.Measuring || NoBeside.count(S.Key))
    return false;
  // Sliced work goes one slice at a time: an arriving HP kernel waits for
  // one slice.
  uint64_t Ns = measuredWaitNs(S, C);
  return Ns && double(Ns) <= Cfg.TurnaroundUs * 1e3;
}

bool Policy::besideChecked(const ProfileKey &K, uint64_t Ns) {
  static_assert(BesideCheckWindow <= 8, "the window's bits are one byte");
  if (NoBeside.count(K))
    return false;
  // Over the target; for an original chosen for its short waves, over the
  // waves it was admitted for (with the same quarter of slack).
  double LimitUs = Cfg.TurnaroundUs;
  if (ByWaves.count(K))
    LimitUs = std::min(LimitUs, Cfg.BesideWaveUs * 1.25);
  const bool Over = double(Ns) > LimitUs * 1e3;
  ChecksOver += Over;
  uint8_t &Bits = CheckBits[K];
  Bits = static_cast<uint8_t>((Bits << 1) | (Over ? 1 : 0));
  unsigned Count = 0;
  for (unsigned I = 0; I < BesideCheckWindow; ++I)
    Count += (Bits >> I) & 1;
  if (Count < BesideRevokeOver)
    return false;
  NoBeside.insert(K);
  CheckBits.erase(K);
  ByWaves.erase(K);
  // Chosen as able to run beside HP, it no longer is: choose again (under
  // MPS an original or slices revoked so are not within the target).
  Decided.erase(K);
  return true;
}

bool Policy::besideSmall(const LaunchShape &S, const Choice &C) const {
  if (C.F != Form::Original || C.Measuring || S.OrigPerSM <= 0 || S.Blocks == 0)
    return false;
  uint32_t Share = besideWorkers(S.OrigPerSM, S.SMs, UINT32_MAX);
  return Share && S.Blocks <= Share;
}

void Policy::measured(const LaunchShape &S, const Choice &C, uint64_t Ns) {
  if (Ns == 0)
    return;
  std::string Name = C.name();
  if (Cache) {
    Cache->record(S.Key, Name, Ns);
  } else {
    Measurement &M = Local[{S.Key, Name}];
    M.BestNs = M.Count ? std::min(M.BestNs, Ns) : Ns;
    ++M.Count;
  }
}

} // namespace tally::rt
