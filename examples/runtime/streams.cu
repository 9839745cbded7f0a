// streams.cu - a multi-stream runtime-API program whose stream order the
// Tally runtime must keep while it runs kernels sliced or as preemptible PTB
// launches.
//
// It exercises: three created (blocking) streams, the legacy default stream
// (implicit synchronisation with the created streams, no events) and the
// per-thread default stream (cudaStreamPerThread, from the main thread and
// from a second host thread); cross-stream dependencies through
// cudaEventRecord/cudaStreamWaitEvent; async H2D, D2D and D2H copies between
// kernels; cudaLaunchHostFunc callbacks that read what an earlier copy on
// their stream brought back (what they saw goes into the results);
// cudaStreamSynchronize, cudaEventSynchronize and cudaDeviceSynchronize; a
// chain of kernels each consuming the previous one's output; a kernel with
// __syncthreads and early returns (whole blocks and part of a block); 2-D
// and 3-D grids; dynamic shared memory. Every stage prints an FNV-1a 64
// checksum of its results; all kernels are integer or element-wise float
// code, so the output is the same on every run.
//
// Build: nvcc -arch=sm_90a -c streams.cu -o streams.o
//        tally-opt streams.o -o streams.tally.o
//        nvcc -arch=sm_90a streams.tally.o -o streams.tally
#include "common.h"

#include <thread>
#include <vector>

constexpr int kN = 1 << 22;   // elements of every buffer
constexpr int kThreads = 256; // block size of the 1-D kernels
constexpr int kBlocks = kN / kThreads;
constexpr int kChain = 6; // kernels in the same-stream chain
constexpr int kNX = 256, kNY = 128, kNZ = 128; // the 3-D volume (kN elements)
constexpr int kSide = 2048;                    // the 2-D matrix (kN elements)
constexpr int kTile = 32;

__device__ __forceinline__ uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// One link of the chain: reads its neighbours in the previous output, so
// kernel k+1 needs all of kernel k.
__global__ void chain_step(const uint32_t *in, uint32_t *out, int n,
                           uint32_t k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  uint32_t v = in[i] ^ in[(i * 7 + 13 * k + 1) % n] ^ (in[(i + 4099) % n] << 1);
  for (int r = 0; r < 48; ++r)
    v = mix(v + k + r);
  out[i] = v;
}

// Element-wise float work (no reductions): exact bits are reproducible.
__global__ void float_mix(const uint32_t *in, uint32_t *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float x = (in[i] & 0xffffff) * (1.0f / 16777216.0f);
  float y = 0;
  for (int r = 0; r < 16; ++r)
    y = fmaf(y, 0.75f, __fsqrt_rn(x + r) - 0.5f * x);
  out[i] = __float_as_uint(y) ^ in[i];
}

// Block sums with __syncthreads and early returns: blocks past `active`
// leave before any barrier, and all but the first warp leave after the
// last barrier (the first warp finishes with shuffles).
__global__ void block_sum_early(const uint32_t *in, uint32_t *partial, int n,
                                int active) {
  __shared__ uint32_t s[kThreads];
  if (blockIdx.x >= active) {
    if (threadIdx.x == 0)
      partial[blockIdx.x] = 0xdeadbeefu;
    return;
  }
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? in[i] * (uint32_t)(t + 1) : 0u;
  __syncthreads();
  for (int o = blockDim.x / 2; o >= 32; o >>= 1) {
    if (t < o)
      s[t] += s[t + o];
    __syncthreads();
  }
  if (t >= 32)
    return;
  uint32_t v = s[t];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_down_sync(0xffffffffu, v, o);
  if (t == 0)
    partial[blockIdx.x] = v ^ blockIdx.x;
}

