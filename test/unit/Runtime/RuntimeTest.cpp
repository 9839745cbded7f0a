//===- RuntimeTest.cpp - libtally.so over the fake driver -----------------===//
//
// This binary runs with LD_PRELOAD=libtally.so and TALLY_DRIVER pointing at
// libfakecuda.so (test/unit/Runtime/CMakeLists.txt), once per runtime
// configuration: the runtime reads its settings once per process, so each
// ctest entry runs the test suite of one configuration (--gtest_filter).
// It calls the driver the three ways programs do (direct calls, dlsym,
// cuGetProcAddress) and checks, through the fake's log and its model of
// kernels, what the runtime did: which kernel ran in which form, the
// parameters it built, the stream operations it queued, and that every
// logical block ran exactly once.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/Segment.h"

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <atomic>
#include <functional>
#include <chrono>
#include <memory>
#include <fstream>
#include <thread>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#undef cuGetProcAddress

extern "C" {
void *fake_add_module(int Library);
void fake_set_global(void *M, const char *Name, const char *Bytes, size_t Size);
void *fake_add_kernel(void *M, const char *Name, int Kind, const size_t *Layout, size_t N,
                      size_t SliceOffsetAt, size_t GridAt, size_t CtrlAt, size_t ChunkAt);
void fake_set_blocks_before_flag(unsigned N);
void fake_set_capturing(CUstream S, int On);
void fake_fail_variant_launches(int On);
size_t fake_log_size();
const char *fake_log_line(size_t I);
void fake_log_clear();
size_t fake_log_count(const char *Prefix, const char *Sub);
void fake_hold_events(int On);
void fake_slow_events(int N);
void fake_hold_ptb(int On);
void fake_hold_load_marks(int On);
void fake_stall_ptb(int On);
void fake_launch_delay_us(unsigned Us);
void fake_sync_delay_us(unsigned Us);
void fake_queries_not_ready(int N);
void fake_sync();
unsigned fake_open_ptb_launches();
unsigned fake_stream_wait_events();
void fake_hold_released(int On);
void fake_fail_flag_writes(int N);
void fake_fail_record_after_memset();
void fake_fail_slab_memsets(int N);
void fake_fail_stream_creates(int N, int Skip);
void fake_fail_event_creates(int N);
size_t fake_blocked_streams();
void fake_release_destroys();
void fake_destroy_context();
void fake_new_context();
CUresult cuGetProcAddress(const char *Symbol, void **Pfn, int Version, cuuint64_t Flags);
}

namespace {

/// The metadata tally-opt writes for k(int *out, int n), in its YAML form.
std::string metadataFor(const std::string &Name, bool Slice = true, bool Ptb = true) {
  std::string Y = "tally_metadata_version: 1\nkernels:\n  - name: " + Name +
                  "\n    status: transformed\n    variants:\n";
  if (Slice)
    Y += "      - kind: slice\n        name: " + Name +
         "__tally_slice\n        original_param_bytes: 12\n        param_bytes: 28\n"
         "        extra_params:\n"
         "          - {name: __tly_slice_offset, role: slice_offset, type: u32, offset: 12, size: 4}\n"
         "          - {name: __tly_grid_x, role: grid_x, type: u32, offset: 16, size: 4}\n"
         "          - {name: __tly_grid_y, role: grid_y, type: u32, offset: 20, size: 4}\n"
         "          - {name: __tly_grid_z, role: grid_z, type: u32, offset: 24, size: 4}\n";
  if (Ptb)
    Y += "      - kind: ptb\n        name: " + Name +
         "__tally_ptb\n        original_param_bytes: 12\n        param_bytes: 40\n"
         "        barrier_id: 0\n        extra_params:\n"
         "          - {name: __tly_ctrl, role: control, type: u64, offset: 16, size: 8}\n"
         "          - {name: __tly_grid_x, role: grid_x, type: u32, offset: 24, size: 4}\n"
         "          - {name: __tly_grid_y, role: grid_y, type: u32, offset: 28, size: 4}\n"
         "          - {name: __tly_grid_z, role: grid_z, type: u32, offset: 32, size: 4}\n"
         "          - {name: __tly_chunk, role: chunk, type: u32, offset: 36, size: 4}\n";
  return Y;
}

const size_t Layout[] = {0, 8, 8, 4};

/// A module with k, its variants and (unless told otherwise) the metadata.
struct Module {
  void *M;
  CUfunction K;
  std::string Name;
  Module(const std::string &Name, bool Library = false, const char *Meta = nullptr,
         bool WithVariants = true)
      : Name(Name) {
    M = fake_add_module(Library);
    K = static_cast<CUfunction>(fake_add_kernel(M, Name.c_str(), 0, Layout, 2, 0, 0, 0, 0));
    if (WithVariants) {
      fake_add_kernel(M, (Name + "__tally_slice").c_str(), 1, Layout, 2, 12, 16, 0, 0);
      fake_add_kernel(M, (Name + "__tally_ptb").c_str(), 2, Layout, 2, 0, 24, 16, 36);
    }
    std::string Y = Meta ? std::string(Meta) : metadataFor(Name);
    if (!Y.empty())
      fake_set_global(M, "__tally_metadata", Y.c_str(), Y.size() + 1);
  }
};

std::vector<std::string> logLines() {
  std::vector<std::string> L;
  for (size_t I = 0; I < fake_log_size(); ++I)
    L.push_back(fake_log_line(I));
  return L;
}

/// Counted under the fake's lock: safe while the runtime's threads log (a
/// copy of the lines is not: the log may grow while it is read).
size_t countPrefix(const std::string &P) { return fake_log_count(P.c_str(), ""); }

bool hasLine(const std::string &Sub) {
  for (const std::string &L : logLines())
    if (L.find(Sub) != std::string::npos)
      return true;
  return false;
}

/// A log line matches \p Re (std::regex, searched anywhere in the line).
bool hasLineRe(const std::string &Re) {
  std::regex R(Re);
  for (const std::string &L : logLines())
    if (std::regex_search(L, R))
      return true;
  return false;
}

/// Launches k(out, n) with grid G through cuLaunchKernel (as linked).
CUresult launchDirect(CUfunction K, std::vector<int> &Out, unsigned G, CUstream S = nullptr) {
  int *P = Out.data();
  int N = static_cast<int>(Out.size());
  void *Args[] = {&P, &N};
  return cuLaunchKernel(K, G, 1, 1, 32, 1, 1, 0, S, Args, nullptr);
}

/// Launches \p K as launchDirect does, through cuLaunchKernelEx with the
/// one attribute \p Attr.
CUresult launchEx(CUfunction K, std::vector<int> &Out, unsigned G, CUstream S,
                  const CUlaunchAttribute &Attr) {
  int *P = Out.data();
  int N = static_cast<int>(Out.size());
  void *Args[] = {&P, &N};
  CUlaunchAttribute A[1] = {Attr};
  CUlaunchConfig C = {};
  C.gridDimX = G, C.gridDimY = 1, C.gridDimZ = 1;
  C.blockDimX = 32, C.blockDimY = 1, C.blockDimZ = 1;
  C.hStream = S;
  C.attrs = A;
  C.numAttrs = 1;
  return cuLaunchKernelEx(&C, K, Args, nullptr);
}

/// The same with a cluster of two blocks: a launch that only the original
/// can make.
CUresult launchCluster(CUfunction K, std::vector<int> &Out, unsigned G, CUstream S = nullptr) {
  CUlaunchAttribute A = {};
  A.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  A.value.clusterDim.x = 2;
  A.value.clusterDim.y = 1;
  A.value.clusterDim.z = 1;
  return launchEx(K, Out, G, S, A);
}

using LaunchFn = CUresult (*)(CUfunction, std::vector<int> &, unsigned, CUstream);

void expectEachBlockOnce(const std::vector<int> &Out) {
  for (size_t I = 0; I < Out.size(); ++I)
    ASSERT_EQ(Out[I], 1) << "logical block " << I;
}

/// Runs what the program queued, waits (2 s at most) until the runtime
/// thread has let go of every PTB launch, and runs what that queued.
void settlePtb() {
  fake_sync();
  for (int T = 0; T < 2000 && fake_open_ptb_launches(); ++T)
    usleep(1000);
  fake_sync();
}

std::string env(const char *N) {
  const char *V = std::getenv(N);
  return V ? V : "";
}

/// Lets the preemptor finish with kernel \p Name's PTB launch (its first
/// launch and up to six resumptions; the fake completes a launch only when
/// the runtime waits for it, so the last one stays open), then runs what
/// is left, as a device synchronization would.
void settle(const std::string &Name) {
  for (int T = 0; T < 5000; ++T) {
    usleep(1000);
    if (countPrefix("launch " + Name + "__tally_ptb") >= 7 ||
        (!fake_open_ptb_launches() && T > 30))
      break;
  }
  usleep(20000);
  fake_sync();
}

} // namespace

//===----------------------------------------------------------------------===//
// No settings: every kernel runs as it is, through every way in.
//===----------------------------------------------------------------------===//

TEST(Passthrough, DirectCall) {
  Module M("pass_direct");
  std::vector<int> Out(10);
  fake_log_clear();
  ASSERT_EQ(launchDirect(M.K, Out, 10), CUDA_SUCCESS);
  expectEachBlockOnce(Out);
  EXPECT_EQ(countPrefix("launch pass_direct grid=10x1x1"), 1u);
}

TEST(Passthrough, DlsymHandsOutTheWrapper) {
  void *H = dlopen(env("TALLY_DRIVER").c_str(), RTLD_NOW);
  ASSERT_NE(H, nullptr);
  void *ViaDlsym = dlsym(H, "cuLaunchKernel");
  // The wrapper is libtally's cuLaunchKernel, which the test also reaches
  // by direct call; the fake's own function is not handed out.
  EXPECT_EQ(ViaDlsym, reinterpret_cast<void *>(&cuLaunchKernel));
  void *Gpa = dlsym(H, "cuGetProcAddress_v2");
  EXPECT_EQ(Gpa, reinterpret_cast<void *>(&cuGetProcAddress_v2));
  // A symbol the runtime does not interpose comes back as it is.
  void *Ctx = dlsym(H, "cuCtxGetCurrent");
  EXPECT_EQ(Ctx, reinterpret_cast<void *>(&cuCtxGetCurrent));
  Module M("pass_dlsym");
  std::vector<int> Out(5);
  fake_log_clear();
  auto Fn = reinterpret_cast<decltype(&cuLaunchKernel)>(ViaDlsym);
  int *P = Out.data();
  int N = 5;
  void *Args[] = {&P, &N};
  ASSERT_EQ(Fn(M.K, 5, 1, 1, 32, 1, 1, 0, nullptr, Args, nullptr), CUDA_SUCCESS);
  expectEachBlockOnce(Out);
  dlclose(H);
}

