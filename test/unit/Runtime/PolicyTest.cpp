//===- PolicyTest.cpp - the BE scheduling policy on a simulated clock -----===//
//
// The policy is driven here as the runtime drives it: observations of the
// HP processes at given times (nanoseconds of a simulated clock), launch
// shapes, and measured times. Nothing here sleeps or touches a GPU.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/Policy.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <random>
#include <unistd.h>

using namespace tally::rt;

namespace {

constexpr uint64_t Us = 1000, Ms = 1000 * Us;

HpObservation hp(unsigned Procs, bool Active, uint64_t Arrivals) {
  HpObservation O;
  O.HpProcesses = Procs;
  O.Active = Active;
  O.Arrivals = Arrivals;
  return O;
}

LaunchShape shape(const char *Name, uint64_t Blocks, int PtbPerSM = 2, int SlicePerSM = 4) {
  LaunchShape S;
  S.Key.Kernel = Name;
  S.Key.Grid[0] = static_cast<uint32_t>(Blocks);
  S.Key.Block[0] = 256;
  S.Blocks = Blocks;
  S.HasPtb = PtbPerSM > 0;
  S.HasSlice = SlicePerSM > 0;
  S.PtbPerSM = PtbPerSM;
  S.SlicePerSM = SlicePerSM;
  S.SMs = 132;
  return S;
}

/// Measures every candidate of \p S with the times \p TimeOf gives, as
/// the runtime would: choose(), launch, measured(); until a choice is no
/// longer a measurement. Returns that choice.
template <typename F> Choice profile(Policy &P, const LaunchShape &S, F TimeOf) {
  for (int I = 0; I < 100; ++I) {
    Choice C = P.choose(S);
    if (!C.Measuring)
      return C;
    P.measured(S, C, TimeOf(C));
  }
  ADD_FAILURE() << "the policy never stopped measuring";
  return Choice{};
}

//===----------------------------------------------------------------------===//
// Modes and the idle window
//===----------------------------------------------------------------------===//

TEST(PolicyModes, FreeWithoutHpProcesses) {
  Policy P;
  P.observe(1 * Ms, hp(0, false, 0));
  EXPECT_EQ(P.mode(1 * Ms), Policy::Mode::Free);
  EXPECT_FALSE(P.hpBusy(1 * Ms));
}

TEST(PolicyModes, GuardedWhileHpIsActiveThenFreeAfterTheSilence) {
  Policy P; // idle window 100 us, silence 100 ms
  P.observe(10 * Ms, hp(1, false, 0));
  // An HP process that never launched: nothing to protect yet.
  EXPECT_EQ(P.mode(10 * Ms), Policy::Mode::Free);
  P.observe(20 * Ms, hp(1, true, 1));
  EXPECT_EQ(P.mode(20 * Ms), Policy::Mode::Guarded);
  EXPECT_TRUE(P.hpBusy(20 * Ms));
  P.observe(20 * Ms + 50 * Us, hp(1, false, 1));
  // Done, but within the idle window of the last time it was seen active.
  EXPECT_TRUE(P.hpBusy(20 * Ms + 60 * Us));
  EXPECT_TRUE(P.hpBusy(20 * Ms + 99 * Us));
  EXPECT_FALSE(P.hpBusy(20 * Ms + 101 * Us));
  EXPECT_EQ(P.mode(20 * Ms + 101 * Us), Policy::Mode::Guarded);
  EXPECT_EQ(P.mode(119 * Ms), Policy::Mode::Guarded);
  EXPECT_EQ(P.mode(121 * Ms), Policy::Mode::Free);
}

TEST(PolicyModes, ArrivalsBetweenLooksCountAsActivity) {
  Policy P;
  P.observe(1 * Ms, hp(1, false, 5));
  // A short HP kernel started and finished between two observations: the
  // counter moved, so HP was there.
  P.observe(2 * Ms, hp(1, false, 6));
  EXPECT_TRUE(P.hpBusy(2 * Ms + 10 * Us));
  EXPECT_EQ(P.lastHpActivity(), 2 * Ms);
  // The same count again: nothing new.
  P.observe(3 * Ms, hp(1, false, 6));
  EXPECT_FALSE(P.hpBusy(3 * Ms));
}

TEST(PolicyModes, AShrinkingSumIsNoArrival) {
  Policy P;
  P.observe(1 * Ms, hp(2, false, 100));
  // One of two HP processes went away: the sum drops.
  P.observe(2 * Ms, hp(1, false, 40));
  EXPECT_FALSE(P.hpBusy(2 * Ms));
  P.observe(3 * Ms, hp(1, false, 41));
  EXPECT_TRUE(P.hpBusy(3 * Ms));
}

TEST(PolicyModes, ADeadHpProcessReleasesBestEffortWork) {
  Policy P;
  P.observe(1 * Ms, hp(1, true, 3));
  EXPECT_TRUE(P.hpBusy(1 * Ms + 500 * Us));
  // Its slot went stale (killed in the middle of a request): the segment
  // no longer counts it, and BE work may go on.
  P.observe(1 * Ms + 60 * Us, hp(0, false, 0));
  EXPECT_EQ(P.mode(1 * Ms + 200 * Us), Policy::Mode::Free);
}

TEST(PolicyModes, CustomWindows) {
  PolicyConfig C;
  C.IdleWindowNs = 1 * Ms;
  C.SilenceNs = 5 * Ms;
  Policy P(C);
  P.observe(10 * Ms, hp(1, true, 1));
  P.observe(10 * Ms + 1, hp(1, false, 1));
  EXPECT_TRUE(P.hpBusy(10 * Ms + 900 * Us));
  EXPECT_FALSE(P.hpBusy(11 * Ms + 1 * Us));
  EXPECT_EQ(P.mode(14 * Ms), Policy::Mode::Guarded);
  EXPECT_EQ(P.mode(16 * Ms), Policy::Mode::Free);
}

HpObservation waiting(unsigned Procs, bool Active, uint64_t Arrivals, bool Known,
                      uint32_t Permille) {
  HpObservation O = hp(Procs, Active, Arrivals);
  O.WaitShareKnown = Known;
  O.WaitPermille = Permille;
  return O;
}

// As a below-normal-priority MPS client, BE starts beside HP while every HP
// process is launch bound (its published wait share below the threshold):
// at the threshold, unknown, or without client priority, it waits as
// before; the threshold 0 turns the rule off.
TEST(PolicyModes, LaunchBoundHpIsNotWaitedFor) {
  PolicyConfig C;
  C.BlocksFirst = true;
  C.LaunchBoundPermille = 250;
  Policy P(C);
  EXPECT_FALSE(P.launchBound()); // nothing observed yet
  P.observe(1 * Ms, waiting(1, true, 1, true, 3));
  EXPECT_TRUE(P.launchBound());
  EXPECT_TRUE(P.hpBusy(1 * Ms)); // still busy: only the hold is waived
  EXPECT_EQ(P.mode(1 * Ms), Policy::Mode::Guarded);
  P.observe(2 * Ms, waiting(1, true, 2, true, 249));
  EXPECT_TRUE(P.launchBound());
  P.observe(3 * Ms, waiting(1, true, 3, true, 250));
  EXPECT_FALSE(P.launchBound()); // GPU bound enough: held
  P.observe(4 * Ms, waiting(2, true, 4, false, 0));
  EXPECT_FALSE(P.launchBound()); // one HP process's share unknown
  P.observe(5 * Ms, waiting(0, false, 0, true, 0));
  EXPECT_FALSE(P.launchBound()); // no HP process: Free mode's business
  P.observe(6 * Ms, waiting(1, true, 5, true, 3));
  EXPECT_TRUE(P.launchBound());

  PolicyConfig NoPrio = C;
  NoPrio.BlocksFirst = false; // time-sliced or normal priority: every BE
  Policy Q(NoPrio);           // kernel is in HP's way
  Q.observe(1 * Ms, waiting(1, true, 1, true, 3));
  EXPECT_FALSE(Q.launchBound());
  PolicyConfig Off = C;
  Off.LaunchBoundPermille = 0;
  Policy R(Off);
  R.observe(1 * Ms, waiting(1, true, 1, true, 0));
  EXPECT_FALSE(R.launchBound());
}

//===----------------------------------------------------------------------===//
// Candidates and turnaround estimates
//===----------------------------------------------------------------------===//

TEST(PolicyCandidates, AllFormsForALargeGrid) {
  LaunchShape S = shape("k", 10000, /*PtbPerSM=*/2, /*SlicePerSM=*/4);
  std::vector<Choice> C = Policy::candidates(S);
  std::vector<std::string> Names;
  for (const Choice &X : C)
    Names.push_back(X.name());
  EXPECT_EQ(Names, (std::vector<std::string>{"original", "ptb:w=264,c=1", "ptb:w=264,c=4",
                                             "ptb:w=132,c=1", "ptb:w=66,c=1", "slice:b=528",
                                             "slice:b=132"}));
}

TEST(PolicyCandidates, GridsSmallerThanTheGpuGetFewerWorkers) {
  // 40 blocks on 132 SMs: the original always ran these whole.
  LaunchShape S = shape("small", 40, 2, 4);
  std::vector<std::string> Names;
  for (const Choice &X : Policy::candidates(S))
    Names.push_back(X.name());
  EXPECT_EQ(Names, (std::vector<std::string>{"original", "ptb:w=40,c=1", "ptb:w=20,c=1",
                                             "ptb:w=10,c=1"}));
}

TEST(PolicyCandidates, OnlyWhatTheKernelHas) {
  LaunchShape S = shape("noptb", 10000, 0, 4);
  for (const Choice &X : Policy::candidates(S))
    EXPECT_NE(X.F, Form::Ptb);
  S = shape("none", 10000, 0, 0);
  EXPECT_EQ(Policy::candidates(S).size(), 1u);
  S = shape("nofit", 10000, 0, 0);
  S.HasPtb = true; // has the variant but it does not fit this block shape
  EXPECT_EQ(Policy::candidates(S).size(), 1u);
}

TEST(PolicyCandidates, TurnaroundEstimates) {
  LaunchShape S = shape("k", 1000);
  Choice O;
  EXPECT_DOUBLE_EQ(Policy::turnaroundUs(S, O, 500 * Us), 500.0);
  Choice P;
  P.F = Form::Ptb;
  P.Workers = 100;
  P.Chunk = 1;
  // 10 blocks per worker: a tenth of the time.
  EXPECT_DOUBLE_EQ(Policy::turnaroundUs(S, P, 500 * Us), 50.0);
  P.Chunk = 4;
  EXPECT_DOUBLE_EQ(Policy::turnaroundUs(S, P, 500 * Us), 200.0);
  Choice Sl;
  Sl.F = Form::Slice;
  Sl.SliceBlocks = 300; // 4 slices
  EXPECT_DOUBLE_EQ(Policy::turnaroundUs(S, Sl, 500 * Us), 125.0);
}

//===----------------------------------------------------------------------===//
// Profile-guided choice
//===----------------------------------------------------------------------===//

TEST(PolicyChoice, EveryCandidateIsMeasuredRepeatsTimesFirst) {
  Policy P;
  LaunchShape S = shape("k", 10000);
  std::map<std::string, int> Seen;
  Choice C = profile(P, S, [&](const Choice &X) {
    ++Seen[X.name()];
    return 1000 * Us;
  });
  EXPECT_EQ(Seen.size(), Policy::candidates(S).size());
  for (auto &[Name, N] : Seen)
    EXPECT_EQ(N, 2) << Name;
  EXPECT_EQ(P.profileMisses(), 14u);
  EXPECT_FALSE(C.Measuring);
  // Then the choice is remembered.
  EXPECT_EQ(P.choose(S), C);
  EXPECT_EQ(P.profileHits(), 2u);
}

TEST(PolicyChoice, FastestWithinTheTarget) {
  Policy P; // target 31.6 us
  LaunchShape S = shape("k", 10000);
  // Original 1 ms (turnaround 1 ms); PTB full wave: 1.02 ms, turnaround
  // 1.02 ms * 264 / 10000 = 27 us; chunks of 4: 1.00 ms but 106 us; half a
  // wave: 1.1 ms, 14.5 us; slices: slower.
  auto Time = [](const Choice &C) -> uint64_t {
    if (C.F == Form::Original)
      return 1000 * Us;
    if (C.F == Form::Slice)
      return 1300 * Us;
    if (C.Chunk == 4)
      return 1000 * Us;
    return C.Workers == 264 ? 1020 * Us : 1100 * Us;
  };
  Choice C = profile(P, S, Time);
  EXPECT_EQ(C.name(), "ptb:w=264,c=1");
  // The decision and its cost: 2 % over the original, within the target;
  // asking again makes no second decision.
  EXPECT_EQ(P.choose(S), C);
  ASSERT_EQ(P.decisions().size(), 1u);
  const Decision &D = P.decisions().front();
  EXPECT_EQ(D.Key, S.Key);
  EXPECT_EQ(D.Chosen, "ptb:w=264,c=1");
  EXPECT_EQ(D.ChosenNs, 1020 * Us);
  EXPECT_EQ(D.OriginalNs, 1000 * Us);
  EXPECT_NEAR(D.costOverOriginal(), 0.02, 1e-9);
  EXPECT_NEAR(D.TurnaroundUs, 1020.0 * 264 / 10000, 0.01);
  EXPECT_TRUE(D.MeetsTarget);
}

TEST(PolicyChoice, QueuedWait) {
  Policy P;
  LaunchShape S = shape("q", 10000);
  // Nothing measured yet: unknown (0), the launch is not queued.
  Choice Orig;
  EXPECT_EQ(P.queuedWaitNs(S, Orig), 0u);
  auto Time = [](const Choice &C) -> uint64_t {
    return C.F == Form::Original ? 1000 * Us : C.F == Form::Slice ? 1300 * Us : 1020 * Us;
  };
  Choice C = profile(P, S, Time);
  ASSERT_EQ(C.name(), "ptb:w=264,c=1");
  // A PTB launch may make HP wait its turnaround (1020 us * 264 / 10000),
  // an original its whole time; a quarter more each. Slices: never queued.
  EXPECT_NEAR(double(P.queuedWaitNs(S, C)), 1020e3 * 264 / 10000 * 1.25, 2.0);
  EXPECT_NEAR(double(P.queuedWaitNs(S, Orig)), 1000e3 * 1.25, 2.0);
  Choice Sl;
  Sl.F = Form::Slice;
  Sl.SliceBlocks = 528;
  EXPECT_EQ(P.queuedWaitNs(S, Sl), 0u);
}

// As a below-normal-priority MPS client (BlocksFirst), an arriving HP
// kernel waits for an original's running blocks, not its later waves: an
// original of 400 us in 20 waves (20 us each) goes beside HP, with one wave
// in the queue's estimate too; in 10 waves (40 us) it does not, nor in one
// wave, nor at normal priority, nor without its occupancy.
TEST(PolicyChoice, BlocksFirstWaitsForOneWave) {
  PolicyConfig Cfg;
  Cfg.BlocksFirst = true;
  Policy P(Cfg), Normal;
  LaunchShape S = shape("waves", 132 * 4 * 20, 0, 0); // no variants
  S.OrigPerSM = 4;
  auto Time = [](const Choice &) -> uint64_t { return 400 * Us; };
  Choice C = profile(P, S, Time);
  ASSERT_EQ(C.F, Form::Original);
  EXPECT_DOUBLE_EQ(P.waitUs(S, C, 400 * Us), 20.0);
  EXPECT_TRUE(P.besideOk(S, C)) << "20 us waves, 25 with a quarter more";
  EXPECT_NEAR(double(P.queuedWaitNs(S, C)), 20e3 * 1.25, 2.0);
  ASSERT_EQ(P.decisions().size(), 1u);
  EXPECT_DOUBLE_EQ(P.decisions()[0].WaitUs, 20.0);
  EXPECT_DOUBLE_EQ(P.decisions()[0].TurnaroundUs, 400.0);
  // A partial last wave counts as a wave: 20 waves and one block.
  LaunchShape Ragged = S;
  Ragged.Blocks += 1;
  EXPECT_NEAR(P.waitUs(Ragged, C, 420 * Us), 20.0, 1e-9);
  LaunchShape Ten = S, One = S, Unknown = S;
  Ten.Key.Kernel = "ten";
  Ten.Blocks = 132 * 4 * 10;
  One.Key.Kernel = "one";
  One.Blocks = 132 * 4;
  Unknown.Key.Kernel = "unknown";
  Unknown.OrigPerSM = 0;
  for (LaunchShape *L : {&Ten, &One, &Unknown}) {
    Choice D = profile(P, *L, Time);
    EXPECT_FALSE(P.besideOk(*L, D)) << L->Key.Kernel;
  }
  EXPECT_DOUBLE_EQ(P.waitUs(One, C, 400 * Us), 400.0);
  EXPECT_DOUBLE_EQ(P.waitUs(Unknown, C, 400 * Us), 400.0);
  Choice N = profile(Normal, S, Time);
  EXPECT_FALSE(Normal.besideOk(S, N)) << "normal priority: the whole 400 us";
  EXPECT_NEAR(double(Normal.queuedWaitNs(S, N)), 400e3 * 1.25, 2.0);
  // Forms other than the original are not changed.
  Choice Ptb;
  Ptb.F = Form::Ptb;
  Ptb.Workers = 528;
  EXPECT_DOUBLE_EQ(P.waitUs(S, Ptb, 400 * Us), Policy::turnaroundUs(S, Ptb, 400 * Us));
}

// With BlocksFirst and Beside, the choice still weighs an original's whole
// time, not one wave (an original of short waves beside HP at full width
// made HP's multi-kernel requests wait at each kernel, on an H100): 400 us
// in 20 waves of 20 us against PTB at 440 us is PTB, which runs narrow
// beside HP. Were it the original, it would go beside HP too (besideOk by
// its waves), so the choice is what keeps it narrow.
TEST(PolicyChoice, BlocksFirstStillChoosesByTheWholeTime) {
  LaunchShape S = shape("waves", 132 * 4 * 20); // PTB 2 per SM, slices 4
  S.OrigPerSM = 4;
  PolicyConfig Cfg;
  Cfg.BlocksFirst = true;
  Cfg.Beside = true;
  Policy P(Cfg);
  Choice C = profile(P, S, [](const Choice &X) -> uint64_t {
    if (X.F == Form::Original)
      return 400 * Us;
    if (X.F == Form::Ptb && X.Workers == 264 && X.Chunk == 1)
      return 440 * Us; // the fastest preemptible form: turnaround 11 us
    return 460 * Us;
  });
  EXPECT_EQ(C.F, Form::Ptb);
  EXPECT_EQ(C.Workers, 264u);
  EXPECT_EQ(C.Chunk, 1u);
  ASSERT_EQ(P.decisions().size(), 1u);
  EXPECT_TRUE(P.decisions()[0].MeetsTarget);
  Choice Orig;
  EXPECT_TRUE(P.besideOk(S, Orig)) << "the original alone would go beside HP by its waves";
}

// As a client of below-normal priority, an original of waves within
// BesideWaveUs is chosen however long it is in all: an arriving HP kernel
// waits for one short wave at most, where a variant costs BE its overhead
// and takes HP's share of the SMs. Measured as above: 1000 us in 100 waves
// of 10 us against PTB at 1200 us. The original ends the measuring (no
// variant is timed) and goes beside HP. Not so: waves of 20 us (over the
// 15), the rule off (0), a turnaround target that 10 us with a quarter
// more exceeds (12 us), normal priority, an unknown occupancy, or a shape
// revoked from beside HP (besideChecked, here held to the 15 us it was
// admitted for), which chooses again; nor does the choice hold where the
// waves are no longer known.
TEST(PolicyChoice, ShortWavesOfAnOriginalRunBesideHp) {
  PolicyConfig Cfg;
  Cfg.BlocksFirst = true;
  Cfg.Beside = true;
  Cfg.BesideWaveUs = 15;
  auto Time = [](const Choice &X) -> uint64_t {
    return X.F == Form::Original ? 1000 * Us : 1200 * Us;
  };
  LaunchShape S = shape("short-waves", 132 * 4 * 100); // PTB 2 per SM, slices 4
  S.OrigPerSM = 4;
  {
    Policy P(Cfg);
    unsigned Measuring = 0;
    Choice C;
    for (int I = 0; I < 100; ++I) {
      C = P.choose(S);
      if (!C.Measuring)
        break;
      EXPECT_EQ(C.F, Form::Original) << "a variant measured: " << C.name();
      ++Measuring;
      P.measured(S, C, Time(C));
    }
    EXPECT_EQ(C.F, Form::Original);
    EXPECT_EQ(Measuring, Cfg.Repeats);
    EXPECT_TRUE(P.besideOk(S, C));
    ASSERT_EQ(P.decisions().size(), 1u);
    EXPECT_TRUE(P.decisions()[0].MeetsTarget);
    EXPECT_DOUBLE_EQ(P.decisions()[0].WaitUs, 10.0);
    // Re-timed waves of 20 us: within the turnaround target, but over the
    // 15 us it was admitted for (with a quarter of slack, 18.75): revoked,
    // then chosen again among its variants.
    bool Revoked = false;
    for (unsigned I = 0; I < 8 && !Revoked; ++I)
      Revoked = P.besideChecked(S.Key, 20 * Us);
    ASSERT_TRUE(Revoked);
    Choice Again = profile(P, S, Time);
    EXPECT_EQ(Again.F, Form::Ptb) << Again.name();
  }
  {
    // Waves of 18 us re-timed (within the slack): never revoked.
    Policy P(Cfg);
    ASSERT_EQ(profile(P, S, Time).F, Form::Original);
    for (unsigned I = 0; I < 16; ++I)
      EXPECT_FALSE(P.besideChecked(S.Key, 18 * Us)) << I;
    // Launched where its waves are not known (an HP process that is no MPS
    // client: the runtime does not ask the original's occupancy), the
    // choice made for them does not hold: its variants are measured and one
    // is chosen.
    LaunchShape NoWaves = S;
    NoWaves.OrigPerSM = 0;
    Choice C = P.choose(NoWaves);
    EXPECT_TRUE(C.Measuring && C.F != Form::Original) << C.name();
    EXPECT_EQ(profile(P, NoWaves, Time).F, Form::Ptb);
  }
  {
    // An original short as a whole (one wave of 10 us) is chosen by the
    // whole-time rule, not for its waves: its re-timing checks keep the
    // target as their limit.
    Policy P(Cfg);
    LaunchShape One = S;
    One.Key.Kernel = "one-wave";
    One.Key.Grid[0] = 132 * 4;
    One.Blocks = 132 * 4;
    ASSERT_EQ(profile(P, One, [](const Choice &) -> uint64_t { return 10 * Us; }).F,
              Form::Original);
    for (unsigned I = 0; I < 16; ++I)
      EXPECT_FALSE(P.besideChecked(One.Key, 20 * Us)) << I;
  }
  auto ChoiceWith = [&](PolicyConfig C, LaunchShape L) { Policy P(C); return profile(P, L, Time); };
  LaunchShape Long = S;
  Long.Blocks = 132 * 4 * 50; // 50 waves of 20 us
  EXPECT_EQ(ChoiceWith(Cfg, Long).F, Form::Ptb) << "20 us waves";
  PolicyConfig Off = Cfg;
  Off.BesideWaveUs = 0;
  EXPECT_EQ(ChoiceWith(Off, S).F, Form::Ptb) << "the rule off";
  PolicyConfig Tight = Cfg;
  Tight.TurnaroundUs = 12;
  EXPECT_NE(ChoiceWith(Tight, S).F, Form::Original) << "12.5 us with the quarter, over 12";
  PolicyConfig Normal = Cfg;
  Normal.BlocksFirst = false;
  EXPECT_EQ(ChoiceWith(Normal, S).F, Form::Ptb) << "normal priority";
  LaunchShape Unknown = S;
  Unknown.OrigPerSM = 0;
  EXPECT_EQ(ChoiceWith(Cfg, Unknown).F, Form::Ptb) << "occupancy unknown";
}

// Under MPS (Beside) an original or sliced form counts as within the
// target only when it may run beside HP (besideOk: a quarter to spare);
// otherwise it would wait for HP to be idle at every launch. An original
// of 28 us (35 with the quarter) loses to PTB with half a wave of workers
// (40 us, turnaround 20; the full wave's turnaround is its 40 us); slices
// of 30 us to slices of 8. Without Beside both are within the target, as
// before. A small grid's original, which runs beside HP for its size
// (besideSmall), needs no margin.
TEST(PolicyChoice, UnderMpsWithinTheTargetMeansBesideHp) {
  PolicyConfig Mps;
  Mps.Beside = true;
  LaunchShape S = shape("near", 132 * 2); // one wave of PTB workers
  // PTB workers 264 (turnaround 40), 132 (20), 66 (11); slices of 132 (2
  // slices, 21 us each).
  auto Orig = [](const Choice &C) -> uint64_t {
    if (C.F == Form::Original)
      return 28 * Us;
    if (C.F == Form::Ptb)
      return C.Workers == 132 ? 40 * Us : 44 * Us;
    return 42 * Us;
  };
  LaunchShape Sl = shape("sliced", 132 * 4 * 20, 0, 4); // slices only
  auto Slices = [](const Choice &C) -> uint64_t {
    // 20 slices of a wave (30 us each) or 80 of a quarter wave (8 us).
    return C.F == Form::Original ? 590 * Us : C.SliceBlocks == 528 ? 600 * Us : 640 * Us;
  };
  {
    Policy P(Mps);
    Choice C = profile(P, S, Orig);
    EXPECT_EQ(C.F, Form::Ptb);
    EXPECT_EQ(C.Workers, 132u);
    EXPECT_TRUE(P.decisions().back().MeetsTarget);
    Choice D = profile(P, Sl, Slices);
    ASSERT_EQ(D.F, Form::Slice);
    EXPECT_EQ(D.SliceBlocks, 132u);
    EXPECT_TRUE(P.besideOk(Sl, D));
  }
  {
    Policy P;
    Choice C = profile(P, S, Orig);
    EXPECT_EQ(C.F, Form::Original);
    EXPECT_TRUE(P.decisions().back().MeetsTarget);
    EXPECT_FALSE(P.besideOk(S, C)) << "28 us, 35 with a quarter more";
    Choice D = profile(P, Sl, Slices);
    ASSERT_EQ(D.F, Form::Slice);
    EXPECT_EQ(D.SliceBlocks, 528u);
  }
  {
    // 4 blocks, one per SM: within the 66 a narrow PTB launch keeps.
    PolicyConfig Small = Mps;
    Small.BesidePtbPercent = 50;
    Policy P(Small);
    LaunchShape Four = shape("four", 4);
    Four.OrigPerSM = 1;
    Choice C = profile(P, Four, Orig);
    EXPECT_EQ(C.F, Form::Original);
    EXPECT_TRUE(P.besideSmall(Four, C));
  }
}

// Under MPS a shape whose original was chosen to run beside HP and then
// timed too long too often (besideChecked revoked it) is chosen again: a
// preemptible form, which runs beside HP, rather than an original held at
// every launch. One decision entry per shape all the same.
TEST(PolicyChoice, UnderMpsARevokedOriginalIsChosenAgain) {
  PolicyConfig Mps;
  Mps.Beside = true;
  Policy P(Mps);
  LaunchShape S = shape("revoked", 132 * 2);
  auto Time = [](const Choice &X) -> uint64_t {
    return X.F == Form::Original ? 20 * Us : X.F == Form::Ptb && X.Workers == 132 ? 30 * Us
                                                                                 : 36 * Us;
  };
  Choice C = profile(P, S, Time);
  ASSERT_EQ(C.F, Form::Original);
  EXPECT_EQ(P.profileMisses(), 2u) << "the original within the target did not end the measuring";
  ASSERT_TRUE(P.besideOk(S, C));
  bool Revoked = false;
  for (unsigned I = 0; I < Policy::BesideRevokeOver; ++I)
    Revoked = P.besideChecked(S.Key, 200 * Us);
  ASSERT_TRUE(Revoked);
  EXPECT_FALSE(P.besideOk(S, C));
  // The original no longer within the target, the variants are measured
  // now (its measurements had ended the measuring).
  EXPECT_TRUE(P.choose(S).Measuring);
  Choice Again = profile(P, S, Time);
  EXPECT_FALSE(Again.Measuring);
  EXPECT_EQ(Again.F, Form::Ptb);
  EXPECT_EQ(Again.Workers, 132u);
  ASSERT_EQ(P.decisions().size(), 1u);
  EXPECT_EQ(P.decisions()[0].Chosen, "ptb:w=132,c=1");
  // Without MPS nothing runs beside HP: a revocation changes no choice.
  Policy N;
  Choice D = profile(N, S, [](const Choice &X) -> uint64_t {
    return X.F == Form::Original ? 20 * Us : 30 * Us;
  });
  ASSERT_EQ(D.F, Form::Original);
  for (unsigned I = 0; I < Policy::BesideRevokeOver; ++I)
    N.besideChecked(S.Key, 200 * Us);
  EXPECT_EQ(N.choose(S).F, Form::Original);
}

// Under MPS a decision's MeetsTarget for an original is besideOk's answer,
// to the nanosecond, around the margin (31.6 us / 1.25 = 25.28 us).
TEST(PolicyChoice, UnderMpsMeetsTargetIsBesideOk) {
  PolicyConfig Mps;
  Mps.Beside = true;
  unsigned Within = 0;
  for (uint64_t Ns = 25'200; Ns <= 25'360; ++Ns) {
    Policy P(Mps);
    LaunchShape S = shape("only", 1000, 0, 0); // no variants
    Choice C = profile(P, S, [Ns](const Choice &) { return Ns; });
    ASSERT_EQ(P.decisions().size(), 1u);
    EXPECT_EQ(P.decisions()[0].MeetsTarget, P.besideOk(S, C)) << Ns;
    Within += P.decisions()[0].MeetsTarget;
  }
  EXPECT_GT(Within, 0u);
  EXPECT_LT(Within, 161u);
}

TEST(PolicyChoice, ShortKernelsRunAsTheyAre) {
  Policy P;
  LaunchShape S = shape("short", 1000);
  // 20 us in all: within the target as it is. Its two measurements end the
  // measuring: no variant is tried (each would be a slower launch, made
  // only while HP is idle).
  std::map<std::string, int> Seen;
  Choice C = profile(P, S, [&](const Choice &X) -> uint64_t {
    ++Seen[X.name()];
    return X.F == Form::Original ? 20 * Us : 24 * Us;
  });
  EXPECT_EQ(C.F, Form::Original);
  EXPECT_EQ(Seen.size(), 1u);
  EXPECT_EQ(Seen["original"], 2);
  EXPECT_EQ(P.profileMisses(), 2u);
  ASSERT_EQ(P.decisions().size(), 1u);
  EXPECT_EQ(P.decisions()[0].Chosen, "original");
  EXPECT_TRUE(P.decisions()[0].MeetsTarget);
  EXPECT_FALSE(P.decisions()[0].OriginalOnly) << "the kernel has variants";
  // Under MPS the target means beside HP, with a quarter to spare: 20 us
  // is within it (25 us), 30 us is not, and the variants are measured.
  PolicyConfig Mps;
  Mps.Beside = true;
  Policy M(Mps);
  EXPECT_EQ(profile(M, S, [](const Choice &) { return 20 * Us; }).F, Form::Original);
  EXPECT_EQ(M.profileMisses(), 2u);
  LaunchShape L = shape("longer", 1000);
  profile(M, L, [](const Choice &X) -> uint64_t { return X.F == Form::Original ? 30 * Us : 36 * Us; });
  EXPECT_EQ(M.profileMisses(), 2u + 2u * Policy::candidates(L).size());
}

// Under MPS (PTB beside HP at 50 % of a wave), an original whose grid fits
// in that share goes beside HP however long it is; a bigger grid, a
// variant's form, a measuring launch, or no share, not.
TEST(PolicyChoice, SmallGridsBesideForTheirSize) {
  PolicyConfig Cfg;
  Cfg.BesidePtbPercent = 50;
  Policy P(Cfg);
  LaunchShape S = shape("small", 4, 0, 0);
  S.OrigPerSM = 8; // 132 SMs: 1,056 slots, 528 in the share
  Choice First = P.choose(S);
  EXPECT_FALSE(P.besideSmall(S, First)) << "measuring";
  Choice C = profile(P, S, [](const Choice &) -> uint64_t { return 500 * Us; });
  EXPECT_FALSE(P.besideOk(S, C)) << "500 us is long";
  EXPECT_TRUE(P.besideSmall(S, C));
  LaunchShape Edge = S, Over = S;
  Edge.Blocks = 528;
  Over.Blocks = 529;
  EXPECT_TRUE(P.besideSmall(Edge, C));
  EXPECT_FALSE(P.besideSmall(Over, C));
  LaunchShape Unknown = S;
  Unknown.OrigPerSM = 0;
  EXPECT_FALSE(P.besideSmall(Unknown, C)) << "footprint unknown";
  Choice Ptb;
  Ptb.F = Form::Ptb;
  Ptb.Workers = 4;
  EXPECT_FALSE(P.besideSmall(S, Ptb));
  Policy NoShare; // BesidePtbPercent 0: PTB leaves the GPU for HP
  Choice C2 = profile(NoShare, S, [](const Choice &) -> uint64_t { return 500 * Us; });
  EXPECT_FALSE(NoShare.besideSmall(S, C2));
}

// Under MPS a launch may start beside HP when it is an original measured
// within the target (a quarter more included); kernels without variants
// have that one candidate and are measured all the same.
TEST(PolicyChoice, BesideOnlyForShortMeasuredOriginals) {
  Policy P; // target 31.6 us
  LaunchShape Plain = shape("plain", 1000, 0, 0);
  ASSERT_EQ(Policy::candidates(Plain).size(), 1u);
  Choice First = P.choose(Plain);
  EXPECT_TRUE(First.Measuring);
  EXPECT_FALSE(P.besideOk(Plain, First)) << "not measured yet";
  Choice C = profile(P, Plain, [](const Choice &) -> uint64_t { return 25 * Us; });
  EXPECT_EQ(C.F, Form::Original);
  EXPECT_TRUE(P.besideOk(Plain, C)) << "25 us with a quarter more is 31.25 us";
  ASSERT_EQ(P.decisions().size(), 1u);
  EXPECT_TRUE(P.decisions()[0].OriginalOnly);
  // Timed again later: a check over the target now and then (a host
  // stall) keeps it beside HP; 4 of the last 8 over do not.
  const uint64_t Long = 500 * Us, Fine = 20 * Us;
  for (int Round = 0; Round < 20; ++Round) {
    EXPECT_FALSE(P.besideChecked(Plain.Key, Long));
    for (int I = 0; I < 2; ++I)
      EXPECT_FALSE(P.besideChecked(Plain.Key, Fine));
  }
  EXPECT_TRUE(P.besideOk(Plain, C)) << "one check in three over the target";
  EXPECT_EQ(P.besideChecksOver(), 20u);
  // Eight fine checks clear the window; then three over keep it, a fourth
  // does not.
  for (int I = 0; I < 8; ++I)
    EXPECT_FALSE(P.besideChecked(Plain.Key, Fine));
  for (int I = 0; I < 3; ++I)
    EXPECT_FALSE(P.besideChecked(Plain.Key, Long));
  EXPECT_TRUE(P.besideOk(Plain, C)) << "3 of the last 8 over";
  EXPECT_TRUE(P.besideChecked(Plain.Key, Long)) << "4 of the last 8 over: revoked";
  EXPECT_FALSE(P.besideOk(Plain, C));
  EXPECT_FALSE(P.besideChecked(Plain.Key, Long)) << "revoked once";
  // The target itself is within it.
  LaunchShape Edge = shape("edge", 1000, 0, 0);
  Choice E2 = profile(P, Edge, [](const Choice &) -> uint64_t { return 20 * Us; });
  for (int I = 0; I < 8; ++I)
    EXPECT_FALSE(P.besideChecked(Edge.Key, 31600));
  EXPECT_TRUE(P.besideOk(Edge, E2));
  LaunchShape Longer = shape("longer", 1000, 0, 0);
  Choice L = profile(P, Longer, [](const Choice &) -> uint64_t { return 26 * Us; });
  EXPECT_FALSE(P.besideOk(Longer, L)) << "26 us with a quarter more is 32.5 us";
  // A sliced choice whose slice (with a quarter more) is within the target
  // goes beside HP, one slice at a time; one whose slices are longer not.
  LaunchShape Sl = shape("sliced", 10000, 0, 8); // slices only: 8 per SM, 132 SMs
  Choice SC = profile(P, Sl, [](const Choice &X) -> uint64_t {
    return X.F == Form::Original ? 200 * Us : 210 * Us;
  });
  ASSERT_EQ(SC.F, Form::Slice);
  // 210 us over ceil(10000 / 1056) = 10 slices: 21 us a slice, 26.25 with the margin.
  EXPECT_TRUE(P.besideOk(Sl, SC)) << SC.name();
  LaunchShape Sl2 = shape("sliced-long", 10000, 0, 8);
  Choice SC2 = profile(P, Sl2, [](const Choice &X) -> uint64_t {
    return X.F == Form::Original ? 250 * Us : 260 * Us;
  });
  ASSERT_EQ(SC2.F, Form::Slice);
  EXPECT_FALSE(P.besideOk(Sl2, SC2)) << "26 us a slice, 32.5 with the margin";
  // A PTB choice is preempted when HP arrives: never beside.
  LaunchShape Big = shape("big", 10000);
  Choice B = profile(P, Big, [](const Choice &X) -> uint64_t {
    return X.F == Form::Original ? 1000 * Us : 1010 * Us;
  });
  ASSERT_EQ(B.F, Form::Ptb);
  EXPECT_FALSE(P.besideOk(Big, B));
  EXPECT_FALSE(P.decisions().back().OriginalOnly);
}

// Under MPS a PTB launch keeps a share of a full wave of workers beside HP:
// at least one, never more than it has; none when the share is 0. A kernel
// with one worker per SM narrows to fewer SMs (it must not count as narrow
// at full width: it would never leave for HP).
TEST(PolicyBeside, PtbWorkersBesideHp) {
  PolicyConfig C;
  C.BesidePtbPercent = 25;
  Policy P(C);
  EXPECT_EQ(P.besideWorkers(8, 132, 8 * 132), 2u * 132) << "a quarter of 8 per SM";
  EXPECT_EQ(P.besideWorkers(2, 132, 2 * 132), 66u) << "a quarter of the wave";
  EXPECT_EQ(P.besideWorkers(8, 132, 100), 100u) << "a small grid keeps its workers";
  EXPECT_EQ(P.besideWorkers(0, 132, 100), 0u) << "the variant does not fit";
  EXPECT_EQ(P.besideWorkers(1, 2, 2), 1u) << "at least one";
  C.BesidePtbPercent = 50;
  EXPECT_EQ(Policy(C).besideWorkers(1, 132, 132), 66u) << "one per SM: half the SMs";
  EXPECT_EQ(Policy(C).besideWorkers(7, 132, 7 * 132), 462u) << "half the wave";
  C.BesidePtbPercent = 100;
  EXPECT_EQ(Policy(C).besideWorkers(8, 132, 8 * 132), 8u * 132);
  EXPECT_EQ(Policy().besideWorkers(8, 132, 8 * 132), 0u) << "off by default in the policy";
}

// A launch of a shape being measured while HP runs a request: with
// Provisional (and PTB beside HP), the PTB variant on a full wave, marked to
// stay narrow and not measured; nothing for a shape without a PTB variant
// that fits, nor with any of the three settings off. hpActive tells a
// running request from the idle window after one.
TEST(PolicyBeside, ProvisionalFormOfShapesBeingMeasured) {
  PolicyConfig C;
  C.BesidePtbPercent = 50;
  C.Beside = true;
  C.Provisional = true;
  Policy P(C);
  Choice Out;
  LaunchShape S = shape("k", 10000, 2, 4);
  ASSERT_TRUE(P.choose(S).Measuring);
  ASSERT_TRUE(P.provisional(S, Out));
  EXPECT_EQ(Out.F, Form::Ptb);
  EXPECT_EQ(Out.Workers, 2u * 132) << "a full wave (narrowed at the launch)";
  EXPECT_EQ(Out.Chunk, 1u);
  EXPECT_TRUE(Out.StayNarrow);
  EXPECT_FALSE(Out.Measuring);
  EXPECT_EQ(Out.name(), "ptb:w=264,c=1") << "StayNarrow is no part of the name";
  ASSERT_TRUE(P.provisional(shape("small", 40, 2, 4), Out));
  EXPECT_EQ(Out.Workers, 40u) << "a small grid: a worker per block";
  EXPECT_FALSE(P.provisional(shape("noptb", 10000, 0, 4), Out)) << "no PTB variant";
  PolicyConfig NoProvisional = C, NoBeside = C, NoPtbBeside = C;
  NoProvisional.Provisional = false;
  NoBeside.Beside = false;
  NoPtbBeside.BesidePtbPercent = 0;
  EXPECT_FALSE(Policy(NoProvisional).provisional(S, Out));
  EXPECT_FALSE(Policy(NoBeside).provisional(S, Out));
  EXPECT_FALSE(Policy(NoPtbBeside).provisional(S, Out));
  uint64_t T = 10 * Ms;
  P.observe(T, hp(1, true, 1));
  EXPECT_TRUE(P.hpActive());
  P.observe(T + 10 * Us, hp(1, false, 1));
  EXPECT_FALSE(P.hpActive()) << "the idle window is no request";
  EXPECT_TRUE(P.hpBusy(T + 20 * Us));
}

// A narrow launch widens only once HP has been quiet for the widen window
// (and never sooner than the idle window); HP activity starts it over.
TEST(PolicyBeside, WidenAfterTheQuietWindow) {
  PolicyConfig C;
  C.BesidePtbPercent = 25;
  C.IdleWindowNs = 100 * Us;
  C.WidenNs = 1 * Ms;
  Policy P(C);
  EXPECT_TRUE(P.widen(0)) << "no HP seen yet";
  uint64_t T = 10 * Ms;
  P.observe(T, hp(1, true, 1));
  EXPECT_FALSE(P.widen(T)) << "HP active";
  P.observe(T + 50 * Us, hp(1, false, 1));
  EXPECT_FALSE(P.widen(T + 50 * Us));
  EXPECT_FALSE(P.hpBusy(T + 200 * Us)) << "idle after the idle window";
  EXPECT_FALSE(P.widen(T + 900 * Us)) << "idle, but not yet quiet for the widen window";
  EXPECT_TRUE(P.widen(T + 1050 * Us));
  P.observe(T + 1100 * Us, hp(1, false, 2)); // an arrival between two looks
  EXPECT_FALSE(P.widen(T + 1200 * Us));
  EXPECT_TRUE(P.widen(T + 2100 * Us));
  // A widen window shorter than the idle window is the idle window.
  C.WidenNs = 10 * Us;
  Policy Q(C);
  Q.observe(T, hp(1, false, 1));
  Q.observe(T + 1 * Us, hp(1, false, 2));
  EXPECT_FALSE(Q.widen(T + 50 * Us));
  EXPECT_TRUE(Q.widen(T + 101 * Us));
}

TEST(PolicyChoice, NoneWithinTheTarget) {
  Policy P;
  // 40 blocks of 1 ms each, one wave: nothing gets under 31.6 us; the
  // shortest turnaround among candidates at most 1.5x slower than the
  // fastest. PTB with 20 workers: 2 ms, turnaround 1 ms; 10 workers: 4 ms
  // (too slow).
  LaunchShape S = shape("long", 40);
  Choice C = profile(P, S, [](const Choice &X) -> uint64_t {
    if (X.F == Form::Original)
      return 1400 * Us;
    return uint64_t(1400) * Us * 40 / X.Workers;
  });
  // 1.5x of 1.4 ms is 2.1 ms: ptb:w=20 (2.8 ms) is out; ptb:w=40 equals the
  // original's time and turnaround; the original comes first.
  EXPECT_EQ(C.F, Form::Original);
  Policy P2;
  C = profile(P2, S, [](const Choice &X) -> uint64_t {
    if (X.F == Form::Original)
      return 1400 * Us;
    return X.Workers == 20 ? 2000 * Us : 1400 * Us * 40 / X.Workers;
  });
  EXPECT_EQ(C.name(), "ptb:w=20,c=1");
  // Recorded as it is: 43 % over the original, outside the target.
  ASSERT_EQ(P2.decisions().size(), 1u);
  EXPECT_NEAR(P2.decisions()[0].costOverOriginal(), 2000.0 / 1400 - 1, 1e-9);
  EXPECT_FALSE(P2.decisions()[0].MeetsTarget);
  ASSERT_EQ(P.decisions().size(), 1u);
  EXPECT_EQ(P.decisions()[0].Chosen, "original");
  EXPECT_EQ(P.decisions()[0].costOverOriginal(), 0.0);
}

TEST(PolicyChoice, ShapesAreProfiledApart) {
  Policy P;
  LaunchShape A = shape("k", 10000), B = shape("k", 20000);
  profile(P, A, [](const Choice &) { return 100 * Us; });
  Choice C = P.choose(B);
  EXPECT_TRUE(C.Measuring);
}

TEST(PolicyChoice, TheProfileCacheIsReusedByALaterProcess) {
  char Dir[] = "/tmp/tally-policy-XXXXXX";
  ASSERT_NE(mkdtemp(Dir), nullptr);
  std::string Path = ProfileCache::pathFor(Dir, "GPU-test");
  LaunchShape S = shape("gemm@0123abcd", 10000);
  auto Time = [](const Choice &C) -> uint64_t {
    return C.F == Form::Ptb && C.Workers == 264 && C.Chunk == 1 ? 1010 * Us : 1500 * Us;
  };
  Choice First;
  {
    ProfileCache Cache(Path);
    std::string W, E;
    ASSERT_TRUE(Cache.load(W)) << W;
    Policy P(PolicyConfig{}, &Cache);
    First = profile(P, S, Time);
    EXPECT_GT(P.profileMisses(), 0u);
    ASSERT_TRUE(Cache.save(E)) << E;
  }
  {
    ProfileCache Cache(Path);
    std::string W;
    ASSERT_TRUE(Cache.load(W)) << W;
    Policy P(PolicyConfig{}, &Cache);
    Choice C = P.choose(S);
    EXPECT_FALSE(C.Measuring);
    EXPECT_EQ(C, First);
    EXPECT_EQ(P.profileMisses(), 0u);
  }
  std::string E;
  ProfileCache::clear(Path, E);
  rmdir(Dir);
}

//===----------------------------------------------------------------------===//
// A simulated run: Poisson HP arrivals, a BE loop that obeys the policy
//===----------------------------------------------------------------------===//

TEST(PolicySimulation, BestEffortNeverStartsInsideTheIdleWindow) {
  Policy P;
  std::mt19937_64 Rng(7);
  std::exponential_distribution<double> Gap(1.0 / 2000.0); // mean 2 ms between requests
  uint64_t Now = 0, NextHp = 1 * Ms, HpEnd = 0, Arrivals = 0;
  uint64_t BeStarts = 0, Violations = 0, BeBusyNs = 0;
  const uint64_t Step = 5 * Us, End = 2000 * Ms;
  while (Now < End) {
    if (Now >= NextHp) {
      ++Arrivals;
      HpEnd = Now + 80 * Us; // each request keeps HP busy 80 us
      NextHp = Now + static_cast<uint64_t>(Gap(Rng) * Us);
    }
    bool Active = Now < HpEnd;
    P.observe(Now, hp(1, Active, Arrivals));
    if (!P.hpBusy(Now) && P.mode(Now) == Policy::Mode::Guarded) {
      ++BeStarts;
      // The BE launch may start: HP must have been idle for the window.
      if (Now < HpEnd + P.config().IdleWindowNs - Step)
        ++Violations;
      BeBusyNs += Step;
    }
    Now += Step;
  }
  EXPECT_EQ(Violations, 0u);
  EXPECT_GT(BeStarts, 0u);
  // HP busy 80 us + 100 us window per 2 ms: BE may run most of the time.
  EXPECT_GT(double(BeBusyNs) / double(End), 0.8);
}

} // namespace

