//===- Policy.h - when and how best-effort kernels run ----------*- C++ -*-===//
//
// The scheduler's decisions for a best-effort (BE) process, as plain code:
// no driver calls, no threads, no clock of its own. The runtime feeds it
// what it observes of the high-priority (HP) processes (the shared segment's
// view, with the time of the observation) and asks it, per BE launch,
// whether the launch may start and in which form; it reports back how long
// each measured launch took. Tests drive it with a simulated clock.
//
// Rules (BRIEF.md section 3, improved):
//  * No HP process, or none active for `SilenceNs` (default 100 ms): BE
//    kernels run as originals at full speed (mode Free).
//  * Otherwise (mode Guarded) a BE launch starts only when HP has been idle
//    for `IdleWindowNs` (default 100 us): the launching thread is held until
//    then. A running preemptible launch is told to leave as soon as HP is
//    seen active (hpBusy), and resumed once HP has been idle for the window.
//  * The form of a launch is profile-guided, per (kernel, grid, block,
//    dynamic shared bytes): the candidate configurations (the original; PTB
//    with a full, a half and a quarter wave of workers, and a full wave
//    with chunks of 4; slices of one wave and of a quarter wave) are each
//    measured `Repeats` times on real launches made while HP is idle (every
//    form computes the same result, so measuring costs only the time a
//    slower form takes); the original is measured first, and when it is
//    within the target nothing else is (a variant, the same code with more
//    work, would not be faster by more than noise); else the fastest
//    candidate whose estimated
//    turnaround (how long an arriving HP kernel waits for it) is within
//    `TurnaroundUs` is chosen. If none is, the one with the shortest
//    turnaround among those at most 1.5x slower than the fastest. Under
//    MPS (Beside, below) an original or sliced form is within the target
//    when it may run beside HP by its whole time or one slice, with a
//    quarter to spare: one that is not would wait for HP to be idle at
//    every launch. (Not by one wave of an original, waitUs: chosen so,
//    originals at full width beside HP made an HP request of several
//    one-wave kernels wait for BE blocks at each of them; except, as a
//    client of below-normal priority, an original of waves within
//    `BesideWaveUs`: HP's kernels wait for one such short wave at most.)
//    Grids with fewer blocks than SMs get the same consideration (fewer
//    PTB workers than blocks make them preemptible at some cost), where the
//    original Tally always ran them whole. Kernels without variants, and
//    launches only the original can make (clusters), have one candidate,
//    the original: it is measured all the same (for the next rule).
//  * Under MPS, a launch whose chosen form is the original and measured
//    short (besideOk: its time, with a quarter more, within TurnaroundUs),
//    or the sliced form with slices that short, need not wait for HP to be
//    idle: kernels of two processes run side by
//    side there, and an arriving HP kernel waits for it no longer than the
//    turnaround target. (Measured on an H100: eager PyTorch training beside
//    a ResNet-50 service under plain MPS kept the service's p99; held until
//    HP was idle, it lost two thirds of its speed.)
//  * Under MPS as a client of below-normal priority (BlocksFirst), the GPU
//    starts HP's waiting blocks before this process's: an original whose
//    one wave (its time over the waves of its grid) is that short goes
//    beside HP however long it is in all (eager PyTorch's elementwise
//    kernels: hundreds of microseconds of blocks of a few).
//  * Under MPS as a client of below-normal priority, while every HP
//    process is launch bound (it waits for the GPU less than
//    `LaunchBoundPermille` of its requests' time, as the HP processes
//    publish it in the segment), a launch that would wait for HP to be idle
//    starts beside it instead (launchBound): the requests of such a service
//    are mostly the host issuing launches, its GPU work waits for the
//    running BE blocks at most, and holding BE costs BE most of its speed
//    and gains HP nothing measurable (eager ResNet-50 and BERT beside eager
//    training, H100: BE kept 0.23-0.31 held, 0.96-0.97 not, HP's median
//    within the runs' spread). A service
//    that waits for the GPU more (a GPU-bound one), or whose share is not
//    known (not published yet, or by an older runtime), is held for as
//    before.
//  * Under MPS, an original whose grid fits in the share that a narrow PTB
//    launch keeps beside HP (below) may start beside HP however long it is
//    (besideSmall): it takes no more room from HP than that launch would.
//  * Under MPS, a launch of a shape whose profile is incomplete, made while
//    an HP request runs, does not wait for HP to be idle to be measured
//    (Provisional, provisional()): it starts at once as the PTB variant on
//    the share of workers a PTB launch keeps beside HP (below), and stays
//    that narrow (its blocks' length is not known yet, so it is never
//    widened, which would make it leave for HP at the next arrival). The
//    candidates are measured at launches made while HP is idle. (Measured
//    on an H100: a Triton training job starting beside a service at half
//    load spent 0.9 s of its first 3 s held for such measurements.)
//  * Under MPS, a PTB launch need not leave the GPU for HP either: it keeps
//    `BesidePtbPercent` of a full wave of workers (besideWorkers; never
//    more than it has) while HP works. A launch made while
//    HP is not quiet starts that narrow; a wide one is preempted when HP
//    arrives and resumed narrow at once; a narrow one is widened (preempted
//    and resumed with all its workers) once HP has been quiet for
//    `WidenNs` (hpQuiet). Measured on an H100 under MPS: BE kernels of 2-4
//    of 8 blocks per SM beside an HP service at half load kept 0.72-0.85
//    of BE's rate with HP's p99 within about 10 us of HP alone.
//
// Turnaround estimates from a measured time T of a launch of N blocks:
// original T (it cannot be stopped); PTB with W workers claiming C blocks
// at a time: C * T * W / N (a worker finishes its claim before it leaves);
// slices of S blocks: T / ceil(N / S) (one slice).
//
//===----------------------------------------------------------------------===//
#ifndef TALLY_RUNTIME_POLICY_H
#define TALLY_RUNTIME_POLICY_H

