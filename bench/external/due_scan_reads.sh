#!/usr/bin/env bash
# Rows MariaDB reads for one payment-timeout scan (`ledger::releases::due`) with 20 000
# pending claims held and none due: the sum of the session's Handler_read_* counters over
# the scan (FLUSH STATUS before, SHOW SESSION STATUS after, one connection), for the join
# the scan replaced (before) and for the scan (after), in the same run on the same server.
# The counters are rows and index entries read, so the figures do not depend on load.
#
#   bench/external/due_scan_reads.sh     # MariaDB at FLASHGATE_TEST_MYSQL_URL, default
#                                        # mysql://root@127.0.0.1:3306 (creates a database)
#
# The measurement is the test `a_scan_reads_the_claims_due_not_the_claims_held` in
# ledger/tests/release_due.rs. Results: docs/BENCHMARKS.md, "Capacity from counts".
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo test -q -p ledger --test release_due a_scan_reads -- --nocapture 2>&1 | grep '^due scan' ||
  { echo "$0: the measurement failed (cargo test -p ledger --test release_due)" >&2; exit 1; }
