//! An explicit-state model of flashgate's claim protocol, checked with `stateright`.
//!
//! The crate owns the abstract protocol: each Lua script of `lua/` as one atomic function
//! over an abstract shard keyspace (`keyspace`, `scripts`), the ledger as state (`ledger`),
//! gateways whose steps are `shard-router/src/protocol.rs`'s claim, hold, take walk and
//! settle, with their sold-out cache and replay filter (`gateway`), the offset consumer
//! (read after the ledger's offset, fence, conditional commit, trim) and its resolution of
//! expired holds (`consumer`), the operator's recovery steps (`operator`), the faults
//! (`faults`), the vouch fence against a Redis that comes back older (`vouch`), and the
//! invariants of docs/DESIGN.md as properties (`properties`). `system`
//! is the state they share (with `gateway_state`, the gateways' and requests' part of it)
//! and its actions; `transitions` ties them into one [`stateright::Model`]. It has no
//! I/O: `tests/conformance.rs` holds the script functions to the real scripts on a real
//! Redis, `tests/check.rs` runs the CI form of the check, and `tests/mutants.rs` proves
//! the checker fails on known bugs.

pub mod check;
pub mod config;
pub mod consumer;
pub mod draw;
pub mod faults;
pub mod gateway;
pub mod gateway_state;
pub mod keyspace;
pub mod ledger;
pub mod mutant;
pub mod operator;
pub mod properties;
pub mod scripts;
pub mod system;
pub mod trace;
mod transitions;
pub mod vouch;

pub use config::Config;
pub use mutant::Mutant;
pub use system::{Action, State, System};
