#!/usr/bin/env python3
"""serve.py - the PyTorch HP (latency-critical) inference service of the
co-location benchmark (scripts/gpu-colocate.sh): ResNet-50 or a BERT-base
sized encoder, written by hand with random weights (workloads.py), eager,
eval mode, torch.inference_mode, bf16 weights and activations by default
(--dtype), on CUDA. One request = one forward pass of one batch, waited for
with the stream's synchronize (cudaStreamSynchronize, as hp-serve does;
one stream, so the same as torch.cuda.synchronize here). Measured on an
H100 (torch 2.11): capacity about 130-220 req/s for ResNet-50 (bound by the
Python launches, so it depends on the host's CPU) and 300 req/s for BERT.
bf16 rather than fp16: the same tensor-core speed, and no overflow with
random weights.

  capacity mode (or --rate 0): requests back to back for S seconds; prints
      `hp: capacity C req/s`.
  poisson mode (--rate R > 0): an open loop: arrival times at exponential
      gaps of mean 1/R (seeded); each request is issued at its arrival, or
      when the previous one is done if the service is busy (it queues);
      latency = completion - scheduled arrival (time.perf_counter). Between
      requests it spins (--wait sleep: sleeps). `hp: service ...` gives the
      requests' own times, without queueing. Measured on an H100 VM
      (2026-11-25, ResNet-50, closed loop 4.07 ms a request): at half the
      closed-loop rate a request took 5.41 ms (p50) when the service slept
      between requests and 4.81 ms when it spun (at 0.3 of it: 6.23 and
      4.00 ms; BERT at half: 3.52 and 2.62 ms against 2.18 closed loop):
      a sleeping host is slow to take up the next request, and at half load
      the open loop's queue then grows (p50 latency 7.7 ms against 6.6 ms).

Output: the lines and the --csv file of the C++ hp-serve, so that
gpu-colocate.sh and colocate-report.py read both (see workloads.py):
  hp: settings ... / hp: window START END / hp: requests N rate R p50 X
  p99 Y p999 Z mean M max W us / hp: capacity C req/s (closed loop)
It takes hp-serve's options --rate, --duration (= --seconds), --csv, --seed,
--warmup, --drain, so `serve.py --model M` can stand where hp-serve's
command line stands. Its start-up (import, CUDA context, model, warmup)
takes seconds, so gpu-colocate.sh starts it beside BE with --start-file F:
after the warmup it waits until F exists (the script creates F LEAD s after
BE's first progress line), then its measurement window (the `# window`
line) starts. Without --start-file the window starts right after the warmup.

With --serve-dir D it serves many windows, one at a time, on request
(scripts/gpu-colocate-suite.py keeps one service process through the runs
of one sharing system): after the warmup it writes D/ready and then waits
for D/1.req, D/2.req, ... (each written whole, by a rename), one line:
  poisson RATE SECONDS CSV      a window of Poisson arrivals (its CSV)
  capacity SECONDS CSV          a closed-loop window
  quit                          exit 0
Before each window --rewarm requests (default 10) are served unmeasured.
When the window is done it writes D/N.done (by a rename): the summary
lines, then `rc N` (0, or 1 when no request was measured). It exits 1 when
no request file appears within --start-timeout seconds of the last.

Run:
  python3 benchmarks/torch/serve.py --model resnet50 --mode capacity --seconds 5
  python3 benchmarks/torch/serve.py --model bert --rate 150 --seconds 15 \\
      --csv bert.hp.csv
  python3 benchmarks/torch/serve.py --rate 100 --start-file /tmp/go &
  touch /tmp/go      # later: the window starts
  python3 benchmarks/torch/serve.py --serve-dir /tmp/hp &   # then:
  echo "poisson 100 5 /tmp/w1.csv" >/tmp/hp/t && mv /tmp/hp/t /tmp/hp/1.req
  tally run --priority=high -- python3 benchmarks/torch/serve.py ...
"""

