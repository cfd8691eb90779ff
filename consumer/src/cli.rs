//! Command-line interface of the consumer binary: `run` (the service) and the campaign
//! admin subcommands, which work against MySQL and Redis directly.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use shard_router::RedisTarget;

use crate::campaign::Campaign;
use crate::config::{self, Config};

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
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the consumer service (streams → ledger, recovery, release, reconciliation).
    Run(RunArgs),
    /// Apply the migrations and exit.
    Migrate,
    /// Create or update a campaign in MySQL.
    Campaign(CampaignArgs),
    /// Preheat Redis from a stored campaign (live slices are never overwritten).
    Preheat { sku: u64 },
    /// Show a campaign's ledger and Redis state.
    Status { sku: u64 },
    /// Mark a claim paid.
    Confirm { claim_id: String },
    /// Cancel a claim: units back to Redis, once.
    Cancel { claim_id: String },
    /// Reconcile one SKU (invariant 4) and print the report.
    Reconcile { sku: u64 },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Admin listener (/metrics, /healthz, admin API).
    #[arg(long, env = "FLASHGATE_ADMIN_ADDR", default_value = "127.0.0.1:9091")]
    pub admin_addr: SocketAddr,
    /// Bearer token of the admin API (at least 16 bytes); unset disables the API.
    #[arg(long, env = "FLASHGATE_ADMIN_TOKEN")]
    pub admin_token: Option<String>,
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
    /// Durability `replica` (use with gateways in `--durability replica`): read entries go
    /// to the ledger only once `WAIT 1 <ms>` confirmed a replica holds them.
    #[arg(long, env = "FLASHGATE_REPLICA_WAIT_MS")]
    pub replica_wait_ms: Option<u64>,
}

#[derive(Debug, Args)]
pub struct CampaignArgs {
    #[arg(long)]
    pub sku: u64,
    #[arg(long, default_value = "")]
    pub name: String,
    #[arg(long)]
    pub stock: u64,
    #[arg(long, default_value_t = 1)]
    pub width: u16,
    #[arg(long, default_value_t = 1)]
    pub limit: u32,
    /// Sale start, ms since the epoch.
    #[arg(long)]
    pub start_ms: i64,
    #[arg(long)]
    pub end_ms: i64,
    #[arg(long, default_value_t = 900)]
    pub payment_timeout_s: u32,
}

impl CampaignArgs {
    pub fn campaign(&self) -> Campaign {
        Campaign {
            sku: self.sku,
            name: self.name.clone(),
            stock: self.stock,
            width: self.width,
            limit: self.limit,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            payment_timeout_s: self.payment_timeout_s,
        }
    }
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

impl RunArgs {
    pub fn apply(&self, cfg: &mut Config) {
        cfg.admin_addr = Some(self.admin_addr);
        cfg.admin_token = self.admin_token.clone();
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
        cfg.replica_wait = self.replica_wait_ms.map(Duration::from_millis);
    }
}
