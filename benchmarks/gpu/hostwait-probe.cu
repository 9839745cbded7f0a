// hostwait-probe.cu - does a stream wait on a word of registered host memory
// see a plain CPU store, and does a stream write reach host memory? (The
// runtime's preemption handshake rests on both.) For each way of getting
// the memory (mmap + cuMemHostRegister, cuMemHostAlloc) and each stream
// priority: enqueue wait(word0 == 1) then write(word1 = 7), store word0 = 1
// on the CPU, poll word1 for a second. Prints one line per case.
#include <cuda.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#define CU(x)                                                                  \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char *n_ = nullptr;                                                \
      cuGetErrorName(r_, &n_);                                                 \
      std::printf("%s failed: %s\n", #x, n_ ? n_ : "?");                       \
      return false;                                                            \
    }                                                                          \
  } while (0)

#include <thread>
static bool probe(const char *Way, volatile uint32_t *W, CUdeviceptr Dev, int Prio,
                  unsigned Flags, int DelayUs = 0) {
  CUstream S;
  CU(cuStreamCreateWithPriority(&S, CU_STREAM_NON_BLOCKING, Prio));
  W[0] = 0;
  W[1] = 0;
  CU(cuStreamWaitValue32(S, Dev, 1, Flags));
  CU(cuStreamWriteValue32(S, Dev + 4, 7, 0));
  std::this_thread::sleep_for(std::chrono::microseconds(DelayUs));
  auto T0 = std::chrono::steady_clock::now();
  W[0] = 1;
  bool Seen = false;
  double Us = 0;
  while (std::chrono::steady_clock::now() - T0 < std::chrono::seconds(1)) {
    if (W[1] == 7) {
      Seen = true;
      Us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - T0).count();
      break;
    }
  }
  std::printf("%-10s priority %2d flags %u, store %6d us after the wait: %s", Way, Prio, Flags,
              DelayUs, Seen ? "seen" : "NOT SEEN");
  if (Seen)
    std::printf(" after %.1f us", Us);
  std::printf("\n");
  if (!Seen) {
    W[0] = 1;
  }
  cuStreamSynchronize(S);
  return true;
}

int main() {
  CUdevice D;
  CUcontext C;
  if (cuInit(0) || cuDeviceGet(&D, 0) || cuDevicePrimaryCtxRetain(&C, D) || cuCtxSetCurrent(C))
    return 1;
  int Least, Greatest;
  cuCtxGetStreamPriorityRange(&Least, &Greatest);
  void *P = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CUdeviceptr Dev = 0;
  if (cuMemHostRegister(P, 4096, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ||
      cuMemHostGetDevicePointer(&Dev, P, 0))
    return 2;
  void *H = nullptr;
  CUdeviceptr HDev = 0;
  if (cuMemHostAlloc(&H, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) ||
      cuMemHostGetDevicePointer(&HDev, H, 0))
    return 3;
  for (int Delay : {0, 1000, 50000, 300000})
    for (int Prio : {Least, Greatest})
      for (unsigned F : {unsigned(CU_STREAM_WAIT_VALUE_EQ), unsigned(CU_STREAM_WAIT_VALUE_GEQ)}) {
        probe("registered", static_cast<volatile uint32_t *>(P), Dev, Prio, F, Delay);
        probe("hostalloc", static_cast<volatile uint32_t *>(H), HDev, Prio, F, Delay);
      }
  return 0;
}
