#!/usr/bin/env python3
"""Checks the register budget tally-opt applied, from its output PTX and its
metadata YAML: check-budget.py OUT.ptx META.yaml SLACK.

For each kernel with resources, the budget is max(registers rounded up to
8, registers + SLACK, 24), at most 255. A variant that carries a .maxnreg
its original does not have must carry exactly the budget and use at most
that many registers. No variant may spill more than its original. Prints
`capped VARIANT` or `uncapped VARIANT` per variant; exits 1 on a violation."""
import re
import sys


def maxnreg_by_entry(ptx):
    caps, name = {}, None
    for line in ptx.splitlines():
        m = re.match(r"\s*\.visible \.entry (\w+)\(", line)
        if m:
            name = m.group(1)
            continue
        m = re.match(r"\s*\.maxnreg (\d+)", line)
        if m and name:
            caps[name] = int(m.group(1))
        if line.startswith("{"):
            name = None
    return caps


def resources(yaml):
    """{kernel: (res, {variant: res})} with res = (registers, spills)."""
    out, kernel, variant = {}, None, None
    for line in yaml.splitlines():
        m = re.match(r"  - name: (\S+)$", line)
        if m:
            kernel, variant = m.group(1), None
            out[kernel] = [None, {}]
            continue
        m = re.match(r"        name: (\S+)$", line)
        if m:
            variant = m.group(1)
            out[kernel][1][variant] = None
            continue
        m = re.search(r"registers: (\d+), .*spill_stores: (\d+), spill_loads: (\d+)", line)
        if m:
            res = (int(m.group(1)), int(m.group(2)) + int(m.group(3)))
            if variant:
                out[kernel][1][variant] = res
            else:
                out[kernel][0] = res
    return out


def main():
    ptx = open(sys.argv[1]).read()
    meta = open(sys.argv[2]).read()
    slack = int(sys.argv[3])
    caps = maxnreg_by_entry(ptx)
    ok = True
    for kernel, (orig, variants) in sorted(resources(meta).items()):
        if orig is None:
            continue
        regs, spills = orig
        budget = min(255, max((regs + 7) // 8 * 8, regs + slack, 24))
        for name, res in sorted(variants.items()):
            if res is None:
                print("%s: no resources" % name)
                ok = False
                continue
            vregs, vspills = res
            capped = name in caps and caps.get(kernel) != caps[name]
            if capped and (caps[name] != budget or vregs > budget):
                print("%s: .maxnreg %d, %d registers, budget %d"
                      % (name, caps[name], vregs, budget))
                ok = False
            if vspills > spills:
                print("%s: spills %d bytes, the original %d" % (name, vspills, spills))
                ok = False
            print("%s %s" % ("capped" if capped else "uncapped", name))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
