//! A model of the draw (campaign mode `draw`, docs/DESIGN.md "The draw"), beside the claim
//! model and apart from its state: per shard the draw scripts' keys (`scripts`, held to
//! `lua/draw_*.lua` by `tests/draw_conformance.rs`) on a master and a replica, the
//! ledger's draw tables with the entries streams' places, a claim side for the grants
//! (one atomic, per-user idempotent claim of one unit: the claim protocol itself is the
//! claim model's), the entries readers (`campaign-ops/src/draw/entries.rs`), the draw
//! service (`run.rs`: close, settle, record, mark, grant) and the restore loop
//! (`restore.rs`), with faults: a shard's loss, a failover to a replica that lacks the
//! stream's tail, a crash of any of them between steps, the settle's timeout.
//! `tests/draw.rs` checks it exhaustively and catches its mutants.

pub mod check;
pub mod config;
pub mod properties;
pub mod scripts;
pub mod system;

pub use config::{DrawConfig, DrawMutant, DrawOps};
pub use system::{Action, DrawSystem, State};
