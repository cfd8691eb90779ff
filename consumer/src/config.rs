//! Configuration of the consumer service, with the documented defaults as named constants.

use std::time::Duration;

use shard_router::{RedisTarget, StockConfig, Timeouts};

/// Rows per batch when not configured. Big enough that one commit (one fsync) carries many
/// claims, small enough that a batch commits in a few ms.
pub const DEFAULT_BATCH_MAX_ROWS: usize = 1000;
/// Longest a claim waits in an open batch when traffic is thin.
pub const DEFAULT_BATCH_MAX_WAIT: Duration = Duration::from_millis(20);
/// Columns per claims row; MySQL allows 65 535 placeholders per statement.
pub const CLAIM_COLUMNS: usize = 10;
/// Upper bound of `batch_max_rows` that keeps one INSERT within the placeholder limit.
pub const MAX_BATCH_ROWS: usize = 65_535 / CLAIM_COLUMNS;
// One batch must fit one INSERT, and the default must be a valid setting.
const _: () = assert!(MAX_BATCH_ROWS * CLAIM_COLUMNS <= 65_535);
const _: () = assert!(DEFAULT_BATCH_MAX_ROWS <= MAX_BATCH_ROWS);
/// Entries in flight between the readers and the writer (the bounded channel).
pub const DEFAULT_CHANNEL_CAPACITY: usize = 8;
/// Writer loops committing batches concurrently (one gathers while another commits).
pub const DEFAULT_WRITERS: usize = 2;
/// Entries one XREADGROUP asks for.
pub const DEFAULT_READ_COUNT: usize = 500;
/// How long one XREADGROUP blocks when a stream is idle.
pub const DEFAULT_READ_BLOCK: Duration = Duration::from_millis(1000);
/// Entries pending this long with a consumer that does not refresh them are taken over.
pub const DEFAULT_CLAIM_IDLE: Duration = Duration::from_secs(15);
/// How often pending entries are refreshed and idle ones recovered.
pub const DEFAULT_RECOVERY_INTERVAL: Duration = Duration::from_secs(1);
/// Deliveries after which an entry goes to the dead-letter stream.
pub const DEFAULT_MAX_DELIVERIES: u64 = 10;
/// Bounds of the backoff while MySQL or Redis is down.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(50);
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Bound on every MySQL statement or transaction.
pub const DEFAULT_DB_TIMEOUT: Duration = Duration::from_secs(5);
/// How often pending claims past their payment timeout are released.
pub const DEFAULT_RELEASE_INTERVAL: Duration = Duration::from_secs(5);
/// How often every campaign is reconciled.
pub const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(60);
/// How long the process may take to flush and acknowledge after a shutdown signal.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Everything the consumer service needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub redis: RedisTarget,
    /// Stock shard count S of the deployment (must match the gateways).
    pub shards: u16,
    pub mysql_url: String,
    /// Consumer group read by every consumer process.
    pub group: String,
    /// Unique per process, so the group knows who holds which entry.
    pub consumer_name: String,
    pub batch_max_rows: usize,
    pub batch_max_wait: Duration,
    /// Capacity of the reader → writer channel, in reads (each up to `read_count` entries).
    pub channel_capacity: usize,
    /// Batches committed concurrently; more than a few only adds lock waits on the stock row.
    pub writers: usize,
    pub read_count: usize,
    pub read_block: Duration,
    pub claim_idle: Duration,
    pub recovery_interval: Duration,
    pub max_deliveries: u64,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub db_timeout: Duration,
    pub release_interval: Duration,
    pub reconcile_interval: Duration,
    pub drain_grace: Duration,
    /// Reconciliation runs kept per SKU.
    pub reconcile_keep_runs: u32,
    /// Close campaigns once their window and payment timeout are over.
    pub auto_close: bool,
    /// Entries reach the ledger only after a replica confirmed them (see `replica.rs`):
    /// otherwise a failover could take back a decrement the ledger already holds, and the
    /// unit would be sold twice. Default: wherever the shard has a replica.
    pub replica_wait: crate::replica::ReplicaWait,
    /// Added to this process's clock. Only fault drills set it (injected clock skew); no
    /// decision reads this clock (see `clock.rs`), only the skew gauge.
    pub clock_offset_ms: i64,
    /// Admin HTTP listener (`/metrics`, `/healthz`, campaign API); `None` = no listener.
    pub admin_addr: Option<std::net::SocketAddr>,
    /// Bearer token of the admin API; `None` leaves only `/metrics` and `/healthz` open.
    pub admin_token: Option<String>,
}

/// Default consumer group name.
pub const DEFAULT_GROUP: &str = "ledger";

