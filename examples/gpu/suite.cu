// suite.cu - kernels with known results that exercise every construct the
// transformations must get right. test/gpu/gpu-test.cpp runs each one in its
// original form, sliced and as preemptible persistent thread blocks, and
// requires bit-identical outputs. Each kernel is extern "C" so the harness
// finds it (and its variants) by a plain name; the harness's table says how
// each is launched.
#include <cooperative_groups.h>
#include <cuda/barrier>
#include <cuda_fp16.h>
#include <cstdint>

namespace cg = cooperative_groups;

extern "C" {

// 1. Threads past n return before the block's barrier.
__global__ void early_return_before_sync(const int *in, int *out, int n) {
  __shared__ int tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  tile[threadIdx.x] = in[i] * 3;
  __syncthreads();
  int j = (threadIdx.x + 1) % blockDim.x;
  int src = blockIdx.x * blockDim.x + j < n ? tile[j] : -1;
  out[i] = tile[threadIdx.x] + src;
}

// 2. Every third block leaves at once; odd threads leave after the barrier.
__global__ void early_return_after_sync(const int *in, int *out) {
  __shared__ int tile[128];
  if (blockIdx.x % 3 == 0) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = -7;
    return;
  }
  tile[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  if (threadIdx.x & 1)
    return;
  out[blockIdx.x * blockDim.x + threadIdx.x] =
      tile[threadIdx.x] + tile[blockDim.x - 1 - threadIdx.x];
}

// 3-5. The barrier-reduction forms.
__global__ void syncthreads_or(const int *in, int *out) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  int r = __syncthreads_or(v % 97 == 0);
  out[blockIdx.x * blockDim.x + threadIdx.x] = r * 10 + (v & 7);
}

__global__ void syncthreads_and(const int *in, int *out) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  int r = __syncthreads_and(v % 5 != 0 || blockIdx.x % 2);
  out[blockIdx.x * blockDim.x + threadIdx.x] = r;
}

__global__ void syncthreads_count(const int *in, int *out) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  int c = __syncthreads_count(v & 1);
  out[blockIdx.x * blockDim.x + threadIdx.x] = c;
}

// 6. Cooperative groups block sync (barrier.sync).
__global__ void cg_block_sync(const float *in, float *out) {
  __shared__ float s[256];
  cg::thread_block b = cg::this_thread_block();
  s[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  b.sync();
  out[blockIdx.x * blockDim.x + threadIdx.x] =
      s[threadIdx.x] * 2.0f + s[(threadIdx.x + 17) % blockDim.x];
}

// 7. Named barriers with thread counts: two halves of the block synchronise
// separately (bar.sync 1, 64 / bar.sync 2, 64), then the whole block.
__global__ void named_barriers(const int *in, int *out) {
  __shared__ int s[128];
  int t = threadIdx.x;
  s[t] = in[blockIdx.x * 128 + t];
  if (t < 64)
    asm volatile("bar.sync 1, 64;" ::: "memory");
  else
    asm volatile("bar.sync 2, 64;" ::: "memory");
  int half = t < 64 ? s[63 - t] : s[64 + (127 - t)];
  __syncthreads();
  out[blockIdx.x * 128 + t] = half + s[127 - t];
}

// 8. 2D grid.
__global__ void grid2d(const float *in, float *out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h)
    return;
  out[y * w + x] = in[y * w + x] * 0.5f + (float)(blockIdx.x * 1000 + blockIdx.y);
}

// 9. 3D grid and 3D blocks.
__global__ void grid3d(int *out) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  int w = gridDim.x * blockDim.x, h = gridDim.y * blockDim.y;
  out[(z * h + y) * w + x] =
      (blockIdx.z << 20) | (blockIdx.y << 10) | blockIdx.x | (gridDim.z << 28);
}

// 10. Grid-stride loop (reads gridDim).
__global__ void grid_stride(int n, float a, const float *x, float *y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i];
}

// 11. Dynamic shared memory: reverse each block's slice.
__global__ void dyn_smem_reverse(const int *in, int *out) {
  extern __shared__ int buf[];
  int base = blockIdx.x * blockDim.x;
  buf[threadIdx.x] = in[base + threadIdx.x];
  __syncthreads();
  out[base + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

// 12. Warp shuffles: a warp sum.
__global__ void warp_shuffle(const int *in, int *out) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0)
    out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = v;
}

// 13. Warp votes.
__global__ void warp_vote(const int *in, unsigned *out) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  unsigned b = __ballot_sync(0xffffffffu, v & 1);
  int any = __any_sync(0xffffffffu, v % 13 == 0);
  int all = __all_sync(0xffffffffu, v >= 0);
  out[blockIdx.x * blockDim.x + threadIdx.x] = b ^ (any << 1) ^ all;
}

// 14. Integer atomics: a histogram (deterministic).
__global__ void atomic_histogram(const int *in, unsigned *hist, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    atomicAdd(&hist[in[i] & 63], 1u);
}

// 15. Tiled shared-memory GEMM, C = A * B, all n x n, n % 16 == 0.
__global__ void gemm_tiled(const float *A, const float *B, float *C, int n) {
  __shared__ float As[16][16], Bs[16][16];
  int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < n; k0 += 16) {
    As[threadIdx.y][threadIdx.x] = A[row * n + k0 + threadIdx.x];
    Bs[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < 16; ++k)
      acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
    __syncthreads();
  }
  C[row * n + col] = acc;
}