//===----------------------------------------------------------------------===//
// The settings the scheduler reads (Config.h)
//===----------------------------------------------------------------------===//

namespace {
std::map<std::string, std::string> TestEnv;
const char *testGetEnv(const char *N) {
  auto It = TestEnv.find(N);
  return It == TestEnv.end() ? nullptr : It->second.c_str();
}
Config configOf(std::map<std::string, std::string> Env, std::string &Error) {
  TestEnv = std::move(Env);
  return Config::fromEnvironment(testGetEnv, Error);
}
} // namespace

TEST(SchedulerConfig, BesideDefaultsAndBounds) {
  std::string E;
  Config C = configOf({}, E);
  EXPECT_TRUE(C.Enabled) << E;
  EXPECT_EQ(C.BesidePtbPercent, 50u);
  EXPECT_EQ(C.WidenUs, 1000u);
  C = configOf({{"TALLY_BESIDE_PTB_PERCENT", "0"}, {"TALLY_WIDEN_US", "5000"}}, E);
  EXPECT_TRUE(C.Enabled) << E;
  EXPECT_EQ(C.BesidePtbPercent, 0u);
  EXPECT_EQ(C.WidenUs, 5000u);
  C = configOf({{"TALLY_BESIDE_PTB_PERCENT", "101"}}, E);
  EXPECT_FALSE(C.Enabled);
  EXPECT_NE(E.find("TALLY_BESIDE_PTB_PERCENT"), std::string::npos) << E;
  C = configOf({{"TALLY_WIDEN_US", "soon"}}, E);
  EXPECT_FALSE(C.Enabled);
  // Each bad value disables the runtime, and the error names the variable.
  auto ExpectRejected = [&](const char *Var, std::initializer_list<const char *> Bads) {
    for (const char *Bad : Bads) {
      Config R = configOf({{Var, Bad}}, E);
      EXPECT_FALSE(R.Enabled) << Var << "=" << Bad;
      EXPECT_NE(E.find(Var), std::string::npos) << E;
    }
  };
  EXPECT_EQ(configOf({}, E).NarrowUnwatchedUs, 1000u);
  C = configOf({{"TALLY_NARROW_UNWATCHED_US", "0"}}, E);
  EXPECT_TRUE(C.Enabled) << E;
  EXPECT_EQ(C.NarrowUnwatchedUs, 0u);
  ExpectRejected("TALLY_NARROW_UNWATCHED_US", {"10000001", "1.5", "-1", "never"});
  EXPECT_EQ(configOf({}, E).BesideWaveUs, 0u);
  C = configOf({{"TALLY_BESIDE_WAVE_US", "15"}}, E);
  EXPECT_TRUE(C.Enabled) << E;
  EXPECT_EQ(C.BesideWaveUs, 15u);
  ExpectRejected("TALLY_BESIDE_WAVE_US", {"1001", "12.5", "-1", "short"});
  // On unless turned off: measuring in Free mode, provisional launches of
  // shapes being measured, the armed preemption flag.
  const struct {
    const char *Var, *Bad;
    bool Config::*Field;
  } OnByDefault[] = {{"TALLY_FREE_MEASURE", "sometimes", &Config::FreeMeasure},
                     {"TALLY_PROVISIONAL", "maybe", &Config::Provisional},
                     {"TALLY_ARMED_FLAG", "yes please", &Config::ArmedFlag}};
  for (const auto &F : OnByDefault) {
    SCOPED_TRACE(F.Var);
    EXPECT_TRUE(configOf({}, E).*F.Field);
    C = configOf({{F.Var, "0"}}, E);
    EXPECT_TRUE(C.Enabled) << E;
    EXPECT_FALSE(C.*F.Field);
    C = configOf({{F.Var, F.Bad}}, E);
    EXPECT_FALSE(C.Enabled);
    EXPECT_NE(E.find(F.Var), std::string::npos) << E;
  }
}

