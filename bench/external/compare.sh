#!/usr/bin/env bash
# Our load generator against external clients (wrk and h2load) on the same local stack, row by row:
# sold-out path, claim path at 100 and 1 000 connections, and the users-5k rush (at its
# 1 000 connections, and at 200 as `rush-200`). Each row
# runs `bench run --stack --external` REPS times (default 3) and prints the medians of
# throughput and CPU µs per answer by process, ours beside wrk's and h2load's (h2load
# sends one user's fixed request without a request id: bench/src/stack/external/h2load.rs;
# CLIENTS=wrk for wrk alone). The sold-out and claims-100 rows also drive the bare hyper
# baseline with every client, and print the gateway's ratios to it under each external
# client (throughput, and server CPU per answer), the figures
# the opening-second issue's goals are stated in. The claims-floor row is claims-100
# against the Redis baseline instead ("hyper + one redis-rs round trip": the floor of a
# claim's CPU, bench/src/stack/baseline.rs).
#
#   bench/external/compare.sh [rows...]     rows: sold-out claims-100 claims-1000 rush (default all),
#                                            and claims-floor claims-consumer rush-200
#   REPS=5 OUT=/tmp/cmp bench/external/compare.sh rush
#
# Installs wrk and h2load (Debian packages wrk, nghttp2-client) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v wrk >/dev/null || ! command -v h2load >/dev/null; then
  echo "installing wrk and h2load ..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y wrk nghttp2-client >/dev/null
fi

REPS="${REPS:-3}"
CLIENTS="${CLIENTS:-wrk,h2load}"
# wrk alone needs no flag, so a bench binary older than h2load's support still runs (ab.sh).
client_flag=""
[ "$CLIENTS" = wrk ] || client_flag="--external-client $CLIENTS"
OUT="${OUT:-$(mktemp -d /tmp/flashgate-compare.XXXXXX)}"
TARGET="${CARGO_TARGET_DIR:-target}"
# BUILD=0 uses the binaries already in $TARGET/release.
[ "${BUILD:-1}" = 1 ] && cargo build --release -q -p bench -p gateway -p campaign-ops
BENCH="$TARGET/release/bench"

