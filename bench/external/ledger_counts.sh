#!/usr/bin/env bash
# The ledger's side of a claim, counted instead of timed: user-space instructions per claim
# written to the ledger for the consumer process and for the MariaDB server process
# (callgrind, whole process), and the consumer's system calls per claim (`strace -c -f -p`).
#
#   bench/external/ledger_counts.sh
#   N=10000 bench/external/ledger_counts.sh
#
# Private servers on free ports: a redis-server (not under valgrind) and a mariadbd on a
# fresh datadir (mariadb-install-db) under callgrind for the whole run; the release gateway
# (not under valgrind) in front of the Redis. Two passes, each on its own SKU:
#   1. callgrind  the consumer under callgrind: consumer and MariaDB instructions per claim
#   2. strace     the consumer as it is: its system calls per claim (and MariaDB's
#                 instructions per claim a second time)
# Each pass creates a campaign of N units (default 20 000, width 16, limit 1) and preheats it
# with the consumer's own `campaign` and `preheat`, starts `consumer run` (default batch
# settings) and lets it take its shards' leases, then stops it (SIGSTOP) while `bench run`
# sells the N units through the gateway (N distinct users, one request each, tokens), so
# the N claim records wait in the shards' streams `{T}:claims` as a backlog. The window
# opens as the consumer resumes (SIGCONT) and closes when every stream's committed place in
# the ledger (`stream_offsets.last_id`) is the stream's last id; then the ledger must hold N
# claims of the SKU. The consumer drains the backlog in full batches, the capacity case.
#
# Windows are framed by `callgrind_control -z` / `-d`. The idle processes' instructions per
# second (an IDLE_S-second window, default 10, with the consumer running on empty streams
# and the same polling: the consumer's heartbeats and lease renewals, MariaDB's background
# threads and the poll's small query) times each window's length are taken off, so what is
# left is per claim. The consumer is zeroed just before its SIGSTOP (the seconds it stands
# stopped count no instructions and are left out of its window's length), MariaDB just
# before the SIGCONT. The consumer runs with `--lease-ms` LEASE_MS (default 60 000) so that
# it keeps its leases across the stop; a lease renewal is idle cost. Its rounds that write
# no claims are moved out of the windows (one hour): reconciliation
# (`--reconcile-interval-ms`, default a minute; its cost grows with the claims already in
# the ledger, so left on it would charge the second pass for the first pass's claims) and
# the payment-timeout scan (`--release-interval-ms`, default 5 s; ledger/src/releases/scan.rs,
# its own counts in bench/external/due_scan_reads.sh). RELEASE_MS=5000 puts the default back.
#
# Needs a release build (`cargo build --release -p gateway -p campaign-ops -p bench`;
# BIN_DIR, default $CARGO_TARGET_DIR/release or target/release), redis-server, mariadbd,
# mariadb-install-db, mariadb (client), strace, redis-cli, curl. Installs valgrind when it
# is missing. Every wait is bounded and every process started here is stopped on exit.
# Logs, strace summaries and callgrind dumps stay in the printed directory
# (`callgrind_annotate --inclusive=yes <dump>` shows where the instructions go).
#
# Results: docs/BENCHMARKS.md, "Capacity from counts".
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN_DIR="${BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}"
N="${N:-20000}"
IDLE_S="${IDLE_S:-10}"
LEASE_MS="${LEASE_MS:-60000}"
POLL_S="${POLL_S:-1}"
RELEASE_MS="${RELEASE_MS:-3600000}"
LIMIT_S="${LIMIT_S:-900}" # longest wait for one drain
if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null; then
  echo "installing valgrind ..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y valgrind >/dev/null
fi
for t in strace redis-server redis-cli mariadbd mariadb-install-db mariadb curl python3; do
  command -v "$t" >/dev/null || { echo "$0: needs $t" >&2; exit 2; }
done
for b in gateway consumer bench; do
  [ -x "$BIN_DIR/$b" ] || { echo "$0: no $BIN_DIR/$b (cargo build --release -p gateway -p campaign-ops -p bench)" >&2; exit 2; }
done
BIN_DIR="$(realpath "$BIN_DIR")"
work="$(mktemp -d /tmp/flashgate-ledger-counts.XXXXXX)"
NICE=(nice -n 19)

# Process groups, free ports and bounded waits; the consumer and MariaDB get 30 s to stop.
STOP_WAIT_S=30
# shellcheck source=bench/external/procs.sh
source bench/external/procs.sh
now() { date +%s.%N; }
calc() { python3 -c "print($1)"; }

