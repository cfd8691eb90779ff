//! One test binary for the crate (one link instead of one per file); each module is
//! what was a test file, so `cargo test -p drills --test it NAME::` runs one of them.

mod cluster_sale;
mod durability;
mod hold_failover;
mod older_snapshot;
mod older_snapshot_cluster;
mod redis_faults;
mod redis_loss;
mod replay_final;
mod reroute_none;
mod sku_meta_cluster;
mod vouch_review;
