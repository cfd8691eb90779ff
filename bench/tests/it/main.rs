//! One test binary for the crate (one link instead of one per file); each module is
//! what was a test file, so `cargo test -p bench --test it NAME::` runs one of them.

mod baseline;
mod common;
mod external;
mod interrupt;
mod redis_instructions;
mod report;
mod scenario;
mod stock_core;
