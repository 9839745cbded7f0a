#!/usr/bin/env python3
"""Checks what runtime-schedule-be left: its statistics (the launch held
while HP was active, form measurements made while HP was idle), the
profile cache it wrote at exit (measurements of its kernel, by candidate),
and the statistics of a second run over the same cache (no measuring: every
choice from the cache)."""
import glob
import json
import sys

stats = json.load(open(sys.argv[1]))
s = stats["scheduler"]
assert s["enabled"], s
assert s["holds"] >= 1, f"no launch was held: {s}"
assert s["held_ms"] >= 100, f"held for {s['held_ms']} ms only: {s}"
# The held launch's call: the hold is its part held for HP; held and own
# waits fit in the calls' time.
assert s["guarded_calls"] >= 1, s
assert s["guarded_held_ms"] >= 100, f"guarded calls held {s['guarded_held_ms']} ms: {s}"
assert s["guarded_held_ms"] <= s["held_ms"] + 1e-6, s
assert s["guarded_held_ms"] + s["own_wait_ms"] <= s["guarded_call_ms"] + 1e-3, s
f = s["free_measure"]
assert f["enabled"] is True and f["kept"] <= f["launches"] and f["kept"] <= s["measured"], f
# 7 candidates for 40 blocks on the fake's 4 SMs, 2 measurements each
# (while HP is idle: in Guarded mode, or in Free mode once HP is silent).
assert s["measured"] == 14, f"measurements: {s}"
assert s["profile_misses"] == 14, s
files = glob.glob(sys.argv[2] + "/profile-GPU-abababab-*.v1")
assert len(files) == 1, files
text = open(files[0]).read()
lines = [l for l in text.splitlines()[1:] if l.startswith("be_held@")]
cands = {l.split("\t")[4] for l in lines}
assert cands == {"original", "ptb:w=8,c=1", "ptb:w=8,c=4", "ptb:w=4,c=1", "ptb:w=2,c=1",
                 "slice:b=8", "slice:b=2"}, cands
again = json.load(open(sys.argv[3]))["scheduler"]
assert again["profile_misses"] == 0 and again["measured"] == 0, f"cache not reused: {again}"
assert again["profile_hits"] == 21, again
# One launch shape, decided once from the cache; its cost is reported
# consistently (the fake driver's times are whatever the host measured).
ch = again["choices"]
assert ch["count"] == 1, ch
assert ch["cost_over_original_p50"] == ch["cost_over_original_max"] > -1, ch
assert ch["over_5_percent"] == (1 if ch["cost_over_original_max"] > 0.05 else 0), ch
assert ch["within_target"] in (0, 1), ch
# The same decision, listed with its shape and times.
ds = json.load(open(sys.argv[3]))["decisions"]
assert len(ds) == 1, ds
d = ds[0]
assert d["kernel"].startswith("be_held@") and d["grid"] == [40, 1, 1], d
assert d["chosen"] in cands and d["original_us"] > 0 and d["chosen_us"] > 0, d
assert d["meets_target"] == bool(ch["within_target"]) and not d["original_only"], d
# No MPS in the fake: within the target is the turnaround within 31.6 us.
assert d["meets_target"] == (d["turnaround_us"] <= 31.6), d
assert len(ds) == ch["count"] + again["beside"]["original_only_shapes"], (ds, again)
assert abs(d["chosen_us"] / d["original_us"] - 1 - ch["cost_over_original_max"]) < 1e-3, d
print(f"ok: held {s['holds']}x ({s['held_ms']:.1f} ms), {s['measured']} measurements, "
      f"cache candidates {sorted(cands)}")
