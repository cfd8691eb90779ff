//! A flash-sale scenario: what is for sale, who asks, how often and how hard. Read from a
//! TOML file and/or flags (flags win), or taken from a preset (see `presets.rs`).
//!
//! ```toml
//! name = "hot-drop"
//! users = 5000
//! limit = 1
//! repeat_ratio = 0.01
//! zipf_s = 1.1
//! duration_s = 10
//! warmup_s = 1
//! [load]
//! mode = "closed"        # or "open" with `rate`
//! connections = 500
//! [[skus]]
//! id = 1
//! stock = 100
//! width = 8
//! ```

pub mod cli;
pub mod presets;

use std::time::Duration;

use loadgen::http::Target;
use loadgen::workload::{Workload, WorkloadSpec};
use loadgen::LoadSpec;
use serde::{Deserialize, Serialize};

/// How load is offered (the load generator's; a scenario names it in `[load]`).
pub use loadgen::Mode;

/// One SKU on sale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkuSpec {
    pub id: u64,
    pub stock: u64,
    #[serde(default = "default_width")]
    pub width: u16,
}

fn default_width() -> u16 {
    8
}

/// Load settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Load {
    pub mode: Mode,
    pub connections: usize,
    /// Requests per second (open loop only).
    pub rate: f64,
    /// Per-request timeout in ms.
    pub timeout_ms: u64,
}

impl Default for Load {
    fn default() -> Self {
        Self {
            mode: Mode::Closed,
            connections: 64,
            rate: 1000.0,
            timeout_ms: 5_000,
        }
    }
}

/// The whole scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    pub name: String,
    pub skus: Vec<SkuSpec>,
    /// Distinct users; request k of the run is sent by user `k mod users`.
    pub users: u64,
    /// Per-user limit of every SKU.
    pub limit: u32,
    /// Units per claim.
    pub qty: u32,
    /// Share of requests that resend an earlier request unchanged (same user and
    /// request id): a client retry, which must be answered as a replay.
    pub repeat_ratio: f64,
    /// Zipf exponent of SKU popularity (0 = uniform; SKU order in the list is the rank).
    pub zipf_s: f64,
    /// Length of the run in seconds (after warm-up); 0 = until `requests` are sent.
    pub duration_s: f64,
    /// Stop after this many requests (0 = no cap; then `duration_s` must be set).
    pub requests: u64,
    /// Seconds at the start whose answers are counted for invariants but left out of
    /// latency and throughput.
    pub warmup_s: f64,
    /// Seed of the request generator, so two runs send the same requests.
    pub seed: u64,
    pub load: Load,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            name: "custom".into(),
            skus: vec![SkuSpec {
                id: 1,
                stock: 10_000,
                width: 8,
            }],
            users: 100_000,
            limit: 1,
            qty: 1,
            repeat_ratio: 0.0,
            zipf_s: 0.0,
            duration_s: 10.0,
            requests: 0,
            warmup_s: 1.0,
            seed: 42,
            load: Load::default(),
        }
    }
}

/// A scenario that cannot run, with the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("scenario file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("scenario file {path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("scenario field {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        field,
        reason: reason.into(),
    }
}

impl Scenario {
    /// Parses TOML text (`path` only names the source in errors) and validates it.
    pub fn from_toml(text: &str, path: &str) -> Result<Self, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: path.to_owned(),
            source: Box::new(e),
        })?;
        s.validate()?;
        Ok(s)
    }

    pub fn from_file(path: &std::path::Path) -> Result<Self, ScenarioError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: p.clone(),
            source,
        })?;
        Self::from_toml(&text, &p)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.skus.is_empty() {
            return Err(invalid("skus", "at least one SKU"));
        }
        let mut ids: Vec<u64> = self.skus.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != self.skus.len() {
            return Err(invalid("skus", "SKU ids must be distinct"));
        }
        if let Some(s) = self.skus.iter().find(|s| s.width == 0) {
            return Err(invalid("skus.width", format!("SKU {}: width 0", s.id)));
        }
        if self.users == 0 {
            return Err(invalid("users", "at least 1"));
        }
        if self.limit == 0 || self.qty == 0 || self.qty > self.limit {
            return Err(invalid("qty", "need 1 <= qty <= limit"));
        }
        if !(0.0..1.0).contains(&self.repeat_ratio) {
            return Err(invalid("repeat_ratio", "must be in [0, 1)"));
        }
        if !(self.zipf_s >= 0.0 && self.zipf_s.is_finite()) {
            return Err(invalid("zipf_s", "must be >= 0"));
        }
        if self.duration_s <= 0.0 && self.requests == 0 {
            return Err(invalid("duration_s", "set duration_s or requests"));
        }
        if self.warmup_s < 0.0 || self.duration_s < 0.0 {
            return Err(invalid("warmup_s", "must be >= 0"));
        }
        if self.load.connections == 0 {
            return Err(invalid("load.connections", "at least 1"));
        }
        if self.load.mode == Mode::Open && !(self.load.rate > 0.0 && self.load.rate.is_finite()) {
            return Err(invalid("load.rate", "open loop needs a rate > 0"));
        }
        if self.load.timeout_ms == 0 {
            return Err(invalid("load.timeout_ms", "must be > 0"));
        }
        Ok(())
    }

    /// Total units on sale.
    pub fn total_stock(&self) -> u64 {
        self.skus.iter().map(|s| s.stock).sum()
    }

    /// The load generator's settings for this scenario against `targets`; `tag` prefixes
    /// users and request ids.
    pub fn load_spec(&self, targets: Vec<Target>, tag: String) -> LoadSpec {
        // Warm-up only makes sense for time-bound runs; a request-bound run (a fixed
        // sale of N requests) measures every request.
        let warmup = if self.duration_s > 0.0 {
            Duration::from_secs_f64(self.warmup_s)
        } else {
            Duration::ZERO
        };
        LoadSpec {
            targets,
            mode: self.load.mode,
            connections: self.load.connections,
            rate: self.load.rate,
            duration: Duration::from_secs_f64(self.duration_s.max(0.0)),
            warmup,
            max_requests: self.requests,
            timeout: Duration::from_millis(self.load.timeout_ms),
            tag,
            progress: true,
            tokens: None,
        }
    }

    /// The request generator of this scenario.
    pub fn workload(&self) -> Workload {
        Workload::new(&WorkloadSpec {
            skus: self.skus.iter().map(|k| k.id).collect(),
            users: self.users,
            qty: self.qty,
            repeat_ratio: self.repeat_ratio,
            zipf_s: self.zipf_s,
            seed: self.seed,
        })
    }
}