// The debugging settings of the internal streams (Config::DebugFreshResume):
// off by default, least or greatest, 0 or 1; anything else is refused.
TEST(SchedulerConfig, DebugStreamSettings) {
  std::string E;
  Config C = configOf({}, E);
  EXPECT_EQ(C.DebugResumePriority, Config::DebugPriority::AsIs);
  EXPECT_EQ(C.DebugSignalPriority, Config::DebugPriority::AsIs);
  EXPECT_FALSE(C.DebugFreshResume);
  C = configOf({{"TALLY_DEBUG_RESUME_PRIORITY", "greatest"},
                {"TALLY_DEBUG_SIGNAL_PRIORITY", "least"},
                {"TALLY_DEBUG_FRESH_RESUME", "1"}},
               E);
  EXPECT_TRUE(C.Enabled) << E;
  EXPECT_EQ(C.DebugResumePriority, Config::DebugPriority::Greatest);
  EXPECT_EQ(C.DebugSignalPriority, Config::DebugPriority::Least);
  EXPECT_TRUE(C.DebugFreshResume);
  for (const char *Var : {"TALLY_DEBUG_RESUME_PRIORITY", "TALLY_DEBUG_SIGNAL_PRIORITY"}) {
    C = configOf({{Var, "middle"}}, E);
    EXPECT_FALSE(C.Enabled);
    EXPECT_NE(E.find(Var), std::string::npos) << E;
  }
  C = configOf({{"TALLY_DEBUG_FRESH_RESUME", "yes"}}, E);
  EXPECT_FALSE(C.Enabled);
}

