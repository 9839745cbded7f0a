#!/usr/bin/env python3
"""colocate-runs.py - several gpu-colocate.sh runs of the same setting, summed up.

Usage: scripts/colocate-runs.py CSV... [--alias FROM=TO]... [--out FILE]

Each CSV is a colocate.csv written by scripts/colocate-report.py (one
gpu-colocate.sh run). HP's p99 at half load moves by 5-15 us between runs
of the same setting on one machine (2026-11-28, H200: HP alone 133-143 us in
five runs), as much as #9's goal (HP p99 within 15 us of HP alone for BE
blocks of about 10 us or shorter, within one block otherwise), so a verdict
needs several runs, each compared with the HP-alone run of its own
invocation.

Rows are grouped by setting (HP kernels per request and load, from the
`# hp:` line) and by system and BE block length. `--alias FROM=TO` counts
system FROM as more runs of TO (a gpu-colocate.sh variant that only names a
second run, e.g. tally-mps+tally2=tally-mps). Per group it prints, over the
runs: their number; HP p50 and p99 (medians); p99 over HP alone of the same
run (median and range, in us); p99.9 (median); BE's rate kept (median and
range); and for co-located systems the goal (+15 us for blocks of at most
12 us, else one block) with how many runs were within it. Rows without an
HP alone in their file are left out with a warning. Markdown on stdout, or
into FILE.
"""

import argparse
import csv
import re
import statistics
import sys


def fail(msg):
    sys.exit(f"colocate-runs: error: {msg}")


def num(text, what, path):
    try:
        return float(text)
    except ValueError:
        fail(f"{path}: {what} '{text}' is not a number")


def read_run(path):
    """The setting (kernels, load) and rows of one colocate.csv."""
    try:
        with open(path, newline="") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    kernels = load = None
    for line in lines:
        if line.startswith("# hp:"):
            m = re.search(r"(\d+) kernels? of one wave", line)
            kernels = int(m.group(1)) if m else None
            m = re.search(r"\(([0-9.]+) of capacity\)", line)
            load = float(m.group(1)) if m else None
    if load is None:
        fail(f"{path}: no '# hp: ... (LOAD of capacity)' line: not a colocate.csv of hp-serve's")
    rows = list(csv.DictReader(l for l in lines if not l.startswith("#")))
    need = ("system", "be_block_us", "hp_p50", "hp_p99", "hp_p999", "be_rate_fraction_of_alone")
    if not rows or any(k not in rows[0] for k in need):
        fail(f"{path}: no columns {', '.join(need)}")
    return kernels, load, rows


def goal_us(block):
    """#9's goal for HP's p99 over HP alone, beside BE blocks this long."""
    return 15.0 if block <= 12 else block


def fmt_range(values, sign=False):
    f = "{:+.1f}" if sign else "{:.1f}"
    return f"{f.format(statistics.median(values))} ({f.format(min(values))} to {f.format(max(values))})"


def main():
    ap = argparse.ArgumentParser(description="Sum up several gpu-colocate.sh runs.")
    ap.add_argument("csv", nargs="+", help="colocate.csv files")
    ap.add_argument("--alias", action="append", default=[], metavar="FROM=TO",
                    help="count system FROM as runs of TO")
    ap.add_argument("--out", help="write the table here instead of stdout")
    a = ap.parse_args()
    alias = {}
    for item in a.alias:
        src, eq, dst = item.partition("=")
        if not eq or not src or not dst:
            fail(f"--alias '{item}': FROM=TO")
        alias[src] = dst
    groups = {}  # (kernels, load, system, block) -> list of per-run dicts
    for path in a.csv:
        kernels, load, rows = read_run(path)
        alone = next((r for r in rows if r["system"] == "alone" and r["hp_p99"]), None)
        if alone is None:
            print(f"colocate-runs: warning: {path}: no HP alone row; left out", file=sys.stderr)
            continue
        base = num(alone["hp_p99"], "alone's hp_p99", path)
        for r in rows:
            if not r["hp_p99"] or r["system"].endswith("-closed"):
                continue
            system = alias.get(r["system"], r["system"])
            block = num(r["be_block_us"], "be_block_us", path) if r["be_block_us"] else None
            p99 = num(r["hp_p99"], "hp_p99", path)
            kept = r["be_rate_fraction_of_alone"]
            groups.setdefault((kernels, load, system, block), []).append({
                "p50": num(r["hp_p50"], "hp_p50", path),
                "p99": p99,
                "over": p99 - base,
                "p999": num(r["hp_p999"], "hp_p999", path),
                "kept": num(kept, "be_rate_fraction_of_alone", path) if kept else None,
            })
    if not groups:
        fail("no runs with an HP alone row")
    out = ["| HP kernels | load | system | BE block (us) | runs | HP p50 | HP p99 | p99 over alone (us) "
           "| p99.9 | BE kept | goal | runs within |",
           "| ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: |"]
    for (kernels, load, system, block), runs in sorted(
            groups.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1], kv[0][3] or 0, kv[0][2])):
        med = lambda k: f"{statistics.median([r[k] for r in runs]):.1f}"
        kept = [r["kept"] for r in runs if r["kept"] is not None]
        kept_s = ("{:.3f} ({:.3f} to {:.3f})".format(statistics.median(kept), min(kept), max(kept))
                  if kept else "")
        goal = within = ""
        if block is not None and system != "alone":
            g = goal_us(block)
            goal = f"+{g:g}"
            within = f"{sum(r['over'] <= g for r in runs)} of {len(runs)}"
        out.append(f"| {kernels if kernels is not None else '?'} | {load:g} | {system} | "
                   f"{'' if block is None else f'{block:g}'} | {len(runs)} | {med('p50')} | "
                   f"{med('p99')} | {'' if system == 'alone' else fmt_range([r['over'] for r in runs], sign=True)} | "
                   f"{med('p999')} | {kept_s} | {goal} | {within} |")
    text = "\n".join(out) + "\n"
    if a.out:
        try:
            with open(a.out, "w") as f:
                f.write(text)
        except OSError as e:
            fail(f"{a.out}: {e.strerror}")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
