//! Wiring of the consumer service: one reader and one recovery loop per shard, one batch
//! writer, the release sweep, periodic reconciliation and the admin listener, all stopped
//! by one shutdown signal, and the heartbeat of the rebuild's flush handshake (`flush.rs`).
//! Drain order: readers stop → the writer flushes the open batch and acknowledges what
//! committed → the heartbeat deregisters → background loops end.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use shard_router::StockClient;
use sqlx::MySqlPool;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::admin::{self, Admin};
use crate::backoff::Backoff;
use crate::config::Config;
use crate::error::ConsumerError;
use crate::flush::Heartbeat;
use crate::health::{self, Health};
use crate::inflight::InFlight;
use crate::recovery::Recovery;
use crate::replica::ShardReplica;
use crate::stream::ShardStream;
use crate::writer::Writer;
use crate::{db, reader, rebuild, reconcile, release, startup};

/// Connects to MySQL and applies migrations, retrying with backoff until `shutdown`.
pub async fn connect_db(
    cfg: &Config,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<MySqlPool, ConsumerError> {
    let pool = db::connect(&cfg.mysql_url, cfg.db_timeout).await?;
    let mut backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max);
    loop {
        match db::migrate(&pool).await {
            Ok(()) => return Ok(pool),
            Err(e) => {
                tracing::warn!(error = %e, "migrations not applied yet; retrying");
                if !backoff.sleep(shutdown).await {
                    return Err(e.into());
                }
            }
        }
    }
}

/// Runs the service until `shutdown` turns true, then drains within `drain_grace`.
/// `listener` is the admin listener (bound by the caller so tests can use port 0).
pub async fn run(
    cfg: Config,
    listener: Option<TcpListener>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ConsumerError> {
    cfg.validate().map_err(ConsumerError::Invalid)?;
    let mut sd = shutdown.clone();
    let pool = connect_db(&cfg, &mut sd).await?;
    // Redis may still be starting, loading or forming its cluster: wait for it.
    let Some(client) = startup::connect(&cfg, cfg.stock(), "redis", &mut sd).await? else {
        return Ok(());
    };
    let shards: Vec<u16> = (0..cfg.shards).collect();
    let list: Vec<ShardStream> = shards
        .iter()
        .map(|&s| ShardStream::new(&client, s, &cfg.group))
        .collect();
    if !startup::ensure_groups(&cfg, &client, &list, &mut sd).await? {
        return Ok(());
    }
    let streams: HashMap<u16, ShardStream> = list.into_iter().map(|st| (st.shard, st)).collect();
    tracing::info!(consumer = %cfg.consumer_name, shards = cfg.shards, "consumer started");

    let inflight = InFlight::default();
    // Registered before the first read, so a rebuild waits for whatever this process reads
    // (`flush.rs`); it beats until the writer drained, then deregisters.
    let mut beat = Heartbeat::new(
        pool.clone(),
        &cfg.consumer_name,
        inflight.clone(),
        cfg.db_timeout,
    );
    // Nothing is read before the row exists: a rebuild neither waits for nor names a
    // consumer it cannot see, so what such a one read could commit late unnoticed.
    let mut backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max);
    while let Err(e) = beat.register().await {
        tracing::warn!(error = %e, "consumer not registered yet; retrying before any read");
        if !backoff.sleep(&mut sd).await {
            return Ok(());
        }
    }
    let (stop_beat, beat_stopped) = watch::channel(false);
    let mut heartbeat = JoinSet::new();
    heartbeat.spawn(beat.run(beat_stopped));
    let db_healthy = Arc::new(AtomicBool::new(true));
    let (tx, rx) = mpsc::channel(cfg.channel_capacity);

    let writer = Writer {
        cfg: cfg.clone(),
        pool: pool.clone(),
        client: client.clone(),
        streams: streams.clone(),
        inflight: inflight.clone(),
        db_healthy: db_healthy.clone(),
    };
    let mut writer = tokio::spawn(writer.run(rx));

    let mut feeders = JoinSet::new();
    for &s in &shards {
        // Own connection per reader: a blocked XREADGROUP would stall a shared one.
        let Some(rclient) = startup::connect(&cfg, cfg.reader_stock(), "reader", &mut sd).await?
        else {
            break;
        };
        let replica = ShardReplica::new(s, cfg.replica_wait);
        replica.remember(&client).await;
        feeders.spawn(reader::run(
            cfg.clone(),
            rclient,
            streams[&s].clone(),
            replica.clone(),
            inflight.clone(),
            tx.clone(),
            shutdown.clone(),
        ));
        let rec = Recovery {
            cfg: cfg.clone(),
            client: client.clone(),
            pool: pool.clone(),
            stream: streams[&s].clone(),
            replica,
            inflight: inflight.clone(),
            db_healthy: db_healthy.clone(),
        };
        feeders.spawn(rec.run(tx.clone(), shutdown.clone()));
    }
    drop(tx);

    let mut background = JoinSet::new();
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
            replica_wait: cfg.replica_wait,
            ..rebuild::Options::new(cfg.db_timeout)
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
        shutdown.clone(),
    ));
    let health = Arc::new(Health::default());
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

    crate::signal::stopped(&mut sd).await;
    tracing::info!("shutdown: draining");
    let drain = async {
        while feeders.join_next().await.is_some() {}
        let _ = (&mut writer).await;
    };
    if tokio::time::timeout(cfg.drain_grace, drain).await.is_err() {
        writer.abort();
        // What is not acknowledged stays pending and is taken over after a restart.
        tracing::warn!(grace = ?cfg.drain_grace, in_flight = inflight.len(), "drain grace passed; stopping anyway");
    }
    feeders.abort_all();
    let bg_grace = Duration::from_secs(2);
    let _ = stop_beat.send(true);
    let _ = tokio::time::timeout(bg_grace + cfg.db_timeout, heartbeat.join_next()).await;
    heartbeat.abort_all();
    let _ = tokio::time::timeout(bg_grace, async {
        while background.join_next().await.is_some() {}
    })
    .await;
    background.abort_all();
    pool.close().await;
    tracing::info!("consumer stopped");
    Ok(())
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
            _ = crate::signal::stopped(&mut shutdown) => break,
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
        match release::sweep_with(&pool, &client, now, cfg.replica_wait, cfg.db_timeout).await {
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
            _ = crate::signal::stopped(&mut shutdown) => break,
        }
        // Closed by any process (the CLI, another consumer): their series leave /metrics.
        if let Ok(closed) = crate::closeout::closing_campaigns(&pool, cfg.db_timeout).await {
            closed.into_iter().for_each(crate::series::forget_sku);
        }
        let skus = match crate::closeout::open_campaigns(&pool, cfg.db_timeout).await {
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
            replica_wait: cfg.replica_wait,
            ..Default::default()
        };
        for sku in skus {
            if let Err(e) =
                reconcile::run_with(&pool, &client, &cfg.group, sku, now, cfg.db_timeout, opts)
                    .await
            {
                tracing::warn!(sku, error = %e, "reconcile failed");
            }
        }
        if cfg.auto_close {
            crate::housekeeping::close_due(&cfg, &pool, &client).await;
        }
    }
}
