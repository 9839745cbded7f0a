#!/usr/bin/env python3
"""Corpus round trip: every PTX file of ../shared/corpus must parse, re-print
as a fixed point, and compile with ptxas to the same machine code as the
original (identical .text.* and .nv.info* sections).

Usage: roundtrip.py --tally-opt BIN --cubin-compare BIN [--corpus DIR] [-j N]
Exit status 0 when every file passes, 1 otherwise; 77 (skipped) when the
corpus or ptxas is missing.
"""
import argparse
import concurrent.futures as cf
import os
import re
import shutil
import subprocess
import sys
import tempfile


def default_corpus():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    return os.path.join(os.path.dirname(root), "shared", "corpus", "ptx")


def find_ptxas():
    p = shutil.which("ptxas")
    if p:
        return p
    p = "/usr/local/cuda/bin/ptxas"
    return p if os.path.exists(p) else None


def target_of(path):
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"\s*\.target\s+(\w+)", line)
            if m:
                return m.group(1)
    return None


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return r.returncode, r.stdout + r.stderr


def check(path, args, ptxas, tmp):
    name = os.path.relpath(path, args.corpus).replace(os.sep, "_")
    once = os.path.join(tmp, name + ".1.ptx")
    twice = os.path.join(tmp, name + ".2.ptx")
    rc, out = run([args.tally_opt, path, "--passes=", "-o", once])
    if rc:
        return name, "parse failed: " + out.strip()
    rc, out = run([args.tally_opt, once, "--passes=", "-o", twice])
    if rc:
        return name, "re-parse of printed PTX failed: " + out.strip()
    with open(once, "rb") as a, open(twice, "rb") as b:
        if a.read() != b.read():
            return name, "printer is not a fixed point"
    if ptxas is None:
        return name, None
    arch = target_of(path)
    if not arch:
        return name, "no .target line"
    cub_a = os.path.join(tmp, name + ".orig.cubin")
    cub_b = os.path.join(tmp, name + ".rt.cubin")
    rc, out = run([ptxas, "-c", "-arch=" + arch, "-o", cub_a, path])
    if rc:
        return name, "ptxas rejects the original: " + out.strip()
    rc, out = run([ptxas, "-c", "-arch=" + arch, "-o", cub_b, once])
    if rc:
        return name, "ptxas rejects the printed PTX: " + out.strip()
    rc, out = run([args.cubin_compare, cub_a, cub_b])
    for f in (cub_a, cub_b, once, twice):
        os.remove(f)
    if rc:
        return name, "machine code differs: " + out.strip()
    return name, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tally-opt", required=True)
    ap.add_argument("--cubin-compare", required=True)
    ap.add_argument("--corpus", default=default_corpus())
    ap.add_argument("--no-ptxas", action="store_true",
                    help="only check parsing and the printer's fixed point")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()

    if not os.path.isdir(args.corpus):
        print(f"SKIP: corpus not found at {args.corpus} "
              "(expected ../shared/corpus beside the checkout)")
        return 77
    ptxas = None if args.no_ptxas else find_ptxas()
    if ptxas is None and not args.no_ptxas:
        print("SKIP: ptxas not found (install the CUDA toolkit)")
        return 77
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(args.corpus)
                   for f in fs if f.endswith(".ptx"))
    failures = []
    with tempfile.TemporaryDirectory(prefix="tally-rt-") as tmp, \
            cf.ThreadPoolExecutor(max_workers=args.j) as ex:
        for name, err in ex.map(lambda p: check(p, args, ptxas, tmp), files):
            if err:
                failures.append((name, err))
                print(f"FAIL {name}: {err}", flush=True)
    what = "parse + fixed point" + ("" if ptxas is None else " + identical ptxas machine code")
    print(f"{len(files) - len(failures)}/{len(files)} corpus files pass ({what})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
