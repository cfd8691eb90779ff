#!/usr/bin/env python3
"""Holds the sources to the sizes docs/STYLE's habits ask for (issue 37, point 6): no source
file over 400 code lines and no function over 80 lines, unless a comment at its top says
why ("long because ..."): the file's `//!` doc, or the function's doc comment or the
first comment of its body.

Code lines: lines of `src/**/*.rs` that are neither blank nor only a comment, outside
`#[cfg(test)]` modules and unit-test files (`tests.rs`, files under a `tests/` directory).
A function's length runs from its `fn` line to its closing brace.

What is over today without a reason is listed in deploy/sizes_debt.txt, so the check can
hold from now on while that debt is paid: an entry over its limit and not listed fails,
and so does a listed entry that is no longer over (take it off the list). Every run
prints the totals.
Usage: sizes.py [--list]   (--list prints every entry over, as the debt file's lines)
"""
import glob
import os
import re
import sys

FILE_LIMIT = 400
FN_LIMIT = 80
REASON = re.compile(r"long because", re.I)
FN_START = re.compile(
    r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)"
)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def crates():
    return sorted(
        os.path.dirname(os.path.relpath(p, ROOT))
        for p in glob.glob(os.path.join(ROOT, "*", "Cargo.toml"))
    )


def strip_strings(line):
    """The line with string and char literals blanked and any `//` comment cut, so that
    braces inside them do not count."""
    out, i, n = [], 0, len(line)
    while i < n:
        c = line[i]
        if c == '"':
            j = i + 1
            while j < n and line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", line[i:]):
            m = re.match(r"'(\\.|[^\\'])'", line[i:])
            out.append("' '")
            i += len(m.group(0))
        elif line.startswith("//", i):
            break
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(lines, start):
    """Index of the line closing the first `{` at or after `start` (None: a `;` came
    first, a declaration without a body)."""
    depth, opened = 0, False
    for i in range(start, len(lines)):
        code = strip_strings(lines[i])
        for ch in code:
            if ch == "{":
                depth += 1
                opened = True
            elif ch == "}":
                depth -= 1
                if opened and depth == 0:
                    return i
            elif ch == ";" and not opened:
                return None
    return None


def test_spans(lines):
    """Line index ranges of `#[cfg(test)]` items."""
    spans = []
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]":
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith("#["):
                j += 1
            end = block_end(lines, j)
            if end is not None:
                spans.append((i, end))
    return spans


def is_code(line):
    s = line.strip()
    return bool(s) and not s.startswith("//")


def has_reason(lines, start, end):
    """A "long because" in the doc comment above `start` or the first comment lines of
    the body."""
    i = start - 1
    while i >= 0 and (lines[i].strip().startswith(("///", "#[", "//"))):
        if REASON.search(lines[i]):
            return True
        i -= 1
    for j in range(start, min(end, start + 12)):
        s = lines[j].strip()
        if s.startswith("//") and REASON.search(s):
            return True
    return False


def entries():
    """(key, size, limit, reasoned) of every file and function over its limit."""
    out = []
    for crate in crates():
        for path in sorted(glob.glob(os.path.join(ROOT, crate, "src", "**", "*.rs"), recursive=True)):
            rel = os.path.relpath(path, ROOT)
            parts = rel.split(os.sep)
            if parts[-1] == "tests.rs" or "tests" in parts[2:-1]:
                continue
            lines = open(path, encoding="utf-8").read().split("\n")
            spans = test_spans(lines)
            in_test = lambda i: any(a <= i <= b for a, b in spans)
            code = sum(1 for i, line in enumerate(lines) if is_code(line) and not in_test(i))
            if code > FILE_LIMIT:
                doc = "\n".join(l for l in lines if l.startswith("//!"))
                out.append((rel, code, FILE_LIMIT, bool(REASON.search(doc))))
            for i, line in enumerate(lines):
                m = FN_START.match(line)
                if not m or in_test(i):
                    continue
                end = block_end(lines, i)
                if end is None:
                    continue
                size = end - i + 1
                if size > FN_LIMIT:
                    out.append((f"{rel}::{m.group(7)}", size, FN_LIMIT, has_reason(lines, i, end)))
    return out


def main():
    found = entries()
    over = [(k, n, lim) for k, n, lim, reasoned in found if not reasoned]
    if "--list" in sys.argv:
        for k, n, _ in over:
            print(k)
        return 0
    debt_path = os.path.join(ROOT, "deploy", "sizes_debt.txt")
    debt = {
        l.strip()
        for l in open(debt_path, encoding="utf-8")
        if l.strip() and not l.startswith("#")
    }
    failed = False
    for k, n, lim in over:
        if k not in debt:
            print(f"{k}: {n} lines, over {lim}: shorten it, or say at its top why it is long ('long because ...')")
            failed = True
    for k in sorted(debt - {k for k, _, _ in over}):
        print(f"{k} is listed in deploy/sizes_debt.txt but no longer over its limit: take it off the list")
        failed = True
    files = sum(1 for k, _, _ in over if "::" not in k)
    print(
        f"{files} files over {FILE_LIMIT} code lines and {len(over) - files} functions over "
        f"{FN_LIMIT} lines without a reason ({len(debt)} listed as debt); "
        f"{sum(1 for *_, r in found if r)} over with a reason"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
