//! flashgate's load generator and capacity-planning harness (library half; the `bench`
//! binary's subcommands in `src/cmd/` orchestrate these parts).
//!
//! Layout:
//! - [`servers`]: private `redis-server` / cluster processes, killed on drop.
//! - [`core`]: `bench core`, claims/s of the stock core in-process, single vs cluster.
//! - [`scenario`], [`presets`], [`cli`]: what a run offers (TOML, presets, flags).
//! - [`workload`]: request `k` of a run as a pure function (users, repeats, Zipf SKUs).
//! - [`http`], [`loadgen`], [`recorder`], [`outcome`]: one connection per worker, closed
//!   and open loop, per-outcome HdrHistograms, timeline.
//! - [`latency`]: HdrHistogram recording, coordinated-omission correction, percentiles.
//! - [`baseline`]: the bare hyper server every ratio is taken against.
//! - [`cpu`]: CPU time per answer of each process under test.
//! - [`invariants`], [`mysql`]: the checks against Redis and the ledger after a run.
//! - [`report`], [`markdown`], [`svg`]: JSON (stable fields), Markdown, SVG charts.
//! - [`token`]: the bearer tokens the gateways verify, minted once per user.

pub mod baseline;
pub mod cli;
pub mod core;
pub mod cpu;
pub mod external;
pub mod http;
pub mod invariants;
pub mod latency;
pub mod loadgen;
pub mod markdown;
pub mod mysql;
pub mod outcome;
pub mod presets;
pub mod recorder;
pub mod regress;
pub mod report;
pub mod scenario;
pub mod servers;
pub mod svg;
pub mod token;
pub mod workload;
