#!/usr/bin/env python3
"""colocate-report.py - the summary of scripts/gpu-colocate.sh.

Usage: scripts/colocate-report.py OUT

Reads OUT/colocate/runs.tsv (one row per run: system, be, be_block_us,
hp_csv, be_log, be_kind, be_ref, stats, notes), the files it names,
OUT/colocate/checks.tsv and OUT/colocate/device.txt. Writes OUT/colocate.csv
(system, be_block_us, hp_p50, hp_p99, hp_p999, hp_mean, be_rate,
be_rate_fraction_of_alone, notes, hp_served_fraction, system_throughput,
be_preemptions, be_preempt_p50_us, be_preempt_p99_us, be_preempt_max_us,
be_share_preemptible, be_preempt_gpu_p50_us, be_preempt_gpu_p99_us,
hp_p50_over_alone, hp_p99_over_alone, hp_p999_over_alone, after `#` lines
with the device, date and driver) and prints the same as markdown (without
the preemption columns, which the notes summarize, and with the p99 and
p99.9 overheads as percentages), with the checks.

The overheads over HP alone are fractions (0.123: 12.3 % slower) of each
percentile against the first row of system `alone` without BE (the same
row for all three), signed; empty for that row itself, the closed-loop
rows (`-closed`), rows without HP latencies (BE alone) and where there is
no HP alone. HP alone under Tally or MPS has them: that system's own cost.

System throughput, as in the Tally paper: the sum of the two jobs'
throughputs, each normalized to the job alone: HP's share of its requests
served (those that arrived in its window; all of them when it keeps up)
plus BE's rate as a fraction of BE alone's; 2.0 would be two GPUs' worth.
Only for co-located runs. The preemption columns come from the BE
process's Tally statistics (flag raised to workers gone, host-observed; the
`gpu` ones: the flag's write landed to workers gone, on the GPU's clock), as
does the share of its GPU time in preemptible forms (PTB, sliced), where it
timed launches (gpu-colocate.sh times one in 16 of each BE kernel's in each
form). That share is an upper bound when HP was busy: a preempted PTB
launch's time includes its wait for resumption, sliced work's the waits
between slices.

HP percentiles are computed here from the latencies (nearest rank, as
hp-serve does; benchmarks/torch/serve.py writes the same CSV). BE's rate is
taken over HP's window (from the CSV's `# window` line) from BE's progress
lines: be-spin's `be: t=S kernels=N epoch=E` (be_kind spin), the same lines
of benchmarks/torch/train.py where N counts training steps (be_kind torch,
steps/s), or train-gpt's and examples/triton/train_gpt.py's `step N` lines
time-stamped by the script (be_kind gpt or triton, steps/s); without a window (BE alone), over the whole log. The fraction
divides by the rate of BE alone (be_ref), measured the same way.
"""

import bisect
import csv
import json
import math
import os
import re
import sys


def fail(msg):
    sys.exit(f"colocate-report: error: {msg}")


def read_latencies(path):
    """Latencies (us), the window (start, end epoch) and the unserved count."""
    lat, window, unserved = [], None, 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                words = line[1:].split()
                if words[:1] == ["window"] and len(words) == 3:
                    window = (float(words[1]), float(words[2]))
                elif words[:1] == ["unserved"] and len(words) == 2:
                    unserved = int(words[1])
                continue
            try:
                lat.append(float(line))
            except ValueError:
                fail(f"{path}:{n}: not a latency: '{line}'")
    return lat, window, unserved


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    rank = min(max(math.ceil(q * len(sorted_values)), 1), len(sorted_values))
    return sorted_values[rank - 1]


BE_PROGRESS = re.compile(r"^be: t=\S+ kernels=(\d+) epoch=([0-9.]+)")
GPT_STEP = re.compile(r"^([0-9.]+) step (\d+) ")


def read_progress(path, kind):
    """(epoch, work done) samples of a BE log, in time order."""
    samples = []
    with open(path, errors="replace") as f:
        for line in f:
            if kind in ("gpt", "triton"):
                m = GPT_STEP.match(line)
                if m:
                    samples.append((float(m.group(1)), int(m.group(2)) + 1))
            else:
                m = BE_PROGRESS.match(line)
                if m:
                    samples.append((float(m.group(2)), int(m.group(1))))
    samples.sort()
    return samples


