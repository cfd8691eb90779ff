//! The gateway's link to Redis and its readiness. The process starts serving before Redis
//! answers (so `/healthz` works and `/readyz` says why it is not ready); a probe task
//! connects, loads the scripts, and keeps pinging, so readiness follows Redis both ways.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use shard_router::{StockClient, StockConfig};
use tokio::sync::{watch, Notify};

use crate::metrics::{CLOCK_SKEW_SECONDS, READY};

/// Shared view of Redis and of the process's readiness.
#[derive(Default)]
pub(crate) struct Link {
    client: OnceLock<StockClient>,
    connected: Notify,
    reachable: AtomicBool,
    scripts_loaded: AtomicBool,
    draining: AtomicBool,
    /// Injected clock offset (fault drills), ms.
    clock_offset_ms: AtomicI64,
    /// `--max-clock-skew-ms`; 0 until configured (then nothing is served).
    max_skew_ms: AtomicU64,
    /// The last measured skew was within the bound.
    clock_ok: AtomicBool,
}

/// Why `/readyz` says no, in the order checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotReady {
    Draining,
    RedisUnreachable,
    ScriptsNotLoaded,
    ClockSkew,
}

impl NotReady {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            NotReady::Draining => "draining",
            NotReady::RedisUnreachable => "redis unreachable",
            NotReady::ScriptsNotLoaded => "scripts not loaded",
            NotReady::ClockSkew => "clock off redis's by more than --max-clock-skew-ms",
        }
    }
}

impl Link {
    /// The client once the first connection succeeded. The connection reconnects by itself
    /// afterwards, so it is never replaced.
    pub(crate) fn client(&self) -> Option<&StockClient> {
        self.client.get()
    }

    /// Waits for the first connection, or returns `None` on shutdown.
    pub(crate) async fn wait_client(
        &self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<StockClient> {
        loop {
            let notified = self.connected.notified();
            if let Some(c) = self.client.get() {
                return Some(c.clone());
            }
            tokio::select! {
                _ = notified => {}
                _ = crate::stopped(shutdown) => return None,
            }
        }
    }

    pub(crate) fn readiness(&self) -> Result<(), NotReady> {
        if self.draining.load(Ordering::Relaxed) {
            Err(NotReady::Draining)
        } else if !self.reachable.load(Ordering::Relaxed) {
            Err(NotReady::RedisUnreachable)
        } else if !self.scripts_loaded.load(Ordering::Relaxed) {
            Err(NotReady::ScriptsNotLoaded)
        } else if !self.clock_ok() {
            Err(NotReady::ClockSkew)
        } else {
            Ok(())
        }
    }

    /// Sets the clock bound (and a fault drill's injected offset).
    pub(crate) fn set_clock(&self, max_skew_ms: u64, offset_ms: i64) {
        self.max_skew_ms.store(max_skew_ms, Ordering::Relaxed);
        self.clock_offset_ms.store(offset_ms, Ordering::Relaxed);
    }

    /// This gateway's clock: stamps the sale window check and `claimed_ms`.
    pub(crate) fn now_ms(&self) -> i64 {
        shard_router::now_ms() + self.clock_offset_ms.load(Ordering::Relaxed)
    }

    /// False when the last probe found this clock off Redis's past the bound.
    pub(crate) fn clock_ok(&self) -> bool {
        self.clock_ok.load(Ordering::Relaxed)
    }

    pub(crate) fn max_skew_ms(&self) -> u64 {
        self.max_skew_ms.load(Ordering::Relaxed)
    }

    /// Measures this clock against Redis's `TIME` (shard 0's master).
    async fn check_clock(&self, client: &StockClient) {
        match client.clock_skew_ms(0, || self.now_ms()).await {
            Ok(skew) => {
                metrics::gauge!(CLOCK_SKEW_SECONDS).set(skew as f64 / 1000.0);
                let ok = skew.unsigned_abs() <= self.max_skew_ms();
                if self.clock_ok.swap(ok, Ordering::Relaxed) != ok {
                    if ok {
                        tracing::info!(skew_ms = skew, "clock back within the bound of redis's");
                    } else {
                        tracing::error!(skew_ms = skew, max_ms = self.max_skew_ms(), "clock off redis's past --max-clock-skew-ms; claims refused");
                    }
                }
            }
            // Unmeasured keeps the last verdict: a ping failure already marks us unready.
            Err(e) => tracing::debug!(error = %e, "clock check failed"),
        }
    }

    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.publish_ready();
    }

    fn publish_ready(&self) {
        metrics::gauge!(READY).set(if self.readiness().is_ok() { 1.0 } else { 0.0 });
    }

    /// Connects, loads the scripts, then pings every `interval` until shutdown. A failed
    /// ping also clears "scripts loaded": a restarted Redis has an empty script cache (the
    /// claim path would reload on NOSCRIPT anyway, but readiness should not claim it).
    pub(crate) async fn probe(
        &self,
        cfg: StockConfig,
        interval: Duration,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = crate::stopped(&mut shutdown) => return,
            }
            let client = match self.client.get() {
                Some(c) => c.clone(),
                None => match StockClient::connect(cfg.clone()).await {
                    Ok(c) => {
                        let c = self.client.get_or_init(|| c).clone();
                        self.connected.notify_waiters();
                        tracing::info!("connected to redis");
                        c
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "redis connect failed; retrying");
                        continue;
                    }
                },
            };
            match client.ping().await {
                Ok(()) => {
                    self.reachable.store(true, Ordering::Relaxed);
                    self.check_clock(&client).await;
                    if !self.scripts_loaded.load(Ordering::Relaxed) {
                        match client.load_scripts().await {
                            Ok(()) => self.scripts_loaded.store(true, Ordering::Relaxed),
                            Err(e) => tracing::warn!(error = %e, "loading scripts failed"),
                        }
                    }
                }
                Err(e) => {
                    if self.reachable.swap(false, Ordering::Relaxed) {
                        tracing::warn!(error = %e, "redis unreachable");
                    }
                    self.scripts_loaded.store(false, Ordering::Relaxed);
                }
            }
            self.publish_ready();
        }
    }
}
