#!/usr/bin/env python3
"""check-colocate-report.py SCRIPT - scripts/colocate-report.py on a made-up run.

HP alone serves 100 requests; beside BE under Tally it serves 90 of 100 in
its window (10 unserved) while BE, a time-stamped step log (be_kind
triton), makes 30 steps/s against 60 alone: BE keeps 0.5, the system 1.4.
The BE process's statistics have 7 preemptions (p50 10, p99 20, max 25 us;
on the GPU's clock p50 6, p99 12 us)
and 62.5 % of its timed GPU time in preemptible forms.
The report must print those, and its CSV carry them in named columns.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def hp_csv(path, n, unserved, t0):
    lines = [f"# window {t0} {t0 + 10}", f"# unserved {unserved}"]
    lines += [str(100 + i) for i in range(n)]
    write(path, "\n".join(lines) + "\n")


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
    hp_csv(os.path.join(d, "tally-triton.hp.csv"), 100, 10, t0)
    step_log(os.path.join(d, "be-alone-triton.be.log"), 60, t0, 10)
    step_log(os.path.join(d, "tally-triton.be.log"), 30, t0 - 1, 12)
    json.dump({"tally_stats_version": 1, "kernels": [],
               "timing": {"every": 16, "timed_launches": 40}, "share_preemptible": 0.625,
               "preemption_latency_us": {"count": 7, "p50": 10.0, "p99": 20.0, "max": 25.0},
               "preemption_device_us": {"count": 7, "p50": 6.0, "p99": 12.0, "max": 13.0}},
              open(os.path.join(d, "tally-triton.be.json"), "w"))
    ref = os.path.join(d, "be-alone-triton.be.log")
    rows = [
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
    bad = [f"{s}.{c}: '{got.get(s, {}).get(c)}', want '{v}'" for (s, c), v in want.items()
           if got.get(s, {}).get(c) != v]
    if ("| tally | train_gpt.py (Triton) |" not in report.stdout or "| 1.40 |" not in report.stdout
            or "62.5 % of GPU time preemptible" not in report.stdout
            or "(p99 20.0 us; on the GPU p99 12.0 us)" not in report.stdout):
        bad.append("the markdown row of tally has no BE name, system throughput 1.40 or"
                   " preemption note:\n"
                   + report.stdout)
    if bad:
        sys.exit("check-colocate-report:\n  " + "\n  ".join(bad))
    print("check-colocate-report: ok")


if __name__ == "__main__":
    main()
