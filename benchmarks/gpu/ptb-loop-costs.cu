// ptb-loop-costs.cu - where the time of a persistent-thread-block loop goes
// on microsecond-scale blocks. The same small block body (a load, a
// __syncthreads_or, a store: the shape of the GPU suite's short kernels)
// runs as an ordinary grid and inside persistent-loop variants that add one
// mechanism at a time: a static block order, the two barriers around each
// logical block, a leader that claims every block with an atomic and
// publishes it in shared memory, claims of several blocks, a claim made
// one block ahead, and Tally's own loop (guided chunks, one 64-bit atomic
// with the flag), with and without the next block of a chunk prepared
// during the body. Prints the median time of each against the ordinary
// grid. Built by scripts/prepare-device.sh, run by scripts/gpu.sh.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t E = (x);                                                       \
    if (E != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(E));             \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

// Iterations of an integer hash per thread before the store (0: none). With
// it the blocks run for microseconds on the SMs' integer pipes, as
// be-spin's do (the second table).
__constant__ unsigned Work;

// Nonzero: every block ends as be-spin's do, its first thread adding to two
// 64-bit counters that every block shares (fire-and-forget reductions at
// the L2). Whether a claim waits behind them is the fourth table's question.
__constant__ unsigned EndAtomics;
__device__ unsigned long long Shared[2];

__device__ __forceinline__ void body(const int *in, int *out, unsigned B) {
  unsigned I = B * blockDim.x + threadIdx.x;
  int V = in[I];
  int R = __syncthreads_or(V < 0);
  unsigned H = I;
  for (unsigned K = 0; K < Work; ++K)
    H = (H ^ (H >> 13)) * 0x5bd1e995u + K;
  out[I] = V + R + (Work ? int(H & 1) : 0);
  if (EndAtomics && threadIdx.x == 0) {
    atomicAdd(&Shared[0], (unsigned long long)V);
    atomicAdd(&Shared[1], 1ull);
  }
}

__global__ void original(const int *in, int *out) { body(in, out, blockIdx.x); }

// Static order, nothing else: block b runs on worker b % W.
__global__ void staticLoop(const int *in, int *out, unsigned N) {
  for (unsigned B = blockIdx.x; B < N; B += gridDim.x)
    body(in, out, B);
}

// Static order with the two barriers of the PTB loop.
__global__ void staticTwoBarriers(const int *in, int *out, unsigned N) {
  for (unsigned B = blockIdx.x; B < N; B += gridDim.x) {
    __syncthreads();
    body(in, out, B);
    __syncthreads();
  }
}

// A leader claims each block with an atomic and publishes it.
__global__ void claimEach(const int *in, int *out, unsigned N, unsigned *Next) {
  __shared__ unsigned Slot;
  while (true) {
    if (threadIdx.x == 0)
      Slot = atomicAdd(Next, 1u);
    __syncthreads();
    unsigned B = Slot;
    if (B >= N)
      return;
    body(in, out, B);
    __syncthreads();
  }
}

// Claims of C blocks, handed out one by one from shared memory.
__global__ void claimChunk(const int *in, int *out, unsigned N, unsigned *Next,
                           unsigned C) {
  __shared__ unsigned Slot, From, Left;
  if (threadIdx.x == 0)
    Left = 0;
  while (true) {
    if (threadIdx.x == 0) {
      if (Left == 0) {
        From = atomicAdd(Next, C);
        Left = From < N ? min(C, N - From) : 0;
      }
      if (Left) {
        Slot = From++;
        --Left;
      } else {
        Slot = ~0u;
      }
    }
    __syncthreads();
    unsigned B = Slot;
    if (B == ~0u)
      return;
    body(in, out, B);
    __syncthreads();
  }
}

// The next block is claimed while this one runs (double-buffered slot):
// one barrier per block, the claim's latency hidden by the body.
__global__ void claimAhead(const int *in, int *out, unsigned N, unsigned *Next) {
  __shared__ unsigned Slot[2];
  if (threadIdx.x == 0)
    Slot[0] = atomicAdd(Next, 1u);
  __syncthreads();
  for (unsigned P = 0;; P ^= 1) {
    unsigned B = Slot[P];
    if (B >= N)
      return;
    if (threadIdx.x == 0)
      Slot[P ^ 1] = atomicAdd(Next, 1u);
    body(in, out, B);
    __syncthreads();
  }
}