import argparse
import os
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="serve.py",
        description="PyTorch HP inference service: closed-loop capacity or Poisson "
                    "arrivals; prints hp-serve's summary lines, writes its CSV.")
    p.add_argument("--model", choices=("resnet50", "bert"), default="resnet50",
                   help="the service (default resnet50)")
    p.add_argument("--mode", choices=("capacity", "poisson"),
                   help="capacity: closed loop; poisson: open loop at --rate "
                        "(default: poisson when --rate > 0, else capacity)")
    p.add_argument("--rate", type=float, default=0.0,
                   help="Poisson arrivals, requests/s; 0: closed loop (default 0)")
    p.add_argument("--seconds", "--duration", dest="seconds", type=float, default=10.0,
                   help="measure for S seconds (default 10)")
    p.add_argument("--csv", help="write every latency (us) to this file, one per line")
    p.add_argument("--batch", type=int, default=1, help="batch per request (default 1)")
    p.add_argument("--warmup", type=int, default=50,
                   help="requests before the measurement (default 50)")
    p.add_argument("--drain", type=float, default=2.0,
                   help="poisson: requests of the window not done S s after it are "
                        "counted unserved, latency a lower bound (default 2)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the arrival times and the weights (default 1)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16",
                   help="weights and activations (default bf16)")
    p.add_argument("--start-file", metavar="PATH",
                   help="after the warmup, wait until PATH exists, then start the "
                        "measurement window (gpu-colocate.sh's start signal)")
    p.add_argument("--start-timeout", type=float, default=600.0, metavar="S",
                   help="--start-file: exit 1 when PATH has not appeared after S "
                        "seconds; --serve-dir: when no request came for S seconds "
                        "(default 600)")
    p.add_argument("--serve-dir", metavar="DIR",
                   help="serve windows on request: DIR/N.req in, DIR/N.done out "
                        "(see the top of serve.py); --rate, --seconds, --csv and "
                        "--start-file are then taken from each request")
    p.add_argument("--rewarm", type=int, default=10,
                   help="--serve-dir: requests served unmeasured before each "
                        "window (default 10)")
    p.add_argument("--wait", choices=("sleep", "spin"), default="spin",
                   help="poisson: between requests, spin all the way, keeping the "
                        "host CPU awake (the default), or sleep (waking 200 us early "
                        "and spinning the rest)")
    p.add_argument("--device", default="cuda",
                   help="cuda (default); cpu only to check the code without a GPU")
    a = p.parse_args(argv)
    if a.mode is None:
        a.mode = "poisson" if a.rate > 0 else "capacity"
    if a.mode == "poisson" and a.rate <= 0:
        p.error("--mode poisson needs --rate > 0")
    if a.mode == "capacity" and a.rate != 0:
        p.error("--mode capacity is a closed loop: leave out --rate (or pass 0)")
    if a.seconds <= 0 or a.batch < 1 or a.warmup < 0 or a.drain < 0 or a.rate < 0:
        p.error("--seconds and --batch must be positive, --warmup, --drain and "
                "--rate not negative")
    if a.start_timeout <= 0:
        p.error("--start-timeout must be positive")
    if a.serve_dir and (a.start_file or a.csv or a.rate):
        p.error("--serve-dir takes the rate, the window and the CSV from its requests: "
                "leave out --start-file, --csv and --rate")
    if a.rewarm < 0:
        p.error("--rewarm must not be negative")
    return a


