//! Settings of the consumer process: the data path's (`consumer::Config`: streams, batches,
//! leases, and the deployment's Redis, shards and MySQL) and, beside them, the operations'
//! own (queues, release and reconciliation intervals, auto close, the admin listener).
//! Each is defined once, on its field: flag, `FLASHGATE_*` variable and default, flattened
//! into `consumer run` (cli.rs). [`Config::new`] is the same defaults without a command
//! line, for tests and embedding.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{ArgAction, Args};
use consumer::config::{millis, parsed_defaults};
use shard_router::RedisTarget;

/// Reconciliation runs kept in the ledger per SKU when not configured.
pub const DEFAULT_RECONCILE_KEEP_RUNS: u32 = 1000;

/// Everything the consumer process needs.
#[derive(Debug, Clone, Args)]
// The data path's settings already take clap's group named after their struct.
#[group(id = "ProcessConfig")]
pub struct Config {
    /// The data path's settings, and the deployment's that the operations read too.
    #[command(flatten)]
    pub datapath: consumer::Config,
    /// Queue campaigns: the most waiting-room positions admitted per second, per SKU,
    /// after the first step (campaign-ops/src/queue.rs).
    #[arg(
        long = "queue-admit-rate",
        env = "FLASHGATE_QUEUE_ADMIT_RATE",
        default_value_t = 2000
    )]
    pub queue_admit_rate: u64,
    /// Queue campaigns: how long an admitted position is given to claim before it counts
    /// as one whose user did not (ms). At least the longest `refresh_ms` a gateway tells
    /// a waiting client (`shard_router::queue::MAX_REFRESH_MS`, 10 s), the gateways'
    /// 250 ms cache of the queue's state, a round trip and a step.
    #[arg(long = "queue-grace-ms", env = "FLASHGATE_QUEUE_GRACE_MS", value_name = "MS", default_value = "12000", value_parser = millis)]
    pub queue_grace: Duration,
    /// How often pending claims past their payment timeout are released (ms).
    #[arg(long = "release-interval-ms", env = "FLASHGATE_RELEASE_INTERVAL_MS", value_name = "MS", default_value = "5000", value_parser = millis)]
    pub release_interval: Duration,
    /// How often every campaign is reconciled (ms).
    #[arg(long = "reconcile-interval-ms", env = "FLASHGATE_RECONCILE_INTERVAL_MS", value_name = "MS", default_value = "60000", value_parser = millis)]
    pub reconcile_interval: Duration,
    /// Reconciliation runs kept per SKU in reconcile_runs (older ones are deleted).
    #[arg(long, env = "FLASHGATE_RECONCILE_KEEP_RUNS", default_value_t = DEFAULT_RECONCILE_KEEP_RUNS)]
    pub reconcile_keep_runs: u32,
    /// Close campaigns by themselves once their window and payment timeout are over.
    #[arg(long, env = "FLASHGATE_AUTO_CLOSE", default_value_t = true, action = ArgAction::Set)]
    pub auto_close: bool,
    /// Added to this process's clock. Only fault drills set it (injected clock skew); no
    /// decision reads this clock (see `clock.rs`), only the skew gauge.
    #[arg(skip)]
    pub clock_offset_ms: i64,
    /// Admin listener (/metrics, /healthz, admin API); the binary binds it, tests hand
    /// `service::run` a listener of their own or none.
    #[arg(long, env = "FLASHGATE_ADMIN_ADDR", default_value = "127.0.0.1:9091")]
    pub admin_addr: SocketAddr,
    /// Bearer token of the admin API; `None` leaves only `/metrics` and `/healthz` open.
    /// Read from a file or the environment by `consumer run` (cli.rs), never from argv.
    #[arg(skip)]
    pub admin_token: Option<String>,
}

impl Config {
    /// Defaults for everything but the addresses.
    pub fn new(redis: RedisTarget, shards: u16, mysql_url: impl Into<String>) -> Self {
        let mut cfg = Self::defaults();
        cfg.datapath.redis = redis;
        cfg.datapath.shards = shards;
        cfg.datapath.mysql_url = mysql_url.into();
        cfg
    }

    /// Every setting at its default, whatever the `FLASHGATE_*` variables say.
    pub fn defaults() -> Self {
        let mut cfg = parsed_defaults::<Self>();
        cfg.datapath = cfg.datapath.named();
        cfg
    }

    /// Checks the settings that would otherwise fail late; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        self.datapath.validate()?;
        if matches!(&self.admin_token, Some(t) if t.len() < 16) {
            return Err("admin token must be at least 16 bytes".into());
        }
        Ok(())
    }
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
        let cases: [(&str, Breaker); 2] = [
            ("admin token", |c| c.admin_token = Some("short".into())),
            ("shards", |c| c.datapath.shards = 0),
        ];
        for (name, break_it) in cases {
            let mut c = cfg();
            break_it(&mut c);
            let e = c.validate().unwrap_err();
            assert!(e.contains(name), "{name}: {e}");
        }
    }

    /// The documented defaults (docs/CONFIG.md), stated once on the fields.
    #[test]
    fn defaults_parse_to_the_documented_values() {
        let c = cfg();
        let ms = Duration::from_millis;
        assert_eq!(
            [c.release_interval, c.reconcile_interval, c.queue_grace],
            [ms(5_000), ms(60_000), ms(12_000)]
        );
        assert_eq!((c.queue_admit_rate, c.reconcile_keep_runs), (2000, 1000));
        assert_eq!((c.auto_close, c.clock_offset_ms), (true, 0));
        assert_eq!(c.admin_token, None);
        assert_eq!(c.admin_addr.to_string(), "127.0.0.1:9091");
    }
}
