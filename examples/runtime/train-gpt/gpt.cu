// gpt.cu - a small GPT trained with CUDA kernels of its own and cuBLAS
// GEMMs: the training program the Tally runtime is checked with.
//
// The model: token and position embeddings, L pre-norm transformer blocks
// (layernorm, QKV projection, causal attention with scores by batched GEMM
// and a softmax kernel, output projection, residual, layernorm, MLP with
// GELU, residual), a final layernorm and an untied LM head; cross-entropy
// loss, the full backward pass and AdamW. Every kernel here goes through
// tally-opt; cuBLAS's do not (they run as they are under the runtime).
//
// Determinism: no float atomics and no order-dependent reductions; every
// reduction (layernorm statistics, softmax, bias and layernorm-weight
// gradients, embedding gradients, the loss) sums in a fixed order, and
// cuBLAS runs in pedantic math with atomics disallowed on one stream. The
// printed loss bits and parameter checksum are the same on every run on the
// same GPU model.
#include "../common.h"

#include <cmath>
#include <csignal>
#include <cublas_v2.h>
#include <string>
#include <vector>

#define CHECK_CUBLAS(call)                                                     \
  do {                                                                         \
    cublasStatus_t st_ = (call);                                               \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                        \
      std::fprintf(stderr, "%s:%d: %s failed: cuBLAS status %d\n", __FILE__,   \
                   __LINE__, #call, (int)st_);                                 \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

constexpr int kMaxBlock = 256;

// Sum over the block in a fixed tree order (blockDim.x a power of two).
// Every thread of the block calls it; it returns the sum to all of them.
__device__ __forceinline__ float blockSum(float v, float *sh) {
  int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (t < o)
      sh[t] += sh[t + o];
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

__device__ __forceinline__ float blockMax(float v, float *sh) {
  int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (t < o)
      sh[t] = fmaxf(sh[t], sh[t + o]);
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

__global__ void encoder_forward(float *out, const int *tokens, const float *wte,
                                const float *wpe, int N, int T, int C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N * C)
    return;
  int n = i / C, c = i % C;
  out[i] = wte[tokens[n] * C + c] + wpe[(n % T) * C + c];
}

// dwte[v][c] = sum over positions n with tokens[n] == v of dout[n][c], in
// order of n: one thread per (v, c), no atomics.
__global__ void encoder_backward_wte(float *dwte, const float *dout,
                                     const int *tokens, int N, int V, int C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= V * C)
    return;
  int v = i / C, c = i % C;
  float acc = 0;
  for (int n = 0; n < N; ++n)
    if (tokens[n] == v)
      acc += dout[n * C + c];
  dwte[i] += acc;
}

__global__ void encoder_backward_wpe(float *dwpe, const float *dout, int B,
                                     int T, int C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * C)
    return;
  float acc = 0;
  for (int b = 0; b < B; ++b)
    acc += dout[b * T * C + i];
  dwpe[i] += acc;
}

// One block per row.
__global__ void layernorm_forward(float *out, float *mean, float *rstd,
                                  const float *inp, const float *w,
                                  const float *b, int C) {
  __shared__ float sh[kMaxBlock];
  const float *x = inp + (size_t)blockIdx.x * C;
  float s = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    s += x[c];
  float m = blockSum(s, sh) / C;
  float v = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    v += (x[c] - m) * (x[c] - m);
  float r = rsqrtf(blockSum(v, sh) / C + 1e-5f);
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    out[(size_t)blockIdx.x * C + c] = (x[c] - m) * r * w[c] + b[c];
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = r;
  }
}

// dinp += the layernorm's input gradient; one block per row.
__global__ void layernorm_backward_dx(float *dinp, const float *dout,
                                      const float *inp, const float *mean,
                                      const float *rstd, const float *w,
                                      int C) {
  __shared__ float sh[kMaxBlock];
  size_t row = (size_t)blockIdx.x * C;
  float m = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sd = 0, sdn = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float dn = w[c] * dout[row + c];
    sd += dn;
    sdn += dn * (inp[row + c] - m) * r;
  }
  float meanD = blockSum(sd, sh) / C;
  float meanDN = blockSum(sdn, sh) / C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float norm = (inp[row + c] - m) * r;
    float dn = w[c] * dout[row + c];
    dinp[row + c] += (dn - meanD - norm * meanDN) * r;
  }
}

