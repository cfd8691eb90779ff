//! The gateway's link to Redis and its readiness. The process starts serving before Redis
//! answers (so `/healthz` works and `/readyz` says why it is not ready); a probe task
//! connects, loads the scripts, and keeps pinging every stock shard's master.
//!
//! Readiness is this process's own health, not the health of any one master: it is ready
//! while it is not draining, has its connection and scripts, and reaches at least one
//! shard. On Redis Cluster a master that dies or fails over takes only its own shards
//! out (their claims answer 503 until the replica serves them), while every gateway stays
//! in the balancer and claims on the other masters' shards go on. Were readiness to need
//! every master, one failover would empty the balancer and fail the whole sale. A gateway
//! that reaches no shard at all (a single Redis down, or this gateway cut off) is not
//! ready: it could answer nothing but 503.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use shard_router::{StockClient, StockConfig};
use tokio::sync::{watch, Notify};

use crate::metrics::{CLOCK_SKEW_SECONDS, READY, REDIS_CLOCK_SPREAD_SECONDS, SHARDS_UNREACHABLE};

/// Shared view of Redis and of the process's readiness.
#[derive(Default)]
pub(crate) struct RedisLink {
    client: OnceLock<StockClient>,
    connected: Notify,
    /// At least one shard's master answered the last probe.
    reachable: AtomicBool,
    /// Shards whose master did not answer the last probe (shown by `/readyz`).
    unreachable_shards: AtomicUsize,
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
            NotReady::RedisUnreachable => "no redis shard reachable",
            NotReady::ScriptsNotLoaded => "scripts not loaded",
            NotReady::ClockSkew => "clock off redis's by more than --max-clock-skew-ms",
        }
    }
}

impl RedisLink {
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

    /// Shards whose master did not answer the last probe.
    pub(crate) fn unreachable_shards(&self) -> usize {
        self.unreachable_shards.load(Ordering::Relaxed)
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

    /// Measures this clock against Redis's `TIME` on every shard's master (on a single
    /// Redis, the one server), each the best of two readings. The sale window is checked
    /// by this clock, so two gateways open a sale as far apart as their clocks are: each
    /// within `--max-clock-skew-ms` of the masters keeps any two within twice that. A
    /// reading is off only when it is off beyond its own uncertainty (half its round
    /// trip): a slow probe on a loaded machine must not turn a gateway unready, so the
    /// bound holds up to half a round trip more. The spread between the masters' clocks
    /// (as read from here) is exported too: it erodes the hold's TTL/3 margin, which
    /// `take.lua` decides by its own master's clock.
    async fn check_clock(&self, client: &StockClient) {
        let shards = if client.is_cluster() {
            client.placement().shard_count()
        } else {
            1
        };
        let mut readings = Vec::with_capacity(usize::from(shards));
        for shard in 0..shards {
            match client.clock_skew_best_ms(shard, 2, || self.now_ms()).await {
                Ok(r) => readings.push(r),
                // Unmeasured keeps the last verdict: a ping failure already marks us unready.
                Err(e) => tracing::debug!(shard, error = %e, "clock check failed"),
            }
        }
        let Some(&(skew, _)) = readings.iter().max_by_key(|(s, _)| s.unsigned_abs()) else {
            return;
        };
        let (lo, hi) = readings
            .iter()
            .fold((i64::MAX, i64::MIN), |(lo, hi), (s, _)| {
                (lo.min(*s), hi.max(*s))
            });
        metrics::gauge!(CLOCK_SKEW_SECONDS).set(skew as f64 / 1000.0);
        metrics::gauge!(REDIS_CLOCK_SPREAD_SECONDS).set((hi - lo) as f64 / 1000.0);
        let max = self.max_skew_ms() as i64;
        let ok = readings
            .iter()
            .all(|(s, half_rtt)| s.abs() - half_rtt <= max);
        if self.clock_ok.swap(ok, Ordering::Relaxed) != ok {
            if ok {
                tracing::info!(skew_ms = skew, "clock back within the bound of redis's");
            } else {
                tracing::error!(
                    skew_ms = skew,
                    max_ms = max,
                    "clock off redis's past --max-clock-skew-ms; claims refused"
                );
            }
        }
    }

    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.publish_ready();
    }

    fn publish_ready(&self) {
        metrics::gauge!(READY).set(if self.readiness().is_ok() { 1.0 } else { 0.0 });
    }

    /// Connects, loads the scripts, then probes every shard every `interval` until
    /// shutdown. When no shard answers, "scripts loaded" is cleared too: a restarted Redis
    /// has an empty script cache (the claim path reloads on NOSCRIPT anyway, but readiness
    /// should not claim it).
    pub(crate) async fn probe(
        &self,
        cfg: StockConfig,
        interval: Duration,
        on: crate::redis_runtime::RedisRuntime,
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
                None => match crate::redis_runtime::connect(cfg.clone(), on).await {
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
            let health = client.shard_health().await;
            let down = health.unreachable.len();
            if down != self.unreachable_shards.swap(down, Ordering::Relaxed) {
                tracing::warn!(
                    unreachable = ?health.unreachable,
                    total = health.total,
                    "reachable redis shards changed"
                );
            }
            metrics::gauge!(SHARDS_UNREACHABLE).set(down as f64);
            if health.any_reachable() {
                self.reachable.store(true, Ordering::Relaxed);
                self.check_clock(&client).await;
                if !self.scripts_loaded.load(Ordering::Relaxed) {
                    match client.load_scripts().await {
                        Ok(()) => self.scripts_loaded.store(true, Ordering::Relaxed),
                        // SCRIPT LOAD goes to every master and fails when one is down, but
                        // the masters that answered have the scripts, and a master that
                        // missed them gets them on its first NOSCRIPT. Waiting for all of
                        // them would make a gateway started during a failover depend on
                        // the failed master.
                        Err(e) if down > 0 => {
                            tracing::warn!(error = %e, "scripts loaded on the reachable masters only");
                            self.scripts_loaded.store(true, Ordering::Relaxed);
                        }
                        Err(e) => tracing::warn!(error = %e, "loading scripts failed"),
                    }
                }
            } else {
                if self.reachable.swap(false, Ordering::Relaxed) {
                    tracing::warn!("no redis shard reachable");
                }
                self.scripts_loaded.store(false, Ordering::Relaxed);
            }
            self.publish_ready();
        }
    }
}
