#!/usr/bin/env bash
# Runs every test of flashgate. Installs (apt-get) and starts what the tests need:
# redis-server and redis-cli (tests start private servers and clusters on free ports),
# MariaDB on 127.0.0.1:3306, the external load generators bench drives (wrk, h2load), and
# faketime (a gateway whose clock is faked off, gateway/tests/it/clock_faked.rs).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$FG_ROOT"

ensure_rust
ensure_redis
ensure_mariadb
ensure_packages wrk:wrk h2load:nghttp2-client faketime:faketime valgrind:valgrind

say "deploy checks (promtool, haproxy, compose, dashboard)"
./deploy/check.sh
say "cargo fmt --check"
cargo fmt --all -- --check
say "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
say "cargo test --workspace"
# Cluster tests start several redis-server processes each; two test threads fit 2 cores.
cargo test --workspace --locked -- --test-threads="${FG_TEST_THREADS:-2}"
say "end to end: demo sale through haproxy, 2 gateways, consumer and ledger, then the bots scenario (debug build)"
FG_BUILD=debug FG_DRAW=1 ./deploy/local/demo.sh
./deploy/container/test.sh
