#!/usr/bin/env python3
"""gpu-colocate-suite.py - the whole co-location evaluation in one command,
within one device command's 10 minutes on one GPU: the PyTorch inference
services (ResNet-50 and a BERT-base sized encoder, benchmarks/torch/serve.py)
beside the three training jobs (train-gpt, the CUDA example built with
tally_transform(); examples/triton/train_gpt.py, compiled by torch.compile
into Triton kernels that tally-ptxas transforms; benchmarks/torch/train.py,
eager PyTorch, no PTX), under every way of sharing the GPU:

  alone         HP alone: closed loop (its capacity), then Poisson arrivals at
                --load of that capacity; the same under `tally run` (the
                runtime's cost) and as an MPS client
  be-alone      each BE alone, plain and under `tally run` (tally-be-alone)
  timeslice     HP + BE as two processes, default time slicing
  streams       one process, HP on a greatest-priority stream, BE on a lowest
                (benchmarks/torch/streams.py; eager training only: the
                other BE jobs have no one-process form)
  tally         HP under `tally run --priority=high`, BE under
                `tally run --priority=best-effort`
  mps           HP + BE as two MPS clients
  mps-prio      as mps, BE with CUDA_MPS_CLIENT_PRIORITY=1 (below normal)
  tally-mps     tally, both MPS clients

What makes it fit: processes live across runs. Per system the HP services
start once (both at the same time) and serve one measurement window after
another on request (serve.py --serve-dir); each BE job starts once per
system (train.py and train_gpt.py with the services, warming up and then
waiting behind --start-file until their turn; train-gpt at its turn) and
runs through its BE-alone window (the HP services and the other BE jobs
alive and idle) and then one HP window per service beside it. Each window's BE
rate is taken over that window from BE's time-stamped progress lines, as in
scripts/gpu-colocate.sh, whose one-pair-per-process runs (longer windows,
hp-serve and be-spin, the kill checks) stay the place for record runs and
the runtime's own goals. Consequences, said in the report: a Tally BE
process's statistics (preemptions, forms) cover all of its windows; the
BE jobs' Tally profiles start empty, are measured by the tally system's
processes and reused by tally-mps's; the windows are short (--hp-seconds,
default 5 s: a few hundred ResNet-50 requests, so p99.9 rests on a handful
of samples); BE-alone rates are measured with the idle processes alive (an
idle context takes no time slices; Tally's BE then runs as after a long HP
silence). A BE-alone row is the BE log's lines within that window, copied
to be-alone-BE.be.log (tally-be-alone-BE.be.log under Tally).

Checks: every HP window ran and reported; every BE started and ended well
(train.py: exit 0 and its summary); under Tally, train-gpt's and
train_gpt.py's per-step losses (their bits) equal the plain run's over the
steps both ran.

Usage: scripts/gpu-colocate-suite.py [options] [DIR]
  DIR (default .carry/runtime, from the repository) holds prefix/bin/tally,
  prefix/bin/tally-ptxas, train-gpt, train-gpt.tally and optionally torch/
  (benchmarks/torch as scripts/prepare-device.sh copies it; else the
  repository's) and train_gpt.py (else examples/triton's).
Writes OUT/suite/ (every window's NAME.hp.csv and .hp.log, every BE's
NAME.be.log and .err, Tally's statistics NAME.*.json, the services' logs),
per HP service OUT/HP/colocate/{runs.tsv,checks.tsv,device.txt} with
OUT/HP/colocate.csv and the plots OUT/HP/plots/ (scripts/colocate-report.py
and colocate-plots.py read them as they read gpu-colocate.sh's), and
OUT/all-report.md (every service's table, with each row's p99 and p99.9
over HP alone; a Goals table per system: HP p99, p99.9 and p50 over alone,
mean and worst, BE kept, system throughput, the share of BE GPU time
preemptible, preemption p99 on its clock, or "none made" and that goal not
measured; the suite's checks and timings) and OUT/colocate-all.csv (every
row, with the service in a first column hp; hp_p50_over_alone,
hp_p99_over_alone and hp_p999_over_alone among colocate-report.py's).
Every process it starts is killed when it ends, or dies (SIGKILL from the
kernel when the suite is gone). Exit status 1 when a check or a run failed,
2 on bad usage, 130 when interrupted (SIGINT, SIGTERM: no report then).
"""

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HP_SERVICES = ("resnet50", "bert")
BE_JOBS = ("gpt", "triton", "torch")
SYSTEMS = ("timeslice", "streams", "tally", "mps", "mps-prio", "tally-mps")
BE_LABEL = {"gpt": "train-gpt", "triton": "train_gpt.py (Triton)",
            "torch": "train.py (PyTorch eager)"}
# First progress line of a BE log: train.py's own, train-gpt's and
# train_gpt.py's step lines as time-stamped here.
FIRST_PROGRESS = {"torch": re.compile(r"^be: t="),
                  "gpt": re.compile(r"^[0-9.]+ step "),
                  "triton": re.compile(r"^[0-9.]+ step ")}