#include "tally/Runtime/Config.h"
#include "tally/Runtime/ProfileCache.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tally::rt {

struct PolicyConfig {
  double TurnaroundUs = 31.6;
  uint64_t IdleWindowNs = 100'000;
  uint64_t SilenceNs = 100'000'000;
  unsigned Repeats = 2; ///< measurements of each candidate before choosing
  uint32_t BesidePtbPercent = 0; ///< 0: PTB launches leave the GPU for HP
  uint64_t WidenNs = 1'000'000;
  /// The GPU starts HP's waiting blocks before any of this process's (an
  /// MPS client of below-normal priority): an arriving HP kernel waits for
  /// the running blocks of an original, not for the rest of it (waitUs).
  bool BlocksFirst = false;
  /// Launches within the target may run beside HP (MPS, not --no-beside):
  /// choose() then counts an original or a sliced form as within the
  /// target only with a quarter to spare, as besideOk admits it.
  bool Beside = false;
  /// With BlocksFirst: launches start beside HP while every HP process
  /// waits for the GPU less than this share (permille) of its requests'
  /// time (launchBound). 0: never.
  uint32_t LaunchBoundPermille = 0;
  /// With BlocksFirst and Beside: an original whose one wave (waitUs) is
  /// within this many microseconds, and with a quarter more within
  /// TurnaroundUs (besideOk's rule), counts as within the target however
  /// long it is in all (withinTarget). 0: never.
  double BesideWaveUs = 0;
  /// With Beside and BesidePtbPercent: launches of shapes being measured
  /// start narrow beside a running HP request (provisional).
  bool Provisional = false;
};

/// What the HP processes look like at one instant (from the segment).
struct HpObservation {
  unsigned HpProcesses = 0;
  bool Active = false;
  uint64_t Arrivals = 0; ///< grows with every HP launch
  /// Every HP process's share of its requests' time spent waiting for the
  /// GPU is known (and every one is an MPS client); the largest of them,
  /// in permille.
  bool WaitShareKnown = false;
  uint32_t WaitPermille = 0;
};