// 16. A non-inlined function with a barrier.
__device__ __noinline__ int neighbour_sum(int *s, int v) {
  s[threadIdx.x] = v;
  __syncthreads();
  int r = s[threadIdx.x] + s[(threadIdx.x + 1) % blockDim.x];
  __syncthreads();
  return r;
}

__global__ void func_with_barrier(const int *in, int *out) {
  __shared__ int s[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int r = neighbour_sum(s, in[i]);
  out[i] = neighbour_sum(s, r * 2);
}

// 17. mbarrier through libcu++'s block-scope barrier.
__global__ void mbarrier_phases(const int *in, int *out) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  __shared__ int s[128];
  if (threadIdx.x == 0)
    init(&bar, blockDim.x);
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = in[i];
  bar.arrive_and_wait();
  int v = s[(threadIdx.x + 5) % blockDim.x];
  bar.arrive_and_wait();
  s[threadIdx.x] = v * 3;
  bar.arrive_and_wait();
  out[i] = s[blockDim.x - 1 - threadIdx.x];
}

// 18. Hopper bulk copy (cp.async.bulk) into shared memory, completed through
// an mbarrier transaction count.
__global__ void bulk_copy(const int4 *in, int4 *out) {
  __shared__ alignas(128) int4 buf[64];
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  if (threadIdx.x == 0)
    init(&bar, blockDim.x);
  __syncthreads();
  cuda::memcpy_async(buf, in + blockIdx.x * 64, cuda::aligned_size_t<16>(sizeof(buf)), bar);
  bar.arrive_and_wait();
  int4 v = buf[63 - threadIdx.x];
  out[blockIdx.x * 64 + threadIdx.x] = make_int4(v.w, v.z, v.y, v.x + (int)blockIdx.x);
}

// 19. Block scan with barriers in a loop.
__global__ void block_scan(const int *in, int *out) {
  __shared__ int s[256];
  int t = threadIdx.x;
  s[t] = in[blockIdx.x * 256 + t];
  __syncthreads();
  for (int o = 1; o < 256; o <<= 1) {
    int v = t >= o ? s[t - o] : 0;
    __syncthreads();
    s[t] += v;
    __syncthreads();
  }
  out[blockIdx.x * 256 + t] = s[t];
}

// 20. Threads leave at different iterations of a loop with barriers.
__global__ void staggered_returns(const int *in, int *out) {
  __shared__ int s[128];
  int t = threadIdx.x;
  int acc = in[blockIdx.x * 128 + t];
  for (int it = 0; it < 8; ++it) {
    if (t % 8 < it) {
      out[blockIdx.x * 128 + t] = acc;
      return;
    }
    s[t] = acc;
    __syncthreads();
    acc += s[(t + 8) % 128] & 0xff;
    __syncthreads();
  }
  out[blockIdx.x * 128 + t] = acc;
}

// 21. exit instead of ret.
__global__ void thread_exit(const int *in, int *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i] + 1;
  if (in[i] & 1)
    asm volatile("exit;");
  out[i] = in[i] * 2;
}

// 22. No parameters: writes a __device__ array.
__device__ int noparam_out[64 * 32];
__global__ void no_params() {
  noparam_out[blockIdx.x * 32 + threadIdx.x] = blockIdx.x * 100 + threadIdx.x;
}

// 23. Shared-memory tree reduction with out-of-range threads contributing 0.
__global__ void block_reduce(const int *in, int *out, int n) {
  __shared__ int s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o)
      s[threadIdx.x] += s[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = s[0];
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A wgmma shared-memory matrix descriptor without swizzling: start address,
// leading and stride byte offsets (each in units of 16 bytes).
__device__ uint64_t wgmma_desc(const void *smem, unsigned lbo, unsigned sbo) {
  uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) |
         (uint64_t(sbo >> 4) << 32);
}
#endif

// 24. Hopper wgmma: one warpgroup multiplies a 64x16 and a 16x8 f16 tile
// from shared memory into f32 (m64n8k16), per block. Deterministic; the
// test compares the variants' bits with the original's.
__global__ void wgmma_tile(const __half *A, const __half *B, float *C) {
  __shared__ alignas(128) __half sA[64 * 16];
  __shared__ alignas(128) __half sB[16 * 8];
  int t = threadIdx.x;
  for (int i = t; i < 64 * 16; i += blockDim.x)
    sA[i] = A[blockIdx.x * 64 * 16 + i];
  for (int i = t; i < 16 * 8; i += blockDim.x)
    sB[i] = B[blockIdx.x * 16 * 8 + i];
  __syncthreads();
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  uint64_t da = wgmma_desc(sA, 128, 256), db = wgmma_desc(sB, 128, 256);
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %6, 0;\n"
               "wgmma.fence.sync.aligned;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
               "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n"
               "wgmma.commit_group.sync.aligned;\n"
               "wgmma.wait_group.sync.aligned 0;\n"
               "}\n"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
               : "l"(da), "l"(db), "r"(0)
               : "memory");
#endif
  float *out = C + (blockIdx.x * blockDim.x + t) * 4;
  out[0] = d0;
  out[1] = d1;
  out[2] = d2;
  out[3] = d3;
}

} // extern "C"