def wait_for_file(path, timeout, what="--start-file"):
    """Polls every millisecond until path exists; exits 1 after timeout s."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"serve: error: {what} {path} did not appear in {timeout:g} s")
        time.sleep(0.001)


def parse_request(line):
    """One --serve-dir request: ("poisson", rate, seconds, csv),
    ("capacity", 0, seconds, csv) or ("quit",); None when malformed."""
    words = line.split()
    try:
        if words == ["quit"]:
            return ("quit",)
        if len(words) == 4 and words[0] == "poisson":
            rate, seconds = float(words[1]), float(words[2])
            if rate > 0 and seconds > 0:
                return ("poisson", rate, seconds, words[3])
        if len(words) == 3 and words[0] == "capacity":
            seconds = float(words[1])
            if seconds > 0:
                return ("capacity", 0.0, seconds, words[2])
    except ValueError:
        pass
    return None


def write_whole(path, text):
    """Writes text to path by a rename: a reader never sees half of it."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def serve_windows(a, w, service, sync, torch):
    """--serve-dir: windows on request, until `quit` (see the top)."""
    import contextlib
    import io
    os.makedirs(a.serve_dir, exist_ok=True)
    with torch.inference_mode():
        for _ in range(a.warmup):
            service.request()
            sync()
    write_whole(os.path.join(a.serve_dir, "ready"), "ready\n")
    w.say(f"hp: warmed up; serving windows from {a.serve_dir}")
    n = 0
    while True:
        n += 1
        req = os.path.join(a.serve_dir, f"{n}.req")
        wait_for_file(req, a.start_timeout, "--serve-dir request")
        with open(req) as f:
            r = parse_request(f.read())
        if r is None:
            sys.exit(f"serve: error: {req}: not 'poisson RATE SECONDS CSV', "
                     "'capacity SECONDS CSV' or 'quit'")
        if r[0] == "quit":
            w.say("hp: quit")
            return 0
        mode, rate, seconds, csv_path = r
        settings = w.hp_settings(service, rate, a.seed, seconds, a.rewarm, a.drain,
                                 "default", service.device)
        if mode == "poisson":
            settings += f" between-requests {a.wait}"
        own = []
        with torch.inference_mode():
            lat, unserved, start, end = w.run_hp(service.request, sync, rate, seconds,
                                                 a.rewarm, a.drain, a.seed,
                                                 spin="all" if a.wait == "spin" else True,
                                                 service=own)
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            rc = w.report_hp(lat, unserved, start, end, rate, a.drain, settings, csv_path)
            if own and mode == "poisson":
                own.sort()
                w.say(f"hp: service (issue to completion, without queueing) p50 "
                      f"{w.percentile(own, 0.5):.1f} p99 {w.percentile(own, 0.99):.1f} us, "
                      f"wait {a.wait}")
        sys.stdout.write(text.getvalue())
        sys.stdout.flush()
        write_whole(os.path.join(a.serve_dir, f"{n}.done"), text.getvalue() + f"rc {rc}\n")


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("serve: error: PyTorch (torch) is not importable")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import workloads as w

    device = w.resolve_device(a.device, "serve")
    service = w.Service(a.model, a.batch, w.DTYPES[a.dtype], device, a.seed)
    sync = w.make_sync(device)
    if a.serve_dir:
        return serve_windows(a, w, service, sync, torch)
    settings = w.hp_settings(service, a.rate, a.seed, a.seconds, a.warmup, a.drain,
                             "default", device)
    if a.mode == "poisson":
        settings += f" between-requests {a.wait}"

    def wait_start():
        w.say(f"hp: warmed up; waiting for {a.start_file}")
        wait_for_file(a.start_file, a.start_timeout)

    own = []
    with torch.inference_mode():
        lat, unserved, start, end = w.run_hp(service.request, sync, a.rate, a.seconds,
                                             a.warmup, a.drain, a.seed,
                                             spin="all" if a.wait == "spin" else True,
                                             before_window=wait_start if a.start_file
                                             else None, service=own)
    rc = w.report_hp(lat, unserved, start, end, a.rate, a.drain, settings, a.csv)
    if own and a.mode == "poisson":
        # A request's own time, without the time queued: open loop against
        # closed loop tells queueing from a slower service.
        own.sort()
        w.say(f"hp: service (issue to completion, without queueing) p50 "
              f"{w.percentile(own, 0.5):.1f} p99 {w.percentile(own, 0.99):.1f} us, "
              f"wait {a.wait}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
