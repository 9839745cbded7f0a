//===- Launcher.cpp - launching, preempting and resuming variants ---------===//
//
// The mechanism, inside one process:
//
//  * Parameters: the original's arguments are copied into the variant's
//    parameter buffer (from kernelParams through the driver's parameter
//    layout, or from the `extra` buffer), the extra parameters written at
//    the offsets the metadata gives; variants are launched with that buffer.
//  * Slices: sub-grids of the sliced variant, in order, on the
//    application's stream.
//  * PTB: on the application's stream S: clear a 16-byte control block from
//    a pool, launch the workers (about one wave), and, when the launch may
//    be preempted, `cuStreamWaitValue32(S, done >= blocks)`: later work on S
//    starts only once every logical block ran, whoever ran it, with no host
//    synchronisation. The preemptor thread raises the flag from a
//    high-priority stream, waits for the workers to leave, reads `done`,
//    and relaunches on an internal non-blocking stream until the grid is
//    complete. A control block goes back to the pool when the GPU no longer
//    reads it (its launch's and its gate's events have completed).
//  * The drain lock: some driver calls wait for GPU work holding the
//    driver's lock (a synchronous copy, cuMemFree: BlockingCalls.def). A
//    program thread in one while its launch is stopped would keep the
//    preemptor from queuing the resumption the call waits for: a hang.
//    So the preemptor raises a flag only when no program thread is in such
//    a call, and one that enters one meanwhile waits until the resumption
//    is queued (Drain, RuntimeImpl.h).
//
//===----------------------------------------------------------------------===//

#include "RuntimeImpl.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tally::rt {

using Clock = std::chrono::steady_clock;

bool Runtime::Impl::buildParams(const KernelEntry &K, const VariantInfo &V,
                                const LaunchArgs &A, uint32_t SliceOffset, CUdeviceptr Ctrl,
                                uint32_t Chunk, std::vector<uint64_t> &Buf, size_t &Bytes) {
  Bytes = V.ParamBytes;
  Buf.assign((Bytes + 7) / 8, 0);
  auto *P = reinterpret_cast<unsigned char *>(Buf.data());
  if (A.Extra) {
    void *Src = nullptr;
    size_t Size = 0;
    bool HaveSize = false;
    for (void **E = A.Extra; *E != CU_LAUNCH_PARAM_END; E += 2) {
      if (*E == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        Src = E[1];
      } else if (*E == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        if (!E[1])
          return false;
        std::memcpy(&Size, E[1], sizeof Size);
        HaveSize = true;
      } else {
        return false; // an option we do not know: leave the launch alone
      }
    }
    if (!HaveSize || (Size && !Src))
      return false;
    // Packed buffers may be padded past the last parameter.
    std::memcpy(P, Src, std::min<size_t>(Size, V.OriginalParamBytes));
  } else if (!K.Params.empty()) {
    if (!A.Params)
      return false;
    for (size_t I = 0; I < K.Params.size(); ++I) {
      if (!A.Params[I])
        return false;
      std::memcpy(P + K.Params[I].first, A.Params[I], K.Params[I].second);
    }
  }
  for (const ExtraParamSlot &S : V.Extra) {
    uint64_t Value = 0;
    switch (S.Role) {
    case ParamRole::SliceOffset:
      Value = SliceOffset;
      break;
    case ParamRole::GridX:
      Value = A.Grid[0];
      break;
    case ParamRole::GridY:
      Value = A.Grid[1];
      break;
    case ParamRole::GridZ:
      Value = A.Grid[2];
      break;
    case ParamRole::Chunk:
      Value = Chunk;
      break;
    case ParamRole::Control:
      Value = Ctrl;
      break;
    }
    if (S.Size == 4) {
      uint32_t V32 = static_cast<uint32_t>(Value);
      std::memcpy(P + S.Offset, &V32, 4);
    } else {
      std::memcpy(P + S.Offset, &Value, 8);
    }
  }
  return true;
}

CUresult Runtime::Impl::launchVariant(CUfunction VF, unsigned Grid, const unsigned Block[3],
                                      unsigned Shared, CUstream S, void *Params,
                                      size_t Bytes) {
  void *Extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, Params, CU_LAUNCH_PARAM_BUFFER_SIZE, &Bytes,
                   CU_LAUNCH_PARAM_END};
  return D.cuLaunchKernel(VF, Grid, 1, 1, Block[0], Block[1], Block[2], Shared, S, nullptr,
                          Extra);
}

int Runtime::Impl::workersPerSM(ContextState &C, CUfunction VF, bool IsKernel,
                                const LaunchArgs &A) {
  unsigned Threads = A.Block[0] * A.Block[1] * A.Block[2];
  auto Key = std::make_tuple(VF, Threads, A.SharedBytes);
  {
    std::lock_guard<std::mutex> G(C.Mu);
    auto It = C.Occupancy.find(Key);
    if (It != C.Occupancy.end())
      return It->second;
  }
  CUfunction F = VF;
  int N = 0;
  CUresult R = CUDA_SUCCESS;
  if (IsKernel)
    R = D.cuKernelGetFunction(&F, reinterpret_cast<CUkernel>(VF));
  if (R == CUDA_SUCCESS)
    R = D.cuOccupancyMaxActiveBlocksPerMultiprocessor(&N, F, static_cast<int>(Threads),
                                                      A.SharedBytes);
  if (R != CUDA_SUCCESS)
    N = 0;
  std::lock_guard<std::mutex> G(C.Mu);
  C.Occupancy[Key] = N;
  return N;
}

