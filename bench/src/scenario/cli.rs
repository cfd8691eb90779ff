//! Flags shared by `run`, `baseline` and `sweep`: where the scenario comes from and the
//! per-field overrides (flags win over the file or preset).

use std::path::PathBuf;

use crate::scenario::presets;
use crate::scenario::{Mode, Scenario, ScenarioError, SkuSpec};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct ScenarioArgs {
    /// Scenario TOML file.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// A published scenario: users-5k, requests-50k, conn-500.
    #[arg(long, conflicts_with = "scenario")]
    pub preset: Option<String>,
    /// Shorten a preset to fit in CI.
    #[arg(long)]
    pub short: bool,
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    #[arg(long)]
    pub connections: Option<usize>,
    /// Open-loop rate, requests/s.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seconds after warm-up; 0 = bounded by --requests.
    #[arg(long)]
    pub duration: Option<f64>,
    #[arg(long)]
    pub warmup: Option<f64>,
    #[arg(long)]
    pub requests: Option<u64>,
    #[arg(long)]
    pub users: Option<u64>,
    #[arg(long)]
    pub limit: Option<u32>,
    #[arg(long)]
    pub qty: Option<u32>,
    #[arg(long)]
    pub repeat_ratio: Option<f64>,
    #[arg(long)]
    pub zipf: Option<f64>,
    /// `id:stock[:width]`, repeatable; replaces the scenario's SKUs.
    #[arg(long = "sku", value_parser = parse_sku)]
    pub skus: Vec<SkuSpec>,
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    #[arg(long)]
    pub seed: Option<u64>,
}

/// Parses `id:stock[:width]`.
pub fn parse_sku(s: &str) -> Result<SkuSpec, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |i: usize| -> Result<u64, String> {
        parts[i]
            .parse()
            .map_err(|_| format!("{s:?}: expected id:stock[:width]"))
    };
    match parts.len() {
        2 | 3 => Ok(SkuSpec {
            id: num(0)?,
            stock: num(1)?,
            width: if parts.len() == 3 {
                u16::try_from(num(2)?).map_err(|_| format!("{s:?}: width too large"))?
            } else {
                8
            },
        }),
        _ => Err(format!("{s:?}: expected id:stock[:width]")),
    }
}

impl ScenarioArgs {
    /// The scenario these flags describe, validated.
    pub fn scenario(&self) -> Result<Scenario, ScenarioError> {
        let mut s = match (&self.scenario, &self.preset) {
            (Some(p), _) => Scenario::from_file(p)?,
            (None, Some(name)) => {
                presets::preset(name, self.short).ok_or_else(|| ScenarioError::Invalid {
                    field: "--preset",
                    reason: format!("{name:?} is not one of {:?}", presets::NAMES),
                })?
            }
            (None, None) => Scenario::default(),
        };
        if let Some(v) = self.mode {
            s.load.mode = v;
        }
        if let Some(v) = self.connections {
            s.load.connections = v;
        }
        if let Some(v) = self.rate {
            s.load.rate = v;
        }
        if let Some(v) = self.duration {
            s.duration_s = v;
        }
        if let Some(v) = self.warmup {
            s.warmup_s = v;
        }
        if let Some(v) = self.requests {
            s.requests = v;
        }
        if let Some(v) = self.users {
            s.users = v;
        }
        if let Some(v) = self.limit {
            s.limit = v;
        }
        if let Some(v) = self.qty {
            s.qty = v;
        }
        if let Some(v) = self.repeat_ratio {
            s.repeat_ratio = v;
        }
        if let Some(v) = self.zipf {
            s.zipf_s = v;
        }
        if !self.skus.is_empty() {
            s.skus = self.skus.clone();
        }
        if let Some(v) = self.timeout_ms {
            s.load.timeout_ms = v;
        }
        if let Some(v) = self.seed {
            s.seed = v;
        }
        s.validate()?;
        Ok(s)
    }
}