TEST(Passthrough, GetProcAddressEveryFlavour) {
  void *Legacy = nullptr, *Ptsz = nullptr, *Old = nullptr, *Self = nullptr;
  CUdriverProcAddressQueryResult St;
  ASSERT_EQ(cuGetProcAddress_v2("cuLaunchKernel", &Legacy, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &St),
            CUDA_SUCCESS);
  ASSERT_EQ(cuGetProcAddress_v2("cuLaunchKernel", &Ptsz, 12000,
                                CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &St),
            CUDA_SUCCESS);
  ASSERT_EQ(cuGetProcAddress("cuLaunchKernel", &Old, 11000, CU_GET_PROC_ADDRESS_LEGACY_STREAM),
            CUDA_SUCCESS);
  ASSERT_EQ(cuGetProcAddress_v2("cuGetProcAddress", &Self, 12000, 0, &St), CUDA_SUCCESS);
  EXPECT_EQ(Legacy, reinterpret_cast<void *>(&cuLaunchKernel));
  EXPECT_EQ(Old, reinterpret_cast<void *>(&cuLaunchKernel));
  EXPECT_EQ(Self, reinterpret_cast<void *>(&cuGetProcAddress_v2));
  EXPECT_NE(Ptsz, Legacy);
  // The per-thread wrapper reaches the fake's _ptsz entry point.
  Module M("pass_ptsz");
  std::vector<int> Out(4);
  fake_log_clear();
  int *P = Out.data();
  int N = 4;
  void *Args[] = {&P, &N};
  auto Fn = reinterpret_cast<decltype(&cuLaunchKernel)>(Ptsz);
  ASSERT_EQ(Fn(M.K, 4, 1, 1, 32, 1, 1, 0, nullptr, Args, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(countPrefix("launch_ptsz pass_ptsz"), 1u);
  expectEachBlockOnce(Out);
  // Calls that may load a kernel's code are handed out wrapped from the
  // version their parameters have (cuFuncLoad: 12.4), as the CUDA runtime
  // asks for them.
  void *Lookup = nullptr, *ToFunction = nullptr, *Load = nullptr, *LoadOld = nullptr;
  ASSERT_EQ(cuGetProcAddress_v2("cuModuleGetFunction", &Lookup, 12000, 0, &St), CUDA_SUCCESS);
  EXPECT_EQ(Lookup, reinterpret_cast<void *>(&cuModuleGetFunction));
  ASSERT_EQ(cuGetProcAddress_v2("cuKernelGetFunction", &ToFunction, 12000, 0, &St),
            CUDA_SUCCESS);
  EXPECT_EQ(ToFunction, reinterpret_cast<void *>(&cuKernelGetFunction));
  ASSERT_EQ(cuGetProcAddress_v2("cuFuncLoad", &Load, 12040, 0, &St), CUDA_SUCCESS);
  EXPECT_EQ(Load, reinterpret_cast<void *>(&cuFuncLoad));
  if (cuGetProcAddress_v2("cuFuncLoad", &LoadOld, 12000, 0, &St) == CUDA_SUCCESS)
    EXPECT_NE(LoadOld, reinterpret_cast<void *>(&cuFuncLoad)) << "wrapped below its version";
  // Unknown symbols are answered by the driver alone.
  void *None = reinterpret_cast<void *>(1);
  ASSERT_EQ(cuGetProcAddress_v2("cuNoSuchThing", &None, 12000, 0, &St), CUDA_SUCCESS);
  EXPECT_EQ(None, nullptr);
}

TEST(Passthrough, AutomaticRunsOriginals) {
  Module M("pass_auto");
  std::vector<int> Out(64);
  fake_log_clear();
  ASSERT_EQ(launchDirect(M.K, Out, 64), CUDA_SUCCESS);
  EXPECT_EQ(countPrefix("launch pass_auto grid=64x1x1"), 1u);
  EXPECT_FALSE(hasLine("__tally"));
  expectEachBlockOnce(Out);
}

//===----------------------------------------------------------------------===//
// TALLY_FORCE=ptb TALLY_PREEMPT=random:6
//===----------------------------------------------------------------------===//

TEST(ForcePtb, LaunchGatesTheStreamAndEveryBlockRunsOnce) {
  Module M("ptb_basic");
  fake_set_blocks_before_flag(1);
  std::vector<int> Out(50);
  fake_log_clear();
  CUstream S = reinterpret_cast<CUstream>(0x77);
  ASSERT_EQ(launchDirect(M.K, Out, 50, S), CUDA_SUCCESS);
  std::vector<std::string> L = logLines();
  // The control block's slab cleared on an internal stream (CtrlSlab; the
  // first launch of the process), one wave of workers launched (4 SMs x
  // 2), the application's stream gated on done >= 50; nothing else on
  // that stream.
  ASSERT_GE(L.size(), 3u);
  size_t I = 0;
  while (I < L.size() && L[I].rfind("launch ptb_basic__tally_ptb", 0) != 0)
    ++I;
  ASSERT_LT(I + 1, L.size());
  ASSERT_GE(I, 1u);
  EXPECT_TRUE(std::regex_match(L[I - 1], std::regex("memset stream=s[0-9]+ words=256")))
      << L[I - 1];
  EXPECT_EQ(L[I - 1].find("stream=s119"), std::string::npos) << L[I - 1];
  // Under random preemption each launch gets 1 to 8 workers.
  EXPECT_TRUE(std::regex_match(
      L[I], std::regex("launch ptb_basic__tally_ptb grid=[1-8]x1x1 block=32 stream=s119 bytes=40 extra")))
      << L[I];
  EXPECT_EQ(L[I + 1].rfind("waitvalue stream=s119 value=50 flags=0", 0), 0u) << L[I + 1];
  fake_sync();
  // Wait for the preemptor to finish with the launch.
  for (int T = 0; T < 2000 && fake_open_ptb_launches(); ++T)
    usleep(1000);
  usleep(20000);
  fake_sync();
  expectEachBlockOnce(Out);
}

// Control blocks cleared a slab at a time (CtrlSlab; its ctest entry:
// TALLY_FORCE=ptb, TALLY_SCHEDULE=0: neither preempted nor watched, so each
// launch retires as soon as it is seen ended, and no other test's launches
// share the slabs). The fake's memsets land only when the GPU would be
// known to have run them (before a later launch on their stream, when an
// event behind them is seen complete or waited for by a stream, or at a
// synchronisation): a control block used before its slab's clear has
// landed still holds its last launch's count, and that launch runs no
// blocks.
namespace {
/// \p Launches PTB launches of 50 blocks each on \p St, each run to its end
/// (a synchronisation of \p St) before the next; every one must run each
/// block once.
void launchesEachRunToTheEnd(const Module &M, CUstream St, int Launches) {
  for (int I = 0; I < Launches; ++I) {
    std::vector<int> Out(50);
    ASSERT_EQ(launchDirect(M.K, Out, 50, St), CUDA_SUCCESS);
    // (The stream's own work only: a slab's clear queued elsewhere lands
    // when the runtime sees its event done or has the stream wait for it.)
    ASSERT_EQ(cuStreamSynchronize(St), CUDA_SUCCESS);
    for (size_t B = 0; B < Out.size(); ++B)
      ASSERT_EQ(Out[B], 1) << "launch " << I << ", logical block " << B;
  }
}

size_t slabClears() {
  size_t N = 0;
  for (const std::string &L : logLines())
    N += L.rfind("memset ", 0) == 0 && L.find("words=256") != std::string::npos;
  return N;
}
} // namespace

TEST(CtrlSlabs, ClearedOffTheStream) {
  Module M("slab_cycle");
  CUstream St = reinterpret_cast<CUstream>(0x51);
  fake_log_clear();
  unsigned Waits = fake_stream_wait_events();
  launchesEachRunToTheEnd(M, St, 4 * 64);
  // A new slab is cleared by one memset of its 64 blocks on another
  // stream, and again each time all its blocks are back; with the clear
  // seen done before a block goes out, the launch's stream does nothing.
  EXPECT_EQ(countPrefix("memset stream=s81"), 0u);
  EXPECT_EQ(fake_stream_wait_events(), Waits);
  EXPECT_GE(slabClears(), 4u);
  for (const std::string &L : logLines()) {
    if (L.rfind("memset ", 0) == 0) {
      EXPECT_NE(L.find("words=256"), std::string::npos) << L;
    }
  }
  EXPECT_EQ(countPrefix("launch slab_cycle__tally_ptb"), 4u * 64u);
}

TEST(CtrlSlabs, AClearNotKnownDoneIsWaitedFor) {
  Module M("slab_slow");
  CUstream St = reinterpret_cast<CUstream>(0x52);
  // Every event needs three queries before it reports done: a slab's clear
  // is queued while launches go on, and a block of a slab whose clear is
  // not known done goes out only with its stream waiting for that clear.
  fake_slow_events(3);
  fake_log_clear();
  unsigned Waits = fake_stream_wait_events();
  launchesEachRunToTheEnd(M, St, 6 * 64);
  fake_slow_events(0);
  EXPECT_GE(slabClears(), 2u);
  EXPECT_GT(fake_stream_wait_events(), Waits);
  EXPECT_EQ(countPrefix("memset stream=s82"), 0u);
}

// A slab whose clear was queued but whose event could not be recorded (its
// own ctest entry: clears are off for the rest of the process): the memset
// may land at any time, so none of its blocks may go out; the launches
// clear their own blocks on their stream from then on.
TEST(CtrlSlabsBroken, ASlabWhoseClearCannotBeTrackedIsNeverUsed) {
  Module M("slab_broken");
  CUstream St = reinterpret_cast<CUstream>(0x53);
  fake_fail_record_after_memset();
  fake_log_clear();
  launchesEachRunToTheEnd(M, St, 2 * 64);
  EXPECT_EQ(countPrefix("record FAILED"), 1u);
  EXPECT_EQ(countPrefix("POISONED"), 0u);
  EXPECT_EQ(countPrefix("memset stream=s83 words=4"), 2u * 64u);
}

// A slab's clear that cannot even be queued (the memset fails; its own
// ctest entry: clears are off for the rest of the process): nothing may
// land later, so the slab is used, each launch clearing its own block on
// its stream first.
TEST(CtrlSlabsMemsetFails, EachLaunchClearsItsOwnBlock) {
  Module M("slab_nomemset");
  CUstream St = reinterpret_cast<CUstream>(0x54);
  fake_fail_slab_memsets(1);
  fake_log_clear();
  launchesEachRunToTheEnd(M, St, 2 * 64);
  EXPECT_EQ(countPrefix("memset FAILED"), 1u);
  EXPECT_EQ(slabClears(), 0u); // none tried again
  EXPECT_EQ(countPrefix("memset stream=s84 words=4"), 2u * 64u);
  EXPECT_EQ(countPrefix("launch slab_nomemset__tally_ptb"), 2u * 64u);
  EXPECT_EQ(countPrefix("POISONED"), 0u);
}

// The clears' own stream, or a slab's event, cannot be made (each its own
// ctest entry: clears are off for the rest of the process): nothing was
// queued, so the slab is used, each launch clearing its own block.
void eachLaunchClearsItsOwnAfter(const char *Failed, const char *Name, uintptr_t Stream,
                                 const char *StreamName) {
  Module M(Name);
  CUstream St = reinterpret_cast<CUstream>(Stream);
  fake_log_clear();
  launchesEachRunToTheEnd(M, St, 2 * 64);
  EXPECT_EQ(countPrefix(Failed), 1u);
  EXPECT_EQ(slabClears(), 0u);
  EXPECT_EQ(countPrefix(std::string("memset stream=") + StreamName + " words=4"), 2u * 64u);
  EXPECT_EQ(countPrefix(std::string("launch ") + Name + "__tally_ptb"), 2u * 64u);
  EXPECT_EQ(countPrefix("POISONED"), 0u);
}
TEST(CtrlSlabsStreamFails, EachLaunchClearsItsOwnBlock) {
  // The context's three internal streams first, then the clears' (made at
  // the first slab's clear).
  fake_fail_stream_creates(1, 3);
  eachLaunchClearsItsOwnAfter("streamcreate FAILED", "slab_nostream", 0x57, "s87");
  EXPECT_EQ(countPrefix("streamcreate s"), 3u); // the context's; the clears' not tried again
}

// A context whose internal streams cannot all be made (its own ctest
// entry): its kernels run as they are, every block once.
TEST(ContextStreamFails, KernelsRunAsTheyAre) {
  Module M("ctx_nostream");
  fake_fail_stream_creates(1, 1); // the second of the three
  fake_log_clear();
  for (int I = 0; I < 5; ++I) {
    std::vector<int> Out(50);
    ASSERT_EQ(launchDirect(M.K, Out, 50), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
  }
  EXPECT_EQ(countPrefix("streamcreate FAILED"), 1u);
  EXPECT_EQ(countPrefix("launch ctx_nostream grid=50x1x1"), 5u);
  EXPECT_FALSE(hasLine("__tally"));
}
TEST(CtrlSlabsEventFails, EachLaunchClearsItsOwnBlock) {
  fake_fail_event_creates(1); // the first made is the slab's (the launch's come after)
  eachLaunchClearsItsOwnAfter("eventcreate FAILED", "slab_noevent", 0x58, "s88");
}

// A launch whose own clear was queued on its stream and whose variant then
// failed to launch (its ctest entry: clears off, as above): the original
// runs instead, and that control block is never used again (the clear may
// land whenever its stream gets to it; the fake poisons it). Another
// kernel's launches on another stream go on through two slabs' worth of
// blocks, none of them that one.
TEST(CtrlSlabsLaunchFails, AFailedLaunchsClearedBlockIsNeverReused) {
  Module A("slab_fails"), B("slab_after");
  CUstream SA = reinterpret_cast<CUstream>(0x55), SB = reinterpret_cast<CUstream>(0x56);
  fake_fail_slab_memsets(1);
  launchesEachRunToTheEnd(A, SA, 3); // blocks 0-2, each cleared on SA
  fake_log_clear();
  fake_fail_variant_launches(1);
  std::vector<int> Out(50);
  ASSERT_EQ(launchDirect(A.K, Out, 50, SA), CUDA_SUCCESS);
  fake_fail_variant_launches(0);
  expectEachBlockOnce(Out);
  EXPECT_EQ(countPrefix("memset stream=s85 words=4"), 1u); // its clear, queued
  EXPECT_EQ(countPrefix("launch slab_fails grid=50x1x1"), 1u); // the original instead
  fake_log_clear();
  launchesEachRunToTheEnd(B, SB, 2 * 64);
  EXPECT_EQ(countPrefix("launch slab_after__tally_ptb"), 2u * 64u);
  EXPECT_EQ(countPrefix("POISONED"), 0u);
}

// Sampled timing (its ctest entry: TALLY_FORCE=ptb, TALLY_STATS_TIMING=4,
// FAKE_ELAPSED_US=10, and check-stats-sampled.py on the JSON): a kernel
// without variants launched 8 times (2 timed) and one with variants run as
// PTB 4 times (1 timed) and, between them, once as the original (a cluster
// launch: timed, the first of its form); the statistics scale the timed
// launches of each form to all of that form.
TEST(StatsTiming, OneLaunchInNTimed) {
  Module Plain("st_plain", false, "", /*WithVariants=*/false);
  Module Ptb("st_ptb");
  for (int I = 0; I < 8; ++I) {
    std::vector<int> Out(16);
    ASSERT_EQ(launchDirect(Plain.K, Out, 16), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
  }
  for (int I = 0; I < 5; ++I) {
    std::vector<int> Out(16);
    ASSERT_EQ((I == 2 ? launchCluster : launchDirect)(Ptb.K, Out, 16, nullptr), CUDA_SUCCESS);
    settlePtb();
    expectEachBlockOnce(Out);
  }
}

TEST(ForcePtb, PreemptedLaunchesAreResumedToTheEnd) {
  fake_set_blocks_before_flag(2);
  std::set<std::string> Grids; // worker counts seen (random under --preempt)
  for (int Round = 0; Round < 5; ++Round) {
    Module M("ptb_preempt" + std::to_string(Round));
    std::vector<int> Out(40);
    fake_log_clear();
    ASSERT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
    for (int T = 0; T < 5000; ++T) {
      usleep(1000);
      if (countPrefix("launch ptb_preempt" + std::to_string(Round)) >= 7 ||
          (!fake_open_ptb_launches() && T > 50))
        break;
    }
    usleep(20000);
    fake_sync();
    expectEachBlockOnce(Out);
    // Six preemptions, each followed by a resumption on the internal stream.
    EXPECT_EQ(countPrefix("writevalue stream=s102 value=1"), 6u);
    EXPECT_EQ(countPrefix("writevalue stream=s101 value=0"), 6u);
    EXPECT_EQ(countPrefix("launch ptb_preempt" + std::to_string(Round) + "__tally_ptb"), 7u);
    std::smatch Mt;
    for (const std::string &L : logLines())
      if (std::regex_search(L, Mt, std::regex("__tally_ptb grid=([0-9]+)x")))
        Grids.insert(Mt[1]);
  }
  EXPECT_GE(Grids.size(), 2u) << "every launch had the same number of workers";
}

TEST(ForcePtb, ParametersKeepOriginalValuesAndFillTheRoles) {
  Module M("ptb_params");
  std::vector<int> Out(12);
  int *P = Out.data();
  int N = 12;
  // The `extra` form: a packed buffer as the application gives it.
  unsigned char Buf[16] = {};
  std::memcpy(Buf, &P, 8);
  std::memcpy(Buf + 8, &N, 4);
  size_t Size = 12;
  void *Extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, Buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &Size,
                   CU_LAUNCH_PARAM_END};
  fake_log_clear();
  ASSERT_EQ(cuLaunchKernel(M.K, 3, 2, 2, 32, 1, 1, 0, nullptr, nullptr, Extra), CUDA_SUCCESS);
  // The null stream became the legacy stream for the runtime's own work.
  EXPECT_TRUE(hasLineRe("launch ptb_params__tally_ptb grid=[1-8]x1x1 block=32 stream=legacy bytes=40"));
  EXPECT_TRUE(hasLine("waitvalue stream=legacy value=12"));
  settle("ptb_params");
  expectEachBlockOnce(Out);
}

TEST(ForcePtb, PerThreadNullStream) {
  Module M("ptb_ptsz");
  std::vector<int> Out(9);
  int *P = Out.data();
  int N = 9;
  void *Args[] = {&P, &N};
  void *Fn = nullptr;
  CUdriverProcAddressQueryResult St;
  ASSERT_EQ(cuGetProcAddress_v2("cuLaunchKernel", &Fn, 12000,
                                CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &St),
            CUDA_SUCCESS);
  fake_log_clear();
  ASSERT_EQ(reinterpret_cast<decltype(&cuLaunchKernel)>(Fn)(M.K, 9, 1, 1, 32, 1, 1, 0, nullptr,
                                                            Args, nullptr),
            CUDA_SUCCESS);
  EXPECT_TRUE(hasLineRe("launch ptb_ptsz__tally_ptb grid=[1-8]x1x1 block=32 stream=per-thread"));
  EXPECT_TRUE(hasLine("waitvalue stream=per-thread value=9"));
  settle("ptb_ptsz");
  expectEachBlockOnce(Out);
}

TEST(ForcePtb, LibraryKernels) {
  Module M("ptb_library", /*Library=*/true);
  std::vector<int> Out(20);
  fake_log_clear();
  ASSERT_EQ(launchDirect(M.K, Out, 20), CUDA_SUCCESS);
  EXPECT_TRUE(hasLineRe("launch ptb_library__tally_ptb grid=[1-8]x1x1"));
  settle("ptb_library");
  expectEachBlockOnce(Out);
}

// A context destroyed (its streams, events and memory gone with it) and a
// new one made with the same handle, as when a library that carries the
// CUDA runtime is dlclose()d and opened again: the runtime must not touch
// what it had in the old one. Three ways the old one goes: the last
// cuDevicePrimaryCtxRelease (reached through cuGetProcAddress, as the CUDA
// runtime does), cuCtxDestroy, and behind the runtime's back (caught by
// the context id).
TEST(ForcePtb, ContextsDestroyedAndMadeAnew) {
  for (int Way = 0; Way < 3; ++Way) {
    SCOPED_TRACE("way " + std::to_string(Way));
    Module M("ptb_ctx" + std::to_string(Way));
    std::vector<std::string> Log;
    for (int Round = 0; Round < 2; ++Round) {
      std::vector<int> Out(24);
      fake_log_clear();
      ASSERT_EQ(launchDirect(M.K, Out, 24), CUDA_SUCCESS);
      settle(M.Name);
      expectEachBlockOnce(Out);
      if (Round == 0) {
        if (Way == 0) {
          void *Fn = nullptr;
          CUdriverProcAddressQueryResult St;
          ASSERT_EQ(cuGetProcAddress_v2("cuDevicePrimaryCtxRelease", &Fn, 12000, 0, &St),
                    CUDA_SUCCESS);
          ASSERT_NE(Fn, nullptr);
          fake_release_destroys();
          EXPECT_EQ(reinterpret_cast<CUresult (*)(CUdevice)>(Fn)(0), CUDA_SUCCESS);
        } else if (Way == 1) {
          CUcontext C = nullptr;
          ASSERT_EQ(cuCtxGetCurrent(&C), CUDA_SUCCESS);
          EXPECT_EQ(cuCtxDestroy(C), CUDA_SUCCESS);
        } else {
          fake_destroy_context();
        }
        fake_new_context();
      }
      for (const std::string &L : logLines())
        Log.push_back(L);
    }
    for (const std::string &L : Log)
      EXPECT_EQ(L.find("DEAD"), std::string::npos) << L;
    // The new context got internal streams of its own (resumptions, flags,
    // metadata reads, and at its first PTB launch control-block clears).
    size_t Created = 0;
    for (const std::string &L : Log)
      Created += L.rfind("streamcreate", 0) == 0;
    EXPECT_EQ(Created, 4u);
  }
}

// A context destroyed behind the runtime's back, and the process exits:
// the statistics at exit must not read the timings of launches made in it
// (the ctest fails on any "DEAD" line from the fake).
TEST(ContextGoneAtExit, TimingsAreNotRead) {
  Module M("ptb_gone");
  std::vector<int> Out(24);
  ASSERT_EQ(launchDirect(M.K, Out, 24), CUDA_SUCCESS);
  fake_sync();
  expectEachBlockOnce(Out);
  // The runtime thread is done with the launch (as after a synchronisation
  // of a real program that then tears its context down).
  for (int T = 0; T < 2000 && fake_open_ptb_launches(); ++T)
    usleep(1000);
  usleep(20000);
  fake_destroy_context();
}

TEST(ForcePtb, CapturedStreamsRunTheOriginal) {
  Module M("ptb_capture");
  CUstream S = reinterpret_cast<CUstream>(0x55);
  fake_set_capturing(S, 1);
  std::vector<int> Out(16);
  fake_log_clear();
  ASSERT_EQ(launchDirect(M.K, Out, 16, S), CUDA_SUCCESS);
  EXPECT_EQ(countPrefix("launch ptb_capture grid=16x1x1"), 1u);
  EXPECT_FALSE(hasLine("__tally_ptb"));
  fake_set_capturing(S, 0);
}

TEST(ForcePtb, CooperativeAndClusterLaunchesRunTheOriginal) {
  Module M("ptb_coop");
  std::vector<int> Out(16);
  fake_log_clear();
  ASSERT_EQ(launchCluster(M.K, Out, 16), CUDA_SUCCESS);
  EXPECT_EQ(countPrefix("launchex ptb_coop grid=16x1x1"), 1u);
  expectEachBlockOnce(Out);
  // A priority attribute alone does not stop the variant.
  Module M2("ptb_prio");
  std::vector<int> Out2(16);
  CUlaunchAttribute A = {};
  A.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  A.value.priority = -1;
  ASSERT_EQ(launchEx(M2.K, Out2, 16, nullptr, A), CUDA_SUCCESS);
  EXPECT_TRUE(hasLine("launch ptb_prio__tally_ptb"));
  settle("ptb_prio");
  expectEachBlockOnce(Out2);
}

TEST(ForcePtb, KernelsWithoutMetadataOrWithBadMetadataRunAsTheyAre) {
  Module None("ptb_nometa", false, "");
  Module Bad("ptb_badmeta", false, "tally_metadata_version: 1\nkernels: [oops\n");
  Module Other("ptb_othervers", false, "tally_metadata_version: 99\nkernels: []\n");
  for (Module *M : {&None, &Bad, &Other}) {
    std::vector<int> Out(16);
    fake_log_clear();
    ASSERT_EQ(launchDirect(M->K, Out, 16), CUDA_SUCCESS);
    EXPECT_EQ(countPrefix("launch " + M->Name + " grid=16x1x1"), 1u) << M->Name;
    EXPECT_FALSE(hasLine("__tally")) << M->Name;
    expectEachBlockOnce(Out);
  }
}

// Control-block slabs going round while launches are preempted and
// resumed (a block stays out until its launch's last resumption ends):
// every launch's blocks run once, and the slabs are cleared again as their
// blocks come back. (Clears are seen done at once here: check-stats.py
// checks that no launch waited for one.)
TEST(ForcePtb, SlabsGoRoundUnderPreemption) {
  Module M("ptb_slabs");
  CUstream St = reinterpret_cast<CUstream>(0x59);
  fake_set_blocks_before_flag(2);
  fake_log_clear();
  size_t Resumed = 0;
  for (int I = 0; I < 2 * 64 + 4; ++I) {
    std::vector<int> Out(40);
    const size_t Before = countPrefix("launch ptb_slabs__tally_ptb");
    ASSERT_EQ(launchDirect(M.K, Out, 40, St), CUDA_SUCCESS);
    // The preemptor stops and resumes it (six times under random:6) until
    // it has run out; then what is left runs, as a synchronization would.
    for (int T = 0; T < 2000; ++T) {
      if (countPrefix("launch ptb_slabs__tally_ptb") >= Before + 7 ||
          (!fake_open_ptb_launches() && T > 20))
        break;
      usleep(500);
    }
    settlePtb();
    Resumed += countPrefix("launch ptb_slabs__tally_ptb") - Before - 1;
    for (size_t B = 0; B < Out.size(); ++B)
      ASSERT_EQ(Out[B], 1) << "launch " << I << ", logical block " << B;
  }
  // Two slabs' worth of blocks came back and were cleared again (the first
  // slab's first clear came with an earlier test's launch).
  EXPECT_GE(slabClears(), 2u);
  EXPECT_GT(Resumed, size_t(64)); // (six each when the preemptor keeps up)
  EXPECT_EQ(countPrefix("POISONED"), 0u);
}

TEST(ForcePtb, AVariantThatFailsToLaunchFallsBackOnce) {
  Module M("ptb_fail");
  fake_fail_variant_launches(1);
  for (int I = 0; I < 3; ++I) {
    std::vector<int> Out(16);
    ASSERT_EQ(launchDirect(M.K, Out, 16), CUDA_SUCCESS);
    expectEachBlockOnce(Out);
  }
  fake_fail_variant_launches(0);
}

TEST(ForcePtb, StatisticsAtExit) {
  // Checked by the ctest entry that runs this configuration: the JSON file
  // named in TALLY_STATS is read by runtime-stats-check after exit.
  SUCCEED();
}

//===----------------------------------------------------------------------===//
// TALLY_FORCE=ptb TALLY_PREEMPT=random:6, a ctest entry of its own
//===----------------------------------------------------------------------===//

// A program thread enters a synchronous copy while its launch is stopped.
// The real driver holds its lock during such a copy until the GPU work it
// waits for has run (benchmarks/gpu/driver-lock-probe.cu), and so does the
// fake; the resumption the copy waits for needs that lock. The runtime
// must let the copy in only once the resumption is queued: otherwise the
// copy waits for ever (the fake gives up after 2 s: "copy TIMED OUT").
TEST(BlockingCall, ASynchronousCopyWhileALaunchIsStopped) {
  fake_set_blocks_before_flag(1);
  using CopyFn = CUresult (*)(void *, CUdeviceptr, size_t);
  void *Proc = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuMemcpyDtoH", &Proc, 3020, 0), CUDA_SUCCESS);
  // The runtime's wrapper, as a program linked with -lcuda gets it.
  ASSERT_EQ(Proc, reinterpret_cast<void *>(&cuMemcpyDtoH_v2));
  int Stopped = 0;
  for (int Round = 0; Round < 12; ++Round) {
    Module M("blocking_copy" + std::to_string(Round));
    std::vector<int> Out(64);
    size_t Raised = fake_log_count("writevalue", " value=1");
    fake_hold_events(1); // the stopped launch's end is not seen yet
    ASSERT_EQ(launchDirect(M.K, Out, 64), CUDA_SUCCESS);
    bool Up = false;
    for (int T = 0; T < 100 && !Up; ++T) {
      usleep(1000);
      Up = fake_log_count("writevalue", " value=1") > Raised;
    }
    Stopped += Up;
    std::thread Release([] {
      usleep(50000);
      fake_hold_events(0);
    });
    int First = 0;
    CopyFn Copy = Round % 2 ? reinterpret_cast<CopyFn>(Proc) : &cuMemcpyDtoH_v2;
    CUresult R = Copy(&First, reinterpret_cast<CUdeviceptr>(Out.data()), sizeof First);
    Release.join();
    EXPECT_EQ(R, CUDA_SUCCESS) << "round " << Round;
    EXPECT_EQ(First, 1) << "round " << Round << ": the copy did not wait for the kernel";
    settle(M.Name);
    expectEachBlockOnce(Out);
  }
  // The preemptor raises the flag at a random block half the time (here
  // before the copy); the other half it waits for the launch to be seen
  // starting, which the held events delay past the copy's start.
  EXPECT_GE(Stopped, 2) << "no launch was stopped when its copy began";
  EXPECT_EQ(fake_log_count("copy TIMED OUT", ""), 0u);
}

//===----------------------------------------------------------------------===//
// TALLY_FORCE=ptb TALLY_FORCE_ONLY='^picked_[0-9]+$'
//===----------------------------------------------------------------------===//

TEST(ForceOnly, OnlyMatchingKernelsTakeTheForcedForm) {
  Module Picked("picked_7"), Other("picked_7_not"), Third("other_picked_7");
  std::vector<int> A(20), B(20), C(20);
  fake_log_clear();
  ASSERT_EQ(launchDirect(Picked.K, A, 20), CUDA_SUCCESS);
  ASSERT_EQ(launchDirect(Other.K, B, 20), CUDA_SUCCESS);
  ASSERT_EQ(launchDirect(Third.K, C, 20), CUDA_SUCCESS);
  fake_sync();
  EXPECT_EQ(countPrefix("launch picked_7__tally_ptb "), 1u);
  EXPECT_EQ(countPrefix("launch picked_7_not grid=20x1x1"), 1u);
  EXPECT_EQ(countPrefix("launch other_picked_7 grid=20x1x1"), 1u);
  EXPECT_EQ(countPrefix("launch picked_7_not__tally"), 0u);
  EXPECT_EQ(countPrefix("launch other_picked_7__tally"), 0u);
  expectEachBlockOnce(A);
  expectEachBlockOnce(B);
  expectEachBlockOnce(C);
}

//===----------------------------------------------------------------------===//
// TALLY_FORCE=slice TALLY_SLICE_BLOCKS=3
//===----------------------------------------------------------------------===//

TEST(ForceSlice, SlicesCoverTheGridInOrder) {
  Module M("slice_basic");
  std::vector<int> Out(3 * 4 * 2);
  int *P = Out.data();
  int N = static_cast<int>(Out.size());
  void *Args[] = {&P, &N};
  fake_log_clear();
  ASSERT_EQ(cuLaunchKernel(M.K, 3, 4, 2, 32, 1, 1, 0, nullptr, Args, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(countPrefix("launch slice_basic__tally_slice grid=3x1x1"), 8u);
  expectEachBlockOnce(Out);
}

TEST(ForceSlice, PtbOnlyKernelsRunTheOriginal) {
  Module M("slice_ptbonly", false, metadataFor("slice_ptbonly", false, true).c_str());
  std::vector<int> Out(10);
  fake_log_clear();
  ASSERT_EQ(launchDirect(M.K, Out, 10), CUDA_SUCCESS);
  EXPECT_EQ(countPrefix("launch slice_ptbonly grid=10x1x1"), 1u);
  expectEachBlockOnce(Out);
}

//===----------------------------------------------------------------------===//
// A bad setting: the runtime stays out of the way.
//===----------------------------------------------------------------------===//

// TALLY_PTB_WORKERS_PER_SM=1: one worker per SM (the fake has 4 SMs, and
// 2 workers would fit on each).
TEST(PtbWorkers, AtMostNPerSM) {
  Module M("ptb_workers");
  std::vector<int> Out(20);
  fake_log_clear();
  ASSERT_EQ(launchDirect(M.K, Out, 20), CUDA_SUCCESS);
  EXPECT_TRUE(hasLine("launch ptb_workers__tally_ptb grid=4x1x1 block=32 stream=legacy bytes=40"));
  fake_sync();
  expectEachBlockOnce(Out);
}

TEST(BadSetting, EverythingPassesThrough) {
  Module M("bad_setting");
  std::vector<int> Out(20);
  fake_log_clear();
  ASSERT_EQ(launchDirect(M.K, Out, 20), CUDA_SUCCESS);
  EXPECT_EQ(countPrefix("launch bad_setting grid=20x1x1"), 1u);
  expectEachBlockOnce(Out);
}

//===----------------------------------------------------------------------===//
// Scheduling across processes (TALLY_SHM_DIR names a folder of the test's
// own; the fake driver's GPU is GPU-abababab-...). The test process plays
// the other process through its own Segment object.
//===----------------------------------------------------------------------===//

namespace {

const char *FakeGpu = "GPU-abababab-abab-abab-abab-abababababab";

std::unique_ptr<tally::rt::Segment> otherProcess(tally::rt::SegPriority P) {
  const char *Dir = std::getenv("TALLY_SHM_DIR");
  EXPECT_NE(Dir, nullptr);
  ::mkdir(Dir, 0700);
  tally::rt::SegmentOptions O;
  O.Dir = Dir;
  O.Key = FakeGpu;
  std::string W, E;
  auto Seg = tally::rt::Segment::open(O, W, E);
  EXPECT_TRUE(Seg) << E;
  if (Seg) {
    EXPECT_TRUE(Seg->join(P, tally::rt::monotonicNs(), E)) << E;
  }
  return Seg;
}

/// Keeps \p Seg alive for \p Ms milliseconds (heartbeats every 10 ms), or
/// until \p Until is true.
void beAlive(tally::rt::Segment &Seg, int Ms, const std::atomic<bool> *Until = nullptr) {
  for (int I = 0; I < Ms / 10 && !(Until && Until->load()); ++I) {
    usleep(10000);
    bool Rejoined = false;
    Seg.heartbeat(tally::rt::monotonicNs(), Rejoined);
  }
}

/// The process's first launch of \p K (40 blocks), synced: a BE process
/// joins the segment at its first launch.
void firstLaunch(CUfunction K) {
  std::vector<int> Out(40);
  ASSERT_EQ(launchDirect(K, Out, 40), CUDA_SUCCESS);
  fake_sync();
}

/// A BE launch of \p K (40 blocks) made in a thread while \p Hp has launch
/// \p Seq running must not return for 150 ms; once \p Hp finishes it, it
/// must, with every block run once. \p Why: the failure message.
void expectHeldUntilHpIdle(tally::rt::Segment &Hp, uint64_t Seq, CUfunction K,
                           const char *Why) {
  std::vector<int> Out(40);
  std::atomic<bool> Returned{false};
  std::thread T([&] {
    EXPECT_EQ(launchDirect(K, Out, 40), CUDA_SUCCESS);
    Returned = true;
  });
  beAlive(Hp, 150);
  EXPECT_FALSE(Returned.load()) << Why;
  Hp.hpFinished(Seq);
  beAlive(Hp, 2000, &Returned);
  T.join();
  EXPECT_TRUE(Returned.load());
  fake_sync();
  expectEachBlockOnce(Out);
}

/// A BE launch of \p K (40 blocks into \p Out) made in a thread while \p Hp
/// has launch \p Seq running: did it return within 300 ms (beside HP)?
/// Either way the thread is joined (HP's launch finished first when it
/// was held).
bool launchedBesideHp(tally::rt::Segment &Hp, uint64_t Seq, CUfunction K, std::vector<int> &Out) {
  std::atomic<bool> Returned{false};
  std::thread T([&] {
    EXPECT_EQ(launchDirect(K, Out, 40), CUDA_SUCCESS);
    Returned = true;
  });
  beAlive(Hp, 300, &Returned);
  bool Beside = Returned.load();
  if (!Beside) {
    Hp.hpFinished(Seq);
    beAlive(Hp, 2000, &Returned);
  }
  T.join();
  return Beside;
}

/// Launches \p K (40 blocks) \p Times times with \p Launch while \p Hp is
/// quiet, each synced, its PTB launches (if any) left behind by the runtime
/// thread, and checked to have run every block once; \p Hp beats after
/// each. For measuring a shape's forms until the choice.
void launchesWhileHpQuiet(tally::rt::Segment &Hp, LaunchFn Launch, CUfunction K, int Times) {
  for (int I = 0; I < Times; ++I) {
    std::vector<int> Out(40);
    ASSERT_EQ(Launch(K, Out, 40, nullptr), CUDA_SUCCESS);
    settlePtb();
    expectEachBlockOnce(Out);
    bool Rejoined = false;
    Hp.heartbeat(tally::rt::monotonicNs(), Rejoined);
  }
}

/// A BE process's kernel \p K with variants: its first launch joins the
/// segment, an HP request of \p Hp comes and goes (Guarded mode from then
/// on), and 16 launches made while HP is quiet measure its forms and choose.
void joinAndChoose(tally::rt::Segment &Hp, CUfunction K) {
  ASSERT_NO_FATAL_FAILURE(firstLaunch(K)); // joins
  Hp.hpFinished(Hp.hpLaunch(tally::rt::monotonicNs()));
  ASSERT_NO_FATAL_FAILURE(launchesWhileHpQuiet(Hp, launchDirect, K, 16));
}

/// A BE process's kernel \p K without variants, under MPS: the first launch
/// joins the segment, an HP request of \p Hp comes and goes (Guarded mode
/// from then on), then two measurements of the original while HP is idle
/// and a third launch that reads the second and decides.

void measureWhileHpIdle(tally::rt::Segment &Hp, CUfunction K, LaunchFn Launch = launchDirect) {
  {
    std::vector<int> Out(40);
    ASSERT_EQ(Launch(K, Out, 40, nullptr), CUDA_SUCCESS); // joins
    fake_sync();
  }
  Hp.hpFinished(Hp.hpLaunch(tally::rt::monotonicNs()));
  beAlive(Hp, 20);
  for (int I = 0; I < 3; ++I) {
    std::vector<int> Out(40);
    ASSERT_EQ(Launch(K, Out, 40, nullptr), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
  }
}

} // namespace

/// Launches \p K (40 blocks) \p Times times, each synced and checked to
/// have run every block once, \p GapUs apart (the Free-mode look's poll
/// period is 20 us).
void launchesOf40(CUfunction K, int Times, int GapUs = 0) {
  for (int I = 0; I < Times; ++I) {
    std::vector<int> Out(40);
    ASSERT_EQ(launchDirect(K, Out, 40), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
    if (GapUs)
      std::this_thread::sleep_for(std::chrono::microseconds(GapUs));
  }
}

// A best-effort process with no HP process about (Free mode) measures its
// kernel's forms among its launches, none held: the candidates due run
// (every block once each time), then the original every time (slices are
// left to Guarded mode). The ctest entries check the counts in the
// statistics: 10 measurements (the original and 4 PTB candidates twice:
// 0.5 ms, the original not within the target), 2 with FAKE_ELAPSED_US=10
// (the original within it ends the measuring), none with
// TALLY_FREE_MEASURE=0 (originals all along).
TEST(ScheduleBe, FormsAreMeasuredWithoutHp) {
  Module M("be_free");
  const bool Off = std::getenv("TALLY_FREE_MEASURE") &&
                   std::string(std::getenv("TALLY_FREE_MEASURE")) == "0";
  fake_log_clear();
  launchesOf40(M.K, 80, 50);
  const size_t Ptb = countPrefix("launch be_free__tally_ptb");
  EXPECT_EQ(countPrefix("launch be_free__tally_slice"), 0u) << "slices measured in Free mode";
  const bool Early = std::getenv("FAKE_ELAPSED_US") != nullptr;
  if (Off || Early)
    EXPECT_EQ(Ptb, 0u) << "a PTB candidate ran";
  else
    EXPECT_EQ(Ptb, 8u) << "not every PTB candidate measured twice";
  fake_log_clear();
  launchesOf40(M.K, 10);
  EXPECT_EQ(countPrefix("launch be_free grid=40x1x1"), 10u)
      << "the profile complete, a launch was not the original";
}

// Free-mode measurements never hold the program: with nothing the runtime
// queued ever ending (fake_hold_events), launches keep going, one
// measurement of the shape in flight. An HP launch announced while it is
// in flight discards it once it has ended (the ctest entry: "1 discarded").
TEST(ScheduleBe, FreeMeasurementsNeverHoldTheProgram) {
  Module M("be_free_async");
  fake_hold_events(1);
  fake_log_clear();
  std::atomic<bool> Done{false};
  std::thread T([&] {
    for (int I = 0; I < 30; ++I) {
      std::vector<int> Out(40);
      EXPECT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
      fake_sync();
      expectEachBlockOnce(Out);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    Done = true;
  });
  for (int I = 0; I < 400 && !Done.load(); ++I)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(Done.load()) << "a launch waited for a measurement in flight";
  if (!Done.load())
    fake_hold_events(0); // let it finish rather than hang the test
  T.join();
  EXPECT_EQ(countPrefix("launch be_free_async__tally"), 0u)
      << "a second candidate started while the first was in flight";
  // HP comes by while it is in flight and stays idle: the measurement ends
  // and is discarded at the next look (the arrival seen then makes the
  // next 20 ms Guarded, the ctest's silence window; Free mode after).
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Hp->hpFinished(Hp->hpLaunch(tally::rt::monotonicNs()));
  beAlive(*Hp, 60);
  fake_hold_events(0);
  launchesOf40(M.K, 30);
  // HP silent past the window: originals at full speed.
  beAlive(*Hp, 60);
  fake_log_clear();
  launchesOf40(M.K, 10);
  EXPECT_EQ(countPrefix("launch be_free_async grid=40x1x1"), 10u);
}

// A best-effort process: while an HP process has work on the GPU, its
// launches wait; once HP is done (and idle for the window) they go, and
// every logical block runs once.
TEST(ScheduleBe, HeldWhileHpIsActive) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  Module M("be_held");
  expectHeldUntilHpIdle(*Hp, Seq, M.K, "a BE launch went while HP was active");
  // Later launches, HP idle: they go at once (measuring the forms).
  for (int I = 0; I < 20; ++I) {
    std::vector<int> More(40);
    ASSERT_EQ(launchDirect(M.K, More, 40), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(More);
  }
}

// With a bound on holds (TALLY_MAX_HOLD_US=200000 in its ctest; no MPS): a
// BE launch made while HP stays active waits for it, but not past the
// bound; then it starts beside HP, as the original. The first launch is a
// measurement of a candidate: cut, it is not one (its time beside HP says
// nothing of the form; the ctest entry's pass expression: 0 measurements
// kept). Once the forms are measured (HP idle) the choice is PTB; cut, it
// runs as the original, not as a PTB launch that HP would stop at once.
TEST(ScheduleBe, AHoldEndsAtTheBound) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_bound");
  auto LaunchWhileHpWorks = [&](const char *What) {
    uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs()); // HP busy from here on
    std::vector<int> Out(40);
    std::atomic<bool> Returned{false};
    auto Start = std::chrono::steady_clock::now();
    std::thread T([&] {
      EXPECT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
      Returned = true;
    });
    beAlive(*Hp, 100);
    EXPECT_FALSE(Returned.load()) << What << ": the launch did not wait for HP";
    beAlive(*Hp, 3000, &Returned);
    const bool Went = Returned.load(); // HP still alive and busy
    double Ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - Start)
                    .count();
    Hp->hpFinished(Seq);
    beAlive(*Hp, 50);
    T.join();
    EXPECT_TRUE(Went) << What << ": the launch waited past the bound";
    EXPECT_GE(Ms, 200.0) << What << ": it ended before the bound";
    EXPECT_LT(Ms, 2500.0) << What;
    fake_sync();
    expectEachBlockOnce(Out);
  };
  fake_log_clear();
  LaunchWhileHpWorks("measuring launch");
  EXPECT_EQ(countPrefix("launch be_bound grid=40x1x1"), 1u) << "not the original";
  // HP idle: every form measured (the original, then 6 more, twice each).
  for (int I = 0; I < 14; ++I) {
    std::vector<int> Out(40);
    ASSERT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
    beAlive(*Hp, 1);
  }
  fake_log_clear();
  {
    std::vector<int> Out(40);
    ASSERT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS); // HP idle: the choice
    fake_sync();
  }
  ASSERT_EQ(countPrefix("launch be_bound__tally_ptb"), 1u) << "the choice is not PTB";
  fake_log_clear();
  LaunchWhileHpWorks("chosen PTB launch");
  EXPECT_EQ(countPrefix("launch be_bound__tally_ptb"), 0u) << "cut, it ran as PTB";
  EXPECT_EQ(countPrefix("launch be_bound grid=40x1x1"), 1u) << "cut, it did not run the original";
}

// As an MPS client of below-normal priority (FAKE_MPS=1,
// CUDA_MPS_CLIENT_PRIORITY=1 in its ctest), a BE launch made while HP works
// starts at once, as the original, while the HP process says it waits for
// the GPU for under --hp-wait-share (25 %) of its requests' time; at 60 %
// it waits for HP as before. TEST_SHARE_OFF=1 (with TALLY_HP_WAIT_SHARE=0):
// it always waits.
TEST(ScheduleBe, LaunchBoundHpIsNotWaitedFor) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  const char *Off = std::getenv("TEST_SHARE_OFF");
  const bool RuleOff = Off && !std::strcmp(Off, "1");
  Module M("be_launch_bound");
  beAlive(*Hp, 20);
  Hp->setWaitShare(10); // 1 %: launch bound
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  fake_log_clear();
  if (RuleOff) {
    expectHeldUntilHpIdle(*Hp, Seq, M.K, "held, the rule off");
  } else {
    std::vector<int> Out(40);
    EXPECT_TRUE(launchedBesideHp(*Hp, Seq, M.K, Out)) << "waited for a launch-bound HP";
    Hp->hpFinished(Seq);
    fake_sync();
    expectEachBlockOnce(Out);
    EXPECT_EQ(countPrefix("launch be_launch_bound grid=40x1x1"), 1u) << "not the original";
  }
  // GPU bound: held until HP is idle.
  Hp->setWaitShare(600);
  Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  expectHeldUntilHpIdle(*Hp, Seq, M.K, "not held for a GPU-bound HP");
  // Launch bound again, one HP process more whose share is not known: held.
  auto Hp2 = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp2);
  std::atomic<bool> Stop{false};
  std::thread Alive2([&] { beAlive(*Hp2, 5000, &Stop); }); // live all along
  Hp->setWaitShare(10);
  Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  expectHeldUntilHpIdle(*Hp, Seq, M.K, "not held with an HP process of unknown share");
  Stop = true;
  Alive2.join();
}

// With a queue budget (TALLY_QUEUE_US=70 in its ctest): once the kernel's
// forms are measured, launches made while HP is idle queue behind earlier
// ones that have not ended, as long as what they may make HP wait (the
// chosen PTB form's turnaround, 25 us here, and a quarter more) fits in
// the budget: two fit, the third waits for the queue to drain. Other
// ctest entries set TEST_QUEUE_FIT, the launches that go while none has
// ended: 6 with the default budget of a below-normal-priority MPS client
// (200 us); 0 under MPS at normal priority (one launch at a time: even the
// first waits for the last measuring launch).
TEST(ScheduleBe, QueueBudget) {
  const char *FitEnv = std::getenv("TEST_QUEUE_FIT");
  const int Fit = FitEnv ? std::atoi(FitEnv) : 2;
  ASSERT_GE(Fit, 0);
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  if (env("TEST_HP_NO_MPS") == "1")
    Hp->setFlags(tally::rt::seg::FlagNoMps); // HP says it is no MPS client
  Module M("be_queue");
  {
    // The BE process joins at its first launch; then an HP request comes
    // and goes: Guarded mode (TALLY_SILENCE_MS=60000 keeps it), HP idle.
    std::vector<int> Out(40);
    ASSERT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
    fake_sync();
  }
  Hp->hpFinished(Hp->hpLaunch(tally::rt::monotonicNs()));
  // Measure every form (7 candidates, 2 times each), then the choice.
  for (int I = 0; I < 16; ++I) {
    std::vector<int> Out(40);
    ASSERT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
    bool Rejoined = false;
    Hp->heartbeat(tally::rt::monotonicNs(), Rejoined);
  }
  fake_hold_events(1); // from now on nothing the runtime queued has ended
  std::vector<std::vector<int>> Outs(Fit + 1, std::vector<int>(40));
  // In a thread, so that a launch that is not queued fails the test rather
  // than waiting for ever (the events it would wait for are held).
  std::atomic<int> Done{0};
  std::thread T([&] {
    for (auto &Out : Outs) {
      EXPECT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
      ++Done;
    }
  });
  for (int I = 0; I < 200 && Done.load() < Fit; ++I)
    beAlive(*Hp, 10);
  EXPECT_EQ(Done.load(), Fit) << "launches that fit the budget were not queued";
  beAlive(*Hp, 150);
  EXPECT_EQ(Done.load(), Fit) << "a launch went past the budget";
  fake_hold_events(0);
  for (int I = 0; I < 200 && Done.load() < Fit + 1; ++I)
    beAlive(*Hp, 10);
  EXPECT_EQ(Done.load(), Fit + 1) << "the last launch did not go once the queue drained";
  T.join();
  fake_sync();
  for (auto &Out : Outs)
    expectEachBlockOnce(Out);
}

/// Launches \p K over \p Out (64 blocks, one done before the flag) as a
/// watched PTB launch (TALLY_FORCE=ptb, no HP yet), then starts an HP
/// request in \p Hp and waits until the launch is stopped for it: the
/// flag raised and its end seen. Returns the HP request's number (HP stays
/// busy until it is reported finished), 0 on failure (already reported).
uint64_t launchStoppedForHp(tally::rt::Segment &Hp, CUfunction K, std::vector<int> &Out) {
  fake_set_blocks_before_flag(1);
  fake_hold_events(1); // the launch does not end on its own
  EXPECT_EQ(launchDirect(K, Out, 64), CUDA_SUCCESS);
  size_t Raised = fake_log_count("writevalue", " value=1");
  uint64_t Seq = Hp.hpLaunch(tally::rt::monotonicNs());
  bool Up = false;
  for (int I = 0; I < 200 && !Up; ++I) {
    beAlive(Hp, 10);
    Up = fake_log_count("writevalue", " value=1") > Raised;
  }
  fake_hold_events(0); // its end is seen; it stays stopped while HP is busy
  EXPECT_TRUE(Up) << "HP arrived but the BE launch was not stopped";
  return Up ? Seq : 0;
}

// TALLY_FORCE=ptb with scheduling (its own ctest entry): a BE launch is
// stopped for an arriving HP request and held until HP is idle; meanwhile
// the BE program enters a synchronous copy. The copy must wait in Tally
// until the resumption is queued: in the driver it would hold the lock the
// resumption needs (the fake's copy then gives up: "copy TIMED OUT").
TEST(ScheduleBlocking, ACopyWhileALaunchIsStoppedForHp) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_copy");
  std::vector<int> Out(64);
  uint64_t Seq = launchStoppedForHp(*Hp, M.K, Out);
  ASSERT_NE(Seq, 0u);
  std::atomic<bool> Copied{false};
  CUresult R = CUDA_ERROR_UNKNOWN;
  int First = 0;
  std::thread Copy([&] {
    R = cuMemcpyDtoH_v2(&First, reinterpret_cast<CUdeviceptr>(Out.data()), sizeof First);
    Copied = true;
  });
  beAlive(*Hp, 200);
  EXPECT_FALSE(Copied.load()) << "the copy returned while the launch was stopped";
  {
    // A child forked now (the preemptor holds the drain lock) must not
    // wait for it (the runtime steps aside in the child): its copy returns (an error: the fake's stopped launch
    // is never resumed in the child) instead of hanging.
    pid_t Child = fork();
    ASSERT_GE(Child, 0);
    if (Child == 0) {
      std::freopen("/dev/null", "w", stderr); // the fake's "copy TIMED OUT" is expected here
      int Word = 0;
      cuMemcpyDtoH_v2(&Word, reinterpret_cast<CUdeviceptr>(Out.data()), sizeof Word);
      _exit(0);
    }
    int Status = 0;
    pid_t Done = 0;
    for (int I = 0; I < 100 && Done == 0; ++I) {
      usleep(50000);
      Done = waitpid(Child, &Status, WNOHANG);
    }
    if (Done == 0) {
      kill(Child, SIGKILL);
      waitpid(Child, &Status, 0);
    }
    EXPECT_EQ(Done, Child) << "a child forked during a preemption hung in a blocking call";
  }
  Hp->hpFinished(Seq);
  beAlive(*Hp, 4000, &Copied);
  Copy.join();
  EXPECT_EQ(R, CUDA_SUCCESS);
  EXPECT_EQ(First, 1) << "the copy did not wait for the kernel";
  fake_sync();
  expectEachBlockOnce(Out);
  EXPECT_EQ(fake_log_count("copy TIMED OUT", ""), 0u);
}

/// A launch stopped for HP (launchStoppedForHp), resumed once HP's request
/// \p Seq ends, with \p Hold(1) called just before (what the fake holds
/// from the resumption on), and watched for \p Ms (2600: past the 2 s
/// after which a resumption that has not started is reported); then
/// \p Hold(0), and every block must have run once.
void resumeHeldFor(const char *Name, void (*Hold)(int), int Ms = 2600) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M(Name);
  std::vector<int> Out(64);
  uint64_t Seq = launchStoppedForHp(*Hp, M.K, Out);
  ASSERT_NE(Seq, 0u);
  beAlive(*Hp, 200); // the preemption collected
  size_t Cleared = fake_log_count("writevalue", " value=0"); // a resumption clears the flag first
  Hold(1);
  Hp->hpFinished(Seq);
  bool Resumed = false;
  for (int I = 0; I < 200 && !Resumed; ++I) {
    beAlive(*Hp, 10);
    Resumed = fake_log_count("writevalue", " value=0") > Cleared;
  }
  EXPECT_TRUE(Resumed) << "HP went idle but the launch was not resumed";
  beAlive(*Hp, Ms);
  Hold(0);
  fake_sync();
  expectEachBlockOnce(Out);
}

