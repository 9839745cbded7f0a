"""workloads.py - the PyTorch workloads of the co-location benchmark, shared
by serve.py (HP service), train.py (BE training) and streams.py (both in one
process on prioritised streams). Not run by itself.

What is here:
  * the models, written by hand in torch.nn with random weights (nothing is
    downloaded; torchvision and transformers are not needed):
      - ResNet-50: bottleneck blocks [3, 4, 6, 3], 224x224 input, 1000 classes
      - a BERT-base sized encoder: 12 post-LayerNorm layers, d 768, 12 heads,
        FFN 3072, vocabulary 30522, sequence 128, tanh pooler
      - a small GPT (pre-LayerNorm decoder, causal attention) for training
  * the HP request loop (run_hp) and its output, in the formats of the C++
    hp-serve (benchmarks/gpu/spin-kernels.h), so that scripts/gpu-colocate.sh
    and scripts/colocate-report.py read both:
      stdout: hp: settings ... / hp: window START END / [hp: unserved ...] /
              hp: requests N rate R p50 X p99 Y p999 Z mean M max W us /
              [hp: capacity C req/s]   (closed loop only)
      CSV:    four `#` lines (description, settings, window, unserved), then
              one latency in microseconds per line (%.3f)
  * the BE training loop (run_be) and its output, in be-spin's progress
    format: `be: t=S kernels=N epoch=E` where N counts completed training
    steps, then `be: steps K in T s, R steps/s` and
    `be: loss step K L bits HEX` (the last completed step's loss).

This module imports torch at the top; the command-line scripts import it only
after parsing their arguments, so that their --help works without torch.
"""

import math
import random
import struct
import sys
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

#===------------------------------------------------------------------------===#
# Output
#===------------------------------------------------------------------------===#

_print_lock = threading.Lock()


def say(line):
    """Prints one line and flushes (the two threads of streams.py share
    stdout; the scripts read the lines while the process runs)."""
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def resolve_device(name, prog):
    """torch.device of --device, with its index (torch.cuda.set_device wants
    one); exits with a message when CUDA is asked for and not there."""
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit(f"{prog}: error: CUDA is not available to PyTorch")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    return device


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def make_sync(device, stream=None):
    """The per-request wait: the service's stream (cudaStreamSynchronize, as
    hp-serve does), or nothing on the CPU."""
    if device.type != "cuda":
        return lambda: None
    if stream is None:
        stream = torch.cuda.current_stream(device)
    return stream.synchronize


#===------------------------------------------------------------------------===#
# Attention, shared by the encoder and the GPT
#===------------------------------------------------------------------------===#


def attention(qkv, heads, causal):
    """qkv: (B, T, 3*D) -> (B, T, D)."""
    b, t, three_d = qkv.shape
    d = three_d // 3
    q, k, v = qkv.view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
    if hasattr(F, "scaled_dot_product_attention"):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:  # PyTorch before 2.0 (only for checking the code on a CPU)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
        if causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=qkv.device).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        o = s.softmax(dim=-1) @ v
    return o.transpose(1, 2).reshape(b, t, d)


#===------------------------------------------------------------------------===#
# ResNet-50
#===------------------------------------------------------------------------===#


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (with the stride), 1x1 expand by 4, plus the shortcut
    (a strided 1x1 projection where the shape changes)."""

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + identity)


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        blocks = []
        cin = 64
        # (width, blocks, stride of the first block) per stage
        for width, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(count):
                blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 3, stride=2, padding=1)
        x = self.blocks(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


#===------------------------------------------------------------------------===#
# BERT-base sized encoder
#===------------------------------------------------------------------------===#


class EncoderLayer(nn.Module):
    """BERT's layer: attention and FFN, each followed by residual + LayerNorm."""

    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn)
        self.fc2 = nn.Linear(ffn, dim)
        self.ln2 = nn.LayerNorm(dim)

    def forward(self, x):
        x = self.ln1(x + self.out(attention(self.qkv(x), self.heads, causal=False)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class BertEncoder(nn.Module):
    def __init__(self, vocab=30522, dim=768, layers=12, heads=12, ffn=3072, max_len=512):
        super().__init__()
        self.word = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(max_len, dim)
        self.token_type = nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, ffn) for _ in range(layers))
        self.pool = nn.Linear(dim, dim)

    def forward(self, ids):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device)
        x = self.word(ids) + self.position(pos) + self.token_type(torch.zeros_like(ids))
        x = self.ln(x)
        for layer in self.layers:
            x = layer(x)
        return torch.tanh(self.pool(x[:, 0]))


