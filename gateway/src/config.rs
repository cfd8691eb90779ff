//! Gateway configuration: every setting is a flag and a `FLASHGATE_*` environment variable.
//! [`Config::validate`] turns a bad combination into one [`ConfigError`] line naming the
//! setting, so a misconfigured process exits before it binds anything.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};
pub use shard_router::args::SettingError as ConfigError;
use shard_router::{RedisArgs, Timeouts};
pub use telemetry::LogFormat;

pub use crate::redis_runtime::RedisRuntime;

mod access;
mod settings;
pub use access::{AccessConfig, MAX_CLIENT_SLOTS};
pub use settings::{PubsubNodes, Settings};

/// Largest body cap accepted: a claim is a few hundred bytes, so anything bigger is a mistake.
pub const MAX_BODY_CAP: usize = 1 << 20;
/// More worker threads than this is a typo, not a tuning.
pub const MAX_WORKER_THREADS: usize = 1024;
/// Default `--drain-delay-ms`: longer than the balancer's 3 failed checks 1 s apart
/// (deploy/haproxy/haproxy.cfg `inter 1s fall 3`), with a second of margin.
pub const DEFAULT_DRAIN_DELAY_MS: u64 = 4_000;
/// More access log lines per second than this would be the flood the bound prevents.
pub const MAX_ACCESS_LOG_RATE: u32 = 100_000;

/// Bounds of `--max-header-bytes`: hyper cannot read a head into less than 8 KiB, and a
/// claim's head (a few short headers, a token from the auth layer) never needs more than
/// a small multiple of it.
pub const MIN_HEADER_BYTES: usize = 8_192;
pub const MAX_HEADER_CAP: usize = 1 << 20;

/// What a successful claim waits for before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// Answer as soon as the primary ran the script.
    None,
    /// Also `WAIT 1 <wait-ms>` on the claim's shard, and acknowledge (201) only when a
    /// replica confirmed; a miss answers 503 with the claim id (retry with the same
    /// request_id) and is counted in `flashgate_replication_unconfirmed_total`.
    Replica,
}

