#!/usr/bin/env bash
# Two builds, alternated in one sitting: the way every before/after figure in
# docs/BENCHMARKS.md was taken, as one command. This machine is shared and its speed moves
# 1.5-3x between sittings, so a change is only shown by sets of both builds run back to
# back, several times, and compared by medians.
#
#   bench/external/ab.sh <before-target-dir> <after-target-dir> [rows...]
#   ROUNDS=2 REPS=5 OUT=/tmp/ab bench/external/ab.sh /work/target-old target rush rush-200
#
# Each target dir holds release binaries in release/ (bench, gateway, consumer), e.g. a
# copy of target/release from the older commit. Each round runs compare.sh on the rows
# (REPS runs each) with the before build, then with the after build; the summary gives,
# per row, the medians over all rounds of both clients' throughput, latency and CPU per
# answer by process, and our first-second figures, before -> after.
set -euo pipefail
cd "$(dirname "$0")/../.."

[ $# -ge 2 ] || { echo "usage: $0 <before-target-dir> <after-target-dir> [rows...]" >&2; exit 2; }
before="$1" after="$2"
shift 2
for dir in "$before" "$after"; do
  for bin in bench gateway consumer; do
    [ -x "$dir/release/$bin" ] || { echo "$0: $dir/release/$bin is missing" >&2; exit 2; }
  done
done
rows=("$@")
[ ${#rows[@]} -eq 0 ] && rows=(sold-out claims-100 claims-1000 rush)
ROUNDS="${ROUNDS:-2}"
# wrk only by default: a before build may predate bench's h2load client, and the summary
# below reads wrk's figures.
export CLIENTS="${CLIENTS:-wrk}"
OUT="${OUT:-$(mktemp -d /tmp/flashgate-ab.XXXXXX)}"

for round in $(seq 1 "$ROUNDS"); do
  for side in before after; do
    dir="$before"
    [ "$side" = after ] && dir="$after"
    echo "== round $round/$ROUNDS, $side ($dir)" >&2
    CARGO_TARGET_DIR="$dir" BUILD=0 OUT="$OUT/$side-$round" \
      bench/external/compare.sh "${rows[@]}" >/dev/null
  done
done

python3 - "$OUT" "${rows[@]}" <<'PY'
import json, os, statistics, sys
out, rows = sys.argv[1], sys.argv[2:]
med = lambda xs: statistics.median(xs) if xs else float("nan")

def reports(side, row):
    found = []
    for d in sorted(os.listdir(out)):
        if not d.startswith(side + "-"):
            continue
        for run in sorted(os.listdir(os.path.join(out, d))):
            f = os.path.join(out, d, run, "report.json")
            if run.rsplit("-", 1)[0] == row and os.path.exists(f):
                found.append(json.load(open(f)))
    return found

def cpu(lists, name):
    return med([c["us_per_answer"] for l in lists for c in l if c["process"] == name])

for row in rows:
    sides = {s: reports(s, row) for s in ("before", "after")}
    if not all(sides.values()):
        continue
    n = {s: len(r) for s, r in sides.items()}
    print(f"\n## {row}: before -> after (medians of {n['before']} -> {n['after']} runs)\n")
    print("| figure | before | after |")
    print("| --- | ---: | ---: |")
    def line(label, f, fmt="{:.1f}"):
        vals = []
        for s in ("before", "after"):
            xs = [v for v in (f(r) for r in sides[s]) if v is not None]
            vals.append(fmt.format(med(xs)) if xs else "—")
        print(f"| {label} | {vals[0]} | {vals[1]} |")
    line("ours: answers/s", lambda r: r["throughput_rps"], "{:.0f}")
    print("| ours: p50 / p99 ms | {:.2f} / {:.2f} | {:.2f} / {:.2f} |".format(
        *[v for s in ("before", "after") for v in (
            med([r["latency"]["p50_us"] / 1e3 for r in sides[s]]),
            med([r["latency"]["p99_us"] / 1e3 for r in sides[s]]))]))
    for key, label in (("first_second", "all"), ("first_second_claimed", "claimed")):
        if all(r.get(key) for s in sides for r in sides[s]):
            print("| ours: first second, {} p50 / p99 ms | {:.1f} / {:.1f} | {:.1f} / {:.1f} |".format(
                label,
                *[v for s in ("before", "after") for v in (
                    med([r[key]["p50_us"] / 1e3 for r in sides[s]]),
                    med([r[key]["p99_us"] / 1e3 for r in sides[s]]))]))
    procs = [c["process"] for c in sides["after"][0]["cpu"]]
    for p in procs:
        print("| ours: CPU µs per answer, {} | {:.1f} | {:.1f} |".format(
            p, *[cpu([r["cpu"] for r in sides[s]], p) for s in ("before", "after")]))
    ext = {s: [r["external"] for r in sides[s] if r.get("external")] for s in sides}
    if all(ext.values()):
        print("| wrk: answers/s | {:.0f} | {:.0f} |".format(
            *[med([x["throughput_rps"] for x in ext[s]]) for s in ("before", "after")]))
        print("| wrk: p50 / p99 ms | {:.1f} / {:.1f} | {:.1f} / {:.1f} |".format(
            *[v for s in ("before", "after") for v in (
                med([x["p50_us"] / 1e3 for x in ext[s]]), med([x["p99_us"] / 1e3 for x in ext[s]]))]))
        for p in [c["process"] for c in ext["after"][0]["cpu"]]:
            print("| wrk run: CPU µs per answer, {} | {:.1f} | {:.1f} |".format(
                p, *[cpu([x["cpu"] for x in ext[s]], p) for s in ("before", "after")]))
print(f"\nreports: {out}")
PY
