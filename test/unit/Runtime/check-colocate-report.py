#!/usr/bin/env python3
"""check-colocate-report.py SCRIPT - scripts/colocate-report.py on a made-up run.

HP alone serves 100 requests (100-199 us); beside BE under Tally it serves
90 of 100 in its window (10 unserved, 150-249 us: its p50, p99 and p99.9
over alone's are computed here the same way, nearest rank) while BE, a
time-stamped step log (be_kind triton), makes 30 steps/s against 60 alone:
BE keeps 0.5, the system 1.4. A closed-loop row (alone-closed) and BE
alone have no overheads over alone.
The BE process's statistics have 7 preemptions (p50 10, p99 20, max 25 us;
on the GPU's clock p50 6, p99 12 us)
and 62.5 % of its timed GPU time in preemptible forms.
The report must print those, and its CSV carry them in named columns.
"""
import csv
import json
import math
import os
import subprocess
import sys
import tempfile


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def hp_latencies(n, base):
    return [base + i for i in range(n)]


def hp_csv(path, n, unserved, t0, base=100):
    lines = [f"# window {t0} {t0 + 10}", f"# unserved {unserved}"]
    lines += [str(v) for v in hp_latencies(n, base)]
    write(path, "\n".join(lines) + "\n")


def nearest_rank(values, q):
    s = sorted(values)
    return s[min(max(math.ceil(q * len(s)), 1), len(s)) - 1]


def step_log(path, rate, t0, seconds):
    steps = int(rate * seconds)
    write(path, "".join(f"{t0 + i / rate:.6f} step {i} loss 0x1.8p+2 6.0\n"
                        for i in range(steps + 1)))


def main():
    script = sys.argv[1]
    out = tempfile.mkdtemp()
    d = os.path.join(out, "colocate")
    os.mkdir(d)
    t0 = 1000.0
    hp_csv(os.path.join(d, "alone-hp.hp.csv"), 100, 0, t0)
    hp_csv(os.path.join(d, "tally-triton.hp.csv"), 100, 10, t0, base=150)
    hp_csv(os.path.join(d, "alone-closed-hp.hp.csv"), 100, 0, t0, base=300)
    step_log(os.path.join(d, "be-alone-triton.be.log"), 60, t0, 10)
    step_log(os.path.join(d, "tally-triton.be.log"), 30, t0 - 1, 12)
    json.dump({"tally_stats_version": 1, "kernels": [],
               "timing": {"every": 16, "timed_launches": 40}, "share_preemptible": 0.625,
               "preemption_latency_us": {"count": 7, "p50": 10.0, "p99": 20.0, "max": 25.0},
               "preemption_device_us": {"count": 7, "p50": 6.0, "p99": 12.0, "max": 13.0}},
              open(os.path.join(d, "tally-triton.be.json"), "w"))
    ref = os.path.join(d, "be-alone-triton.be.log")
    rows = [
        ["alone-closed", "none", "", os.path.join(d, "alone-closed-hp.hp.csv"), "", "", "",
         "", "closed loop"],
        ["alone", "none", "", os.path.join(d, "alone-hp.hp.csv"), "", "", "", "", "HP alone"],
        ["be-alone", "triton", "triton", "", ref, "triton", ref, "", "BE alone"],
        ["tally", "triton", "triton", os.path.join(d, "tally-triton.hp.csv"),
         os.path.join(d, "tally-triton.be.log"), "triton", ref,
         os.path.join(d, "tally-triton.be.json"), ""],
    ]
    head = ["system", "be", "be_block_us", "hp_csv", "be_log", "be_kind", "be_ref", "stats",
            "notes"]
    write(os.path.join(d, "runs.tsv"),
          "\n".join("\t".join(r) for r in [head] + rows) + "\n")
    write(os.path.join(d, "checks.tsv"), "check\tresult\tdetail\n")
    report = subprocess.run([sys.executable, script, out], capture_output=True, text=True)
    if report.returncode != 0:
        sys.exit(f"check-colocate-report: exit {report.returncode}: {report.stderr}")
    with open(os.path.join(out, "colocate.csv")) as f:
        got = {r["system"]: r for r in csv.DictReader(x for x in f if not x.startswith("#"))}
    want = {
        ("tally", "be_rate_fraction_of_alone"): "0.500",
        ("tally", "hp_served_fraction"): "0.900",
        ("tally", "system_throughput"): "1.400",
        ("tally", "be_preemptions"): "7",
        ("tally", "be_preempt_p50_us"): "10.0",
        ("tally", "be_preempt_p99_us"): "20.0",
        ("tally", "be_preempt_max_us"): "25.0",
        ("tally", "be_share_preemptible"): "0.625",
        ("tally", "be_preempt_gpu_p50_us"): "6.0",
        ("tally", "be_preempt_gpu_p99_us"): "12.0",
        ("alone", "hp_served_fraction"): "1.000",
        ("alone", "system_throughput"): "",
        ("be-alone", "system_throughput"): "",
    }
    # The overheads over HP alone, from the latencies written above.
    over = {}
    for col, q in (("hp_p50_over_alone", 0.5), ("hp_p99_over_alone", 0.99),
                   ("hp_p999_over_alone", 0.999)):
        over[col] = (nearest_rank(hp_latencies(100, 150), q)
                     / nearest_rank(hp_latencies(100, 100), q) - 1)
        want[("tally", col)] = f"{over[col]:.3f}"
        for system in ("alone", "alone-closed", "be-alone"):
            want[(system, col)] = ""
    if want[("tally", "hp_p99_over_alone")] != "0.253":  # 248 / 198 - 1
        sys.exit(f"check-colocate-report: the test's own p99 overhead is "
                 f"{want[('tally', 'hp_p99_over_alone')]}, not 0.253")
    bad = [f"{s}.{c}: '{got.get(s, {}).get(c)}', want '{v}'" for (s, c), v in want.items()
           if got.get(s, {}).get(c) != v]
    if ("| tally | train_gpt.py (Triton) |" not in report.stdout or "| 1.40 |" not in report.stdout
            or "62.5 % of GPU time preemptible" not in report.stdout
            or "(p99 20.0 us; on the GPU p99 12.0 us)" not in report.stdout):
        bad.append("the markdown row of tally has no BE name, system throughput 1.40 or"
                   " preemption note:\n"
                   + report.stdout)
    vs = (f"| {100 * over['hp_p99_over_alone']:+.1f} % "
          f"| {100 * over['hp_p999_over_alone']:+.1f} % |")
    if vs not in report.stdout or "| HP p999 us | HP mean us | p99 vs HP alone | " \
            "p99.9 vs HP alone |" not in report.stdout:
        bad.append(f"the markdown has no p99 and p99.9 overheads '{vs}' in their columns:\n"
                   + report.stdout)
    if bad:
        sys.exit("check-colocate-report:\n  " + "\n  ".join(bad))
    print("check-colocate-report: ok")


if __name__ == "__main__":
    main()