// 3-D grid: every thread writes one voxel from its coordinates and a seed.
__global__ void volume3d(const uint32_t *seed, uint32_t *out, int nx, int ny,
                         int nz) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x >= nx || y >= ny || z >= nz)
    return;
  size_t i = ((size_t)z * ny + y) * nx + x;
  uint32_t v = seed[i] ^ mix(x * 73856093u ^ y * 19349663u ^ z * 83492791u);
  for (int r = 0; r < 16; ++r)
    v = mix(v + r);
  out[i] = v;
}

// 2-D grid: a tiled transpose through static shared memory.
__global__ void transpose2d(const uint32_t *in, uint32_t *out, int side) {
  __shared__ uint32_t tile[kTile][kTile + 1];
  int x = blockIdx.x * kTile + threadIdx.x;
  for (int j = threadIdx.y; j < kTile; j += blockDim.y)
    tile[j][threadIdx.x] =
        in[(size_t)(blockIdx.y * kTile + j) * side + x] + blockIdx.y;
  __syncthreads();
  x = blockIdx.y * kTile + threadIdx.x;
  for (int j = threadIdx.y; j < kTile; j += blockDim.y)
    out[(size_t)(blockIdx.x * kTile + j) * side + x] = tile[threadIdx.x][j];
}

// Dynamic shared memory: an inclusive block scan (Hillis-Steele, double
// buffered) of a[i] ^ b[i]; the shared array is 2 * blockDim.x words.
__global__ void scan_dynamic(const uint32_t *a, const uint32_t *b,
                             uint32_t *out, int n) {
  extern __shared__ uint32_t buf[];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  uint32_t *cur = buf, *nxt = buf + blockDim.x;
  cur[t] = i < n ? a[i] ^ b[i] : 0u;
  __syncthreads();
  for (int o = 1; o < blockDim.x; o <<= 1) {
    nxt[t] = t >= o ? cur[t] + cur[t - o] : cur[t];
    __syncthreads();
    uint32_t *tmp = cur;
    cur = nxt;
    nxt = tmp;
  }
  if (i < n)
    out[i] = cur[t];
}

// Launched on the legacy default stream: reads buffers written on the
// created streams with no event in between.
__global__ void combine(const uint32_t *a, const uint32_t *b, uint32_t *out,
                        int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = mix(a[i] + 3u * b[(i + 1) % n]);
}

namespace {

struct Seen {
  const uint32_t
      *host; // pinned, filled by a D2H copy queued before the callback
  size_t count;
  uint64_t hash = 0;
  int calls = 0;
};

// A host callback: may not call CUDA; hashes what the copy before it brought
// back.
void CUDART_CB see(void *arg) {
  Seen *s = static_cast<Seen *>(arg);
  s->hash = fnv1a(s->host, s->count * sizeof(uint32_t));
  ++s->calls;
}

uint64_t deviceHash(const uint32_t *d, size_t count) {
  std::vector<uint32_t> h(count);
  CHECK(cudaMemcpy(h.data(), d, count * sizeof(uint32_t),
                   cudaMemcpyDeviceToHost));
  return fnv1a(h.data(), count * sizeof(uint32_t));
}

void stage(int n, const char *name, uint64_t h, uint64_t &total) {
  std::printf("stage %d %-28s %016llx\n", n, name, (unsigned long long)h);
  total = fnv1a(&h, sizeof(h), total);
}

// The second host thread's work: its own per-thread default stream.
void otherThread(const uint32_t *src, uint32_t *a, uint32_t *b, uint64_t *out) {
  cudaStream_t s = cudaStreamPerThread;
  CHECK(cudaMemcpyAsync(a, src, kN * sizeof(uint32_t), cudaMemcpyDeviceToDevice,
                        s));
  for (int k = 0; k < 3; ++k) {
    chain_step<<<kBlocks, kThreads, 0, s>>>(a, b, kN, 100 + k);
    CHECK_LAUNCH();
    std::swap(a, b);
  }
  CHECK(cudaStreamSynchronize(s));
  *out = deviceHash(a, kN);
}

} // namespace