// A resumption that never starts (on the GPU: its stream shares a hardware
// work queue with the program's stream, which waits at the launch's gate;
// here: the fake holds every event from the relaunch on) is reported once,
// as an error naming CUDA_DEVICE_MAX_CONNECTIONS, after 2 s (its own ctest
// entry looks for the message); once the events go, the launch ends with
// every block run once.
TEST(ScheduleStuck, AResumptionThatNeverStartsIsReported) {
  resumeHeldFor("be_stuck", fake_hold_events);
}

// The same with a resumption that has started and runs on for 4.6 s (the
// fake holds PTB launches running; each read of its control block finds
// one more block done): not reported (its own ctest entry fails on the
// message).
TEST(ScheduleStalledResumption, AResumptionThatRunsNoBlockIsReported) {
  // Its start reached, its kernel running no block (what the hangs with
  // too few hardware work queues looked like): reported once its counts
  // stood still for 2 s (its own ctest entry looks for the message).
  resumeHeldFor("be_stall", fake_stall_ptb, 4600);
}

TEST(ScheduleLongResumption, ARunningResumptionIsNotReported) {
  resumeHeldFor("be_long", fake_hold_ptb, 4600);
}

// CUDA_DEVICE_MAX_CONNECTIONS=1 (its own ctest entry, TALLY_FORCE=ptb with
// scheduling): every stream shares one hardware work queue, so a launch
// that would be a preemptible PTB launch runs as the original instead: no
// gate on its stream (said once, checked by the entry).
TEST(OneWorkQueue, PreemptibleLaunchesRunAsOriginals) {
  Module M("one_queue");
  for (int I = 0; I < 3; ++I) {
    std::vector<int> Out(64);
    ASSERT_EQ(launchDirect(M.K, Out, 64), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
  }
  EXPECT_EQ(fake_log_count("waitvalue", ""), 0u) << "a gate was queued on the program's stream";
}

/// Cond() holds within about 2 s of HP's heartbeats (HP alive meanwhile).
template <typename F> bool aliveUntil(tally::rt::Segment &Hp, F Cond) {
  for (int I = 0; I < 200 && !Cond(); ++I)
    beAlive(Hp, 10);
  return Cond();
}

/// Cond() holds within about \p Ms milliseconds.
template <typename F> bool within(int Ms, F Cond) {
  for (int I = 0; I < Ms && !Cond(); ++I)
    usleep(1000);
  return Cond();
}

/// Launches \p K (64 blocks into \p Out) from a thread of its own, which
/// sets \p Returned once the call returned (its result expected to be
/// success); the caller joins it.
std::thread launchInThread(CUfunction K, std::vector<int> &Out, std::atomic<bool> &Returned) {
  return std::thread([K, &Out, &Returned] {
    EXPECT_EQ(launchDirect(K, Out, 64), CUDA_SUCCESS);
    Returned = true;
  });
}

// Loading a kernel's code stalls the GPU's later work until its earlier
// work ended (benchmarks/gpu/gate-queues.cu): beside a launch stopped for HP,
// whose gate waits for a resumption not yet queued, for ever. A preempting
// process loads each kernel and its variants when it first sees it, under
// the drain lock (TALLY_FORCE=ptb with scheduling, their own ctest entry).

// The first launch of a kernel loads it and both variants (cuFuncLoad);
// no form is loaded later by a launch of its own.
TEST(ScheduleLoad, AKernelAndItsVariantsLoadWhenFirstSeen) {
  Module M("be_load");
  const size_t Own0 = fake_log_count("funcload be_load", ""),
               Variants0 = fake_log_count("funcload (a variant)", "");
  std::vector<int> Out(64);
  ASSERT_EQ(launchDirect(M.K, Out, 64), CUDA_SUCCESS);
  fake_sync();
  expectEachBlockOnce(Out);
  EXPECT_EQ(fake_log_count("funcload be_load", ""), Own0 + 1) << "the kernel was not loaded";
  EXPECT_EQ(fake_log_count("funcload (a variant)", ""), Variants0 + 2)
      << "its variants were not both loaded";
  EXPECT_EQ(fake_log_count("load ", " by launch"), 0u) << "a form was loaded by its launch";
}

// A kernel first launched (from another thread) while a launch is stopped
// for HP is neither loaded nor launched until the stopped launch's
// resumption is queued (then nothing can stall it); every block of both
// runs once. (The fake logs LOAD-UNDER-STOP, a failure, for a load made
// while a launch is stopped.)
TEST(ScheduleLoad, ANewKernelWaitsForAStoppedLaunchsResumption) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module A("be_loadstop"), B("be_loadnew");
  std::vector<int> OutA(64), OutB(64);
  uint64_t Seq = launchStoppedForHp(*Hp, A.K, OutA);
  ASSERT_NE(Seq, 0u);
  std::atomic<bool> Returned{false};
  std::thread T = launchInThread(B.K, OutB, Returned);
  beAlive(*Hp, 200);
  EXPECT_EQ(fake_log_count("funcload be_loadnew", ""), 0u)
      << "a kernel was loaded while a launch was stopped";
  EXPECT_FALSE(Returned.load());
  Hp->hpFinished(Seq);
  beAlive(*Hp, 2000, &Returned);
  EXPECT_TRUE(Returned.load()) << "the new kernel's launch did not return once HP was idle";
  T.join();
  fake_sync();
  expectEachBlockOnce(OutA);
  expectEachBlockOnce(OutB);
  EXPECT_EQ(fake_log_count("LOAD-UNDER-STOP", ""), 0u);
  EXPECT_EQ(fake_log_count("funcload be_loadnew", ""), 1u);
}

