#!/usr/bin/env python3
"""stats-timing-compare.py - sampled GPU time against every launch timed.

    scripts/stats-timing-compare.py [--tolerance=F] ALL.json SAMPLED.json

ALL and SAMPLED are `tally run --stats` files of the same program with the
same forms forced, one with TALLY_STATS_TIMING=1 (every launch timed), one
with TALLY_STATS_TIMING=N (the first launch and then one in N of each
kernel in each form, the rest estimated). Prints one line: the GPU time in
all and by form of both, the launches each timed, and the share in
preemptible forms. Exit status 1 when the estimate of the total or of a
form misses the timed value by more than F (default 0.15) of it, a form
under 2 % of the total excepted (a few launches of it decide its estimate);
2 on bad input.
"""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            s = json.load(f)
        return s, {"all": float(s["gpu_ms"]), **{k: float(v) for k, v in s["gpu_ms_by_form"].items()}}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"stats-timing-compare: error: {path}: not Tally statistics with GPU time ({e})",
              file=sys.stderr)
        sys.exit(2)


def main(argv):
    tol = 0.15
    paths = []
    for a in argv:
        if a.startswith("--tolerance="):
            tol = float(a.split("=", 1)[1])
        else:
            paths.append(a)
    if len(paths) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    (sa, ma), (sb, mb) = load(paths[0]), load(paths[1])
    out, bad = [], []
    for k, va in ma.items():
        vb = mb.get(k, 0.0)
        d = (vb - va) / va if va > 0 else (0.0 if vb == 0 else 1.0)
        if abs(d) > tol and (k == "all" or va >= 0.02 * ma["all"]):
            bad.append(k)
        out.append(f"{k} {va:.2f} -> {vb:.2f} ms ({100 * d:+.1f} %)")
    t = [s.get("timing", {}).get("timed_launches", "?") for s in (sa, sb)]
    out.append(f"timed launches {t[0]} -> {t[1]}")
    out.append(f"share preemptible {sa.get('share_preemptible', 0):.3f} -> "
               f"{sb.get('share_preemptible', 0):.3f}")
    print(("within %g %%: " % (100 * tol) if not bad else
           "OFF BY MORE THAN %g %% (%s): " % (100 * tol, ", ".join(bad))) + "; ".join(out))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
