#!/usr/bin/env bash
# Starts a local flashgate stack in the background and prints where everything is, as
# KEY=value lines (export them with `eval "$(./deploy/local/up.sh | sed 's/^/export /')"`):
#   private redis-server (or a 3-master cluster with FG_CLUSTER=1), MariaDB (the machine's,
#   database flashgate_local, recreated empty at each start), the consumer, two gateways,
#   and haproxy in front when it is installed. Idempotent: a stack that is already up is
#   reported, not started twice.
# Settings (environment): FG_CLUSTER=0|1, FG_SHARDS (16), FG_DURABILITY (none|replica),
#   FG_GATEWAY_ARGS (extra gateway flags, e.g. for ablations), FG_BUILD=release|debug,
#   FG_LB_CONN_RATE (haproxy's per-address connection rate, lifted by default),
#   FG_REDIS_MAXMEMORY (512mb; policy noeviction).
# Clients authenticate with HS256 bearer tokens signed with FLASHGATE_TOKEN_SECRET_FILE
# (`bench run` reads that variable and mints them).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$FG_ROOT"

STACK="$FG_ROOT/.stack"
FG_CLUSTER="${FG_CLUSTER:-0}"
FG_SHARDS="${FG_SHARDS:-16}"
FG_BUILD="${FG_BUILD:-release}"
LB_PORT=8080 GW1=8081 GW2=8082 GW1_ADMIN=9081 GW2_ADMIN=9082 CONSUMER_ADMIN=9091
REDIS_BASE=16379

print_env() { cat "$STACK/env"; }

if [ -f "$STACK/env" ] && [ -f "$STACK/pids" ] && xargs -r kill -0 <"$STACK/pids" 2>/dev/null; then
  say "stack already up"
  print_env
  exit 0
fi
"$(dirname "$0")/down.sh" >/dev/null 2>&1 || true
mkdir -p "$STACK/logs"
: >"$STACK/pids"

ensure_rust
ensure_packages redis-server:redis-server redis-cli:redis-tools
ensure_mariadb
say "building ($FG_BUILD)"
if [ "$FG_BUILD" = release ]; then
  cargo build --release -q -p gateway -p campaign-ops -p bench
  BIN="${CARGO_TARGET_DIR:-$FG_ROOT/target}/release"
else
  cargo build -q -p gateway -p campaign-ops -p bench
  BIN="${CARGO_TARGET_DIR:-$FG_ROOT/target}/debug"
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in $LB_PORT $GW1 $GW2 $GW1_ADMIN $GW2_ADMIN $CONSUMER_ADMIN; do
  port_free "$p" || die "port $p is in use; stop what holds it (or ./deploy/local/down.sh)"
done

start_redis() { # port [extra args]
  local port=$1; shift
  mkdir -p "$STACK/redis-$port"
  # noeviction: at maxmemory writes fail; stock keys are never evicted. Small listpacks:
  # docs/OPERATIONS.md "Bounds" (a SKU's first users would cost 2.3x Redis CPU per claim).
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --maxmemory "${FG_REDIS_MAXMEMORY:-512mb}" --maxmemory-policy noeviction \
    --hash-max-listpack-entries 32 \
    --dir "$STACK/redis-$port" --logfile "$STACK/logs/redis-$port.log" --daemonize no "$@" \
    </dev/null >/dev/null 2>&1 &
  echo $! >>"$STACK/pids"
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "redis-server on $port did not start (see $STACK/logs/redis-$port.log)"
}

if [ "$FG_CLUSTER" = 1 ]; then
  nodes=()
  for i in 0 1 2; do
    port=$((REDIS_BASE + i))
    # Partial coverage: while one master fails over, the others keep serving their shards.
    start_redis "$port" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
      --cluster-require-full-coverage no
    nodes+=("127.0.0.1:$port")
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-yes >"$STACK/logs/cluster-create.log" 2>&1 ||
    die "redis-cli --cluster create failed (see $STACK/logs/cluster-create.log)"
  for _ in $(seq 100); do
    redis-cli -p "$REDIS_BASE" cluster info | grep -q cluster_state:ok && break; sleep 0.2
  done
  REDIS="$(printf 'redis://%s,' "${nodes[@]}")"; REDIS="${REDIS%,}"
  REDIS_FLAGS=(--redis "$REDIS" --redis-cluster)
else
  start_redis "$REDIS_BASE"
  REDIS="redis://127.0.0.1:$REDIS_BASE"
  REDIS_FLAGS=(--redis "$REDIS")
fi

MYSQL_URL="$FLASHGATE_TEST_MYSQL_URL/flashgate_local"
# A fresh ledger for a fresh Redis: the private Redis keeps nothing across runs, and an old
# ledger's unpaid claims would be released into the new slices.
mariadb -h127.0.0.1 -u"$FG_MYSQL_USER" -p"$FG_MYSQL_PASSWORD" \
  -e 'DROP DATABASE IF EXISTS flashgate_local; CREATE DATABASE flashgate_local'
