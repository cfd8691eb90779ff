//! flashgate's load generator and capacity-planning harness (library half; the `bench`
//! binary's subcommands in `src/cmd/` orchestrate these parts).
//!
//! The load itself (workload, connections, closed and open loops, tokens, outcome
//! recording) is the `loadgen` crate; [`scenario`] turns a scenario into its settings.
//!
//! Layout (one folder per part):
//! - [`scenario`]: what a run offers (TOML scenarios, presets, flags).
//! - [`stack`]: the processes under test, the baseline server, the external client, CPU.
//! - [`checks`]: invariants against Redis and the ledger, regression against a reference.
//! - [`report`]: JSON (stable fields), Markdown, SVG charts.
//! - [`capacity`]: the sweep's knee and capacity-plan maths (pure, unit-tested).
//! - [`stock_core`]: `bench core`, claims/s of the stock core in-process, single vs cluster.

pub mod capacity;
pub mod checks;
pub mod report;
pub mod scenario;
pub mod stack;
pub mod stock_core;