def done_at(samples, t):
    """Work done at time t, interpolated between samples."""
    times = [s[0] for s in samples]
    i = bisect.bisect_right(times, t)
    if i == 0:
        return samples[0][1]
    if i == len(samples):
        return samples[-1][1]
    (t0, n0), (t1, n1) = samples[i - 1], samples[i]
    return n0 + (n1 - n0) * (t - t0) / (t1 - t0) if t1 > t0 else n1


def be_rate(path, kind, window):
    """BE's rate (per second) over window, or over the whole log; a note."""
    if not path or not os.path.exists(path):
        return None, "no BE log"
    samples = read_progress(path, kind)
    if len(samples) < 2:
        return None, "BE log has fewer than two progress samples"
    if window is None:
        (t0, n0), (t1, n1) = samples[0], samples[-1]
        return ((n1 - n0) / (t1 - t0) if t1 > t0 else None), ""
    a, b = window
    if b <= a:
        return None, "empty HP window"
    note = ""
    if samples[0][0] > a or samples[-1][0] < b:
        note = "BE log does not cover the whole HP window"
    return (done_at(samples, b) - done_at(samples, a)) / (b - a), note


def stats_note(paths):
    """A short summary of Tally's --stats JSON files, where present."""
    notes = []
    for p in paths:
        if not p or not os.path.exists(p):
            continue
        try:
            with open(p) as f:
                s = json.load(f)
            kernels = s.get("kernels", [])
            launches = {
                form: sum(k.get("launches", {}).get(form, 0) for k in kernels)
                for form in ("original", "slice", "ptb")
            }
            pre = sum(k.get("preemptions", 0) for k in kernels)
            role = "HP" if p.endswith(".hp.json") else "BE"
            text = f"{role} launches " + "/".join(
                f"{v} {f}" for f, v in launches.items() if v
            )
            if pre:
                text += f", {pre} preemptions"
            lat = s.get("preemption_latency_us", {})
            if lat.get("count"):
                text += f" (p99 {lat.get('p99', 0):.1f} us"
                dev = s.get("preemption_device_us", {})
                if isinstance(dev, dict) and dev.get("count"):
                    text += f"; on the GPU p99 {dev.get('p99', 0):.1f} us"
                text += ")"
            timing = s.get("timing", {})
            if role == "BE" and isinstance(timing, dict) and timing.get("timed_launches"):
                text += (f", {100 * s.get('share_preemptible', 0):.1f} % of GPU time"
                         " preemptible")
            sch = s.get("scheduler")
            if isinstance(sch, dict):
                if not sch.get("enabled"):
                    text += ", scheduler off"
                elif role == "HP":
                    text += f", {sch.get('hp_launches', 0)} launches announced"
                else:
                    text += (f", scheduler: {sch.get('full_speed_launches', 0)} at full"
                             f" speed, {sch.get('holds', 0)} holds"
                             f" ({sch.get('held_ms', 0):.1f} ms),"
                             f" {sch.get('preemptions', 0)} preemptions by HP")
                    if sch.get("guarded_calls"):
                        text += (f", {sch['guarded_calls']} launch calls with HP present"
                                 f" ({sch.get('guarded_call_ms', 0):.1f} ms, of which"
                                 f" {sch.get('own_wait_ms', 0):.1f} ms waiting for its own"
                                 " earlier launches)")
            notes.append(text)
        except (OSError, ValueError, AttributeError, TypeError) as e:
            notes.append(f"unreadable stats {os.path.basename(p)}: {e}")
    return "; ".join(notes)


def be_preemptions(paths):
    """The BE process's preemption latency summary (count, p50, p99, max,
    us: flag raised to workers gone; gpu_p50, gpu_p99 where the GPU timed
    them: the flag landed to workers gone) from its stats JSON; {"count": 0}
    when it made none; {} without one."""
    for p in paths:
        if not p.endswith(".be.json") or not os.path.exists(p):
            continue
        try:
            with open(p) as f:
                s = json.load(f)
            lat = s.get("preemption_latency_us", {})
            if isinstance(lat, dict) and lat.get("count"):
                got = {k: lat.get(k) for k in ("count", "p50", "p99", "max")}
                dev = s.get("preemption_device_us", {})
                if isinstance(dev, dict) and dev.get("count"):
                    got["gpu_p50"], got["gpu_p99"] = dev.get("p50"), dev.get("p99")
                return got
            if isinstance(lat, dict) and lat.get("count") == 0:
                return {"count": 0}
        except (OSError, ValueError, AttributeError):
            pass
    return {}