consumer_durability=()
[ "${FG_DURABILITY:-none}" = replica ] && consumer_durability=(--replica-wait always --replica-wait-ms 50)
ADMIN_TOKEN="local-admin-token-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"

# The token goes in the environment, not argv, where `ps` would show it to every user.
FLASHGATE_ADMIN_TOKEN="$ADMIN_TOKEN" \
  "$BIN/consumer" "${REDIS_FLAGS[@]}" --shards "$FG_SHARDS" --mysql "$MYSQL_URL" \
  run --admin-addr "127.0.0.1:$CONSUMER_ADMIN" "${consumer_durability[@]}" \
  </dev/null >"$STACK/logs/consumer.log" 2>&1 &
echo $! >>"$STACK/pids"

# Identity: gateways verify HS256 bearer tokens signed with this stack's own secret (the
# demo's load generator mints them from the same file); haproxy on 127.0.0.1 is the only
# trusted proxy. The load all comes from one address, so the per-client limits (gateway
# --client-rate, haproxy FG_LB_CONN_RATE) are lifted unless the caller sets them.
TOKEN_SECRET_FILE="$STACK/token-secret"
(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$TOKEN_SECRET_FILE")
# Queue campaigns: every gateway signs queue tokens and shuffles the pre-queue with this.
QUEUE_SECRET_FILE="$STACK/queue-secret"
(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$QUEUE_SECRET_FILE")
# shellcheck disable=SC2206
extra=(${FG_GATEWAY_ARGS:-})
case " ${FG_GATEWAY_ARGS:-} " in *" --client-rate"*) ;; *) extra+=(--client-rate 0) ;; esac
for gw in "$GW1:$GW1_ADMIN" "$GW2:$GW2_ADMIN"; do
  "$BIN/gateway" "${REDIS_FLAGS[@]}" --shards "$FG_SHARDS" \
    --durability "${FG_DURABILITY:-none}" \
    --token-secret-file "$TOKEN_SECRET_FILE" --queue-secret-file "$QUEUE_SECRET_FILE" \
    --trusted-proxies 127.0.0.1/32 \
    --listen "127.0.0.1:${gw%%:*}" --admin-listen "127.0.0.1:${gw##*:}" "${extra[@]}" \
    </dev/null >"$STACK/logs/gateway-${gw%%:*}.log" 2>&1 &
  echo $! >>"$STACK/pids"
done

wait_http() { # url what
  for _ in $(seq 150); do
    (exec 3<>"/dev/tcp/127.0.0.1/${1##*:}") 2>/dev/null && return 0; sleep 0.1
  done
  die "$2 did not come up (see $STACK/logs)"
}
wait_http "127.0.0.1:$GW1" "gateway 1"
wait_http "127.0.0.1:$GW2" "gateway 2"
wait_http "127.0.0.1:$CONSUMER_ADMIN" "consumer"

URL="http://127.0.0.1:$GW1"
if command -v haproxy >/dev/null; then
  FG_LB_BIND="127.0.0.1:$LB_PORT" FG_GATEWAY_1="127.0.0.1:$GW1" FG_GATEWAY_2="127.0.0.1:$GW2" \
    FG_LB_ADMIN="127.0.0.1:8404" FG_LB_CONN_RATE="${FG_LB_CONN_RATE:-1000000}" \
    haproxy -f "$FG_ROOT/deploy/haproxy/haproxy.cfg" </dev/null >"$STACK/logs/haproxy.log" 2>&1 &
  echo $! >>"$STACK/pids"
  wait_http "127.0.0.1:$LB_PORT" "haproxy"
  URL="http://127.0.0.1:$LB_PORT"
else
  say "haproxy not installed: clients use gateway 1 directly (apt-get install haproxy for the balancer)"
fi

cat >"$STACK/env" <<ENV
FLASHGATE_URL=$URL
FLASHGATE_GATEWAYS=http://127.0.0.1:$GW1,http://127.0.0.1:$GW2
FLASHGATE_GATEWAY_ADMIN=http://127.0.0.1:$GW1_ADMIN,http://127.0.0.1:$GW2_ADMIN
FLASHGATE_CONSUMER_ADMIN=http://127.0.0.1:$CONSUMER_ADMIN
FLASHGATE_ADMIN_TOKEN=$ADMIN_TOKEN
FLASHGATE_REDIS=$REDIS
FLASHGATE_REDIS_CLUSTER=$([ "$FG_CLUSTER" = 1 ] && echo true || echo false)
FLASHGATE_SHARDS=$FG_SHARDS
FLASHGATE_MYSQL_URL=$MYSQL_URL
FLASHGATE_BIN=$BIN
FLASHGATE_TOKEN_SECRET_FILE=$TOKEN_SECRET_FILE
FLASHGATE_QUEUE_SECRET_FILE=$QUEUE_SECRET_FILE
FLASHGATE_CONSUMER_BIN=$BIN/consumer
ENV
say "stack up (logs in $STACK/logs)"
print_env