/// Launches \p K over \p Out (64 blocks) as a watched PTB launch, running
/// until its flag goes up; \p Load makes a code load meanwhile. Then an HP
/// request arrives: no flag may go up while the load's stall lasts (\p Why
/// is the failure's message). The launch then ends on its own, and with it
/// the stall, and the request finishes.
void expectNoFlagWhileLoadStalls(tally::rt::Segment &Hp, CUfunction K, std::vector<int> &Out,
                                 const std::function<void()> &Load, const char *Why) {
  fake_set_blocks_before_flag(1);
  auto Raised = [] { return fake_log_count("writevalue ", " value=1"); };
  fake_hold_ptb(1); // launches run until their flag goes up
  ASSERT_EQ(launchDirect(K, Out, 64), CUDA_SUCCESS); // HP idle: wide, watched
  Load();
  const size_t Raised0 = Raised();
  uint64_t Seq = Hp.hpLaunch(tally::rt::monotonicNs());
  beAlive(Hp, 300);
  EXPECT_EQ(Raised(), Raised0) << Why;
  fake_hold_ptb(0); // the running launch ends on its own, and the stall with it
  Hp.hpFinished(Seq);
}

// A kernel first seen while another launch runs is loaded at once, and
// the load's stall lasts until that launch has ended (the fake's mark
// completes then). An HP request arriving meanwhile stops nothing: the
// resumption would be stalled behind the load, and the load behind the
// launch's gate. Once the launch has ended, later launches go on; every
// block of both kernels runs once, and the put-off preemption is counted
// (the ctest entry looks for the statistics' line).
TEST(ScheduleLoad, NoFlagGoesUpWhileALoadStalls) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module A("be_loadrun"), B("be_loadlate");
  std::vector<int> OutA(64), OutB(64);
  std::atomic<bool> Returned{false};
  std::thread T;
  expectNoFlagWhileLoadStalls(
      *Hp, A.K, OutA,
      [&] {
        T = launchInThread(B.K, OutB, Returned);
        EXPECT_TRUE(within(1000, [] { return fake_log_count("funcload be_loadlate", "") > 0; }))
            << "the new kernel was not loaded";
      },
      "a flag went up while a load's stall was not over");
  beAlive(*Hp, 2000, &Returned);
  EXPECT_TRUE(Returned.load()) << "the new kernel's launch did not return";
  if (T.joinable())
    T.join();
  fake_sync();
  expectEachBlockOnce(OutA);
  expectEachBlockOnce(OutB);
}

// The program's own lookup of a kernel (the CUDA runtime makes one at a
// kernel's first launch) loads its code under lazy loading (the fake does
// with FAKE_LOOKUP_LOADS=1). Made while a launch runs, it stalls the
// context's later work until that launch has ended: the runtime marks it
// (Runtime::codeLoaded) and no flag goes up meanwhile; the put-off
// preemption and the mark are counted (the ctest entry looks for the
// statistics' line). Then the kernel runs, every block once.
TEST(ScheduleLoad, NoFlagGoesUpAfterTheProgramsOwnLookup) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module A("be_lookrun"), B("be_lookup");
  std::vector<int> OutA(64), OutB(64);
  CUfunction F = nullptr;
  expectNoFlagWhileLoadStalls(
      *Hp, A.K, OutA,
      [&] {
        ASSERT_EQ(cuModuleGetFunction(&F, static_cast<CUmodule>(B.M), "be_lookup"),
                  CUDA_SUCCESS);
        EXPECT_EQ(F, B.K);
        EXPECT_EQ(fake_log_count("load be_lookup by lookup", ""), 1u)
            << "the lookup loaded nothing";
      },
      "a flag went up while the program's load stalled");
  beAlive(*Hp, 50);
  ASSERT_EQ(launchDirect(F, OutB, 64), CUDA_SUCCESS);
  fake_sync();
  expectEachBlockOnce(OutA);
  expectEachBlockOnce(OutB);
}

// The program's own lookup made while a launch is stopped for HP (from
// another thread; the fake loads code at lookups with FAKE_LOOKUP_LOADS=1)
// waits until the stopped launch's resumption is queued, as other calls
// that may stall the context do: no load while a launch is stopped (the
// fake logs LOAD-UNDER-STOP, a failure).
TEST(ScheduleLoad, TheProgramsLookupWaitsForAStoppedLaunchsResumption) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module A("be_lookstop"), B("be_looknew");
  std::vector<int> OutA(64), OutB(64);
  uint64_t Seq = launchStoppedForHp(*Hp, A.K, OutA);
  ASSERT_NE(Seq, 0u);
  std::atomic<bool> Returned{false};
  CUfunction F = nullptr;
  std::thread T([&] {
    EXPECT_EQ(cuModuleGetFunction(&F, static_cast<CUmodule>(B.M), "be_looknew"), CUDA_SUCCESS);
    Returned = true;
  });
  beAlive(*Hp, 200);
  EXPECT_FALSE(Returned.load()) << "the lookup went ahead while a launch was stopped";
  EXPECT_EQ(fake_log_count("load be_looknew by lookup", ""), 0u);
  Hp->hpFinished(Seq);
  beAlive(*Hp, 2000, &Returned);
  EXPECT_TRUE(Returned.load()) << "the lookup did not return once HP was idle";
  T.join();
  EXPECT_EQ(F, B.K);
  ASSERT_EQ(launchDirect(F, OutB, 64), CUDA_SUCCESS);
  fake_sync();
  expectEachBlockOnce(OutA);
  expectEachBlockOnce(OutB);
  EXPECT_EQ(fake_log_count("LOAD-UNDER-STOP", ""), 0u);
}

