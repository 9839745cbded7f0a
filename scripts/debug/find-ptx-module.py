#!/usr/bin/env python3
"""find-ptx-module.py NAME DIR... - the PTX modules embedded as text in the
shared libraries under DIR that mention NAME (a kernel or module name),
written to NAME-N.ptx in the current folder; for reproducing a run-time PTX
module that a library (cuDNN's hardware probe, for one) hands the driver.
Prints what it wrote."""
import os
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[0])
    name = sys.argv[1].encode()
    n = 0
    for top in sys.argv[2:]:
        for root, _, files in os.walk(top):
            for f in files:
                if ".so" not in f:
                    continue
                p = os.path.join(root, f)
                try:
                    data = open(p, "rb").read()
                except OSError:
                    continue
                at = data.find(name)
                while at >= 0:
                    start = data.rfind(b".version", 0, at)
                    # The text ends at the first byte that is not printable
                    # ASCII or white space (a NUL, or the next binary data).
                    end = at
                    while end < len(data) and (32 <= data[end] < 127 or data[end] in b"\t\n\r"):
                        end += 1
                    # and at the last closing brace in it (a function's end).
                    close = data.rfind(b"}", at, end)
                    end = close + 1 if close >= 0 else end
                    if start >= 0 and end > at and at - start < 1 << 20:
                        n += 1
                        out = f"{sys.argv[1]}-{n}.ptx"
                        with open(out, "wb") as o:
                            o.write(data[start:end])
                        print(f"{out}: {end - start} bytes from {p} at {start}")
                    at = data.find(name, end if end > at else at + 1)
    if not n:
        sys.exit(f"no PTX mentioning {sys.argv[1]} under {' '.join(sys.argv[2:])}")


if __name__ == "__main__":
    main()
