//! flashgate's HTTP claim gateway.
//!
//! Layout:
//! - [`config`]: flags / `FLASHGATE_*` variables and their validation.
//! - accept loops, connection cap, header timeout and graceful drain come from the shared
//!   `plumbing` crate (`plumbing/src/serve.rs`).
//! - `api.rs` + `api/`: routing and one file per route (`claim`, `sku`, `probes`) and
//!   request parsing (`input`), with the lingering close of a refused body (`linger`);
//!   `reply.rs`: every response shape, below `api/` (it also turns the `identity` crate's
//!   refusals into answers).
//! - `admission.rs`: in-flight cap and per-user rate limit; `limiter.rs`: the per-client
//!   (address) rate limit in fixed memory.
//! - who is claiming (bearer token, trusted header, or the body when explicitly allowed)
//!   and the client address behind trusted proxies come from the `identity` crate, loaded
//!   from [`config::AccessConfig`].
//! - `cache.rs`: the sold-out cache, `live.rs`: the set of live SKUs; `events.rs`: the
//!   Pub/Sub subscriber feeding both.
//! - `link.rs`: the Redis connection and readiness probe; `durability.rs`: `WAIT`;
//!   `redis_runtime.rs`: the connection's background tasks on a runtime of their own.
//! - [`metrics`]: metric names, their HELP texts and the Prometheus recorder.
//! - `access.rs`: the trace id of each request (`X-Request-Id`) and the bounded access log.
//!
//! [`parse_claim`] is the socket-free part of reading a claim, public for fuzzing.
//!
//! [`run`] serves until a shutdown future resolves; tests call it in-process on
//! `127.0.0.1:0` listeners.

mod access;
mod admission;
mod api;
mod app;
mod cache;
pub mod config;
mod durability;
mod events;
mod limiter;
mod link;
mod live;
pub mod metrics;
mod redis_runtime;
mod replay_filter;
mod reply;
mod waiting_room;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use identity::Identity;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admission::Admission;
use crate::app::App;
use crate::cache::SoldOutCache;
use crate::limiter::ClientLimiter;
use crate::link::RedisLink;

pub use api::input::{parse_claim, Rejection};
pub use api::linger::{LINGER_MAX_BYTES, LINGER_TIME};
pub use config::{Config, ConfigError};

/// The two bound listeners (bound by the caller, so tests can use port 0).
pub struct Listeners {
    pub api: TcpListener,
    pub admin: TcpListener,
}

/// How long the background tasks get to stop once the listeners have drained.
const BACKGROUND_STOP: Duration = Duration::from_secs(2);