// The layernorm's weight and bias gradients: one thread per channel,
// rows summed in order.
__global__ void layernorm_backward_dwb(float *dw, float *db, const float *dout,
                                       const float *inp, const float *mean,
                                       const float *rstd, int N, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  float aw = 0, ab = 0;
  for (int n = 0; n < N; ++n) {
    float g = dout[(size_t)n * C + c];
    aw += g * (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
    ab += g;
  }
  dw[c] += aw;
  db[c] += ab;
}

__global__ void add_bias(float *out, const float *bias, int N, int OC) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N * OC)
    out[i] += bias[i % OC];
}

// db[o] += sum over rows of dout[n][o], in order.
__global__ void bias_backward(float *db, const float *dout, int N, int OC) {
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC)
    return;
  float acc = 0;
  for (int n = 0; n < N; ++n)
    acc += dout[(size_t)n * OC + o];
  db[o] += acc;
}

// qkv (B, T, 3, NH, HS) to q, k, v (B, NH, T, HS).
__global__ void permute_qkv(float *q, float *k, float *v, const float *qkv,
                            int B, int T, int NH, int HS) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * NH * T * HS)
    return;
  int d = i % HS, t = (i / HS) % T, h = (i / (HS * T)) % NH,
      b = i / (HS * T * NH);
  int C = NH * HS;
  size_t src = ((size_t)(b * T + t)) * 3 * C + h * HS + d;
  q[i] = qkv[src];
  k[i] = qkv[src + C];
  v[i] = qkv[src + 2 * C];
}

__global__ void permute_qkv_backward(float *dqkv, const float *dq,
                                     const float *dk, const float *dv, int B,
                                     int T, int NH, int HS) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * NH * T * HS)
    return;
  int d = i % HS, t = (i / HS) % T, h = (i / (HS * T)) % NH,
      b = i / (HS * T * NH);
  int C = NH * HS;
  size_t dst = ((size_t)(b * T + t)) * 3 * C + h * HS + d;
  dqkv[dst] = dq[i];
  dqkv[dst + C] = dk[i];
  dqkv[dst + 2 * C] = dv[i];
}

// y (B, NH, T, HS) to out (B, T, NH * HS), and back.
__global__ void unpermute(float *out, const float *y, int B, int T, int NH,
                          int HS) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * NH * T * HS)
    return;
  int d = i % HS, t = (i / HS) % T, h = (i / (HS * T)) % NH,
      b = i / (HS * T * NH);
  out[((size_t)(b * T + t)) * NH * HS + h * HS + d] = y[i];
}

__global__ void unpermute_backward(float *dy, const float *dout, int B, int T,
                                   int NH, int HS) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * NH * T * HS)
    return;
  int d = i % HS, t = (i / HS) % T, h = (i / (HS * T)) % NH,
      b = i / (HS * T * NH);
  dy[i] = dout[((size_t)(b * T + t)) * NH * HS + h * HS + d];
}

// att[row] = causal softmax of scale * preatt[row]; one block per (b, h, t)
// row of T scores (row t sees keys 0..t).
__global__ void softmax_causal_forward(float *att, const float *preatt,
                                       float scale, int T) {
  __shared__ float sh[kMaxBlock];
  int t = blockIdx.x % T;
  size_t row = (size_t)blockIdx.x * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    mx = fmaxf(mx, scale * preatt[row + j]);
  mx = blockMax(mx, sh);
  float s = 0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    s += expf(scale * preatt[row + j] - mx);
  float inv = 1.0f / blockSum(s, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    att[row + j] = j <= t ? expf(scale * preatt[row + j] - mx) * inv : 0.0f;
}

// dpreatt = scale * att * (datt - sum(att * datt)) over the causal part.
__global__ void softmax_causal_backward(float *dpreatt, const float *datt,
                                        const float *att, float scale, int T) {
  __shared__ float sh[kMaxBlock];
  int t = blockIdx.x % T;
  size_t row = (size_t)blockIdx.x * T;
  float s = 0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    s += att[row + j] * datt[row + j];
  s = blockSum(s, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    dpreatt[row + j] =
        j <= t ? scale * att[row + j] * (datt[row + j] - s) : 0.0f;
}

__global__ void residual_forward(float *out, const float *a, const float *b,
                                 int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = a[i] + b[i];
}

#define GELU_SCALE 0.7978845608028654f // sqrt(2 / pi)

__global__ void gelu_forward(float *out, const float *inp, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float x = inp[i];
  out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_backward(float *dinp, const float *inp, const float *dout,
                              int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float x = inp[i];
  float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
  float sech2 = 1.0f - th * th;
  float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE *
                                         (1.0f + 3.0f * 0.044715f * x * x);
  dinp[i] = local * dout[i];
}

// Per row: losses[n] = -log softmax(logits[n])[target], and dlogits =
// (softmax - onehot) / N (the gradient of the mean loss). One block per row.
__global__ void crossentropy_forward_backward(float *losses, float *dlogits,
                                              const float *logits,
                                              const int *targets, int N,
                                              int V) {
  __shared__ float sh[kMaxBlock];
  size_t row = (size_t)blockIdx.x * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x)
    mx = fmaxf(mx, logits[row + j]);
  mx = blockMax(mx, sh);
  float s = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x)
    s += expf(logits[row + j] - mx);
  s = blockSum(s, sh);
  int target = targets[blockIdx.x];
  if (threadIdx.x == 0)
    losses[blockIdx.x] = logf(s) + mx - logits[row + target];
  if (!dlogits)
    return;
  float inv = 1.0f / s;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float p = expf(logits[row + j] - mx) * inv;
    dlogits[row + j] = (p - (j == target ? 1.0f : 0.0f)) / N;
  }
}

