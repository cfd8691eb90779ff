//! Command-line interface of the consumer binary: `run` (the service) and the campaign
//! admin subcommands, which work against MySQL and Redis directly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use shard_router::RedisTarget;

use crate::campaign::Campaign;
use crate::config::{self, Config};
use crate::replica::ReplicaWait;
use crate::times;

#[derive(Debug, Parser)]
#[command(
    name = "consumer",
    about = "flashgate claims consumer, ledger and campaign admin"
)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

/// Settings every subcommand needs.
#[derive(Debug, Args)]
pub struct Common {
    /// Redis address, or comma-separated seed nodes with --redis-cluster.
    #[arg(
        long,
        env = "FLASHGATE_REDIS",
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    pub redis: String,
    #[arg(long, env = "FLASHGATE_REDIS_CLUSTER", global = true)]
    pub redis_cluster: bool,
    /// Stock shard count S; must match the gateways.
    #[arg(long, env = "FLASHGATE_SHARDS", default_value_t = shard_router::placement::DEFAULT_SHARDS, global = true)]
    pub shards: u16,
    /// mysql://user:pass@host:port/db
    #[arg(
        long,
        env = "FLASHGATE_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/flashgate",
        global = true
    )]
    pub mysql: String,
    #[arg(long, env = "FLASHGATE_GROUP", default_value = config::DEFAULT_GROUP, global = true)]
    pub group: String,
    /// Log line format: `text` for terminals, `json` (one object per line) for a log
    /// pipeline. `RUST_LOG` sets the levels.
    #[arg(long, env = "FLASHGATE_LOG_FORMAT", value_enum, default_value_t = telemetry::LogFormat::Text, global = true)]
    pub log_format: telemetry::LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the consumer service (streams → ledger, recovery, release, reconciliation).
    Run(RunArgs),
    /// Apply the migrations and exit.
    Migrate,
    /// Create or update a campaign in MySQL.
    Campaign(CampaignArgs),
    /// Preheat Redis from a stored campaign (live slices are never overwritten). Once the
    /// ledger holds claims of the SKU this is `rebuild`.
    Preheat { sku: u64 },
    /// Rebuild a SKU's Redis state (slices, user counts and sequences, release sets, replay
    /// answers) from the ledger and the claims in flight. Claims on the SKU answer "not
    /// preheated" while it runs; safe to run again after a crash.
    Rebuild { sku: u64 },
    /// Show a campaign's ledger and Redis state.
    Status { sku: u64 },
    /// Mark a claim paid.
    Confirm { claim_id: String },
    /// Cancel a claim: units back to Redis, once.
    Cancel { claim_id: String },
    /// Reconcile one SKU (invariant `books-close` (docs/DESIGN.md)) and print the report; takes excess out of the slices.
    Reconcile { sku: u64 },
    /// Release a stock wave now (or at --at): slices grow, gateways hear `restock`.
    Wave(WaveArgs),
    /// Close a finished campaign: closing report, Redis keys removed, no more reconciling.
    Close { sku: u64 },
    /// Replay the dead-letter streams into the ledger and remove what it committed (idempotent).
    Redrive {
        /// Only these shards (repeatable); every shard when omitted.
        #[arg(long = "shard")]
        shards: Vec<u16>,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Admin listener (/metrics, /healthz, admin API).
    #[arg(long, env = "FLASHGATE_ADMIN_ADDR", default_value = "127.0.0.1:9091")]
    pub admin_addr: SocketAddr,
    /// File holding the bearer token of the admin API (at least 16 bytes; a trailing
    /// newline is ignored). The token may instead come from the environment variable
    /// FLASHGATE_ADMIN_TOKEN; never from a flag, since argv is visible in `ps`. Neither
    /// set: the admin API is off (only /metrics and /healthz answer).
    #[arg(long, env = "FLASHGATE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Refused with a clear error: a token on the command line is visible in `ps`.
    #[arg(long = "admin-token", hide = true)]
    pub admin_token_argv: Option<String>,
    /// Unique consumer name; defaults to <host>-<pid>-<start ms>.
    #[arg(long, env = "FLASHGATE_CONSUMER_NAME")]
    pub consumer_name: Option<String>,
    #[arg(long, env = "FLASHGATE_BATCH_MAX_ROWS", default_value_t = config::DEFAULT_BATCH_MAX_ROWS)]
    pub batch_max_rows: usize,
    #[arg(long, env = "FLASHGATE_BATCH_MAX_WAIT_MS", default_value_t = config::DEFAULT_BATCH_MAX_WAIT.as_millis() as u64)]
    pub batch_max_wait_ms: u64,
    #[arg(long, env = "FLASHGATE_CLAIM_IDLE_MS", default_value_t = config::DEFAULT_CLAIM_IDLE.as_millis() as u64)]
    pub claim_idle_ms: u64,
    #[arg(long, env = "FLASHGATE_RECOVERY_INTERVAL_MS", default_value_t = config::DEFAULT_RECOVERY_INTERVAL.as_millis() as u64)]
    pub recovery_interval_ms: u64,
    #[arg(long, env = "FLASHGATE_MAX_DELIVERIES", default_value_t = config::DEFAULT_MAX_DELIVERIES)]
    pub max_deliveries: u64,
    #[arg(long, env = "FLASHGATE_RELEASE_INTERVAL_MS", default_value_t = config::DEFAULT_RELEASE_INTERVAL.as_millis() as u64)]
    pub release_interval_ms: u64,
    #[arg(long, env = "FLASHGATE_RECONCILE_INTERVAL_MS", default_value_t = config::DEFAULT_RECONCILE_INTERVAL.as_millis() as u64)]
    pub reconcile_interval_ms: u64,
    /// Reconciliation runs kept per SKU in reconcile_runs (older ones are deleted).
    #[arg(long, env = "FLASHGATE_RECONCILE_KEEP_RUNS", default_value_t = crate::reconcile::DEFAULT_KEEP_RUNS)]
    pub reconcile_keep_runs: u32,
    /// Close campaigns by themselves once their window and payment timeout are over.
    #[arg(long, env = "FLASHGATE_AUTO_CLOSE", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_close: bool,
    /// When read entries wait for a replica before they go to the ledger: `auto` wherever
    /// the shard's master has (or had since start) a replica, `always`, or `off`.
    #[arg(long, env = "FLASHGATE_REPLICA_WAIT", value_enum, default_value_t = ReplicaWaitArg::Auto)]
    pub replica_wait: ReplicaWaitArg,
    /// Bound of one WAIT for a replica; unconfirmed reads retry with backoff.
    #[arg(long, env = "FLASHGATE_REPLICA_WAIT_MS", default_value_t = crate::replica::DEFAULT_REPLICA_WAIT.as_millis() as u64)]
    pub replica_wait_ms: u64,
}

