#!/usr/bin/env bash
# The rush as a ratio: the users-5k rush at 1 000 connections against the gateway and
# against the claim floor ("hyper + one redis-rs round trip running claim.lua":
# bench/src/stack/baseline_claim.rs, lua/claim.lua once per request on the user's home
# shard), with the same client (our load generator) and the same requests. Each of REPS
# runs (default 5) is one `bench run --stack --compare-baseline --baseline-kind claim` on a
# fresh stack: the floor's rush on a fresh copy of the SKU, then the gateway's on the SKU,
# so floor and gateway runs alternate. Prints each run's claimed p99 (all claimed answers;
# and of the claims sent in the first second) for both, their medians, and the gateway's
# ratio to the floor (goal: median gateway claimed p99 <= 1.5x the floor's).
#
#   bench/external/rush_ratio.sh
#   BUILD=0 REPS=5 OUT=/tmp/ratio bench/external/rush_ratio.sh
#
# BUILD=0 uses the release binaries already in $CARGO_TARGET_DIR (default target)/release.
set -euo pipefail
cd "$(dirname "$0")/../.."

REPS="${REPS:-5}"
OUT="${OUT:-$(mktemp -d /tmp/flashgate-rush-ratio.XXXXXX)}"
TARGET="${CARGO_TARGET_DIR:-target}"
[ "${BUILD:-1}" = 1 ] && cargo build --release -q -p bench -p gateway -p campaign-ops
BENCH="$TARGET/release/bench"

for i in $(seq 1 "$REPS"); do
  echo "== rush ratio, run $i/$REPS (floor, then gateway)" >&2
  # No per-user rate limit, as compare.sh's rush rows, so the figures stand beside them.
  "$BENCH" run --stack --quiet --preset users-5k --connections 1000 \
    --compare-baseline --baseline-kind claim --gateway-arg=--user-rate=0 \
    --out "$OUT/run-$i" >/dev/null
done

python3 - "$OUT" "$REPS" <<'PY'
import json, os, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
nan = float("nan")
def p99(report, field):
    if field == "first_second_claimed":
        p = report.get(field)
    else:
        p = report.get("latency_by_outcome", {}).get("claimed")
    return p["p99_us"] / 1e3 if p else nan
rows = []
for i in range(1, reps + 1):
    d = os.path.join(out, f"run-{i}")
    g = json.load(open(os.path.join(d, "report.json")))
    f = json.load(open(os.path.join(d, "baseline.json")))
    rows.append((i, p99(g, "claimed"), p99(f, "claimed"),
                 p99(g, "first_second_claimed"), p99(f, "first_second_claimed")))
med = lambda xs: statistics.median(xs) if xs else nan
print(f"\n## users-5k at 1 000 connections: gateway against the claim floor ({reps} runs)\n")
print("| run | gateway claimed p99 | floor claimed p99 | ratio | gateway first-second claimed p99 | floor first-second claimed p99 |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for i, g, f, g1, f1 in rows:
    print(f"| {i} | {g:.2f} ms | {f:.2f} ms | {g / f:.2f}x | {g1:.2f} ms | {f1:.2f} ms |")
mg, mf = med([r[1] for r in rows]), med([r[2] for r in rows])
mg1, mf1 = med([r[3] for r in rows]), med([r[4] for r in rows])
print(f"| median | {mg:.2f} ms | {mf:.2f} ms | {mg / mf:.2f}x | {mg1:.2f} ms | {mf1:.2f} ms |")
ratios = [r[1] / r[2] for r in rows]
print(f"\ngateway ÷ floor, claimed p99: {mg / mf:.2f}x (ratio of the medians; median of the runs' ratios {med(ratios):.2f}x); goal <= 1.5x: {'met' if mg / mf <= 1.5 else 'not met'}")
print(f"first-second claimed p99: {mg1 / mf1:.2f}x")
print(f"\nreports: {out}")
PY
