#!/usr/bin/env python3
"""colocate-plots.py - the plots of a co-location run (scripts/gpu-colocate.sh).

Usage: scripts/colocate-plots.py OUT [--out DIR] [--title TEXT]

OUT is the folder gpu-colocate.sh wrote: OUT/colocate.csv (written by
scripts/colocate-report.py: system, be_block_us, hp_p50, hp_p99, hp_p999,
hp_mean, be_rate, be_rate_fraction_of_alone, notes, after `#` lines) and
OUT/colocate/ with runs.tsv (system, be, be_block_us, hp_csv, ...) and the
per-run latency files NAME.hp.csv (`#` lines, then one latency in us per
line). colocate.csv's rows are runs.tsv's, in the same order; where runs.tsv
is missing or does not match, the BE workload is taken from be_block_us and
the latency files are looked for as OUT/colocate/SYSTEM-BE.hp.csv. Latency
files named with a path that does not exist (a run made on another machine)
are looked for by name in OUT/colocate/.

Writes PNGs to DIR (default OUT/plots):
  latency-cdf-BE.png       per BE workload: HP latency CDF (log x) and its
                           tail (1 - CDF, log y), one line per system, with
                           HP alone (dashed) for reference
  p99-vs-be-throughput.png HP p99 overhead over HP alone (system `alone`,
                           as colocate-report.py takes it) against the BE
                           throughput kept (fraction of BE alone): colour per
                           system, marker per BE workload; the goal region
                           (p99 overhead <= 8 %, BE kept >= 0.6) shaded
Runs of the robustness checks (kill-*) and the closed-loop run are left out.

Needs matplotlib; without it, prints "matplotlib missing: no plots" and
exits 0 (on Debian: apt-get install python3-matplotlib).
"""

import argparse
import csv
import math
import os
import sys


def fail(msg):
    sys.exit(f"colocate-plots: error: {msg}")


def read_colocate_csv(path):
    """(comment lines without '# ', rows as dicts)."""
    comments, body = [], []
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("#"):
                comments.append(line[1:].strip())
            elif line.strip():
                body.append(line)
    rows = list(csv.DictReader(body))
    if rows and "system" not in rows[0]:
        fail(f"{path}: no 'system' column")
    return comments, rows