// With fewer hardware work queues than 32 (TEST_FEW_QUEUES=1 with
// CUDA_DEVICE_MAX_CONNECTIONS=8; else 32), a BE launch made while a
// preemptible PTB launch has not passed its gate waits for it, in Free mode
// too (no HP here; forced PTB): nothing goes behind a gate. With 32 it is
// queued behind the gate at once.
TEST(ScheduleGate, ALaunchWaitsForAGatedOneWithFewQueues) {
  const bool Few = env("TEST_FEW_QUEUES") == "1";
  Module A("gate_first"), B("gate_next");
  fake_set_blocks_before_flag(1);
  std::vector<int> OutA(64), OutB(64);
  fake_hold_ptb(1); // launches run until their flag goes up
  ASSERT_EQ(launchDirect(A.K, OutA, 64), CUDA_SUCCESS); // no HP: forced PTB, watched
  std::atomic<bool> Returned{false};
  std::thread T = launchInThread(B.K, OutB, Returned);
  usleep(200000);
  EXPECT_EQ(Returned.load(), !Few)
      << (Few ? "a launch went behind a gate with fewer than 32 queues"
              : "a launch waited for a gate with 32 queues");
  fake_hold_ptb(0); // the first launch ends on its own
  EXPECT_TRUE(within(2000, [&] { return Returned.load(); })) << "the second launch never went";
  T.join();
  fake_sync();
  expectEachBlockOnce(OutA);
  expectEachBlockOnce(OutB);
}

// The armed flag (Config::ArmedFlag; TEST_ARMED=0 with TALLY_ARMED_FLAG=0):
// a watched PTB launch has its flag write queued on the signal stream
// ahead of time, behind a wait for a word of host memory (the fake holds
// the stream's later work until the word arrives); HP's arrival makes the
// write land with no driver call, the launch stops, and its resumption is
// armed again for its own number. Each (re)launch releases its wait from
// the GPU when it ends, so the resumption's write lands late, on a launch
// already done ("lateflag"), and no stream is left waiting on host memory
// at the end (the fake also aborts a synchronisation of one that is).
TEST(ScheduleArmed, TheFlagIsQueuedAheadAndRaisedByHpArriving) {
  const bool Armed = env("TEST_ARMED") != "0";
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_armed");
  fake_set_blocks_before_flag(1);
  auto Raised = [] { return fake_log_count("writevalue ", " value=1"); };
  auto ArmWaits = [](const char *Seq) {
    return fake_log_count("waitvalue ", (std::string(" value=") + Seq + " flags=0").c_str());
  };
  const size_t Raised0 = Raised(), Waits0 = ArmWaits("1");
  std::vector<int> Out(64);
  fake_hold_ptb(1); // launches run until their flag goes up
  ASSERT_EQ(launchDirect(M.K, Out, 64), CUDA_SUCCESS); // no HP yet: PTB, watched
  const bool Queued = within(200, [&] { return ArmWaits("1") > Waits0; });
  EXPECT_EQ(Queued, Armed) << "the flag's wait on the host word (armed: queued ahead)";
  usleep(20000);
  EXPECT_EQ(Raised(), Raised0) << "a flag landed before HP arrived";
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  ASSERT_TRUE(aliveUntil(*Hp, [&] { return Raised() > Raised0; }))
      << "HP arrived but the BE launch was not stopped";
  Hp->hpFinished(Seq);
  beAlive(*Hp, 300); // idle: resumed, and watched again
  if (Armed) {
    EXPECT_GE(ArmWaits("2"), 1u) << "the resumption was not armed again";
  }
  fake_hold_ptb(0);
  fake_sync();
  expectEachBlockOnce(Out);
  if (Armed) {
    EXPECT_GE(fake_log_count("armwrite", ""), 2u) << "a release from the GPU per (re)launch";
    EXPECT_GE(fake_log_count("lateflag", ""), 1u)
        << "the resumption's write, released when it ended";
  } else {
    EXPECT_EQ(fake_log_count("armwrite", ""), 0u);
    EXPECT_EQ(fake_log_count("lateflag", ""), 0u);
  }
  EXPECT_EQ(fake_blocked_streams(), 0u) << "a wait on host memory nothing released";
}

// The armed flag's write failing as it is queued (a driver call's error):
// the wait is queued with nothing behind it; HP's arrival releases it and
// the flag goes up by driver calls instead; the launch stops, resumes and
// runs every block once, and nothing is left waiting. TEST_ARMED=1 only.
TEST(ScheduleArmed, AFailedArmedWriteFallsBackToDriverCalls) {
  if (env("TEST_ARMED") == "0")
    GTEST_SKIP() << "the armed flag is off";
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_armfail");
  fake_set_blocks_before_flag(1);
  auto Raised = [] { return fake_log_count("writevalue ", " value=1"); };
  const size_t Failed0 = fake_log_count("writevalue FAILED", ""), Raised0 = Raised();
  std::vector<int> Out(64);
  fake_hold_ptb(1);
  fake_fail_flag_writes(1); // the armed write
  ASSERT_EQ(launchDirect(M.K, Out, 64), CUDA_SUCCESS);
  within(500, [&] { return fake_log_count("writevalue FAILED", "") > Failed0; });
  ASSERT_EQ(fake_log_count("writevalue FAILED", ""), Failed0 + 1) << "the armed write was not made";
  EXPECT_EQ(fake_blocked_streams(), 1u) << "the armed wait is not queued";
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  EXPECT_TRUE(aliveUntil(*Hp, [&] { return Raised() > Raised0; }))
      << "HP arrived but the flag did not go up by driver calls";
  Hp->hpFinished(Seq);
  beAlive(*Hp, 300);
  fake_hold_ptb(0);
  fake_sync();
  expectEachBlockOnce(Out);
  within(200, [] { return !fake_blocked_streams(); });
  EXPECT_EQ(fake_blocked_streams(), 0u) << "a wait on host memory nothing released";
  // The context goes on: another launch runs whole.
  std::vector<int> Next(64);
  ASSERT_EQ(launchDirect(M.K, Next, 64), CUDA_SUCCESS);
  fake_sync();
  expectEachBlockOnce(Next);
}

// A late flag (the armed write released when its launch ended on its own)
// that has not landed yet when the program launches again: the next
// launch must not get its control block (it would be stopped with nobody
// to resume it, and its stream would wait for ever); and a word used
// before starts again from 0 (else a later launch's wait would pass at
// once and its flag go up with no HP about). TEST_ARMED=1 only.
TEST(ScheduleArmed, ALateFlagNeverStopsALaterLaunch) {
  if (env("TEST_ARMED") == "0")
    GTEST_SKIP() << "the armed flag is off";
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_late");
  fake_set_blocks_before_flag(1);
  auto Raised = [] { return fake_log_count("writevalue ", " value=1"); };
  auto HostWaits = [] { return fake_log_count("waitvalue ", " host"); };
  auto Armed = [&](size_t Before) { return within(500, [&] { return HostWaits() > Before; }); };
  fake_hold_released(1); // released signal-stream work waits until let go
  struct LetGo {
    ~LetGo() { fake_hold_released(0); } // also when an assertion ends the test
  } LetGoAtEnd;
  // A: armed, then ends on its own; its late flag is held back.
  std::vector<int> A(64), B(64), C(64);
  size_t W = HostWaits();
  fake_hold_ptb(1); // until armed
  ASSERT_EQ(launchDirect(M.K, A, 64), CUDA_SUCCESS);
  ASSERT_TRUE(Armed(W)) << "A was not armed";
  fake_hold_ptb(0);
  within(500, [] { return !fake_open_ptb_launches(); });
  ASSERT_EQ(fake_open_ptb_launches(), 0u) << "A did not end on its own";
  // B: runs until its flag goes up; A's late flag lands while B runs.
  fake_hold_ptb(1);
  W = HostWaits();
  size_t Up = Raised();
  ASSERT_EQ(launchDirect(M.K, B, 64), CUDA_SUCCESS);
  EXPECT_TRUE(Armed(W)) << "B was not armed";
  fake_hold_released(0); // A's flag lands now
  usleep(20000);
  EXPECT_EQ(Raised(), Up) << "a late flag stopped a later launch";
  EXPECT_GE(fake_log_count("lateflag", ""), 1u) << "A's flag did not land late";
  fake_hold_ptb(0);
  fake_sync();
  expectEachBlockOnce(A);
  expectEachBlockOnce(B);
  // C, after both were reclaimed (their words back in the pool, at 1 and
  // more): armed for 1 again, and not raised without HP.
  within(200, [] { return !fake_blocked_streams(); });
  fake_hold_ptb(1);
  W = HostWaits();
  Up = Raised();
  ASSERT_EQ(launchDirect(M.K, C, 64), CUDA_SUCCESS);
  EXPECT_TRUE(Armed(W)) << "C was not armed";
  usleep(20000);
  EXPECT_EQ(Raised(), Up) << "a reused word let a flag go up with no HP about";
  fake_hold_ptb(0);
  fake_sync();
  expectEachBlockOnce(C);
  EXPECT_EQ(fake_blocked_streams(), 0u) << "a wait on host memory nothing released";
}

// Short kernels beside HP (its ctest entries set FAKE_MPS, FAKE_ELAPSED_US,
// TALLY_BESIDE, TEST_EXPECT_BESIDE: 1 when the short kernel must go
// while HP is busy, 0 when it must be held like any other, and
// TEST_LAUNCH: "cluster" to launch the kernel with a cluster attribute,
// as cuBLAS's and cuDNN's Hopper kernels are, which only the original can
// run). Under MPS, a kernel measured at 10 us (within the 31.6 us target)
// starts while HP works; a kernel whose forms are still being measured
// waits for HP either way.
TEST(ScheduleBe, ShortKernelsRunBesideHp) {
  const char *Expect = std::getenv("TEST_EXPECT_BESIDE");
  ASSERT_NE(Expect, nullptr) << "set TEST_EXPECT_BESIDE to 0 or 1";
  const bool Beside = !std::strcmp(Expect, "1");
  const bool Cluster = env("TEST_LAUNCH") == "cluster";
  LaunchFn Launch = Cluster ? launchCluster : launchDirect;
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  // With a cluster, a kernel with variants: the attribute alone makes it
  // a launch of the original.
  Module Plain("be_beside_plain", false, "", /*WithVariants=*/Cluster);
  Module V("be_beside_ptb");
  measureWhileHpIdle(*Hp, Plain.K, Launch);
  if (env("TEST_HP_NO_MPS") == "1")
    Hp->setFlags(tally::rt::seg::FlagNoMps); // HP says (from now) it is no MPS client
  fake_log_clear();
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs()); // HP busy
  std::vector<int> Out(40);
  std::atomic<bool> Returned{false};
  std::thread T([&] {
    EXPECT_EQ(Launch(Plain.K, Out, 40, nullptr), CUDA_SUCCESS);
    Returned = true;
  });
  beAlive(*Hp, 300, &Returned);
  EXPECT_EQ(Returned.load(), Beside)
      << (Beside ? "a short kernel was held while HP worked"
                 : "a kernel went while HP worked");
  if (Returned.load()) {
    // Not yet measured: the kernel with variants waits for HP.
    expectHeldUntilHpIdle(*Hp, Seq, V.K, "a measuring launch went while HP worked");
  } else {
    Hp->hpFinished(Seq);
  }
  beAlive(*Hp, 2000, &Returned);
  T.join();
  fake_sync();
  expectEachBlockOnce(Out);
  if (Cluster) {
    EXPECT_EQ(countPrefix("launchex be_beside_plain grid=40x1x1"), 1u)
        << "the cluster launch did not run the original";
  }
}

// A kernel measured short whose launches then run long (its time depends
// on its arguments): short launches are timed again (every 16th, when HP is
// idle). One check over the target is not enough (a host stall can make
// one): the kernel still goes beside HP. Once 4 of its last 8 checks were
// over, it waits for HP again, where ShortKernelsRunBesideHp's went beside
// it (its ctest entry: FAKE_MPS=1, FAKE_ELAPSED_US=10 for the
// measurements).
TEST(ScheduleBe, ABesideKernelThatRunsLongIsHeldAgain) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module Plain("be_beside_long", false, "", /*WithVariants=*/false);
  // 10 us each: short; the decision's launch, the first short one, is
  // timed (a check), and read at the next launch.
  measureWhileHpIdle(*Hp, Plain.K);
  auto LaunchIdle = [&](int Times) {
    for (int I = 0; I < Times; ++I) {
      std::vector<int> Out(40);
      ASSERT_EQ(launchDirect(Plain.K, Out, 40), CUDA_SUCCESS);
      fake_sync();
      expectEachBlockOnce(Out);
    }
  };
  LaunchIdle(1); // short launch 2 reads check 1: 10 us
  setenv("FAKE_ELAPSED_US", "500", 1); // from now on every timed launch took 500 us
  // Short launches 3 to 18 (HP idle): the 17th is timed, the 18th reads it.
  LaunchIdle(16);
  {
    uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs());
    std::vector<int> Out(40);
    EXPECT_TRUE(launchedBesideHp(*Hp, Seq, Plain.K, Out))
        << "one check over the target revoked the kernel";
    Hp->hpFinished(Seq);
    beAlive(*Hp, 20);
    fake_sync();
    expectEachBlockOnce(Out);
  }
  // Short launch 19 went beside HP. Three more checks over the target
  // (launches 33, 49 and 65, each read at the next): four of the last five.
  LaunchIdle(47);
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs()); // HP busy
  expectHeldUntilHpIdle(*Hp, Seq, Plain.K, "a kernel timed at 500 us four times went beside HP");
}

// A kernel whose chosen form is its sliced variant, with slices short
// enough (its ctest entry: FAKE_MPS=1, FAKE_ELAPSED_US=100: the original's
// 100 us is over the target, a slice of one wave, 8 of the 40 blocks, is
// 20 us), goes beside HP under MPS: the launch made while HP works returns
// with every slice issued, none waiting for HP; every block runs once.
TEST(ScheduleBe, ShortSlicesRunBesideHp) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  const std::string Name = "be_beside_slices";
  const std::string Meta = metadataFor(Name, /*Slice=*/true, /*Ptb=*/false);
  Module M(Name, false, Meta.c_str());
  ASSERT_NO_FATAL_FAILURE(firstLaunch(M.K)); // joins
  Hp->hpFinished(Hp->hpLaunch(tally::rt::monotonicNs())); // Guarded from now on
  beAlive(*Hp, 20);
  // The original and two slice sizes, measured twice each; then decided.
  for (int I = 0; I < 7; ++I) {
    std::vector<int> Out(40);
    ASSERT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
  }
  fake_log_clear();
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs()); // HP busy
  std::vector<int> Out(40);
  EXPECT_TRUE(launchedBesideHp(*Hp, Seq, M.K, Out)) << "short slices waited for HP";
  Hp->hpFinished(Seq);
  fake_sync();
  expectEachBlockOnce(Out);
  EXPECT_EQ(countPrefix("launch " + Name + "__tally_slice grid=8x1x1"), 5u)
      << "not sliced in slices of one wave";
  // Once more with each slice taking a while, HP busy throughout: HP's
  // arrival during a launch that cannot be stopped counts once for the
  // launch (its ctest entry's pass expression: 1 in all), not per slice.
  fake_slow_events(400);
  Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  std::vector<int> Again(40);
  EXPECT_TRUE(launchedBesideHp(*Hp, Seq, M.K, Again)) << "short slices waited for HP";
  fake_slow_events(0);
  Hp->hpFinished(Seq);
  fake_sync();
  expectEachBlockOnce(Again);
}

// A kernel without variants measured long (its ctest entries:
// FAKE_MPS=1, FAKE_ELAPSED_US=500) goes beside HP under MPS when its grid
// fits in the share a narrow PTB launch keeps (TALLY_BESIDE_PTB_PERCENT=50:
// 4 of the fake GPU's 8 block slots), and waits for HP when it does not (40
// blocks), or when that share is 0 (TEST_EXPECT_SMALL=0).
TEST(ScheduleBe, SmallGridsRunBesideHpWhateverTheirTime) {
  const char *Expect = std::getenv("TEST_EXPECT_SMALL");
  ASSERT_NE(Expect, nullptr) << "set TEST_EXPECT_SMALL to 0 or 1";
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module Plain("be_small_grid", false, "", /*WithVariants=*/false);
  auto Launch = [&](unsigned G) {
    std::vector<int> Out(G);
    ASSERT_EQ(launchDirect(Plain.K, Out, G), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
  };
  Launch(4); // joins
  Hp->hpFinished(Hp->hpLaunch(tally::rt::monotonicNs())); // Guarded from now on
  beAlive(*Hp, 20);
  for (int I = 0; I < 3; ++I) { // two measurements of each shape, then decided
    Launch(4);
    Launch(40);
  }
  for (unsigned G : {4u, 40u}) {
    uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs());
    std::vector<int> Out(G);
    std::atomic<bool> Returned{false};
    std::thread T([&] {
      EXPECT_EQ(launchDirect(Plain.K, Out, G), CUDA_SUCCESS);
      Returned = true;
    });
    beAlive(*Hp, 300, &Returned);
    bool Beside = Returned.load();
    EXPECT_EQ(Beside, G == 4 && !std::strcmp(Expect, "1"))
        << G << " blocks of 500 us " << (Beside ? "went beside HP" : "waited for HP");
    Hp->hpFinished(Seq);
    beAlive(*Hp, 2000, &Returned);
    T.join();
    fake_sync();
    expectEachBlockOnce(Out);
  }
}

/// Keeps \p Hp alive until \p Cond holds (2 s at most); returns Cond().
// PTB launches beside HP under MPS (its ctest entries: FAKE_MPS,
// FAKE_ELAPSED_US=100 so that the chosen form is PTB on a full wave of 8
// workers (4 SMs of 2), TALLY_WIDEN_US=200000, TALLY_BESIDE_PTB_PERCENT, and
// TEST_EXPECT_NARROW: 1 when a PTB launch must run beside HP on 4 workers,
// half the wave, 0 when it must wait for HP like before). Narrow: a launch made
// while HP works starts on 4 workers and is not stopped while HP works; once
// HP has been quiet for the widen window it is stopped and resumed on 8. A
// launch started wide while HP was quiet is stopped when HP arrives and
// resumed on 4 at once, then widened again. Every logical block runs once.
// A launch only the original can make (a cluster) of a shape whose
// ordinary launches were decided as PTB (its ctest entry: FAKE_MPS=1,
// FAKE_ELAPSED_US=100, so that PTB is chosen) runs the
// original: the choice for the shape is not the cluster launch's. And the
// other way round: after cluster launches of a shape were decided (the
// original), ordinary launches of it still get their PTB choice.
TEST(ScheduleBe, AClusterLaunchNeverTakesTheShapesVariant) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_cluster_shape");
  Module M2("be_cluster_first");
  ASSERT_NO_FATAL_FAILURE(firstLaunch(M.K)); // joins
  Hp->hpFinished(Hp->hpLaunch(tally::rt::monotonicNs())); // Guarded from now on
  auto Run = [&](LaunchFn Launch, CUfunction K, int Times) {
    launchesWhileHpQuiet(*Hp, Launch, K, Times);
  };
  Run(launchDirect, M.K, 16); // 7 candidates measured twice, then PTB chosen
  fake_log_clear();
  Run(launchDirect, M.K, 1);
  // (Narrow or wide: HP was active less than the widen window ago.)
  ASSERT_EQ(fake_log_count("launch be_cluster_shape__tally_ptb ", ""), 1u)
      << "the shape was not decided as PTB; the test needs it";
  fake_log_clear();
  Run(launchCluster, M.K, 3);
  EXPECT_EQ(fake_log_count("launchex be_cluster_shape ", "grid=40x1x1"), 3u);
  EXPECT_EQ(fake_log_count("launch be_cluster_shape__tally", ""), 0u)
      << "a cluster launch ran a variant";
  // Cluster launches first, then ordinary ones of the same shape.
  Run(launchCluster, M2.K, 4);
  fake_log_clear();
  Run(launchDirect, M2.K, 16);
  EXPECT_GT(fake_log_count("launch be_cluster_first__tally_", ""), 0u)
      << "ordinary launches took the cluster launches' choice (the original)";
}

