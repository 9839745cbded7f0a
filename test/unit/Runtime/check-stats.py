#!/usr/bin/env python3
"""Checks the JSON statistics libtally.so wrote at exit of a RuntimeTests run
(ForcePtb configuration): the kernels it launched with variants, the
preemptions and resumptions with their latency (host-observed, and with
timed statistics on the GPU's clock too: the fake driver's elapsed time,
500 us, which it refuses for events made without timing), the kernels
without variants with why, and the control blocks' clears."""
import json
import sys

path = sys.argv[1]
with open(path) as f:
    s = json.load(f)
k = {e["name"]: e for e in s["kernels"]}
errors = []
def check(cond, msg):
    if not cond:
        errors.append(msg)
check(s["tally_stats_version"] == 1, "version")
check(s["form"] == "ptb" and s["random_preemptions"] == 6, "settings recorded")
p = k.get("ptb_preempt0")
check(p is not None and p["has_variants"], "ptb_preempt0 listed with variants")
if p:
    check(p["launches"]["ptb"] == 1, "ptb_preempt0: one PTB launch")
    check(p["preemptions"] == 6 and p["resumptions"] == 6, "ptb_preempt0: 6 preemptions, 6 resumptions: %s" % p)
n = k.get("ptb_nometa")
check(n is not None and not n["has_variants"] and n["launches"]["original"] == 1 and "metadata" in n["why"],
      "ptb_nometa: without variants, launched once as it is, with the reason: %s" % n)
b = k.get("ptb_badmeta")
check(b is not None and "malformed metadata" in b["why"], "ptb_badmeta: reason names the malformed metadata: %s" % b)
c = k.get("ptb_capture")
check(c is not None and c["captured"] == 1 and c["launches"]["original"] == 1, "ptb_capture: counted as captured: %s" % c)
f = k.get("ptb_fail")
check(f is not None and f["launches"]["original"] == 3 and f["fallbacks"] >= 1, "ptb_fail: fell back: %s" % f)
# Control blocks (CtrlSlab): the fake reports every clear done at once, so
# no launch's stream clears its block or waits for its slab's clear; the
# failed PTB launch (ptb_fail) is not counted.
ptb = sum(e["launches"]["ptb"] for e in s["kernels"])
check(ptb > 0 and s["ptb_ctrl_cleared_on_stream"] == 0 and s["ptb_ctrl_waited_on_stream"] == 0,
      "PTB control blocks all known clear: %d launches, %s cleared and %s waited on their stream"
      % (ptb, s.get("ptb_ctrl_cleared_on_stream"), s.get("ptb_ctrl_waited_on_stream")))
timed = s["timing"]["every"] > 0
if timed:
    check(s["gpu_ms"] > 0 and 0 < s["share_without_variants"] < 1, "GPU time and the share without variants")
lat, sig, dev = s["preemption_latency_us"], s["preemption_signal_us"], s["preemption_device_us"]
issue = s["preemption_issue_us"]
check(lat["count"] >= 6, "preemptions timed on the host: %s" % lat)
check(issue["count"] == lat["count"] and issue["max"] <= lat["max"],
      "the flag's write issued at each, before the workers were seen gone: %s" % issue)
check(sig["count"] == lat["count"], "the flag's write seen landing at each: %s" % sig)
if timed:
    check(dev["count"] == lat["count"] and dev["p50"] == 500 and dev["max"] == 500,
          "each timed on the GPU (events with times): %s" % dev)
else:
    check(dev["count"] == 0, "none timed on the GPU without timed statistics: %s" % dev)
if errors:
    print("runtime statistics check failed:\n  " + "\n  ".join(errors))
    print(json.dumps(s, indent=1))
    sys.exit(1)
print("runtime statistics: %d kernels, all checks passed" % len(k))
