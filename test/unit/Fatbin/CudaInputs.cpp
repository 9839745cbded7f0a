//===- CudaInputs.cpp - Test inputs compiled with the CUDA toolkit -------===//
//
// One shell script compiles every input, device-only and host files in two
// parallel groups (the machines have 2 cores); it takes about 8 seconds.
//
//===----------------------------------------------------------------------===//

#include "CudaInputs.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <mutex>

using namespace llvm;

namespace tally {
namespace fatbin {
namespace test {

// Two kernels and a device function.
static const char KernelSource[] = R"(
__global__ void addOne(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
__global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
)";

// Host program; launch_k lives in l.cu (rdc) or l2.cu (shared library).
static const char MainSource[] = R"(
#include <cstdio>
__global__ void k2(int *p) { p[threadIdx.x] = 7; }
void launch_k(int *p);
int main() {
  int *p;
  cudaMalloc(&p, 64);
  k2<<<1, 1>>>(p);
  launch_k(p);
  printf("ok\n");
  return 0;
}
)";

// -rdc pieces: a kernel calling an extern device function.
static const char RdcKernelSource[] = R"(
extern __device__ int helper2(int);
__global__ void k3(int *p) { p[threadIdx.x] = helper2(threadIdx.x); }
void launch_k(int *p) { k3<<<1, 1>>>(p); }
)";
static const char RdcHelperSource[] = R"(
__device__ int helper2(int a) { return a * 5; }
)";

// Shared library.
static const char LibSource[] = R"(
__global__ void k3(int *p) { p[threadIdx.x] = 3; }
void launch_k(int *p) { k3<<<1, 1>>>(p); }
)";

// Runs as far as it can without a GPU: cudart registers the fatbin before
// main, which then reports no device and exits cleanly.
static const char ProbeSource[] = R"(
#include <cstdio>
__global__ void k4(int *p) { p[threadIdx.x] = 4; }
int main() {
  int N = -1;
  cudaError_t E = cudaGetDeviceCount(&N);
  printf("ok %d %d\n", (int)E, N);
  return 0;
}
)";

// Loads the shared library named on the command line.
static const char DlopenSource[] = R"(
#include <dlfcn.h>
#include <cstdio>
int main(int argc, char **argv) {
  if (argc != 2) return 2;
  void *H = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!H) { printf("dlopen: %s\n", dlerror()); return 1; }
  if (!dlsym(H, "_Z8launch_kPi")) { printf("no launch_k\n"); return 1; }
  printf("ok\n");
  return dlclose(H) == 0 ? 0 : 1;
}
)";

static const char BuildScript[] = R"(set -e
G90="-gencode arch=compute_90,code=[sm_90,compute_90]"
(
 set -ex
 nvcc -ptx -arch=compute_80 k.cu -o k80.ptx
 nvcc -ptx -arch=compute_90 k.cu -o k90.ptx
 ptxas -arch=sm_80 k80.ptx -o k80.cubin
 ptxas -arch=sm_90 k90.ptx -o k90.cubin
 ptxas -arch=sm_90a k90.ptx -o k90a.cubin
 IM="--image3=kind=elf,sm=80,file=k80.cubin --image3=kind=elf,sm=90,file=k90.cubin --image3=kind=ptx,sm=90,file=k90.ptx --image3=kind=elf,sm=90a,file=k90a.cubin"
 for mode in none default speed size; do
   fatbinary --create=fb_$mode.fatbin $IM --compress-mode=$mode
 done
 fatbinary --create=fb_lz4all.fatbin $IM --compress-mode=speed --compress-all
 fatbinary --create=fb_zstdall.fatbin $IM --compress-all
 fatbinary --create=fb_ident.fatbin $IM --ident=kernels.cu \
   --cmdline="-O3 -lineinfo" --compress-mode=none
 nvcc -fatbin -gencode arch=compute_80,code=sm_80 $G90 \
   -gencode arch=compute_90a,code=sm_90a k.cu -o nvcc.fatbin
 nvcc -fatbin -rdc=true -gencode arch=compute_90,code=lto_90 h.cu \
   -o lto.fatbin
 nvcc -fatbin -rdc=true -gencode arch=compute_90,code=lto_90 h.cu \
   -compress-mode=none -o lto_none.fatbin
) > device.log 2>&1 &
A=$!
(
 set -ex
 nvcc -c $G90 k.cu -o k.o
 nvcc -c -rdc=true $G90 l.cu -o l.o
 nvcc -c -rdc=true $G90 h.cu -o h.o
 nvcc -c -rdc=true $G90 m.cu -o m_rdc.o
 nvcc $G90 m_rdc.o l.o h.o -o app_rdc
 nvcc -shared -Xcompiler -fPIC $G90 l2.cu -o libl2.so
 nvcc $G90 m.cu -L. -ll2 -o app
 nvcc $G90 probe.cu -o probe_pie
 nvcc $G90 -Xcompiler -no-pie -Xlinker -no-pie probe.cu -o probe_nopie
 g++ dlopen.cpp -o dlopen_host -ldl
) > host.log 2>&1 &
B=$!
S=0
wait $A || S=1
wait $B || S=1
exit $S
)";

