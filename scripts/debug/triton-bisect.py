#!/usr/bin/env python3
"""triton-bisect.py - find the Triton kernel whose variant changes train_gpt.py's losses.

On the GPU machine, after scripts/prepare-device.sh here (.carry carried):
runs examples/triton/train_gpt.py under `tally run --force=original` (the
reference; it fills the Triton and Inductor caches), then each form given
with --form (default: ptb, ptb with --preempt=random:6, slice) on every
kernel; for a form whose losses differ, bisects the kernels with variants
(`--force-only`) down to one kernel and says which. Writes logs to OUT/bisect
(OUT from the environment, default gpu-out), with the guilty kernel's PTX, and
a summary on stdout. TRITON_CACHES: where the caches live (default
/tmp/triton-caches).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
R = os.path.join(ROOT, ".carry", "runtime")
TALLY = os.path.join(R, "prefix", "bin", "tally")


def run(name, tally_args, steps, log_dir, timeout):
    """Runs train_gpt.py under `tally run TALLY_ARGS`; returns (losses, seconds)."""
    stats = os.path.join(log_dir, name + ".json")
    cmd = [TALLY, "run", "--priority=best-effort", "--triton-ptxas", "--stats=" + stats,
           *tally_args, "--", sys.executable, "train_gpt.py", "--steps", str(steps),
           "--mm-configs", "2", "--no-coordinate-descent"]
    t0 = time.time()
    with open(os.path.join(log_dir, name + ".txt"), "w") as out, \
            open(os.path.join(log_dir, name + ".err"), "w") as err:
        try:
            rc = subprocess.run(cmd, cwd=R, stdout=out, stderr=err, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    secs = time.time() - t0
    with open(os.path.join(log_dir, name + ".txt")) as f:
        losses = [l for l in f if l.startswith("step")]
    print(f"  {name}: exit {rc}, {len(losses)} steps, {secs:.0f} s", flush=True)
    return (losses if rc == 0 else None), secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--form", action="append",
                    help="tally run options of a form to check, e.g. '--force=ptb "
                         "--preempt=random:6' (repeatable)")
    ap.add_argument("--timeout", type=int, default=240)
    args = ap.parse_args()
    forms = args.form or ["--force=ptb", "--force=ptb --preempt=random:6", "--force=slice"]
    caches = os.environ.setdefault("TRITON_CACHES", "/tmp/triton-caches")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(caches, "triton")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(caches, "inductor")
    out = os.environ.get("OUT", "gpu-out")
    log_dir = os.path.join(out, "bisect")
    os.makedirs(log_dir, exist_ok=True)
    ref, _ = run("reference", ["--force=original"], args.steps, log_dir, 600)
    if not ref:
        print("the reference run failed")
        return 1
    with open(os.path.join(log_dir, "reference.json")) as f:
        kernels = sorted(k["name"] for k in json.load(f)["kernels"] if k["has_variants"])
    print(f"{len(kernels)} kernels with variants", flush=True)
    summary = []
    for i, form in enumerate(forms):
        opts = form.split()
        losses, _ = run(f"form{i}", opts, args.steps, log_dir, args.timeout)
        if losses == ref:
            summary.append(f"{form}: same losses")
            continue
        # Bisect: keep a set of kernels whose forced form changes the losses.
        bad = kernels
        n = 0
        while len(bad) > 1:
            half = bad[: len(bad) // 2]
            regex = "^(" + "|".join(half) + ")$"
            n += 1
            got, _ = run(f"form{i}-bisect{n}", opts + ["--force-only=" + regex], args.steps,
                         log_dir, args.timeout)
            bad = half if got != ref else bad[len(bad) // 2:]
        # Confirm the last one alone.
        got, _ = run(f"form{i}-alone", opts + ["--force-only=^" + bad[0] + "$"], args.steps,
                     log_dir, args.timeout)
        verdict = "confirmed alone" if got != ref else "NOT reproduced alone (an interaction)"
        # Its PTX, for a look off the GPU.
        for d, _, files in os.walk(os.environ["TRITON_CACHE_DIR"]):
            for f in files:
                if f == bad[0] + ".ptx":
                    shutil.copy(os.path.join(d, f), log_dir)
        summary.append(f"{form}: losses differ; kernel {bad[0]} ({verdict})")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
