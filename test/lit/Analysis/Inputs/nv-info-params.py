#!/usr/bin/env python3
"""Prints the kernel parameter layout ptxas recorded in a cubin: one line
`KERNEL param ORDINAL offset OFFSET size SIZE` per EIATTR_KPARAM_INFO entry of
each .nv.info.KERNEL section, by kernel and ordinal. Lets tests compare
print<kernel-info>'s layout with the one ptxas chose."""
import struct
import sys

EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR_KPARAM_INFO = 0x17


def sections(elf):
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        sys.exit("not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
             for i in range(shnum)]
    strtab = heads[shstrndx][4]
    for name, _, _, _, off, size in heads:
        end = elf.index(b"\0", strtab + name)
        yield elf[strtab + name:end].decode(), elf[off:off + size]


def params(info):
    pos = 0
    while pos + 2 <= len(info):
        fmt, attr = info[pos], info[pos + 1]
        if fmt == EIFMT_SVAL:
            size = struct.unpack_from("<H", info, pos + 2)[0]
            data = info[pos + 4:pos + 4 + size]
            pos += 4 + size
            if attr == EIATTR_KPARAM_INFO:
                _, ordinal, offset, flags = struct.unpack_from("<IHHI", data)
                yield ordinal, offset, (flags >> 18) & 0x3FFF
        elif fmt == EIFMT_HVAL:
            pos += 4
        elif fmt == EIFMT_BVAL:
            pos += 3
        elif fmt == EIFMT_NVAL:
            pos += 2
        elif fmt == 0:
            break  # padding at the end of the section
        else:
            sys.exit("unknown .nv.info attribute format %d" % fmt)


def main():
    with open(sys.argv[1], "rb") as f:
        elf = f.read()
    for name, data in sorted(sections(elf)):
        if name.startswith(".nv.info."):
            kernel = name[len(".nv.info."):]
            for ordinal, offset, size in sorted(params(data)):
                print("%s param %d offset %d size %d" % (kernel, ordinal, offset, size))


if __name__ == "__main__":
    main()
