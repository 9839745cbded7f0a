#!/usr/bin/env python3
"""streams.py - the "CUDA stream priorities in one process" baseline of the
co-location benchmark for the PyTorch workloads (the counterpart of
benchmarks/gpu/colocate-streams.cu): one process, one CUDA context, two
threads. The BE thread trains the GPT of train.py on a stream of the lowest
priority from the start; --be-lead seconds after its first progress line,
the main thread runs the HP service of serve.py (Poisson arrivals, same
protocol and CSV) on a stream of the greatest priority that PyTorch gives
(torch.cuda.Stream(priority=greatest of Stream.priority_range()); PyTorch
may clamp it to the few levels of its stream pool: the priorities it got are
printed). When HP is done, BE stops. Prints the lines of both programs
(hp: ... and be: ..., the formats of serve.py and train.py) on stdout.

The two threads share Python's GIL: HP's eager launches wait while BE's
Python code runs (at most about --switch-interval at a time). That is part
of what this way of sharing costs a Python service. HP sleeps to each
arrival without spinning (a spinning thread would hold the GIL). Measured
on an H100 (torch 2.11, 10 s, ResNet-50 at half its capacity beside the
default BE at batch 32): HP p50 163 ms and p99 258 ms against 12 and 62 ms
alone; eager ResNet-50 at batch 1 is bound by its Python launches, and
with half of the GIL it no longer keeps up with the arrivals.

Run:
  python3 benchmarks/torch/streams.py --model resnet50 --rate 100 \\
      --seconds 15 --csv streams-torch.hp.csv --be-lead 1
"""