# The rows of docs/BENCHMARKS.md "Summary"; every one runs without a per-user rate limit, so that
# wrk's and our distinct users go as fast as they can and h2load's one user is not
# answered 429.
declare -A ROWS=(
  [sold-out]="--no-consumer --sku 1:1:1 --users 4000000 --limit 1 --repeat-ratio 0 --connections 100 --duration 8 --compare-baseline"
  [claims-100]="--no-consumer --sku 1:10000000:16 --users 4000000 --limit 1 --repeat-ratio 0 --connections 100 --duration 8 --compare-baseline"
  [claims-floor]="--no-consumer --sku 1:10000000:16 --users 4000000 --limit 1 --repeat-ratio 0 --connections 100 --duration 8 --compare-baseline --baseline-kind redis"
  [claims-1000]="--no-consumer --sku 1:10000000:16 --users 4000000 --limit 1 --repeat-ratio 0 --connections 1000 --duration 8"
  [claims-consumer]="--sku 1:10000000:16 --users 4000000 --limit 1 --repeat-ratio 0 --connections 100 --duration 8"
  [rush]="--preset users-5k"
  [rush-200]="--preset users-5k --connections 200"
)
rows=("$@")
[ ${#rows[@]} -eq 0 ] && rows=(sold-out claims-100 claims-1000 rush)

for row in "${rows[@]}"; do
  args="${ROWS[$row]:?unknown row $row (sold-out claims-100 claims-floor claims-1000 claims-consumer rush rush-200)}"
  for i in $(seq 1 "$REPS"); do
    echo "== $row, run $i/$REPS" >&2
    # shellcheck disable=SC2086
    "$BENCH" run --stack --quiet --external $client_flag $args --gateway-arg=--user-rate=0 \
      --out "$OUT/$row-$i" >/dev/null
  done
done

python3 - "$OUT" "${rows[@]}" <<'PY'
import json, statistics, sys, os
out, rows = sys.argv[1], sys.argv[2:]
med = lambda xs: statistics.median(xs) if xs else float("nan")
for row in rows:
    reps = []
    for d in sorted(os.listdir(out)):
        if d.rsplit("-", 1)[0] == row:
            reps.append(json.load(open(os.path.join(out, d, "report.json"))))
    if not reps:
        continue
    print(f"\n## {row} ({len(reps)} runs, medians)\n")
    print("| client | req/s | p50 | p99 | CPU µs per answer by process |")
    print("| --- | ---: | ---: | ---: | --- |")
    def cpu(lists):
        names = [c["process"] for c in lists[0]]
        return ", ".join(f'{n} {med([c["us_per_answer"] for l in lists for c in l if c["process"] == n]):.1f}' for n in names)
    print(f'| bench | {med([r["throughput_rps"] for r in reps]):.0f} | {med([r["latency"]["p50_us"] for r in reps])/1e3:.2f} ms | {med([r["latency"]["p99_us"] for r in reps])/1e3:.2f} ms | {cpu([r["cpu"] for r in reps])} |')
    # Each external client's field in a report: wrk's is "external".
    clients = [("wrk", "external"), ("h2load", "h2load")]
    for name, field in clients:
        ext = [r[field] for r in reps if r.get(field)]
        if ext:
            print(f'| {name} | {med([x["throughput_rps"] for x in ext]):.0f} | {med([x["p50_us"] for x in ext])/1e3:.2f} ms | {med([x["p99_us"] for x in ext])/1e3:.2f} ms | {cpu([x["cpu"] for x in ext])} |')
    bases = []
    for d in sorted(os.listdir(out)):
        f = os.path.join(out, d, "baseline.json")
        if d.rsplit("-", 1)[0] == row and os.path.exists(f):
            bases.append(json.load(open(f)))
    if bases:
        name = next((c["process"] for c in bases[0]["cpu"] if c.get("role") == "baseline"), "bare hyper server")
        print(f'| bench, {name} | {med([b["throughput_rps"] for b in bases]):.0f} | {med([b["latency"]["p50_us"] for b in bases])/1e3:.2f} ms | {med([b["latency"]["p99_us"] for b in bases])/1e3:.2f} ms | {cpu([b["cpu"] for b in bases])} |')
        role_us = lambda x, role: sum(c["us_per_answer"] for c in x["cpu"] if c.get("role") == role)
        ratios = []
        for client, field in clients:
            pairs = [(r[field], b[field]) for r, b in zip(reps, bases) if r.get(field) and b.get(field)]
            if not pairs:
                continue
            bext = [b for _, b in pairs]
            print(f'| {client}, {name} | {med([x["throughput_rps"] for x in bext]):.0f} | {med([x["p50_us"] for x in bext])/1e3:.2f} ms | {med([x["p99_us"] for x in bext])/1e3:.2f} ms | {cpu([x["cpu"] for x in bext])} |')
            # Medians of each run's ratio (the two servers ran back to back in one run),
            # with every run's beside it: a ratio of the medians above can differ.
            tputs = [e["throughput_rps"] / b["throughput_rps"] for e, b in pairs]
            cpus = [role_us(e, "gateway") / role_us(b, "baseline") for e, b in pairs if role_us(b, "baseline") > 0]
            runs = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
            ratios.append(f'under {client}, gateway ÷ {name}: throughput {med(tputs):.2f}× (runs {runs(tputs)}), server CPU per answer {med(cpus):.2f}× (runs {runs(cpus)})')
        if ratios:
            print()
            print("\n".join(ratios))
    fs = [r["first_second_claimed"] for r in reps if r.get("first_second_claimed")]
    if fs:
        print(f'\nfirst second, claimed: p50 {med([p["p50_us"] for p in fs])/1e3:.2f} ms, p99 {med([p["p99_us"] for p in fs])/1e3:.2f} ms')
    # Winners against losers: the claimed answers' p99 beside the sold-out answers' p99.
    won = [r["latency_by_outcome"]["claimed"]["p99_us"] for r in reps if "claimed" in r.get("latency_by_outcome", {})]
    lost = [r["latency_by_outcome"]["sold_out"]["p99_us"] for r in reps if "sold_out" in r.get("latency_by_outcome", {})]
    if won and lost:
        print(f'p99 by outcome: claimed {med(won)/1e3:.2f} ms, sold_out {med(lost)/1e3:.2f} ms')
print(f"\nreports: {out}")
PY