LOSS = {"gpt": re.compile(r"\bstep (\d+) loss \S+ bits ([0-9a-f]+)"),
        "triton": re.compile(r"\bstep (\d+) loss (\S+) ")}


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="gpu-colocate-suite.py",
        description="The co-location evaluation (PyTorch services beside three "
                    "training jobs, every sharing system) in one command: "
                    "OUT/all-report.md (every row's HP p50, p99, p99.9, BE kept, system "
                    "throughput, p99 and p99.9 over HP alone; Goals per system, with "
                    "system throughput, BE GPU time preemptible and preemption p99) and "
                    "OUT/colocate-all.csv (with p50, p99 and p99.9 over HP alone as "
                    "fractions); see the top of the file for what it runs and writes.")
    p.add_argument("dir", nargs="?", default=None,
                   help="the built programs (default .carry/runtime)")
    p.add_argument("--quick", action="store_true",
                   help="short windows (HP 2 s, BE alone 2 s, capacity 2 s), "
                        "for development")
    p.add_argument("--out", default=os.environ.get("OUT", "gpu-out"),
                   help="output folder (default $OUT, else gpu-out)")
    p.add_argument("--hp-seconds", type=float, default=None,
                   help="each HP window, s (default 5; --quick 2)")
    p.add_argument("--be-seconds", type=float, default=None,
                   help="each BE-alone window, s (default 4; --quick 2)")
    p.add_argument("--capacity-seconds", type=float, default=None,
                   help="each service's closed-loop window, s (default 5; --quick 2)")
    p.add_argument("--load", type=float, default=0.5,
                   help="Poisson rate as a fraction of each service's capacity "
                        "(default 0.5)")
    p.add_argument("--lead", type=float, default=1.0,
                   help="BE runs this long after its first progress line before "
                        "its first window, s (default 1)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="co-located systems, comma-separated, among " + ", ".join(SYSTEMS) +
                        " (default all). timeslice runs always: its processes "
                        "measure the capacities and HP and BE alone; under Tally "
                        "and MPS those run where a chosen system needs them")
    p.add_argument("--pairs", default=",".join(f"{h}:{b}" for h in HP_SERVICES for b in BE_JOBS),
                   help="HP:BE pairs, comma-separated (HP among " + ", ".join(HP_SERVICES) +
                        "; BE among " + ", ".join(BE_JOBS) + "; default every pair)")
    p.add_argument("--python", default=os.environ.get("PYTHON"),
                   help="the Python with PyTorch (default $PYTHON, else the first of "
                        "/opt/torch/.venv/bin/python and python3 that imports torch "
                        "with CUDA)")
    p.add_argument("--triton-args",
                   default=os.environ.get("TRITON_ARGS",
                                          "--mm-configs 2 --no-coordinate-descent "
                                          "--batch 32 --deterministic"),
                   help="train_gpt.py's options (default as gpu-colocate.sh's: "
                        "%(default)s)")
    p.add_argument("--triton-caches", default=os.environ.get("TRITON_CACHES"),
                   help="folder of the Triton and Inductor caches, kept (default "
                        "OUT/triton-caches)")
    p.add_argument("--triton-timeout", type=float, default=420,
                   help="limit of the run that fills the Triton caches, s (default 420)")
    a = p.parse_args(argv)
    a.hp_seconds = a.hp_seconds or (2.0 if a.quick else 5.0)
    a.be_seconds = a.be_seconds or (2.0 if a.quick else 4.0)
    a.capacity_seconds = a.capacity_seconds or (2.0 if a.quick else 5.0)
    for name in ("hp_seconds", "be_seconds", "capacity_seconds", "load"):
        if not 0 < getattr(a, name) <= 3600:
            p.error(f"--{name.replace('_', '-')} must be in (0, 3600]")
    if a.lead < 0:
        p.error("--lead must not be negative")
    a.systems = [s for s in a.systems.split(",") if s]
    for s in a.systems:
        if s not in SYSTEMS:
            p.error(f"--systems: unknown system '{s}' ({', '.join(SYSTEMS)})")
    if "timeslice" not in a.systems:
        a.systems.insert(0, "timeslice")
    pairs = []
    for item in (x for x in a.pairs.split(",") if x):
        hp, _, be = item.partition(":")
        if hp not in HP_SERVICES or be not in BE_JOBS:
            p.error(f"--pairs: '{item}' is not HP:BE (HP among {', '.join(HP_SERVICES)}, "
                    f"BE among {', '.join(BE_JOBS)})")
        if (hp, be) in pairs:
            p.error(f"--pairs names {item} twice")
        pairs.append((hp, be))
    if not pairs:
        p.error("--pairs names no pair")
    a.pairs = pairs
    return a


try:  # loaded here, not in a forked child
    import ctypes
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError, ImportError):
    _PRCTL = None
_PARENT = os.getpid()


def _die_with_parent():
    """In a child before exec: a session of its own, and SIGKILL when the
    suite dies, however it dies (a device command's limit kills it with
    -9): no workload outlives it to disturb the next measurement."""
    os.setsid()
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != _PARENT:  # died before the prctl
            os._exit(1)


def fail(msg):
    print(f"gpu-colocate-suite: error: {msg}", file=sys.stderr)
    sys.exit(1)


def say(msg):
    print(f"== {msg}", flush=True)