def be_share_preemptible(paths):
    """The share of the BE process's GPU time in preemptible forms (PTB,
    sliced) from its stats JSON, where it timed launches; else None."""
    for p in paths:
        if not p.endswith(".be.json") or not os.path.exists(p):
            continue
        try:
            with open(p) as f:
                s = json.load(f)
            timing = s.get("timing", {})
            if isinstance(timing, dict) and timing.get("timed_launches"):
                return s.get("share_preemptible")
        except (OSError, ValueError, AttributeError):
            pass
    return None


def fmt(v, digits=1):
    return "" if v is None else f"{v:.{digits}f}"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: colocate-report.py OUT")
    out = sys.argv[1]
    base = os.path.join(out, "colocate")
    runs_path = os.path.join(base, "runs.tsv")
    if not os.path.exists(runs_path):
        fail(f"no {runs_path}: run scripts/gpu-colocate.sh first")
    with open(runs_path) as f:
        runs = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    want = ["system", "be", "be_block_us", "hp_csv", "be_log", "be_kind",
            "be_ref", "stats", "notes"]
    if runs and list(runs[0].keys()) != want:
        fail(f"{runs_path}: columns {list(runs[0].keys())}, expected {want}")

    header = []
    device_path = os.path.join(base, "device.txt")
    if os.path.exists(device_path):
        with open(device_path) as f:
            header = [line.rstrip("\n") for line in f if line.strip()]

    rows = []
    alone_rate = {}
    for r in runs:
        notes = [r["notes"]] if r["notes"] else []
        p50 = p99 = p999 = mean = served = None
        window = None
        if r["hp_csv"]:
            if not os.path.exists(r["hp_csv"]):
                notes.append("no HP latencies (the run failed)")
            else:
                lat, window, unserved = read_latencies(r["hp_csv"])
                s = sorted(lat)
                if not s:
                    notes.append("no HP requests")
                p50, p99, p999 = (percentile(s, q) for q in (0.5, 0.99, 0.999))
                mean = sum(s) / len(s) if s else None
                # The requests it served of those that arrived in its
                # window (HP alone serves them all at this load).
                served = (len(s) - unserved) / len(s) if s else None
                if unserved:
                    notes.append(f"{unserved} of {len(s)} HP requests unserved: "
                                 "percentiles are lower bounds")
        rate = frac = None
        if r["be_log"]:
            rate, note = be_rate(r["be_log"], r["be_kind"], window)
            if note:
                notes.append(note)
            ref = r["be_ref"]
            if ref:
                if ref not in alone_rate:
                    alone_rate[ref] = be_rate(ref, r["be_kind"], None)[0]
                if rate is not None and alone_rate[ref]:
                    frac = rate / alone_rate[ref]
            if r["be_kind"] == "gpt":
                notes.append("BE rate in train-gpt steps/s")
            elif r["be_kind"] == "triton":
                notes.append("BE rate in train_gpt.py steps/s")
            elif r["be_kind"] == "torch":
                notes.append("BE rate in train.py steps/s")
        stats = [p for p in r["stats"].split(",") if p]
        st = stats_note(stats)
        if st:
            notes.append(st)
        pre = be_preemptions(stats)
        pre_share = be_share_preemptible(stats)
        rows.append({
            "system": r["system"], "be": r["be"],
            "be_block_us": r["be_block_us"], "hp_p50": p50, "hp_p99": p99,
            "hp_p999": p999, "hp_mean": mean, "be_rate": rate,
            "be_rate_fraction_of_alone": frac, "hp_served_fraction": served,
            "system_throughput": (served + frac if served is not None and frac is not None
                                  else None),
            "be_preemptions": pre.get("count"), "be_preempt_p50_us": pre.get("p50"),
            "be_preempt_p99_us": pre.get("p99"), "be_preempt_max_us": pre.get("max"),
            "be_share_preemptible": pre_share, "be_preempt_gpu_p50_us": pre.get("gpu_p50"),
            "be_preempt_gpu_p99_us": pre.get("gpu_p99"), "notes": "; ".join(notes),
        })

    # HP alone: the reference of every row's overheads.
    alone = next((x for x in rows if x["system"] == "alone" and x["be"] == "none"
                  and x["hp_p99"]), None)
    for row in rows:
        for q in ("hp_p50", "hp_p99", "hp_p999"):
            row[q + "_over_alone"] = None
            if (alone and row is not alone and not row["system"].endswith("-closed")
                    and row[q] is not None and alone[q]):
                row[q + "_over_alone"] = row[q] / alone[q] - 1

    cols = ["system", "be_block_us", "hp_p50", "hp_p99", "hp_p999", "hp_mean",
            "be_rate", "be_rate_fraction_of_alone", "notes", "hp_served_fraction",
            "system_throughput", "be_preemptions", "be_preempt_p50_us",
            "be_preempt_p99_us", "be_preempt_max_us", "be_share_preemptible",
            "be_preempt_gpu_p50_us", "be_preempt_gpu_p99_us", "hp_p50_over_alone",
            "hp_p99_over_alone", "hp_p999_over_alone"]
    csv_path = os.path.join(out, "colocate.csv")
    with open(csv_path, "w", newline="") as f:
        for line in header:
            f.write(f"# {line}\n")
        w = csv.writer(f)
        w.writerow(cols)
        for row in rows:
            w.writerow([
                row["system"], row["be_block_us"], fmt(row["hp_p50"]),
                fmt(row["hp_p99"]), fmt(row["hp_p999"]), fmt(row["hp_mean"]),
                fmt(row["be_rate"]), fmt(row["be_rate_fraction_of_alone"], 3),
                row["notes"], fmt(row["hp_served_fraction"], 3),
                fmt(row["system_throughput"], 3),
                "" if row["be_preemptions"] is None else row["be_preemptions"],
                fmt(row["be_preempt_p50_us"]), fmt(row["be_preempt_p99_us"]),
                fmt(row["be_preempt_max_us"]), fmt(row["be_share_preemptible"], 3),
                fmt(row["be_preempt_gpu_p50_us"]), fmt(row["be_preempt_gpu_p99_us"]),
                fmt(row["hp_p50_over_alone"], 3), fmt(row["hp_p99_over_alone"], 3),
                fmt(row["hp_p999_over_alone"], 3),
            ])

    print("## Co-location: HP latency and BE throughput")
    print()
    for line in header:
        print(f"- {line}")
    print()
    print("| system | BE | HP p50 us | HP p99 us | HP p999 us | HP mean us | "
          "p99 vs HP alone | p99.9 vs HP alone | BE rate /s | BE kept | system | notes |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        vs, vs999 = ("" if row[q] is None else f"{100 * row[q]:+.1f} %"
                     for q in ("hp_p99_over_alone", "hp_p999_over_alone"))
        be = {"none": "-", "gpt": "train-gpt", "torch": "train.py (PyTorch)",
              "triton": "train_gpt.py (Triton)"}.get(
            row["be"], f"{row['be_block_us']} us blocks")
        cells = [row["system"], be, fmt(row["hp_p50"]), fmt(row["hp_p99"]),
                 fmt(row["hp_p999"]), fmt(row["hp_mean"]), vs, vs999,
                 fmt(row["be_rate"]), fmt(row["be_rate_fraction_of_alone"], 3),
                 fmt(row["system_throughput"], 2), row["notes"].replace("|", "/")]
        print("| " + " | ".join(cells) + " |")

    checks_path = os.path.join(base, "checks.tsv")
    if os.path.exists(checks_path):
        with open(checks_path) as f:
            checks = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        if checks:
            print()
            print("| check | result | detail |")
            print("| --- | --- | --- |")
            for c in checks:
                detail = (c.get("detail") or "").replace("|", "/")
                print(f"| {c['check']} | {c['result']} | {detail} |")
    print()
    print(f"(written: {csv_path})")


if __name__ == "__main__":
    main()
