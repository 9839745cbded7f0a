#!/usr/bin/env python3
"""check-stats-link.py LINK: the runtime wrote its JSON statistics through
LINK (a symbolic link named in TALLY_STATS) into the link's target, and
left the link a link (it replaces only regular files, by a rename)."""
import json
import os
import sys


def main():
    link = sys.argv[1]
    if not os.path.islink(link):
        print(f"check-stats-link: {link} is no longer a symbolic link")
        return 1
    with open(link) as f:
        stats = json.load(f)
    if stats.get("tally_stats_version") != 1:
        print(f"check-stats-link: {link}: no statistics ({list(stats)[:5]})")
        return 1
    print(f"check-stats-link: {os.readlink(link)} holds the statistics of pid {stats['pid']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
