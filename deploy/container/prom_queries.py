#!/usr/bin/env python3
"""Run every alert rule's and every dashboard panel's query against a live Prometheus.

    prom_queries.py PROMETHEUS_URL alerts.yml flashgate.json expected_empty.txt

Each query is sent as Grafana sends it with the dashboard's "All" selections ($gateway and
$route: `.*`, $__rate_interval: 1m). An alert whose condition is false returns nothing,
so for an empty alert the left side of its top-level comparison is queried too: the
metric is there, the condition is not met. A query whose series (or whose alert's left
side) is empty fails the run unless expected_empty.txt names it (`<alert or panel title>
<TAB> reason`). Prints one line per query with its series count.
"""
import json
import re
import sys
import urllib.parse
import urllib.request

import yaml

base, alerts_path, dash_path, expected_path = sys.argv[1:5]
expected = {}
for line in open(expected_path):
    if line.strip() and not line.startswith("#"):
        name, _, reason = line.rstrip("\n").partition("\t")
        expected[name.strip()] = reason.strip()


def query(expr):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(body.get("error"))
    return len(body["data"]["result"])


def lhs(expr):
    """The left side of a top-level comparison (outside parentheses and braces), or None."""
    depth = 0
    for i, c in enumerate(expr):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and expr[i:i + 2] in ("==", "!=", ">=", "<=") or depth == 0 and c in "<>":
            return expr[:i].strip()
    return None


def grafana(expr):
    return (expr.replace("$__rate_interval", "1m").replace("${gateway}", ".*")
            .replace("$gateway", ".*").replace("${route}", ".*").replace("$route", ".*"))


items = []
for group in yaml.safe_load(open(alerts_path))["groups"]:
    for rule in group["rules"]:
        items.append(("alert" if "alert" in rule else "record", rule.get("alert") or rule.get("record"), rule["expr"]))
dash = json.load(open(dash_path))


def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))


for p in panels(dash["panels"]):
    for t in p.get("targets", []):
        if t.get("expr"):
            items.append(("panel", f"{p['title']} [{t.get('refId', 'A')}]", grafana(t["expr"])))

failures, seen = [], set()
for kind, name, expr in items:
    try:
        n = query(expr)
        side = None
        if n == 0 and kind == "alert" and lhs(expr):
            side = query(lhs(expr))
        shown = n if side is None else f"0 (condition not met; left side {side})"
        empty = n == 0 and not side
    except Exception as e:  # a query Prometheus refuses is a failure, never expected
        shown, empty = f"error: {e}", True
        expected.pop(name, None)
    seen.add(name)
    mark = ""
    if empty:
        if name in expected:
            mark = f"  expected empty: {expected[name]}"
        else:
            failures.append(name)
            mark = "  UNEXPECTED: no series"
    print(f"{kind:6} {name}: {shown}{mark}")
stale = sorted(set(expected) - seen)
for name in stale:
    failures.append(name)
    print(f"expected_empty.txt names {name!r}, which is no alert or panel")
print(f"{len(items)} queries, {len(failures)} failed")
sys.exit(1 if failures else 0)