// As an MPS client of below-normal priority, a kernel with variants whose
// original runs in short waves (its ctest entries: FAKE_MPS=1,
// CUDA_MPS_CLIENT_PRIORITY=1, FAKE_ELAPSED_US=50: 40 blocks in 5 waves of 8,
// 10 us each) is chosen as the original after the original's two
// measurements (no variant is measured) and runs as the original beside a
// working HP with TALLY_BESIDE_WAVE_US=15 (TEST_EXPECT_ORIGINAL=1). By
// default (0) its variants are measured and PTB is chosen: the launch made while HP works
// runs the PTB variant, narrow (TEST_EXPECT_ORIGINAL=0). Every block once.
TEST(ScheduleBe, ShortWavesRunAsTheOriginalBesideHp) {
  const std::string Expect = env("TEST_EXPECT_ORIGINAL");
  ASSERT_TRUE(Expect == "0" || Expect == "1") << "set TEST_EXPECT_ORIGINAL to 0 or 1";
  const bool Original = Expect == "1";
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_waves");
  ASSERT_NO_FATAL_FAILURE(joinAndChoose(*Hp, M.K));
  EXPECT_EQ(fake_log_count("launch be_waves__tally_", "") == 0, Original)
      << (Original ? "a variant was measured though the original's waves are short"
                   : "no variant was measured");
  fake_log_clear();
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs()); // HP busy
  std::vector<int> Out(40);
  EXPECT_TRUE(launchedBesideHp(*Hp, Seq, M.K, Out)) << "the launch waited for HP";
  Hp->hpFinished(Seq);
  beAlive(*Hp, 20);
  settlePtb();
  expectEachBlockOnce(Out);
  if (Original) {
    EXPECT_EQ(fake_log_count("launch be_waves ", "grid=40x1x1"), 1u);
    EXPECT_EQ(fake_log_count("launch be_waves__tally_", ""), 0u) << "a variant ran";
  } else {
    EXPECT_GE(fake_log_count("launch be_waves__tally_ptb ", "grid=4x1x1"), 1u)
        << "the PTB launch did not start narrow beside HP";
    EXPECT_EQ(fake_log_count("launch be_waves ", "grid=40x1x1"), 0u) << "the original ran";
  }
}

TEST(ScheduleBe, PtbLaunchesRunNarrowBesideHp) {
  const char *Expect = std::getenv("TEST_EXPECT_NARROW");
  ASSERT_NE(Expect, nullptr) << "set TEST_EXPECT_NARROW to 0 or 1";
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_narrow");
  ASSERT_NO_FATAL_FAILURE(firstLaunch(M.K)); // joins
  Hp->hpFinished(Hp->hpLaunch(tally::rt::monotonicNs())); // Guarded from now on
  for (int I = 0; I < 16; ++I) { // 7 candidates measured twice, then the choice
    std::vector<int> Out(40);
    ASSERT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
    bool Rejoined = false;
    Hp->heartbeat(tally::rt::monotonicNs(), Rejoined);
  }
  auto Launches = [](const char *Grid) {
    return fake_log_count("launch be_narrow__tally_ptb ", Grid);
  };
  auto Raised = [] { return fake_log_count("writevalue", " value=1"); };
  // Preemption flags go on a stream of the greatest priority.
  EXPECT_EQ(fake_log_count("streamcreate", "priority=-5"), 1u);
  size_t Narrow = Launches("grid=4x1x1"); // the half-wave candidate's measurements
  const bool HpNoMps = env("TEST_HP_NO_MPS") == "1";
  if (HpNoMps)
    Hp->setFlags(tally::rt::seg::FlagNoMps); // HP says it is no MPS client
  if (std::strcmp(Expect, "1")) {
    uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs());
    expectHeldUntilHpIdle(*Hp, Seq, M.K, "a PTB launch went while HP worked");
    EXPECT_EQ(Launches("grid=4x1x1"), Narrow);
    if (!HpNoMps)
      return;
    // A launch started wide while HP was quiet and every HP process an MPS
    // client; then one that is not arrives: the launch is stopped, not
    // narrowed, and resumed wide once HP is idle.
    Hp->setFlags(0);
    beAlive(*Hp, 250); // past the widen window
    fake_hold_ptb(1);
    size_t Wide = Launches("grid=8x1x1");
    std::vector<int> Out(40);
    ASSERT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
    EXPECT_EQ(Launches("grid=8x1x1"), Wide + 1) << "not wide while HP was quiet";
    Hp->setFlags(tally::rt::seg::FlagNoMps);
    size_t Flags = Raised();
    Seq = Hp->hpLaunch(tally::rt::monotonicNs());
    EXPECT_TRUE(aliveUntil(*Hp, [&] { return Raised() > Flags; })) << "not stopped for HP";
    beAlive(*Hp, 100);
    EXPECT_EQ(Launches("grid=4x1x1"), Narrow)
        << "narrowed beside an HP process that is no MPS client";
    EXPECT_EQ(Launches("grid=8x1x1"), Wide + 1) << "resumed while HP worked";
    Hp->hpFinished(Seq);
    EXPECT_TRUE(aliveUntil(*Hp, [&] { return Launches("grid=8x1x1") > Wide + 1; }))
        << "not resumed wide once HP was idle";
    fake_hold_ptb(0);
    fake_sync();
    expectEachBlockOnce(Out);
    return;
  }
  fake_hold_ptb(1); // PTB launches run until stopped
  // HP works: the launch starts at once, narrow, and stays.
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  size_t Wide = Launches("grid=8x1x1");
  std::vector<int> Out(40);
  const size_t HostWaits = fake_log_count("waitvalue ", " host");
  const size_t Releases = fake_log_count("armwrite", "");
  EXPECT_TRUE(launchedBesideHp(*Hp, Seq, M.K, Out)) << "a PTB launch waited for HP under MPS";
  EXPECT_EQ(Launches("grid=4x1x1"), Narrow + 1) << "not started on half the wave";
  size_t Flags = Raised();
  Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  beAlive(*Hp, 100);
  EXPECT_EQ(Raised(), Flags) << "a narrow launch was stopped while HP worked";
  EXPECT_EQ(fake_log_count("waitvalue ", " host"), HostWaits)
      << "a narrow launch's flag was armed (a wait pending beside HP)";
  // HP done: after the widen window, every worker back.
  Hp->hpFinished(Seq);
  beAlive(*Hp, 10);
  EXPECT_EQ(Launches("grid=8x1x1"), Wide) << "widened before HP was quiet for the window";
  EXPECT_TRUE(aliveUntil(*Hp, [&] { return Launches("grid=8x1x1") > Wide; }))
      << "not widened once HP was quiet";
  EXPECT_TRUE(aliveUntil(*Hp, [&] { return fake_log_count("waitvalue ", " host") > HostWaits; }))
      << "the widened launch's flag was not armed";
  fake_hold_ptb(0);
  fake_sync();
  expectEachBlockOnce(Out);
  EXPECT_EQ(fake_log_count("armwrite", "") - Releases, 1u)
      << "the armed flag's release: one for the widened relaunch, none for the narrow launch";
  // HP quiet: wide from the start; stopped for HP and resumed narrow at once.
  beAlive(*Hp, 250); // past the widen window
  fake_hold_ptb(1);
  Wide = Launches("grid=8x1x1");
  Narrow = Launches("grid=4x1x1");
  std::vector<int> Out2(40);
  ASSERT_EQ(launchDirect(M.K, Out2, 40), CUDA_SUCCESS);
  EXPECT_EQ(Launches("grid=8x1x1"), Wide + 1) << "not wide while HP was quiet";
  Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  EXPECT_TRUE(aliveUntil(*Hp, [&] { return Launches("grid=4x1x1") > Narrow; }))
      << "not narrowed when HP arrived";
  Hp->hpFinished(Seq);
  EXPECT_TRUE(aliveUntil(*Hp, [&] { return Launches("grid=8x1x1") > Wide + 1; }))
      << "not widened again";
  fake_hold_ptb(0);
  fake_sync();
  expectEachBlockOnce(Out2);
  // A PTB launch that fails to launch falls back to the original, which
  // cannot be stopped: it waits for HP like one.
  fake_fail_variant_launches(1);
  Seq = Hp->hpLaunch(tally::rt::monotonicNs());
  expectHeldUntilHpIdle(*Hp, Seq, M.K, "an original fallen back from PTB went beside HP");
  fake_fail_variant_launches(0);
}

// Under MPS with a queue budget (its ctest entries: FAKE_MPS=1,
// FAKE_ELAPSED_US=100 so that PTB on a full wave of 8 workers (4 SMs of 2)
// is chosen, TALLY_QUEUE_US=1000, TALLY_WIDEN_US=400000,
// TALLY_BESIDE_PTB_PERCENT=50), HP quiet past the widen window: a PTB
// launch made with nothing of this process queued starts wide; one made
// while that one still runs (queued behind it) starts narrow, on 4 workers
// (it may start on the GPU once HP is back, before the runtime thread
// watches it, and wide its workers would hold every SM). The queued launch
// is widened only once it has itself run for the widen window, not as soon
// as the runtime thread reaches it. Every logical block runs once.
TEST(ScheduleBe, QueuedPtbLaunchesStartNarrow) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_queued");
  ASSERT_NO_FATAL_FAILURE(joinAndChoose(*Hp, M.K));
  auto Launches = [](const char *Grid) {
    return fake_log_count("launch be_queued__tally_ptb ", Grid);
  };
  beAlive(*Hp, 450); // past the widen window
  fake_hold_ptb(4);  // narrow launches run until their flag goes up
  const size_t Wide = Launches("grid=8x1x1"), Narrow = Launches("grid=4x1x1");
  std::vector<int> Out1(40), Out2(40);
  fake_hold_events(1); // the first launch does not end yet
  ASSERT_EQ(launchDirect(M.K, Out1, 40), CUDA_SUCCESS);
  EXPECT_EQ(Launches("grid=8x1x1"), Wide + 1) << "not wide with nothing queued and HP quiet";
  // In a thread: a launch that is not queued waits for the first to end.
  std::atomic<bool> Returned{false};
  std::thread T([&] {
    EXPECT_EQ(launchDirect(M.K, Out2, 40), CUDA_SUCCESS);
    Returned = true;
  });
  EXPECT_TRUE(aliveUntil(*Hp, [&] { return Returned.load(); }))
      << "the second launch was not queued behind the first";
  EXPECT_EQ(Launches("grid=4x1x1"), Narrow + 1)
      << "a launch queued behind a running one did not start narrow";
  EXPECT_EQ(Launches("grid=8x1x1"), Wide + 1) << "a launch queued behind a running one started wide";
  // The first ends; the runtime thread reaches the second (narrow, held
  // running): not widened at once, but after the widen window of its own.
  fake_hold_events(0);
  beAlive(*Hp, 100);
  EXPECT_EQ(Launches("grid=8x1x1"), Wide + 1)
      << "the queued launch was widened before it ran the widen window";
  EXPECT_TRUE(aliveUntil(*Hp, [&] { return Launches("grid=8x1x1") > Wide + 1; }))
      << "the queued launch was not widened after the widen window";
  fake_hold_ptb(0);
  T.join();
  settlePtb();
  expectEachBlockOnce(Out1);
  expectEachBlockOnce(Out2);
}

// Under MPS (its ctest entries: FAKE_MPS=1, FAKE_ELAPSED_US=100 so that
// PTB on a full wave of 8 workers is chosen, 100 us, and
// TEST_EXPECT_UNWATCHED): a PTB launch made while HP works starts narrow (4
// workers) and, expected to end within TALLY_NARROW_UNWATCHED_US on them
// (200 us against the default 1000), goes without the gate's wait on its
// stream and is not watched (TEST_EXPECT_UNWATCHED=1); with
// TALLY_NARROW_UNWATCHED_US=100 the gate is queued (0). Every block once.
TEST(ScheduleBe, ShortNarrowLaunchesGoUnwatched) {
  const std::string Expect = env("TEST_EXPECT_UNWATCHED");
  ASSERT_TRUE(Expect == "0" || Expect == "1") << "set TEST_EXPECT_UNWATCHED to 0 or 1";
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_unwatched");
  ASSERT_NO_FATAL_FAILURE(joinAndChoose(*Hp, M.K));
  fake_log_clear();
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs()); // HP busy
  std::vector<int> Out(40);
  EXPECT_TRUE(launchedBesideHp(*Hp, Seq, M.K, Out)) << "the launch waited for HP";
  EXPECT_EQ(fake_log_count("launch be_unwatched__tally_ptb ", "grid=4x1x1"), 1u)
      << "not started narrow beside HP";
  const size_t Gates = fake_log_count("waitvalue ", "");
  if (Expect == "1")
    EXPECT_EQ(Gates, 0u) << "a short narrow launch got the gate's wait";
  else
    EXPECT_GE(Gates, 1u) << "a narrow launch longer than the limit went without its gate";
  Hp->hpFinished(Seq);
  beAlive(*Hp, 20);
  settlePtb();
  expectEachBlockOnce(Out);
}

// Launches of a shape still being measured while an HP request runs, under
// MPS (its ctest entries: FAKE_MPS=1, TALLY_IDLE_US=200000 and
// TALLY_WIDEN_US=1000, so that the idle window is long enough to launch in
// and a widening would come within it, and TEST_EXPECT_PROVISIONAL). With
// TALLY_PROVISIONAL=1: such a launch starts at once as the PTB variant on
// half a wave (4 of 8 workers), unmeasured; it is neither stopped for HP nor
// widened when HP goes quiet. A measurement held for HP's idle window
// starts so too when HP runs a request again. While HP stays idle the
// shape is measured (the original first). With TALLY_PROVISIONAL=0 such a
// launch waits for HP to be idle.
TEST(ScheduleBe, ShapesBeingMeasuredRunNarrowBesideHp) {
  const char *Expect = std::getenv("TEST_EXPECT_PROVISIONAL");
  ASSERT_NE(Expect, nullptr) << "set TEST_EXPECT_PROVISIONAL to 0 or 1";
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module M("be_prov");
  ASSERT_NO_FATAL_FAILURE(firstLaunch(M.K)); // joins
  auto Launches = [](const char *Grid) {
    return fake_log_count("launch be_prov__tally_ptb ", Grid);
  };
  auto Raised = [] { return fake_log_count("writevalue", " value=1"); };
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs()); // an HP request runs
  if (std::strcmp(Expect, "1")) {
    expectHeldUntilHpIdle(*Hp, Seq, M.K, "a launch of a shape being measured went beside HP");
    EXPECT_EQ(Launches(""), 0u);
    return;
  }
  fake_log_clear();
  fake_hold_ptb(1); // PTB launches run until stopped
  std::vector<int> Out(40);
  EXPECT_TRUE(launchedBesideHp(*Hp, Seq, M.K, Out)) << "held for a measurement while HP ran";
  EXPECT_EQ(Launches("grid=4x1x1"), 1u) << "not started on half the wave";
  EXPECT_EQ(fake_log_count("launch be_prov ", ""), 0u) << "the original ran";
  size_t Flags = Raised();
  uint64_t Seq2 = Hp->hpLaunch(tally::rt::monotonicNs());
  beAlive(*Hp, 50);
  EXPECT_EQ(Raised(), Flags) << "a provisional launch was stopped while HP worked";
  Hp->hpFinished(Seq);
  Hp->hpFinished(Seq2);
  beAlive(*Hp, 300); // past the idle window, and so past the widen window
  EXPECT_EQ(Raised(), Flags) << "a provisional launch was stopped (widened?) when HP went quiet";
  EXPECT_EQ(Launches("grid=8x1x1"), 0u) << "a provisional launch was widened";
  fake_hold_ptb(0);
  fake_sync();
  expectEachBlockOnce(Out);
  // HP idle: the shape is measured, the original first (twice: the second
  // launch reads the first's time, kept).
  fake_log_clear();
  launchesOf40(M.K, 2);
  EXPECT_EQ(fake_log_count("launch be_prov ", "grid=40x1x1"), 2u) << "not measured with HP idle";
  EXPECT_EQ(Launches(""), 0u);
  // A measurement held for the idle window after an HP request; HP comes
  // again: it starts narrow beside HP at once.
  Hp->hpFinished(Hp->hpLaunch(tally::rt::monotonicNs()));
  fake_log_clear();
  std::vector<int> Out2(40);
  std::atomic<bool> Returned{false};
  std::thread T([&] {
    EXPECT_EQ(launchDirect(M.K, Out2, 40), CUDA_SUCCESS);
    Returned = true;
  });
  beAlive(*Hp, 50);
  EXPECT_FALSE(Returned.load()) << "a measurement did not wait for the idle window";
  uint64_t Seq3 = Hp->hpLaunch(tally::rt::monotonicNs());
  EXPECT_TRUE(aliveUntil(*Hp, [&] { return Returned.load(); }))
      << "a held measurement kept waiting once HP ran a request";
  T.join();
  EXPECT_EQ(Launches("grid=4x1x1"), 1u) << "not started narrow beside HP";
  EXPECT_EQ(fake_log_count("launch be_prov ", ""), 0u) << "the original ran";
  Hp->hpFinished(Seq3);
  fake_sync();
  expectEachBlockOnce(Out2);
  // With HP idle again, two more launches: the first measures the original
  // (its second time: the one before HP came was discarded), the second
  // reads it. The ctest entry checks "2 measurements kept": a provisional
  // launch's time taken for the original's would make it 3.
  beAlive(*Hp, 300);
  fake_log_clear();
  launchesOf40(M.K, 2);
  EXPECT_EQ(fake_log_count("launch be_prov ", "grid=40x1x1"), 1u)
      << "the original not measured a second time";
  // A measurement held for the idle window while an HP process says it is
  // no MPS client (from after the launch began): HP's next request does not
  // send it beside HP; it waits for HP to be idle (and discards the
  // measurement the last launch began: an arrival came).
  Hp->hpFinished(Hp->hpLaunch(tally::rt::monotonicNs()));
  fake_log_clear();
  std::vector<int> Out3(40);
  Returned = false;
  std::thread T2([&] {
    EXPECT_EQ(launchDirect(M.K, Out3, 40), CUDA_SUCCESS);
    Returned = true;
  });
  beAlive(*Hp, 50);
  Hp->setFlags(tally::rt::seg::FlagNoMps);
  beAlive(*Hp, 20);
  uint64_t Seq4 = Hp->hpLaunch(tally::rt::monotonicNs());
  beAlive(*Hp, 100);
  EXPECT_FALSE(Returned.load()) << "went beside an HP process that is no MPS client";
  Hp->hpFinished(Seq4);
  beAlive(*Hp, 2000, &Returned);
  T2.join();
  Hp->setFlags(0);
  EXPECT_EQ(Launches("grid=4x1x1"), 0u) << "narrow beside an HP process that is no MPS client";
  fake_sync();
  expectEachBlockOnce(Out3);
}