bool Runtime::Impl::launchSliced(KernelEntry &K, const LaunchArgs &A, ContextState &C,
                                 CUstream S, CUresult &R, const Choice *Pick, bool Paced) {
  uint64_t Blocks = uint64_t(A.Grid[0]) * A.Grid[1] * A.Grid[2];
  uint64_t PerSlice = Pick && Pick->SliceBlocks ? Pick->SliceBlocks : Cfg.SliceBlocks;
  if (!PerSlice) {
    int PerSM = workersPerSM(C, K.SliceFn, K.IsLibraryKernel, A);
    if (PerSM <= 0)
      return false;
    PerSlice = uint64_t(PerSM) * C.SMs;
  }
  std::vector<uint64_t> Buf;
  size_t Bytes = 0;
  for (uint64_t Off = 0; Off < Blocks; Off += PerSlice) {
    if (Paced && Off) {
      // Under the scheduler: the next slice is issued only once the last
      // one ended and HP is idle, so an arriving HP kernel waits for one
      // slice at most; under MPS, slices short enough go beside HP.
      // (An HP arrival during the launch counts once, not once per
      // slice: launchBe cleared BeOverlapCounted before the first.)
      if (D.cuEventRecord(C.BeDone, S) == CUDA_SUCCESS) {
        C.BeDoneRecorded = true;
        C.BeLastPreemptible = false;
      }
      bool Beside = C.SlicesBeside;
      if (Beside) {
        // Beside HP only while every HP process is an MPS client.
        observeBusy(nullptr);
        Beside = !Co.HpOffMps.load(std::memory_order_relaxed);
      }
      holdWhileHpBusy(C, /*HpMatters=*/!Beside);
    }
    if (!buildParams(K, *K.Slice, A, static_cast<uint32_t>(Off), 0, 1, Buf, Bytes)) {
      if (Off == 0)
        return false;
      R = CUDA_ERROR_UNKNOWN; // cannot happen after the first slice built
      return true;
    }
    unsigned Count = static_cast<unsigned>(std::min(PerSlice, Blocks - Off));
    R = launchVariant(K.SliceFn, Count, A.Block, A.SharedBytes, S, Buf.data(), Bytes);
    if (R != CUDA_SUCCESS) {
      if (Off == 0) {
        // Nothing ran: the original will.
        K.Disabled = true;
        warnOnce(K, "its sliced variant does not launch (" + D.errorName(R) + ")");
        return false;
      }
      logf(LogLevel::Error, "kernel %s: slice at block %llu failed to launch (%s)",
           K.Name.c_str(), static_cast<unsigned long long>(Off), D.errorName(R).c_str());
      return true;
    }
  }
  return true;
}

CUdeviceptr Runtime::Impl::acquireCtrl(ContextState &C, CtrlPrep &Prep, CUevent &WaitFor) {
  reclaim(C);
  // (Driver calls under C.Mu here and in releaseCtrl: an event query, and
  // every Count launches a memset, an event record and perhaps an
  // allocation, none of which waits for the GPU.)
  std::lock_guard<std::mutex> G(C.Mu);
  CtrlSlab *S = C.Filling;
  if (!S || S->Handed == CtrlSlab::Count) {
    // The next slab none of whose blocks is out: one known clear first,
    // then one being cleared, then one to clear block by block, else a new
    // one. (Every slab that comes back is cleared again at once, so slabs
    // are only added while all are in use.)
    S = nullptr;
    CtrlSlab *Clearing = nullptr, *Dirty = nullptr;
    for (auto &P : C.Slabs) {
      if (P->Handed)
        continue;
      if (P->St == CtrlSlab::State::Clearing && D.cuEventQuery(P->Cleared) == CUDA_SUCCESS)
        P->St = CtrlSlab::State::Clean;
      if (P->St == CtrlSlab::State::Clean) {
        S = P.get();
        break;
      }
      if (P->St == CtrlSlab::State::Clearing && !Clearing)
        Clearing = P.get();
      if (P->St == CtrlSlab::State::Dirty && !Dirty)
        Dirty = P.get();
    }
    if (!S)
      S = Clearing ? Clearing : Dirty;
    // A new one (never freed: reused for the context's life). One whose
    // clear was queued but cannot be tracked (Broken) is never used: the
    // next one is cleared block by block (clears are off from then on).
    for (int Try = 0; !S && Try < 2; ++Try) {
      auto P = std::make_unique<CtrlSlab>();
      if (D.cuMemAlloc(&P->Base, CtrlSlab::Count * 16) != CUDA_SUCCESS)
        return 0;
      S = P.get();
      C.Slabs.push_back(std::move(P));
      clearSlab(C, *S);
      if (S->St == CtrlSlab::State::Broken)
        S = nullptr;
    }
    if (!S)
      return 0;
    C.Filling = S;
  }
  if (S->St == CtrlSlab::State::Clearing && D.cuEventQuery(S->Cleared) == CUDA_SUCCESS)
    S->St = CtrlSlab::State::Clean;
  Prep = S->St == CtrlSlab::State::Clean      ? CtrlPrep::None
         : S->St == CtrlSlab::State::Clearing ? CtrlPrep::Wait
                                              : CtrlPrep::Clear;
  WaitFor = S->Cleared;
  return S->Base + 16 * S->Handed++;
}

void Runtime::Impl::releaseCtrl(ContextState &C, CUdeviceptr Ctrl) {
  for (auto &S : C.Slabs) {
    if (Ctrl < S->Base || Ctrl >= S->Base + 16 * CtrlSlab::Count)
      continue;
    // (Every block is handed out before the last one comes back.)
    if (++S->Returned < CtrlSlab::Count)
      return;
    S->Handed = S->Returned = 0;
    if (C.Filling == S.get())
      C.Filling = nullptr;
    // A clear still queued from the slab's last round precedes this one on
    // Clear: once this one's event completes, both have landed.
    clearSlab(C, *S);
    return;
  }
}

