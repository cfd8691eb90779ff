#!/usr/bin/env python3
"""Fails when a crate's top-level modules import each other in a cycle.

A module's imports are the `crate::<module>` paths in its files (the file of the module and
every file under its directory; unit-test files left out). A cycle is a set of two or more
top-level modules each reachable from the others. Prints the edges of each cycle found.
Usage: module_cycles.py <crate dir>...  (default: every workspace crate with src/lib.rs)
"""
import glob
import os
import re
import sys


def modules(src):
    """Top-level module name -> its files."""
    out = {}
    for path in glob.glob(os.path.join(src, "**", "*.rs"), recursive=True):
        rel = os.path.relpath(path, src)
        parts = rel.split(os.sep)
        if parts[-1] == "tests.rs" or "tests" in parts[:-1]:
            continue
        top = parts[0][:-3] if len(parts) == 1 else parts[0]
        if top in ("lib", "main"):
            continue
        out.setdefault(top, []).append(path)
    return out


def imports(files, names):
    found = set()
    for path in files:
        text = open(path, encoding="utf-8").read()
        text = re.sub(r"//[^\n]*", "", text)
        for m in re.finditer(r"\bcrate::(\w+)", text):
            found.add(m.group(1))
        for m in re.finditer(r"\bcrate::\{([^;]*?)\}", text, re.S):
            found.update(re.findall(r"(?:^|[,{]\s*)(\w+)", m.group(1)))
    return {n for n in found if n in names}


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(crates):
    bad = 0
    for crate in crates:
        mods = modules(os.path.join(crate, "src"))
        graph = {m: sorted(imports(files, mods) - {m}) for m, files in mods.items()}
        for comp in cycles(graph):
            bad += 1
            edges = [f"{a} -> {b}" for a in comp for b in graph[a] if b in comp]
            print(f"{crate}: import cycle among {', '.join(comp)}: {'; '.join(edges)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    args = sys.argv[1:] or sorted(
        os.path.dirname(os.path.dirname(p)) for p in glob.glob("*/src/lib.rs")
    )
    sys.exit(main(args))