// The mean of the per-row losses, in double, in a fixed order. One block.
__global__ void loss_mean(double *out, const float *losses, int N) {
  __shared__ double sh[kMaxBlock];
  double s = 0;
  for (int n = threadIdx.x; n < N; n += blockDim.x)
    s += losses[n];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o)
      sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    *out = sh[0] / N;
}

__global__ void adamw(float *p, const float *g, float *m, float *v, long n,
                      float lr, float b1, float b2, float eps, float wd,
                      float b1corr, float b2corr) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float gi = g[i];
  float mi = b1 * m[i] + (1.0f - b1) * gi;
  float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  float mh = mi / b1corr, vh = vi / b2corr;
  p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
}

// ---------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------

namespace {

struct Config {
  int V = 512, C = 128, NH = 4, T = 64, B = 8, L = 2;
  int HS() const { return C / NH; }
  int N() const { return B * T; }
};

struct Tensor {
  std::string name;
  size_t offset, size;
};

// The parameters (and their gradients) live in one flat buffer each.
struct Layout {
  std::vector<Tensor> tensors;
  size_t total = 0;
  size_t add(const std::string &name, size_t size) {
    tensors.push_back({name, total, size});
    total += size;
    return tensors.back().offset;
  }
};

struct LayerParams {
  size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb,
      fcprojw, fcprojb;
};

struct LayerActs {
  float *res; // the block's input (the residual stream)
  float *ln1, *ln1m, *ln1r, *qkv, *q, *k, *v, *preatt, *att, *y, *atty, *res2;
  float *ln2, *ln2m, *ln2r, *fch, *fchg;
};

unsigned gridFor(long n, int block = 256) {
  return (unsigned)((n + block - 1) / block);
}

class Gpt {
public:
  explicit Gpt(const Config &cfg) : cfg(cfg) {
    int V = cfg.V, C = cfg.C, T = cfg.T;
    wte = layout.add("wte", (size_t)V * C);
    wpe = layout.add("wpe", (size_t)T * C);
    for (int l = 0; l < cfg.L; ++l) {
      std::string p = "h" + std::to_string(l) + ".";
      LayerParams lp;
      lp.ln1w = layout.add(p + "ln1w", C);
      lp.ln1b = layout.add(p + "ln1b", C);
      lp.qkvw = layout.add(p + "qkvw", (size_t)3 * C * C);
      lp.qkvb = layout.add(p + "qkvb", 3 * C);
      lp.attprojw = layout.add(p + "attprojw", (size_t)C * C);
      lp.attprojb = layout.add(p + "attprojb", C);
      lp.ln2w = layout.add(p + "ln2w", C);
      lp.ln2b = layout.add(p + "ln2b", C);
      lp.fcw = layout.add(p + "fcw", (size_t)4 * C * C);
      lp.fcb = layout.add(p + "fcb", 4 * C);
      lp.fcprojw = layout.add(p + "fcprojw", (size_t)4 * C * C);
      lp.fcprojb = layout.add(p + "fcprojb", C);
      layers.push_back(lp);
    }
    lnfw = layout.add("lnfw", C);
    lnfb = layout.add("lnfb", C);
    lmw = layout.add("lmw", (size_t)V * C);

    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK_CUBLAS(cublasCreate(&blas));
    CHECK_CUBLAS(cublasSetStream(blas, stream));
    CHECK_CUBLAS(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH));
    CHECK_CUBLAS(cublasSetAtomicsMode(blas, CUBLAS_ATOMICS_NOT_ALLOWED));

    size_t P = layout.total;
    params = alloc(P);
    grads = alloc(P);
    mom = alloc(P);
    var = alloc(P);
    CHECK(cudaMemset(mom, 0, P * 4));
    CHECK(cudaMemset(var, 0, P * 4));
    initParams();