def read_runs(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def read_latencies(path):
    """Latencies (us) and the unserved count of an hp.csv file."""
    lat, unserved = [], 0
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                words = line[1:].split()
                if words[:1] == ["unserved"] and len(words) == 2:
                    unserved = int(words[1])
                continue
            try:
                lat.append(float(line))
            except ValueError:
                fail(f"{path}: not a latency: '{line}'")
    return lat, unserved


def number(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def be_from_block(block):
    if not block:
        return "none"
    return {"10": "be10", "100": "be100"}.get(block, block)


def be_label(be, block):
    if be == "none":
        return "HP alone"
    if be in ("be10", "be100") or (block and block.isdigit()):
        return f"be-spin {block or be[2:]} us blocks"
    if be == "gpt":
        return "train-gpt"
    if be == "torch":
        return "PyTorch training (train.py)"
    if be == "triton":
        return "Triton training (train_gpt.py)"
    return be


def find_file(path, base):
    """path as given, or its name in base."""
    if path and os.path.exists(path):
        return path
    if path:
        alt = os.path.join(base, os.path.basename(path))
        if os.path.exists(alt):
            return alt
    return None


def collect(out):
    """The runs: dicts with system, be, block, p99, frac, hp_csv (or None)."""
    csv_path = os.path.join(out, "colocate.csv")
    if not os.path.exists(csv_path):
        fail(f"no {csv_path}: run scripts/colocate-report.py {out} first")
    comments, rows = read_colocate_csv(csv_path)
    base = os.path.join(out, "colocate")
    runs = read_runs(os.path.join(base, "runs.tsv"))
    aligned = len(runs) == len(rows) and all(
        r.get("system") == x.get("system") for r, x in zip(runs, rows))
    result = []
    for i, x in enumerate(rows):
        block = x.get("be_block_us", "") or ""
        if x.get("be"):
            be = x["be"]
        elif aligned:
            be = runs[i].get("be") or "none"
        else:
            be = be_from_block(block)
        hp_csv = None
        if aligned:
            hp_csv = find_file(runs[i].get("hp_csv", ""), base)
        if hp_csv is None:
            name = f"{x['system']}-{'hp' if be == 'none' else be}.hp.csv"
            hp_csv = find_file(os.path.join(base, name), base)
        result.append({
            "system": x["system"], "be": be, "block": block,
            "p99": number(x.get("hp_p99")),
            "frac": number(x.get("be_rate_fraction_of_alone")),
            "hp_csv": hp_csv,
            "lower_bound": "unserved" in (x.get("notes") or ""),
        })
    return comments, result


def excluded(run):
    s = run["system"]
    return s.startswith("kill-") or s.endswith("-closed")


def main():
    ap = argparse.ArgumentParser(
        prog="colocate-plots.py",
        description="PNG plots of a gpu-colocate.sh run: latency CDFs per BE "
                    "workload, p99 overhead against BE throughput kept.")
    ap.add_argument("out", metavar="OUT", help="the folder gpu-colocate.sh wrote")
    ap.add_argument("--out", dest="dest", metavar="DIR",
                    help="where the PNGs go (default OUT/plots)")
    ap.add_argument("--title", help="title prefix (default: the CSV's 'hp:' line)")
    a = ap.parse_args()

    comments, runs = collect(a.out)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("colocate-plots: matplotlib missing: no plots "
              "(apt-get install python3-matplotlib)")
        return 0

    dest = a.dest or os.path.join(a.out, "plots")
    os.makedirs(dest, exist_ok=True)
    title = a.title
    if title is None:
        hp = next((c for c in comments if c.startswith("hp:")), "")
        title = hp.split(";")[0][4:].strip() if hp else os.path.basename(
            os.path.abspath(a.out))
    if len(title) > 90:
        title = title[:87] + "..."

    systems = []
    for r in runs:
        if not excluded(r) and r["be"] != "none" and r["system"] not in systems:
            systems.append(r["system"])
    cmap = plt.get_cmap("tab10")
    color = {s: cmap(i % 10) for i, s in enumerate(systems)}
    bes = []
    for r in runs:
        if r["be"] != "none" and not excluded(r) and r["be"] not in bes:
            bes.append(r["be"])
    written = []

    # Latency CDFs, one figure per BE workload.
    alone_runs = [r for r in runs if r["be"] == "none" and not excluded(r) and r["hp_csv"]]
    cache = {}

    def latencies(path):
        if path not in cache:
            lat, unserved = read_latencies(path)
            cache[path] = (sorted(v for v in lat if v > 0), unserved)
        return cache[path]

    def draw(ax_cdf, ax_tail, run, **style):
        lat, unserved = latencies(run["hp_csv"])
        if not lat:
            return
        n = len(lat)
        label = run["system"] + (f" ({unserved} of {n} unserved)" if unserved else "")
        cdf = [(i + 1) / n for i in range(n)]
        tail = [1 - (i + 0.5) / n for i in range(n)]
        ax_cdf.plot(lat, cdf, label=label, **style)
        ax_tail.plot(lat, tail, **style)

    for be in bes:
        fig, (ax_cdf, ax_tail) = plt.subplots(1, 2, figsize=(13, 5))
        block = next((r["block"] for r in runs if r["be"] == be), "")
        for r in alone_runs:
            grey = "black" if r["system"] == "alone" else "0.55"
            draw(ax_cdf, ax_tail, r, color=grey, linestyle="--", linewidth=1.2)
        drawn = 0
        for r in runs:
            if r["be"] == be and not excluded(r) and r["hp_csv"]:
                draw(ax_cdf, ax_tail, r, color=color[r["system"]], linewidth=1.5)
                drawn += 1
        if not drawn:
            plt.close(fig)
            continue
        for ax in (ax_cdf, ax_tail):
            ax.set_xscale("log")
            ax.set_xlabel("HP request latency (us)")
            ax.grid(True, which="both", alpha=0.3)
        ax_cdf.set_ylabel("fraction of requests at most this latency")
        ax_cdf.set_ylim(0, 1.001)
        ax_tail.set_yscale("log")
        ax_tail.set_ylabel("fraction of requests slower (1 - CDF)")
        for q, name in ((0.01, "p99"), (0.001, "p99.9")):
            ax_tail.axhline(q, color="0.7", linewidth=0.8)
            ax_tail.text(ax_tail.get_xlim()[0], q, f" {name}", va="bottom", fontsize=8,
                         color="0.4")
        ax_cdf.legend(fontsize=8, loc="lower right")
        fig.suptitle(f"HP latency beside BE {be_label(be, block)}\n{title}", fontsize=10)
        fig.tight_layout()
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in be)
        path = os.path.join(dest, f"latency-cdf-{safe}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    # p99 overhead against BE throughput kept.
    alone = next((r for r in runs if r["system"] == "alone" and r["be"] == "none"
                  and r["p99"]), None)
    points = [r for r in runs if not excluded(r) and r["be"] != "none"
              and r["p99"] is not None and r["frac"] is not None]
    if alone is None:
        print("colocate-plots: no 'alone' run with a p99: no overhead plot", file=sys.stderr)
    elif points:
        markers = "osD^v<>Ph*X"
        marker = {be: markers[i % len(markers)] for i, be in enumerate(bes)}
        fig, ax = plt.subplots(figsize=(11, 6))
        xmax = max(1.05, max(r["frac"] for r in points) * 1.05)
        overs = []
        for r in points:
            over = 100 * (r["p99"] / alone["p99"] - 1)
            overs.append(over)
            # Hollow: some requests were never served, the p99 is a lower bound.
            face = "none" if r["lower_bound"] else color[r["system"]]
            ax.scatter(r["frac"], over, facecolors=face, edgecolors=color[r["system"]]
                       if r["lower_bound"] else "black", marker=marker[r["be"]], s=60,
                       linewidths=1.5 if r["lower_bound"] else 0.5, zorder=3)
        ax.set_yscale("symlog", linthresh=10)
        ax.set_xlim(0, xmax)
        ax.set_ylim(-100, max(100.0, max(overs)) * 3)
        ax.fill_between([0.6, xmax], -100, 8, color="tab:green", alpha=0.12, zorder=0)
        ax.axhline(0, color="0.5", linewidth=0.8)
        ax.set_xlabel("BE throughput kept (fraction of BE alone)")
        ax.set_ylabel(f"HP p99 over HP alone (%; alone p99 {alone['p99']:.0f} us)")
        ax.grid(True, which="both", alpha=0.3)
        handles = [plt.Line2D([], [], color=color[s], marker="o", linestyle="",
                              markersize=8, label=s) for s in systems
                   if any(r["system"] == s for r in points)]
        handles += [plt.Line2D([], [], color="0.3", marker=marker[b], linestyle="",
                               markersize=8, label=be_label(b, next(
                                   (r["block"] for r in runs if r["be"] == b), "")))
                    for b in bes if any(r["be"] == b for r in points)]
        if any(r["lower_bound"] for r in points):
            handles.append(plt.Line2D([], [], color="0.3", marker="o", linestyle="",
                                      markerfacecolor="none", markersize=8,
                                      label="hollow: requests unserved,\np99 a lower bound"))
        handles.append(plt.Rectangle((0, 0), 1, 1, color="tab:green", alpha=0.12,
                                     label="goal: p99 +8 % at most,\nBE kept 0.6 at least"))
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        ax.set_title(f"HP p99 overhead against BE throughput kept\n{title}", fontsize=10)
        fig.tight_layout()
        path = os.path.join(dest, "p99-vs-be-throughput.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    for p in written:
        print(f"written: {p}")
    if not written:
        print("colocate-plots: nothing to plot (no co-located runs with latencies)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
