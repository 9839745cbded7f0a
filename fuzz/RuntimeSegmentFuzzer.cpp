//===- RuntimeSegmentFuzzer.cpp - fuzz the shared segment's readers -------===//
//
// The shared segment is written by other processes, so its readers must take
// any bytes. Each input is read twice: as a whole image (from a buffer of
// exactly its size, so ASan sees any over-read, and from a misaligned copy),
// and as the slots of an image behind a valid version 1 header (so short
// inputs reach the slot checks too). validateSegmentImage, hpViewOfImage and
// slotsOfImage (`tally status`'s reader) are compared with a plain model of
// Segment.h's rules, written here with
// memcpy reads, and their promises are checked (at most 64 processes, no
// activity without an HP process, a wait share within 0-1000 and 0 when not
// known, a valid image has the expected header). A
// broken promise aborts so the fuzzer keeps the input.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/Segment.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace tally::rt;

namespace {

constexpr uint64_t StaleNs = 50'000'000;

void check(bool Cond) {
  if (!Cond)
    std::abort();
}

template <typename T> T readAt(const uint8_t *Bytes, size_t Off) {
  T V;
  std::memcpy(&V, Bytes + Off, sizeof(T));
  return V;
}

bool modelHeaderOk(const uint8_t *B, size_t Size) {
  return Size >= seg::HeaderBytes && std::memcmp(B, "TALLYSHM", 8) == 0 &&
         readAt<uint32_t>(B, 8) == seg::Version &&
         readAt<uint32_t>(B, 12) == seg::HeaderBytes &&
         readAt<uint32_t>(B, 16) == seg::SlotCount &&
         readAt<uint32_t>(B, 20) == seg::SlotBytes &&
         readAt<uint64_t>(B, 24) == seg::TotalBytes &&
         readAt<uint32_t>(B, 32) == 1;
}

size_t slotAt(unsigned I) {
  return seg::HeaderBytes + size_t(I) * seg::SlotBytes;
}

bool modelValid(const uint8_t *B, size_t Size) {
  if (Size < seg::TotalBytes || !modelHeaderOk(B, Size))
    return false;
  for (unsigned I = 0; I < seg::SlotCount; ++I) {
    uint32_t State = readAt<uint32_t>(B, slotAt(I));
    if (State > 2 || (State == 2 && readAt<uint32_t>(B, slotAt(I) + 4) > 1))
      return false;
  }
  return true;
}

HpView modelView(const uint8_t *B, size_t Size, uint64_t Now) {
  HpView V;
  bool WaitUnknown = false;
  if (!modelHeaderOk(B, Size))
    return V;
  for (unsigned I = 0; I < seg::SlotCount && slotAt(I + 1) <= Size; ++I) {
    size_t S = slotAt(I);
    uint32_t Prio = readAt<uint32_t>(B, S + 4);
    uint64_t Hb = readAt<uint64_t>(B, S + 32);
    bool Fresh =
        Hb <= Now ? Now - Hb <= StaleNs : Hb - Now <= seg::FutureSlackNs;
    if (readAt<uint32_t>(B, S) != 2 || Prio > 1 || !Fresh)
      continue;
    if (Prio == 1) {
      ++V.BeProcesses;
      continue;
    }
    ++V.HpProcesses;
    uint64_t Started = readAt<uint64_t>(B, S + 40);
    uint64_t Finished = readAt<uint64_t>(B, S + 48);
    V.Active |= Started > Finished;
    V.Arrivals += Started;
    V.LastLaunchNs = std::max(V.LastLaunchNs, readAt<uint64_t>(B, S + 56));
    uint32_t Flags = readAt<uint32_t>(B, S + 12);
    V.HpWithoutMps += (Flags & seg::FlagNoMps) != 0;
    uint32_t W = readAt<uint32_t>(B, S + 72);
    if (!(Flags & seg::FlagWaitShare) || W == 0 || W > 1001)
      WaitUnknown = true;
    else
      V.WaitPermille = std::max(V.WaitPermille, W - 1);
  }
  V.WaitShareKnown = V.HpProcesses > 0 && !WaitUnknown;
  if (!V.WaitShareKnown)
    V.WaitPermille = 0;
  return V;
}

bool same(const HpView &A, const HpView &B) {
  return A.HpProcesses == B.HpProcesses && A.BeProcesses == B.BeProcesses &&
         A.Active == B.Active && A.Arrivals == B.Arrivals &&
         A.LastLaunchNs == B.LastLaunchNs && A.HpWithoutMps == B.HpWithoutMps &&
         A.WaitShareKnown == B.WaitShareKnown && A.WaitPermille == B.WaitPermille;
}

/// slotsOfImage's promise: with a ready version 1 header, every whole slot
/// within Size whose state is claiming or live, in order, with its raw
/// fields; without one, false and nothing.
bool sameSlots(const uint8_t *B, size_t Size, bool Ok, const std::vector<SlotInfo> &Got) {
  if (Ok != modelHeaderOk(B, Size))
    return false;
  if (!Ok)
    return Got.empty();
  size_t K = 0;
  for (unsigned I = 0; I < seg::SlotCount && slotAt(I + 1) <= Size; ++I) {
    size_t S = slotAt(I);
    uint32_t State = readAt<uint32_t>(B, S);
    if (State != 1 && State != 2)
      continue;
    if (K >= Got.size())
      return false;
    const SlotInfo &G = Got[K++];
    if (G.Index != I || G.State != State ||
        uint32_t(G.Prio) != readAt<uint32_t>(B, S + 4) || G.Pid != readAt<uint32_t>(B, S + 8) ||
        G.Flags != readAt<uint32_t>(B, S + 12) || G.StartTime != readAt<uint64_t>(B, S + 16) ||
        G.HeartbeatNs != readAt<uint64_t>(B, S + 32) || G.Started != readAt<uint64_t>(B, S + 40) ||
        G.Finished != readAt<uint64_t>(B, S + 48) ||
        G.LastLaunchNs != readAt<uint64_t>(B, S + 56) ||
        G.Preemptions != readAt<uint64_t>(B, S + 64) || G.WaitShare != readAt<uint32_t>(B, S + 72))
      return false;
  }
  return K == Got.size();
}

/// A clock near the first live-looking heartbeat, so that some slots are
/// fresh and some stale or in the future.
uint64_t pickNow(const uint8_t *B, size_t Size) {
  for (unsigned I = 0; I < seg::SlotCount && slotAt(I + 1) <= Size; ++I)
    if (readAt<uint32_t>(B, slotAt(I)) == 2) {
      uint64_t Hb = readAt<uint64_t>(B, slotAt(I) + 32);
      return Hb + uint64_t(B[slotAt(I) + 72]) * 1'000'000;
    }
  return 1'000'000'000;
}

void checkImage(const uint8_t *Data, size_t Size) {
  // Exactly Size bytes, and a misaligned copy of them.
  std::unique_ptr<uint8_t[]> Buf(new uint8_t[Size ? Size : 1]);
  std::unique_ptr<uint8_t[]> Odd(new uint8_t[Size + 1]);
  if (Size) {
    std::memcpy(Buf.get(), Data, Size);
    std::memcpy(Odd.get() + 1, Data, Size);
  }

  std::string Why = "stale";
  bool Valid = validateSegmentImage(Buf.get(), Size, Why);
  check(Valid == modelValid(Buf.get(), Size));
  check(Valid == Why.empty());
  if (Valid) {
    const uint8_t *B = Buf.get();
    check(Size >= seg::TotalBytes && std::memcmp(B, "TALLYSHM", 8) == 0);
    check(readAt<uint32_t>(B, 8) == 1 && readAt<uint32_t>(B, 16) == 64 &&
          readAt<uint32_t>(B, 20) == 128 && readAt<uint64_t>(B, 24) == 8256);
  }
  std::string OddWhy;
  check(validateSegmentImage(Odd.get() + 1, Size, OddWhy) == Valid &&
        OddWhy == Why);

  uint64_t Now = pickNow(Buf.get(), Size);
  HpView V = hpViewOfImage(Buf.get(), Size, Now, StaleNs);
  check(V.HpProcesses + V.BeProcesses <= seg::SlotCount);
  check(V.HpWithoutMps <= V.HpProcesses);
  check(V.WaitPermille <= 1000 && (V.WaitShareKnown || V.WaitPermille == 0));
  check(V.HpProcesses || (!V.Active && V.Arrivals == 0 && V.LastLaunchNs == 0));
  check(same(V, modelView(Buf.get(), Size, Now)));
  check(same(V, hpViewOfImage(Odd.get() + 1, Size, Now, StaleNs)));

  std::vector<SlotInfo> Slots, OddSlots;
  std::string SlotsWhy, OddSlotsWhy;
  bool SlotsOk = slotsOfImage(Buf.get(), Size, Slots, SlotsWhy);
  check(SlotsOk == SlotsWhy.empty() && Slots.size() <= seg::SlotCount);
  check(sameSlots(Buf.get(), Size, SlotsOk, Slots));
  check(slotsOfImage(Odd.get() + 1, Size, OddSlots, OddSlotsWhy) == SlotsOk &&
        OddSlotsWhy == SlotsWhy && OddSlots.size() == Slots.size());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  checkImage(Data, Size);

  // The input as the slots behind a valid header, zero-padded to a whole
  // image: short inputs exercise the slot rules too.
  std::unique_ptr<uint8_t[]> Img(new uint8_t[seg::TotalBytes]());
  std::memcpy(Img.get(), "TALLYSHM", 8);
  const uint32_t Header[] = {seg::Version, seg::HeaderBytes, seg::SlotCount,
                             seg::SlotBytes};
  std::memcpy(Img.get() + 8, Header, sizeof(Header));
  std::memcpy(Img.get() + 24, &seg::TotalBytes, 8);
  const uint32_t Ready = 1;
  std::memcpy(Img.get() + 32, &Ready, 4);
  size_t N = std::min<size_t>(Size, seg::TotalBytes - seg::HeaderBytes);
  if (N)
    std::memcpy(Img.get() + seg::HeaderBytes, Data, N);
  checkImage(Img.get(), seg::TotalBytes);
  return 0;
}
