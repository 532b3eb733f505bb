#!/usr/bin/env python3
"""Every source file of the libraries is named in docs/architecture.md.

The table under "## What each folder holds" names, per folder, the files it
holds. This check walks each library folder of that table (core, kernels,
parallel, model, optim, launch and their rows; not tests/, bench/,
configs/) and fails naming every source file whose stem the folder's row
does not mention. A subfolder without a row of its own belongs to its
parent's row. The kernels' rule of one stem per op family holds: X_cpu,
X_cuda and X_emulated are named by X.

  check_file_table.py [ROOT]   exit 0: every file named; 1: the unnamed ones listed
"""
import os
import re
import sys

SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".h")
LIBRARIES = ("core", "kernels", "parallel", "model", "optim", "launch")


def rows(root):
    """{folder: its row's text} of the table in docs/architecture.md."""
    text = open(os.path.join(root, "docs/architecture.md"), encoding="utf-8").read()
    part = text.split("## What each folder holds", 1)
    if len(part) != 2:
        sys.exit("docs/architecture.md: no section '## What each folder holds'")
    table = {}
    for line in part[1].splitlines()[1:]:
        if line.startswith("## "):
            break
        m = re.match(r"\| `([^`]+)/` \| (.*) \|$", line)
        if m:
            table[m.group(1)] = m.group(2)
    if not table:
        sys.exit("docs/architecture.md: the folder table is empty")
    return table


def named(stem, text):
    words = set(re.findall(r"[A-Za-z0-9_]+", text))
    base = re.sub(r"_(cpu|cuda|emulated)$", "", stem)
    return stem in words or base in words


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    table = rows(root)
    missing = []
    for folder, text in sorted(table.items()):
        if folder.split("/")[0] not in LIBRARIES:
            continue
        top = os.path.join(root, folder)
        for here, dirs, files in os.walk(top):
            rel = os.path.relpath(here, root)
            if rel != folder and rel in table:  # a row of its own
                dirs[:] = []
                continue
            for f in sorted(files):
                if f.endswith(SOURCES):
                    stem = f.rsplit(".", 1)[0]
                    if not named(stem, text):
                        missing.append(f"{os.path.join(rel, f)}: not named in the row of `{folder}/`")
    if missing:
        print("docs/architecture.md, '## What each folder holds': files the table does not name:")
        for m in missing:
            print("  " + m)
        sys.exit(1)
    print(f"every source file of {len([f for f in table if f.split('/')[0] in LIBRARIES])} library folders is named")


if __name__ == "__main__":
    main()