/// Settings of one gateway process.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "flashgate-gateway",
    version,
    about = "flashgate HTTP claim gateway"
)]
pub struct Config {
    /// Address of the claim API.
    #[arg(long, env = "FLASHGATE_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Address of the admin listener (`/metrics`); kept apart so scrapes never compete
    /// with claims for connection slots.
    #[arg(long, env = "FLASHGATE_ADMIN_LISTEN", default_value = "127.0.0.1:9090")]
    pub admin_listen: SocketAddr,
    /// `--redis`, `--redis-cluster`, `--shards` (shared by every process:
    /// shard-router/src/args.rs).
    #[command(flatten)]
    pub redis: RedisArgs,
    /// Durability of an acknowledged claim.
    #[arg(long, env = "FLASHGATE_DURABILITY", value_enum, default_value_t = Durability::None)]
    pub durability: Durability,
    /// `WAIT` timeout in replica mode (ms); must stay below `--redis-timeout-ms`.
    #[arg(long, env = "FLASHGATE_WAIT_MS", default_value_t = 50)]
    pub wait_ms: u64,
    /// Identity source and per-client limit (`config/access.rs`).
    #[command(flatten)]
    pub access: AccessConfig,
    /// Open client connections at most; more wait in the kernel backlog.
    #[arg(long, env = "FLASHGATE_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Connections the kernel queues for accept on `--listen` (Linux caps it at
    /// `net.core.somaxconn`). A rush of new connections past it is dropped and retried by
    /// TCP 200 ms to 1 s later (`plumbing/src/listen.rs`).
    #[arg(long, env = "FLASHGATE_LISTEN_BACKLOG", default_value_t = plumbing::listen::DEFAULT_BACKLOG)]
    pub listen_backlog: u32,
    /// Requests being served at most; past it claims are shed with 503 `overloaded`.
    #[arg(long, env = "FLASHGATE_MAX_IN_FLIGHT", default_value_t = 2_048)]
    pub max_in_flight: usize,
    /// Largest accepted request body in bytes.
    #[arg(long, env = "FLASHGATE_MAX_BODY_BYTES", default_value_t = 4_096)]
    pub max_body_bytes: usize,
    /// Largest request head (request line and headers) in bytes; a bigger one is refused
    /// with 431 and the connection closed. It bounds the memory a connection pins while
    /// its head arrives: hyper's own default is ~400 KiB, which 10 000 slow connections
    /// would turn into 4 GB.
    #[arg(long, env = "FLASHGATE_MAX_HEADER_BYTES", default_value_t = 16_384)]
    pub max_header_bytes: usize,
    /// Claims per second per user (0 = no limit).
    #[arg(long, env = "FLASHGATE_USER_RATE", default_value_t = 5)]
    pub user_rate: u32,
    /// Burst allowance of the per-user limit.
    #[arg(long, env = "FLASHGATE_USER_BURST", default_value_t = 10)]
    pub user_burst: u32,
    /// A client must send its full request head within this (ms), else the connection
    /// is closed (slowloris guard).
    #[arg(long, env = "FLASHGATE_HEADER_TIMEOUT_MS", default_value_t = 5_000)]
    pub header_timeout_ms: u64,
    /// A client must send its full body within this (ms), else 408.
    #[arg(long, env = "FLASHGATE_BODY_TIMEOUT_MS", default_value_t = 5_000)]
    pub body_timeout_ms: u64,
    /// A write to a client that makes no progress for this long (ms) closes the
    /// connection: a client that pipelines requests and never reads the answers would
    /// otherwise keep its connection slot forever.
    #[arg(long, env = "FLASHGATE_WRITE_TIMEOUT_MS", default_value_t = 5_000)]
    pub write_timeout_ms: u64,
    /// A connection older than this (ms) finishes its current request and is closed
    /// (`Connection: close`); clients reconnect. Bounds what any one client can hold,
    /// and spreads long-lived keep-alive clients over gateways added later.
    #[arg(
        long,
        env = "FLASHGATE_MAX_CONNECTION_AGE_MS",
        default_value_t = 60_000
    )]
    pub max_connection_age_ms: u64,
    /// Largest |this clock − Redis's `TIME`| (ms, on every shard's master) at which claims
    /// are served. This clock opens and closes the sale window and stamps `claimed_ms`:
    /// two gateways within it open a sale at most twice it apart (plus half a probe's
    /// round trip each). Past the bound claims answer 503 and `/readyz` says why.
    #[arg(long, env = "FLASHGATE_MAX_CLOCK_SKEW_MS", default_value_t = 25)]
    pub max_clock_skew_ms: u64,
    /// Fault drills only: added to this process's clock (an injected skew).
    #[arg(
        long,
        env = "FLASHGATE_CLOCK_OFFSET_MS",
        default_value_t = 0,
        hide = true,
        allow_hyphen_values = true
    )]
    pub clock_offset_ms: i64,
    /// Redis connect timeout (ms).
    #[arg(
        long,
        env = "FLASHGATE_REDIS_CONNECT_TIMEOUT_MS",
        default_value_t = 500
    )]
    pub redis_connect_timeout_ms: u64,
    /// Bound on every Redis call (ms); a claim past it answers 503 `unavailable`.
    #[arg(long, env = "FLASHGATE_REDIS_TIMEOUT_MS", default_value_t = 500)]
    pub redis_timeout_ms: u64,
    /// Life of a sold-out cache entry (ms). This is the bound on how long a missed
    /// `restock` (or any other missed event) can leave this gateway wrong.
    #[arg(long, env = "FLASHGATE_CACHE_TTL_MS", default_value_t = 5_000)]
    pub cache_ttl_ms: u64,
    /// How long "no such SKU" is remembered (ms), so unknown SKUs cannot flood Redis.
    #[arg(long, env = "FLASHGATE_UNKNOWN_SKU_TTL_MS", default_value_t = 1_000)]
    pub unknown_sku_ttl_ms: u64,
    /// SKUs held in the sold-out cache at most.
    #[arg(long, env = "FLASHGATE_CACHE_CAPACITY", default_value_t = 100_000)]
    pub cache_capacity: u64,
    /// Period of the Redis readiness probe (ms).
    #[arg(long, env = "FLASHGATE_PROBE_INTERVAL_MS", default_value_t = 1_000)]
    pub probe_interval_ms: u64,
    /// After a shutdown signal, keep serving (not ready) this long so load balancers
    /// notice, before the listeners close (ms). The default outlasts the documented
    /// balancer check (deploy/haproxy/haproxy.cfg: 3 failed checks 1 s apart), so a
    /// rolling restart drops no claims; 0 without a balancer in front.
    #[arg(long, env = "FLASHGATE_DRAIN_DELAY_MS", default_value_t = DEFAULT_DRAIN_DELAY_MS)]
    pub drain_delay_ms: u64,
    /// In-flight requests get this long to finish after the listeners close (ms).
    #[arg(long, env = "FLASHGATE_SHUTDOWN_GRACE_MS", default_value_t = 10_000)]
    pub shutdown_grace_ms: u64,
    /// Ablation: never answer from the sold-out cache and pass no empty-shard knowledge to
    /// the claim protocol, so every claim goes to Redis (for measuring what the cache buys).
    #[arg(long, env = "FLASHGATE_NO_SOLD_OUT_CACHE")]
    pub no_sold_out_cache: bool,
    /// Ablation: no second chance; a claim whose home slice is empty is sold out (for
    /// measuring what rerouting buys; users hashed to an empty shard lose).
    #[arg(long, env = "FLASHGATE_NO_SECOND_CHANCE")]
    pub no_second_chance: bool,
    /// Users of a sold-out SKU read into the replay filter at most: with fewer, a request
    /// id of a user that never won is answered 410 from memory; with more, each one costs a
    /// replay read (`gateway/src/replay_filter.rs`). 0 turns the filter off.
    #[arg(
        long,
        env = "FLASHGATE_REPLAY_FILTER_MAX_USERS",
        default_value_t = 100_000
    )]
    pub replay_filter_max_users: u64,
    /// Users held by the replay filters of every SKU together at most (memory: a set costs
    /// about 100 bytes a user). A SKU's set that does not fit is not read; its request ids
    /// keep the replay read until room comes free.
    #[arg(
        long,
        env = "FLASHGATE_REPLAY_FILTER_TOTAL_USERS",
        default_value_t = 1_000_000
    )]
    pub replay_filter_total_users: u64,
    /// Where the Redis connection's tasks run: `adaptive` (a thread of their own, so a
    /// saturated request runtime does not delay Redis replies, and claim batches on the
    /// request runtime while it has an idle worker), `own` (the thread for every call) or
    /// `shared` (the request runtime only; see `gateway/src/redis_runtime.rs`).
    #[arg(long, env = "FLASHGATE_REDIS_RUNTIME", value_enum, default_value_t = RedisRuntime::Adaptive)]
    pub redis_runtime: RedisRuntime,
    /// Runtime worker threads; 0 = one per core. On a box shared with Redis, fewer threads
    /// than cores cost less switching (see docs/BENCHMARKS.md).
    #[arg(long, env = "FLASHGATE_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,
    /// Log line format: `text` for terminals, `json` (one object per line) for a log
    /// pipeline. `RUST_LOG` sets the levels.
    #[arg(long, env = "FLASHGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Access log lines per second at most (target `flashgate_access`: method, route,
    /// status, latency, hashed user, trace id); 0 = off. Lines past the bound are dropped
    /// and counted in `flashgate_access_log_dropped_total`, so a rush cannot flood the log.
    #[arg(long, env = "FLASHGATE_ACCESS_LOG_RATE", default_value_t = 0)]
    pub access_log_rate: u32,
    /// File holding a secret that keys the access log's user hash. Every gateway given
    /// the same file writes the same hash for a user; without it each process picks a
    /// random key, so lines correlate within one gateway only. A file, not a flag value,
    /// so the secret is not visible in `ps`.
    #[arg(long, env = "FLASHGATE_ACCESS_LOG_KEY_FILE")]
    pub access_log_key_file: Option<std::path::PathBuf>,
}

