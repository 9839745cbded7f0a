// completion-signal.cu - what each way of reporting an HP launch's end to
// other processes costs the HP process: closed-loop requests (one kernel of
// one wave of 20 us blocks, then cudaStreamSynchronize), with after each
// kernel:
//   none        nothing (the baseline)
//   host64      cuStreamWriteValue64 into pinned host memory (mapped,
//               cuMemHostRegister) on the request's stream
//   device64    cuStreamWriteValue64 into device memory on the stream
//   side64      an event on the stream, a side stream waiting for it, the
//               write into host memory on the side stream (the request's
//               stream does not wait for the write)
//   hostfunc    cuLaunchHostFunc storing the value from the host
//   shm64       as host64, into a page of a /dev/shm file (what the
//               segment is), registered the same way
//   shmdm64     the same page registered with DEVICEMAP only
// Prints the median and p99 request latency of each, over 3 interleaved
// rounds of 4000 requests. Build: nvcc -arch=sm_90a -O2 completion-signal.cu
// -lcuda -o completion-signal
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    auto e = (x);                                                              \
    if (e != 0) {                                                              \
      std::fprintf(stderr, "%s failed: %d\n", #x, (int)e);                     \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

__global__ void spin(unsigned long long ns) {
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  unsigned long long t = t0;
  while (t - t0 < ns)
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
}

static volatile unsigned long long HostSeen = 0;
static void CUDA_CB hostStore(void *P) { HostSeen = (unsigned long long)(uintptr_t)P; }

int main() {
  CK(cudaSetDevice(0));
  cudaDeviceProp Prop;
  CK(cudaGetDeviceProperties(&Prop, 0));
  cudaStream_t S, Side;
  CK(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&Side, cudaStreamNonBlocking));
  // Host word, as the segment is: a shared mapping registered for the GPU.
  void *Page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CK(Page == MAP_FAILED);
  CK(cuMemHostRegister(Page, 4096, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
  CUdeviceptr HostDev;
  CK(cuMemHostGetDevicePointer(&HostDev, Page, 0));
  CUdeviceptr DevWord;
  CK(cuMemAlloc(&DevWord, 64));
  int Fd = open("/dev/shm/completion-signal-test", O_RDWR | O_CREAT, 0600);
  CK(Fd < 0);
  CK(ftruncate(Fd, 8192));
  void *ShmPage = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, Fd, 0);
  CK(ShmPage == MAP_FAILED);
  unlink("/dev/shm/completion-signal-test");
  CK(cuMemHostRegister(ShmPage, 4096, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
  CUdeviceptr ShmDev, ShmDev2;
  CK(cuMemHostGetDevicePointer(&ShmDev, ShmPage, 0));
  CK(cuMemHostRegister((char *)ShmPage + 4096, 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CK(cuMemHostGetDevicePointer(&ShmDev2, (char *)ShmPage + 4096, 0));
  cudaEvent_t E;
  CK(cudaEventCreateWithFlags(&E, cudaEventDisableTiming));
  const char *Names[] = {"none", "host64", "device64", "side64", "hostfunc", "shm64", "shmdm64"};
  const int NM = 7;
  std::vector<double> Lat[NM];
  unsigned long long Seq = 0;
  for (int Round = 0; Round < 3; ++Round)
    for (int M = 0; M < NM; ++M)
      for (int I = 0; I < 4000; ++I) {
        auto T0 = std::chrono::steady_clock::now();
        spin<<<Prop.multiProcessorCount, 128, 0, S>>>(20000);
        ++Seq;
        switch (M) {
        case 1:
          CK(cuStreamWriteValue64((CUstream)S, HostDev, Seq, 0));
          break;
        case 2:
          CK(cuStreamWriteValue64((CUstream)S, DevWord, Seq, 0));
          break;
        case 3:
          CK(cudaEventRecord(E, S));
          CK(cudaStreamWaitEvent(Side, E, 0));
          CK(cuStreamWriteValue64((CUstream)Side, HostDev, Seq, 0));
          break;
        case 4:
          CK(cuLaunchHostFunc((CUstream)S, hostStore, (void *)(uintptr_t)Seq));
          break;
        case 5:
          CK(cuStreamWriteValue64((CUstream)S, ShmDev, Seq, 0));
          break;
        case 6:
          CK(cuStreamWriteValue64((CUstream)S, ShmDev2, Seq, 0));
          break;
        }
        CK(cudaStreamSynchronize(S));
        if (I >= 100)
          Lat[M].push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - T0)
                  .count());
      }
  CK(cudaDeviceSynchronize());
  for (int M = 0; M < NM; ++M) {
    std::sort(Lat[M].begin(), Lat[M].end());
    std::printf("completion %-9s request p50 %7.1f us  p99 %7.1f us\n", Names[M],
                Lat[M][Lat[M].size() / 2], Lat[M][Lat[M].size() * 99 / 100]);
  }
  return 0;
}
