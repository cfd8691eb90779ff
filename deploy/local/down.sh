#!/usr/bin/env bash
# Stops everything ./deploy/local/up.sh started (gently, then by force) and removes its
# state. Idempotent: with nothing running it says so and exits 0.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
STACK="$FG_ROOT/.stack"
if [ ! -f "$STACK/pids" ]; then
  say "nothing to stop"
  exit 0
fi
# Reverse order: balancer and gateways first, so no claim arrives at a stopped consumer.
pids=$(tac "$STACK/pids")
for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
for _ in $(seq 100); do
  alive=0
  for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && break
  sleep 0.1
done
for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
# Logs stay for a look after the fact; the next up.sh starts them afresh.
rm -rf "$STACK/pids" "$STACK/env" "$STACK"/redis-*
say "stack stopped"