// The check of a short kernel counts only when HP stayed away while it ran:
// beside HP its time includes waiting for room on the SMs. Here the timed
// launch (the choice, made while HP was idle) reads 500 us, but HP came by
// before it was read: no revocation, the next launch goes beside HP (its
// ctest entry: FAKE_MPS=1, FAKE_ELAPSED_US=10 for the measurements).
TEST(ScheduleBe, ABesideCheckWhileHpCameByIsDiscarded) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module Plain("be_beside_check", false, "", /*WithVariants=*/false);
  measureWhileHpIdle(*Hp, Plain.K); // 10 us each: short, and the choice is timed
  setenv("FAKE_ELAPSED_US", "500", 1);
  uint64_t Seq = Hp->hpLaunch(tally::rt::monotonicNs()); // HP comes by, stays busy
  std::vector<int> Out(40);
  EXPECT_TRUE(launchedBesideHp(*Hp, Seq, Plain.K, Out))
      << "a check taken while HP came by revoked the kernel";
  Hp->hpFinished(Seq);
  fake_sync();
  expectEachBlockOnce(Out);
}

// A short launch timed again is never waited for: with the queue budget
// (an MPS client of below-normal priority; its ctest entry), later short
// launches queue behind it while it runs, and its time is read by a launch
// made once it has ended. Here no event ends until the test lets them:
// every launch still returns (before 2026-11-28 the launch after a check
// waited for it to end, and the GPU ran dry behind every 16th short
// launch). Both checks made meanwhile (short launches 1 and 17, under 10
// us each) are then read (the entry's pass expression).
TEST(ScheduleBe, ABesideCheckIsNeverWaitedFor) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module Plain("be_beside_nowait", false, "", /*WithVariants=*/false);
  measureWhileHpIdle(*Hp, Plain.K); // short; the decision's launch is timed
  fake_hold_events(1);
  std::vector<std::vector<int>> Outs(20, std::vector<int>(40));
  std::atomic<int> Returned{0};
  std::thread T([&] {
    for (auto &Out : Outs) {
      EXPECT_EQ(launchDirect(Plain.K, Out, 40), CUDA_SUCCESS);
      Returned.fetch_add(1);
    }
  });
  auto T0 = std::chrono::steady_clock::now();
  while (Returned.load() < int(Outs.size()) &&
         std::chrono::steady_clock::now() - T0 < std::chrono::seconds(3))
    beAlive(*Hp, 10);
  const int InTime = Returned.load();
  fake_hold_events(0);
  T.join();
  EXPECT_EQ(InTime, int(Outs.size())) << "a launch waited for the check of an earlier one";
  fake_sync();
  for (auto &Out : Outs)
    expectEachBlockOnce(Out);
  launchesOf40(Plain.K, 1); // reads both checks
}

// The same kernel launched on the per-thread default stream (one handle
// for every thread: a check there goes only while nothing else is timed)
// is timed again too: short launches 1 and 17, each read by the next
// launch (the entry's pass expression: 2 of them).
CUresult launchPerThread(CUfunction K, std::vector<int> &Out, unsigned Blocks, CUstream) {
  return launchDirect(K, Out, Blocks, CU_STREAM_PER_THREAD);
}
TEST(ScheduleBe, ABesideKernelOnThePerThreadStreamIsCheckedToo) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Module Plain("be_beside_ptsz", false, "", /*WithVariants=*/false);
  measureWhileHpIdle(*Hp, Plain.K, launchPerThread);
  for (int I = 0; I < 17; ++I) {
    std::vector<int> Out(40);
    ASSERT_EQ(launchPerThread(Plain.K, Out, 40, nullptr), CUDA_SUCCESS);
    fake_sync();
    expectEachBlockOnce(Out);
  }
}

// An HP process killed in the middle of a request: its slot goes stale and
// the BE process is not held by it.
TEST(ScheduleBe, ADeadHpProcessDoesNotHoldIt) {
  auto Hp = otherProcess(tally::rt::SegPriority::High);
  ASSERT_TRUE(Hp);
  Hp->hpLaunch(tally::rt::monotonicNs()); // never finished, no more heartbeats
  Module M("be_dead_hp");
  std::vector<int> Out(40);
  auto T0 = std::chrono::steady_clock::now();
  ASSERT_EQ(launchDirect(M.K, Out, 40), CUDA_SUCCESS);
  double Ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - T0)
                  .count();
  EXPECT_LT(Ms, 1000.0);
  fake_sync();
  expectEachBlockOnce(Out);
}

/// In this (HP) process: three launches of a fresh kernel \p Name, the
/// fake's log cleared first; every block runs once.
void launchThreeAsHp(const std::string &Name) {
  Module M(Name);
  fake_log_clear();
  for (int I = 0; I < 3; ++I) {
    std::vector<int> Out(16);
    ASSERT_EQ(launchDirect(M.K, Out, 16), CUDA_SUCCESS);
    expectEachBlockOnce(Out);
  }
}

// A high-priority process: launches go unchanged and at once; each is
// counted in the segment before it and its completion is written by the
// "GPU" into the segment after it.
TEST(ScheduleHp, LaunchesAreAnnounced) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  launchThreeAsHp("hp_announce");
  EXPECT_TRUE(hasLine("hostregister"));
  // By default from an internal stream behind an event; with
  // TALLY_HP_COMPLETION=gpu from the launch's own stream.
  const char *How = std::getenv("TALLY_HP_COMPLETION");
  std::string Stream = How && std::string(How) == "gpu" ? "legacy" : "s[0-9]+";
  EXPECT_TRUE(hasLineRe("writevalue64 stream=" + Stream + " value=1$"));
  EXPECT_TRUE(hasLineRe("writevalue64 stream=" + Stream + " value=3$"));
  EXPECT_FALSE(hasLine("__tally")) << "an HP launch ran a variant";
  // Its internal streams are of the least priority: work of a greater
  // priority than the service's makes the GPU preempt the service.
  EXPECT_TRUE(hasLineRe("^streamcreate s[0-9]+ flags=1 priority=0$"));
  EXPECT_FALSE(hasLineRe("^streamcreate .* priority=-5$"))
      << "an HP process made a stream of the greatest priority";
  tally::rt::HpView V = Other->hpView(tally::rt::monotonicNs());
  EXPECT_EQ(V.HpProcesses, 1u);
  EXPECT_EQ(V.Arrivals, 3u);
  EXPECT_FALSE(V.Active);
  // The driver said this context is no MPS client (FAKE_MPS=0; with
  // FAKE_MPS=1 it is one, unset it cannot tell): the slot says so to the
  // BE processes.
  EXPECT_EQ(V.HpWithoutMps, env("FAKE_MPS") == "0" ? 1u : 0u);
}

// A launch call that stalls in the driver is counted as a slow HP call,
// in the driver's part (its ctest entry checks the statistics' line).
TEST(ScheduleHpSlow, ASlowDriverLaunchIsCounted) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  fake_launch_delay_us(3000);
  launchThreeAsHp("hp_slow");
  fake_launch_delay_us(0);
  EXPECT_EQ(Other->hpView(tally::rt::monotonicNs()).Arrivals, 3u);
}

// TALLY_HP_COMPLETION=none (its ctest entry), a diagnostic: launches are
// announced and count as ended at once; nothing is written or recorded.
TEST(ScheduleHpNone, NoneReportsNothing) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  launchThreeAsHp("hp_none");
  EXPECT_FALSE(hasLine("writevalue64"));
  EXPECT_FALSE(hasLine("hostfunc"));
  tally::rt::HpView V = Other->hpView(tally::rt::monotonicNs());
  EXPECT_EQ(V.Arrivals, 3u);
  EXPECT_FALSE(V.Active) << "launches were not counted as ended";
}

// TALLY_HP_COMPLETION=burst (its ctest entry; bursts of 300 ms so that a
// slow machine still makes its launches inside one): a launch soon after
// the last completion write gets none; the runtime thread writes the last
// launch's number once the burst is over; the writes only grow.
namespace {
std::vector<uint64_t> completionWrites() {
  std::regex Write("^writevalue64 stream=s[0-9]+ value=([0-9]+)$");
  std::vector<uint64_t> Values;
  for (const std::string &L : logLines()) {
    std::smatch Mt;
    if (std::regex_match(L, Mt, Write))
      Values.push_back(std::stoull(Mt[1].str()));
  }
  return Values;
}
// 120 requests of one launch each on \p S, 300 us apart: host-bound (2 ms
// of the host's work before the wait) or, with \p SyncUs, waiting that long
// in cuStreamSynchronize.
void requests(CUfunction K, CUstream S, unsigned SyncUs) {
  std::vector<int> Out(4);
  fake_sync_delay_us(SyncUs);
  for (int I = 0; I < 120; ++I) {
    ASSERT_EQ(launchDirect(K, Out, 4, S), CUDA_SUCCESS);
    if (!SyncUs)
      usleep(2000); // the host's work of the request
    ASSERT_EQ(cuStreamSynchronize(S), CUDA_SUCCESS);
    usleep(300); // between requests: not part of one
  }
  fake_sync_delay_us(0);
}
bool waitIdle(tally::rt::Segment &Other) {
  for (int I = 0; I < 300; ++I) {
    if (!Other.hpView(tally::rt::monotonicNs()).Active)
      return true;
    beAlive(Other, 10);
  }
  return false;
}
} // namespace

TEST(ScheduleHpBurst, OneWritePerBurstAndTheLastByTheRuntime) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_burst");
  fake_log_clear();
  CUstream S = reinterpret_cast<CUstream>(uintptr_t(0x310));
  std::vector<int> Out(4);
  for (int I = 0; I < 10; ++I)
    ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS);
  // The burst's first launch is written, the others wait for the burst to
  // end (300 ms).
  EXPECT_EQ(completionWrites(), std::vector<uint64_t>{1});
  EXPECT_TRUE(Other->hpView(tally::rt::monotonicNs()).Active);
  ASSERT_TRUE(waitIdle(*Other)) << "the burst's last completion was never written";
  EXPECT_EQ(completionWrites(), (std::vector<uint64_t>{1, 10}));
  // A launch on another stream ends the pending burst first: every launch
  // of the burst recorded its event on its own stream, and the write
  // waits for it on the internal stream.
  CUstream S2 = reinterpret_cast<CUstream>(uintptr_t(0x311));
  fake_log_clear();
  for (int I = 0; I < 3; ++I)
    ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS); // 11 written, 12-13 pending
  ASSERT_EQ(launchDirect(M.K, Out, 4, S2), CUDA_SUCCESS);  // 13 written on S; 14 pending
  EXPECT_EQ(completionWrites(), (std::vector<uint64_t>{11, 13}));
  std::vector<std::string> L = logLines();
  auto OnS2 = std::find_if(L.begin(), L.end(), [](const std::string &X) {
    return X.rfind("launch hp_burst grid=4x1x1 block=32 stream=s785", 0) == 0;
  });
  ASSERT_NE(OnS2, L.end());
  EXPECT_EQ(std::count(L.begin(), OnS2, "record stream=s784"), 3)
      << "launches 11-13 did not each record on their stream";
  EXPECT_EQ(std::count(OnS2, L.end(), "record stream=s784"), 0)
      << "the runtime recorded on the first stream after its burst";
  ASSERT_TRUE(waitIdle(*Other));
  EXPECT_EQ(completionWrites(), (std::vector<uint64_t>{11, 13, 14}));
}

// The program waits for its work (cuStreamSynchronize, one of
// WaitCalls.def): the burst's pending completion is written then, on the
// program's thread, not half a burst (150 ms here) later by the runtime's.
TEST(ScheduleHpBurst, AWaitWritesThePendingCompletion) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_burst_wait");
  ASSERT_TRUE(waitIdle(*Other)); // an earlier test's burst is over
  fake_log_clear();
  CUstream S = reinterpret_cast<CUstream>(uintptr_t(0x312));
  std::vector<int> Out(4);
  for (int I = 0; I < 3; ++I)
    ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS);
  std::vector<uint64_t> W = completionWrites();
  ASSERT_EQ(W.size(), 1u) << "the burst's first launch is written, the others wait";
  ASSERT_EQ(cuStreamSynchronize(S), CUDA_SUCCESS);
  EXPECT_EQ(completionWrites(), (std::vector<uint64_t>{W[0], W[0] + 2}))
      << "the wait did not write the pending completion";
  ASSERT_EQ(cuStreamSynchronize(S), CUDA_SUCCESS);
  EXPECT_EQ(completionWrites().size(), 2u) << "a wait with nothing pending wrote";
  EXPECT_TRUE(waitIdle(*Other));
}

// An HP process publishes the share of its requests' time (from its first
// launch after a wait to the end of the next wait) spent waiting for the
// GPU: near 0 for requests of host work and a quick wait, high for
// requests that wait milliseconds in cuStreamSynchronize, or poll with
// queries that find the work not ready; smoothed, it follows the change
// within a few hundred milliseconds.
TEST(ScheduleHpBurst, TheWaitShareIsPublished) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_wait_share");
  CUstream S = reinterpret_cast<CUstream>(uintptr_t(0x318));
  std::vector<int> Out(4);
  auto Share = [&](bool Known = true) {
    beAlive(*Other, 30); // two heartbeats of this process's runtime
    tally::rt::HpView V = Other->hpView(tally::rt::monotonicNs());
    EXPECT_EQ(V.WaitShareKnown, Known);
    return V.WaitShareKnown ? int(V.WaitPermille) : -1;
  };
  auto HostBound = [&] { requests(M.K, S, 0); };
  HostBound();
  int Low = Share();
  EXPECT_GE(Low, 0);
  EXPECT_LT(Low, 100) << "host-bound requests";
  requests(M.K, S, 3000);
  // (The smoothing still remembers some of the phase before: the bounds
  // leave room for that, not for a share that did not move.)
  const int High = Share();
  EXPECT_GT(High, 500) << "requests waiting in cuStreamSynchronize";
  HostBound();
  const int Again = Share();
  EXPECT_LT(Again, 300) << "host-bound again";
  EXPECT_LT(Again, High - 300) << "the share did not come down";
  for (int I = 0; I < 120; ++I) {
    ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS);
    fake_queries_not_ready(3);
    while (cuStreamQuery(S) == CUDA_ERROR_NOT_READY)
      usleep(1000);
    usleep(300);
  }
  EXPECT_GT(Share(), 500) << "requests polling for their work";
  // Launches whose waits the runtime does not see (a blocking copy, a spin
  // on host memory; here none, and queries that find the work done at
  // once, which end no request): after 200 ms without a request's end the
  // share is not known, and a request that long, once it ends, is not one.
  for (int I = 0; I < 100; ++I) {
    ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamQuery(S), CUDA_SUCCESS);
    usleep(3000);
  }
  EXPECT_EQ(Share(false), -1) << "launches without a seen wait";
  ASSERT_EQ(cuStreamSynchronize(S), CUDA_SUCCESS); // ends a request of 300 ms
  EXPECT_EQ(Share(false), -1) << "a request too long to have been seen whole";
  HostBound();
  EXPECT_LT(Share(), 100) << "requests seen again";
  EXPECT_TRUE(waitIdle(*Other));
}

// A query (cuStreamQuery, cuEventQuery) right after launches, as an
// allocator asking about its events between launches, writes nothing: the
// burst goes on (a write there would be a write per launch). A wait then
// writes.
TEST(ScheduleHpBurst, AQueryBetweenLaunchesWritesNothing) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_burst_query");
  ASSERT_TRUE(waitIdle(*Other));
  fake_log_clear();
  CUstream S = reinterpret_cast<CUstream>(uintptr_t(0x313));
  std::vector<int> Out(4);
  for (int I = 0; I < 3; ++I)
    ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS);
  uint64_t Last = Other->hpView(tally::rt::monotonicNs()).Arrivals;
  std::vector<uint64_t> W = completionWrites();
  ASSERT_LE(W.size(), 1u) << "more than the burst's first launch was written";
  ASSERT_TRUE(W.empty() || W.back() < Last) << "nothing was left pending";
  ASSERT_EQ(cuStreamQuery(S), CUDA_SUCCESS);
  CUevent E = nullptr;
  ASSERT_EQ(cuEventCreate(&E, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventQuery(E), CUDA_SUCCESS);
  EXPECT_EQ(completionWrites(), W) << "a query within half a burst of a launch wrote";
  ASSERT_EQ(cuStreamSynchronize(S), CUDA_SUCCESS);
  W.push_back(Last);
  EXPECT_EQ(completionWrites(), W) << "the wait did not write the pending completion";
  EXPECT_TRUE(waitIdle(*Other));
}

// A stream destroyed while launches on it await their completion write:
// the write is issued before the stream goes, and nothing is recorded on
// it afterwards (that would show as DEAD in the fake's log and fail the
// ctest).
TEST(ScheduleHpBurst, ADestroyedStreamIsWrittenFirst) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_burst_destroy");
  CUstream S = nullptr;
  ASSERT_EQ(cuStreamCreateWithPriority(&S, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  std::vector<int> Out(4);
  ASSERT_TRUE(waitIdle(*Other));
  beAlive(*Other, 400); // a new burst
  fake_log_clear();
  for (int I = 0; I < 3; ++I)
    ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS);
  uint64_t Last = Other->hpView(tally::rt::monotonicNs()).Arrivals;
  ASSERT_EQ(cuStreamDestroy_v2(S), CUDA_SUCCESS);
  std::vector<std::string> L = logLines();
  auto Destroy = std::find_if(L.begin(), L.end(), [](const std::string &X) {
    return X.rfind("streamdestroy", 0) == 0;
  });
  ASSERT_NE(Destroy, L.end());
  std::vector<uint64_t> Before;
  std::regex Write("^writevalue64 stream=s[0-9]+ value=([0-9]+)$");
  for (auto It = L.begin(); It != Destroy; ++It) {
    std::smatch Mt;
    if (std::regex_match(*It, Mt, Write))
      Before.push_back(std::stoull(Mt[1].str()));
  }
  EXPECT_EQ(Before, (std::vector<uint64_t>{Last - 2, Last}))
      << "the burst's first and, before the destroy, its last";
  ASSERT_TRUE(waitIdle(*Other));
  for (auto It = Destroy; It != L.end(); ++It)
    EXPECT_EQ(It->find("DEAD"), std::string::npos) << *It;
}

// A launch that fails inside a burst queues nothing: its number is covered
// by the pending write (a host store could be overtaken by that write and
// the word would go down below it, and BE would wait for HP for ever).
TEST(ScheduleHpBurst, AFailedLaunchIsCoveredByThePendingWrite) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_burst_fail");
  CUstream S = reinterpret_cast<CUstream>(uintptr_t(0x330));
  std::vector<int> Out(4);
  ASSERT_TRUE(waitIdle(*Other));
  beAlive(*Other, 400); // a new burst
  fake_log_clear();
  ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS); // written
  ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS); // pending
  static char NotAKernel[4096] = {}; // the fake refuses it: no kernel's magic
  CUfunction Bad = reinterpret_cast<CUfunction>(NotAKernel);
  EXPECT_NE(launchDirect(Bad, Out, 4, S), CUDA_SUCCESS);
  uint64_t Last = Other->hpView(tally::rt::monotonicNs()).Arrivals;
  ASSERT_TRUE(waitIdle(*Other)) << "the failed launch's number was never reached";
  beAlive(*Other, 400); // past the burst: a late write must not take it back
  EXPECT_FALSE(Other->hpView(tally::rt::monotonicNs()).Active) << "the word went down";
  std::vector<uint64_t> W = completionWrites();
  ASSERT_EQ(W.size(), 2u);
  EXPECT_EQ(W[0], Last - 2);
  EXPECT_EQ(W[1], Last) << "the pending write did not take the failed launch's number";
}