class Suite:
    def __init__(self, a):
        self.a = a
        self.out = os.path.abspath(a.out)
        self.L = os.path.join(self.out, "suite")
        self.t0 = time.monotonic()
        self.procs = []  # every process started, killed (group) at the end
        self.checks = []  # (hp or None, name, result, detail)
        self.rows = {hp: [] for hp in HP_SERVICES}
        self.fails = 0
        self.rate = {}  # HP service: Poisson rate
        self.mps_root = None
        self.phases = []  # (name, seconds)
        self.hps = sorted({hp for hp, _ in a.pairs}, key=HP_SERVICES.index)
        self.bes = sorted({be for _, be in a.pairs}, key=BE_JOBS.index)

    # ----- bookkeeping ---------------------------------------------------

    def check(self, hp, name, result, detail):
        self.checks.append((hp, name, result, detail))
        print(f"   {result}: {name}: {detail}", flush=True)
        if result == "FAIL":
            self.fails += 1

    def row(self, hp, system, be, hp_csv, be_log, be_ref, stats, notes):
        kind = be if be in ("gpt", "triton", "torch") else ""
        self.rows[hp].append([system, be, be if be != "none" else "", hp_csv, be_log, kind,
                              be_ref, stats, notes])

    def path(self, name):
        return os.path.join(self.L, name)

    @staticmethod
    def errtail(path):
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 300))
                return f.read().decode(errors="replace").replace("\n", " ")
        except OSError:
            return ""

    # ----- processes -----------------------------------------------------

    def spawn(self, cmd, env, log, err, stamp=False):
        """Starts cmd in a session of its own; with stamp, each stdout line
        is written to log after the epoch time it was read."""
        e = dict(os.environ)
        e.update(env)
        with open(err, "w") as ferr:
            if stamp:
                p = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=ferr,
                                     stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
                flog = open(log, "w")

                def pump():
                    for raw in p.stdout:
                        flog.write(f"{time.time():.6f} "
                                   f"{raw.decode(errors='replace').rstrip()}\n")
                        flog.flush()
                    flog.close()

                p.pump = threading.Thread(target=pump, daemon=True)
                p.pump.start()
            else:
                with open(log, "w") as flog:
                    p = subprocess.Popen(cmd, env=e, stdout=flog, stderr=ferr,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
                p.pump = None
        self.procs.append(p)
        return p

    @staticmethod
    def kill(p):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            pass
        if p.pump:
            p.pump.join(5)

    def stop(self, p, grace=30):
        """SIGTERM (the BE jobs end cleanly on it), SIGKILL after grace s;
        the exit status, or 'timeout'."""
        try:
            p.send_signal(signal.SIGTERM)
        except OSError:
            pass
        try:
            rc = p.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill(p)
            return "timeout"
        if p.pump:
            p.pump.join(5)
        return rc

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                self.kill(p)
        self.mps_stop()

    # ----- environments --------------------------------------------------

    def env(self, system, role):
        """The environment of a process of system (role hp or be)."""
        e = {"TALLY_STATS_TIMING": "16" if role == "be" else "0"}
        if system in ("mps", "mps-prio", "tally-mps", "mps-alone"):
            e["CUDA_MPS_PIPE_DIRECTORY"] = os.path.join(self.mps_root, "pipe")
            e["CUDA_MPS_LOG_DIRECTORY"] = os.path.join(self.mps_root, "log")
            if system == "mps-prio":
                e["CUDA_MPS_CLIENT_PRIORITY"] = "1" if role == "be" else "0"
        return e

    @staticmethod
    def is_tally(system):
        return system.startswith("tally")

    # ----- the HP services -----------------------------------------------

    def spawn_services(self, system):
        """Starts every HP service of system (not waiting for them)."""
        tally = self.is_tally(system)
        started = {}
        for hp in self.hps:
            name = f"{system}-{hp}"
            d = self.path(name + ".dir")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            cmd = [self.py, os.path.join(self.torch, "serve.py"), "--model", hp, "--seed", "1",
                   "--serve-dir", d]
            env = self.env(system, "hp")
            if tally:
                env["TALLY_CACHE_DIR"] = self.path("profile/hp")
                cmd = [self.tally, "run", "--priority=high",
                       f"--stats={self.path(name + '.hp.json')}", "--"] + cmd
            p = self.spawn(cmd, env, self.path(name + ".log"), self.path(name + ".err"))
            started[hp] = {"proc": p, "dir": d, "n": 0, "name": name}
        return started

    def wait_services(self, started):
        """{hp: state} of the services that became ready (a FAIL check for
        each that did not within 300 s)."""
        ready = {}
        deadline = time.monotonic() + 300
        for hp, s in started.items():
            ready_file = os.path.join(s["dir"], "ready")
            while not os.path.exists(ready_file):
                if ((s["proc"].poll() is not None or time.monotonic() > deadline)
                        and not os.path.exists(ready_file)):
                    self.check(hp, f"{s['name']}: start", "FAIL",
                               f"not ready (exit {s['proc'].poll()}): "
                               f"{self.errtail(self.path(s['name'] + '.err'))}")
                    self.kill(s["proc"])
                    break
                time.sleep(0.05)
            else:
                ready[hp] = s
        return ready

    def window(self, hp, s, name, mode, seconds):
        """One window of service s (mode poisson or capacity): NAME.hp.csv
        and NAME.hp.log; True when it reported."""
        csv_path = self.path(name + ".hp.csv")
        s["n"] += 1
        req = os.path.join(s["dir"], f"{s['n']}.req")
        line = (f"poisson {self.rate[hp]:.6g} {seconds:g} {csv_path}" if mode == "poisson"
                else f"capacity {seconds:g} {csv_path}")
        with open(req + ".tmp", "w") as f:
            f.write(line + "\n")
        os.replace(req + ".tmp", req)
        done = os.path.join(s["dir"], f"{s['n']}.done")
        deadline = time.monotonic() + seconds + 120
        while not os.path.exists(done):
            if ((s["proc"].poll() is not None or time.monotonic() > deadline)
                    and not os.path.exists(done)):
                self.check(hp, f"{name}: HP window", "FAIL",
                           f"no report (service exit {s['proc'].poll()}): "
                           f"{self.errtail(self.path(s['name'] + '.err'))}")
                self.kill(s["proc"])
                s["dead"] = True
                return False
            time.sleep(0.01)
        with open(done) as f:
            text = f.read()
        with open(self.path(name + ".hp.log"), "w") as f:
            f.write(text)
        if "rc 0" not in text.splitlines() or "hp: requests" not in text:
            self.check(hp, f"{name}: HP window", "FAIL", text.replace("\n", " ")[-300:])
            return False
        return True

    def stop_services(self, services):
        for hp, s in services.items():
            if s.get("dead"):
                continue
            s["n"] += 1
            req = os.path.join(s["dir"], f"{s['n']}.req")
            with open(req + ".tmp", "w") as f:
                f.write("quit\n")
            os.replace(req + ".tmp", req)
        for hp, s in services.items():
            if s.get("dead"):
                continue
            try:
                rc = s["proc"].wait(60)
            except subprocess.TimeoutExpired:
                self.kill(s["proc"])
                rc = "hung"
            if rc != 0:
                self.check(hp, f"{s['name']}: exit", "FAIL",
                           f"exit {rc}: {self.errtail(self.path(s['name'] + '.err'))}")

    # ----- the BE jobs ---------------------------------------------------

    def be_cmd(self, system, be, name, gate=None):
        """BE's command line; gate: its --start-file (train.py and
        train_gpt.py: they warm up, then wait for it)."""
        tally = self.is_tally(system)
        tl = [self.tally, "run", "--priority=best-effort",
              f"--stats={self.path(name + '.be.json')}"]
        if be == "gpt":
            return ["stdbuf", "-oL"] + (tl + ["--", self.gpt_tally] if tally
                                        else [self.gpt_plain]) + ["--steps", "100000"]
        if be == "torch":
            base = [self.py, os.path.join(self.torch, "train.py"), "--seed", "1",
                    "--seconds", "1800"] + (["--start-file", gate] if gate else [])
            return tl + ["--"] + base if tally else base
        base = [self.py, "-u", self.triton_py, "--steps", "100000000", "--seed", "1"]
        base += self.a.triton_args.split() + (["--start-file", gate] if gate else [])
        return tl + ["--triton-ptxas", "--"] + base if tally else base

    def be_env(self, system, be):
        e = self.env(system, "be")
        if self.is_tally(system):
            e["TALLY_CACHE_DIR"] = self.path(f"profile/{be}")
        if be == "triton":
            e.update(self.triton_env)
        return e

    GATED = ("triton", "torch")  # started early, warmed up, let go in turn
    # The BE jobs' Tally profiles: one cache per job, empty at the start of
    # the run, filled by the tally system's process (in its BE-alone window
    # and first windows), reused by tally-mps's.
    PROFILE_NOTE = {"tally": "profile cold at its start (measured in this run)",
                    "tally-mps": "profile as the tally run left it"}

    def spawn_be(self, system, be, name):
        """Starts BE (train.py and train_gpt.py behind a start file)."""
        gate = self.path(name + ".go") if be in self.GATED else None
        if gate and os.path.exists(gate):
            os.unlink(gate)
        log = self.path(name + ".be.log")
        p = self.spawn(self.be_cmd(system, be, name, gate), self.be_env(system, be), log,
                       self.path(name + ".be.err"), stamp=be in ("gpt", "triton"))
        return {"proc": p, "be": be, "name": name, "log": log, "gate": gate}

    @staticmethod
    def progress(b):
        """BE's progress lines so far, and whether it waits at its gate."""
        n, waiting = 0, False
        try:
            with open(b["log"], errors="replace") as f:
                for line in f:
                    if FIRST_PROGRESS[b["be"]].match(line):
                        n += 1
                    elif "waiting for " in line:
                        waiting = True
        except OSError:
            pass
        return n, waiting

    def wait_be(self, b, ready, limit, deadline=None):
        """Waits until ready(progress lines, waiting) holds; False (a FAIL
        check, the process killed) when BE ended or limit s passed (or the
        monotonic deadline, where given)."""
        deadline = deadline or time.monotonic() + limit
        while not ready(*self.progress(b)):
            if b["proc"].poll() is not None or time.monotonic() > deadline:
                self.check(None, f"{b['name']}: BE start", "FAIL",
                           f"no progress line (exit {b['proc'].poll()}): "
                           f"{self.errtail(self.path(b['name'] + '.be.err'))}")
                self.kill(b["proc"])
                return False
            time.sleep(0.05)
        return True

    def wait_gated(self, gated):
        """Waits for every early-started BE to wait at its gate."""
        deadline = time.monotonic() + 300  # all of them start at once
        return {be: b for be, b in gated.items()
                if self.wait_be(b, lambda n, waiting: waiting, 300, deadline)}

    def go_be(self, b):
        """Lets BE go (its gate, where it has one) and waits for a progress
        line after that."""
        if b["gate"]:
            before = self.progress(b)[0]
            with open(b["gate"], "w"):
                pass
            return self.wait_be(b, lambda n, waiting: n > before, 120)
        return self.wait_be(b, lambda n, waiting: n > 0, 120)

    def end_be(self, p, system, be, name):
        """Stops BE; checks its end (and, under Tally, its losses)."""
        alive = p.poll() is None
        rc = self.stop(p)
        ok = rc in (0, 143, -signal.SIGTERM)
        log = self.path(name + ".be.log")
        if not alive:
            self.check(None, f"{name}: BE run", "FAIL",
                       f"ended before its windows did (exit {rc}): "
                       f"{self.errtail(self.path(name + '.be.err'))}")
        elif not ok:
            self.check(None, f"{name}: BE run", "FAIL",
                       f"exit {rc} after SIGTERM: {self.errtail(self.path(name + '.be.err'))}")
        elif be == "torch":
            with open(log, errors="replace") as f:
                if not any(line.startswith("be: steps") for line in f):
                    self.check(None, f"{name}: BE run", "FAIL", "no 'be: steps' summary")
        if be in LOSS and self.is_tally(system):
            self.check_losses(name, be)

    def check_losses(self, name, be):
        ref = self.path(f"timeslice-{be}.be.log")
        got = self.path(f"{name}.be.log")
        if not os.path.exists(ref):
            self.check(None, f"{name}: BE losses", "SKIP", "no plain run to compare with")
            return

        def steps(path):
            d = {}
            with open(path, errors="replace") as f:
                for line in f:
                    m = LOSS[be].search(line)
                    if m:
                        d[int(m.group(1))] = m.group(2)
            return d

        a, b = steps(ref), steps(got)
        common = sorted(set(a) & set(b))
        bad = [k for k in common if a[k] != b[k]]
        least = 50 if be == "gpt" else 10
        if bad:
            self.check(None, f"{name}: BE losses", "FAIL",
                       f"step {bad[0]}: {b[bad[0]]} but the plain run gave {a[bad[0]]} "
                       f"({len(bad)} of {len(common)} steps differ)")
        elif len(common) < least:
            self.check(None, f"{name}: BE losses", "FAIL", f"only {len(common)} steps to compare")
        else:
            self.check(None, f"{name}: BE losses", "PASS",
                       f"{len(common)} steps, every loss's bits as the plain run's")

    def be_alone_window(self, system, be, name, log):
        """BE's own window (HP services present and idle): its log's lines
        within it, copied to SYSTEM-BE.be.log... as the BE-alone row."""
        a = time.time()
        time.sleep(self.a.be_seconds)
        b = time.time()
        alone = "be-alone" if system == "timeslice" else "tally-be-alone"
        dst = self.path(f"{alone}-{be}.be.log")
        kept = 0
        with open(log, errors="replace") as f, open(dst, "w") as g:
            for line in f:
                t = None
                m = re.match(r"^([0-9]+\.[0-9]+) ", line)
                if m and be in ("gpt", "triton"):
                    t = float(m.group(1))
                m = re.search(r"\bepoch=([0-9.]+)", line)
                if m and be == "torch":
                    t = float(m.group(1))
                if t is not None and a <= t <= b:
                    g.write(line)
                    kept += 1
        if kept < 2:
            self.check(None, f"{alone}-{be}: BE alone", "FAIL",
                       f"{kept} progress lines in its {self.a.be_seconds:g} s window")
            return
        stats = self.path(name + ".be.json") if self.is_tally(system) else ""
        note = f"BE alone ({self.a.be_seconds:g} s window of {name}; HP services and " \
               "the other BE jobs alive and idle)"
        if system in self.PROFILE_NOTE:
            note += f"; {self.PROFILE_NOTE[system]}"
        for hp in self.hps:
            if (hp, be) in self.a.pairs:
                self.row(hp, alone, be, "", dst, self.path(f"be-alone-{be}.be.log"), stats,
                         note)

    # ----- MPS -----------------------------------------------------------

    def mps_env(self):
        return dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=os.path.join(self.mps_root, "pipe"),
                    CUDA_MPS_LOG_DIRECTORY=os.path.join(self.mps_root, "log"))

    def mps_start(self):
        import tempfile
        self.mps_root = tempfile.mkdtemp(prefix="tally-suite-mps.")
        os.makedirs(os.path.join(self.mps_root, "pipe"))
        os.makedirs(os.path.join(self.mps_root, "log"))
        r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=self.mps_env(),
                           capture_output=True, text=True)
        if r.returncode != 0:
            self.check(None, "MPS", "FAIL", f"nvidia-cuda-mps-control -d: {r.stderr.strip()}")
            shutil.rmtree(self.mps_root, ignore_errors=True)
            self.mps_root = None
            return False
        time.sleep(1)
        return True

    def mps_servers(self):
        r = subprocess.run(["nvidia-cuda-mps-control"], input="get_server_list\n",
                           env=self.mps_env(), capture_output=True, text=True)
        return r.stdout.strip()

    def mps_stop(self):
        if not self.mps_root:
            return
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=self.mps_env(),
                       capture_output=True, text=True)
        time.sleep(1)
        shutil.copytree(os.path.join(self.mps_root, "log"), self.path("mps-log"),
                        dirs_exist_ok=True)
        shutil.rmtree(self.mps_root, ignore_errors=True)
        self.mps_root = None

    # ----- phases ----------------------------------------------------------

    def phase(self, name, fn, *args):
        t = time.monotonic()
        say(f"{name} (at {t - self.t0:.0f} s)")
        fn(*args)
        self.phases.append((name, time.monotonic() - t))

    def hp_alone(self, system, services):
        """HP alone windows of each service (system alone, tally-alone or
        mps-alone)."""
        for hp, s in services.items():
            name = f"{system}-{hp}"
            if self.window(hp, s, name, "poisson", self.a.hp_seconds):
                stats = self.path(s["name"] + ".hp.json") if self.is_tally(system) else ""
                self.row(hp, system, "none", self.path(name + ".hp.csv"), "", "", stats,
                         "HP alone")

    def setup(self, hp_system, be_systems):
        """Starts, all at once, the HP services of hp_system and, for each
        system of be_systems, the BE jobs that warm up behind a gate; waits
        until each is ready. Returns the services ({hp: state}) and
        {system: {be: BE state, or None when it failed to start}}."""
        started = self.spawn_services(hp_system)
        gated = {sys_: {be: self.spawn_be(sys_, be, f"{sys_}-{be}")
                        for be in self.bes if be in self.GATED} for sys_ in be_systems}
        services = self.wait_services(started)
        for sys_, bes in gated.items():
            ok = self.wait_gated(bes)
            gated[sys_] = {be: ok.get(be) for be in bes}
        return services, gated

    def be_runs(self, system, services, be_alone, gated):
        """Each BE of the pairs (train-gpt started now, the others let go
        from their gates), beside each of its services' windows in turn,
        after its BE-alone window where be_alone; then stopped."""
        for be in self.bes:
            name = f"{system}-{be}"
            if be in gated:
                b = gated[be]
                if b is None:
                    continue  # failed to start: a check says so
            else:
                b = self.spawn_be(system, be, name)
            if not self.go_be(b):
                continue
            time.sleep(self.a.lead)
            log = b["log"]
            if be_alone:
                self.be_alone_window(system, be, name, log)
            for hp in self.hps:
                if (hp, be) not in self.a.pairs or hp not in services or services[hp].get("dead"):
                    continue
                wname = f"{system}-{hp}-{be}"
                if self.window(hp, services[hp], wname, "poisson", self.a.hp_seconds):
                    stats = ""
                    if self.is_tally(system):
                        stats = f"{self.path(services[hp]['name'] + '.hp.json')}," \
                                f"{self.path(name + '.be.json')}"
                    self.row(hp, system, be, self.path(wname + ".hp.csv"), log,
                             self.path(f"be-alone-{be}.be.log"), stats,
                             "one BE process through its windows"
                             + ("; statistics of all of them" if stats else "")
                             + (f"; {self.PROFILE_NOTE[system]}"
                                if system in self.PROFILE_NOTE else ""))
            # BE's progress lines past the last window's end.
            time.sleep(0.5)
            self.end_be(b["proc"], system, be, name)

    def plain_phase(self):
        services, gated = self.setup("timeslice", ["timeslice"])
        for hp, s in services.items():
            name = f"alone-closed-{hp}"
            if not self.window(hp, s, name, "capacity", self.a.capacity_seconds):
                continue
            with open(self.path(name + ".hp.log")) as f:
                m = re.search(r"^hp: capacity ([0-9.]+)", f.read(), re.M)
            if not m or float(m.group(1)) <= 0:
                self.check(hp, f"{name}: capacity", "FAIL", "no capacity line")
                continue
            cap = float(m.group(1))
            self.rate[hp] = cap * self.a.load
            self.row(hp, "alone-closed", "none", self.path(name + ".hp.csv"), "", "", "",
                     f"closed loop: capacity {cap:.1f} req/s")
            with open(self.path(f"device-{hp}.txt"), "w") as f:
                f.write(f"hp: serve.py --model {hp} (PyTorch eager, bf16, batch 1); capacity "
                        f"{cap:.1f} req/s (closed loop, alone); Poisson at {self.rate[hp]:.1f} "
                        f"req/s ({self.a.load:g} of capacity), {self.a.hp_seconds:g} s per "
                        "window\n")
        started = services
        services = {hp: s for hp, s in services.items() if hp in self.rate}
        self.hps = [hp for hp in self.hps if hp in self.rate]
        self.hp_alone("alone", services)
        self.be_runs("timeslice", services, True, gated["timeslice"])
        self.stop_services(started)

    def tally_phase(self, system, be_alone):
        services, gated = self.setup(system, [system])
        if system == "tally":
            self.hp_alone("tally-alone", services)
        self.be_runs(system, services, be_alone, gated[system])
        self.stop_services(services)

    def streams_phase(self):
        for hp in self.hps:
            if (hp, "torch") not in self.a.pairs:
                continue
            name = f"streams-{hp}-torch"
            cmd = [self.py, os.path.join(self.torch, "streams.py"), "--model", hp, "--seed", "1",
                   "--rate", f"{self.rate[hp]:.6g}", "--duration", f"{self.a.hp_seconds:g}",
                   "--csv", self.path(name + ".hp.csv"), "--be-lead", f"{self.a.lead:g}"]
            p = self.spawn(cmd, self.env("streams", "hp"), self.path(name + ".hp.log"),
                           self.path(name + ".hp.err"))
            try:
                rc = p.wait(self.a.hp_seconds + 300)
            except subprocess.TimeoutExpired:
                self.kill(p)
                rc = "hung"
            with open(self.path(name + ".hp.log"), errors="replace") as f:
                reported = any(line.startswith("hp: requests") for line in f)
            if rc != 0 or not reported:
                self.check(hp, f"{name}: run", "FAIL",
                           f"exit {rc}: {self.errtail(self.path(name + '.hp.err'))}")
                continue
            self.row(hp, "streams", "torch", self.path(name + ".hp.csv"),
                     self.path(name + ".hp.log"), self.path("be-alone-torch.be.log"), "",
                     "one process, two Python threads sharing the GIL (streams.py)")

    def mps_phase(self):
        if not shutil.which("nvidia-cuda-mps-control"):
            self.check(None, "MPS", "FAIL", "nvidia-cuda-mps-control not found: no MPS runs")
            return
        if not self.mps_start():
            return
        want = self.a.systems
        if "mps" in want or "mps-prio" in want:
            # HP of normal priority in both: one set of services for the two.
            systems = [x for x in ("mps", "mps-prio") if x in want]
            services, gated = self.setup("mps", systems)
            servers = self.mps_servers()
            with open(self.path("device.txt"), "a") as f:
                f.write(f"mps servers: {servers}\n")
            if services and not servers:
                self.check(None, "MPS", "FAIL", "the daemon lists no server while clients run")
                systems = []
            else:
                self.hp_alone("mps-alone", services)
            for system in systems:
                self.be_runs(system, services, False, gated[system])
            for bes in gated.values():  # any left at their gates
                for b in bes.values():
                    if b and b["proc"].poll() is None:
                        self.kill(b["proc"])
            self.stop_services(services)
        if "tally-mps" in want:
            self.tally_phase("tally-mps", be_alone=False)
        self.mps_stop()

    def triton_warm(self):
        """Fills the Triton and Inductor caches (a few steps, outside every
        measurement); False when it failed."""
        t = time.monotonic()
        log, err = self.path("triton-warm.log"), self.path("triton-warm.err")
        cmd = [self.py, "-u", self.triton_py, "--steps", "3", "--seed", "1"]
        p = self.spawn(cmd + self.a.triton_args.split(), self.triton_env, log, err)
        try:
            rc = p.wait(self.a.triton_timeout)
        except subprocess.TimeoutExpired:
            self.kill(p)
            rc = f"none: killed after {self.a.triton_timeout:g} s"
        with open(log, errors="replace") as f:
            steps = sum(1 for line in f if line.startswith("step "))
        if rc != 0 or steps != 3:
            self.check(None, "triton: caches filled", "FAIL",
                       f"exit {rc} after {time.monotonic() - t:.0f} s: {self.errtail(err)}")
            return False
        self.check(None, "triton: caches filled", "PASS",
                   f"3 steps in {time.monotonic() - t:.0f} s")
        return True

    # ----- set-up and report --------------------------------------------

    def find_programs(self):
        a = self.a
        d = os.path.abspath(a.dir) if a.dir else os.path.join(SRC, ".carry/runtime")
        if not os.path.isdir(d):
            fail(f"no directory {d} (the built programs)")
        self.tally = os.path.join(d, "prefix/bin/tally")
        if not os.access(self.tally, os.X_OK):
            fail(f"{self.tally} is missing or not executable")
        self.gpt_tally = os.path.join(d, "train-gpt.tally")
        self.gpt_plain = os.path.join(d, "train-gpt")
        if "gpt" in self.bes:
            if not os.access(self.gpt_tally, os.X_OK):
                fail(f"--pairs has gpt, but {self.gpt_tally} is missing")
            if not os.access(self.gpt_plain, os.X_OK):
                self.gpt_plain = self.gpt_tally  # without the runtime: the originals
            if not shutil.which("stdbuf"):
                fail("--pairs has gpt, but there is no stdbuf (coreutils)")
        self.torch = None
        for t in (os.path.join(d, "torch"), os.path.join(SRC, "benchmarks/torch")):
            if all(os.path.isfile(os.path.join(t, f))
                   for f in ("serve.py", "train.py", "streams.py", "workloads.py")):
                self.torch = t
                break
        if not self.torch:
            fail(f"no serve.py, train.py, streams.py and workloads.py in {d}/torch or "
                 "benchmarks/torch")
        cands = [a.python] if a.python else ["/opt/torch/.venv/bin/python", "python3"]
        self.py = None
        for c in cands:
            c = shutil.which(c) or (c if os.access(c, os.X_OK) else None)
            if c and subprocess.run([c, "-c", "import sys, torch; "
                                     "sys.exit(0 if torch.cuda.is_available() else 1)"],
                                    capture_output=True).returncode == 0:
                self.py = c
                break
        if not self.py:
            fail("no Python that imports torch with CUDA (--python, or "
                 "/opt/torch/.venv/bin/python and python3)")
        self.triton_env = {}
        if "triton" in self.bes:
            ptxas = os.path.join(d, "prefix/bin/tally-ptxas")
            if not os.access(ptxas, os.X_OK):
                fail(f"--pairs has triton, but {ptxas} is missing")
            self.triton_py = os.path.join(d, "train_gpt.py")
            if not os.path.isfile(self.triton_py):
                self.triton_py = os.path.join(SRC, "examples/triton/train_gpt.py")
            caches = os.path.abspath(a.triton_caches or os.path.join(self.out, "triton-caches"))
            os.makedirs(caches, exist_ok=True)
            self.triton_env = {"TRITON_CACHE_DIR": os.path.join(caches, "triton"),
                               "TORCHINDUCTOR_CACHE_DIR": os.path.join(caches, "inductor"),
                               "TRITON_PTXAS_PATH": ptxas}
        if not shutil.which("nvidia-smi"):
            fail("nvidia-smi not found: is this the GPU machine?")

    def device_lines(self):
        def q(field):
            r = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                               capture_output=True, text=True)
            return (r.stdout.splitlines() or ["?"])[0].strip()
        torch_v = subprocess.run([self.py, "-c", "import torch; print('torch', torch.__version__, "
                                  "'CUDA', torch.version.cuda)"], capture_output=True,
                                 text=True).stdout.strip()
        a = self.a
        return [time.strftime("date: %Y-%m-%d %H:%M UTC", time.gmtime()),
                f"device: {q('name,memory.total,compute_mode')}",
                f"driver: {q('driver_version')}",
                f"host: {os.uname().release}, {os.cpu_count()} cores",
                f"python: {self.py}, {torch_v}; workloads from {self.torch}",
                "command: scripts/gpu-colocate-suite.py " + " ".join(sys.argv[1:]),
                f"suite: {'quick' if a.quick else 'full'}; HP windows {a.hp_seconds:g} s, "
                f"BE alone {a.be_seconds:g} s, capacity {a.capacity_seconds:g} s, lead "
                f"{a.lead:g} s; systems {' '.join(a.systems)}; pairs "
                + " ".join(f"{h}:{b}" for h, b in a.pairs)]

    def report(self, device):
        """Per service: the files colocate-report.py reads, its report and
        plots; then the merged report and CSV."""
        merged_md = [f"# Co-location suite ({'quick' if self.a.quick else 'full'})", ""]
        merged_md += [f"- {line}" for line in device]
        merged_md += ["", "Phases: " + ", ".join(f"{n} {s:.0f} s" for n, s in self.phases)
                      + f"; total {time.monotonic() - self.t0:.0f} s", ""]
        all_rows = []
        plot_py = next((c for c in ("python3", self.py) if c and subprocess.run(
            [c, "-c", "import matplotlib"], capture_output=True).returncode == 0), None)
        for hp in self.hps:
            base = os.path.join(self.out, hp)
            col = os.path.join(base, "colocate")
            shutil.rmtree(col, ignore_errors=True)
            os.makedirs(col)
            with open(os.path.join(col, "runs.tsv"), "w") as f:
                f.write("\t".join(["system", "be", "be_block_us", "hp_csv", "be_log", "be_kind",
                                   "be_ref", "stats", "notes"]) + "\n")
                for r in self.rows[hp]:
                    f.write("\t".join(r) + "\n")
            with open(os.path.join(col, "checks.tsv"), "w") as f:
                f.write("check\tresult\tdetail\n")
                for h, n, res, det in self.checks:
                    if h == hp:
                        f.write(f"{n}\t{res}\t{det}\n")
            with open(os.path.join(col, "device.txt"), "w") as f:
                f.write("\n".join(device) + "\n")
                try:
                    with open(self.path(f"device-{hp}.txt")) as g:
                        f.write(g.read())
                except OSError:
                    pass
            r = subprocess.run([sys.executable, os.path.join(SRC, "scripts/colocate-report.py"),
                                base], capture_output=True, text=True)
            print(r.stdout, end="")
            if r.returncode != 0:
                self.check(hp, "report", "FAIL", r.stderr.strip()[-300:])
            merged_md += [f"# {hp}", ""]
            body = r.stdout
            i = body.find("## Co-location: HP latency and BE throughput")
            merged_md += [(body[i:] if i >= 0 else body).rstrip(), ""]
            try:
                with open(os.path.join(base, "colocate.csv")) as f:
                    rows = list(csv.reader(x for x in f if not x.startswith("#")))
                if rows:
                    if not all_rows:
                        all_rows.append(["hp"] + rows[0])
                    all_rows += [[hp] + x for x in rows[1:]]
            except OSError:
                pass
            if plot_py:
                subprocess.run([plot_py, os.path.join(SRC, "scripts/colocate-plots.py"), base,
                                "--title", f"{hp} service"], capture_output=True)
        merged_md += self.goals(all_rows)
        merged_md += ["# Checks of the suite", "", "| check | result | detail |",
                      "| --- | --- | --- |"]
        merged_md += [f"| {n} | {res} | {det.replace('|', '/')} |"
                      for h, n, res, det in self.checks if h not in self.hps]
        merged_md += ["", f"Failures: {self.fails}"]
        with open(os.path.join(self.out, "all-report.md"), "w") as f:
            f.write("\n".join(merged_md) + "\n")
        with open(os.path.join(self.out, "colocate-all.csv"), "w", newline="") as f:
            for line in device:
                f.write(f"# {line}\n")
            csv.writer(f).writerows(all_rows)
        print(f"written: {self.out}/all-report.md, {self.out}/colocate-all.csv")

    @staticmethod
    def goals(all_rows):
        """The goals (issue 11, BRIEF.md section 5) per co-located system over
        its pairs: HP p99 and p99.9 over HP alone's (mean and worst; p50
        beside them), BE kept (mean and least), system throughput (mean),
        the share of BE GPU time preemptible (mean where timed), preemption
        p99 (its clock named; "none made" where there were none, and then
        that goal not measured); whether they are met and by how much they
        are missed."""
        if not all_rows:
            return []
        head, rows = all_rows[0], [dict(zip(all_rows[0], r)) for r in all_rows[1:]]
        del head

        def num(x):
            try:
                return float(x)
            except (TypeError, ValueError):
                return None

        def over(values):
            """Mean / worst of signed overheads, or empty."""
            if not values:
                return ""
            return f"{100 * sum(values) / len(values):+.0f} % / {100 * max(values):+.0f} %"

        alone = {r["hp"]: r for r in rows if r["system"] == "alone"}
        lines = ["# Goals", "",
                 "Over each system's pairs (HP p99, p99.9 and p50 against the same service "
                 "alone; goals: p99 +3 % mean and +8 % worst at most, BE keeping 0.6 of its "
                 "speed alone, preemption p99 15 us at most). The means are of signed "
                 "overheads: negative ones (pairs faster than the single HP-alone window) "
                 "are included in them. System throughput: HP's share of its requests "
                 "served plus BE kept (2.0 would be two GPUs' worth). BE GPU time "
                 "preemptible: the share of the Tally BE process's timed GPU time in PTB "
                 "and sliced forms, mean over the pairs that timed it (an upper bound when "
                 "HP was busy). Preemption p99: each cell names its clock, the GPU's (flag "
                 "landed to workers gone) where the statistics timed it, else the host's "
                 "(flag raised to workers gone); \"none made\" where Tally's BE made "
                 "no preemption, and that goal is then not measured; \"-\" for NVIDIA's "
                 "mechanisms, which preempt nothing Tally can time.", "",
                 "| system | pairs | HP p99 over alone, mean / worst | HP p99.9 over alone, "
                 "mean / worst | HP p50 over alone, mean / worst | BE kept, mean / least | "
                 "system throughput, mean | BE GPU time preemptible, mean | preemption p99 "
                 "us, worst (clock) | goals |",
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for system in ("timeslice", "streams", "tally", "mps", "mps-prio", "tally-mps"):
            p99s, p999s, p50s, kept, thr, share, pre = [], [], [], [], [], [], []
            none_made = 0  # pairs whose BE statistics counted no preemption
            for r in rows:
                a = alone.get(r["hp"])
                if r["system"] != system or not a:
                    continue
                if num(r["hp_p99"]) and num(a["hp_p99"]):
                    p99s.append(num(r["hp_p99"]) / num(a["hp_p99"]) - 1)
                if num(r["hp_p999"]) and num(a["hp_p999"]):
                    p999s.append(num(r["hp_p999"]) / num(a["hp_p999"]) - 1)
                if num(r["hp_p50"]) and num(a["hp_p50"]):
                    p50s.append(num(r["hp_p50"]) / num(a["hp_p50"]) - 1)
                if num(r["be_rate_fraction_of_alone"]) is not None:
                    kept.append(num(r["be_rate_fraction_of_alone"]))
                if num(r.get("system_throughput")) is not None:
                    thr.append(num(r["system_throughput"]))
                if num(r.get("be_share_preemptible")) is not None:
                    share.append(num(r["be_share_preemptible"]))
                # The goal is flag to GPU free: the GPU's clock where the
                # statistics timed it, else the host's (about 9 us more).
                gpu, host = num(r.get("be_preempt_gpu_p99_us")), num(r.get("be_preempt_p99_us"))
                if gpu is not None:
                    pre.append((gpu, "GPU clock"))
                elif host is not None:
                    pre.append((host, "host clock"))
                elif num(r.get("be_preemptions")) == 0:
                    none_made += 1
            if not p99s:
                continue
            m99, w99 = sum(p99s) / len(p99s), max(p99s)
            short = []
            if m99 > 0.03:
                short.append(f"mean p99 {100 * (m99 - 0.03):.0f} points over")
            if w99 > 0.08:
                short.append(f"worst p99 {100 * (w99 - 0.08):.0f} points over")
            if kept and min(kept) < 0.6:
                short.append(f"least BE kept {0.6 - min(kept):.2f} under")
            if pre:
                worst, clock = max(pre)
                if worst > 15:
                    short.append(f"preemption p99 {worst - 15:.0f} us over")
                said = [clock]
                if len({c for _, c in pre}) > 1:
                    said.append(f"{sum(c == 'host clock' for _, c in pre)} of {len(pre)} "
                                "on the host clock")
                if len(pre) < len(p99s):
                    said.append(f"made in {len(pre)} of {len(p99s)} pairs")
                pre_cell = f"{worst:.0f} ({'; '.join(said)})"
                verdict = "met" if not short else "missed: " + "; ".join(short)
            elif system not in ("tally", "tally-mps"):
                pre_cell = "-"  # NVIDIA's mechanisms preempt nothing to time
                verdict = "p99 and BE goals met" if not short else "missed: " + "; ".join(short)
            else:
                pre_cell = "none made" if none_made else "no statistics"
                verdict = ("p99 and BE goals met" if not short
                           else "missed: " + "; ".join(short))
                verdict += ("; preemption goal not measured (no preemptions)" if none_made
                            else "; preemption goal not measured (no statistics)")
            lines.append(
                f"| {system} | {len(p99s)} | {over(p99s)} | {over(p999s)} | {over(p50s)} | "
                + (f"{sum(kept) / len(kept):.2f} / {min(kept):.2f} | " if kept else " | ")
                + (f"{sum(thr) / len(thr):.2f} | " if thr else "- | ")
                + (f"{100 * sum(share) / len(share):.1f} % | " if share else "- | ")
                + f"{pre_cell} | {verdict} |")
        notes = []
        for hp, a in alone.items():
            p50, p99 = num(a["hp_p50"]), num(a["hp_p99"])
            if p50 and p99:
                notes.append(f"{hp} alone p99 {p99 / 1000:.1f} ms = {p99 / p50:.1f} x its p50")
        if notes:
            lines += ["", "HP alone's tail: " + "; ".join(notes) + ". Where p99 is many "
                      "times p50 the host's stalls set the tails, and short windows make "
                      "each p99 rest on a few requests: the p50 column is the steadier "
                      "comparison."]
        return lines + [""]

    def run(self):
        self.find_programs()
        shutil.rmtree(self.L, ignore_errors=True)
        os.makedirs(self.L)
        device = self.device_lines()
        with open(self.path("device.txt"), "w") as f:
            f.write("\n".join(device) + "\n")
        print("\n".join(device), flush=True)
        want = self.a.systems
        if "triton" in self.bes:
            t = time.monotonic()
            say(f"triton: filling the caches (minutes when cold)")
            if not self.triton_warm():
                self.bes.remove("triton")
            self.phases.append(("triton caches", time.monotonic() - t))
        self.phase("plain: capacity, HP alone, BE alone, timeslice", self.plain_phase)
        if not self.rate:
            self.check(None, "HP services", "FAIL", "no service measured its capacity")
        else:
            if "tally" in want:
                self.phase("tally: HP alone, BE alone, co-located", self.tally_phase, "tally",
                           True)
            if "streams" in want:
                self.phase("streams", self.streams_phase)
            if any(s in want for s in ("mps", "mps-prio", "tally-mps")):
                self.phase("MPS: mps, mps-prio, tally-mps", self.mps_phase)
        self.report(device)
        print(f"co-location suite: {self.fails} failures in {time.monotonic() - self.t0:.0f} s "
              f"(logs in {self.L})")
        return 1 if self.fails else 0


def main(argv=None):
    a = parse_args(argv)
    s = Suite(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    try:
        return s.run()
    except KeyboardInterrupt:
        print("gpu-colocate-suite: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        s.cleanup()


if __name__ == "__main__":
    sys.exit(main())