#===------------------------------------------------------------------------===#
# The HP service
#===------------------------------------------------------------------------===#

MODELS = ("resnet50", "bert")


class Service:
    """A model in eval mode with its inputs on the device; request() runs one
    forward pass (without waiting for it)."""

    def __init__(self, name, batch, dtype, device, seed, inputs=4):
        torch.manual_seed(seed)
        self.name = name
        self.batch = batch
        self.dtype = dtype
        self.device = device
        gen = torch.Generator().manual_seed(seed + 1)
        if name == "resnet50":
            model = ResNet50()
            # NHWC: what cuDNN's fastest half-precision convolutions want.
            fmt = torch.channels_last
            model = model.to(device=device, dtype=dtype, memory_format=fmt)
            self.inputs = [
                torch.randn(batch, 3, 224, 224, generator=gen)
                .to(device=device, dtype=dtype).contiguous(memory_format=fmt)
                for _ in range(inputs)]
            self.shape = "3x224x224 channels_last"
        elif name == "bert":
            model = BertEncoder().to(device=device, dtype=dtype)
            self.inputs = [torch.randint(0, 30522, (batch, 128), generator=gen).to(device)
                           for _ in range(inputs)]
            self.shape = "128 tokens"
        else:
            raise ValueError(f"unknown model '{name}'")
        self.model = model.eval()
        self.params = sum(p.numel() for p in model.parameters())
        self.count = 0

    def request(self):
        x = self.inputs[self.count % len(self.inputs)]
        self.count += 1
        return self.model(x)

    def describe(self):
        return (f"model {self.name} params {self.params / 1e6:.1f}M batch {self.batch} "
                f"input {self.shape} dtype {str(self.dtype).replace('torch.', '')}")


def percentile(sorted_values, q):
    """Nearest rank, as hp-serve and colocate-report.py compute it."""
    if not sorted_values:
        return 0.0
    rank = min(max(math.ceil(q * len(sorted_values)), 1), len(sorted_values))
    return sorted_values[rank - 1]


def wait_until(t, spin):
    """Waits to perf_counter() time t. spin True: sleeps most of the way and
    spins the last 200 us (sleep alone overshoots by tens of microseconds);
    "all": spins all the way (no sleep: the host CPU stays awake); False:
    sleeps only (a spinning thread would hold the GIL that the other thread
    of streams.py needs)."""
    while True:
        left = t - time.perf_counter()
        if left <= 0:
            return
        if spin == "all":
            continue
        if left > 0.0003:
            time.sleep(left - 0.0002)
        elif not spin:
            time.sleep(left)
            return