/// `--replica-wait` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplicaWaitArg {
    Auto,
    Always,
    Off,
}

/// `consumer campaign`: every flag but --sku and --stock has a default.
#[derive(Debug, Args)]
pub struct CampaignArgs {
    /// SKU id of the campaign (one campaign per SKU).
    #[arg(long)]
    pub sku: u64,
    /// Free-text name shown by `consumer status` (at most 200 bytes).
    #[arg(long, default_value = "")]
    pub name: String,
    /// Units released at the start; waves add more later. Cannot change once preheated.
    #[arg(long)]
    pub stock: u64,
    /// Shards the stock is split over (1..=--shards); fixed once the campaign exists.
    #[arg(long, default_value_t = 1)]
    pub width: u16,
    /// Units one user may hold at most.
    #[arg(long, default_value_t = 1)]
    pub limit: u32,
    /// Sale start: RFC 3339 (2026-12-01T10:00:00Z), now, now+10m, or ms since the epoch.
    #[arg(long = "start", visible_alias = "start-ms", default_value = "now")]
    pub start: String,
    /// Sale end (same forms as --start); must be after the start.
    #[arg(long = "end", visible_alias = "end-ms")]
    pub end: String,
    /// Seconds a claim may stay unpaid before it is released back to the stock.
    #[arg(long, default_value_t = 900)]
    pub payment_timeout_s: u32,
    /// A stock wave, <time>=<units> (e.g. 2026-12-01T10:30:00Z=200 or now+10m=200); repeat
    /// for more. The consumer adds the units to the slices when the time comes.
    #[arg(long = "wave", value_name = "TIME=UNITS")]
    pub waves: Vec<String>,
}

impl CampaignArgs {
    /// The campaign and its waves `(due_ms, units)`; a bad time names the flag.
    pub fn campaign(&self, now_ms: i64) -> Result<(Campaign, Vec<(i64, u64)>), String> {
        let at =
            |flag: &str, v: &str| times::parse_ms(v, now_ms).map_err(|e| format!("--{flag} {e}"));
        let waves = self
            .waves
            .iter()
            .map(|w| times::parse_wave(w, now_ms))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((
            Campaign {
                sku: self.sku,
                name: self.name.clone(),
                stock: self.stock,
                width: self.width,
                limit: self.limit,
                start_ms: at("start", &self.start)?,
                end_ms: at("end", &self.end)?,
                payment_timeout_s: self.payment_timeout_s,
            },
            waves,
        ))
    }
}

