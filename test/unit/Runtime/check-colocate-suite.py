#!/usr/bin/env python3
"""check-colocate-suite.py - scripts/gpu-colocate-suite.py's orchestration
without a GPU: fake workloads (one Python file standing for serve.py,
train.py, streams.py, train-gpt and train_gpt.py, speaking their protocols
and printing their lines), a fake `tally run` (runs the program, forwards
SIGTERM, writes a statistics file), a fake nvidia-smi and a fake torch module
that says CUDA is there. No MPS control program: the MPS systems are left
out (and, asked for, fail with a clear check).

Checks: every window of every pair and system became a row of each service's
report, with HP latencies and BE rates (a BE at a steady rate keeps about
all of it) and p50, p99 and p99.9 over HP alone (computed here from the
rows' percentiles); the merged report and CSV, its Goals rows computed here
from the CSV's rows (p99.9 over alone, system throughput, no preemptions:
"none made" and the preemption goal not measured); Suite.goals on made-up
rows (preemptions on the GPU's and the host's clock, the share of BE GPU
time preemptible, a goal missed by how much); the loss checks pass for identical
losses and fail (exit 1) when the transformed training's loss differs at one
step; asking for MPS without its control program fails with a check.

Usage: check-colocate-suite.py SRC
"""

import csv
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

FAKE = r'''#!/usr/bin/env python3
import os, random, signal, sys, time
role = os.path.basename(sys.argv[0])
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default
def gate(line):  # --start-file: wait for it (train.py, train_gpt.py)
    f = arg("--start-file")
    if f:
        print(line + f, flush=True)
        while not os.path.exists(f) and not stop:
            time.sleep(0.01)
def hp_window(mode, rate, seconds, csv_path, seed=1):
    rng = random.Random(seed)
    start = time.time()
    n = int(seconds * 200)
    lat = [1000 + rng.random() * 500 for _ in range(n)]
    time.sleep(seconds)
    end = time.time()
    with open(csv_path, "w") as f:
        f.write(f"# window {start:.6f} {end:.6f}\n# unserved 0\n")
        f.writelines(f"{v:.3f}\n" for v in lat)
    s = sorted(lat)
    out = [f"hp: window {start:.6f} {end:.6f}",
           f"hp: requests {n} rate {n / seconds:.1f} p50 {s[n // 2]:.1f} p99 {s[-2]:.1f} "
           f"p999 {s[-1]:.1f} mean {sum(s) / n:.1f} max {s[-1]:.1f} us"]
    if mode == "capacity":
        out.append(f"hp: capacity {n / seconds:.1f} req/s")
    return "\n".join(out) + "\n"
if role == "serve.py":
    if arg("--model") == os.environ.get("FAKE_FAIL_SERVICE"):
        sys.exit("serve: error: made to fail")
    d = arg("--serve-dir")
    open(os.path.join(d, "ready"), "w").write("ready\n")
    n = 0
    while True:
        n += 1
        req = os.path.join(d, f"{n}.req")
        while not os.path.exists(req):
            time.sleep(0.01)
        words = open(req).read().split()
        if words == ["quit"]:
            sys.exit(0)
        if words[0] == "poisson":
            text = hp_window("poisson", float(words[1]), float(words[2]), words[3])
        else:
            text = hp_window("capacity", 0, float(words[1]), words[2])
        sys.stdout.write(text)
        sys.stdout.flush()
        open(os.path.join(d, f"{n}.done.tmp"), "w").write(text + "rc 0\n")
        os.replace(os.path.join(d, f"{n}.done.tmp"), os.path.join(d, f"{n}.done"))
elif role in ("train.py", "streams.py"):
    hp = []
    if role == "streams.py":  # HP's window in a thread, after BE's lead
        import threading
        def serve():
            time.sleep(float(arg("--be-lead")))
            hp.append(hp_window("poisson", 1, float(arg("--duration")), arg("--csv")))
        th = threading.Thread(target=serve)
        th.start()
        t_end = time.time() + 600
    else:
        t_end = time.time() + float(arg("--seconds"))
    print("be: settings fake", flush=True)
    gate("be: waiting for ")
    t0, k = time.time(), 0
    while not stop and time.time() < t_end and not hp:
        time.sleep(0.05)
        k += 5
        print(f"be: t={time.time() - t0:.3f} kernels={k} epoch={time.time():.6f}", flush=True)
    print(f"be: steps {k} in {time.time() - t0:.1f} s", flush=True)
    if hp:
        print(hp[0], end="")
else:  # train-gpt, train-gpt.tally, train_gpt.py: step lines until SIGTERM
    triton = role == "train_gpt.py"
    bad = role.endswith(".tally") and os.environ.get("FAKE_BAD_LOSS")
    steps = int(arg("--steps"))
    for i in range(steps):
        if triton and i == 3:
            gate("waiting for ")
        if stop:
            break
        bits = f"{0x3f800000 + i:08x}"
        if bad and i == 20:
            bits = "deadbeef"
        print(f"step {i} loss {1.0 / (i + 1):.6f} {'bits ' + bits if not triton else bits + ' x'}",
              flush=True)
        time.sleep(0.01)
'''