/// A BE launch as the policy sees it.
struct LaunchShape {
  ProfileKey Key;
  uint64_t Blocks = 0;
  bool HasPtb = false, HasSlice = false;
  int PtbPerSM = 0;   ///< PTB variant's blocks per SM at this shape (0: does not fit)
  int SlicePerSM = 0; ///< sliced variant's blocks per SM at this shape
  int OrigPerSM = 0;  ///< the original's blocks per SM (0: not known)
  int SMs = 0;
};

/// One configuration of a launch.
struct Choice {
  Form F = Form::Original;
  uint32_t Workers = 0;     ///< PTB: total workers
  uint32_t Chunk = 1;       ///< PTB: blocks per claim
  uint32_t SliceBlocks = 0; ///< slices: blocks per slice
  /// Being measured: time the launch and report it with measured().
  bool Measuring = false;
  /// PTB: runs on the workers it may keep beside HP (besideWorkers of
  /// Workers) from start to end, never widened (provisional).
  bool StayNarrow = false;
  /// Decided from a complete profile: the chosen form's fastest measured
  /// time (0: not known).
  uint64_t BestNs = 0;
  /// The candidate's token in the profile cache ("original", "ptb:w=264,c=1",
  /// "slice:b=528").
  std::string name() const;
  bool operator==(const Choice &O) const {
    return F == O.F && Workers == O.Workers && Chunk == O.Chunk && SliceBlocks == O.SliceBlocks;
  }
};

/// A choice made from a complete profile, with what it costs: the chosen
/// form's fastest time against the original's (both measured while HP was
/// idle) and its estimated turnaround.
struct Decision {
  ProfileKey Key;
  std::string Chosen; ///< Choice::name()
  uint64_t ChosenNs = 0, OriginalNs = 0;
  double TurnaroundUs = 0;
  /// What an arriving HP kernel waits for it (Policy::waitUs).
  double WaitUs = 0;
  /// Within the turnaround target as choose() weighs it (withinTarget:
  /// under MPS an original or slices with a quarter to spare).
  bool MeetsTarget = false;
  /// Its wait, with a quarter more, within the target: besideOk's rule as
  /// of the choice (a later revocation aside).
  bool Short = false;
  /// The shape had no candidate but the original (a kernel without
  /// variants): there was nothing to choose.
  bool OriginalOnly = false;
  /// ChosenNs / OriginalNs - 1 (0.03: 3 % slower than the original).
  double costOverOriginal() const {
    return OriginalNs ? double(ChosenNs) / double(OriginalNs) - 1.0 : 0.0;
  }
};

class Policy {
public:
  enum class Mode { Free, Guarded };

  explicit Policy(PolicyConfig C = {}, ProfileCache *Cache = nullptr) : Cfg(C), Cache(Cache) {}

  /// A fresh view of the HP processes at time \p Now (ns, monotonic).
  void observe(uint64_t Now, const HpObservation &O);
  Mode mode(uint64_t Now) const;
  /// HP is active, or was less than the idle window ago: BE must not start
  /// work and running preemptible work must leave.
  bool hpBusy(uint64_t Now) const;
  /// HP has been idle for at least \p Ns (or was never seen active).
  bool hpQuiet(uint64_t Now, uint64_t Ns) const {
    return !Active && (LastActive == 0 || Now >= LastActive + Ns);
  }
  /// A narrow PTB launch may take all its workers back.
  bool widen(uint64_t Now) const { return hpQuiet(Now, widenNs()); }
  /// The quiet a widening needs: WidenNs, never less than the idle window.
  uint64_t widenNs() const { return std::max(Cfg.WidenNs, Cfg.IdleWindowNs); }
  /// How many of a PTB launch's \p Wide workers (\p PerSM per SM on
  /// \p SMs SMs at most) run beside HP: BesidePtbPercent of a full wave
  /// (PerSM x SMs), at least one; never more than Wide (a launch already
  /// within the share keeps its workers). 0 when the percentage is 0 (the
  /// launch leaves the GPU for HP). With one worker per SM, 50 % is one on
  /// half the SMs, where the block scheduler puts them.
  uint32_t besideWorkers(int PerSM, int SMs, uint32_t Wide) const;
  /// Every HP process is launch bound (the last observation's largest
  /// wait share is known and below LaunchBoundPermille), and this process
  /// is an MPS client of below-normal priority (BlocksFirst): a launch that
  /// would wait for HP to be idle may start beside it.
  bool launchBound() const {
    return Cfg.BlocksFirst && Cfg.LaunchBoundPermille && Present && WaitKnown &&
           WaitPermille < Cfg.LaunchBoundPermille;
  }
  /// An HP request is running (as of the last observation; not merely
  /// the idle window after one).
  bool hpActive() const { return Active; }
  /// When HP was last seen active (0: never).
  uint64_t lastHpActivity() const { return LastActive; }
  uint64_t arrivals() const { return Arrivals; }