// The JSON statistics of a process that is not the one `tally run` started
// (it inherited the settings: a spawned worker, a launcher's rank) go
// beside the file, under its pid.
TEST(SchedulerConfig, StatisticsOfOtherProcessesGoBesideTheFile) {
  std::string E;
  Config C = configOf({{"TALLY_STATS", "/tmp/s.json"}, {"TALLY_STATS_PID", "4242"}}, E);
  EXPECT_TRUE(C.Enabled) << E;
  EXPECT_EQ(C.StatsOwnerPid, 4242u);
  EXPECT_EQ(statsFileFor(C.StatsFile, C.StatsOwnerPid, 4242), "/tmp/s.json");
  EXPECT_EQ(statsFileFor(C.StatsFile, C.StatsOwnerPid, 77), "/tmp/s.77.json");
  EXPECT_EQ(statsFileFor("/tmp/s.json", 0, 77), "/tmp/s.json") << "owner unknown: as given";
  EXPECT_EQ(statsFileFor("stats", 1, 77), "stats.77");
  EXPECT_EQ(statsFileFor("run.d/stats", 1, 77), "run.d/stats.77") << "a dot in a folder";
  EXPECT_EQ(statsFileFor("out/.stats", 1, 77), "out/.stats.77") << "a leading dot";
  EXPECT_EQ(statsFileFor("a.b.json", 1, 77), "a.b.77.json");
  EXPECT_EQ(statsFileFor("", 1, 77), "");
  EXPECT_EQ(configOf({}, E).StatsOwnerPid, 0u);
  for (const char *Bad : {"x", "-3", "99999999999"}) {
    EXPECT_FALSE(configOf({{"TALLY_STATS_PID", Bad}}, E).Enabled) << Bad;
    EXPECT_NE(E.find("TALLY_STATS_PID"), std::string::npos) << E;
  }
}