impl Config {
    /// Defaults for everything but the addresses.
    pub fn new(redis: RedisTarget, shards: u16, mysql_url: impl Into<String>) -> Self {
        Self {
            redis,
            shards,
            mysql_url: mysql_url.into(),
            group: DEFAULT_GROUP.into(),
            consumer_name: default_consumer_name(),
            batch_max_rows: DEFAULT_BATCH_MAX_ROWS,
            batch_max_wait: DEFAULT_BATCH_MAX_WAIT,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            writers: DEFAULT_WRITERS,
            read_count: DEFAULT_READ_COUNT,
            read_block: DEFAULT_READ_BLOCK,
            claim_idle: DEFAULT_CLAIM_IDLE,
            recovery_interval: DEFAULT_RECOVERY_INTERVAL,
            max_deliveries: DEFAULT_MAX_DELIVERIES,
            backoff_min: DEFAULT_BACKOFF_MIN,
            backoff_max: DEFAULT_BACKOFF_MAX,
            db_timeout: DEFAULT_DB_TIMEOUT,
            release_interval: DEFAULT_RELEASE_INTERVAL,
            reconcile_interval: DEFAULT_RECONCILE_INTERVAL,
            drain_grace: DEFAULT_DRAIN_GRACE,
            reconcile_keep_runs: crate::reconcile::DEFAULT_KEEP_RUNS,
            auto_close: true,
            replica_wait: crate::replica::ReplicaWait::default(),
            clock_offset_ms: 0,
            admin_addr: None,
            admin_token: None,
        }
    }

    /// Checks the settings that would otherwise fail late; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        let max = shard_router::placement::MAX_SHARDS;
        if self.shards == 0 || self.shards > max {
            return Err(format!("shards {} must be in 1..={max}", self.shards));
        }
        if self.batch_max_rows == 0 || self.batch_max_rows > MAX_BATCH_ROWS {
            return Err(format!(
                "batch-max-rows {} must be in 1..={MAX_BATCH_ROWS} (MySQL placeholder limit)",
                self.batch_max_rows
            ));
        }
        if self.channel_capacity == 0
            || self.read_count == 0
            || self.writers == 0
            || self.writers > 16
        {
            return Err(
                "channel-capacity and read-count must be at least 1, writers in 1..=16".into(),
            );
        }
        if self.claim_idle <= self.recovery_interval * 2 {
            return Err(
                "claim-idle must exceed twice the recovery interval, or live entries get stolen"
                    .into(),
            );
        }
        if self.max_deliveries < 2 {
            return Err("max-deliveries must be at least 2".into());
        }
        if self.group.is_empty() || self.consumer_name.is_empty() {
            return Err("group and consumer name must not be empty".into());
        }
        if matches!(&self.admin_token, Some(t) if t.len() < 16) {
            return Err("admin token must be at least 16 bytes".into());
        }
        Ok(())
    }

    /// Stock client settings for control-plane calls (scripts, admin commands).
    pub fn stock(&self) -> StockConfig {
        let mut c = StockConfig::new(self.redis.clone(), self.shards);
        c.timeouts = Timeouts {
            connect: Duration::from_secs(1),
            response: Duration::from_secs(2),
        };
        c
    }

    /// Stock client settings for a stream reader: its XREADGROUP blocks, so it needs its own
    /// connection whose response bound is above the block time.
    pub fn reader_stock(&self) -> StockConfig {
        let mut c = self.stock();
        c.timeouts.response = self.read_block + Duration::from_secs(2);
        c
    }
}

/// `<host>-<pid>-<start ms>`: unique per process, and says where to look.
pub fn default_consumer_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "consumer".into());
    format!("{host}-{}-{}", std::process::id(), shard_router::now_ms())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config::new(RedisTarget::Single("redis://x".into()), 16, "mysql://x/y")
    }

    #[test]
    fn defaults_are_valid_and_bad_settings_are_named() {
        assert_eq!(cfg().validate(), Ok(()));
        type Breaker = fn(&mut Config);
        let cases: [(&str, Breaker); 5] = [
            ("batch-max-rows", |c| c.batch_max_rows = MAX_BATCH_ROWS + 1),
            ("shards", |c| c.shards = 0),
            ("claim-idle", |c| c.claim_idle = c.recovery_interval),
            ("max-deliveries", |c| c.max_deliveries = 1),
            ("admin token", |c| c.admin_token = Some("short".into())),
        ];
        for (name, break_it) in cases {
            let mut c = cfg();
            break_it(&mut c);
            let e = c.validate().unwrap_err();
            assert!(e.contains(name), "{name}: {e}");
        }
    }
}
