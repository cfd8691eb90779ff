#!/usr/bin/env bash
# MariaDB's user-space instructions for one payment-timeout scan with HELD pending claims
# (default 20 000) of one campaign held and none due: the join the scan replaced (before)
# and the statements of `ledger::releases::due` (after, ledger/src/releases/scan.rs; the
# same text here, sent by the mariadb client rather than prepared), K scans each, averaged.
# A private mariadbd on a fresh datadir runs under callgrind collecting only inside
# `dispatch_command` (the client's statements: no background threads, no idle cost); each
# variant is framed by `callgrind_control -z` / `-d`. `SELECT 1` is the floor of a round trip.
#
#   bench/external/due_scan_instructions.sh          # HELD=20000 K=5; ~3 min on 2 cores
#
# Rows read per scan: bench/external/due_scan_reads.sh. Results: docs/BENCHMARKS.md,
# "Capacity from counts".
set -euo pipefail
cd "$(dirname "$0")/../.."
HELD="${HELD:-20000}" K="${K:-5}" NOW=1700000000000
for t in valgrind callgrind_control mariadbd mariadb-install-db mariadb python3; do
  command -v "$t" >/dev/null || { echo "$0: needs $t" >&2; exit 2; }
done
work="$(mktemp -d /tmp/flashgate-due-scan.XXXXXX)"
STOP_WAIT_S=30
# shellcheck source=bench/external/procs.sh
source bench/external/procs.sh

MPORT="$(free_port)"
mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$work/db" \
  --auth-root-authentication-method=normal --skip-test-db >"$work/install-db.log" 2>&1
# As in ledger_counts.sh: no native AIO, a bounded buffer pool.
setsid nice -n 19 valgrind --tool=callgrind --toggle-collect='dispatch_command*' \
  --callgrind-out-file="$work/cg.%p" mariadbd --no-defaults --user="$(id -un)" \
  --datadir="$work/db" --port="$MPORT" --bind-address=127.0.0.1 --socket="$work/mysqld.sock" \
  --pid-file="$work/mysqld.pid" --innodb-use-native-aio=0 --innodb-buffer-pool-size=128M \
  --innodb-buffer-pool-size-max=128M --skip-log-bin >"$work/mariadbd.log" 2>&1 </dev/null &
MDB_PID=$!
groups+=("$MDB_PID")
sql() { mariadb --no-defaults -h127.0.0.1 -P"$MPORT" -uroot -N -B "$@"; }
wait_for "mariadbd under callgrind" 300 sql -e 'SELECT 1'
sql -e 'CREATE DATABASE flashgate'
for f in ledger/migrations/*.sql; do sql flashgate <"$f"; done
sql flashgate -e "INSERT INTO campaigns (sku, stock, width, per_user_limit, start_ms, end_ms,
  payment_timeout_s) VALUES (1, $HELD, 16, 1, 0, $((NOW * 2)), 600);
  INSERT INTO claims (claim_id, sku, user_id, user_seq, qty, shard, home, claimed_ms, batch_id)
  SELECT CONCAT(seq % 16, '-', seq), 1, CONCAT('u', seq), 1, 1, seq % 16, seq % 16,
  $NOW + seq, 1 FROM seq_1_to_$HELD; ANALYZE TABLE claims, campaigns;" >/dev/null

# Instructions per statement set: K times `$1` in one session, between a zero and a dump.
per_scan() {
  timeout 120 callgrind_control -z "$MDB_PID" >/dev/null 2>&1
  for _ in $(seq 1 "$K"); do echo "$1"; done | sql flashgate >/dev/null
  local total
  total="$(dump "$MDB_PID" "$2")" || exit 1
  echo $((total / K))
}
skip=" AND c.shard NOT IN (7) AND c.home NOT IN (7)"
before="SELECT c.claim_id, c.shard, c.home FROM claims c JOIN campaigns p ON p.sku = c.sku
  WHERE ((c.status = 'pending' AND c.claimed_ms + p.payment_timeout_s * 1000 <= $NOW)
  OR c.status = 'releasing')$skip LIMIT 500;"
after="BEGIN; SELECT c.claim_id, c.shard, c.home FROM claims c JOIN campaigns p
  ON p.sku = c.sku WHERE c.status = 'releasing'$skip LIMIT 500;
  SELECT sku, payment_timeout_s FROM campaigns ORDER BY sku;
  SELECT c.claim_id, c.shard, c.home FROM claims c FORCE INDEX (claims_status)
  WHERE c.status = 'pending' AND ((c.sku = 1 AND c.claimed_ms <= $((NOW - 600000))))$skip
  LIMIT 500; COMMIT;"
echo "mariadbd $(mariadbd --version | awk '{print $3}'), $HELD claims held, none due, K=$K"
echo "before (the join):      $(per_scan "$before" before) instructions per scan"
echo "after (releases::due):  $(per_scan "$after" after) instructions per scan"
echo "SELECT 1:               $(per_scan "SELECT 1;" floor) instructions per statement"
echo "callgrind dumps: $work" >&2