// Timing events around each launch are for BE processes unless asked for:
// in an HP process they cost the service its latency.
TEST(SchedulerConfig, StatisticsTimingOffInHpProcessesUnlessAsked) {
  std::string E;
  EXPECT_TRUE(configOf({{"TALLY_STATS", "1"}}, E).StatsTiming);
  EXPECT_FALSE(configOf({{"TALLY_STATS", "1"}, {"TALLY_PRIORITY", "high"}}, E).StatsTiming);
  EXPECT_TRUE(configOf({{"TALLY_STATS", "1"}, {"TALLY_PRIORITY", "high"},
                        {"TALLY_STATS_TIMING", "1"}}, E).StatsTiming);
  EXPECT_FALSE(configOf({{"TALLY_STATS", "1"}, {"TALLY_STATS_TIMING", "0"}}, E).StatsTiming);
  // One launch in N timed.
  Config C = configOf({{"TALLY_STATS", "1"}, {"TALLY_STATS_TIMING", "16"}}, E);
  EXPECT_TRUE(C.Enabled && C.StatsTiming);
  EXPECT_EQ(C.StatsTimingEvery, 16u);
  EXPECT_EQ(configOf({{"TALLY_STATS", "1"}}, E).StatsTimingEvery, 1u);
  for (const char *Bad : {"1000001", "-1", "sometimes"}) {
    EXPECT_FALSE(configOf({{"TALLY_STATS_TIMING", Bad}}, E).Enabled) << Bad;
    EXPECT_NE(E.find("TALLY_STATS_TIMING"), std::string::npos) << E;
  }
  EXPECT_FALSE(configOf({{"TALLY_PRIORITY", "high"}}, E).StatsTurnaround);
  EXPECT_TRUE(configOf({{"TALLY_PRIORITY", "high"}, {"TALLY_STATS_TURNAROUND", "1"}}, E)
                  .StatsTurnaround);
}
