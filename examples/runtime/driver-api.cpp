// driver-api.cpp - a program that uses only the CUDA driver API (-lcuda):
//   driver-api <driver-kernels.fatbin or .cubin>
//
// It exercises launches the runtime sees from direct driver calls: the
// file is loaded twice, as a module (cuModuleLoadData, cuModuleGetFunction)
// and as a library (cuLibraryLoadData, cuLibraryGetKernel, the CUkernel
// passed straight to cuLaunchKernel and, once, through cuKernelGetFunction);
// every kernel is launched with cuLaunchKernel's kernelParams, one with its
// `extra` form (CU_LAUNCH_PARAM_BUFFER_POINTER), one with cuLaunchKernelEx
// and no attributes, one with cuLaunchKernelEx and a priority attribute; on
// a created stream, the legacy default stream and the per-thread default
// stream; a 2-D grid with dynamic shared memory. Both loads must compute
// the same; checksums (FNV-1a 64) are printed for each, then the modules
// are unloaded.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define CU(call)                                                               \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char *s_ = nullptr;                                                \
      cuGetErrorString(r_, &s_);                                               \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,       \
                   #call, s_ ? s_ : "unknown error");                          \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

namespace {

constexpr int kN = 1 << 22, kThreads = 256, kBlocks = kN / kThreads;

uint64_t fnv1a(const void *data, size_t bytes) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Kernels {
  CUfunction fill, mad, sums, hist;
};

struct Results {
  uint64_t fill, mad, sums, hist;
};

template <typename T> uint64_t deviceHash(CUdeviceptr d, size_t count) {
  std::vector<T> h(count);
  CU(cuMemcpyDtoH(h.data(), d, count * sizeof(T)));
  return fnv1a(h.data(), count * sizeof(T));
}

Results runAll(const Kernels &k, CUstream stream) {
  CUdeviceptr pattern, x, y, sums, bins;
  CU(cuMemAlloc(&pattern, kN * 4));
  CU(cuMemAlloc(&x, kN * 4));
  CU(cuMemAlloc(&y, kN * 4));
  CU(cuMemAlloc(&sums, kBlocks * 4));
  CU(cuMemAlloc(&bins, 256 * 4));
  CU(cuMemsetD32Async(bins, 0, 256, stream));
  std::vector<float> hx(kN), hy(kN);
  for (int i = 0; i < kN; ++i) {
    hx[i] = (float)(i % 1021) * 0.125f;
    hy[i] = (float)(i % 17) - 8.0f;
  }
  CU(cuMemcpyHtoDAsync(x, hx.data(), kN * 4, stream));
  CU(cuMemcpyHtoDAsync(y, hy.data(), kN * 4, stream));

  // kernelParams, on the created stream.
  uint32_t seed = 0x1234567u;
  int n = kN;
  void *fillArgs[] = {&pattern, &seed, &n};
  CU(cuLaunchKernel(k.fill, kBlocks, 1, 1, kThreads, 1, 1, 0, stream, fillArgs,
                    nullptr));

  // extra: the parameters as one buffer laid out as the kernel's ABI.
  struct {
    CUdeviceptr y, x;
    float a;
    int n;
  } madArgs = {y, x, 1.5f, kN};
  size_t madSize = sizeof(madArgs);
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &madArgs,
                   CU_LAUNCH_PARAM_BUFFER_SIZE, &madSize, CU_LAUNCH_PARAM_END};
  CU(cuLaunchKernel(k.mad, kBlocks, 1, 1, kThreads, 1, 1, 0, stream, nullptr,
                    extra));

  // cuLaunchKernelEx without attributes: a 2-D grid, dynamic shared memory.
  CUlaunchConfig cfg = {};
  cfg.gridDimX = 128, cfg.gridDimY = kBlocks / 128, cfg.gridDimZ = 1;
  cfg.blockDimX = kThreads, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.sharedMemBytes = kThreads * 4;
  cfg.hStream = stream;
  cfg.attrs = nullptr, cfg.numAttrs = 0;
  void *sumArgs[] = {&pattern, &sums, &n};
  CU(cuLaunchKernelEx(&cfg, k.sums, sumArgs, nullptr));

