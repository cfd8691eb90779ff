//! Background loops of the campaign lifecycle: due stock waves, automatic close-out (and
//! the retirement of a closed SKU's metadata once its replay answers expired), and the
//! Redis memory and poison-count exports. Each stops on the shutdown signal.

use std::time::Duration;

use shard_router::StockClient;
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::memory;
use crate::Config;
use crate::{closeout, wave};

/// How often due waves are applied; also bounds how late a scheduled wave starts selling.
pub const WAVE_INTERVAL: Duration = Duration::from_secs(1);
/// How often Redis memory use and the poison entry count are exported.
pub const MEMORY_INTERVAL: Duration = Duration::from_secs(10);

/// A ticker that ends on shutdown: `next` is false once the signal came.
struct Every<'a> {
    tick: tokio::time::Interval,
    shutdown: &'a mut watch::Receiver<bool>,
}

impl<'a> Every<'a> {
    fn new(period: Duration, shutdown: &'a mut watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { tick, shutdown }
    }

    async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.tick.tick() => true,
            _ = plumbing::shutdown::stopped(self.shutdown) => false,
        }
    }
}

pub async fn wave_loop(
    cfg: Config,
    pool: MySqlPool,
    client: StockClient,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut every = Every::new(WAVE_INTERVAL, &mut shutdown);
    while every.next().await {
        match wave::apply_due_with(
            &pool,
            &client,
            shard_router::now_ms(),
            cfg.datapath.replica_wait,
            cfg.datapath.db_timeout,
        )
        .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(waves = n, "stock waves released"),
            Err(e) => tracing::warn!(error = %e, "wave round failed"),
        }
    }
}

/// Bound of the poison count's statement.
const POISON_T: std::time::Duration = std::time::Duration::from_secs(2);

pub async fn memory_loop(
    client: StockClient,
    pool: MySqlPool,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut every = Every::new(MEMORY_INTERVAL, &mut shutdown);
    while every.next().await {
        if let Err(e) = memory::export(&client).await {
            tracing::warn!(error = %e, "redis memory export failed");
        }
        match ledger::poison::count(&pool, POISON_T).await {
            Ok(n) => metrics::gauge!(crate::metrics::POISON_ENTRIES).set(n as f64),
            Err(e) => tracing::warn!(error = %e, "poison entry count export failed"),
        }
    }
}

/// Closes every campaign that is due; one that cannot close yet is tried next round. Then
/// retires closed campaigns whose replay answers have expired (`closeout::retire`).
pub async fn close_due(cfg: &Config, pool: &MySqlPool, client: &StockClient) {
    let now = shard_router::now_ms();
    match ledger::campaigns::due(pool, now, cfg.datapath.db_timeout).await {
        Ok(due) => {
            for sku in due {
                match closeout::close(pool, client, sku, now, cfg.datapath.db_timeout).await {
                    Ok(_) => {}
                    Err(e) if e.is_client_error() => {
                        tracing::debug!(sku, error = %e, "not closed yet")
                    }
                    Err(e) => {
                        tracing::warn!(sku, error = %e, "close-out failed; retried next round")
                    }
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "close-out: list failed"),
    }
    if let Err(e) = closeout::retire(pool, client, now, cfg.datapath.db_timeout).await {
        tracing::warn!(error = %e, "retiring closed campaigns failed; retried next round");
    }
}
