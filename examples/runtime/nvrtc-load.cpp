// nvrtc-load.cpp - kernels made at run time with NVRTC and loaded as PTX,
// the three ways programs do it (the runtime gives each module Tally's
// variants before the driver compiles it):
//   nvrtc-load [--repeat N]
//
//   module   NVRTC -> PTX -> cuModuleLoadDataEx (with JIT log options)
//   library  NVRTC -> PTX -> cuLibraryLoadData, kernels as CUkernel
//   link     NVRTC -rdc -> PTX -> cuLinkAddData + cuLinkComplete -> cubin
//            -> cuModuleLoadData
//
// Each way runs the same kernels (an early return, a shared-memory
// reduction with barriers, a grid-stride histogram with atomics, a 2-D
// stencil) on the same inputs over several grid sizes, and prints one
// checksum line per kernel (FNV-1a 64 of its output): the lines must be
// the same bytes plain and under `tally run --force=ptb --preempt=...`.
// How long each load took goes to stderr.
//
// NVRTC is opened with dlopen (NVRTC_LIBRARY, else libnvrtc.so.13, .12,
// libnvrtc.so), so the program needs no CUDA toolkit where it runs.
#include <cuda.h>
#include <nvrtc.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CU(call)                                                                                   \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      const char *s_ = nullptr;                                                                    \
      cuGetErrorString(r_, &s_);                                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                     \
                   s_ ? s_ : "unknown error");                                                     \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

namespace {

const char *Source = R"(
extern "C" __global__ void scale_early(const float *x, float *y, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  y[i] = a * x[i] + 1.0f;
}

extern "C" __global__ void block_sum(const unsigned *x, unsigned *out, int n) {
  __shared__ unsigned s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] * 2654435761u : 0u;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k)
      s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = s[0];
}

extern "C" __global__ void histogram(const unsigned *x, unsigned *bins, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&bins[(x[i] >> 3) & 255], 1u);
}

extern "C" __global__ void stencil2d(const float *in, float *out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h)
    return;
  float c = in[y * w + x];
  float l = x > 0 ? in[y * w + x - 1] : c, r = x + 1 < w ? in[y * w + x + 1] : c;
  float u = y > 0 ? in[(y - 1) * w + x] : c, d = y + 1 < h ? in[(y + 1) * w + x] : c;
  out[y * w + x] = 0.5f * c + 0.125f * (l + r + u + d);
}
)";

uint64_t fnv1a(const void *Data, size_t Bytes) {
  const unsigned char *P = static_cast<const unsigned char *>(Data);
  uint64_t H = 0xcbf29ce484222325ull;
  for (size_t I = 0; I < Bytes; ++I)
    H = (H ^ P[I]) * 0x100000001b3ull;
  return H;
}

struct Nvrtc {
  decltype(&nvrtcCreateProgram) Create;
  decltype(&nvrtcCompileProgram) Compile;
  decltype(&nvrtcGetPTXSize) PtxSize;
  decltype(&nvrtcGetPTX) GetPtx;
  decltype(&nvrtcGetProgramLogSize) LogSize;
  decltype(&nvrtcGetProgramLog) GetLog;
  decltype(&nvrtcDestroyProgram) Destroy;