def run_hp(request, sync, rate, duration, warmup, drain, seed, spin=True, stop=None,
           before_window=None, service=None):
    """The request loop of hp-serve: warmup requests, then for `duration`
    seconds either Poisson arrivals at `rate` requests/s (a request's latency
    runs from its scheduled arrival, so time queued behind an earlier one
    counts) or, with rate 0, requests back to back. Requests that arrived in
    the window but are not served `drain` seconds after it are counted
    unserved with their latency so far (a lower bound). `stop` (an Event)
    ends the loop early. `before_window`, where given, is called after the
    warmup and before the window starts (serve.py's --start-file wait).
    `service`, where given (a list), gets each served request's own time in
    us (its issue to its completion, without the time queued).
    Returns (latencies in us, unserved, start epoch, end epoch)."""
    for _ in range(warmup):
        request()
        sync()
    if before_window:
        before_window()
    lat = []
    unserved = 0
    start_epoch = time.time()
    t0 = time.perf_counter()
    last = t0
    if rate > 0:
        rng = random.Random(seed)
        nxt = rng.expovariate(rate)  # seconds after t0
        cutoff = t0 + duration + drain
        while nxt <= duration and not (stop and stop.is_set()):
            arrival = t0 + nxt
            if time.perf_counter() > cutoff:
                # Fallen behind for good: the rest of the window's requests
                # get their latency so far.
                now = time.perf_counter()
                while nxt <= duration:
                    lat.append((now - (t0 + nxt)) * 1e6)
                    unserved += 1
                    nxt += rng.expovariate(rate)
                break
            wait_until(arrival, spin)
            issued = time.perf_counter()
            request()
            sync()
            last = time.perf_counter()
            lat.append((last - arrival) * 1e6)
            if service is not None:
                service.append((last - issued) * 1e6)
            nxt += rng.expovariate(rate)
    else:
        while time.perf_counter() - t0 < duration and not (stop and stop.is_set()):
            send = time.perf_counter()
            request()
            sync()
            last = time.perf_counter()
            lat.append((last - send) * 1e6)
            if service is not None:
                service.append((last - send) * 1e6)
    end_epoch = start_epoch + (last - t0)
    return lat, unserved, start_epoch, end_epoch


def report_hp(lat, unserved, start_epoch, end_epoch, rate, drain, settings, csv_path):
    """Writes the CSV and prints the summary, as hp-serve does; returns the
    exit status (1 when no request was measured)."""
    s = sorted(lat)
    mean = sum(lat) / len(lat) if lat else 0.0
    window = end_epoch - start_epoch
    achieved = (len(lat) - unserved) / window if window > 0 else 0.0
    if csv_path:
        with open(csv_path, "w") as f:
            f.write("# hp latencies in microseconds, one per request: scheduled "
                    "arrival (closed loop: send) to completion\n")
            f.write(f"# settings {settings}\n")
            f.write(f"# window {start_epoch:.6f} {end_epoch:.6f}\n")
            f.write(f"# unserved {unserved}\n")
            for v in lat:
                f.write(f"{v:.3f}\n")
    say(f"hp: settings {settings}")
    say(f"hp: window {start_epoch:.6f} {end_epoch:.6f}")
    if unserved:
        say(f"hp: unserved {unserved} requests not done {drain:g} s after the window "
            "(their latencies are lower bounds)")
    say(f"hp: requests {len(lat)} rate {achieved:.1f} p50 {percentile(s, 0.5):.1f} "
        f"p99 {percentile(s, 0.99):.1f} p999 {percentile(s, 0.999):.1f} "
        f"mean {mean:.1f} max {(s[-1] if s else 0.0):.1f} us")
    if rate <= 0:
        say(f"hp: capacity {achieved:.1f} req/s")
    if not lat:
        print("hp: error: no request measured", file=sys.stderr)
        return 1
    return 0


def hp_settings(service, rate, seed, duration, warmup, drain, priority, device):
    mode = "poisson" if rate > 0 else "closed loop"
    return (f"{service.describe()} rate {rate:g} ({mode}, seed {seed}) duration "
            f"{duration:g} warmup {warmup} drain {drain:g} stream-priority {priority} "
            f"wait sync device {device_name(device)} torch {torch.__version__}")


#===------------------------------------------------------------------------===#
# The BE training job
#===------------------------------------------------------------------------===#