// Launches on the per-thread default stream are always written (the handle
// names another stream in each thread: an event re-recorded by a second
// thread would not cover the first thread's launches).
TEST(ScheduleHpBurst, PerThreadStreamLaunchesAreAlwaysWritten) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_burst_ptds");
  std::vector<int> Out(4);
  ASSERT_TRUE(waitIdle(*Other));
  fake_log_clear();
  for (int I = 0; I < 3; ++I)
    ASSERT_EQ(launchDirect(M.K, Out, 4, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  uint64_t Last = Other->hpView(tally::rt::monotonicNs()).Arrivals;
  EXPECT_EQ(completionWrites(), (std::vector<uint64_t>{Last - 2, Last - 1, Last}));
}

// The program starts capturing a stream whose launches await their write:
// the runtime thread records nothing on it (a record would join the
// capture); the write waits for the event the launches recorded before.
TEST(ScheduleHpBurst, ACapturedStreamGetsNoRecord) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_burst_capture");
  CUstream S = reinterpret_cast<CUstream>(uintptr_t(0x320));
  std::vector<int> Out(4);
  ASSERT_TRUE(waitIdle(*Other));
  beAlive(*Other, 400); // a new burst
  for (int I = 0; I < 3; ++I)
    ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS);
  uint64_t Last = Other->hpView(tally::rt::monotonicNs()).Arrivals;
  fake_log_clear();
  fake_set_capturing(S, 1);
  ASSERT_TRUE(waitIdle(*Other)) << "the burst's last completion was never written";
  fake_set_capturing(S, 0);
  EXPECT_FALSE(hasLine("record stream=s800")) << "recorded on a capturing stream";
  EXPECT_EQ(completionWrites(), std::vector<uint64_t>{Last});
}

// Several threads launching on their own streams: the completion words the
// "GPU" writes go up one by one, in launch order, and end at the last
// launch, so a BE process never sees HP idle while an earlier launch runs
// (a word written out of order), nor active after everything ended.
TEST(ScheduleHp, CompletionsInLaunchOrderAcrossThreadsAndStreams) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_threads");
  fake_log_clear();
  constexpr int Threads = 4, PerThread = 150;
  std::atomic<int> Failures{0};
  std::vector<std::thread> Ts;
  for (int T = 0; T < Threads; ++T)
    Ts.emplace_back([&, T] {
      CUstream S = reinterpret_cast<CUstream>(uintptr_t(0x300 + T)); // the fake's streams are names
      std::vector<int> Out(4);
      for (int I = 0; I < PerThread; ++I)
        if (launchDirect(M.K, Out, 4, S) != CUDA_SUCCESS)
          ++Failures;
    });
  for (std::thread &T : Ts)
    T.join();
  ASSERT_EQ(Failures.load(), 0);
  const char *How = std::getenv("TALLY_HP_COMPLETION");
  if (How && std::string(How) == "gpu")
    GTEST_SKIP() << "written from each launch's own stream: streams finish in any order";
  std::regex Write("^writevalue64 stream=s[0-9]+ value=([0-9]+)$");
  std::vector<uint64_t> Values;
  for (const std::string &L : logLines()) {
    std::smatch Mt;
    if (std::regex_match(L, Mt, Write))
      Values.push_back(std::stoull(Mt[1].str()));
  }
  ASSERT_EQ(Values.size(), size_t(Threads * PerThread));
  for (size_t I = 1; I < Values.size(); ++I)
    ASSERT_EQ(Values[I], Values[I - 1] + 1) << "completion " << I << " out of order";
  tally::rt::HpView V = Other->hpView(tally::rt::monotonicNs());
  EXPECT_FALSE(V.Active);
}

//===----------------------------------------------------------------------===//
// PTX loaded at run time (TALLY_OPT names this build's tally-opt; the PTX
// is a Triton kernel of test/outside-ptx, TALLY_TEST_PTX).
//===----------------------------------------------------------------------===//

extern "C" void fake_reject_variants(int On);

namespace {
std::string testPtx() {
  std::ifstream F(env("TALLY_TEST_PTX"));
  std::stringstream S;
  S << F.rdbuf();
  return S.str();
}

/// The last "load ..." line of the fake's log.
std::string lastLoad() {
  std::string Last;
  for (const std::string &L : logLines())
    if (L.rfind("load ", 0) == 0)
      Last = L;
  return Last;
}
} // namespace

TEST(RuntimePtx, EveryLoadEntryPointGetsTheModuleWithVariants) {
  std::string Ptx = testPtx();
  ASSERT_FALSE(Ptx.empty()) << "TALLY_TEST_PTX";
  CUmodule M = nullptr;
  ASSERT_EQ(cuModuleLoadData(&M, Ptx.c_str()), CUDA_SUCCESS);
  EXPECT_NE(M, nullptr);
  EXPECT_NE(lastLoad().find("load cuModuleLoadData"), std::string::npos);
  EXPECT_NE(lastLoad().find("variants=1"), std::string::npos) << lastLoad();
  EXPECT_EQ(lastLoad().find("bytes=" + std::to_string(Ptx.size()) + " "), std::string::npos)
      << "the text the driver got is the module with variants";

  ASSERT_EQ(cuModuleLoadDataEx(&M, Ptx.c_str(), 0, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_NE(lastLoad().find("load cuModuleLoadDataEx"), std::string::npos);
  EXPECT_NE(lastLoad().find("variants=1"), std::string::npos) << lastLoad();

  // Through cuGetProcAddress too, as the CUDA runtime and CuPy find it.
  void *Fn = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuLibraryLoadData", &Fn, 12000, 0), CUDA_SUCCESS);
  auto LibLoad = reinterpret_cast<CUresult (*)(CUlibrary *, const void *, CUjit_option *,
                                               void **, unsigned, CUlibraryOption *, void **,
                                               unsigned)>(Fn);
  CUlibrary L = nullptr;
  CUlibraryOption Keep = CU_LIBRARY_BINARY_IS_PRESERVED;
  void *KeepVal = nullptr;
  ASSERT_EQ(LibLoad(&L, Ptx.c_str(), nullptr, nullptr, 0, &Keep, &KeepVal, 1), CUDA_SUCCESS);
  EXPECT_NE(lastLoad().find("load cuLibraryLoadData"), std::string::npos);
  EXPECT_NE(lastLoad().find("variants=1"), std::string::npos) << lastLoad();
  EXPECT_EQ(cuLibraryUnload(L), CUDA_SUCCESS);

  // Binary images pass untouched.
  const char Elf[] = "\x7f" "ELF\x02\x01\x01\x00";
  ASSERT_EQ(cuModuleLoadData(&M, Elf), CUDA_SUCCESS);
  EXPECT_NE(lastLoad().find("ptx=0"), std::string::npos) << lastLoad();
}

TEST(RuntimePtx, OnlyTheFirstPtxInputOfALinkGetsVariants) {
  std::string Ptx = testPtx();
  ASSERT_FALSE(Ptx.empty());
  void *Fn = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuLinkAddData", &Fn, 12000, 0), CUDA_SUCCESS);
  auto Add = reinterpret_cast<CUresult (*)(CUlinkState, CUjitInputType, void *, size_t,
                                           const char *, unsigned, CUjit_option *, void **)>(Fn);
  auto *St = reinterpret_cast<CUlinkState>(0x1234);
  ASSERT_EQ(Add(St, CU_JIT_INPUT_PTX, Ptx.data(), Ptx.size() + 1, "a.ptx", 0, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_NE(lastLoad().find("variants=1"), std::string::npos) << lastLoad();
  ASSERT_EQ(Add(St, CU_JIT_INPUT_PTX, Ptx.data(), Ptx.size() + 1, "b.ptx", 0, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_NE(lastLoad().find("variants=0"), std::string::npos) << lastLoad();
  ASSERT_EQ(Add(St, CU_JIT_INPUT_CUBIN, Ptx.data(), Ptx.size(), "c.cubin", 0, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(lastLoad(), "load cuLinkAddData binary");
  // A new link (the same handle after cuLinkDestroy) gets variants again.
  ASSERT_EQ(cuGetProcAddress("cuLinkDestroy", &Fn, 12000, 0), CUDA_SUCCESS);
  ASSERT_EQ(reinterpret_cast<CUresult (*)(CUlinkState)>(Fn)(St), CUDA_SUCCESS);
  ASSERT_EQ(Add(St, CU_JIT_INPUT_PTX, Ptx.data(), Ptx.size() + 1, "a.ptx", 0, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_NE(lastLoad().find("variants=1"), std::string::npos) << lastLoad();
}

TEST(RuntimePtx, ARejectedModuleWithVariantsLoadsTheOriginal) {
  std::string Ptx = testPtx();
  ASSERT_FALSE(Ptx.empty());
  fake_reject_variants(1);
  fake_log_clear();
  CUmodule M = nullptr;
  EXPECT_EQ(cuModuleLoadData(&M, Ptx.c_str()), CUDA_SUCCESS);
  fake_reject_variants(0);
  std::vector<std::string> Loads;
  for (const std::string &L : logLines())
    if (L.rfind("load ", 0) == 0)
      Loads.push_back(L);
  ASSERT_EQ(Loads.size(), 2u);
  EXPECT_NE(Loads[0].find("variants=1"), std::string::npos);
  EXPECT_EQ(Loads[1], "load cuModuleLoadData bytes=" + std::to_string(Ptx.size()) +
                          " variants=0 ptx=1");
  // A launch, so the statistics are written at exit (they count the loads).
  Module K("ptx_then_launch");
  std::vector<int> Out(8, 0);
  ASSERT_EQ(launchDirect(K.K, Out, 8), CUDA_SUCCESS);
  fake_sync();
}

TEST(RuntimePtxOff, ModulesLoadAsTheyCame) {
  std::string Ptx = testPtx();
  ASSERT_FALSE(Ptx.empty());
  CUmodule M = nullptr;
  ASSERT_EQ(cuModuleLoadData(&M, Ptx.c_str()), CUDA_SUCCESS);
  EXPECT_EQ(lastLoad(), "load cuModuleLoadData bytes=" + std::to_string(Ptx.size()) +
                            " variants=0 ptx=1");
}

//===----------------------------------------------------------------------===//
// A child of fork() that ends with exit(): its ctest entries run it as HP
// and as BE with forced PTB and random preemption (each with --stats and a
// JSON file), so the runtime's threads run in the parent.
//===----------------------------------------------------------------------===//

// Runs Child in a forked child (its stderr into \p Err); the child's exit
// status, or -1 when it had not ended after 5 s (then it is killed).
int forkedExitStatus(void (*Child)(), const std::string &Err) {
  pid_t C = fork();
  if (C == 0) {
    // (No stdio or allocation before the child's own work: a lock one of
    // the parent's threads held at the fork is never released here.)
    int Fd = open(Err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (Fd < 0 || dup2(Fd, 2) < 0)
      _exit(3);
    Child();
    std::exit(0); // the atexit handlers run, the runtime's among them
  }
  if (C < 0)
    return -2;
  int Status = 0;
  for (int I = 0; I < 100; ++I) {
    if (waitpid(C, &Status, WNOHANG) == C)
      return WIFEXITED(Status) ? WEXITSTATUS(Status) : 128 + WTERMSIG(Status);
    usleep(50000);
  }
  kill(C, SIGKILL);
  waitpid(C, &Status, 0);
  return -1;
}

std::string readFile(const std::string &Path) {
  std::ifstream F(Path);
  std::stringstream S;
  S << F.rdbuf();
  return S.str();
}

std::string scratch(const char *Name) {
  return ::testing::TempDir() + "/tally-" + std::to_string(getpid()) + "-" + Name;
}

// The child inherits the runtime's state but none of its threads: its exit
// must not wait for them (a join of a thread that is not there waits for
// ever, a lock one of them held is never released), and it has nothing of
// its own to report: the runtime steps aside in it.
TEST(ForkedChild, ExitWithoutCudaDoesNotHang) {
  // An HP process's threads (heartbeat, completion flushes) run only while
  // it takes part in scheduling: its ctest entry gives it a segment.
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("fork_exit");
  std::vector<int> Out(16);
  ASSERT_EQ(launchDirect(M.K, Out, 16), CUDA_SUCCESS); // the exit handler is registered
  fake_sync();
  const std::string Err = scratch("fork-exit.err");
  for (int I = 0; I < 20; ++I) { // the parent's threads caught at any point
    ASSERT_EQ(forkedExitStatus([] {}, Err), 0) << "a forked child's exit() hung or failed, try " << I;
    EXPECT_EQ(readFile(Err).find("statistics"), std::string::npos)
        << "a forked child reported the parent's statistics: " << readFile(Err);
    usleep(2000);
  }
  std::remove(Err.c_str());
}

// A launch in the child passes straight through to the driver (the real
// one refuses a forked child; the fake runs it).
TEST(ForkedChild, ALaunchInTheChildPassesThrough) {
  Module M("fork_launch");
  std::vector<int> Out(16);
  ASSERT_EQ(launchDirect(M.K, Out, 16), CUDA_SUCCESS);
  fake_sync();
  static CUfunction K = M.K;
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  const uint64_t Before = Other->hpView(tally::rt::monotonicNs()).Arrivals;
  const std::string Err = scratch("fork-launch.err");
  // The fake driver's own lock may be held by one of the parent's threads
  // at the fork (the real driver refuses a forked child before any lock):
  // a child that hangs so is tried again; one that fails is not.
  int Status = -1;
  for (int Try = 0; Try < 3 && Status == -1; ++Try)
    Status = forkedExitStatus(
        [] {
          std::vector<int> O(16);
          fake_log_clear();
          if (launchDirect(K, O, 16) != CUDA_SUCCESS)
            std::exit(4);
          fake_sync();
          if (hasLine("__tally"))
            std::exit(5); // a variant ran: the runtime did not step aside
        },
        Err);
  EXPECT_EQ(Status, 0) << readFile(Err);
  // The child's launch was not announced in the parent's slot.
  EXPECT_EQ(Other->hpView(tally::rt::monotonicNs()).Arrivals, Before);
  std::remove(Err.c_str());
}

// A process that inherited `tally run --stats=FILE` but is not the one it
// started (TALLY_STATS_PID names another) writes FILE.PID.json. Its ctest
// entry sets TALLY_STATS; the child is this program again, run by exec
// with only StatsChild.Helper.
TEST(StatsChild, Helper) {
  if (env("TALLY_TEST_STATS_HELPER") != "1")
    GTEST_SKIP() << "run by StatsChild.AChildWritesItsOwnFile";
  Module M("stats_child");
  std::vector<int> Out(16);
  ASSERT_EQ(launchDirect(M.K, Out, 16), CUDA_SUCCESS);
  fake_sync();
}

TEST(StatsChild, AChildWritesItsOwnFile) {
  const std::string File = env("TALLY_STATS");
  if (File.find(".json") == std::string::npos)
    GTEST_SKIP() << "its ctest entry names a JSON file in TALLY_STATS";
  std::remove(File.c_str());
  const std::string Parent = std::to_string(getpid());
  pid_t C = fork();
  if (C == 0) {
    setenv("TALLY_STATS_PID", Parent.c_str(), 1);
    setenv("TALLY_TEST_STATS_HELPER", "1", 1);
    execl("/proc/self/exe", "RuntimeTests", "--gtest_filter=StatsChild.Helper",
          static_cast<char *>(nullptr));
    _exit(127);
  }
  ASSERT_GT(C, 0);
  int Status = 0;
  ASSERT_EQ(waitpid(C, &Status, 0), C);
  ASSERT_TRUE(WIFEXITED(Status) && WEXITSTATUS(Status) == 0) << Status;
  const std::string Own =
      File.substr(0, File.rfind('.')) + "." + std::to_string(C) + ".json";
  const std::string J = readFile(Own);
  EXPECT_NE(J.find("\"pid\": " + std::to_string(C) + ","), std::string::npos)
      << Own << ": " << J.substr(0, 200);
  EXPECT_NE(J.find("stats_child"), std::string::npos) << J.substr(0, 400);
  EXPECT_TRUE(readFile(File).empty()) << "the child wrote the parent's file";
  std::ifstream Left(Own + ".tmp." + std::to_string(C));
  EXPECT_FALSE(Left.good()) << "a temporary file was left";
  std::remove(Own.c_str());
}

// Bursts of the default length (100 us; its own ctest entry): a process
// whose requests are known to wait for the GPU less than --hp-wait-share
// of their time (launch-bound) writes completions at most about once a
// millisecond from its launch path; a GPU-bound one at every launch 100 us
// after the last write.
TEST(ScheduleHpBurstDefault, ALaunchBoundProcessWritesLessOften) {
  auto Other = otherProcess(tally::rt::SegPriority::BestEffort);
  ASSERT_TRUE(Other);
  Module M("hp_burst_bound");
  CUstream S = reinterpret_cast<CUstream>(uintptr_t(0x319));
  std::vector<int> Out(4);
  auto Requests = [&](unsigned SyncUs) {
    requests(M.K, S, SyncUs);
    beAlive(*Other, 30); // published
  };
  // Launches 250 us apart, no wait: the writes, and the time they took.
  auto Spaced = [&](int N, uint64_t &ElapsedMs) {
    ASSERT_TRUE(waitIdle(*Other));
    fake_log_clear();
    const uint64_t T0 = tally::rt::monotonicNs();
    for (int I = 0; I < N; ++I) {
      ASSERT_EQ(launchDirect(M.K, Out, 4, S), CUDA_SUCCESS);
      usleep(250);
    }
    ElapsedMs = (tally::rt::monotonicNs() - T0) / 1'000'000;
    ASSERT_EQ(cuStreamSynchronize(S), CUDA_SUCCESS);
  };
  Requests(0);
  tally::rt::HpView V = Other->hpView(tally::rt::monotonicNs());
  ASSERT_TRUE(V.WaitShareKnown);
  ASSERT_LT(V.WaitPermille, 250u) << "host-bound requests";
  uint64_t Ms = 0;
  Spaced(30, Ms);
  const size_t Bound = completionWrites().size();
  // The launch path writes once a millisecond, the runtime thread's flush
  // of a burst that went quiet for half of 100 us at most once more.
  EXPECT_LE(Bound, 2 * Ms + 3) << "over " << Ms << " ms";
  if (Ms < 12) { // (a slow machine spaces the launches wider)
    EXPECT_LT(Bound, 30u) << "a write per launch while launch-bound";
  }
  Requests(3000);
  V = Other->hpView(tally::rt::monotonicNs());
  ASSERT_TRUE(V.WaitShareKnown);
  ASSERT_GT(V.WaitPermille, 500u) << "requests waiting in cuStreamSynchronize";
  Spaced(30, Ms);
  EXPECT_GE(completionWrites().size(), 30u) << "GPU-bound: every launch 100 us after the last write";
  EXPECT_TRUE(waitIdle(*Other));
}
