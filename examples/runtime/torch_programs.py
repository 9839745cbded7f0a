"""torch_programs.py - PyTorch programs of the kinds users run, each printing
a digest of its results, for scripts/gpu-torch-programs.sh: the same
program plain and under `tally run` (high priority, best effort, both at
once, with and without MPS) must print the same digests, exit 0 and not
hang.

Each case is a small program written the way PyTorch code is usually
written, chosen for the driver paths it takes through the runtime:

  eager-train      a conv net trained eagerly (cuDNN, cuBLAS, the fused
                   multi-tensor AdamW), losses read every step (.item())
  graph-train      a training step captured with torch.cuda.graph (a
                   capturable AdamW) and replayed with new data copied into
                   its static inputs
  graph-infer      a forward pass captured once, replayed for five inputs
  compile          torch.compile (Inductor's Triton kernels), forward and
                   backward
  compile-graphs   torch.compile(mode="reduce-overhead"): Triton kernels
                   inside CUDA graphs (cudagraph trees)
  threads-streams  two Python threads, each on its own stream, feeding a
                   third through events
  copies-events    pinned host memory, non-blocking copies on a side
                   stream, event waits, busy-polled queries, record_stream
  attention        scaled_dot_product_attention with the flash and the
                   memory-efficient kernels, bf16, forward and backward
  cublaslt         bf16 linear layers with bias (cuBLASLt epilogues),
                   batched GEMMs, fp32 GEMMs without TF32
  rng              the device's Philox generator: randn, dropout,
                   multinomial, randperm
  syncs            every way PyTorch waits: device, stream and event
                   synchronize, .item(), .cpu(), .tolist(), a D2H copy
  dataloader-fork  a DataLoader with two worker processes forked from the
                   CUDA process (they never touch CUDA) and pinned batches
  spawn-child      a child process started with multiprocessing's spawn that
                   uses CUDA itself (under `tally run` it inherits the
                   runtime and joins the GPU's segment as another process)

Output, stdout: one line per case, `case NAME sha256 HEX` (its results'
bytes) or `case NAME error TYPE: MESSAGE` where PyTorch itself raised (a
case this PyTorch or GPU cannot run). Times go to stderr. Exit status 0
when every case ran or raised, 1 without CUDA.

Run:
  python3 torch_programs.py                 # every case
  python3 torch_programs.py --cases rng,syncs
  python3 torch_programs.py --alloc async   # PyTorch's cudaMallocAsync backend
  tally run --priority=best-effort -- python3 torch_programs.py
"""
import argparse
import os
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="torch_programs.py",
                                description="PyTorch programs that print digests of their "
                                            "results, to compare runs under the Tally runtime.")
    p.add_argument("--cases", default="all",
                   help="comma-separated case names, or all (default)")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    p.add_argument("--alloc", choices=("native", "async"), default="native",
                   help="PyTorch's CUDA caching allocator (native, the default) or "
                        "the cudaMallocAsync backend")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the chosen cases this many times in one process (default 1); "
                        "each pass prints its lines")
    return p.parse_args(argv)


ARGS = parse_args()
if ARGS.alloc == "async":
    # Read by PyTorch at its first CUDA allocation: set before the import.
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
# Deterministic cuBLAS workspaces, before cuBLAS loads.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import hashlib  # noqa: E402
import struct  # noqa: E402
import threading  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Digest:
    """The bytes of a case's results, in the order they were added."""

    def __init__(self):
        self.h = hashlib.sha256()

    def t(self, x):
        x = x.detach().contiguous().cpu()
        if x.dtype == torch.bfloat16:
            x = x.view(torch.int16)
        self.h.update(str((tuple(x.shape), str(x.dtype))).encode())
        self.h.update(x.numpy().tobytes())

    def f(self, v):
        self.h.update(struct.pack("<d", float(v)))

    def hex(self):
        return self.h.hexdigest()


def seeded(seed):
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64 * 8 * 8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.bn(self.c2(x))), 2)
        return self.fc(torch.flatten(x, 1))


def mlp(width=512, depth=4):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width)]
    return nn.Sequential(*layers, nn.Linear(width, 16))


