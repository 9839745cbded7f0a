// driver-lock-probe.cu - which driver calls, while they wait for GPU work,
// keep another thread of the same process out of the driver? The runtime's
// preemptor queues stream operations (event records, stream writes,
// launches) while a program thread may sit in a call that waits for the
// preempted kernel's stream; if that call holds the driver's lock, the
// preemptor cannot queue the resumption and the program hangs.
//
// For each call C and each preemptor operation P: a kernel spins 150 ms on
// stream A; a program thread calls C (ordered after the kernel); 20 ms
// later a second thread times P on its own non-blocking stream. P blocked
// means C holds the lock while it waits. One line per (C, P):
//   CALL  OP  call-us  op-us  BLOCKED|free|free (the call did not wait)
// Built with nvcc -arch=sm_90a -O2 driver-lock-probe.cu -lcuda.
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

const char *SpinPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry spin(.param .u64 ns)
{
  .reg .u64 %n, %t0, %t1, %d;
  .reg .pred %p;
  ld.param.u64 %n, [ns];
  mov.u64 %t0, %globaltimer;
L:
  mov.u64 %t1, %globaltimer;
  sub.u64 %d, %t1, %t0;
  setp.lt.u64 %p, %d, %n;
  @%p bra L;
  ret;
}
.visible .entry nop()
{
  ret;
}
)";

#define CHECK(x)                                                               \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char *n_ = nullptr;                                                \
      cuGetErrorName(r_, &n_);                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,   \
                   n_ ? n_ : "?");                                             \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

using Clock = std::chrono::steady_clock;
double usSince(Clock::time_point T) {
  return std::chrono::duration<double, std::micro>(Clock::now() - T).count();
}

struct World {
  CUcontext Ctx;
  CUmodule Mod;
  CUfunction Spin, Nop;
  CUstream A, B;
  CUdeviceptr Dev, Word;
  void *Pinned;
  std::vector<char> Pageable;
  size_t Bytes = 1 << 20;
};

} // namespace

