#!/usr/bin/env python3
"""stats-diff.py - the steady state between two runs' Tally statistics.

    scripts/stats-diff.py SHORT.json LONG.json

SHORT and LONG are `tally run --stats` files of the same program run with
fewer and more iterations (steps), everything else equal. Work done once per
process (compilation, warm-up, one-off formatting of tensors) appears in
both; subtracting SHORT from LONG kernel by kernel leaves what the extra
iterations launched. Prints that difference: GPU time, the share in kernels
with variants, launches, and the kernels without variants that still take
time per iteration. Exit status 1 when the difference is empty or negative
(the runs were not comparable).
"""
import json
import sys


def load(path):
    with open(path) as f:
        s = json.load(f)
    if s.get("tally_stats_version") != 1:
        sys.exit(f"stats-diff: error: {path}: not Tally statistics of version 1")
    return {k["name"]: k for k in s["kernels"]}


def launches(k):
    return sum(k["launches"].values())


def main():
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) == 2 else 2)
    a, b = load(sys.argv[1]), load(sys.argv[2])
    rows = []
    for name, kb in b.items():
        ka = a.get(name)
        ms = kb["gpu_ms"] - (ka["gpu_ms"] if ka else 0.0)
        n = launches(kb) - (launches(ka) if ka else 0)
        rows.append((name, kb["has_variants"], ms, n))
    # A kernel launched more often in the longer run but timed shorter in
    # all (its first launches were slow in the shorter one) adds nothing:
    # counted as 0, so that the share stays within 0..100 %.
    noisy = sum(1 for _, _, ms, n in rows if n > 0 and ms < 0)
    rows = [(name, v, max(ms, 0.0), n) for name, v, ms, n in rows]
    total = sum(ms for _, _, ms, n in rows if n > 0)
    if total <= 0:
        sys.exit("stats-diff: error: the longer run launched nothing more than the shorter")
    with_v = sum(ms for _, v, ms, n in rows if v and n > 0)
    without = sorted(((ms, n, name) for name, v, ms, n in rows if not v and n > 0), reverse=True)
    print(f"steady state: {total:.1f} ms of GPU time in "
          f"{sum(n for *_, n in rows if n > 0)} more launches; "
          f"{100 * with_v / total:.1f} % in kernels with variants"
          + (f" ({noisy} kernels with less GPU time in the longer run counted as 0)"
             if noisy else ""))
    for ms, n, name in without[:5]:
        print(f"  without variants: {ms:.2f} ms, {n} launches: {name[:100]}")


if __name__ == "__main__":
    main()
