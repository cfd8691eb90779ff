//! The consumer's half of the rebuild's flush handshake (docs/DESIGN.md, "Rebuild from the
//! ledger"; the rebuild's half is `rebuild/handshake.rs`; the statements on `consumers` and
//! `flush_requests` are `ledger/src/consumers.rs`).
//!
//! The process registers in `consumers` before its first read and beats every
//! [`BEAT_EVERY`]; each beat also reads the flush request counter. A new request `N` is
//! cut at once ([`InFlight::cut`]): the writer closes its open batch, and `N` is honoured
//! (`consumers.flushed`) as soon as everything read before the cut is committed or
//! dropped ([`InFlight::flushed`], checked every [`CHECK_EVERY`] while a request waits,
//! in memory). Nothing here is on the claim path: two small statements per beat, whatever
//! the load. A clean stop deletes the row after the writer drained; a process that dies
//! leaves it to age past [`HEARTBEAT_STALE_AFTER`], after which no rebuild waits for it.

use std::time::Duration;

use sqlx::MySqlPool;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::ConsumerError;
use crate::inflight::InFlight;

/// How often a consumer beats and looks for a flush request.
pub(crate) const BEAT_EVERY: Duration = Duration::from_millis(150);
/// A consumer whose last beat (by MySQL's clock) is older than this is not waited for.
pub const HEARTBEAT_STALE_AFTER: Duration = Duration::from_secs(3);
/// How often a flush request seen and not honoured yet is checked (in memory).
const CHECK_EVERY: Duration = Duration::from_millis(10);

/// One consumer process's registration and heartbeat.
pub(crate) struct Heartbeat {
    pool: MySqlPool,
    /// The row's key: the consumer name plus this process (a restart under the same name
    /// is another instance).
    instance: String,
    name: String,
    inflight: InFlight,
    t: Duration,
    /// The highest request seen, and the highest honoured.
    seen: u64,
    flushed: u64,
    /// Requests seen and not honoured yet, each with the cut taken when it was seen.
    waiting: Vec<(u64, u64)>,
}

impl Heartbeat {
    pub(crate) fn new(pool: MySqlPool, name: &str, inflight: InFlight, t: Duration) -> Self {
        let instance = format!(
            "{}|{}-{}",
            name.chars().take(120).collect::<String>(),
            std::process::id(),
            shard_router::now_ms()
        );
        Self {
            pool,
            instance,
            name: name.chars().take(128).collect(),
            inflight,
            t,
            seen: 0,
            flushed: 0,
            waiting: Vec::new(),
        }
    }

    /// The first beat, before anything is read: every request so far is honoured. The
    /// service retries it until it succeeds before it starts reading (`service.rs`).
    pub(crate) async fn register(&mut self) -> Result<(), ConsumerError> {
        let seq = self.latest().await?;
        self.seen = seq;
        self.flushed = seq;
        self.beat().await
    }

    /// Beats until `stop`, then deregisters. Stop it after the writer drained: until then
    /// a rebuild may still be waiting for this process's batches.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut next_beat = Instant::now() + BEAT_EVERY;
        loop {
            let wake = if self.waiting.is_empty() {
                next_beat
            } else {
                next_beat.min(Instant::now() + CHECK_EVERY)
            };
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = crate::signal::stopped(&mut stop) => break,
            }
            if Instant::now() >= next_beat {
                next_beat = Instant::now() + BEAT_EVERY;
                if let Err(e) = self.round().await {
                    tracing::warn!(error = %e, "consumer heartbeat failed; retrying");
                }
            } else if self.honour() {
                if let Err(e) = self.beat().await {
                    tracing::warn!(error = %e, "flush confirmation failed; retrying");
                }
            }
        }
        let gone = ledger::consumers::deregister(&self.pool, &self.instance, self.t).await;
        match gone {
            Ok(_) => tracing::debug!(instance = %self.instance, "consumer deregistered"),
            // Its beat ages past HEARTBEAT_STALE_AFTER instead.
            Err(e) => tracing::warn!(error = %e, "consumer not deregistered"),
        }
    }

    /// One beat: a new request is cut, what can be honoured is, and the row is written.
    async fn round(&mut self) -> Result<(), ConsumerError> {
        let seq = self.latest().await?;
        if seq > self.seen {
            self.seen = seq;
            let cut = self.inflight.cut();
            tracing::info!(
                request = seq,
                in_flight = self.inflight.len(),
                "flush requested by a rebuild"
            );
            self.waiting.push((seq, cut));
        }
        self.honour();
        self.beat().await
    }

    /// Honours the newest waiting request whose cut is flushed (cuts grow with requests,
    /// so the older ones are honoured with it). True when `flushed` grew.
    fn honour(&mut self) -> bool {
        let Some(i) = self
            .waiting
            .iter()
            .rposition(|&(_, cut)| self.inflight.flushed(cut))
        else {
            return false;
        };
        self.flushed = self.waiting[i].0;
        self.waiting.drain(..=i);
        tracing::info!(request = self.flushed, "flush request honoured");
        true
    }

    async fn latest(&self) -> Result<u64, ConsumerError> {
        Ok(ledger::consumers::flush_request(&self.pool, self.t).await?)
    }

    async fn beat(&self) -> Result<(), ConsumerError> {
        Ok(
            ledger::consumers::beat(&self.pool, &self.instance, &self.name, self.flushed, self.t)
                .await?,
        )
    }
}
