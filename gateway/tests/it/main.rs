//! One test binary for the crate (one link instead of one per file); each module is
//! what was a test file, so `cargo test -p gateway --test it NAME::` runs one of them.
//! Tests reading the process-wide metrics registry are in `tests/metrics`.

mod clock_faked;
mod closed_replay;
// Shared with `tests/metrics`, which uses the parts reading `/metrics`.
#[allow(dead_code)]
mod common;
mod draw;
mod drill_gateway_kill;
mod drill_master_failover;
mod drill_pubsub;
mod drill_sigstop;
mod fuzz_input;
mod hangup;
mod hostile;
mod identity;
mod input;
mod lifecycle;
mod queue;
mod redis_runtime;
mod replay;
mod replay_filter;
mod replay_filter_moving;
mod replay_reroute;
mod replica_count;
mod startup;
mod tls;
