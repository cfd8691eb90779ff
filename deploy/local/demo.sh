#!/usr/bin/env bash
# The flashgate demo: installs what is missing, builds, starts the local stack (Redis,
# MariaDB, consumer, two gateways behind haproxy when it is installed), runs a flash sale
# (5 000 users for 100 units, 1% retried requests) with a progress bar, prints the report
# with its invariants checked against Redis and the ledger, then runs a campaign's whole
# lifecycle (deploy/local/lifecycle.sh: sell-out, a wave reopens it, sell-out again,
# close-out with no campaign key left and drift 0), and stops the stack.
# Exits non-zero if an invariant fails.
# Settings (environment): FG_PRESET (users-5k), FG_CLUSTER=1 for a 3-master Redis Cluster,
#   FG_REPORT_DIR (target/demo-report), FG_DRAW=1 to run afterwards the bots scenario
#   (`bench draw --mode all --users 2000 --stock 100`: a first-come sale, a draw and a
#   waiting room, the bots' share of the winners compared; it fails the demo on an
#   invariant), and those of up.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$FG_ROOT"

ensure_rust
ensure_packages redis-server:redis-server redis-cli:redis-tools
command -v haproxy >/dev/null || ensure_packages haproxy:haproxy ||
  say "haproxy unavailable: the demo talks to one gateway directly"
ensure_mariadb

trap '"$FG_ROOT/deploy/local/down.sh" >/dev/null 2>&1 || true' EXIT
env_lines="$("$FG_ROOT/deploy/local/up.sh")"
eval "$(printf '%s\n' "$env_lines" | sed 's/^/export /')"
printf '%s\n' "$env_lines"

REPORT_DIR="${FG_REPORT_DIR:-$FG_ROOT/target/demo-report}"
cluster_flag=()
[ "$FLASHGATE_REDIS_CLUSTER" = true ] && cluster_flag=(--redis-cluster)
say "running the sale against $FLASHGATE_URL"
status=0
"$FLASHGATE_BIN/bench" run \
  --preset "${FG_PRESET:-users-5k}" \
  --target "$FLASHGATE_URL" \
  --redis "$FLASHGATE_REDIS" "${cluster_flag[@]}" --shards "$FLASHGATE_SHARDS" \
  --mysql "$FLASHGATE_MYSQL_URL" \
  --consumer-bin "$FLASHGATE_BIN/consumer" \
  --out "$REPORT_DIR" || status=$?
if [ $status -eq 0 ]; then
  "$FG_ROOT/deploy/local/lifecycle.sh" || status=$?
fi
if [ $status -eq 0 ] && [ "${FG_DRAW:-0}" = 1 ]; then
  say "bots scenario: bench draw --mode all --users 2000 --stock 100"
  "$FLASHGATE_BIN/bench" draw --mode all --users 2000 --stock 100 \
    --target "$FLASHGATE_URL" \
    --redis "$FLASHGATE_REDIS" "${cluster_flag[@]}" --shards "$FLASHGATE_SHARDS" \
    --mysql "$FLASHGATE_MYSQL_URL" \
    --consumer-bin "$FLASHGATE_BIN/consumer" \
    --out "$REPORT_DIR/draw" || status=$?
fi
if [ $status -eq 0 ]; then
  say "demo passed: every invariant holds (reports in $REPORT_DIR)"
else
  say "demo FAILED (exit $status): see the report above and logs in .stack/logs"
fi
exit $status