def case_eager_train(dev, d):
    seeded(1)
    model = ConvNet().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(64, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)
    for _ in range(8):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        d.f(loss.item())
    for p in model.parameters():
        d.t(p)


def case_graph_train(dev, d):
    seeded(2)
    model = mlp().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    sx = torch.zeros(32, 512, device=dev)
    sy = torch.zeros(32, dtype=torch.long, device=dev)
    gen = torch.Generator(device=dev).manual_seed(3)
    data = [(torch.randn(32, 512, device=dev, generator=gen),
             torch.randint(0, 16, (32,), device=dev, generator=gen)) for _ in range(13)]

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(sx), sy)
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as the docs ask
        for x, y in data[:3]:
            sx.copy_(x)
            sy.copy_(y)
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = step()
    for x, y in data[3:]:
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
        d.f(static_loss.item())
    for p in model.parameters():
        d.t(p)


def case_graph_infer(dev, d):
    seeded(4)
    model = mlp(256, 3).to(dev).eval()
    sx = torch.zeros(8, 256, device=dev)
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            model(sx)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = model(sx)
        for i in range(5):
            sx.copy_(torch.full((8, 256), 0.1 * i, device=dev) + torch.arange(256, device=dev) / 256)
            g.replay()
            d.t(out)


def compiled_train(dev, d, mode):
    seeded(5)
    model = mlp(256, 3).to(dev)
    cm = torch.compile(model, mode=mode)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    gen = torch.Generator(device=dev).manual_seed(6)
    for _ in range(5):
        x = torch.randn(64, 256, device=dev, generator=gen)
        loss = cm(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        d.f(loss.item())
    with torch.no_grad():
        d.t(cm(torch.ones(64, 256, device=dev)))
    for p in model.parameters():
        d.t(p)


def case_compile(dev, d):
    compiled_train(dev, d, "default")


def case_compile_graphs(dev, d):
    compiled_train(dev, d, "reduce-overhead")


def case_threads_streams(dev, d):
    seeded(7)
    a = torch.randn(256, 256, device=dev) / 16
    b = torch.randn(256, 256, device=dev) / 16
    done = [torch.cuda.Event(), torch.cuda.Event()]
    outs = [None, None]
    errors = []

    def work(i, m):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                x = m.clone()
                for _ in range(50):
                    x = torch.tanh(x @ m + 0.01 * i)
                outs[i] = x
                done[i].record(s)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    torch.cuda.synchronize()  # a and b made before the threads' streams read them
    ts = [threading.Thread(target=work, args=(i, m)) for i, m in enumerate((a, b))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    third = torch.cuda.Stream()
    with torch.cuda.stream(third):
        for e in done:
            third.wait_event(e)
        r = outs[0] @ outs[1].T
    third.synchronize()
    d.t(outs[0])
    d.t(outs[1])
    d.t(r)


def case_copies_events(dev, d):
    seeded(8)
    host = torch.randn(16, 1 << 16).pin_memory()
    back = torch.empty_like(host).pin_memory()
    copy = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    acc = torch.zeros(1 << 16, device=dev)
    for i in range(16):
        with torch.cuda.stream(copy):
            x = host[i].to(dev, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(copy)
        main.wait_event(ev)
        x.record_stream(main)
        acc = acc * 0.5 + torch.sin(x)
        back[i].copy_(acc, non_blocking=True)
    done = torch.cuda.Event()
    done.record(main)
    while not done.query():
        pass
    d.t(back)
    d.t(acc)


def case_attention(dev, d):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    seeded(9)
    shape = (2, 8, 256, 64)
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        d.t(o)
        # The backward passes accumulate with atomics in some versions: only
        # the forward is digested; the backward runs for the launches.
        o.float().sum().backward()
        torch.cuda.synchronize()


def case_cublaslt(dev, d):
    seeded(10)
    x = torch.randn(128, 768, device=dev, dtype=torch.bfloat16)
    lin = nn.Linear(768, 3072, device=dev, dtype=torch.bfloat16)
    d.t(F.gelu(lin(x)))
    a = torch.randn(8, 64, 96, device=dev)
    b = torch.randn(8, 96, 32, device=dev)
    c = torch.randn(8, 64, 32, device=dev)
    d.t(torch.baddbmm(c, a, b, alpha=0.5, beta=2.0))
    m = torch.randn(300, 200, device=dev)
    d.t(torch.addmm(torch.randn(300, 100, device=dev), m, torch.randn(200, 100, device=dev)))


def case_rng(dev, d):
    torch.cuda.manual_seed(11)
    d.t(torch.randn(1000, device=dev))
    d.t(F.dropout(torch.ones(4096, device=dev), p=0.3, training=True))
    probs = torch.softmax(torch.arange(50, device=dev, dtype=torch.float32) / 10, 0)
    d.t(torch.multinomial(probs, 20, replacement=True))
    d.t(torch.randperm(1000, device=dev))


def case_syncs(dev, d):
    seeded(12)
    x = torch.randn(1 << 20, device=dev)
    for i in range(6):
        x = torch.cos(x) * 1.5 + 0.1
        if i == 0:
            torch.cuda.synchronize()
        elif i == 1:
            torch.cuda.current_stream().synchronize()
        elif i == 2:
            e = torch.cuda.Event()
            e.record()
            e.synchronize()
        elif i == 3:
            d.f(x.sum().item())
        elif i == 4:
            d.t(x[:16].cpu())
        else:
            d.f(sum(x[:8].tolist()))
    out = torch.empty(1 << 20)
    out.copy_(x)
    d.t(out)


def case_dataloader_fork(dev, d):
    from torch.utils.data import DataLoader, TensorDataset
    seeded(13)
    xs = torch.randn(512, 64)
    ys = torch.randint(0, 4, (512,))
    dl = DataLoader(TensorDataset(xs, ys), batch_size=64, num_workers=2,
                    multiprocessing_context="fork", pin_memory=True)
    model = nn.Linear(64, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in dl:
        loss = F.cross_entropy(model(x.to(dev, non_blocking=True)), y.to(dev, non_blocking=True))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        d.f(loss.item())


def spawn_child(q):
    """spawn-child's child: its own CUDA context, its result to the parent."""
    try:
        x = torch.arange(1 << 16, device="cuda", dtype=torch.float32) / 1000
        q.put(("ok", torch.sin(x).sum().item()))
    except Exception as e:  # the parent raises it
        q.put(("error", f"{type(e).__name__}: {e}"))


def case_spawn_child(dev, d):
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=spawn_child, args=(q,))
    p.start()
    what, v = q.get(timeout=120)
    p.join(60)
    if what != "ok" or p.exitcode != 0:
        raise RuntimeError(f"child: {what} {v}, exit {p.exitcode}")
    d.f(v)


CASES = {
    "eager-train": case_eager_train,
    "graph-train": case_graph_train,
    "graph-infer": case_graph_infer,
    "compile": case_compile,
    "compile-graphs": case_compile_graphs,
    "threads-streams": case_threads_streams,
    "copies-events": case_copies_events,
    "attention": case_attention,
    "cublaslt": case_cublaslt,
    "rng": case_rng,
    "syncs": case_syncs,
    "dataloader-fork": case_dataloader_fork,
    "spawn-child": case_spawn_child,
}


def main():
    if ARGS.list:
        print("\n".join(CASES))
        return 0
    names = list(CASES) if ARGS.cases == "all" else [c for c in ARGS.cases.split(",") if c]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"torch_programs: error: unknown case(s) {', '.join(unknown)} "
              f"(--list names them)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_programs: error: no CUDA device", file=sys.stderr)
        return 1
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    for _ in range(max(1, ARGS.repeat)):
        for n in names:
            d = Digest()
            t0 = time.perf_counter()
            try:
                CASES[n](dev, d)
                torch.cuda.synchronize()
                line = f"case {n} sha256 {d.hex()}"
            except Exception as e:  # PyTorch raised: reported, not compared
                msg = " ".join(str(e).split())[:200]
                line = f"case {n} error {type(e).__name__}: {msg}"
            print(line, flush=True)
            print(f"torch_programs: {n} {time.perf_counter() - t0:.2f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