int main() {
  World W;
  CUdevice D;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&D, 0));
  CHECK(cuDevicePrimaryCtxRetain(&W.Ctx, D));
  CHECK(cuCtxSetCurrent(W.Ctx));
  CHECK(cuModuleLoadData(&W.Mod, SpinPtx));
  CHECK(cuModuleGetFunction(&W.Spin, W.Mod, "spin"));
  CHECK(cuModuleGetFunction(&W.Nop, W.Mod, "nop"));
  CHECK(cuStreamCreate(&W.A, CU_STREAM_DEFAULT));
  CHECK(cuStreamCreate(&W.B, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAlloc(&W.Dev, W.Bytes));
  CHECK(cuMemAlloc(&W.Word, 64));
  CHECK(cuMemAllocHost(&W.Pinned, W.Bytes));
  W.Pageable.assign(W.Bytes, 1);

  // The program thread's calls, each ordered after the spinning kernel
  // (on A, on the legacy stream, or on the whole context).
  struct Call {
    const char *Name;
    std::function<void()> Before; // outside the timed window (allocations)
    std::function<CUresult()> Run;
  };
  CUdeviceptr Spare = 0;
  void *SpareHost = nullptr;
  void *Registered = nullptr;
  CUmodule SpareMod = nullptr;
  CUevent After = nullptr, Doomed = nullptr, Pending = nullptr;
  CUstream Busy = nullptr;
  std::vector<char> Big;
  CUmemGenericAllocationHandle Vmm = 0;
  CUdeviceptr VmmPtr = 0;
  size_t VmmBytes = 0;
  CHECK(cuEventCreate(&Pending, CU_EVENT_DISABLE_TIMING));
  CHECK(cuEventCreate(&After, CU_EVENT_DISABLE_TIMING));
  std::vector<Call> Calls = {
      {"MemcpyDtoH-pageable-4B", {}, [&] { return cuMemcpyDtoH(W.Pageable.data(), W.Dev, 4); }},
      {"MemcpyDtoH-pageable-1M", {}, [&] { return cuMemcpyDtoH(W.Pageable.data(), W.Dev, W.Bytes); }},
      {"MemcpyDtoH-pinned", {}, [&] { return cuMemcpyDtoH(W.Pinned, W.Dev, 4); }},
      {"MemcpyDtoHAsync-pageable-A", {}, [&] { return cuMemcpyDtoHAsync(W.Pageable.data(), W.Dev, 4, W.A); }},
      {"MemcpyDtoHAsync-pageable-null", {}, [&] { return cuMemcpyDtoHAsync(W.Pageable.data(), W.Dev, 4, nullptr); }},
      {"MemcpyAsync-unified-pageable-A", {}, [&] {
         return cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(W.Pageable.data()), W.Dev, 4, W.A);
       }},
      {"MemcpyHtoD-pageable-1M", {}, [&] { return cuMemcpyHtoD(W.Dev, W.Pageable.data(), W.Bytes); }},
      {"MemcpyHtoDAsync-pageable-A-1M", {}, [&] {
         return cuMemcpyHtoDAsync(W.Dev, W.Pageable.data(), W.Bytes, W.A);
       }},
      {"MemcpyDtoD", {}, [&] { return cuMemcpyDtoD(W.Dev + 64, W.Dev, 64); }},
      {"MemsetD32-sync", {}, [&] { return cuMemsetD32(W.Dev, 0, 16); }},
      {"StreamSynchronize-A", {}, [&] { return cuStreamSynchronize(W.A); }},
      {"CtxSynchronize", {}, [&] { return cuCtxSynchronize(); }},
      {"EventSynchronize", [&] { cuEventRecord(After, W.A); }, [&] { return cuEventSynchronize(After); }},
      {"MemFree", [&] { cuMemAlloc(&Spare, 1 << 20); }, [&] { return cuMemFree(Spare); }},
      {"MemFreeHost", [&] { cuMemAllocHost(&SpareHost, 1 << 20); }, [&] { return cuMemFreeHost(SpareHost); }},
      {"MemHostUnregister", [&] {
         Registered = std::aligned_alloc(4096, 1 << 20);
         cuMemHostRegister(Registered, 1 << 20, 0);
       }, [&] { return cuMemHostUnregister(Registered); }},
      {"ModuleUnload", [&] { cuModuleLoadData(&SpareMod, SpinPtx); }, [&] { return cuModuleUnload(SpareMod); }},
      {"MemAlloc", {}, [&] { return cuMemAlloc(&Spare, 1 << 20); }},
      {"MemcpyDtoHAsync-pageable-perthread", {}, [&] {
         return cuMemcpyDtoHAsync(W.Pageable.data(), W.Dev, 4, CU_STREAM_PER_THREAD);
       }},
      {"MemcpyDtoHAsync-pinned-null", {}, [&] { return cuMemcpyDtoHAsync(W.Pinned, W.Dev, 4, nullptr); }},
      {"MemcpyHtoDAsync-pageable-null-1M", {}, [&] {
         return cuMemcpyHtoDAsync(W.Dev, W.Pageable.data(), W.Bytes, nullptr);
       }},
      {"MemcpyHtoDAsync-pageable-null-64M", [&] { cuMemAlloc(&Spare, 64 << 20); Big.assign(64 << 20, 1); },
       [&] { return cuMemcpyHtoDAsync(Spare, Big.data(), Big.size(), nullptr); }},
      {"MemsetD32-pinned-host", {}, [&] {
         CUdeviceptr P = 0;
         cuMemHostGetDevicePointer(&P, W.Pinned, 0);
         return cuMemsetD32(P, 0, 16);
       }},
      {"ModuleLoadData-ptx", {}, [&] { return cuModuleLoadData(&SpareMod, SpinPtx); }},
      {"MemAllocHost", {}, [&] { return cuMemAllocHost(&SpareHost, 1 << 20); }},
      {"MemHostRegister", [&] { Registered = std::aligned_alloc(4096, 1 << 20); },
       [&] { return cuMemHostRegister(Registered, 1 << 20, 0); }},
      {"StreamDestroy-busy", [&] {
         cuStreamCreate(&Busy, CU_STREAM_DEFAULT);
         cuStreamWaitEvent(Busy, Pending, 0);
       }, [&] { return cuStreamDestroy(Busy); }},
      {"EventDestroy", [&] { cuEventCreate(&Doomed, 0); cuEventRecord(Doomed, W.A); },
       [&] { return cuEventDestroy(Doomed); }},
      {"MemGetInfo", {}, [&] {
         size_t F = 0, T = 0;
         return cuMemGetInfo(&F, &T);
       }},
      {"MemUnmap-Release", [&] {
         CUmemAllocationProp Prop = {};
         Prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
         Prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
         Prop.location.id = 0;
         size_t G = 0;
         cuMemGetAllocationGranularity(&G, &Prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
         VmmBytes = G;
         cuMemCreate(&Vmm, G, &Prop, 0);
         cuMemAddressReserve(&VmmPtr, G, 0, 0, 0);
         cuMemMap(VmmPtr, G, 0, Vmm, 0);
         CUmemAccessDesc Acc = {};
         Acc.location = Prop.location;
         Acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
         cuMemSetAccess(VmmPtr, G, &Acc, 1);
       }, [&] {
         CUresult R = cuMemUnmap(VmmPtr, VmmBytes);
         if (R == CUDA_SUCCESS)
           R = cuMemRelease(Vmm);
         cuMemAddressFree(VmmPtr, VmmBytes);
         return R;
       }},
      {"MemFreeAsync-null", [&] { cuMemAllocAsync(&Spare, 1 << 20, W.A); },
       [&] { return cuMemFreeAsync(Spare, nullptr); }},
  };

  // What the preemptor does while the call waits.
  CUevent E = nullptr;
  CHECK(cuEventCreate(&E, CU_EVENT_DISABLE_TIMING));
  struct Op {
    const char *Name;
    std::function<CUresult()> Run;
  };
  std::vector<Op> Ops = {
      {"EventRecord", [&] { return cuEventRecord(E, W.B); }},
      {"StreamWriteValue32", [&] { return cuStreamWriteValue32(W.B, W.Word, 1, 0); }},
      {"LaunchKernel", [&] {
         return cuLaunchKernel(W.Nop, 1, 1, 1, 32, 1, 1, 0, W.B, nullptr, nullptr);
       }},
      {"EventQuery", [&] {
         CUresult R = cuEventQuery(E);
         return R == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : R;
       }},
      {"MemcpyDtoHAsync-pinned-B", [&] { return cuMemcpyDtoHAsync(W.Pinned, W.Word, 4, W.B); }},
      {"StreamWaitEvent", [&] { return cuStreamWaitEvent(W.B, E, 0); }},
      {"StreamWaitValue32", [&] {
         return cuStreamWaitValue32(W.B, W.Word, 0, CU_STREAM_WAIT_VALUE_GEQ);
       }},
  };

  unsigned long long SpinNs = 150ull * 1000 * 1000;
  void *Args[] = {&SpinNs};
  std::printf("%-32s %-26s %10s %10s %s\n", "call", "preemptor-op", "call-us", "op-us", "verdict");
  for (auto &C : Calls) {
    for (auto &O : Ops) {
      CHECK(cuCtxSynchronize());
      CHECK(cuLaunchKernel(W.Spin, 1, 1, 1, 32, 1, 1, 0, W.A, Args, nullptr));
      CHECK(cuEventRecord(Pending, W.A));
      if (C.Before)
        C.Before();
      double CallUs = 0, OpUs = 0;
      CUresult CallR = CUDA_SUCCESS, OpR = CUDA_SUCCESS;
      std::thread Program([&] {
        cuCtxSetCurrent(W.Ctx);
        auto T = Clock::now();
        CallR = C.Run();
        CallUs = usSince(T);
      });
      std::thread Preemptor([&] {
        cuCtxSetCurrent(W.Ctx);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        auto T = Clock::now();
        OpR = O.Run();
        OpUs = usSince(T);
      });
      Program.join();
      Preemptor.join();
      CHECK(cuCtxSynchronize());
      const char *CallErr = nullptr, *OpErr = nullptr;
      cuGetErrorName(CallR, &CallErr);
      cuGetErrorName(OpR, &OpErr);
      std::printf("%-32s %-26s %10.0f %10.0f %s%s%s%s%s\n", C.Name, O.Name, CallUs, OpUs,
                  OpUs > 50000 ? "BLOCKED" : CallUs > 50000 ? "free" : "free (the call did not wait)", CallR ? " call:" : "",
                  CallR ? CallErr : "", OpR ? " op:" : "", OpR ? OpErr : "");
      std::fflush(stdout);
    }
  }
  return 0;
}
