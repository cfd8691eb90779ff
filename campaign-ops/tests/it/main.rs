//! One test binary for the crate (one link instead of one per file); each module is
//! what was a test file, so `cargo test -p campaign-ops --test it NAME::` runs one of them.
//! Tests reading the process-wide metrics registry are in `tests/metrics`.

// Shared with `tests/metrics`, which uses other parts of it.
mod admin;
mod campaign;
mod cluster;
mod collision;
#[allow(dead_code)]
mod common;
mod draw;
mod draw_replica;
mod draw_restore_review;
mod draw_review;
mod faults;
mod hold_names;
mod ledger;
mod lifecycle;
mod places;
mod poison_replay;
mod queue;
mod readonly;
mod rebuild;
mod rebuild_debt;
mod rebuild_flush;
mod rebuild_flush_review;
mod rebuild_late;
mod rebuild_lease;
mod rebuild_review;
mod reconcile;
mod reconcile_load;
mod reconcile_pages;
mod redis_cost;
mod release;
mod release_loss;
mod release_race;
mod replica;
mod replica_recovery;
mod review_commit_unknown;
mod startup;
mod throughput;
mod tls;
mod waves;