  bool open() {
    void *H = nullptr;
    if (const char *P = std::getenv("NVRTC_LIBRARY"); P && *P)
      H = dlopen(P, RTLD_NOW);
    for (const char *N : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
      if (!H)
        H = dlopen(N, RTLD_NOW);
    if (!H) {
      std::fprintf(stderr, "nvrtc-load: cannot open NVRTC (set NVRTC_LIBRARY): %s\n", dlerror());
      return false;
    }
#define SYM(F, N) F = reinterpret_cast<decltype(F)>(dlsym(H, N))
    SYM(Create, "nvrtcCreateProgram");
    SYM(Compile, "nvrtcCompileProgram");
    SYM(PtxSize, "nvrtcGetPTXSize");
    SYM(GetPtx, "nvrtcGetPTX");
    SYM(LogSize, "nvrtcGetProgramLogSize");
    SYM(GetLog, "nvrtcGetProgramLog");
    SYM(Destroy, "nvrtcDestroyProgram");
#undef SYM
    return Create && Compile && PtxSize && GetPtx && LogSize && GetLog && Destroy;
  }

  /// PTX of Source for compute_<Cc>, relocatable when \p Rdc.
  std::string compile(int Cc, bool Rdc) {
    nvrtcProgram P;
    if (Create(&P, Source, "nvrtc-load.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
      std::exit(1);
    std::string Arch = "--gpu-architecture=compute_" + std::to_string(Cc);
    std::vector<const char *> Opts = {Arch.c_str(), "-default-device"};
    if (Rdc)
      Opts.push_back("-rdc=true");
    nvrtcResult R = Compile(P, int(Opts.size()), Opts.data());
    size_t N = 0;
    LogSize(P, &N);
    std::string Log(N, '\0');
    GetLog(P, Log.data());
    if (R != NVRTC_SUCCESS) {
      std::fprintf(stderr, "nvrtc-load: NVRTC failed:\n%s\n", Log.c_str());
      std::exit(1);
    }
    PtxSize(P, &N);
    std::string Ptx(N, '\0');
    GetPtx(P, Ptx.data());
    Destroy(&P);
    return Ptx;
  }
};

double msSince(std::chrono::steady_clock::time_point T) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - T).count();
}

/// Runs every kernel of one loaded module; \p Get finds a kernel by name.
template <typename GetFn> void runAll(const char *Way, GetFn Get) {
  const int N = 1 << 20, W = 1024, H = 768;
  std::vector<float> X(N);
  std::vector<unsigned> U(N);
  uint32_t S = 12345;
  for (int I = 0; I < N; ++I) {
    S = S * 1664525u + 1013904223u;
    U[I] = S;
    X[I] = float(S >> 8) / float(1 << 24) - 0.5f;
  }
  CUdeviceptr DX, DY, DU, DO;
  CU(cuMemAlloc(&DX, N * 4));
  CU(cuMemAlloc(&DY, N * 4));
  CU(cuMemAlloc(&DU, N * 4));
  CU(cuMemAlloc(&DO, N * 4));
  CU(cuMemcpyHtoD(DX, X.data(), N * 4));
  CU(cuMemcpyHtoD(DU, U.data(), N * 4));
  std::vector<unsigned char> Out(N * 4);
  auto Sum = [&](const char *K, size_t Bytes) {
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(Out.data(), Bytes == N * 4 ? DY : DO, Bytes));
    std::printf("%s %s %016llx\n", Way, K, (unsigned long long)fnv1a(Out.data(), Bytes));
  };
  // Grid sizes: several waves, one partial block, a single block.
  for (int Repeat = 0; Repeat < 3; ++Repeat) {
    int n = Repeat == 2 ? 200 : N - Repeat * 777;
    float A = 1.5f + Repeat;
    CU(cuMemsetD32(DY, 0, N));
    void *P1[] = {&DX, &DY, &n, &A};
    CU(cuLaunchKernel(Get("scale_early"), (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, P1,
                      nullptr));
    Sum("scale_early", N * 4);

    CU(cuMemsetD32(DO, 0, N));
    void *P2[] = {&DU, &DO, &n};
    CU(cuLaunchKernel(Get("block_sum"), (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, P2,
                      nullptr));
    Sum("block_sum", ((n + 255) / 256) * 4);

    CU(cuMemsetD32(DO, 0, 256));
    unsigned G = Repeat == 2 ? 1 : 132 * (Repeat + 1);
    CU(cuLaunchKernel(Get("histogram"), G, 1, 1, 256, 1, 1, 0, nullptr, P2, nullptr));
    Sum("histogram", 256 * 4);

    int w = W - Repeat * 5, h = H - Repeat * 3;
    CU(cuMemsetD32(DY, 0, N));
    void *P4[] = {&DX, &DY, &w, &h};
    CU(cuLaunchKernel(Get("stencil2d"), (w + 31) / 32, (h + 7) / 8, 1, 32, 8, 1, 0, nullptr, P4,
                      nullptr));
    Sum("stencil2d", N * 4);
  }
  for (CUdeviceptr P : {DX, DY, DU, DO})
    CU(cuMemFree(P));
}

} // namespace

int main(int Argc, char **Argv) {
  int Repeat = 1;
  for (int I = 1; I < Argc; ++I) {
    if (!std::strcmp(Argv[I], "--repeat") && I + 1 < Argc)
      Repeat = std::atoi(Argv[++I]);
    else {
      std::fprintf(stderr, "usage: nvrtc-load [--repeat N]\n");
      return 2;
    }
  }
  Nvrtc Rt;
  if (!Rt.open())
    return 1;
  CU(cuInit(0));
  CUdevice Dev;
  CU(cuDeviceGet(&Dev, 0));
  CUcontext Ctx;
  CU(cuDevicePrimaryCtxRetain(&Ctx, Dev));
  CU(cuCtxSetCurrent(Ctx));
  int Major = 0, Minor = 0;
  CU(cuDeviceGetAttribute(&Major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, Dev));
  CU(cuDeviceGetAttribute(&Minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, Dev));
  int Cc = Major * 10 + Minor;
  std::string Ptx = Rt.compile(Cc, false), PtxRdc = Rt.compile(Cc, true);

  for (int R = 0; R < Repeat; ++R) {
    // module: cuModuleLoadDataEx with the JIT's logs.
    {
      char Info[4096] = {}, Err[4096] = {};
      CUjit_option O[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                          CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
      void *V[] = {Info, reinterpret_cast<void *>(uintptr_t(sizeof Info)), Err,
                   reinterpret_cast<void *>(uintptr_t(sizeof Err))};
      auto T = std::chrono::steady_clock::now();
      CUmodule M;
      CU(cuModuleLoadDataEx(&M, Ptx.c_str(), 4, O, V));
      std::fprintf(stderr, "load module: %.1f ms\n", msSince(T));
      runAll("module", [&](const char *K) {
        CUfunction F;
        CU(cuModuleGetFunction(&F, M, K));
        return F;
      });
      CU(cuModuleUnload(M));
    }
    // library: cuLibraryLoadData, CUkernels launched as they are.
    {
      auto T = std::chrono::steady_clock::now();
      CUlibrary L;
      CU(cuLibraryLoadData(&L, Ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
      std::fprintf(stderr, "load library: %.1f ms\n", msSince(T));
      runAll("library", [&](const char *K) {
        CUkernel F;
        CU(cuLibraryGetKernel(&F, L, K));
        return reinterpret_cast<CUfunction>(F);
      });
      CU(cuLibraryUnload(L));
    }
    // link: relocatable PTX through the JIT linker, the cubin loaded.
    {
      auto T = std::chrono::steady_clock::now();
      CUlinkState St;
      CU(cuLinkCreate(0, nullptr, nullptr, &St));
      CU(cuLinkAddData(St, CU_JIT_INPUT_PTX, PtxRdc.data(), PtxRdc.size() + 1, "nvrtc-load.ptx",
                       0, nullptr, nullptr));
      void *Cubin = nullptr;
      size_t Bytes = 0;
      CU(cuLinkComplete(St, &Cubin, &Bytes));
      CUmodule M;
      CU(cuModuleLoadData(&M, Cubin));
      CU(cuLinkDestroy(St));
      std::fprintf(stderr, "load link: %.1f ms\n", msSince(T));
      runAll("link", [&](const char *K) {
        CUfunction F;
        CU(cuModuleGetFunction(&F, M, K));
        return F;
      });
      CU(cuModuleUnload(M));
    }
  }
  CU(cuDevicePrimaryCtxRelease(Dev));
  return 0;
}