void Runtime::Impl::clearSlab(ContextState &C, CtrlSlab &S) {
  // (Never a Broken slab: none of its blocks goes out, so none comes back.)
  S.St = CtrlSlab::State::Dirty;
  if (C.ClearBroken)
    return;
  RelaxedCaptureGuard Relax(D); // (our own stream; not the program's capture)
  if ((!C.Clear && D.cuStreamCreateWithPriority(&C.Clear, CU_STREAM_NON_BLOCKING,
                                                C.LeastPriority) != CUDA_SUCCESS) ||
      (!S.Cleared && D.cuEventCreate(&S.Cleared, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)) {
    S.Cleared = nullptr; // (made again at the next try: none comes)
    C.ClearBroken = true;
    logf(LogLevel::Debug, "cannot clear control blocks a slab at a time; each launch clears its own");
    return;
  }
  if (D.cuMemsetD32Async(S.Base, 0, CtrlSlab::Count * 4, C.Clear) != CUDA_SUCCESS) {
    C.ClearBroken = true; // nothing queued: the slab stays Dirty
    return;
  }
  if (D.cuEventRecord(S.Cleared, C.Clear) != CUDA_SUCCESS) {
    // The memset may land at any time: none of the slab's blocks may be
    // used again.
    S.St = CtrlSlab::State::Broken;
    C.ClearBroken = true;
    return;
  }
  S.St = CtrlSlab::State::Clearing;
}

ArmWord Runtime::Impl::acquireArm(ContextState &C) {
  std::lock_guard<std::mutex> G(C.Mu);
  if (C.FreeArm.empty()) {
    // A slab of 256 words, one per 64 bytes; never freed (reused for the
    // process's life).
    constexpr size_t Stride = 64, Count = 256;
    void *Slab = nullptr;
    CUdeviceptr Dev = 0;
    if (C.ArmBroken || !D.cuMemHostAlloc || !D.cuMemHostGetDevicePointer ||
        D.cuMemHostAlloc(&Slab, Stride * Count, CU_MEMHOSTALLOC_DEVICEMAP) != CUDA_SUCCESS) {
      C.ArmBroken = true;
      return {};
    }
    if (D.cuMemHostGetDevicePointer(&Dev, Slab, 0) != CUDA_SUCCESS) {
      C.ArmBroken = true; // (the slab is kept: a failed driver frees nothing safely)
      return {};
    }
    for (size_t I = Count; I-- > 0;)
      C.FreeArm.push_back({reinterpret_cast<uint32_t *>(static_cast<char *>(Slab) + I * Stride),
                           Dev + I * Stride});
  }
  ArmWord W = C.FreeArm.back();
  C.FreeArm.pop_back();
  // The GPU is done with it (reclaim): nothing reads or writes it now.
  __atomic_store_n(W.Host, 0u, __ATOMIC_RELAXED);
  return W;
}

void Runtime::Impl::queueArmRelease(PtbLaunch &L, CUstream S) {
  L.ArmQueued = false; // (a wait of an earlier (re)launch was released when its flag went up)
  L.ArmSeq = 0;
  if (!L.Arm.Host || L.ArmOff || runsNarrow(L))
    return;
  const uint32_t N = L.ArmCount + 1;
  if (D.cuStreamWriteValue32(S, L.Arm.Dev, N, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
    L.ArmOff = true; // raised by driver calls from now on
    return;
  }
  L.ArmCount = L.ArmSeq = N;
}

void Runtime::Impl::armFlag(PtbLaunch &L) {
  ContextState &C = *L.C;
  if (!L.ArmSeq || L.ArmQueued || L.ArmOff)
    return;
  // Ordered after the (re)launch's clear of the block, as a raised flag is.
  if (D.cuStreamWaitEvent(C.Signal, L.Start, 0) != CUDA_SUCCESS ||
      D.cuStreamWaitValue32(C.Signal, L.Arm.Dev, L.ArmSeq, CU_STREAM_WAIT_VALUE_GEQ) !=
          CUDA_SUCCESS) {
    L.ArmOff = true; // nothing waits: raised by driver calls from now on
    return;
  }
  L.ArmQueued = true;
  L.ArmWrite = D.cuStreamWriteValue32(C.Signal, L.Ctrl + 4, 1, CU_STREAM_WRITE_VALUE_DEFAULT) ==
               CUDA_SUCCESS;
  // Recorded behind the wait even when the write failed: the block and the
  // word are reused only once the signal stream is past both.
  const bool Recorded = D.cuEventRecord(L.Flag, C.Signal) == CUDA_SUCCESS;
  L.ArmRecorded = L.ArmWrite && Recorded;
  if (!Recorded)
    L.Lost = true; // a wait or a late flag nobody can see pass: never reused
}

CUevent Runtime::Impl::acquireEvent(ContextState &C, bool Timing) {
  {
    std::lock_guard<std::mutex> G(C.Mu);
    auto &Free = Timing ? C.FreeTimingEvents : C.FreeEvents;
    if (!Free.empty()) {
      CUevent E = Free.back();
      Free.pop_back();
      return E;
    }
  }
  CUevent E = nullptr;
  if (D.cuEventCreate(&E, Timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    return nullptr;
  return E;
}

void Runtime::Impl::giveBackEvents(ContextState &C, const PtbLaunch &L) {
  if (L.Ctrl && !L.Lost && !L.CtrlKept)
    releaseCtrl(C, L.Ctrl);
  if (L.Arm.Host && !L.Lost)
    C.FreeArm.push_back(L.Arm);
  for (CUevent E : {L.Start, L.Gate})
    if (E)
      C.FreeEvents.push_back(E);
  for (CUevent E : {L.End, L.Flag})
    if (E)
      (L.Timed ? C.FreeTimingEvents : C.FreeEvents).push_back(E);
}

void Runtime::Impl::reclaim(ContextState &C) {
  std::lock_guard<std::mutex> G(C.Mu);
  while (!C.Retiring.empty()) {
    PtbLaunch &L = *C.Retiring.front();
    bool Busy = false;
    for (CUevent E : {L.End, L.Gate, L.Flag})
      if (E && D.cuEventQuery(E) == CUDA_ERROR_NOT_READY)
        Busy = true;
    if (Busy)
      break;
    giveBackEvents(C, L);
    C.Retiring.pop_front();
  }
}

void Runtime::Impl::retire(std::unique_ptr<PtbLaunch> L) {
  ContextState &C = *L->C;
  std::lock_guard<std::mutex> G(C.Mu);
  C.Retiring.push_back(std::move(L));
}

bool Runtime::Impl::launchPtb(KernelEntry &K, const LaunchArgs &A, ContextState &C,
                              CUstream S, CUresult &R, const Choice *Pick, bool Scheduled) {
  uint64_t Blocks = uint64_t(A.Grid[0]) * A.Grid[1] * A.Grid[2];
  int PerSM = workersPerSM(C, K.PtbFn, K.IsLibraryKernel, A);
  if (Cfg.PtbWorkersPerSM && PerSM > 0)
    PerSM = std::min<int>(PerSM, static_cast<int>(Cfg.PtbWorkersPerSM));
  if (PerSM <= 0) {
    logf(LogLevel::Debug, "kernel %s: PTB variant does not fit this block shape",
         K.Name.c_str());
    return false;
  }
  auto L = std::make_unique<PtbLaunch>();
  L->K = &K;
  L->C = &C;
  L->Blocks = static_cast<uint32_t>(Blocks);
  L->Workers = static_cast<uint32_t>(std::min<uint64_t>(Blocks, uint64_t(PerSM) * C.SMs));
  if (Pick && Pick->Workers)
    L->Workers = std::min(L->Workers, Pick->Workers);
  uint32_t Chunk = Pick ? std::max<uint32_t>(Pick->Chunk, 1) : Cfg.PtbChunk;
  L->Scheduled = Scheduled;
  if (Cfg.RandomPreemptions && L->Workers > 1) {
    // A correctness check of preemption: a random number of workers, so
    // that grids of one wave or less have unclaimed blocks when the flag
    // goes up (with a full wave every block is claimed at once and no
    // preemption could leave anything to resume).
    std::lock_guard<std::mutex> G(QMu);
    L->Workers = 1 + static_cast<uint32_t>(Rng() % L->Workers);
  }
  bool Unwatched = false; // narrow beside HP to its end: no gate, not watched
  if (Scheduled && Pick && !Pick->Measuring && Co.Pol && !Cfg.RandomPreemptions) {
    // Under MPS, beside HP with part of its workers (Policy::besideWorkers):
    // narrow from the start unless HP has been quiet for the widen window.
    bool Widen = false;
    observeBusy(nullptr, &Widen);
    std::lock_guard<std::mutex> G(Co.PolMu);
    L->Wide = L->Workers;
    // Not beside an HP process that is no MPS client (time-sliced).
    L->Narrow = Co.HpOffMps.load(std::memory_order_relaxed)
                    ? 0
                    : Co.Pol->besideWorkers(PerSM, C.SMs, L->Workers);
    if (L->Narrow && Pick->StayNarrow) {
      L->Wide = L->Workers = L->Narrow; // never widened (Policy::provisional)
    } else if (L->Narrow && L->Narrow < L->Workers && (!Widen || C.LaunchBehind)) {
      // (Behind earlier launches: it may start when HP is back, unwatched.)
      L->QueuedNarrow = Widen;
      L->Workers = L->Narrow;
    }
    // (A StayNarrow launch made just as an HP process that is no MPS client
    // came runs wide and leaves for HP as PTB launches did before Beside.)
    // Narrow from its start and short on those workers: nothing would stop
    // it for HP, and it ends before it could be widened, so it goes
    // without the gate's wait, which would be pending beside HP's kernels
    // all the while (Config::NarrowUnwatchedUs). (Not a provisional one:
    // its time is not known.)
    if (L->Narrow && L->Workers == L->Narrow && !Pick->StayNarrow && Pick->BestNs &&
        double(Pick->BestNs) * double(L->Wide) / double(L->Narrow) <=
            double(Cfg.NarrowUnwatchedUs) * 1000.0) {
      Unwatched = true;
    }
  }
  std::memcpy(L->Block, A.Block, sizeof L->Block);
  L->SharedBytes = A.SharedBytes;
  bool Preemptible = Cfg.RandomPreemptions > 0 || (Scheduled && !Unwatched);
  if (Preemptible && Cfg.WorkQueuesAsked == 1) {
    // One hardware work queue for every stream (CUDA_DEVICE_MAX_CONNECTIONS
    // =1, as Megatron-LM sets it): with fewer than 32, resumptions were
    // seen never to start (Config::WorkQueues); at 1 not tried, so the
    // original runs instead (held for HP as one that cannot be stopped).
    static std::atomic<bool> Said{false};
    if (!Said.exchange(true))
      logf(LogLevel::Warn,
           "CUDA_DEVICE_MAX_CONNECTIONS=1: every stream shares one hardware work queue, where "
           "a preempted launch's resumption may never start (seen with 2); kernels that would "
           "run as preemptible PTB launches run as their originals (not preemptible). Set it "
           "to %d or more for preemption",
           Config::WorkQueues);
    return false;
  }
  CtrlPrep Prep = CtrlPrep::None;
  CUevent WaitFor = nullptr;
  {
    RelaxedCaptureGuard Relax(D);
    // Under timed statistics a preemption is also timed on the GPU (flag
    // landed to workers gone): End and Flag then record times.
    L->Timed = Preemptible && Cfg.Stats && Cfg.StatsTiming;
    L->Ctrl = acquireCtrl(C, Prep, WaitFor);
    if (Preemptible && Scheduled && Cfg.ArmedFlag)
      L->Arm = acquireArm(C); // (none: raised by driver calls)
    L->End = acquireEvent(C, L->Timed);
    if (Preemptible) {
      L->Start = acquireEvent(C, false);
      L->Gate = acquireEvent(C, false);
      L->Flag = acquireEvent(C, L->Timed);
    }
  }
  auto GiveBack = [&] {
    std::lock_guard<std::mutex> G(C.Mu);
    giveBackEvents(C, *L);
  };
  if (!L->Ctrl || !L->End || (Preemptible && (!L->Start || !L->Gate || !L->Flag)) ||
      !buildParams(K, *K.Ptb, A, 0, L->Ctrl, Chunk, L->ParamBuf, L->ParamBytes)) {
    GiveBack();
    return false;
  }
  // The block all zeros on the stream before the kernel (CtrlSlab).
  // QueuedClear: a clear of the block itself is queued on S, and may land
  // whenever S gets to it (a wait for its slab's clear only delays S).
  bool QueuedClear = false;
  if (Prep == CtrlPrep::Clear) {
    R = D.cuMemsetD32Async(L->Ctrl, 0, 4, S);
    QueuedClear = R == CUDA_SUCCESS;
  } else if (Prep == CtrlPrep::Wait) {
    R = D.cuStreamWaitEvent(S, WaitFor, 0);
  }
  if (R == CUDA_SUCCESS && Preemptible)
    R = D.cuEventRecord(L->Start, S);
  if (R != CUDA_SUCCESS) {
    // Nothing of the kernel ran. A clear queued on the stream may still
    // land, though: then the block is never used again.
    L->CtrlKept = QueuedClear;
    GiveBack();
    return false;
  }
  R = launchVariant(K.PtbFn, L->Workers, L->Block, L->SharedBytes, S, L->ParamBuf.data(),
                    L->ParamBytes);
  if (R != CUDA_SUCCESS) {
    K.Disabled = true;
    warnOnce(K, "its PTB variant does not launch (" + D.errorName(R) + ")");
    L->CtrlKept = QueuedClear; // (as above)
    GiveBack();
    return false;
  }
  if (Prep == CtrlPrep::Clear)
    PtbStreamClears.fetch_add(1, std::memory_order_relaxed);
  else if (Prep == CtrlPrep::Wait)
    PtbStreamWaits.fetch_add(1, std::memory_order_relaxed);
  if (L->Workers < L->Wide)
    Co.NarrowLaunches.fetch_add(1, std::memory_order_relaxed);
  if (L->QueuedNarrow)
    Co.QueuedNarrow.fetch_add(1, std::memory_order_relaxed);
  if (Unwatched)
    Co.NarrowUnwatched.fetch_add(1, std::memory_order_relaxed);
  logf(LogLevel::Debug, "kernel %s: PTB launch, %u blocks on %u workers, chunk %u%s",
       K.Name.c_str(), L->Blocks, L->Workers, Chunk, Preemptible ? ", preemptible" : "");
  // From here on the variant runs: errors below may only make it
  // unpreemptible, never run the original too.
  // The armed flag's release when the kernel ends, before End: a wait the
  // runtime thread queues for it never outlives the kernel. (Not for a
  // launch started narrow: one write less on the program's stream.)
  queueArmRelease(*L, S);
  bool EndRecorded = D.cuEventRecord(L->End, S) == CUDA_SUCCESS;
  bool Waits = Preemptible && EndRecorded &&
               D.cuStreamWaitValue32(S, L->Ctrl + 8, L->Blocks, CU_STREAM_WAIT_VALUE_GEQ) ==
                   CUDA_SUCCESS;
  bool Gated = Waits && D.cuEventRecord(L->Gate, S) == CUDA_SUCCESS;
  if (!Gated) {
    // Not preempted: it completes on its own. The control block is free
    // again once the GPU no longer reads it; when that cannot be told (an
    // event failed), it is never reused.
    if (!EndRecorded || Waits) {
      L->Lost = true;
      logf(LogLevel::Warn, "kernel %s: cannot track a PTB launch (%s); it is not preempted",
           K.Name.c_str(), EndRecorded ? "gate event" : "end event");
    }
    retire(std::move(L));
    return true;
  }
  if (Scheduled)
    C.LaunchGated = true; // (launchBe, its caller, holds BeMu and reads it)
  startPreemptor();
  {
    std::lock_guard<std::mutex> G(QMu);
    Queue.push_back(std::move(L));
  }
  QCv.notify_one();
  return true;
}

//===----------------------------------------------------------------------===//
// The preemptor thread
//===----------------------------------------------------------------------===//

void Runtime::blockingCallBegin() { I->Drain.lock_shared(); }
void Runtime::blockingCallEnd() { I->Drain.unlock_shared(); }

void Runtime::Impl::deferred(PtbLaunch &L) {
  Deferred.fetch_add(1, std::memory_order_relaxed);
  logf(LogLevel::Debug,
       "kernel %s: not preempted: a program thread is in a driver call that may wait for it",
       L.K->Name.c_str());
}

void Runtime::Impl::loadEarly(KernelEntry &K, CUfunction F) {
  if (!D.cuFuncLoad)
    return; // (its first launch loads it: a stall beside a stopped launch can happen)
  ContextState *C = context();
  bool Loaded = false;
  for (CUfunction Fn : {F, K.SliceFn, K.PtbFn}) {
    if (!Fn)
      continue;
    const bool Variant = Fn != F;
    // A library's kernel is loaded per context, through its function here.
    if (K.IsLibraryKernel &&
        (!D.cuKernelGetFunction ||
         D.cuKernelGetFunction(&Fn, reinterpret_cast<CUkernel>(Fn)) != CUDA_SUCCESS)) {
      if (Variant)
        K.Disabled = true; // (below)
      continue;
    }
    CUfunctionLoadingState St = CU_FUNCTION_LOADING_STATE_UNLOADED;
    if (D.cuFuncIsLoaded && D.cuFuncIsLoaded(&St, Fn) == CUDA_SUCCESS &&
        St == CU_FUNCTION_LOADING_STATE_LOADED)
      continue; // (eager loading, or loaded before: no stall)
    if (D.cuFuncLoad(Fn) == CUDA_SUCCESS)
      Loaded = true;
    else if (Variant)
      K.Disabled = true; // its first launch would load it unguarded: not used
    // (The program's own kernel failing to load is left to its launch.)
  }
  if (K.Disabled.load(std::memory_order_relaxed))
    warnOnce(K, "its variants could not be loaded ahead of their first launch");
  if (Loaded)
    LoadedEarly.fetch_add(1, std::memory_order_relaxed);
  // Marked even when nothing was loaded here: looking the kernel and its
  // variants up (resolve) may have loaded them (with lazy loading
  // cuModuleGetFunction does). Where nothing was loaded, the mark
  // completes at once.
  markLoad(C);
}

void Runtime::codeLoaded() {
  if (!I->preempts())
    return;
  // (The program may be capturing a stream: a lookup at a kernel's first
  // launch comes during a capture. The mark's event is recorded on an
  // internal stream, which relaxed mode allows.)
  RelaxedCaptureGuard Relax(I->D);
  if (I->markLoad(I->context()))
    I->ProgramLoadMarks.fetch_add(1, std::memory_order_relaxed);
}

bool Runtime::Impl::markLoad(ContextState *C) {
  if (!C)
    return false;
  CUevent E = acquireEvent(*C, false);
  if (!E)
    return false;
  // Only the newest mark of a context matters: the events on its one
  // metadata stream complete in order. Recorded under LoadMu, so that the
  // mark kept is the one recorded last (two threads' loads at once: the
  // one listed last must be the later event, which covers both loads).
  CUevent Older = nullptr;
  {
    std::lock_guard<std::mutex> G(LoadMu);
    if (D.cuEventRecord(E, C->Meta) != CUDA_SUCCESS) {
      std::lock_guard<std::mutex> CG(C->Mu);
      C->FreeEvents.push_back(E);
      return false;
    }
    auto It = std::find_if(LoadMarks.begin(), LoadMarks.end(),
                           [&](const auto &M) { return M.first == C; });
    if (It != LoadMarks.end()) {
      Older = It->second;
      It->second = E;
    } else {
      LoadMarks.push_back({C, E});
    }
    LoadMarksPending.store(LoadMarks.size(), std::memory_order_release);
  }
  if (Older) {
    std::lock_guard<std::mutex> G(C->Mu);
    C->FreeEvents.push_back(Older); // (recorded again when reused)
  }
  return true;
}

bool Runtime::Impl::loadsSettled() {
  if (!LoadMarksPending.load(std::memory_order_acquire))
    return true;
  std::lock_guard<std::mutex> G(LoadMu);
  for (size_t I = 0; I < LoadMarks.size();) {
    auto [C, E] = LoadMarks[I];
    // (An error, as at a context's end, counts as over.)
    if (!C->Dead.load(std::memory_order_acquire) &&
        D.cuEventQuery(E) == CUDA_ERROR_NOT_READY) {
      ++I;
      continue;
    }
    if (!C->Dead.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> CG(C->Mu);
      C->FreeEvents.push_back(E);
    }
    LoadMarks.erase(LoadMarks.begin() + I);
  }
  LoadMarksPending.store(LoadMarks.size(), std::memory_order_release);
  return LoadMarks.empty();
}

void Runtime::Impl::startPreemptor() {
  std::lock_guard<std::mutex> G(QMu);
  if (Preemptor.joinable() || Stopping)
    return;
  Preemptor = std::thread([this] {
    pthread_setname_np(pthread_self(), "tally-preempt");
    preemptorLoop();
  });
}

void Runtime::Impl::preemptorLoop() {
  while (true) {
    std::unique_ptr<PtbLaunch> L;
    {
      std::unique_lock<std::mutex> G(QMu);
      QCv.wait(G, [&] { return !Queue.empty() || Stopping; });
      if (Queue.empty())
        return;
      L = std::move(Queue.front());
      Queue.pop_front();
      Current = L.get();
    }
    if (L->Scheduled)
      scheduled(*L);
    else
      handle(*L);
    retire(std::move(L));
    {
      std::lock_guard<std::mutex> G(QMu);
      Current = nullptr;
    }
    QCv.notify_all();
  }
}

bool Runtime::Impl::readCtrl(const PtbLaunch &L, uint32_t Out[3], unsigned Ms) {
  ContextState &C = *L.C;
  uint32_t *Into = C.DoneWord ? C.DoneWord + 4 : nullptr;
  if (!Into || !D.cuStreamCreateWithPriority ||
      (!C.Peek && D.cuStreamCreateWithPriority(&C.Peek, CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS))
    return false;
  // Landed when no word holds the mark any more (no count reaches it: a
  // grid has fewer blocks; the flag is 0 or 1). Polled, not waited for by
  // an event: an event may be what is held up.
  for (int I = 0; I < 3; ++I)
    __atomic_store_n(Into + I, ~0u, __ATOMIC_RELAXED);
  if (D.cuMemcpyDtoHAsync(Into, L.Ctrl, 12, C.Peek) != CUDA_SUCCESS)
    return false;
  const auto Until = Clock::now() + std::chrono::milliseconds(Ms);
  for (;;) {
    bool Landed = true;
    for (int I = 0; I < 3; ++I)
      Landed &= __atomic_load_n(Into + I, __ATOMIC_ACQUIRE) != ~0u;
    if (Landed)
      break;
    if (Clock::now() >= Until)
      return false; // (a late copy lands on the spare room only)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  for (int I = 0; I < 3; ++I)
    Out[I] = __atomic_load_n(Into + I, __ATOMIC_ACQUIRE);
  return true;
}

void Runtime::Impl::noteStuckResumption(const PtbLaunch &L) {
  // A resumption that makes no progress while the program's stream waits
  // for it at the launch's gate: nothing goes on. Either its Start
  // (recorded on the resume stream just before it) is not reached, or it
  // is and its kernel runs no block: what the hangs with too few hardware
  // work queues looked like (Config::WorkQueues). A kernel whose logical
  // blocks are each longer than 2 s would read as stuck too. Said once, as
  // an error.
  static std::atomic<bool> Said{false};
  if (Said.load(std::memory_order_relaxed) || !L.Resumed || !L.Start)
    return;
  const CUresult Q = D.cuEventQuery(L.Start);
  bool Stuck = Q == CUDA_ERROR_NOT_READY;
  const char *How = "has not started after 2 s";
  const auto Now = Clock::now();
  uint32_t W[3];
  if (!Stuck && Q == CUDA_SUCCESS &&
      (L.TriedAt == Clock::time_point{} || Now - L.TriedAt >= std::chrono::seconds(1)) &&
      (L.TriedAt = Now, readCtrl(L, W, 50))) {
    // Its counts against the last read's, at least 2 s before.
    if (L.SeenAt == Clock::time_point{} || W[0] != L.SeenNext || W[2] != L.SeenDone) {
      L.SeenNext = W[0];
      L.SeenDone = W[2];
      L.SeenAt = Now;
    } else if (Now - L.SeenAt >= std::chrono::seconds(2) && W[2] < L.Blocks) {
      Stuck = true;
      How = "has run no block for 2 s";
    }
  }
  if (!Stuck || Said.exchange(true))
    return;
  logf(LogLevel::Error,
       "kernel %s: a resumed PTB launch %s, and the program's stream waits for it at the "
       "launch's gate: the program may wait for ever. On an H200 under MPS this happened with "
       "fewer than %d hardware work queues and launches queued behind the gate (why is not "
       "known; below that the runtime now puts no launch there, but the program's other work "
       "may be): run "
       "best-effort processes with CUDA_DEVICE_MAX_CONNECTIONS=%d (`tally run` sets it unless "
       "it is set)",
       L.K->Name.c_str(), How, Config::WorkQueues, Config::WorkQueues);
}

void Runtime::Impl::describeStuck(const PtbLaunch &L, const char *What) {
  static std::atomic<bool> Said{false};
  if (Cfg.Level < LogLevel::Debug || Said.exchange(true))
    return;
  auto State = [&](CUevent E) -> const char * {
    if (!E)
      return "none";
    CUresult R = D.cuEventQuery(E);
    return R == CUDA_SUCCESS ? "done" : R == CUDA_ERROR_NOT_READY ? "pending" : "error";
  };
  logf(LogLevel::Debug,
       "kernel %s: stuck waiting for its %s: events start %s, end %s, gate %s, flag %s (an "
       "event never recorded reads as done); %s, %u workers (narrow %u, wide %u) for %u "
       "blocks; arm seq %u (queued %d, write %d, word %u)",
       L.K->Name.c_str(), What, State(L.Start), State(L.End), State(L.Gate), State(L.Flag),
       L.Resumed ? "resumed" : "never resumed", L.Workers, L.Narrow, L.Wide, L.Blocks, L.ArmSeq,
       int(L.ArmQueued), int(L.ArmWrite),
       L.Arm.Host ? __atomic_load_n(L.Arm.Host, __ATOMIC_ACQUIRE) : 0u);
  uint32_t W[3];
  if (readCtrl(L, W, 200))
    logf(LogLevel::Debug, "kernel %s: control block next %u, flag %u, done %u",
         L.K->Name.c_str(), W[0], W[1], W[2]);
  else
    logf(LogLevel::Debug, "kernel %s: its control block could not be read within 200 ms",
         L.K->Name.c_str());
}

/// Polls \p E until it completes; false when the driver reports an error
/// (a destroyed context at exit, say) or, once the process is exiting,
/// after 10 s (the program's own exit must not hang on Tally).
bool Runtime::Impl::waitEvent(CUevent E, const PtbLaunch *L, const char *What) {
  Clock::time_point Deadline{};
  Clock::time_point Began = Clock::now();
  bool Reported = false;
  for (unsigned Spin = 0;; ++Spin) {
    CUresult R = D.cuEventQuery(E);
    if (R == CUDA_SUCCESS)
      return true;
    if (R != CUDA_ERROR_NOT_READY)
      return false;
    if (Spin > 2000) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      if (L && (Spin & 255) == 0 && Clock::now() - Began > std::chrono::seconds(2)) {
        // For finding hangs (docs/runtime.md): what the preemptor waits for.
        if (!Reported) {
          logf(LogLevel::Debug, "kernel %s: waiting for its %s for more than 2 s",
               L->K->Name.c_str(), What);
          describeStuck(*L, What);
        }
        Reported = true;
        noteStuckResumption(*L); // (a read of its counts at most once a second)
      }
      if ((Spin & 255) == 0 && Shut.load(std::memory_order_relaxed)) {
        if (Deadline == Clock::time_point{})
          Deadline = Clock::now() + std::chrono::seconds(10);
        else if (Clock::now() > Deadline)
          return false;
      }
    }
  }
}

bool Runtime::Impl::resume(PtbLaunch &L, bool Resumption) {
  ContextState &C = *L.C;
  // TALLY_DEBUG_FRESH_RESUME: the relaunch on a stream of its own, made
  // now (with the resume stream's priority) and destroyed behind it (the
  // driver lets it go once its work is done). A stream that cannot be made
  // is the resume stream.
  CUstream S = C.Resume;
  CUstream Fresh = nullptr;
  if (Cfg.DebugFreshResume && D.cuStreamGetPriority && D.cuStreamDestroy) {
    int Prio = 0;
    if (D.cuStreamGetPriority(C.Resume, &Prio) == CUDA_SUCCESS &&
        D.cuStreamCreateWithPriority(&Fresh, CU_STREAM_NON_BLOCKING, Prio) == CUDA_SUCCESS)
      S = Fresh;
  }
  auto Done = [&] {
    if (Fresh)
      D.cuStreamDestroy(Fresh);
  };
  CUresult R = D.cuStreamWriteValue32(S, L.Ctrl + 4, 0, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (R == CUDA_SUCCESS)
    R = D.cuEventRecord(L.Start, S);
  if (R == CUDA_SUCCESS)
    R = launchVariant(L.K->PtbFn, L.Workers, L.Block, L.SharedBytes, S, L.ParamBuf.data(),
                      L.ParamBytes);
  if (R != CUDA_SUCCESS) {
    Done();
    // Nothing was relaunched: trying again is safe.
    logf(LogLevel::Error, "kernel %s: resuming a preempted launch failed (%s)", L.K->Name.c_str(),
         D.errorName(R).c_str());
    return false;
  }
  // Relaunched: from here never again (two relaunches in flight would
  // share the block, and their releases the word). Its own release, with
  // a new number, when it runs wide (Scheduler.cpp arms it again).
  queueArmRelease(L, S);
  const bool EndRecorded = D.cuEventRecord(L.End, S) == CUDA_SUCCESS;
  Done();
  if (!EndRecorded) {
    // Its end cannot be seen: it runs every block left on its own (its
    // stream's gate passes then); not watched, its block never reused.
    L.Lost = true;
    logf(LogLevel::Warn, "kernel %s: cannot track a resumed PTB launch; it is not preempted",
         L.K->Name.c_str());
  }
  L.Resumed = true;
  if (Resumption) // not a widening beside HP (Scheduler.cpp)
    L.K->Resumptions.fetch_add(1, std::memory_order_relaxed);
  logf(LogLevel::Debug, "kernel %s: resumed on %u workers", L.K->Name.c_str(), L.Workers);
  return true;
}

void Runtime::Impl::handle(PtbLaunch &L) {
  ContextState &C = *L.C;
  if (C.Dead.load(std::memory_order_acquire) || D.cuCtxSetCurrent(C.Ctx) != CUDA_SUCCESS)
    return;
  static const unsigned DelaysUs[] = {0, 2, 10, 40, 150};
  unsigned Attempts = Cfg.RandomPreemptions;
  bool Stop;
  {
    std::lock_guard<std::mutex> G(QMu);
    Stop = Stopping;
  }
  uint32_t DoneSoFar = 0;
  for (unsigned Attempt = 0; Attempt < Attempts && !Stop; ++Attempt) {
    unsigned Delay;
    bool AtBlock;
    uint32_t Point;
    {
      std::lock_guard<std::mutex> G(QMu);
      Delay = DelaysUs[Rng() % 5];
      AtBlock = Rng() % 2;
      Point = DoneSoFar + static_cast<uint32_t>(Rng() % (L.Blocks - DoneSoFar));
      Stop = Stopping;
    }
    if (Stop)
      break;
    // Two ways to raise the flag, half the attempts each:
    //  * timed: once the host saw the (re)launch start (its Start event),
    //    after a random delay; the time from the raise to the End event is
    //    the preemption latency the statistics report;
    //  * at a random logical block: the signal stream waits, on the GPU,
    //    for the launch to start and for its count of finished blocks to
    //    reach the point, then raises the flag. Launches too short for the
    //    host to catch are preempted too, anywhere from their first block
    //    to their last.
    // Either way the flag goes up only after the control block was cleared
    // (the Start event), or the clear would undo it.
    if (!AtBlock && !waitEvent(L.Start, &L, "start"))
      return;
    if (!AtBlock) {
      auto Until = Clock::now() + std::chrono::microseconds(Delay);
      while (Clock::now() < Until) {
      }
    }
    // Held until the resumption is queued (the drain lock, above).
    std::unique_lock<std::shared_mutex> Excl(Drain, std::try_to_lock);
    if (!Excl.owns_lock()) {
      deferred(L);
      break; // it completes on its own
    }
    if (!loadsSettled()) {
      LoadDeferred.fetch_add(1, std::memory_order_relaxed);
      break; // a code load's stall is not over (loadEarly): it completes on its own
    }
    auto Raised = Clock::now();
    if (AtBlock && (D.cuStreamWaitEvent(C.Signal, L.Start, 0) != CUDA_SUCCESS ||
                    D.cuStreamWaitValue32(C.Signal, L.Ctrl + 8, Point,
                                          CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS))
      break; // not raised: the launch completes on its own
    if (D.cuStreamWriteValue32(C.Signal, L.Ctrl + 4, 1, CU_STREAM_WRITE_VALUE_DEFAULT) !=
        CUDA_SUCCESS) {
      // A wait on the block may be queued with nothing behind it: the
      // block is reused only once the signal stream is past it.
      if (AtBlock && D.cuEventRecord(L.Flag, C.Signal) != CUDA_SUCCESS)
        L.Lost = true;
      break;
    }
    logf(LogLevel::Debug, "kernel %s: flag raised %s %u", L.K->Name.c_str(),
         AtBlock ? "at block" : "after us", AtBlock ? Point : Delay);
    PreemptTimes Times;
    uint32_t Done = 0;
    if (!collectPreempted(L, Raised, Times, Done))
      return;
    logf(LogLevel::Debug, "kernel %s: %u of %u blocks done when it stopped", L.K->Name.c_str(),
         Done, L.Blocks);
    if (Done >= L.Blocks)
      return; // finished before the flag was seen
    DoneSoFar = std::max(DoneSoFar, Done);
    L.K->Preemptions.fetch_add(1, std::memory_order_relaxed);
    if (!AtBlock)
      notePreemption(Times);
    if (!resumeOrRelease(L, Done) || L.Lost)
      return;
  }
}

bool Runtime::Impl::collectPreempted(PtbLaunch &L, std::chrono::steady_clock::time_point Raised,
                                     PreemptTimes &T, uint32_t &Done, bool FlagRecorded) {
  ContextState &C = *L.C;
  // The write must have landed before the block is read, cleared for the
  // resumption or reused: a late flag would stop a launch nobody resumes.
  bool FlagTracked = FlagRecorded || D.cuEventRecord(L.Flag, C.Signal) == CUDA_SUCCESS;
  auto Since = [&] {
    return std::chrono::duration<double, std::micro>(Clock::now() - Raised).count();
  };
  T = PreemptTimes{};
  T.IssueUs = Since();
  // The flag lands before the workers leave (unless the launch ended on
  // its own first): looked for first, so the signal's part is seen too.
  if (FlagTracked) {
    for (unsigned Spin = 0; Spin < 4096; ++Spin) {
      CUresult Q = D.cuEventQuery(L.Flag);
      if (Q == CUDA_SUCCESS) {
        T.SignalUs = Since();
        break;
      }
      if (Q != CUDA_ERROR_NOT_READY)
        break;
      if (D.cuEventQuery(L.End) != CUDA_ERROR_NOT_READY) {
        // Ended between the two looks: the flag may have landed just
        // before (counted then, an upper bound), or not at all.
        if (D.cuEventQuery(L.Flag) == CUDA_SUCCESS)
          T.SignalUs = Since();
        break;
      }
    }
  }
  if (!waitEvent(L.End, &L, "end (workers gone)"))
    return false;
  T.TotalUs = Since();
  if (!FlagTracked) {
    // Cannot tell when the flag lands: wait for the signal stream itself.
    if (D.cuStreamSynchronize(C.Signal) != CUDA_SUCCESS)
      return false;
  } else if (!waitEvent(L.Flag, &L, "flag write")) {
    return false;
  }
  float Ms = 0;
  if (L.Timed && FlagTracked && D.cuEventElapsedTime &&
      D.cuEventElapsedTime(&Ms, L.Flag, L.End) == CUDA_SUCCESS && Ms >= 0)
    T.DeviceUs = Ms * 1000.0;
  Done = 0;
  if (!C.DoneWord && D.cuMemHostAlloc) {
    void *P = nullptr;
    if (D.cuMemHostAlloc(&P, 64, 0) == CUDA_SUCCESS)
      C.DoneWord = static_cast<uint32_t *>(P); // kept for the context's life
  }
  // Into pinned memory where the driver gives it (see ContextState::Staging).
  uint32_t *Into = C.DoneWord ? C.DoneWord : &Done;
  if (D.cuMemcpyDtoHAsync(Into, L.Ctrl + 8, 4, C.Resume) != CUDA_SUCCESS ||
      D.cuStreamSynchronize(C.Resume) != CUDA_SUCCESS)
    *Into = 0; // unknown: resume anyway (a complete grid makes it a no-op)
  Done = *Into;
  return true;
}

bool Runtime::Impl::resumeOrRelease(PtbLaunch &L, uint32_t Done, bool Resumption) {
  for (int Try = 0; Try < 3; ++Try)
    if (resume(L, Resumption))
      return true;
  // The application's stream waits on `done`; leaving it would hang the
  // program. Release it and say loudly that blocks did not run.
  logf(LogLevel::Error, "kernel %s: %u of %u logical blocks did not run; releasing its stream",
       L.K->Name.c_str(), L.Blocks - Done, L.Blocks);
  D.cuStreamWriteValue32(L.C->Signal, L.Ctrl + 8, L.Blocks, CU_STREAM_WRITE_VALUE_DEFAULT);
  return false;
}

void Runtime::Impl::waitForOwner(void *Owner) {
  std::unique_lock<std::mutex> G(QMu);
  QCv.wait(G, [&] {
    if (Current && Current->K->Owner == Owner)
      return false;
    for (auto &L : Queue)
      if (L->K->Owner == Owner)
        return false;
    return true;
  });
}

void Runtime::Impl::waitForContext(const ContextState *C) {
  std::unique_lock<std::mutex> G(QMu);
  QCv.wait(G, [&] {
    if (Current && Current->C == C)
      return false;
    for (auto &L : Queue)
      if (L->C == C)
        return false;
    return true;
  });
}

void Runtime::Impl::stopPreemptor() {
  {
    std::lock_guard<std::mutex> G(QMu);
    Stopping = true;
  }
  QCv.notify_all();
  // The thread finishes what it has (each preempted launch resumed to the
  // end) and exits.
  if (Preemptor.joinable())
    Preemptor.join();
}

//===----------------------------------------------------------------------===//
// GPU time per kernel (--stats)
//===----------------------------------------------------------------------===//

CUevent Runtime::Impl::timingStart(ContextState *C, CUstream S) {
  CUevent E = acquireEvent(*C, true);
  if (E && D.cuEventRecord(E, S) != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> G(C->Mu);
    C->FreeTimingEvents.push_back(E);
    E = nullptr;
  }
  return E;
}

void Runtime::Impl::timingEnd(ContextState *C, CUstream S, Timing T, KernelEntry *K, Form F,
                              bool Launched) {
  CUevent End = Launched ? acquireEvent(*C, true) : nullptr;
  if (!End || D.cuEventRecord(End, S) != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> G(C->Mu);
    C->FreeTimingEvents.push_back(T.Start);
    if (End)
      C->FreeTimingEvents.push_back(End);
    return;
  }
  size_t Pending;
  {
    std::lock_guard<std::mutex> G(TMu);
    Timed.push_back({K, C, T.Start, End, F});
    Pending = Timed.size();
  }
  if (Pending > 512)
    harvestTiming(false);
}

void Runtime::Impl::harvestTiming(bool All) {
  while (true) {
    TimedLaunch TL;
    {
      std::lock_guard<std::mutex> G(TMu);
      if (Timed.empty())
        return;
      TL = Timed.front();
      CUresult Q = All ? D.cuEventSynchronize(TL.End) : D.cuEventQuery(TL.End);
      if (Q == CUDA_ERROR_NOT_READY)
        return;
      Timed.pop_front();
      float Ms = 0;
      if (Q == CUDA_SUCCESS && D.cuEventElapsedTime(&Ms, TL.Start, TL.End) == CUDA_SUCCESS) {
        const int F = static_cast<int>(TL.F);
        TL.K->GpuNanos[F].fetch_add(static_cast<uint64_t>(double(Ms) * 1e6),
                                    std::memory_order_relaxed);
        TL.K->TimedLaunches[F].fetch_add(1, std::memory_order_relaxed);
      }
    }
    std::lock_guard<std::mutex> G(TL.C->Mu);
    TL.C->FreeTimingEvents.push_back(TL.Start);
    TL.C->FreeTimingEvents.push_back(TL.End);
  }
}

} // namespace tally::rt
