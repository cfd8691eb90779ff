//! The consumer process: the data path (`consumer::Streams`: streams into the ledger)
//! and, beside it, the release sweep, the rebuild watch, periodic reconciliation, waves,
//! memory checks, the health probes and the admin listener, all stopped by one shutdown
//! signal. Drain order: the data path drains (readers, writer, heartbeat), then the
//! background loops end.

use std::sync::Arc;
use std::time::Duration;

use crate::Config;
use consumer::{connect_redis, Streams};

use crate::OpsError;
use shard_router::StockClient;
use sqlx::MySqlPool;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::admin::{self, Admin};
use crate::health::{self, Health};
use crate::{rebuild, reconcile, release};

pub use consumer::connect_db;

/// Runs the service until `shutdown` turns true, then drains within `drain_grace`.
/// `listener` is the admin listener (bound by the caller so tests can use port 0).
pub async fn run(
    cfg: Config,
    listener: Option<TcpListener>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), OpsError> {
    cfg.validate().map_err(OpsError::Invalid)?;
    let mut sd = shutdown.clone();
    let pool = connect_db(&cfg.datapath, &mut sd).await?;
    // Redis may still be starting, loading or forming its cluster: wait for it.
    let Some(client) = connect_redis(&cfg.datapath, cfg.datapath.stock(), "redis", &mut sd).await?
    else {
        return Ok(());
    };
    let Some(streams) = Streams::start(&cfg.datapath, &pool, &client, &shutdown).await? else {
        return Ok(());
    };

    let mut background = JoinSet::new();
    spawn_upkeep(&mut background, &cfg, &pool, &client, &shutdown);
    spawn_sales(&mut background, &cfg, &pool, &client, &shutdown);
    let health = Arc::new(Health::new(streams.stalls(), cfg.datapath.writer_stall));
    background.spawn(health::run(
        health.clone(),
        pool.clone(),
        client.clone(),
        shutdown.clone(),
    ));
    if let Some(listener) = listener {
        let admin = Admin {
            cfg: cfg.clone(),
            pool: pool.clone(),
            client: client.clone(),
            prom: crate::metrics::install(),
            health,
        };
        background.spawn(admin::serve(admin, listener, shutdown.clone()));
    }

    plumbing::shutdown::stopped(&mut sd).await;
    tracing::info!("shutdown: draining");
    streams.drain().await;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while background.join_next().await.is_some() {}
    })
    .await;
    background.abort_all();
    pool.close().await;
    tracing::info!("consumer stopped");
    Ok(())
}

/// The upkeep loops: the release sweep, the rebuild watch, reconciliation, waves and the
/// memory check.
fn spawn_upkeep(
    background: &mut JoinSet<()>,
    cfg: &Config,
    pool: &MySqlPool,
    client: &StockClient,
    shutdown: &watch::Receiver<bool>,
) {
    background.spawn(release_loop(
        cfg.clone(),
        pool.clone(),
        client.clone(),
        shutdown.clone(),
    ));
    // A live campaign whose slice Redis lost is rebuilt from the ledger.
    background.spawn(rebuild::watch::run(
        pool.clone(),
        client.clone(),
        rebuild::Options {
            replica_wait: cfg.datapath.replica_wait,
            ..rebuild::Options::new(cfg.datapath.db_timeout)
        },
        shutdown.clone(),
    ));
    background.spawn(reconcile_loop(
        cfg.clone(),
        pool.clone(),
        client.clone(),
        shutdown.clone(),
    ));
    background.spawn(crate::housekeeping::wave_loop(
        cfg.clone(),
        pool.clone(),
        client.clone(),
        shutdown.clone(),
    ));
    background.spawn(crate::housekeeping::memory_loop(
        client.clone(),
        pool.clone(),
        shutdown.clone(),
    ));
}

/// The loops of the draw and queue sales.
fn spawn_sales(
    background: &mut JoinSet<()>,
    cfg: &Config,
    pool: &MySqlPool,
    client: &StockClient,
    shutdown: &watch::Receiver<bool>,
) {
    // Draw campaigns: entries into the ledger, the draw and its grants, and a lost shard's
    // draw restored (campaign-ops/src/draw.rs).
    background.spawn(crate::draw::entries::run(
        pool.clone(),
        client.clone(),
        cfg.datapath.db_timeout,
        shutdown.clone(),
    ));
    background.spawn(crate::draw::run::run(
        pool.clone(),
        client.clone(),
        cfg.datapath.replica_wait,
        cfg.datapath.db_timeout,
        shutdown.clone(),
    ));
    background.spawn(crate::draw::restore::run(
        pool.clone(),
        client.clone(),
        cfg.datapath.db_timeout,
        shutdown.clone(),
    ));
    // Queue campaigns: the waiting room's admission step (campaign-ops/src/queue.rs).
    background.spawn(crate::queue::run(
        pool.clone(),
        client.clone(),
        crate::queue::Admission {
            max_rate: cfg.queue_admit_rate,
            grace: cfg.queue_grace,
        },
        cfg.datapath.db_timeout,
        shutdown.clone(),
    ));
}

async fn release_loop(
    cfg: Config,
    pool: MySqlPool,
    client: StockClient,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(cfg.release_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = plumbing::shutdown::stopped(&mut shutdown) => break,
        }
        // Payment timeouts by Redis's clock (see `clock.rs`).
        let now = match crate::clock::redis_now(&client).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "release sweep: no clock from redis; skipped");
                continue;
            }
        };
        let _ = crate::clock::observe_skew(&cfg, &client).await;
        match release::sweep_with(
            &pool,
            &client,
            now,
            cfg.datapath.replica_wait,
            cfg.datapath.db_timeout,
        )
        .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(released = n, "released unpaid claims"),
            Err(e) => tracing::warn!(error = %e, "release sweep failed"),
        }
    }
}

async fn reconcile_loop(
    cfg: Config,
    pool: MySqlPool,
    client: StockClient,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(cfg.reconcile_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = plumbing::shutdown::stopped(&mut shutdown) => break,
        }
        // Closed by any process (the CLI, another consumer): their series leave /metrics.
        if let Ok(closed) =
            ledger::campaigns::closing_campaigns(&pool, cfg.datapath.db_timeout).await
        {
            closed.into_iter().for_each(crate::series::forget_sku);
        }
        let skus = match ledger::campaigns::open_campaigns(&pool, cfg.datapath.db_timeout).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: list campaigns failed");
                continue;
            }
        };
        // Holds are resolved by Redis's clock, the one `take.lua` enforces them by.
        let now = match crate::clock::redis_now(&client).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: no clock from redis; skipped");
                continue;
            }
        };
        let opts = reconcile::Options {
            keep_runs: cfg.reconcile_keep_runs,
            replica_wait: cfg.datapath.replica_wait,
            ..Default::default()
        };
        for sku in skus {
            if let Err(e) =
                reconcile::run_with(&pool, &client, sku, now, cfg.datapath.db_timeout, opts).await
            {
                tracing::warn!(sku, error = %e, "reconcile failed");
            }
        }
        if cfg.auto_close {
            crate::housekeeping::close_due(&cfg, &pool, &client).await;
        }
    }
}