  /// The candidates for \p S, original first.
  static std::vector<Choice> candidates(const LaunchShape &S);
  /// The form for a launch of shape \p S in Guarded mode: the next candidate
  /// that still needs a measurement, else the profile's choice.
  Choice choose(const LaunchShape &S);
  /// The form for a launch of \p S that choose() would measure, made
  /// while an HP request runs, so that it need not wait for HP to be idle:
  /// with Provisional (under MPS, PTB launches beside HP), the PTB variant
  /// on a full wave of workers, StayNarrow (launched on its share beside
  /// HP, never widened), unmeasured. False when \p S has no PTB variant
  /// that fits (the launch waits for HP as before).
  bool provisional(const LaunchShape &S, Choice &Out) const;
  /// A measured launch (made while HP stayed idle) of \p C took \p Ns.
  void measured(const LaunchShape &S, const Choice &C, uint64_t Ns);
  /// Estimated turnaround in us of \p C for \p S when it takes \p Ns.
  static double turnaroundUs(const LaunchShape &S, const Choice &C, uint64_t Ns);
  /// How long an arriving HP kernel waits for a launch of \p C for \p S
  /// that takes \p Ns, in us: its turnaround; with BlocksFirst, for an
  /// original of known occupancy (OrigPerSM), one wave's time (\p Ns over
  /// the waves of its grid): when its running blocks end, HP's get the
  /// room, not its next wave. (Assumes blocks of even length; a grid of
  /// one wave, as persistent kernels have, waits for all of it.)
  double waitUs(const LaunchShape &S, const Choice &C, uint64_t Ns) const;
  /// How long an arriving HP kernel may have to wait for a launch of \p C
  /// for \p S queued before it, in ns, from the measurements (waitUs): an
  /// original's whole time (with BlocksFirst one wave of it), a PTB
  /// launch's turnaround; a quarter more as a
  /// margin. 0 when \p C was not measured, and for slices (issued one at a
  /// time anyway): such a launch is not queued behind others.
  uint64_t queuedWaitNs(const LaunchShape &S, const Choice &C) const;
  /// May a launch of \p C for \p S start while HP is busy, beside it (under
  /// MPS)? A measured original whose wait (waitUs, a quarter more; with
  /// BlocksFirst one wave's time) is within the turnaround target, or a measured sliced form whose slice is (its
  /// slices then go one after the other while HP works, and an arriving HP
  /// kernel waits for one); both with a quarter to spare. Not a PTB launch
  /// (it runs narrow beside HP instead), nor an unmeasured one.
  bool besideOk(const LaunchShape &S, const Choice &C) const;
  /// May a launch of the original for \p S start beside HP (under MPS) for
  /// its size, whatever its time? When its grid takes no more of the GPU
  /// than a PTB launch beside HP is allowed (BesidePtbPercent of a full
  /// wave, by the original's blocks per SM): such a launch holds no more
  /// room from HP than a narrow PTB launch does, for as long. (A 4-block
  /// layernorm kernel of 52 us waited for HP 6,341 times in 10 s.)
  bool besideSmall(const LaunchShape &S, const Choice &C) const;
  /// A launch of \p K allowed beside HP was timed again (made while HP was
  /// idle; one short launch in 16 is): \p Ns. When BesideRevokeOver of the
  /// last BesideCheckWindow such checks of \p K were longer than the
  /// target, its time depends on more than its shape: never beside again in
  /// this process, and its form is chosen again (under MPS the original
  /// and slices no longer count as within the target for it). One long
  /// check is not enough: a host stall between the start event and the
  /// launch (seen on the GPU machines, hundreds of microseconds) times a
  /// short kernel long now and then, and a long-lived process would lose
  /// every shape to them. Returns whether this check revoked \p K.
  bool besideChecked(const ProfileKey &K, uint64_t Ns);
  /// Whether \p K was revoked (besideChecked): its later checks say nothing.
  bool besideRevoked(const ProfileKey &K) const { return NoBeside.count(K) != 0; }
  /// Of the checks so far, those over the target.
  uint64_t besideChecksOver() const { return ChecksOver; }
  static constexpr unsigned BesideCheckWindow = 8, BesideRevokeOver = 4;