/// Runs the gateway until `shutdown` resolves, then drains: readiness goes false, after
/// `--drain-delay-ms` the listeners close, in-flight requests get `--shutdown-grace-ms`
/// to finish, and the background tasks stop.
pub async fn run(
    cfg: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ConfigError> {
    let settings = cfg.validate()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let app = Arc::new(app(&cfg, &settings, stop_rx.clone())?);

    // Background tasks stop last (they serve the draining requests too).
    let (bg_tx, bg_rx) = watch::channel(false);
    let mut background = background(&app, &cfg, &settings, bg_rx);
    let api = tokio::spawn(plumbing::serve(
        listeners.api,
        app.clone(),
        api::api,
        settings.api,
        stop_rx.clone(),
    ));
    let admin = tokio::spawn(plumbing::serve(
        listeners.admin,
        app.clone(),
        api::admin,
        settings.admin,
        stop_rx,
    ));

    shutdown.await;
    tracing::info!("shutdown requested; draining");
    app.link.start_draining();
    tokio::time::sleep(settings.drain_delay).await;
    let _ = stop_tx.send(true);
    for (name, task) in [("api", api), ("admin", admin)] {
        if let Err(e) = task.await {
            tracing::error!(listener = name, error = %e, "listener task failed");
        }
    }
    let _ = bg_tx.send(true);
    // Bounded like every wait: a task caught in a slow call (a connect, a read) past this
    // is aborted, so drain delay + grace + this stay inside a balancer's or an
    // orchestrator's kill timeout (deploy/compose/docker-compose.yml: 20 s).
    let stopping = async { while background.join_next().await.is_some() {} };
    if tokio::time::timeout(BACKGROUND_STOP, stopping)
        .await
        .is_err()
    {
        tracing::warn!(
            left = background.len(),
            "background tasks did not stop in time; aborting them"
        );
        background.abort_all();
        while background.join_next().await.is_some() {}
    }
    tracing::info!("gateway stopped");
    Ok(())
}

/// The state every handler shares, built from the configuration (the metrics recorder is
/// installed here, before any handle to it is taken).
fn app(
    cfg: &Config,
    settings: &config::Settings,
    stop: watch::Receiver<bool>,
) -> Result<App, ConfigError> {
    let identity = Identity::load(&cfg.access.identity_sources())
        .map_err(|e| ConfigError::new(e.setting, e.reason))?;
    if !cfg.access.has_identity_source() {
        tracing::warn!("no identity source configured: every claim answers 401");
    }
    let handle = metrics::install();
    metrics::register_defaults();
    let link = RedisLink::default();
    link.set_clock(cfg.max_clock_skew_ms, cfg.clock_offset_ms);
    let access_key = match &cfg.access_log_key_file {
        Some(path) => Some(access::key_from(&read_key_file(path)?)),
        None => None,
    };
    Ok(App {
        access: access::AccessLog::new(cfg.access_log_rate, access_key),
        link: Arc::new(link),
        cache: SoldOutCache::new(
            cfg.cache_capacity,
            settings.cache_ttl,
            settings.unknown_sku_ttl,
        ),
        admission: Arc::new(Admission::new(
            cfg.max_in_flight,
            cfg.user_rate,
            cfg.user_burst,
        )),
        identity,
        clients: ClientLimiter::new(
            cfg.access.client_rate,
            cfg.access.client_burst,
            cfg.access.client_slots,
        ),
        max_body: cfg.max_body_bytes,
        body_timeout: settings.body_timeout,
        sold_out_cache: !cfg.no_sold_out_cache,
        second_chance: !cfg.no_second_chance,
        replay_limits: replay_filter::ReplayLimits::new(
            cfg.replay_filter_max_users,
            cfg.replay_filter_total_users,
        ),
        metrics: handle,
        queue: waiting_room::QueueGate::new(queue_key(cfg)?),
        stop,
    })
}

/// The background tasks, each until `stop`: the Redis probe, the Pub/Sub subscriber, the
/// rate limiter's sweep and the metrics upkeep.
fn background(
    app: &App,
    cfg: &Config,
    settings: &config::Settings,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinSet<()> {
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn({
        let link = app.link.clone();
        let rx = stop.clone();
        let (stock, interval, on) = (
            settings.stock.clone(),
            settings.probe_interval,
            cfg.redis_runtime,
        );
        async move { link.probe(stock, interval, on, rx).await }
    });
    tasks.spawn(events::subscribe(
        settings.pubsub_nodes.clone(),
        app.link.clone(),
        app.cache.clone(),
        settings.pubsub_timeout,
        settings.cache_ttl,
        stop.clone(),
    ));
    tasks.spawn(app.admission.clone().sweep(stop.clone()));
    tasks.spawn(metrics::upkeep(app.metrics.clone(), stop));
    tasks
}

/// `--queue-secret-file`'s key, when given.
fn queue_key(cfg: &Config) -> Result<Option<shard_router::queue::QueueKey>, ConfigError> {
    let Some(path) = &cfg.access.queue_secret_file else {
        return Ok(None);
    };
    let bad = |e: String| ConfigError::new("--queue-secret-file", e);
    let bytes = std::fs::read(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    shard_router::queue::QueueKey::new(bytes.trim_ascii_end())
        .map(Some)
        .map_err(bad)
}

/// Reads `--access-log-key-file` (a few bytes of secret; more than 4 KiB is a mistake).
fn read_key_file(path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    let bad = |reason: String| ConfigError::new("--access-log-key-file", reason);
    let bytes = std::fs::read(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    if bytes.trim_ascii().is_empty() || bytes.len() > 4096 {
        return Err(bad(format!(
            "{}: expected 1..=4096 bytes of key, found {}",
            path.display(),
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Every background loop selects on the shared stop signal.
pub(crate) use plumbing::stopped;