class GptBlock(nn.Module):
    """Pre-LayerNorm decoder block: causal attention and a GELU MLP."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.proj(attention(self.qkv(self.ln1(x)), self.heads, causal=True))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, dim, layers, heads, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(GptBlock(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class Trainer:
    """A GPT trained on a fixed pool of random token batches (it learns them
    by heart, so the loss falls), AdamW, bf16 autocast, fixed seed."""

    def __init__(self, device, layers=6, dim=768, heads=12, seq=256, batch=64,
                 vocab=8192, lr=3e-4, seed=1, pool=8, autocast=True):
        torch.manual_seed(seed)
        self.device = device
        self.vocab = vocab
        self.autocast = autocast
        self.model = Gpt(vocab, dim, layers, heads, seq).to(device).train()
        self.params = sum(p.numel() for p in self.model.parameters())
        self.opt = None
        if device.type == "cuda":
            try:  # one fused kernel for the update where PyTorch has it
                self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, fused=True)
            except (TypeError, RuntimeError):
                self.opt = None
        if self.opt is None:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed + 1)
        self.data = [torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)
                     for _ in range(pool)]
        self.settings = (f"gpt layers {layers} dim {dim} heads {heads} seq {seq} batch "
                         f"{batch} vocab {vocab} params {self.params / 1e6:.1f}M adamw lr "
                         f"{lr:g} {'bf16 autocast' if autocast else 'fp32'} seed {seed} "
                         f"device {device_name(device)} torch {torch.__version__}")

    def step(self, i):
        """One training step on batch i of the pool; returns the loss (a
        device tensor, not waited for)."""
        tokens = self.data[i % len(self.data)]
        x, y = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16,
                            enabled=self.autocast):
            logits = self.model(x)
            loss = F.cross_entropy(logits.reshape(-1, self.vocab).float(), y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


class _Done:
    """Stands in for a CUDA event on the CPU (work there is synchronous)."""

    def record(self):
        pass

    def synchronize(self):
        pass


def run_be(trainer, stop, max_steps=0, seconds=0.0, progress=0.5, warmup=2, on_start=None,
           before_start=None):
    """Training steps until `stop` is set, `max_steps` steps or `seconds`
    seconds, at most two steps queued on the current stream (the GPU never
    idles between steps, and the completed count stays current). Prints
    be-spin's progress lines (kernels= counts completed steps) every
    `progress` seconds, the first one (t=0) once the warmup steps are done
    and `on_start` has been called, then the summary. `before_start`, where
    given, is called after the warmup; when it returns False the run ends
    there (exit 0, no summary). Returns the exit status (0, or 1 when the
    loss is not finite)."""
    cuda = trainer.device.type == "cuda"
    for i in range(warmup):  # first-use costs (cuBLAS handles, allocator)
        trainer.step(i)
    if cuda:
        torch.cuda.current_stream(trainer.device).synchronize()
    if before_start and not before_start():
        return 0

    # Three host slots for the losses: two steps queued, one being read.
    slots = [torch.zeros((), dtype=torch.float32, pin_memory=cuda) for _ in range(3)]
    pending = []  # (step, event), oldest first
    launched = completed = 0
    last_loss = float("nan")

    def finish_oldest():
        nonlocal completed, last_loss
        step, event = pending.pop(0)
        event.synchronize()
        completed += 1
        last_loss = slots[step % 3].item()

    def line(t):
        say(f"be: t={t:.3f} kernels={completed} epoch={time.time():.6f}")

    t0 = time.perf_counter()
    line(0.0)
    if on_start:
        on_start()
    next_progress = progress
    while True:
        t = time.perf_counter() - t0
        if t >= next_progress:
            line(t)
            next_progress = (math.floor(t / progress) + 1) * progress
        if (stop.is_set() or (max_steps and launched >= max_steps)
                or (seconds and t >= seconds)):
            break
        loss = trainer.step(launched + warmup)
        slots[launched % 3].copy_(loss.float(), non_blocking=True)
        event = torch.cuda.Event() if cuda else _Done()
        event.record()
        pending.append((launched, event))
        launched += 1
        while len(pending) > 1:  # wait for the step before this one
            finish_oldest()
    while pending:
        finish_oldest()
    t = time.perf_counter() - t0
    line(t)
    say(f"be: steps {launched} in {t:.3f} s, {launched / t if t > 0 else 0.0:.1f} steps/s")
    bits = struct.unpack(">I", struct.pack(">f", last_loss))[0]
    say(f"be: loss step {launched} {last_loss:.6f} bits {bits:08x}")
    if launched and not math.isfinite(last_loss):
        print("be: error: the loss is not finite", file=sys.stderr)
        return 1
    return 0


def be_settings_line(trainer):
    return f"be: settings {trainer.settings}"
