//! Settings of the data path, and of the deployment it shares with the operations around
//! it (Redis, shards, MySQL, bounds). Each setting is defined once, here: a field with its
//! flag, `FLASHGATE_*` variable and default (flattened into `consumer run` through
//! `campaign-ops/src/config.rs`), or a `skip` field with its fixed default.
//! [`Config::new`] is the same defaults without a command line, for tests and embedding.

use std::time::Duration;

use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser};
use shard_router::args::DEFAULT_REDIS;
use shard_router::placement::DEFAULT_SHARDS;
use shard_router::{RedisTarget, StockConfig, Timeouts};

use crate::replica::ReplicaWait;

pub use ledger::claims::{DEFAULT_BATCH_MAX_ROWS, MAX_BATCH_ROWS};
/// Default `--mysql`.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/flashgate";

/// Everything the data path needs.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// From the global `--redis` / `--redis-cluster` (cli.rs).
    #[arg(skip = RedisTarget::Single(DEFAULT_REDIS.into()))]
    pub redis: RedisTarget,
    /// Stock shard count S of the deployment (must match the gateways); from the global
    /// `--shards`.
    #[arg(skip = DEFAULT_SHARDS)]
    pub shards: u16,
    /// From the global `--mysql`.
    #[arg(skip = DEFAULT_MYSQL_URL.to_owned())]
    pub mysql_url: String,
    /// Unique consumer name (a stream's lease names its owner by it); defaults to
    /// <host>-<pid>-<start ms>.
    #[arg(
        long,
        env = "FLASHGATE_CONSUMER_NAME",
        default_value = "",
        hide_default_value = true
    )]
    pub consumer_name: String,
    /// Claims per ledger batch (one INSERT, one commit).
    #[arg(long, env = "FLASHGATE_BATCH_MAX_ROWS", default_value_t = DEFAULT_BATCH_MAX_ROWS)]
    pub batch_max_rows: usize,
    /// Longest a claim waits in an open batch when traffic is thin (ms).
    #[arg(long = "batch-max-wait-ms", env = "FLASHGATE_BATCH_MAX_WAIT_MS", value_name = "MS", default_value = "20", value_parser = millis)]
    pub batch_max_wait: Duration,
    /// Capacity of each reader → writer channel, in reads (each up to `read_count` entries).
    #[arg(skip = 8_usize)]
    pub channel_capacity: usize,
    /// Writer loops committing concurrently (one gathers while another commits), each
    /// owning the shards equal to its index modulo their count; more than a few only adds
    /// lock waits on the stock row.
    #[arg(skip = 2_usize)]
    pub writers: usize,
    /// Entries one XREAD asks for.
    #[arg(skip = 500_usize)]
    pub read_count: usize,
    /// How long one XREAD blocks when a stream is idle.
    #[arg(skip = Duration::from_millis(1000))]
    pub read_block: Duration,
    /// A replica of the (single) Redis master to read the claims streams from
    /// (`redis://host:port`): XREAD writes nothing, so the master then serves none of the
    /// consumer's reads; fences, trims and late claims still go to the master.
    #[arg(long, env = "FLASHGATE_READ_REPLICA", value_name = "URL")]
    pub read_replica: Option<String>,
    /// On a Redis Cluster, read the claims streams from a replica of each shard's master
    /// (READONLY connections; a master without a replica serves them itself).
    #[arg(long, env = "FLASHGATE_READ_FROM_REPLICAS", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub read_from_replicas: bool,
    /// A shard's lease: renewed every third of it; another consumer takes the shard's
    /// stream this long after its owner stopped renewing (ms).
    #[arg(long = "lease-ms", env = "FLASHGATE_LEASE_MS", value_name = "MS", default_value = "5000", value_parser = millis)]
    pub lease: Duration,
    /// Bounds of the backoff while MySQL or Redis is down.
    #[arg(skip = Duration::from_millis(50))]
    pub backoff_min: Duration,
    #[arg(skip = Duration::from_secs(2))]
    pub backoff_max: Duration,
    /// A writer loop whose batch has failed every attempt for this long makes `/healthz`
    /// unhealthy (503) until it commits (ms): it retries for as long as it takes, and
    /// nothing else shows that the ledger stopped moving.
    #[arg(long = "writer-stall-ms", env = "FLASHGATE_WRITER_STALL_MS", value_name = "MS", default_value = "10000", value_parser = millis)]
    pub writer_stall: Duration,
    /// Bound on every MySQL statement or transaction.
    #[arg(skip = Duration::from_secs(5))]
    pub db_timeout: Duration,
    /// How long the process may take to flush and acknowledge after a shutdown signal.
    #[arg(skip = Duration::from_secs(10))]
    pub drain_grace: Duration,
    /// Entries reach the ledger only after a replica confirmed them (see `replica.rs`):
    /// otherwise a failover could take back a decrement the ledger already holds, and the
    /// unit would be sold twice. `--replica-wait` and `--replica-wait-ms`.
    #[command(flatten)]
    pub replica_wait: ReplicaWait,
}