zero() { timeout 120 callgrind_control -z "$1" >/dev/null 2>&1; }

# Redis, and MariaDB under callgrind on a fresh datadir.
RPORT="$(free_port)" MPORT="$(free_port)"
setsid "${NICE[@]}" redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
  >"$work/redis.log" 2>&1 </dev/null &
groups+=("$!")
wait_for redis-server 20 redis-cli -p "$RPORT" ping
mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$work/db" \
  --auth-root-authentication-method=normal --skip-test-db >"$work/install-db.log" 2>&1
# No native AIO (valgrind knows no io_uring); the buffer pool's reservation bounded, as
# valgrind cannot map the default one.
setsid "${NICE[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" \
  mariadbd --no-defaults --user="$(id -un)" --datadir="$work/db" --port="$MPORT" \
  --bind-address=127.0.0.1 --socket="$work/mysqld.sock" --pid-file="$work/mysqld.pid" \
  --innodb-use-native-aio=0 --innodb-buffer-pool-size=128M \
  --innodb-buffer-pool-size-max=128M --skip-log-bin >"$work/mariadbd.log" 2>&1 </dev/null &
MDB_PID=$!
groups+=("$MDB_PID")
sql() { mariadb --no-defaults -h127.0.0.1 -P"$MPORT" -uroot -N -B "$@"; }
wait_for "mariadbd under callgrind" 300 sql -e 'SELECT 1'
sql -e 'CREATE DATABASE flashgate'
MYSQL="mysql://root@127.0.0.1:$MPORT/flashgate"
COMMON=(--redis "redis://127.0.0.1:$RPORT" --mysql "$MYSQL")

head -c 32 /dev/urandom | base64 >"$work/token.secret"
head -c 32 /dev/urandom | base64 >"$work/queue.secret"
GPORT="$(free_port)" GAPORT="$(free_port)"
setsid "${NICE[@]}" "$BIN_DIR/gateway" --redis "redis://127.0.0.1:$RPORT" \
  --listen "127.0.0.1:$GPORT" --admin-listen "127.0.0.1:$GAPORT" --drain-delay-ms 0 \
  --token-secret-file "$work/token.secret" --queue-secret-file "$work/queue.secret" \
  --client-rate 0 --user-rate 0 >"$work/gateway.log" 2>&1 </dev/null &
groups+=("$!")
wait_for gateway 30 curl -sf "http://127.0.0.1:$GPORT/readyz"

# Done when every stream's committed place is its last id (one small query, also made in
# the idle window, so its cost is taken off with the idle rate).
drained() {
  local stream last
  while read -r stream last; do
    [ "$(redis-cli -p "$RPORT" XINFO STREAM "$stream" | sed -n '/^last-generated-id$/{n;p}')" = "$last" ] || return 1
  done < <(sql -e 'SELECT stream, last_id FROM flashgate.stream_offsets')
}
poll_for() {
  local until="$1"
  while python3 -c "import sys,time; sys.exit(time.time() >= $until)"; do
    drained || true
    sleep "$POLL_S"
  done
}

leased() { [ "$(sql -e 'SELECT COUNT(*) FROM flashgate.stream_offsets WHERE owner IS NOT NULL')" -ge 16 ]; }

results="$work/results.tsv"
: >"$results"
record() { printf '%s\t%s\n' "$1" "$2" | tee -a "$results" >&2; }

# A pass's figures from its window (one_pass's locals, seen through bash's dynamic scope).
tally() {
  local rows batches maxb
  rows="$(sql -e "SELECT COUNT(*) FROM flashgate.claims WHERE sku = $sku")"
  batches="$(sql -e "SELECT COUNT(DISTINCT batch_id) FROM flashgate.claims WHERE sku = $sku")"
  maxb="$(sql -e "SELECT MAX(c) FROM (SELECT COUNT(*) c FROM flashgate.claims WHERE sku = $sku GROUP BY batch_id) b")"
  [ "$rows" -eq "$N" ] || { echo "$0: the ledger holds $rows claims of SKU $sku, not $N ($work)" >&2; return 1; }
  record "$how.claims" "$rows"
  record "$how.batches" "$batches (mean $(calc "round($rows / $batches, 1)"), largest $maxb)"
  record "$how.drain_s" "$(calc "round($td - $tc, 1)")"
  record "$how.mariadb.per_claim" "$(calc "round(($cm - $idle_m * ($td - $tc)) / $rows)")"
  if [ "$how" = callgrind ]; then
    # Running seconds: zero to stop, resume to the end.
    record "$how.consumer.per_claim" "$(calc "round(($cc - $idle_c * (($ts - $tz) + ($td - $tc))) / $rows)")"
  else
    local calls
    calls="$(awk '$NF == "total" {print $4}' "$work/$how.strace")"
    record "$how.consumer.syscalls_per_claim" "$(calc "round($calls / $rows, 3)")"
  fi
}

