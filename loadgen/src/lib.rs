//! flashgate's HTTP load generator. This crate owns everything that offers load to a
//! claim API and records what came back: the request stream, the connections, the closed
//! and open loops, the bearer tokens, and the per-outcome latency histograms. It knows
//! nothing of scenario files, the processes under test, checks or reports; the `bench`
//! crate builds a [`LoadSpec`] and a [`workload::WorkloadSpec`] from its scenario and
//! reads the [`LoadResult`].
//!
//! Driving the load: request `k` of a run as a pure function ([`workload`]), one HTTP/1.1
//! connection per worker ([`http`]), closed and open loops ([`generator`]), the bearer tokens
//! the gateways verify ([`token`]), and what each answer was ([`outcome`]), recorded into
//! per-outcome HdrHistograms after the run ([`recorder`], [`latency`]).

pub mod generator;
pub mod http;
pub mod latency;
pub mod outcome;
pub mod recorder;
pub mod token;
pub mod workload;

pub use generator::{drive, LoadResult, LoadSpec, Mode};
