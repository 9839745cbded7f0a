#!/usr/bin/env python3
"""hp-parts.py - where hp-serve's requests spent their time, per run.

Reads every NAME.hp-gpu.csv (hp-serve --gpu-trace; gpu-colocate.sh writes
them with HP_TRACE=1) under the folders given and prints a markdown table,
a row per run: requests; latency p50/p99 (arrival to done, as the report's);
late (arrival to send: queued behind the previous request); host (send to
done: the request's own time) mean, p50, p99; and host's parts, means:
issue (send to the last launch call's return: the host's own part), span (first kernel's first block start to last kernel's last block end, on
the GPU's clock), outside (host - span: the launches' way in and the
completion's way out), per kernel over the block time (each kernel's first
start to last end, less --block-us: blocks that started late), the first
kernel's excess alone, and the gaps between kernels. Then the same parts'
means over the slowest 1 % of requests by host time: what a slow request
spends its extra time on. A diagnostic (scripts/debug/hp-parts.sh), not a
benchmark of record.

Usage: scripts/debug/hp-parts.py DIR... [--out FILE]
"""
import argparse
import csv
import math
import pathlib
import re
import sys

FIELDS = ("latency_us", "late_us", "host_us", "issue_us", "span_us", "outside_us",
          "kernels_us", "first_us", "gaps_us", "max_gap_us")


def percentile(sorted_values, q):
    """Nearest rank, as colocate-report.py's."""
    if not sorted_values:
        return math.nan
    rank = max(1, min(len(sorted_values), math.ceil(q * len(sorted_values))))
    return sorted_values[rank - 1]


def mean(values):
    return sum(values) / len(values) if values else math.nan


def read_trace(path):
    """The rows of one --gpu-trace file and its kernels and block time."""
    kernels = block_us = None
    rows = []
    with open(path, newline="") as f:
        lines = []
        for line in f:
            if line.startswith("#"):
                m = re.search(r"block-us (\S+) blocks \d+ kernels (\d+)", line)
                if m:
                    block_us, kernels = float(m.group(1)), int(m.group(2))
                continue
            lines.append(line)
    if kernels is None:
        raise ValueError(f"{path}: no '# settings' line with block-us and kernels")
    reader = csv.DictReader(lines)
    missing = [k for k in FIELDS if k not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)}")
    for n, r in enumerate(reader, start=2):
        try:
            rows.append({k: float(r[k]) for k in FIELDS})
        except (TypeError, ValueError):
            raise ValueError(f"{path}: data line {n}: not a number in {dict(r)}")
    return rows, kernels, block_us


def parts(rows, kernels, block_us):
    """Mean issue, span, outside, per-kernel excess, first kernel's excess,
    gaps."""
    return (mean([r["issue_us"] for r in rows]),
            mean([r["span_us"] for r in rows]),
            mean([r["outside_us"] for r in rows]),
            mean([r["kernels_us"] / kernels - block_us for r in rows]),
            mean([r["first_us"] - block_us for r in rows]),
            mean([r["gaps_us"] for r in rows]))


def fmt(v):
    return "-" if math.isnan(v) else f"{v:.1f}"


def table(paths):
    out = ["| run | requests | latency p50 | latency p99 | late mean | host mean | host p50 | "
           "host p99 | issue | span | outside | per kernel over block | first kernel over block | "
           "gaps | slowest 1 %: host | issue | span | outside | per kernel | first | gaps |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
           "---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in paths:
        rows, kernels, block_us = read_trace(p)
        name = p.name[: -len(".hp-gpu.csv")]
        if not rows:
            out.append(f"| {name} | 0 |" + " - |" * 19)
            continue
        lat = sorted(r["latency_us"] for r in rows)
        host = sorted(r["host_us"] for r in rows)
        cut = percentile(host, 0.99)
        slow = [r for r in rows if r["host_us"] >= cut]
        cells = [name, str(len(rows)), fmt(percentile(lat, 0.5)), fmt(percentile(lat, 0.99)),
                 fmt(mean([r["late_us"] for r in rows])), fmt(mean(host)),
                 fmt(percentile(host, 0.5)), fmt(percentile(host, 0.99))]
        cells += [fmt(v) for v in parts(rows, kernels, block_us)]
        cells.append(fmt(mean([r["host_us"] for r in slow])))
        cells += [fmt(v) for v in parts(slow, kernels, block_us)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("dirs", nargs="+", type=pathlib.Path, help="folders searched for *.hp-gpu.csv")
    ap.add_argument("--out", type=pathlib.Path, help="also write the table here")
    a = ap.parse_args()
    paths = []
    for d in a.dirs:
        if not d.is_dir():
            print(f"hp-parts: error: {d}: no such folder", file=sys.stderr)
            return 1
        paths += sorted(d.rglob("*.hp-gpu.csv"), key=lambda p: p.stat().st_mtime)
    if not paths:
        print("hp-parts: error: no *.hp-gpu.csv under " + ", ".join(map(str, a.dirs)),
              file=sys.stderr)
        return 1
    try:
        text = "All times in us.\n\n" + table(paths)
    except (OSError, ValueError) as e:
        print(f"hp-parts: error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
