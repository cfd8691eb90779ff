//! One test binary for the crate (one link instead of one per file); each module is
//! what was a test file, so `cargo test -p shard-router --test it NAME::` runs one of them.

mod common;
mod draw;
mod hold_names;
mod queue;
mod record_fuzz;
mod records;
mod replay_read;
mod replica_ack;
mod scenarios;
mod stock_cluster;
mod stock_single;
mod vouch_review;
mod walk;