// Tally's loop as tally-opt emits it, in CUDA: guided chunks of at most C
// blocks claimed with one 64-bit atomic that also reads the flag, the
// leader's bookkeeping in shared memory, the index published in a slot.
__global__ void guided(const int *in, int *out, unsigned N,
                       unsigned long long *Ctrl, unsigned C) {
  __shared__ unsigned Slot, From, Left, Seen;
  bool Lead = threadIdx.x == 0;
  if (Lead)
    Left = Seen = 0;
  while (true) {
    if (Lead) {
      unsigned Idx = ~0u;
      if (Left == 0) {
        unsigned Want = min(C, max(1u, (N - Seen) / (2 * gridDim.x)));
        unsigned long long Old = atomicAdd(Ctrl, (unsigned long long)Want);
        unsigned Got = (unsigned)Old;
        if ((Old >> 32) == 0 && Got < N) {
          Seen = Got + Want;
          From = Got;
          Left = min(Want, N - Got);
        }
      }
      if (Left) {
        Idx = From++;
        --Left;
      }
      Slot = Idx;
    }
    __syncthreads();
    unsigned B = Slot;
    if (B == ~0u)
      return;
    body(in, out, B);
    __syncthreads();
  }
}

// The same, with the next block of a claimed chunk prepared during the
// body (a claimed block always runs, so this is safe): at the boundary the
// leader only copies it, unless the chunk is used up.
__global__ void guidedAhead(const int *in, int *out, unsigned N,
                            unsigned long long *Ctrl, unsigned C) {
  __shared__ unsigned Slot, From, Left, Seen, Pending;
  bool Lead = threadIdx.x == 0;
  if (Lead) {
    Left = Seen = 0;
    Pending = ~0u;
  }
  while (true) {
    if (Lead) {
      unsigned Idx = Pending;
      if (Idx == ~0u) {
        unsigned Want = min(C, max(1u, (N - Seen) / (2 * gridDim.x)));
        unsigned long long Old = atomicAdd(Ctrl, (unsigned long long)Want);
        unsigned Got = (unsigned)Old;
        if ((Old >> 32) == 0 && Got < N) {
          Seen = Got + Want;
          Idx = Got;
          From = Got + 1;
          Left = min(Want, N - Got) - 1;
        }
      }
      Slot = Idx;
    }
    __syncthreads();
    unsigned B = Slot;
    if (B == ~0u)
      return;
    if (Lead) {
      if (Left) {
        Pending = From++;
        --Left;
      } else {
        Pending = ~0u;
      }
    }
    body(in, out, B);
    __syncthreads();
  }
}

template <typename F> float timeIt(F Launch, unsigned *Next) {
  cudaEvent_t A, B;
  CK(cudaEventCreate(&A));
  CK(cudaEventCreate(&B));
  std::vector<float> T;
  for (int R = 0; R < 51; ++R) {
    if (Next)
      CK(cudaMemset(Next, 0, 16));
    CK(cudaEventRecord(A));
    Launch();
    CK(cudaEventRecord(B));
    CK(cudaEventSynchronize(B));
    float Ms;
    CK(cudaEventElapsedTime(&Ms, A, B));
    if (R)
      T.push_back(Ms * 1000);
  }
  CK(cudaGetLastError());
  std::sort(T.begin(), T.end());
  return T[T.size() / 2];
}