int main() {
  const size_t bytes = kN * sizeof(uint32_t);
  int dev = 0;
  CHECK(cudaSetDevice(dev));

  uint32_t *hIn, *hPartial, *hBack, *hPtds;
  CHECK(cudaMallocHost(&hIn, bytes));
  CHECK(cudaMallocHost(&hPartial, kBlocks * sizeof(uint32_t)));
  CHECK(cudaMallocHost(&hBack, bytes));
  CHECK(cudaMallocHost(&hPtds, bytes));
  uint32_t state = 12345u;
  for (int i = 0; i < kN; ++i) {
    state = state * 1664525u + 1013904223u;
    hIn[i] = state;
  }

  enum {
    A,
    B,
    Seed,
    Vol,
    T1,
    T2,
    Scan,
    Comb,
    Partial,
    Partial2,
    P1,
    P2,
    T3a,
    T3b,
    NumBufs
  };
  uint32_t *d[NumBufs];
  for (auto &p : d)
    CHECK(cudaMalloc(&p, bytes));

  cudaStream_t s1, s2, s3;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaStreamCreate(&s2));
  CHECK(cudaStreamCreateWithFlags(&s3, cudaStreamDefault));
  cudaEvent_t evChain, evSum, evScan, evLegacy, evPtds;
  for (cudaEvent_t *e : {&evChain, &evSum, &evScan, &evLegacy, &evPtds})
    CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));

  // Stage 1 (s1): H2D, then a chain of kernels on one stream, each reading
  // the previous output; float_mix at the end.
  CHECK(cudaMemcpyAsync(d[A], hIn, bytes, cudaMemcpyHostToDevice, s1));
  uint32_t *cur = d[A], *nxt = d[B];
  for (int k = 0; k < kChain; ++k) {
    chain_step<<<kBlocks, kThreads, 0, s1>>>(cur, nxt, kN, k);
    CHECK_LAUNCH();
    std::swap(cur, nxt);
  }
  float_mix<<<kBlocks, kThreads, 0, s1>>>(cur, nxt, kN);
  CHECK_LAUNCH();
  uint32_t *chainOut = nxt; // cur is free again
  CHECK(cudaEventRecord(evChain, s1));

  // Stage 2 (s2, after evChain): block sums with early returns, D2H, a host
  // callback that reads the copied sums.
  Seen seenSums{hPartial, kBlocks};
  CHECK(cudaStreamWaitEvent(s2, evChain, 0));
  block_sum_early<<<kBlocks, kThreads, 0, s2>>>(chainOut, d[Partial], kN,
                                                kBlocks - 1000);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(hPartial, d[Partial], kBlocks * sizeof(uint32_t),
                        cudaMemcpyDeviceToHost, s2));
  CHECK(cudaLaunchHostFunc(s2, see, &seenSums));
  CHECK(cudaEventRecord(evSum, s2));

  // Stage 3 (s3): independent H2D and a 3-D grid, a 2-D transpose, a D2D
  // copy; then, after evSum, a dynamic-shared-memory scan of the transpose
  // and the chain's output.
  CHECK(cudaMemcpyAsync(d[Seed], hIn, bytes, cudaMemcpyHostToDevice, s3));
  dim3 vb(8, 8, 4), vg(kNX / 8, kNY / 8, kNZ / 4);
  volume3d<<<vg, vb, 0, s3>>>(d[Seed], d[Vol], kNX, kNY, kNZ);
  CHECK_LAUNCH();
  dim3 tb(kTile, 8), tg(kSide / kTile, kSide / kTile);
  transpose2d<<<tg, tb, 0, s3>>>(d[Vol], d[T1], kSide);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(d[T2], d[T1], bytes, cudaMemcpyDeviceToDevice, s3));
  CHECK(cudaStreamWaitEvent(s3, evSum, 0));
  scan_dynamic<<<kBlocks, kThreads, 2 * kThreads * sizeof(uint32_t), s3>>>(
      d[T2], chainOut, d[Scan], kN);
  CHECK_LAUNCH();
  CHECK(cudaEventRecord(evScan, s3));

  // Stage 4 (legacy default stream): no events; the legacy stream waits for
  // s1..s3 and they wait for it.
  combine<<<kBlocks, kThreads>>>(d[Scan], d[Vol], d[Comb], kN);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(d[P1], d[Comb], bytes, cudaMemcpyDeviceToDevice, 0));
  CHECK(cudaEventRecord(evLegacy, 0));
  // s1 after legacy work: implicitly ordered behind combine.
  chain_step<<<kBlocks, kThreads, 0, s1>>>(d[P1], d[P2], kN, 77);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(hBack, d[P2], bytes, cudaMemcpyDeviceToHost, s1));
  Seen seenBack{hBack, (size_t)kN};
  CHECK(cudaLaunchHostFunc(s1, see, &seenBack));

  // Stage 5 (per-thread default stream): waits on the legacy work by event,
  // a chain, D2H, callback; a second host thread meanwhile runs its own
  // per-thread default stream from a copy of the chain's output.
  cudaStream_t ptds = cudaStreamPerThread;
  CHECK(cudaStreamWaitEvent(ptds, evLegacy, 0));
  chain_step<<<kBlocks, kThreads, 0, ptds>>>(d[Comb], d[T1], kN, 200);
  CHECK_LAUNCH();
  block_sum_early<<<kBlocks, kThreads, 0, ptds>>>(d[T1], d[Partial2], kN,
                                                  kBlocks);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(hPtds, d[T1], bytes, cudaMemcpyDeviceToHost, ptds));
  Seen seenPtds{hPtds, (size_t)kN};
  CHECK(cudaLaunchHostFunc(ptds, see, &seenPtds));
  CHECK(cudaEventRecord(evPtds, ptds));

  CHECK(cudaEventSynchronize(evScan));
  uint64_t threadHash = 0;
  std::thread other(otherThread, chainOut, d[T3a], d[T3b], &threadHash);

  uint64_t total = 0xcbf29ce484222325ull;
  // evChain, evSum and evScan have completed (evScan waited for them).
  stage(1, "chain (s1)", deviceHash(chainOut, kN), total);
  CHECK(cudaStreamSynchronize(s2));
  stage(2, "block sums + callback (s2)", seenSums.hash, total);
  stage(2, "block sums (device)", deviceHash(d[Partial], kBlocks), total);
  stage(3, "3-D volume (s3)", deviceHash(d[Vol], kN), total);
  stage(3, "scan, dynamic smem (s3)", deviceHash(d[Scan], kN), total);
  CHECK(cudaStreamSynchronize(s1));
  stage(4, "legacy combine", deviceHash(d[Comb], kN), total);
  stage(4, "s1 after legacy + callback", seenBack.hash, total);
  CHECK(cudaEventSynchronize(evPtds));
  stage(5, "per-thread stream + callback", seenPtds.hash, total);
  other.join();
  stage(5, "second thread's stream", threadHash, total);

  // Stage 6: everything once more from the default stream after a device
  // synchronisation, then a last kernel over all results.
  CHECK(cudaDeviceSynchronize());
  stage(6, "per-thread block sums", deviceHash(d[Partial2], kBlocks), total);
  combine<<<kBlocks, kThreads>>>(d[P2], d[T3a], d[A], kN);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  stage(6, "final combine", deviceHash(d[A], kN), total);
  std::printf("callbacks %d %d %d\n", seenSums.calls, seenBack.calls,
              seenPtds.calls);
  std::printf("final %016llx\n", (unsigned long long)total);

  for (auto &p : d)
    CHECK(cudaFree(p));
  for (cudaEvent_t e : {evChain, evSum, evScan, evLegacy, evPtds})
    CHECK(cudaEventDestroy(e));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaStreamDestroy(s3));
  CHECK(cudaFreeHost(hIn));
  CHECK(cudaFreeHost(hPartial));
  CHECK(cudaFreeHost(hBack));
  CHECK(cudaFreeHost(hPtds));
  return 0;
}
