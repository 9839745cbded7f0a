#!/usr/bin/env python3
"""outside-ptx.py - collect PTX that is not in the shared corpus, made fresh
on the GPU machine by the compilers users run: Triton kernels (written here
in the styles of its tutorials), PyTorch's Inductor (torch.compile of a
small transformer block and an MLP, forward and backward), and JAX/XLA
(jit of a few functions, with --xla_dump_to; this XLA dumps no PTX, which
the script reports). Writes the distinct .ptx files under
OUT/<source>/ and prints how many each source gave. Each source is
optional: one that fails is reported and skipped.

Usage: outside-ptx.py OUT
Then: test/corpus/transform.py --corpus OUT --tally-opt ... (scripts/gpu.sh
does both).
"""
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap


SEEN = set()


def collect(src_dir, out_dir, prefix):
    """Copies the distinct .ptx files under src_dir; returns how many."""
    os.makedirs(out_dir, exist_ok=True)
    n = 0
    for p in sorted(glob.glob(os.path.join(src_dir, "**", "*.ptx"), recursive=True)):
        with open(p, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest in SEEN:
            continue
        SEEN.add(digest)
        shutil.copy(p, os.path.join(out_dir, "%s_%03d_%s" % (prefix, n, os.path.basename(p))))
        n += 1
    return n


TRITON = textwrap.dedent('''
    import torch, triton, triton.language as tl

    @triton.jit
    def add(x, y, o, n, B: tl.constexpr):
        i = tl.program_id(0) * B + tl.arange(0, B)
        m = i < n
        tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

    @triton.jit
    def softmax(x, o, stride, n, B: tl.constexpr):
        r = tl.program_id(0)
        c = tl.arange(0, B)
        v = tl.load(x + r * stride + c, mask=c < n, other=-float("inf"))
        v = v - tl.max(v, 0)
        e = tl.exp(v)
        tl.store(o + r * stride + c, e / tl.sum(e, 0), mask=c < n)

    @triton.jit
    def layernorm(x, w, b, o, stride, n, eps, B: tl.constexpr):
        r = tl.program_id(0)
        c = tl.arange(0, B)
        m = c < n
        v = tl.load(x + r * stride + c, mask=m, other=0.).to(tl.float32)
        mean = tl.sum(v, 0) / n
        d = tl.where(m, v - mean, 0.)
        var = tl.sum(d * d, 0) / n
        y = d / tl.sqrt(var + eps) * tl.load(w + c, mask=m) + tl.load(b + c, mask=m)
        tl.store(o + r * stride + c, y, mask=m)

    @triton.jit
    def matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               G: tl.constexpr):
        pid = tl.program_id(0)
        nm = tl.cdiv(M, BM)
        nn = tl.cdiv(N, BN)
        group = pid // (G * nn)
        first = group * G
        gs = min(nm - first, G)
        pm = first + (pid % (G * nn)) % gs
        pn = (pid % (G * nn)) // gs
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            x = tl.load(a + rm[:, None] * K + (k * BK + rk)[None, :])
            y = tl.load(b + (k * BK + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))

    @triton.jit
    def persistent_matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                          BK: tl.constexpr, SMS: tl.constexpr):
        start = tl.program_id(0)
        tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
        for t in range(start, tiles, SMS):
            pm = t // tl.cdiv(N, BN)
            pn = t % tl.cdiv(N, BN)
            rm = pm * BM + tl.arange(0, BM)
            rn = pn * BN + tl.arange(0, BN)
            rk = tl.arange(0, BK)
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for k in range(0, tl.cdiv(K, BK)):
                x = tl.load(a + rm[:, None] * K + (k * BK + rk)[None, :])
                y = tl.load(b + (k * BK + rk)[:, None] * N + rn[None, :])
                acc += tl.dot(x, y)
            tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))

    @triton.jit
    def histogram(x, h, n, B: tl.constexpr, BINS: tl.constexpr):
        i = tl.program_id(0) * B + tl.arange(0, B)
        v = tl.load(x + i, mask=i < n, other=0)
        tl.atomic_add(h + (v % BINS), 1, mask=i < n)

    d = "cuda"
    n = 1 << 20
    x = torch.randn(n, device=d); y = torch.randn(n, device=d); o = torch.empty_like(x)
    add[(n // 1024,)](x, y, o, n, B=1024)
    s = torch.randn(512, 1000, device=d); so = torch.empty_like(s)
    softmax[(512,)](s, so, s.stride(0), 1000, B=1024)
    w = torch.randn(1000, device=d); b = torch.randn(1000, device=d)
    layernorm[(512,)](s, w, b, so, s.stride(0), 1000, 1e-5, B=1024)
    A = torch.randn(1024, 1024, device=d, dtype=torch.float16)
    Bm = torch.randn(1024, 1024, device=d, dtype=torch.float16)
    C = torch.empty(1024, 1024, device=d, dtype=torch.float16)
    for bm, bn, bk in [(128, 128, 64), (64, 128, 32), (128, 256, 64)]:
        matmul[(1024 // bm * 1024 // bn,)](A, Bm, C, 1024, 1024, 1024, BM=bm, BN=bn, BK=bk, G=8,
                                            num_warps=8, num_stages=3)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    persistent_matmul[(sms,)](A, Bm, C, 1024, 1024, 1024, BM=128, BN=128, BK=64, SMS=sms,
                              num_warps=8, num_stages=3)
    xi = torch.randint(0, 1 << 30, (n,), device=d, dtype=torch.int32)
    hh = torch.zeros(256, device=d, dtype=torch.int32)
    histogram[(n // 1024,)](xi, hh, n, B=1024, BINS=256)
    torch.cuda.synchronize()
''')

INDUCTOR = textwrap.dedent('''
    import torch
    class Block(torch.nn.Module):
        def __init__(s, d=256, h=4):
            super().__init__()
            s.ln1 = torch.nn.LayerNorm(d); s.ln2 = torch.nn.LayerNorm(d)
            s.attn = torch.nn.MultiheadAttention(d, h, batch_first=True)
            s.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                        torch.nn.Linear(4 * d, d))
        def forward(s, x):
            y = s.ln1(x)
            x = x + s.attn(y, y, y, need_weights=False)[0]
            return x + s.mlp(s.ln2(x))
    m = torch.nn.Sequential(Block(), Block()).cuda()
    f = torch.compile(m)
    x = torch.randn(8, 128, 256, device="cuda", requires_grad=True)
    f(x).sum().backward()
    mlp = torch.compile(torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                            torch.nn.Dropout(0.1), torch.nn.Linear(512, 10),
                                            torch.nn.LogSoftmax(-1)).cuda())
    z = mlp(torch.randn(4096, 512, device="cuda"))
    torch.nn.functional.nll_loss(z, torch.randint(0, 10, (4096,), device="cuda")).backward()
    torch.cuda.synchronize()
''')

JAX = textwrap.dedent('''
    import jax, jax.numpy as jnp
    def attention(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / 8.0
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)
    def mlp(w1, w2, x):
        return jnp.tanh(jax.nn.gelu(x @ w1) @ w2).sum()
    k = jax.random.PRNGKey(0)
    q = jax.random.normal(k, (4, 128, 64))
    jax.jit(attention)(q, q, q).block_until_ready()
    w1 = jax.random.normal(k, (256, 512)); w2 = jax.random.normal(k, (512, 64))
    x = jax.random.normal(k, (1024, 256))
    jax.jit(jax.grad(mlp, argnums=(0, 1)))(w1, w2, x)[0].block_until_ready()
    jax.jit(lambda a: jnp.cumsum(jnp.sort(a)))(jax.random.normal(k, (1 << 16,))).block_until_ready()
''')


def run(name, code, env, out, cache_dirs, tmp):
    # Triton reads its kernels' source: they must live in a file.
    path = os.path.join(tmp, "make_%s_kernels.py" % name)  # not triton.py: it would shadow triton
    with open(path, "w") as f:
        f.write(code)
    r = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True,
                       timeout=240)
    if r.stdout.strip():
        print("%s: %s" % (name, r.stdout.strip().splitlines()[-1]))
    if r.returncode != 0:
        print("%s: failed (%s)" % (name, (r.stderr.strip().splitlines() or ["?"])[-1]))
    n = sum(collect(d, os.path.join(out, name), name) for d in cache_dirs)
    print("%s: %d PTX files" % (name, n))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="outside-ptx-")
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
    run("triton", TRITON, env, out, [env["TRITON_CACHE_DIR"]], tmp)
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    env["TRITON_CACHE_DIR"] = os.path.join(tmp, "inductor-triton")
    run("inductor", INDUCTOR, env, out, [env["TORCHINDUCTOR_CACHE_DIR"], env["TRITON_CACHE_DIR"]],
        tmp)
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_dump_to=" + os.path.join(tmp, "xla")
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    run("jax", JAX, env, out, [os.path.join(tmp, "xla")], tmp)
    # The XLA of 2026-11 (JAX on CUDA 13) dumps HLO, MLIR and autotuning
    # results but neither PTX nor LLVM IR: say what it dumped.
    exts = {}
    for p in glob.glob(os.path.join(tmp, "xla", "**", "*"), recursive=True):
        e = os.path.splitext(p)[1]
        exts[e] = exts.get(e, 0) + 1
    print("jax: dumped %s" % ", ".join("%d %s" % (n, e) for e, n in sorted(exts.items())))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