static void table(const cudaDeviceProp &P, const std::vector<unsigned> &Sizes) {
  const unsigned Threads = 256;
  std::printf("%-34s %8s %10s %8s\n", "variant", "blocks", "median_us", "ratio");
  for (unsigned N : Sizes) {
    int *In, *Out;
    unsigned *Next;
    CK(cudaMalloc(&In, size_t(N) * Threads * 4));
    CK(cudaMalloc(&Out, size_t(N) * Threads * 4));
    CK(cudaMalloc(&Next, 16));
    CK(cudaMemset(In, 1, size_t(N) * Threads * 4));
    int PerSM = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&PerSM, claimEach, Threads, 0));
    unsigned W = PerSM * P.multiProcessorCount;
    float Base = timeIt([&] { original<<<N, Threads>>>(In, Out); }, nullptr);
    auto Row = [&](const char *Name, float T) {
      std::printf("%-34s %8u %10.1f %8.3f\n", Name, N, T, T / Base);
    };
    Row("original", Base);
    Row("static order", timeIt([&] { staticLoop<<<W, Threads>>>(In, Out, N); }, nullptr));
    Row("static + 2 barriers",
        timeIt([&] { staticTwoBarriers<<<W, Threads>>>(In, Out, N); }, nullptr));
    Row("claim each block (atomic)",
        timeIt([&] { claimEach<<<W, Threads>>>(In, Out, N, Next); }, Next));
    for (unsigned C : {2u, 4u, 8u}) {
      char Name[64];
      std::snprintf(Name, sizeof Name, "claim chunks of %u", C);
      Row(Name, timeIt([&] { claimChunk<<<W, Threads>>>(In, Out, N, Next, C); }, Next));
    }
    Row("claim one block ahead",
        timeIt([&] { claimAhead<<<W, Threads>>>(In, Out, N, Next); }, Next));
    auto *Ctrl = reinterpret_cast<unsigned long long *>(Next);
    for (unsigned C : {1u, 8u}) {
      char Name[64];
      std::snprintf(Name, sizeof Name, "tally: guided, at most %u", C);
      Row(Name, timeIt([&] { guided<<<W, Threads>>>(In, Out, N, Ctrl, C); }, Next));
      std::snprintf(Name, sizeof Name, "tally: guided, at most %u, ahead", C);
      Row(Name, timeIt([&] { guidedAhead<<<W, Threads>>>(In, Out, N, Ctrl, C); }, Next));
    }
    CK(cudaFree(In));
    CK(cudaFree(Out));
    CK(cudaFree(Next));
  }
}

int main() {
  cudaDeviceProp P;
  CK(cudaGetDeviceProperties(&P, 0));
  std::printf("device: %s, %d SMs\n", P.name, P.multiProcessorCount);
  table(P, {1920u, 30720u, 491520u});
  // Blocks of about 10 and 2 us (the hash calibrated on the original's
  // waves), 8 waves: the claim's latency against the body's length.
  int PerSM = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&PerSM, claimEach, 256, 0));
  unsigned W = PerSM * P.multiProcessorCount;
  int *In, *Out;
  CK(cudaMalloc(&In, size_t(16 * W) * 256 * 4));
  CK(cudaMalloc(&Out, size_t(16 * W) * 256 * 4));
  CK(cudaMemset(In, 1, size_t(16 * W) * 256 * 4));
  // A wave's time: the original's 16 waves less its 8, over 8 (the launch's
  // own latency cancels).
  auto WaveUs = [&] {
    float T8 = timeIt([&] { original<<<8 * W, 256>>>(In, Out); }, nullptr);
    float T16 = timeIt([&] { original<<<16 * W, 256>>>(In, Out); }, nullptr);
    return (T16 - T8) / 8;
  };
  // The 10 us blocks twice: without and with the end-of-block atomics.
  for (auto [Us, Atomics] : {std::pair{10.0, 0u}, {2.0, 0u}, {10.0, 1u}}) {
    CK(cudaMemcpyToSymbol(EndAtomics, &Atomics, sizeof Atomics));
    unsigned K = 256;
    for (int Round = 0; Round < 4; ++Round) {
      CK(cudaMemcpyToSymbol(Work, &K, sizeof K));
      K = std::max(1u, unsigned(K * Us / std::max(0.05f, WaveUs())));
    }
    CK(cudaMemcpyToSymbol(Work, &K, sizeof K));
    float T = WaveUs();
    std::printf("\nblocks of %.1f us (hash of %u steps; %u blocks a wave), 8 waves%s:\n", T,
                K, W, Atomics ? ", each block ending with two atomics on shared counters" : "");
    table(P, {8 * W});
  }
  CK(cudaFree(In));
  CK(cudaFree(Out));
  return 0;
}
