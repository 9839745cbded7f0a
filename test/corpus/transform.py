#!/usr/bin/env python3
"""Corpus transformation check and code-quality report.

For every PTX file of ../shared/corpus: run tally-opt's default pipeline
(sliced + PTB variants) with --metadata, compile the original and the
output with `ptxas -v`, and check that
  - every kernel is either transformed (both variants present and accepted
    by ptxas) or carries a reason for each missing variant,
  - at least --min-transformed (default 97 %) of the kernels have both
    variants,
  - the original kernels' machine code is unchanged (same registers),
  - no variant adds spills or wgmma serialisation warnings (C7509/C7517)
    that its original did not have (reported; --strict-quality fails on it).
Prints register growth statistics (median, p90, max) per variant kind.

Exit status: 0 pass, 1 fail, 77 skipped (no corpus or no ptxas).
"""
import argparse
import collections
import concurrent.futures as cf
import os
import re
import statistics
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from roundtrip import default_corpus, find_ptxas, target_of  # noqa: E402

ENTRY = re.compile(r"Compiling entry function '([^']+)'")
REGS = re.compile(r"Used (\d+) registers")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
WARN = re.compile(r"\((C75(?:09|17))\).*?function '([^']+)'")


def ptxas_report(ptxas, arch, path, out):
    r = subprocess.run([ptxas, "-v", "-c", "-arch=" + arch, "-o", out, path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    info = {}
    warns = collections.defaultdict(set)
    cur = None
    for line in r.stdout.splitlines():
        m = ENTRY.search(line)
        if m:
            cur = info.setdefault(m.group(1), {"regs": 0, "spill": 0})
            continue
        m = WARN.search(line)
        if m:
            warns[m.group(2)].add(m.group(1))
        if cur is None:
            continue
        m = REGS.search(line)
        if m:
            cur["regs"] = int(m.group(1))
        m = SPILL.search(line)
        if m:
            cur["spill"] = int(m.group(1)) + int(m.group(2))
    return r.returncode, r.stdout, info, warns


def check(path, args, ptxas, tmp):
    name = os.path.relpath(path, args.corpus).replace(os.sep, "_")
    out = os.path.join(tmp, name + ".tally.ptx")
    meta = os.path.join(tmp, name + ".yaml")
    r = subprocess.run([args.tally_opt, path, "-o", out, "--metadata", meta],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        return name, [f"tally-opt failed: {r.stdout.strip()}"], None
    with open(meta) as f:
        md = yaml.safe_load(f)
    arch = target_of(path)
    rc, log, orig, owarn = ptxas_report(ptxas, arch, path, os.path.join(tmp, name + ".o.cubin"))
    if rc:
        return name, [f"ptxas rejects the original: {log.strip()[:500]}"], None
    rc, log, new, nwarn = ptxas_report(ptxas, arch, out, os.path.join(tmp, name + ".t.cubin"))
    for f in (out, meta, os.path.join(tmp, name + ".o.cubin"), os.path.join(tmp, name + ".t.cubin")):
        if os.path.exists(f):
            os.remove(f)
    if rc:
        return name, [f"ptxas rejects the transformed PTX: {log.strip()[:800]}"], None
    errors = []
    rows = []
    for k in md["kernels"]:
        kname = k["name"]
        kinds = {v["kind"]: v["name"] for v in k.get("variants", [])}
        if kname not in orig:
            errors.append(f"{kname}: original missing from ptxas output")
            continue
        if new.get(kname, {}).get("regs") != orig[kname]["regs"]:
            errors.append(f"{kname}: original kernel changed ({orig[kname]['regs']} -> "
                          f"{new.get(kname, {}).get('regs')} registers)")
        for kind in ("slice", "ptb"):
            if kind not in kinds:
                if kind not in k.get("reason", ""):
                    errors.append(f"{kname}: no {kind} variant and no reason")
                continue
            v = kinds[kind]
            if v not in new:
                errors.append(f"{kname}: variant {v} missing from ptxas output")
                continue
            rows.append({
                "file": name, "kernel": kname, "kind": kind,
                "orig_regs": orig[kname]["regs"], "regs": new[v]["regs"],
                "orig_spill": orig[kname]["spill"], "spill": new[v]["spill"],
                "new_warn": sorted(nwarn.get(v, set()) - owarn.get(kname, set())),
            })
    return name, errors, {"kernels": md["kernels"], "rows": rows}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tally-opt", required=True)
    ap.add_argument("--corpus", default=default_corpus())
    ap.add_argument("--min-transformed", type=float, default=95.0)
    ap.add_argument("--strict-quality", action="store_true")
    ap.add_argument("--report", help="write a per-variant table (TSV) here")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    if not os.path.isdir(args.corpus):
        print(f"SKIP: corpus not found at {args.corpus}")
        return 77
    ptxas = find_ptxas()
    if not ptxas:
        print("SKIP: ptxas not found")
        return 77
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(args.corpus)
                   for f in fs if f.endswith(".ptx"))
    failures = 0
    kernels, rows = [], []
    with tempfile.TemporaryDirectory(prefix="tally-xf-") as tmp, \
            cf.ThreadPoolExecutor(max_workers=args.j) as ex:
        for name, errors, res in ex.map(lambda p: check(p, args, ptxas, tmp), files):
            for e in errors:
                print(f"FAIL {name}: {e}", flush=True)
            failures += bool(errors)
            if res:
                kernels += [(name, k) for k in res["kernels"]]
                rows += res["rows"]

    status = collections.Counter(k["status"] for _, k in kernels)
    both = status["transformed"]
    total = len(kernels)
    print(f"kernels: {total}; transformed (both variants): {both} "
          f"({100.0 * both / max(total, 1):.1f} %); partial: {status['partial']}; "
          f"rejected: {status['rejected']}")
    reasons = collections.Counter()
    for _, k in kernels:
        for part in filter(None, k.get("reason", "").split("; ")):
            reasons[re.sub(r" in function \S+| \(calls \S+\)", "", part)] += 1
    for why, n in reasons.most_common():
        print(f"  {n:4d}  {why}")
    quality_bad = 0
    for kind in ("slice", "ptb"):
        rs = [r for r in rows if r["kind"] == kind]
        if not rs:
            continue
        growth = [r["regs"] - r["orig_regs"] for r in rs]
        spills = [r for r in rs if r["spill"] > r["orig_spill"]]
        warns = [r for r in rs if r["new_warn"]]
        quality_bad += len(spills) + len(warns)
        print(f"{kind}: {len(rs)} variants; register growth median {statistics.median(growth):+g}, "
              f"p90 {pct(growth, 90):+d}, max {max(growth):+d}, over +64: "
              f"{sum(g > 64 for g in growth)}; new spills: {len(spills)}; "
              f"new wgmma serialisation warnings: {len(warns)}")
        for r in spills + warns:
            print(f"    {r['file']} {r['kernel']} {kind}: regs {r['orig_regs']}->{r['regs']}, "
                  f"spill {r['orig_spill']}->{r['spill']}, warnings {r['new_warn']}")
    if args.report:
        with open(args.report, "w") as f:
            f.write("file\tkernel\tkind\torig_regs\tregs\torig_spill\tspill\tnew_warnings\n")
            for r in rows:
                f.write(f"{r['file']}\t{r['kernel']}\t{r['kind']}\t{r['orig_regs']}\t{r['regs']}\t"
                        f"{r['orig_spill']}\t{r['spill']}\t{','.join(r['new_warn'])}\n")
    ok = failures == 0 and 100.0 * both / max(total, 1) >= args.min_transformed
    if args.strict_quality and quality_bad:
        ok = False
    if 100.0 * both / max(total, 1) < args.min_transformed:
        print(f"FAIL: fewer than {args.min_transformed} % of kernels transformed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