import argparse
import os
import signal
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="streams.py",
        description="HP inference on a greatest-priority stream beside BE training "
                    "on a lowest-priority stream, in one process (two threads).")
    g = p.add_argument_group("HP (as serve.py)")
    g.add_argument("--model", choices=("resnet50", "bert"), default="resnet50")
    g.add_argument("--rate", type=float, required=True,
                   help="Poisson arrivals, requests/s (> 0)")
    g.add_argument("--seconds", "--duration", dest="seconds", type=float, default=10.0,
                   help="measure for S seconds (default 10)")
    g.add_argument("--csv", help="write every latency (us) to this file")
    g.add_argument("--batch", type=int, default=1, help="batch per request (default 1)")
    g.add_argument("--warmup", type=int, default=50,
                   help="requests before the measurement (default 50)")
    g.add_argument("--drain", type=float, default=2.0,
                   help="unserved cut-off after the window, s (default 2)")
    g.add_argument("--seed", type=int, default=1, help="seed (default 1)")
    g.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    b = p.add_argument_group("BE (as train.py)")
    b.add_argument("--be-layers", type=int, default=6)
    b.add_argument("--be-dim", type=int, default=768)
    b.add_argument("--be-heads", type=int, default=12)
    b.add_argument("--be-seq", type=int, default=256)
    b.add_argument("--be-batch", type=int, default=64)
    b.add_argument("--be-vocab", type=int, default=8192)
    b.add_argument("--be-progress", type=float, default=0.5,
                   help="a BE progress line every S seconds (default 0.5)")
    b.add_argument("--be-no-autocast", action="store_true",
                   help="BE in fp32 (only to check the code on a CPU)")
    p.add_argument("--be-lead", type=float, default=1.0,
                   help="BE runs alone S seconds before HP starts (default 1)")
    p.add_argument("--switch-interval", type=float, default=0.0005,
                   help="sys.setswitchinterval: longest hold of the GIL by one "
                        "thread while the other waits, s (default 0.0005)")
    p.add_argument("--device", default="cuda",
                   help="cuda (default); cpu only to check the code without a GPU")
    a = p.parse_args(argv)
    if a.rate <= 0 or a.seconds <= 0 or a.batch < 1 or a.warmup < 0 or a.drain < 0:
        p.error("--rate, --seconds, --batch must be positive; --warmup, --drain not "
                "negative")
    if a.be_lead < 0 or a.be_progress <= 0 or a.switch_interval <= 0:
        p.error("--be-lead must not be negative; --be-progress, --switch-interval "
                "positive")
    if a.be_dim % a.be_heads:
        p.error("--be-dim must be a multiple of --be-heads")
    return a


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("streams: error: PyTorch (torch) is not importable")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import threading
    import time

    import workloads as w

    device = w.resolve_device(a.device, "streams")
    cuda = device.type == "cuda"
    hp_stream = be_stream = None
    priority = "default"
    if cuda:
        try:
            least, greatest = torch.cuda.Stream.priority_range()
        except (AttributeError, RuntimeError):  # not expected: CUDA has had it long
            least, greatest = 0, -1
        hp_stream = torch.cuda.Stream(device=device, priority=greatest)
        be_stream = torch.cuda.Stream(device=device, priority=least)
        priority = f"{hp_stream.priority} (device range {greatest} to {least})"
        w.say(f"streams: priority range greatest {greatest} least {least}; "
              f"HP stream {hp_stream.priority}, BE stream {be_stream.priority}")

    # Both models are built before the threads start, and HP's is run once
    # on its stream by this thread (its cuDNN and cuBLAS handles); BE's
    # first steps are run_be's warmup.
    service = w.Service(a.model, a.batch, w.DTYPES[a.dtype], device, a.seed)
    trainer = w.Trainer(device, layers=a.be_layers, dim=a.be_dim, heads=a.be_heads,
                        seq=a.be_seq, batch=a.be_batch, vocab=a.be_vocab, seed=a.seed,
                        autocast=not a.be_no_autocast)
    sync = w.make_sync(device, hp_stream)
    with torch.inference_mode():
        if cuda:
            torch.cuda.synchronize()
            with torch.cuda.stream(hp_stream):
                service.request()
        else:
            service.request()
        sync()
    settings = w.hp_settings(service, a.rate, a.seed, a.seconds, a.warmup, a.drain,
                             priority, device)
    w.say(w.be_settings_line(trainer))

    stop_be = threading.Event()
    stop_all = threading.Event()
    be_running = threading.Event()
    be_done = threading.Event()
    be_rc = [1]

    def on_signal(signum, frame):
        stop_all.set()
        stop_be.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sys.setswitchinterval(a.switch_interval)

    def be_main():
        try:
            if cuda:
                torch.cuda.set_device(device)
                with torch.cuda.stream(be_stream):
                    be_rc[0] = w.run_be(trainer, stop_be, progress=a.be_progress,
                                        on_start=be_running.set)
            else:
                be_rc[0] = w.run_be(trainer, stop_be, progress=a.be_progress,
                                    on_start=be_running.set)
        finally:
            be_done.set()

    be_thread = threading.Thread(target=be_main, name="be", daemon=True)
    be_thread.start()
    while not be_running.is_set() and not be_done.is_set():
        be_running.wait(0.001)
    if be_done.is_set():
        be_thread.join()
        print("streams: error: BE ended before HP began", file=sys.stderr)
        return be_rc[0] or 1
    deadline = time.perf_counter() + a.be_lead
    while time.perf_counter() < deadline and not be_done.is_set() and not stop_all.is_set():
        time.sleep(0.01)
    if be_done.is_set() or stop_all.is_set():
        stop_be.set()
        be_thread.join()
        print("streams: error: stopped before HP began", file=sys.stderr)
        return be_rc[0] or 1

    with torch.inference_mode():
        if cuda:
            with torch.cuda.stream(hp_stream):
                lat, unserved, start, end = w.run_hp(
                    service.request, sync, a.rate, a.seconds, a.warmup, a.drain, a.seed,
                    spin=False, stop=stop_all)
        else:
            lat, unserved, start, end = w.run_hp(
                service.request, sync, a.rate, a.seconds, a.warmup, a.drain, a.seed,
                spin=False, stop=stop_all)
    stop_be.set()
    be_thread.join()
    hp_rc = w.report_hp(lat, unserved, start, end, a.rate, a.drain, settings, a.csv)
    return hp_rc or be_rc[0]


if __name__ == "__main__":
    sys.exit(main())
