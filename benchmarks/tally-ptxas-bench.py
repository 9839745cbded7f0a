#!/usr/bin/env python3
"""tally-ptxas-bench.py - compile time of tally-ptxas against plain ptxas.

Compiles each PTX file with Triton 3.6's ptxas command line
(`-lineinfo -v --gpu-name=ARCH FILE -o OUT`), once with the real ptxas and
once with tally-ptxas, REPEAT times each (alternating, so both see the same
machine), and prints per-file medians, the median ratio and the sums.

Usage: benchmarks/tally-ptxas-bench.py [--tally-ptxas PATH] [--ptxas PATH]
           [--arch sm_90a] [--repeat 3] [--verify 1|0] FILE.ptx...
Defaults: build/bin/tally-ptxas, ptxas on PATH or /usr/local/cuda/bin/ptxas.
A file plain ptxas rejects is skipped (and counted). Runs one compilation at
a time: the numbers are single-core latencies, not throughput.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def compile_ms(cmd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return (time.perf_counter() - t0) * 1e3, r.returncode, r.stderr.decode(errors="replace")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tally-ptxas", default=os.path.join(here, "..", "build", "bin", "tally-ptxas"))
    ap.add_argument("--ptxas", default=shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--verify", default="1", choices=["0", "1"],
                    help="TALLY_PTXAS_VERIFY for tally-ptxas (default 1, as in use)")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    for tool in (a.tally_ptxas, a.ptxas):
        if not os.access(tool, os.X_OK):
            sys.exit(f"tally-ptxas-bench: error: not executable: {tool}")
    env = dict(os.environ, TALLY_PTXAS_REAL=a.ptxas, TALLY_PTXAS_VERIFY=a.verify)
    rows, skipped, fallbacks = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.cubin")
        for f in a.files:
            plain, tally = [], []
            line = ["-lineinfo", "-v", f"--gpu-name={a.arch}", f, "-o", out]
            ok = True
            for _ in range(a.repeat):
                ms, rc, _err = compile_ms([a.ptxas] + line, env)
                if rc != 0:
                    ok = False
                    break
                plain.append(ms)
                ms, rc, err = compile_ms([a.tally_ptxas] + line, env)
                if rc != 0:
                    sys.exit(f"tally-ptxas-bench: error: tally-ptxas failed on {f}:\n{err}")
                if "compiled by plain ptxas" in err:
                    fallbacks += 1
                tally.append(ms)
            if not ok:
                skipped += 1
                continue
            rows.append((os.path.basename(f), statistics.median(plain), statistics.median(tally)))
    if not rows:
        sys.exit("tally-ptxas-bench: error: no file compiled")
    ratios = [t / p for _, p, t in rows]
    print(f"{len(rows)} files ({skipped} skipped: plain ptxas rejects them), "
          f"{a.repeat} runs each, {a.arch}, TALLY_PTXAS_VERIFY={a.verify}; "
          f"tally-ptxas fell back {fallbacks} times")
    print("| | median per file | sum |")
    print("|---|---|---|")
    print(f"| plain ptxas | {statistics.median(p for _, p, _ in rows):.0f} ms | "
          f"{sum(p for _, p, _ in rows) / 1e3:.2f} s |")
    print(f"| tally-ptxas | {statistics.median(t for _, _, t in rows):.0f} ms | "
          f"{sum(t for _, _, t in rows) / 1e3:.2f} s |")
    print(f"| ratio | {statistics.median(ratios):.2f}x (median of per-file ratios) | "
          f"{sum(t for _, _, t in rows) / sum(p for _, p, _ in rows):.2f}x |")


if __name__ == "__main__":
    main()