  /// Choices made from a complete profile, and launches that were
  /// measurements (for the statistics).
  uint64_t profileHits() const { return Hits; }
  uint64_t profileMisses() const { return Misses; }
  /// The launch choose() last returned a measurement for is not one after
  /// all (it started in its provisional form): not counted as a miss.
  void notMeasuring() {
    if (Misses)
      --Misses;
  }
  /// Every choice made from a complete profile, once per launch shape, in
  /// the order made.
  const std::vector<Decision> &decisions() const { return Decisions; }
  const PolicyConfig &config() const { return Cfg; }

private:
  struct Measurement {
    uint32_t Count = 0;
    uint64_t BestNs = 0;
  };
  Measurement lookup(const ProfileKey &K, const std::string &Name) const;
  /// Is \p C for \p S, taking \p Ns, within the turnaround target for
  /// choose()? Its turnaround; with Beside, for an original or a sliced
  /// form, with a quarter to spare (besideOk's margin), except an original
  /// small enough to run beside HP for its size (besideSmall), which
  /// needs only its turnaround within the target as before.
  bool withinTarget(const LaunchShape &S, const Choice &C, uint64_t Ns) const;
  /// Is \p C for \p S, taking \p Ns, an original within the target for its
  /// short waves alone (BesideWaveUs)?
  bool shortWaves(const LaunchShape &S, const Choice &C, uint64_t Ns) const;
  /// How long an arriving HP kernel may wait for one launch of \p C for
  /// \p S, with a quarter more (its turnaround; for slices, one slice); 0
  /// when not measured.
  uint64_t measuredWaitNs(const LaunchShape &S, const Choice &C) const;
  /// waitUs for a launch taking \p Ns, in ns, with a quarter more.
  uint64_t waitNs(const LaunchShape &S, const Choice &C, uint64_t Ns) const;
  /// \p Us in ns with a quarter more, rounded up: the margin of the rules
  /// for running beside HP.
  static uint64_t marginNs(double Us);
  /// \p Us with a quarter more within the target (the margin above).
  bool withinMargin(double Us) const { return double(marginNs(Us)) <= Cfg.TurnaroundUs * 1e3; }

  PolicyConfig Cfg;
  ProfileCache *Cache;
  /// Measurements of this process (also recorded into Cache when given).
  std::map<std::pair<ProfileKey, std::string>, Measurement> Local;
  /// Decisions made from complete profiles.
  std::map<ProfileKey, Choice> Decided;
  /// Decided as the original for its short waves (shortWaves): a choice
  /// that holds only while its waves are known (the original's occupancy,
  /// which the runtime asks only where MPS rules apply), and whose
  /// re-timing checks are held to BesideWaveUs (besideChecked).
  std::set<ProfileKey> ByWaves;
  std::set<ProfileKey> NoBeside;
  /// Per shape allowed beside HP: its last checks, one bit each (1: over
  /// the target), the latest lowest.
  std::map<ProfileKey, uint8_t> CheckBits;
  uint64_t ChecksOver = 0;
  std::vector<Decision> Decisions;
  bool Present = false, Active = false;
  bool WaitKnown = false;
  uint32_t WaitPermille = 0;
  uint64_t LastActive = 0, Arrivals = 0;
  bool SeenArrivals = false;
  uint64_t Hits = 0, Misses = 0;
};

} // namespace tally::rt

#endif
