//! Tests that read the process-wide metrics registry (`/metrics` of a gateway in this
//! process): they live in their own binary and run one at a time
//! ([`common::one_at_a_time`]), so no other gateway in the process moves the figures they
//! read. Everything else is in `tests/it`.

// The shared plumbing of `tests/it`; this binary uses part of it.
#[allow(dead_code)]
#[path = "../it/common/mod.rs"]
mod common;

mod binary;
mod claims;
mod clock;
mod events;
mod log_backpressure;
mod observability;