    size_t N = cfg.N(), BNHTT = (size_t)cfg.B * cfg.NH * T * T;
    CHECK(cudaMalloc(&tokens, N * sizeof(int)));
    CHECK(cudaMalloc(&targets, N * sizeof(int)));
    CHECK(cudaMallocHost(&hostTokens, 2 * N * sizeof(int)));
    CHECK(cudaMallocHost(&hostLoss, sizeof(double)));
    CHECK(cudaMalloc(&lossDev, sizeof(double)));
    for (int l = 0; l <= cfg.L; ++l)
      res.push_back(alloc(N * C));
    for (int l = 0; l < cfg.L; ++l) {
      LayerActs a;
      a.res = res[l];
      a.ln1 = alloc(N * C), a.ln1m = alloc(N), a.ln1r = alloc(N);
      a.qkv = alloc(N * 3 * C), a.q = alloc(N * C), a.k = alloc(N * C),
      a.v = alloc(N * C);
      a.preatt = alloc(BNHTT), a.att = alloc(BNHTT), a.y = alloc(N * C);
      a.atty = alloc(N * C), a.res2 = alloc(N * C);
      a.ln2 = alloc(N * C), a.ln2m = alloc(N), a.ln2r = alloc(N);
      a.fch = alloc(N * 4 * C), a.fchg = alloc(N * 4 * C);
      acts.push_back(a);
    }
    lnf = alloc(N * C), lnfm = alloc(N), lnfr = alloc(N);
    logits = alloc(N * V), losses = alloc(N), dlogits = alloc(N * V);
    dres = alloc(N * C), dC1 = alloc(N * C), dC2 = alloc(N * C);
    d4C1 = alloc(N * 4 * C), d4C2 = alloc(N * 4 * C), dqkv = alloc(N * 3 * C);
    dq = alloc(N * C), dk = alloc(N * C), dv = alloc(N * C), dy = alloc(N * C);
    datt = alloc(BNHTT), dpreatt = alloc(BNHTT);
  }

  ~Gpt() {
    for (float *p : owned)
      CHECK(cudaFree(p));
    CHECK(cudaFree(tokens));
    CHECK(cudaFree(targets));
    CHECK(cudaFree(lossDev));
    CHECK(cudaFreeHost(hostTokens));
    CHECK(cudaFreeHost(hostLoss));
    CHECK_CUBLAS(cublasDestroy(blas));
    CHECK(cudaStreamDestroy(stream));
  }

  const Layout &paramLayout() const { return layout; }
  float *paramData() { return params; }
  float *gradData() { return grads; }
  cudaStream_t cudaStream() const { return stream; }

  // Copies a batch (N inputs, then N targets) to the device.
  void setBatch(const std::vector<int> &inputs, const std::vector<int> &tgts) {
    size_t N = cfg.N();
    std::memcpy(hostTokens, inputs.data(), N * sizeof(int));
    std::memcpy(hostTokens + N, tgts.data(), N * sizeof(int));
    CHECK(cudaMemcpyAsync(tokens, hostTokens, N * sizeof(int),
                          cudaMemcpyHostToDevice, stream));
    CHECK(cudaMemcpyAsync(targets, hostTokens + N, N * sizeof(int),
                          cudaMemcpyHostToDevice, stream));
  }

