//! The data path as one unit: one reader per shard (`shard.rs`, with its lease) and the
//! writer loops (streams into the ledger), and the heartbeat of the rebuild's flush
//! handshake (`flush.rs`). [`Streams::start`] starts them; [`Streams::drain`] stops them in
//! order: readers stop, then the writer commits what it holds, then the leases are
//! released (another consumer takes the shards at once) and the heartbeat deregisters. The process around them (`campaign-ops/src/service.rs`)
//! runs the operations beside them under the same shutdown signal.

use std::collections::HashMap;
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
use crate::lease::ShardLease;
use crate::replica::ShardReplica;
use crate::shard::ShardReader;
use crate::stall::Stalls;
use crate::startup;
use crate::stream::ShardStream;
use crate::writer::Writer;

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

/// The heartbeat of `inflight`, registered; `None`: `shutdown` came first.
async fn register(
    cfg: &Config,
    pool: &MySqlPool,
    inflight: &InFlight,
    sd: &mut watch::Receiver<bool>,
) -> Option<Heartbeat> {
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
        if !backoff.sleep(sd).await {
            return None;
        }
    }
    Some(beat)
}

/// Starts the lag watch of every shard (`shard::watch`) among `feeders`.
fn spawn_watch(
    feeders: &mut JoinSet<Option<watch::Sender<bool>>>,
    client: &StockClient,
    shards: &[u16],
    streams: &HashMap<u16, ShardStream>,
    leases: &HashMap<u16, ShardLease>,
    shutdown: &watch::Receiver<bool>,
) {
    let watched = shards
        .iter()
        .map(|s| (streams[s].clone(), leases[s].clone()))
        .collect();
    let (client_watch, watch_shutdown) = (client.clone(), shutdown.clone());
    feeders.spawn(async move {
        crate::shard::watch(client_watch, watched, watch_shutdown).await;
        None
    });
}

/// The running data path.
pub struct Streams {
    cfg: Config,
    pool: MySqlPool,
    leases: Vec<ShardLease>,
    inflight: InFlight,
    /// The writer loops' stalls (`/healthz`).
    stalls: Stalls,
    /// Readers (each returns its lease renewer's stop) and the lag watch.
    feeders: JoinSet<Option<watch::Sender<bool>>>,
    writer: JoinHandle<()>,
    stop_beat: watch::Sender<bool>,
    heartbeat: JoinSet<()>,
}

impl Streams {
    /// Waits for Redis, registers the heartbeat, and starts the writer loops and each
    /// shard's reader. `None`: `shutdown` came first.
    pub async fn start(
        cfg: &Config,
        pool: &MySqlPool,
        client: &StockClient,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<Option<Self>, ConsumerError> {
        let mut sd = shutdown.clone();
        let shards: Vec<u16> = (0..cfg.shards).collect();
        let streams: HashMap<u16, ShardStream> = shards
            .iter()
            .map(|&s| (s, ShardStream::new(client, s)))
            .collect();
        tracing::info!(consumer = %cfg.consumer_name, shards = cfg.shards, "consumer started");

        let inflight = InFlight::default();
        // Registered before the first read, so a rebuild waits for whatever this process reads
        // (`flush.rs`); it beats until the writer drained, then deregisters.
        let Some(beat) = register(cfg, pool, &inflight, &mut sd).await else {
            return Ok(None);
        };
        let (stop_beat, beat_stopped) = watch::channel(false);
        let mut heartbeat = JoinSet::new();
        heartbeat.spawn(beat.run(beat_stopped));
        let leases: HashMap<u16, ShardLease> = streams
            .iter()
            .map(|(&s, st)| (s, ShardLease::new(s, st)))
            .collect();
        let loops = cfg.writers.max(1);
        let stalls = Stalls::new(loops);
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..loops)
            .map(|_| mpsc::channel(cfg.channel_capacity))
            .unzip();
        let writer = Writer {
            cfg: cfg.clone(),
            pool: pool.clone(),
            client: client.clone(),
            streams: streams.clone(),
            leases: leases.clone(),
            inflight: inflight.clone(),
            stalls: stalls.clone(),
        };
        let writer = tokio::spawn(writer.run(receivers));

        let mut feeders = JoinSet::new();
        for &s in &shards {
            // Own connection per reader: a blocked XREAD would stall a shared one.
            let Some(reader) =
                startup::connect_redis(cfg, cfg.reader_stock(), "reader", &mut sd).await?
            else {
                break;
            };
            let replica = ShardReplica::new(s, cfg.replica_wait);
            replica.remember(client).await;
            let r = ShardReader {
                cfg: cfg.clone(),
                client: client.clone(),
                reader,
                pool: pool.clone(),
                stream: streams[&s].clone(),
                replica,
                inflight: inflight.clone(),
                lease: leases[&s].clone(),
            };
            feeders.spawn(r.run(senders[usize::from(s) % loops].clone(), shutdown.clone()));
        }
        drop(senders);
        spawn_watch(&mut feeders, client, &shards, &streams, &leases, shutdown);
        Ok(Some(Self {
            cfg: cfg.clone(),
            pool: pool.clone(),
            leases: leases.into_values().collect(),
            inflight,
            stalls,
            feeders,
            writer,
            stop_beat,
            heartbeat,
        }))
    }

    /// The writer loops' stalls, for the health probes.
    pub fn stalls(&self) -> Stalls {
        self.stalls.clone()
    }

    /// Stops the readers, lets the writer drain (within `--drain-grace`), releases the
    /// leases, then deregisters the heartbeat.
    pub async fn drain(mut self) {
        // The renewers renew the leases until the writer drained: its last batches commit
        // under them.
        let mut renewers = Vec::new();
        let drain = async {
            while let Some(r) = self.feeders.join_next().await {
                renewers.extend(r.ok().flatten());
            }
            let _ = (&mut self.writer).await;
        };
        if tokio::time::timeout(self.cfg.drain_grace, drain)
            .await
            .is_err()
        {
            self.writer.abort();
            // What is not committed is read again by the shard's next owner.
            tracing::warn!(grace = ?self.cfg.drain_grace, in_flight = self.inflight.len(), "drain grace passed; stopping anyway");
        }
        self.feeders.abort_all();
        for k in renewers {
            let _ = k.send(true);
        }
        let t = self.cfg.db_timeout;
        let releases = self.leases.iter().filter(|l| l.epoch() > 0).map(|l| {
            ledger::places::release(&self.pool, &l.stream, &self.cfg.consumer_name, l.epoch(), t)
        });
        for r in futures::future::join_all(releases).await {
            if let Err(e) = r {
                tracing::warn!(error = %e, "shard lease not released; it runs out by itself");
            }
        }
        let _ = self.stop_beat.send(true);
        let grace = Duration::from_secs(2) + self.cfg.db_timeout;
        let _ = tokio::time::timeout(grace, self.heartbeat.join_next()).await;
        self.heartbeat.abort_all();
    }
}
