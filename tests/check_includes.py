#!/usr/bin/env python3
"""Every project #include against the arrows of docs/architecture.md.

The table under "## Folders and their arrows" in docs/architecture.md is the
one drawing: each row names a folder and the folders it may use. This check
reads that table, then every `#include "..."` of the tree, and fails naming
FILE:LINE, the folder, the folder it reached and the arrows it has, for an
include that the table does not allow. A folder may always use itself.
Tests: a file in tests/<folder>/ may use what <folder> may use, <folder>
itself, the test helpers of those folders and the shared helpers directly in
tests/; the files directly in a test folder that has a row of its own
(tests/ itself, tests/fuzz, tests/launch: the trident program's tests) use
that row. bench/ programs are left out: each links the one
library it measures (bench/CMakeLists.txt), which the linker checks.

  check_includes.py [ROOT]     exit 0: clean; 1: a forbidden include (listed)
  check_includes.py --self-test   the check on a small tree with one forbidden
                                  include in core/ and one in tests/kernels/:
                                  both must be named, with file and line
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".in")


def arrows():
    """{folder: set(folders it may use)} from docs/architecture.md."""
    text = open(os.path.join(ROOT, "docs/architecture.md"), encoding="utf-8").read()
    part = text.split("## Folders and their arrows", 1)
    if len(part) != 2:
        sys.exit("docs/architecture.md: no section '## Folders and their arrows'")
    table = {}
    for line in part[1].splitlines():
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`").rstrip("/")
        uses = set(re.findall(r"`([^`]+)`", cells[1]))
        table[folder] = {u.rstrip("/") for u in uses}
    if not table:
        sys.exit("docs/architecture.md: the arrows table is empty")
    return table


def folder_of(path, folders):
    """The longest folder of the table that holds `path` (a file name relative to ROOT)."""
    best = None
    for f in folders:
        if path == f or path.startswith(f + "/"):
            if best is None or len(f) > len(best):
                best = f
    return best


def main():
    table = arrows()
    code = [f for f in table if not f.startswith("tests")]
    rows = [f for f in table if f.startswith("tests")]  # rows for the files directly in these test folders

    def test_folder(rel):
        """A test file's folder: its own row, or tests/ + the code folder it mirrors."""
        if os.path.dirname(rel) in rows:
            return os.path.dirname(rel)
        mirrored = folder_of(rel[len("tests/"):], code)
        return None if mirrored is None else "tests/" + mirrored

    bad, checked = [], 0
    for top in ("core", "kernels", "parallel", "model", "optim", "launch", "tests"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), ROOT)
                if rel.startswith("tests/"):
                    me = test_folder(rel)
                    if me is None:
                        bad.append(f"{rel}: mirrors no folder of the arrows table (docs/architecture.md)")
                        continue
                    if me in rows:
                        may, tests_may = table[me], {me, "tests"}
                    else:
                        may = table[me[len("tests/"):]] | {me[len("tests/"):]}
                        tests_may = {"tests"} | {"tests/" + f for f in may}
                else:
                    me = folder_of(rel, code)
                    if me is None:
                        bad.append(f"{rel}: in no folder of the arrows table (docs/architecture.md)")
                        continue
                    may, tests_may = table[me] | {me}, set()
                for no, line in enumerate(open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace"), 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if not m or "/" not in m.group(1):
                        continue  # a same-directory or generated header
                    inc = m.group(1)
                    if inc.startswith("tests/"):
                        target = test_folder(inc)
                        ok = target in tests_may
                    else:
                        target = folder_of(inc, code)
                        if target is None:
                            continue  # not a project header (a system or library path)
                        ok = target in may
                    checked += 1
                    if not ok:
                        allowed = ", ".join(sorted(may | tests_may)) or "nothing"
                        bad.append(f"{rel}:{no}: {me} includes \"{inc}\" ({target}); {me} may use only {allowed}")
    for b in bad:
        print(b)
    print(f"check_includes: {checked} includes checked against the {len(table)} rows of docs/architecture.md: "
          f"{len(bad)} forbidden")
    return 1 if bad else 0


def self_test():
    """The check must name a forbidden include; a clean tree must pass."""
    import contextlib
    import io
    import shutil
    import tempfile
    global ROOT
    real = ROOT
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        shutil.copy(os.path.join(real, "docs/architecture.md"), os.path.join(tmp, "docs"))
        files = {"core/tensor.hpp": "#pragma once\n", "kernels/gemm.hpp": '#include "core/tensor.hpp"\n',
                 "launch/train/trainer.hpp": '#include "kernels/gemm.hpp"\n',
                 "tests/kernels/test_gemm.cpp": '#include "kernels/gemm.hpp"\n#include "tests/test_util.hpp"\n'}
        for name, text in files.items():
            os.makedirs(os.path.join(tmp, os.path.dirname(name)), exist_ok=True)
            open(os.path.join(tmp, name), "w").write(text)
        ROOT = tmp
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            clean = main()
        if clean != 0:
            print(out.getvalue() + "self-test: a tree with no forbidden include failed")
            return 1
        open(os.path.join(tmp, "core/tensor.hpp"), "a").write('#include "launch/train/trainer.hpp"\n')
        open(os.path.join(tmp, "tests/kernels/test_gemm.cpp"), "a").write('#include "launch/train/trainer.hpp"\n')
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main()
        text = out.getvalue()
        want = ['core/tensor.hpp:2: core includes "launch/train/trainer.hpp"',
                'tests/kernels/test_gemm.cpp:3: tests/kernels includes "launch/train/trainer.hpp"']
        missing = [w for w in want if w not in text]
        ROOT = real
        if status != 1 or missing:
            print(text + f"self-test: exit {status} (want 1), not named: {missing}")
            return 1
    print("check_includes self-test: a forbidden include in core/ and in tests/kernels/ is named with its line")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    if len(sys.argv) > 1:
        ROOT = os.path.abspath(sys.argv[1])
    sys.exit(main())
