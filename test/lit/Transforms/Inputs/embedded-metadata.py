#!/usr/bin/env python3
"""Prints the YAML that tally-opt embedded in a PTX module as
`.global .align 1 .b8 __tally_metadata[N] = {...}`, after checking that the
array is NUL terminated and that N is the number of bytes. Exits with
status 1, printing nothing, if the module has no such array."""
import re
import sys


def main():
    text = open(sys.argv[1]).read()
    m = re.search(r"\.global \.align 1 \.b8 __tally_metadata\[(\d+)\] = \{([^}]*)\};",
                  text)
    if not m:
        sys.exit(1)
    data = bytes(int(b) for b in m.group(2).split(","))
    if len(data) != int(m.group(1)):
        sys.exit("__tally_metadata: %d bytes declared, %d given"
                 % (int(m.group(1)), len(data)))
    if not data.endswith(b"\0") or b"\0" in data[:-1]:
        sys.exit("__tally_metadata: not a NUL-terminated string")
    sys.stdout.write(data[:-1].decode())


if __name__ == "__main__":
    main()