  // The forward pass and the loss; with `backward`, the gradients too.
  float step(bool backward) {
    forward(backward);
    if (backward)
      this->backward();
    loss_mean<<<1, kMaxBlock, 0, stream>>>(lossDev, losses, cfg.N());
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(hostLoss, lossDev, sizeof(double),
                          cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    lastLossDouble = *hostLoss;
    return (float)*hostLoss;
  }
  double lastLoss() const { return lastLossDouble; }

  void update(int t, float lr) {
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.01f;
    float b1corr = 1.0f - std::pow(b1, (float)t),
          b2corr = 1.0f - std::pow(b2, (float)t);
    long n = (long)layout.total;
    adamw<<<gridFor(n), 256, 0, stream>>>(params, grads, mom, var, n, lr, b1,
                                          b2, eps, wd, b1corr, b2corr);
    CHECK_LAUNCH();
  }

private:
  float *alloc(size_t n) {
    float *p;
    CHECK(cudaMalloc(&p, n * sizeof(float)));
    owned.push_back(p);
    return p;
  }

  // Deterministic initialisation: uniform with std 0.02 (residual
  // projections scaled by 1/sqrt(2L)), layernorms at 1 and 0, biases 0.
  void initParams() {
    std::vector<float> h(layout.total, 0.0f);
    uint64_t s = 0x2545f4914f6cdd1dull;
    auto uniform = [&s]() {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      return (float)((s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    };
    const float a = 0.02f * std::sqrt(3.0f);
    for (const Tensor &t : layout.tensors) {
      const std::string &n = t.name;
      bool isLnWeight = n.find("ln") != std::string::npos && n.back() == 'w';
      bool isBias = n.back() == 'b';
      bool isResidualProj = n.find("proj") != std::string::npos;
      float scale = isResidualProj ? a / std::sqrt(2.0f * cfg.L) : a;
      for (size_t i = 0; i < t.size; ++i)
        h[t.offset + i] = isLnWeight ? 1.0f : isBias ? 0.0f : scale * uniform();
    }
    CHECK(cudaMemcpy(params, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }

  // out (N, OC) = inp (N, C) @ w (OC, C)^T + bias (row-major, as PyTorch's
  // Linear); cuBLAS sees the transposes (column-major).
  void matmulForward(float *out, const float *inp, const float *w,
                     const float *bias, int N, int C, int OC) {
    const float one = 1, zero = 0;
    CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w,
                             C, inp, C, &zero, out, OC));
    if (bias) {
      add_bias<<<gridFor((long)N * OC), 256, 0, stream>>>(out, bias, N, OC);
      CHECK_LAUNCH();
    }
  }

  // dinp = dout @ w; dw += dout^T @ inp; db += column sums of dout.
  void matmulBackward(float *dinp, float *dw, float *db, const float *dout,
                      const float *inp, const float *w, int N, int C, int OC) {
    const float one = 1, zero = 0;
    CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, w,
                             C, dout, OC, &zero, dinp, C));
    CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one,
                             inp, C, dout, OC, &one, dw, C));
    if (db) {
      bias_backward<<<gridFor(OC, 128), 128, 0, stream>>>(db, dout, N, OC);
      CHECK_LAUNCH();
    }
  }

  void layernormForward(float *out, float *m, float *r, const float *inp,
                        size_t w, size_t b) {
    layernorm_forward<<<cfg.N(), 128, 0, stream>>>(out, m, r, inp, params + w,
                                                   params + b, cfg.C);
    CHECK_LAUNCH();
  }

  // dinp += the input gradient; the weight and bias gradients.
  void layernormBackward(float *dinp, const float *dout, const float *inp,
                         const float *m, const float *r, size_t w, size_t b) {
    layernorm_backward_dx<<<cfg.N(), 128, 0, stream>>>(dinp, dout, inp, m, r,
                                                       params + w, cfg.C);
    CHECK_LAUNCH();
    layernorm_backward_dwb<<<gridFor(cfg.C, 32), 32, 0, stream>>>(
        grads + w, grads + b, dout, inp, m, r, cfg.N(), cfg.C);
    CHECK_LAUNCH();
  }

  float attScale() const { return 1.0f / std::sqrt((float)cfg.HS()); }

  // atty = causal self-attention of qkv.
  void attentionForward(LayerActs &a) {
    int B = cfg.B, T = cfg.T, NH = cfg.NH, HS = cfg.HS(), N = cfg.N(),
        C = cfg.C;
    permute_qkv<<<gridFor((long)N * C), 256, 0, stream>>>(a.q, a.k, a.v, a.qkv,
                                                          B, T, NH, HS);
    CHECK_LAUNCH();
    const float one = 1, zero = 0;
    // preatt[b,h] (T x T, row-major: query row, key column) = q k^T.
    CHECK_CUBLAS(cublasSgemmStridedBatched(
        blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &one, a.k, HS,
        (long long)T * HS, a.q, HS, (long long)T * HS, &zero, a.preatt, T,
        (long long)T * T, B * NH));
    softmax_causal_forward<<<B * NH * T, 64, 0, stream>>>(a.att, a.preatt,
                                                          attScale(), T);
    CHECK_LAUNCH();
    // y[b,h] (T x HS) = att v.
    CHECK_CUBLAS(cublasSgemmStridedBatched(
        blas, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &one, a.v, HS,
        (long long)T * HS, a.att, T, (long long)T * T, &zero, a.y, HS,
        (long long)T * HS, B * NH));
    unpermute<<<gridFor((long)N * C), 256, 0, stream>>>(a.atty, a.y, B, T, NH,
                                                        HS);
    CHECK_LAUNCH();
  }

  // dqkv from datty (in dC1).
  void attentionBackward(LayerActs &a, const float *datty) {
    int B = cfg.B, T = cfg.T, NH = cfg.NH, HS = cfg.HS(), N = cfg.N(),
        C = cfg.C;
    const float one = 1, zero = 0;
    long long sTH = (long long)T * HS, sTT = (long long)T * T;
    unpermute_backward<<<gridFor((long)N * C), 256, 0, stream>>>(dy, datty, B,
                                                                 T, NH, HS);
    CHECK_LAUNCH();
    // datt = dy v^T; dv = att^T dy.
    CHECK_CUBLAS(cublasSgemmStridedBatched(blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T,
                                           HS, &one, a.v, HS, sTH, dy, HS, sTH,
                                           &zero, datt, T, sTT, B * NH));
    CHECK_CUBLAS(cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, HS,
                                           T, T, &one, dy, HS, sTH, a.att, T,
                                           sTT, &zero, dv, HS, sTH, B * NH));
    softmax_causal_backward<<<B * NH * T, 64, 0, stream>>>(dpreatt, datt, a.att,
                                                           attScale(), T);
    CHECK_LAUNCH();
    // dq = dpreatt k; dk = dpreatt^T q.
    CHECK_CUBLAS(cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N, HS,
                                           T, T, &one, a.k, HS, sTH, dpreatt, T,
                                           sTT, &zero, dq, HS, sTH, B * NH));
    CHECK_CUBLAS(cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, HS,
                                           T, T, &one, a.q, HS, sTH, dpreatt, T,
                                           sTT, &zero, dk, HS, sTH, B * NH));
    permute_qkv_backward<<<gridFor((long)N * C), 256, 0, stream>>>(
        dqkv, dq, dk, dv, B, T, NH, HS);
    CHECK_LAUNCH();
  }

  void forward(bool withGrad) {
    int N = cfg.N(), C = cfg.C, V = cfg.V;
    encoder_forward<<<gridFor((long)N * C), 256, 0, stream>>>(
        res[0], tokens, params + wte, params + wpe, N, cfg.T, C);
    CHECK_LAUNCH();
    for (int l = 0; l < cfg.L; ++l) {
      LayerActs &a = acts[l];
      const LayerParams &p = layers[l];
      layernormForward(a.ln1, a.ln1m, a.ln1r, a.res, p.ln1w, p.ln1b);
      matmulForward(a.qkv, a.ln1, params + p.qkvw, params + p.qkvb, N, C,
                    3 * C);
      attentionForward(a);
      matmulForward(dC1, a.atty, params + p.attprojw, params + p.attprojb, N, C,
                    C);
      residual_forward<<<gridFor((long)N * C), 256, 0, stream>>>(a.res2, a.res,
                                                                 dC1, N * C);
      CHECK_LAUNCH();
      layernormForward(a.ln2, a.ln2m, a.ln2r, a.res2, p.ln2w, p.ln2b);
      matmulForward(a.fch, a.ln2, params + p.fcw, params + p.fcb, N, C, 4 * C);
      gelu_forward<<<gridFor((long)N * 4 * C), 256, 0, stream>>>(a.fchg, a.fch,
                                                                 N * 4 * C);
      CHECK_LAUNCH();
      matmulForward(dC1, a.fchg, params + p.fcprojw, params + p.fcprojb, N,
                    4 * C, C);
      residual_forward<<<gridFor((long)N * C), 256, 0, stream>>>(
          res[l + 1], a.res2, dC1, N * C);
      CHECK_LAUNCH();
    }
    layernormForward(lnf, lnfm, lnfr, res[cfg.L], lnfw, lnfb);
    matmulForward(logits, lnf, params + lmw, nullptr, N, C, V);
    crossentropy_forward_backward<<<N, 256, 0, stream>>>(
        losses, withGrad ? dlogits : nullptr, logits, targets, N, V);
    CHECK_LAUNCH();
  }

  void backward() {
    int N = cfg.N(), C = cfg.C, V = cfg.V;
    CHECK(cudaMemsetAsync(grads, 0, layout.total * sizeof(float), stream));
    CHECK(cudaMemsetAsync(dres, 0, (size_t)N * C * sizeof(float), stream));
    matmulBackward(dC1, grads + lmw, nullptr, dlogits, lnf, params + lmw, N, C,
                   V);
    layernormBackward(dres, dC1, res[cfg.L], lnfm, lnfr, lnfw, lnfb);
    for (int l = cfg.L - 1; l >= 0; --l) {
      LayerActs &a = acts[l];
      const LayerParams &p = layers[l];
      // dres holds the gradient of the block's output (res[l + 1]).
      matmulBackward(d4C1, grads + p.fcprojw, grads + p.fcprojb, dres, a.fchg,
                     params + p.fcprojw, N, 4 * C, C);
      gelu_backward<<<gridFor((long)N * 4 * C), 256, 0, stream>>>(
          d4C2, a.fch, d4C1, N * 4 * C);
      CHECK_LAUNCH();
      matmulBackward(dC1, grads + p.fcw, grads + p.fcb, d4C2, a.ln2,
                     params + p.fcw, N, C, 4 * C);
      layernormBackward(dres, dC1, a.res2, a.ln2m, a.ln2r, p.ln2w, p.ln2b);
      // dres: the gradient of res2.
      matmulBackward(dC2, grads + p.attprojw, grads + p.attprojb, dres, a.atty,
                     params + p.attprojw, N, C, C);
      attentionBackward(a, dC2);
      matmulBackward(dC1, grads + p.qkvw, grads + p.qkvb, dqkv, a.ln1,
                     params + p.qkvw, N, C, 3 * C);
      layernormBackward(dres, dC1, a.res, a.ln1m, a.ln1r, p.ln1w, p.ln1b);
      // dres: the gradient of the block's input.
    }
    encoder_backward_wte<<<gridFor((long)V * C), 256, 0, stream>>>(
        grads + wte, dres, tokens, N, V, C);
    CHECK_LAUNCH();
    encoder_backward_wpe<<<gridFor((long)cfg.T * C), 256, 0, stream>>>(
        grads + wpe, dres, cfg.B, cfg.T, C);
    CHECK_LAUNCH();
  }

  Config cfg;
  Layout layout;
  size_t wte, wpe, lnfw, lnfb, lmw;
  std::vector<LayerParams> layers;
  cudaStream_t stream;
  cublasHandle_t blas;
  float *params, *grads, *mom, *var;
  int *tokens, *targets, *hostTokens;
  double *hostLoss, *lossDev, lastLossDouble = 0;
  std::vector<float *> owned, res;
  std::vector<LayerActs> acts;
  float *lnf, *lnfm, *lnfr, *logits, *losses, *dlogits;
  float *dres, *dC1, *dC2, *d4C1, *d4C2, *dqkv, *dq, *dk, *dv, *dy, *datt,
      *dpreatt;
};

