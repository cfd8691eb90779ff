//! Tests that read the process-wide metrics registry (`/metrics` of a consumer in this
//! process, or the recorder itself): they live in their own binary and run one at a time
//! ([`common::one_at_a_time`]), so no other consumer in the process moves the figures they
//! read (`db_up` among them). Everything else is in `tests/it`.

// The shared scaffolding of `tests/it`; this binary uses part of it.
#[allow(dead_code)]
#[path = "../it/common/mod.rs"]
mod common;

mod durability;
mod health;
