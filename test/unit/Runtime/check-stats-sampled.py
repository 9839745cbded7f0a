#!/usr/bin/env python3
"""check-stats-sampled.py JSON - the statistics of StatsTiming.OneLaunchInNTimed
(TALLY_STATS_TIMING=4, every timed launch 10 us by the fake driver): the
first launch and then one in four of each kernel and form timed, the GPU
time scaled to all of them, by form, and the preemptible share (PTB and
sliced time over all)."""
import json
import sys

with open(sys.argv[1]) as f:
    s = json.load(f)
k = {e["name"]: e for e in s["kernels"]}
errors = []


def near(a, b):
    return abs(a - b) < 1e-4  # float milliseconds from the driver


def check(cond, msg):
    if not cond:
        errors.append(msg)


check(s["timing"]["every"] == 4, "timing.every is 4: %s" % s.get("timing"))
p, q = k.get("st_plain"), k.get("st_ptb")
check(p is not None and p["launches"]["original"] == 8 and p["timed_launches"] == 2,
      "st_plain: 8 launches, 2 timed: %s" % p)
check(p is not None and near(p["gpu_ms"], 0.08) and near(p["gpu_ms_by_form"]["original"], 0.08),
      "st_plain: 8 x 10 us estimated from 2: %s" % p)
check(q is not None and q["launches"]["ptb"] == 4 and q["launches"]["original"] == 1
      and q["timed_launches"] == 2,
      "st_ptb: 4 PTB launches and 1 original (the cluster launch), 2 timed: %s" % q)
check(q is not None and near(q["gpu_ms_by_form"]["ptb"], 0.04)
      and near(q["gpu_ms_by_form"]["original"], 0.01) and near(q["gpu_ms"], 0.05),
      "st_ptb: 4 x 10 us in PTB, 10 us as the original: %s" % q)
check(near(s["gpu_ms"], 0.13) and near(s["gpu_ms_by_form"]["ptb"], 0.04),
      "totals: 0.13 ms, 0.04 in PTB: %s %s" % (s["gpu_ms"], s["gpu_ms_by_form"]))
check(abs(s["share_preemptible"] - 4 / 13) < 1e-3, "share_preemptible 4/13: %s" % s["share_preemptible"])
check(s["timing"]["timed_launches"] == 4, "4 launches timed in all: %s" % s["timing"])
if errors:
    print("sampled statistics check failed:\n  " + "\n  ".join(errors))
    print(json.dumps(s, indent=1))
    sys.exit(1)
print("sampled statistics: all checks passed")
