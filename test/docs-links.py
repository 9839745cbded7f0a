#!/usr/bin/env python3
"""docs-links.py ROOT - every relative link in the repository's markdown
files leads somewhere.

For each tracked *.md file (git ls-files; without git, every *.md outside
build folders), each inline link or image [text](target) whose target is not
a URL (scheme:) must name an existing file or folder, relative to the file;
a #fragment on a markdown target (or a bare #fragment, the file itself)
must be the anchor of one of its headings, made as GitHub makes them
(lower case; punctuation but '-' and '_' dropped; spaces to '-'; a repeated
heading gets -1, -2, ...). Links inside code spans and fenced code blocks
are not links. Prints each broken link as FILE:LINE: target (why) and exits
1 if there is one.
"""
import os
import re
import subprocess
import sys

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def markdown_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "*.md"], check=True,
                             capture_output=True, text=True).stdout.split()
        if out:
            return out
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(("build", ".git"))]
        found += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".md")]
    return found


def text_lines(path):
    """The file's lines with fenced code blocks blanked (numbers kept)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    inside = None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if m:
            if inside is None:
                inside = m.group(1)
            elif m.group(1) == inside:
                inside = None
            lines[i] = ""
        elif inside is not None:
            lines[i] = ""
    return lines


def anchor(heading):
    t = heading.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


_anchors = {}


def anchors_of(path):
    if path not in _anchors:
        seen = {}
        names = set()
        for line in text_lines(path):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            base = anchor(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            names.add(base if n == 0 else f"{base}-{n}")
        _anchors[path] = names
    return _anchors[path]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: docs-links.py ROOT")
    root = os.path.abspath(sys.argv[1])
    files = markdown_files(root)
    if not files:
        sys.exit(f"docs-links: no markdown files under {root}")
    broken = links = 0
    for rel in files:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        for n, line in enumerate(text_lines(path), start=1):
            for target in LINK.findall(CODE_SPAN.sub("", line)):
                if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                    continue  # a URL (https:, mailto:)
                links += 1
                file_part, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                why = None
                if not os.path.exists(dest):
                    why = "no such file"
                elif frag and dest.endswith(".md") and frag not in anchors_of(dest):
                    why = f"no heading with anchor '{frag}'"
                if why:
                    print(f"{rel}:{n}: {target} ({why})")
                    broken += 1
    print(f"docs-links: {len(files)} markdown files, {links} relative links, {broken} broken")
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