fn bad(setting: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::new(setting, reason)
}

impl Config {
    /// Defaults with a given Redis, for tests and embedding (on loopback, so no identity
    /// source is needed to start; claims then answer 401 until one is set). No balancer
    /// in front, so no drain delay.
    pub fn for_redis(redis: &str, cluster: bool) -> Self {
        let mut args = vec![
            "flashgate-gateway",
            "--redis",
            redis,
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ];
        if cluster {
            args.push("--redis-cluster");
        }
        let mut cfg = Self::parse_from(args);
        cfg.drain_delay_ms = 0;
        cfg
    }

    /// Checks every setting against the others and returns them in the types they are
    /// used as; the error names the first bad one.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let mut stock = self.redis.stock_config()?;
        if self.listen == self.admin_listen && self.listen.port() != 0 {
            return Err(bad("--admin-listen", "must differ from --listen"));
        }
        self.access.validate(self.listen)?;
        let positive: [(&'static str, u64); 11] = [
            ("--max-connections", self.max_connections as u64),
            ("--listen-backlog", u64::from(self.listen_backlog)),
            ("--max-in-flight", self.max_in_flight as u64),
            ("--header-timeout-ms", self.header_timeout_ms),
            ("--body-timeout-ms", self.body_timeout_ms),
            ("--write-timeout-ms", self.write_timeout_ms),
            ("--max-connection-age-ms", self.max_connection_age_ms),
            ("--redis-connect-timeout-ms", self.redis_connect_timeout_ms),
            ("--redis-timeout-ms", self.redis_timeout_ms),
            ("--cache-ttl-ms", self.cache_ttl_ms),
            ("--probe-interval-ms", self.probe_interval_ms),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(bad(name, "must be greater than 0"));
        }
        if self.worker_threads > MAX_WORKER_THREADS {
            return Err(bad(
                "--worker-threads",
                format!("{} is over {MAX_WORKER_THREADS}", self.worker_threads),
            ));
        }
        if self.max_body_bytes < 64 || self.max_body_bytes > MAX_BODY_CAP {
            return Err(bad(
                "--max-body-bytes",
                format!("{} is outside 64..={MAX_BODY_CAP}", self.max_body_bytes),
            ));
        }
        if !(MIN_HEADER_BYTES..=MAX_HEADER_CAP).contains(&self.max_header_bytes) {
            return Err(bad(
                "--max-header-bytes",
                format!(
                    "{} is outside {MIN_HEADER_BYTES}..={MAX_HEADER_CAP}",
                    self.max_header_bytes
                ),
            ));
        }
        if self.access_log_rate > MAX_ACCESS_LOG_RATE {
            return Err(bad(
                "--access-log-rate",
                format!("{} is over {MAX_ACCESS_LOG_RATE}", self.access_log_rate),
            ));
        }
        if self.user_rate > 0 && self.user_burst == 0 {
            return Err(bad(
                "--user-burst",
                "must be at least 1 when --user-rate is set",
            ));
        }
        if self.durability == Durability::Replica
            && (self.wait_ms == 0 || self.wait_ms >= self.redis_timeout_ms)
        {
            return Err(bad(
                "--wait-ms",
                "must be in 1..--redis-timeout-ms in replica mode",
            ));
        }
        stock.timeouts = Timeouts {
            connect: ms(self.redis_connect_timeout_ms),
            response: ms(self.redis_timeout_ms),
        };
        // The WAIT rides in each claim pipeline, on the connection that ran the scripts.
        stock.replica_ack = (self.durability == Durability::Replica).then(|| ms(self.wait_ms));
        Settings::new(self, stock)
    }
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[cfg(test)]
mod tests;
