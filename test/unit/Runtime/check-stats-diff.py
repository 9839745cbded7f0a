#!/usr/bin/env python3
"""check-stats-diff.py SCRIPT - scripts/stats-diff.py on two made-up runs.

The longer run launches kernel A (with variants) 10 more times for 5 ms and
kernel B (without) 10 more times for 1 ms, and kernel C (without) 2 more
times but for 0.2 ms less in all (noise): the steady state is 6 ms, 83.3 %
in kernels with variants, C counted as 0.
"""
import json
import os
import subprocess
import sys
import tempfile


def stats(kernels):
    return {"tally_stats_version": 1, "kernels": [
        {"name": n, "has_variants": v, "launches": {"original": l, "slice": 0, "ptb": 0},
         "gpu_ms": ms} for n, v, l, ms in kernels]}


def main():
    script = sys.argv[1]
    d = tempfile.mkdtemp()
    short = os.path.join(d, "short.json")
    long_ = os.path.join(d, "long.json")
    json.dump(stats([("A", True, 10, 5.0), ("B", False, 10, 1.0), ("C", False, 5, 3.0)]),
              open(short, "w"))
    json.dump(stats([("A", True, 20, 10.0), ("B", False, 20, 2.0), ("C", False, 7, 2.8)]),
              open(long_, "w"))
    out = subprocess.run([sys.executable, script, short, long_], capture_output=True,
                         text=True, check=True).stdout
    first = out.splitlines()[0]
    want = ("steady state: 6.0 ms of GPU time in 22 more launches; 83.3 % in kernels with "
            "variants (1 kernels with less GPU time in the longer run counted as 0)")
    if first != want:
        sys.exit(f"check-stats-diff: got\n  {first}\nwant\n  {want}")
    print("check-stats-diff: ok")


if __name__ == "__main__":
    main()