// A synthetic token stream with structure to learn, from a fixed LCG: it
// uses the first 64 tokens of the vocabulary (the unigram is learnt in a few
// steps), and each token depends on the two before it plus a little noise
// (one of 4 successors), which attention can pick up.
std::vector<int> makeData(int V, size_t len) {
  const uint32_t used = V < 64 ? V : 64;
  std::vector<int> d(len);
  uint32_t s = 20240601u;
  d[0] = 1, d[1] = 2;
  for (size_t i = 2; i < len; ++i) {
    s = s * 1664525u + 1013904223u;
    d[i] = (int)((d[i - 1] * 5u + d[i - 2] * 3u + 7u + (s >> 30)) % used);
  }
  return d;
}

void batchAt(const std::vector<int> &data, const Config &cfg, int step,
             std::vector<int> &in, std::vector<int> &tgt) {
  size_t span = data.size() - cfg.T - 1;
  for (int b = 0; b < cfg.B; ++b) {
    size_t off = ((size_t)(step * cfg.B + b) * 7919u) % span;
    for (int t = 0; t < cfg.T; ++t) {
      in[b * cfg.T + t] = data[off + t];
      tgt[b * cfg.T + t] = data[off + t + 1];
    }
  }
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Finite differences against the backward pass, on the first batch: per
// tensor, the two elements with the largest gradient and one picked by an
// LCG (a 4-point central stencil), then the whole model along the
// normalised gradient (the derivative must equal the gradient's norm).
int gradCheck(Gpt &gpt) {
  const Layout &lay = gpt.paramLayout();
  size_t P = lay.total;
  gpt.step(true);
  std::vector<float> g(P), p(P);
  CHECK(cudaMemcpy(g.data(), gpt.gradData(), P * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(p.data(), gpt.paramData(), P * 4, cudaMemcpyDeviceToHost));
  float *dp = gpt.paramData();

  auto lossWith = [&](size_t i, float value) {
    CHECK(cudaMemcpy(dp + i, &value, 4, cudaMemcpyHostToDevice));
    gpt.step(false);
    CHECK(cudaMemcpy(dp + i, &p[i], 4, cudaMemcpyHostToDevice));
    return gpt.lastLoss();
  };
  int checks = 0, failed = 0;
  auto judge = [&](double ana, double num) {
    double err = std::fabs(ana - num);
    bool ok = err <= 2e-2 * std::max(std::fabs(ana), std::fabs(num)) + 2e-5;
    ++checks;
    failed += !ok;
    return ok;
  };
  uint64_t s = 99;
  for (const Tensor &t : lay.tensors) {
    size_t top1 = t.offset, top2 = t.offset + (t.size > 1);
    for (size_t i = t.offset; i < t.offset + t.size; ++i)
      if (std::fabs(g[i]) > std::fabs(g[top1]))
        top1 = i;
    for (size_t i = t.offset; i < t.offset + t.size; ++i)
      if (i != top1 && (top2 == top1 || std::fabs(g[i]) > std::fabs(g[top2])))
        top2 = i;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    size_t pick = t.offset + (s >> 33) % t.size;
    for (size_t i : {top1, top2, pick}) {
      const float h = 1e-2f;
      double lp1 = lossWith(i, p[i] + h), lm1 = lossWith(i, p[i] - h);
      double lp2 = lossWith(i, p[i] + 2 * h), lm2 = lossWith(i, p[i] - 2 * h);
      double num = (8 * (lp1 - lm1) - (lp2 - lm2)) / (12.0 * h);
      bool ok = judge(g[i], num);
      std::printf("gradcheck %-12s [%6zu] analytic % .6e numeric % .6e %s\n",
                  t.name.c_str(), i - t.offset, (double)g[i], num,
                  ok ? "ok" : "FAIL");
    }
  }
  // The whole model along u = g / |g|: dL/du = |g|.
  double norm = 0;
  for (float x : g)
    norm += (double)x * x;
  norm = std::sqrt(norm);
  auto lossAlong = [&](double eps) {
    std::vector<float> q(P);
    for (size_t i = 0; i < P; ++i)
      q[i] = (float)(p[i] + eps * g[i] / norm);
    CHECK(cudaMemcpy(dp, q.data(), P * 4, cudaMemcpyHostToDevice));
    gpt.step(false);
    return gpt.lastLoss();
  };
  const double h = 1e-2;
  double num = (8 * (lossAlong(h) - lossAlong(-h)) -
                (lossAlong(2 * h) - lossAlong(-2 * h))) /
               (12 * h);
  CHECK(cudaMemcpy(dp, p.data(), P * 4, cudaMemcpyHostToDevice));
  bool ok = judge(norm, num);
  std::printf("gradcheck %-12s          analytic % .6e numeric % .6e %s\n",
              "|grad|", norm, num, ok ? "ok" : "FAIL");
  std::printf("gradcheck: %d of %d checks passed\n", checks - failed, checks);
  return failed ? 1 : 0;
}

// SIGTERM or SIGINT end training after the step in flight, so that the
// program exits normally (a co-location benchmark stops it this way, and
// the Tally runtime then writes its statistics at exit).
volatile std::sig_atomic_t stopRequested = 0;
void onStopSignal(int) { stopRequested = 1; }

} // namespace

int runGpt(int steps, bool gradcheck) {
  struct sigaction sa = {};
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  Config cfg;
  Gpt gpt(cfg);
  std::vector<int> data = makeData(cfg.V, 1 << 16);
  std::vector<int> in(cfg.N()), tgt(cfg.N());
  std::printf("gpt: vocab %d, d %d, heads %d, seq %d, batch %d, layers %d, %zu "
              "parameters\n",
              cfg.V, cfg.C, cfg.NH, cfg.T, cfg.B, cfg.L,
              gpt.paramLayout().total);
  if (gradcheck) {
    batchAt(data, cfg, 0, in, tgt);
    gpt.setBatch(in, tgt);
    return gradCheck(gpt);
  }
  float first = 0, last = 0;
  int done = 0;
  for (int step = 0; step < steps && !stopRequested; ++step, ++done) {
    batchAt(data, cfg, step, in, tgt);
    gpt.setBatch(in, tgt);
    float loss = gpt.step(true);
    gpt.update(step + 1, 3e-3f);
    std::printf("step %d loss %.6f bits %08x\n", step, loss, bits(loss));
    if (step == 0)
      first = loss;
    last = loss;
  }
  CHECK(cudaStreamSynchronize(gpt.cudaStream()));
  size_t P = gpt.paramLayout().total;
  std::vector<float> p(P);
  CHECK(cudaMemcpy(p.data(), gpt.paramData(), P * 4, cudaMemcpyDeviceToHost));
  std::printf("parameters %016llx\n",
              (unsigned long long)fnv1a(p.data(), P * 4));
  if (done < steps) {
    std::printf("stopped by a signal after %d steps\n", done);
    return 0;
  }
  if (steps >= 20) {
    bool down = last < first - 0.5f;
    std::printf("loss %s: first %.6f last %.6f\n",
                down ? "decreased" : "DID NOT DECREASE", first, last);
    return down ? 0 : 2;
  }
  return 0;
}
