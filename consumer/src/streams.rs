//! The data path as one unit: one reader and one recovery loop per shard and one batch
//! writer (streams into the ledger), and the heartbeat of the rebuild's flush handshake
//! (`flush.rs`). [`Streams::start`] starts them; [`Streams::drain`] stops them in order:
//! readers stop, then the writer flushes the open batch and acknowledges what committed,
//! then the heartbeat deregisters. The process around them (`campaign-ops/src/service.rs`)
//! runs the operations beside them under the same shutdown signal.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use shard_router::StockClient;
use sqlx::MySqlPool;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::backoff::Backoff;
use crate::config::Config;
use crate::error::ConsumerError;
use crate::flush::Heartbeat;
use crate::inflight::InFlight;
use crate::recovery::Recovery;
use crate::replica::ShardReplica;
use crate::stream::ShardStream;
use crate::writer::Writer;
use crate::{reader, startup};

/// Connects to MySQL and applies migrations, retrying with backoff until `shutdown`.
pub async fn connect_db(
    cfg: &Config,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<MySqlPool, ConsumerError> {
    let pool = ledger::pool::connect(&cfg.mysql_url, cfg.db_timeout).await?;
    let mut backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max);
    loop {
        match ledger::pool::migrate(&pool).await {
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

/// The running data path.
pub struct Streams {
    cfg: Config,
    inflight: InFlight,
    feeders: JoinSet<()>,
    writer: JoinHandle<()>,
    stop_beat: watch::Sender<bool>,
    heartbeat: JoinSet<()>,
}

impl Streams {
    /// Creates the consumer groups, registers the heartbeat, and starts the writer and each
    /// shard's reader and recovery loop. `None`: `shutdown` came first.
    pub async fn start(
        cfg: &Config,
        pool: &MySqlPool,
        client: &StockClient,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<Option<Self>, ConsumerError> {
        let mut sd = shutdown.clone();
        let shards: Vec<u16> = (0..cfg.shards).collect();
        let list: Vec<ShardStream> = shards
            .iter()
            .map(|&s| ShardStream::new(client, s, &cfg.group))
            .collect();
        if !startup::ensure_groups(cfg, client, &list, &mut sd).await? {
            return Ok(None);
        }
        let streams: HashMap<u16, ShardStream> =
            list.into_iter().map(|st| (st.shard, st)).collect();
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
                return Ok(None);
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
        let writer = tokio::spawn(writer.run(rx));

        let mut feeders = JoinSet::new();
        for &s in &shards {
            // Own connection per reader: a blocked XREADGROUP would stall a shared one.
            let Some(rclient) =
                startup::connect(cfg, cfg.reader_stock(), "reader", &mut sd).await?
            else {
                break;
            };
            let replica = ShardReplica::new(s, cfg.replica_wait);
            replica.remember(client).await;
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
        Ok(Some(Self {
            cfg: cfg.clone(),
            inflight,
            feeders,
            writer,
            stop_beat,
            heartbeat,
        }))
    }

    /// Stops the readers and recovery loops, lets the writer drain (within
    /// `--drain-grace`), then deregisters the heartbeat.
    pub async fn drain(mut self) {
        let drain = async {
            while self.feeders.join_next().await.is_some() {}
            let _ = (&mut self.writer).await;
        };
        if tokio::time::timeout(self.cfg.drain_grace, drain)
            .await
            .is_err()
        {
            self.writer.abort();
            // What is not acknowledged stays pending and is taken over after a restart.
            tracing::warn!(grace = ?self.cfg.drain_grace, in_flight = self.inflight.len(), "drain grace passed; stopping anyway");
        }
        self.feeders.abort_all();
        let _ = self.stop_beat.send(true);
        let grace = Duration::from_secs(2) + self.cfg.db_timeout;
        let _ = tokio::time::timeout(grace, self.heartbeat.join_next()).await;
        self.heartbeat.abort_all();
    }
}