# `tally run` execs the program, as the real one does (the runtime writes
# the statistics at the program's exit; here they are written first).
TALLY = r'''#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
assert a[0] == "run", a
i = a.index("--")
stats = next((x.split("=", 1)[1] for x in a[1:i] if x.startswith("--stats=")), None)
if stats:
    # As the runtime writes them: its preemption latencies always, here
    # with none made.
    none = {"count": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    json.dump({"kernels": [{"launches": {"original": 3}}],
               "preemption_latency_us": none, "preemption_device_us": none}, open(stats, "w"))
os.execvp(a[i + 1], a[i + 1:])
'''


def write(path, text, mode=0o755):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def run_suite(src, tmp, out, extra, env_extra=None):
    env = dict(os.environ, PATH=f"{tmp}/bin:{os.environ['PATH']}",
               PYTHONPATH=f"{tmp}/pylib", **(env_extra or {}))
    env.pop("OUT", None)
    cmd = [sys.executable, os.path.join(src, "scripts/gpu-colocate-suite.py"),
           "--python", "python3", "--out", out, "--hp-seconds", "0.4", "--be-seconds", "0.6",
           "--capacity-seconds", "0.3", "--lead", "0.2", f"{tmp}/dir"] + extra
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return r


def ours(tmp):
    """Processes whose command line names tmp (the fakes), other than this one."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if tmp.encode() in cmd and state != "Z":
            found.append(int(pid))
    return found


def over(rows, alone, col):
    """Mean / worst of col's overheads over alone's, as the Goals table writes them."""
    v = [float(r[col]) / float(alone[r["hp"]][col]) - 1 for r in rows]
    return f"{100 * sum(v) / len(v):+.0f} % / {100 * max(v):+.0f} %"


def check_goals(src):
    """Suite.goals on made-up rows: two Tally pairs (preemption p99 12 us on
    the GPU's clock, 30 us host-observed only), one time-slicing pair (no
    preemptions)."""
    spec = importlib.util.spec_from_file_location(
        "suite", os.path.join(src, "scripts/gpu-colocate-suite.py"))
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    cols = ["hp", "system", "hp_p50", "hp_p99", "hp_p999", "be_rate_fraction_of_alone",
            "system_throughput", "be_share_preemptible", "be_preempt_p99_us",
            "be_preempt_gpu_p99_us"]
    rows = [cols,
            ["bert", "alone", "100", "200", "400", "", "", "", "", ""],
            ["bert", "tally", "110", "220", "500", "0.500", "1.400", "0.600", "20.0", "12.0"],
            ["bert", "tally", "90", "180", "420", "0.700", "1.600", "0.500", "30.0", ""],
            ["bert", "timeslice", "150", "200", "400", "0.800", "1.800", "", "", ""],
            # A Tally row whose BE wrote no statistics: not "none made".
            ["bert", "tally-mps", "100", "200", "400", "0.500", "1.500", "", "", ""]]
    text = "\n".join(suite.Suite.goals(rows))
    # p99 +10 % and -10 %, p99.9 +25 % and +5 %, p50 +10 % and -10 %.
    for needle in ("| tally | 2 | +0 % / +10 % | +15 % / +25 % | +0 % / +10 % | 0.60 / 0.50 | "
                   "1.50 | 55.0 % | 30 (host clock; 1 of 2 on the host clock) | missed: "
                   "worst p99 2 points over; least BE kept 0.10 under; preemption p99 15 us "
                   "over |",
                   "| timeslice | 1 | +0 % / +0 % | +0 % / +0 % | +50 % / +50 % | 0.80 / 0.80 | "
                   "1.80 | - | - | p99 and BE goals met |",
                   "| tally-mps | 1 | ",
                   "| no statistics | missed: least BE kept 0.10 under; preemption goal not "
                   "measured (no statistics) |",
                   "negative ones (pairs faster than the single HP-alone window) are included"):
        if needle not in text:
            fail(f"Suite.goals lacks '{needle}':\n{text}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check-colocate-suite.py SRC")
    src = sys.argv[1]
    check_goals(src)
    with tempfile.TemporaryDirectory() as tmp:
        write(f"{tmp}/pylib/torch/__init__.py",
              "__version__ = 'fake'\nclass version:\n    cuda = 'none'\n"
              "class cuda:\n    @staticmethod\n    def is_available():\n        return True\n",
              0o644)
        write(f"{tmp}/bin/nvidia-smi", "#!/bin/sh\necho 'Fake GPU, 1 MiB, Default'\n")
        d = f"{tmp}/dir"
        write(f"{d}/prefix/bin/tally", TALLY)
        write(f"{d}/prefix/bin/tally-ptxas", "#!/bin/sh\nexit 0\n")
        for name in ("torch/serve.py", "torch/train.py", "torch/streams.py", "train-gpt",
                     "train-gpt.tally", "train_gpt.py"):
            write(f"{d}/{name}", FAKE)
        write(f"{d}/torch/workloads.py", "", 0o644)

        out = f"{tmp}/out"
        r = run_suite(src, tmp, out, ["--systems", "timeslice,streams,tally"])
        if r.returncode != 0:
            fail(f"suite exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
        with open(f"{out}/colocate-all.csv") as f:
            rows = list(csv.DictReader(x for x in f if not x.startswith("#")))
        got = {(x["hp"], x["system"], x["be_block_us"]) for x in rows}
        want = set()
        for hp in ("resnet50", "bert"):
            want |= {(hp, "alone-closed", ""), (hp, "alone", ""), (hp, "tally-alone", ""),
                     (hp, "streams", "torch")}
            for be in ("gpt", "triton", "torch"):
                for sysname in ("be-alone", "tally-be-alone", "timeslice", "tally"):
                    want.add((hp, sysname, be))
        if got != want:
            fail(f"rows: missing {sorted(want - got)}, unexpected {sorted(got - want)}")
        if len(rows) != len(want):
            fail(f"{len(rows)} rows for {len(want)} runs")
        for x in rows:
            if x["system"] not in ("be-alone", "tally-be-alone") and not x["hp_p99"]:
                fail(f"no HP p99 in {x}")
            if x["system"] in ("timeslice", "tally", "tally-be-alone", "streams"):
                kept = float(x["be_rate_fraction_of_alone"] or 0)
                # A steady fake BE: the same rate in every window (a loose
                # bound: the host's scheduling varies).
                if not 0.5 < kept < 1.5:
                    fail(f"BE kept {kept} in {x['hp']} {x['system']} {x['be_block_us']}")
        # Overheads over HP alone: from the rows' percentiles (rounded to
        # 0.1 us in the CSV), empty where there is nothing to compare.
        alone = {x["hp"]: x for x in rows if x["system"] == "alone"}
        for x in rows:
            for q in ("hp_p50", "hp_p99", "hp_p999"):
                got = x[q + "_over_alone"]
                if x["system"] in ("alone", "alone-closed") or not x[q]:  # BE alone
                    if got != "":
                        fail(f"{q}_over_alone '{got}' in {x}")
                    continue
                want = float(x[q]) / float(alone[x["hp"]][q]) - 1
                if not got or abs(float(got) - want) > 0.002:
                    fail(f"{q}_over_alone '{got}', want {want:.3f}, in {x}")
        report = open(f"{out}/all-report.md").read()
        # The Goals rows, from the CSV's rows (the fake `tally run` writes
        # statistics without preemptions or timing).
        # NVIDIA's mechanisms preempt nothing ("-"); Tally's BE made no
        # preemption here ("none made", that goal not measured).
        for system, cell, said in (("timeslice", "-", ""),
                                   ("tally", "none made",
                                    "preemption goal not measured (no preemptions) |")):
            pairs = [x for x in rows if x["system"] == system]
            kept = [float(x["be_rate_fraction_of_alone"]) for x in pairs]
            thr = [float(x["system_throughput"]) for x in pairs]
            row = (f"| {system} | 6 | {over(pairs, alone, 'hp_p99')} | "
                   f"{over(pairs, alone, 'hp_p999')} | {over(pairs, alone, 'hp_p50')} | "
                   f"{sum(kept) / len(kept):.2f} / {min(kept):.2f} | "
                   f"{sum(thr) / len(thr):.2f} | - | {cell} | ")
            rest = report.split(row, 1)[1].split("\n", 1)[0] if row in report else ""
            if row not in report or said not in rest or \
                    (not said and "preemption goal" in rest):
                fail(f"all-report.md's Goals lack '{row}... {said}':\n{report[-3000:]}")
        for needle in ("# resnet50", "# bert", "| tally-gpt: BE losses | PASS |",
                       "| tally-triton: BE losses | PASS |", "Failures: 0",
                       "Phases: triton caches", "# Goals", "| tally | 6 | ",
                       "command: scripts/gpu-colocate-suite.py"):
            if needle not in report:
                fail(f"all-report.md lacks '{needle}':\n{report[-3000:]}")
        for hp in ("resnet50", "bert"):
            if not os.path.exists(f"{out}/{hp}/colocate.csv"):
                fail(f"no {hp}/colocate.csv")

        # A transformed training whose loss differs at one step fails.
        out2 = f"{tmp}/out2"
        r = run_suite(src, tmp, out2, ["--systems", "tally", "--pairs", "resnet50:gpt"],
                      {"FAKE_BAD_LOSS": "1"})
        report = open(f"{out2}/all-report.md").read() if os.path.exists(
            f"{out2}/all-report.md") else ""
        if r.returncode != 1 or "| tally-gpt: BE losses | FAIL | step 20: deadbeef" not in report:
            fail(f"a changed loss: exit {r.returncode}, report:\n{report[-2000:]}\n{r.stderr[-1000:]}")

        # MPS asked for where there is no control program: a failed check.
        out3 = f"{tmp}/out3"
        r = run_suite(src, tmp, out3, ["--systems", "mps", "--pairs", "bert:torch"])
        report = open(f"{out3}/all-report.md").read() if os.path.exists(
            f"{out3}/all-report.md") else ""
        if r.returncode != 1 or "| MPS | FAIL | nvidia-cuda-mps-control not found" not in report:
            fail(f"MPS without its control program: exit {r.returncode}\n{report[-2000:]}")
        # A service that fails to start: its check is in the suite's table,
        # the other service's pairs still run.
        out4 = f"{tmp}/out4"
        r = run_suite(src, tmp, out4, ["--systems", "timeslice", "--pairs",
                                       "resnet50:torch,bert:torch"], {"FAKE_FAIL_SERVICE": "bert"})
        report = open(f"{out4}/all-report.md").read() if os.path.exists(
            f"{out4}/all-report.md") else ""
        if (r.returncode != 1 or "| timeslice-bert: start | FAIL |" not in report
                or "| timeslice | train.py (PyTorch) |" not in report):
            fail(f"a failed service: exit {r.returncode}\n{report[-2000:]}")

        # The suite killed with -9 in the middle of a window: none of the
        # processes it started outlives it.
        env = dict(os.environ, PATH=f"{tmp}/bin:{os.environ['PATH']}", PYTHONPATH=f"{tmp}/pylib")
        out5 = f"{tmp}/out5"
        p = subprocess.Popen([sys.executable, os.path.join(src, "scripts/gpu-colocate-suite.py"),
                              "--python", "python3", "--out", out5, "--hp-seconds", "60",
                              "--systems", "timeslice", f"{tmp}/dir"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(f"{out5}/suite/alone-closed-resnet50.hp.log"):
            if time.monotonic() > deadline or p.poll() is not None:
                p.kill()
                fail("the suite did not get to its first window")
            time.sleep(0.1)
        time.sleep(1)
        if not [x for x in ours(tmp) if x != p.pid]:
            fail("no workload process found while the suite ran")
        p.kill()
        p.wait()
        deadline = time.monotonic() + 10
        while ours(tmp) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = ours(tmp)
        if left:
            for pid in left:
                os.kill(pid, 9)
            fail(f"processes left after the suite was killed: {left}")
    print("PASS: the suite's windows, rows, reports and checks")


if __name__ == "__main__":
    main()