/// `consumer wave`: releases more stock of a running campaign.
#[derive(Debug, Args)]
pub struct WaveArgs {
    /// SKU of the campaign.
    pub sku: u64,
    /// Units to add (split evenly over the SKU's shards).
    pub units: u64,
    /// Wave id (1..=64 bytes), e.g. round-2: a retry with the same id never adds the wave
    /// twice; the same id with other units is refused.
    #[arg(long)]
    pub id: String,
    /// When to release it (same forms as campaign --start); default now.
    #[arg(long, default_value = "now")]
    pub at: String,
}

impl Common {
    /// The service configuration these settings describe (run flags applied by the caller).
    pub fn config(&self) -> Result<Config, String> {
        let redis = RedisTarget::parse(&self.redis, self.redis_cluster)
            .map_err(|e| format!("--redis: {e}"))?;
        let mut cfg = Config::new(redis, self.shards, self.mysql.clone());
        cfg.group = self.group.clone();
        Ok(cfg)
    }
}

/// Environment variable that may carry the admin token.
pub const ENV_ADMIN_TOKEN: &str = "FLASHGATE_ADMIN_TOKEN";

impl RunArgs {
    /// The admin token from `--admin-token-file` or [`ENV_ADMIN_TOKEN`] (`env_token`),
    /// never from argv; the error names the setting.
    pub fn admin_token(&self, env_token: Option<String>) -> Result<Option<String>, String> {
        if self.admin_token_argv.is_some() {
            return Err(format!(
                "--admin-token: a token on the command line is visible in `ps`; put it in a \
                 file named by --admin-token-file or in {ENV_ADMIN_TOKEN}"
            ));
        }
        let env_token = env_token.filter(|t| !t.is_empty());
        match (&self.admin_token_file, env_token) {
            (Some(_), Some(_)) => Err(format!(
                "--admin-token-file and {ENV_ADMIN_TOKEN} are both set; set one"
            )),
            (Some(path), None) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("--admin-token-file {}: {e}", path.display()))?;
                let token = text.trim_end_matches(['\r', '\n']);
                if token.is_empty() {
                    return Err(format!("--admin-token-file {}: empty", path.display()));
                }
                Ok(Some(token.to_owned()))
            }
            (None, t) => Ok(t),
        }
    }

    /// Applies the run flags; the admin token comes from [`Self::admin_token`].
    pub fn apply(&self, cfg: &mut Config) -> Result<(), String> {
        cfg.admin_addr = Some(self.admin_addr);
        cfg.admin_token = self.admin_token(std::env::var(ENV_ADMIN_TOKEN).ok())?;
        if let Some(n) = &self.consumer_name {
            cfg.consumer_name = n.clone();
        }
        cfg.batch_max_rows = self.batch_max_rows;
        cfg.batch_max_wait = Duration::from_millis(self.batch_max_wait_ms);
        cfg.claim_idle = Duration::from_millis(self.claim_idle_ms);
        cfg.recovery_interval = Duration::from_millis(self.recovery_interval_ms);
        cfg.max_deliveries = self.max_deliveries;
        cfg.release_interval = Duration::from_millis(self.release_interval_ms);
        cfg.reconcile_interval = Duration::from_millis(self.reconcile_interval_ms);
        cfg.reconcile_keep_runs = self.reconcile_keep_runs;
        cfg.auto_close = self.auto_close;
        let wait = Duration::from_millis(self.replica_wait_ms.max(1));
        cfg.replica_wait = match self.replica_wait {
            ReplicaWaitArg::Auto => ReplicaWait::Auto(wait),
            ReplicaWaitArg::Always => ReplicaWait::Always(wait),
            ReplicaWaitArg::Off => ReplicaWait::Off,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(args: &[&str]) -> RunArgs {
        let mut all = vec!["consumer", "run"];
        all.extend_from_slice(args);
        match Cli::try_parse_from(all).unwrap().command {
            Command::Run(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn admin_token_never_from_argv() {
        let err = run_args(&["--admin-token", "0123456789abcdef0"])
            .admin_token(None)
            .unwrap_err();
        assert!(err.starts_with("--admin-token:"), "{err}");
    }

    #[test]
    fn admin_token_from_env_or_file_but_not_both() {
        let a = run_args(&[]);
        assert_eq!(a.admin_token(None).unwrap(), None);
        assert_eq!(
            a.admin_token(Some("from-env-0123456789".into())).unwrap(),
            Some("from-env-0123456789".into())
        );
        let path = std::env::temp_dir().join(format!("fg-token-{}", std::process::id()));
        std::fs::write(&path, "from-file-0123456789\n").unwrap();
        let a = run_args(&["--admin-token-file", path.to_str().unwrap()]);
        assert_eq!(
            a.admin_token(None).unwrap(),
            Some("from-file-0123456789".into())
        );
        assert!(a.admin_token(Some("x".repeat(20))).is_err());
        std::fs::remove_file(&path).unwrap();
        let err = a.admin_token(None).unwrap_err();
        assert!(err.starts_with("--admin-token-file"), "{err}");
    }
}