/// Parses a `*-ms` flag.
pub fn millis(v: &str) -> Result<Duration, String> {
    v.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|e| format!("{v:?} is not a number of milliseconds: {e}"))
}

impl Config {
    /// Defaults for everything but the addresses.
    pub fn new(redis: RedisTarget, shards: u16, mysql_url: impl Into<String>) -> Self {
        let mut cfg = Self::defaults();
        cfg.redis = redis;
        cfg.shards = shards;
        cfg.mysql_url = mysql_url.into();
        cfg
    }

    /// Every setting at its default, whatever the `FLASHGATE_*` variables say.
    pub fn defaults() -> Self {
        parsed_defaults::<Self>().named()
    }

    /// Gives an unnamed consumer its default name.
    pub fn named(mut self) -> Self {
        if self.consumer_name.is_empty() {
            self.consumer_name = default_consumer_name();
        }
        self
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
        // A lease shorter than a blocked read would lapse between two renewals' worth of
        // reads; the renewer renews every third of it.
        if self.lease < self.read_block * 2 {
            return Err(format!(
                "lease-ms {} must be at least twice the read block ({} ms)",
                self.lease.as_millis(),
                self.read_block.as_millis()
            ));
        }
        if self.consumer_name.is_empty() {
            return Err("consumer name must not be empty".into());
        }
        if self.read_replica.is_some() && matches!(self.redis, RedisTarget::Cluster(_)) {
            return Err(
                "read-replica names a replica of a single Redis; on a cluster use --read-from-replicas"
                    .into(),
            );
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

    /// Stock client settings for a stream reader: its XREAD blocks, so it needs its own
    /// connection whose response bound is above the block time.
    /// Pointed at `--read-replica` when one is set.
    pub fn reader_stock(&self) -> StockConfig {
        let mut c = self.stock();
        if let Some(url) = &self.read_replica {
            c.target = RedisTarget::Single(url.clone());
        }
        c.read_from_replicas = self.read_from_replicas;
        c.timeouts.response = self.read_block + Duration::from_secs(2);
        c
    }
}

/// `<host>-<pid>-<start ms>`: unique per process, and says where to look.
pub(crate) fn default_consumer_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "consumer".into());
    format!("{host}-{}-{}", std::process::id(), shard_router::now_ms())
}

/// A settings group `C` at its defaults, whatever the `FLASHGATE_*` variables say: parsed
/// from an empty command line with every variable switched off, so the defaults stated on
/// the fields are the only ones (campaign-ops' settings use it too).
pub fn parsed_defaults<C: Args + FromArgMatches>() -> C {
    #[derive(Parser)]
    struct Defaults<C: Args> {
        #[command(flatten)]
        cfg: C,
    }
    let cmd = Defaults::<C>::command().mut_args(|a| a.env(None::<&str>));
    let parsed = cmd
        .try_get_matches_from(["consumer"])
        .and_then(|m| Defaults::<C>::from_arg_matches(&m));
    // Only a default that does not parse gets here; the unit tests parse them all.
    parsed
        .unwrap_or_else(|e| panic!("consumer defaults: {e}"))
        .cfg
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
        let cases: [(&str, Breaker); 4] = [
            ("batch-max-rows", |c| c.batch_max_rows = MAX_BATCH_ROWS + 1),
            ("shards", |c| c.shards = 0),
            ("lease-ms", |c| c.lease = Duration::from_millis(100)),
            ("consumer name", |c| c.consumer_name.clear()),
        ];
        for (name, break_it) in cases {
            let mut c = cfg();
            break_it(&mut c);
            let e = c.validate().unwrap_err();
            assert!(e.contains(name), "{name}: {e}");
        }
    }

    /// The documented defaults (README's settings table), now stated once on the fields.
    #[test]
    fn defaults_parse_to_the_documented_values() {
        let c = cfg();
        let ms = Duration::from_millis;
        assert_eq!(c.batch_max_rows, DEFAULT_BATCH_MAX_ROWS);
        assert_eq!([c.batch_max_wait, c.lease], [ms(20), ms(5_000)]);
        assert_eq!((c.channel_capacity, c.writers, c.read_count), (8, 2, 500));
        assert_eq!(
            (c.read_block, c.db_timeout, c.drain_grace),
            (ms(1_000), ms(5_000), ms(10_000))
        );
        assert_eq!((c.backoff_min, c.backoff_max), (ms(50), ms(2_000)));
        assert_eq!(c.replica_wait, ReplicaWait::default());
        assert!(!c.consumer_name.is_empty());
        assert_eq!(millis("12"), Ok(ms(12)));
        let bad = millis("1s").unwrap_err();
        assert!(bad.contains("\"1s\"") && !bad.contains('\n'), "{bad}");
    }
}
