//! Driving the load: request `k` of a run as a pure function ([`workload`]), one HTTP/1.1
//! connection per worker ([`http`]), closed and open loops ([`loadgen`]), the bearer tokens
//! the gateways verify ([`token`]), and what each answer was ([`outcome`]), recorded into
//! per-outcome HdrHistograms after the run ([`recorder`], [`latency`]).

pub mod http;
pub mod latency;
pub mod loadgen;
pub mod outcome;
pub mod recorder;
pub mod token;
pub mod workload;