one_pass() {
  local how="$1" sku="$2" cpid apid t0 t1 tz ts tc td spid
  echo "pass $how: campaign of $N units on SKU $sku ..." >&2
  local nowms; nowms="$(date +%s%3N)"
  "$BIN_DIR/consumer" "${COMMON[@]}" campaign --sku "$sku" --stock "$N" --width 16 --limit 1 \
    --start-ms $((nowms - 60000)) --end-ms $((nowms + 86400000)) >"$work/$how.campaign" 2>&1
  "$BIN_DIR/consumer" "${COMMON[@]}" preheat "$sku" >"$work/$how.preheat" 2>&1
  apid="$(free_port)"
  local run=("$BIN_DIR/consumer" "${COMMON[@]}" run --admin-addr "127.0.0.1:$apid" \
    --lease-ms "$LEASE_MS" --reconcile-interval-ms 3600000 --release-interval-ms "$RELEASE_MS")
  if [ "$how" = callgrind ]; then
    run=(valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" "${run[@]}")
  fi
  setsid "${NICE[@]}" "${run[@]}" >"$work/$how.consumer.log" 2>&1 </dev/null &
  cpid=$!
  groups+=("$cpid")
  wait_for consumer 300 curl -sf "http://127.0.0.1:$apid/healthz"
  # Every shard leased (a row per stream with an owner).
  wait_for "consumer leases" 300 leased
  sleep 3
  echo "pass $how: idle window (${IDLE_S}s) ..." >&2
  [ "$how" = callgrind ] && zero "$cpid"
  zero "$MDB_PID"
  t0="$(now)"
  poll_for "$(calc "$t0 + $IDLE_S")"
  t1="$(now)"
  local idle_m idle_c=0
  idle_m="$(calc "$(dump "$MDB_PID" "$how-mariadb-idle") / ($t1 - $t0)")"
  [ "$how" = callgrind ] && idle_c="$(calc "$(dump "$cpid" "$how-consumer-idle") / ($t1 - $t0)")"
  record "$how.mariadb.idle_per_s" "$idle_m"
  [ "$how" = callgrind ] && record "$how.consumer.idle_per_s" "$idle_c"

  echo "pass $how: consumer stopped, selling $N units through the gateway ..." >&2
  [ "$how" = callgrind ] && zero "$cpid"
  tz="$(now)"
  kill -STOP "$cpid"
  ts="$(now)"
  timeout -k 5 600 "${NICE[@]}" "$BIN_DIR/bench" run --quiet --no-preheat \
    --target "http://127.0.0.1:$GPORT" --redis "redis://127.0.0.1:$RPORT" \
    --token-secret-file "$work/token.secret" --sku "$sku:$N:16" --users "$N" --requests "$N" \
    --duration 0 --warmup 0 --limit 1 --repeat-ratio 0 --connections 16 \
    >"$work/$how.bench" 2>&1 || echo "warning: bench run exited non-zero ($work/$how.bench)" >&2
  if [ "$how" = strace ]; then
    "${NICE[@]}" strace -c -f -q -p "$cpid" -o "$work/$how.strace" 2>"$work/$how.strace.err" &
    spid=$!
    sleep 2
  fi
  echo "pass $how: draining ..." >&2
  zero "$MDB_PID"
  tc="$(now)"
  kill -CONT "$cpid"
  local deadline; deadline="$(calc "$tc + $LIMIT_S")"
  until drained; do
    python3 -c "import sys,time; sys.exit(time.time() < $deadline)" && { echo "$0: no drain in ${LIMIT_S}s ($work)" >&2; return 1; }
    sleep "$POLL_S"
  done
  td="$(now)"
  local cm cc=0
  cm="$(dump "$MDB_PID" "$how-mariadb-drain")"
  [ "$how" = callgrind ] && cc="$(dump "$cpid" "$how-consumer-drain")"
  if [ "$how" = strace ]; then
    kill -INT "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
  fi
  tally
  stop "$cpid"
}

one_pass callgrind 1
one_pass strace 2
echo "mariadbd $(mariadbd --version | awk '{print $3}'), redis $(redis-server --version | awk '{print $3}'), N=$N" 
column -t -s $'\t' "$results"
echo "logs, strace summary, callgrind dumps: $work" >&2
