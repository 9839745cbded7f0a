#!/usr/bin/env python3
"""ptb-kernel-check.py - one kernel, its original against its variants, on the GPU.

For a kernel found at fault by triton-bisect.py (or any kernel of a PTX file):
transforms the PTX with tally-opt, loads the module with CuPy, fills the
buffers given with --param with random data, and runs the original, the PTB
variant (with several worker counts, chunk sizes and an unpreempted launch)
and the sliced variant on copies of the same inputs; every buffer must come
out the same bytes. Prints one line per run.

  ptb-kernel-check.py K.ptx --grid 16384 --block 64 --shared 8 \\
      --param bf16:4194304 --param bf16:4194304 --param f32:16384 \\
      --param f32:16384 --param u8:65536 --param u32:16384 --param u32:256 \\
      --param null --param null

Parameter kinds: bf16:N, f16:N, f32:N, i32:N, u8:N (a buffer of N random
elements; bf16/f16/f32 are finite, f32 positive), u32:V, i32v:V, u64:V
(a value), null (a null pointer).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import cupy as cp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_param(spec, rng):
    kind, _, val = spec.partition(":")
    if kind == "null":
        return np.uint64(0)
    if kind in ("u32", "i32v", "u64"):
        return {"u32": np.uint32, "i32v": np.int32, "u64": np.uint64}[kind](int(val, 0))
    n = int(val, 0)
    if kind == "bf16":
        f = rng.standard_normal(n).astype(np.float32)
        return cp.asarray((f.view(np.uint32) >> 16).astype(np.uint16))
    if kind == "f16":
        return cp.asarray(rng.standard_normal(n).astype(np.float16))
    if kind == "f32":
        return cp.asarray((rng.random(n) + 0.5).astype(np.float32))
    if kind == "i32":
        return cp.asarray(rng.integers(0, 1 << 10, n).astype(np.int32))
    if kind == "u8":
        return cp.asarray(rng.integers(0, 2, n).astype(np.uint8))
    raise SystemExit(f"unknown parameter kind {spec!r}")


def variant_extras(ptx, entry):
    """The names of the variant's parameters after the original's."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    if not m:
        return None
    names = re.findall(r"\.param[^,]*?\s+([A-Za-z_$%][\w$]*)\s*(?:,|$)", m.group(1).strip() + ",")
    return [n for n in names if n.startswith("__tly_")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("ptx")
    ap.add_argument("--kernel", help="the kernel (default: the first .entry)")
    ap.add_argument("--grid", type=int, nargs="+", required=True)
    ap.add_argument("--block", type=int, nargs="+", required=True)
    ap.add_argument("--shared", type=int, default=0)
    ap.add_argument("--param", action="append", default=[])
    ap.add_argument("--tally-opt", default=os.path.join(ROOT, ".carry", "runtime", "prefix",
                                                        "bin", "tally-opt"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--transformed", action="store_true",
                    help="the PTX already holds the variants (tally-opt is not run)")
    ap.add_argument("--row-bytes", type=int, default=0,
                    help="report differences by rows of this many bytes: which rows differ, "
                         "which still hold their input, which match the reference")
    ap.add_argument("--dump", type=int, default=0,
                    help="print the first N 16-bit words of each buffer: input, reference, "
                         "variant (first failing run only)")
    ap.add_argument("--only", choices=("ptb", "slice"), help="check one variant")
    ap.add_argument("--workers", type=int, help="one PTB worker count (with --chunk)")
    ap.add_argument("--chunk", type=int, default=1)
    args = ap.parse_args()
    src = open(args.ptx).read()
    name = args.kernel or re.search(r"\.entry\s+([\w$]+)", src).group(1)
    grid = tuple(args.grid + [1] * (3 - len(args.grid)))
    block = tuple(args.block + [1] * (3 - len(args.block)))
    if args.transformed:
        ptx = src
    else:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "k.tally.ptx")
            subprocess.run([args.tally_opt, "-q", args.ptx, "-o", out], check=True)
            ptx = open(out).read()
    path = os.path.join(tempfile.mkdtemp(), "k.ptx")
    open(path, "w").write(ptx)
    mod = cp.RawModule(path=path)
    rng = np.random.default_rng(1)
    inputs = [make_param(s, rng) for s in args.param]

    def fresh():
        return [p.copy() if isinstance(p, cp.ndarray) else p for p in inputs]

    def outputs(ps):
        return [p.get().tobytes() for p in ps if isinstance(p, cp.ndarray)]

    blocks = grid[0] * grid[1] * grid[2]
    ref_ps = fresh()
    mod.get_function(name)(grid, block, tuple(ref_ps), shared_mem=args.shared)
    cp.cuda.runtime.deviceSynchronize()
    ref = outputs(ref_ps)
    # The original twice: is the kernel deterministic at all?
    again = fresh()
    mod.get_function(name)(grid, block, tuple(again), shared_mem=args.shared)
    same = outputs(again) == ref
    print(f"original again: {'same' if same else 'DIFFERENT (not deterministic)'}")
    failures = 0
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    for kind in ((args.only,) if args.only else ("ptb", "slice")):
        entry = f"{name}__tally_{kind}"
        extras = variant_extras(ptx, entry)
        if extras is None:
            print(f"{kind}: no variant")
            continue
        fn = mod.get_function(entry)
        if kind == "ptb":
            configs = [(w, c) for w in (1, 7, sms, 4 * sms, blocks) for c in (1, 4)]
            if args.workers:
                configs = [(args.workers, args.chunk)]
        else:
            per = max(1, blocks // 3)
            configs = [(per, 0)]
        for workers, chunk in configs:
            for rep in range(args.repeat):
                ps = fresh()
                if kind == "ptb":
                    ctrl = cp.zeros(4, cp.uint32)
                    vals = {"__tly_ctrl": ctrl, "__tly_grid_x": np.uint32(grid[0]),
                            "__tly_grid_y": np.uint32(grid[1]),
                            "__tly_grid_z": np.uint32(grid[2]), "__tly_chunk": np.uint32(chunk)}
                    fn((min(workers, blocks), 1, 1), block, tuple(ps + [vals[e] for e in extras]),
                       shared_mem=args.shared)
                else:
                    for off in range(0, blocks, workers):
                        vals = {"__tly_slice_offset": np.uint32(off),
                                "__tly_grid_x": np.uint32(grid[0]),
                                "__tly_grid_y": np.uint32(grid[1]),
                                "__tly_grid_z": np.uint32(grid[2])}
                        fn((min(workers, blocks - off), 1, 1), block,
                           tuple(ps + [vals[e] for e in extras]), shared_mem=args.shared)
                cp.cuda.runtime.deviceSynchronize()
                got = outputs(ps)
                bad = [i for i, (a, b) in enumerate(zip(ref, got)) if a != b]
                what = f"{kind} workers={workers} chunk={chunk} run {rep}"
                if bad:
                    failures += 1
                    a = np.frombuffer(ref[bad[0]], np.uint8)
                    b = np.frombuffer(got[bad[0]], np.uint8)
                    diff = np.nonzero(a != b)[0]
                    print(f"{what}: DIFFERENT buffers {bad}: {len(diff)} bytes, first at byte "
                          f"{diff[0]}, last at {diff[-1]}")
                    if args.dump and failures == 1:
                        for j, p in enumerate(p for p in inputs if isinstance(p, cp.ndarray)):
                            w = lambda b: np.frombuffer(b, np.uint16)[: args.dump].tolist()
                            print(f"  buffer {j} input {w(p.get().tobytes())}")
                            print(f"  buffer {j} ref   {w(ref[j])}")
                            print(f"  buffer {j} got   {w(got[j])}")
                    if args.row_bytes:
                        i = bad[0]
                        inp = [p for p in inputs if isinstance(p, cp.ndarray)][i].get().tobytes()
                        n = len(a) // args.row_bytes
                        rows = lambda x: np.frombuffer(x, np.uint8)[: n * args.row_bytes].reshape(
                            n, args.row_bytes)
                        ra, rb, ri = rows(ref[i]), rows(got[i]), rows(inp)
                        differ = np.nonzero((ra != rb).any(axis=1))[0]
                        untouched = np.nonzero((rb == ri).all(axis=1) & (ra != ri).any(axis=1))[0]
                        # Bytes that differ within the differing rows.
                        cols = np.nonzero((ra[differ] != rb[differ]).any(axis=0))[0]
                        print(f"  rows of {args.row_bytes} bytes: {len(differ)} of {n} differ "
                              f"(first {differ[:12].tolist()}); {len(untouched)} still hold "
                              f"their input (first {untouched[:12].tolist()}); differing byte "
                              f"columns {cols[:16].tolist()}{'...' if len(cols) > 16 else ''} "
                              f"({len(cols)})")
                else:
                    print(f"{what}: same")
    print(f"failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