std::string CudaInputs::read(const std::string &Name) const {
  auto Buf = MemoryBuffer::getFile(path(Name), /*IsText=*/false,
                                   /*RequiresNullTerminator=*/false);
  if (!Buf) {
    ADD_FAILURE() << "cannot read " << path(Name) << ": "
                  << Buf.getError().message();
    return std::string();
  }
  return (*Buf)->getBuffer().str();
}

static std::string readLog(const std::string &Path) {
  auto Buf = MemoryBuffer::getFile(Path);
  return Buf ? (*Buf)->getBuffer().str() : std::string("(no log)");
}

namespace {
// Removes the input directory at exit unless TALLY_KEEP_TEST_DIR is set.
struct DirRemover {
  std::string Dir;
  ~DirRemover() {
    if (!Dir.empty() && !std::getenv("TALLY_KEEP_TEST_DIR"))
      sys::fs::remove_directories(Dir);
  }
};
} // namespace

static CudaInputs build() {
  CudaInputs In;
  std::string Home = TALLY_CUDA_HOME;
  if (const char *Env = std::getenv("TALLY_CUDA_HOME"))
    Home = Env;
  std::string Bin = Home + "/bin";
  for (const char *Tool : {"nvcc", "ptxas", "fatbinary"}) {
    if (!sys::fs::can_execute(Bin + "/" + Tool)) {
      In.SkipReason = "CUDA toolkit not found: " + Bin + "/" + Tool +
                      " is missing (set TALLY_CUDA_HOME)";
      return In;
    }
  }
  In.Available = true;

  SmallString<128> Dir;
  if (std::error_code EC =
          sys::fs::createUniqueDirectory("tally-fatbin-test", Dir)) {
    In.BuildError = "cannot create a temporary directory: " + EC.message();
    return In;
  }
  In.Dir = Dir.str().str();
  static DirRemover Remover;
  Remover.Dir = In.Dir;

  const std::pair<const char *, const char *> Files[] = {
      {"k.cu", KernelSource},       {"m.cu", MainSource},
      {"l.cu", RdcKernelSource},    {"h.cu", RdcHelperSource},
      {"l2.cu", LibSource},         {"probe.cu", ProbeSource},
      {"dlopen.cpp", DlopenSource}, {"build.sh", BuildScript}};
  for (const auto &[Name, Text] : Files) {
    std::error_code EC;
    raw_fd_ostream OS(In.path(Name), EC);
    if (EC) {
      In.BuildError = "cannot write " + In.path(Name) + ": " + EC.message();
      return In;
    }
    OS << Text;
  }

  std::string Command =
      "cd '" + In.Dir + "' && PATH='" + Bin + "':\"$PATH\" sh build.sh";
  int Status = std::system(Command.c_str());
  if (Status != 0)
    In.BuildError = "compiling the CUDA test inputs failed (status " +
                    std::to_string(Status) + ")\n--- device.log\n" +
                    readLog(In.path("device.log")) + "\n--- host.log\n" +
                    readLog(In.path("host.log"));
  return In;
}

const CudaInputs &getCudaInputs() {
  static std::once_flag Once;
  static CudaInputs Inputs;
  std::call_once(Once, [] { Inputs = build(); });
  return Inputs;
}

} // namespace test
} // namespace fatbin
} // namespace tally
