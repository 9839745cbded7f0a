#!/usr/bin/env python3
"""train.py - the eager PyTorch BE (best-effort) training job of the
co-location benchmark (scripts/gpu-colocate.sh): a small GPT (workloads.py;
default 6 layers, d 768, 12 heads, sequence 256, batch 64, vocabulary 8192)
trained on a fixed pool of random token batches with AdamW under bf16
autocast, fixed seed. It is the BE case where no kernel has PTX of its own
(PyTorch's kernels ship as machine code), so Tally cannot transform them.
Batch 64 by default: measured on an H100 (torch 2.11), 49 steps/s (3150
sequences/s), against 62 steps/s (1970 sequences/s) at batch 32, where the
Python launches rather than the GPU set the pace, and 27 steps/s (3400
sequences/s) at batch 128.

Runs until SIGTERM or SIGINT (then finishes the queued steps, prints the
summary and exits 0), --steps N, or --seconds S. Output, be-spin's progress
format, where kernels= counts completed training steps (so colocate-report.py
reads it as be-spin, kind spin; the rate is in steps/s):
  be: settings ...
  be: t=SECONDS kernels=STEPS epoch=EPOCH    (t=0 once the warmup steps are
                                              done; every --progress s)
  be: steps K in T s, R steps/s
  be: loss step K LOSS bits HEX             (the last step's loss and its
                                              float32 bits; equal across runs
                                              of the same --steps only where
                                              the kernels are deterministic)
Exit status 1 when the loss is not finite.

With --start-file F it waits, after the warmup steps, until F exists (the
process started, warmed up and idle beforehand: scripts/gpu-colocate-suite.py
starts the next BE job while HP is measured alone), printing
  be: waiting for F
first; SIGTERM while it waits ends it (exit 0, no steps).

Run:
  python3 benchmarks/torch/train.py --steps 200
  python3 benchmarks/torch/train.py --seconds 5
  tally run --priority=best-effort -- python3 benchmarks/torch/train.py
"""

import argparse
import os
import signal
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="train.py",
        description="Eager PyTorch BE training (small GPT, AdamW, bf16 autocast); "
                    "prints be-spin's progress lines (kernels= counts steps).")
    p.add_argument("--steps", type=int, default=0,
                   help="stop after N steps (default: until SIGTERM or --seconds)")
    p.add_argument("--seconds", "--duration", dest="seconds", type=float, default=0.0,
                   help="stop after S seconds from the first progress line")
    p.add_argument("--progress", type=float, default=0.5,
                   help="a progress line every S seconds (default 0.5)")
    p.add_argument("--layers", type=int, default=6, help="decoder blocks (default 6)")
    p.add_argument("--dim", type=int, default=768, help="model width (default 768)")
    p.add_argument("--heads", type=int, default=12, help="attention heads (default 12)")
    p.add_argument("--seq", type=int, default=256, help="sequence length (default 256)")
    p.add_argument("--batch", type=int, default=64, help="sequences per step (default 64)")
    p.add_argument("--vocab", type=int, default=8192, help="vocabulary (default 8192)")
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=1, help="seed of weights and data")
    p.add_argument("--no-autocast", action="store_true",
                   help="train in fp32 (only to check the code on a CPU)")
    p.add_argument("--start-file", metavar="PATH",
                   help="after the warmup steps, wait until PATH exists")
    p.add_argument("--start-timeout", type=float, default=900.0, metavar="S",
                   help="--start-file: exit 1 when PATH has not appeared after S "
                        "seconds (default 900)")
    p.add_argument("--device", default="cuda",
                   help="cuda (default); cpu only to check the code without a GPU")
    a = p.parse_args(argv)
    if a.start_timeout <= 0:
        p.error("--start-timeout must be positive")
    if min(a.layers, a.dim, a.heads, a.seq, a.batch, a.vocab) < 1 or a.dim % a.heads:
        p.error("--layers, --dim, --heads, --seq, --batch, --vocab must be positive "
                "and --dim a multiple of --heads")
    if a.steps < 0 or a.seconds < 0 or a.progress <= 0:
        p.error("--steps and --seconds must not be negative, --progress positive")
    return a


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("train: error: PyTorch (torch) is not importable")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import threading

    import workloads as w

    device = w.resolve_device(a.device, "train")
    trainer = w.Trainer(device, layers=a.layers, dim=a.dim, heads=a.heads, seq=a.seq,
                        batch=a.batch, vocab=a.vocab, lr=a.lr, seed=a.seed,
                        autocast=not a.no_autocast)
    w.say(w.be_settings_line(trainer))
    # From here SIGTERM and SIGINT end the loop cleanly (before: the process).
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    def wait_start():
        """False when SIGTERM came first; exits 1 after --start-timeout."""
        w.say(f"be: waiting for {a.start_file}")
        deadline = time.monotonic() + a.start_timeout
        while not os.path.exists(a.start_file):
            if stop.is_set():
                return False
            if time.monotonic() > deadline:
                sys.exit(f"train: error: --start-file {a.start_file} did not appear in "
                         f"{a.start_timeout:g} s")
            time.sleep(0.005)
        return True

    return w.run_be(trainer, stop, max_steps=a.steps, seconds=a.seconds,
                    progress=a.progress, before_start=wait_start if a.start_file else None)


if __name__ == "__main__":
    sys.exit(main())
