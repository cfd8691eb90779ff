//! The machine-readable report. Field names are part of the bench's contract (dashboards
//! and CI read them); `SCHEMA` changes when one is renamed or removed.
//!
//! | field | meaning |
//! | --- | --- |
//! | `schema` | version of this layout |
//! | `kind` | `run`, `baseline` or `sweep-step` |
//! | `scenario` | scenario name |
//! | `mode`, `connections`, `offered_rps` | how load was offered (`offered_rps`: scheduled rate in open loop, achieved in closed loop) |
//! | `requests` | answers received, warm-up included |
//! | `measured_s` | length of the measured window (after warm-up) |
//! | `throughput_rps` | answers/s in the measured window |
//! | `claims_per_s` | `claimed` answers/s in the measured window |
//! | `latency` | percentiles (µs) of every measured answer |
//! | `latency_by_outcome` | the same per outcome |
//! | `outcomes` | answers per outcome over the whole run |
//! | `errors` | answers that were not served (sheds, failures, timeouts) |
//! | `timeline` | per second: answers per outcome |
//! | `invariants` | verdict and checks (absent when not checked) |
//! | `baseline` | the bare-hyper figures and the ratios (absent without `--compare-baseline`) |
//! | `cpu` | per process: CPU seconds over the run and CPU µs per answer (absent when not measured) |
//! | `first_second`, `first_second_claimed` | percentiles (µs) of the requests sent in the first second, all and claimed (the opening rush) |
//! | `external` | the same load from an external client (wrk) on the same stack, with its CPU by process (absent without `--external`) |
//! | `h2load` | the same from h2load (`--external-client h2load`): one user's fixed request, so one home shard |

pub mod markdown;
pub mod svg;
pub mod verdict;

use std::collections::BTreeMap;

use loadgen::latency::Percentiles;
use loadgen::outcome::Outcome;
use loadgen::LoadResult;
use serde::{Deserialize, Serialize};

use crate::scenario::Mode;
use crate::stack::cpu::{total_us_per_answer, CpuUse};
use crate::stack::external::ExternalReport;
use verdict::InvariantReport;

pub const SCHEMA: u32 = 1;

/// One second of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub t_s: u64,
    pub outcomes: BTreeMap<String, u64>,
}

/// Baseline figures and the ratios of the run against them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineRatios {
    /// Which baseline server (`bench/src/stack/baseline.rs`): bare hyper unless named.
    #[serde(default = "bare_baseline")]
    pub server: String,
    pub baseline_rps: f64,
    pub baseline_p99_us: u64,
    /// run throughput / baseline throughput.
    pub throughput_ratio: f64,
    /// run p99 / baseline p99.
    pub p99_ratio: f64,
    /// CPU µs per answer summed over the accounted processes, run and baseline (0 when
    /// not measured). Their ratio is what an answer costs the machine against the bare
    /// server, independent of how busy the machine was.
    #[serde(default)]
    pub cpu_us_per_answer: f64,
    #[serde(default)]
    pub baseline_cpu_us_per_answer: f64,
}

impl BaselineRatios {
    pub fn of(run: &Report, base: &Report) -> Self {
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let server = base
            .cpu
            .iter()
            .find(|c| c.role == crate::stack::cpu::Role::Baseline)
            .map_or_else(bare_baseline, |c| c.process.clone());
        Self {
            server,
            baseline_rps: base.throughput_rps,
            baseline_p99_us: base.latency.p99_us,
            throughput_ratio: div(run.throughput_rps, base.throughput_rps),
            p99_ratio: div(run.latency.p99_us as f64, base.latency.p99_us as f64),
            // Comparable only when the run accounted for its servers too (a `--stack`
            // run); a run against outside gateways knows only the load generator's CPU.
            cpu_us_per_answer: if run.cpu.len() > 1 {
                total_us_per_answer(&run.cpu)
            } else {
                0.0
            },
            baseline_cpu_us_per_answer: total_us_per_answer(&base.cpu),
        }
    }
}

fn bare_baseline() -> String {
    crate::stack::baseline::BaselineKind::Bare
        .server_name()
        .to_owned()
}

/// The report of one load run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: u32,
    pub kind: String,
    pub scenario: String,
    pub mode: Mode,
    pub connections: usize,
    pub offered_rps: f64,
    pub requests: u64,
    pub measured_s: f64,
    pub throughput_rps: f64,
    pub claims_per_s: f64,
    pub latency: Percentiles,
    pub latency_by_outcome: BTreeMap<String, Percentiles>,
    pub outcomes: BTreeMap<String, u64>,
    pub errors: u64,
    pub timeline: Vec<TimelinePoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invariants: Option<InvariantReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineRatios>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu: Vec<CpuUse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_second: Option<Percentiles>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_second_claimed: Option<Percentiles>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2load: Option<ExternalReport>,
}

impl Report {
    pub fn from_load(kind: &str, scenario: &str, r: &LoadResult) -> Self {
        let rec = &r.rec;
        let window = rec.measured_window().as_secs_f64();
        let per_s = |n: u64| if window > 0.0 { n as f64 / window } else { 0.0 };
        let mut outcomes = BTreeMap::new();
        let mut by_outcome = BTreeMap::new();
        for o in Outcome::ALL {
            let n = rec.count(o);
            if n > 0 {
                outcomes.insert(o.name().to_owned(), n);
            }
            if let Some(h) = rec.hist(o).filter(|h| !h.is_empty()) {
                by_outcome.insert(o.name().to_owned(), Percentiles::of(h));
            }
        }
        let timeline = rec
            .timeline
            .iter()
            .enumerate()
            .map(|(t, row)| TimelinePoint {
                t_s: t as u64,
                outcomes: Outcome::ALL
                    .iter()
                    .filter(|o| row[o.index()] > 0)
                    .map(|o| (o.name().to_owned(), row[o.index()]))
                    .collect(),
            })
            .collect();
        Self {
            schema: SCHEMA,
            kind: kind.to_owned(),
            scenario: scenario.to_owned(),
            mode: r.spec.mode,
            connections: r.spec.connections,
            offered_rps: r.offered_rate,
            requests: rec.total(),
            measured_s: window,
            throughput_rps: r.throughput(),
            claims_per_s: per_s(rec.measured[Outcome::Claimed.index()]),
            latency: Percentiles::of(&rec.all),
            latency_by_outcome: by_outcome,
            outcomes,
            errors: Outcome::ALL
                .iter()
                .filter(|o| !o.is_served())
                .map(|o| rec.count(*o))
                .sum(),
            timeline,
            invariants: None,
            baseline: None,
            cpu: Vec::new(),
            first_second: rec.first_second.as_ref().map(Percentiles::of),
            first_second_claimed: rec.first_second_claimed.as_ref().map(Percentiles::of),
            external: None,
            h2load: None,
        }
    }

    /// Answers that were not served, as a share of all answers.
    pub fn error_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.errors as f64 / self.requests as f64
        }
    }
}