  // cuLaunchKernelEx with a priority attribute.
  CUlaunchAttribute prio = {};
  prio.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  int least, greatest;
  CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  prio.value.priority = greatest;
  CUlaunchConfig pcfg = {};
  pcfg.gridDimX = kBlocks, pcfg.gridDimY = 1, pcfg.gridDimZ = 1;
  pcfg.blockDimX = kThreads, pcfg.blockDimY = 1, pcfg.blockDimZ = 1;
  pcfg.hStream = stream;
  pcfg.attrs = &prio, pcfg.numAttrs = 1;
  void *histArgs[] = {&pattern, &bins, &n};
  CU(cuLaunchKernelEx(&pcfg, k.hist, histArgs, nullptr));

  // The legacy default stream (waits for the blocking created stream), then
  // the per-thread default stream after a synchronisation.
  seed = 0x89abcdefu;
  CU(cuLaunchKernel(k.fill, kBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, fillArgs,
                    nullptr));
  CU(cuLaunchKernel(k.hist, kBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, histArgs,
                    nullptr));
  CU(cuCtxSynchronize());
  CU(cuLaunchKernel(k.mad, kBlocks, 1, 1, kThreads, 1, 1, 0,
                    CU_STREAM_PER_THREAD, nullptr, extra));
  CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));

  Results r = {deviceHash<uint32_t>(pattern, kN), deviceHash<uint32_t>(y, kN),
               deviceHash<uint32_t>(sums, kBlocks),
               deviceHash<uint32_t>(bins, 256)};
  for (CUdeviceptr p : {pattern, x, y, sums, bins})
    CU(cuMemFree(p));
  return r;
}

void print(const char *what, const Results &r) {
  std::printf("%-8s fill %016llx mad %016llx sums %016llx hist %016llx\n", what,
              (unsigned long long)r.fill, (unsigned long long)r.mad,
              (unsigned long long)r.sums, (unsigned long long)r.hist);
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: driver-api <fatbin or cubin>\n");
    return 1;
  }
  std::ifstream f(argv[1], std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "driver-api: cannot read %s\n", argv[1]);
    return 1;
  }
  std::vector<char> image((std::istreambuf_iterator<char>(f)),
                          std::istreambuf_iterator<char>());

  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_DEFAULT));

  // As a module.
  CUmodule mod;
  CU(cuModuleLoadData(&mod, image.data()));
  Kernels mk;
  CU(cuModuleGetFunction(&mk.fill, mod, "fill_pattern"));
  CU(cuModuleGetFunction(&mk.mad, mod, "mad_chain"));
  CU(cuModuleGetFunction(&mk.sums, mod, "block_sums_dyn"));
  CU(cuModuleGetFunction(&mk.hist, mod, "histogram"));
  Results fromModule = runAll(mk, stream);
  print("module", fromModule);

  // As a library: CUkernel handles, launched as they are (cast to
  // CUfunction, which the driver accepts) and once through
  // cuKernelGetFunction.
  CUlibrary lib;
  CU(cuLibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr,
                       nullptr, 0));
  CUkernel fill, mad, sums, hist;
  CU(cuLibraryGetKernel(&fill, lib, "fill_pattern"));
  CU(cuLibraryGetKernel(&mad, lib, "mad_chain"));
  CU(cuLibraryGetKernel(&sums, lib, "block_sums_dyn"));
  CU(cuLibraryGetKernel(&hist, lib, "histogram"));
  Kernels lk = {(CUfunction)fill, (CUfunction)mad, nullptr, (CUfunction)hist};
  CU(cuKernelGetFunction(&lk.sums, sums));
  Results fromLibrary = runAll(lk, stream);
  print("library", fromLibrary);

  bool same = fromModule.fill == fromLibrary.fill &&
              fromModule.mad == fromLibrary.mad &&
              fromModule.sums == fromLibrary.sums &&
              fromModule.hist == fromLibrary.hist;
  std::printf("module and library agree: %s\n", same ? "yes" : "NO");

  CU(cuModuleUnload(mod));
  CU(cuLibraryUnload(lib));
  CU(cuStreamDestroy(stream));
  CU(cuDevicePrimaryCtxRelease(dev));
  return same ? 0 : 1;
}
